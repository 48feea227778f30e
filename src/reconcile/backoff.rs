//! When a resource is looked at again with no event: a healthy one at a jittered resync,
//! a failing one after an exponential backoff.

use std::time::Duration;

/// When a healthy resource is checked again: at a random point of the last fifth of
/// `resync`. Resources created together (10,000 in a few minutes) would otherwise all come
/// due in the same instant, and a burst of thousands of checks would queue the reconciles
/// of real changes behind it.
pub fn jittered(resync: Duration) -> Duration {
    resync.mul_f64(0.8 + 0.2 * fastrand::f64())
}

/// The backoff after `n` consecutive failures: 0.5 s doubling up to 5 minutes.
pub fn backoff(n: u32) -> Duration {
    let ms = 500u64.saturating_mul(1u64 << n.min(12));
    Duration::from_millis(ms.min(300_000))
}

#[cfg(test)]
mod tests {
    use super::{backoff, jittered};
    use std::time::Duration;

    #[test]
    fn resyncs_spread_over_the_last_fifth_of_the_period() {
        let resync = Duration::from_secs(600);
        let due: Vec<Duration> = (0..1000).map(|_| jittered(resync)).collect();
        assert!(
            due.iter()
                .all(|d| *d >= Duration::from_secs(480) && *d <= resync)
        );
        let early = due
            .iter()
            .filter(|d| **d < Duration::from_secs(540))
            .count();
        assert!(
            (350..650).contains(&early),
            "{early} of 1000 in the first half of the window: not spread"
        );
    }

    #[test]
    fn backoff_doubles_from_half_a_second_to_a_five_minute_cap() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(10), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }
}
