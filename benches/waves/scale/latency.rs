//! The latency as users feel it: with N WebSites in place and nothing else happening,
//! one more every 100 ms for a minute, from create to ready; then a restart's resync.

use super::*;

/// The latency figures of one system.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Latency {
    system: String,
    background: usize,
    created: usize,
    ready: usize,
    p50_seconds: Option<f64>,
    p99_seconds: Option<f64>,
    resync_api_p99_seconds: Option<f64>,
    /// Requests the API server served in the minute after the restart, from every client
    /// (the control plane's own components too).
    resync_requests: Option<f64>,
    /// Where the time went, (p50, p99) of each leg: create → the Deployment `<name>-web`
    /// exists (the operator's reconcile); → it has a ready replica (the control plane:
    /// controller-manager, scheduler, kwok); → the WebSite is ready (the operator's
    /// status), as the benchmark's watches see them.
    to_deployment: (Option<f64>, Option<f64>),
    deployment_to_ready: (Option<f64>, Option<f64>),
    ready_to_status: (Option<f64>, Option<f64>),
}

/// When the benchmark's watch first saw each WebSite's Deployment, and first saw it with a
/// ready replica.
#[derive(Default)]
struct Seen {
    made: HashMap<String, Instant>,
    ready: HashMap<String, Instant>,
    /// Woken whenever a Deployment is first seen ready (the floor waits on it).
    woken: Arc<tokio::sync::Notify>,
}

/// Watches the Deployments, recording when each WebSite's (`<name>-web`) appears and
/// when it first has a ready replica.
fn watch_deployments(c: &Client) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &deployment_ar());
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let Ok(Event::Apply(o) | Event::InitApply(o)) = ev else {
                continue;
            };
            let name = o.metadata.name.clone().unwrap_or_default();
            let Some(site) = name.strip_suffix("-web").map(str::to_string) else {
                continue;
            };
            let now = Instant::now();
            let mut s = out.lock().unwrap();
            s.made.entry(site.clone()).or_insert(now);
            if o.data["status"]["readyReplicas"].as_i64().unwrap_or(0) >= 1
                && !s.ready.contains_key(&site)
            {
                s.ready.insert(site, now);
                s.woken.notify_waiters();
            }
        }
    });
    (seen, task)
}

/// The ten slowest of `created` (name, created at) to be ready, each leg apart (`d`: the
/// Deployments seen, `ready`: the WebSites first seen ready), to trace a tail.
fn print_slowest(created: &[(String, Instant)], d: &Seen, ready: &HashMap<String, Instant>) {
    let since = |from: Option<&Instant>, to: Option<&Instant>| match (from, to) {
        (Some(a), Some(b)) => format!("{:.1}", b.saturating_duration_since(*a).as_secs_f64()),
        _ => "-".into(),
    };
    let total = |n: &str, at: &Instant| {
        ready
            .get(n)
            .map_or(f64::INFINITY, |t| t.duration_since(*at).as_secs_f64())
    };
    let Some((_, first)) = created.first() else {
        return;
    };
    let mut slow: Vec<&(String, Instant)> = created.iter().collect();
    slow.sort_by(|a, b| total(&b.0, &b.1).total_cmp(&total(&a.0, &a.1)));
    for (n, at) in slow.into_iter().take(10) {
        eprintln!(
            "bench scale: slow {n}: created +{:.1} s into the minute, total {:.1} s; to Deployment {}, to a ready replica {}, to status {}",
            at.duration_since(*first).as_secs_f64(),
            total(n, at),
            since(Some(at), d.made.get(n)),
            since(d.made.get(n), d.ready.get(n)),
            since(d.ready.get(n), ready.get(n)),
        );
    }
}

/// (p50, p99) of the seconds from `from` to `to` of each of `names` that has both.
fn leg(
    names: &[(String, Instant)],
    from: impl Fn(&str, Instant) -> Option<Instant>,
    to: impl Fn(&str) -> Option<Instant>,
) -> (Option<f64>, Option<f64>) {
    let mut d: Vec<f64> = names
        .iter()
        .filter_map(|(n, at)| {
            let (a, b) = (from(n, *at)?, to(n)?);
            Some(b.saturating_duration_since(a).as_secs_f64())
        })
        .collect();
    d.sort_by(f64::total_cmp);
    (quantile(&d, 0.50), quantile(&d, 0.99))
}

/// The latency table and where the time went, one row per system.
pub(super) fn print_latencies(latencies: &[Latency]) {
    println!(
        "\nLatency: with N WebSites in place, one more every 100 ms for 60 s; create → ready. Resync: the API server's p99 request latency (non-long-running) over the minute after the system restarts.\n"
    );
    println!(
        "| system | WebSites in place | created | ready | p50 s | p99 s | resync: API p99 s | resync: API requests (all clients) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for l in latencies {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            l.system,
            l.background,
            l.created,
            l.ready,
            opt(l.p50_seconds, 3),
            opt(l.p99_seconds, 3),
            opt(l.resync_api_p99_seconds, 3),
            opt(l.resync_requests, 0)
        );
    }
    println!(
        "\nWhere the time went (p50 / p99 s of each leg, as the benchmark's watches saw it):\n"
    );
    println!(
        "| system | create → Deployment exists (operator) | → a ready replica (control plane) | → WebSite ready (operator's status) |"
    );
    println!("|---|---|---|---|");
    let pair = |(a, b): (Option<f64>, Option<f64>)| format!("{} / {}", opt(a, 2), opt(b, 2));
    for l in latencies {
        println!(
            "| {} | {} | {} | {} |",
            l.system,
            pair(l.to_deployment),
            pair(l.deployment_to_ready),
            pair(l.ready_to_status)
        );
    }
}

/// The API server's request-duration histogram, summed over non-long-running requests:
/// (upper bound → cumulative count).
fn durations(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_duration_seconds_bucket{"))
    {
        let verb = label(line, "verb");
        if matches!(verb.as_str(), "WATCH" | "CONNECT") {
            continue;
        }
        *out.entry(label(line, "le")).or_insert(0.0) += value(line);
    }
    out
}

/// The p99 of the requests between two histogram readings (the upper bound of its bucket).
fn p99_between(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> (Option<f64>, f64) {
    let mut buckets: Vec<(f64, f64)> = b
        .iter()
        .filter_map(|(le, v)| {
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((bound, v - a.get(le).copied().unwrap_or(0.0)))
        })
        .collect();
    buckets.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    let p99 = buckets
        .iter()
        .find(|(_, count)| *count >= 0.99 * total)
        .map(|b| b.0);
    (p99.filter(|_| total > 0.0), total)
}

fn small_site(name: &str, replicas: i64) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"image": "nginx:1", "replicas": replicas, "port": 80, "serviceType": "ClusterIP"}}))
    .expect("a WebSite")
}

/// Whether a WebSite's status says it is ready at its generation: its replicas ready and,
/// where the status has a `Ready` condition (ruleop's; controller-runtime's operator sets
/// none), that condition `True`. ruleop writes `readyReplicas` as soon as the Deployment
/// has them, while a slow Service write is still on its way (`Ready=False`, and
/// `Synced=False` with reason `Applying`);
/// controller-runtime's operator writes its status only after its Service's `POST`. The
/// condition makes both mean the same: the Deployment ready and the Service there.
fn ready(o: &DynamicObject) -> bool {
    let s = &o.data["status"];
    let want = o.data["spec"]["replicas"].as_i64().unwrap_or(1);
    let condition = s["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    s["observedGeneration"].as_i64() == o.metadata.generation
        && s["readyReplicas"].as_i64().unwrap_or(0) >= want
        && condition.is_none_or(|c| c["status"] == "True")
}

/// Waits (at most 20 minutes) until the API server takes fewer than 2 writes per second
/// over 10 s, all clients, the resources (not the Leases and nodes) counted.
async fn settle(c: &Client) {
    let total = |t: &str| -> f64 {
        writes(t)
            .into_iter()
            .filter(|((resource, _, _), _)| !matches!(resource.as_str(), "leases" | "nodes"))
            .map(|(_, v)| v)
            .sum()
    };
    let start = Instant::now();
    let mut before = total(&api_metrics(c).await);
    while start.elapsed() < Duration::from_secs(1200) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let now = total(&api_metrics(c).await);
        if now - before < 20.0 {
            eprintln!("  settled after {:.0} s", start.elapsed().as_secs_f64());
            return;
        }
        before = now;
    }
    eprintln!("  not settled after 20 minutes; measuring anyway");
}

pub(super) async fn latency(system: &str, n: usize) -> Result<Latency, String> {
    let floor = system == "floor";
    let kc = fresh_cluster_with(system, false)?;
    let c = client(&kc).await;
    let mut proc_ = start_logged(system, &kc, &format!("{system}-latency"))?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let sites: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &website_ar());
    // When each WebSite was first seen ready.
    let first_ready: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event};
        let (sites, first_ready) = (sites.clone(), first_ready.clone());
        tokio::spawn(async move {
            let stream = watcher::watcher(sites, watcher::Config::default()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(Event::Apply(o) | Event::InitApply(o)) = ev
                    && ready(&o)
                {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    first_ready
                        .lock()
                        .unwrap()
                        .entry(name)
                        .or_insert_with(Instant::now);
                }
            }
        })
    };
    let (deployments, deployment_watch) = watch_deployments(&c);
    stream::iter(0..n)
        .map(|i| {
            let (sites, c) = (sites.clone(), c.clone());
            async move {
                let site = small_site(&format!("s{i}"), 0);
                let created = sites.create(&PostParams::default(), &site).await;
                if floor && let Ok(o) = created {
                    floor_children(&c, &o).await;
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let t0 = Instant::now();
    while first_ready.lock().unwrap().len() < n {
        if t0.elapsed() > Duration::from_secs(1800) {
            return Err(format!("{n} WebSites not ready within 30 minutes"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nothing else happens: the control plane has digested them (the controller-manager
    // made every ReplicaSet, the system wrote every status that follows) when the API
    // server takes fewer than 2 writes per second (Leases and node heartbeats go on).
    settle(&c).await;
    // Then one more every 100 ms for a minute.
    let minute_before = (api_metrics(&c).await, admin_metrics());
    let kcm_before = kcm_metrics();
    let window = Instant::now();
    let mut created_at = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for i in 0..600 {
        tick.tick().await;
        if i == 300 {
            // Aside: the dump must not hold up the creates' ticks.
            tokio::spawn(keep_goroutines(c.clone(), system.to_string()));
        }
        let name = format!("l{i}");
        let at = Instant::now();
        if let Ok(o) = sites
            .create(&PostParams::default(), &small_site(&name, 1))
            .await
        {
            created_at.push((name, at));
            if floor {
                tokio::spawn(floor_until_ready(c.clone(), o, deployments.clone()));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let all_ready =
        |r: &HashMap<String, Instant>| created_at.iter().all(|(n, _)| r.contains_key(n));
    while Instant::now() < deadline && !all_ready(&first_ready.lock().unwrap()) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut waits: Vec<f64> = {
        let r = first_ready.lock().unwrap();
        created_at
            .iter()
            .filter_map(|(n, at)| Some(r.get(n)?.duration_since(*at).as_secs_f64()))
            .collect()
    };
    waits.sort_by(f64::total_cmp);
    let minute_after = (api_metrics(&c).await, admin_metrics());
    print_minute(system, window.elapsed(), &minute_before, &minute_after);
    print_controller_manager(system, &kcm_before, &kcm_metrics());
    let (to_deployment, deployment_to_ready, ready_to_status) = {
        let (d, r) = (deployments.lock().unwrap(), first_ready.lock().unwrap());
        print_slowest(&created_at, &d, &r);
        (
            leg(&created_at, |_, at| Some(at), |n| d.made.get(n).copied()),
            leg(
                &created_at,
                |n, _| d.made.get(n).copied(),
                |n| d.ready.get(n).copied(),
            ),
            leg(
                &created_at,
                |n, _| d.ready.get(n).copied(),
                |n| r.get(n).copied(),
            ),
        )
    };
    deployment_watch.abort();
    // The floor has no process to restart: no resync figures.
    let resync = if floor {
        None
    } else {
        Some(resync(system, &c, &kc, proc_.take()).await?)
    };
    watch.abort();
    let _ = sh(Command::new(format!("{ROOT}/tests/cluster/down.sh"))
        .env("RULEOP_CLUSTER_DIR", cluster_dir()));
    // Missing ones (never ready) count as slower than any: p99 then says so.
    let created = created_at.len();
    let ready_count = waits.len();
    waits.resize(created, f64::INFINITY);
    Ok(Latency {
        system: system.into(),
        background: n,
        created,
        ready: ready_count,
        p50_seconds: quantile(&waits, 0.50),
        p99_seconds: quantile(&waits, 0.99),
        resync_api_p99_seconds: resync.and_then(|(p99, _)| p99),
        resync_requests: resync.map(|(_, requests)| requests),
        to_deployment,
        deployment_to_ready,
        ready_to_status,
    })
}

/// The resync: the system restarts with everything in place (a WebSite may be ready
/// while its Service is still being created: the system finishes first). The API
/// server's p99 over the minute after, and the requests it served from every client.
async fn resync(
    system: &str,
    c: &Client,
    kc: &str,
    running: Option<Child>,
) -> Result<(Option<f64>, f64), String> {
    settle(c).await;
    if let Some(mut p) = running {
        let _ = p.kill();
        let _ = p.wait();
    }
    let before = api_metrics(c).await;
    let requests = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| !matches!(label(l, "verb").as_str(), "WATCH" | "CONNECT"))
            .map(value)
            .sum::<f64>()
    };
    let mut restarted = start_logged(system, kc, &format!("{system}-restart"))?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = api_metrics(c).await;
    let (p99, _) = p99_between(&durations(&before), &durations(&after));
    if let Some(p) = restarted.as_mut() {
        let _ = p.kill();
        let _ = p.wait();
    }
    Ok((p99, requests(&after) - requests(&before)))
}

/// The floor's writes for a new WebSite (`floor_writes`: its two children and a first
/// status, at once, as soon as it is created).
async fn floor_children(c: &Client, site: &DynamicObject) {
    // The rule, loaded once for the 10,600 calls.
    static RULE: std::sync::OnceLock<Option<Arc<ruleop::rules::CompiledRule>>> =
        std::sync::OnceLock::new();
    let rule = RULE.get_or_init(|| {
        let (rules, _) = ruleop::rules::load_str(
            include_str!("../../../rules/website.yaml"),
            Path::new("website.yaml"),
        );
        rules.into_iter().next()
    });
    let cr = serde_json::to_value(site).unwrap_or_default();
    if let Some(rule) = rule {
        floor_writes(c, rule, site, &cr, FloorKind::of("floor"), false).await;
    }
}

/// The floor in the latency minute: the writes an ideal operator makes for a new WebSite,
/// with none of an operator's delays: its children and a first status as soon as it is
/// created (no watch), then, once the benchmark's own Deployment watch sees a ready
/// replica (the children's applies have answered by then, so the Service exists), the
/// status with `readyReplicas`. What is left is the control plane's time.
async fn floor_until_ready(c: Client, site: DynamicObject, seen: Arc<Mutex<Seen>>) {
    floor_children(&c, &site).await;
    let name = site.metadata.name.clone().unwrap_or_default();
    let woken = seen.lock().unwrap().woken.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let notified = woken.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        if seen.lock().unwrap().ready.contains_key(&name) {
            break;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return;
        }
    }
    let sites: Api<DynamicObject> = Api::namespaced_with(c, NS, &website_ar());
    let body = json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
        "status": {"readyReplicas": 1, "observedGeneration": site.metadata.generation,
            "url": format!("http://{name}-web.{NS}.svc.cluster.local:{}",
                site.data["spec"]["port"].as_i64().unwrap_or(80))}});
    let pp = PatchParams::apply("floor").force();
    let _ = sites.patch_status(&name, &pp, &Patch::Apply(&body)).await;
}

/// The API server's goroutines (its pprof endpoint, with stacks) half-way through the
/// minute, kept in target/bench/logs: where its requests wait.
async fn keep_goroutines(c: Client, system: String) {
    let req = http::Request::get("/debug/pprof/goroutine?debug=2")
        .body(Vec::new())
        .unwrap();
    if let Ok(text) = c.request_text(req).await {
        let path = Path::new(ROOT).join(format!("target/bench/logs/{system}-goroutines.txt"));
        let _ = std::fs::write(path, text);
    }
}

/// Over the latency minute and the wait for its creates to be ready (`window`): the API
/// server's requests by resource and verb (count, mean and total seconds, the busiest
/// first), from its request-duration histogram, how long its ClusterIP allocator's lock
/// was held and its CPU seconds; both readings (the API server's and, for
/// ruleop, its own /metrics) are kept in target/bench/logs.
fn print_minute(
    system: &str,
    window: Duration,
    before: &(String, String),
    after: &(String, String),
) {
    let logs = Path::new(ROOT).join("target/bench/logs");
    for (when, (api, own)) in [("before", before), ("after", after)] {
        let _ = std::fs::write(
            logs.join(format!("{system}-minute-{when}-apiserver.prom")),
            api,
        );
        let _ = std::fs::write(logs.join(format!("{system}-minute-{when}-own.prom")), own);
    }
    let (a, b) = (request_time(&before.0), request_time(&after.0));
    let mut rows: Vec<_> = b
        .iter()
        .filter(|((_, _, verb), _)| !matches!(verb.as_str(), "WATCH" | "CONNECT"))
        .map(|(k, (n, t))| {
            let (n0, t0) = a.get(k).copied().unwrap_or_default();
            (k, n - n0, t - t0)
        })
        .filter(|(_, n, _)| *n > 0.0)
        .collect();
    rows.sort_by(|x, y| y.2.total_cmp(&x.2));
    eprintln!(
        "  {system}: the API server over the creates and the wait for them ({:.0} s; requests, mean s, total s):",
        window.as_secs_f64()
    );
    for ((resource, sub, verb), n, t) in rows.into_iter().take(12) {
        eprintln!(
            "    {verb:<7} {resource}{}{sub}: {n:.0}, {:.3}, {t:.1}",
            if sub.is_empty() { "" } else { "/" },
            t / n
        );
    }
    // The ClusterIP allocator's own histogram times the work under its lock.
    let delta = |prefix: &str| total(&after.0, prefix) - total(&before.0, prefix);
    let allocation = "kube_apiserver_clusterip_allocator_allocation_duration_seconds";
    let held = delta(&format!("{allocation}_sum{{"));
    let allocations = delta(&format!("{allocation}_count{{"));
    eprintln!(
        "    ClusterIP allocations: {allocations:.0}, the lock held {held:.1} s ({:.0} ms each); the API server's CPU {:.1} s",
        1000.0 * held / allocations.max(1.0),
        delta("process_cpu_seconds_total ")
    );
}

/// Over the same window, the controller-manager's Deployment and ReplicaSet work queues
/// (items added, retries, mean wait in the queue) and the ReplicaSet syncs it skipped
/// because its cache was older than its own last write (requeued through the queue's
/// rate limit; Kubernetes 1.36's StaleControllerConsistencyReplicaSet); both readings are
/// kept in target/bench/logs.
fn print_controller_manager(system: &str, before: &str, after: &str) {
    let logs = Path::new(ROOT).join("target/bench/logs");
    for (when, text) in [("before", before), ("after", after)] {
        let _ = std::fs::write(logs.join(format!("{system}-minute-{when}-kcm.prom")), text);
    }
    if after.is_empty() {
        eprintln!("  {system}: the controller-manager's metrics could not be read");
        return;
    }
    // The change over the window of the metric lines that start with `prefix`.
    let delta = |prefix: &str| total(after, prefix) - total(before, prefix);
    eprintln!("  {system}: the controller-manager over the same window:");
    for queue in ["deployment", "replicaset"] {
        let q = |metric: &str| delta(&format!("workqueue_{metric}{{name=\"{queue}\""));
        let waits = q("queue_duration_seconds_count");
        eprintln!(
            "    queue {queue}: {:.0} added, {:.0} retries, {:.3} s mean wait in the queue",
            q("adds_total"),
            q("retries_total"),
            q("queue_duration_seconds_sum") / waits.max(1.0)
        );
    }
    for resource in ["replicasets", "pods"] {
        let skips = delta(&format!(
            "replicaset_controller_stale_sync_skips_total{{group=\"{}\",resource=\"{resource}\"}}",
            if resource == "pods" { "" } else { "apps" }
        ));
        eprintln!(
            "    ReplicaSet syncs skipped, its cache of {resource} behind its own write: {skips:.0}"
        );
    }
}
