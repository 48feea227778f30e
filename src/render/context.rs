//! What templates see for one custom resource: its name, namespace, metadata, `spec`
//! with the rule's defaults merged under it, and the standard labels.

use super::model::RenderError;
use crate::rules::CompiledRule;
use serde_json::{Map, Value, json};

/// The variables of one custom resource, built once and shared by all its children.
#[derive(Debug, Clone)]
pub struct Scope {
    pub ctx: minijinja::Value,
    pub name: String,
    pub namespace: String,
    /// `spec` with defaults merged under it.
    pub spec: Value,
    /// The controller ownerReference children get, when the custom resource has a uid.
    pub owner: Option<Value>,
    /// Existing objects looked up by name and not found: (index in the rule's
    /// `existing`, what was looked for). Children that read them wait.
    pub missing: Vec<(usize, String)>,
}

impl Scope {
    /// The variables one by one, to extend with more (status expressions add `status`,
    /// `children`, `self`; a child's `readyWhen` adds `child`).
    pub fn vars<B: FromIterator<(String, minijinja::Value)>>(&self) -> B {
        self.ctx
            .try_iter()
            .into_iter()
            .flatten()
            .filter_map(|k| {
                let v = self.ctx.get_item(&k).ok()?;
                Some((k.as_str()?.to_string(), v))
            })
            .collect()
    }
}

/// Merges `defaults` under `spec`: what the custom resource sets wins, maps merge deeply.
pub fn merge_defaults(
    defaults: &Map<String, Value>,
    spec: Option<&Value>,
) -> Result<Value, RenderError> {
    let mut out = Value::Object(defaults.clone());
    match spec {
        None | Some(Value::Null) => {}
        Some(s @ Value::Object(_)) => overlay(&mut out, s),
        Some(_) => return Err(RenderError::SpecNotObject),
    }
    Ok(out)
}

fn overlay(base: &mut Value, top: &Value) {
    match (base, top) {
        (Value::Object(b), Value::Object(t)) => {
            for (k, v) in t {
                match b.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => overlay(existing, v),
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, t) => *b = t.clone(),
    }
}

/// Builds the template variables for `cr`.
pub fn scope(rule: &CompiledRule, cr: &Value) -> Result<Scope, RenderError> {
    let meta = cr.get("metadata").and_then(Value::as_object);
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(RenderError::NoName)?;
    let namespace = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(RenderError::NoNamespace)?;
    let spec = merge_defaults(&rule.defaults, cr.get("spec"))?;
    let mut metadata = meta.cloned().unwrap_or_default();
    metadata.remove("managedFields");
    let labels = json!({
        "app.kubernetes.io/name": rule.name,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "ruleop",
    });
    let selector = json!({
        "app.kubernetes.io/name": rule.name,
        "app.kubernetes.io/instance": name,
    });
    let owner = match (
        meta.and_then(|m| m.get("uid")).and_then(Value::as_str),
        cr.get("apiVersion"),
        cr.get("kind"),
    ) {
        (Some(uid), Some(api_version), Some(kind)) => Some(json!({
            "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true,
        })),
        _ => None,
    };
    let mut vars = Map::new();
    vars.insert("name".into(), Value::String(name.into()));
    vars.insert("namespace".into(), Value::String(namespace.into()));
    vars.insert("metadata".into(), Value::Object(metadata));
    vars.insert("spec".into(), spec.clone());
    vars.insert("labels".into(), labels);
    vars.insert("selectorLabels".into(), selector);
    vars.insert("rule".into(), Value::String(rule.name.clone()));
    vars.insert("existing".into(), Value::Object(Map::new()));
    Ok(Scope {
        ctx: minijinja::Value::from(minijinja::value::Serde(&vars)),
        name: name.into(),
        namespace: namespace.into(),
        spec,
        owner,
        missing: Vec::new(),
    })
}

impl Scope {
    /// The scope with the existing objects found for it: `found[i]` is the rule's
    /// `existing[i]` (an object, or a list for a selector), or Err naming what is missing.
    pub fn with_existing(
        mut self,
        rule: &CompiledRule,
        found: Vec<Result<Value, String>>,
    ) -> Scope {
        let mut map = Map::new();
        for (i, (e, f)) in rule.existing.iter().zip(found).enumerate() {
            match f {
                Ok(v) => {
                    map.insert(e.id.clone(), v);
                }
                Err(what) => self.missing.push((i, what)),
            }
        }
        let mut vars: std::collections::BTreeMap<String, minijinja::Value> = self.vars();
        vars.insert(
            "existing".into(),
            minijinja::Value::from(minijinja::value::Serde(&map)),
        );
        self.ctx = minijinja::Value::from(vars);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_merge_under_the_spec_deeply() {
        let defaults = json!({"replicas": 2, "port": 80, "probe": {"path": "/", "period": 10}});
        let spec = json!({"replicas": 3, "probe": {"path": "/healthz"}});
        let merged = merge_defaults(defaults.as_object().unwrap(), Some(&spec)).unwrap();
        assert_eq!(
            merged,
            json!({"replicas": 3, "port": 80, "probe": {"path": "/healthz", "period": 10}})
        );
    }

    #[test]
    fn a_missing_spec_gets_the_defaults_and_a_scalar_spec_is_refused() {
        let defaults = json!({"port": 80});
        assert_eq!(
            merge_defaults(defaults.as_object().unwrap(), None).unwrap(),
            json!({"port": 80})
        );
        assert_eq!(
            merge_defaults(defaults.as_object().unwrap(), Some(&json!("x"))),
            Err(RenderError::SpecNotObject)
        );
    }
}
