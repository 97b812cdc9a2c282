//! Finalizing a run: its outcome, its loop's next state and the notifications it calls
//! for in one transaction, shared with other runs' writes through the recorder; the
//! notifications are handed to the engine's [`crate::notify::DeliveryQueue`].

use super::Engine;
use loops_core::duration::elapsed_text;
use loops_core::{Run, RunOutcome};
use loops_store::{RunWrite, RunWritten};
use std::sync::atomic::Ordering;

impl Engine {
    /// Finalizes `run` and moves its loop in one transaction (shared with other runs'
    /// writes by the recorder). Returns the finalized run, `None` when rejected.
    pub(super) async fn finalize_and_advance(
        &self,
        run: &Run,
        outcome: &RunOutcome,
    ) -> Option<Run> {
        let write = RunWrite::Finished {
            run: run.id.clone(),
            outcome: outcome.clone(),
        };
        match self.recorder.write(write).await {
            Ok(RunWritten::Finished {
                run,
                loop_moved,
                notifications,
            }) => {
                if let Some(spool) = &self.cfg.exec.spool {
                    spool.for_run(&run.id).remove();
                }
                self.log_end(&run);
                self.deliveries.push(notifications);
                if loop_moved || self.saturated.load(Ordering::SeqCst) {
                    self.replan.notify_one();
                }
                Some(*run)
            }
            Ok(RunWritten::Spawned) => None,
            Err(e) => {
                let e = self.note_store_error(e);
                tracing::warn!(run = %run.id, error = %e, "could not finalize run");
                None
            }
        }
    }
}

impl Engine {
    /// One line per run start at the default level (`daemon run`'s log): the run, its
    /// loop and its slot (`run 3fa… of hello started (slot 12:00:00)`).
    pub(super) fn log_start(&self, run: &Run) {
        let attempt = if run.attempt > 1 {
            format!(", attempt {}", run.attempt)
        } else {
            String::new()
        };
        tracing::info!(
            target: "loops::runs",
            "run {} of {} started (slot {}{attempt})",
            run.id,
            run.loop_name,
            slot_text(run.scheduled_for, self.clock.now())
        );
    }

    /// One line per run end: `run 3fa… of hello succeeded in 12ms`, with the error of
    /// a run that did not succeed (never its output: logs hold no run output).
    pub(super) fn log_end(&self, run: &Run) {
        let took = run
            .duration_ms
            .map(|ms| format!(" in {}", elapsed_text(ms)))
            .unwrap_or_default();
        match run.error.as_deref() {
            Some(error) if run.status != loops_core::RunStatus::Succeeded => tracing::info!(
                target: "loops::runs",
                "run {} of {} {}{took}: {error}",
                run.id,
                run.loop_name,
                run.status
            ),
            _ => tracing::info!(
                target: "loops::runs",
                "run {} of {} {}{took}",
                run.id,
                run.loop_name,
                run.status
            ),
        }
    }
}

/// A slot as the log shows it: UTC time of day, with the date when it is not today's.
fn slot_text(slot: loops_core::Instant, now: loops_core::Instant) -> String {
    if slot.date_naive() == now.date_naive() {
        slot.format("%H:%M:%S").to_string()
    } else {
        slot.format("%Y-%m-%d %H:%M:%S").to_string()
    }
}
