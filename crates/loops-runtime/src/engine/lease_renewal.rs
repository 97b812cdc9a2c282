//! Renewal of the run leases this engine holds, in one write per beat, on the one
//! renewal policy every runner follows — the daemon, `tick` and `run-now` alike:
//! every third of the shortest lease among the engine's runs ([`renewal_period`]).

use super::{lock, Engine, EngineError};
use loops_core::RunId;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The longest time between two renewals, whatever the leases: a lease of 30 minutes
/// (the default) is still renewed every 10 s, so a runner that dies is noticed by its
/// lease's expiry alone no later than it would be by its renewals stopping.
pub const RENEWAL_MAX: Duration = Duration::from_secs(10);
/// The shortest time between two renewals (a lease of 100 ms is renewed every 50 ms).
pub const RENEWAL_MIN: Duration = Duration::from_millis(50);

/// How often a run lease of `lease` is renewed: a third of it, so two renewals can
/// fail before it lapses, within [`RENEWAL_MIN`]..=[`RENEWAL_MAX`].
pub fn renewal_period(lease: Duration) -> Duration {
    (lease / 3).clamp(RENEWAL_MIN, RENEWAL_MAX)
}

impl Engine {
    /// Renews the lease of every run this engine holds, in one write.
    pub fn renew_run_leases(&self) -> Result<usize, EngineError> {
        let ids: Vec<RunId> = lock(&self.inflight).keys().cloned().collect();
        if ids.is_empty() {
            return Ok(0);
        }
        // Read before the write: the store's lease runs at least that long from here.
        let began = self.cfg.exec.launcher.clock_now();
        let renewed = self
            .store
            .renew_run_leases(&ids, &self.cfg.runner_id, self.clock.now(), self.fence())
            .map_err(|e| self.note_store_error(e))?;
        self.cfg.exec.launcher.renewed(&ids, began);
        Ok(renewed)
    }

    /// The period the heartbeat task renews at now: [`renewal_period`] of the
    /// shortest lease among the runs this engine holds ([`RENEWAL_MAX`] with none).
    pub fn heartbeat_every(&self) -> Duration {
        lock(&self.inflight)
            .values()
            .map(|run| renewal_period(run.lease))
            .min()
            .unwrap_or(RENEWAL_MAX)
    }

    /// Spawns the heartbeat task: renews run leases every [`Engine::heartbeat_every`]
    /// (re-planned after every beat, and at once when a run starts whose lease needs a
    /// shorter period) until the engine is dropped by every other owner.
    pub fn spawn_lease_renewal(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let started = Arc::clone(&self.run_started);
        tokio::spawn(async move {
            let mut last = tokio::time::Instant::now();
            loop {
                let Some(every) = weak.upgrade().map(|engine| {
                    let every = engine.heartbeat_every();
                    engine
                        .beat_every_ms
                        .store(super::duration_ms(every), Ordering::SeqCst);
                    every
                }) else {
                    return;
                };
                tokio::select! {
                    _ = tokio::time::sleep_until(last + every) => {}
                    // A new run may hold a shorter lease: plan the next beat again.
                    _ = started.notified() => continue,
                }
                let Some(engine) = weak.upgrade() else { return };
                last = tokio::time::Instant::now();
                if let Err(e) = engine.renew_run_leases() {
                    tracing::warn!(error = %e, "run heartbeat failed");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_third_of_the_lease_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(renewal_period(ms(30 * 60_000)), RENEWAL_MAX);
        assert_eq!(renewal_period(ms(30_000)), ms(10_000));
        assert_eq!(renewal_period(ms(3_000)), ms(1_000));
        assert_eq!(renewal_period(ms(90)), RENEWAL_MIN);
    }
}
