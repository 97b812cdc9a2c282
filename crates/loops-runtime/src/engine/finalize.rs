//! Finalizing a run: its outcome and its loop's next state in one transaction, shared
//! with other runs' writes through the recorder.

use super::Engine;
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
            Ok(RunWritten::Finished { run, loop_moved }) => {
                if let Some(spool) = &self.cfg.exec.spool {
                    spool.for_run(&run.id).remove();
                }
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
