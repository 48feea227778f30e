//! `ruleop test`: the tests of rules, run with no cluster; a report as `cargo test` prints
//! one (and JUnit XML for CI); exit 0 when every test passes, 1 otherwise.

use super::args::TestArgs;
use crate::ruletest::{report, run};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

pub(super) fn test_cmd(args: TestArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let files = run::test_files(&paths).map_err(|e| anyhow::anyhow!(e))?;
    if files.is_empty() {
        // A wrong path in CI must not pass.
        eprintln!("error: no test files (`*_test.yaml`) in {paths:?}");
        return Ok(ExitCode::FAILURE);
    }
    // Children of the CRDs' kinds are checked against their schemas and CEL rules.
    crate::schema::typed::use_crds(&super::input::read_crds(&args.crd)?);
    // With --server, the API server judges each step's children too (dry-run applies).
    let server = match args.server {
        true => Some(super::server::Server::connect()?),
        false => None,
    };
    let judge = server.as_ref().map(|s| s as &dyn run::Judge);
    let results: Vec<run::FileResult> = files
        .iter()
        .map(|f| run::run_file(f, args.update, judge))
        .collect();
    let (text, ok) = report::text(&results, start.elapsed().as_secs_f64());
    if args.output.document() {
        args.output
            .print(&super::output::test_results(&results, ok))?;
    } else {
        out!("{text}");
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, report::junit(&results))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    if args.update {
        for r in results.iter().filter(|r| r.error.is_none()) {
            eprintln!("wrote {}", run::snapshot_path(&r.file).display());
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
