//! Recovery of rows whose runner is gone: adopted when their process lives (or when
//! they are a workflow loop's run, continued in place), abandoned otherwise.

use super::{lock, parse_runner_id, Engine, EngineError, PassReport};
use crate::process::is_same_process_alive;
use loops_core::{Instant, Loop, Run, RunOutcome};
use loops_store::{RunWrite, StoreError};
use std::sync::Arc;
use std::time::Duration;

impl Engine {
    /// Step 1 of a tick: running rows whose runner is gone (lease expired, or its
    /// process on this host no longer exists). A daemon adopts a row whose process
    /// still lives (watched until it exits) and a workflow target's row (its workflow
    /// run is continued where it stopped); every other such row is abandoned, keeping
    /// the output spooled before its runner died.
    pub(super) fn recover(
        self: &Arc<Self>,
        now: Instant,
        report: &mut PassReport,
    ) -> Result<(), EngineError> {
        let running = self.store.running_runs(None)?;
        for run in running {
            if lock(&self.inflight).contains_key(&run.id) {
                continue;
            }
            if !self.runner_gone(&run, now) {
                report.foreign_running = true;
                continue;
            }
            let claimed_on = run.claimed_by.as_deref().and_then(parse_runner_id);
            let on_this_host = claimed_on.is_none_or(|(host, _, _)| host == self.host);
            let alive = on_this_host
                && run
                    .pid
                    .is_some_and(|pid| is_same_process_alive(pid, run.pid_start_time));
            if alive {
                report.foreign_running = true;
                if self.cfg.adopt_orphans {
                    if let Some(run) = self.take_over_in_pass(&run, now, report)? {
                        self.adopt(run, now);
                    }
                }
                continue;
            }
            let lp = self.store.get_loop(&run.loop_id)?;
            let workflow = lp
                .as_ref()
                .is_some_and(|l| matches!(l.target, loops_core::Target::Workflow(_)));
            // Its supervisor saw it end and wrote down how: recorded as it ended.
            let status = self.cfg.exec.supervise_dir.as_ref().and_then(|dir| {
                crate::supervisor::status::read(dir, &crate::supervisor::run_unit(&run.id))
            });
            if let (Some(ended), false) = (status, workflow) {
                let mut outcome =
                    super::run::outcome_of(lp.as_ref(), ended.result, None, ended.terminated_by);
                // What the runner that started it would have recorded: its session
                // note (written with its pid) and the output stop check (the
                // `--until-cmd` check is the next run's: this pass runs no process).
                outcome.session_note = run.session_note.clone();
                if let Some(lp) = &lp {
                    super::stop::check_output_stop(lp, &run, &mut outcome);
                }
                // Recorded here, or by someone else first: the file has served.
                self.record_recovered(&run, outcome, now, report)?;
                if let Some(dir) = &self.cfg.exec.supervise_dir {
                    crate::supervisor::status::remove(dir, &crate::supervisor::run_unit(&run.id));
                }
                continue;
            }
            if let (true, true, Some(lp)) = (workflow, self.cfg.adopt_orphans, lp) {
                if let Some(run) = self.take_over_in_pass(&run, now, report)? {
                    self.continue_workflow(lp, run);
                }
                continue;
            }
            let spooled = self.cfg.exec.spool.as_ref().map(|s| s.for_run(&run.id));
            let (stdout, stderr) = spooled
                .as_ref()
                .map(|files| files.read(self.cfg.exec.max_output_bytes))
                .unwrap_or_default();
            let stdout = run
                .stdout
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or(stdout);
            let stderr = run
                .stderr
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or(stderr);
            let error = match run.pid {
                _ if workflow => "abandoned: runner gone; the slot's workflow run continues \
                                  with its next attempt"
                    .to_owned(),
                Some(pid) if on_this_host => {
                    format!("abandoned: runner gone and process {pid} no longer exists")
                }
                // Another host's process cannot be checked from here: only its runner's
                // lease is known to have expired.
                Some(pid) => format!(
                    "abandoned: runner's lease expired; process {pid} on host {} cannot be \
                     checked from here",
                    claimed_on.map_or("?", |(host, _, _)| host)
                ),
                None => "abandoned: runner gone before the process started".to_owned(),
            };
            let outcome = RunOutcome::abandoned(now, error).with_output(stdout, stderr);
            self.record_recovered(&run, outcome, now, report)?;
        }
        Ok(())
    }

    /// Records the outcome of a run whose runner is gone; false when someone else
    /// finalized it first. Its spooled output is removed once recorded.
    fn record_recovered(
        &self,
        run: &Run,
        outcome: RunOutcome,
        now: Instant,
        report: &mut PassReport,
    ) -> Result<bool, EngineError> {
        let write = RunWrite::Finished {
            run: run.id.clone(),
            outcome,
        };
        let written = self
            .store
            .record_run_writes(&[write], now, self.fence())
            .map_err(|e| self.note_store_error(e))?;
        match written.into_iter().next() {
            Some(Ok(written)) => {
                if let loops_store::RunWritten::Finished {
                    run: recorded,
                    notifications,
                    ..
                } = written
                {
                    self.log_end(&recorded);
                    self.deliveries.push(notifications);
                }
                if let Some(spool) = &self.cfg.exec.spool {
                    spool.for_run(&run.id).remove();
                }
                report.recovered.push(run.id.clone());
                self.replan.notify_one();
                Ok(true)
            }
            Some(Err(StoreError::NotRunning(_))) | None => Ok(false),
            Some(Err(e)) => Err(self.note_store_error(e)),
        }
    }

    /// Moves a dead runner's row to this engine (fresh lease, renewed by our
    /// heartbeat). `None` when someone else finalized or took it meanwhile.
    pub(super) fn take_over(&self, run: &Run, now: Instant) -> Result<Option<Run>, EngineError> {
        match self.store.take_over_run(
            &run.id,
            run.claimed_by.as_deref(),
            &self.cfg.runner_id,
            now,
            self.fence(),
        ) {
            Ok(run) => Ok(Some(run)),
            Err(e) if e.is_per_row() => Ok(None),
            Err(e) => Err(self.note_store_error(e)),
        }
    }

    /// [`Self::take_over`] for this pass's recovery, which reports the rows it took.
    fn take_over_in_pass(
        &self,
        run: &Run,
        now: Instant,
        report: &mut PassReport,
    ) -> Result<Option<Run>, EngineError> {
        let run = self.take_over(run, now)?;
        if let Some(run) = &run {
            report.adopted.push(run.id.clone());
        }
        Ok(run)
    }

    /// Continues a workflow target's run whose runner died, once this engine took its
    /// row over ([`Self::take_over`]): the slot's workflow run picks up where it stopped
    /// (finished steps kept, a step whose process outlived the runner recorded, never
    /// started again), as this engine's run.
    pub(super) fn continue_workflow(self: &Arc<Self>, lp: Loop, run: Run) {
        tracing::info!(run = %run.id, loop_name = %lp.name, "continuing a workflow run whose runner died");
        let engine = Arc::clone(self);
        let task = self.task();
        tokio::spawn(async move {
            let _task = task;
            engine.execute_claimed(&lp, run).await;
        });
    }

    /// Whether the runner that claimed `run` can no longer finish it.
    pub(super) fn runner_gone(&self, run: &Run, now: Instant) -> bool {
        if run.lease_expires_at.is_none_or(|t| t <= now) {
            return true;
        }
        match run.claimed_by.as_deref().and_then(parse_runner_id) {
            Some((host, pid, start)) if host == self.host => {
                run.claimed_by.as_deref() != Some(self.cfg.runner_id.as_str())
                    && !is_same_process_alive(pid, start)
            }
            _ => false,
        }
    }

    /// Watches a live orphaned process, once this engine took its row over at `now`
    /// ([`Self::take_over`]), until it exits, keeping its lease fresh, then records it
    /// as abandoned (its exit status cannot be known: it is not our child) with the
    /// output spooled before its runner died.
    pub(super) fn adopt(self: &Arc<Self>, run: Run, now: Instant) {
        let engine = Arc::clone(self);
        // Taking the row over gave it a fresh lease of its loop's length.
        let lease = run
            .lease_expires_at
            .and_then(|t| (t - now).to_std().ok())
            .unwrap_or(super::lease_renewal::RENEWAL_MAX * 3);
        let mut cancel_rx = self.hold(&run, lease);
        let task = self.task();
        tracing::info!(run = %run.id, pid = ?run.pid, "adopting a run whose process outlived its runner");
        tokio::spawn(async move {
            let _task = task;
            let pid = run.pid.unwrap_or(0);
            let mut cancelled = None;
            while is_same_process_alive(pid, run.pid_start_time) {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    r = cancel_rx.wait_for(Option::is_some) => {
                        cancelled = r.ok().and_then(|v| v.clone());
                        break;
                    }
                }
            }
            engine.release(&run.id);
            if let Some(reason) = &cancelled {
                // Shutdown or lease loss: leave the process alone and the row running, so
                // the next daemon adopts it again.
                tracing::info!(run = %run.id, %reason, "stopped watching adopted run");
            } else {
                let (stdout, stderr) = engine
                    .cfg
                    .exec
                    .spool
                    .as_ref()
                    .map(|s| s.for_run(&run.id).read(engine.cfg.exec.max_output_bytes))
                    .unwrap_or_default();
                let outcome = RunOutcome::abandoned(
                    engine.clock.now(),
                    format!(
                        "process {pid} exited while adopted after its runner died; exit status unknown"
                    ),
                )
                .with_output(stdout, stderr);
                engine.finalize_and_advance(&run, &outcome).await;
            }
        });
    }
}
