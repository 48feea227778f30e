//! What a reconcile tells people: Events on the resource (queued, published off the
//! reconcile path), and its problems logged and counted.

use super::ctx::Ctx;
use super::outcome::Problem;
use crate::events::EventLevel;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

/// `namespace/name` of a resource, for logs.
pub fn key_of(cr: &impl Resource) -> String {
    format!("{}/{}", cr.namespace().unwrap_or_default(), cr.name_any())
}

/// Queues an Event on the custom resource (published off the reconcile path, best-effort).
/// `child`, when given, is the object the event is about (it also keeps events about
/// different children apart in the recorder's series).
pub fn event(
    ctx: &Ctx,
    cr: &DynamicObject,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
    child: Option<ObjectReference>,
) {
    let wanted = match ctx.process.events {
        EventLevel::All => true,
        EventLevel::Warnings => type_ == EventType::Warning,
        EventLevel::None => false,
    };
    if !wanted {
        return;
    }
    let reference = cr.object_ref(&ctx.kinds.parent.resource);
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(note, 1000)),
        action: action.into(),
        secondary: child,
    };
    ctx.events.send(ev, reference);
}

/// `s` cut to at most `max` bytes, at a character boundary.
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Logs, counts and (when the `Synced` condition changes) publishes a problem.
pub fn report_problem(ctx: &Ctx, cr: &DynamicObject, cr_json: &Value, p: &Problem) {
    let category = match p.reason {
        "RenderFailed" => "render",
        "ClusterScopedChild" => "cluster_scoped",
        "NotOwned" => "not_owned",
        "Forbidden" => "forbidden",
        _ => "apply_refused",
    };
    // Waiting for a child or an existing object is the graph at work, and a write still on
    // its way the API server's pace: neither is a fault.
    if p.reason == "Applying" {
        // Looked at every second until the answer comes; the write's own Event follows it.
        tracing::debug!(rule = %ctx.rule.name, object = %key_of(cr), message = %p.message, "a child write is on its way");
        return;
    }
    let waiting = p.reason == "Waiting";
    if waiting {
        tracing::info!(rule = %ctx.rule.name, object = %key_of(cr), reason = p.reason, message = %p.message, "custom resource waits");
    } else {
        ctx.process.metrics.error(&ctx.rule.name, category);
        tracing::warn!(rule = %ctx.rule.name, object = %key_of(cr), reason = p.reason, error = %p.message, "custom resource not synced");
    }
    let was = crate::status::condition_of(cr_json, "Synced")
        .map(|c| (c["reason"].clone(), c["message"].clone()));
    if was != Some((json!(p.reason), json!(p.message))) {
        let type_ = if waiting {
            EventType::Normal
        } else {
            EventType::Warning
        };
        event(
            ctx,
            cr,
            type_,
            p.reason,
            "Reconcile",
            p.message.clone(),
            None,
        );
    }
}

/// One Event per kind of change, naming every child it covers (built only when Normal
/// Events are published).
pub fn publish_applied(ctx: &Ctx, cr: &DynamicObject, applied: &[(&'static str, String)]) {
    if ctx.process.events != EventLevel::All {
        return;
    }
    for reason in ["Created", "Updated", "Adopted"] {
        let names: Vec<&str> = applied
            .iter()
            .filter(|(r, _)| *r == reason)
            .map(|(_, n)| n.as_str())
            .collect();
        if !names.is_empty() {
            let note = names.join(", ");
            let action = truncate(format!("Apply {note}"), 120);
            event(ctx, cr, EventType::Normal, reason, &action, note, None);
        }
    }
}
