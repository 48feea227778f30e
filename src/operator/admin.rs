//! The admin server: `/metrics` (Prometheus text), `/livez`, `/readyz` (ready once the
//! rules are loaded and, on the leader, every running rule's watches have synced) and
//! `/status` (JSON: leadership, rules, and the errors of the last rules load). With
//! `--metrics-auth kubernetes`, `/metrics` answers only a caller the API server allows
//! ([`super::metrics_auth`]); the probes stay open.

use super::metrics_auth::{Gatekeeper, Verdict};
use crate::metrics::Metrics;
use crate::rules::book::Problem;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::routing::get;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A running rule as the admin server reports it.
#[derive(Clone)]
pub struct RuleHealth {
    pub name: String,
    pub source: String,
    pub fingerprint: String,
    pub synced: Arc<AtomicBool>,
    /// The ServiceAccount it runs as (`namespace/name`); None: ruleop's own.
    pub identity: Option<String>,
    pub info: Arc<super::runner::RuleInfo>,
}

impl RuleHealth {
    /// Why the rule waits to start (its ServiceAccount lacks permissions), in a line.
    fn blocked(&self) -> Option<String> {
        let who = self.identity.as_deref()?;
        Some(self.info.blocked()?.describe(who))
    }
}

/// What the admin endpoints report; written by the supervisor.
#[derive(Default)]
pub struct Health {
    pub loaded: AtomicBool,
    pub leader: AtomicBool,
    pub rules: Mutex<Vec<RuleHealth>>,
    pub problems: Mutex<Vec<Problem>>,
}

#[derive(Serialize)]
struct StatusDoc {
    ready: bool,
    leader: bool,
    rules: Vec<RuleDoc>,
    errors: Vec<Problem>,
}

#[derive(Serialize)]
struct RuleDoc {
    name: String,
    source: String,
    fingerprint: String,
    synced: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    identity: Option<String>,
    /// Why it is not started: what its ServiceAccount lacks, and the fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    not_started: Option<String>,
}

impl Health {
    fn doc(&self) -> StatusDoc {
        let leader = self.leader.load(Ordering::SeqCst);
        let rules: Vec<RuleDoc> = self
            .rules
            .lock()
            .map(|r| {
                r.iter()
                    .map(|h| RuleDoc {
                        name: h.name.clone(),
                        source: h.source.clone(),
                        fingerprint: h.fingerprint.clone(),
                        synced: h.synced.load(Ordering::SeqCst),
                        identity: h.identity.clone(),
                        not_started: h.blocked(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let loaded = self.loaded.load(Ordering::SeqCst);
        // A rule waiting for its ServiceAccount's permissions is reported, and does not
        // hold the others' readiness.
        let ready =
            loaded && (!leader || rules.iter().all(|r| r.synced || r.not_started.is_some()));
        StatusDoc {
            ready,
            leader,
            rules,
            errors: self.problems.lock().map(|p| p.clone()).unwrap_or_default(),
        }
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// The guard of `/metrics`: 401 without a token the API server knows, 403 for a user
/// without `get` on it, 503 when the API server could not be asked.
async fn guard(
    State(gate): State<Arc<Gatekeeper>>,
    request: Request,
    next: Next,
) -> axum::response::Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let (code, why) = match gate.check(authorization).await {
        Verdict::Allowed => return next.run(request).await,
        Verdict::Unauthenticated(why) => (StatusCode::UNAUTHORIZED, why),
        Verdict::Forbidden(why) => (StatusCode::FORBIDDEN, why),
        Verdict::Unknown(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
        Verdict::Busy => {
            tracing::debug!("a scrape of /metrics refused: too many tokens to review now");
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                "too many tokens to review now; scrape again in a moment\n",
            )
                .into_response();
        }
    };
    tracing::debug!(code = code.as_u16(), why, "a scrape of /metrics refused");
    (code, format!("{why}\n")).into_response()
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.render(),
    )
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let doc = s.health.doc();
    let body = readiness(&doc);
    if doc.ready {
        (StatusCode::OK, format!("ok\n{body}"))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready\n{body}"),
        )
    }
}

/// Why ruleop is ready or not, in categories and counts: the probes answer whoever reaches
/// the port, so no rule's name, account, file or text (those are on `/status`, which
/// `--status-addr` may serve elsewhere).
fn readiness(doc: &StatusDoc) -> String {
    let count = |f: &dyn Fn(&RuleDoc) -> bool| doc.rules.iter().filter(|r| f(r)).count();
    let mut lines = vec![format!(
        "rules: {} synced, {} not synced (watches listing, or kind not served yet), {} not started (an account lacks rights)",
        count(&|r| r.not_started.is_none() && r.synced),
        count(&|r| r.not_started.is_none() && !r.synced),
        count(&|r| r.not_started.is_some()),
    )];
    if !doc.errors.is_empty() {
        lines.push(format!(
            "rules load: {} error(s); the last good rules stay in force",
            doc.errors.len()
        ));
    }
    lines.push("details: /status".into());
    lines.join("\n") + "\n"
}

async fn status(State(s): State<AppState>) -> impl IntoResponse {
    axum::Json(s.health.doc())
}

/// What an admin listener serves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// Probes, metrics and /status.
    All,
    /// Probes and metrics (/status has a listener of its own).
    Probes,
    /// /status alone.
    Status,
}

/// Binds an admin listener; serves it until the process ends. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    serves: Serves,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    gate: Option<Arc<Gatekeeper>>,
    tls: Option<Arc<super::webhook::serve::Current>>,
) -> std::io::Result<SocketAddr> {
    let mut app = Router::new();
    if serves != Serves::Status {
        let scrape = match gate {
            Some(gate) => get(metrics_text).layer(middleware::from_fn_with_state(gate, guard)),
            None => get(metrics_text),
        };
        app = app
            .route("/metrics", scrape)
            .route("/livez", get(livez))
            .route("/readyz", get(readyz));
    }
    if serves != Serves::Probes {
        app = app.route("/status", get(status));
    }
    let app = app.with_state(AppState { metrics, health });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    match tls {
        Some(current) => {
            tokio::spawn(super::admin_tls::serve(listener, app, current));
        }
        None => {
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "admin server stopped");
                }
            });
        }
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_says_categories_never_names_accounts_or_paths() {
        let doc = StatusDoc {
            ready: false,
            leader: true,
            rules: vec![
                RuleDoc {
                    name: "secret-rule".into(),
                    source: "/etc/ruleop/rules/team-a.yaml".into(),
                    fingerprint: "abc".into(),
                    synced: false,
                    identity: Some("team-a/builder".into()),
                    not_started: Some("team-a/builder may not list notes".into()),
                },
                RuleDoc {
                    name: "web".into(),
                    source: "Rule/web".into(),
                    fingerprint: "def".into(),
                    synced: true,
                    identity: None,
                    not_started: None,
                },
            ],
            errors: vec![Problem {
                file: "/etc/ruleop/rules/bad.yaml".into(),
                message: "/etc/ruleop/rules/bad.yaml:3: rule `bad`: watch.version is empty".into(),
            }],
        };
        let text = readiness(&doc);
        assert!(
            text.contains("1 synced") && text.contains("1 not started"),
            "{text}"
        );
        assert!(text.contains("rules load: 1 error(s)"), "{text}");
        for hidden in [
            "secret-rule",
            "web",
            "team-a",
            "builder",
            "/etc/",
            "bad",
            "Rule/",
        ] {
            assert!(!text.contains(hidden), "{hidden:?} in {text}");
        }
    }
}
