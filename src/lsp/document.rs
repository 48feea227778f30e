//! An open rules file as the language server sees it: its text, each YAML document parsed
//! as far as it parses (a file being typed is often broken), with the line of each node,
//! and the words under a position.

use crate::rules::lines::{LineIndex, index_documents};
use serde_json::Value;

/// One YAML document of the file: the rule it holds (`Null` where it does not parse) and
/// its lines. A Rule object's rule is its `spec`: its paths are the rule's under `spec.`.
pub struct Part {
    pub value: Value,
    pub index: LineIndex,
    /// The whole Rule object, when the document is one.
    pub object: Option<Value>,
    prefix: &'static str,
}

/// A child of a rule: its id, kind, and the (1-based) line of its `id:`.
pub struct Child {
    pub id: String,
    pub api_version: String,
    pub kind: String,
    pub line: usize,
    pub name: Option<String>,
}

pub struct Document {
    pub text: String,
    pub parts: Vec<Part>,
}

impl Document {
    pub fn parse(text: &str) -> Document {
        let index = index_documents(text).docs;
        let values = serde_yaml::Deserializer::from_str(text).map(|d| {
            <serde_yaml::Value as serde::Deserialize>::deserialize(d)
                .ok()
                .and_then(|v| serde_json::to_value(v).ok())
                .unwrap_or(Value::Null)
        });
        let parts = values
            .zip(index)
            .map(|(v, index)| Part::new(v, index))
            .collect();
        Document {
            text: text.to_string(),
            parts,
        }
    }

    /// The document `line` (0-based) is in: the last that starts at or before it.
    pub fn part_at(&self, line: u32) -> Option<&Part> {
        let line = line as usize + 1;
        self.parts
            .iter()
            .rev()
            .find(|p| p.index.start <= line)
            .or(self.parts.first())
    }

    /// The text of line `line` (0-based).
    pub fn line(&self, line: u32) -> &str {
        self.text.lines().nth(line as usize).unwrap_or("")
    }
}

impl Part {
    fn new(value: Value, index: LineIndex) -> Part {
        let is_rule = value["kind"] == crate::rules::object::KIND
            && value["apiVersion"]
                .as_str()
                .is_some_and(|a| a.starts_with(crate::rules::object::GROUP));
        match is_rule {
            true => Part {
                value: value["spec"].clone(),
                object: Some(value),
                index,
                prefix: "spec.",
            },
            false => Part {
                value,
                object: None,
                index,
                prefix: "",
            },
        }
    }

    /// The rule's path of the deepest node that starts on `line` (1-based).
    pub fn path_at(&self, line: usize) -> Option<&str> {
        self.index.path_at(line)?.strip_prefix(self.prefix)
    }

    /// The rule's children, from the text as it is (whether or not the rule compiles).
    pub fn children(&self) -> Vec<Child> {
        let Some(list) = self.value["children"].as_array() else {
            return Vec::new();
        };
        list.iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let t = &c["template"];
                Some(Child {
                    id: c["id"].as_str()?.to_string(),
                    api_version: t["apiVersion"].as_str().unwrap_or_default().to_string(),
                    kind: t["kind"].as_str().unwrap_or_default().to_string(),
                    line: self.index.line(&format!("{}children[{i}].id", self.prefix)),
                    name: t["metadata"]["name"].as_str().map(str::to_string),
                })
            })
            .collect()
    }

    pub fn child(&self, id: &str) -> Option<Child> {
        self.children().into_iter().find(|c| c.id == id)
    }
}

/// Whether `c` can be part of a path (`children.deployment.status.readyReplicas`,
/// `$.spec.x`, `items[0]`).
fn in_path(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '$' | '[' | ']')
}

/// The run of characters that `ok` takes around column `col` (0-based, in characters) of
/// `line`, and where it starts and ends.
pub fn span_at(line: &str, col: u32, ok: fn(char) -> bool) -> Option<(String, u32, u32)> {
    let chars: Vec<char> = line.chars().collect();
    let col = (col as usize).min(chars.len());
    let mut start = col;
    while start > 0 && ok(chars[start - 1]) {
        start -= 1;
    }
    let mut end = col;
    while end < chars.len() && ok(chars[end]) {
        end += 1;
    }
    (start < end).then(|| (chars[start..end].iter().collect(), start as u32, end as u32))
}

/// The path around column `col` of `line`, and where it starts and ends.
pub fn path_at(line: &str, col: u32) -> Option<(String, u32, u32)> {
    span_at(line, col, in_path)
}

/// The path that ends at column `col` (what is typed before the cursor).
pub fn path_before(line: &str, col: u32) -> String {
    let chars: Vec<char> = line.chars().collect();
    let col = (col as usize).min(chars.len());
    let mut start = col;
    while start > 0 && in_path(chars[start - 1]) {
        start -= 1;
    }
    chars[start..col].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: &str = "name: web\nchildren:\n  - id: config\n    template: {apiVersion: v1, kind: ConfigMap}\n  - id: deployment\n    after: [config]\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n";

    #[test]
    fn children_are_read_with_their_lines_and_paths_under_a_position() {
        let d = Document::parse(RULE);
        let part = d.part_at(5).unwrap();
        let c = part.child("deployment").unwrap();
        assert_eq!(
            (c.kind.as_str(), c.api_version.as_str(), c.line),
            ("Deployment", "apps/v1", 5)
        );
        assert_eq!(part.child("config").unwrap().line, 3);
        assert_eq!(
            path_at("    ready: children.deployment.status.x > 1", 25),
            Some(("children.deployment.status.x".to_string(), 11, 39))
        );
        assert_eq!(path_before("  x: \"{{ spec.rep", 17), "spec.rep");
    }
}
