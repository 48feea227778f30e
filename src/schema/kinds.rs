//! What ruleop knows of built-in kinds without a cluster: which exist in each built-in
//! API version (to catch a misspelled kind) and which are cluster-scoped.

/// `apps/v1` → (`apps`, `v1`); `v1` (the core group) → (``, `v1`).
pub fn group_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// The one spelling the API server gives `api_version` (`v1`, `apps/v1`), if it names a
/// group and version at all: `/v1`, `core/v1`, ` v1 ` and `V1` all mean `v1` to a reader,
/// and every check that compares kinds compares these (a policy that compared spellings
/// would let `/v1` past a refusal of `v1`).
pub fn canonical_api_version(api_version: &str) -> Option<String> {
    let lower = api_version.trim().to_ascii_lowercase();
    let (group, version) = lower.rsplit_once('/').unwrap_or(("", &lower));
    let group = canonical_group(group);
    let group = group.as_str();
    let label = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if !label(version) || version.contains('.') || !(group.is_empty() || label(group)) {
        return None;
    }
    Some(if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    })
}

/// A group as the API server names it: lowercase, and the core group `""` (not `core`).
pub fn canonical_group(group: &str) -> String {
    match group.trim().to_ascii_lowercase().as_str() {
        "core" => String::new(),
        g => g.to_string(),
    }
}

/// Why `api_version` is not written as the API server names it, and the fix: every rule
/// writes each kind one way, so every check (the Secret policy, the built-in kinds, the
/// typed paths) sees the kind the API server will serve.
pub fn api_version_problem(api_version: &str) -> Option<(String, String)> {
    match canonical_api_version(api_version) {
        Some(c) if c == api_version => None,
        Some(c) => {
            let why = if !c.contains('/') && api_version.contains('/') {
                " (the core group has no name)"
            } else {
                ""
            };
            Some((
                format!("apiVersion {api_version:?} is not how the API server names it{why}"),
                format!("write `{c}`"),
            ))
        }
        None => Some((
            format!("apiVersion {api_version:?} is not `group/version` or `version`"),
            "write it as `kubectl api-resources` shows it, e.g. `apps/v1`, or `v1` for the core group".into(),
        )),
    }
}

/// Whether `api_version` and `kind`, however spelt, name the kind of `want_api_version`
/// and `want_kind` (`/v1 secret` is `v1 Secret`).
pub fn names_kind(api_version: &str, kind: &str, want_api_version: &str, want_kind: &str) -> bool {
    canonical_api_version(api_version).as_deref() == Some(want_api_version)
        && kind.trim().eq_ignore_ascii_case(want_kind)
}

/// Built-in kinds that are cluster-scoped, by (group, kind): refused as children at load.
/// Kinds from CRDs are checked against discovery when the rule starts.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
];

/// Namespaced kinds of built-in API versions, to catch a misspelled kind without a
/// cluster. Kinds of other API versions (CRDs) are checked by discovery when the rule runs.
const BUILTIN_KINDS: &[(&str, &[&str])] = &[
    (
        "v1",
        &[
            "ConfigMap",
            "Secret",
            "Service",
            "ServiceAccount",
            "Pod",
            "PersistentVolumeClaim",
            "Endpoints",
            "LimitRange",
            "ResourceQuota",
            "Event",
            "ReplicationController",
            "PodTemplate",
            "Namespace",
            "Node",
            "PersistentVolume",
        ],
    ),
    (
        "apps/v1",
        &[
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ReplicaSet",
            "ControllerRevision",
        ],
    ),
    ("batch/v1", &["Job", "CronJob"]),
    (
        "networking.k8s.io/v1",
        &["Ingress", "NetworkPolicy", "IngressClass"],
    ),
    ("policy/v1", &["PodDisruptionBudget"]),
    ("autoscaling/v1", &["HorizontalPodAutoscaler"]),
    ("autoscaling/v2", &["HorizontalPodAutoscaler"]),
    (
        "rbac.authorization.k8s.io/v1",
        &["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"],
    ),
    ("coordination.k8s.io/v1", &["Lease"]),
    ("discovery.k8s.io/v1", &["EndpointSlice"]),
    ("events.k8s.io/v1", &["Event"]),
    (
        "storage.k8s.io/v1",
        &[
            "StorageClass",
            "CSIDriver",
            "CSINode",
            "VolumeAttachment",
            "CSIStorageCapacity",
        ],
    ),
];

/// For a built-in API version, whether `kind` exists in it; `Err` carries the kinds it has.
pub fn check_builtin_kind(api_version: &str, kind: &str) -> Result<(), &'static [&'static str]> {
    match BUILTIN_KINDS.iter().find(|(av, _)| *av == api_version) {
        Some((_, kinds)) if !kinds.contains(&kind) => Err(kinds),
        _ => Ok(()),
    }
}

/// Whether a built-in kind is known to be cluster-scoped.
pub fn known_cluster_scoped(group: &str, kind: &str) -> bool {
    CLUSTER_SCOPED
        .iter()
        .any(|(g, k)| *g == group && *k == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_the_core_group_is_one_api_version() {
        for spelt in ["v1", "/v1", " v1", "v1 ", "core/v1", "V1", "Core/V1"] {
            assert_eq!(
                canonical_api_version(spelt).as_deref(),
                Some("v1"),
                "{spelt:?}"
            );
            assert!(names_kind(spelt, "secret", "v1", "Secret"), "{spelt:?}");
        }
        assert_eq!(api_version_problem("v1"), None);
        assert_eq!(api_version_problem("apps/v1"), None);
        let (why, fix) = api_version_problem("/v1").unwrap();
        assert!(why.contains("core group has no name"), "{why}");
        assert_eq!(fix, "write `v1`");
        assert_eq!(api_version_problem("Apps/v1").unwrap().1, "write `apps/v1`");
        for bad in ["", "/", "a/b/v1", "apps/", "v1.2", "apps/v 1"] {
            assert!(canonical_api_version(bad).is_none(), "{bad:?}");
            assert!(api_version_problem(bad).is_some(), "{bad:?}");
        }
        assert!(!names_kind("apps/v1", "Secret", "v1", "Secret"));
        assert!(!names_kind("v1", "ConfigMap", "v1", "Secret"));
    }
}
