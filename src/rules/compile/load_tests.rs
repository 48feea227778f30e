//! Rules loaded whole, as `ruleop check` loads them: what only the whole rule shows.

#[test]
fn a_status_expression_reading_no_status_field_is_refused_with_a_suggestion() {
    let text = "name: s\nwatch: {group: x.io, version: v1, resource: ss}\nchildren:\n  - id: d\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}\"}}\nstatus:\n  fields:\n    - {name: readyReplicas, type: integer, value: '1'}\n    - {name: url, type: string, value: \"'x' ~ status.url2\"}\n  ready: status.readyReplica >= 1\n";
    let (_, errors) = crate::rules::load_str(text, std::path::Path::new("s.yaml"));
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        all.iter().any(|e| e.contains("s.yaml:10")
            && e.contains("`status.readyReplica`")
            && e.contains("did you mean `status.readyReplicas`")),
        "{all:#?}"
    );
    assert!(
        all.iter()
            .any(|e| e.contains("s.yaml:9") && e.contains("`status.url2`")),
        "{all:#?}"
    );
}

#[test]
fn a_filter_named_in_a_string_argument_is_checked_at_load() {
    let text = "name: s\nwatch: {group: x.io, version: v1, resource: ss}\nchildren:\n  - id: d\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}\"}}\nstatus:\n  fields:\n    - {name: urls, type: array, value: \"spec.hosts | map('prepand', 'https://') | list\"}\n";
    let (_, errors) = crate::rules::load_str(text, std::path::Path::new("s.yaml"));
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        all.iter()
            .any(|e| e.contains("unknown filter `prepand`")
                && e.contains("did you mean `prepend`")),
        "{all:#?}"
    );
}

/// The errors of a rule whose one ConfigMap child is named `name` (a YAML scalar as written).
fn name_errors(name: &str) -> Vec<String> {
    let text = format!(
        "name: n\nwatch: {{group: x.io, version: v1, resource: ns}}\nchildren:\n  - id: c\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n        name: {name}\n"
    );
    let (_, errors) = crate::rules::load_str(&text, std::path::Path::new("n.yaml"));
    errors.iter().map(ToString::to_string).collect()
}

#[test]
fn a_name_no_render_could_make_valid_is_refused_and_one_a_render_can_is_not() {
    for bad in ["_Content", "\"{{ name }}_Content\"", "\"{{ name }}-{ä}\""] {
        assert!(
            name_errors(bad).iter().any(|e| e.contains("n.yaml:9")),
            "{bad}: {:?}",
            name_errors(bad)
        );
    }
    for fine in [
        "\"{{ name }}-web\"",
        "|\n          {{ name }}-web",
        ">-\n          {{ name }}-\n          {{- 'x' }}",
        "\"{% filter lower %}Web-{{ name }}{% endfilter %}\"",
        "\"{{ name }}{% if spec.legacy %}_old{% endif %}\"",
        "\"web{# old #}\"",
    ] {
        assert!(
            name_errors(fine).is_empty(),
            "{fine}: {:?}",
            name_errors(fine)
        );
    }
}

#[test]
fn an_array_status_field_takes_any_path_and_a_number_feeds_an_integer() {
    let text = "name: a\nwatch: {group: x.io, version: v1, resource: as}\nchildren:\n  - id: d\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: \"{{ name }}\"}\n      spec:\n        selector: {matchLabels: {app: x}}\n        template:\n          metadata: {labels: {app: x}}\n          spec: {containers: [{name: a, image: x}]}\nstatus:\n  fields:\n    - {name: all, from: d, path: $.status.readyReplicas, type: array}\n    - {name: conditions, from: d, path: $.status.conditions, type: integer}\n";
    let (_, errors) = crate::rules::load_str(text, std::path::Path::new("a.yaml"));
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(
        all[0].contains("a.yaml:17") && all[0].contains("gives an array"),
        "{all:#?}"
    );
}
