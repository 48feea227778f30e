//! Figures over rounds, with how far they can be trusted: a median and a 90 % interval
//! (a bootstrap over the rounds from five rounds up; below that the rounds' own range), and
//! the difference between two systems, paired by round (each round runs every system within
//! minutes, between the same floor runs, so a pair shares the machine's mood).

/// A median and the interval around it.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Interval {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
    /// "bootstrap" or "range".
    pub method: &'static str,
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} [{:.2}, {:.2}]", self.median, self.lo, self.hi)
    }
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Rounds from which the interval is a bootstrap's.
const BOOTSTRAP_FROM: usize = 5;
const RESAMPLES: usize = 4000;

/// The median of `v` and its 90 % interval.
pub(crate) fn interval(v: &[f64]) -> Option<Interval> {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    let m = median(&v);
    if v.len() < BOOTSTRAP_FROM {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        return Some(Interval {
            median: m,
            lo,
            hi,
            method: "range",
        });
    }
    // A fixed seed: the same rounds give the same interval.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut medians: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let sample: Vec<f64> = (0..v.len())
                .map(|_| v[(next() % v.len() as u64) as usize])
                .collect();
            median(&sample)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    let at = |q: f64| medians[((RESAMPLES - 1) as f64 * q).round() as usize];
    Some(Interval {
        median: m,
        lo: at(0.05),
        hi: at(0.95),
        method: "bootstrap",
    })
}

/// `a − b`, paired by round (rounds either lacks are left out), with its 90 % interval.
pub(crate) fn difference(a: &[Option<f64>], b: &[Option<f64>]) -> Option<Interval> {
    let d: Vec<f64> = a
        .iter()
        .zip(b)
        .filter_map(|(x, y)| Some((*x)? - (*y)?))
        .collect();
    interval(&d)
}

/// What the interval of a difference says: ahead (below zero, lower is faster), behind,
/// or level (zero inside it).
pub(crate) fn verdict(d: &Interval) -> &'static str {
    if d.hi < 0.0 {
        "ahead"
    } else if d.lo > 0.0 {
        "behind"
    } else {
        "level (within the noise)"
    }
}

/// One system's ratios per round (`None` for a round it did not run).
fn per_round(
    runs: &[super::Figures],
    rounds: usize,
    pick: fn(&super::Figures) -> Option<f64>,
) -> Vec<Option<f64>> {
    (0..rounds)
        .map(|r| runs.iter().find(|f| f.round == r).and_then(pick))
        .collect()
}

/// Prints the ratios' intervals, every pair's differences and the requests per resource;
/// gives the differences for summary.json.
pub(crate) fn report(
    results: &[super::Figures],
    runs: &std::collections::BTreeMap<String, Vec<super::Figures>>,
    rounds: usize,
) -> serde_json::Value {
    println!(
        "\nRatios to the floor over the rounds: median [90 % interval] (a bootstrap from {BOOTSTRAP_FROM} rounds, else the rounds' range)\n"
    );
    println!("| system | create | update | rounds |");
    println!("|---|---|---|---|");
    for f in results.iter().filter(|f| f.system != "floor") {
        let show =
            |i: &Option<Interval>| i.map(|i| format!("{i} ({})", i.method)).unwrap_or_default();
        let n = runs.get(&f.system).map_or(0, Vec::len);
        println!(
            "| {} | {} | {} | {n} |",
            f.system,
            show(&f.create_ratio_interval),
            show(&f.update_ratio_interval)
        );
    }
    println!(
        "\nDifferences of the ratios, paired by round (row − column; below zero: the row is faster)\n"
    );
    println!("| row − column | create | update |");
    println!("|---|---|---|");
    let systems: Vec<&String> = runs.keys().filter(|s| *s != "floor").collect();
    let mut out = Vec::new();
    for a in &systems {
        for b in &systems {
            if a == b {
                continue;
            }
            let side = |pick: fn(&super::Figures) -> Option<f64>| {
                difference(
                    &per_round(&runs[*a], rounds, pick),
                    &per_round(&runs[*b], rounds, pick),
                )
            };
            let create = side(|f| f.create_ratio_to_floor);
            let update = side(|f| f.update_ratio_to_floor);
            let show = |d: &Option<Interval>| {
                d.map(|d| format!("{d}: {}", verdict(&d)))
                    .unwrap_or_default()
            };
            println!("| {a} − {b} | {} | {} |", show(&create), show(&update));
            out.push(serde_json::json!({"a": a, "b": b, "create": create, "update": update}));
        }
    }
    println!(
        "\nRequests per WebSite by verb and resource, reads too (the last round; the client's own creates and patches aside)\n"
    );
    for f in results
        .iter()
        .filter(|f| !f.requests_per_cr_create.is_empty())
    {
        let show = |m: &std::collections::BTreeMap<String, f64>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "- {}: create: {}; update: {}",
            f.system,
            show(&f.requests_per_cr_create),
            show(&f.requests_per_cr_update)
        );
    }
    println!(
        "\nWhere a reconcile's time goes (ruleop's `ruleop_reconcile_stage_seconds`, both waves of the last round): mean ms per reconcile, and how many\n"
    );
    for f in results.iter().filter(|f| !f.stage_ms.is_empty()) {
        let show: Vec<String> = f
            .stage_ms
            .iter()
            .map(|(k, (ms, n))| format!("{k} {ms:.2} ms ({n:.0})"))
            .collect();
        println!("- {}: {}", f.system, show.join(", "));
    }
    serde_json::Value::Array(out)
}
