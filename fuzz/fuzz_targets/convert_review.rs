//! The body of a `POST /convert`, as any pod that reaches the webhook's port may send it:
//! answering never panics, the answer is JSON, and a successful one has one converted
//! object per object sent, each in the version asked for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, OnceLock};

static RULES: OnceLock<Vec<Arc<ruleop::rules::CompiledRule>>> = OnceLock::new();

fn rules() -> &'static [Arc<ruleop::rules::CompiledRule>] {
    RULES.get_or_init(|| {
        let mut all = Vec::new();
        for text in [
            include_str!("../../examples/versions/website.yaml"),
            include_str!("../../tests/fixtures/versions/gateway.yaml"),
            include_str!("../../tests/fixtures/conversion/sizes.yaml"),
        ] {
            let (mut r, errors) = ruleop::rules::load_str(text, Path::new("shipped.yaml"));
            assert!(errors.is_empty());
            all.append(&mut r);
        }
        all
    })
}

fuzz_target!(|data: &[u8]| {
    let rules = rules();
    let Ok((answer, outcome)) = ruleop::convert::review::answer_body(data, |g, k| {
        let r = rules
            .iter()
            .find(|r| r.watch.group == g && r.crd_kind() == Some(k))?;
        Some((r.conversion.as_ref()?, &r.program))
    }) else {
        return;
    };
    let answer: Value = serde_json::from_slice(&answer).expect("the answer is JSON");
    if let ruleop::convert::review::Outcome::Success(n) = outcome {
        let request: Value = serde_json::from_slice(data).expect("a review that converted");
        let desired = &request["request"]["desiredAPIVersion"];
        let converted = answer["response"]["convertedObjects"].as_array().unwrap();
        assert_eq!(converted.len(), n);
        assert!(converted.iter().all(|o| &o["apiVersion"] == desired));
    }
});
