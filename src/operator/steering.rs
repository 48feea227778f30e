//! The rules kept in force while ruleop runs: the rule book read again on every change of
//! the rules files, of the Rule objects and on the poll; the controllers started when this
//! process leads and cancelled when it stops leading; the Rules' status written while it
//! leads. Each branch of `ruleop run`'s loop is one method here.

use super::admin::Health;
use super::supervisor::Supervisor;
use super::{objects, revisions, rule_status};
use crate::metrics::Metrics;
use crate::rules::book::{Problem, RuleBook};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What the loop keeps.
pub(super) struct Steering {
    pub book: RuleBook,
    pub sup: Supervisor,
    pub objects: Option<objects::RuleObjects>,
    pub client: kube::Client,
    pub state_namespace: String,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub leading: bool,
    pub me: String,
    last_problems: Vec<Problem>,
    rule_api: kube::Api<kube::api::DynamicObject>,
}

impl Steering {
    /// The rules first put in force (the Rule objects read, the files' problems said).
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        book: RuleBook,
        sup: Supervisor,
        objects: Option<objects::RuleObjects>,
        client: kube::Client,
        state_namespace: String,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        me: String,
    ) -> Steering {
        let rule_api = kube::Api::all_with(client.clone(), &objects::resource());
        let mut s = Steering {
            book,
            sup,
            objects,
            client,
            state_namespace,
            metrics,
            health,
            leading: false,
            me,
            last_problems: Vec::new(),
            rule_api,
        };
        s.refresh().await;
        let problems = s.book.problems.clone();
        report(&problems, &mut s.last_problems, &s.metrics, &s.health);
        s.sup.present = s.book.names();
        s.sup.set_desired(s.book.rules());
        s
    }

    /// Reads the rules files again and takes the Rule objects as the cluster holds them
    /// now. A Rule whose generation does not compile, with no good one seen by this
    /// process (it started since), serves the revision its status says was in force.
    pub async fn refresh(&mut self) {
        if let Some(o) = &self.objects {
            self.book.set_objects(&o.list());
            for (name, uid, revision) in self.book.without_good() {
                let ns = &self.state_namespace;
                match revisions::spec_of(&self.client, ns, &name, &uid, revision).await {
                    Ok(Some(spec)) => self.book.set_fallback(&name, &uid, &spec),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(rule = %name, error = %e, "the Rule's last revision cannot be read")
                    }
                }
            }
        }
        self.book.reload();
    }

    /// Puts the rules of the book in force (started with `converge`).
    pub async fn put_in_force(&mut self, converge: bool) {
        let rules = self.book.rules();
        self.sup.present = self.book.names();
        let problems = self.book.problems.clone();
        let changed = report(
            &problems,
            &mut self.last_problems,
            &self.metrics,
            &self.health,
        );
        if changed && problems.is_empty() {
            tracing::info!("rules files load cleanly again");
        }
        self.sup.set_desired(rules);
        if converge {
            self.sup.converge().await;
        }
    }

    /// Reads everything again and puts it in force.
    pub async fn reload(&mut self) {
        self.refresh().await;
        self.put_in_force(self.leading).await;
    }

    /// Whether this process leads now (published on /metrics and /readyz).
    pub fn set_leading(&mut self, leading: bool) {
        self.leading = leading;
        self.metrics.leader.set(i64::from(leading));
        self.health.leader.store(leading, Ordering::SeqCst);
    }

    /// The Lease won or lost.
    pub async fn leadership(&mut self, now: bool) {
        if now == self.leading {
            return;
        }
        self.set_leading(now);
        if now {
            tracing::info!(identity = %self.me, "became leader: starting controllers");
            // Only on Rules seen since the Lease was taken.
            if let Some(o) = &self.objects {
                o.caught_up(Duration::from_secs(30)).await;
                self.refresh().await;
                self.put_in_force(false).await;
            }
            self.sup.converge().await;
        } else {
            // The fence already stops every write; in-flight reconciles are cancelled
            // rather than waited for.
            tracing::warn!(identity = %self.me, "lost leadership: cancelling controllers");
            self.sup.abort_all().await;
        }
    }

    /// A change of the rules files (a burst settled first).
    pub async fn files_changed(&mut self, changes: &mut tokio::sync::mpsc::Receiver<()>) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        while changes.try_recv().is_ok() {}
        self.reload().await;
    }

    /// A change of the Rule objects: in force, and their status said while leading.
    pub async fn objects_changed(&mut self) {
        self.reload().await;
        if self.leading {
            self.write_status().await;
        }
    }

    /// The Rules' status written (while leading).
    pub async fn write_status(&self) {
        if let Some(o) = &self.objects {
            rule_status::write_all(&self.book, &self.sup, o, &self.rule_api).await;
        }
    }

    /// The next change of the Rule objects (never, without them).
    pub async fn next_object_change(&mut self) -> Option<()> {
        match self.objects.as_mut() {
            Some(o) => o.changes.recv().await,
            None => std::future::pending().await,
        }
    }
}

/// Logs and publishes the problems of a load; returns whether they changed.
fn report(
    problems: &[Problem],
    last: &mut Vec<Problem>,
    metrics: &Metrics,
    health: &Health,
) -> bool {
    if problems == last.as_slice() {
        return false;
    }
    for p in problems {
        tracing::error!(file = %p.file, error = %p.message, "rules file has errors; the last good version of its rules stays in force");
    }
    metrics.rule_load_failures.inc_by(problems.len() as u64);
    metrics.rule_load_errors.set(problems.len() as i64);
    if let Ok(mut h) = health.problems.lock() {
        *h = problems.to_vec();
    }
    *last = problems.to_vec();
    true
}
