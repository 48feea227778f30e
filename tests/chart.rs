//! The chart's values as an SRE meets them, rendered with helm (no cluster): a typo in a
//! value refused by `values.schema.json`, which holds every key of `values.yaml` and no other;
//! no PodDisruptionBudget with one replica; two installations whose objects share no name;
//! the standard labels on every object; the NetworkPolicy's ports; a client sized for a
//! shared API server. (`tests/helm.rs` installs the chart on a control plane.)

mod common;

use common::chart::{refused, template};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap()
}

/// The key paths of a values tree, but under the maps whose keys are the user's.
fn value_paths(v: &Value, at: &str, free: &BTreeSet<&str>, out: &mut BTreeSet<String>) {
    if let Some(m) = v.as_object() {
        for (k, v) in m {
            let path = format!("{at}.{k}");
            out.insert(path.clone());
            if !free.contains(path.as_str()) {
                value_paths(v, &path, free, out);
            }
        }
    }
}

/// The property paths of a JSON Schema; `free`: those whose keys it leaves open.
fn schema_paths(s: &Value, at: &str, out: &mut BTreeSet<String>, free: &mut BTreeSet<String>) {
    let Some(props) = s["properties"].as_object() else {
        if !at.is_empty() && s["type"] == "object" {
            free.insert(at.to_string());
        }
        return;
    };
    assert_eq!(
        s["additionalProperties"],
        Value::Bool(false),
        "{at}: the schema refuses keys it does not know"
    );
    for (k, p) in props {
        let path = format!("{at}.{k}");
        out.insert(path.clone());
        schema_paths(p, &path, out, free);
    }
}

#[test]
fn the_schema_holds_every_value_and_refuses_a_typo() {
    let values: Value = serde_yaml::from_str(&read("charts/ruleop/values.yaml")).unwrap();
    let schema: Value = serde_json::from_str(&read("charts/ruleop/values.schema.json")).unwrap();
    let (mut in_schema, mut free) = (BTreeSet::new(), BTreeSet::new());
    schema_paths(&schema, "", &mut in_schema, &mut free);
    let free_refs: BTreeSet<&str> = free.iter().map(String::as_str).collect();
    let mut in_values = BTreeSet::new();
    value_paths(&values, "", &free_refs, &mut in_values);
    assert_eq!(
        in_schema, in_values,
        "values.schema.json and values.yaml name the same keys (add the new value to both)"
    );
    let typo = refused(&["replica=1"]);
    assert!(typo.contains("'replica' not allowed"), "{typo}");
    let wrong = refused(&["events=some"]);
    assert!(wrong.contains("events"), "{wrong}");
    let nested = refused(&["client.qsp=5"]);
    assert!(nested.contains("'qsp' not allowed"), "{nested}");
}

fn kinds(objects: &BTreeMap<String, Value>) -> BTreeSet<String> {
    objects
        .values()
        .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_webhooks_certificate_can_come_from_cert_manager() {
    let own = template("ruleop", "ruleop-system", &[]);
    assert!(!kinds(&own).contains("Certificate"), "{:?}", own.keys());
    let args = |o: &BTreeMap<String, Value>| {
        o["Deployment ruleop-system/ruleop"]["spec"]["template"]["spec"]["containers"][0]["args"]
            .clone()
    };
    assert!(!args(&own).to_string().contains("--webhook-certificates"));
    let cm = template(
        "ruleop",
        "ruleop-system",
        &["webhook.certManager.enabled=true"],
    );
    let cert = &cm["Certificate ruleop-system/ruleop-webhook"]["spec"];
    assert_eq!(cert["secretName"], "ruleop-webhook-tls", "{cert}");
    assert_eq!(
        cert["dnsNames"][0], "ruleop-webhook.ruleop-system.svc",
        "{cert}"
    );
    assert_eq!(cert["issuerRef"]["name"], "ruleop-selfsigned", "{cert}");
    assert!(cm.contains_key("Issuer ruleop-system/ruleop-selfsigned"));
    assert!(
        args(&cm)
            .as_array()
            .unwrap()
            .contains(&Value::from("--webhook-certificates=external"))
    );
    let hook = &cm["ValidatingWebhookConfiguration /ruleop"]["metadata"]["annotations"];
    assert_eq!(
        hook["cert-manager.io/inject-ca-from"], "ruleop-system/ruleop-webhook",
        "{hook}"
    );
    // A CA of the cluster's: no Issuer of the chart's.
    let theirs = template(
        "ruleop",
        "ruleop-system",
        &[
            "webhook.certManager.enabled=true",
            "webhook.certManager.issuerRef.name=corp-ca",
            "webhook.certManager.issuerRef.kind=ClusterIssuer",
        ],
    );
    let cert = &theirs["Certificate ruleop-system/ruleop-webhook"]["spec"];
    assert_eq!(cert["issuerRef"]["kind"], "ClusterIssuer", "{cert}");
    assert!(!kinds(&theirs).contains("Issuer"));
    assert!(refused(&["webhook.certManager.issuerRef.kind=Secret"]).contains("kind"));
}

#[test]
fn the_admin_port_serves_https_with_a_secrets_certificate_and_prometheus_trusts_it() {
    let o = template(
        "ruleop",
        "ruleop-system",
        &[
            "monitoring.tls.secretName=metrics-tls",
            "monitoring.serviceMonitor.enabled=true",
        ],
    );
    let pod = &o["Deployment ruleop-system/ruleop"]["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args = c["args"].as_array().unwrap();
    assert!(args.contains(&Value::from(
        "--admin-tls-cert=/etc/ruleop/admin-tls/tls.crt"
    )));
    assert!(args.contains(&Value::from(
        "--admin-tls-key=/etc/ruleop/admin-tls/tls.key"
    )));
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS", "{c}");
    assert_eq!(c["livenessProbe"]["httpGet"]["scheme"], "HTTPS", "{c}");
    let volumes = pod["volumes"].to_string();
    assert!(
        volumes.contains("\"secretName\":\"metrics-tls\""),
        "{volumes}"
    );
    assert!(
        volumes.contains("ruleop-rules"),
        "the rules still mounted: {volumes}"
    );
    let ep = &o["ServiceMonitor ruleop-system/ruleop"]["spec"]["endpoints"][0];
    assert_eq!(ep["scheme"], "https", "{ep}");
    assert_eq!(
        ep["tlsConfig"]["ca"]["secret"]["name"], "metrics-tls",
        "{ep}"
    );
    // Off by default: plain HTTP probes, no TLS arguments.
    let plain = template("ruleop", "ruleop-system", &[]);
    let c = &plain["Deployment ruleop-system/ruleop"]["spec"]["template"]["spec"]["containers"][0];
    assert!(c["readinessProbe"]["httpGet"]["scheme"].is_null(), "{c}");
    assert!(!c["args"].to_string().contains("admin-tls"));
}

#[test]
fn one_replica_gets_no_disruption_budget_to_block_a_drain() {
    let one = template("ruleop", "ruleop-system", &["replicas=1"]);
    assert!(
        !kinds(&one).contains("PodDisruptionBudget"),
        "{:?}",
        one.keys()
    );
    let two = template("ruleop", "ruleop-system", &[]);
    let pdb = &two["PodDisruptionBudget ruleop-system/ruleop"]["spec"];
    assert_eq!(pdb["maxUnavailable"], 1, "{pdb}");
    assert!(pdb["minAvailable"].is_null(), "{pdb}");
    let d = &two["Deployment ruleop-system/ruleop"]["spec"];
    assert_eq!(d["strategy"]["rollingUpdate"]["maxUnavailable"], 0, "{d}");
}

#[test]
fn two_installations_share_no_name_and_each_object_says_whose_it_is() {
    let first = template("ruleop", "ruleop-system", &[]);
    let second = template(
        "web",
        "team-web",
        &[
            "extraArgs={--rule-selector=team=web}",
            "podAnnotations.a=b",
            "serviceAccount.annotations.c=d",
        ],
    );
    let names = |o: &BTreeMap<String, Value>| -> BTreeSet<String> { o.keys().cloned().collect() };
    let both: Vec<String> = names(&first)
        .intersection(&names(&second))
        .cloned()
        .collect();
    assert!(both.is_empty(), "objects of both installations: {both:?}");
    for (key, o) in &second {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            name.starts_with("web-ruleop"),
            "{key}: not named for its release"
        );
        let labels = &o["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/name"], "ruleop",
            "{key}: {labels}"
        );
        assert_eq!(
            labels["app.kubernetes.io/instance"], "web",
            "{key}: {labels}"
        );
    }
    // Whatever refers to a name refers to this installation's.
    let d = &second["Deployment team-web/web-ruleop"]["spec"]["template"];
    assert_eq!(d["spec"]["serviceAccountName"], "web-ruleop");
    assert_eq!(d["metadata"]["annotations"]["a"], "b");
    let args: Vec<&str> = d["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for want in [
        "--webhook-service=team-web/web-ruleop-webhook",
        "--webhook-name=web-ruleop",
        "--rule-selector=team=web",
    ] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    assert_eq!(
        second["ServiceAccount team-web/web-ruleop"]["metadata"]["annotations"]["c"],
        "d"
    );
    let hook = &second["ValidatingWebhookConfiguration /web-ruleop"]["webhooks"][0];
    assert_eq!(
        hook["clientConfig"]["service"]["name"],
        "web-ruleop-webhook"
    );
    let binding = &second["ClusterRoleBinding /web-ruleop"];
    assert_eq!(binding["roleRef"]["name"], "web-ruleop");
    assert_eq!(binding["subjects"][0]["name"], "web-ruleop");
    assert_eq!(binding["subjects"][0]["namespace"], "team-web");
    let lease_role = second["Role team-web/web-ruleop-leader-election"]["rules"].to_string();
    assert!(
        lease_role.contains("web-ruleop-webhook-tls"),
        "{lease_role}"
    );
    assert!(lease_role.contains("\"ruleop-inventory\""), "{lease_role}");
    let pins = &second["ValidatingAdmissionPolicyBinding /web-ruleop-revision-pins"];
    assert_eq!(pins["spec"]["policyName"], "web-ruleop-revision-pins");
}

#[test]
fn the_admin_port_is_closed_but_to_whom_metrics_from_names_and_egress_is_bounded() {
    let np = |set: &[&str]| {
        template("ruleop", "ruleop-system", set)["NetworkPolicy ruleop-system/ruleop"]["spec"]
            .clone()
    };
    let closed = np(&[]);
    let ingress = closed["ingress"].to_string();
    assert!(
        ingress.contains("webhook") && !ingress.contains("admin"),
        "{ingress}"
    );
    assert!(
        closed["policyTypes"].to_string().contains("Egress"),
        "{closed}"
    );
    let egress = closed["egress"].to_string();
    for port in ["443", "6443", "53"] {
        assert!(egress.contains(port), "{egress}");
    }
    let open = np(&["networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus"]);
    let admin = open["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ports"][0]["port"] == "admin")
        .cloned()
        .expect("the admin port open to metricsFrom");
    assert_eq!(
        admin["from"][0]["podSelector"]["matchLabels"]["app"],
        "prometheus"
    );
}

#[test]
fn the_client_is_sized_for_a_shared_api_server_and_ruleops_own_on_request() {
    let args = |set: &[&str]| -> Vec<String> {
        template("ruleop", "ruleop-system", set)["Deployment ruleop-system/ruleop"]["spec"]["template"]["spec"]
            ["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect()
    };
    let shared = args(&[]);
    for want in ["--qps=100", "--burst=200", "--max-in-flight=64"] {
        assert!(shared.iter().any(|a| a == want), "{want} not in {shared:?}");
    }
    let own = args(&[
        "client.qps=null",
        "client.burst=null",
        "client.maxInFlight=null",
    ]);
    assert!(
        !own.iter()
            .any(|a| a.starts_with("--qps") || a.starts_with("--burst")),
        "{own:?}"
    );
}
