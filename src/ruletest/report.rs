//! The results of test files as a person reads them (as `cargo test` prints its own),
//! and as a CI system does (JUnit XML).

use super::run::FileResult;
use std::fmt::Write as _;

/// The text report: each test's line, then each failure with its diff, then the totals.
pub fn text(results: &[FileResult], seconds: f64) -> (String, bool) {
    let mut out = String::new();
    let (mut passed, mut failed) = (0, 0);
    for f in results {
        if let Some(e) = &f.error {
            let _ = writeln!(out, "error: {e}");
            failed += 1;
            continue;
        }
        let _ = writeln!(
            out,
            "\nrunning {} test{} from {}",
            f.tests.len(),
            if f.tests.len() == 1 { "" } else { "s" },
            f.file.display()
        );
        for t in &f.tests {
            let verdict = if t.passed() { "ok" } else { "FAILED" };
            let _ = writeln!(out, "test {} ... {verdict}", t.name);
            if t.passed() {
                passed += 1;
            } else {
                failed += 1;
            }
        }
    }
    let failing: Vec<_> = results
        .iter()
        .flat_map(|f| f.tests.iter().filter(|t| !t.passed()).map(move |t| (f, t)))
        .collect();
    if !failing.is_empty() {
        let _ = writeln!(out, "\nfailures:");
        for (f, t) in failing {
            let _ = writeln!(out, "\n---- {} ({}) ----", t.name, f.file.display());
            for (n, step, failures) in &t.failures {
                for fl in failures {
                    let _ = writeln!(out, "step {n} ({step}): {}", fl.message);
                    if let Some(d) = &fl.diff {
                        out.push_str(d);
                        if !d.ends_with('\n') {
                            out.push('\n');
                        }
                    }
                }
            }
        }
    }
    let ok = failed == 0;
    let _ = writeln!(
        out,
        "\ntest result: {}. {passed} passed; {failed} failed; finished in {seconds:.3}s",
        if ok { "ok" } else { "FAILED" }
    );
    (out, ok)
}

/// The JUnit XML report: one test suite per file, one test case per test.
pub fn junit(results: &[FileResult]) -> String {
    let total: usize = results.iter().map(|f| f.tests.len().max(1)).sum();
    let failures: usize = results
        .iter()
        .map(|f| {
            if f.error.is_some() {
                1
            } else {
                f.tests.iter().filter(|t| !t.passed()).count()
            }
        })
        .sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"ruleop test\" tests=\"{total}\" failures=\"{failures}\">"
    );
    for f in results {
        let name = xml(&f.file.display().to_string());
        if let Some(e) = &f.error {
            let _ = writeln!(
                out,
                "  <testsuite name=\"{name}\" tests=\"1\" failures=\"1\">\n    <testcase name=\"load\" classname=\"{name}\"><failure message=\"the file could not run\">{}</failure></testcase>\n  </testsuite>",
                xml(e)
            );
            continue;
        }
        let failed = f.tests.iter().filter(|t| !t.passed()).count();
        let time: f64 = f.tests.iter().map(|t| t.seconds).sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{failed}\" time=\"{time:.6}\">",
            f.tests.len()
        );
        for t in &f.tests {
            let _ = write!(
                out,
                "    <testcase name=\"{}\" classname=\"{name}\" time=\"{:.6}\">",
                xml(&t.name),
                t.seconds
            );
            if !t.passed() {
                let mut body = String::new();
                for (n, step, failures) in &t.failures {
                    for fl in failures {
                        let _ = writeln!(body, "step {n} ({step}): {}", fl.message);
                        if let Some(d) = &fl.diff {
                            body.push_str(d);
                        }
                    }
                }
                let first = t
                    .failures
                    .first()
                    .and_then(|(_, _, f)| f.first())
                    .map(|f| f.message.lines().next().unwrap_or("").to_string())
                    .unwrap_or_default();
                let _ = write!(
                    out,
                    "<failure message=\"{}\">{}</failure>",
                    xml(&first),
                    xml(&body)
                );
            }
            out.push_str("</testcase>\n");
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn xml(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".into(),
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '"' => "&quot;".into(),
            '\'' => "&apos;".into(),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' && c != '\r' => " ".into(),
            c => c.to_string(),
        })
        .collect()
}
