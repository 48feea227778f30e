//! ConversionReview (`apiextensions.k8s.io/v1`): the API server's request to convert
//! objects to a version, and ruleop's answer. Pure: the conversion of each object's kind
//! is looked up by the caller.

use super::convert;
use crate::rules::compile::versions::Conversion;
use crate::rules::program::Program;
use serde_json::{Value, json};

/// A ConversionReview as read from its body: each object left as its text until its turn,
/// so that answering costs the body, the answer and one object at a time (never a whole
/// parsed review: a page of large objects parsed at once takes many times its size).
#[derive(serde::Deserialize)]
struct RawReview<'a> {
    #[serde(borrow)]
    request: RawRequest<'a>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRequest<'a> {
    #[serde(borrow, default)]
    uid: Option<&'a serde_json::value::RawValue>,
    #[serde(default, rename = "desiredAPIVersion")]
    desired_api_version: String,
    #[serde(borrow, default)]
    objects: Vec<&'a serde_json::value::RawValue>,
}

/// The group and kind of a review's first object, to find the rule that converts it (None:
/// the body is no ConversionReview).
pub fn first_kind(body: &[u8]) -> Option<(String, String)> {
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(default)]
        kind: String,
    }
    let review: RawReview<'_> = serde_json::from_slice(body).ok()?;
    let group = review
        .request
        .desired_api_version
        .split_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    let kind = match review.request.objects.first() {
        Some(o) => serde_json::from_str::<Kind>(o.get()).ok()?.kind,
        None => String::new(),
    };
    Some((group, kind))
}

/// The answer to a review's body: every object converted to the desired version, or a
/// failure naming the first object that could not be; the objects parsed and converted one
/// at a time. `Err` when the body is no ConversionReview.
pub fn answer_body<'a>(
    body: &[u8],
    find: impl Fn(&str, &str) -> Option<(&'a Conversion, &'a Program)>,
) -> Result<(Vec<u8>, Outcome), String> {
    let review: RawReview<'_> =
        serde_json::from_slice(body).map_err(|e| format!("not a ConversionReview: {e}"))?;
    let request = review.request;
    let uid = request.uid.map_or("null", |u| u.get());
    let desired = request.desired_api_version.as_str();
    let failure = |message: String| {
        let answer = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": serde_json::from_str::<Value>(uid).unwrap_or(Value::Null),
                "convertedObjects": [], "result": {"status": "Failure", "message": message}}});
        (answer.to_string().into_bytes(), Outcome::Failure(message))
    };
    let Some((group, version)) = desired.split_once('/') else {
        return Ok(failure(format!(
            "desiredAPIVersion {desired:?} is not group/version"
        )));
    };
    let mut out = Vec::with_capacity(body.len() + 256);
    out.extend_from_slice(
        br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{"uid":"#,
    );
    out.extend_from_slice(uid.as_bytes());
    out.extend_from_slice(br#","convertedObjects":["#);
    for (i, raw) in request.objects.iter().enumerate() {
        let o: Value = match serde_json::from_str(raw.get()) {
            Ok(o) => o,
            Err(e) => return Ok(failure(format!("object {i} does not read: {e}"))),
        };
        let kind = o["kind"].as_str().unwrap_or_default();
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let Some((c, program)) = find(group, kind) else {
            return Ok(failure(format!(
                "no rule converts {kind}.{group} (is its rule loaded?)"
            )));
        };
        let converted = match convert(c, program, &o, version) {
            Ok(v) => v,
            Err(e) => return Ok(failure(format!("{kind} {name}: {e}"))),
        };
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &converted).map_err(|e| e.to_string())?;
    }
    out.extend_from_slice(br#"],"result":{"status":"Success"}}}"#);
    Ok((out, Outcome::Success(request.objects.len())))
}

/// How a review was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every object converted (how many).
    Success(usize),
    Failure(String),
}
