//! The attribute chains a template or expression reads from a variable, as written:
//! `children.deployment.status.readyReplicas`, `observed.lb.status.loadBalancer.ingress[0].ip`,
//! `rendered['my-config'].data`. minijinja lists the dotted part of a chain only up to its
//! first subscript; this reads on through constant subscripts, so a field after `[0]` is
//! checked too. A method call (`.items()`) ends a chain before the method; a subscript
//! that is not a constant stands for one item or value.

use crate::rules::helpers::tokens;
use crate::schema::path::Seg;

/// A chain from a variable: its variable, the steps after it, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Chain {
    pub root: String,
    pub segs: Vec<Seg>,
    /// As written (`children.deployment.status.readyReplica`), for messages.
    pub text: String,
    /// The length of `text` up to the end of each step.
    pub ends: Vec<usize>,
    /// The id after the variable was a constant (`rendered.web`, `rendered['my-web']`);
    /// false when it was an expression (`rendered[x]`), and then `segs` are of no use.
    pub named: bool,
}

impl Chain {
    /// The chain up to (not including) its last `n` steps: `children.web` of
    /// `children.web.status.x` with n = 2.
    pub fn head(&self, n: usize) -> &str {
        let keep = self.segs.len().saturating_sub(n);
        match keep {
            0 => &self.root,
            k => &self.text[..self.ends[k - 1]],
        }
    }
}

fn is_int(t: &str) -> bool {
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
}

fn is_name(t: &str) -> bool {
    t.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

fn quoted(t: &str) -> Option<&str> {
    let q = t.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    t.strip_prefix(q)?.strip_suffix(q)
}

/// Every chain in `code` (an expression, or the code of a text template's blocks) that
/// starts at one of `roots` (a variable, not an attribute of something else).
pub(super) fn chains(code: &str, roots: &[&str]) -> Vec<Chain> {
    let toks = tokens(code);
    let mut out = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let attribute = i > 0 && toks[i - 1] == ".";
        // `f(children=…)`, `{% set rendered = … %}`: a name, not a read.
        let assigned =
            toks.get(i + 1).is_some_and(|n| n == "=") && toks.get(i + 2).is_none_or(|n| n != "=");
        if attribute || assigned || !roots.contains(&t.as_str()) {
            continue;
        }
        out.push(chain(&toks, i));
    }
    out
}

/// The chain starting at token `i`.
fn chain(toks: &[String], i: usize) -> Chain {
    let tok = |j: usize| toks.get(j).map(String::as_str).unwrap_or("");
    let mut c = Chain {
        root: toks[i].clone(),
        segs: Vec::new(),
        text: toks[i].clone(),
        ends: Vec::new(),
        named: true,
    };
    let mut j = i + 1;
    loop {
        if tok(j) == "." && is_name(tok(j + 1)) {
            c.segs.push(Seg::Field(tok(j + 1).to_string()));
            c.text.push_str(&format!(".{}", tok(j + 1)));
            j += 2;
        } else if tok(j) == "." && is_int(tok(j + 1)) {
            c.segs.push(Seg::Item);
            c.text.push_str(&format!(".{}", tok(j + 1)));
            j += 2;
        } else if tok(j) == "[" && tok(j + 2) == "]" {
            let inside = tok(j + 1);
            match quoted(inside) {
                Some(key) => c.segs.push(Seg::Field(key.to_string())),
                None if is_int(inside) => c.segs.push(Seg::Item),
                None if is_name(inside) => {
                    // `rendered[x]`: which child is not known.
                    if c.segs.is_empty() {
                        c.named = false;
                    }
                    c.segs.push(Seg::Item);
                }
                None => break,
            }
            c.text.push_str(&format!("[{inside}]"));
            j += 3;
        } else if tok(j) == "[" && tok(j + 1) == "-" && is_int(tok(j + 2)) && tok(j + 3) == "]" {
            c.segs.push(Seg::Item);
            c.text.push_str(&format!("[-{}]", tok(j + 2)));
            j += 4;
        } else {
            break;
        }
        c.ends.push(c.text.len());
    }
    // `x.items()`: a method of the value, not a field.
    if tok(j) == "(" && matches!(c.segs.last(), Some(Seg::Field(_))) {
        c.segs.pop();
        c.ends.pop();
        c.text
            .truncate(c.ends.last().copied().unwrap_or(c.root.len()));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &str) -> Seg {
        Seg::Field(s.into())
    }

    fn one(code: &str) -> Chain {
        let mut all = chains(code, &["rendered", "children", "child"]);
        assert_eq!(all.len(), 1, "{code}: {all:?}");
        all.remove(0)
    }

    #[test]
    fn dotted_chains_and_subscripts_are_read_to_their_end() {
        let c = one("children.deployment.status.readyReplicas >= spec.replicas");
        assert_eq!(c.root, "children");
        assert_eq!(
            c.segs,
            vec![f("deployment"), f("status"), f("readyReplicas")]
        );
        assert_eq!(c.text, "children.deployment.status.readyReplicas");
        let c = one("child.status.loadBalancer.ingress[0].ip");
        assert_eq!(
            c.segs,
            vec![
                f("status"),
                f("loadBalancer"),
                f("ingress"),
                Seg::Item,
                f("ip")
            ]
        );
        assert_eq!(c.text, "child.status.loadBalancer.ingress[0].ip");
        let c = one("rendered['my-config'].data | sha256");
        assert_eq!(c.segs, vec![f("my-config"), f("data")]);
        assert_eq!(c.head(1), "rendered['my-config']");
        assert_eq!(c.head(2), "rendered");
        assert!(c.named);
        let c = one("child.status.conditions[-1].type");
        assert_eq!(
            c.segs,
            vec![f("status"), f("conditions"), Seg::Item, f("type")]
        );
        let c = one("child.spec.ports.0.port");
        assert_eq!(c.segs, vec![f("spec"), f("ports"), Seg::Item, f("port")]);
    }

    #[test]
    fn methods_variables_and_strings_end_or_skip_a_chain() {
        let c = one("child.metadata.labels.items() | list");
        assert_eq!(c.segs, vec![f("metadata"), f("labels")]);
        assert_eq!(c.text, "child.metadata.labels");
        let c = one("rendered[name].data");
        assert!(!c.named);
        let c = one("child.status.conditions[i + 1].type");
        assert_eq!(c.segs, vec![f("status"), f("conditions")]);
        assert!(chains("'children.x.y' ~ name", &["children"]).is_empty());
        assert!(chains("spec.children.x", &["children"]).is_empty());
        assert!(chains("dict(children=1)", &["children"]).is_empty());
        assert_eq!(
            chains("children.a.b if children.a else children.c", &["children"]).len(),
            3
        );
    }

    #[test]
    fn broken_code_gives_short_chains_and_no_panic() {
        for code in [
            "rendered[",
            "rendered.",
            "rendered[-",
            "rendered[-1",
            "child.(",
            "child.a(",
            "children['a'](",
            "rendered['a",
            "child[0",
            "child..a",
            "child.0.",
            "'child.a",
            "child.é.ü[0]",
            "(child).a",
            "child",
            "",
        ] {
            for c in chains(code, &["rendered", "children", "child"]) {
                assert_eq!(c.ends.len(), c.segs.len(), "{code}");
                let _ = c.head(0);
                let _ = c.head(c.segs.len());
            }
        }
        assert_eq!(one("child.a(").segs, vec![]);
        assert_eq!(one("child.é.ü[0]").segs, vec![f("é"), f("ü"), Seg::Item]);
    }
}
