//! `run-now`: the due slot (or pending retry) when there is one, else an ad-hoc slot,
//! executed in this process; overlap `skip` refuses a second concurrent run. A runner
//! answers the run requests of `run-now --on-runner` the same way.

use super::{Engine, EngineError};
use loops_core::schedule::due_slots;
use loops_core::transitions::{on_claim, LoopAdvance};
use loops_core::{format_instant, Instant, Loop, LoopStatus, Overlap, Run, RunId, RunSource};
use loops_store::{ClaimRefused, ClaimRequest, RunRequest, StoreError};
use std::sync::Arc;

/// Run requests one runner looks at in one go.
const REQUEST_BATCH: usize = 64;

/// On whose behalf a run-now claim is made.
#[derive(Clone, Copy)]
enum Via<'a> {
    /// This process's own `run-now`.
    Here,
    /// A run request of another process (`run-now --on-runner`), by id.
    Request(&'a str),
}

/// What [`Engine::serve_run_requests`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServedRequests {
    /// Runs started for requests.
    pub started: Vec<RunId>,
    /// Requests refused (the loop busy or gone).
    pub refused: usize,
    /// Requests may be left that this runner has no free slot for now.
    pub more: bool,
}

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
        self.claim_now_via(lp, allow_overlap, Via::Here)?
            .ok_or_else(|| {
                EngineError::Store(StoreError::Decode(
                    "a run-now claim was withdrawn".to_owned(),
                ))
            })
    }

    /// [`Engine::claim_now`] on behalf of `via`; `None` when a request was no longer
    /// pending (nothing claimed).
    fn claim_now_via(
        &self,
        lp: &Loop,
        allow_overlap: bool,
        via: Via<'_>,
    ) -> Result<Option<(Run, RunSource)>, EngineError> {
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
            match self.claim_via(via, &req, advance.as_ref())? {
                None => return Ok(None),
                Some(Ok(run)) => return Ok(Some((run, source))),
                Some(Err(ClaimRefused::LoopBusy)) => return Err(self.busy(lp)),
                Some(Err(refused)) => {
                    tracing::debug!(?refused, "due slot not claimable; running ad hoc")
                }
            }
        }
        Ok(self
            .claim_ad_hoc(lp, now, exclusive, via)?
            .map(|run| (run, RunSource::AdHoc)))
    }

    /// One claim, made here or on behalf of a request.
    fn claim_via(
        &self,
        via: Via<'_>,
        req: &ClaimRequest,
        advance: Option<&LoopAdvance>,
    ) -> Result<Option<Result<Run, ClaimRefused>>, EngineError> {
        match via {
            Via::Here => self.store.claim_run(req, advance, self.fence()).map(Some),
            Via::Request(id) => self
                .store
                .claim_requested_run(id, req, advance, self.fence()),
        }
        .map_err(|e| self.note_store_error(e))
    }

    /// Answers the pending run requests (`run-now --on-runner`) this runner can take,
    /// oldest first, as many as it has free slots for: each is claimed as `run-now`
    /// would claim it here (the request's answer in the claim's transaction) and
    /// started in the background; a request for a busy (overlap `skip`) or vanished
    /// loop is answered with the reason. Only on a store with runners, under a fence.
    pub fn serve_run_requests(self: &Arc<Self>) -> Result<ServedRequests, EngineError> {
        let mut served = ServedRequests::default();
        if self.fence().is_none() || !self.store.supports_runners() {
            return Ok(served);
        }
        let free = self.permits.available_permits();
        if free == 0 {
            served.more = true;
            return Ok(served);
        }
        let limit = free.min(REQUEST_BATCH);
        let pending = self
            .store
            .pending_run_requests(&self.cfg.runner_labels, limit)
            .map_err(|e| self.note_store_error(e))?;
        served.more = pending.len() >= limit;
        for request in pending {
            let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                served.more = true;
                break;
            };
            match self.answer(&request)? {
                Ok(Some((lp, run, source))) => {
                    tracing::info!(request = %request.id, run = %run.id, loop_name = %lp.name, %source, by = %request.requested_by, "run requested from another host");
                    served.started.push(run.id.clone());
                    self.spawn_batch(lp, run, Vec::new(), permit);
                }
                Ok(None) => {}
                Err(reason) => {
                    if self
                        .store
                        .refuse_run_request(&request.id, &self.cfg.runner_id, &reason, self.fence())
                        .map_err(|e| self.note_store_error(e))?
                    {
                        served.refused += 1;
                    }
                }
            }
        }
        Ok(served)
    }

    /// Makes the next run to end wake the daemon ([`Engine::replan_needed`]), as after
    /// a saturated pass: for run requests left for want of a free slot.
    pub fn wake_when_a_slot_frees(&self) {
        self.saturated
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The claim for one request: the run, `None` when the request is no longer
    /// pending, or why it is refused.
    #[allow(clippy::type_complexity)]
    fn answer(
        &self,
        request: &RunRequest,
    ) -> Result<Result<Option<(Loop, Run, RunSource)>, String>, EngineError> {
        let lp = match self.store.get_loop(&request.loop_id) {
            Ok(Some(lp)) if lp.status != LoopStatus::Archived => lp,
            Ok(Some(lp)) => return Ok(Err(format!("loop {:?} is archived", lp.name))),
            Ok(None) => return Ok(Err(format!("loop {} no longer exists", request.loop_id))),
            Err(e) => return Err(self.note_store_error(e)),
        };
        match self.claim_now_via(&lp, request.allow_overlap, Via::Request(&request.id)) {
            Ok(Some((run, source))) => Ok(Ok(Some((lp, run, source)))),
            Ok(None) => Ok(Ok(None)),
            Err(e @ (EngineError::Busy { .. } | EngineError::Schedule(_))) => {
                Ok(Err(e.to_string()))
            }
            Err(e) => Err(e),
        }
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
    fn claim_ad_hoc(
        &self,
        lp: &Loop,
        now: Instant,
        exclusive: bool,
        via: Via<'_>,
    ) -> Result<Option<Run>, EngineError> {
        let mut slot = now;
        for _ in 0..AD_HOC_TRIES {
            let req = self.claim_request(lp, slot, RunSource::AdHoc, now, exclusive);
            match self.claim_via(via, &req, None)? {
                None => return Ok(None),
                Some(Ok(run)) => return Ok(Some(run)),
                Some(Err(ClaimRefused::LoopBusy)) => return Err(self.busy(lp)),
                Some(Err(ClaimRefused::SlotRunning | ClaimRefused::SlotDone)) => {
                    slot += chrono::TimeDelta::milliseconds(1);
                }
                // Caps bound scheduled claims only; a pool with every account held
                // still runs a run-now (a person asked), so this does not happen.
                Some(Err(ClaimRefused::LoopNotActive | ClaimRefused::AtCap(_))) => break,
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
