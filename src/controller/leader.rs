//! Leader election on a `coordination.k8s.io` Lease, through kube-lease-manager: only the
//! holder reconciles; the lease is released on shutdown so a standby takes over at once.

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Lease settings.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// Seconds a lease stays valid after its last renewal.
    pub duration: u64,
    /// Seconds before expiry at which the holder renews.
    pub grace: u64,
}

/// A running election.
pub struct Election {
    rx: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Election {
    /// Starts campaigning in the background.
    pub async fn start(client: Client, cfg: &LeaseConfig) -> Result<Election, LeaseManagerError> {
        let manager = LeaseManagerBuilder::new(client, &cfg.name)
            .with_namespace(&cfg.namespace)
            .with_identity(&cfg.identity)
            .with_duration(cfg.duration)
            .with_grace(cfg.grace)
            .with_field_manager("ruleop-leader")
            .build()
            .await?;
        let (rx, task) = manager.watch().await;
        Ok(Election { rx, task })
    }

    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits for the next change of leadership; returns whether we now lead. If the
    /// campaign task ends, returns false forever.
    pub async fn changed(&mut self) -> bool {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        *self.rx.borrow_and_update()
    }

    /// Releases the lease (if held) and ends the campaign.
    pub async fn release(self) {
        drop(self.rx);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("leader lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader lease failed"),
            Err(e) => tracing::warn!(error = %e, "leader election task failed"),
        }
    }
}
