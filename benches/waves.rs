//! `make bench`: ruleop against the peers and the machine's floor, side by side, in one
//! run, on a control plane with only etcd and the API server (so every write counted is
//! the system's, less the benchmark client's own, which are known exactly).
//!
//! Per system: a create wave of N WebSites (done when all 2N children exist and every
//! status has observedGeneration = generation), an update wave (every image changed; done
//! when every Deployment has it and every status is current), and a steady-state window.
//! Writes come from `apiserver_request_total`; peak RSS and CPU seconds from /proc. Every
//! system run is bracketed by two runs of the floor and reported as a ratio to their mean;
//! rounds repeat the sequence and the median is reported.
//!
//! With RULEOP_BENCH_SCALE=1000,3000,10000, the scale runs instead (see `waves/scale.rs`).
//!
//! Env: RULEOP_BENCH_N (default 1000), RULEOP_BENCH_STEADY_SECONDS (60),
//! RULEOP_BENCH_ROUNDS (3), RULEOP_BENCH_SYSTEMS (default:
//! ruleop,ruleop-warnings,controller-runtime,kopf,kro; the floor always runs; also
//! available: ruleop-c<N> (`--concurrency=<N>`), ruleop-1t, ruleop-rule (the rule as a Rule object), floor+conditions, floor-min (only the changed Deployment applied in the update wave, the status by merge patch), and ruleop-before / ruleop-alt from
//! target/bench/bin), RULEOP_BENCH_LOG (ruleop's RUST_LOG, default warn; the log goes to
//! target/bench/logs/), RULEOP_BENCH_DEBUG=1 (writes per
//! resource), RULEOP_BENCH_PROFILE=SECONDS (a pprof CPU profile of the API server and a
//! `perf` profile of ruleop over the create wave, in target/bench/profiles/; CPU seconds of
//! each process, the API server's time per verb and resource, ruleop's own counters),
//! RULEOP_BENCH_KCM_ARGS (more controller-manager flags, for the latency runs: the only
//! ones with a controller-manager).
//! Profiling costs CPU on the same cores: its timings are not comparable with a plain run.

use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, Config};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "waves/cluster.rs"]
mod cluster;
#[path = "waves/floor.rs"]
mod floor;
#[path = "waves/prom.rs"]
mod prom;
#[path = "waves/scale.rs"]
mod scale;
#[path = "waves/seen.rs"]
mod seen;
#[path = "waves/stats.rs"]
mod stats;
#[path = "waves/systems.rs"]
mod systems;

use cluster::*;
use floor::*;
use prom::*;
use seen::*;
use systems::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const NS: &str = "bench";
const CONCURRENCY: usize = 64;
/// ruleop's admin server during the benchmark (its /metrics are read with RULEOP_BENCH_PROFILE).
const ADMIN_ADDR: &str = "127.0.0.1:18391";

#[derive(Debug, Default, Clone, serde::Serialize)]
struct Figures {
    system: String,
    create_seconds: f64,
    update_seconds: f64,
    create_ratio_to_floor: Option<f64>,
    update_ratio_to_floor: Option<f64>,
    writes_per_cr_create: f64,
    /// Events per WebSite over the whole run (both waves and the steady window): Events
    /// are published off the reconcile path, so some of the create wave's land later.
    events_per_cr: f64,
    writes_per_cr_update: f64,
    steady_writes_per_minute: f64,
    peak_rss_mib: Option<f64>,
    cpu_seconds: Option<f64>,
    /// RSS and CPU seconds after start-up, before the first request (the scale runs'
    /// growth is of what comes on top).
    idle_rss_mib: Option<f64>,
    idle_cpu_seconds: Option<f64>,
    /// RSS at the end of the run (after the steady window): what stays, against the peak.
    end_rss_mib: Option<f64>,
    /// Requests per WebSite in each wave, reads too, by "VERB resource" (the client's own
    /// creates and patches of the WebSites aside).
    requests_per_cr_create: BTreeMap<String, f64>,
    requests_per_cr_update: BTreeMap<String, f64>,
    /// ruleop's mean milliseconds per reconcile by stage, and how many (both waves).
    stage_ms: BTreeMap<String, (f64, f64)>,
    /// The round of this run (0 for the first).
    round: usize,
    /// Over the rounds: the ratios' median and 90 % interval.
    create_ratio_interval: Option<stats::Interval>,
    update_ratio_interval: Option<stats::Interval>,
    note: String,
}

fn deployment_ar() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&())
}

fn website_ar() -> ApiResource {
    ApiResource {
        group: "sre.example.com".into(),
        version: "v1alpha1".into(),
        api_version: "sre.example.com/v1alpha1".into(),
        kind: "WebSite".into(),
        plural: "websites".into(),
    }
}

async fn run_system(system: &str, n: usize, steady: u64) -> Result<Figures, String> {
    let kc = fresh_cluster(system)?;
    let c = client(&kc).await;
    let mut proc_ = start(system, &kc)?;
    if system == "kro" {
        install_kro_rgd(&kc).await?;
    }
    // Every system, the floor included, starts its waves after the same settle time: a
    // freshly started API server is still busy with its own start-up for a few seconds.
    tokio::time::sleep(Duration::from_secs(8)).await;
    {
        if let Some(p) = proc_.as_mut()
            && let Ok(Some(st)) = p.try_wait()
        {
            return Err(format!(
                "{system} exited at start ({st}); see target/bench/logs/{system}.log"
            ));
        }
    }
    let (idle_rss_mib, idle_cpu_seconds) = proc_
        .as_ref()
        .map(|p| proc_figures(p.id()))
        .unwrap_or((None, None));
    let (rules, _) = ruleop::rules::load_str(
        include_str!("../rules/website.yaml"),
        Path::new("website.yaml"),
    );
    let rule = rules[0].clone();
    let sites: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &website_ar());
    let is_floor = system.starts_with("floor");
    let floor_kind = FloorKind::of(system);
    let (seen, watches) = watch_namespace(&c);

    // Create wave.
    let profile = std::env::var("RULEOP_BENCH_PROFILE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let m0 = api_metrics(&c).await;
    let s0 = server_figures(&m0);
    // CPU seconds of each process during the wave: the API server, etcd, this client, the
    // system under test.
    let pid_of = |f: &str| {
        std::fs::read_to_string(cluster_dir().join("pids").join(f))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
    };
    let watched_pids: Vec<(&str, u32)> = [
        ("kube-apiserver", pid_of("kube-apiserver.pid")),
        ("etcd", pid_of("etcd.pid")),
        ("bench client", Some(std::process::id())),
        ("system", proc_.as_ref().map(Child::id)),
    ]
    .into_iter()
    .filter_map(|(what, pid)| Some((what, pid?)))
    .collect();
    let cpu0: Vec<Option<f64>> = watched_pids
        .iter()
        .map(|(_, p)| proc_figures(*p).1)
        .collect();
    let w0 = writes(&m0);
    let profiles = match profile {
        Some(secs) => start_profiles(&c, system, proc_.as_ref().map(Child::id), secs),
        None => Vec::new(),
    };
    let started_at = unix_now();
    let t0 = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let (sites, c, rule) = (sites.clone(), c.clone(), rule.clone());
            async move {
                let cr = website(i, "nginx:1");
                let obj: DynamicObject = serde_json::from_value(cr.clone()).unwrap();
                let created = sites.create(&PostParams::default(), &obj).await;
                if is_floor && let Ok(o) = created {
                    floor_writes(&c, &rule, &o, &cr, floor_kind, false).await;
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    if std::env::var_os("RULEOP_BENCH_DEBUG").is_some() {
        eprintln!("  client done after {:?}", t0.elapsed());
    }
    let create_seconds = wait_converged(&seen, n, "nginx:1", 1, t0).await?;
    if profile.is_some() {
        eprintln!(
            "  {system} create wave: from {started_at:.1} to {:.1} (unix time)",
            unix_now()
        );
    }
    let m1 = api_metrics(&c).await;
    let w1 = writes(&m1);
    let (cw, _) = delta(&w0, &w1, &[("websites", "", "POST", n as f64)]);
    let requests_per_cr_create = per_cr(
        &requests(&m0),
        &requests(&m1),
        n,
        &[("POST websites", n as f64)],
    );
    if profile.is_some() {
        for ((what, p), before) in watched_pids.iter().zip(&cpu0) {
            if let (Some(a), (_, Some(b))) = (before, proc_figures(*p)) {
                eprintln!(
                    "  {system} create wave: CPU seconds of {what}: {:.2}",
                    b - a
                );
            }
        }
        if system.starts_with("ruleop") {
            for line in admin_metrics().lines().filter(|l| {
                l.starts_with("ruleop_reconciles_total") || l.starts_with("ruleop_writes_total")
            }) {
                eprintln!("  {system} create wave: {line}");
            }
        }
        let s1 = server_figures(&m1);
        for (k, v) in &s1 {
            let d = v - s0.get(k).copied().unwrap_or(0.0);
            if d > 0.0 {
                eprintln!("  {system} create wave: {k}: {d:.2}");
            }
        }
        for t in profiles {
            let _ = t.await;
        }
    }

    // Update wave.
    let t0 = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let (sites, c, rule) = (sites.clone(), c.clone(), rule.clone());
            async move {
                let p = json!({"spec": {"image": "nginx:2"}});
                let patched = sites
                    .patch(&format!("s{i}"), &PatchParams::default(), &Patch::Merge(&p))
                    .await;
                if is_floor && let Ok(o) = patched {
                    floor_writes(&c, &rule, &o, &website(i, "nginx:2"), floor_kind, true).await;
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let update_seconds = wait_converged(&seen, n, "nginx:2", 2, t0).await?;
    let m2 = api_metrics(&c).await;
    let w2 = writes(&m2);
    let (uw, _) = delta(&w1, &w2, &[("websites", "", "PATCH", n as f64)]);
    let requests_per_cr_update = per_cr(
        &requests(&m1),
        &requests(&m2),
        n,
        &[("PATCH websites", n as f64)],
    );

    let stage_ms = if system.starts_with("ruleop") {
        stage_means(&admin_metrics())
    } else {
        BTreeMap::new()
    };

    // Steady state.
    tokio::time::sleep(Duration::from_secs(steady)).await;
    let w3 = writes(&api_metrics(&c).await);
    let (sw, _) = delta(&w2, &w3, &[]);
    let (_, events) = delta(&w0, &w3, &[]);

    let (rss, cpu) = proc_
        .as_ref()
        .map(|p| proc_figures(p.id()))
        .unwrap_or((None, None));
    let end_rss_mib = proc_.as_ref().and_then(|p| current_rss(p.id()));
    for w in watches {
        w.abort();
    }
    if let Some(mut p) = proc_ {
        let _ = p.kill();
        let _ = p.wait();
    }
    let _ = sh(Command::new(format!("{ROOT}/tests/cluster/down.sh"))
        .env("RULEOP_CLUSTER_DIR", cluster_dir()));
    Ok(Figures {
        system: system.into(),
        create_seconds,
        update_seconds,
        writes_per_cr_create: cw / n as f64,
        events_per_cr: events / n as f64,
        writes_per_cr_update: uw / n as f64,
        steady_writes_per_minute: sw * 60.0 / steady as f64,
        peak_rss_mib: rss,
        cpu_seconds: cpu,
        idle_rss_mib,
        idle_cpu_seconds,
        end_rss_mib,
        requests_per_cr_create,
        requests_per_cr_update,
        stage_ms,
        ..Default::default()
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

#[tokio::main]
async fn main() {
    if let Ok(list) = std::env::var("RULEOP_BENCH_SCALE") {
        let sizes: Vec<usize> = list
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        let steady: u64 = std::env::var("RULEOP_BENCH_STEADY_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30);
        if sizes.is_empty() {
            eprintln!("bench: RULEOP_BENCH_SCALE={list:?} names no size; nothing to run");
        } else {
            scale::main(sizes, steady).await;
        }
        return;
    }
    let n: usize = std::env::var("RULEOP_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let steady: u64 = std::env::var("RULEOP_BENCH_STEADY_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let systems = std::env::var("RULEOP_BENCH_SYSTEMS")
        .unwrap_or_else(|_| "ruleop,ruleop-warnings,controller-runtime,kopf,kro".into());
    let rounds: usize = std::env::var("RULEOP_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let names: Vec<&str> = systems
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let mut runs: BTreeMap<String, Vec<Figures>> = BTreeMap::new();
    let mut absent: BTreeMap<String, String> = BTreeMap::new();
    // Every system run is bracketed by floor runs (floor, A, floor, B, floor, ...), and its
    // ratio is to the mean of the floor just before and just after it: on a shared
    // machine the speed drifts within minutes, so a ratio to a floor measured long before
    // is mostly noise. Rounds repeat this; the median of the ratios is the figure.
    let mut floor_prev: Option<Figures> = None;
    let systems_only: Vec<&str> = names.iter().copied().filter(|s| *s != "floor").collect();
    let total = rounds * systems_only.len();
    let mut done = 0;
    let run_floor = |label: String| async move {
        eprintln!("bench: {label}: floor with N={n} ...");
        run_system("floor", n, 0).await
    };
    match run_floor("start".into()).await {
        Ok(f) => floor_prev = Some(f),
        Err(e) => eprintln!("bench: floor failed: {e}"),
    }
    for round in 0..rounds {
        let last = round + 1 == rounds;
        for s in &systems_only {
            if absent.contains_key(*s) {
                continue;
            }
            done += 1;
            eprintln!(
                "bench: round {}/{rounds} ({done}/{total}): {s} with N={n} ...",
                round + 1
            );
            let mut f = match run_system(s, n, if last { steady } else { 0 }).await {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("bench: {s} absent: {e}");
                    absent.insert((*s).to_string(), e);
                    continue;
                }
            };
            let after = run_floor(format!("after {s}")).await.ok();
            let (create, update) = match (&floor_prev, &after) {
                (Some(a), Some(b)) => (
                    (a.create_seconds + b.create_seconds) / 2.0,
                    (a.update_seconds + b.update_seconds) / 2.0,
                ),
                (Some(x), None) | (None, Some(x)) => (x.create_seconds, x.update_seconds),
                (None, None) => (f64::NAN, f64::NAN),
            };
            f.create_ratio_to_floor = Some(f.create_seconds / create);
            f.update_ratio_to_floor = Some(f.update_seconds / update);
            f.round = round;
            runs.entry(f.system.clone()).or_default().push(f);
            if let Some(mut b) = after {
                b.round = round;
                b.create_ratio_to_floor = Some(1.0);
                b.update_ratio_to_floor = Some(1.0);
                runs.entry("floor".into()).or_default().push(b.clone());
                floor_prev = Some(b);
            }
        }
    }
    if let Some(mut f) = floor_prev.filter(|_| !runs.contains_key("floor")) {
        f.create_ratio_to_floor = Some(1.0);
        runs.entry("floor".into()).or_default().push(f);
    }
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        if v.is_empty() {
            f64::NAN
        } else {
            v[v.len() / 2]
        }
    };
    let mut results: Vec<Figures> = Vec::new();
    for s in std::iter::once(&"floor").chain(systems_only.iter()) {
        if let Some(e) = absent.get(*s) {
            results.push(Figures {
                system: (*s).into(),
                create_seconds: f64::NAN,
                update_seconds: f64::NAN,
                note: format!("absent: {e}"),
                ..Default::default()
            });
            continue;
        }
        let Some(rs) = runs.get(*s) else { continue };
        let mut f = rs.last().cloned().unwrap_or_default();
        f.create_seconds = median(rs.iter().map(|r| r.create_seconds).collect());
        f.update_seconds = median(rs.iter().map(|r| r.update_seconds).collect());
        let ratios: Vec<f64> = rs.iter().filter_map(|r| r.create_ratio_to_floor).collect();
        f.create_ratio_to_floor = (!ratios.is_empty()).then(|| median(ratios.clone()));
        let up: Vec<f64> = rs.iter().filter_map(|r| r.update_ratio_to_floor).collect();
        f.create_ratio_interval = stats::interval(&ratios);
        f.update_ratio_interval = stats::interval(&up);
        f.update_ratio_to_floor = (!up.is_empty()).then(|| median(up));
        if f.system == "floor" {
            f.steady_writes_per_minute = f64::NAN;
        }
        f.note = if rs.len() > 1 {
            format!(
                "ratios per round: {}",
                ratios
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        };
        results.push(f);
    }
    println!(
        "\nN = {n} WebSites, {rounds} round(s); each system run between two floor runs, its ratio to their mean; figures are medians over the rounds; steady state over {steady} s in the last round; control plane: etcd + kube-apiserver only\n"
    );
    println!(
        "| system | create wave s | create ratio to floor | update wave s | update ratio to floor | writes/CR (create) | events/CR (whole run) | writes/CR (update) | steady writes/min | peak RSS MiB | CPU s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for f in &results {
        if f.note.starts_with("absent") {
            println!("| {} | {} | | | | | | | | | |", f.system, f.note);
            continue;
        }
        println!(
            "| {} | {:.2} | {} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            f.system,
            f.create_seconds,
            opt(f.create_ratio_to_floor, 2),
            f.update_seconds,
            opt(f.update_ratio_to_floor, 2),
            f.writes_per_cr_create,
            f.events_per_cr,
            f.writes_per_cr_update,
            opt(
                Some(f.steady_writes_per_minute).filter(|v| v.is_finite()),
                1
            ),
            opt(f.peak_rss_mib, 1),
            opt(f.cpu_seconds, 2)
        );
    }
    for f in results.iter().filter(|f| f.note.starts_with("ratios")) {
        println!("{}: create-wave {}", f.system, f.note);
    }
    let differences = stats::report(&results, &runs, rounds);
    let dir = Path::new(ROOT).join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let summary = json!({"n": n, "steady_seconds": steady, "rounds": rounds, "systems": results, "differences": differences});
    let _ = std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    );
    println!("\nwritten: target/bench/summary.json");
}
