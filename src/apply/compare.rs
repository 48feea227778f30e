//! Whether a live object already holds a rendered one: every rendered field present with
//! an equal value. The server adds defaults, status and other managers' fields; those are
//! ignored. Empty rendered values match absent live ones (the server drops them), and
//! numbers compare by value (`1` = `1.0`).

use serde_json::Value;

/// Whether `live` holds everything in `desired`.
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => is_subset(dv, lv),
            None => is_empty(dv),
        }),
        // Lists: same order; the live list may carry defaults in each element. Extra live
        // elements (another manager's entries in a keyed list) are left alone.
        (Value::Array(d), Value::Array(l)) => {
            d.len() <= l.len() && d.iter().zip(l).all(|(dv, lv)| is_subset(dv, lv))
        }
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (d, Value::Null) => is_empty(d),
        (d, l) => d == l,
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
    fn empty_rendered_values_match_absent_ones_and_numbers_compare_by_value() {
        assert!(is_subset(
            &json!({"labels": {}, "args": [], "s": ""}),
            &json!({})
        ));
        assert!(is_subset(&json!({"n": 1}), &json!({"n": 1.0})));
    }
}
