//! Where each node of a YAML document stands in its file: a map from a dotted path
//! (`children[0].template.spec.replicas`) to its 1-based line. serde gives no positions
//! for values that deserialize fine but fail to compile, so errors look them up here.
//! Aliases are not expanded, so this pass costs no more than the text.

use std::collections::HashMap;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// Line numbers of one YAML document's nodes, by path.
#[derive(Debug, Default, Clone)]
pub struct LineIndex {
    lines: HashMap<String, usize>,
    /// Scalar values of `name` and `children[N].id`, so that errors from documents that
    /// do not deserialize can still name their rule and child.
    values: HashMap<String, String>,
    /// Line of the document's first node.
    pub start: usize,
    /// The deepest nesting seen, and the line where it was reached.
    pub max_depth: usize,
    pub deepest_line: usize,
}

impl LineIndex {
    /// The rule's `name`, if the document has one.
    pub fn rule_name(&self) -> Option<&str> {
        self.values.get("name").map(String::as_str)
    }

    /// The id of the child a path is under (`children[2].template...` → its id).
    pub fn child_id(&self, path: &str) -> Option<&str> {
        let start = path.find("children[")?;
        let end = start + path[start..].find(']')? + 1;
        self.values
            .get(&format!("{}.id", &path[start..end]))
            .map(String::as_str)
    }

    /// The deepest path that starts on `line` (the field a message about that line is
    /// about), if any.
    pub fn path_at(&self, line: usize) -> Option<&str> {
        self.lines
            .iter()
            .filter(|(_, l)| **l == line)
            .map(|(p, _)| p.as_str())
            .max_by_key(|p| (p.len(), std::cmp::Reverse(*p)))
    }

    /// The line of `path`, or of its nearest indexed ancestor.
    pub fn line(&self, path: &str) -> usize {
        let mut p = path;
        loop {
            if let Some(l) = self.lines.get(p) {
                return *l;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return self.start,
            }
        }
    }
}

/// The line index of a YAML stream.
#[derive(Debug, Default)]
pub struct Indexed {
    pub docs: Vec<LineIndex>,
    /// The parser's "recursion limit exceeded", with its line: the stream nests too deep.
    pub too_deep: Option<usize>,
}

/// Indexes every document of a YAML stream. A stream that does not parse gives what was
/// indexed before the error; the serde pass reports the error itself, except for nesting
/// too deep to be worth parsing again.
pub fn index_documents(text: &str) -> Indexed {
    let mut rx = Receiver::default();
    let mut parser = Parser::new_from_str(text);
    let too_deep = match parser.load(&mut rx, true) {
        Err(e) if e.info().contains("recursion limit") => Some(e.marker().line()),
        _ => None,
    };
    if rx.in_doc {
        rx.docs.push(std::mem::take(&mut rx.current));
    }
    Indexed {
        docs: rx.docs,
        too_deep,
    }
}

enum Frame {
    Map {
        path: String,
        key: Option<String>,
    },
    Seq {
        path: String,
        next: usize,
    },
    /// A complex key or other node whose path we do not track.
    Opaque,
}

#[derive(Default)]
struct Receiver {
    docs: Vec<LineIndex>,
    current: LineIndex,
    stack: Vec<Frame>,
    in_doc: bool,
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Nodes deeper than this are not indexed (they take their ancestor's line): paths grow
/// with depth, so indexing a pathologically deep document would cost its depth squared.
const MAX_DEPTH: usize = 64;

impl Receiver {
    /// The path of a node starting now, or None if it is a mapping key (recorded here).
    fn node_path(&mut self, ev: &Event, line: usize) -> Option<Option<String>> {
        if self.stack.len() >= MAX_DEPTH {
            return Some(None);
        }
        match self.stack.last_mut() {
            None => Some(Some(String::new())),
            Some(Frame::Opaque) => Some(None),
            Some(Frame::Seq { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                Some(Some(p))
            }
            Some(Frame::Map { path, key }) => match key.take() {
                Some(k) => Some(Some(join(path, &k))),
                None => {
                    if let Event::Scalar(s, ..) = ev {
                        let p = join(path, s);
                        self.current.lines.entry(p).or_insert(line);
                        *key = Some(s.clone());
                        None
                    } else {
                        // A complex key: track nothing below it, and skip its value too.
                        *key = Some(String::from("\u{0}complex"));
                        Some(None)
                    }
                }
            },
        }
    }
}

impl MarkedEventReceiver for Receiver {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::DocumentStart => {
                self.in_doc = true;
                self.current = LineIndex {
                    start: line,
                    ..Default::default()
                };
                self.stack.clear();
            }
            Event::DocumentEnd => {
                if self.in_doc {
                    self.docs.push(std::mem::take(&mut self.current));
                }
                self.in_doc = false;
            }
            Event::Scalar(..)
            | Event::Alias(_)
            | Event::MappingStart(..)
            | Event::SequenceStart(..) => {
                let Some(path) = self.node_path(&ev, line) else {
                    return; // a mapping key
                };
                if let Some(p) = &path {
                    self.current.lines.entry(p.clone()).or_insert(line);
                    if let Event::Scalar(v, ..) = &ev
                        && (p == "name"
                            || (p.starts_with("children[")
                                && p.ends_with("].id")
                                && p[9..].matches('.').count() == 1))
                    {
                        self.current.values.insert(p.clone(), v.clone());
                    }
                }
                match (ev, path) {
                    (Event::MappingStart(..), Some(p)) => {
                        self.stack.push(Frame::Map { path: p, key: None })
                    }
                    (Event::SequenceStart(..), Some(p)) => {
                        self.stack.push(Frame::Seq { path: p, next: 0 })
                    }
                    (Event::MappingStart(..) | Event::SequenceStart(..), None) => {
                        self.stack.push(Frame::Opaque)
                    }
                    _ => {}
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

/// The line of `path` in the document of `file` that holds line `anchor` (a line the
/// rule's compile recorded), reading the file again; `anchor` itself if the file cannot be
/// read. For messages about a rule found after it was compiled (the API server's answer to
/// a rendered child).
pub fn line_in_file(file: &std::path::Path, anchor: usize, path: &str) -> usize {
    let Ok(text) = std::fs::read_to_string(file) else {
        return anchor;
    };
    index_documents(&text)
        .docs
        .iter()
        .rev()
        .find(|d| d.start <= anchor)
        .map_or(anchor, |d| d.line(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_their_lines_in_each_document() {
        let text = "name: a\nchildren:\n  - id: x\n    template:\n      spec:\n        replicas: 1\n---\nname: b\n";
        let docs = index_documents(text).docs;
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].line("name"), 1);
        assert_eq!(docs[0].line("children[0].id"), 3);
        assert_eq!(docs[0].line("children[0].template.spec.replicas"), 6);
        assert_eq!(docs[1].line("name"), 8);
        assert_eq!(docs[0].rule_name(), Some("a"));
        assert_eq!(docs[0].child_id("children[0].template.spec"), Some("x"));
    }

    #[test]
    fn an_unknown_path_falls_back_to_its_nearest_ancestor() {
        let docs = index_documents("a:\n  b:\n    c: 1\n").docs;
        assert_eq!(docs[0].line("a.b.zzz"), 2);
        assert_eq!(docs[0].line("nothing"), 1);
    }
}
