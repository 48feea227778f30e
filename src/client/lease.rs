//! Fenced leader election on a `coordination.k8s.io` Lease, with client-go's timing: the
//! holder renews every `retry` and must succeed within `renew_deadline` (shorter than the
//! lease duration) or stop writing; a standby takes the Lease only after it has seen the
//! record unchanged, by its own clock, for the whole lease duration (or released).
//!
//! The [`Fence`] is what makes this safe: every write ruleop makes asks it first, and it
//! holds only until `renew_deadline` after the start of the last successful renewal. The
//! standby cannot take over before `lease duration` after it saw that renewal, so the two
//! never write at once, whatever the network does: `duration - renew_deadline` apart at
//! least (minus the clocks' drift over that time, not their offset).

use super::fence::Fence;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Lease settings.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a standby waits after the last change it saw before taking the Lease.
    pub duration: Duration,
    /// How long after the start of its last successful renewal the holder keeps writing.
    pub renew_deadline: Duration,
    /// Time between attempts to renew or acquire.
    pub retry: Duration,
}

/// Why the lease settings cannot work.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "the renew deadline ({renew:?}) must be shorter than the lease duration ({duration:?}), or two replicas could write at once"
    )]
    DeadlineNotShorter { renew: Duration, duration: Duration },
    #[error(
        "the retry period ({retry:?}) must be above zero and shorter than the renew deadline ({renew:?})"
    )]
    RetryNotShorter { retry: Duration, renew: Duration },
}

impl LeaseConfig {
    /// client-go's defaults scaled to `duration`: renew deadline 2/3 of it, retry 1/5 of that.
    pub fn timing(
        duration: Duration,
        renew: Option<Duration>,
        retry: Option<Duration>,
    ) -> (Duration, Duration, Duration) {
        let renew = renew.unwrap_or(duration * 2 / 3);
        let retry = retry.unwrap_or(renew / 5);
        (duration, renew, retry)
    }

    pub fn check(&self) -> Result<(), LeaseError> {
        if self.renew_deadline >= self.duration {
            return Err(LeaseError::DeadlineNotShorter {
                renew: self.renew_deadline,
                duration: self.duration,
            });
        }
        if self.retry.is_zero() || self.retry >= self.renew_deadline {
            return Err(LeaseError::RetryNotShorter {
                retry: self.retry,
                renew: self.renew_deadline,
            });
        }
        Ok(())
    }
}

/// A running election.
pub struct Election {
    rx: watch::Receiver<bool>,
    fence: Arc<Fence>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The last Lease record seen, and when (by this replica's clock) it last changed.
struct Observed {
    resource_version: String,
    since: Instant,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Holding,
    HeldByOther,
}

/// The spec a holder writes: renewed now, acquired now if it was not ours.
fn next_spec(old: Option<&LeaseSpec>, cfg: &LeaseConfig) -> LeaseSpec {
    let ours = old.and_then(|s| s.holder_identity.as_deref()) == Some(cfg.identity.as_str());
    let transitions = old.and_then(|s| s.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.duration.as_secs().max(1) as i32),
        acquire_time: if ours {
            old.and_then(|s| s.acquire_time.clone())
        } else {
            Some(now())
        },
        renew_time: Some(now()),
        lease_transitions: Some(if ours || old.is_none() {
            transitions
        } else {
            transitions + 1
        }),
        ..Default::default()
    }
}

/// Whether a standby may take a Lease held by `holder`, last seen changing at `since`.
fn may_take(holder: &str, me: &str, since: Instant, duration: Duration) -> bool {
    holder.is_empty() || holder == me || since.elapsed() >= duration
}

/// One attempt to acquire or renew. A leader renews from the Lease it last wrote, with no
/// read (client-go's fast path): one request a retry period in steady state. Only when that
/// write is refused (another wrote the Lease since) or there is none does it read the Lease.
async fn attempt(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Option<Observed>,
    held: &mut Option<Lease>,
) -> Result<Attempt, kube::Error> {
    if let Some(mut lease) = held.take() {
        lease.spec = Some(next_spec(lease.spec.as_ref(), cfg));
        match api.replace(&cfg.name, &PostParams::default(), &lease).await {
            Ok(written) => return Ok(wrote(written, observed, held)),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let Some(mut lease) = api.get_opt(&cfg.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                ..Default::default()
            },
            spec: Some(next_spec(None, cfg)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(written) => Ok(wrote(written, observed, held)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::HeldByOther),
            Err(e) => Err(e),
        };
    };
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    if observed.as_ref().is_none_or(|o| o.resource_version != rv) {
        *observed = Some(Observed {
            resource_version: rv,
            since: Instant::now(),
        });
    }
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    let duration = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .map_or(cfg.duration, |s| Duration::from_secs(s.max(0) as u64));
    let since = observed.as_ref().map_or_else(Instant::now, |o| o.since);
    if !may_take(&holder, &cfg.identity, since, duration) {
        return Ok(Attempt::HeldByOther);
    }
    lease.spec = Some(next_spec(lease.spec.as_ref(), cfg));
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(written) => Ok(wrote(written, observed, held)),
        // Someone else wrote it first (the resourceVersion moved): not ours.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::HeldByOther),
        Err(e) => Err(e),
    }
}

/// The Lease as this replica wrote it: the next renewal starts from it.
fn wrote(written: Lease, observed: &mut Option<Observed>, held: &mut Option<Lease>) -> Attempt {
    *observed = Some(Observed {
        resource_version: written
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default(),
        since: Instant::now(),
    });
    *held = Some(written);
    Attempt::Holding
}

impl Election {
    /// Starts campaigning in the background.
    pub fn start(client: Client, cfg: LeaseConfig) -> Election {
        let (tx, rx) = watch::channel(false);
        let (stop, stop_rx) = watch::channel(false);
        let fence = Fence::elected();
        let task = tokio::spawn(campaign(client, cfg, tx, fence.clone(), stop_rx));
        Election {
            rx,
            fence,
            stop,
            task,
        }
    }

    pub fn fence(&self) -> Arc<Fence> {
        self.fence.clone()
    }

    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits for the next change of leadership; returns whether we now lead.
    pub async fn changed(&mut self) -> bool {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        *self.rx.borrow_and_update()
    }

    /// Ends the campaign and gives the Lease up (if held), so a standby takes over at once.
    pub async fn release(self, client: Client, cfg: &LeaseConfig) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let held = self.fence.holds();
        self.fence.set(None);
        if !held {
            return;
        }
        let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
        let result = async {
            let mut lease = api.get(&cfg.name).await?;
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now());
            api.replace(&cfg.name, &PostParams::default(), &lease)
                .await?;
            Ok::<bool, kube::Error>(true)
        }
        .await;
        match result {
            Ok(true) => tracing::info!("leader lease released"),
            Ok(false) => tracing::info!("leader lease was no longer ours"),
            Err(e) => tracing::warn!(error = %e, "releasing the leader lease failed"),
        }
    }
}

async fn campaign(
    client: Client,
    cfg: LeaseConfig,
    tx: watch::Sender<bool>,
    fence: Arc<Fence>,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut observed = None;
    let mut held = None;
    let mut leading = false;
    loop {
        let started = Instant::now();
        // An attempt may not outlive the fence: a hung request must not keep us leading.
        let limit = match fence.until().filter(|_| leading) {
            Some(t) => t
                .saturating_duration_since(started)
                .max(Duration::from_millis(100)),
            None => cfg.renew_deadline,
        };
        let result =
            tokio::time::timeout(limit, attempt(&api, &cfg, &mut observed, &mut held)).await;
        match result {
            Ok(Ok(Attempt::Holding)) => {
                fence.set(Some(started + cfg.renew_deadline));
                if !leading {
                    leading = true;
                    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "acquired the leader lease");
                    let _ = tx.send(true);
                }
            }
            Ok(Ok(Attempt::HeldByOther)) if leading => {
                fence.set(None);
            }
            Ok(Ok(Attempt::HeldByOther)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, leading, "leader lease: request failed"),
            Err(_) => tracing::warn!(leading, "leader lease: request timed out"),
        }
        if leading && !fence.holds() {
            leading = false;
            fence.set(None);
            tracing::warn!(identity = %cfg.identity, deadline_ms = cfg.renew_deadline.as_millis() as u64, "leadership lost: the lease was not renewed within the renew deadline; stopped writing");
            let _ = tx.send(false);
        }
        // Wake for the next attempt, or at the fence's end to say so on time.
        let mut wait = cfg.retry.saturating_sub(started.elapsed());
        if let Some(t) = fence.until().filter(|_| leading) {
            wait = wait.min(t.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LeaseConfig {
        let (duration, renew_deadline, retry) =
            LeaseConfig::timing(Duration::from_secs(15), None, None);
        LeaseConfig {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "me".into(),
            duration,
            renew_deadline,
            retry,
        }
    }

    #[test]
    fn the_defaults_are_client_gos_and_a_deadline_not_shorter_than_the_lease_is_refused() {
        let c = cfg();
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry, Duration::from_secs(2));
        assert!(c.check().is_ok());
        let bad = LeaseConfig {
            renew_deadline: Duration::from_secs(15),
            ..c.clone()
        };
        assert!(matches!(
            bad.check(),
            Err(LeaseError::DeadlineNotShorter { .. })
        ));
        let bad = LeaseConfig {
            retry: Duration::from_secs(10),
            ..c
        };
        assert!(matches!(
            bad.check(),
            Err(LeaseError::RetryNotShorter { .. })
        ));
    }

    #[test]
    fn the_fence_holds_until_its_deadline_and_an_open_one_always() {
        assert!(Fence::open().holds());
        let f = Fence::elected();
        assert!(!f.holds(), "not before the first renewal");
        f.set(Some(Instant::now() + Duration::from_secs(5)));
        assert!(f.holds());
        f.set(Some(Instant::now() - Duration::from_millis(1)));
        assert!(!f.holds(), "past the renew deadline: no more writes");
    }

    #[test]
    fn a_standby_takes_the_lease_only_when_released_or_unchanged_for_its_duration() {
        let d = Duration::from_secs(15);
        assert!(may_take("", "me", Instant::now(), d), "released");
        assert!(may_take("me", "me", Instant::now(), d), "ours");
        assert!(
            !may_take("other", "me", Instant::now(), d),
            "renewed just now"
        );
        let long_ago = Instant::now() - Duration::from_secs(16);
        assert!(may_take("other", "me", long_ago, d), "expired by our clock");
    }

    #[test]
    fn taking_a_lease_over_counts_a_transition_and_renewing_keeps_the_acquire_time() {
        let c = cfg();
        let first = next_spec(None, &c);
        assert_eq!(first.lease_transitions, Some(0));
        let renewed = next_spec(Some(&first), &c);
        assert_eq!(renewed.acquire_time, first.acquire_time);
        assert_eq!(renewed.lease_transitions, Some(0));
        let theirs = LeaseSpec {
            holder_identity: Some("other".into()),
            lease_transitions: Some(3),
            ..Default::default()
        };
        let taken = next_spec(Some(&theirs), &c);
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_transitions, Some(4));
    }
}
