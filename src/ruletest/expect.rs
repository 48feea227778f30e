//! What a step expected against what it gave: each difference as a line naming the path,
//! and, for an object, a unified diff of the fields expected against those it has.

use super::paths;
use super::simulate::Outcome;
use super::spec::{ChildExpect, ConditionExpect, Expect};
use serde_json::Value;

/// One way a step did not give what it expected.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub message: String,
    /// A unified diff of expected against actual, when it helps.
    pub diff: Option<String>,
}

fn fail(message: String) -> Failure {
    Failure {
        message,
        diff: None,
    }
}

/// Every difference between `expect` and `out` (`live`: what the cluster holds; `before`:
/// what the step before gave, for `changed` and `unchanged`). A render that fails when it
/// was not expected to is the one failure reported: what else the step expects follows
/// from it.
pub fn check(
    expect: &Expect,
    out: &Outcome,
    live: &[Value],
    before: Option<&Outcome>,
) -> Vec<Failure> {
    let mut failures = Vec::new();
    match (&out.plan, &expect.error) {
        (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => {}
        (Err(e), Some(want)) => failures.push(fail(format!(
            "the render failed with {e:?}, not with {want:?}"
        ))),
        (Ok(_), Some(want)) => failures.push(fail(format!(
            "the render was expected to fail with {want:?}, and did not"
        ))),
        (Err(e), None) => {
            failures.push(fail(format!("the render failed: {e}")));
            return failures;
        }
        (Ok(plan), None) => {
            let children: Vec<&Value> = plan.children.iter().map(|c| &c.object).collect();
            let earlier: Option<Vec<&Value>> = before
                .and_then(|b| b.plan.as_ref().ok())
                .map(|p| p.children.iter().map(|c| &c.object).collect());
            children_match(expect, &children, earlier.as_deref(), &mut failures);
            absent_but_kept(expect, out, live, &mut failures);
            waiting_match(expect, plan, &mut failures);
        }
    }
    if let (Some(want), Some(report)) = (&expect.status, &out.report) {
        let have = Value::Object(report.fields.clone());
        let mut lines = Vec::new();
        subset(want, &have, "status", &mut lines);
        if !lines.is_empty() {
            failures.push(Failure {
                message: lines.join("\n"),
                diff: Some(diff(want, &crate::apply::project(want, &have))),
            });
        }
    }
    for (type_, want) in &expect.conditions {
        let Some((_, status, reason, message)) = out.conditions.iter().find(|c| &c.0 == type_)
        else {
            failures.push(fail(format!("no condition {type_}")));
            continue;
        };
        let status = if *status { "True" } else { "False" };
        let (w_status, w_reason, w_message) = match want {
            ConditionExpect::Status(s) => (Some(s.as_str()), None, None),
            ConditionExpect::Full(f) => (
                f.status.map(|s| s.as_str()),
                f.reason.as_deref(),
                f.message.as_deref(),
            ),
        };
        let bad = w_status.is_some_and(|w| w != status)
            || w_reason.is_some_and(|w| w != reason)
            || w_message.is_some_and(|w| !message.contains(w));
        if bad {
            failures.push(fail(format!(
                "condition {type_}: expected {}, got {status} ({reason}): {message}",
                [
                    w_status.map(str::to_string),
                    w_reason.map(|r| format!("reason {r}")),
                    w_message.map(|m| format!("a message with {m:?}")),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
            )));
        }
    }
    failures
}

fn children_match(
    expect: &Expect,
    children: &[&Value],
    earlier: Option<&[&Value]>,
    failures: &mut Vec<Failure>,
) {
    for want in &expect.children {
        let object = want.object();
        let found = children.iter().find(|c| object.is(c));
        let what = format!("child {} {}", want.kind, want.name);
        if let Some(have) = found {
            let before = earlier.and_then(|e| e.iter().find(|c| object.is(c)).copied());
            fields_match(want, have, before, &what, failures);
        }
        match (found, want.absent.object()) {
            (Some(_), true) => failures.push(fail(format!("{what}: rendered, expected absent"))),
            (None, true) => {}
            (None, false) => {
                let made: Vec<String> = children
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {}",
                            c["kind"].as_str().unwrap_or("?"),
                            c["metadata"]["name"].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                failures.push(fail(format!(
                    "{what}: not rendered (rendered: {})",
                    if made.is_empty() {
                        "nothing".to_string()
                    } else {
                        made.join(", ")
                    }
                )));
            }
            (Some(have), false) => {
                let Some(has) = &want.has else { continue };
                let mut lines = Vec::new();
                subset(has, have, "", &mut lines);
                if !lines.is_empty() {
                    let lines: Vec<String> =
                        lines.into_iter().map(|l| format!("{what}: {l}")).collect();
                    failures.push(Failure {
                        message: lines.join("\n"),
                        diff: Some(diff(has, &crate::apply::project(has, have))),
                    });
                }
            }
        }
    }
}

/// A child expected absent that is not rendered, but whose object is in the cluster and of
/// a kind whose child waits: a waiting child's object is neither applied nor deleted, so
/// it stays.
fn absent_but_kept(expect: &Expect, out: &Outcome, live: &[Value], failures: &mut Vec<Failure>) {
    for want in expect.children.iter().filter(|w| w.absent.object()) {
        let object = want.object();
        let Some(there) = live.iter().find(|o| object.is(o)) else {
            continue;
        };
        let waits = out
            .waiting_kinds
            .iter()
            .any(|(av, k)| there["apiVersion"] == av.as_str() && there["kind"] == k.as_str());
        if waits {
            failures.push(fail(format!(
                "child {} {}: not rendered, but a child of its kind waits and the object is in the cluster: a waiting child's object stays (expected absent)",
                want.kind, want.name
            )));
        }
    }
}

/// `absent` paths, `changed` and `unchanged` of one rendered child (`before`: the same
/// object as the step before rendered it).
fn fields_match(
    want: &ChildExpect,
    have: &Value,
    before: Option<&Value>,
    what: &str,
    failures: &mut Vec<Failure>,
) {
    let mut lines = Vec::new();
    for p in want.absent.paths() {
        match paths::parse(p) {
            Err(e) => lines.push(format!("absent: {e}")),
            Ok(segs) => {
                if let Some(v) = paths::get(have, &segs) {
                    lines.push(format!("{p}: expected absent, got {}", short(v)));
                }
            }
        }
    }
    let compared = want.changed.iter().map(|p| (p, true));
    for (p, changed) in compared.chain(want.unchanged.iter().map(|p| (p, false))) {
        let word = if changed { "changed" } else { "unchanged" };
        let segs = match paths::parse(p) {
            Ok(s) => s,
            Err(e) => {
                lines.push(format!("{word}: {e}"));
                continue;
            }
        };
        let Some(before) = before else {
            lines.push(format!(
                "{word}: {p}: the step before did not render this object (`{word}` compares with it)"
            ));
            continue;
        };
        let (then, now) = (paths::get(before, &segs), paths::get(have, &segs));
        match (changed, then == now) {
            (true, true) => lines.push(format!(
                "{p}: expected changed since the step before, still {}",
                now.map_or("absent".to_string(), short)
            )),
            (false, false) => lines.push(format!(
                "{p}: expected unchanged since the step before, was {}, now {}",
                then.map_or("absent".to_string(), short),
                now.map_or("absent".to_string(), short)
            )),
            _ => {}
        }
    }
    if !lines.is_empty() {
        let lines: Vec<String> = lines.into_iter().map(|l| format!("{what}: {l}")).collect();
        failures.push(fail(lines.join("\n")));
    }
}

fn waiting_match(expect: &Expect, plan: &crate::render::Plan, failures: &mut Vec<Failure>) {
    let Some(want) = &expect.waiting else { return };
    for w in want {
        match plan.waiting.iter().find(|p| p.id == w.child) {
            None => failures.push(fail(format!(
                "child `{}` does not wait (waiting: {})",
                w.child,
                names(plan)
            ))),
            Some(p) => {
                if let Some(r) = &w.reason
                    && !p.reason.contains(r.as_str())
                {
                    failures.push(fail(format!(
                        "child `{}` waits, but {:?} is not in its reason: {}",
                        w.child, r, p.reason
                    )));
                }
            }
        }
    }
    for p in &plan.waiting {
        if !want.iter().any(|w| w.child == p.id) {
            failures.push(fail(format!(
                "child `{}` waits, and was not expected to: {}",
                p.id, p.reason
            )));
        }
    }
}

fn names(plan: &crate::render::Plan) -> String {
    if plan.waiting.is_empty() {
        return "none".into();
    }
    plan.waiting
        .iter()
        .map(|w| format!("`{}`", w.id))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The differences of `have` from `want` (every field of `want`, with its value; lists
/// element by element, of the same length), one line each, naming the path.
pub fn subset(want: &Value, have: &Value, path: &str, out: &mut Vec<String>) {
    let at = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, wv) in w {
                match h.get(k) {
                    Some(hv) => subset(wv, hv, &at(k), out),
                    None => out.push(format!("{}: expected {}, missing", at(k), short(wv))),
                }
            }
        }
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => {
            for (i, (wv, hv)) in w.iter().zip(h).enumerate() {
                subset(wv, hv, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(w), Value::Number(h)) if w.as_f64() == h.as_f64() => {}
        (w, h) if w == h => {}
        (w, h) => out.push(format!(
            "{}: expected {}, got {}",
            if path.is_empty() { "object" } else { path },
            short(w),
            short(h)
        )),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 {
        let mut end = 117;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s
    }
}

pub use super::diff::yaml as diff;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_subset_names_each_difference_by_its_path() {
        let want = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "a"}]}}}});
        let have = json!({"spec": {"replicas": 2, "selector": {}, "template": {"spec": {"containers": [{"name": "x", "image": "b"}]}}}});
        let mut out = Vec::new();
        subset(&want, &have, "", &mut out);
        assert_eq!(
            out,
            [
                "spec.replicas: expected 3, got 2",
                "spec.template.spec.containers[0].image: expected \"a\", got \"b\""
            ]
        );
        let mut out = Vec::new();
        subset(
            &json!({"a": 1.0, "b": [1]}),
            &json!({"a": 1, "b": [1, 2]}),
            "",
            &mut out,
        );
        assert_eq!(out, ["b: expected [1], got [1,2]"]);
        assert!(diff(&json!({"a": 1}), &json!({"a": 2})).contains("-a: 1\n+a: 2"));
    }
}
