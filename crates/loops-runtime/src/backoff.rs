//! Capped exponential back-off for work that fails for a while (a full disk, a store
//! locked by another process): the first retry comes quickly, later ones ever more
//! slowly up to a cap, so a persistent fault costs a few wake-ups a minute instead of
//! spinning a core, and work resumes by itself once the fault is gone.

use std::time::Duration;

/// Consecutive failures and the delay before the next try.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
}

impl Backoff {
    /// Waits `base` after the first failure, doubling up to `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            failures: 0,
        }
    }

    /// Records a failure and returns how long to wait before trying again.
    pub fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.delay()
    }

    /// The delay for the current streak of failures (zero when there is none).
    pub fn delay(&self) -> Duration {
        if self.failures == 0 {
            return Duration::ZERO;
        }
        let shift = (self.failures - 1).min(20);
        self.base.saturating_mul(1 << shift).min(self.cap)
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Records a success; returns how many failures it ended.
    pub fn succeed(&mut self) -> u32 {
        std::mem::take(&mut self.failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(b.delay(), Duration::ZERO);
        let delays: Vec<u128> = (0..6).map(|_| b.fail().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.failures(), 6);
        assert_eq!(b.succeed(), 6);
        assert_eq!(b.failures(), 0);
        assert_eq!(b.fail(), Duration::from_millis(100));
    }

    #[test]
    fn never_overflows() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        for _ in 0..200 {
            b.fail();
        }
        assert_eq!(b.delay(), Duration::from_secs(30));
    }
}
