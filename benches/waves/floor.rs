//! The floor: the writes an ideal operator makes, from a plain concurrent client.

use super::*;

/// Which floor: `floor` itself, or one of its diagnostic variants.
#[derive(Clone, Copy)]
pub(crate) struct FloorKind {
    /// `floor+conditions`: the status carries ruleop's two conditions.
    pub(crate) conditions: bool,
    /// `floor-min`: the least an operator that applies its children can send. In the
    /// update wave only the Deployment (the one child the new image changes) is applied,
    /// not the unchanged Service; the status is a JSON merge patch (no server-side apply,
    /// which costs the API server more), in both waves.
    pub(crate) changed_only: bool,
}

impl FloorKind {
    pub(crate) fn of(system: &str) -> FloorKind {
        FloorKind {
            conditions: system == "floor+conditions",
            changed_only: system == "floor-min",
        }
    }
}

/// The floor: exactly the writes an ideal operator makes for the WebSite behaviour (the
/// two children, with their owner reference, applied at once with the status patch:
/// readyReplicas, url, observedGeneration), from a plain concurrent client with no watch
/// and no logic. `update`: the write follows an image change (see [`FloorKind`]).
pub(crate) async fn floor_writes(
    c: &Client,
    rule: &ruleop::rules::CompiledRule,
    created: &DynamicObject,
    cr: &Value,
    kind: FloorKind,
    update: bool,
) {
    let mut cr = cr.clone();
    cr["metadata"]["uid"] = json!(created.metadata.uid.clone().unwrap_or_default());
    let generation = created.metadata.generation.unwrap_or(1);
    let Ok(children) = ruleop::render::render(rule, &cr) else {
        return;
    };
    let pp = PatchParams::apply("floor").force();
    let skip = kind.changed_only && update;
    let children = children
        .into_iter()
        .filter(|ch| !skip || ch.kind == "Deployment");
    let applies = children.map(|ch| {
        let ar = if ch.kind == "Deployment" {
            deployment_ar()
        } else {
            ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&())
        };
        let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &ar);
        let (name, obj, pp) = (ch.name, ch.object, pp.clone());
        async move {
            let _ = api.patch(&name, &pp, &Patch::Apply(&obj)).await;
        }
    });
    let sites: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &website_ar());
    let name = cr["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let url = format!(
        "http://{name}-web.{NS}.svc.cluster.local:{}",
        cr["spec"]["port"].as_i64().unwrap_or(80)
    );
    let mut status = json!({"readyReplicas": 0, "url": url, "observedGeneration": generation});
    if kind.conditions {
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        status["conditions"] = json!([
            {"type": "Ready", "status": "False", "reason": "NotReady", "message": "ready expression `status.readyReplicas >= spec.replicas` is false", "observedGeneration": generation, "lastTransitionTime": now},
            {"type": "Synced", "status": "True", "reason": "Applied", "message": "every child matches the rule", "observedGeneration": generation, "lastTransitionTime": now},
        ]);
    }
    let body =
        json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "status": status});
    let status_write = async {
        if kind.changed_only {
            let merge = json!({"status": body["status"]});
            let _ = sites
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&merge))
                .await;
        } else {
            let _ = sites.patch_status(&name, &pp, &Patch::Apply(&body)).await;
        }
    };
    futures::join!(futures::future::join_all(applies), status_write);
}
