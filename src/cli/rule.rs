//! `ruleop rule`: rules files printed as Rule objects (`kubectl apply -f -`), each
//! document's text kept as written (its `name` becomes the Rule's name).

use super::args::RuleArgs;
use super::input::load_all_or_report;
use crate::rules::load::collect_files;
use crate::rules::object;
use anyhow::Context;
use serde_json::{Map, Value, json};
use std::process::ExitCode;

pub(super) fn rule_cmd(args: RuleArgs) -> anyhow::Result<ExitCode> {
    // Only rules that compile become Rules.
    if load_all_or_report(&args.rules).is_none() {
        return Ok(ExitCode::FAILURE);
    }
    let files = collect_files(&args.rules).map_err(|e| anyhow::anyhow!("{e}"))?;
    for f in files {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        for doc in documents(&text) {
            let Some(Value::Object(spec)) = serde_yaml::from_str::<Option<Value>>(doc)? else {
                continue;
            };
            out!(
                "# From {} by `ruleop rule`.\n---\n{}",
                f.display(),
                as_rule_text(doc, spec, &args.labels)?
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The documents of a YAML stream, as text (split at `---` lines).
fn documents(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            out.push(&text[start..at]);
            start = at + line.len();
        }
        at += line.len();
    }
    out.push(&text[start..]);
    out.into_iter().filter(|d| !d.trim().is_empty()).collect()
}

/// A rules-file document as a Rule's YAML, its text kept (order, comments) under `spec:`
/// without its top-level `name:` line; the data form when the text cannot be kept as is.
fn as_rule_text(
    doc: &str,
    spec: Map<String, Value>,
    labels: &[(String, String)],
) -> anyhow::Result<String> {
    let name = spec.get("name").and_then(Value::as_str).unwrap_or_default();
    let body: String = doc
        .lines()
        .filter(|l| !l.starts_with("name:") && !l.starts_with("# yaml-language-server"))
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("  {l}\n")
            }
        })
        .collect();
    let mut meta = format!("  name: {}\n", serde_json::to_string(name)?);
    if !labels.is_empty() {
        meta.push_str("  labels:\n");
        for (k, v) in labels {
            let (k, v) = (serde_json::to_string(k)?, serde_json::to_string(v)?);
            meta.push_str(&format!("    {k}: {v}\n"));
        }
    }
    let text = format!(
        "apiVersion: {}\nkind: {}\nmetadata:\n{meta}spec:\n{body}",
        object::api_version(),
        object::KIND,
    );
    // The text must say what the document says.
    let back: Value = serde_yaml::from_str(&text).unwrap_or_default();
    let mut want = as_rule(spec);
    if !labels.is_empty() {
        let labels: Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        want["metadata"]["labels"] = Value::Object(labels);
    }
    if back == want {
        Ok(text)
    } else {
        Ok(serde_yaml::to_string(&want)?)
    }
}

/// A rules-file document as a Rule object.
pub(super) fn as_rule(mut spec: Map<String, Value>) -> Value {
    let name = spec.remove("name").unwrap_or_default();
    json!({
        "apiVersion": object::api_version(),
        "kind": object::KIND,
        "metadata": {"name": name},
        "spec": spec,
    })
}
