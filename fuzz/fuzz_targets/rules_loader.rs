//! Any bytes as a rules file: loading and compiling never panics, and whatever compiles
//! renders a sample custom resource without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (rules, _errors) = ruleop::rules::load_str(&text, Path::new("fuzz.yaml"));
    let cr = serde_json::json!({
        "apiVersion": "x.io/v1", "kind": "Thing",
        "metadata": {"name": "a", "namespace": "n", "uid": "u"},
        "spec": {"image": "nginx", "replicas": 2, "port": 80, "enabled": true}
    });
    for r in rules {
        let _ = ruleop::render::render(&r, &cr);
    }
});
