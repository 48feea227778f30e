//! A watched resource decoded so that one object cannot fail its watch. The API server
//! stores a free-form (`x-kubernetes-preserve-unknown-fields`) field nested as deep as its
//! author likes; serde_json refuses past 128 levels, and a list is decoded whole, so one
//! such resource would fail the list of its kind and stop the rule in every namespace.
//! Each object is first taken as raw text (serde_json skips a value without recursion),
//! then decoded; one that does not decode keeps its metadata and type, and its body says
//! why ([`UNDECODABLE`]), for the reconcile to report on that resource alone.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject};
use kube::core::{DynamicResourceScope, TypeMeta};
use kube::runtime::watcher::Event;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;

/// The key of the body of a resource that could not be decoded: why.
pub const UNDECODABLE: &str = "ruleop.dev/undecodable";

/// A watched object, whatever its body.
#[derive(Clone, Debug)]
pub struct Tolerant(pub DynamicObject);

/// What is read of an object whose body does not decode: its type and metadata (every
/// other field is skipped, without recursion).
#[derive(Deserialize)]
struct Head {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: HeadMeta,
    /// Its status, when that decodes (ruleop writes it, so it is shallow).
    #[serde(default)]
    status: Option<Box<serde_json::value::RawValue>>,
}

/// The metadata read of such an object: all but `managedFields`, whose `fieldsV1` nest
/// as deep as the fields they describe (skipped, without recursion).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct HeadMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    annotations: Option<std::collections::BTreeMap<String, String>>,
    owner_references: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    finalizers: Option<Vec<String>>,
    creation_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl From<HeadMeta> for ObjectMeta {
    fn from(m: HeadMeta) -> ObjectMeta {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            labels: m.labels,
            annotations: m.annotations,
            owner_references: m.owner_references,
            finalizers: m.finalizers,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            ..ObjectMeta::default()
        }
    }
}

impl<'de> Deserialize<'de> for Tolerant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tolerant, D::Error> {
        let raw: Box<serde_json::value::RawValue> = Deserialize::deserialize(d)?;
        Ok(Tolerant(decode(raw.get()).map_err(D::Error::custom)?))
    }
}

/// `text` as an object; one whose body does not decode as its head and why.
pub fn decode(text: &str) -> Result<DynamicObject, serde_json::Error> {
    let why = match serde_json::from_str::<DynamicObject>(text) {
        Ok(o) => return Ok(o),
        Err(e) => e,
    };
    let head: Head = serde_json::from_str(text)?;
    Ok(DynamicObject {
        types: Some(TypeMeta {
            api_version: head.api_version,
            kind: head.kind,
        }),
        metadata: head.metadata.into(),
        data: serde_json::json!({
            UNDECODABLE: without_position(&why.to_string()),
            "status": head
                .status
                .and_then(|s| serde_json::from_str::<serde_json::Value>(s.get()).ok()),
        }),
    })
}

/// A decode error without its position (which moves as the object's metadata grows): the
/// same body says the same thing.
fn without_position(why: &str) -> String {
    match why.find(" at line ") {
        Some(i) => why[..i].to_string(),
        None => why.to_string(),
    }
}

/// Why `o` could not be decoded, if it could not.
pub fn undecodable(o: &DynamicObject) -> Option<&str> {
    o.data.get(UNDECODABLE).and_then(serde_json::Value::as_str)
}

impl kube::Resource for Tolerant {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// A watch event of tolerant objects as one of dynamic objects.
pub fn dynamic(ev: Event<Tolerant>) -> Event<DynamicObject> {
    match ev {
        Event::Apply(o) => Event::Apply(o.0),
        Event::Delete(o) => Event::Delete(o.0),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.0),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object nested `levels` deep in its spec, in maps, and so in its managedFields.
    fn deep(levels: usize) -> String {
        let nested =
            |leaf: &str| format!("{}{leaf}{}", r#"{"a": "#.repeat(levels), "}".repeat(levels));
        format!(
            r#"{{"apiVersion": "x.io/v1", "kind": "Web", "metadata": {{"name": "deep", "namespace": "n", "uid": "u1", "finalizers": ["ruleop.dev/orphan"], "managedFields": [{{"manager": "kubectl", "fieldsType": "FieldsV1", "fieldsV1": {}}}]}}, "spec": {{"free": {}}}}}"#,
            nested("{}"),
            nested("1")
        )
    }

    #[test]
    fn one_object_nested_past_the_decoders_limit_does_not_fail_its_list() {
        let ok = r#"{"apiVersion": "x.io/v1", "kind": "Web", "metadata": {"name": "ok", "namespace": "n"}, "spec": {"replicas": 2}}"#;
        let list = format!(r#"{{"items": [{ok}, {}]}}"#, deep(400));
        #[derive(Deserialize)]
        struct List {
            items: Vec<Tolerant>,
        }
        // (A list of dynamic objects fails whole.)
        assert!(
            serde_json::from_str::<Vec<DynamicObject>>(&format!("[{ok}, {}]", deep(400))).is_err()
        );
        let l: List = serde_json::from_str(&list).unwrap();
        assert_eq!(l.items.len(), 2);
        assert_eq!(l.items[0].0.data["spec"]["replicas"], 2);
        assert!(undecodable(&l.items[0].0).is_none());
        let bad = &l.items[1].0;
        assert_eq!(bad.metadata.name.as_deref(), Some("deep"));
        assert_eq!(bad.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(
            bad.metadata.finalizers,
            Some(vec!["ruleop.dev/orphan".to_string()])
        );
        assert!(
            undecodable(bad).is_some_and(|why| why.contains("recursion limit")),
            "{bad:?}"
        );
    }
}
