//! Snippets that teach: a new child, a collection, a readiness check, a status field read
//! from a child, each a fragment `ruleop check` accepts as it is (the tests insert each
//! into a shipped rule and check it). Offered where they go: the first two as an item of
//! `children`, the readiness check inside a child, the status field as an item of
//! `status.fields`.

use lsp_types::{CompletionItem, CompletionItemKind, InsertTextFormat};

/// (where, label, what it shows, body): `where` is the path of the list or the mapping the
/// snippet goes in (`children[]`: inside one child).
pub const SNIPPETS: &[(&str, &str, &str, &str)] = &[
    (
        "children",
        "child: a ConfigMap",
        "a child object made from every resource, named after it",
        "- id: ${1:config}\n  template:\n    apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: \"{{ name }}-${1:config}\"\n    data:\n      ${2:greeting}: \"hello from {{ name }}\"\n",
    ),
    (
        "children",
        "collection: one ConfigMap per item",
        "`forEach`: one object per item of a list, the item as `item` (names must differ)",
        "- id: ${1:pages}\n  forEach: \"${2:['home', 'about']}\"\n  template:\n    apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: \"{{ name }}-{{ item }}\"\n    data:\n      page: \"{{ item }}\"\n",
    ),
    (
        "children[]",
        "readiness check",
        "`readyWhen`: when the live child (`child`) is ready, instead of its kind's built-in check",
        "readyWhen: ${1:child.status.observedGeneration >= 1}\n",
    ),
    (
        "status.fields",
        "status field from a child",
        "a status field read from a child with a JSONPath (`from`: its id)",
        "- name: ${1:availableReplicas}\n  from: ${2:deployment}\n  path: \\$.status.${3:availableReplicas}\n  type: integer\n  default: 0\n",
    ),
];

/// The snippets that go in the list or mapping at `parent` (`children`, `children[2]`,
/// `status.fields`).
pub fn at(parent: &str) -> Vec<CompletionItem> {
    let place = match parent {
        p if p.starts_with("children[") && p.ends_with(']') && !p[9..].contains('.') => {
            "children[]"
        }
        p => p,
    };
    SNIPPETS
        .iter()
        .filter(|(w, ..)| *w == place)
        .map(|(_, label, doc, body)| CompletionItem {
            label: label.to_string(),
            kind: Some(CompletionItemKind::SNIPPET),
            detail: Some(doc.to_string()),
            insert_text: Some(body.to_string()),
            insert_text_format: Some(InsertTextFormat::SNIPPET),
            ..Default::default()
        })
        .collect()
}
