//! Hover and go to definition: a field's type, default, values and description (of a
//! child's kind, the watched kind's `schema:`, or the rules format itself), a child id's
//! kind and name; from a child id anywhere to its `id:` line.

use super::complete::path_target;
use super::document::{Document, Part, path_at, span_at};
use super::fields;
use lsp_types::{Hover, HoverContents, MarkupContent, MarkupKind, Position, Range};
use serde_json::Value;

/// The word of ids and keys under column `col` (letters, digits, `_` and `-`).
fn word_at(line: &str, col: u32) -> Option<(String, u32, u32)> {
    span_at(line, col, |c| {
        c.is_ascii_alphanumeric() || c == '_' || c == '-'
    })
}

/// The 0-based line of the `id:` of the child named by the word under the cursor.
pub fn definition(doc: &Document, line: u32, col: u32) -> Option<u32> {
    let part = doc.part_at(line)?;
    let (word, _, _) = word_at(doc.line(line), col)?;
    let child = part.child(&word)?;
    Some((child.line - 1) as u32)
}

pub fn hover(doc: &Document, line: u32, col: u32) -> Option<Hover> {
    let part = doc.part_at(line)?;
    let text = doc.line(line);
    let (word, ws, we) = word_at(text, col)?;
    let (value, start, end) = if let Some(c) = part.child(&word) {
        let name = c.name.map(|n| format!(", named `{n}`")).unwrap_or_default();
        (
            format!("child `{}`: {} {}{name}", c.id, c.api_version, c.kind),
            ws,
            we,
        )
    } else if let Some(found) = field_hover(part, line, text, col) {
        found
    } else if let Some(meaning) = marker(part, line, text, we, &word) {
        (meaning, ws, we)
    } else {
        (format_key(part, line, &word)?, ws, we)
    };
    Some(Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value,
        }),
        range: Some(Range::new(
            Position::new(line, start),
            Position::new(line, end),
        )),
    })
}

/// The field a path under the cursor ends at (up to the segment under it).
fn field_hover(part: &Part, line: u32, text: &str, col: u32) -> Option<(String, u32, u32)> {
    let (path, start, _) = path_at(text, col)?;
    // The path up to the end of the segment under the cursor.
    let upto = (col.clamp(start, start + path.len() as u32) - start) as usize;
    let cut = path[upto..]
        .find(['.', '['])
        .map_or(path.len(), |i| upto + i);
    let path = &path[..cut];
    let t = path_target(part, line, path)?;
    let (last, parents) = t.rest.split_last()?;
    let root = Value::Null;
    let parent = fields::at(&root, &t.schema, parents)?;
    let field = parent["properties"].get(*last)?;
    let shown = format!("`{path}`: {}", fields::describe(&root, field));
    Some((shown, start, start + path.chars().count() as u32))
}

/// A marker of a `schema:` field line (`default` in `integer | default=2`): its meaning.
fn marker(part: &Part, line: u32, text: &str, end: u32, word: &str) -> Option<String> {
    let at = part.path_at(line as usize + 1)?;
    if !at.starts_with("schema.") || text.chars().nth(end as usize) != Some('=') {
        return None;
    }
    let (_, meaning) = crate::schema::fields::MARKERS
        .iter()
        .find(|(m, _)| *m == word)?;
    Some(format!("marker `{word}`: {meaning}"))
}

/// A key of the rules format on `line`: its description from the format's schema.
fn format_key(part: &Part, line: u32, word: &str) -> Option<String> {
    let at = part.path_at(line as usize + 1)?;
    if !at.ends_with(word) {
        return None;
    }
    let root = crate::rules::spec::json_schema();
    let segs = fields::segments(at);
    let (last, parents) = segs.split_last()?;
    let parent = fields::at(&root, &root, parents)?;
    let field = parent["properties"].get(*last)?;
    Some(format!("`{word}`: {}", fields::describe(&root, field)))
}
