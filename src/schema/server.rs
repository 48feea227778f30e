//! Checks the API server makes of built-in kinds that their OpenAPI schemas do not say: the
//! names it takes, an Ingress with no rules, a ConfigMap key with a slash, a selector that
//! does not match its pod template. Offline, so that `ruleop test` and `render --strict`
//! refuse what a real apply would. The list is in docs/testing.md ("Checked as the API server
//! would").

use serde_json::Value;
use std::sync::LazyLock;

/// One refusal: the field (a dotted path, empty for the object) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub field: String,
    pub problem: String,
}

static LABEL: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("regex"));
static SUBDOMAIN: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        .expect("regex")
});
static QUALIFIED: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").expect("regex")
});
static DATA_KEY: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[-._a-zA-Z0-9]+$").expect("regex"));

/// Why `s` is not a DNS-1123 label, if it is not.
fn dns_label(s: &str) -> Option<String> {
    (s.len() > 63 || !LABEL.is_match(s)).then(|| {
        format!("{s:?} is not a DNS-1123 label (at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)")
    })
}

/// Why `s` is not a DNS-1123 subdomain, if it is not.
fn dns_subdomain(s: &str) -> Option<String> {
    (s.len() > 253 || !SUBDOMAIN.is_match(s)).then(|| {
        format!("{s:?} is not a DNS-1123 subdomain (at most 253 lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)")
    })
}

/// Why `key` is not a label or annotation key, if it is not.
fn qualified_name(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(why) = prefix.and_then(dns_subdomain) {
        return Some(format!("the prefix of {key:?}: {why}"));
    }
    (name.is_empty() || name.len() > 63 || !QUALIFIED.is_match(name)).then(|| {
        format!("{key:?} is not a qualified name (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)")
    })
}

/// Everything the API server would refuse of `obj` beyond its schema.
pub fn refusals(obj: &Value) -> Vec<Refusal> {
    let mut out = Vec::new();
    let mut refuse = |field: &str, problem: String| {
        out.push(Refusal {
            field: field.to_string(),
            problem,
        })
    };
    let kind = obj["kind"].as_str().unwrap_or_default();
    metadata(kind, &obj["metadata"], &mut refuse);
    match kind {
        "ConfigMap" => data_keys(obj, &["data", "binaryData"], &mut refuse),
        "Secret" => data_keys(obj, &["data", "stringData"], &mut refuse),
        "Ingress" => ingress(&obj["spec"], &mut refuse),
        "Service" => service(&obj["spec"], &mut refuse),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => {
            selector_matches(&obj["spec"], &mut refuse);
            pod(
                &obj["spec"]["template"]["spec"],
                "spec.template.spec",
                &mut refuse,
            );
        }
        "Job" => pod(
            &obj["spec"]["template"]["spec"],
            "spec.template.spec",
            &mut refuse,
        ),
        "CronJob" => pod(
            &obj["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            "spec.jobTemplate.spec.template.spec",
            &mut refuse,
        ),
        "Pod" => pod(&obj["spec"], "spec", &mut refuse),
        _ => {}
    }
    out
}

fn metadata(kind: &str, meta: &Value, refuse: &mut impl FnMut(&str, String)) {
    if let Some(name) = meta["name"].as_str() {
        // A Service's name is a DNS-1035 label (it is a DNS name of its own: it starts with
        // a letter), a Namespace's a DNS-1123 label; RBAC objects take path segments
        // (`team:view`), checked by the schema alone.
        let why = match kind {
            "Service" => dns_label(name).or_else(|| {
                (!name.starts_with(|c: char| c.is_ascii_lowercase())).then(|| {
                    format!("{name:?} is not a DNS-1035 label (a Service's name starts with a lower-case letter)")
                })
            }),
            "Namespace" => dns_label(name),
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => None,
            _ => dns_subdomain(name),
        };
        if let Some(why) = why {
            refuse("metadata.name", why);
        }
    }
    for (k, v) in meta["labels"].as_object().into_iter().flatten() {
        let at = format!("metadata.labels[{k:?}]");
        if let Some(why) = qualified_name(k) {
            refuse(&at, why);
        }
        let value = v.as_str().unwrap_or_default();
        if !value.is_empty() && (value.len() > 63 || !QUALIFIED.is_match(value)) {
            refuse(
                &at,
                format!(
                    "the value {value:?} is not a label value (at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit; or empty)"
                ),
            );
        }
    }
    for k in meta["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        if let Some(why) = qualified_name(k) {
            refuse(&format!("metadata.annotations[{k:?}]"), why);
        }
    }
}

fn data_keys(obj: &Value, fields: &[&str], refuse: &mut impl FnMut(&str, String)) {
    let mut seen = std::collections::BTreeSet::new();
    for field in fields {
        for k in obj[*field]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            if k.len() > 253 || !DATA_KEY.is_match(k) {
                refuse(
                    &format!("{field}[{k:?}]"),
                    format!(
                        "{k:?} is not a valid key (letters, digits, '-', '_' and '.' only: no '/')"
                    ),
                );
            }
            if !seen.insert(k.clone()) && *field != "stringData" {
                refuse(
                    &format!("{field}[{k:?}]"),
                    format!("the key {k:?} is in both {}", fields.join(" and ")),
                );
            }
        }
    }
}

fn ingress(spec: &Value, refuse: &mut impl FnMut(&str, String)) {
    let rules = spec["rules"].as_array().map_or(&[][..], Vec::as_slice);
    if rules.is_empty() && spec.get("defaultBackend").is_none() {
        refuse("spec", "an Ingress needs `rules` or a `defaultBackend` (either `defaultBackend` or `rules` must be specified)".into());
    }
    for (i, r) in rules.iter().enumerate() {
        if let Some(host) = r["host"].as_str() {
            let bare = host.strip_prefix("*.").unwrap_or(host);
            if let Some(why) = dns_subdomain(bare) {
                refuse(&format!("spec.rules[{i}].host"), why);
            }
        }
        for (j, p) in r["http"]["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("spec.rules[{i}].http.paths[{j}]");
            let path_type = p["pathType"].as_str();
            if path_type.is_none() {
                refuse(
                    &format!("{at}.pathType"),
                    "`pathType` is required (Prefix, Exact or ImplementationSpecific)".into(),
                );
            }
            let path = p["path"].as_str().unwrap_or_default();
            if matches!(path_type, Some("Prefix" | "Exact")) && !path.starts_with('/') {
                refuse(
                    &format!("{at}.path"),
                    format!("{path:?} must be an absolute path (start with '/')"),
                );
            }
        }
    }
    for (i, t) in spec["tls"].as_array().into_iter().flatten().enumerate() {
        for (j, h) in t["hosts"].as_array().into_iter().flatten().enumerate() {
            let bare = h.as_str().unwrap_or_default();
            if let Some(why) = dns_subdomain(bare.strip_prefix("*.").unwrap_or(bare)) {
                refuse(&format!("spec.tls[{i}].hosts[{j}]"), why);
            }
        }
    }
}

fn service(spec: &Value, refuse: &mut impl FnMut(&str, String)) {
    let ports = spec["ports"].as_array().map_or(&[][..], Vec::as_slice);
    let mut names = std::collections::BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        match p["name"].as_str() {
            None | Some("") if ports.len() > 1 => refuse(
                &format!("{at}.name"),
                "a Service with more than one port needs a name for each".into(),
            ),
            Some(n) if !n.is_empty() => {
                if let Some(why) = dns_label(n) {
                    refuse(&format!("{at}.name"), why);
                }
                if !names.insert(n.to_string()) {
                    refuse(
                        &format!("{at}.name"),
                        format!("the port name {n:?} is used twice"),
                    );
                }
            }
            _ => {}
        }
        if let Some(n) = p["port"].as_i64().filter(|n| !(1..=65535).contains(n)) {
            refuse(
                &format!("{at}.port"),
                format!("{n} is not a port (1 to 65535)"),
            );
        }
    }
}

fn selector_matches(spec: &Value, refuse: &mut impl FnMut(&str, String)) {
    let labels = &spec["template"]["metadata"]["labels"];
    for (k, v) in spec["selector"]["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if labels.get(k) != Some(v) {
            refuse(
                "spec.selector",
                format!(
                    "`selector` does not match the template's labels ({k}: {v} is not among `spec.template.metadata.labels`)"
                ),
            );
        }
    }
}

fn pod(spec: &Value, at: &str, refuse: &mut impl FnMut(&str, String)) {
    let mut names = std::collections::BTreeSet::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let here = format!("{at}.{list}[{i}]");
            if let Some(n) = c["name"].as_str() {
                if let Some(why) = dns_label(n) {
                    refuse(&format!("{here}.name"), why);
                }
                if !names.insert(n.to_string()) {
                    refuse(
                        &format!("{here}.name"),
                        format!("the container name {n:?} is used twice"),
                    );
                }
            }
            for (j, p) in c["ports"].as_array().into_iter().flatten().enumerate() {
                if let Some(n) = p["name"]
                    .as_str()
                    .filter(|n| n.len() > 15 || dns_label(n).is_some())
                {
                    refuse(
                        &format!("{here}.ports[{j}].name"),
                        format!(
                            "{n:?} is not a port name (at most 15 lower-case letters, digits and '-')"
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(obj: Value) -> Vec<String> {
        refusals(&obj).into_iter().map(|r| r.field).collect()
    }

    #[test]
    fn an_ingress_needs_rules_and_good_hosts() {
        let none = json!({"kind": "Ingress", "metadata": {"name": "a"}, "spec": {"rules": []}});
        assert_eq!(fields(none), ["spec"]);
        let ok = json!({"kind": "Ingress", "metadata": {"name": "a"}, "spec": {
            "rules": [{"host": "*.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {}}]}}],
            "tls": [{"hosts": ["www.example.com"]}]}});
        assert!(refusals(&ok).is_empty(), "{:?}", refusals(&ok));
        let bad = json!({"kind": "Ingress", "metadata": {"name": "a"}, "spec": {
            "rules": [{"host": "Example.com", "http": {"paths": [{"path": "x", "pathType": "Exact"}, {"path": "/"}]}}],
            "tls": [{"hosts": ["a b"]}]}});
        assert_eq!(
            fields(bad),
            [
                "spec.rules[0].host",
                "spec.rules[0].http.paths[0].path",
                "spec.rules[0].http.paths[1].pathType",
                "spec.tls[0].hosts[0]"
            ]
        );
    }

    #[test]
    fn names_keys_labels_ports_and_selectors() {
        let cm = json!({"kind": "ConfigMap", "metadata": {"name": "site_config", "labels": {"app.kubernetes.io/name": "web site"}},
            "data": {"nginx/conf": "x", "ok.key": "y"}, "binaryData": {"ok.key": ""}});
        assert_eq!(
            fields(cm),
            [
                "metadata.name",
                "metadata.labels[\"app.kubernetes.io/name\"]",
                "data[\"nginx/conf\"]",
                "binaryData[\"ok.key\"]"
            ]
        );
        let rbac = json!({"kind": "ClusterRole", "metadata": {"name": "team:view"}});
        assert!(refusals(&rbac).is_empty());
        let digit = json!({"kind": "Service", "metadata": {"name": "1web"}});
        assert_eq!(fields(digit), ["metadata.name"]);
        let svc = json!({"kind": "Service", "metadata": {"name": "a.b"}, "spec": {"ports": [{"port": 80}, {"name": "x", "port": 0}]}});
        assert_eq!(
            fields(svc),
            ["metadata.name", "spec.ports[0].name", "spec.ports[1].port"]
        );
        let d = json!({"kind": "Deployment", "metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [
                {"name": "app", "ports": [{"name": "a-very-long-port-name"}]}, {"name": "app"}]}}}});
        assert_eq!(
            fields(d),
            [
                "spec.selector",
                "spec.template.spec.containers[0].ports[0].name",
                "spec.template.spec.containers[1].name"
            ]
        );
        let fine = json!({"kind": "Deployment", "metadata": {"name": "web", "annotations": {"checksum/config": "1"}}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web", "tier": ""}}, "spec": {"containers": [{"name": "app"}]}}}});
        assert!(refusals(&fine).is_empty(), "{:?}", refusals(&fine));
    }
}
