//! The house's rules, read from the source itself (no cluster, no build of the crate's
//! graph): no import circle between files, no module using one above it in the pipeline,
//! and no function over 120 lines nor file over 600 (each short enough to hold in mind). Every `use` tree and every path written in code (`crate::…`, `super::…`,
//! a child module's name) is resolved to the file that defines it; comments and string
//! literals are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first: a module may use only those before it (and
/// itself). The pipeline is rules → render → apply → status → reconcile → operator → cli;
/// the request path (`client`), the caches (`cache`) and `events` sit where their users
/// need them.
const LAYERS: &[&str] = &[
    "suggest",
    "metrics",
    "client",
    "schema",
    "rules",
    "access",
    "render",
    "convert",
    "apply",
    "status",
    "rollout",
    "lifecycle",
    "ruletest",
    "cache",
    "events",
    "reconcile",
    "operator",
    "rbac",
    "lsp",
    "cli",
];

/// A source file: its module path (`["rules", "compile"]` for `src/rules/compile/mod.rs`).
struct Source {
    module: Vec<String>,
    text: String,
}

fn sources(root: &Path) -> Vec<(PathBuf, Source)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && path != root.join("main.rs") {
                // (main.rs is the binary's own crate: it only calls `ruleop::cli::main`.)
                let rel = path.strip_prefix(root).expect("under src/");
                let mut module: Vec<String> = rel
                    .with_extension("")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if matches!(
                    module.last().map(String::as_str),
                    Some("mod" | "lib" | "main")
                ) {
                    module.pop();
                }
                let text = std::fs::read_to_string(&path).expect("a readable source file");
                out.push((rel.to_path_buf(), Source { module, text }));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The code of a file with comments, string and character literals blanked out.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&c, i) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' {
            // A character literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                // The quote, the backslash and the escaped character ('\'' too), then up to
                // the closing quote ('\u{1F600}').
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c[i]);
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn ident_before(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let c: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_alphanumeric() || c[i] == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
        } else if c[i].is_whitespace() {
            i += 1;
        } else {
            out.push(c[i].to_string());
            i += 1;
        }
    }
    out
}

/// The paths of a `use` tree starting at `tokens[*i]`, each with the prefix before it.
fn use_tree(t: &[String], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    loop {
        match t.get(*i).map(String::as_str) {
            Some("{") => {
                *i += 1;
                while t.get(*i).is_some_and(|s| s != "}") {
                    use_tree(t, i, path.clone(), out);
                    if t.get(*i).is_some_and(|s| s == ",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Some("*") => {
                *i += 1;
                out.push(path);
                return;
            }
            Some("::") => *i += 1,
            Some("as") => {
                *i += 2;
                out.push(path);
                return;
            }
            Some(s) if s.chars().all(|ch| ch.is_alphanumeric() || ch == '_') => {
                if s != "self" || path.is_empty() {
                    path.push(s.to_string());
                }
                *i += 1;
            }
            _ => {
                out.push(path);
                return;
            }
        }
    }
}

/// The module paths a file refers to, each already relative to the crate root, or None
/// for a path outside the crate.
fn references(src: &Source, modules: &BTreeSet<Vec<String>>) -> Vec<Vec<String>> {
    let t = tokens(&code_only(&src.text));
    let mut out = Vec::new();
    // Inline modules (`mod tests { … }`): their names and the depth they close at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        let here: Vec<String> = src
            .module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        match t[i].as_str() {
            "{" => {
                depth += 1;
                i += 1;
            }
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
                i += 1;
            }
            "mod" if t.get(i + 2).is_some_and(|s| s == "{") => {
                inline.push((t[i + 1].clone(), depth + 1));
                i += 2;
            }
            "use" => {
                i += 1;
                if t.get(i).is_some_and(|s| s == "::") {
                    i += 1;
                }
                let mut paths = Vec::new();
                use_tree(&t, &mut i, Vec::new(), &mut paths);
                out.extend(paths.iter().filter_map(|p| resolve(&here, p, modules)));
            }
            "in" if i > 0 && t[i - 1] == "(" => {
                // `pub(in crate::x)`: a visibility, not a use.
                while t.get(i).is_some_and(|s| s != ")") {
                    i += 1;
                }
            }
            s if (s == "crate" || s == "super" || is_child(&here, s, modules))
                && t.get(i + 1).is_some_and(|n| n == "::")
                && (i == 0 || t[i - 1] != "::") =>
            {
                let mut path = vec![s.to_string()];
                i += 1;
                while t.get(i).is_some_and(|n| n == "::")
                    && t.get(i + 1)
                        .is_some_and(|n| n.chars().all(|ch| ch.is_alphanumeric() || ch == '_'))
                {
                    path.push(t[i + 1].clone());
                    i += 2;
                }
                out.extend(resolve(&here, &path, modules));
            }
            _ => i += 1,
        }
    }
    out
}

fn is_child(here: &[String], name: &str, modules: &BTreeSet<Vec<String>>) -> bool {
    let mut m = here.to_vec();
    m.push(name.to_string());
    modules.contains(&m)
}

/// A path as written, from module `here`, made absolute; None outside the crate.
fn resolve(
    here: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String>;
    let mut rest = path;
    if first == "crate" {
        base = Vec::new();
        rest = &path[1..];
    } else if first == "super" || first == "self" {
        base = here.to_vec();
        while rest.first().is_some_and(|s| s == "super" || s == "self") {
            if rest[0] == "super" {
                base.pop();
            }
            rest = &rest[1..];
        }
    } else if is_child(here, first, modules) {
        base = here.to_vec();
    } else {
        return None;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The file that defines the longest module prefix of `path`.
fn file_of<'a>(
    path: &[String],
    files: &'a BTreeMap<Vec<String>, PathBuf>,
    inline_of: &'a BTreeMap<Vec<String>, Vec<String>>,
) -> Option<&'a PathBuf> {
    (0..=path.len()).rev().find_map(|n| {
        let p = &path[..n];
        files
            .get(p)
            .or_else(|| inline_of.get(p).and_then(|f| files.get(f)))
    })
}

struct Graph {
    files: Vec<PathBuf>,
    edges: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

fn graph() -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = sources(&root);
    let files: BTreeMap<Vec<String>, PathBuf> = all
        .iter()
        .map(|(p, s)| (s.module.clone(), p.clone()))
        .collect();
    // Inline modules (`mod tests { … }`) belong to the file they are written in.
    let mut inline_of = BTreeMap::new();
    for (_, s) in &all {
        let t = tokens(&code_only(&s.text));
        for w in t.windows(3) {
            if w[0] == "mod" && w[2] == "{" {
                let mut m = s.module.clone();
                m.push(w[1].clone());
                inline_of.insert(m, s.module.clone());
            }
        }
    }
    let modules: BTreeSet<Vec<String>> = files.keys().chain(inline_of.keys()).cloned().collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (path, s) in &all {
        let to = edges.entry(path.clone()).or_default();
        for r in references(s, &modules) {
            if let Some(f) = file_of(&r, &files, &inline_of)
                && f != path
            {
                to.insert(f.clone());
            }
        }
    }
    Graph {
        files: all.into_iter().map(|(p, _)| p).collect(),
        edges,
    }
}

/// The strongly connected groups of more than one file (Tarjan's algorithm).
fn circles(g: &Graph) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                group.push(w.clone());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for f in &g.files {
        if !s.index.contains_key(f) {
            visit(&mut s, f);
        }
    }
    s.out
}

fn top(path: &Path) -> String {
    let first = path
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// The uses between the files of one circle, one per line.
fn within(g: &Graph, group: &[PathBuf]) -> String {
    let mut lines = vec![format!("  a circle of {} files:", group.len())];
    for from in group {
        for to in g.edges.get(from).into_iter().flatten() {
            if group.contains(to) {
                lines.push(format!("    {} uses {}", from.display(), to.display()));
            }
        }
    }
    lines.join("\n")
}

/// The uses that go up the layers, one per line.
fn upward(g: &Graph, layers: &[&str]) -> Vec<String> {
    let rank = |p: &Path| {
        let t = top(p);
        (t.clone(), layers.iter().position(|l| *l == t))
    };
    let mut wrong = Vec::new();
    for (from, tos) in &g.edges {
        let (ft, fr) = rank(from);
        if ft == "lib" {
            continue;
        }
        if fr.is_none() {
            wrong.push(format!(
                "  src/{} is in no layer: add `{ft}` to LAYERS",
                from.display()
            ));
        }
        for to in tos {
            let (tt, tr) = rank(to);
            if tt != ft && tr > fr {
                wrong.push(format!("  {} uses {}", from.display(), to.display()));
            }
        }
    }
    wrong
}

#[test]
fn no_file_is_in_an_import_circle() {
    let g = graph();
    let found = circles(&g);
    assert!(
        found.is_empty(),
        "files that import each other (directly or round a circle):\n{}",
        found
            .iter()
            .map(|c| within(&g, c))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn no_module_uses_one_above_it_in_the_pipeline() {
    let wrong = upward(&graph(), LAYERS);
    assert!(
        wrong.is_empty(),
        "arrows up the pipeline ({}):\n{}",
        LAYERS.join(" → "),
        wrong.join("\n")
    );
}

#[test]
fn a_planted_circle_and_an_arrow_up_are_found() {
    let f = |s: &str| PathBuf::from(s);
    let edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = [
        (f("rules/a.rs"), [f("rules/b.rs")].into()),
        (f("rules/b.rs"), [f("rules/c.rs")].into()),
        (
            f("rules/c.rs"),
            [f("rules/a.rs"), f("render/mod.rs")].into(),
        ),
        (f("render/mod.rs"), [f("rules/a.rs")].into()),
        (f("render/x.rs"), BTreeSet::new()),
    ]
    .into();
    let g = Graph {
        files: edges.keys().cloned().collect(),
        edges,
    };
    let found = circles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].len(),
        4,
        "render/mod.rs closes the circle too: {found:?}"
    );
    assert_eq!(
        upward(&g, &["rules", "render"]),
        ["  rules/c.rs uses render/mod.rs"]
    );
    let unlayered = upward(&g, &["rules"]);
    assert!(
        unlayered
            .iter()
            .filter(|l| l.contains("is in no layer"))
            .count()
            == 2,
        "render is in no layer: {unlayered:?}"
    );
}

#[test]
fn the_reader_finds_uses_in_trees_paths_and_child_modules() {
    let modules: BTreeSet<Vec<String>> = [
        vec!["a".to_string()],
        vec!["a".to_string(), "b".to_string()],
        vec!["a".to_string(), "c".to_string()],
        vec!["d".to_string()],
    ]
    .into();
    let src = Source {
        module: vec!["a".into()],
        text: r#"
            use crate::d::{self, X as Y};
            // use crate::nothing;
            pub(in crate::d) fn f() { let s = "crate::nothing::x"; let q = ['\'','"']; b::g(); }
            mod tests { use super::c::Z; }
        "#
        .into(),
    };
    let mut found: Vec<String> = references(&src, &modules)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    found.sort();
    found.dedup();
    assert_eq!(found, ["a::b::g", "a::c::Z", "d", "d::X"]);
}

/// The most lines a function may take, and a file.
const FUNCTION_LINES: usize = 120;
const FILE_LINES: usize = 600;

/// Each function of `code` (comments and literals blanked) longer than `most` lines, from
/// its `fn` line to the brace that closes it: (its name, its first line, its length).
fn long_functions(code: &str, most: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let Some(at) = t.find("fn ") else { continue };
        let head = &t[..at];
        let qualifiers = head.split_whitespace().all(|w| {
            ["pub", "async", "const", "unsafe", "extern"].contains(&w) || w.starts_with("pub(")
        });
        if !qualifiers {
            continue;
        }
        let name: String = t[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body: from the first `{` after the signature to the brace that closes it.
        let mut depth = 0i32;
        let mut opened = false;
        let mut end = None;
        'scan: for (j, l) in lines.iter().enumerate().skip(i) {
            for ch in l.chars() {
                match ch {
                    ';' if !opened && depth == 0 => break 'scan,
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => {
                        depth -= 1;
                        if opened && depth == 0 {
                            end = Some(j);
                            break 'scan;
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Some(j) = end
            && j + 1 - i > most
        {
            out.push((name, i + 1, j + 1 - i));
        }
    }
    out
}

#[test]
fn no_function_is_over_120_lines_and_no_file_over_600() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut over = Vec::new();
    for (path, src) in sources(&root) {
        let lines = src.text.lines().count();
        if lines > FILE_LINES {
            over.push(format!(
                "src/{}: {lines} lines (split it by what it decides)",
                path.display()
            ));
        }
        for (name, at, n) in long_functions(&code_only(&src.text), FUNCTION_LINES) {
            over.push(format!(
                "src/{}:{at}: fn {name} is {n} lines",
                path.display()
            ));
        }
    }
    assert!(
        over.is_empty(),
        "over {FUNCTION_LINES} lines a function or {FILE_LINES} a file:\n  {}",
        over.join("\n  ")
    );
}

#[test]
fn a_long_function_is_measured_from_its_fn_to_its_closing_brace() {
    let body = "    let x = 1;\n".repeat(5);
    let code = format!(
        "pub(crate) async fn long(a: u8) -> u8 {{\n{body}    {{ inner }}\n}}\nfn short() {{}}\nfn declared();\nimpl X {{\n    fn method(&self) {{\n{body}    }}\n}}\n"
    );
    let found = long_functions(&code, 5);
    assert_eq!(
        found,
        vec![("long".to_string(), 1, 8), ("method".to_string(), 12, 7)]
    );
}
