//! The monitoring package (deploy/monitoring/): its alerts pass `promtool check rules` and
//! `promtool test rules` (promtool built from Prometheus' modules by tests/tools/build.sh),
//! and every metric its alerts and its Grafana dashboard query is one ruleop's /metrics
//! exposes (as ruleop renders it).

mod common;

use serde_json::Value;
use std::collections::BTreeSet;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap()
}

/// The PrometheusRule's rule groups, as a Prometheus rules file.
fn rules_file() -> String {
    let rule: Value =
        serde_yaml::from_str(&read("deploy/monitoring/prometheus-rule.yaml")).unwrap();
    serde_yaml::to_string(&rule["spec"]).unwrap()
}

fn promtool(args: &[&str], dir: &std::path::Path) -> String {
    let out = std::process::Command::new(common::go_tool("promtool"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alerts_pass_promtool_and_their_tests() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), rules_file()).unwrap();
    std::fs::write(
        dir.path().join("alerts.test.yaml"),
        read("deploy/monitoring/alerts.test.yaml"),
    )
    .unwrap();
    let checked = promtool(&["check", "rules", "rules.yaml"], dir.path());
    assert!(checked.contains("SUCCESS: 13 rules found"), "{checked}");
    promtool(&["test", "rules", "alerts.test.yaml"], dir.path());
    // Every alert has a case.
    let tests = read("deploy/monitoring/alerts.test.yaml");
    let rules: Value = serde_yaml::from_str(&rules_file()).unwrap();
    for r in rules["groups"][0]["rules"].as_array().unwrap() {
        let name = r["alert"].as_str().unwrap();
        assert!(
            tests.contains(&format!("alertname: {name}\n"))
                || tests.contains(&format!("alertname: {name},")),
            "alert {name} has no case in alerts.test.yaml"
        );
    }
}

/// The metric names a PromQL expression reads (ruleop's and the process's).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        let word = &expr[start..i];
        let before = start.checked_sub(1).map(|b| bytes[b]);
        if (word.starts_with("ruleop_") || word.starts_with("process_"))
            && before != Some(b'"')
            && before != Some(b'$')
        {
            out.insert(word.to_string());
        }
        if i == start {
            i += 1;
        }
    }
    out
}

/// ruleop's metrics with a series in every family (a family shows on /metrics once it has
/// one), as a running rule with a rollout, errors, writes and Events gives them.
fn populated() -> String {
    use ruleop::metrics::{
        Counts, IdentityLabels, Metrics, RevisionLabels, RuleIdentityLabels, RuleLabels,
    };
    let m = Metrics::default();
    let rule = || RuleLabels {
        rule: "website".into(),
    };
    drop(m.reconcile("website"));
    m.error("website", "render");
    m.write("website", "create");
    m.slow_write("website");
    m.event_dropped("website");
    for g in [
        &m.retired_kinds_pending,
        &m.rule_older,
        &m.rollout_step,
        &m.rollout_updated,
        &m.rollout_paused,
        &m.rule_missing_permissions,
    ] {
        g.get_or_create(&rule()).set(0);
    }
    m.rule_info
        .get_or_create(&RevisionLabels {
            rule: "website".into(),
            revision: "1".into(),
        })
        .set(1);
    m.identity_requests
        .get_or_create(&IdentityLabels {
            identity: "ruleop".into(),
        })
        .inc();
    m.rule_identity
        .get_or_create(&RuleIdentityLabels {
            rule: "website".into(),
            identity: "ruleop".into(),
        })
        .set(1);
    let _counted = m.census.count("website", Box::new(Counts::default));
    m.render()
}

/// The names ruleop's /metrics exposes: each family's, and its series' (`_total`,
/// `_bucket`, `_sum`, `_count` for counters and histograms).
fn exposed() -> BTreeSet<String> {
    let text = populated();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        out.insert(name.to_string());
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[],
        };
        for s in suffixes {
            out.insert(format!("{name}{s}"));
        }
    }
    out
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/monitoring/dashboard.json")).unwrap()
}

/// Each query of the dashboard, with the panel it is of.
fn dashboard_queries() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in dashboard()["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            out.push((
                format!("dashboard panel {:?}", p["title"]),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

#[test]
fn every_query_of_the_dashboard_and_the_alerts_names_an_exposed_metric() {
    let exposed = exposed();
    assert!(exposed.contains("ruleop_resources"), "{exposed:?}");
    let mut queried = dashboard_queries();
    let rules: Value = serde_yaml::from_str(&rules_file()).unwrap();
    for r in rules["groups"][0]["rules"].as_array().unwrap() {
        queried.push((
            format!("alert {}", r["alert"]),
            r["expr"].as_str().unwrap().to_string(),
        ));
    }
    assert!(queried.len() > 20, "{queried:?}");
    for (what, expr) in &queried {
        let names = metric_names(expr);
        // (`up` is Prometheus's own, of ruleop's targets.)
        assert!(
            !names.is_empty() || expr.contains("up{job=\"ruleop\"}"),
            "{what}: no metric in {expr}"
        );
        for n in names {
            assert!(
                exposed.contains(&n),
                "{what} queries {n}, which ruleop's /metrics does not expose ({expr})"
            );
        }
    }
}

/// A heading's anchor as mdBook makes it: lower case, spaces to dashes, other punctuation
/// left out.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_links_to_a_runbook_section_that_says_what_to_do() {
    const BASE: &str = "https://ruleop.dev/docs/";
    let rules: Value = serde_yaml::from_str(&rules_file()).unwrap();
    let alerts = rules["groups"][0]["rules"].as_array().unwrap();
    assert!(alerts.len() >= 13, "{alerts:?}");
    for r in alerts {
        let name = r["alert"].as_str().unwrap();
        let url = r["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("alert {name} has no runbook_url"));
        let (page, fragment) = url
            .strip_prefix(BASE)
            .and_then(|u| u.split_once('#'))
            .unwrap_or_else(|| panic!("alert {name}: {url} is not {BASE}PAGE.html#ANCHOR"));
        let file = format!("docs/{}", page.replace(".html", ".md"));
        let text = std::fs::read_to_string(format!("{ROOT}/{file}"))
            .unwrap_or_else(|e| panic!("alert {name}: {url} names {file}: {e}"));
        // The section of that anchor, to the next heading of its level.
        let mut sections = text.split("\n## ").skip(1);
        let section = sections
            .find(|s| anchor(s.lines().next().unwrap_or("")) == fragment)
            .unwrap_or_else(|| panic!("alert {name}: {file} has no section #{fragment}"));
        for part in [
            "**What it means.**",
            "**What to look at.**",
            "**What to do.**",
        ] {
            assert!(
                section.contains(part),
                "alert {name}: its runbook ({file}#{fragment}) lacks {part}"
            );
        }
    }
}

#[test]
fn every_query_of_the_dashboard_is_filtered_by_cluster_namespace_and_rule() {
    let vars: Vec<String> = dashboard()["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    for v in ["cluster", "namespace", "rule", "job"] {
        assert!(vars.iter().any(|n| n == v), "no variable {v} in {vars:?}");
    }
    let per_rule = populated()
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("rule=\""))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect::<BTreeSet<_>>();
    for n in [
        "ruleop_reconciles_total",
        "ruleop_reconcile_duration_seconds_bucket",
    ] {
        assert!(per_rule.contains(n), "{n} in {per_rule:?}");
    }
    for (panel, expr) in dashboard_queries() {
        for name in metric_names(&expr) {
            // Each reference of the metric carries the filters.
            for (at, _) in expr.match_indices(&name) {
                let rest = &expr[at + name.len()..];
                if rest.starts_with(|c: char| c == '_' || c.is_alphanumeric()) {
                    continue;
                }
                let selector = rest
                    .strip_prefix('{')
                    .and_then(|s| s.split('}').next())
                    .unwrap_or_else(|| panic!("{panel}: {name} unfiltered in {expr}"));
                let mut want = vec![
                    "cluster=~\"$cluster\"",
                    "namespace=~\"$namespace\"",
                    "job=~\"$job\"",
                ];
                if per_rule.contains(&name) {
                    want.push("rule=~\"$rule\"");
                }
                for w in want {
                    assert!(selector.contains(w), "{panel}: {name} lacks {w} in {expr}");
                }
            }
        }
    }
}
