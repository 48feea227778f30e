//! Figures read from Prometheus text: the API server's writes and request times by
//! resource and verb, ruleop's own /metrics.

use super::*;

/// Seconds since the Unix epoch (to line the waves up with `vmstat -t` and the like).
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The API server's /metrics, as text.
pub(crate) async fn api_metrics(c: &Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    c.request_text(req).await.unwrap_or_default()
}

/// The value of label `k` in one line of Prometheus text ("" when absent).
pub(crate) fn label(line: &str, k: &str) -> String {
    line.split(&format!("{k}=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("")
        .to_string()
}

/// Write requests by (resource, subresource, verb), from the API server's metrics.
pub(crate) fn writes(text: &str) -> BTreeMap<(String, String, String), f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |k: &str| label(line, k);
        let verb = label("verb");
        if !matches!(
            verb.as_str(),
            "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE" | "DELETECOLLECTION"
        ) {
            continue;
        }
        *out.entry((label("resource"), label("subresource"), verb))
            .or_default() += value(line);
    }
    out
}

/// Requests of every verb, reads too, by "VERB resource[/subresource]" (requests for a
/// resource only: /metrics and discovery aside), from the API server's metrics.
pub(crate) fn requests(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let resource = label(line, "resource");
        if resource.is_empty() {
            continue;
        }
        let sub = label(line, "subresource");
        let sub = if sub.is_empty() {
            sub
        } else {
            format!("/{sub}")
        };
        *out.entry(format!("{} {resource}{sub}", label(line, "verb")))
            .or_default() += value(line);
    }
    out
}

/// The requests per resource between two snapshots of [`requests`]: the system's, less the
/// client's own (`client_own`: "VERB resource" and how many) and the API server's own
/// (Leases, its ClusterIP allocations, the benchmark's namespace).
pub(crate) fn per_cr(
    a: &BTreeMap<String, f64>,
    b: &BTreeMap<String, f64>,
    n: usize,
    client_own: &[(&str, f64)],
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (k, v) in b {
        let resource = k.split_once(' ').map_or("", |(_, r)| r);
        if matches!(resource, "leases" | "namespaces" | "ipaddresses") {
            continue;
        }
        let own = client_own
            .iter()
            .find(|(c, _)| c == k)
            .map_or(0.0, |(_, n)| *n);
        let d = v - a.get(k).copied().unwrap_or(0.0) - own;
        if d > 0.0 {
            out.insert(k.clone(), d / n as f64);
        }
    }
    out
}

/// The value of one line of Prometheus text (0 when it has none).
pub(crate) fn value(line: &str) -> f64 {
    line.rsplit_once(' ')
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

/// The sum of the values of the lines of Prometheus text that start with `prefix`.
pub(crate) fn total(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(value)
        .sum()
}

/// The API server's requests by (resource, subresource, verb): how many, and the seconds
/// they took in all (its request-duration histogram's `_count` and `_sum`).
pub(crate) fn request_time(text: &str) -> BTreeMap<(String, String, String), (f64, f64)> {
    let mut out: BTreeMap<_, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let count = line.starts_with("apiserver_request_duration_seconds_count{");
        if !count && !line.starts_with("apiserver_request_duration_seconds_sum{") {
            continue;
        }
        let key = (
            label(line, "resource"),
            label(line, "subresource"),
            label(line, "verb"),
        );
        let e = out.entry(key).or_default();
        if count {
            e.0 += value(line);
        } else {
            e.1 += value(line);
        }
    }
    out
}

/// (writes of the system, events) between two snapshots, less the client's own requests.
pub(crate) fn delta(
    a: &BTreeMap<(String, String, String), f64>,
    b: &BTreeMap<(String, String, String), f64>,
    client_own: &[(&str, &str, &str, f64)],
) -> (f64, f64) {
    let mut w = 0.0;
    let mut ev = 0.0;
    for (k, v) in b {
        let d = v - a.get(k).copied().unwrap_or(0.0);
        if d > 0.0 && std::env::var_os("RULEOP_BENCH_DEBUG").is_some() {
            eprintln!("  writes {k:?}: {d}");
        }
        match k.0.as_str() {
            // Leases: the API server's own heartbeat. IPAddresses: the API server allocating
            // a Service's ClusterIP. Namespaces: the benchmark's own.
            "leases" | "namespaces" | "ipaddresses" => {}
            "events" => ev += d,
            _ => w += d,
        }
    }
    for (r, s, verb, n) in client_own {
        if b.contains_key(&((*r).to_string(), (*s).to_string(), (*verb).to_string())) {
            w -= n;
        }
    }
    (w, ev)
}

/// API-server figures for diagnosis (RULEOP_BENCH_PROFILE): seconds the server spent on
/// requests, by verb and resource, and watch events it sent, by kind.
pub(crate) fn server_figures(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for ((resource, sub, verb), (_, seconds)) in request_time(text) {
        let sub = if sub.is_empty() {
            sub
        } else {
            format!("/{sub}")
        };
        *out.entry(format!("server seconds {verb} {resource}{sub}"))
            .or_default() += seconds;
    }
    for line in text.lines() {
        let key = if line.starts_with("apiserver_watch_events_total{") {
            format!("watch events {}", label(line, "kind"))
        } else if line.starts_with("apiserver_watch_events_sizes_sum{") {
            format!("watch bytes {}", label(line, "kind"))
        } else {
            continue;
        };
        *out.entry(key).or_default() += value(line);
    }
    out
}

/// ruleop's own /metrics (plain HTTP on its admin address).
pub(crate) fn admin_metrics() -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(ADMIN_ADDR) else {
        return String::new();
    };
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: ruleop\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// ruleop's time per reconcile by stage (`ruleop_reconcile_stage_seconds`) and in all
/// (`ruleop_reconcile_duration_seconds`): mean milliseconds and how many, from its /metrics.
pub(crate) fn stage_means(text: &str) -> BTreeMap<String, (f64, f64)> {
    let mut sums: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let (name, rest) = line.split_once('{').unwrap_or((line, ""));
        let (key, is_sum) = match name {
            "ruleop_reconcile_stage_seconds_sum" => (label(rest, "stage"), true),
            "ruleop_reconcile_stage_seconds_count" => (label(rest, "stage"), false),
            "ruleop_reconcile_duration_seconds_sum" => ("reconcile".to_string(), true),
            "ruleop_reconcile_duration_seconds_count" => ("reconcile".to_string(), false),
            _ => continue,
        };
        let e = sums.entry(key).or_default();
        if is_sum {
            e.0 += value(line);
        } else {
            e.1 += value(line);
        }
    }
    sums.into_iter()
        .filter(|(_, (_, n))| *n > 0.0)
        .map(|(k, (s, n))| (k, (s * 1000.0 / n, n)))
        .collect()
}
