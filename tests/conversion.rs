//! Conversions round-trip: objects generated from each version's schema, converted to
//! every other version and back, come back as they were (no cluster; the conversion is
//! pure). Run over every shipped rule with more than one version.

use ruleop::rules::CompiledRule;
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::sync::Arc;

/// How many objects of each version each rule's round trips are tried on.
const OBJECTS: usize = 10_000;

fn shipped() -> Vec<Arc<CompiledRule>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let paths = [
        root.join("examples/versions"),
        root.join("tests/fixtures/versions"),
        root.join("tests/fixtures/conversion"),
    ];
    let (rules, errors) = ruleop::rules::load_paths(&paths);
    assert!(errors.is_empty(), "{errors:?}");
    let rules: Vec<_> = rules
        .into_iter()
        .filter(|r| r.conversion.is_some())
        .collect();
    assert!(
        rules.len() >= 2,
        "the shipped multi-version rules are found"
    );
    rules
}

/// A value `schema` takes, made with `rng`.
fn value(schema: &Value, rng: &mut fastrand::Rng, depth: usize) -> Value {
    if let Some(e) = schema["enum"].as_array() {
        return e[rng.usize(..e.len())].clone();
    }
    if schema["x-kubernetes-int-or-string"] == true {
        return if rng.bool() {
            json!(rng.u16(..))
        } else {
            json!(word(rng))
        };
    }
    match schema["type"].as_str() {
        Some("string") => string(schema, rng),
        Some("integer") => {
            let lo = schema["minimum"].as_i64().unwrap_or(-1000);
            let hi = schema["maximum"].as_i64().unwrap_or(100_000);
            json!(rng.i64(lo..=hi))
        }
        Some("number") => json!(rng.f64() * 100.0),
        Some("boolean") => json!(rng.bool()),
        Some("array") => {
            let items = &schema["items"];
            let n = rng.usize(..4);
            let mut names: Vec<String> = (0..n).map(|i| format!("r{i}-{}", word(rng))).collect();
            rng.shuffle(&mut names);
            json!(
                names
                    .into_iter()
                    .map(|name| item(items, name, rng, depth))
                    .collect::<Vec<_>>()
            )
        }
        Some("object") => object(schema, rng, depth),
        _ => json!(word(rng)),
    }
}

/// A list item; a free-form object gets a `name` (unique in its list) and a field or two.
fn item(schema: &Value, name: String, rng: &mut fastrand::Rng, depth: usize) -> Value {
    if schema["type"] == "object" && schema["properties"].is_null() {
        let mut o = json!({"name": name});
        if rng.bool() {
            o["target"] = json!(word(rng));
        }
        if rng.bool() {
            o["weight"] = json!(rng.u8(..));
        }
        return o;
    }
    value(schema, rng, depth + 1)
}

fn object(schema: &Value, rng: &mut fastrand::Rng, depth: usize) -> Value {
    let mut out = Map::new();
    if let Some(props) = schema["properties"].as_object() {
        for (k, s) in props {
            if rng.u8(..10) < 7 {
                out.insert(k.clone(), value(s, rng, depth + 1));
            }
        }
    } else if schema["additionalProperties"].is_object() && depth < 4 {
        for _ in 0..rng.usize(..3) {
            out.insert(
                word(rng),
                value(&schema["additionalProperties"], rng, depth + 1),
            );
        }
    } else if depth < 4 {
        for _ in 0..rng.usize(..3) {
            out.insert(word(rng), json!({"target": word(rng)}));
        }
    }
    Value::Object(out)
}

fn word(rng: &mut fastrand::Rng) -> String {
    (0..rng.usize(1..8)).map(|_| rng.lowercase()).collect()
}

/// A string of the schema's pattern (tried among a few shapes), within its maxLength.
fn string(schema: &Value, rng: &mut fastrand::Rng) -> Value {
    let max = schema["maxLength"].as_u64().unwrap_or(64) as usize;
    let Some(pattern) = schema["pattern"].as_str() else {
        let w = word(rng);
        return json!(w[..w.len().min(max)]);
    };
    let re = regex::Regex::new(pattern).unwrap();
    for _ in 0..100 {
        let n = rng.u32(..100_000).to_string();
        let candidates = [
            n.clone(),
            format!("{n}s"),
            word(rng),
            format!("{}.{}", word(rng), word(rng)),
        ];
        if let Some(c) = candidates
            .into_iter()
            .find(|c| re.is_match(c) && c.len() <= max)
        {
            return json!(c);
        }
    }
    panic!("no string of pattern {pattern} made: teach the generator its shape");
}

fn versions(rule: &CompiledRule) -> Vec<(String, Value)> {
    rule.crd.as_ref().unwrap()["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"].clone();
            (v["name"].as_str().unwrap().to_string(), spec)
        })
        .collect()
}

#[test]
fn every_object_of_every_version_round_trips_through_every_other() {
    let seed = std::env::var("RULEOP_CONVERSION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut trips = 0usize;
    for rule in shipped() {
        let c = rule.conversion.as_ref().unwrap();
        let all = versions(&rule);
        for (from, spec_schema) in &all {
            for i in 0..OBJECTS {
                let mut obj = json!({
                    "apiVersion": format!("{}/{from}", c.group), "kind": "X",
                    "metadata": {"name": format!("o{i}"), "namespace": "ns"},
                    "spec": value(spec_schema, &mut rng, 0),
                    "status": {"observedGeneration": 1},
                });
                if rng.u8(..4) == 0 {
                    obj["metadata"]["annotations"] = json!({"team": word(&mut rng)});
                }
                // Now and then no spec at all.
                if rng.u8(..10) == 0
                    && let Some(o) = obj.as_object_mut()
                {
                    o.remove("spec");
                }
                for (to, _) in all.iter().filter(|(to, _)| to != from) {
                    let there = ruleop::convert::convert(c, &rule.program, &obj, to)
                        .unwrap_or_else(|e| {
                            panic!("seed {seed}: {} {from} → {to}: {e}\n{obj:#}", rule.name)
                        });
                    assert_eq!(there["apiVersion"], json!(format!("{}/{to}", c.group)));
                    assert_eq!(
                        there["status"], obj["status"],
                        "the status is every version's"
                    );
                    let back = ruleop::convert::convert(c, &rule.program, &there, from)
                        .unwrap_or_else(|e| {
                            panic!("seed {seed}: {} {to} → {from}: {e}\n{there:#}", rule.name)
                        });
                    assert_eq!(
                        back, obj,
                        "seed {seed} (RULEOP_CONVERSION_SEED): {} {from} → {to} → {from} lost something\nas {to}: {there:#}",
                        rule.name
                    );
                    trips += 1;
                }
            }
        }
    }
    eprintln!("{trips} round trips, seed {seed}");
    // WebSite and Box: 2 versions, 2 trips each; Gateway: 3 versions, 6 trips.
    assert!(trips >= OBJECTS * 10, "{trips}");
}

/// A top-level field of a version's spec, and its schema, picked with `rng`.
fn some_field<'a>(schema: &'a Value, rng: &mut fastrand::Rng) -> Option<(&'a String, &'a Value)> {
    let props = schema["properties"].as_object()?;
    let fields: Vec<_> = props.iter().collect();
    (!fields.is_empty()).then(|| fields[rng.usize(..fields.len())])
}

/// A → B, then an edit through either version, then on to the other and back: the edit
/// is never undone by a value a conversion kept aside before it (a kept value never wins
/// over a newer write).
#[test]
fn an_edit_through_either_version_outlives_the_values_kept_before_it() {
    let seed = std::env::var("RULEOP_CONVERSION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut sequences = 0usize;
    for rule in shipped() {
        let c = rule.conversion.as_ref().unwrap();
        let all = versions(&rule);
        let convert = |obj: &Value, to: &str| {
            ruleop::convert::convert(c, &rule.program, obj, to)
                .unwrap_or_else(|e| panic!("seed {seed}: {} → {to}: {e}\n{obj:#}", rule.name))
        };
        for (a, a_schema) in &all {
            for (b, b_schema) in all.iter().filter(|(b, _)| b != a) {
                for i in 0..OBJECTS / 5 {
                    let obj = json!({
                        "apiVersion": format!("{}/{a}", c.group), "kind": "X",
                        "metadata": {"name": format!("o{i}"), "namespace": "ns"},
                        "spec": value(a_schema, &mut rng, 0),
                    });
                    // Edited through B (as B), or through A once it came back from B.
                    let through_b = rng.bool();
                    let (mut edited, via, schema, other) = if through_b {
                        (convert(&obj, b), b, b_schema, a)
                    } else {
                        (convert(&convert(&obj, b), a), a, a_schema, b)
                    };
                    let Some((field, field_schema)) = some_field(schema, &mut rng) else {
                        continue;
                    };
                    let v = value(field_schema, &mut rng, 1);
                    if !edited["spec"].is_object() {
                        edited["spec"] = json!({});
                    }
                    edited["spec"][field] = v;
                    let there = convert(&edited, other);
                    let back = convert(&there, via);
                    assert_eq!(
                        back["spec"], edited["spec"],
                        "seed {seed} (RULEOP_CONVERSION_SEED): {} {a} → {b}, `spec.{field}` edited as {via}, → {other} → {via}: the edit was undone\nedited: {edited:#}\nas {other}: {there:#}",
                        rule.name
                    );
                    sequences += 1;
                }
            }
        }
    }
    eprintln!("{sequences} edit sequences, seed {seed}");
    assert!(sequences >= OBJECTS, "{sequences}");
}
