//! How the watch caches hold an object: as its JSON text, with only the metadata the
//! caches and the controller index by (name, namespace, uid, resourceVersion, the
//! ownerReferences the controller maps children to their resource by).
//!
//! A `serde_json::Value` tree costs far more than its text: every JSON object in it is a
//! `BTreeMap` whose first node holds eleven entries (about 640 bytes), and a Deployment
//! has some twenty of them. At 30,000 cached objects that was most of ruleop's memory.
//! A reconcile reads only its own resource and that resource's children, so parsing them
//! again when read costs microseconds; the cache costs the text alone.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{ApiResource, DynamicObject};
use kube::core::{DynamicResourceScope, TypeMeta};
use kube::runtime::watcher::Event;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A cached kind, shared. Every key of a cache (kube's `ObjectRef`) holds its kind; an
/// `ApiResource` is five strings of its own, 200 bytes or so with their text, so at 30,000
/// cached objects the keys' copies of their three kinds came to several MiB. A key now
/// holds a pointer. Equal by content (two kinds made apart from one `ApiResource` find the
/// same key); the same pointer is equal without reading the strings.
#[derive(Clone, Debug)]
pub struct Kind(Arc<ApiResource>);

impl From<ApiResource> for Kind {
    fn from(ar: ApiResource) -> Kind {
        Kind(Arc::new(ar))
    }
}

impl Deref for Kind {
    type Target = ApiResource;
    fn deref(&self) -> &ApiResource {
        &self.0
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for Kind {}

impl Hash for Kind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// One cached object: its JSON text and the metadata the caches index by.
#[derive(Clone, Debug)]
pub struct Cached {
    meta: ObjectMeta,
    json: Box<str>,
}

impl Cached {
    /// The object as the cache keeps it (already trimmed as its kind's cache trims).
    pub fn new(o: &DynamicObject) -> Cached {
        let m = &o.metadata;
        Cached {
            meta: ObjectMeta {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
                resource_version: m.resource_version.clone(),
                owner_references: m.owner_references.clone(),
                ..ObjectMeta::default()
            },
            json: serde_json::to_string(o).unwrap_or_default().into(),
        }
    }

    /// The whole object, parsed again.
    pub fn object(&self) -> Result<DynamicObject, serde_json::Error> {
        serde_json::from_str(&self.json)
    }

    /// The object's metadata alone (its labels, say), read from the text without building
    /// its body.
    pub fn head(&self) -> Option<DynamicObject> {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        let head: Head = serde_json::from_str(&self.json).ok()?;
        Some(DynamicObject {
            types: None,
            metadata: head.metadata,
            data: Value::Null,
        })
    }

    /// The object's JSON text.
    pub fn text(&self) -> &str {
        &self.json
    }

    /// The whole object as JSON (what the rule's paths and expressions read).
    pub fn value(&self) -> Option<Value> {
        serde_json::from_str(&self.json).ok()
    }
}

impl Resource for Cached {
    type DynamicType = Kind;
    type Scope = DynamicResourceScope;

    fn group(dt: &Kind) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &Kind) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &Kind) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &Kind) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &Kind) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// Read as a [`DynamicObject`] would be (the controller's bound; the caches are filled
/// through [`compact`]).
impl<'de> Deserialize<'de> for Cached {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DynamicObject::deserialize(d).map(|o| Cached::new(&o))
    }
}

/// The watch events of kind `ar` with their objects as the cache keeps them, each with
/// its apiVersion and kind: the items of a list come without them (the API server leaves
/// them out for built-in kinds), and a cached child must read as its watch events show it,
/// or after every relist (a restart, an expired watch) a rendered child, which sets both,
/// would differ from every cached one and be applied again.
pub fn compact(ar: &ApiResource) -> impl Fn(Event<DynamicObject>) -> Event<Cached> + use<> {
    let types = TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    };
    move |ev| {
        let keep = |mut o: DynamicObject| {
            o.types.get_or_insert_with(|| types.clone());
            Cached::new(&o)
        };
        match ev {
            Event::Apply(o) => Event::Apply(keep(o)),
            Event::Delete(o) => Event::Delete(keep(o)),
            Event::Init => Event::Init,
            Event::InitApply(o) => Event::InitApply(keep(o)),
            Event::InitDone => Event::InitDone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    fn deployment() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w-web", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {"app": "w"},
                "ownerReferences": [{"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
                    "name": "w", "uid": "p", "controller": true}]},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "nginx"}]}}},
            "status": {"readyReplicas": 2}
        }))
        .unwrap()
    }

    #[test]
    fn the_object_comes_back_whole_and_the_index_fields_are_at_hand() {
        let o = deployment();
        let c = Cached::new(&o);
        assert_eq!(c.object().unwrap(), o);
        assert_eq!(c.value().unwrap(), serde_json::to_value(&o).unwrap());
        assert_eq!(c.name_any(), "w-web");
        assert_eq!(c.namespace().as_deref(), Some("ns"));
        assert_eq!(c.uid().as_deref(), Some("u"));
        assert_eq!(c.resource_version().as_deref(), Some("7"));
        assert_eq!(c.owner_references()[0].uid, "p");
        assert!(c.labels().is_empty(), "labels stay in the text only");
    }

    fn ar() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&())
    }

    #[test]
    fn a_listed_object_gets_its_kind_back() {
        let mut listed = deployment();
        listed.types = None;
        let Event::InitApply(c) = compact(&ar())(Event::InitApply(listed)) else {
            panic!("an InitApply stays one");
        };
        assert_eq!(c.object().unwrap(), deployment());
        let v = c.value().unwrap();
        assert_eq!(
            (v["apiVersion"].as_str(), v["kind"].as_str()),
            (Some("apps/v1"), Some("Deployment"))
        );
    }

    #[test]
    fn a_key_made_with_a_kind_of_its_own_finds_the_cached_object() {
        use kube::runtime::reflector::{ObjectRef, store::Writer};
        let mut writer = Writer::<Cached>::new(Kind::from(ar()));
        writer.apply_watcher_event(&Event::Apply(Cached::new(&deployment())));
        let store = writer.as_reader();
        // Another Arc, the same content: the same key.
        let key = ObjectRef::new_with("w-web", Kind::from(ar())).within("ns");
        assert_eq!(
            store.get(&key).map(|c| c.name_any()).as_deref(),
            Some("w-web")
        );
        let other = ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&());
        let elsewhere = ObjectRef::new_with("w-web", Kind::from(other)).within("ns");
        assert!(
            store.get(&elsewhere).is_none(),
            "another kind is another key"
        );
    }

    #[test]
    fn events_keep_their_kind_and_read_as_a_dynamic_object_would() {
        let compact = compact(&ar());
        assert!(matches!(compact(Event::Init), Event::Init));
        assert!(matches!(compact(Event::InitDone), Event::InitDone));
        let name = |ev: Event<Cached>| match ev {
            Event::Apply(c) => format!("apply {}", c.name_any()),
            Event::InitApply(c) => format!("init-apply {}", c.name_any()),
            Event::Delete(c) => format!("delete {}", c.name_any()),
            Event::Init | Event::InitDone => String::new(),
        };
        assert_eq!(name(compact(Event::Apply(deployment()))), "apply w-web");
        assert_eq!(
            name(compact(Event::InitApply(deployment()))),
            "init-apply w-web"
        );
        assert_eq!(name(compact(Event::Delete(deployment()))), "delete w-web");
        let head = Cached::new(&deployment()).head().unwrap();
        assert_eq!(head.metadata, deployment().metadata);
        assert_eq!(head.data, Value::Null);
        let read: Cached =
            serde_json::from_value(serde_json::to_value(deployment()).unwrap()).unwrap();
        assert_eq!(read.object().unwrap(), deployment());
    }
}
