//! What ruleop knows of built-in kinds without a cluster: which exist in each built-in
//! API version (to catch a misspelled kind) and which are cluster-scoped.

/// `apps/v1` → (`apps`, `v1`); `v1` (the core group) → (``, `v1`).
pub fn group_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
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
