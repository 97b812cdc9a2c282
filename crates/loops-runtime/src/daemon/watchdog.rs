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
    /// Watches `engine`'s runner lease, last renewed (registered) by a write that
    /// began at `renewed`, with `budget` from a renewal's start to the termination.
    pub(super) fn start(engine: &Arc<Engine>, budget: Duration, renewed: Instant) -> Self {
        let base = renewed;
        let last_ok = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (last, stopped, weak) = (
            Arc::clone(&last_ok),
            Arc::clone(&stop),
            Arc::downgrade(engine),
        );
        let spawned = std::thread::Builder::new()
            .name("loops-runner-watchdog".to_owned())
            .spawn(move || {
                // The renewal it last fired for: it fires once per missed deadline and
                // again after a renewal that succeeded moved the deadline.
                let mut fired_for = None;
                while !stopped.load(Ordering::SeqCst) {
                    std::thread::sleep(LOOK_EVERY);
                    let ok = last.load(Ordering::SeqCst);
                    let overdue =
                        base.elapsed().saturating_sub(Duration::from_millis(ok)) > budget;
                    if overdue && fired_for != Some(ok) {
                        let Some(engine) = weak.upgrade() else { return };
                        tracing::error!(
                            budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
                            "runner lease could not be renewed in time; terminating this runner's runs"
                        );
                        engine.cancel_all("runner lease expiring: the store cannot be reached");
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
