//! Completion: the fields of the object a path reads (after `children.<id>.`, `spec.`,
//! `existing.<id>.`, in a status field's JSONPath), child ids (after `children.`, in
//! `after`, `from`, `readyWhen`), and the keys of the rules format where a key goes.

use super::document::{Document, Part, path_before};
use super::fields;
use super::paths::{CHILD_HEADS, Target, target};
use lsp_types::{CompletionItem, CompletionItemKind, Documentation, MarkupContent, MarkupKind};
use serde_json::Value;

pub fn complete(doc: &Document, line: u32, col: u32) -> Vec<CompletionItem> {
    let Some(part) = doc.part_at(line) else {
        return Vec::new();
    };
    let text = doc.line(line);
    let before = path_before(text, col);
    if let Some((head, _partial)) = before.rsplit_once('.') {
        if CHILD_HEADS.contains(&head) {
            return child_ids(part);
        }
        if head == "existing" {
            return existing_ids(part);
        }
        return match path_target(part, line, head) {
            Some(t) => field_items(&t),
            None => Vec::new(),
        };
    }
    let prefix: String = text.chars().take(col as usize).collect();
    if let Some(items) = in_schema_line(part, line, &prefix) {
        return items;
    }
    if after_pipe(&prefix) {
        return filters();
    }
    let key = prefix.trim_start().trim_start_matches("- ");
    if ["after:", "from:", "readyWhen:"]
        .iter()
        .any(|k| key.starts_with(k))
        || in_list_of(doc, part, line, &["after", "readyWhen"])
    {
        return child_ids(part);
    }
    if !key.contains(':') {
        return format_keys(doc, part, line);
    }
    Vec::new()
}

/// Whether the cursor is where a filter's name goes: after `|` (and spaces) and the
/// letters typed of it.
fn after_pipe(prefix: &str) -> bool {
    let rest = prefix.trim_end_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
    rest.trim_end().ends_with('|') && !rest.trim_end().ends_with("||")
}

/// The template filters: ruleop's and minijinja's.
fn filters() -> Vec<CompletionItem> {
    let ours = crate::rules::helpers::FILTERS
        .iter()
        .map(|f| (f, "ruleop's filter"));
    let builtin = crate::rules::helpers::BUILTIN_FILTERS
        .iter()
        .map(|f| (f, "minijinja's filter or test"));
    ours.chain(builtin)
        .map(|(f, what)| item(f, CompletionItemKind::FUNCTION, what.to_string()))
        .collect()
}

/// In a field line of the rule's `schema:` (`replicas: integer | default=2`): the types
/// before `|`, the markers after it.
fn in_schema_line(part: &Part, line: u32, prefix: &str) -> Option<Vec<CompletionItem>> {
    let at = part.path_at(line as usize + 1)?;
    if !(at.starts_with("schema.spec.") || at.starts_with("schema.status.")) {
        return None;
    }
    let (_, value) = prefix.split_once(':')?;
    if !value.contains('|') {
        let types = crate::schema::fields::TYPES.iter();
        return Some(
            types
                .map(|t| {
                    item(
                        t,
                        CompletionItemKind::TYPE_PARAMETER,
                        format!("the type `{t}`"),
                    )
                })
                .collect(),
        );
    }
    let typing = value.rsplit(' ').next().unwrap_or_default();
    if typing.contains('=') {
        return Some(Vec::new());
    }
    Some(
        crate::schema::fields::MARKERS
            .iter()
            .map(|(m, what)| {
                let mut i = item(m, CompletionItemKind::PROPERTY, what.to_string());
                i.insert_text = Some(format!("{m}="));
                i
            })
            .collect(),
    )
}

/// What `path` (typed on `line`) reads: a template path, or a status field's JSONPath into
/// its `from` child.
pub fn path_target<'p>(part: &Part, line: u32, path: &'p str) -> Option<Target<'p>> {
    if let Some(json) = path.strip_prefix("$.") {
        let at = part.path_at(line as usize + 1)?;
        let field = at.strip_suffix(".path")?;
        let i: usize = field
            .strip_prefix("status.fields[")?
            .strip_suffix(']')?
            .parse()
            .ok()?;
        let from = part.value["status"]["fields"][i]["from"].as_str()?;
        let child = part.child(from)?;
        return Some(Target {
            schema: fields::kind_schema(&child.api_version, &child.kind)?,
            rest: fields::segments(json),
        });
    }
    target(part, path)
}

fn item(label: &str, kind: CompletionItemKind, doc: String) -> CompletionItem {
    CompletionItem {
        label: label.to_string(),
        kind: Some(kind),
        documentation: Some(Documentation::MarkupContent(MarkupContent {
            kind: MarkupKind::Markdown,
            value: doc,
        })),
        ..Default::default()
    }
}

fn field_items(t: &Target<'_>) -> Vec<CompletionItem> {
    let root = Value::Null;
    let Some(s) = fields::at(&root, &t.schema, &t.rest) else {
        return Vec::new();
    };
    fields::fields(&root, s)
        .into_iter()
        .map(|(name, doc)| item(&name, CompletionItemKind::FIELD, doc))
        .collect()
}

fn child_ids(part: &Part) -> Vec<CompletionItem> {
    part.children()
        .into_iter()
        .map(|c| {
            let doc = format!("child `{}`: {} {}", c.id, c.api_version, c.kind);
            item(&c.id, CompletionItemKind::REFERENCE, doc)
        })
        .collect()
}

fn existing_ids(part: &Part) -> Vec<CompletionItem> {
    part.value["existing"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let doc = format!(
                "existing `{}`: {} {}",
                e["id"].as_str()?,
                e["apiVersion"].as_str()?,
                e["kind"].as_str()?
            );
            Some(item(e["id"].as_str()?, CompletionItemKind::REFERENCE, doc))
        })
        .collect()
}

/// Whether `line` is an item of a block list under one of `keys` (`after:\n  - ...`).
fn in_list_of(doc: &Document, part: &Part, line: u32, keys: &[&str]) -> bool {
    let text = doc.line(line).trim_start();
    if !text.starts_with('-') {
        return false;
    }
    (0..line).rev().take(20).any(|l| {
        let t = doc.line(l).trim();
        let at = part.path_at(l as usize + 1).unwrap_or_default();
        keys.iter()
            .any(|k| t == format!("{k}:") || at.ends_with(&format!(".{k}")) && t.ends_with(':'))
    })
}

/// The keys of the rules format that go where `line` is (by its indentation).
fn format_keys(doc: &Document, part: &Part, line: u32) -> Vec<CompletionItem> {
    let root = crate::rules::spec::json_schema();
    let parent = parent_path(doc, part, line);
    let mut items = super::snippets::at(&parent);
    let segs = fields::segments(&parent);
    if let Some(s) = fields::at(&root, &root, &segs) {
        items.extend(
            fields::fields(&root, s)
                .into_iter()
                .map(|(name, doc)| item(&name, CompletionItemKind::PROPERTY, doc)),
        );
    }
    items
}

/// The indentation of a line's key (a list item's keys are two past its dash).
fn key_indent(text: &str) -> (usize, bool) {
    let lead = text.len() - text.trim_start().len();
    match text.trim_start().strip_prefix("- ") {
        Some(_) => (lead + 2, true),
        None => (lead, false),
    }
}

/// The path of the mapping a key on `line` belongs to ("" at the top).
fn parent_path(doc: &Document, part: &Part, line: u32) -> String {
    let (mine, my_dash) = key_indent(doc.line(line));
    for l in (0..line).rev() {
        let text = doc.line(l);
        if text.trim().is_empty() || text.trim_start().starts_with('#') {
            continue;
        }
        let (indent, dash) = key_indent(text);
        let path = part
            .index
            .path_at(l as usize + 1)
            .unwrap_or_default()
            .to_string();
        let up = |p: &str| {
            p.rfind(['.', '['])
                .map_or(String::new(), |i| p[..i].to_string())
        };
        if indent == mine && dash {
            // A sibling key of that item's, or (a new item) a sibling of the item.
            return if my_dash { up(&up(&path)) } else { up(&path) };
        }
        if indent < mine {
            return if text.trim_end().ends_with(':') {
                path
            } else {
                up(&path)
            };
        }
    }
    String::new()
}
