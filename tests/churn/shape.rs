//! The churn test's rule: its shape (what each random edit changes), the rule text it
//! gives, random specs, and the children a resource is expected to have.

use ruleop::rules::CompiledRule;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

/// The rule's shape: what each random edit changes.
#[derive(Clone, Debug)]
pub struct Shape {
    /// The config child's id (renamed back and forth; its objects keep their name).
    pub config_id: &'static str,
    /// `app` reads the config's live uid through `observed` (so it waits a round).
    pub app_waits: bool,
    /// `svc` exists when `spec.expose` is true, or when it is false.
    pub svc_when_exposed: bool,
    /// A Secret child (a kind added and retired).
    pub extra: bool,
    /// The peers' objects are named `<name>-<prefix>-<peer>`.
    pub peers_prefix: &'static str,
    /// The child kept on removal (`onRemove: Orphan`).
    pub keep: bool,
    /// One object per existing ConfigMap labelled `churn-shared`.
    pub mirror: bool,
    /// The version the kind is stored in (`v1`, watched, or `v2`, which calls
    /// `greeting` `hello`): each move has the stored objects migrated, where ruleop
    /// installs the CRD.
    pub storage: &'static str,
    /// The kinds of edit not yet drawn in this round of eight: every kind comes once
    /// in every eight edits, whatever the seed.
    pub deck: Vec<usize>,
}

impl Shape {
    /// The rule both churn tests start from.
    pub fn first() -> Shape {
        Shape {
            config_id: "config",
            app_waits: false,
            svc_when_exposed: true,
            extra: false,
            peers_prefix: "p",
            keep: true,
            mirror: true,
            storage: "v1",
            deck: Vec::new(),
        }
    }

    pub fn text(&self) -> String {
        let c = self.config_id;
        let mut s = format!(
            "name: churn\nwatch: {{group: trust.ruleop.dev, version: v1, resource: boxes}}\n\
             existing:\n  - {{id: shared, apiVersion: v1, kind: ConfigMap, selector: {{churn-shared: \"yes\"}}}}\n\
             children:\n\
             \x20 - id: {c}\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-config\"}}, data: {{greeting: \"{{{{ spec.greeting }}}}\"}}}}\n\
             \x20 - id: app\n    after: [{c}]\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata:\n        name: \"{{{{ name }}}}-app\"\n        annotations: {ann}\n      spec:\n        replicas: 1\n        selector: {{matchLabels: \"{{{{ selectorLabels }}}}\"}}\n        template:\n          metadata:\n            labels: \"{{{{ selectorLabels }}}}\"\n            annotations: {{checksum: \"{{{{ rendered.{c}.data | sha256 }}}}\"}}\n          spec: {{containers: [{{name: app, image: \"{{{{ spec.image }}}}\"}}]}}\n\
             \x20 - id: svc\n    when: \"{when}\"\n    template: {{apiVersion: v1, kind: Service, metadata: {{name: \"{{{{ name }}}}-svc\"}}, spec: {{selector: \"{{{{ selectorLabels }}}}\", ports: [{{port: 80}}]}}}}\n\
             \x20 - id: peer\n    forEach: spec.peers\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-{p}-{{{{ item }}}}\"}}, data: {{peer: \"{{{{ item }}}}\"}}}}\n",
            ann = if self.app_waits {
                format!("{{config-uid: \"{{{{ observed.{c}.metadata.uid }}}}\"}}")
            } else {
                "{}".into()
            },
            when = if self.svc_when_exposed {
                "spec.expose"
            } else {
                "not spec.expose"
            },
            p = self.peers_prefix,
        );
        // The kind in two versions, so that its storage can move (with `--install-crds`).
        let schema = format!(
            "schema:\n  kind: Box\n  storage: {}\n  spec: {{greeting: string, image: string, expose: boolean, peers: \"[]string\"}}\n  \
             versions:\n    - name: v2\n      spec: {{hello: string, image: string, expose: boolean, peers: \"[]string\"}}\n      \
             convert:\n        - move: {{from: spec.hello, to: spec.greeting}}\n",
            self.storage
        );
        s = s.replacen("children:\n", &format!("{schema}children:\n"), 1);
        if self.extra {
            s.push_str("  - id: extra\n    template: {apiVersion: v1, kind: Secret, metadata: {name: \"{{ name }}-extra\"}, stringData: {a: b}}\n");
        }
        if self.keep {
            s.push_str("  - id: keep\n    onRemove: Orphan\n    adopt: IfOrphan\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-keep\"}, data: {kept: \"yes\"}}\n");
        }
        if self.mirror {
            s.push_str("  - id: mirror\n    forEach: existing.shared\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-m-{{ item.metadata.name }}\"}, data: {from: \"{{ item.metadata.name }}\"}}\n");
        }
        s
    }

    pub fn mutate(&mut self, rng: &mut fastrand::Rng) -> &'static str {
        if self.deck.is_empty() {
            self.deck = (0..8).collect();
            rng.shuffle(&mut self.deck);
        }
        match self.deck.pop().unwrap_or_default() {
            0 => {
                self.config_id = if self.config_id == "config" {
                    "settings"
                } else {
                    "config"
                };
                "rename the config child"
            }
            1 => {
                self.app_waits = !self.app_waits;
                "app reads the config through observed, or stops"
            }
            2 => {
                self.svc_when_exposed = !self.svc_when_exposed;
                "flip the service's when"
            }
            3 => {
                self.extra = !self.extra;
                "add or remove the Secret child (a kind)"
            }
            4 => {
                self.peers_prefix = if self.peers_prefix == "p" { "q" } else { "p" };
                "rename the peers' objects"
            }
            5 => {
                self.keep = !self.keep;
                "add or remove the orphaned child"
            }
            6 => {
                self.mirror = !self.mirror;
                "add or remove the existing-selector collection"
            }
            _ => {
                self.storage = if self.storage == "v1" { "v2" } else { "v1" };
                "move the kind's storage version (its stored objects migrated)"
            }
        }
    }
}

pub fn random_spec(rng: &mut fastrand::Rng) -> Value {
    // A subset, in any order (a reordered list keeps its objects: they are named by item).
    let mut peers: Vec<&str> = ["a", "b", "c", "d"]
        .into_iter()
        .filter(|_| rng.bool())
        .collect();
    rng.shuffle(&mut peers);
    let greeting = ["hi", "hello", "hey"][rng.usize(0..3)];
    let image = ["nginx:1.27", "nginx:1.28"][rng.usize(0..2)];
    json!({"greeting": greeting, "image": image, "expose": rng.bool(), "peers": peers})
}

/// (kind, name) of every object a resource's render gives (as if every child were in the
/// cluster as rendered, so that waiting children are counted too).
pub fn expected(rule: &CompiledRule, cr: &Value, shared: &[Value]) -> BTreeSet<(String, String)> {
    let Ok(scope) = ruleop::render::scope(rule, cr) else {
        return BTreeSet::new();
    };
    let Ok((scope, _)) = ruleop::render::find_existing(rule, scope, |_, _| shared.to_vec()) else {
        return BTreeSet::new();
    };
    let live = |r: &ruleop::render::Rendered| {
        let mut o = r.object.clone();
        o["metadata"]["uid"] = json!("uid");
        Some(o)
    };
    ruleop::render::render_with(rule, &scope, &live)
        .map(|p| p.children.into_iter().map(|c| (c.kind, c.name)).collect())
        .unwrap_or_default()
}

/// The applied hash of every object a resource's render gives, the resource and the live
/// children (`live`, by kind and name, for `observed`) as they are in the cluster: what
/// each of its objects must carry once it has converged.
pub fn hashes(
    rule: &CompiledRule,
    cr: &Value,
    shared: &[Value],
    live: &dyn Fn(&str, &str) -> Option<Value>,
) -> Result<BTreeMap<(String, String), String>, String> {
    let scope = ruleop::render::scope(rule, cr).map_err(|e| e.to_string())?;
    let (scope, _) = ruleop::render::find_existing(rule, scope, |_, _| shared.to_vec())
        .map_err(|e| e.to_string())?;
    let live = |r: &ruleop::render::Rendered| live(&r.kind, &r.name);
    let plan = ruleop::render::render_with(rule, &scope, &live).map_err(|e| e.to_string())?;
    if !plan.waiting.is_empty() {
        return Err(format!("children wait: {:?}", plan.waiting));
    }
    Ok(plan
        .children
        .into_iter()
        .map(|c| ((c.kind, c.name), c.hash))
        .collect())
}

pub fn load(text: &str) -> Arc<CompiledRule> {
    let (mut rules, errors) = ruleop::rules::load_str(text, Path::new("churn.yaml"));
    assert!(errors.is_empty(), "{errors:?}\n{text}");
    rules.remove(0)
}
