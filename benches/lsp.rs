//! `make bench-lsp`: how fast `ruleop lsp` answers a change, and what it holds, with a
//! release build spoken to over stdio as an editor speaks to it.
//!
//! - Latency: each shipped rules file (rules/) opened, then edited 30 times (a comment line
//!   added); the time from a change sent to its diagnostics received, debounce included
//!   (the server waits `DEBOUNCE` for the next keystroke first): median, 90th percentile
//!   and the slowest.
//! - Memory: the server's RSS with nothing open, then with 100 rules files open at once.
//!
//! Env: RULEOP_LSP_BIN (default target/release/ruleop).

#[path = "../tests/lsp_client/mod.rs"]
mod lsp_client;

use lsp_client::Client;
use std::time::Instant;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const EDITS: usize = 30;

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let bin = std::env::var("RULEOP_LSP_BIN").unwrap_or(format!("{ROOT}/target/release/ruleop"));
    let mut c = Client::start(&bin, &[]);
    let pid = c.child.id();
    let idle = rss_mib(pid);
    println!(
        "\nruleop lsp ({bin}): diagnostics after a change, debounce ({} ms) included\n",
        ruleop::lsp::DEBOUNCE.as_millis()
    );
    println!("| rules file | lines | median ms | p90 ms | slowest ms |");
    println!("|---|---|---|---|---|");
    let mut files: Vec<_> = std::fs::read_dir(format!("{ROOT}/rules"))
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let uri = format!("file://{}", file.display());
        c.open(&uri, &text);
        c.diagnostics(&uri);
        let mut ms = Vec::new();
        for i in 0..EDITS {
            let edited = format!("{text}# edit {i}\n");
            let t = Instant::now();
            c.change(&uri, i as i64 + 2, &edited);
            c.diagnostics(&uri);
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let median = percentile(&mut ms, 0.5);
        println!(
            "| {} | {} | {median:.1} | {:.1} | {:.1} |",
            file.file_name().unwrap().to_string_lossy(),
            text.lines().count(),
            percentile(&mut ms, 0.9),
            percentile(&mut ms, 1.0)
        );
    }
    // A folder of 100 rules open at once.
    let base = std::fs::read_to_string(format!("{ROOT}/rules/website.yaml")).unwrap();
    for i in 0..100 {
        let text = base.replace("name: website", &format!("name: website-{i}"));
        let uri = format!("file:///tmp/ruleop-lsp-bench/rule-{i}.yaml");
        c.open(&uri, &text);
        c.diagnostics(&uri);
    }
    println!(
        "\nRSS: {idle:.1} MiB with nothing open, {:.1} MiB with 100 rules files open",
        rss_mib(pid)
    );
}
