//! What the webhook's endpoints may take at once, so that no caller can exhaust the pod
//! (its limit is 256 Mi) or starve the API server's own reviews: connections in all and
//! from one address, and the bytes of request bodies held at once. The port answers any
//! pod that reaches it (the API server presents no client certificate), so a request over
//! budget is refused at once — a connection closed, 413 for a body larger than the API
//! server ever sends, 429 when the bytes in hand are spent — and never queued without end.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections open at once, in all and from one address (the API server's replicas are a
/// few addresses; one pod flooding the port holds a quarter at most).
pub const CONNECTIONS_AT_ONCE: usize = 64;
pub const CONNECTIONS_PER_SOURCE: usize = 16;
/// The bytes of request bodies held at once (a body is read whole before it is parsed).
pub const BODIES_AT_ONCE: usize = 24 * 1024 * 1024;
/// How long a request waits for its bytes, or a conversion for its turn, before it is
/// refused as busy (the API server waits 10 s for a conversion, 5 s for a review).
pub const WAIT_FOR_TURN: Duration = Duration::from_secs(3);

/// The webhook's budget, shared by its connections.
#[derive(Debug)]
pub struct Budget {
    connections: Arc<Semaphore>,
    per_source: Mutex<HashMap<IpAddr, usize>>,
    bytes: Arc<Semaphore>,
    per_source_max: usize,
}

/// A connection within the budget: its place is given back when it is dropped.
#[derive(Debug)]
pub struct Connection {
    budget: Arc<Budget>,
    source: IpAddr,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Ok(mut m) = self.budget.per_source.lock()
            && let Some(n) = m.get_mut(&self.source)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.source);
            }
        }
    }
}

/// Why a request is refused before it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its body is larger than any the API server sends to this path (413).
    TooLarge,
    /// The bytes in hand are spent and none came back in time (429).
    Busy,
}

impl Budget {
    pub fn new() -> Arc<Budget> {
        Budget::sized(CONNECTIONS_AT_ONCE, CONNECTIONS_PER_SOURCE, BODIES_AT_ONCE)
    }

    pub fn sized(connections: usize, per_source: usize, bytes: usize) -> Arc<Budget> {
        Arc::new(Budget {
            connections: Arc::new(Semaphore::new(connections)),
            per_source: Mutex::new(HashMap::new()),
            bytes: Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))),
            per_source_max: per_source,
        })
    }

    /// A place for a connection from `source`, if one is free now (never waits: the accept
    /// loop goes on, and a connection with no place is closed).
    pub fn connect(self: &Arc<Self>, source: IpAddr) -> Option<Connection> {
        let slot = self.connections.clone().try_acquire_owned().ok()?;
        let mut m = self.per_source.lock().ok()?;
        let n = m.entry(source).or_default();
        if *n >= self.per_source_max {
            return None;
        }
        *n += 1;
        Some(Connection {
            budget: self.clone(),
            source,
            _slot: slot,
        })
    }

    /// The bytes to read a body of `declared` bytes (its Content-Length; None: the largest
    /// `max` allows), held until the request is answered.
    pub async fn body(
        &self,
        declared: Option<usize>,
        max: usize,
    ) -> Result<OwnedSemaphorePermit, Refused> {
        let want = declared.unwrap_or(max);
        if want > max {
            return Err(Refused::TooLarge);
        }
        let want = u32::try_from(want.max(1)).map_err(|_| Refused::TooLarge)?;
        match tokio::time::timeout(WAIT_FOR_TURN, self.bytes.clone().acquire_many_owned(want)).await
        {
            Ok(Ok(p)) => Ok(p),
            _ => Err(Refused::Busy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_source_takes_its_share_and_bodies_share_the_bytes() {
        let b = Budget::sized(4, 2, 100);
        let (a, c) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = b.connect(a).unwrap();
        let _second = b.connect(a).unwrap();
        assert!(b.connect(a).is_none(), "a source past its share is closed");
        let _third = b.connect(c).unwrap();
        let _fourth = b.connect(c).unwrap();
        assert!(
            b.connect("10.0.0.3".parse().unwrap()).is_none(),
            "all taken"
        );
        drop(first);
        assert!(b.connect(a).is_some(), "a place given back is taken again");

        assert_eq!(b.body(Some(101), 100).await.unwrap_err(), Refused::TooLarge);
        let held = b.body(Some(80), 100).await.unwrap();
        let started = std::time::Instant::now();
        assert_eq!(b.body(Some(30), 100).await.unwrap_err(), Refused::Busy);
        assert!(started.elapsed() >= WAIT_FOR_TURN);
        drop(held);
        assert!(
            b.body(None, 100).await.is_ok(),
            "no length: the largest allowed"
        );
    }
}
