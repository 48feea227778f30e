//! What the runner's files share: how a rule runs ([`Options`]), what a running rule shows
//! of itself ([`RuleInfo`]), and why one waits to start ([`Blocked`]).

use crate::access::review::{self, Missing};
use crate::cache::watches::WatchScope;
use crate::reconcile::{Process, Records};
use std::sync::Arc;
use std::time::Duration;

/// How a rule runs.
#[derive(Clone)]
pub struct Options {
    /// What every rule shares: the client, the fence, the metrics, which Events, resync.
    pub process: Arc<Process>,
    /// Reconciles of this rule running at once.
    pub concurrency: u16,
    /// How often discovery is retried while a kind is not served.
    pub discovery_retry: Duration,
    /// Where the watches look, and their timeout.
    pub scope: WatchScope,
    /// Who the Events ruleop publishes come from.
    pub reporter: kube::runtime::events::Reporter,
    /// The operator's own namespace: the inventory of made kinds lives there.
    pub state_namespace: String,
    /// How long a newer version of a rule recorded in the cluster is waited for before this
    /// replica's files are taken for a rollback (see [`super::versions`]).
    pub settle: Duration,
    /// Install each rule's CRD from its schema when it starts.
    pub install_crds: bool,
    /// Paces the publishing of Events (all rules share it); None: unpaced.
    pub event_pace: Option<Arc<crate::client::limiter::Pace>>,
    /// ruleop's converging requests in flight: an Event waits (at most a second) for a
    /// moment with none before it is published. None: Events do not wait.
    pub event_quiet: Option<Arc<crate::client::busy::Busy>>,
    /// The Rule objects' cache (a rollout reads its Rule's `ruleop.dev/rollout`).
    pub rules: Option<kube::runtime::reflector::Store<kube::api::DynamicObject>>,
    /// The clients of rules that name a ServiceAccount.
    pub clients: Arc<crate::client::Clients>,
    /// The installation's policy: a kept revision that breaks it does not run either.
    pub policy: crate::rules::policy::Policy,
    /// The conversion webhook, for the CRDs of kinds with several versions (None: no
    /// webhook served, and such a CRD is not installed).
    pub conversion: Option<crate::operator::webhook::Hook>,
    /// Who migrates a kind's stored objects to a new storage version.
    pub storage_migration: crate::operator::migrate::By,
    /// The kinds served and their conversions (a rule's join once it may define its kind).
    pub served: Arc<crate::operator::webhook::review::Served>,
}

/// What a running rule shows of itself (for a Rule's status).
#[derive(Default)]
pub struct RuleInfo {
    /// The watched kind, once discovery has resolved it.
    pub kind: std::sync::OnceLock<String>,
    /// One record per custom resource, once the rule runs.
    pub(super) records: std::sync::OnceLock<Arc<Records<crate::reconcile::outcome::Sent>>>,
    /// The revision of a Rule object's rule, once recorded.
    pub revision: std::sync::OnceLock<i64>,
    /// Where its rollout stands (as the Rule's `status.rollout`): None until the run has
    /// decided (then `Some(None)` when no rollout runs).
    rollout: std::sync::Mutex<Option<Option<serde_json::Value>>>,
    /// Why the rule waits to start: its ServiceAccount lacks permissions.
    blocked: std::sync::Mutex<Option<Blocked>>,
    /// Its kind's storage (a kind in several versions whose CRD ruleop installs).
    pub storage: Arc<crate::operator::migrate::progress::Shared>,
}

impl RuleInfo {
    pub fn set_blocked(&self, b: Option<Blocked>) {
        if let Ok(mut x) = self.blocked.lock() {
            *x = b;
        }
    }

    /// Why the rule waits to start, if it does.
    pub fn blocked(&self) -> Option<Blocked> {
        self.blocked.lock().ok().and_then(|b| b.clone())
    }

    pub fn set_rollout(&self, v: Option<serde_json::Value>) {
        if let Ok(mut r) = self.rollout.lock() {
            *r = Some(v);
        }
    }

    /// Where the rollout stands: None while the run has not decided, `Some(None)` when
    /// no rollout runs.
    pub fn rollout(&self) -> Option<Option<serde_json::Value>> {
        self.rollout.lock().ok().and_then(|r| r.clone())
    }

    /// How many custom resources the rule serves, once it runs.
    pub fn resources(&self) -> Option<usize> {
        self.records.get().map(|r| r.len())
    }
}

/// Why a rule with a ServiceAccount does not run (yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// The account lacks these.
    Missing(Vec<Missing>),
    /// ruleop may not act as the account (the API server's message).
    CannotImpersonate(String),
    /// The API server has not answered yet (the error): the rule waits, unchecked.
    Unchecked(String),
    /// ruleop would define the kind (its CRD, its conversions) and the account may not
    /// `update` that CRD (its name).
    MayNotDefine(String),
}

impl Blocked {
    /// One line: what is missing and the fix.
    pub fn describe(&self, who: &str) -> String {
        match self {
            Blocked::Missing(m) => review::describe(who, m),
            Blocked::CannotImpersonate(msg) => format!(
                "ruleop may not act as the ServiceAccount {who}: {msg}; grant ruleop's own account `impersonate` on it (apiGroups: [\"\"], resources: [serviceaccounts], resourceNames: [its name], in its namespace; `ruleop rbac --per-rule` prints it)"
            ),
            Blocked::Unchecked(e) => format!(
                "the permissions of the ServiceAccount {who} could not be checked yet ({e}); asking again"
            ),
            Blocked::MayNotDefine(crd) => format!(
                "ruleop would define the rule's kind (the CRD {crd} from its `schema`, or its conversions), and the ServiceAccount {who} may not `update` customresourcedefinitions/{crd}; grant it {{\"apiGroups\":[\"apiextensions.k8s.io\"],\"resources\":[\"customresourcedefinitions\"],\"resourceNames\":[\"{crd}\"],\"verbs\":[\"update\"]}} in a ClusterRole bound to it, or leave the kind's CRD to whoever owns it"
            ),
        }
    }
}

/// A running rule's info gauges (`ruleop_rule_info{rule,revision}`,
/// `ruleop_rule_identity{rule,identity}`), set at start and removed when dropped.
pub struct Gauges {
    metrics: Arc<crate::metrics::Metrics>,
    revision: Option<crate::metrics::RevisionLabels>,
    identity: crate::metrics::RuleIdentityLabels,
}

impl Gauges {
    pub fn set(
        metrics: &Arc<crate::metrics::Metrics>,
        rule: &crate::rules::CompiledRule,
        revision: Option<i64>,
    ) -> Gauges {
        let revision = revision.map(|r| crate::metrics::RevisionLabels {
            rule: rule.name.clone(),
            revision: r.to_string(),
        });
        if let Some(l) = &revision {
            metrics.rule_info.get_or_create(l).set(1);
        }
        let identity = crate::metrics::RuleIdentityLabels {
            rule: rule.name.clone(),
            identity: rule
                .identity
                .as_ref()
                .map_or_else(|| "ruleop".to_string(), |i| i.user()),
        };
        metrics.rule_identity.get_or_create(&identity).set(1);
        metrics.rule_started(&rule.name);
        Gauges {
            metrics: metrics.clone(),
            revision,
            identity,
        }
    }
}

impl Drop for Gauges {
    fn drop(&mut self) {
        if let Some(l) = &self.revision {
            let _ = self.metrics.rule_info.remove(l);
        }
        let _ = self.metrics.rule_identity.remove(&self.identity);
    }
}
