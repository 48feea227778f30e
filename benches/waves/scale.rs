//! Scale runs (`RULEOP_BENCH_SCALE=1000,3000,10000`): at each N, the floor, ruleop and
//! controller-runtime (floor, ruleop, floor, controller-runtime, floor; or the systems of
//! `RULEOP_BENCH_SYSTEMS`), one round; the
//! create and update waves as ratios to the floor at that N (the control plane itself
//! grows faster than linearly), peak RSS, RSS per cached object, CPU seconds, and the
//! growth exponent of each from the smallest N to the largest (1.0 = linear). Then, at the
//! largest N, on a full control plane (controller-manager, scheduler, kwok making pods
//! ready), the latency users feel, per system: with N WebSites in place (replicas 0, so
//! kwok runs no pods for them) and nothing else happening (the API server down to fewer
//! than 2 writes per second, besides Leases and nodes), one more WebSite (replicas 1)
//! every 100 ms for a minute, from create to ready (status.readyReplicas = 1 at the
//! current generation and, for ruleop, `Ready=True`; `RULEOP_BENCH_LATENCY=only` runs
//! this part alone, `=0` skips it, `RULEOP_BENCH_LATENCY_SYSTEMS` names the systems, `floor`
//! among them: the bench client makes the children and the status itself, see
//! `latency::floor_until_ready`); and
//! the API server's own request latency
//! (p99 of apiserver_request_duration_seconds, long-running requests excluded) over the
//! minute after the system restarts with all of them in place (its resync).

use super::*;

#[path = "scale/latency.rs"]
mod latency;
use latency::{Latency, latency, print_latencies};

/// One scale figure set per system and N.
#[derive(Debug, Clone, serde::Serialize)]
struct Point {
    system: String,
    n: usize,
    create_ratio: f64,
    update_ratio: f64,
    create_seconds: f64,
    update_seconds: f64,
    peak_rss_mib: Option<f64>,
    cpu_seconds: Option<f64>,
    /// Peak RSS and CPU seconds above those after start-up (what the resources cost).
    rss_above_idle_mib: Option<f64>,
    cpu_above_idle_seconds: Option<f64>,
    idle_rss_mib: Option<f64>,
    end_rss_mib: Option<f64>,
    steady_writes_per_minute: f64,
    events_per_cr: f64,
}

/// How fast `y` grows with `x` between two points: y ∝ x^k.
fn exponent(x0: f64, y0: f64, x1: f64, y1: f64) -> Option<f64> {
    let k = (y1 / y0).ln() / (x1 / x0).ln();
    k.is_finite().then_some(k)
}

fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[i])
}

/// The scale runs; prints the tables and writes target/bench/scale.json.
pub async fn main(sizes: Vec<usize>, steady: u64) {
    let mut points: Vec<Point> = Vec::new();
    let latency_only = std::env::var("RULEOP_BENCH_LATENCY").as_deref() == Ok("only");
    for &n in sizes.iter().filter(|_| !latency_only) {
        let mut floor_prev = run_system("floor", n, 0).await.ok();
        let systems = std::env::var("RULEOP_BENCH_SYSTEMS")
            .unwrap_or_else(|_| "ruleop,controller-runtime".into());
        for system in systems.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            eprintln!("bench scale: {system} with N={n} ...");
            let f = match run_system(system, n, steady).await {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("bench scale: {system} at N={n} failed: {e}");
                    continue;
                }
            };
            let after = run_system("floor", n, 0).await.ok();
            let floors: Vec<&Figures> = floor_prev.iter().chain(after.iter()).collect();
            let mean = |g: fn(&Figures) -> f64| {
                floors.iter().map(|f| g(f)).sum::<f64>() / floors.len() as f64
            };
            let point = Point {
                system: system.into(),
                n,
                create_ratio: f.create_seconds / mean(|f| f.create_seconds),
                update_ratio: f.update_seconds / mean(|f| f.update_seconds),
                create_seconds: f.create_seconds,
                update_seconds: f.update_seconds,
                peak_rss_mib: f.peak_rss_mib,
                cpu_seconds: f.cpu_seconds,
                rss_above_idle_mib: f.peak_rss_mib.zip(f.idle_rss_mib).map(|(p, i)| p - i),
                cpu_above_idle_seconds: f.cpu_seconds.zip(f.idle_cpu_seconds).map(|(c, i)| c - i),
                idle_rss_mib: f.idle_rss_mib,
                end_rss_mib: f.end_rss_mib,
                steady_writes_per_minute: f.steady_writes_per_minute,
                events_per_cr: f.events_per_cr,
            };
            let floor_known = points.iter().any(|p| p.system == "floor" && p.n == n);
            if floors.len() == 2 && !floor_known {
                points.push(Point {
                    system: "floor".into(),
                    n,
                    create_ratio: 1.0,
                    update_ratio: 1.0,
                    create_seconds: mean(|f| f.create_seconds),
                    update_seconds: mean(|f| f.update_seconds),
                    peak_rss_mib: None,
                    cpu_seconds: None,
                    rss_above_idle_mib: None,
                    cpu_above_idle_seconds: None,
                    idle_rss_mib: None,
                    end_rss_mib: None,
                    steady_writes_per_minute: f64::NAN,
                    events_per_cr: 0.0,
                });
            }
            eprintln!("bench scale: {point:?}");
            points.push(point);
            floor_prev = after;
            write(&points, &[]);
        }
    }
    print_points(&points, &sizes);
    let mut latencies = Vec::new();
    if let Some(&n) = sizes.iter().max()
        && std::env::var("RULEOP_BENCH_LATENCY").as_deref() != Ok("0")
    {
        let systems = std::env::var("RULEOP_BENCH_LATENCY_SYSTEMS")
            .unwrap_or_else(|_| "ruleop,controller-runtime".into());
        for system in systems.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            eprintln!("bench scale: latency of {system} with {n} WebSites in place ...");
            match latency(system, n).await {
                Ok(l) => latencies.push(l),
                Err(e) => eprintln!("bench scale: latency of {system} failed: {e}"),
            }
            write(&points, &latencies);
        }
        print_latencies(&latencies);
    }
    write(&points, &latencies);
}

/// Writes the figures so far: target/bench/scale.json (latency.json when only the latency
/// runs, so as not to overwrite the scale figures).
fn write(points: &[Point], latencies: &[Latency]) {
    let dir = Path::new(ROOT).join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let doc = json!({"points": points, "latency": latencies});
    let only = std::env::var("RULEOP_BENCH_LATENCY").as_deref() == Ok("only");
    let _ = std::fs::write(
        dir.join(if only { "latency.json" } else { "scale.json" }),
        serde_json::to_string_pretty(&doc).unwrap_or_default(),
    );
}

fn print_points(points: &[Point], sizes: &[usize]) {
    println!("\nScale: one round per N; each system between two floor runs at that N\n");
    println!(
        "| system | N | create s | create ratio | update s | update ratio | steady writes/min | events/CR | peak RSS MiB | RSS at start / end MiB | CPU s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for p in points {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {} | {} / {} | {} |",
            p.system,
            p.n,
            p.create_seconds,
            p.create_ratio,
            p.update_seconds,
            p.update_ratio,
            opt(
                Some(p.steady_writes_per_minute).filter(|v| v.is_finite()),
                1
            ),
            p.events_per_cr,
            opt(p.peak_rss_mib, 1),
            opt(p.idle_rss_mib, 1),
            opt(p.end_rss_mib, 1),
            opt(p.cpu_seconds, 2)
        );
    }
    let (Some(&lo), Some(&hi)) = (sizes.iter().min(), sizes.iter().max()) else {
        return;
    };
    if lo == hi {
        return;
    }
    println!(
        "\nGrowth from N={lo} to N={hi} (exponent k of y ∝ N^k; 1.0 = linear). RSS per cached object: the RSS added per object (3 per WebSite: it and its two children) from N={lo} to N={hi}.\n"
    );
    println!(
        "| system | create time k | create time k less the floor's (ratio k + 1) | update time k | CPU k (above idle) | RSS k (above idle) | KiB RSS per cached object |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut systems: Vec<&str> = Vec::new();
    for p in points {
        if !systems.contains(&p.system.as_str()) {
            systems.push(&p.system);
        }
    }
    for system in systems {
        let at = |n: usize| points.iter().find(|p| p.system == system && p.n == n);
        let (Some(a), Some(b)) = (at(lo), at(hi)) else {
            continue;
        };
        let (x0, x1) = (lo as f64, hi as f64);
        let k = |y0: Option<f64>, y1: Option<f64>| {
            opt(
                exponent(x0, y0.unwrap_or(f64::NAN), x1, y1.unwrap_or(f64::NAN)),
                2,
            )
        };
        let own = exponent(x0, a.create_ratio, x1, b.create_ratio).map(|k| k + 1.0);
        let per_object = match (a.peak_rss_mib, b.peak_rss_mib) {
            (Some(r0), Some(r1)) => Some((r1 - r0) * 1024.0 / (3.0 * (x1 - x0))),
            _ => None,
        };
        println!(
            "| {system} | {} | {} | {} | {} | {} | {} |",
            k(Some(a.create_seconds), Some(b.create_seconds)),
            opt(own, 2),
            k(Some(a.update_seconds), Some(b.update_seconds)),
            k(a.cpu_above_idle_seconds, b.cpu_above_idle_seconds),
            k(a.rss_above_idle_mib, b.rss_above_idle_mib),
            opt(per_object, 1)
        );
    }
}
