//! `--label key=value`, checked as the API server checks a label.

/// `key=value` as a label: the key an optional DNS-subdomain prefix and a name of at most 63
/// characters, the value at most 63 (both alphanumerics, `-`, `_`, `.`, alphanumeric at the ends).
pub(super) fn parse_label(arg: &str) -> Result<(String, String), String> {
    let Some((key, value)) = arg.split_once('=') else {
        return Err(format!("{arg:?} is not KEY=VALUE (say --label team=web)"));
    };
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|s| {
                !s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !s.starts_with('-')
                    && !s.ends_with('-')
            });
        if !ok {
            return Err(format!(
                "the label key's prefix {p:?} is not a DNS subdomain (lowercase, such as team.example.com)"
            ));
        }
    }
    if name.is_empty() || !label_value_ok(name) {
        return Err(format!(
            "the label key {key:?} is not a label name (up to 63 of a-z, A-Z, 0-9, '-', '_', '.', alphanumeric at both ends)"
        ));
    }
    if !label_value_ok(value) {
        return Err(format!(
            "the label value {value:?} is not a label value (up to 63 of a-z, A-Z, 0-9, '-', '_', '.', alphanumeric at both ends, or empty)"
        ));
    }
    Ok((key.to_string(), value.to_string()))
}

fn label_value_ok(v: &str) -> bool {
    let edge = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && edge(v.chars().next())
        && edge(v.chars().last())
}

#[cfg(test)]
mod tests {
    use super::parse_label;

    #[test]
    fn labels_are_checked_as_the_api_server_would() {
        assert_eq!(parse_label("team=web"), Ok(("team".into(), "web".into())));
        assert_eq!(
            parse_label("ruleop.dev/installation="),
            Ok(("ruleop.dev/installation".into(), String::new()))
        );
        for bad in [
            "team",
            "=web",
            "Team.Example/x=y",
            "team=-web",
            "a/b/=c",
            &format!("t={}", "x".repeat(64)),
        ] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
    }
}
