//! A run's stop conditions (`--until-output`, `--until-cmd`; [`loops_core::stop`]),
//! checked on the run's own task after its process ended and before it is recorded, so
//! the finalization that records it is the one that ends the loop.
//!
//! `--until-cmd` runs as a plain child of this runner (its own process group, the run's
//! interruption terminating it, a timeout, bounded discarded output), not as a unit
//! under a supervisor: a supervisor keeps a process whose end must be recorded even if
//! its runner dies, and this one has nothing to record but its exit status, which only
//! matters to the finalization of a runner that is still there. A run re-attached by
//! the next daemon is checked by it in full; one recorded from its supervisor's status
//! file (recovery, in the synchronous pass) gets the output check only, and its
//! `--until-cmd` is left to the loop's next run. The run's lease is still held
//! (renewed) while the check runs, so a check as long as the loop's timeout cannot make
//! the run look abandoned.

use super::{lock, Engine};
use crate::executor::{execute, ExecStatus};
use crate::targets::until_invocation;
use loops_core::stop::{self, StopMet};
use loops_core::{Loop, Run, RunOutcome, RunStatus};

impl Engine {
    /// Checks `lp`'s until-conditions after `run` ended with `outcome` (a successful
    /// slot run only, [`stop::checks_after`]) and records what it found in
    /// `outcome.stop`: the output first (free), then the command. An `--until-cmd` that
    /// could not start is noted on the run (its `error`, the run still succeeded).
    pub(super) async fn check_stop(&self, lp: &Loop, run: &Run, outcome: &mut RunOutcome) {
        if !stop::checks_after(lp, run, outcome.status == RunStatus::Succeeded)
            || check_output_stop(lp, run, outcome)
        {
            return;
        }
        let Some(cmd) = lp.ops.until_cmd.as_deref() else {
            return;
        };
        let invocation = match until_invocation(lp, run, cmd, &self.cfg.exec) {
            Ok(invocation) => invocation,
            Err(e) => {
                outcome.error = Some(format!("note: --until-cmd could not start: {}", e.0));
                return;
            }
        };
        // The run's interruption (daemon stop, lease lost) terminates the check too.
        let cancel_rx = lock(&self.inflight)
            .get(&run.id)
            .map(|f| f.cancel.subscribe());
        let cancel = async move {
            if let Some(mut rx) = cancel_rx {
                if rx.wait_for(Option::is_some).await.is_ok() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        };
        let checked = execute(invocation, |_, _| {}, cancel).await;
        match checked.status {
            ExecStatus::Succeeded => outcome.stop = Some(StopMet::UntilCmd),
            ExecStatus::Failed if checked.pid.is_none() => {
                let why = checked
                    .error
                    .unwrap_or_else(|| "failed to start".to_owned());
                tracing::warn!(run = %run.id, error = %why, "--until-cmd could not start");
                outcome.error = Some(format!("note: --until-cmd could not start: {why}"));
            }
            // Not done (a non-zero exit, its timeout, an interruption): the loop goes on.
            _ => {}
        }
    }
}

/// The free half of [`Engine::check_stop`]: whether `outcome` (of a successful slot
/// run) met `--until-output`, recorded in `outcome.stop` when it did.
pub(super) fn check_output_stop(lp: &Loop, run: &Run, outcome: &mut RunOutcome) -> bool {
    let met = stop::checks_after(lp, run, outcome.status == RunStatus::Succeeded)
        && stop::output_met(lp, outcome.summary.as_deref(), &outcome.stdout);
    if met {
        outcome.stop = Some(StopMet::UntilOutput);
    }
    met
}
