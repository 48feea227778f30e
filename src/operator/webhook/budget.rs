//! What the webhook's endpoints may take at once, so that no caller can exhaust the pod
//! (its limit is 256 Mi) or starve the API server's own reviews: connections, the bytes of
//! request bodies held and the conversions under way, each in all and from one address.
//! The port answers any pod that reaches it (the API server presents no client
//! certificate), so one address never holds more than its share: the API server, from
//! its own addresses, always finds the rest. A request over budget is refused at once or
//! after a short wait — a connection closed, 413 for a body larger than the API server
//! ever sends, 429 when its turn does not come — and never queued without end.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Connections open at once, in all and from one address.
    pub connections: usize,
    pub connections_per_source: usize,
    /// Bytes of request bodies held at once (a body is read whole before it is parsed).
    pub bytes: usize,
    pub bytes_per_source: usize,
    /// Conversions under way at once (each parses and writes up to a body's size).
    pub conversions: usize,
    pub conversions_per_source: usize,
}

/// The webhook's sizes: 64 connections, 16 from one address (the API server's replicas
/// are a few addresses); 32 MiB of bodies, 16 MiB from one address (one ConversionReview
/// of the largest size); 2 conversions, 1 from one address.
pub const SIZES: Sizes = Sizes {
    connections: 64,
    connections_per_source: 16,
    bytes: 32 * 1024 * 1024,
    bytes_per_source: 16 * 1024 * 1024,
    conversions: 2,
    conversions_per_source: 1,
};

/// How long a request waits for its bytes, or a conversion for its turn, before it is
/// refused as busy (the API server waits 10 s for a conversion, 5 s for a review).
pub const WAIT_FOR_TURN: Duration = Duration::from_secs(3);

/// The webhook's budget, shared by its connections.
#[derive(Debug)]
pub struct Budget {
    sizes: Sizes,
    connections: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    conversions: Arc<Semaphore>,
    sources: Mutex<HashMap<IpAddr, Arc<Source>>>,
}

/// What one address holds.
#[derive(Debug)]
pub struct Source {
    connections: Mutex<usize>,
    bytes: Arc<Semaphore>,
    conversions: Arc<Semaphore>,
}

/// A connection within the budget: its place is given back when it is dropped.
#[derive(Debug)]
pub struct Connection {
    budget: Arc<Budget>,
    source: IpAddr,
    state: Arc<Source>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Connection {
    fn drop(&mut self) {
        let Ok(mut sources) = self.budget.sources.lock() else {
            return;
        };
        let left = self.state.connections.lock().map_or(0, |mut n| {
            *n = n.saturating_sub(1);
            *n
        });
        if left == 0 {
            sources.remove(&self.source);
        }
    }
}

/// Why a request is refused before it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its body is larger than any the API server sends to this path (413).
    TooLarge,
    /// Its turn did not come in time (429).
    Busy,
}

/// What a request holds while it is answered (given back when dropped).
#[derive(Debug)]
pub struct Held(#[allow(dead_code)] Vec<OwnedSemaphorePermit>);

async fn take(s: &Arc<Semaphore>, n: u32) -> Result<OwnedSemaphorePermit, Refused> {
    match tokio::time::timeout(WAIT_FOR_TURN, s.clone().acquire_many_owned(n)).await {
        Ok(Ok(p)) => Ok(p),
        _ => Err(Refused::Busy),
    }
}

fn permits(n: usize) -> usize {
    n.min(Semaphore::MAX_PERMITS)
}

impl Budget {
    pub fn new() -> Arc<Budget> {
        Budget::sized(SIZES)
    }

    pub fn sized(sizes: Sizes) -> Arc<Budget> {
        Arc::new(Budget {
            sizes,
            connections: Arc::new(Semaphore::new(sizes.connections)),
            bytes: Arc::new(Semaphore::new(permits(sizes.bytes))),
            conversions: Arc::new(Semaphore::new(sizes.conversions)),
            sources: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a connection from `source`, if one is free now (never waits: the accept
    /// loop goes on, and a connection with no place is closed).
    pub fn connect(self: &Arc<Self>, source: IpAddr) -> Option<Connection> {
        let slot = self.connections.clone().try_acquire_owned().ok()?;
        let mut sources = self.sources.lock().ok()?;
        let state = sources
            .entry(source)
            .or_insert_with(|| {
                Arc::new(Source {
                    connections: Mutex::new(0),
                    bytes: Arc::new(Semaphore::new(permits(self.sizes.bytes_per_source))),
                    conversions: Arc::new(Semaphore::new(self.sizes.conversions_per_source)),
                })
            })
            .clone();
        let mut n = state.connections.lock().ok()?;
        if *n >= self.sizes.connections_per_source {
            return None;
        }
        *n += 1;
        drop(n);
        Some(Connection {
            budget: self.clone(),
            source,
            state,
            _slot: slot,
        })
    }

    /// The bytes to read a body of `declared` bytes (its Content-Length; None: the largest
    /// `max` allows), from the connection's address's share and then from all.
    pub async fn body(
        &self,
        from: &Connection,
        declared: Option<usize>,
        max: usize,
    ) -> Result<Held, Refused> {
        let want = declared.unwrap_or(max);
        if want > max || want > self.sizes.bytes_per_source {
            return Err(Refused::TooLarge);
        }
        let want = u32::try_from(want.max(1)).map_err(|_| Refused::TooLarge)?;
        let mine = take(&from.state.bytes, want).await?;
        let all = take(&self.bytes, want).await?;
        Ok(Held(vec![mine, all]))
    }

    /// A turn to convert, from the address's share and then from all.
    pub async fn conversion(&self, from: &Connection) -> Result<Held, Refused> {
        let mine = take(&from.state.conversions, 1).await?;
        let all = take(&self.conversions, 1).await?;
        Ok(Held(vec![mine, all]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Arc<Budget> {
        Budget::sized(Sizes {
            connections: 4,
            connections_per_source: 2,
            bytes: 150,
            bytes_per_source: 100,
            conversions: 2,
            conversions_per_source: 1,
        })
    }

    #[tokio::test]
    async fn one_source_takes_its_share_and_leaves_the_rest_to_the_others() {
        let b = small();
        let (a, c) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = b.connect(a).unwrap();
        let second = b.connect(a).unwrap();
        assert!(b.connect(a).is_none(), "a source past its share is closed");
        let third = b.connect(c).unwrap();
        let _fourth = b.connect(c).unwrap();
        assert!(
            b.connect("10.0.0.3".parse().unwrap()).is_none(),
            "all taken"
        );

        assert_eq!(
            b.body(&first, Some(101), 1000).await.unwrap_err(),
            Refused::TooLarge
        );
        // The flooding source holds its whole share; another still has room.
        let held = b.body(&first, Some(100), 1000).await.unwrap();
        let started = std::time::Instant::now();
        assert_eq!(
            b.body(&second, Some(30), 1000).await.unwrap_err(),
            Refused::Busy
        );
        assert!(started.elapsed() >= WAIT_FOR_TURN);
        let theirs = b.body(&third, Some(50), 1000).await.unwrap();
        // One conversion per source, two in all.
        let turn = b.conversion(&first).await.unwrap();
        assert_eq!(b.conversion(&second).await.unwrap_err(), Refused::Busy);
        let other_turn = b.conversion(&third).await.unwrap();
        drop((held, theirs, turn, other_turn));
        drop(first);
        assert!(b.connect(a).is_some(), "a place given back is taken again");
        assert!(
            b.body(&second, None, 100).await.is_ok(),
            "no length: the largest allowed"
        );
    }
}
