//! Health of a loop at a glance (`loops health`): the facts a store gathers about a
//! loop's runs ([`RunFacts`]) and the rules that turn them into a verdict
//! ([`assess`]). Pure: the caller passes `now` and the facts; the rules are the
//! README's "Health" section, and every threshold is a constant here.
//!
//! The rules, worst first:
//!
//! - **fail** — the loop is parked (paused by the engine because it can no longer be
//!   scheduled); its last [`FAIL_STREAK`] or more attempts failed; or it has not
//!   succeeded for more than [`FAIL_PERIODS`] periods of its schedule (counted from its
//!   last success, else from its creation).
//! - **warn** — its last attempt (or two) failed; some of its last [`RECENT_RUNS`]
//!   runs failed; slots were skipped (a run was still in flight) or missed (no run row
//!   at all) in the last day; its next slot is overdue by more than [`GRACE`] (nothing
//!   is scheduling it); nothing ran for more than [`QUIET_PERIODS`] periods; or, on a
//!   store shared by runners, no live runner advertises every runner label the loop
//!   requires ([`runner_wait`]: it waits, unclaimed).
//! - **ok** otherwise.
//!
//! A loop whose account is held by a usage limit ([`crate::hold`]; `heldUntil` set)
//! warns with a `held until …` reason and nothing else its hold explains: the
//! usage-limit failures, and the slots it missed or is overdue while held.
//!
//! A *missed* slot is one the schedule had in the last day ([`schedule::window_slots`])
//! for which no run row exists, counted from the loop's creation and from its oldest
//! kept run (older rows may have been deleted by retention), up to [`GRACE`] (plus the
//! loop's jitter) before `now` (a slot that just came due is not missed yet).

use crate::failure::FailureClass;
use crate::schedule::{self, ScheduleError};
use crate::transitions::Parked;
use crate::{Instant, Loop, LoopId, LoopStatus, RunStatus};
use chrono::TimeDelta;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Runs the success rate and the recent-failure rule look at.
pub const RECENT_RUNS: usize = 20;
/// Consecutive failed attempts that fail a loop.
pub const FAIL_STREAK: u64 = 3;
/// Periods without a success that fail a loop.
pub const FAIL_PERIODS: i32 = 3;
/// Periods without any run that warn.
pub const QUIET_PERIODS: i32 = 2;
/// How late a slot may be before it counts as missed or overdue.
pub const GRACE: TimeDelta = TimeDelta::minutes(1);
/// How far back missed and skipped slots are counted.
pub const WINDOW: TimeDelta = TimeDelta::days(1);

/// One run row, as far as health looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunBrief {
    pub scheduled_for: Instant,
    pub attempt: u32,
    pub status: RunStatus,
    pub started_at: Option<Instant>,
    pub finished_at: Option<Instant>,
    pub created_at: Instant,
    /// The error of a failed attempt (`failed`, `timed_out`, `abandoned`); the rules
    /// read no other row's, and a store need not fill them in.
    pub error: Option<String>,
    /// A failed attempt's class (filled in with its error).
    pub failure_class: Option<FailureClass>,
}

impl RunBrief {
    /// When the run started (a skipped run: when it was recorded).
    pub fn at(&self) -> Instant {
        self.started_at.unwrap_or(self.created_at)
    }
}

/// What to ask a store about one loop's runs (`Store::run_facts`); [`facts_query`]
/// builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactsQuery {
    pub loop_id: LoopId,
    /// Skipped rows are counted with `scheduledFor` in this range (inclusive).
    pub window: (Instant, Instant),
    /// The slots of the loop's rows are reported with `scheduledFor` in this range …
    pub slot_window: (Instant, Instant),
    /// … counted, when given, as the distinct slots on the grid `anchor + k·every_ms`
    /// (an interval's slots: the store need not return every one); else listed.
    pub grid: Option<(Instant, u64)>,
}

/// The slots of a loop's rows inside [`FactsQuery::slot_window`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotRows {
    /// The distinct slots, ascending.
    Listed(Vec<Instant>),
    /// How many distinct slots lie on the query's grid.
    OnGrid(u64),
}

impl Default for SlotRows {
    fn default() -> Self {
        SlotRows::Listed(Vec::new())
    }
}

/// One of a loop's newest runs, as far as the success rate and the failure rules look
/// at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentRun {
    pub status: RunStatus,
    /// The error of a failed attempt (to tell the row parking records); `None` for the
    /// other statuses.
    pub error: Option<String>,
    /// A failed attempt's class (filled in with its error).
    pub failure_class: Option<FailureClass>,
}

/// What a store knows about one loop's runs, for [`assess`]. A store fills it with a
/// few bounded queries per loop (`Store::run_facts`), never a scan of the history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFacts {
    /// The newest run, in full (the first of `recent`).
    pub newest: Option<RunBrief>,
    /// The newest runs (at most [`RECENT_RUNS`]), newest first: by creation, then (in
    /// the same millisecond) by slot and attempt.
    pub recent: Vec<RecentRun>,
    /// The newest run that succeeded.
    pub last_success: Option<RunBrief>,
    /// Failed attempts (`failed`, `timed_out`, `abandoned`) recorded after
    /// `last_success` — all of the loop's, when it never succeeded.
    pub failures_since_success: u64,
    /// The slots (`scheduledFor`) of the loop's rows inside the slot window.
    pub window_slots: SlotRows,
    /// Rows inside the window recorded `skipped`.
    pub window_skipped: u64,
    /// The oldest slot of any of the loop's rows.
    pub oldest_slot: Option<Instant>,
}

/// The window a store is asked about at `now`: the slots of the last [`WINDOW`].
pub fn window(now: Instant) -> (Instant, Instant) {
    (now - WINDOW, now)
}

/// The question to ask the store about `lp` at `now`: its skipped rows of the last
/// [`WINDOW`], and the slots it had since then (or since its creation) up to
/// [`GRACE`] and its jitter before `now` — counted on its grid for interval and
/// dynamic schedules, listed for the others.
pub fn facts_query(lp: &Loop, now: Instant) -> FactsQuery {
    let (from, _) = window(now);
    // A jittered slot comes due up to `jitterMs` after it.
    let jitter = TimeDelta::milliseconds(i64::try_from(lp.jitter_ms).unwrap_or(i64::MAX));
    let slot_window = (from.max(lp.created_at), now - GRACE - jitter);
    let grid = match schedule::window_slots(lp, slot_window.0, slot_window.1) {
        Ok(schedule::WindowSlots::Grid {
            anchor, every_ms, ..
        }) => Some((anchor, every_ms)),
        _ => None,
    };
    FactsQuery {
        loop_id: lp.id.clone(),
        window: window(now),
        slot_window,
        grid,
    }
}

string_enum!(
    /// How a loop is doing, worst first in declaration order reversed.
    #[derive(PartialOrd, Ord)]
    Verdict {
        Ok = "ok",
        Warn = "warn",
        Fail = "fail",
    }
);

/// One loop's health (JSON: camelCase, as `loops --json health` prints it).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    pub verdict: Verdict,
    /// Why, worst first; empty when `ok`.
    pub reasons: Vec<String>,
    /// The newest run's status.
    pub last_status: Option<RunStatus>,
    /// When the newest run started (or was recorded).
    #[serde(with = "crate::timefmt::option")]
    pub last_run_at: Option<Instant>,
    /// When the newest successful run finished.
    #[serde(with = "crate::timefmt::option")]
    pub last_success_at: Option<Instant>,
    pub consecutive_failures: u64,
    /// The class of the newest run's failure, when the newest run failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure_class: Option<FailureClass>,
    /// Succeeded over finished attempts among the last [`RECENT_RUNS`] runs (skipped
    /// and running rows left out); `None` before the first finished attempt.
    pub success_rate: Option<f64>,
    /// The finished attempts the rate is over.
    pub rated_runs: u32,
    pub missed_slots: u64,
    pub skipped_slots: u64,
    /// The engine parked the loop (see [`Parked`]).
    pub parked: bool,
    /// Why no live runner can take the loop ([`runner_wait`]); `None` when one can, when
    /// it requires no runner labels, or on a store with one daemon.
    pub waiting_for_runner: Option<String>,
    /// The concurrency cap the loop's due slot waits for (`Loop::waiting_for`,
    /// [`crate::caps`]): waiting its turn is no missed slot, nor overdue, nor a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_cap: Option<String>,
}

/// Why a loop that requires the runner labels `runs_on` waits: no live runner (each
/// given by the labels it advertises) has every one of them, so none claims its slots.
/// `None` when one has them or the loop requires none. Runners pick loops by label
/// (`Store::due_loops_on`), so such a loop is not an error to any of them; this is
/// where it shows (`health`, `show`, `doctor`, the dashboard).
pub fn runner_wait<L: AsRef<[String]>>(runs_on: &[String], live: &[L]) -> Option<String> {
    if runs_on.is_empty()
        || live
            .iter()
            .any(|labels| runs_on.iter().all(|l| labels.as_ref().contains(l)))
    {
        return None;
    }
    let wanted = runs_on.join(", ");
    let mut seen: Vec<String> = live
        .iter()
        .map(|labels| match labels.as_ref() {
            [] => "no labels".to_owned(),
            some => some.join(", "),
        })
        .collect();
    seen.sort();
    seen.dedup();
    Some(match seen.as_slice() {
        [] => format!("waiting for a runner with {wanted}: no runner is live"),
        some => format!(
            "waiting for a runner with {wanted}: no live runner advertises {} (live: {})",
            plural(runs_on.len() as u64, "it", "them all"),
            some.join("; ")
        ),
    })
}

/// The reason a loop is parked, when it is: paused, and its newest run is the failed
/// run parking recorded.
pub fn parked(lp: &Loop, facts: &RunFacts) -> Option<Parked> {
    if lp.status != LoopStatus::Paused {
        return None;
    }
    // The circuit breaker keeps its reason on the loop.
    if let Some(reason) = &lp.state.status_reason {
        return Some(Parked::new(reason.clone()));
    }
    let newest = facts.newest.as_ref()?;
    (newest.status == RunStatus::Failed)
        .then(|| newest.error.as_deref().and_then(Parked::from_error))
        .flatten()
}

/// Whether `loops health` lists the loop: active loops, and parked ones (paused by the
/// engine, not by a user).
pub fn is_listed(lp: &Loop, facts: &RunFacts) -> bool {
    lp.status == LoopStatus::Active || parked(lp, facts).is_some()
}

/// Applies the rules (module docs) to `lp` at `now`, on a store with one daemon.
pub fn assess(lp: &Loop, facts: &RunFacts, now: Instant) -> Health {
    assess_with_runners::<Vec<String>>(lp, facts, now, None)
}

/// [`assess`] on a store shared by runners: `live` holds the labels of each live
/// runner (`None`: a store with one daemon, where no loop requires labels).
pub fn assess_with_runners<L: AsRef<[String]>>(
    lp: &Loop,
    facts: &RunFacts,
    now: Instant,
    live: Option<&[L]>,
) -> Health {
    let mut fails = Vec::new();
    let mut warns = Vec::new();
    let newest = facts.newest.as_ref();
    let rated: Vec<&RecentRun> = facts
        .recent
        .iter()
        .filter(|r| r.status == RunStatus::Succeeded || r.status.is_failure())
        // The failed row parking records is not an attempt of the target.
        .filter(|r| {
            r.error
                .as_deref()
                .is_none_or(|e| Parked::from_error(e).is_none())
        })
        .collect();
    let succeeded = rated
        .iter()
        .filter(|r| r.status == RunStatus::Succeeded)
        .count();
    let success_rate = (!rated.is_empty()).then(|| succeeded as f64 / rated.len() as f64);
    let streak = facts.failures_since_success;
    let last_failed = rated.iter().find(|r| r.status.is_failure());
    let last_error = last_failed.and_then(|r| r.error.as_deref()).map(first_line);
    let last_class = newest
        .filter(|r| r.status.is_failure())
        .and_then(|r| r.failure_class);

    let parked = parked(lp, facts);
    if let Some(p) = &parked {
        fails.push(format!("parked: {}", p.reason));
    }
    let held = lp.held_until.filter(|until| *until > now);
    if let Some(until) = held {
        warns.push(format!(
            "held until {}: {}",
            crate::format_instant(&until),
            lp.held_reason.as_deref().unwrap_or("usage limit")
        ));
    }
    let held_failure = held.is_some()
        && last_failed.and_then(|r| r.failure_class) == Some(FailureClass::UsageLimit);
    if parked.is_none() && streak > 0 && !held_failure {
        let what = if streak == 1 {
            "last run failed".to_owned()
        } else {
            format!("last {streak} runs failed")
        };
        let what = match last_failed.and_then(|r| r.failure_class) {
            Some(class) => format!("{what} ({class})"),
            None => what,
        };
        let text = match &last_error {
            Some(e) => format!("{what}: {e}"),
            None => what,
        };
        // Credentials or a prompt too long: another attempt cannot help, so one such
        // failure already needs a person.
        let needs_person = last_class
            .is_some_and(|c| matches!(c, FailureClass::Auth | FailureClass::ContextLength));
        if streak >= FAIL_STREAK || needs_person {
            fails.push(text);
        } else {
            warns.push(text);
        }
    }
    let failed_recent = (rated.len() - succeeded) as u64;
    if failed_recent > streak.min(rated.len() as u64) {
        warns.push(format!(
            "{failed_recent} of the last {} runs failed",
            rated.len()
        ));
    }

    let mut missed = 0;
    let waiting_for_cap = lp.waiting_for.clone().filter(|_| held.is_none());
    if lp.status == LoopStatus::Active && held.is_none() && waiting_for_cap.is_none() {
        match period_rules(lp, facts, now, &mut fails, &mut warns) {
            Ok(m) => missed = m,
            Err(e) => fails.push(format!("schedule: {e}")),
        }
    }
    let waiting_for_runner = live
        .filter(|_| lp.status == LoopStatus::Active)
        .and_then(|live| runner_wait(&lp.runs_on, live));
    if let Some(why) = &waiting_for_runner {
        warns.push(why.clone());
    }
    if facts.window_skipped > 0 {
        warns.push(format!(
            "{} {} skipped in the last day (a run was still in flight)",
            facts.window_skipped,
            plural(facts.window_skipped, "slot", "slots")
        ));
    }

    let verdict = if !fails.is_empty() {
        Verdict::Fail
    } else if !warns.is_empty() {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    fails.extend(warns);
    Health {
        verdict,
        reasons: fails,
        last_status: newest.map(|r| r.status),
        last_run_at: newest.map(RunBrief::at),
        last_success_at: facts
            .last_success
            .as_ref()
            .map(|r| r.finished_at.unwrap_or_else(|| r.at())),
        consecutive_failures: streak,
        last_failure_class: last_class,
        success_rate,
        rated_runs: u32::try_from(rated.len()).unwrap_or(u32::MAX),
        missed_slots: missed,
        skipped_slots: facts.window_skipped,
        parked: parked.is_some(),
        waiting_for_runner,
        waiting_for_cap,
    }
}

/// The rules that need the schedule (an active loop's): missed slots, no success for
/// too many periods, overdue, quiet. Returns the missed count.
fn period_rules(
    lp: &Loop,
    facts: &RunFacts,
    now: Instant,
    fails: &mut Vec<String>,
    warns: &mut Vec<String>,
) -> Result<u64, ScheduleError> {
    // Missed slots: the schedule's slots in the window without any row, from the
    // oldest kept row on (retention may have deleted older ones).
    let (mut from, to) = facts_query(lp, now).slot_window;
    if let Some(oldest) = facts.oldest_slot.filter(|o| *o > from) {
        from = oldest;
    }
    let slots = schedule::window_slots(lp, from, to)?;
    let present = match &facts.window_slots {
        SlotRows::Listed(rows) => rows
            .iter()
            .filter(|s| **s >= from && **s <= to && slots.contains(**s))
            .count() as u64,
        // Counted by the store on this grid; no row lies before the oldest one.
        SlotRows::OnGrid(count) => *count,
    };
    let missed = slots.len().saturating_sub(present);
    if missed > 0 {
        warns.push(format!(
            "{missed} {} missed in the last day",
            plural(missed, "slot", "slots")
        ));
    }

    let overdue = lp.due_at.or(lp.next_run_at).filter(|n| *n + GRACE < now);
    if let Some(next) = overdue {
        warns.push(format!(
            "next slot overdue by {} (is the daemon running?)",
            age_text(now - next)
        ));
    }

    let Some(mut period) = schedule::period_near(&lp.schedule, now)? else {
        return Ok(missed);
    };
    // Where the next slot waits for the run to finish, the spacing includes the run.
    if crate::transitions::next_depends_on_finish(&lp.schedule) {
        if let Some(r) = &facts.last_success {
            if let (Some(start), Some(end)) = (r.started_at, r.finished_at) {
                period += (end - start).max(TimeDelta::zero());
            }
        }
    }
    let since_success = match &facts.last_success {
        Some(r) => now - r.finished_at.unwrap_or_else(|| r.at()),
        None => now - lp.created_at,
    };
    if since_success > period * FAIL_PERIODS + GRACE {
        let what = match facts.last_success {
            Some(_) => "no success",
            None => "never succeeded",
        };
        fails.push(format!(
            "{what} in {} (more than {FAIL_PERIODS} periods of {})",
            age_text(since_success),
            age_text(period)
        ));
    }
    let running = facts
        .newest
        .as_ref()
        .is_some_and(|r| r.status == RunStatus::Running);
    let quiet = now
        - facts
            .newest
            .as_ref()
            .map_or(lp.created_at, |r| r.at().max(r.created_at));
    if !running && overdue.is_none() && quiet > period * QUIET_PERIODS + GRACE {
        warns.push(format!("no run for {}", age_text(quiet)));
    }
    Ok(missed)
}

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// The first line of an error, at most 120 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    match line.char_indices().nth(120) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

/// A rough age: `45s`, `12m`, `3h`, `3h20m`, `2d`, `2d3h`.
pub fn age_text(d: TimeDelta) -> String {
    let secs = d.num_seconds().max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => match (s / 3_600, (s % 3_600) / 60) {
            (h, 0) => format!("{h}h"),
            (h, m) => format!("{h}h{m}m"),
        },
        s => match (s / 86_400, (s % 86_400) / 3_600) {
            (d, 0) => format!("{d}d"),
            (d, h) => format!("{d}d{h}h"),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn t(text: &str) -> Instant {
        text.parse().unwrap()
    }

    const NOW: &str = "2026-03-10T12:00:00Z";

    /// An hourly fixed-rate loop created ten days before [`NOW`], its next slot at
    /// 13:00 (through the serde form, so the test reads like a stored loop).
    fn hourly() -> Loop {
        serde_json::from_value(serde_json::json!({
            "id": "aaaaaaaaaaaa", "name": "hourly", "status": "active",
            "schedule": {"type": "interval", "everyMs": 3_600_000, "anchor": "fixed_rate"},
            "target": {"type": "command", "command": "true"},
            "nextRunAt": "2026-03-10T13:00:00.000Z", "retryScheduledFor": null,
            "catchUp": "latest", "catchUpLimit": 10, "overlap": "skip", "maxAttempts": 1,
            "retryDelayMs": 60000, "leaseMs": 1800000, "expiresAt": null,
            "createdAt": "2026-02-28T12:00:00.000Z", "updatedAt": "2026-03-10T12:00:00.000Z",
        }))
        .unwrap()
    }

    fn run(slot: &str, status: RunStatus) -> RunBrief {
        let at = t(slot) + TimeDelta::seconds(1);
        RunBrief {
            scheduled_for: t(slot),
            attempt: 1,
            status,
            started_at: (status != RunStatus::Skipped).then_some(at),
            finished_at: (status != RunStatus::Running).then_some(at + TimeDelta::seconds(2)),
            created_at: at,
            error: status
                .is_failure()
                .then(|| "exited with status 3\nmore".to_owned()),
            failure_class: None,
        }
    }

    /// A run as `recent` holds it.
    fn brief_of(r: &RunBrief) -> RecentRun {
        RecentRun {
            status: r.status,
            error: r.error.clone(),
            failure_class: r.failure_class,
        }
    }

    /// Sets the newest run (the first of `recent` too).
    fn set_newest(f: &mut RunFacts, r: RunBrief) {
        f.recent[0] = brief_of(&r);
        f.newest = Some(r);
    }

    /// Facts of an hourly loop whose runs (newest first) had these statuses, one per
    /// slot back from 12:00, with every slot of the day present unless `gaps` says.
    fn facts(statuses: &[RunStatus], gaps: &[u32]) -> RunFacts {
        let now = t(NOW);
        let recent: Vec<RunBrief> = statuses
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let slot = now - TimeDelta::hours(i as i64);
                run(&crate::format_instant(&slot), *s)
            })
            .collect();
        let last_success = recent
            .iter()
            .find(|r| r.status == RunStatus::Succeeded)
            .cloned();
        let failures_since_success = recent
            .iter()
            .take_while(|r| r.status != RunStatus::Succeeded)
            .filter(|r| r.status.is_failure())
            .count() as u64;
        let window_slots = SlotRows::Listed(
            (0..=24)
                .rev()
                .filter(|h| !gaps.contains(h))
                .map(|h| now - TimeDelta::hours(i64::from(h)))
                .collect(),
        );
        RunFacts {
            window_skipped: recent
                .iter()
                .filter(|r| r.status == RunStatus::Skipped)
                .count() as u64,
            newest: recent.first().cloned(),
            recent: recent.iter().map(brief_of).collect(),
            last_success,
            failures_since_success,
            window_slots,
            oldest_slot: Some(t("2026-03-01T00:00:00Z")),
        }
    }

    use RunStatus::{Abandoned, Failed, Running, Skipped, Succeeded, TimedOut};

    fn listed(f: &mut RunFacts) -> &mut Vec<Instant> {
        match &mut f.window_slots {
            SlotRows::Listed(v) => v,
            SlotRows::OnGrid(_) => panic!("listed slots expected"),
        }
    }

    #[test]
    fn interval_slots_are_counted_on_their_grid_others_listed() {
        let now = t(NOW);
        let q = facts_query(&hourly(), now);
        assert_eq!(q.window, (now - WINDOW, now));
        assert_eq!(q.slot_window, (now - WINDOW, now - GRACE));
        assert_eq!(q.grid, Some((t("2026-03-10T13:00:00Z"), 3_600_000)));
        // The store's count stands in for the listed slots: 24 of the 24 slots from
        // 12:00 yesterday (exclusive of today's, within the grace) … 11:00 present.
        let mut f = facts(&[Succeeded], &[]);
        f.window_slots = SlotRows::OnGrid(24);
        assert_eq!(assess(&hourly(), &f, now).missed_slots, 0);
        f.window_slots = SlotRows::OnGrid(21);
        assert_eq!(assess(&hourly(), &f, now).missed_slots, 3);
        // Cron slots are listed; a jittered loop's window ends its jitter earlier.
        let mut lp = hourly();
        lp.schedule = crate::Schedule::Cron {
            expression: "0 * * * *".into(),
            timezone: "UTC".into(),
        };
        lp.jitter_ms = 600_000;
        let q = facts_query(&lp, now);
        assert_eq!(q.grid, None);
        assert_eq!(q.slot_window.1, now - GRACE - TimeDelta::minutes(10));
        // A loop created an hour ago is asked about its hour only.
        lp.created_at = now - TimeDelta::hours(1);
        assert_eq!(facts_query(&lp, now).slot_window.0, lp.created_at);
    }

    #[test]
    fn failure_classes_are_named_and_auth_fails_at_once() {
        let lp = hourly();
        let mut failed = run("2026-03-10T11:00:00Z", RunStatus::Failed);
        failed.failure_class = Some(FailureClass::Auth);
        let ok = run("2026-03-10T10:00:00Z", RunStatus::Succeeded);
        let facts = RunFacts {
            newest: Some(failed.clone()),
            recent: vec![brief_of(&failed), brief_of(&ok)],
            last_success: Some(ok),
            failures_since_success: 1,
            ..RunFacts::default()
        };
        let h = assess(&lp, &facts, t(NOW));
        assert_eq!(h.verdict, Verdict::Fail, "{h:?}");
        assert_eq!(h.last_failure_class, Some(FailureClass::Auth));
        assert_eq!(h.reasons[0], "last run failed (auth): exited with status 3");
        // A class another attempt may fix only warns after one failure.
        let mut facts = facts;
        let mut rate = failed;
        rate.failure_class = Some(FailureClass::RateLimit);
        facts.newest = Some(rate.clone());
        facts.recent[0] = brief_of(&rate);
        let h = assess(&lp, &facts, t(NOW));
        assert_eq!(h.verdict, Verdict::Warn, "{h:?}");
        assert_eq!(
            h.reasons[0],
            "last run failed (rate_limit): exited with status 3"
        );
    }

    #[test]
    fn verdicts_by_rule() {
        let now = t(NOW);
        // (case, loop, facts, verdict, reason fragments in order)
        let cases: Vec<(&str, Loop, RunFacts, Verdict, Vec<&str>)> = vec![
            (
                "all good",
                hourly(),
                facts(&[Succeeded; 20], &[]),
                Verdict::Ok,
                vec![],
            ),
            (
                "one failure long ago",
                hourly(),
                facts(&[Succeeded, Succeeded, Failed, Succeeded], &[]),
                Verdict::Warn,
                vec!["1 of the last 4 runs failed"],
            ),
            (
                "last run failed",
                hourly(),
                facts(&[Failed, Succeeded], &[]),
                Verdict::Warn,
                vec!["last run failed: exited with status 3"],
            ),
            (
                "two failures, skipped in between",
                hourly(),
                facts(&[TimedOut, Skipped, Failed, Succeeded], &[]),
                Verdict::Warn,
                vec!["last 2 runs failed", "1 slot skipped in the last day"],
            ),
            (
                "three failures fail",
                hourly(),
                facts(&[Failed, Abandoned, Failed, Succeeded], &[]),
                Verdict::Fail,
                vec!["last 3 runs failed: exited with status 3"],
            ),
            (
                "missed slots",
                hourly(),
                facts(&[Succeeded, Succeeded], &[3, 4]),
                Verdict::Warn,
                vec!["2 slots missed in the last day"],
            ),
            (
                "a running run is not missed or quiet",
                hourly(),
                facts(&[Running, Succeeded], &[]),
                Verdict::Ok,
                vec![],
            ),
        ];
        for (name, lp, facts, verdict, reasons) in cases {
            let h = assess(&lp, &facts, now);
            assert_eq!(h.verdict, verdict, "{name}: {:?}", h.reasons);
            assert_eq!(h.reasons.len(), reasons.len(), "{name}: {:?}", h.reasons);
            for (got, want) in h.reasons.iter().zip(&reasons) {
                assert!(got.starts_with(want), "{name}: {got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn figures_of_a_healthy_and_a_failing_loop() {
        let now = t(NOW);
        let h = assess(
            &hourly(),
            &facts(&[Succeeded, Failed, Succeeded, Skipped], &[]),
            now,
        );
        assert_eq!(h.last_status, Some(Succeeded));
        assert_eq!(h.last_run_at, Some(t("2026-03-10T12:00:01Z")));
        assert_eq!(h.last_success_at, Some(t("2026-03-10T12:00:03Z")));
        assert_eq!(h.rated_runs, 3);
        assert!((h.success_rate.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!((h.skipped_slots, h.missed_slots), (1, 0));
        let h = assess(&hourly(), &RunFacts::default(), now);
        assert_eq!(
            (h.success_rate, h.last_status, h.rated_runs),
            (None, None, 0)
        );
    }

    #[test]
    fn no_success_for_three_periods_fails_and_overdue_warns() {
        let now = t(NOW);
        // Ran and succeeded last at 07:00; the daemon stopped; nextRunAt 08:00.
        let mut lp = hourly();
        lp.next_run_at = Some(t("2026-03-10T08:00:00Z"));
        let mut f = facts(&[Succeeded], &[]);
        set_newest(&mut f, run("2026-03-10T07:00:00Z", Succeeded));
        f.last_success = f.newest.clone();
        listed(&mut f).retain(|s| *s <= t("2026-03-10T07:00:00Z"));
        let h = assess(&lp, &f, now);
        assert_eq!(h.verdict, Verdict::Fail, "{:?}", h.reasons);
        assert_eq!(
            h.reasons,
            [
                "no success in 4h59m (more than 3 periods of 1h)",
                "4 slots missed in the last day",
                "next slot overdue by 4h (is the daemon running?)",
            ]
        );
        // A new loop that never ran yet is fine; one that never succeeded in 3 periods is not.
        let mut lp = hourly();
        lp.created_at = now - TimeDelta::minutes(30);
        assert_eq!(assess(&lp, &RunFacts::default(), now).verdict, Verdict::Ok);
        lp.created_at = now - TimeDelta::hours(4);
        lp.next_run_at = Some(now + TimeDelta::minutes(10));
        let h = assess(&lp, &facts(&[Skipped, Skipped, Skipped], &[]), now);
        assert_eq!(h.verdict, Verdict::Fail);
        assert!(
            h.reasons[0].starts_with("never succeeded in 4h"),
            "{:?}",
            h.reasons
        );
    }

    #[test]
    fn quiet_loops_warn_and_slots_before_creation_or_retention_are_not_missed() {
        let now = t(NOW);
        // Next slot pushed a day ahead: not overdue, but nothing ran for 3 hours.
        let mut lp = hourly();
        lp.next_run_at = Some(t("2026-03-11T09:00:00Z"));
        let mut f = facts(&[Succeeded], &[]);
        set_newest(&mut f, run("2026-03-10T09:00:00Z", Succeeded));
        f.last_success = f.newest.clone();
        listed(&mut f).retain(|s| *s <= t("2026-03-10T09:00:00Z"));
        let h = assess(&lp, &f, now);
        assert!(
            h.reasons.iter().any(|r| r == "no run for 2h59m"),
            "{:?}",
            h.reasons
        );
        // Created at 06:30: only the slots since then count.
        let mut lp = hourly();
        lp.created_at = t("2026-03-10T06:30:00Z");
        let mut f = facts(&[Succeeded], &[]);
        *listed(&mut f) = vec![t("2026-03-10T11:00:00Z"), t("2026-03-10T12:00:00Z")];
        f.oldest_slot = Some(t("2026-03-10T11:00:00Z"));
        // Retention kept rows from 11:00 on: nothing before counts as missed.
        assert_eq!(assess(&lp, &f, now).missed_slots, 0);
        f.oldest_slot = Some(t("2026-03-10T07:00:00Z"));
        assert_eq!(assess(&lp, &f, now).missed_slots, 4);
        // The slot that just came due (within the grace) is not missed yet.
        listed(&mut f).pop();
        assert_eq!(assess(&lp, &f, now).missed_slots, 4);
    }

    #[test]
    fn parked_loops_fail_and_user_paused_ones_are_not_listed() {
        let now = t(NOW);
        let mut lp = hourly();
        lp.status = LoopStatus::Paused;
        let mut f = facts(&[Succeeded], &[]);
        assert!(!is_listed(&lp, &f));
        let mut parked_run = run("2026-03-10T11:00:00Z", Failed);
        parked_run.error = Some(Parked::new("unknown time zone \"Mars/Base\"").message());
        f.recent.insert(0, brief_of(&parked_run));
        f.newest = Some(parked_run);
        assert!(is_listed(&lp, &f));
        let h = assess(&lp, &f, now);
        assert_eq!(h.verdict, Verdict::Fail);
        assert!(h.parked);
        assert_eq!(h.reasons, ["parked: unknown time zone \"Mars/Base\""]);
    }

    #[test]
    fn a_held_loop_warns_with_its_hold_and_nothing_the_hold_explains() {
        let now = t(NOW);
        let mut lp = hourly();
        // Three usage-limit failures and the slots of the last hours missed.
        let mut f = facts(&[Failed, Failed, Failed], &[1, 2, 3]);
        for r in f.recent.iter_mut() {
            r.failure_class = Some(FailureClass::UsageLimit);
        }
        if let Some(n) = f.newest.as_mut() {
            n.failure_class = Some(FailureClass::UsageLimit);
        }
        assert_eq!(
            assess(&lp, &f, now).verdict,
            Verdict::Fail,
            "not held: failing"
        );
        lp.held_until = Some(t("2026-03-10T15:01:00Z"));
        lp.held_reason = Some("Claude usage limit reached.".into());
        let h = assess(&lp, &f, now);
        assert_eq!(h.verdict, Verdict::Warn);
        assert_eq!(
            h.reasons[0],
            "held until 2026-03-10T15:01:00.000Z: Claude usage limit reached."
        );
        assert_eq!(h.missed_slots, 0);
        assert!(
            !h.reasons.iter().any(|r| r.starts_with("last")),
            "{:?}",
            h.reasons
        );
        // Past its end the hold explains nothing.
        assert_eq!(
            assess(&lp, &f, t("2026-03-10T15:02:00Z")).verdict,
            Verdict::Fail
        );
    }

    #[test]
    fn ages_read_roughly() {
        for (secs, text) in [
            (5, "5s"),
            (125, "2m"),
            (3_600, "1h"),
            (12_000, "3h20m"),
            (86_400 * 2 + 7_200, "2d2h"),
        ] {
            assert_eq!(age_text(TimeDelta::seconds(secs)), text);
        }
    }

    /// Issue #19 item 10: a loop that requires `gpu` while only `cpu` runners live
    /// waits, and health says so (warn), at once — not only once its slots are missed.
    #[test]
    fn a_loop_no_live_runner_can_take_warns_and_says_why() {
        let mut lp = hourly();
        let now = t(NOW);
        let f = facts(&[RunStatus::Succeeded], &[]);
        assert_eq!(assess(&lp, &f, now).verdict, Verdict::Ok);
        lp.runs_on = vec!["gpu".to_owned()];
        let cpu = vec![vec!["cpu".to_owned()], Vec::new()];
        let h = assess_with_runners(&lp, &f, now, Some(cpu.as_slice()));
        assert_eq!(h.verdict, Verdict::Warn, "{h:?}");
        let why = h.waiting_for_runner.clone().unwrap();
        assert_eq!(
            why,
            "waiting for a runner with gpu: no live runner advertises it (live: cpu; no labels)"
        );
        assert!(h.reasons.contains(&why), "{h:?}");
        // A runner with every label takes it; no runner at all is said so.
        let gpu = vec![vec!["cpu".to_owned(), "gpu".to_owned()]];
        let h = assess_with_runners(&lp, &f, now, Some(gpu.as_slice()));
        assert_eq!((h.verdict, h.waiting_for_runner), (Verdict::Ok, None));
        let none: Vec<Vec<String>> = Vec::new();
        let h = assess_with_runners(&lp, &f, now, Some(none.as_slice()));
        assert_eq!(
            h.waiting_for_runner.as_deref(),
            Some("waiting for a runner with gpu: no runner is live")
        );
        // Every label is needed.
        lp.runs_on = vec!["gpu".to_owned(), "x".to_owned()];
        assert!(runner_wait(&lp.runs_on, &gpu).unwrap().contains("them all"));
        // A paused loop waits for nobody.
        lp.status = LoopStatus::Paused;
        let h = assess_with_runners(&lp, &f, now, Some(cpu.as_slice()));
        assert_eq!(h.waiting_for_runner, None);
    }
}
