//! ConversionReview (`apiextensions.k8s.io/v1`): the API server's request to convert
//! objects to a version, and ruleop's answer. Pure: the conversion of each object's kind
//! is looked up by the caller.

use super::{ConvertError, convert};
use crate::rules::compile::versions::Conversion;
use crate::rules::program::Program;
use serde_json::{Value, json};

/// The answer to `review`: every object converted to the desired version, or a failure
/// naming the first object that could not be.
pub fn answer<'a>(
    review: &Value,
    find: impl Fn(&str, &str) -> Option<(&'a Conversion, &'a Program)>,
) -> Value {
    let request = &review["request"];
    let uid = request["uid"].clone();
    let result = convert_all(request, find);
    let response = match result {
        Ok(objects) => {
            json!({"uid": uid, "convertedObjects": objects, "result": {"status": "Success"}})
        }
        Err(message) => {
            json!({"uid": uid, "convertedObjects": [], "result": {"status": "Failure", "message": message}})
        }
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response})
}

fn convert_all<'a>(
    request: &Value,
    find: impl Fn(&str, &str) -> Option<(&'a Conversion, &'a Program)>,
) -> Result<Vec<Value>, String> {
    let desired = request["desiredAPIVersion"].as_str().unwrap_or_default();
    let (group, version) = desired
        .split_once('/')
        .ok_or_else(|| format!("desiredAPIVersion {desired:?} is not group/version"))?;
    let objects = request["objects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    objects
        .iter()
        .map(|o| {
            let kind = o["kind"].as_str().unwrap_or_default();
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            let (c, program) = find(group, kind)
                .ok_or_else(|| format!("no rule converts {kind}.{group} (is its rule loaded?)"))?;
            convert(c, program, o, version).map_err(|e: ConvertError| format!("{kind} {name}: {e}"))
        })
        .collect()
}
