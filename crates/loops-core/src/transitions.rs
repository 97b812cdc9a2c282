//! How a loop's schedule state moves when slots are claimed and runs finish.
//!
//! The scheduler advances a loop when it *claims* a slot, not when the run ends: the
//! next slot of a fixed-rate interval or a cron schedule does not depend on how long the
//! run takes, and advancing early is what lets a slow run coexist with the next slot
//! (overlap `skip` records it, `allow` runs it). Schedules whose next slot depends on
//! the finish time (`fixed_delay`, `dynamic`, `once`) have no next slot while a run is
//! in flight; [`on_finish`] fills it in. Retries (README, "Scheduling contract"): a
//! failed attempt with attempts left retries the same slot after `retryDelay`, an older
//! failed slot with attempts left is retried before new slots. Agent operations (issue
//! #20): retries back off ([`crate::failure::retry_delay_ms`]), failures another attempt
//! cannot help are not retried, and `maxFailures` failed slots in a row park the loop;
//! a stop condition ([`crate::stop`]) ends it (status `done`).
//! A usage limit ([`crate::hold`]) fails nothing: its slot is retried once the hold of
//! its account ends, the attempt not counted and the failure streak left as it is.

use crate::failure::{self, FailureClass};
use crate::schedule::{self, ScheduleError};
use crate::stop::{self, StopMet};
use crate::{
    Anchor, Instant, Loop, LoopState, LoopStatus, NotifyEvent, Run, RunSource, RunStatus, Schedule,
};

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

/// What a finished run does to its loop: its schedule state, its engine state (the
/// failure streak, why it was paused) and a notification about the loop itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishPlan {
    /// The loop's next schedule state; `None` leaves it as it is.
    pub advance: Option<LoopAdvance>,
    /// The loop's engine state after the run; `None` when it did not change.
    pub state: Option<LoopState>,
    /// A notification about the loop rather than the run: [`NotifyEvent::Parked`] when
    /// the circuit breaker tripped, [`NotifyEvent::Done`] when a stop condition ended
    /// the loop.
    pub event: Option<NotifyEvent>,
}

/// Whether `run` is retried: a scheduled attempt that failed with attempts left, whose
/// failure another attempt can help ([`FailureClass::is_retried`]: not `auth`, not
/// `context_length`).
pub fn retries(lp: &Loop, run: &Run) -> bool {
    run.source != RunSource::AdHoc
        && run.status.is_failure()
        && run.attempt < attempts_allowed(lp, run)
        && run.failure_class.is_none_or(FailureClass::is_retried)
}

/// The attempts `run`'s slot may have: `maxAttempts`, plus those of its attempts that
/// met a usage limit (they held the account instead of counting; the stores' claims
/// count them out the same way, from the runs' `failure_class`).
pub fn attempts_allowed(lp: &Loop, run: &Run) -> u32 {
    let held = if lp.state.held_slot == Some(run.scheduled_for) {
        lp.state.held_attempts
    } else {
        0
    };
    lp.max_attempts.saturating_add(held)
}

/// The state after `run` finished, given the loop as it is now (`current`), the stop
/// condition its runner found met (`stop`, see [`crate::RunOutcome::stop`]) and the
/// oldest other failed slot that still has attempts (`deferred_retry`).
///
/// - A retried attempt ([`retries`]) retries its slot after the back-off
///   ([`failure::retry_delay_ms`]), and never before the provider's `retryAt`.
/// - A slot that ended failed extends the failure streak, a success ends it; once the
///   streak reaches `maxFailures`, the loop is parked: `paused`, with the reason, and
///   one [`NotifyEvent::Parked`].
/// - A loop with a stop condition counts its ended slots (`runCount`); a successful
///   run whose `stop` was met, or the `maxRuns`-th ended slot, ends the loop: `done`,
///   with the reason, and one [`NotifyEvent::Done`] (which wins over the breaker: the
///   loop will not run again either way).
pub fn on_finish(
    current: &Loop,
    run: &Run,
    stop: Option<StopMet>,
    deferred_retry: Option<Instant>,
) -> Result<FinishPlan, ScheduleError> {
    if run.source == RunSource::AdHoc || current.status != LoopStatus::Active {
        return Ok(FinishPlan::default());
    }
    if crate::hold::holds(current, run) {
        return Ok(held(current, run));
    }
    let retrying = retries(current, run);
    let slot_failed = run.status.is_failure() && !retrying;
    let streak = match run.status {
        RunStatus::Succeeded => 0,
        _ if slot_failed => current.state.failure_streak.saturating_add(1),
        _ => current.state.failure_streak,
    };
    let mut plan = FinishPlan {
        advance: schedule_after(current, run, deferred_retry, retrying)?,
        state: None,
        event: None,
    };
    let mut state = current.state.clone();
    state.failure_streak = streak;
    if !retrying && state.held_slot == Some(run.scheduled_for) {
        // The slot is over: its held attempts no longer matter.
        state.held_slot = None;
        state.held_attempts = 0;
    }
    let tripped = slot_failed && current.ops.max_failures.is_some_and(|n| streak >= n);
    if tripped {
        let last = match run.failure_class {
            Some(class) => format!("{} ({class})", run.status),
            None => run.status.to_string(),
        };
        state.status_reason = Some(format!(
            "circuit breaker: {streak} consecutive failed slots (the last {last}); \
             `loops resume` starts a fresh streak"
        ));
        plan.advance = Some(LoopAdvance {
            status: LoopStatus::Paused,
            next_run_at: next_run_at(current, &plan),
            retry_scheduled_for: None,
        });
        plan.event = Some(NotifyEvent::Parked);
    }
    if current.ops.has_stop() && !retrying && run.status != RunStatus::Skipped {
        state.run_count = state.run_count.saturating_add(1);
        let met = stop.filter(|_| run.status == RunStatus::Succeeded);
        let reached = current.ops.max_runs.is_some_and(|n| state.run_count >= n);
        if met.is_some() || reached {
            state.status_reason = Some(stop::reason(current, met, state.run_count, &run.id));
            plan.advance = Some(LoopAdvance {
                status: LoopStatus::Done,
                next_run_at: next_run_at(current, &plan),
                retry_scheduled_for: None,
            });
            plan.event = Some(NotifyEvent::Done);
        }
    } else if !current.ops.has_stop() {
        // Its conditions were cleared: a later one counts from then.
        state.run_count = 0;
    }
    if state != current.state {
        plan.state = Some(state);
    }
    Ok(plan)
}

/// The plan after a scheduled `run` met its account's usage limit: the same slot is
/// retried (due at once; the stores' due-loop queries leave it out while its account
/// is held), this attempt counted as held rather than against `maxAttempts`, the
/// failure streak unchanged, no notification about the loop. A pending retry of
/// another slot is left alone.
fn held(current: &Loop, run: &Run) -> FinishPlan {
    let mut state = current.state.clone();
    state.held_attempts = if state.held_slot == Some(run.scheduled_for) {
        state.held_attempts.saturating_add(1)
    } else {
        1
    };
    state.held_slot = Some(run.scheduled_for);
    let other_retry_pending = current
        .retry_scheduled_for
        .is_some_and(|pending| pending != run.scheduled_for);
    FinishPlan {
        advance: (!other_retry_pending).then(|| LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: Some(run.finished_at.unwrap_or(run.updated_at)),
            retry_scheduled_for: Some(run.scheduled_for),
        }),
        state: Some(state),
        event: None,
    }
}

/// The next slot a loop taken out of scheduling keeps (for `resume`): the one `plan`
/// moved it to, else its own.
fn next_run_at(current: &Loop, plan: &FinishPlan) -> Option<Instant> {
    plan.advance
        .as_ref()
        .map_or(current.next_run_at, |a| a.next_run_at)
        .or(current.next_run_at)
}

/// The schedule state after `run` (see [`on_finish`]); `None` leaves it as it is.
fn schedule_after(
    current: &Loop,
    run: &Run,
    deferred_retry: Option<Instant>,
    retrying: bool,
) -> Result<Option<LoopAdvance>, ScheduleError> {
    if current
        .retry_scheduled_for
        .is_some_and(|pending| pending != run.scheduled_for)
    {
        // Another slot's retry is pending; it must not be clobbered.
        return Ok(None);
    }
    let finished_at = run.finished_at.unwrap_or(run.updated_at);
    if retrying {
        let delay = failure::retry_delay_ms(
            current.ops.retry_backoff,
            current.retry_delay_ms,
            current.ops.retry_delay_max_ms,
            run.attempt,
            run.failure_class,
            failure::retry_unit(&current.id, run.scheduled_for, run.attempt),
        );
        let mut retry_at = finished_at + chrono::TimeDelta::milliseconds(ms(delay));
        // The provider said when to come back: not before.
        if let Some(at) = run.retry_at {
            retry_at = retry_at.max(at);
        }
        return Ok(Some(LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: Some(retry_at),
            retry_scheduled_for: Some(run.scheduled_for),
        }));
    }
    if let Some(slot) = deferred_retry {
        let retry_at = finished_at + chrono::TimeDelta::milliseconds(ms(current.retry_delay_ms));
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
    run.source != RunSource::AdHoc && !retries(current, run) && current.max_attempts > 1
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
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{RetryBackoff, RunId};

    fn at(text: &str) -> Instant {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&chrono::Utc)
    }

    /// An hourly loop with 3 attempts and a 1-minute retry delay, next slot 13:00.
    fn hourly() -> Loop {
        serde_json::from_value(serde_json::json!({
            "id": "aaaaaaaaaaaa", "name": "hourly", "status": "active",
            "schedule": {"type": "interval", "everyMs": 3_600_000, "anchor": "fixed_rate"},
            "target": {"type": "command", "command": "true"},
            "nextRunAt": "2026-03-10T13:00:00.000Z", "retryScheduledFor": null,
            "catchUp": "latest", "catchUpLimit": 10, "overlap": "skip", "maxAttempts": 3,
            "retryDelayMs": 60000, "leaseMs": 1800000, "expiresAt": null,
            "createdAt": "2026-02-28T12:00:00.000Z", "updatedAt": "2026-03-10T12:00:00.000Z",
        }))
        .unwrap()
    }

    /// Attempt `attempt` of the 12:00 slot, finished at 12:00:10 with `status`.
    fn finished(attempt: u32, status: RunStatus, class: Option<FailureClass>) -> Run {
        let slot = at("2026-03-10T12:00:00Z");
        let end = at("2026-03-10T12:00:10Z");
        Run {
            id: RunId::new("bbbbbbbbbbbb"),
            loop_id: crate::LoopId::new("aaaaaaaaaaaa"),
            loop_name: "hourly".into(),
            due_at: Some(slot),
            started_at: Some(slot),
            finished_at: Some(end),
            exit_code: Some(1),
            duration_ms: Some(10_000),
            failure_class: class,
            updated_at: end,
            ..Run::history(slot, attempt, status, slot)
        }
    }

    fn retry_in(plan: &FinishPlan) -> Option<i64> {
        let a = plan.advance.as_ref()?;
        a.retry_scheduled_for?;
        Some((a.next_run_at? - at("2026-03-10T12:00:10Z")).num_milliseconds())
    }

    #[test]
    fn retries_back_off_fixed_or_exponential_and_wait_for_the_provider() {
        let mut lp = hourly();
        let other = finished(1, RunStatus::Failed, Some(FailureClass::Other));
        // Fixed (the default): the retry delay, as before.
        assert_eq!(
            retry_in(&on_finish(&lp, &other, None, None).unwrap()),
            Some(60_000)
        );
        // Transient classes back off 4× harder.
        let rate = finished(1, RunStatus::Failed, Some(FailureClass::RateLimit));
        assert_eq!(
            retry_in(&on_finish(&lp, &rate, None, None).unwrap()),
            Some(240_000)
        );
        // Exponential: a jittered draw under 1m · 2^(attempt-1), the same every time.
        lp.ops.retry_backoff = RetryBackoff::Exponential;
        let second = finished(2, RunStatus::Failed, Some(FailureClass::Other));
        let delay = retry_in(&on_finish(&lp, &second, None, None).unwrap()).unwrap();
        assert!((1_000..=120_000).contains(&delay), "{delay}");
        assert_eq!(
            retry_in(&on_finish(&lp, &second, None, None).unwrap()),
            Some(delay)
        );
        // The provider's retryAt comes first.
        let mut told = finished(1, RunStatus::Failed, Some(FailureClass::RateLimit));
        told.retry_at = Some(at("2026-03-10T12:30:10Z"));
        assert_eq!(
            retry_in(&on_finish(&lp, &told, None, None).unwrap()),
            Some(1_800_000)
        );
    }

    #[test]
    fn auth_and_context_length_are_not_retried() {
        let lp = hourly();
        for class in [FailureClass::Auth, FailureClass::ContextLength] {
            let run = finished(1, RunStatus::Failed, Some(class));
            assert!(!retries(&lp, &run), "{class}");
            let plan = on_finish(&lp, &run, None, None).unwrap();
            // The slot is over: no retry, the loop was advanced at claim time.
            assert_eq!(plan.advance, None, "{class}");
            assert_eq!(plan.state.unwrap().failure_streak, 1);
        }
        assert!(retries(
            &lp,
            &finished(1, RunStatus::TimedOut, Some(FailureClass::Timeout))
        ));
        assert!(!retries(&lp, &finished(3, RunStatus::Failed, None)));
    }

    #[test]
    fn the_circuit_breaker_parks_after_max_failures_failed_slots() {
        let mut lp = hourly();
        lp.max_attempts = 1;
        lp.ops.max_failures = Some(3);
        let failed = finished(1, RunStatus::Failed, Some(FailureClass::Overloaded));
        // Two failed slots: counted, still active.
        lp.state.failure_streak = 1;
        let plan = on_finish(&lp, &failed, None, None).unwrap();
        assert_eq!(plan.state.as_ref().unwrap().failure_streak, 2);
        assert_eq!(plan.event, None);
        assert_eq!(plan.advance, None);
        // The third: parked, with the reason and one notification; next slot kept.
        lp.state.failure_streak = 2;
        let plan = on_finish(&lp, &failed, None, None).unwrap();
        let advance = plan.advance.unwrap();
        assert_eq!(advance.status, LoopStatus::Paused);
        assert_eq!(advance.next_run_at, lp.next_run_at);
        assert_eq!(plan.event, Some(NotifyEvent::Parked));
        let state = plan.state.unwrap();
        assert_eq!(state.failure_streak, 3);
        assert_eq!(
            state.status_reason.as_deref(),
            Some(
                "circuit breaker: 3 consecutive failed slots (the last failed (overloaded)); \
                 `loops resume` starts a fresh streak"
            )
        );
        // A success starts the streak over; a retried attempt does not count.
        let ok = finished(1, RunStatus::Succeeded, None);
        assert_eq!(
            on_finish(&lp, &ok, None, None)
                .unwrap()
                .state
                .unwrap()
                .failure_streak,
            0
        );
        lp.max_attempts = 3;
        let plan = on_finish(&lp, &failed, None, None).unwrap();
        assert_eq!(plan.state, None, "a retried attempt leaves the streak");
        assert_eq!(plan.event, None);
    }

    fn agent_loop() -> Loop {
        let mut lp = hourly();
        lp.target = serde_json::from_value(serde_json::json!(
            {"type": "agent", "provider": "claude", "prompt": "hi"}
        ))
        .unwrap();
        lp
    }

    #[test]
    fn a_usage_limit_holds_the_slot_without_counting_the_attempt() {
        let mut lp = agent_loop();
        lp.max_attempts = 1;
        lp.ops.max_failures = Some(1);
        lp.state.failure_streak = 0;
        let limited = finished(1, RunStatus::Failed, Some(FailureClass::UsageLimit));
        let plan = on_finish(&lp, &limited, None, None).unwrap();
        // The same slot again, due now (the hold keeps it from being claimed).
        let advance = plan.advance.clone().unwrap();
        assert_eq!(advance.status, LoopStatus::Active);
        assert_eq!(advance.retry_scheduled_for, Some(limited.scheduled_for));
        assert_eq!(advance.next_run_at, limited.finished_at);
        // Not a failed slot: no streak, no breaker, no event; the attempt held.
        assert_eq!(plan.event, None);
        let state = plan.state.unwrap();
        assert_eq!(state.failure_streak, 0);
        assert_eq!(state.held_slot, Some(limited.scheduled_for));
        assert_eq!(state.held_attempts, 1);
        // Attempt 2 of a one-attempt loop is its first counted one: a failure ends the
        // slot (not retried) and clears the held count.
        lp.state = state;
        lp.retry_scheduled_for = Some(limited.scheduled_for);
        assert_eq!(attempts_allowed(&lp, &limited), 2);
        let again = finished(2, RunStatus::Failed, Some(FailureClass::UsageLimit));
        let state = on_finish(&lp, &again, None, None).unwrap().state.unwrap();
        assert_eq!(state.held_attempts, 2);
        lp.max_attempts = 2;
        let failed = finished(2, RunStatus::Failed, Some(FailureClass::Other));
        assert!(retries(&lp, &failed), "attempt 2 is the first counted of 2");
        lp.max_attempts = 1;
        assert!(!retries(&lp, &failed));
        let plan = on_finish(&lp, &failed, None, None).unwrap();
        let state = plan.state.unwrap();
        assert_eq!((state.held_slot, state.held_attempts), (None, 0));
        assert_eq!(state.failure_streak, 1);
        // A command loop is never held: its usage-limit failure ends the slot.
        let mut command = hourly();
        command.max_attempts = 1;
        let plan = on_finish(&command, &limited, None, None).unwrap();
        assert_eq!(plan.state.unwrap().failure_streak, 1);
        assert_eq!(plan.advance, None);
    }

    #[test]
    fn max_runs_ends_the_loop_when_its_nth_slot_ends_whatever_its_outcome() {
        let mut lp = hourly();
        lp.ops.max_runs = Some(2);
        // The first slot ends (failed, last attempt): counted, still active.
        let failed = finished(3, RunStatus::Failed, Some(FailureClass::Other));
        let plan = on_finish(&lp, &failed, None, None).unwrap();
        assert_eq!(plan.state.as_ref().unwrap().run_count, 1);
        assert_eq!(plan.event, None);
        assert_eq!(plan.advance, None);
        // A retried attempt is not an end.
        let retried = finished(1, RunStatus::Failed, Some(FailureClass::Other));
        lp.state.run_count = 1;
        let plan = on_finish(&lp, &retried, None, None).unwrap();
        assert_eq!(plan.state.map(|s| s.run_count), None);
        assert_ne!(plan.event, Some(NotifyEvent::Done));
        // The second ended slot: done, with the reason and one notification; the next
        // slot kept for `resume`.
        let ok = finished(1, RunStatus::Succeeded, None);
        let plan = on_finish(&lp, &ok, None, None).unwrap();
        let advance = plan.advance.unwrap();
        assert_eq!(advance.status, LoopStatus::Done);
        assert_eq!(advance.next_run_at, lp.next_run_at);
        assert_eq!(advance.retry_scheduled_for, None);
        assert_eq!(plan.event, Some(NotifyEvent::Done));
        let state = plan.state.unwrap();
        assert_eq!(state.run_count, 2);
        assert_eq!(
            state.status_reason.as_deref(),
            Some("--max-runs 2 reached (run 2, bbbbbbbbbbbb)")
        );
        // Ad-hoc runs neither count nor end it; a loop that is no longer active (done
        // by another runner's finalization) is left alone: one notification.
        let mut adhoc = finished(1, RunStatus::Succeeded, None);
        adhoc.source = RunSource::AdHoc;
        assert_eq!(
            on_finish(&lp, &adhoc, None, None).unwrap(),
            FinishPlan::default()
        );
        lp.status = LoopStatus::Done;
        assert_eq!(
            on_finish(&lp, &ok, None, None).unwrap(),
            FinishPlan::default()
        );
    }

    #[test]
    fn a_met_until_condition_ends_the_loop_after_a_successful_run_only() {
        let mut lp = hourly();
        lp.max_attempts = 1;
        lp.ops.until_cmd = Some("test -e marker".into());
        lp.state.run_count = 6;
        let ok = finished(1, RunStatus::Succeeded, None);
        // Not met: counted, nothing else.
        let plan = on_finish(&lp, &ok, None, None).unwrap();
        assert_eq!(plan.state.unwrap().run_count, 7);
        assert_eq!(plan.event, None);
        let plan = on_finish(&lp, &ok, Some(StopMet::UntilCmd), None).unwrap();
        assert_eq!(plan.advance.unwrap().status, LoopStatus::Done);
        assert_eq!(plan.event, Some(NotifyEvent::Done));
        assert_eq!(
            plan.state.unwrap().status_reason.as_deref(),
            Some("--until-cmd exited 0 after run 7 (bbbbbbbbbbbb)")
        );
        // A failed run does not end it, even when told so.
        let failed = finished(1, RunStatus::Failed, None);
        let plan = on_finish(&lp, &failed, Some(StopMet::UntilCmd), None).unwrap();
        assert_eq!(plan.event, None);
        assert_eq!(plan.advance, None);
        // Done wins over the circuit breaker tripping on the same run.
        lp.ops.max_failures = Some(1);
        lp.ops.max_runs = Some(7);
        let plan = on_finish(&lp, &failed, None, None).unwrap();
        assert_eq!(plan.advance.unwrap().status, LoopStatus::Done);
        assert_eq!(plan.event, Some(NotifyEvent::Done));
        // Without a stop condition nothing is counted (no state write per run).
        let plain = hourly();
        assert_eq!(on_finish(&plain, &ok, None, None).unwrap().state, None);
    }

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
