//! Schemas of the kinds a cluster serves, read from its `/openapi/v3` (for `ruleop check
//! --against-cluster`): a child of a CRD's kind is then checked against the schema the
//! cluster serves, as against a `--crd` file. Each schema comes back wrapped as a CRD, so
//! the typed check takes it the same way.

use kube::Client;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum OpenApiError {
    #[error("reading {path} from the cluster: {source}")]
    Read {
        path: String,
        #[source]
        source: kube::Error,
    },
    #[error("building the request for {path}: {source}")]
    Request {
        path: String,
        #[source]
        source: http::Error,
    },
}

async fn get(client: &Client, path: &str) -> Result<Value, OpenApiError> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|source| OpenApiError::Request {
            path: path.to_string(),
            source,
        })?;
    client
        .request::<Value>(req)
        .await
        .map_err(|source| OpenApiError::Read {
            path: path.to_string(),
            source,
        })
}

/// The schemas of `kinds` (apiVersion, kind) that the cluster serves, each as a CRD with
/// one version. Kinds it does not serve are left out.
pub async fn schemas(
    client: &Client,
    kinds: &[(String, String)],
) -> Result<Vec<Value>, OpenApiError> {
    if kinds.is_empty() {
        return Ok(Vec::new());
    }
    let index = get(client, "/openapi/v3").await?;
    let mut by_version: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (api_version, kind) in kinds {
        by_version.entry(api_version).or_default().push(kind);
    }
    let mut out = Vec::new();
    for (api_version, kinds) in by_version {
        let key = match api_version.contains('/') {
            true => format!("apis/{api_version}"),
            false => format!("api/{api_version}"),
        };
        let Some(url) = index["paths"][&key]["serverRelativeURL"].as_str() else {
            continue;
        };
        let doc = get(client, url).await?;
        for kind in kinds {
            if let Some(schema) = schema_of(&doc, api_version, kind) {
                out.push(as_crd(api_version, kind, schema));
            }
        }
    }
    Ok(out)
}

/// The schema of `kind` in one group-version's OpenAPI document, its references inlined.
fn schema_of(doc: &Value, api_version: &str, kind: &str) -> Option<Value> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let schemas = doc["components"]["schemas"].as_object()?;
    let found = schemas.values().find(|s| {
        s["x-kubernetes-group-version-kind"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind)
    })?;
    Some(inline(found, doc, 0))
}

/// `s` with each `$ref` into the document replaced by what it names, except the shared
/// Kubernetes types (ObjectMeta…), which the shipped schemas resolve.
fn inline(s: &Value, doc: &Value, depth: usize) -> Value {
    const MAX_DEPTH: usize = 32;
    match s {
        Value::Object(m) => {
            let target = m
                .get("$ref")
                .or_else(|| m.get("allOf")?.as_array()?.first()?.get("$ref"))
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .filter(|name| !name.starts_with("io.k8s.") && depth < MAX_DEPTH)
                .and_then(|name| doc["components"]["schemas"].get(name));
            if let Some(t) = target {
                return inline(t, doc, depth + 1);
            }
            let inner = m
                .iter()
                .map(|(k, v)| (k.clone(), inline(v, doc, depth + 1)))
                .collect();
            Value::Object(inner)
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| inline(v, doc, depth + 1)).collect())
        }
        other => other.clone(),
    }
}

fn as_crd(api_version: &str, kind: &str, schema: Value) -> Value {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": group,
            "names": {"kind": kind},
            "versions": [{"name": version, "schema": {"openAPIV3Schema": schema}}],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_found_by_its_group_version_kind_and_its_references_inlined() {
        let doc = json!({"components": {"schemas": {
            "dev.ruleop.x.v1.Widget": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": "x.ruleop.dev", "version": "v1", "kind": "Widget"}],
                "properties": {
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
                    "spec": {"$ref": "#/components/schemas/dev.ruleop.x.v1.Widget.spec"}}},
            "dev.ruleop.x.v1.Widget.spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}});
        let s = schema_of(&doc, "x.ruleop.dev/v1", "Widget").unwrap();
        assert_eq!(
            s["properties"]["spec"],
            json!({"type": "object", "properties": {"size": {"type": "integer"}}})
        );
        assert_eq!(
            s["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert!(schema_of(&doc, "x.ruleop.dev/v1", "Gadget").is_none());
        let crd = as_crd("x.ruleop.dev/v1", "Widget", s);
        assert_eq!(crd["spec"]["group"], "x.ruleop.dev");
        assert_eq!(crd["spec"]["versions"][0]["name"], "v1");
    }
}
