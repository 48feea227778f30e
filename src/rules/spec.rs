//! The rules file format, as written by a platform team: plain data, deserialized from
//! YAML with unknown fields refused. Nothing here is compiled or checked beyond its shape;
//! `compile` turns a [`RuleSpec`] into a runnable rule.

pub use crate::schema::spec::{FieldType, SchemaSpec};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One rule: which custom resource to watch, which children to make from it, and how to
/// fill its status.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleSpec {
    /// Unique among all loaded rules; used in labels, logs and metrics.
    pub name: String,
    /// The parent kind, by group / version / resource (plural).
    pub watch: WatchSpec,
    /// Values merged under the custom resource's `spec` before rendering.
    #[serde(default)]
    pub defaults: Map<String, Value>,
    /// The child objects made from every custom resource.
    #[serde(default)]
    pub children: Vec<ChildSpec>,
    /// How the custom resource's status is computed from its children.
    #[serde(default)]
    pub status: StatusSpec,
    /// Objects ruleop reads but never writes (a Secret, a shared ConfigMap), in the custom
    /// resource's namespace; templates see them as `existing.<id>`.
    #[serde(default)]
    pub existing: Vec<ExistingSpec>,
    /// How the children go when the custom resource is deleted.
    #[serde(default)]
    pub deletion: DeletionPolicy,
    /// The watched kind's schema: its CRD is made from it (`ruleop crd`), and the rule's
    /// defaults come from it.
    #[serde(default)]
    pub schema: Option<SchemaSpec>,
    /// How a new revision reaches the resources: step by step, each step only once the
    /// one before is Ready (a Rule object only: a rules file has no revisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
    /// Whether a resource may pin a revision of the Rule (the annotation
    /// `ruleop.dev/revision`): `Allowed` (the default; the ValidatingAdmissionPolicy in
    /// `deploy/` lets only those with `update` on `rules/pin` set it) or `Disabled` (the
    /// annotation is ignored: every resource takes the rollout's revision).
    #[serde(default)]
    pub pins: Pins,
    /// How many revisions of a Rule object are kept (ControllerRevisions); default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<u32>,
    /// The ServiceAccount the rule runs as: every request of the rule (its watches, reads,
    /// writes and Events) is made as this account, by impersonation, and the rule starts
    /// only once the account holds every permission it needs. Without it, ruleop's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountSpec>,
}

/// A ServiceAccount, by name and namespace (`serviceAccount`).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceAccountSpec {
    pub name: String,
    pub namespace: String,
}

/// A progressive rollout of each new revision (`rollout`).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutSpec {
    /// The steps, in order: each reaches more resources (`{resources: 1}`,
    /// `{percent: 10}`); the last reaches every one (a `{percent: 100}` is added if not).
    pub steps: Vec<RolloutStep>,
    /// How long the resources of a step have to be Ready under the new revision
    /// (`30s`, `2m`, `1h`); default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ready: Option<String>,
    /// What a failed step does: `Pause` (the default: the rollout waits, nothing moves back)
    /// or `Rollback` (the step's resources go back to the previous revision).
    #[serde(default)]
    pub on_failure: OnFailure,
}

/// One step of a rollout: how many resources have the new revision once it is reached.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutStep {
    /// This many resources (at least one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<u32>,
    /// This share of the resources, rounded up (1 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u32>,
}

/// Whether resources may pin a revision (`pins`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum Pins {
    #[default]
    Allowed,
    Disabled,
}

/// What a failed rollout step does (`rollout.onFailure`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum OnFailure {
    /// The rollout stops where it is, saying why; `ruleop.dev/rollout: resume` goes on.
    #[default]
    Pause,
    /// The failed step's resources go back to the previous revision's objects.
    Rollback,
}

/// How the children of a deleted custom resource are removed (`deletion`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum DeletionPolicy {
    /// The cluster's garbage collector removes them (ownerReferences), in no order.
    #[default]
    Background,
    /// ruleop holds the resource with a finalizer and deletes its children in the reverse
    /// of the order they were made (dependents first), each level gone before the next.
    Ordered,
}

/// A read-only reference to objects ruleop does not make (`existing[]`).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExistingSpec {
    /// Unique among the rule's children and existing objects; templates read `existing.<id>`.
    pub id: String,
    pub api_version: String,
    pub kind: String,
    /// The object's name (may be templated): `existing.<id>` is that object, and children
    /// that read it wait while it is missing.
    #[serde(default)]
    pub name: Option<String>,
    /// Instead of `name`: labels (values may be templated); `existing.<id>` is the list of
    /// matching objects (possibly empty), sorted by name.
    #[serde(default)]
    pub selector: Option<Map<String, Value>>,
}

/// Group / version / resource of the watched kind. `group` is empty for the core group.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, Hash, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WatchSpec {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl WatchSpec {
    /// `group/version`, or `version` alone for the core group (as `apiVersion` is written).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The name of the watched kind's CRD, `<resource>.<group>` (a kind with a group).
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.resource, self.group)
    }
}

/// One child object: a structured template with an optional condition.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChildSpec {
    /// Unique within the rule; names the child in status paths, errors and labels.
    pub id: String,
    /// An expression; the child exists only while it is true. Absent means always.
    #[serde(default)]
    pub when: Option<String>,
    /// The object, as YAML; every string scalar in it may be a template.
    pub template: Value,
    /// Which existing objects of the rendered name ruleop may take over.
    #[serde(default)]
    pub adopt: AdoptPolicy,
    /// An expression over the live child (`child`): when it is ready. Absent: the
    /// built-in readiness of its kind.
    #[serde(default)]
    pub ready_when: Option<String>,
    /// An expression giving a list: one object per item, the item as `item` (or the name
    /// given by `as`) and its position as `index`.
    #[serde(default)]
    pub for_each: Option<String>,
    /// The item's variable name in a `forEach` child.
    #[serde(default, rename = "as")]
    pub item_as: Option<String>,
    /// Children that must exist and be ready before this one is applied.
    #[serde(default)]
    pub after: Vec<String>,
    /// What becomes of its objects when they leave the rule (the child removed, its `when`
    /// false, its item gone, its kind retired, or the resource deleted).
    #[serde(default, skip_serializing_if = "OnRemove::is_default")]
    pub on_remove: OnRemove,
}

/// What becomes of a child's object when the rule no longer makes it (`onRemove`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum OnRemove {
    /// Deleted (only ruleop's own object, with a uid precondition). The default.
    #[default]
    Delete,
    /// Left in place, no longer ruleop's: its ownerReference to the resource and ruleop's
    /// labels and annotations are removed. For objects that hold data (a PVC).
    Orphan,
}

impl OnRemove {
    fn is_default(&self) -> bool {
        *self == OnRemove::Delete
    }
}

/// Which existing objects of a child's name ruleop may take over (`children[].adopt`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum AdoptPolicy {
    /// An object whose controller ownerReference is already this custom resource (made
    /// by the operator that ran this kind before ruleop). The default.
    #[default]
    IfControlled,
    /// That, or an object with no controller at all (made by hand, or by a tool).
    IfOrphan,
    /// Only objects ruleop made itself.
    Never,
}

/// Status fields and readiness.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusSpec {
    /// Computed in order; each may use the ones before it as `status.<name>`.
    #[serde(default)]
    pub fields: Vec<FieldSpec>,
    /// An expression; its truth sets the `Ready` condition. Absent means "all children exist".
    #[serde(default)]
    pub ready: Option<String>,
}

/// One status field: either a JSONPath over a child (or the custom resource itself), or
/// an expression over everything computed so far.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FieldSpec {
    pub name: String,
    /// A child id, or `self` for the custom resource. Goes with `path`.
    #[serde(default)]
    pub from: Option<String>,
    /// A JSONPath (RFC 9535), e.g. `$.status.readyReplicas`. Goes with `from`.
    #[serde(default)]
    pub path: Option<String>,
    /// An expression, instead of `from` + `path`.
    #[serde(default)]
    pub value: Option<String>,
    #[serde(rename = "type")]
    pub ty: FieldType,
    /// Used when the path matches nothing or the expression gives nothing.
    #[serde(default)]
    pub default: Option<Value>,
    /// `false` keeps the field out of the written status (a helper for later fields).
    #[serde(default = "yes")]
    pub export: bool,
    /// Its schema in the CRD, as a field line (`integer | format=int32
    /// description="..."`); absent: its `type` alone.
    #[serde(default)]
    pub schema: Option<String>,
}

fn yes() -> bool {
    true
}

/// The JSON Schema of a rules-file document (one rule), for editors: made from these types,
/// so it follows the format (`ruleop schema`; `schemas/rules.schema.json`).
pub fn json_schema() -> Value {
    let mut s = serde_json::to_value(schemars::schema_for!(RuleSpec)).unwrap_or_default();
    s["title"] = Value::String("ruleop rule".into());
    s["description"] = Value::String(
        "One rule of a ruleop rules file (a YAML stream: one rule per document). Field lines of `schema.spec` are `type | markers` (see docs/reference/schema.md).".into(),
    );
    s
}
