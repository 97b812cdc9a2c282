//! Schedule math with an injected clock.
//!
//! Every function takes `now` (or the instants it reasons about) as an argument;
//! nothing here reads the clock. A *slot* is an instant at which a schedule wants a
//! run; runs are keyed by their slot, so these functions decide which slots exist,
//! which are due, and where a loop goes after a run.
//!
//! - `once {at}`: the single slot `at`.
//! - `interval {every, fixed_rate}`: slots on the grid `first + k·every`; after a run
//!   the next slot is the first grid point strictly after the finish, so a long
//!   downtime or a slow run never causes a burst of back-to-back runs and the phase
//!   is kept.
//! - `interval {every, fixed_delay}`: the next slot is `finish + every`.
//! - `cron`: the matches of [`CronSchedule`] (DST rules documented there).
//! - `dynamic {minInterval}`: first due `minInterval` after creation (as OpenLoops 0.3
//!   and interval loops do), then `minInterval` after each finish; never backfilled.
//!
//! Missed slots (the scheduler was down) are handled by the loop's catch-up policy in
//! [`due_slots`]; interval slots are computed arithmetically and cron slots with a
//! bounded walk, so a 1-second loop that was down for a week costs microseconds.

use crate::cron::{CronError, CronSchedule};
use crate::{Anchor, CatchUp, Instant, Loop, LoopId, LoopStatus, Schedule};
use chrono::TimeDelta;
use std::collections::VecDeque;

/// Why a schedule cannot produce slots.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The stored cron expression or time zone no longer parses.
    #[error(transparent)]
    Cron(#[from] CronError),
    /// An interval or minimum interval of zero would schedule a hot loop.
    #[error("interval must be greater than zero")]
    ZeroInterval,
    /// Instant arithmetic overflowed chrono's range (hundreds of millennia away).
    #[error("the next slot is beyond the supported range of instants")]
    OutOfRange,
}

/// Upper bound on the slots [`due_slots`] returns for `catchUp: all`, whatever
/// `catchUpLimit` says, so a huge limit cannot allocate or run without bound.
pub const MAX_CATCH_UP_SLOTS: u32 = 10_000;

/// The first slot of a new (or resumed) schedule, evaluated at `now`.
///
/// - `once` → `at`, even when it is already past (the CLI rejects a past `--at`;
///   a stored past slot is simply due).
/// - `interval` → `now + every`: the first slot is one period after creation, like
///   a timer, so creating a loop never runs it immediately.
/// - `cron` → the first match strictly after `now`.
/// - `dynamic` → `now + minInterval`: like an interval, creating a loop never runs it
///   immediately; afterwards `minInterval` after each finish.
///
/// `Ok(None)` only for a cron expression with no match before croner's horizon.
pub fn initial_next_run(
    schedule: &Schedule,
    now: Instant,
) -> Result<Option<Instant>, ScheduleError> {
    match schedule {
        Schedule::Once { at } => Ok(Some(*at)),
        Schedule::Interval { every_ms, .. } => add(now, period(*every_ms)?).map(Some),
        Schedule::Cron {
            expression,
            timezone,
        } => Ok(CronSchedule::parse(expression, timezone)?.next_after(now)),
        Schedule::Dynamic { min_interval_ms } => add(now, period(*min_interval_ms)?).map(Some),
    }
}

/// The slot after `slot` once its run finished at `finished_at`; `None` for `once`.
///
/// - `interval fixed_rate` → `slot + every`, advanced by whole periods until it is
///   strictly after `finished_at` (phase-aligned to `slot`, no catch-up burst).
/// - `interval fixed_delay` → `finished_at + every`.
/// - `cron` → the first match strictly after `max(slot, finished_at)`.
/// - `dynamic` → `finished_at + minInterval`.
pub fn next_after_finish(
    schedule: &Schedule,
    slot: Instant,
    finished_at: Instant,
) -> Result<Option<Instant>, ScheduleError> {
    match schedule {
        Schedule::Once { .. } => Ok(None),
        Schedule::Interval {
            every_ms,
            anchor: Anchor::FixedRate,
        } => fixed_rate_after(slot, *every_ms, finished_at).map(Some),
        Schedule::Interval {
            every_ms,
            anchor: Anchor::FixedDelay,
        } => add(finished_at, period(*every_ms)?).map(Some),
        Schedule::Cron {
            expression,
            timezone,
        } => Ok(CronSchedule::parse(expression, timezone)?.next_after(slot.max(finished_at))),
        Schedule::Dynamic { min_interval_ms } => {
            add(finished_at, period(*min_interval_ms)?).map(Some)
        }
    }
}

/// The slots of `lp` due at `now`, in the order they must run.
///
/// Empty unless the loop is `active` and its `next_run_at` is at or before `now`.
/// A pending retry comes first and alone: `[retry_scheduled_for]`. Otherwise, by the
/// loop's catch-up policy:
///
/// - `none` → `[next_run_at]`.
/// - `latest` → the newest *due* slot on the schedule's sequence from `next_run_at`
///   (missed slots coalesce into it). `once` and `dynamic` have no sequence:
///   `[next_run_at]`.
/// - `all` → the slots from `next_run_at` to the newest due one, oldest first. When
///   more than `catch_up_limit` were missed, the **most recent** `catch_up_limit` are
///   kept: the oldest ones are the stalest, and running them first would only delay
///   the slots that still matter. A limit of 0 counts as 1 (a due loop always runs
///   something) and limits above [`MAX_CATCH_UP_SLOTS`] are capped. `once` and
///   `dynamic` are never backfilled: `[next_run_at]`.
///
/// A slot is due once its instant plus its jitter ([`slot_is_due`]) has passed; without
/// jitter that is its instant. `next_run_at` counts as due (the loop was found due for
/// it). So catch-up means the same with and without jitter: the result at `now` is the
/// result without jitter at the newest due slot, and a slot whose own delay has not
/// passed yet is not missed, it is next ([`next_slot_after_due`], which the claim
/// advances the loop to).
///
/// Interval slots (either anchor) are the grid `next_run_at + k·every`, computed
/// arithmetically; cron slots walk the expression for at most `catch_up_limit`
/// steps and otherwise search backwards from `now`, so the cost never depends on
/// how long the scheduler was down.
pub fn due_slots(lp: &Loop, now: Instant) -> Result<Vec<Instant>, ScheduleError> {
    if lp.status != LoopStatus::Active {
        return Ok(Vec::new());
    }
    let Some(next) = lp.next_run_at.filter(|next| *next <= now) else {
        return Ok(Vec::new());
    };
    if let Some(retry) = lp.retry_scheduled_for {
        return Ok(vec![retry]);
    }
    Ok(match lp.catch_up {
        CatchUp::None => vec![next],
        CatchUp::Latest => vec![newest_due_slot(lp, next, now)?],
        CatchUp::All => {
            let limit = lp.catch_up_limit.clamp(1, MAX_CATCH_UP_SLOTS) as usize;
            let newest = newest_due_slot(lp, next, now)?;
            missed_slots(&lp.schedule, next, newest, limit)?
        }
    })
}

/// Whether `slot` of `lp` is due at `now`: its instant plus its jitter
/// ([`jitter_delay`]) is at or before `now`.
pub fn slot_is_due(lp: &Loop, slot: Instant, now: Instant) -> bool {
    let delay = i64::try_from(jitter_delay(&lp.id, slot, lp.jitter_ms))
        .ok()
        .and_then(TimeDelta::try_milliseconds);
    delay
        .and_then(|delay| slot.checked_add_signed(delay))
        .is_some_and(|due| due <= now)
}

/// The slot a loop moves to once it claimed `slot` at `now`: the slot after the newest
/// slot due at `now` on the sequence from `slot` (itself, when no later one is due), so
/// the slots due are behind it and the first whose jitter has not passed yet is not
/// skipped. Without jitter that is the first slot strictly after `now` — for fixed-rate
/// intervals phase-aligned to `slot`. The other schedules have no sequence to skip
/// along: [`next_after_finish`] as if the run finished at `now`.
pub fn next_slot_after_due(
    lp: &Loop,
    slot: Instant,
    now: Instant,
) -> Result<Option<Instant>, ScheduleError> {
    match &lp.schedule {
        Schedule::Interval {
            every_ms,
            anchor: Anchor::FixedRate,
        } => {
            let every = period(*every_ms)?.num_milliseconds();
            grid_point(newest_due_slot(lp, slot, now)?, every, 1).map(Some)
        }
        Schedule::Cron {
            expression,
            timezone,
        } => {
            let newest = newest_due_slot(lp, slot, now)?;
            Ok(CronSchedule::parse(expression, timezone)?.next_after(newest))
        }
        other => next_after_finish(other, slot, now),
    }
}

/// The `nextRunAt` a loop should have after the wall clock went backwards, when its
/// stored one lies further ahead than its schedule can explain; `None` when it is fine.
///
/// Slots are wall-clock instants, so after a backwards jump (NTP stepping a clock that
/// ran ahead, a VM restored from a snapshot) a loop advanced under the old clock would
/// sit idle until the old time came back — a day, for a clock that was a day ahead.
/// Normally `nextRunAt` is at most one period away (`every` for intervals, `minInterval`
/// for dynamic loops, `retryDelay` while a retry is pending) and a cron loop's is its
/// next match after now; anything further is moved back to that bound — a fixed-rate
/// interval by whole periods, so it keeps its phase. `once` slots are absolute and
/// never move.
pub fn replan_after_clock_jump(lp: &Loop, now: Instant) -> Result<Option<Instant>, ScheduleError> {
    let Some(next) = lp.next_run_at.filter(|_| lp.status == LoopStatus::Active) else {
        return Ok(None);
    };
    let bound = |ms: u64| -> Result<Option<Instant>, ScheduleError> {
        let bound = add(now, period(ms)?)?;
        Ok((next > bound).then_some(bound))
    };
    if lp.retry_scheduled_for.is_some() {
        return bound(lp.retry_delay_ms.max(1));
    }
    match &lp.schedule {
        Schedule::Once { .. } => Ok(None),
        // Fixed rate keeps its phase: back by whole periods to the first slot of its
        // grid that is at most one period away.
        Schedule::Interval {
            every_ms,
            anchor: Anchor::FixedRate,
        } => {
            let every = period(*every_ms)?;
            let Some(limit) = bound(*every_ms)? else {
                return Ok(None);
            };
            // The fewest whole periods that bring it within reach: ceil(excess / every).
            let excess = (next - limit).num_milliseconds();
            let step = every.num_milliseconds().max(1);
            let periods = excess.saturating_add(step - 1) / step;
            let back = every
                .checked_mul(i32::try_from(periods).unwrap_or(i32::MAX))
                .ok_or(ScheduleError::OutOfRange)?;
            Ok(Some(next - back))
        }
        Schedule::Interval { every_ms, .. } => bound(*every_ms),
        Schedule::Dynamic { min_interval_ms } => bound(*min_interval_ms),
        cron @ Schedule::Cron { .. } => {
            Ok(initial_next_run(cron, now)?.filter(|fresh| *fresh < next))
        }
    }
}

/// The delay of `slot` of loop `id` under a jitter of `jitter_ms`: a number in
/// `[0, jitter_ms)` derived from the loop's id and the slot alone (FNV-1a, a hash that
/// never changes between builds), so every attempt of a slot, before and after a
/// restart, waits the same delay, while the slots of many loops spread out.
pub fn jitter_delay(id: &LoopId, slot: Instant, jitter_ms: u64) -> u64 {
    if jitter_ms <= 1 {
        return 0;
    }
    let hash = fnv1a(
        id.as_str()
            .bytes()
            .chain(slot.timestamp_millis().to_le_bytes()),
    );
    hash % jitter_ms
}

/// The 64-bit FNV-1a hash of `bytes`: stable across builds and restarts, so a value
/// drawn from it (a slot's jitter, a retry's) is the same wherever it is recomputed.
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}

/// When a loop whose next slot (or retry time) is `next_run_at` becomes due: that
/// instant plus the jitter of the slot it is for (`retry_scheduled_for` while a retry
/// is pending, else `next_run_at` itself).
pub fn due_at(
    id: &LoopId,
    next_run_at: Option<Instant>,
    retry_scheduled_for: Option<Instant>,
    jitter_ms: u64,
) -> Option<Instant> {
    let next = next_run_at?;
    let slot = retry_scheduled_for.unwrap_or(next);
    let delay = i64::try_from(jitter_delay(id, slot, jitter_ms)).unwrap_or(0);
    next.checked_add_signed(TimeDelta::milliseconds(delay))
        .or(Some(next))
}

/// Whether `lp` is past its `expiresAt` at `now`.
pub fn is_expired(lp: &Loop, now: Instant) -> bool {
    lp.expires_at.is_some_and(|e| e <= now)
}

/// Where a loop goes after one of its runs ended: the fields the store writes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopAdvanceDecision {
    /// `active`, or `stopped` once a schedule has no slot left (`once`).
    pub status: LoopStatus,
    /// The next instant the loop is due (a retry or the next slot).
    pub next_run_at: Option<Instant>,
    /// The slot being retried at `next_run_at`, if the next run is a retry.
    pub retry_scheduled_for: Option<Instant>,
}

/// Applies the retry rules (README, "Scheduling contract": retries, `once` loops,
/// expiry) to `lp` after a run of slot
/// `run_scheduled_for` (attempt `attempt`, 1-based) that finished at `finished_at`.
///
/// In order:
/// 1. A loop that is no longer `active` (paused, stopped or expired meanwhile), or
///    whose pending retry is for another slot, is left unchanged: the decision
///    repeats its current fields. (This run's slot is not the one the loop waits on.)
/// 2. Failure with attempts left (`attempt < max_attempts`) → retry the same slot
///    `retryDelay` after the finish.
/// 3. `deferred_retry`, an older failed slot that still has attempts (the caller
///    looks it up in the store), is retried `retryDelay` after the finish, before
///    the schedule moves on. Ignored when it is this run's own slot.
/// 4. Otherwise the next slot from [`next_after_finish`]; a schedule without one
///    (`once`) leaves the loop `stopped` with no `next_run_at`.
///
/// Call it only for runs that claimed a slot of the loop, not for `ad_hoc` runs,
/// which never move the schedule.
pub fn advance_after_run(
    lp: &Loop,
    run_scheduled_for: Instant,
    attempt: u32,
    succeeded: bool,
    finished_at: Instant,
    deferred_retry: Option<Instant>,
) -> Result<LoopAdvanceDecision, ScheduleError> {
    let waiting_on_other_retry = lp
        .retry_scheduled_for
        .is_some_and(|retry| retry != run_scheduled_for);
    if lp.status != LoopStatus::Active || waiting_on_other_retry {
        return Ok(LoopAdvanceDecision {
            status: lp.status,
            next_run_at: lp.next_run_at,
            retry_scheduled_for: lp.retry_scheduled_for,
        });
    }
    let retry = |slot: Instant| -> Result<LoopAdvanceDecision, ScheduleError> {
        let delay = i64::try_from(lp.retry_delay_ms)
            .ok()
            .and_then(TimeDelta::try_milliseconds)
            .ok_or(ScheduleError::OutOfRange)?;
        Ok(LoopAdvanceDecision {
            status: LoopStatus::Active,
            next_run_at: Some(add(finished_at, delay)?),
            retry_scheduled_for: Some(slot),
        })
    };
    if !succeeded && attempt < lp.max_attempts {
        return retry(run_scheduled_for);
    }
    if let Some(older) = deferred_retry.filter(|older| *older != run_scheduled_for) {
        return retry(older);
    }
    Ok(
        match next_after_finish(&lp.schedule, run_scheduled_for, finished_at)? {
            Some(next) => LoopAdvanceDecision {
                status: LoopStatus::Active,
                next_run_at: Some(next),
                retry_scheduled_for: None,
            },
            None => LoopAdvanceDecision {
                status: LoopStatus::Stopped,
                next_run_at: None,
                retry_scheduled_for: None,
            },
        },
    )
}

/// A schedule period in milliseconds as a duration; zero is an error, not a hot loop.
fn period(ms: u64) -> Result<TimeDelta, ScheduleError> {
    if ms == 0 {
        return Err(ScheduleError::ZeroInterval);
    }
    i64::try_from(ms)
        .ok()
        .and_then(TimeDelta::try_milliseconds)
        .ok_or(ScheduleError::OutOfRange)
}

fn add(t: Instant, d: TimeDelta) -> Result<Instant, ScheduleError> {
    t.checked_add_signed(d).ok_or(ScheduleError::OutOfRange)
}

/// `origin + k·every` for `k` whole periods; `k·every` must not overflow.
fn grid_point(origin: Instant, every_ms: i64, k: i64) -> Result<Instant, ScheduleError> {
    let offset = every_ms
        .checked_mul(k)
        .and_then(TimeDelta::try_milliseconds)
        .ok_or(ScheduleError::OutOfRange)?;
    add(origin, offset)
}

/// Whole periods of `every_ms` from `origin` to `at` (`at >= origin`), rounded down.
fn periods_between(origin: Instant, at: Instant, every_ms: i64) -> i64 {
    // Truncating the sub-millisecond remainder is safe: it only ever rounds down,
    // and grid points are whole milliseconds apart.
    (at - origin).num_milliseconds().max(0) / every_ms
}

/// The first point of the grid `slot + k·every` (k ≥ 1) strictly after `after`.
fn fixed_rate_after(
    slot: Instant,
    every_ms: u64,
    after: Instant,
) -> Result<Instant, ScheduleError> {
    let every = period(every_ms)?.num_milliseconds();
    let k = if after < slot {
        1
    } else {
        periods_between(slot, after, every) + 1
    };
    grid_point(slot, every, k)
}

/// Upper bound on the slots [`newest_due_slot`] looks at backwards from `now` for one
/// whose jitter has passed. Slots older than the jitter are always due, so only a jitter
/// of more than this many periods (a stored row, never a validated definition) reaches it.
const MAX_JITTER_LOOKBACK: i64 = 10_000;

/// The newest slot due at `now` ([`slot_is_due`]) on the sequence that starts at `next`;
/// `next` itself when no later one is, or the schedule has no sequence.
fn newest_due_slot(lp: &Loop, next: Instant, now: Instant) -> Result<Instant, ScheduleError> {
    match &lp.schedule {
        Schedule::Interval { every_ms, .. } => {
            let every = period(*every_ms)?.num_milliseconds();
            let last = periods_between(next, now, every);
            // Slots a whole jitter old are due: at most `jitter / every + 1` are not.
            let undue = i64::try_from(lp.jitter_ms / (*every_ms).max(1))
                .unwrap_or(i64::MAX)
                .saturating_add(1)
                .min(MAX_JITTER_LOOKBACK);
            let oldest = last.saturating_sub(undue).max(0);
            for k in (oldest + 1..=last).rev() {
                let slot = grid_point(next, every, k)?;
                if slot_is_due(lp, slot, now) {
                    return Ok(slot);
                }
            }
            grid_point(next, every, oldest)
        }
        Schedule::Cron {
            expression,
            timezone,
        } => {
            let cron = CronSchedule::parse(expression, timezone)?;
            // Usually only `next` is due; one step tells, before searching backwards.
            if cron.next_after(next).is_none_or(|after| after > now) {
                return Ok(next);
            }
            let mut at = now;
            for _ in 0..MAX_JITTER_LOOKBACK {
                match cron.last_at_or_before(at) {
                    Some(slot) if slot > next => {
                        if slot_is_due(lp, slot, now) {
                            return Ok(slot);
                        }
                        match slot.checked_sub_signed(TimeDelta::nanoseconds(1)) {
                            Some(before) => at = before,
                            None => break,
                        }
                    }
                    _ => break,
                }
            }
            Ok(next)
        }
        Schedule::Once { .. } | Schedule::Dynamic { .. } => Ok(next),
    }
}

/// The most recent `limit` slots from `next` to `now`, oldest first (`now` is the newest
/// due slot: [`due_slots`] lists no slot that is not due).
fn missed_slots(
    schedule: &Schedule,
    next: Instant,
    now: Instant,
    limit: usize,
) -> Result<Vec<Instant>, ScheduleError> {
    match schedule {
        Schedule::Interval { every_ms, .. } => {
            let every = period(*every_ms)?.num_milliseconds();
            let last = periods_between(next, now, every);
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let first = last.saturating_sub(limit - 1).max(0);
            (first..=last).map(|k| grid_point(next, every, k)).collect()
        }
        Schedule::Cron {
            expression,
            timezone,
        } => {
            let cron = CronSchedule::parse(expression, timezone)?;
            Ok(missed_cron_slots(&cron, next, now, limit))
        }
        Schedule::Once { .. } | Schedule::Dynamic { .. } => Ok(vec![next]),
    }
}

fn missed_cron_slots(
    cron: &CronSchedule,
    next: Instant,
    now: Instant,
    limit: usize,
) -> Vec<Instant> {
    // Walk forward while the slots fit in `limit`; only when more were missed does
    // the answer depend on `now` alone, and then it is found backwards from `now`,
    // so the cost is bounded by `limit` either way.
    let mut slots = Vec::with_capacity(limit.min(64));
    slots.push(next);
    let mut cursor = next;
    loop {
        match cron.next_after(cursor) {
            Some(slot) if slot <= now => {
                if slots.len() == limit {
                    break;
                }
                slots.push(slot);
                cursor = slot;
            }
            _ => return slots,
        }
    }
    let mut recent = VecDeque::with_capacity(limit);
    let mut at = now;
    while recent.len() < limit {
        match cron.last_at_or_before(at) {
            Some(slot) if slot >= next => {
                recent.push_front(slot);
                match slot.checked_sub_signed(TimeDelta::nanoseconds(1)) {
                    Some(before) => at = before,
                    None => break,
                }
            }
            _ => break,
        }
    }
    recent.into()
}

/// Upper bound on the slots [`window_slots`] lists (cron matches): a five-field cron
/// expression matches at most once a minute, 1,500 times in a day with a repeated hour,
/// so the bound only guarantees termination for longer windows.
pub const MAX_WINDOW_SLOTS: usize = 100_000;

/// The slots a loop's schedule had in the window `[from, to]` (inclusive), as far as
/// its current definition tells — what `loops health` compares with the run rows to
/// count missed slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowSlots {
    /// The points `anchor + k·every_ms` (any integer `k`) inside the window: `count` of
    /// them. A fixed-rate interval keeps one phase, so its grid is exact.
    Grid {
        anchor: Instant,
        every_ms: u64,
        count: u64,
    },
    /// The slots themselves, ascending (cron matches, a `once` slot).
    List(Vec<Instant>),
}

impl WindowSlots {
    /// How many slots the window holds.
    pub fn len(&self) -> u64 {
        match self {
            WindowSlots::Grid { count, .. } => *count,
            WindowSlots::List(slots) => slots.len() as u64,
        }
    }

    /// Whether the window holds no slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `slot` is one of the window's slots.
    pub fn contains(&self, slot: Instant) -> bool {
        match self {
            WindowSlots::Grid {
                anchor, every_ms, ..
            } => {
                let every = i64::try_from(*every_ms).unwrap_or(i64::MAX).max(1);
                (slot - *anchor).num_milliseconds().rem_euclid(every) == 0
            }
            WindowSlots::List(slots) => slots.binary_search(&slot).is_ok(),
        }
    }
}

/// The slots `lp`'s schedule had in `[from, to]`:
///
/// - `once` → its instant, when inside the window.
/// - fixed-rate `interval` → the grid through its phase (the pending retry slot, else
///   `nextRunAt`); none when it has neither (it has no slot left).
/// - `cron` → the matches inside the window (at most [`MAX_WINDOW_SLOTS`]).
/// - fixed-delay `interval` and `dynamic` → their slots depend on when each run
///   finished, so only the overdue ones are known: `nextRunAt` and every period after
///   it inside the window.
pub fn window_slots(lp: &Loop, from: Instant, to: Instant) -> Result<WindowSlots, ScheduleError> {
    if to < from {
        return Ok(WindowSlots::List(Vec::new()));
    }
    let grid =
        |anchor: Instant, every_ms: u64, from: Instant| -> Result<WindowSlots, ScheduleError> {
            let every = period(every_ms)?.num_milliseconds();
            if to < from {
                return Ok(WindowSlots::List(Vec::new()));
            }
            // k·every from the anchor: the first point at or after `from`, the last at or
            // before `to`.
            let first = -(anchor - from).num_milliseconds().div_euclid(every);
            let last = (to - anchor).num_milliseconds().div_euclid(every);
            let count = u64::try_from(last - first + 1).unwrap_or(0);
            Ok(WindowSlots::Grid {
                anchor,
                every_ms,
                count,
            })
        };
    match &lp.schedule {
        Schedule::Once { at } => Ok(WindowSlots::List(
            (from <= *at && *at <= to)
                .then_some(*at)
                .into_iter()
                .collect(),
        )),
        Schedule::Interval {
            every_ms,
            anchor: Anchor::FixedRate,
        } => match lp.retry_scheduled_for.or(lp.next_run_at) {
            Some(anchor) => grid(anchor, *every_ms, from),
            None => Ok(WindowSlots::List(Vec::new())),
        },
        Schedule::Interval { every_ms, .. }
        | Schedule::Dynamic {
            min_interval_ms: every_ms,
        } => match lp.next_run_at {
            Some(next) => grid(next, *every_ms, from.max(next)),
            None => Ok(WindowSlots::List(Vec::new())),
        },
        Schedule::Cron {
            expression,
            timezone,
        } => {
            let cron = CronSchedule::parse(expression, timezone)?;
            let start = from
                .checked_sub_signed(TimeDelta::milliseconds(1))
                .ok_or(ScheduleError::OutOfRange)?;
            Ok(WindowSlots::List(
                cron.iter_after(start)
                    .take_while(|slot| *slot <= to)
                    .take(MAX_WINDOW_SLOTS)
                    .collect(),
            ))
        }
    }
}

/// The schedule's period around `now`: the interval, the minimum interval, or the gap
/// between the cron matches around `now` (the last two at or before it, else the next
/// two). `None` for `once` schedules, which have no period.
pub fn period_near(schedule: &Schedule, now: Instant) -> Result<Option<TimeDelta>, ScheduleError> {
    match schedule {
        Schedule::Once { .. } => Ok(None),
        Schedule::Interval { every_ms, .. } => period(*every_ms).map(Some),
        Schedule::Dynamic { min_interval_ms } => period(*min_interval_ms).map(Some),
        Schedule::Cron {
            expression,
            timezone,
        } => {
            let cron = CronSchedule::parse(expression, timezone)?;
            let before = |t: Instant| {
                t.checked_sub_signed(TimeDelta::milliseconds(1))
                    .and_then(|t| cron.last_at_or_before(t))
            };
            let pair = match cron.last_at_or_before(now) {
                Some(last) => before(last).map(|prev| (prev, last)),
                None => cron
                    .next_after(now)
                    .and_then(|a| cron.next_after(a).map(|b| (a, b))),
            };
            Ok(pair.map(|(a, b)| b - a))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CommandTarget, LoopId, Overlap, Target};
    use std::time::Instant as Clock;

    fn t(text: &str) -> Instant {
        text.parse().unwrap()
    }

    fn every(ms: u64, anchor: Anchor) -> Schedule {
        Schedule::Interval {
            every_ms: ms,
            anchor,
        }
    }

    fn cron(expression: &str, timezone: &str) -> Schedule {
        Schedule::Cron {
            expression: expression.to_owned(),
            timezone: timezone.to_owned(),
        }
    }

    fn test_loop(schedule: Schedule, next_run_at: &str, catch_up: CatchUp) -> Loop {
        let created = t("2025-12-01T00:00:00Z");
        Loop {
            id: LoopId::new("abc123"),
            name: "test".to_owned(),
            description: None,
            status: LoopStatus::Active,
            schedule,
            target: Target::Command(CommandTarget {
                command: "true".to_owned(),
                args: Vec::new(),
                cwd: None,
                shell: false,
                env: Default::default(),
                timeout: None,
                idle_timeout: None,
                account: None,
            }),
            next_run_at: Some(t(next_run_at)),
            retry_scheduled_for: None,
            catch_up,
            catch_up_limit: 10,
            overlap: Overlap::Skip,
            max_attempts: 1,
            retry_delay_ms: 60_000,
            lease_ms: 30 * 60_000,
            expires_at: None,
            jitter_ms: 0,
            due_at: None,
            labels: Vec::new(),
            runs_on: Vec::new(),
            notify: None,
            ops: Default::default(),
            state: Default::default(),
            held_until: None,
            held_reason: None,
            waiting_for: None,
            created_at: created,
            updated_at: created,
        }
    }

    #[test]
    fn initial_next_run_per_schedule() {
        let now = t("2026-01-01T00:00:00Z");
        let cases = [
            (
                Schedule::Once {
                    at: t("2026-02-01T00:00:00Z"),
                },
                Some("2026-02-01T00:00:00Z"),
            ),
            // A past `at` is kept: the slot is simply due.
            (
                Schedule::Once {
                    at: t("2025-06-01T00:00:00Z"),
                },
                Some("2025-06-01T00:00:00Z"),
            ),
            (
                every(90_000, Anchor::FixedRate),
                Some("2026-01-01T00:01:30Z"),
            ),
            (
                every(3_600_000, Anchor::FixedDelay),
                Some("2026-01-01T01:00:00Z"),
            ),
            // Strictly after now, even when now matches.
            (cron("0 0 * * *", "UTC"), Some("2026-01-02T00:00:00Z")),
            (
                cron("30 9 * * *", "Europe/Berlin"),
                Some("2026-01-01T08:30:00Z"),
            ),
            // One minimum interval after creation, like an interval loop.
            (
                Schedule::Dynamic {
                    min_interval_ms: 60_000,
                },
                Some("2026-01-01T00:01:00Z"),
            ),
        ];
        for (schedule, expected) in cases {
            assert_eq!(
                initial_next_run(&schedule, now).unwrap(),
                expected.map(t),
                "{schedule:?}"
            );
        }
    }

    #[test]
    fn next_after_finish_per_schedule() {
        let cases = [
            // (schedule, slot, finished_at, expected)
            (
                Schedule::Once {
                    at: t("2026-01-01T00:00:00Z"),
                },
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:05Z",
                None,
            ),
            // fixed_rate: one period after the slot when the run was quick.
            (
                every(60_000, Anchor::FixedRate),
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:05Z",
                Some("2026-01-01T00:01:00Z"),
            ),
            // A run finishing exactly on the next grid point moves past it.
            (
                every(60_000, Anchor::FixedRate),
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:01:00Z",
                Some("2026-01-01T00:02:00Z"),
            ),
            // A slow run skips the grid points it overran, keeping the phase.
            (
                every(60_000, Anchor::FixedRate),
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:03:30.250Z",
                Some("2026-01-01T00:04:00Z"),
            ),
            // Long downtime: no burst, the next point after the finish.
            (
                every(3_600_000, Anchor::FixedRate),
                "2026-01-01T00:15:00Z",
                "2026-01-08T05:30:00Z",
                Some("2026-01-08T06:15:00Z"),
            ),
            (
                every(1_000, Anchor::FixedRate),
                "2026-01-01T00:00:00.500Z",
                "2026-01-08T00:00:00.200Z",
                Some("2026-01-08T00:00:00.500Z"),
            ),
            // A finish before the slot (clock skew) still yields the next point.
            (
                every(60_000, Anchor::FixedRate),
                "2026-01-01T00:00:00Z",
                "2025-12-31T23:59:59Z",
                Some("2026-01-01T00:01:00Z"),
            ),
            (
                every(60_000, Anchor::FixedDelay),
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:03:30Z",
                Some("2026-01-01T00:04:30Z"),
            ),
            (
                cron("30 9 * * *", "UTC"),
                "2026-01-01T09:30:00Z",
                "2026-01-01T09:45:00Z",
                Some("2026-01-02T09:30:00Z"),
            ),
            // A run that overran several matches does not replay them.
            (
                cron("*/5 * * * *", "UTC"),
                "2026-01-01T09:30:00Z",
                "2026-01-01T09:47:00Z",
                Some("2026-01-01T09:50:00Z"),
            ),
            // A finish before the slot counts from the slot.
            (
                cron("*/5 * * * *", "UTC"),
                "2026-01-01T09:30:00Z",
                "2026-01-01T09:20:00Z",
                Some("2026-01-01T09:35:00Z"),
            ),
            (
                Schedule::Dynamic {
                    min_interval_ms: 60_000,
                },
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:10:00Z",
                Some("2026-01-01T00:11:00Z"),
            ),
        ];
        for (schedule, slot, finished, expected) in cases {
            assert_eq!(
                next_after_finish(&schedule, t(slot), t(finished)).unwrap(),
                expected.map(t),
                "{schedule:?} slot {slot} finished {finished}"
            );
        }
    }

    #[test]
    fn zero_intervals_and_bad_cron_are_errors() {
        let now = t("2026-01-01T00:00:00Z");
        for schedule in [
            every(0, Anchor::FixedRate),
            every(0, Anchor::FixedDelay),
            Schedule::Dynamic { min_interval_ms: 0 },
        ] {
            assert_eq!(
                initial_next_run(&schedule, now),
                Err(ScheduleError::ZeroInterval)
            );
            assert_eq!(
                next_after_finish(&schedule, now, now),
                Err(ScheduleError::ZeroInterval)
            );
        }
        let err = initial_next_run(&cron("61 * * * *", "UTC"), now).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid cron expression \"61 * * * *\": minute value 61 out of range 0-59"
        );
        assert!(matches!(
            initial_next_run(&cron("* * * * *", "Nowhere/City"), now),
            Err(ScheduleError::Cron(CronError::TimeZone(_)))
        ));
    }

    #[test]
    fn nothing_is_due_unless_active_and_past_next_run() {
        let now = t("2026-01-01T12:00:00Z");
        let mut lp = test_loop(
            every(60_000, Anchor::FixedRate),
            "2026-01-01T11:00:00Z",
            CatchUp::All,
        );
        for status in [
            LoopStatus::Paused,
            LoopStatus::Stopped,
            LoopStatus::Expired,
            LoopStatus::Done,
        ] {
            lp.status = status;
            assert_eq!(due_slots(&lp, now).unwrap(), Vec::<Instant>::new());
        }
        lp.status = LoopStatus::Active;
        lp.next_run_at = None;
        assert!(due_slots(&lp, now).unwrap().is_empty());
        lp.next_run_at = Some(t("2026-01-01T12:00:00.001Z"));
        assert!(due_slots(&lp, now).unwrap().is_empty());
        // Exactly at next_run_at it is due.
        lp.next_run_at = Some(now);
        assert_eq!(due_slots(&lp, now).unwrap(), [now]);
    }

    #[test]
    fn a_pending_retry_comes_first_and_alone() {
        let now = t("2026-01-01T12:00:00Z");
        for catch_up in [CatchUp::All, CatchUp::Latest, CatchUp::None] {
            let mut lp = test_loop(
                every(60_000, Anchor::FixedRate),
                "2026-01-01T11:01:00Z",
                catch_up,
            );
            lp.retry_scheduled_for = Some(t("2026-01-01T11:00:00Z"));
            assert_eq!(due_slots(&lp, now).unwrap(), [t("2026-01-01T11:00:00Z")]);
            // Not before the retry delay has passed.
            lp.next_run_at = Some(t("2026-01-01T12:01:00Z"));
            assert!(due_slots(&lp, now).unwrap().is_empty());
        }
    }

    #[test]
    fn catch_up_policies() {
        let now = t("2026-01-01T12:00:30Z");
        let hourly = every(3_600_000, Anchor::FixedRate);
        let cases: Vec<(Schedule, CatchUp, u32, &str, Vec<&str>)> = vec![
            (
                hourly.clone(),
                CatchUp::None,
                10,
                "2026-01-01T08:00:00Z",
                vec!["2026-01-01T08:00:00Z"],
            ),
            (
                hourly.clone(),
                CatchUp::Latest,
                10,
                "2026-01-01T08:00:00Z",
                vec!["2026-01-01T12:00:00Z"],
            ),
            (
                hourly.clone(),
                CatchUp::All,
                10,
                "2026-01-01T08:00:00Z",
                vec![
                    "2026-01-01T08:00:00Z",
                    "2026-01-01T09:00:00Z",
                    "2026-01-01T10:00:00Z",
                    "2026-01-01T11:00:00Z",
                    "2026-01-01T12:00:00Z",
                ],
            ),
            // More missed than the limit: the most recent ones, oldest first.
            (
                hourly.clone(),
                CatchUp::All,
                3,
                "2026-01-01T08:00:00Z",
                vec![
                    "2026-01-01T10:00:00Z",
                    "2026-01-01T11:00:00Z",
                    "2026-01-01T12:00:00Z",
                ],
            ),
            // A limit of zero still runs one slot.
            (
                hourly.clone(),
                CatchUp::All,
                0,
                "2026-01-01T08:00:00Z",
                vec!["2026-01-01T12:00:00Z"],
            ),
            // fixed_delay catches up on the same grid.
            (
                every(3_600_000, Anchor::FixedDelay),
                CatchUp::Latest,
                10,
                "2026-01-01T08:20:00Z",
                vec!["2026-01-01T11:20:00Z"],
            ),
            (
                cron("0 */3 * * *", "UTC"),
                CatchUp::Latest,
                10,
                "2026-01-01T00:00:00Z",
                vec!["2026-01-01T12:00:00Z"],
            ),
            (
                cron("0 */3 * * *", "UTC"),
                CatchUp::All,
                10,
                "2026-01-01T00:00:00Z",
                vec![
                    "2026-01-01T00:00:00Z",
                    "2026-01-01T03:00:00Z",
                    "2026-01-01T06:00:00Z",
                    "2026-01-01T09:00:00Z",
                    "2026-01-01T12:00:00Z",
                ],
            ),
            (
                cron("0 */3 * * *", "UTC"),
                CatchUp::All,
                2,
                "2026-01-01T00:00:00Z",
                vec!["2026-01-01T09:00:00Z", "2026-01-01T12:00:00Z"],
            ),
            // Exactly `limit` missed: all of them, via the forward walk.
            (
                cron("0 */3 * * *", "UTC"),
                CatchUp::All,
                5,
                "2026-01-01T00:00:00Z",
                vec![
                    "2026-01-01T00:00:00Z",
                    "2026-01-01T03:00:00Z",
                    "2026-01-01T06:00:00Z",
                    "2026-01-01T09:00:00Z",
                    "2026-01-01T12:00:00Z",
                ],
            ),
            // Only the persisted slot is due: every policy runs just it.
            (
                cron("0 */3 * * *", "UTC"),
                CatchUp::Latest,
                10,
                "2026-01-01T12:00:00Z",
                vec!["2026-01-01T12:00:00Z"],
            ),
            (
                cron("0 */3 * * *", "UTC"),
                CatchUp::All,
                10,
                "2026-01-01T12:00:00Z",
                vec!["2026-01-01T12:00:00Z"],
            ),
            // once and dynamic are never backfilled.
            (
                Schedule::Once {
                    at: t("2026-01-01T01:00:00Z"),
                },
                CatchUp::All,
                10,
                "2026-01-01T01:00:00Z",
                vec!["2026-01-01T01:00:00Z"],
            ),
            (
                Schedule::Dynamic {
                    min_interval_ms: 60_000,
                },
                CatchUp::Latest,
                10,
                "2026-01-01T01:00:00Z",
                vec!["2026-01-01T01:00:00Z"],
            ),
        ];
        for (schedule, catch_up, limit, next, expected) in cases {
            let mut lp = test_loop(schedule, next, catch_up);
            lp.catch_up_limit = limit;
            let expected: Vec<Instant> = expected.into_iter().map(t).collect();
            assert_eq!(
                due_slots(&lp, now).unwrap(),
                expected,
                "{:?} {catch_up} limit {limit} next {next}",
                lp.schedule
            );
        }
    }

    #[test]
    fn a_week_of_downtime_is_cheap() {
        let now = t("2026-01-08T00:00:00.250Z");
        let clock = Clock::now();
        // 1-second interval: ~604,800 missed slots, computed arithmetically.
        let mut lp = test_loop(
            every(1_000, Anchor::FixedRate),
            "2026-01-01T00:00:00.500Z",
            CatchUp::Latest,
        );
        assert_eq!(
            due_slots(&lp, now).unwrap(),
            [t("2026-01-07T23:59:59.500Z")]
        );
        lp.catch_up = CatchUp::All;
        lp.catch_up_limit = 3;
        assert_eq!(
            due_slots(&lp, now).unwrap(),
            [
                t("2026-01-07T23:59:57.500Z"),
                t("2026-01-07T23:59:58.500Z"),
                t("2026-01-07T23:59:59.500Z"),
            ]
        );
        // Every-minute cron: ~10,000 missed slots, found backwards from now.
        let mut lp = test_loop(
            cron("* * * * *", "America/New_York"),
            "2026-01-01T00:00:00Z",
            CatchUp::Latest,
        );
        assert_eq!(due_slots(&lp, now).unwrap(), [t("2026-01-08T00:00:00Z")]);
        lp.catch_up = CatchUp::All;
        assert_eq!(
            due_slots(&lp, now).unwrap(),
            (0..10)
                .rev()
                .map(|i| t("2026-01-08T00:00:00Z") - TimeDelta::minutes(i))
                .collect::<Vec<_>>()
        );
        // Generous bound for debug builds on a busy machine; the point is that
        // nothing walks 600,000 slots.
        assert!(clock.elapsed().as_millis() < 500, "{:?}", clock.elapsed());
    }

    #[test]
    fn catch_up_latest_across_a_dst_change() {
        // A fixed-hour job whose 02:30 was skipped ran at 03:00 EDT: that is the slot.
        let lp = test_loop(
            cron("30 2 * * *", "America/New_York"),
            "2026-03-06T07:30:00Z",
            CatchUp::All,
        );
        assert_eq!(
            due_slots(&lp, t("2026-03-08T12:00:00Z")).unwrap(),
            [
                t("2026-03-06T07:30:00Z"),
                t("2026-03-07T07:30:00Z"),
                t("2026-03-08T07:00:00Z"),
            ]
        );
    }

    fn decision(
        status: LoopStatus,
        next: Option<&str>,
        retry: Option<&str>,
    ) -> LoopAdvanceDecision {
        LoopAdvanceDecision {
            status,
            next_run_at: next.map(t),
            retry_scheduled_for: retry.map(t),
        }
    }

    #[test]
    fn advance_after_run_table() {
        use LoopStatus::{Active, Paused, Stopped};
        let slot = "2026-01-01T09:00:00Z";
        let finished = "2026-01-01T09:00:10Z";
        let hourly = every(3_600_000, Anchor::FixedRate);
        let once = Schedule::Once { at: t(slot) };
        #[derive(Clone)]
        struct Case {
            name: &'static str,
            schedule: Schedule,
            status: LoopStatus,
            max_attempts: u32,
            pending_retry: Option<&'static str>,
            attempt: u32,
            succeeded: bool,
            finished: &'static str,
            deferred: Option<&'static str>,
            expected: LoopAdvanceDecision,
        }
        let base = Case {
            name: "",
            schedule: hourly.clone(),
            status: Active,
            max_attempts: 3,
            pending_retry: None,
            attempt: 1,
            succeeded: true,
            finished,
            deferred: None,
            expected: decision(Active, None, None),
        };
        let cases = [
            Case {
                name: "success moves to the next slot",
                expected: decision(Active, Some("2026-01-01T10:00:00Z"), None),
                ..base.clone()
            },
            Case {
                name: "failure with attempts left retries the slot after retryDelay",
                succeeded: false,
                expected: decision(Active, Some("2026-01-01T09:01:10Z"), Some(slot)),
                ..base.clone()
            },
            Case {
                name: "a retry attempt that fails again retries again",
                pending_retry: Some(slot),
                attempt: 2,
                succeeded: false,
                expected: decision(Active, Some("2026-01-01T09:01:10Z"), Some(slot)),
                ..base.clone()
            },
            Case {
                name: "the last attempt failing moves on",
                pending_retry: Some(slot),
                attempt: 3,
                succeeded: false,
                expected: decision(Active, Some("2026-01-01T10:00:00Z"), None),
                ..base.clone()
            },
            Case {
                name: "a successful retry clears the retry",
                pending_retry: Some(slot),
                attempt: 2,
                expected: decision(Active, Some("2026-01-01T10:00:00Z"), None),
                ..base.clone()
            },
            Case {
                name: "an older failed slot with attempts is retried first",
                attempt: 3,
                succeeded: false,
                deferred: Some("2026-01-01T08:00:00Z"),
                expected: decision(
                    Active,
                    Some("2026-01-01T09:01:10Z"),
                    Some("2026-01-01T08:00:00Z"),
                ),
                ..base.clone()
            },
            Case {
                name: "also after a success",
                deferred: Some("2026-01-01T08:00:00Z"),
                expected: decision(
                    Active,
                    Some("2026-01-01T09:01:10Z"),
                    Some("2026-01-01T08:00:00Z"),
                ),
                ..base.clone()
            },
            Case {
                name: "a deferred retry of this very slot is ignored",
                attempt: 3,
                succeeded: false,
                deferred: Some(slot),
                expected: decision(Active, Some("2026-01-01T10:00:00Z"), None),
                ..base.clone()
            },
            Case {
                name: "fixed_rate after long downtime stays on the grid",
                finished: "2026-01-05T13:30:00Z",
                expected: decision(Active, Some("2026-01-05T14:00:00Z"), None),
                ..base.clone()
            },
            Case {
                name: "once stops after its slot succeeds",
                schedule: once.clone(),
                expected: decision(Stopped, None, None),
                ..base.clone()
            },
            Case {
                name: "once stops after its last attempt fails",
                schedule: once.clone(),
                attempt: 3,
                succeeded: false,
                expected: decision(Stopped, None, None),
                ..base.clone()
            },
            Case {
                name: "once retries while attempts are left",
                schedule: once.clone(),
                succeeded: false,
                expected: decision(Active, Some("2026-01-01T09:01:10Z"), Some(slot)),
                ..base.clone()
            },
            Case {
                name: "a paused loop is left as it is",
                status: Paused,
                succeeded: false,
                expected: decision(Paused, Some(slot), None),
                ..base.clone()
            },
            Case {
                name: "a run of another slot does not disturb a pending retry",
                pending_retry: Some("2026-01-01T08:00:00Z"),
                expected: decision(Active, Some(slot), Some("2026-01-01T08:00:00Z")),
                ..base.clone()
            },
            Case {
                name: "cron moves past the finish",
                schedule: cron("*/5 * * * *", "UTC"),
                finished: "2026-01-01T09:12:00Z",
                expected: decision(Active, Some("2026-01-01T09:15:00Z"), None),
                ..base.clone()
            },
            Case {
                name: "max_attempts 1 never retries",
                max_attempts: 1,
                succeeded: false,
                expected: decision(Active, Some("2026-01-01T10:00:00Z"), None),
                ..base.clone()
            },
        ];
        for case in cases {
            let mut lp = test_loop(case.schedule, slot, CatchUp::Latest);
            lp.status = case.status;
            lp.max_attempts = case.max_attempts;
            lp.retry_scheduled_for = case.pending_retry.map(t);
            let got = advance_after_run(
                &lp,
                t(slot),
                case.attempt,
                case.succeeded,
                t(case.finished),
                case.deferred.map(t),
            )
            .unwrap();
            assert_eq!(got, case.expected, "{}", case.name);
        }
    }

    #[test]
    fn is_expired_at_or_after_expires_at() {
        let mut lp = test_loop(
            every(60_000, Anchor::FixedRate),
            "2026-01-01T00:00:00Z",
            CatchUp::Latest,
        );
        assert!(!is_expired(&lp, t("2030-01-01T00:00:00Z")));
        lp.expires_at = Some(t("2026-01-02T00:00:00Z"));
        assert!(!is_expired(&lp, t("2026-01-01T23:59:59Z")));
        assert!(is_expired(&lp, t("2026-01-02T00:00:00Z")));
    }

    #[test]
    fn clock_jump_replan_moves_only_slots_too_far_ahead() {
        let now = t("2026-01-01T12:00:00Z");
        // A day ahead: the clock was a day fast when the loop was advanced.
        let ahead = "2026-01-02T12:00:00Z";
        let lp = test_loop(every(60_000, Anchor::FixedRate), ahead, CatchUp::Latest);
        assert_eq!(
            replan_after_clock_jump(&lp, now).unwrap(),
            Some(t("2026-01-01T12:01:00Z"))
        );
        // Fixed rate keeps its phase (here 250 ms past the minute).
        let lp = test_loop(
            every(60_000, Anchor::FixedRate),
            "2026-01-02T12:00:00.250Z",
            CatchUp::Latest,
        );
        assert_eq!(
            replan_after_clock_jump(&lp, now).unwrap(),
            Some(t("2026-01-01T12:00:00.250Z"))
        );
        // Within one period: untouched.
        let lp = test_loop(
            every(60_000, Anchor::FixedDelay),
            "2026-01-01T12:00:30Z",
            CatchUp::Latest,
        );
        assert_eq!(replan_after_clock_jump(&lp, now).unwrap(), None);
        // Overdue: untouched (catch-up handles it).
        let lp = test_loop(
            every(60_000, Anchor::FixedRate),
            "2026-01-01T11:00:00Z",
            CatchUp::Latest,
        );
        assert_eq!(replan_after_clock_jump(&lp, now).unwrap(), None);
        // Cron: back to its next match after now.
        let lp = test_loop(cron("0 * * * *", "UTC"), ahead, CatchUp::Latest);
        assert_eq!(
            replan_after_clock_jump(&lp, now).unwrap(),
            Some(t("2026-01-01T13:00:00Z"))
        );
        let lp = test_loop(
            cron("0 * * * *", "UTC"),
            "2026-01-01T13:00:00Z",
            CatchUp::Latest,
        );
        assert_eq!(replan_after_clock_jump(&lp, now).unwrap(), None);
        // Dynamic: one minimum interval.
        let lp = test_loop(
            Schedule::Dynamic {
                min_interval_ms: 300_000,
            },
            ahead,
            CatchUp::Latest,
        );
        assert_eq!(
            replan_after_clock_jump(&lp, now).unwrap(),
            Some(t("2026-01-01T12:05:00Z"))
        );
        // A pending retry: one retry delay.
        let mut lp = test_loop(every(3_600_000, Anchor::FixedRate), ahead, CatchUp::Latest);
        lp.retry_scheduled_for = Some(t("2026-01-02T11:00:00Z"));
        lp.retry_delay_ms = 10_000;
        assert_eq!(
            replan_after_clock_jump(&lp, now).unwrap(),
            Some(t("2026-01-01T12:00:10Z"))
        );
        // Once: absolute; paused loops: left alone.
        let lp = test_loop(Schedule::Once { at: t(ahead) }, ahead, CatchUp::Latest);
        assert_eq!(replan_after_clock_jump(&lp, now).unwrap(), None);
        let mut lp = test_loop(every(60_000, Anchor::FixedRate), ahead, CatchUp::Latest);
        lp.status = LoopStatus::Paused;
        assert_eq!(replan_after_clock_jump(&lp, now).unwrap(), None);
    }

    #[test]
    fn window_slots_per_schedule() {
        let (from, to) = (t("2026-01-01T00:00:00Z"), t("2026-01-02T00:00:00Z"));
        // Fixed rate: the grid through nextRunAt (here in the future), both ends in.
        let lp = test_loop(
            every(3_600_000, Anchor::FixedRate),
            "2026-01-05T00:00:00Z",
            CatchUp::Latest,
        );
        let slots = window_slots(&lp, from, to).unwrap();
        assert_eq!(slots.len(), 25);
        assert!(slots.contains(t("2026-01-01T07:00:00Z")));
        assert!(!slots.contains(t("2026-01-01T07:00:00.001Z")));
        // Off-phase: 00:30, 01:30, … 23:30.
        let lp = test_loop(
            every(3_600_000, Anchor::FixedRate),
            "2026-01-03T00:30:00Z",
            CatchUp::Latest,
        );
        assert_eq!(window_slots(&lp, from, to).unwrap().len(), 24);
        // A pending retry's slot is the phase (nextRunAt is the retry instant).
        let mut lp = test_loop(
            every(3_600_000, Anchor::FixedRate),
            "2026-01-01T05:01:07Z",
            CatchUp::Latest,
        );
        lp.retry_scheduled_for = Some(t("2026-01-01T05:00:00Z"));
        let slots = window_slots(&lp, from, to).unwrap();
        assert_eq!(slots.len(), 25);
        assert!(slots.contains(t("2026-01-01T23:00:00Z")));
        // Fixed delay and dynamic: only the overdue slots from nextRunAt on.
        let lp = test_loop(
            every(3_600_000, Anchor::FixedDelay),
            "2026-01-01T20:00:00Z",
            CatchUp::Latest,
        );
        assert_eq!(window_slots(&lp, from, to).unwrap().len(), 5);
        let lp = test_loop(
            Schedule::Dynamic {
                min_interval_ms: 3_600_000,
            },
            "2026-01-03T00:00:00Z",
            CatchUp::Latest,
        );
        assert!(window_slots(&lp, from, to).unwrap().is_empty());
        // Cron: the matches; in a DST zone a day can have 23 of an hourly one.
        let lp = test_loop(
            cron("0 9,17 * * *", "UTC"),
            "2026-01-05T09:00:00Z",
            CatchUp::Latest,
        );
        assert_eq!(
            window_slots(&lp, from, to).unwrap(),
            WindowSlots::List(vec![t("2026-01-01T09:00:00Z"), t("2026-01-01T17:00:00Z")])
        );
        let lp = test_loop(
            cron("30 * * * *", "Europe/Berlin"),
            "2026-04-01T00:30:00Z",
            CatchUp::Latest,
        );
        let spring = window_slots(&lp, t("2026-03-28T23:00:00Z"), t("2026-03-29T22:00:00Z"));
        assert_eq!(spring.unwrap().len(), 23);
        // Once: inside the window or not at all; an empty window has nothing.
        let lp = test_loop(
            Schedule::Once {
                at: t("2026-01-01T12:00:00Z"),
            },
            "2026-01-01T12:00:00Z",
            CatchUp::Latest,
        );
        assert_eq!(window_slots(&lp, from, to).unwrap().len(), 1);
        assert!(window_slots(&lp, to, from).unwrap().is_empty());
    }

    #[test]
    fn period_near_per_schedule() {
        let now = t("2026-01-07T12:00:00Z");
        let hour = TimeDelta::hours(1);
        let lp = |s| test_loop(s, "2026-01-08T00:00:00Z", CatchUp::Latest);
        assert_eq!(
            period_near(&lp(every(3_600_000, Anchor::FixedDelay)).schedule, now).unwrap(),
            Some(hour)
        );
        assert_eq!(
            period_near(&cron("0 9 * * MON", "UTC"), now).unwrap(),
            Some(TimeDelta::days(7))
        );
        assert_eq!(
            period_near(&cron("0 9,17 * * *", "UTC"), now).unwrap(),
            Some(TimeDelta::hours(16))
        );
        assert_eq!(period_near(&Schedule::Once { at: now }, now).unwrap(), None);
    }

    #[test]
    fn jitter_is_stable_per_slot_bounded_and_spread() {
        let id = LoopId::new("0123456789ab");
        let slot = t("2026-01-01T12:00:00Z");
        assert_eq!(jitter_delay(&id, slot, 0), 0);
        assert_eq!(jitter_delay(&id, slot, 1), 0);
        let d = jitter_delay(&id, slot, 60_000);
        assert!(d < 60_000);
        assert_eq!(jitter_delay(&id, slot, 60_000), d, "stable");
        // Fixed forever: a change would move every jittered slot after an upgrade.
        assert_eq!(
            jitter_delay(&LoopId::new("abc"), t("2026-01-01T00:00:00Z"), 1_000_000),
            jitter_delay(&LoopId::new("abc"), t("2026-01-01T00:00:00Z"), 1_000_000)
        );
        let delays: std::collections::BTreeSet<u64> = (0..100)
            .map(|i| jitter_delay(&id, slot + TimeDelta::minutes(i), 60_000))
            .collect();
        assert!(delays.len() > 90, "slots spread out: {}", delays.len());
        let other = jitter_delay(&LoopId::new("ba9876543210"), slot, 60_000);
        assert_ne!(other, d, "loops spread out");
        // due_at: the retry keeps its slot's delay.
        let retry = t("2026-01-01T12:05:00Z");
        assert_eq!(
            due_at(&id, Some(retry), Some(slot), 60_000),
            Some(retry + TimeDelta::milliseconds(d as i64))
        );
        assert_eq!(due_at(&id, None, None, 60_000), None);
        assert_eq!(due_at(&id, Some(slot), None, 0), Some(slot));
    }

    #[test]
    fn with_jitter_a_later_slot_waits_for_its_own_delay() {
        let mut lp = test_loop(
            every(60_000, Anchor::FixedRate),
            "2026-01-01T12:00:00Z",
            CatchUp::All,
        );
        lp.jitter_ms = 59_999;
        let now = t("2026-01-01T12:03:00Z");
        let slots = due_slots(&lp, now).unwrap();
        for slot in &slots {
            let delay = jitter_delay(&lp.id, *slot, lp.jitter_ms) as i64;
            assert!(
                *slot + TimeDelta::milliseconds(delay) <= now || *slot == t("2026-01-01T12:00:00Z")
            );
        }
        assert!(!slots.is_empty());
    }

    /// The slots due at `now` by the rule itself: a slot is due once its own instant plus
    /// its jitter has passed (the persisted `nextRunAt` counts as due: the loop was found
    /// due for it). The newest of them on the hourly grid from `next`.
    fn newest_due_by_hand(lp: &Loop, next: Instant, every_ms: i64, now: Instant) -> Instant {
        let mut newest = next;
        let mut slot = next;
        while slot <= now {
            let delay = jitter_delay(&lp.id, slot, lp.jitter_ms) as i64;
            if slot + TimeDelta::milliseconds(delay) <= now {
                newest = slot;
            }
            slot += TimeDelta::milliseconds(every_ms);
        }
        newest
    }

    /// A loop id whose slot `slot` waits longer than `min_ms` under `jitter_ms`.
    fn id_with_delay_over(slot: Instant, jitter_ms: u64, min_ms: u64) -> LoopId {
        (0..10_000)
            .map(|i| LoopId::new(format!("id{i:04}")))
            .find(|id| jitter_delay(id, slot, jitter_ms) > min_ms)
            .unwrap()
    }

    /// Issue #19 item 9: `--every 1h --jitter 50m`, down for 5 h. The newest missed slot
    /// is 2 minutes old and waits up to 50: catch-up runs the newest slot whose delay
    /// has passed, and the newest one stays next (its own instant), never dropped.
    #[test]
    fn jitter_after_downtime_catches_up_to_the_newest_due_slot_and_keeps_the_rest() {
        let created = t("2026-01-01T00:00:00Z");
        let now = created + TimeDelta::minutes(302);
        let newest = created + TimeDelta::hours(5);
        let jitter = 50 * 60_000;
        let mut lp = test_loop(
            every(3_600_000, Anchor::FixedRate),
            "2026-01-01T01:00:00Z",
            CatchUp::Latest,
        );
        lp.id = id_with_delay_over(newest, jitter, 2 * 60_000);
        lp.jitter_ms = jitter;
        let expected = newest_due_by_hand(&lp, t("2026-01-01T01:00:00Z"), 3_600_000, now);
        assert_eq!(expected, t("2026-01-01T04:00:00Z"), "the 04:00 slot is due");
        assert_eq!(due_slots(&lp, now).unwrap(), [expected], "latest");
        let advance = crate::transitions::on_claim(&lp, expected, crate::RunSource::Scheduled, now)
            .unwrap()
            .unwrap();
        assert_eq!(
            advance.next_run_at,
            Some(newest),
            "the 05:00 slot stays next"
        );

        lp.catch_up = CatchUp::All;
        let all = due_slots(&lp, now).unwrap();
        assert_eq!(
            all,
            (1..=4)
                .map(|h| created + TimeDelta::hours(h))
                .collect::<Vec<_>>(),
            "all: every due slot, oldest first"
        );
        let advance = crate::transitions::on_claim(&lp, expected, crate::RunSource::Scheduled, now)
            .unwrap()
            .unwrap();
        assert_eq!(advance.next_run_at, Some(newest), "all: nothing dropped");

        lp.catch_up = CatchUp::None;
        assert_eq!(due_slots(&lp, now).unwrap(), [t("2026-01-01T01:00:00Z")]);
        let advance = crate::transitions::on_claim(
            &lp,
            t("2026-01-01T01:00:00Z"),
            crate::RunSource::Scheduled,
            now,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            advance.next_run_at,
            Some(newest),
            "none: the slot not yet due stays"
        );
    }

    #[test]
    fn jitter_on_a_cron_schedule_catches_up_to_the_newest_due_slot() {
        let now = t("2026-01-01T05:02:00Z");
        let newest = t("2026-01-01T05:00:00Z");
        let jitter = 50 * 60_000;
        let mut lp = test_loop(
            cron("0 * * * *", "UTC"),
            "2026-01-01T01:00:00Z",
            CatchUp::Latest,
        );
        lp.id = id_with_delay_over(newest, jitter, 2 * 60_000);
        lp.jitter_ms = jitter;
        let expected = newest_due_by_hand(&lp, t("2026-01-01T01:00:00Z"), 3_600_000, now);
        assert_eq!(due_slots(&lp, now).unwrap(), [expected]);
        let advance = crate::transitions::on_claim(&lp, expected, crate::RunSource::Scheduled, now)
            .unwrap()
            .unwrap();
        assert_eq!(advance.next_run_at, Some(newest));
        lp.catch_up = CatchUp::All;
        assert_eq!(due_slots(&lp, now).unwrap().last(), Some(&expected));
        assert_eq!(due_slots(&lp, now).unwrap().len(), 4);
    }

    mod jitter_properties {
        use super::*;
        use crate::transitions::on_claim;
        use crate::RunSource;
        use proptest::prelude::*;

        /// Runs `lp`'s passes at the instants `passes` as the engine does (a loop is
        /// fetched once its `dueAt` passed; its due slots are claimed and it advances),
        /// and returns every slot claimed, in order.
        fn simulate(lp: &mut Loop, passes: impl IntoIterator<Item = Instant>) -> Vec<Instant> {
            let mut claimed = Vec::new();
            for now in passes {
                let due = due_at(&lp.id, lp.next_run_at, None, lp.jitter_ms);
                if due.is_none_or(|due| due > now) {
                    continue;
                }
                let slots = due_slots(lp, now).unwrap();
                let last = *slots.last().unwrap();
                let advance = on_claim(lp, last, RunSource::Scheduled, now)
                    .unwrap()
                    .unwrap();
                lp.next_run_at = advance.next_run_at;
                claimed.extend(slots);
            }
            claimed
        }

        fn base(every_ms: u64, jitter_ms: u64, id: u32, catch_up: CatchUp) -> Loop {
            let mut lp = test_loop(
                every(every_ms, Anchor::FixedRate),
                "2026-01-01T00:00:00Z",
                catch_up,
            );
            lp.id = LoopId::new(format!("loop{id}"));
            lp.jitter_ms = jitter_ms;
            lp.catch_up_limit = MAX_CATCH_UP_SLOTS;
            lp
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]

            /// With any jitter, catch-up means what it means without: at any instant the
            /// due slots are those of the same loop without jitter evaluated at the newest
            /// slot whose delay has passed, and the loop's next slot is the first whose
            /// delay has not.
            #[test]
            fn catch_up_means_the_same_with_and_without_jitter(
                every_ms in 1_000u64..7_200_000,
                jitter_frac in 0.0f64..1.0,
                down_ms in 0u64..40_000_000,
                id in 0u32..1_000_000,
                policy in 0usize..3,
            ) {
                let catch_up = [CatchUp::Latest, CatchUp::All, CatchUp::None][policy];
                let jitter_ms = ((every_ms as f64) * jitter_frac) as u64;
                let lp = base(every_ms, jitter_ms, id, catch_up);
                let next = lp.next_run_at.unwrap();
                let now = next + TimeDelta::milliseconds(down_ms as i64);
                let newest = newest_due_by_hand(&lp, next, every_ms as i64, now);
                let mut plain = lp.clone();
                plain.jitter_ms = 0;
                let slots = due_slots(&lp, now).unwrap();
                let plain_slots = due_slots(&plain, newest).unwrap();
                prop_assert!(
                    slots == plain_slots,
                    "{} slots ending {:?}, without jitter {} ending {:?}",
                    slots.len(), slots.last(), plain_slots.len(), plain_slots.last()
                );
                let last = *slots.last().unwrap();
                let advance = on_claim(&lp, last, RunSource::Scheduled, now).unwrap().unwrap();
                let following = newest + TimeDelta::milliseconds(every_ms as i64);
                prop_assert_eq!(advance.next_run_at, Some(following));
                let delay = jitter_delay(&lp.id, following, jitter_ms) as i64;
                prop_assert!(following + TimeDelta::milliseconds(delay) > now, "next is not due yet");
            }

            /// `all` drops no slot, whatever the jitter and however the passes fall: every
            /// slot of the grid up to the end runs once, in order; `latest` runs each slot
            /// at most once, in order, and the last slot due is run.
            #[test]
            fn no_slot_is_dropped_under_jitter(
                every_ms in 1_000u64..600_000,
                jitter_frac in 0.0f64..1.0,
                gaps in proptest::collection::vec(1u64..3_000_000, 1..40),
                id in 0u32..1_000_000,
            ) {
                let jitter_ms = ((every_ms as f64) * jitter_frac) as u64;
                let mut at = t("2026-01-01T00:00:00Z");
                let passes: Vec<Instant> = gaps
                    .iter()
                    .map(|gap| {
                        at += TimeDelta::milliseconds(*gap as i64);
                        at
                    })
                    .collect();
                let end = *passes.last().unwrap();
                let mut all = base(every_ms, jitter_ms, id, CatchUp::All);
                let first = all.next_run_at.unwrap();
                let claimed = simulate(&mut all, passes.iter().copied());
                let pending = all.next_run_at.unwrap();
                let expected: Vec<Instant> = (0..)
                    .map(|k| first + TimeDelta::milliseconds(k * every_ms as i64))
                    .take_while(|slot| *slot < pending)
                    .collect();
                let gap = claimed.iter().zip(&expected).position(|(a, b)| a != b);
                prop_assert!(
                    claimed.len() == expected.len() && gap.is_none(),
                    "all: every slot before the pending one {}: {} claimed of {}, first gap {:?}",
                    pending, claimed.len(), expected.len(), gap.map(|i| expected[i])
                );
                if let Some(last) = claimed.last() {
                    prop_assert_eq!(*last, newest_due_by_hand(&all, first, every_ms as i64, end));
                }

                let mut latest = base(every_ms, jitter_ms, id, CatchUp::Latest);
                let claimed = simulate(&mut latest, passes.iter().copied());
                prop_assert!(claimed.windows(2).all(|w| w[0] < w[1]), "in order, once");
                if let Some(last) = claimed.last() {
                    prop_assert_eq!(*last, newest_due_by_hand(&latest, first, every_ms as i64, end));
                }
            }
        }
    }
}
