//! The CRD of a rule's watched kind, made from its `schema` (the kind's names and spec
//! fields) and its exported status fields, plus `observedGeneration` and `conditions`,
//! which ruleop writes. Pure: what it needs of the rule comes in as [`KindSpec`].

use super::fields::{SchemaProblem, conditions, field, object, problem};
use super::spec::{FieldType, SchemaSpec};
use serde_json::{Map, Value, json};

/// What a CRD is made from: the watched kind's group, version and plural, its schema, and
/// the status fields the rule writes.
pub struct KindSpec<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub plural: &'a str,
    pub schema: &'a SchemaSpec,
    /// Every status field of the rule, exported or not (their positions name them in errors).
    pub status: Vec<StatusLine<'a>>,
}

/// A status field of the rule, as the CRD needs it.
pub struct StatusLine<'a> {
    pub name: &'a str,
    pub ty: FieldType,
    /// Its schema line (`integer | format=int32`); absent: its type alone.
    pub schema: Option<&'a str>,
    /// `false`: a helper field, kept out of the written status and the CRD.
    pub export: bool,
}

/// The boilerplate every CRD's `apiVersion` and `kind` carry (as controller-gen writes it).
fn type_meta() -> (Value, Value) {
    (
        json!({"description": "APIVersion defines the versioned schema of this representation of an object.\nServers should convert recognized schemas to the latest internal value, and\nmay reject unrecognized values.\nMore info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"}),
        json!({"description": "Kind is a string value representing the REST resource this object represents.\nServers may infer this from the endpoint the client submits requests to.\nCannot be updated.\nIn CamelCase.\nMore info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"}),
    )
}

/// The status schema: each exported status field (its `schema` line, or its type),
/// `observedGeneration` and `conditions`.
fn status_schema(k: &KindSpec<'_>) -> Result<Value, Vec<SchemaProblem>> {
    let s = k.schema;
    let mut props = Map::new();
    let mut problems = Vec::new();
    for (i, f) in k.status.iter().enumerate().filter(|(_, f)| f.export) {
        let at = format!("status.fields[{i}].schema");
        let line = f.schema.unwrap_or_else(|| f.ty.name()).to_string();
        match field(&line, &at) {
            Ok((schema, _))
                if schema["type"] != f.ty.name()
                    && !(f.ty.name() == "number" && schema["type"] == "integer") =>
            {
                problems.push(problem(
                    &at,
                    format!(
                        "the schema's type {} is not the field's type {}",
                        schema["type"],
                        f.ty.name()
                    ),
                    "make `schema` and `type` agree",
                ));
            }
            Ok((schema, _)) => {
                props.insert(f.name.to_string(), schema);
            }
            Err(p) => problems.push(p),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    props.insert("observedGeneration".into(), json!({"description": "ObservedGeneration is the generation the status was computed for", "format": "int64", "type": "integer"}));
    props.insert("ruleRevision".into(), json!({"description": "RuleRevision is the revision of the ruleop Rule that last reconciled this resource (Rule objects only)", "format": "int64", "type": "integer"}));
    props.insert("conditions".into(), conditions(&s.kind));
    let mut out = json!({"type": "object", "properties": props});
    if let Some(d) = &s.status_description {
        out["description"] = json!(d);
    }
    Ok(out)
}

/// The column of the Rule revision a resource was last reconciled with: with `-o wide`
/// only, so `kubectl get` shows what it always showed.
fn revision_column() -> Value {
    json!({"name": "Revision", "type": "integer", "jsonPath": ".status.ruleRevision", "priority": 1})
}

/// The printer columns: as declared, or one per exported scalar status field, and Age;
/// then the Rule revision (`-o wide`).
fn columns(k: &KindSpec<'_>) -> Vec<Value> {
    let mut out = declared_or_status_columns(k);
    out.push(revision_column());
    out
}

fn declared_or_status_columns(k: &KindSpec<'_>) -> Vec<Value> {
    let s = k.schema;
    if !s.printer_columns.is_empty() {
        return s
            .printer_columns
            .iter()
            .cloned()
            .map(Value::Object)
            .collect();
    }
    let mut out: Vec<Value> = k
        .status
        .iter()
        .filter(|f| f.export && !matches!(f.ty, FieldType::Object | FieldType::Array))
        .map(|f| {
            let mut name = f.name.to_string();
            if let Some(first) = name.get_mut(0..1) {
                first.make_ascii_uppercase();
            }
            json!({"name": name, "type": f.ty.name(), "jsonPath": format!(".status.{}", f.name)})
        })
        .collect();
    out.push(json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}));
    out
}

/// The CRD of a rule's watched kind, from its `schema`: the watched version and each of
/// `schema.versions`, and with more than one version the conversion webhook (its
/// `clientConfig` is filled in where ruleop serves it: see [`with_conversion`]).
pub fn crd(k: &KindSpec<'_>) -> Result<Value, Vec<SchemaProblem>> {
    let s = k.schema;
    let status = status_schema(k)?;
    let storage = s.storage.as_deref().unwrap_or(k.version);
    let mut problems = Vec::new();
    let mut versions = Vec::new();
    let hub = Version {
        name: k.version,
        served: true,
        fields: &s.spec,
        validations: &s.validations,
        at: "schema.spec".into(),
        deprecated: None,
        moves: Vec::new(),
    };
    let spokes = s.versions.iter().enumerate().map(|(i, v)| Version {
        name: &v.name,
        served: v.served,
        fields: &v.spec,
        validations: &v.validations,
        at: format!("schema.versions[{i}].spec"),
        deprecated: v.deprecated.then_some(v.deprecation_warning.as_deref()),
        moves: v
            .convert
            .iter()
            .filter_map(|c| c.moves.as_ref())
            .map(|m| (m.from.as_str(), m.to.as_str()))
            .collect(),
    });
    for v in std::iter::once(hub).chain(spokes) {
        match version(k, &v, &status, v.name == storage) {
            Ok(json) => versions.push(json),
            Err(p) => problems.extend(p),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut names = json!({
        "kind": s.kind,
        "listKind": s.list_kind.clone().unwrap_or_else(|| format!("{}List", s.kind)),
        "plural": k.plural,
        "singular": s.singular.clone().unwrap_or_else(|| s.kind.to_lowercase()),
    });
    if !s.short_names.is_empty() {
        names["shortNames"] = json!(s.short_names);
    }
    if !s.categories.is_empty() {
        names["categories"] = json!(s.categories);
    }
    let mut metadata = json!({"name": format!("{}.{}", k.plural, k.group)});
    if !s.annotations.is_empty() {
        metadata["annotations"] = Value::Object(s.annotations.clone());
    }
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {"group": k.group, "names": names, "scope": "Namespaced", "versions": versions},
    });
    if !s.versions.is_empty() {
        crd["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "ruleop-system", "name": "ruleop-webhook", "path": CONVERT_PATH, "port": 443}},
        }});
    }
    Ok(crd)
}

/// The schema (`openAPIV3Schema`) of `version` in `crd`.
pub fn version_schema<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == version)
        .map(|v| &v["schema"]["openAPIV3Schema"])
}

/// The path ruleop serves conversions on.
pub const CONVERT_PATH: &str = "/convert";

/// `crd` with its conversion webhook reached at `client_config` (a `url`, or a `service`
/// whose `path` is set here) and trusting `ca_bundle` (base64 PEM; none: the bundle is left out); unchanged if it has
/// one version.
pub fn with_conversion(mut crd: Value, client_config: Value, ca_bundle: Option<&str>) -> Value {
    // (Looked up, not indexed: indexing would add the keys to a CRD of one version.)
    let webhook = crd
        .pointer_mut("/spec/conversion/webhook")
        .filter(|w| w.is_object());
    if let Some(webhook) = webhook {
        let mut cc = client_config;
        if cc["service"].is_object() {
            cc["service"]["path"] = json!(CONVERT_PATH);
        }
        if let Some(ca) = ca_bundle {
            cc["caBundle"] = json!(ca);
        }
        webhook["clientConfig"] = cc;
    }
    crd
}

/// One version of the kind, as the CRD lists it.
struct Version<'a> {
    name: &'a str,
    served: bool,
    fields: &'a Map<String, Value>,
    validations: &'a [Map<String, Value>],
    /// Where its fields are in the rule (for errors).
    at: String,
    /// `Some(warning)` when deprecated.
    deprecated: Option<Option<&'a str>>,
    /// Its `move` steps, `(from here, to the watched version)`: the printer columns and
    /// the scale paths of the watched version's fields read them where they are here.
    moves: Vec<(&'a str, &'a str)>,
}

/// A JSONPath of the watched version (`.spec.service.type`) as it is in a version whose
/// moves are `moves` (`.spec.serviceType`): a path under a moved field moves with it.
fn moved_path(path: &str, moves: &[(&str, &str)]) -> String {
    for (here, hub) in moves {
        let hub = format!(".{hub}");
        if let Some(rest) = path.strip_prefix(&hub)
            && (rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
        {
            return format!(".{here}{rest}");
        }
    }
    path.to_string()
}

fn version(
    k: &KindSpec<'_>,
    v: &Version<'_>,
    status: &Value,
    storage: bool,
) -> Result<Value, Vec<SchemaProblem>> {
    let s = k.schema;
    let mut spec = object(v.fields, &v.at)?;
    if let Some(d) = &s.spec_description {
        spec["description"] = json!(d);
    }
    if !v.validations.is_empty() {
        spec["x-kubernetes-validations"] = json!(v.validations);
    }
    let (api_version, kind) = type_meta();
    let mut root = json!({"type": "object", "properties": {
        "apiVersion": api_version, "kind": kind, "metadata": {"type": "object"},
        "spec": spec, "status": status,
    }});
    if let Some(d) = &s.description {
        root["description"] = json!(d);
    }
    let mut subresources = json!({"status": {}});
    if let Some(scale) = &s.scale {
        let mut scale = Value::Object(scale.clone());
        if let Some(p) = scale["specReplicasPath"].as_str() {
            scale["specReplicasPath"] = json!(moved_path(p, &v.moves));
        }
        subresources["scale"] = scale;
    }
    let mut columns = columns(k);
    for c in &mut columns {
        if let Some(p) = c["jsonPath"].as_str() {
            c["jsonPath"] = json!(moved_path(p, &v.moves));
        }
    }
    let mut out = json!({
        "name": v.name, "served": v.served, "storage": storage,
        "schema": {"openAPIV3Schema": root},
        "subresources": subresources,
        "additionalPrinterColumns": columns,
    });
    if let Some(warning) = v.deprecated {
        out["deprecated"] = json!(true);
        if let Some(w) = warning {
            out["deprecationWarning"] = json!(w);
        }
    }
    Ok(out)
}
