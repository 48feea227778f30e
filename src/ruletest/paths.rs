//! The field paths a test names (`absent`, `changed`, `unchanged`): dotted keys, list
//! items by `[n]`, and keys holding dots or slashes in quotes
//! (`metadata.annotations["checksum/config"]`, `metadata.labels['app.kubernetes.io/name']`).

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// The steps of `path`, or why it cannot be read (with the fix).
pub fn parse(path: &str) -> Result<Vec<Seg>, String> {
    let bad = |why: &str| {
        Err(format!(
            "path {path:?}: {why} (write keys with dots, items as [0], and a key with a dot or a slash in quotes: metadata.annotations[\"checksum/config\"])"
        ))
    };
    let mut segs = Vec::new();
    let mut rest = path.trim();
    if rest.is_empty() {
        return bad("empty");
    }
    while !rest.is_empty() {
        if let Some(inner) = rest.strip_prefix('[') {
            let Some(end) = close(inner) else {
                return bad("a `[` is not closed");
            };
            let body = inner[..end].trim();
            rest = &inner[end + 1..];
            match body.chars().next() {
                Some(q @ ('"' | '\'')) if body.len() >= 2 && body.ends_with(q) => {
                    segs.push(Seg::Key(body[1..body.len() - 1].to_string()));
                }
                _ => match body.parse() {
                    Ok(i) => segs.push(Seg::Index(i)),
                    Err(_) => {
                        return bad(&format!(
                            "[{body}] is neither an item number nor a quoted key"
                        ));
                    }
                },
            }
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            if end == 0 {
                return bad("a key is empty");
            }
            segs.push(Seg::Key(rest[..end].to_string()));
            rest = &rest[end..];
        }
        if let Some(after) = rest.strip_prefix('.') {
            if after.is_empty() || after.starts_with('.') {
                return bad("a key is empty");
            }
            rest = after;
        }
    }
    Ok(segs)
}

/// Where the `]` closing a bracket opened just before `s` is (quotes may hold one).
fn close(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ']') => return Some(i),
            _ => {}
        }
    }
    None
}

/// The value at `segs` in `v`, if there is one (a `null` is a value).
pub fn get<'a>(v: &'a Value, segs: &[Seg]) -> Option<&'a Value> {
    segs.iter().try_fold(v, |at, s| match s {
        Seg::Key(k) => at.as_object()?.get(k),
        Seg::Index(i) => at.as_array()?.get(*i),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_items_and_quoted_keys() {
        assert_eq!(
            parse(r#"spec.rules[0].http["paths"]"#).unwrap(),
            vec![
                Seg::Key("spec".into()),
                Seg::Key("rules".into()),
                Seg::Index(0),
                Seg::Key("http".into()),
                Seg::Key("paths".into())
            ]
        );
        assert_eq!(
            parse("metadata.annotations['checksum/config']").unwrap(),
            vec![
                Seg::Key("metadata".into()),
                Seg::Key("annotations".into()),
                Seg::Key("checksum/config".into())
            ]
        );
        assert_eq!(
            parse(r#"metadata.labels["a.b/c]"]"#).unwrap()[2],
            Seg::Key("a.b/c]".into())
        );
        for wrong in ["", "a..b", "a.", ".a", "a[x]", "a[0"] {
            let e = parse(wrong).unwrap_err();
            assert!(e.contains("in quotes"), "{wrong}: {e}");
        }
    }

    #[test]
    fn a_value_is_found_and_null_is_one() {
        let v = json!({"spec": {"tls": null, "rules": [{"host": "a"}]}});
        assert_eq!(
            get(&v, &parse("spec.rules[0].host").unwrap()),
            Some(&json!("a"))
        );
        assert_eq!(get(&v, &parse("spec.tls").unwrap()), Some(&Value::Null));
        assert_eq!(get(&v, &parse("spec.rules[1]").unwrap()), None);
        assert_eq!(get(&v, &parse("spec.rules.host").unwrap()), None);
    }
}
