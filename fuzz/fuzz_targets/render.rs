//! Structure-aware: a shipped rule, and a custom resource whose spec comes from the input
//! (as JSON when it parses, as strings in every field otherwise). Rendering and status
//! computation never panic, and a rendered child always stays in the resource's namespace
//! with the kind its template names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

static RULES: OnceLock<Vec<std::sync::Arc<ruleop::rules::CompiledRule>>> = OnceLock::new();

fn rules() -> &'static [std::sync::Arc<ruleop::rules::CompiledRule>] {
    RULES.get_or_init(|| {
        let mut all = Vec::new();
        for text in [
            include_str!("../../rules/website.yaml"),
            include_str!("../../rules/myapp.yaml"),
            include_str!("../../tests/fixtures/cache/rules.yaml"),
        ] {
            let (mut r, errors) = ruleop::rules::load_str(text, Path::new("shipped.yaml"));
            assert!(errors.is_empty());
            all.append(&mut r);
        }
        all
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let rules = rules();
    let rule = &rules[pick as usize % rules.len()];
    let spec = match serde_json::from_slice::<Value>(rest) {
        Ok(v) => v,
        Err(_) => {
            let s = String::from_utf8_lossy(rest).into_owned();
            json!({"image": s, "replicas": s, "port": s, "serviceType": s, "size": s, "maxMemory": s, "persistent": s})
        }
    };
    let cr = json!({
        "apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
        "metadata": {"name": "fuzz", "namespace": "ns", "uid": "u"},
        "spec": spec,
    });
    if let Ok(children) = ruleop::render::render(rule, &cr) {
        let mut observed = HashMap::new();
        for c in &children {
            assert_eq!(c.object["metadata"]["namespace"], "ns");
            assert_eq!(c.object["kind"], c.kind.as_str());
            observed.insert(c.id.clone(), c.object.clone());
        }
        if let Ok(scope) = ruleop::render::scope(rule, &cr) {
            let _ = ruleop::status::compute(rule, &scope, &cr, None, &observed);
        }
    }
});
