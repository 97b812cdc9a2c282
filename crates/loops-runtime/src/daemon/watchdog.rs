//! The runner watchdog, the daemon's own guard against outliving its runner lease:
//! a thread of its own (a store call that hangs cannot hold it up) that terminates
//! this runner's runs when no lease renewal has succeeded for its budget — the lease
//! TTL less the kill grace and a margin ([`crate::supervisor::deadline`]), always
//! longer than the renewal period (`daemon run` refuses settings where it is not).
//! Every renewal that succeeds re-arms it.
//!
//! Runs under a supervisor are also terminated by the supervisor on its own deadline,
//! which holds when this whole process is stopped; the watchdog covers runs in this
//! process and says in the daemon's log what happened.

use crate::engine::Engine;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the watchdog looks.
const LOOK_EVERY: Duration = Duration::from_millis(50);

pub(super) struct Watchdog {
    /// Milliseconds since `base` at the start of the last renewal that succeeded.
    last_ok: Arc<AtomicU64>,
    base: Instant,
    stop: Arc<AtomicBool>,
}

impl Watchdog {
    /// Watches a runner lease last renewed (registered) by a write that began at
    /// `renewed`, with `budget` from a renewal's start to the termination; calls
    /// `overdue` (which terminates the runs) once per missed deadline.
    pub(super) fn start(
        budget: Duration,
        renewed: Instant,
        overdue: impl Fn() + Send + 'static,
    ) -> Self {
        let base = renewed;
        let last_ok = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (last, stopped) = (Arc::clone(&last_ok), Arc::clone(&stop));
        let spawned = std::thread::Builder::new()
            .name("loops-runner-watchdog".to_owned())
            .spawn(move || {
                // The renewal it last fired for: it fires once per missed deadline and
                // again after a renewal that succeeded moved the deadline.
                let mut fired_for = None;
                while !stopped.load(Ordering::SeqCst) {
                    std::thread::sleep(LOOK_EVERY);
                    let ok = last.load(Ordering::SeqCst);
                    let late = base.elapsed().saturating_sub(Duration::from_millis(ok)) > budget;
                    if late && fired_for != Some(ok) {
                        tracing::error!(
                            budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
                            "runner lease could not be renewed in time; terminating this runner's runs"
                        );
                        overdue();
                        fired_for = Some(ok);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the runner watchdog");
        }
        Self {
            last_ok,
            base,
            stop,
        }
    }

    /// Watches `engine`'s runner lease (see [`Watchdog::start`]).
    pub(super) fn for_engine(engine: &Arc<Engine>, budget: Duration, renewed: Instant) -> Self {
        let weak = Arc::downgrade(engine);
        Self::start(budget, renewed, move || {
            if let Some(engine) = weak.upgrade() {
                engine.cancel_all("runner lease expiring: the store cannot be reached");
            }
        })
    }

    /// A renewal that began at `began` succeeded: the watchdog is re-armed from there.
    pub(super) fn renewed(&self, began: Instant) {
        let ms = u64::try_from(began.saturating_duration_since(self.base).as_millis())
            .unwrap_or(u64::MAX);
        self.last_ok.fetch_max(ms, Ordering::SeqCst);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn it_fires_once_per_missed_deadline_and_is_rearmed_by_a_renewal() {
        let fired = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&fired);
        let budget = Duration::from_millis(300);
        let dog = Watchdog::start(budget, Instant::now(), move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        // Renewals well inside the budget: it never fires.
        for _ in 0..8 {
            std::thread::sleep(Duration::from_millis(60));
            dog.renewed(Instant::now());
        }
        assert_eq!(
            fired.load(Ordering::SeqCst),
            0,
            "fired while renewals succeed"
        );
        // Renewals stop: it fires once, and only once while they stay stopped.
        wait_until("the first firing", || fired.load(Ordering::SeqCst) == 1);
        std::thread::sleep(budget * 2);
        assert_eq!(
            fired.load(Ordering::SeqCst),
            1,
            "fired again without a renewal"
        );
        // One renewal re-arms it: the next missed deadline fires again.
        dog.renewed(Instant::now());
        wait_until("the second firing", || fired.load(Ordering::SeqCst) == 2);
    }
}
