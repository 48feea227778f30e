//! `ruleop trace KIND/NAME`: a resource and the children its rule made, as a tree with
//! Synced and Ready per node, the root cause first (the deepest node that fails, with its
//! whole message), the Rule revision in force and the last Events.

use super::args::{TraceArgs, TraceOutput};
use crate::render::{CHILD_LABEL, RULE_LABEL};
use crate::rules::CompiledRule;
use crate::status::condition_of as condition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use serde::Serialize;
use serde_json::Value;
use std::process::ExitCode;
use std::sync::Arc;

/// One node of the tree.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Node {
    /// The child's id in the rule (None for the resource itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub kind: String,
    pub name: String,
    /// None: not said (a child has no Synced of its own unless the resource names it).
    pub synced: Option<bool>,
    pub ready: Option<bool>,
    /// Why it is not Synced or not Ready, or what it is.
    pub status: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Trace {
    root_cause: Option<Node>,
    /// The rule that made the children (from the cluster's Rule, `--rules`, or the
    /// children's label).
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<String>,
    resource: Node,
    revision: Option<i64>,
    children: Vec<Node>,
    events: Vec<String>,
}

pub(super) fn trace_cmd(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let trace = rt.block_on(gather(&args))?;
    match args.output {
        TraceOutput::Json => println!("{}", serde_json::to_string_pretty(&trace)?),
        TraceOutput::Yaml => print!("{}", serde_yaml::to_string(&trace)?),
        TraceOutput::Tree | TraceOutput::Wide => {
            print!("{}", tree(&trace, args.output == TraceOutput::Wide))
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The rule that serves `ar`: of `--rules` (an error if none does), else among the
/// cluster's Rule objects; None when no Rule serves it (ruleop runs from files, or the
/// Rule kind is not installed): the children are then found by their labels alone.
async fn rule_for(
    client: &kube::Client,
    args: &TraceArgs,
    ar: &ApiResource,
) -> anyhow::Result<Option<Arc<CompiledRule>>> {
    let serves = |r: &Arc<CompiledRule>| r.watch.group == ar.group && r.watch.resource == ar.plural;
    if !args.rules.is_empty() {
        let rules = super::input::load_rules_or_objects(&args.rules).0;
        return match rules.into_iter().find(serves) {
            Some(r) => Ok(Some(r)),
            None => anyhow::bail!(
                "no rule of {:?} serves {}.{} (leave out --rules to trace from the cluster alone)",
                args.rules,
                ar.plural,
                ar.group
            ),
        };
    }
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &crate::operator::objects::resource());
    let Ok(list) = api.list(&ListParams::default()).await else {
        return Ok(None);
    };
    Ok(list
        .items
        .iter()
        .filter_map(|o| crate::rules::object::load_object(&serde_json::to_value(o).ok()?).rule)
        .find(serves))
}

async fn gather(args: &TraceArgs) -> anyhow::Result<Trace> {
    let client = crate::client::plain().await?;
    let (kind, name) = args
        .resource
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("{:?}: give KIND/NAME (website/my-blog)", args.resource))?;
    let served = super::resolve::discover(&client).await?;
    let found = super::resolve::find(&served, kind)?;
    let ar = &found.ar;
    let rule = rule_for(&client, args, ar).await?;
    let ns = args.namespace.as_str();
    let api: Api<DynamicObject> = match found.namespaced {
        true => Api::namespaced_with(client.clone(), ns, ar),
        false => Api::all_with(client.clone(), ar),
    };
    let cr = serde_json::to_value(api.get(name).await?)?;
    let uid = cr["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (children, kinds): (Vec<Value>, Vec<(String, String)>) = match &rule {
        Some(rule) => {
            let kinds = rule
                .children
                .iter()
                .map(|c| (c.id.clone(), c.kind.clone()))
                .collect();
            (children(&client, rule, ns, &uid).await?, kinds)
        }
        None => {
            let kinds = served
                .iter()
                .map(|k| (String::new(), k.ar.kind.clone()))
                .collect();
            (labelled_children(&client, &served, ns, &uid).await, kinds)
        }
    };
    let resource = resource_node(&ar.kind, name, &cr);
    let nodes = judge(&cr, &children, &kinds);
    let root_cause = root_cause(&resource, &nodes);
    let events = events(&client, ns, &uid).await;
    let rule = rule.map(|r| r.name.clone()).or_else(|| {
        children.iter().find_map(|c| {
            c["metadata"]["labels"][RULE_LABEL]
                .as_str()
                .map(str::to_string)
        })
    });
    Ok(Trace {
        root_cause,
        rule,
        revision: cr["status"]["ruleRevision"].as_i64(),
        resource,
        children: nodes,
        events,
    })
}

/// The resource's children with no rule at hand: of every namespaced kind the cluster
/// lists, the objects in `ns` with ruleop's rule label that the resource `uid` controls.
/// (A kind the caller may not list is passed over.)
async fn labelled_children(
    client: &kube::Client,
    served: &[super::resolve::Served],
    ns: &str,
    uid: &str,
) -> Vec<Value> {
    let labelled = super::resolve::labelled(client, served, Some(ns), RULE_LABEL).await;
    labelled
        .into_iter()
        .filter(|(_, o)| controlled_by(o, uid))
        .filter_map(|(k, o)| {
            let mut v = serde_json::to_value(&o).ok()?;
            v["kind"] = Value::String(k.ar.kind.clone());
            Some(v)
        })
        .collect()
}

fn controlled_by(o: &DynamicObject, uid: &str) -> bool {
    o.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == uid && r.controller == Some(true))
}

/// The live children of the resource `uid`: of each kind the rule makes, those labelled
/// with the rule and controlled by the resource.
async fn children(
    client: &kube::Client,
    rule: &CompiledRule,
    ns: &str,
    uid: &str,
) -> anyhow::Result<Vec<Value>> {
    let mut kinds: Vec<(String, String)> = rule
        .children
        .iter()
        .map(|c| (c.api_version.clone(), c.kind.clone()))
        .collect();
    kinds.sort();
    kinds.dedup();
    let mut out = Vec::new();
    for (api_version, kind) in kinds {
        let (group, version) = crate::schema::kinds::group_version(&api_version);
        let gvk = kube::core::GroupVersionKind::gvk(group, version, &kind);
        let Ok((ar, _)) = kube::discovery::pinned_kind(client, &gvk).await else {
            continue;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let lp = ListParams::default().labels(&format!("{RULE_LABEL}={}", rule.name));
        for o in api.list(&lp).await?.items {
            if controlled_by(&o, uid) {
                let mut v = serde_json::to_value(&o)?;
                v["kind"] = Value::String(kind.clone());
                out.push(v);
            }
        }
    }
    Ok(out)
}

fn resource_node(kind: &str, name: &str, cr: &Value) -> Node {
    let synced = condition(cr, "Synced");
    let ready = condition(cr, "Ready");
    let failing = [synced, ready]
        .into_iter()
        .flatten()
        .find(|c| c["status"] != "True");
    Node {
        id: None,
        kind: kind.to_string(),
        name: name.to_string(),
        synced: synced.map(|c| c["status"] == "True"),
        ready: ready.map(|c| c["status"] == "True"),
        status: match failing {
            Some(c) => format!(
                "{}: {}",
                c["reason"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            ),
            None if synced.is_none() => "no status yet: ruleop has not reconciled it".into(),
            None => "Synced and Ready".into(),
        },
    }
}

/// The names of objects of `kind` that `message` names (`Deployment my-blog-web: ...`).
fn named_in(message: &str, kind: &str) -> Vec<String> {
    let lead = format!("{kind} ");
    let mut out = Vec::new();
    for (at, _) in message.match_indices(&lead) {
        let before = message[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric()) {
            continue;
        }
        let rest = &message[at + lead.len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .collect();
        if !name.is_empty() && rest[name.len()..].starts_with(':') && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// Each child's node: Ready by its kind's own check; not Synced when the resource's
/// `Synced` message names it (with that message). A child the message names that is not
/// there (refused before it was made) gets a node too. `kinds`: the rule's children, by
/// id and kind.
pub(super) fn judge(cr: &Value, children: &[Value], kinds: &[(String, String)]) -> Vec<Node> {
    let synced = condition(cr, "Synced").filter(|c| c["status"] != "True");
    let said = |c: &Value| {
        format!(
            "{}: {}",
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default()
        )
    };
    let mut nodes: Vec<Node> = children
        .iter()
        .map(|o| {
            let id = o["metadata"]["labels"][CHILD_LABEL]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let kind = o["kind"].as_str().unwrap_or_default().to_string();
            let ready = crate::render::readiness::builtin(&kind, o);
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            let named = synced.filter(|c| {
                c["message"].as_str().is_some_and(|m| {
                    m.contains(&format!("child `{id}`"))
                        || named_in(m, &kind).iter().any(|n| n == name)
                })
            });
            let (synced, status) = match (named, &ready) {
                (Some(c), _) => (Some(false), said(c)),
                (None, Err(why)) => (None, why.clone()),
                (None, Ok(())) => (None, "ready".into()),
            };
            Node {
                id: Some(id),
                kind,
                name: o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                synced,
                ready: Some(ready.is_ok()),
                status,
            }
        })
        .collect();
    if let Some(c) = synced {
        let message = c["message"].as_str().unwrap_or_default();
        for (id, kind) in kinds {
            for name in named_in(message, kind) {
                if !nodes.iter().any(|n| n.kind == *kind && n.name == name) {
                    nodes.push(Node {
                        id: (!id.is_empty()).then(|| id.clone()),
                        kind: kind.clone(),
                        name,
                        synced: Some(false),
                        ready: Some(false),
                        status: format!("not made: {}", said(c)),
                    });
                }
            }
        }
    }
    nodes.sort_by(|a, b| (&a.id, &a.name).cmp(&(&b.id, &b.name)));
    nodes
}

/// The deepest node that fails: a child the resource's Synced names, else a child not
/// Ready, else the resource itself when it is not Synced or not Ready.
pub(super) fn root_cause(resource: &Node, children: &[Node]) -> Option<Node> {
    children
        .iter()
        .find(|c| c.synced == Some(false))
        .or_else(|| children.iter().find(|c| c.ready == Some(false)))
        .or_else(|| {
            (resource.synced == Some(false) || resource.ready == Some(false)).then_some(resource)
        })
        .cloned()
}

/// The last five Events about the resource, oldest first.
async fn events(client: &kube::Client, ns: &str, uid: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let Ok(list) = api.list(&ListParams::default()).await else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = list
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid))
        .map(|e| {
            let at = e
                .event_time
                .as_ref()
                .map(|t| t.0.to_string())
                .or_else(|| {
                    e.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.to_string())
                })
                .unwrap_or_default();
            (
                at.clone(),
                format!(
                    "{at} {} {}: {}",
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default()
                ),
            )
        })
        .collect();
    out.sort();
    out.into_iter()
        .rev()
        .take(5)
        .rev()
        .map(|(_, s)| s)
        .collect()
}

fn mark(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "True",
        Some(false) => "False",
        None => "-",
    }
}

/// The tree as text: the root cause first; messages cut to a line unless `wide`.
fn tree(t: &Trace, wide: bool) -> String {
    let cut = |s: &str| -> String {
        let line = s.lines().next().unwrap_or_default();
        if wide || line.chars().count() <= 100 {
            return if wide {
                s.replace('\n', " ")
            } else {
                line.to_string()
            };
        }
        format!("{}…", line.chars().take(100).collect::<String>())
    };
    let mut out = String::new();
    if let Some(c) = &t.root_cause {
        let who = match &c.id {
            Some(id) => format!("child `{id}` ({}/{})", c.kind, c.name),
            None => format!("{}/{}", c.kind, c.name),
        };
        out.push_str(&format!("root cause: {who}: {}\n\n", c.status));
    }
    out.push_str(&format!(
        "{:<48} {:<7} {:<7} STATUS\n",
        "NAME", "SYNCED", "READY"
    ));
    let r = &t.resource;
    let rev = t
        .revision
        .map(|n| format!(" (revision {n})"))
        .unwrap_or_default();
    out.push_str(&format!(
        "{:<48} {:<7} {:<7} {}\n",
        format!("{}/{}{rev}", r.kind, r.name),
        mark(r.synced),
        mark(r.ready),
        cut(&r.status)
    ));
    for (i, c) in t.children.iter().enumerate() {
        let branch = if i + 1 == t.children.len() {
            "└─"
        } else {
            "├─"
        };
        let label = format!("{branch} {}/{}", c.kind, c.name);
        out.push_str(&format!(
            "{label:<48} {:<7} {:<7} {}\n",
            mark(c.synced),
            mark(c.ready),
            cut(&c.status)
        ));
    }
    if !t.events.is_empty() {
        out.push_str("\nevents:\n");
        for e in &t.events {
            out.push_str(&format!("  {}\n", cut(e)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_child_the_synced_message_names_is_the_root_cause_with_its_whole_message() {
        let cr = json!({"status": {"conditions": [
            {"type": "Synced", "status": "False", "reason": "ApplyRefused",
             "message": "child `deployment` (Deployment blog-web): the API server refused it: spec.template.spec.restartPolicy: Unsupported value: \"Never\""},
            {"type": "Ready", "status": "False", "reason": "SyncFailed", "message": "..."}]}});
        let child = |id: &str, kind: &str, status: Value| json!({"kind": kind, "metadata": {"name": format!("blog-{id}"), "labels": {CHILD_LABEL: id}}, "status": status});
        let children = [
            child("service", "Service", json!({})),
            child("deployment", "Deployment", json!({"observedGeneration": 1})),
        ];
        let kinds = [
            ("deployment".to_string(), "Deployment".to_string()),
            ("service".to_string(), "Service".to_string()),
        ];
        let nodes = judge(&cr, &children, &kinds);
        let resource = resource_node("WebSite", "blog", &cr);
        let root = root_cause(&resource, &nodes).unwrap();
        assert_eq!(root.id.as_deref(), Some("deployment"));
        assert!(
            root.status.contains("restartPolicy: Unsupported value"),
            "{}",
            root.status
        );
        let text = tree(
            &Trace {
                root_cause: Some(root),
                rule: None,
                resource,
                revision: Some(2),
                children: nodes,
                events: vec![],
            },
            false,
        );
        assert!(
            text.starts_with(
                "root cause: child `deployment` (Deployment/blog-deployment): ApplyRefused"
            ),
            "{text}"
        );
        assert!(text.contains("WebSite/blog (revision 2)"), "{text}");
        assert!(text.contains("└─ Service/blog-service"), "{text}");
        // Refused before it was made: the message names it by kind and name.
        let cr = json!({"status": {"conditions": [{"type": "Synced", "status": "False", "reason": "ApplyRefused",
            "message": "Deployment blog-web: the API server refused it (422 Invalid): bad"}]}});
        let nodes = judge(&cr, &children[..1], &kinds);
        let root = root_cause(&resource_node("WebSite", "blog", &cr), &nodes).unwrap();
        assert_eq!(
            (root.id.as_deref(), root.name.as_str()),
            (Some("deployment"), "blog-web")
        );
        assert!(
            root.status
                .starts_with("not made: ApplyRefused: Deployment blog-web"),
            "{}",
            root.status
        );
        assert_eq!(
            named_in("a ConfigMap x: y; Deployment blog-web: z", "Deployment"),
            ["blog-web"]
        );
    }
}
