//! The decisions of one claim that every backend makes alike over what its own queries
//! read: when the claimed attempt became due, and whether the slot grants another
//! attempt (and its number).

use crate::codec::ms;
use crate::{ClaimRefused, ClaimRequest};
use loops_core::schedule::jitter_delay;
use loops_core::RunSource;

/// When the attempt `req` claims became due (milliseconds), shared so both backends
/// record the same `due_at`: a pending retry's time (with its slot's jitter, as the
/// loop holds it in `loop_due` while its retry is `retry_for`), else the slot plus its
/// jitter. An ad-hoc run was never due.
pub fn attempt_due_at(
    req: &ClaimRequest,
    retry_for: Option<i64>,
    loop_due: Option<i64>,
    jitter_ms: u64,
) -> Option<i64> {
    let slot = ms(&req.scheduled_for);
    if req.source == RunSource::AdHoc {
        None
    } else if retry_for == Some(slot) {
        loop_due
    } else {
        let delay = jitter_delay(&req.loop_id, req.scheduled_for, jitter_ms);
        Some(slot.saturating_add(i64::try_from(delay).unwrap_or(0)))
    }
}

/// The runs of the claimed slot as a claim counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotAttempts {
    /// Its running rows.
    pub running: i64,
    /// Its succeeded or skipped rows.
    pub done: i64,
    /// Its highest attempt number (0: none yet).
    pub last_attempt: i64,
    /// Its attempts that met a usage limit: they held their account instead of
    /// counting (`loops_core::transitions::attempts_allowed`).
    pub held: i64,
}

impl SlotAttempts {
    /// The number of the attempt a claim inserts, or why the slot refuses one — the
    /// same rule on every backend: a running or done slot refuses; an ad-hoc slot gets a
    /// single attempt, a loop's slot `max_attempts` (never fewer than one) plus its held
    /// ones.
    pub fn next_attempt(&self, max_attempts: i64, ad_hoc: bool) -> Result<i64, ClaimRefused> {
        if self.running > 0 {
            return Err(ClaimRefused::SlotRunning);
        }
        if self.done > 0 {
            return Err(ClaimRefused::SlotDone);
        }
        let allowed = if ad_hoc {
            1
        } else {
            max_attempts.max(1).saturating_add(self.held)
        };
        if self.last_attempt >= allowed {
            return Err(ClaimRefused::SlotDone);
        }
        Ok(self.last_attempt + 1)
    }
}
