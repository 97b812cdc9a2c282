//! `run-now`: the due slot (or pending retry) when there is one, else an ad-hoc slot,
//! executed in this process; overlap `skip` refuses a second concurrent run.

use super::{Engine, EngineError};
use loops_core::schedule::due_slots;
use loops_core::transitions::on_claim;
use loops_core::{format_instant, Instant, Loop, Overlap, Run, RunId, RunSource};
use loops_store::{ClaimRefused, ClaimRequest, StoreError};

/// Instants an ad-hoc claim tries (one millisecond apart) before giving up.
const AD_HOC_TRIES: usize = 16;

impl Engine {
    /// `run-now`: claims the loop's due slot (or pending retry slot) when there is one,
    /// else an ad-hoc slot at now, executes it here, and returns the finished run.
    ///
    /// A loop with overlap `skip` gets no second concurrent run: while one of its runs
    /// is in flight (daemon-started or another run-now) this fails with
    /// [`EngineError::Busy`] and claims nothing, unless `allow_overlap`. The check is
    /// part of the claim's transaction, so two concurrent run-nows cannot both pass.
    pub async fn run_now(
        &self,
        lp: &Loop,
        allow_overlap: bool,
    ) -> Result<(Run, RunSource), EngineError> {
        let (run, source) = self.claim_now(lp, allow_overlap)?;
        Ok((self.finish_claimed(lp, run).await?, source))
    }

    /// The claim of [`Engine::run_now`], without executing the run: the returned run
    /// is `running` and must be handed to [`Engine::finish_claimed`] (by this engine),
    /// which starts its process.
    pub fn claim_now(
        &self,
        lp: &Loop,
        allow_overlap: bool,
    ) -> Result<(Run, RunSource), EngineError> {
        let now = self.clock.now();
        let exclusive = lp.overlap == Overlap::Skip && !allow_overlap;
        let due =
            lp.status == loops_core::LoopStatus::Active && lp.next_run_at.is_some_and(|t| t <= now);
        if due {
            let (slot, source) = match (lp.retry_scheduled_for, lp.next_run_at) {
                (Some(retry), _) => (retry, RunSource::RetrySlot),
                (None, Some(next)) => (next, RunSource::DueSlot),
                (None, None) => (now, RunSource::AdHoc),
            };
            let last = if source == RunSource::DueSlot {
                // Catch-up `latest` would coalesce to the newest due slot; run-now takes the
                // persisted one and advances past everything due.
                due_slots(lp, now)?.last().copied().unwrap_or(slot)
            } else {
                slot
            };
            let advance = on_claim(lp, last, source, now)?;
            let req = self.claim_request(lp, slot, source, now, exclusive);
            match self
                .store
                .claim_run(&req, advance.as_ref(), self.fence())
                .map_err(|e| self.note_store_error(e))?
            {
                Ok(run) => return Ok((run, source)),
                Err(ClaimRefused::LoopBusy) => return Err(self.busy(lp)),
                Err(refused) => tracing::debug!(?refused, "due slot not claimable; running ad hoc"),
            }
        }
        Ok((self.claim_ad_hoc(lp, now, exclusive)?, RunSource::AdHoc))
    }

    /// Executes a run [`Engine::claim_now`] claimed, here, and returns it as recorded
    /// once it ended.
    pub async fn finish_claimed(&self, lp: &Loop, run: Run) -> Result<Run, EngineError> {
        let task = self.task();
        let finished = self.execute_claimed(lp, run.clone()).await;
        drop(task);
        Ok(match finished {
            Some(r) => r,
            None => self.store.get_run(&run.id)?.unwrap_or(run),
        })
    }

    /// Claims a one-off slot at `now` — or a millisecond later, when another ad-hoc run
    /// of the loop already took that instant.
    fn claim_ad_hoc(&self, lp: &Loop, now: Instant, exclusive: bool) -> Result<Run, EngineError> {
        let mut slot = now;
        for _ in 0..AD_HOC_TRIES {
            let req = self.claim_request(lp, slot, RunSource::AdHoc, now, exclusive);
            match self
                .store
                .claim_run(&req, None, self.fence())
                .map_err(|e| self.note_store_error(e))?
            {
                Ok(run) => return Ok(run),
                Err(ClaimRefused::LoopBusy) => return Err(self.busy(lp)),
                Err(ClaimRefused::SlotRunning | ClaimRefused::SlotDone) => {
                    slot += chrono::TimeDelta::milliseconds(1);
                }
                Err(ClaimRefused::LoopNotActive) => break,
            }
        }
        Err(EngineError::Store(StoreError::Decode(format!(
            "could not claim an ad-hoc run of loop {:?} at {}",
            lp.name,
            format_instant(&now)
        ))))
    }

    /// The error for a run-now refused by overlap `skip`, naming the run in flight.
    pub(super) fn busy(&self, lp: &Loop) -> EngineError {
        let running = self.store.running_runs(Some(&lp.id)).unwrap_or_default();
        let first = running.first();
        EngineError::Busy {
            name: lp.name.clone(),
            run: first
                .map(|r| r.id.clone())
                .unwrap_or_else(|| RunId::new("?")),
            since: first
                .and_then(|r| r.started_at)
                .map(|t| format_instant(&t))
                .unwrap_or_else(|| "just now".to_owned()),
        }
    }

    pub(super) fn claim_request(
        &self,
        lp: &Loop,
        slot: Instant,
        source: RunSource,
        now: Instant,
        require_no_running: bool,
    ) -> ClaimRequest {
        ClaimRequest {
            loop_id: lp.id.clone(),
            scheduled_for: slot,
            runner_id: self.cfg.runner_id.clone(),
            source,
            now,
            require_no_running,
        }
    }
}
