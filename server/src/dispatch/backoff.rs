//! How long the engine waits after its database failed: exponentially longer while the
//! failures go on (so an unreachable or full database does not cost a core in retries
//! and error lines), back to nothing at the first success.

use std::time::Duration;

/// The first wait after a failure.
pub const FIRST: Duration = Duration::from_millis(100);
/// The longest wait: the engine is back within this once the database is.
pub const MAX: Duration = Duration::from_secs(5);

/// The wait after `failures` failures in a row (1 or more): `FIRST · 2^(failures-1)`,
/// at most `MAX`.
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST * 2u32.pow(doublings)).min(MAX)
}

/// Failures in a row of the engine's storage calls.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Counts a failure and returns how long to wait before the next try.
    pub fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        delay(self.failures)
    }

    /// The database answered: the next failure starts again from [`FIRST`].
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_100_ms_up_to_5_s() {
        let waits: Vec<u64> = (1..=9).map(|n| delay(n).as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(delay(u32::MAX), MAX);
        assert_eq!(delay(0), FIRST);
    }

    #[test]
    fn a_success_starts_the_waits_over() {
        let mut b = Backoff::default();
        assert_eq!(b.failed(), Duration::from_millis(100));
        assert_eq!(b.failed(), Duration::from_millis(200));
        assert_eq!(b.failures(), 2);
        b.succeeded();
        assert_eq!(b.failures(), 0);
        assert_eq!(b.failed(), Duration::from_millis(100));
    }
}
