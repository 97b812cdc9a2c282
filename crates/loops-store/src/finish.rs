//! What every backend's run writes ([`crate::Store::record_run_writes`]) compute the
//! same way: a pid record's stored values, the checked outcome's `usage_json`, the
//! query behind a deferred retry (in each backend's placeholders), the loop's finish
//! plan as the domain decides it, and the [`RunWritten`] of a finalized run. What is
//! left to a backend is its SQL dialect, its rows and its transaction.

use crate::codec::{encode_usage, sat_i64, Result};
use crate::{RunWrite, RunWritten, StoreError};
use loops_core::stop::StopMet;
use loops_core::transitions::{self, FinishPlan};
use loops_core::{Delivery, Instant, Loop, Run, RunId, RunOutcome, RunStatus};

/// Failure statuses as a SQL list; must match [`loops_core::RunStatus::is_failure`] and
/// the `runs_failed_slot` partial index (SQLite only uses it for an identical term).
#[macro_export]
macro_rules! failure_statuses {
    () => {
        "('failed', 'timed_out', 'abandoned')"
    };
}

/// Failure classes that are not retried, as a SQL list; must match
/// [`loops_core::failure::FailureClass::is_retried`] (a unit test checks).
#[macro_export]
macro_rules! not_retried_classes {
    () => {
        "('usage_limit', 'auth', 'context_length')"
    };
}

/// The query behind a deferred retry, in the backend's placeholders for the loop id,
/// its `max_attempts` and the slot to leave out: the oldest slot of the loop other than
/// that one whose latest attempt failed with attempts left under `max_attempts` — not
/// ad hoc, not of a class that is not retried, neither running nor done. Selects that
/// slot's `scheduled_for`.
#[macro_export]
macro_rules! retryable_slot_sql {
    ($loop_id:literal, $max_attempts:literal, $except:literal) => {
        // Start from failed attempts (partial index), keep those that are the latest
        // attempt of their slot and whose slot is neither running nor done.
        concat!(
            "SELECT f.scheduled_for FROM runs f \
             WHERE f.loop_id = ",
            $loop_id,
            " AND f.status IN ",
            $crate::failure_statuses!(),
            " AND f.source != 'ad_hoc' AND f.scheduled_for != ",
            $except,
            " AND f.attempt < ",
            $max_attempts,
            " AND (f.failure_class IS NULL OR f.failure_class NOT IN ",
            $crate::not_retried_classes!(),
            ") \
               AND NOT EXISTS ( \
                 SELECT 1 FROM runs x \
                 WHERE x.loop_id = f.loop_id AND x.scheduled_for = f.scheduled_for \
                   AND (x.attempt > f.attempt OR x.status IN ('running', 'succeeded', 'skipped'))) \
             ORDER BY f.scheduled_for LIMIT 1"
        )
    };
}

/// A [`RunWrite::Spawned`] as its row is updated: the pid and its process start time
/// (saturated, [`sat_i64`]) and session note, written at `at`.
#[derive(Debug, Clone, Copy)]
pub struct PidRecord<'w> {
    pub run: &'w RunId,
    pub pid: u32,
    pub pid_start_time: Option<i64>,
    pub session_note: Option<&'w str>,
    pub at: Instant,
}

/// A [`RunWrite`] as a backend applies it: a pid record, or a run's end.
#[derive(Debug, Clone, Copy)]
pub enum Write<'w> {
    Pid(PidRecord<'w>),
    Finish {
        run: &'w RunId,
        outcome: &'w RunOutcome,
    },
}

impl RunWrite {
    /// This write as a backend applies it ([`Write`]).
    pub fn to_write(&self) -> Write<'_> {
        match self {
            RunWrite::Spawned {
                run,
                pid,
                pid_start_time,
                session_note,
                at,
            } => Write::Pid(PidRecord {
                run,
                pid: *pid,
                pid_start_time: pid_start_time.map(sat_i64),
                session_note: session_note.as_deref(),
                at: *at,
            }),
            RunWrite::Finished { run, outcome } => Write::Finish { run, outcome },
        }
    }
}

impl RunWritten {
    /// A finalized run: its row, whether its loop's schedule state changed, and the
    /// deliveries queued for it.
    pub fn finished(run: Run, loop_moved: bool, notifications: Vec<Delivery>) -> Self {
        RunWritten::Finished {
            run: Box::new(run),
            loop_moved,
            notifications,
        }
    }
}

/// Checks that `outcome` can end a run and encodes its usage (the row's `usage_json`).
pub fn outcome_usage_json(outcome: &RunOutcome) -> Result<Option<String>> {
    if outcome.status == RunStatus::Running {
        return Err(StoreError::InvalidArgument(
            "a run cannot be finalized as running".to_owned(),
        ));
    }
    encode_usage(outcome.usage.as_ref())
}

/// The transition of loop `lp` (as stored) after `run` ended, as the domain decides it
/// ([`transitions::on_finish`]; `stop` is what the runner found met, `deferred` the
/// slot of [`retryable_slot_sql!`] when [`transitions::wants_deferred_retry`] asked for
/// it). A loop whose schedule no longer computes is left as it is (logged, an empty
/// plan): the next scheduling pass parks it.
pub fn plan(lp: &Loop, run: &Run, stop: Option<StopMet>, deferred: Option<Instant>) -> FinishPlan {
    transitions::on_finish(lp, run, stop, deferred).unwrap_or_else(|e| {
        tracing::warn!(loop_id = %lp.id, error = %e, "could not plan the loop's next run");
        FinishPlan::default()
    })
}

/// The instant a finished run's loop advance is applied at: when the run finished.
pub fn advanced_at(run: &Run) -> Instant {
    run.finished_at.unwrap_or(run.updated_at)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_not_retried_classes_are_the_domains() {
        use loops_core::failure::FailureClass;
        let listed: Vec<String> = FailureClass::ALL
            .iter()
            .filter(|c| !c.is_retried())
            .map(|c| format!("'{c}'"))
            .collect();
        assert_eq!(not_retried_classes!(), format!("({})", listed.join(", ")));
    }
}
