//! Schedule math with an injected clock.
//!
//! STUB: to be implemented (see schedule helper brief).

use crate::{Instant, Loop, Schedule};

/// Why a schedule cannot produce slots.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    #[error(transparent)]
    Cron(#[from] crate::cron::CronError),
}

/// The first slot of a new (or resumed) schedule, evaluated at `now`.
pub fn initial_next_run(
    schedule: &Schedule,
    now: Instant,
) -> Result<Option<Instant>, ScheduleError> {
    let _ = (schedule, now);
    unimplemented!()
}

/// The slot after `slot` once its run finished at `finished_at`; `None` for `once`.
pub fn next_after_finish(
    schedule: &Schedule,
    slot: Instant,
    finished_at: Instant,
) -> Result<Option<Instant>, ScheduleError> {
    let _ = (schedule, slot, finished_at);
    unimplemented!()
}

/// The slots of `lp` due at `now`, in the order they must run.
pub fn due_slots(lp: &Loop, now: Instant) -> Result<Vec<Instant>, ScheduleError> {
    let _ = (lp, now);
    unimplemented!()
}

/// Whether `lp` is past its `expiresAt` at `now`.
pub fn is_expired(lp: &Loop, now: Instant) -> bool {
    lp.expires_at.is_some_and(|e| e <= now)
}
