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
