//! How a loop's schedule state moves when slots are claimed and runs finish.
//!
//! The scheduler advances a loop when it *claims* a slot, not when the run ends: the
//! next slot of a fixed-rate interval or a cron schedule does not depend on how long the
//! run takes, and advancing early is what lets a slow run coexist with the next slot
//! (overlap `skip` records it, `allow` runs it). Schedules whose next slot depends on
//! the finish time (`fixed_delay`, `dynamic`, `once`) have no next slot while a run is
//! in flight; [`on_finish`] fills it in. Retries (README, "Scheduling contract"): a
//! failed attempt with attempts left retries the same slot after `retryDelay`, an older
//! failed slot with attempts left is retried before new slots.

use crate::schedule::{self, ScheduleError};
use crate::{Anchor, Instant, Loop, LoopStatus, Run, RunSource, RunStatus, Schedule};

/// A loop's schedule state: what the store persists after a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopAdvance {
    pub status: LoopStatus,
    pub next_run_at: Option<Instant>,
    pub retry_scheduled_for: Option<Instant>,
}

/// Why a loop was taken out of scheduling ("parked"): its schedule no longer computes
/// or its stored row cannot be read. The loop is set `paused` and a failed run records
/// [`Parked::message`] as its error, the one form the store keeps; `doctor` reads it
/// back with [`Parked::from_error`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    pub reason: String,
}

const PARKED_PREFIX: &str = "loop parked (paused): ";
const PARKED_SUFFIX: &str = "; fix it, then `loops resume`";

impl Parked {
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    /// The parked run's error: `loop parked (paused): {reason}; fix it, then `loops resume``.
    pub fn message(&self) -> String {
        format!("{PARKED_PREFIX}{}{PARKED_SUFFIX}", self.reason)
    }

    /// The parking a run's error records, if it records one.
    pub fn from_error(error: &str) -> Option<Self> {
        let rest = error.strip_prefix(PARKED_PREFIX)?;
        Some(Self::new(rest.strip_suffix(PARKED_SUFFIX).unwrap_or(rest)))
    }
}

/// Whether the next slot can only be known once the current run finished.
pub fn next_depends_on_finish(s: &Schedule) -> bool {
    matches!(
        s,
        Schedule::Once { .. }
            | Schedule::Dynamic { .. }
            | Schedule::Interval {
                anchor: Anchor::FixedDelay,
                ..
            }
    )
}

/// The state after claiming `last_slot` (the newest slot of a dispatched batch) at
/// `now`: the slot after the newest one due ([`schedule::next_slot_after_due`]), so a
/// slot whose jitter has not passed yet stays next. `None` when the loop must stay
/// untouched (ad-hoc runs).
pub fn on_claim(
    lp: &Loop,
    last_slot: Instant,
    source: RunSource,
    now: Instant,
) -> Result<Option<LoopAdvance>, ScheduleError> {
    if source == RunSource::AdHoc {
        return Ok(None);
    }
    let next_run_at = if next_depends_on_finish(&lp.schedule) {
        None
    } else {
        schedule::next_slot_after_due(lp, last_slot, now)?
    };
    Ok(Some(LoopAdvance {
        status: LoopStatus::Active,
        next_run_at,
        retry_scheduled_for: None,
    }))
}

/// The state after `run` finished, given the loop as it is now (`current`) and the
/// oldest other failed slot that still has attempts (`deferred_retry`). `None` leaves
/// the loop as it is.
pub fn on_finish(
    current: &Loop,
    run: &Run,
    deferred_retry: Option<Instant>,
) -> Result<Option<LoopAdvance>, ScheduleError> {
    if run.source == RunSource::AdHoc || current.status != LoopStatus::Active {
        return Ok(None);
    }
    if current
        .retry_scheduled_for
        .is_some_and(|pending| pending != run.scheduled_for)
    {
        // Another slot's retry is pending; it must not be clobbered.
        return Ok(None);
    }
    let finished_at = run.finished_at.unwrap_or(run.updated_at);
    let retry_at = finished_at + chrono::TimeDelta::milliseconds(ms(current.retry_delay_ms));
    if run.status.is_failure() && run.attempt < current.max_attempts {
        return Ok(Some(LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: Some(retry_at),
            retry_scheduled_for: Some(run.scheduled_for),
        }));
    }
    if let Some(slot) = deferred_retry {
        return Ok(Some(LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: Some(retry_at),
            retry_scheduled_for: Some(slot),
        }));
    }
    if current.next_run_at.is_some() && current.retry_scheduled_for.is_none() {
        // Advanced at claim time already.
        return Ok(None);
    }
    let next = schedule::next_after_finish(&current.schedule, run.scheduled_for, finished_at)?;
    Ok(Some(LoopAdvance {
        status: if next.is_some() {
            LoopStatus::Active
        } else {
            LoopStatus::Stopped
        },
        next_run_at: next,
        retry_scheduled_for: None,
    }))
}

/// Whether deciding the transition after `run` needs the loop's oldest other slot that
/// still has attempts left (a deferred retry; see [`on_finish`]): only when the loop
/// allows several attempts, the run is not ad hoc, and its own slot is not retrying.
pub fn wants_deferred_retry(current: &Loop, run: &Run) -> bool {
    let retry_pending = run.status.is_failure() && run.attempt < current.max_attempts;
    run.source != RunSource::AdHoc && !retry_pending && current.max_attempts > 1
}

/// Whether a finished run counts as done for its slot (no further attempt).
pub fn slot_finished(run: &Run, max_attempts: u32) -> bool {
    matches!(run.status, RunStatus::Succeeded | RunStatus::Skipped) || run.attempt >= max_attempts
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_loops_run_error_reads_back() {
        let parked = Parked::new("its schedule cannot be computed: unknown time zone");
        let message = parked.message();
        assert_eq!(
            message,
            "loop parked (paused): its schedule cannot be computed: unknown time zone; \
             fix it, then `loops resume`"
        );
        assert_eq!(Parked::from_error(&message), Some(parked));
        assert_eq!(Parked::from_error("exited with status 1"), None);
        assert_eq!(Parked::from_error("loop parked"), None);
    }
}
