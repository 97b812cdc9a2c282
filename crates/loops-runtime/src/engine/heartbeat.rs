//! Renewal of the run leases this engine holds, in one write per beat.

use super::{lock, Engine, EngineError};
use loops_core::RunId;
use std::sync::Arc;
use std::time::Duration;

impl Engine {
    /// Renews the lease of every run this engine holds, in one write.
    pub fn heartbeat(&self) -> Result<usize, EngineError> {
        let ids: Vec<RunId> = lock(&self.inflight).keys().cloned().collect();
        if ids.is_empty() {
            return Ok(0);
        }
        self.store
            .heartbeat_runs(&ids, &self.cfg.runner_id, self.clock.now(), self.fence())
            .map_err(|e| self.note_store_error(e))
    }

    /// Spawns the heartbeat task: renews run leases every `every` until the engine is
    /// dropped by every other owner.
    pub fn spawn_heartbeat(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                interval.tick().await;
                let Some(engine) = weak.upgrade() else { return };
                if let Err(e) = engine.heartbeat() {
                    tracing::warn!(error = %e, "run heartbeat failed");
                }
            }
        })
    }
}
