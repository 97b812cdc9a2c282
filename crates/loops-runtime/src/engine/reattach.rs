//! Re-attaching to runs that an earlier daemon of this host left to their supervisors
//! (it was killed, stopped or replaced): each loop run's row is taken over from the
//! runner that is gone (fenced, like any take-over), its deadline extended from here
//! on, and its end recorded with its real exit status and whole output, as if its
//! runner had never left. Workflow steps are picked up by their workflow run's
//! continuation ([`crate::workflow`]); a unit whose run was recorded elsewhere
//! meanwhile is terminated and forgotten.

use super::{lock, Engine, EngineError};
use crate::supervisor::protocol::UnitReport;
use crate::supervisor::{run_unit, Reclaimed};
use loops_core::{Run, RunId, RunStatus};
use std::sync::Arc;

impl Engine {
    /// Takes back the loop runs among `units` (reported by supervisors this engine's
    /// launcher adopted); returns how many. Call before the first pass.
    pub fn reattach(self: &Arc<Self>, units: Vec<UnitReport>) -> usize {
        let Some(sups) = self.cfg.exec.launcher.supervisors().cloned() else {
            return 0;
        };
        let now = self.clock.now();
        let mut taken = 0;
        for unit in units {
            let run_id = RunId::new(unit.group.clone());
            if unit.unit != run_unit(&run_id) {
                // A workflow step: its run's continuation reclaims it.
                continue;
            }
            let run = match self.store.get_run(&run_id) {
                Ok(Some(run)) if run.status == RunStatus::Running => run,
                Ok(_) => {
                    sups.discard(&unit.unit, "its run is no longer running in the store");
                    continue;
                }
                Err(e) => {
                    // Left as it is: its deadline ends it if nobody takes it back.
                    tracing::warn!(run = %run_id, error = %e, "cannot look up a run to re-attach to");
                    continue;
                }
            };
            if run.claimed_by.as_deref() != Some(self.cfg.runner_id.as_str())
                && !self.runner_gone(&run, now)
            {
                tracing::warn!(run = %run.id, claimed_by = ?run.claimed_by, "a supervised run is held by a live runner; leaving it");
                continue;
            }
            match self.take_over(&run, now) {
                Ok(Some(run)) => {
                    let Some(reclaimed) = self.cfg.exec.launcher.reclaim(&unit.unit) else {
                        continue;
                    };
                    taken += 1;
                    self.watch_reattached(run, unit.unit, reclaimed);
                }
                Ok(None) => sups.discard(&unit.unit, "its run was taken over elsewhere"),
                Err(EngineError::LeaseLost) => return taken,
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "cannot take back a supervised run")
                }
            }
        }
        self.sweep_status_files();
        taken
    }

    /// Removes the status files nobody will read: those of loop runs that are no
    /// longer running (recorded meanwhile, or pruned), and those of workflow steps
    /// older than a week (a step's is read when its workflow run continues). The
    /// status files of running rows are left for recovery, which records them.
    fn sweep_status_files(&self) {
        let Some(dir) = &self.cfg.exec.supervise_dir else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let week = std::time::Duration::from_secs(7 * 86_400);
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            let Some(unit) = name.to_str().and_then(|n| n.strip_suffix(".status")) else {
                continue;
            };
            let stale = match crate::supervisor::status::read(dir, unit) {
                Some(report) if report.unit.starts_with("run-") => {
                    match self.store.get_run(&RunId::new(report.group.clone())) {
                        Ok(Some(run)) => run.status != RunStatus::Running,
                        Ok(None) => true,
                        // Looked at again by the next daemon.
                        Err(_) => false,
                    }
                }
                _ => entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > week)),
            };
            if stale {
                tracing::debug!(unit, "removing a status file nobody will read");
                crate::supervisor::status::remove(dir, unit);
            }
        }
    }

    /// Waits for a re-attached run's end under this engine (its lease renewed, its
    /// deadline extended, cancellable like any run of ours) and records it.
    fn watch_reattached(self: &Arc<Self>, run: Run, unit: String, reclaimed: Reclaimed) {
        let engine = Arc::clone(self);
        let task = self.task();
        tokio::spawn(async move {
            let _task = task;
            let lp = engine.store.get_loop(&run.loop_id).ok().flatten();
            let lease =
                std::time::Duration::from_millis(lp.as_ref().map_or(30 * 60_000, |l| l.lease_ms));
            let mut cancel_rx = engine.hold(&run, lease);
            tracing::info!(run = %run.id, pid = ?reclaimed.pid, "re-attached to a run that outlived its runner");
            let mut exited = std::pin::pin!(reclaimed.exited());
            let mut asked = false;
            let executed = loop {
                tokio::select! {
                    executed = &mut exited => break executed,
                    reason = cancel_rx.wait_for(Option::is_some), if !asked => {
                        asked = true;
                        let reason = reason.ok().and_then(|r| r.clone()).unwrap_or_default();
                        if let Some(sups) = engine.cfg.exec.launcher.supervisors() {
                            sups.terminate(&unit, &reason);
                        }
                    }
                }
            };
            let reason = lock(&engine.inflight)
                .get(&run.id)
                .and_then(|f| f.cancel.borrow().clone());
            let mut outcome = super::run::outcome_of(
                lp.as_ref(),
                executed.result,
                reason,
                executed.terminated_by,
            );
            // As the runner that started it would have: the stop conditions checked
            // while the run is still held, and the session note its spawn recorded.
            if let Some(lp) = &lp {
                engine.check_stop(lp, &run, &mut outcome).await;
            }
            outcome.session_note = run.session_note.clone();
            engine.release(&run.id);
            engine.finalize_and_advance(&run, &outcome).await;
            engine.cfg.exec.launcher.ack(&unit);
        });
    }
}
