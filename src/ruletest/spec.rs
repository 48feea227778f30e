//! The test file format (`*_test.yaml`): plain data, deserialized with unknown fields
//! refused. A file names its rules and holds tests; a test is a custom resource and a
//! sequence of steps; a step changes what the cluster holds and says what it expects.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One test file.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    /// Rules files or folders, relative to the test file. Absent: the rules files of the
    /// test file's folder, or of its parent when the folder is named `tests`.
    #[serde(default)]
    pub rules: Vec<PathBuf>,
    pub tests: Vec<Test>,
}

/// One test: a custom resource and the steps it goes through.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Test {
    pub name: String,
    /// The rule, by name; absent: the one that watches the resource's kind.
    #[serde(default)]
    pub rule: Option<String>,
    /// The custom resource (the namespace `default` and a uid are given when absent).
    pub resource: Value,
    /// Objects in the cluster from the start (existing objects, children made earlier).
    #[serde(default)]
    pub observed: Vec<Value>,
    pub steps: Vec<Step>,
}

/// One step: what changes in the cluster, then what the rule must make of it.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    #[serde(default)]
    pub name: Option<String>,
    /// A JSON merge patch of the custom resource (`{spec: {replicas: 5}}`).
    #[serde(default)]
    pub resource: Option<Value>,
    /// The children the step before rendered are now in the cluster: as server-side apply
    /// would leave them (the rendered fields over the object there, if any; a new one gets
    /// a uid and generation 1).
    #[serde(default)]
    pub apply_children: bool,
    /// Objects now in the cluster (replacing any of the same apiVersion, kind and name).
    #[serde(default)]
    pub apply: Vec<Value>,
    /// Changes to objects in the cluster (a JSON merge patch of each).
    #[serde(default)]
    pub patch: Vec<Patch>,
    /// Objects gone from the cluster.
    #[serde(default)]
    pub delete: Vec<ObjectRef>,
    #[serde(default)]
    pub expect: Expect,
}

/// An object of the cluster, by kind and name (and apiVersion, when kinds share a name).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObjectRef {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub api_version: Option<String>,
}

/// A change to an object in the cluster.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Patch {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub api_version: Option<String>,
    /// A JSON merge patch (`{status: {readyReplicas: 2}}`).
    pub merge: Value,
}

/// What a step must give. Every part is optional; what is not given is not checked.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Children rendered (with the fields given, a subset) or `absent`.
    #[serde(default)]
    pub children: Vec<ChildExpect>,
    /// The children that wait, and what for (a part of the reason); `[]`: none waits.
    #[serde(default)]
    pub waiting: Option<Vec<WaitExpect>>,
    /// The status fields (a subset).
    #[serde(default)]
    pub status: Option<Value>,
    /// Conditions by type: `"True"`/`"False"`, or `{status, reason, message}` (a part of
    /// the message).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, ConditionShape>")]
    pub conditions: BTreeMap<String, ConditionExpect>,
    /// The render fails, with this in its message.
    #[serde(default)]
    pub error: Option<String>,
    /// The step's change to the resource is refused by its kind's schema or CEL rules, as
    /// the API server would refuse it, with this in a message (`""`: any refusal). The
    /// resource stays as it was, and the step's other expectations are about it.
    #[serde(default)]
    pub refused: Option<String>,
}

/// A child the step must render, or not.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChildExpect {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub api_version: Option<String>,
    /// Fields the rendered object must hold, with these values (a subset).
    #[serde(default)]
    pub has: Option<Value>,
    /// `true`: the object must not be rendered; a list of paths
    /// (`spec.tls`, `metadata.annotations["checksum/config"]`): fields it must not have.
    #[serde(default)]
    pub absent: Absent,
    /// Paths whose values differ from those the step before rendered for this object.
    #[serde(default)]
    pub changed: Vec<String>,
    /// Paths whose values are those the step before rendered for this object (or absent
    /// in both).
    #[serde(default)]
    pub unchanged: Vec<String>,
}

/// What `absent` says: the whole object, or some of its fields.
#[derive(Debug, Clone, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Absent {
    Object(bool),
    Paths(Vec<String>),
}

impl<'de> Deserialize<'de> for Absent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let fix = "write `absent: true` (the object is not rendered) or a list of paths (`absent: [spec.tls]`)";
        match Value::deserialize(d)? {
            Value::Bool(b) => Ok(Absent::Object(b)),
            Value::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    Value::String(p) => Ok(p),
                    other => Err(D::Error::custom(format!(
                        "`absent`: {other} is not a path: {fix}"
                    ))),
                })
                .collect::<Result<_, _>>()
                .map(Absent::Paths),
            Value::String(p) => Err(D::Error::custom(format!(
                "`absent: {p}`: a path goes in a list: `absent: [{p}]`"
            ))),
            other => Err(D::Error::custom(format!("`absent: {other}`: {fix}"))),
        }
    }
}

impl Default for Absent {
    fn default() -> Self {
        Absent::Object(false)
    }
}

impl Absent {
    /// Whether the object must not be rendered.
    pub fn object(&self) -> bool {
        matches!(self, Absent::Object(true))
    }

    /// The fields the object must not have.
    pub fn paths(&self) -> &[String] {
        match self {
            Absent::Paths(p) => p,
            Absent::Object(_) => &[],
        }
    }
}

/// A child that must wait.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitExpect {
    pub child: String,
    /// A part of the reason it waits.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A condition as expected: `"True"`/`"False"` (or `true`/`false`), or
/// `{status, reason, message}` (a part of the message), unknown fields refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ConditionExpect {
    Status(String),
    Full(FullCondition),
}

/// A condition's fields as expected; what is not given is not checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FullCondition {
    #[serde(default)]
    pub status: Option<StatusWord>,
    #[serde(default)]
    pub reason: Option<String>,
    /// A part of the message.
    #[serde(default)]
    pub message: Option<String>,
}

/// A condition's status, as Kubernetes writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
pub enum StatusWord {
    True,
    False,
    Unknown,
}

impl StatusWord {
    pub fn as_str(self) -> &'static str {
        match self {
            StatusWord::True => "True",
            StatusWord::False => "False",
            StatusWord::Unknown => "Unknown",
        }
    }
}

/// The shapes a condition may be written in (for the JSON Schema).
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum ConditionShape {
    Status(StatusWord),
    Bool(bool),
    Full(FullCondition),
}

impl<'de> Deserialize<'de> for ConditionExpect {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::Bool(b) => Ok(ConditionExpect::Status(
                if b { "True" } else { "False" }.into(),
            )),
            Value::String(s) => match s.as_str() {
                "True" | "False" | "Unknown" => Ok(ConditionExpect::Status(s)),
                _ => Err(D::Error::custom(format!(
                    "{s:?} is not a condition status: write \"True\", \"False\" or \"Unknown\""
                ))),
            },
            v @ Value::Object(_) => serde_json::from_value(v)
                .map(ConditionExpect::Full)
                .map_err(|e| {
                    D::Error::custom(format!("a condition `{{status, reason, message}}`: {e}"))
                }),
            other => Err(D::Error::custom(format!(
                "{other} is not a condition: write \"True\"/\"False\" or {{status, reason, message}}"
            ))),
        }
    }
}

impl ObjectRef {
    /// Whether `o` is this object.
    pub fn is(&self, o: &Value) -> bool {
        o["kind"] == self.kind.as_str()
            && o.pointer("/metadata/name").and_then(Value::as_str) == Some(self.name.as_str())
            && self
                .api_version
                .as_ref()
                .is_none_or(|a| o["apiVersion"] == a.as_str())
    }
}

impl Patch {
    pub fn object(&self) -> ObjectRef {
        ObjectRef {
            kind: self.kind.clone(),
            name: self.name.clone(),
            api_version: self.api_version.clone(),
        }
    }
}

impl ChildExpect {
    pub fn object(&self) -> ObjectRef {
        ObjectRef {
            kind: self.kind.clone(),
            name: self.name.clone(),
            api_version: self.api_version.clone(),
        }
    }
}

/// The JSON Schema of a test file, for editors (`ruleop schema --tests`;
/// `schemas/rules-test.schema.json`).
pub fn json_schema() -> Value {
    let mut s = serde_json::to_value(schemars::schema_for!(TestFile)).unwrap_or_default();
    s["title"] = Value::String("ruleop rule tests".into());
    s
}
