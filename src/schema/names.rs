//! A rendered name is checked before it reaches a request's path: a name from a resource's
//! data (`{{ spec.suffix }}`) could otherwise hold `/`, `?` or `..` and address another
//! object or endpoint. Every kind's name must be a valid path segment; the built-in kinds
//! that require it must be a DNS-1123 subdomain, or (a Service) a DNS-1035 label.

/// Built-in kinds whose names are DNS-1123 subdomains.
const SUBDOMAIN: &[&str] = &[
    "ConfigMap",
    "Secret",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
    "Pod",
    "PersistentVolumeClaim",
    "ServiceAccount",
    "Ingress",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "Endpoints",
    "LimitRange",
    "ResourceQuota",
];

/// Built-in kinds whose names are DNS-1035 labels.
const LABEL: &[&str] = &["Service"];

/// Why `name` is not a valid name for an object of `kind` (by group and kind: only the
/// built-in kinds' own rules apply), if it is not.
pub fn invalid(group: &str, kind: &str, name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some(format!("{} characters, more than 253", name.len()));
    }
    if name == "." || name == ".." {
        return Some("`.` and `..` are not names".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | '%' | '?' | '#') || c.is_control())
    {
        return Some(format!("{c:?} may not appear in a name"));
    }
    let builtin = matches!(
        group,
        "" | "apps" | "batch" | "networking.k8s.io" | "autoscaling" | "policy"
    );
    if builtin && LABEL.contains(&kind) {
        let why = dns_label(name, 63).or_else(|| {
            (!name.starts_with(|c: char| c.is_ascii_lowercase()))
                .then(|| format!("{name:?} must start with a letter"))
        });
        return why.map(|why| format!("a {kind} name must be a DNS-1035 label (lowercase letters, digits and `-`, at most 63, starting with a letter and ending with a letter or digit): {why}"));
    }
    if builtin && kind == "CronJob" && name.len() > 52 {
        return Some(format!(
            "a CronJob name is at most 52 characters (its Jobs add 11): {} here",
            name.len()
        ));
    }
    if builtin && SUBDOMAIN.contains(&kind) {
        return subdomain(name).map(|why| format!("a {kind} name must be a DNS-1123 subdomain (lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit): {why}"));
    }
    None
}

fn subdomain(name: &str) -> Option<String> {
    name.split('.').find_map(|part| dns_label(part, 253))
}

fn dns_label(part: &str, max: usize) -> Option<String> {
    let ok_end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if part.len() > max {
        Some(format!("{part:?} is longer than {max}"))
    } else if let Some(c) = part
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        Some(format!("{c:?} is not allowed"))
    } else if !ok_end(part.chars().next()) || !ok_end(part.chars().last()) {
        Some(format!(
            "{part:?} must start and end with a letter or digit"
        ))
    } else {
        None
    }
}

/// A character of the literal text of a name template (`_Content` in
/// `"{{ name }}_Content"`) that no name of the kind may hold, if there is one.
pub fn never_in(group: &str, kind: &str, literal: &str) -> Option<char> {
    // (Whitespace a render may trim, `{{-` and a block scalar's line ends, is not judged.)
    literal
        .chars()
        .filter(|c| !c.is_whitespace())
        .find(|c| invalid(group, kind, &format!("a{c}a")).is_some())
}

#[cfg(test)]
mod tests {
    use super::invalid;

    #[test]
    fn a_name_that_would_change_the_request_path_is_refused_for_every_kind() {
        for bad in ["a/b", "..", "x?watch=1", "a%2fb", "a#b"] {
            assert!(invalid("example.com", "Widget", bad).is_some(), "{bad}");
            assert!(invalid("", "ConfigMap", bad).is_some(), "{bad}");
        }
        // A custom kind's own rules are the API server's: only the path is checked here.
        assert_eq!(invalid("example.com", "Widget", "Mixed_Case:ok"), None);
        // RBAC names may hold `:`.
        assert_eq!(
            invalid("rbac.authorization.k8s.io", "Role", "system:x"),
            None
        );
    }

    #[test]
    fn built_in_kinds_get_their_dns_rules() {
        assert_eq!(invalid("apps", "Deployment", "my-blog-web"), None);
        assert_eq!(invalid("", "ConfigMap", "a.b-c"), None);
        let upper = invalid("apps", "Deployment", "My-Blog").unwrap();
        assert!(
            upper.contains("DNS-1123 subdomain") && upper.contains("'M'"),
            "{upper}"
        );
        assert!(invalid("", "ConfigMap", "-x").is_some());
        assert!(invalid("", "ConfigMap", "").is_some());
        let dotted = invalid("", "Service", "a.b").unwrap();
        assert!(dotted.contains("DNS-1035 label"), "{dotted}");
        assert!(invalid("", "Service", "1web").is_some());
        assert!(invalid("batch", "CronJob", &"a".repeat(53)).is_some());
        assert!(invalid("", "Service", &"a".repeat(64)).is_some());
        assert_eq!(invalid("", "Service", "my-blog-web"), None);
    }
}
