//! The systems under test: started with their logs, measured from /proc, profiled.

use super::*;

/// RULEOP_BENCH_PROFILE: a CPU profile of the API server (its pprof endpoint) and, for
/// ruleop, of the operator (`perf record`), over the first `secs` of the create wave.
pub(crate) fn start_profiles(
    c: &Client,
    system: &str,
    pid: Option<u32>,
    secs: u64,
) -> Vec<tokio::task::JoinHandle<()>> {
    let dir = Path::new(ROOT).join("target/bench/profiles");
    let _ = std::fs::create_dir_all(&dir);
    let mut tasks = Vec::new();
    let (c2, out) = (c.clone(), dir.join(format!("{system}-apiserver.pprof")));
    tasks.push(tokio::spawn(async move {
        let req = http::Request::get(format!("/debug/pprof/profile?seconds={secs}"))
            .body(Vec::new())
            .unwrap();
        match c2.request_stream(req).await {
            Ok(body) => {
                use futures::AsyncReadExt;
                let mut bytes = Vec::new();
                let mut body = body;
                let _ = body.read_to_end(&mut bytes).await;
                let _ = std::fs::write(&out, bytes);
            }
            Err(e) => eprintln!("  profile of the API server: {e}"),
        }
    }));
    if let (Some(pid), true) = (pid, system.starts_with("ruleop")) {
        let out = dir.join(format!("{system}.perf.data"));
        tasks.push(tokio::task::spawn_blocking(move || {
            let r = Command::new("perf")
                .args(["record", "-F", "997", "--call-graph", "dwarf,16384", "-o"])
                .arg(&out)
                .args(["-p", &pid.to_string(), "--", "sleep", &secs.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if let Err(e) = r {
                eprintln!("  perf record: {e}");
            }
        }));
    }
    tasks
}

pub(crate) fn proc_figures(pid: u32) -> (Option<f64>, Option<f64>) {
    let rss = status_mib(pid, "VmHWM:");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    let cpu = match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => Some((u + s) / 100.0),
        _ => None,
    };
    (rss, cpu)
}

/// The process's resident memory now (VmRSS), MiB.
pub(crate) fn current_rss(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS:")
}

/// A memory figure of /proc/PID/status (`field` with its colon, given in kB), in MiB.
pub(crate) fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Starts a system; None for the floor. Err explains why it cannot run here.
pub(crate) fn start(system: &str, kc: &str) -> Result<Option<Child>, String> {
    start_logged(system, kc, system)
}

/// Starts a system with its log in target/bench/logs/`log`.log.
pub(crate) fn start_logged(system: &str, kc: &str, log: &str) -> Result<Option<Child>, String> {
    let logs = Path::new(ROOT).join("target/bench/logs");
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(logs.join(format!("{log}.log"))).map_err(|e| e.to_string())?;
    // `ruleop-c<N>`: ruleop with `--concurrency=<N>`.
    let concurrency = system
        .strip_prefix("ruleop-c")
        .and_then(|n| n.parse::<u16>().ok());
    let mut cmd = match system {
        "floor" | "floor+conditions" | "floor-min" => return Ok(None),
        _ if concurrency.is_some()
            || matches!(
                system,
                "ruleop"
                    | "ruleop-warnings"
                    | "ruleop-1t"
                    | "ruleop-before"
                    | "ruleop-alt"
                    | "ruleop-rule"
                    | "ruleop-sa"
            ) =>
        {
            // `ruleop-before` (a binary of an earlier commit) and `ruleop-alt` (a variant
            // under trial), put in target/bench/bin by hand: side-by-side measures.
            let bin = match system {
                "ruleop-before" | "ruleop-alt" => format!("{ROOT}/target/bench/bin/{system}"),
                _ => format!("{ROOT}/target/release/ruleop"),
            };
            if !Path::new(&bin).exists() {
                return Err(format!("{bin} not there"));
            }
            let mut c = Command::new(bin);
            c.args(["run", "--namespace", NS, "--admin-addr", ADMIN_ADDR]);
            // `ruleop-rule`: the rule as a Rule object (installed with the cluster).
            // `ruleop-sa`: the rule runs as a ServiceAccount of its own (impersonation).
            match system {
                "ruleop-rule" => {}
                "ruleop-sa" => {
                    c.arg("--rules").arg(super::cluster::identity_rule());
                }
                _ => {
                    c.args(["--rules", &format!("{ROOT}/rules/website.yaml")]);
                }
            }
            if system == "ruleop-warnings" {
                c.arg("--events=warnings");
            }
            if let Some(n) = concurrency {
                c.arg(format!("--concurrency={n}"));
            }
            if system == "ruleop-1t" {
                c.env("TOKIO_WORKER_THREADS", "1");
            }
            // RULEOP_BENCH_LOG=info: ruleop's log of every write, to trace a run.
            let level = std::env::var("RULEOP_BENCH_LOG").unwrap_or_else(|_| "warn".into());
            c.env("RUST_LOG", level);
            c
        }
        "controller-runtime" => {
            let bin = format!("{ROOT}/target/bench/bin/website-operator");
            if !Path::new(&bin).exists() {
                return Err(format!("{bin} not built (bench/build-peers.sh)"));
            }
            let mut c = Command::new(bin);
            c.args(["--namespace", NS]);
            c
        }
        "kopf" => {
            let py = format!("{ROOT}/target/bench/venv/bin/python");
            if !Path::new(&py).exists() {
                return Err("kopf venv not built (bench/build-peers.sh)".into());
            }
            let mut c = Command::new(py);
            c.args([
                "-m",
                "kopf",
                "run",
                "--standalone",
                "--namespace",
                NS,
                "-q",
                &format!("{ROOT}/bench/kopf/operator.py"),
            ]);
            c
        }
        "kro" => {
            let bin = format!("{ROOT}/target/bench/bin/kro-controller");
            if !Path::new(&bin).exists() {
                let reason = std::fs::read_to_string(format!("{ROOT}/target/bench/kro-absent.txt"))
                    .unwrap_or_else(|_| "kro not built (bench/build-peers.sh)".into());
                return Err(reason.trim().to_string());
            }
            // Not throttled: client QPS/burst and the instance work queue's rate limit
            // raised; 32 concurrent instance reconciles, as the other systems.
            let mut c = Command::new(bin);
            c.args([
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--client-qps=1000",
                "--client-burst=2000",
                "--dynamic-controller-concurrent-reconciles=32",
                "--dynamic-controller-rate-limiter-rate-limit=1000",
                "--dynamic-controller-rate-limiter-burst-limit=2000",
            ]);
            c
        }
        other => return Err(format!("unknown system {other}")),
    };
    cmd.env("KUBECONFIG", kc)
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .stdin(Stdio::null());
    cmd.spawn()
        .map(Some)
        .map_err(|e| format!("starting {system}: {e}"))
}
