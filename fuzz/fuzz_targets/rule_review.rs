//! The body of a `POST /validate-rules` (an AdmissionReview of a Rule), as any pod that
//! reaches the webhook's port may send it: answering never panics, and the answer always
//! carries the request's uid with `allowed` said.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ruleop::operator::webhook::review::{Served, answer};
use ruleop::rules::policy::Policy;
use serde_json::Value;
use std::sync::{Arc, OnceLock};

static SERVED: OnceLock<Arc<Served>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Ok(review) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let served = SERVED.get_or_init(|| {
        let served = Served::new();
        let (rules, _) = ruleop::rules::load_str(
            include_str!("../../rules/website.yaml"),
            std::path::Path::new("website.yaml"),
        );
        served.set(&rules);
        served
    });
    let a = answer(&review, served, &Policy::default());
    let response = &a.review["response"];
    assert_eq!(response["uid"], review["request"]["uid"]);
    assert!(response["allowed"].is_boolean());
});
