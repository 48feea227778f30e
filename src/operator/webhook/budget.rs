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
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How much of each thing may be held at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served.
    pub connections: usize,
    /// Connections waiting for their turn (past that, a new connection is closed at once).
    pub waiting: usize,
    /// Bytes of request bodies held (a body is read whole before it is parsed).
    pub bytes: usize,
    /// Conversions under way (each parses and writes up to a body's size).
    pub conversions: usize,
    /// Rule reviews under way (each compiles a Rule of up to 1 MiB and asks the API server
    /// its author's rights).
    pub reviews: usize,
}

/// The budget's sizes: in all, and from one address.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub all: Limits,
    pub per_source: Limits,
}

/// The webhook's sizes. 128 connections served, 32 from one address, and as many again
/// waiting their turn: the API server sends a burst of reviews from one address, each on
/// a connection of its own, and a connection it cannot open is a review not made (with
/// `failurePolicy: Ignore`, a Rule stored unchecked), so its connections wait rather than
/// be closed. 40 MiB of bodies, 16 MiB from one address (one ConversionReview of the
/// largest size); 3 conversions, 1 from one address; 6 reviews, 3 from one address.
pub const SIZES: Sizes = Sizes {
    all: Limits {
        connections: 128,
        waiting: 1024,
        bytes: 40 * 1024 * 1024,
        conversions: 3,
        reviews: 6,
    },
    per_source: Limits {
        connections: 32,
        waiting: 64,
        bytes: 16 * 1024 * 1024,
        conversions: 1,
        reviews: 3,
    },
};

/// How long a request waits for its bytes, or a conversion for its turn, before it is
/// refused as busy (the API server waits 10 s for a conversion, 5 s for a review).
pub const WAIT_FOR_TURN: Duration = Duration::from_secs(3);
/// How long a connection waits to be served before it is closed.
pub const WAIT_TO_SERVE: Duration = Duration::from_secs(5);

/// The webhook's budget, shared by its connections.
#[derive(Debug)]
pub struct Budget {
    sizes: Sizes,
    all: Pools,
    sources: Mutex<HashMap<IpAddr, Arc<Pools>>>,
}

/// A semaphore for each of [`Limits`]: the budget's in all, and one address's.
#[derive(Debug)]
struct Pools {
    connections: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    conversions: Arc<Semaphore>,
    reviews: Arc<Semaphore>,
}

impl Pools {
    fn new(l: Limits) -> Pools {
        let pool = |n: usize| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS)));
        Pools {
            connections: pool(l.connections),
            waiting: pool(l.waiting),
            bytes: pool(l.bytes),
            conversions: pool(l.conversions),
            reviews: pool(l.reviews),
        }
    }
}

/// An address's place in the budget while it has a connection waiting or served: its
/// record goes when its last one does.
#[derive(Debug)]
struct Ticket {
    budget: Arc<Budget>,
    source: IpAddr,
    state: Option<Arc<Pools>>,
}

impl Ticket {
    fn state(&self) -> &Pools {
        self.state
            .as_deref()
            .expect("a ticket holds its source until dropped")
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Its own hold let go under the lock: the last one out sees the map's alone.
        let Ok(mut sources) = self.budget.sources.lock() else {
            return;
        };
        drop(self.state.take());
        if sources
            .get(&self.source)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            sources.remove(&self.source);
        }
    }
}

/// A connection accepted and waiting its turn to be served.
#[derive(Debug)]
pub struct Waiting {
    ticket: Ticket,
    _places: [OwnedSemaphorePermit; 2],
}

/// A connection being served: its places are given back when it is dropped.
#[derive(Debug)]
pub struct Connection {
    ticket: Ticket,
    _places: [OwnedSemaphorePermit; 2],
}

impl Waiting {
    /// Waits for a place to serve the connection (its address's, then one of all); None
    /// when none comes within [`WAIT_TO_SERVE`] (the connection is closed).
    pub async fn serve(self) -> Option<Connection> {
        let until = Instant::now() + WAIT_TO_SERVE;
        let left = || until.saturating_duration_since(Instant::now());
        let state = self.ticket.state();
        let mine = tokio::time::timeout(left(), state.connections.clone().acquire_owned())
            .await
            .ok()?
            .ok()?;
        let all = tokio::time::timeout(
            left(),
            self.ticket.budget.all.connections.clone().acquire_owned(),
        )
        .await
        .ok()?
        .ok()?;
        Some(Connection {
            ticket: self.ticket,
            _places: [mine, all],
        })
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

/// `n` of the pool `pick` chooses, from the address's share and then from all.
async fn from_both(
    mine: &Pools,
    all: &Pools,
    pick: fn(&Pools) -> &Arc<Semaphore>,
    n: u32,
) -> Result<Held, Refused> {
    let mine = take(pick(mine), n).await?;
    let all = take(pick(all), n).await?;
    Ok(Held(vec![mine, all]))
}

impl Budget {
    pub fn new() -> Arc<Budget> {
        Budget::sized(SIZES)
    }

    pub fn sized(sizes: Sizes) -> Arc<Budget> {
        Arc::new(Budget {
            sizes,
            all: Pools::new(sizes.all),
            sources: Mutex::new(HashMap::new()),
        })
    }

    /// A place to wait for a connection from `source`, if one is free now (never waits:
    /// the accept loop goes on, and a connection with no place is closed at once).
    pub fn arrive(self: &Arc<Self>, source: IpAddr) -> Option<Waiting> {
        let all = self.all.waiting.clone().try_acquire_owned().ok()?;
        let mut sources = self.sources.lock().ok()?;
        let state = sources
            .entry(source)
            .or_insert_with(|| Arc::new(Pools::new(self.sizes.per_source)))
            .clone();
        drop(sources);
        let ticket = Ticket {
            budget: self.clone(),
            source,
            state: Some(state),
        };
        let mine = ticket.state().waiting.clone().try_acquire_owned().ok()?;
        Some(Waiting {
            ticket,
            _places: [mine, all],
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
        if want > max || want > self.sizes.per_source.bytes {
            return Err(Refused::TooLarge);
        }
        let want = u32::try_from(want.max(1)).map_err(|_| Refused::TooLarge)?;
        from_both(from.ticket.state(), &self.all, |p| &p.bytes, want).await
    }

    /// A turn to convert, from the address's share and then from all.
    pub async fn conversion(&self, from: &Connection) -> Result<Held, Refused> {
        from_both(from.ticket.state(), &self.all, |p| &p.conversions, 1).await
    }

    /// A turn to review a Rule, from the address's share and then from all.
    pub async fn review(&self, from: &Connection) -> Result<Held, Refused> {
        from_both(from.ticket.state(), &self.all, |p| &p.reviews, 1).await
    }

    /// Addresses with a connection waiting or served.
    #[cfg(test)]
    fn sources(&self) -> usize {
        self.sources.lock().map_or(0, |s| s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Arc<Budget> {
        Budget::sized(Sizes {
            all: Limits {
                connections: 3,
                waiting: 5,
                bytes: 150,
                conversions: 2,
                reviews: 2,
            },
            per_source: Limits {
                connections: 2,
                waiting: 1,
                bytes: 100,
                conversions: 1,
                reviews: 1,
            },
        })
    }

    #[tokio::test]
    async fn one_source_takes_its_share_and_leaves_the_rest_to_the_others() {
        let b = small();
        let (a, c): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = b.arrive(a).unwrap().serve().await.unwrap();
        let second = b.arrive(a).unwrap().serve().await.unwrap();
        // A third from `a` waits (its share is served), and is closed when no place comes.
        let third = b.arrive(a).unwrap();
        assert!(
            b.arrive(a).is_none(),
            "past its share of waiting: closed at once"
        );
        assert!(third.serve().await.is_none(), "no place came in time");
        // Another address is served beside it.
        let other = b.arrive(c).unwrap().serve().await.unwrap();

        assert_eq!(
            b.body(&first, Some(101), 1000).await.unwrap_err(),
            Refused::TooLarge
        );
        // The flooding address holds its whole share of bytes; the other still has room.
        let held = b.body(&first, Some(100), 1000).await.unwrap();
        assert_eq!(
            b.body(&second, Some(30), 1000).await.unwrap_err(),
            Refused::Busy
        );
        let theirs = b.body(&other, Some(50), 1000).await.unwrap();
        // One conversion per address, two in all.
        let turn = b.conversion(&first).await.unwrap();
        assert_eq!(b.conversion(&second).await.unwrap_err(), Refused::Busy);
        let other_turn = b.conversion(&other).await.unwrap();
        // Reviews likewise: one address cannot hold them all.
        let review = b.review(&first).await.unwrap();
        assert_eq!(b.review(&second).await.unwrap_err(), Refused::Busy);
        let other_review = b.review(&other).await.unwrap();
        drop((held, theirs, turn, other_turn, review, other_review));
        // A connection waiting is served once one is given back.
        let waiting = b.arrive(a).unwrap();
        drop(first);
        let again = waiting.serve().await.unwrap();
        assert!(
            b.body(&again, None, 100).await.is_ok(),
            "no length: the largest allowed"
        );
        drop((again, second, other));
        assert_eq!(
            b.sources(),
            0,
            "an address's record goes with its last connection"
        );
    }
}
