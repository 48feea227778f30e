use super::*;
use serde_json::json;

fn spec_with(props: Value, rules: Value) -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": props, "x-kubernetes-validations": rules},
    }})
}

fn cost_of(props: Value, rule: &str) -> RuleCost {
    let s = spec_with(props, json!([{"rule": rule}]));
    estimate(&s).remove(0)
}

#[test]
fn a_comparison_of_integers_costs_its_reads() {
    // self (1) + .size (1) + the comparison (1).
    let r = cost_of(json!({"size": {"type": "integer"}}), "self.size <= 10");
    assert_eq!((r.per_call, r.times, r.cost), (3, 1, 3));
    assert!(r.unbounded.is_empty());
}

#[test]
fn a_loop_over_an_unbounded_map_costs_a_request_full_of_it() {
    let props = json!({"content": {"type": "object", "additionalProperties": {"type": "string"}}});
    // 393,215 keys fit in 3 MiB; each costs its condition (2) and step (1 + 2).
    let r = cost_of(props.clone(), "self.content.all(k, k.startsWith('a'))");
    assert_eq!(r.per_call, 2 + 393_215 * 5 + 1);
    let r = cost_of(
        props,
        "self.content.all(k, self.content[k].matches('^[a-z]+$'))",
    );
    assert!(r.cost > PER_RULE, "{}", r.cost);
    let markers: Vec<_> = r
        .unbounded
        .iter()
        .map(|u| (u.field.as_str(), u.marker, u.of_items))
        .collect();
    assert_eq!(
        markers,
        [
            ("spec.content", "maxLength", true),
            ("spec.content", "maxProperties", false)
        ]
    );
}

#[test]
fn bounds_bring_the_same_rule_under_the_limit() {
    let props = json!({"content": {"type": "object", "maxProperties": 64,
        "additionalProperties": {"type": "string", "maxLength": 253}}});
    let r = cost_of(
        props,
        "self.content.all(k, self.content[k].matches('^[a-z]+$'))",
    );
    // 64 keys × (condition 2 + step 1 + index 4 + matches ⌈1013 × 0.1⌉ × 8 × 0.25) + 3.
    assert_eq!(r.cost, 64 * (2 + 1 + 4 + 102 * 2) + 3);
    assert!(r.unbounded.is_empty());
}

#[test]
fn a_rule_under_an_unbounded_list_runs_once_per_item_that_fits() {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "hosts": {"type": "array", "items": {"type": "string",
            "x-kubernetes-validations": [{"rule": "self.matches('^[a-z.]+$')"}]}},
    }}}});
    let r = estimate(&s).remove(0);
    // Each item is at least `""` and a comma: 3 MiB / 3 of them.
    assert_eq!(r.times, 1_048_576);
    let fields: Vec<_> = r
        .unbounded
        .iter()
        .map(|u| (u.field.as_str(), u.marker))
        .collect();
    assert!(fields.contains(&("spec.hosts", "maxItems")), "{fields:?}");
    assert!(fields.contains(&("spec.hosts", "maxLength")), "{fields:?}");
    let refused = check(&s);
    assert_eq!(refused.len(), 1);
    assert!(refused[0].fix.contains("on the line of `spec.hosts`, maxItems=… (how many items it may hold) and maxLength=… (how long each item or value may be)"), "{}", refused[0].fix);
}

#[test]
fn the_limit_for_all_rules_together_is_checked() {
    let rule = "self.content.all(k, k.startsWith('a'))";
    let rules: Vec<Value> = (0..60).map(|_| json!({"rule": rule})).collect();
    let props = json!({"content": {"type": "object", "additionalProperties": {"type": "string"}}});
    let refused = check(&spec_with(props, Value::Array(rules)));
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].problem.contains("together"),
        "{}",
        refused[0].problem
    );
}

#[test]
fn string_comparisons_cost_by_length_and_integers_do_not() {
    let props = json!({"a": {"type": "string", "maxLength": 100}, "b": {"type": "string", "maxLength": 50},
        "n": {"type": "integer"}});
    // Strings: 4 bytes a character; the shorter side, a tenth a byte.
    let r = cost_of(props.clone(), "self.a < self.b");
    assert_eq!(r.per_call, 2 + 2 + 20);
    let r = cost_of(props, "self.n < 3");
    assert_eq!(r.per_call, 3);
}

#[test]
fn a_rule_that_does_not_parse_has_no_estimate() {
    let s = spec_with(json!({}), json!([{"rule": "self.("}]));
    assert!(estimate(&s).is_empty());
}

#[test]
fn map_and_filter_results_carry_their_sizes() {
    let props = json!({"items": {"type": "array", "maxItems": 10,
        "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}}}});
    let r = cost_of(props, "self.items.map(i, i.name).all(n, n.size() > 0)");
    assert!(r.per_call < 1_000, "{}", r.per_call);
}

#[test]
fn big_numbers_read_in_thousands() {
    assert_eq!(thousands(10_000_000), "10,000,000");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1_000), "1,000");
}
