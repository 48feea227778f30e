//! Whether a new CRD can replace the one a cluster serves without breaking the resources
//! stored under it. Pure: the old CRD, the new one and (when known) the stored resources
//! go in; the breaking changes come out, each with its reason. Additive changes (a new
//! optional field, a new version, a wider type or bound, a new enum value) pass.

use serde_json::Value;

/// One change that would break stored resources (or clients of the kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaking {
    /// Where: `v1 spec.replicas`.
    pub at: String,
    pub reason: String,
}

impl std::fmt::Display for Breaking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.reason)
    }
}

/// The breaking changes from `old` to `new` (two CRDs). `stored` are the resources of the
/// kind in the cluster, or None when they are not known (then a removed field counts as
/// used).
pub fn breaking_changes(old: &Value, new: &Value, stored: Option<&[Value]>) -> Vec<Breaking> {
    let mut out = Vec::new();
    let spec = |c: &Value, k: &str| c["spec"][k].clone();
    for k in ["group", "scope"] {
        if spec(old, k) != spec(new, k) {
            out.push(Breaking {
                at: format!("spec.{k}"),
                reason: format!("changed from {} to {}", spec(old, k), spec(new, k)),
            });
        }
    }
    if old["spec"]["names"]["kind"] != new["spec"]["names"]["kind"] {
        out.push(Breaking {
            at: "spec.names.kind".into(),
            reason: "the kind is renamed".into(),
        });
    }
    let versions = |c: &Value| {
        c["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let new_versions = versions(new);
    for ov in versions(old) {
        let name = ov["name"].as_str().unwrap_or_default().to_string();
        // Whether objects may be stored in it (unknown: they may).
        let still_stored = old["status"]["storedVersions"]
            .as_array()
            .is_none_or(|s| s.iter().any(|v| v == &ov["name"]));
        let Some(nv) = new_versions.iter().find(|v| v["name"] == ov["name"]) else {
            if still_stored {
                out.push(Breaking {
                    at: name,
                    reason: "the version is removed while objects may be stored in it (status.storedVersions): make another the storage version and let ruleop's storage migration trim storedVersions first".into(),
                });
            }
            continue;
        };
        if ov["served"] == true && nv["served"] == false && still_stored {
            out.push(Breaking {
                at: name.clone(),
                reason: "the version stops being served while objects are still stored in it (status.storedVersions): make another the storage version, and stop serving this one once ruleop's storage migration has trimmed storedVersions".into(),
            });
        }
        let root = |v: &Value| v["schema"]["openAPIV3Schema"].clone();
        let objects: Option<Vec<&Value>> = stored.map(|s| {
            s.iter()
                .filter(|o| {
                    o["apiVersion"]
                        .as_str()
                        .is_none_or(|av| av.ends_with(&format!("/{name}")))
                })
                .collect()
        });
        let mut ctx = Walk {
            version: &name,
            stored: objects.as_deref(),
            out: &mut out,
        };
        ctx.node(&root(&ov), &root(nv), &[]);
    }
    out
}

struct Walk<'a> {
    version: &'a str,
    stored: Option<&'a [&'a Value]>,
    out: &'a mut Vec<Breaking>,
}

impl Walk<'_> {
    fn push(&mut self, path: &[&str], reason: String) {
        self.out.push(Breaking {
            at: format!("{} {}", self.version, path.join(".")),
            reason,
        });
    }

    /// The values at `path` in `v`: `[]` steps into every list element, `{}` into every
    /// map value.
    fn at<'v>(v: &'v Value, path: &[&str], out: &mut Vec<&'v Value>) {
        let Some((first, rest)) = path.split_first() else {
            out.push(v);
            return;
        };
        match *first {
            "[]" => v
                .as_array()
                .into_iter()
                .flatten()
                .for_each(|x| Self::at(x, rest, out)),
            "{}" => v
                .as_object()
                .into_iter()
                .flatten()
                .for_each(|(_, x)| Self::at(x, rest, out)),
            k => {
                if let Some(x) = v.get(k) {
                    Self::at(x, rest, out);
                }
            }
        }
    }

    /// Whether any stored resource has a value at `path` (unknown resources: yes).
    fn used(&self, path: &[&str]) -> bool {
        let Some(objects) = self.stored else {
            return true;
        };
        objects.iter().any(|o| {
            let mut found = Vec::new();
            Self::at(o, path, &mut found);
            found.iter().any(|v| !v.is_null())
        })
    }

    /// Whether any stored resource lacks `path` (where its parent is present).
    fn missing(&self, path: &[&str]) -> bool {
        let Some(objects) = self.stored else {
            return true;
        };
        let (last, parent) = path.split_last().unwrap_or((&"", &[]));
        objects.iter().any(|o| {
            let mut parents = Vec::new();
            Self::at(o, parent, &mut parents);
            parents
                .iter()
                .any(|p| p.get(*last).is_none_or(Value::is_null))
        })
    }

    /// Keys stored under `path` that `props` does not declare (the new schema would prune
    /// them); unknown resources: a placeholder, as any key may be there.
    fn undeclared(&self, path: &[&str], props: &serde_json::Map<String, Value>) -> Vec<String> {
        let Some(objects) = self.stored else {
            return vec!["(fields the resources may have)".into()];
        };
        let mut keys = std::collections::BTreeSet::new();
        for o in objects {
            let mut found = Vec::new();
            Self::at(o, path, &mut found);
            for m in found.iter().filter_map(|v| v.as_object()) {
                keys.extend(m.keys().filter(|k| !props.contains_key(*k)).cloned());
            }
        }
        keys.into_iter().collect()
    }

    fn node(&mut self, old: &Value, new: &Value, path: &[&str]) {
        let open = |s: &Value| s["x-kubernetes-preserve-unknown-fields"] == true;
        // An integer or a string field made int-or-string takes what it took before.
        let widened_to_int_or_string = new["x-kubernetes-int-or-string"] == true
            && (old["type"] == "integer" || old["type"] == "string");
        if old["type"] != new["type"]
            && !(old["type"] == "integer" && new["type"] == "number")
            && !widened_to_int_or_string
        {
            if !new["type"].is_null() || !open(new) {
                self.push(
                    path,
                    format!("type changed from {} to {}", old["type"], new["type"]),
                );
            }
            return;
        }
        self.bounds(old, new, path);
        let props = |s: &Value| s["properties"].as_object().cloned().unwrap_or_default();
        let (op, np) = (props(old), props(new));
        // An open object (any fields kept) made closed: the server prunes what the new
        // schema does not declare.
        let open_old = open(old) || old["additionalProperties"] == true;
        let open_new = open(new) || new.get("additionalProperties").is_some();
        if open_old && !open_new && old["type"] == "object" {
            let lost = self.undeclared(path, &np);
            if !lost.is_empty() {
                self.push(path, format!("the object kept any field and now keeps only its declared ones: stored {} would be pruned", lost.join(", ")));
            }
        }
        for (name, o) in &op {
            if path.is_empty() && name == "status" {
                // The status is ruleop's to write: it is rewritten, not migrated.
                continue;
            }
            let mut p = path.to_vec();
            p.push(name);
            match np.get(name) {
                Some(n) => self.node(o, n, &p),
                None if open(new) => {}
                None if self.used(&p) => self.push(
                    &p,
                    "the field is removed and stored resources have it".into(),
                ),
                None => {}
            }
        }
        let required = |s: &Value| -> Vec<String> {
            s["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        };
        let was = required(old);
        for name in required(new).iter().filter(|r| !was.contains(r)) {
            let mut p = path.to_vec();
            p.push(name);
            let has_default = np.get(name).is_some_and(|s| s.get("default").is_some());
            if !has_default && self.missing(&p) {
                self.push(
                    &p,
                    "a new required field without a default (stored resources lack it)".into(),
                );
            }
        }
        if let (Some(o), Some(n)) = (old.get("items"), new.get("items")) {
            let mut p = path.to_vec();
            p.push("[]");
            self.node(o, n, &p);
        }
        if let (Some(o), Some(n)) = (
            old.get("additionalProperties"),
            new.get("additionalProperties"),
        ) {
            let mut p = path.to_vec();
            p.push("{}");
            self.node(o, n, &p);
        }
    }

    /// Narrowed bounds, patterns and enums.
    fn bounds(&mut self, old: &Value, new: &Value, path: &[&str]) {
        let num = |s: &Value, k: &str| s.get(k).and_then(Value::as_f64);
        for (k, tighter) in [
            ("minimum", true),
            ("minLength", true),
            ("minItems", true),
            ("minProperties", true),
            ("maximum", false),
            ("maxLength", false),
            ("maxItems", false),
            ("maxProperties", false),
        ] {
            let narrowed = match (num(old, k), num(new, k)) {
                (None, Some(_)) => true,
                (Some(o), Some(n)) => (tighter && n > o) || (!tighter && n < o),
                _ => false,
            };
            if narrowed {
                self.push(path, format!("`{k}` narrowed to {}", new[k]));
            }
        }
        if new.get("pattern").is_some() && old.get("pattern") != new.get("pattern") {
            self.push(path, format!("`pattern` changed to {}", new["pattern"]));
        }
        if let Some(ne) = new["enum"].as_array() {
            let gone: Vec<&Value> = match old["enum"].as_array() {
                Some(oe) => oe.iter().filter(|v| !ne.contains(v)).collect(),
                None => vec![&Value::Null],
            };
            if !gone.is_empty() {
                self.push(path, format!("`enum` narrowed to {}", new["enum"]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(spec: Value, versions: &[&str]) -> Value {
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| json!({"name": v, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec.clone()}}}}))
            .collect();
        json!({"spec": {"group": "x.io", "scope": "Namespaced", "names": {"kind": "X"}, "versions": vs}})
    }

    fn spec(props: Value) -> Value {
        json!({"type": "object", "properties": props})
    }

    #[test]
    fn a_version_still_stored_keeps_being_served() {
        let mut old = crd(json!({"type": "object"}), &["v1", "v2"]);
        old["spec"]["versions"][0]["served"] = json!(true);
        old["status"]["storedVersions"] = json!(["v1", "v2"]);
        let mut new = old.clone();
        new["spec"]["versions"][0]["served"] = json!(false);
        let out = breaking_changes(&old, &new, None);
        assert!(
            out.iter()
                .any(|b| b.at == "v1" && b.reason.contains("still stored")),
            "{out:?}"
        );
        old["status"]["storedVersions"] = json!(["v2"]);
        assert!(breaking_changes(&old, &new, None).is_empty());
        // Removed: only once nothing is stored in it.
        let mut gone = old.clone();
        gone["spec"]["versions"].as_array_mut().unwrap().remove(0);
        assert!(breaking_changes(&old, &gone, None).is_empty());
        old["status"]["storedVersions"] = json!(["v1", "v2"]);
        let out = breaking_changes(&old, &gone, None);
        assert!(
            out.iter()
                .any(|b| b.at == "v1" && b.reason.contains("removed")),
            "{out:?}"
        );
    }

    #[test]
    fn additive_changes_pass() {
        let old = crd(
            spec(
                json!({"a": {"type": "integer", "maximum": 5}, "e": {"type": "string", "enum": ["x"]}}),
            ),
            &["v1"],
        );
        let new = crd(
            spec(
                json!({"a": {"type": "number", "maximum": 9}, "e": {"type": "string", "enum": ["x", "y"]},
                "b": {"type": "string"}, "c": {"type": "integer", "default": 1}}),
            ),
            &["v1", "v2"],
        );
        assert_eq!(breaking_changes(&old, &new, None), vec![]);
    }

    #[test]
    fn breaking_changes_are_named_with_their_reason() {
        let old = crd(
            spec(
                json!({"a": {"type": "integer"}, "s": {"type": "string", "enum": ["x", "y"]}, "gone": {"type": "string"}, "m": {"type": "object", "maxProperties": 8}}),
            ),
            &["v1", "v2"],
        );
        let mut new = crd(
            spec(
                json!({"a": {"type": "string"}, "s": {"type": "string", "enum": ["x"]}, "r": {"type": "string"}, "m": {"type": "object", "maxProperties": 4}}),
            ),
            &["v1"],
        );
        new["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["required"] =
            json!(["r"]);
        let found: Vec<String> = breaking_changes(&old, &new, None)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            found.contains(&"v1 spec.a: type changed from \"integer\" to \"string\"".to_string()),
            "{found:?}"
        );
        assert!(
            found.contains(&"v1 spec.s: `enum` narrowed to [\"x\"]".to_string()),
            "{found:?}"
        );
        assert!(
            found.contains(&"v1 spec.m: `maxProperties` narrowed to 4".to_string()),
            "{found:?}"
        );
        assert!(
            found.contains(
                &"v1 spec.gone: the field is removed and stored resources have it".to_string()
            ),
            "{found:?}"
        );
        assert!(
            found.contains(
                &"v1 spec.r: a new required field without a default (stored resources lack it)"
                    .to_string()
            ),
            "{found:?}"
        );
        assert!(
            found.contains(
                &"v2: the version is removed while objects may be stored in it (status.storedVersions): make another the storage version and let ruleop's storage migration trim storedVersions first".to_string()
            ),
            "{found:?}"
        );
    }

    #[test]
    fn inside_lists_stored_values_count_and_an_open_object_closed_prunes() {
        let item = |props: Value| json!({"type": "array", "items": {"type": "object", "properties": props}});
        let old = crd(
            spec(
                json!({"ports": item(json!({"name": {"type": "string"}, "old": {"type": "string"}}))}),
            ),
            &["v1"],
        );
        let new = crd(
            spec(json!({"ports": item(json!({"name": {"type": "string"}}))})),
            &["v1"],
        );
        let unused = [json!({"apiVersion": "x.io/v1", "spec": {"ports": [{"name": "a"}]}})];
        assert_eq!(breaking_changes(&old, &new, Some(&unused)), vec![]);
        let used =
            [json!({"apiVersion": "x.io/v1", "spec": {"ports": [{"name": "a"}, {"old": "x"}]}})];
        assert_eq!(breaking_changes(&old, &new, Some(&used)).len(), 1);
        // A spec that kept any field, now typed: what is stored outside the new fields goes.
        let open = crd(
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            &["v1"],
        );
        let typed = crd(spec(json!({"size": {"type": "integer"}})), &["v1"]);
        let stored = [json!({"apiVersion": "x.io/v1", "spec": {"size": 1, "color": "red"}})];
        let found = breaking_changes(&open, &typed, Some(&stored));
        assert!(
            found.len() == 1 && found[0].reason.contains("stored color would be pruned"),
            "{found:?}"
        );
        let fits = [json!({"apiVersion": "x.io/v1", "spec": {"size": 1}})];
        assert_eq!(breaking_changes(&open, &typed, Some(&fits)), vec![]);
    }

    #[test]
    fn a_removed_field_no_stored_resource_uses_passes() {
        let old = crd(
            spec(json!({"a": {"type": "integer"}, "old": {"type": "string"}})),
            &["v1"],
        );
        let new = crd(spec(json!({"a": {"type": "integer"}})), &["v1"]);
        let stored = [json!({"apiVersion": "x.io/v1", "spec": {"a": 1}})];
        assert_eq!(breaking_changes(&old, &new, Some(&stored)), vec![]);
        let stored = [json!({"apiVersion": "x.io/v1", "spec": {"a": 1, "old": "v"}})];
        assert_eq!(breaking_changes(&old, &new, Some(&stored)).len(), 1);
    }

    #[test]
    fn a_field_made_int_or_string_is_a_widening_and_the_reverse_is_not() {
        let crd = |size: Value| {
            json!({"spec": {"names": {"kind": "C"}, "scope": "Namespaced", "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": size}}}}}}]}})
        };
        let int = crd(json!({"type": "integer"}));
        let ios = crd(
            json!({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true}),
        );
        assert_eq!(breaking_changes(&int, &ios, Some(&[])), vec![]);
        assert_eq!(breaking_changes(&ios, &int, Some(&[])).len(), 1);
    }
}
