//! The kind's schema as a rule writes it (`schema:`) and the types of status fields: plain
//! data, deserialized with the rule, with unknown fields refused.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The watched kind, described in the rule (`schema`): see [`super::fields`] and [`super::crd`].
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchemaSpec {
    pub kind: String,
    #[serde(default)]
    pub singular: Option<String>,
    #[serde(default)]
    pub list_kind: Option<String>,
    #[serde(default)]
    pub short_names: Vec<String>,
    #[serde(default)]
    pub categories: Vec<String>,
    /// Descriptions of the kind, its spec and its status.
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub spec_description: Option<String>,
    #[serde(default)]
    pub status_description: Option<String>,
    /// The spec's fields: `name: type | markers`, or a mapping for a nested object.
    #[serde(default)]
    pub spec: Map<String, Value>,
    /// CEL rules on the spec (`x-kubernetes-validations`): `{rule, message}`.
    #[serde(default)]
    pub validations: Vec<Map<String, Value>>,
    /// `kubectl get` columns (`{name, type, jsonPath}`); absent: one per scalar status
    /// field, and Age.
    #[serde(default)]
    pub printer_columns: Vec<Map<String, Value>>,
    /// The scale subresource: `{specReplicasPath, statusReplicasPath}`.
    #[serde(default)]
    pub scale: Option<Map<String, Value>>,
    /// Annotations of the CRD object.
    #[serde(default)]
    pub annotations: Map<String, Value>,
    /// The kind's other versions, each converted to and from the watched one (the hub,
    /// whose fields are `spec`) by its `convert` steps.
    #[serde(default)]
    pub versions: Vec<VersionSpec>,
    /// The version objects are stored in: the watched one when absent.
    #[serde(default)]
    pub storage: Option<String>,
}

/// Another version of the kind (`schema.versions[]`): its fields, and how they convert to
/// the watched version's.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VersionSpec {
    pub name: String,
    /// Whether the API serves it (a version no longer served still converts the objects
    /// stored in it).
    #[serde(default = "served")]
    pub served: bool,
    #[serde(default)]
    pub deprecated: bool,
    /// The warning clients get when they use it (`deprecated: true`).
    #[serde(default)]
    pub deprecation_warning: Option<String>,
    /// Its spec's fields, as `schema.spec` writes them.
    #[serde(default)]
    pub spec: Map<String, Value>,
    #[serde(default)]
    pub validations: Vec<Map<String, Value>>,
    /// How its fields become the watched version's, each step undone the other way.
    #[serde(default)]
    pub convert: Vec<ConvertStep>,
    /// Fields (of either version) with no counterpart, each acknowledged: written in
    /// one version, they are not seen in the other (a round trip still keeps them).
    #[serde(default)]
    pub lossy: Vec<String>,
}

fn served() -> bool {
    true
}

/// One step of a conversion, from this version (`from`) to the watched one (`to`):
/// exactly one of its fields.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConvertStep {
    /// The field (and what is under it) moves: `{from: spec.serviceType, to: spec.service.type}`.
    #[serde(default, rename = "move")]
    pub moves: Option<Move>,
    /// The value changes on the way: `toHub` and `fromHub` are expressions of `value`.
    #[serde(default)]
    pub transform: Option<Transform>,
    /// A field of the watched version this one lacks: its value when converted from here.
    #[serde(default)]
    pub default: Option<DefaultStep>,
    /// A list of objects here that is a map in the watched version, by each item's `key`
    /// field: `{from: spec.ports, to: spec.ports, key: name}`.
    #[serde(default)]
    pub keyed: Option<Keyed>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Keyed {
    pub from: String,
    pub to: String,
    pub key: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Move {
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Transform {
    pub from: String,
    pub to: String,
    pub to_hub: String,
    pub from_hub: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DefaultStep {
    pub field: String,
    pub value: Value,
}
/// The declared type of a status field; values are checked against it.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    Integer,
    Number,
    String,
    Boolean,
    Object,
    Array,
}

impl FieldType {
    /// Whether `v` is a value of this type (an integer is also a number).
    pub fn admits(self, v: &Value) -> bool {
        match self {
            FieldType::Integer => v.is_i64() || v.is_u64(),
            FieldType::Number => v.is_number(),
            FieldType::String => v.is_string(),
            FieldType::Boolean => v.is_boolean(),
            FieldType::Object => v.is_object(),
            FieldType::Array => v.is_array(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::String => "string",
            FieldType::Boolean => "boolean",
            FieldType::Object => "object",
            FieldType::Array => "array",
        }
    }
}
