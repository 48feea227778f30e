//! Whether a live object already holds a rendered one: every rendered field present with
//! an equal value. The server adds defaults, status and other managers' fields; those are
//! ignored. Empty rendered values match absent live ones (the server drops them), and
//! numbers compare by value (`1` = `1.0`).
//!
//! Lists are of two sorts, as server-side apply merges them. A *keyed* list (containers,
//! env, ports, volumes...: each element owned on its own) may hold other managers'
//! elements besides ours, and those are left alone. Every other list is *atomic* (args,
//! command, tolerations, and every list of a CRD without a list type): it is ours whole,
//! so an element appended by hand is a difference, and the next apply removes it.

use serde_json::{Map, Value};

/// List fields that server-side apply merges element by element in the built-in kinds
/// (`x-kubernetes-list-type: map` or `set`); every other list is atomic.
const KEYED_LISTS: &[&str] = &[
    "containers",
    "initContainers",
    "ephemeralContainers",
    "ports",
    "env",
    "volumes",
    "volumeMounts",
    "volumeDevices",
    "imagePullSecrets",
    "hostAliases",
    "topologySpreadConstraints",
    "resourceClaims",
    "ownerReferences",
    "finalizers",
    "conditions",
];

fn is_keyed(field: &str) -> bool {
    KEYED_LISTS.contains(&field)
}

/// Whether `live` holds everything in `desired` (as the server stores it: see [`as_stored`]).
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    subset_at("", &as_stored(desired), live)
}

/// A rendered object as the server stores it, where that differs from what is sent: a
/// Secret's `stringData` is write-only, merged into `data` (base64) and never returned, so
/// compared as that `data` (a key in both is `stringData`'s); without this, every Secret
/// with `stringData` would look changed to a replica with no memory of its last write.
pub fn as_stored(desired: &Value) -> std::borrow::Cow<'_, Value> {
    use base64::Engine as _;
    let is_secret = desired["kind"] == "Secret" && desired["apiVersion"] == "v1";
    let Some(strings) = desired.get("stringData").and_then(Value::as_object) else {
        return std::borrow::Cow::Borrowed(desired);
    };
    if !is_secret {
        return std::borrow::Cow::Borrowed(desired);
    }
    let mut stored = desired.clone();
    let mut data = stored["data"].as_object().cloned().unwrap_or_default();
    for (k, v) in strings {
        let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        data.insert(k.clone(), Value::String(encoded));
    }
    if let Some(o) = stored.as_object_mut() {
        o.remove("stringData");
        o.insert("data".into(), Value::Object(data));
    }
    std::borrow::Cow::Owned(stored)
}

fn subset_at(field: &str, desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => subset_at(k, dv, lv),
            None => is_empty(dv),
        }),
        (Value::Array(d), Value::Array(l)) => {
            let lengths_fit = if is_keyed(field) {
                d.len() <= l.len()
            } else {
                d.len() == l.len()
            };
            lengths_fit && d.iter().zip(l).all(|(dv, lv)| subset_at("", dv, lv))
        }
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (d, Value::Null) => is_empty(d),
        (d, l) => d == l,
    }
}

/// The part of `live` that `desired` sets, as the server keeps it: the same keys, our
/// elements of keyed lists, atomic lists whole. Two projections are equal when the live
/// object still holds what an earlier apply of `desired` made of it, canonical forms
/// (`500m` for `0.5`) included.
pub fn project(desired: &Value, live: &Value) -> Value {
    project_at("", desired, live)
}

fn project_at(field: &str, desired: &Value, live: &Value) -> Value {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => Value::Object(
            d.iter()
                .filter_map(|(k, dv)| Some((k.clone(), project_at(k, dv, l.get(k)?))))
                .collect::<Map<String, Value>>(),
        ),
        (Value::Array(d), Value::Array(l)) => {
            let mut out: Vec<Value> = d
                .iter()
                .zip(l)
                .map(|(dv, lv)| project_at("", dv, lv))
                .collect();
            if !is_keyed(field) {
                out.extend(l.iter().skip(d.len()).cloned());
            }
            Value::Array(out)
        }
        (_, l) => l.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secrets_string_data_is_compared_as_the_data_the_server_keeps() {
        let desired = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "stringData": {"a": "b"}, "data": {"c": "ZA=="}});
        let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "uid": "u"},
            "data": {"a": "Yg==", "c": "ZA=="}, "type": "Opaque"});
        assert!(is_subset(&desired, &live));
        let changed = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": "Yw==", "c": "ZA=="}});
        assert!(!is_subset(&desired, &changed), "a value changed by hand");
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "stringData": {"a": "b"}});
        assert!(
            !is_subset(&config, &json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            "only a Secret's stringData is write-only"
        );
    }
    use serde_json::json;

    #[test]
    fn server_defaults_and_other_fields_do_not_count_as_differences() {
        let desired = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "a"}]}}}});
        let live = json!({"spec": {"replicas": 2, "revisionHistoryLimit": 10, "template": {"spec": {"containers": [{"name": "web", "image": "a", "imagePullPolicy": "IfNotPresent"}]}}}, "status": {}});
        assert!(is_subset(&desired, &live));
    }

    #[test]
    fn a_changed_value_or_a_missing_element_is_a_difference() {
        assert!(!is_subset(&json!({"a": 1}), &json!({"a": 2})));
        assert!(!is_subset(&json!({"a": [1, 2]}), &json!({"a": [1]})));
        assert!(!is_subset(&json!({"a": "x"}), &json!({})));
    }

    #[test]
    fn an_element_appended_to_an_atomic_list_is_a_difference_but_not_to_a_keyed_one() {
        let desired = json!({"spec": {"containers": [{"name": "a", "args": ["x"]}], "tolerations": [{"key": "k"}]}});
        let appended_arg = json!({"spec": {"containers": [{"name": "a", "args": ["x", "--debug"]}], "tolerations": [{"key": "k"}]}});
        assert!(!is_subset(&desired, &appended_arg));
        let appended_toleration = json!({"spec": {"containers": [{"name": "a", "args": ["x"]}], "tolerations": [{"key": "k"}, {"key": "mine"}]}});
        assert!(!is_subset(&desired, &appended_toleration));
        let sidecar = json!({"spec": {"containers": [{"name": "a", "args": ["x"]}, {"name": "sidecar"}], "tolerations": [{"key": "k"}]}});
        assert!(
            is_subset(&desired, &sidecar),
            "another manager's container is left alone"
        );
    }

    #[test]
    fn the_projection_keeps_canonical_forms_and_shows_appended_atomic_elements() {
        let desired = json!({"resources": {"requests": {"cpu": "0.5"}}, "args": ["a"], "env": [{"name": "X", "value": "1"}]});
        let answer = json!({"resources": {"requests": {"cpu": "500m"}}, "args": ["a"], "env": [{"name": "X", "value": "1"}], "status": {"ready": 1}});
        let later = json!({"resources": {"requests": {"cpu": "500m"}}, "args": ["a"], "env": [{"name": "X", "value": "1"}, {"name": "Y"}], "status": {"ready": 2}});
        assert_eq!(
            project(&desired, &answer),
            project(&desired, &later),
            "status and others' keyed elements do not count"
        );
        let edited = json!({"resources": {"requests": {"cpu": "500m"}}, "args": ["a", "b"], "env": [{"name": "X", "value": "1"}]});
        assert_ne!(project(&desired, &answer), project(&desired, &edited));
    }

    #[test]
    fn empty_rendered_values_match_absent_ones_and_numbers_compare_by_value() {
        assert!(is_subset(
            &json!({"labels": {}, "args": [], "s": ""}),
            &json!({})
        ));
        assert!(is_subset(&json!({"n": 1}), &json!({"n": 1.0})));
    }
}
