//! `-o json|yaml` of `check`, `test`, `diff` and `trace`: the same facts as the text, as a
//! document on stdout for scripts and CI.

use clap::ValueEnum;
use serde_json::Value;

/// How a command prints its result.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Output {
    /// For people (the default).
    #[default]
    Text,
    Json,
    Yaml,
}

impl Output {
    /// Whether the result goes out as a document (and the text stays unprinted).
    pub(super) fn document(self) -> bool {
        self != Output::Text
    }

    /// Prints `doc` as JSON or YAML (nothing for text).
    pub(super) fn print(self, doc: &Value) -> anyhow::Result<()> {
        match self {
            Output::Text => {}
            Output::Json => out!("{}\n", serde_json::to_string_pretty(doc)?),
            Output::Yaml => out!("{}", serde_yaml::to_string(doc)?),
        }
        Ok(())
    }
}

/// `ruleop test`'s results as a document.
pub(super) fn test_results(results: &[crate::ruletest::run::FileResult], passed: bool) -> Value {
    let files: Vec<Value> = results
        .iter()
        .map(|f| {
            let tests: Vec<Value> = f
                .tests
                .iter()
                .map(|t| {
                    let failures: Vec<Value> = t
                        .failures
                        .iter()
                        .map(|(step, name, fs)| {
                            serde_json::json!({
                                "step": step,
                                "name": name,
                                "failures": fs.iter().map(|x| serde_json::json!({"message": x.message, "diff": x.diff})).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    serde_json::json!({"name": t.name, "passed": t.passed(), "seconds": t.seconds, "steps": failures})
                })
                .collect();
            serde_json::json!({"file": f.file.display().to_string(), "error": f.error, "tests": tests})
        })
        .collect();
    serde_json::json!({"passed": passed, "files": files})
}
