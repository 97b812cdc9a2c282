//! The source of the current instant. Scheduling decisions take `now` from a
//! [`Clock`] so tests can drive them with a [`ManualClock`] instead of waiting.

use loops_core::Instant;
use std::sync::Mutex;

/// Source of the current instant; injected so scheduling decisions are testable.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        chrono::Utc::now()
    }
}

/// A clock that only moves when told to: for tests and simulations of the engine and
/// the daemon loop (no waiting for real slots).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Instant>,
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: Instant) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock to `to` (backwards too, as a wall clock can).
    pub fn set(&self, to: Instant) {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = to;
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += chrono::TimeDelta::from_std(by).unwrap_or(chrono::TimeDelta::MAX);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let t0 = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap_or_default();
        let clock = ManualClock::new(t0);
        assert_eq!(clock.now(), t0);
        clock.advance(std::time::Duration::from_secs(90));
        assert_eq!(clock.now(), t0 + chrono::TimeDelta::seconds(90));
        clock.set(t0 - chrono::TimeDelta::days(1));
        assert_eq!(clock.now(), t0 - chrono::TimeDelta::days(1));
    }
}
