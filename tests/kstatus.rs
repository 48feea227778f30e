//! GitOps health tells the truth. In each state a resource can be in, the conditions
//! ruleop writes (its own `status::verdict::conditions`, merged as the reconcile merges
//! them) are read by kstatus — the real `sigs.k8s.io/cli-utils` library Flux and
//! `kubectl wait` use, built from Go modules by `tests/tools/build.sh` — and by the Argo
//! CD health check `deploy/argocd/health.lua`, run by a Lua 5.4 interpreter; each says
//! what the state is: Current / Healthy once Ready, InProgress / Progressing while it gets
//! there, Failed / Degraded once it failed.

mod common;

use ruleop::status::verdict::{self, SyncProblem};
use ruleop::status::{Report, merge_conditions};
use serde_json::{Value, json};

/// A resource at `generation` whose ruleop last saw `observed`, with the conditions of
/// `report` and `problem`.
fn resource(
    report: Option<&Report>,
    problem: Option<(&str, &str)>,
    generation: i64,
    observed: i64,
) -> Value {
    let problem = problem.map(|(reason, message)| SyncProblem { reason, message });
    let conditions = verdict::conditions(report, problem);
    json!({
        "apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
        "metadata": {"name": "blog", "namespace": "default", "generation": generation},
        "spec": {"image": "nginx"},
        "status": {
            "observedGeneration": observed,
            "conditions": merge_conditions(None, &conditions, Some(observed), "2026-12-03T10:00:00Z"),
        },
    })
}

fn report(ready: bool) -> Report {
    Report {
        fields: Default::default(),
        ready,
        checked: "every child is ready".into(),
        notes: if ready {
            Vec::new()
        } else {
            vec!["child `deployment` (Deployment blog-web): 1 of 2 replicas updated".into()]
        },
        problems: Vec::new(),
    }
}

/// (state, resource, kstatus, Argo CD health)
fn states() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    let ready = report(true);
    let rolling = report(false);
    let mut out = vec![
        (
            "ready",
            resource(Some(&ready), None, 1, 1),
            "Current",
            "Healthy",
        ),
        (
            "children rolling out",
            resource(Some(&rolling), None, 1, 1),
            "InProgress",
            "Progressing",
        ),
        (
            "a new generation not seen yet",
            resource(Some(&ready), None, 2, 1),
            "InProgress",
            "Progressing",
        ),
        // (kstatus reads a resource with no status at all as Current: it has no
        // observedGeneration to go by. ruleop writes one at its first reconcile.)
        (
            "no status yet",
            json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
            "metadata": {"name": "blog", "namespace": "default", "generation": 1}}),
            "Current",
            "Progressing",
        ),
    ];
    for passing in ["Waiting", "Applying", "Retrying"] {
        out.push((
            passing,
            resource(Some(&rolling), Some((passing, "child `db` waits")), 1, 1),
            "InProgress",
            "Progressing",
        ));
    }
    for failure in [
        "RenderFailed",
        "ApplyRefused",
        "NotOwned",
        "Forbidden",
        "StatusRefused",
    ] {
        out.push((
            failure,
            resource(None, Some((failure, "child `svc`: refused")), 1, 1),
            "Failed",
            "Degraded",
        ));
    }
    out
}

#[test]
fn kstatus_reads_each_state_as_it_is() {
    let bin = common::go_tool("kstatus");
    let states = states();
    let input: String = states.iter().map(|(_, r, _, _)| format!("{r}\n")).collect();
    let mut child = std::process::Command::new(&bin)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), states.len(), "{lines:?}");
    for ((state, _, want, _), line) in states.iter().zip(&lines) {
        let got = line.split('\t').next().unwrap_or_default();
        assert_eq!(got, *want, "{state}: kstatus says {line}");
    }
}

#[test]
fn the_argo_cd_health_check_reads_each_state_as_it_is() {
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/argocd/health.lua"
    ))
    .unwrap();
    for (state, r, _, want) in states() {
        let lua = mlua::Lua::new();
        use mlua::LuaSerdeExt;
        lua.globals().set("obj", lua.to_value(&r).unwrap()).unwrap();
        let hs: mlua::Table = lua
            .load(&script)
            .eval()
            .unwrap_or_else(|e| panic!("{state}: {e}"));
        let status: String = hs.get("status").unwrap();
        let message: String = hs.get("message").unwrap();
        assert_eq!(status, want, "{state}: {message}");
        if want == "Degraded" {
            assert!(
                message.contains("refused"),
                "{state}: the message says why: {message}"
            );
        }
    }
}
