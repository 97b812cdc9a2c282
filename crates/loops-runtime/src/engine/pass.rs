//! The scheduling pass: recover → expire → due slots → claim (with each loop's advance,
//! in one transaction) → start the claimed runs. A loop that cannot be scheduled is
//! parked; a backwards clock jump re-plans the loops it left far ahead.

use super::{Engine, EngineError, PassReport, DUE_BATCH};
use loops_core::caps::{self, InFlight};
use loops_core::hold::AccountHold;
use loops_core::schedule::due_slots;
use loops_core::transitions::on_claim;
use loops_core::{format_instant, Instant, Loop, LoopId, Overlap, RunSource};
use loops_store::{
    BatchClaim, ClaimOutcome, ClaimRefused, ClaimRequest, LoopFilter, OnRefusal, UnreadableLoop,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

impl Engine {
    /// A scheduling pass; `recover` includes the (costlier) reconciliation of other
    /// runners' rows, which the daemon runs on its own cadence rather than on every
    /// wake-up.
    pub fn pass(self: &Arc<Self>, recover: bool) -> Result<PassReport, EngineError> {
        let now = self.clock.now();
        let mut report = PassReport::default();
        self.saturated.store(false, Ordering::SeqCst);
        if recover {
            self.recover(now, &mut report)?;
        }
        // Fetch no more due loops than can start now: decoding rows that must wait for
        // a free slot is wasted work on every pass.
        let free = self.permits.available_permits();
        if free == 0 {
            self.expire(now, &mut report)?;
            report.saturated = true;
        } else {
            // Loops the last pass left waiting for a cap come first again (they are
            // due longest): fetch past them, so the loops behind them still start.
            let fetch = free
                .saturating_add(self.cap_waiting.load(Ordering::SeqCst))
                .min(DUE_BATCH);
            let labels = &self.cfg.runner_labels;
            // Loops past their expiry are expired before the due ones are read.
            let due = match self.store.due_loops_unless_expiring(now, fetch, labels)? {
                Some(due) => due,
                None => {
                    self.expire(now, &mut report)?;
                    self.store.due_loops_on(now, fetch, labels)?
                }
            };
            let full = due.len() >= fetch;
            report.saturated |= !self.dispatch(due, now, &mut report)?;
            // More may be due than were fetched: come back once a run frees a slot.
            report.saturated |= full && self.permits.available_permits() == 0;
        }
        self.cap_waiting
            .store(report.waiting.len(), Ordering::SeqCst);
        // A loop waiting for a cap is due, but only a run that ends (here or, on
        // PostgreSQL, on another runner: the recovering passes look) can let it start:
        // the next run to end wakes the daemon, as after a saturated pass.
        if report.saturated || !report.waiting.is_empty() {
            self.saturated.store(true, Ordering::SeqCst);
        }
        Ok(report)
    }

    /// Marks the loops past their expiry at `now` expired.
    fn expire(&self, now: Instant, report: &mut PassReport) -> Result<(), EngineError> {
        let expired = self
            .store
            .expire_loops(now, self.fence())
            .map_err(|e| self.note_store_error(e))?;
        report.expired = expired.into_iter().map(|l| l.id).collect();
        Ok(())
    }

    /// Resolves when the daemon should plan again: a run finished while every slot was
    /// busy, or a finished run moved its loop's next slot.
    pub async fn replan_needed(&self) {
        self.replan.notified().await;
    }

    /// Claims a due slot of every loop in `due` in one transaction (each claim advancing
    /// its loop) and starts the claimed runs. Returns false when it ran out of
    /// concurrency slots before the end of `due`.
    pub(super) fn dispatch(
        self: &Arc<Self>,
        due: Vec<Result<Loop, UnreadableLoop>>,
        now: Instant,
        report: &mut PassReport,
    ) -> Result<bool, EngineError> {
        struct Planned {
            lp: Loop,
            slots: Vec<Instant>,
            permit: OwnedSemaphorePermit,
        }
        let mut planned = Vec::with_capacity(due.len());
        let mut claims = Vec::with_capacity(due.len());
        let mut all_fit = true;
        // The claims' own instant: `startedAt` must not be the pass's start.
        let claim_now = self.clock.now();
        let mut admission = self.admission(&due)?;
        for lp in due {
            // One loop that cannot be scheduled must not stop the others (nor come
            // back due on every pass): it is parked, and the pass goes on.
            let lp = match lp {
                Ok(lp) => lp,
                Err(UnreadableLoop { id, name, error }) => {
                    let reason = format!("its stored definition cannot be read: {error}");
                    self.park(&id, &name, &reason, now, report)?;
                    continue;
                }
            };
            let plan = due_slots(&lp, now).and_then(|slots| {
                let last = slots.last().copied();
                let advance = match last {
                    Some(last) => on_claim(&lp, last, RunSource::Scheduled, now)?,
                    None => None,
                };
                Ok((slots, advance))
            });
            let (slots, advance) = match plan {
                Ok(plan) => plan,
                Err(e) => {
                    let reason = format!("its schedule cannot be computed: {e}");
                    self.park(&lp.id, &lp.name, &reason, now, report)?;
                    continue;
                }
            };
            let Some(&first) = slots.first() else {
                continue;
            };
            // Over a cap: the loop waits, still due, without a permit (the store's
            // claim checks again, counting every runner's rows).
            if let Some((in_flight, holds)) = admission.as_mut() {
                match caps::admit(&lp.target, &self.cfg.caps, in_flight, holds, claim_now) {
                    Ok(keys) => in_flight.add(&keys, 1),
                    Err(wait) => {
                        report.waiting.push((lp.id.clone(), wait.text()));
                        continue;
                    }
                }
            }
            let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                all_fit = false;
                break;
            };
            claims.push(BatchClaim {
                request: ClaimRequest {
                    loop_id: lp.id.clone(),
                    scheduled_for: first,
                    runner_id: self.cfg.runner_id.clone(),
                    source: RunSource::Scheduled,
                    now: claim_now,
                    require_no_running: lp.overlap == Overlap::Skip,
                },
                advance,
                on_refusal: OnRefusal::PassOver {
                    skip_slots: slots.clone(),
                },
                caps: self.cfg.caps.clone(),
            });
            planned.push(Planned { lp, slots, permit });
        }
        let outcomes = self
            .store
            .claim_runs(&claims, self.fence())
            .map_err(|e| self.note_store_error(e))?;
        for (plan, outcome) in planned.into_iter().zip(outcomes) {
            let Planned { lp, slots, permit } = plan;
            match outcome {
                ClaimOutcome::Claimed(run) => {
                    report.claimed.push(run.id.clone());
                    self.spawn_batch(lp, *run, slots[1..].to_vec(), permit);
                }
                ClaimOutcome::Skipped(runs) => {
                    report.skipped.extend(runs.into_iter().map(|r| r.id));
                }
                // Another runner's runs filled the cap since the counts were read.
                ClaimOutcome::Refused(ClaimRefused::AtCap(why)) => {
                    report.waiting.push((lp.id.clone(), why));
                }
                // Someone else (run-now, another runner) has the slot, or the loop went
                // away: the store has done what that implies.
                ClaimOutcome::Moved | ClaimOutcome::NotActive | ClaimOutcome::Refused(_) => {}
            }
        }
        Ok(all_fit)
    }

    /// What the pass's cap decisions start from: the store's running rows by key and
    /// the account holds — read only with caps set or a pooled loop due.
    #[allow(clippy::type_complexity)]
    fn admission(
        &self,
        due: &[Result<Loop, UnreadableLoop>],
    ) -> Result<Option<(InFlight, Vec<AccountHold>)>, EngineError> {
        let pooled = due.iter().any(|lp| {
            lp.as_ref()
                .is_ok_and(|lp| caps::pool_of(&lp.target).is_some())
        });
        if self.cfg.caps.is_empty() && !pooled {
            return Ok(None);
        }
        let in_flight = self.store.running_keys()?;
        let holds = if pooled {
            // A spent budget of one account stops a pool's choice as a usage limit does.
            let mut holds = self.store.account_holds()?;
            holds.extend(loops_core::budget::pool_holds(&self.store.budget_holds()?));
            holds
        } else {
            Vec::new()
        };
        Ok(Some((in_flight, holds)))
    }

    /// Takes a loop that cannot be scheduled out of scheduling: paused, with a failed
    /// run saying why. Logged once: a parked loop is no longer due.
    pub(super) fn park(
        &self,
        id: &LoopId,
        name: &str,
        reason: &str,
        now: Instant,
        report: &mut PassReport,
    ) -> Result<(), EngineError> {
        let reason = loops_core::transitions::Parked::new(reason).message();
        let parked = self
            .store
            .park_loop(id, &reason, now, self.fence())
            .map_err(|e| self.note_store_error(e))?;
        if let Some(run) = parked {
            tracing::error!(loop_id = %id, name, run = %run.id, %reason, "loop parked");
            report.parked.push(id.clone());
        }
        Ok(())
    }

    /// Moves back every active loop whose next slot lies further ahead than its
    /// schedule can explain, as after the wall clock went backwards (see
    /// [`loops_core::schedule::replan_after_clock_jump`]). Returns the loops moved.
    /// A loop whose schedule does not compute, or whose row cannot be read, is left to
    /// the next pass, which parks it; the others are moved all the same.
    ///
    /// The loops are read a page at a time: the daemon does this at its start, and
    /// 100,000 loops decoded at once were ≈ 100 MB of its memory. Every loop is paged,
    /// the active ones picked here: that is a walk of the name index, where paging the
    /// active ones would sort them all for every page. Each page starts after the last
    /// name of the one before, not at an offset: a loop removed meanwhile shifted the
    /// offsets past a loop, which then stayed ahead until the next start, and each page
    /// read every row before it again.
    pub fn replan_after_clock_jump(&self) -> Result<Vec<LoopId>, EngineError> {
        const PAGE: usize = 2_000;
        // Loops the warning names; the rest are counted.
        const NAMED: usize = 5;
        let now = self.clock.now();
        let (mut moved, mut names) = (Vec::new(), Vec::new());
        let mut cursor = NameCursor::default();
        loop {
            let page = self.store.loop_rows_matching(&cursor.page(PAGE))?;
            let read = page.len();
            cursor.advance(&page);
            for lp in self.move_page_back(page, now)? {
                if names.len() < NAMED {
                    names.push(lp.name);
                }
                moved.push(lp.id);
            }
            if read < PAGE {
                break;
            }
        }
        // One warning for all of them (100,000 loops moved were 20 MB of warnings).
        if !moved.is_empty() {
            tracing::warn!(
                moved = moved.len(),
                loops = %names.join(", "),
                more = moved.len() - names.len(),
                "next slots lay further ahead than their schedules allow (the clock went back?); moved them back"
            );
        }
        Ok(moved)
    }

    /// Moves back the active loops of `page` whose next slot lies further ahead than
    /// their schedule allows, in one write (a clock stepped back under 100,000 loops
    /// must not hold the first pass back for a write per loop); each at debug level.
    fn move_page_back(
        &self,
        page: Vec<Result<Loop, loops_store::UnreadableLoop>>,
        now: Instant,
    ) -> Result<Vec<Loop>, EngineError> {
        let moves: Vec<loops_store::SlotMove> = page
            .into_iter()
            .flatten()
            .filter(|lp| lp.status == loops_core::LoopStatus::Active)
            .filter_map(|lp| {
                let to = loops_core::schedule::replan_after_clock_jump(&lp, now).ok()??;
                Some(loops_store::SlotMove { read: lp, to })
            })
            .collect();
        let done = self
            .store
            .move_slots_back(&moves, now, self.fence())
            .map_err(|e| self.note_store_error(e))?;
        let was: std::collections::HashMap<&LoopId, Option<Instant>> = moves
            .iter()
            .map(|m| (&m.read.id, m.read.next_run_at))
            .collect();
        for lp in &done {
            tracing::debug!(
                loop_name = %lp.name,
                was = %was.get(&lp.id).copied().flatten().map(|t| format_instant(&t)).unwrap_or_default(),
                now = %lp.next_run_at.map(|t| format_instant(&t)).unwrap_or_default(),
                "next slot lay further ahead than the schedule allows; moved it"
            );
        }
        Ok(done)
    }
}

/// Where the next page of a walk over every loop by name starts: after the last name
/// read, not at an offset. A row whose name itself cannot be read (an unreadable loop
/// named "") cannot be a start: the rows after the last readable name are skipped by
/// count, so the walk always moves on.
#[derive(Default)]
struct NameCursor {
    after_name: Option<String>,
    skip: usize,
}

impl NameCursor {
    /// The filter of the next page of at most `limit` loops, archived ones too.
    fn page(&self, limit: usize) -> LoopFilter {
        LoopFilter {
            include_archived: true,
            after_name: self.after_name.clone(),
            offset: self.skip,
            limit: Some(limit),
            ..LoopFilter::default()
        }
    }

    /// Past `page`, the page just read.
    fn advance(&mut self, page: &[Result<Loop, loops_store::UnreadableLoop>]) {
        let name_of = |row: &Result<Loop, loops_store::UnreadableLoop>| match row {
            Ok(lp) => Some(lp.name.clone()),
            Err(unreadable) => Some(unreadable.name.clone()).filter(|n| !n.is_empty()),
        };
        match page
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, row)| Some((i, name_of(row)?)))
        {
            Some((last, name)) => {
                self.after_name = Some(name);
                self.skip = page.len() - 1 - last;
            }
            None => self.skip += page.len(),
        }
    }
}
