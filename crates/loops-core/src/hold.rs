//! Usage-limit holds (issue #20 item 2; README, "Agent operations"): a run that meets
//! its account's usage limit does not fail its slot; every loop on the same provider
//! and account is *held* until the limit resets, then resumes by itself.
//!
//! - The hold key ([`HoldKey::of`]) is an agent target's provider and its account
//!   profile, or [`DEFAULT_ACCOUNT`] for an agent without an account. Command and
//!   workflow loops are never held.
//! - A hold ([`AccountHold`], a row of the store's `account_holds`) lasts until the
//!   provider's reset instant plus [`RESET_MARGIN_MS`]; without an instant it is an
//!   exponential probe: [`PROBE_FIRST_MS`], doubled per consecutive usage-limit run
//!   without one, capped at [`PROBE_MAX_MS`] ([`probe_delay_ms`]).
//! - While `heldUntil` is ahead, the stores' due-loop queries leave the key's loops out
//!   (the one place scheduled claims are filtered); a hold past its instant stops
//!   nothing and is kept only for its probe count: the next run on its key that does
//!   not meet the limit releases it ([`after_finish`]) with one `resumed` notification
//!   if `held` was sent. `loops holds clear` releases it by hand.
//!
//! Pure: the stores read the hold and write what [`after_finish`] decides in the
//! finalization's transaction, so every runner sharing the store honours it.

use crate::failure::FailureClass;
use crate::{Instant, Loop, LoopStatus, Provider, Run, RunStatus, Target};
use chrono::TimeDelta;
use serde::{Deserialize, Serialize};

/// The account of a hold key when the agent target names no account.
pub const DEFAULT_ACCOUNT: &str = "default";

/// How long after the provider's reset instant a hold ends: clocks differ, and a
/// provider's "9am" is rarely to the second.
pub const RESET_MARGIN_MS: u64 = 60_000;

/// The first probe of a usage limit without a reset instant.
pub const PROBE_FIRST_MS: u64 = 5 * 60_000;

/// The longest probe: a subscription's session window.
pub const PROBE_MAX_MS: u64 = 6 * 3_600_000;

/// What a hold is keyed by: the provider of an agent target and its account profile.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HoldKey {
    pub provider: Provider,
    pub account: String,
}

impl HoldKey {
    /// The key of `target`: `None` for command and workflow targets, which are never
    /// held. (The stores' due-loop queries compute the same from `target_json`.)
    pub fn of(target: &Target) -> Option<Self> {
        let Target::Agent(agent) = target else {
            return None;
        };
        Some(Self {
            provider: agent.provider,
            account: agent
                .account
                .as_ref()
                .map_or_else(|| DEFAULT_ACCOUNT.to_owned(), |a| a.profile.clone()),
        })
    }
}

impl HoldKey {
    /// The key `run` of `target` held or releases: a pooled run's is the account its
    /// pool chose (`Run::account`), so a usage limit holds that account only.
    pub fn of_run(target: &Target, run: &Run) -> Option<Self> {
        let mut key = Self::of(target)?;
        if let Some(account) = &run.account {
            key.account = account.clone();
        }
        Some(key)
    }
}

impl std::fmt::Display for HoldKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider, self.account)
    }
}

/// A held (provider, account): a row of the store's `account_holds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AccountHold {
    pub provider: Provider,
    pub account: String,
    /// Until when no slot of the key's loops is claimed.
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub held_until: Instant,
    /// Why: the reset instant or the probe, and the run that met the limit.
    pub reason: String,
    /// When the key was first held (kept while consecutive runs meet the limit).
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub since: Instant,
    /// Consecutive usage-limit runs without a reset instant (what the probe doubles by).
    pub probes: u32,
    /// Whether the `held` notification was queued (a `resumed` one follows only then).
    pub notified: bool,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
}

impl AccountHold {
    pub fn key(&self) -> HoldKey {
        HoldKey {
            provider: self.provider,
            account: self.account.clone(),
        }
    }

    /// Whether the hold still stops claims at `now`.
    pub fn is_active(&self, now: Instant) -> bool {
        self.held_until > now
    }
}

/// The hold's durations: [`HoldTiming::DEFAULT`], or shorter in the end-to-end tests
/// (`loops_store::hold_timing`, `LOOPS_TEST_HOLD_CAP_MS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldTiming {
    pub margin_ms: u64,
    pub probe_first_ms: u64,
    pub probe_max_ms: u64,
    /// When set, no hold lasts longer than this after its run (tests only).
    pub cap_ms: Option<u64>,
}

impl HoldTiming {
    pub const DEFAULT: HoldTiming = HoldTiming {
        margin_ms: RESET_MARGIN_MS,
        probe_first_ms: PROBE_FIRST_MS,
        probe_max_ms: PROBE_MAX_MS,
        cap_ms: None,
    };
}

impl Default for HoldTiming {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The `probes`-th probe's length (1-based): the first probe doubled per earlier one,
/// capped at the longest.
pub fn probe_delay_ms(probes: u32, timing: &HoldTiming) -> u64 {
    let doublings = probes.saturating_sub(1).min(40);
    timing
        .probe_first_ms
        .saturating_mul(1u64 << doublings)
        .min(timing.probe_max_ms.max(timing.probe_first_ms))
}

/// Whether `run` of `lp` meets a usage limit that holds its key (instead of failing
/// its slot): a failed agent run classed `usage_limit`.
pub fn holds(lp: &Loop, run: &Run) -> bool {
    run.status.is_failure()
        && run.failure_class == Some(FailureClass::UsageLimit)
        && HoldKey::of(&lp.target).is_some()
}

/// The hold after a usage-limit `run` on `key`, given the key's current hold (if any):
/// until the reset instant plus the margin, or the next probe without one.
pub fn hold_after(
    previous: Option<&AccountHold>,
    key: &HoldKey,
    run: &Run,
    timing: &HoldTiming,
) -> AccountHold {
    let finished = run.finished_at.unwrap_or(run.updated_at);
    hold_from(
        previous,
        key,
        finished,
        run.retry_at,
        reason_of(run),
        timing,
    )
}

/// The hold after a usage limit met at `finished` on `key`, with the provider's reset
/// instant `retry_at` when it named one ([`hold_after`] for a run, [`after_step`] for
/// a workflow step).
fn hold_from(
    previous: Option<&AccountHold>,
    key: &HoldKey,
    finished: Instant,
    retry_at: Option<Instant>,
    reason: String,
    timing: &HoldTiming,
) -> AccountHold {
    let (mut held_until, probes) = match retry_at {
        Some(reset) => (reset + millis(timing.margin_ms), 0),
        None => {
            let probes = previous.map_or(0, |p| p.probes).saturating_add(1);
            (finished + millis(probe_delay_ms(probes, timing)), probes)
        }
    };
    if let Some(cap) = timing.cap_ms {
        held_until = held_until.min(finished + millis(cap));
    }
    // A reset the provider gave in the past is no hold at all: probe instead.
    if held_until <= finished {
        held_until =
            finished + millis(timing.probe_first_ms.min(timing.cap_ms.unwrap_or(u64::MAX)));
    }
    AccountHold {
        provider: key.provider,
        account: key.account.clone(),
        held_until,
        reason,
        since: previous.map_or(finished, |p| p.since),
        probes,
        notified: previous.is_some_and(|p| p.notified),
        updated_at: finished,
    }
}

/// A hold's reason, in our words (the CLI's own message is output, shown only where
/// output is: the run's `errorOutput`): the reset instant or the probe, and the run.
fn reason_of(run: &Run) -> String {
    let when = match run.retry_at {
        Some(at) => format!("resets at {}", crate::format_instant(&at)),
        None => "no reset instant given (probing)".to_owned(),
    };
    format!(
        "usage limit reached, {when} (run {} of loop {})",
        run.id, run.loop_name
    )
}

/// What a finished run does to its key's hold ([`after_finish`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldChange {
    /// Nothing: not an agent run, or an ending that says nothing about the limit.
    Keep,
    /// Write this hold; `notify_held` when it is the key's first (one `held`
    /// notification per key, however many of its loops meet the limit).
    Hold {
        hold: AccountHold,
        notify_held: bool,
    },
    /// The run did not meet the limit: delete the hold (`resumed` when `held` was sent).
    Release { notify_resumed: bool },
}

/// The change `run` of `lp` makes to the hold of its key, `current` being that hold
/// as stored (active or past its instant): a usage-limit run holds (again); a success
/// or any other failure of its own releases it (the probe worked); skipped and
/// abandoned runs (the runner went away) say nothing.
pub fn after_finish(
    lp: &Loop,
    run: &Run,
    current: Option<&AccountHold>,
    timing: &HoldTiming,
) -> HoldChange {
    let Some(key) = HoldKey::of_run(&lp.target, run) else {
        return HoldChange::Keep;
    };
    if holds(lp, run) {
        return HoldChange::Hold {
            hold: hold_after(current, &key, run, timing),
            notify_held: current.is_none(),
        };
    }
    match (current, run.status) {
        (None, _) | (_, RunStatus::Skipped | RunStatus::Abandoned | RunStatus::Running) => {
            HoldChange::Keep
        }
        (Some(hold), _) => HoldChange::Release {
            notify_resumed: hold.notified,
        },
    }
}

/// A workflow agent step that met its account's usage limit: the reset instant its
/// provider named, if any, and the hold's reason in our words (which step of which run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepLimit {
    pub retry_at: Option<Instant>,
    pub reason: String,
}

impl StepLimit {
    /// The limit a step met, with its reason: `usage limit reached, resets at … (step
    /// review of workflow run …)`.
    pub fn new(retry_at: Option<Instant>, step: &str, workflow_run: &str) -> Self {
        let when = match retry_at {
            Some(at) => format!("resets at {}", crate::format_instant(&at)),
            None => "no reset instant given (probing)".to_owned(),
        };
        Self {
            retry_at,
            reason: format!(
                "usage limit reached, {when} (step {step} of workflow run {workflow_run})"
            ),
        }
    }
}

/// The change a workflow agent step on `key` that ended at `finished` makes to the
/// key's hold, `current` being that hold as stored. A step that met the limit holds
/// the key as a loop's run does (same reset margin and probes), but sends no `held`:
/// it has no loop run to name (a `held` already sent stays sent). A step that did not
/// meet it releases a hold past its instant whose `held` was never sent; a notified
/// one is left for the next run of a loop on the key, which sends its `resumed`. An
/// active hold is never released by a step (it started before the hold was written).
pub fn after_step(
    current: Option<&AccountHold>,
    key: &HoldKey,
    finished: Instant,
    limit: Option<&StepLimit>,
    timing: &HoldTiming,
) -> HoldChange {
    if let Some(limit) = limit {
        return HoldChange::Hold {
            hold: hold_from(
                current,
                key,
                finished,
                limit.retry_at,
                limit.reason.clone(),
                timing,
            ),
            notify_held: false,
        };
    }
    match current {
        Some(hold) if !hold.is_active(finished) && !hold.notified => HoldChange::Release {
            notify_resumed: false,
        },
        _ => HoldChange::Keep,
    }
}

/// Fills in `heldUntil` and `heldReason` of each active loop whose key has a hold
/// active at `now` (the stores keep holds per key, not per loop).
pub fn mark_held(loops: &mut [Loop], holds: &[AccountHold], now: Instant) {
    if holds.is_empty() {
        return;
    }
    for lp in loops {
        let active = |provider: Provider, account: &str| {
            holds
                .iter()
                .find(|h| h.is_active(now) && h.provider == provider && h.account == account)
        };
        // A pooled loop is held only while every account of its pool is: until the
        // first of them is free again.
        let hold = match crate::caps::pool_of(&lp.target) {
            Some((provider, pool)) => pool
                .iter()
                .map(|a| active(provider, a))
                .collect::<Option<Vec<_>>>()
                .and_then(|held| held.into_iter().min_by_key(|h| h.held_until)),
            None => HoldKey::of(&lp.target).and_then(|key| active(key.provider, &key.account)),
        };
        let hold = hold.filter(|_| lp.status == LoopStatus::Active);
        lp.held_until = hold.map(|h| h.held_until);
        lp.held_reason = hold.map(|h| h.reason.clone());
    }
}

fn millis(ms: u64) -> TimeDelta {
    TimeDelta::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX / 2).min(i64::MAX / 2))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Account, AgentTarget, RunId};

    fn at(text: &str) -> Instant {
        crate::timefmt::parse_instant(text).unwrap()
    }

    fn agent(account: Option<&str>) -> Target {
        let mut t: AgentTarget =
            serde_json::from_value(serde_json::json!({"provider": "claude", "prompt": "hi"}))
                .unwrap();
        t.account = account.map(|p| Account {
            profile: p.to_owned(),
            tool: None,
        });
        Target::Agent(t)
    }

    fn looped(target: Target) -> Loop {
        let mut lp: Loop = serde_json::from_value(serde_json::json!({
            "id": "aaaaaaaaaaaa", "name": "a", "status": "active",
            "schedule": {"type": "interval", "everyMs": 60_000, "anchor": "fixed_rate"},
            "target": {"type": "command", "command": "true"},
            "nextRunAt": null, "retryScheduledFor": null,
            "catchUp": "latest", "catchUpLimit": 10, "overlap": "skip", "maxAttempts": 1,
            "retryDelayMs": 60000, "leaseMs": 1800000, "expiresAt": null,
            "createdAt": "2026-03-10T12:00:00.000Z", "updatedAt": "2026-03-10T12:00:00.000Z",
        }))
        .unwrap();
        lp.target = target;
        lp
    }

    fn run(status: RunStatus, class: Option<FailureClass>, retry_at: Option<Instant>) -> Run {
        let end = at("2026-03-10T12:00:10Z");
        Run {
            id: RunId::new("bbbbbbbbbbbb"),
            loop_id: crate::LoopId::new("aaaaaaaaaaaa"),
            loop_name: "a".into(),
            finished_at: Some(end),
            exit_code: Some(1),
            error: Some(
                "API Error: Request rejected (429) · Claude usage limit reached.\nmore".into(),
            ),
            failure_class: class,
            retry_at,
            ..Run::history(at("2026-03-10T12:00:00Z"), 1, status, end)
        }
    }

    #[test]
    fn the_key_is_the_provider_and_the_account_profile() {
        assert_eq!(
            HoldKey::of(&agent(Some("work"))),
            Some(HoldKey {
                provider: Provider::Claude,
                account: "work".into()
            })
        );
        assert_eq!(HoldKey::of(&agent(None)).unwrap().account, DEFAULT_ACCOUNT);
        assert_eq!(
            HoldKey::of(&looped(agent(None)).target)
                .unwrap()
                .to_string(),
            "claude/default"
        );
        // Commands are never held.
        let mut command = looped(agent(None));
        command.target = serde_json::from_value(serde_json::json!(
            {"type": "command", "command": "true"}
        ))
        .unwrap();
        assert_eq!(HoldKey::of(&command.target), None);
        let limited = run(RunStatus::Failed, Some(FailureClass::UsageLimit), None);
        assert!(!holds(&command, &limited));
        assert!(holds(&looped(agent(None)), &limited));
        assert_eq!(
            after_finish(&command, &limited, None, &HoldTiming::DEFAULT),
            HoldChange::Keep
        );
    }

    #[test]
    fn probes_double_from_five_minutes_up_to_six_hours() {
        let t = HoldTiming::DEFAULT;
        let minutes: Vec<u64> = (1..=9).map(|n| probe_delay_ms(n, &t) / 60_000).collect();
        assert_eq!(minutes, [5, 10, 20, 40, 80, 160, 320, 360, 360]);
        assert_eq!(probe_delay_ms(u32::MAX, &t), PROBE_MAX_MS);
    }

    #[test]
    fn a_hold_lasts_until_the_reset_plus_the_margin_or_the_next_probe() {
        let lp = looped(agent(Some("work")));
        let key = HoldKey::of(&lp.target).unwrap();
        let t = HoldTiming::DEFAULT;
        // The provider's reset instant, plus a minute.
        let told = run(
            RunStatus::Failed,
            Some(FailureClass::UsageLimit),
            Some(at("2026-03-10T15:00:00Z")),
        );
        let hold = hold_after(None, &key, &told, &t);
        assert_eq!(hold.held_until, at("2026-03-10T15:01:00Z"));
        assert_eq!((hold.probes, hold.notified), (0, false));
        assert_eq!(hold.since, at("2026-03-10T12:00:10Z"));
        assert_eq!(
            hold.reason,
            "usage limit reached, resets at 2026-03-10T15:00:00.000Z (run bbbbbbbbbbbb of loop a)"
        );
        // No instant: 5 minutes, then 10 for the next consecutive one; `since` kept.
        let silent = run(RunStatus::Failed, Some(FailureClass::UsageLimit), None);
        let first = hold_after(None, &key, &silent, &t);
        assert_eq!(first.held_until, at("2026-03-10T12:05:10Z"));
        let mut earlier = first.clone();
        earlier.since = at("2026-03-10T11:00:00Z");
        earlier.notified = true;
        let second = hold_after(Some(&earlier), &key, &silent, &t);
        assert_eq!(second.probes, 2);
        assert_eq!(second.held_until, at("2026-03-10T12:10:10Z"));
        assert_eq!(second.since, at("2026-03-10T11:00:00Z"));
        assert!(second.notified);
        // A reset in the past probes; the tests' cap shortens everything.
        let stale = run(
            RunStatus::Failed,
            Some(FailureClass::UsageLimit),
            Some(at("2026-03-10T11:00:00Z")),
        );
        assert_eq!(
            hold_after(None, &key, &stale, &t).held_until,
            at("2026-03-10T12:05:10Z")
        );
        let capped = HoldTiming {
            cap_ms: Some(3_000),
            ..t
        };
        assert_eq!(
            hold_after(None, &key, &told, &capped).held_until,
            at("2026-03-10T12:00:13Z")
        );
    }

    #[test]
    fn a_run_that_does_not_meet_the_limit_releases_the_hold() {
        let lp = looped(agent(None));
        let t = HoldTiming::DEFAULT;
        let limited = run(RunStatus::Failed, Some(FailureClass::UsageLimit), None);
        let HoldChange::Hold { hold, notify_held } = after_finish(&lp, &limited, None, &t) else {
            panic!("not held");
        };
        assert!(notify_held);
        // Another loop meeting the limit on the same key: held again, not notified.
        let mut notified = hold.clone();
        notified.notified = true;
        assert!(matches!(
            after_finish(&lp, &limited, Some(&notified), &t),
            HoldChange::Hold {
                notify_held: false,
                ..
            }
        ));
        // A success or another failure releases it; resumed only after held was sent.
        for status in [RunStatus::Succeeded, RunStatus::Failed, RunStatus::TimedOut] {
            let other = run(status, Some(FailureClass::Other), None);
            assert_eq!(
                after_finish(&lp, &other, Some(&notified), &t),
                HoldChange::Release {
                    notify_resumed: true
                }
            );
            assert_eq!(
                after_finish(&lp, &other, Some(&hold), &t),
                HoldChange::Release {
                    notify_resumed: false
                }
            );
            assert_eq!(after_finish(&lp, &other, None, &t), HoldChange::Keep);
        }
        for status in [RunStatus::Skipped, RunStatus::Abandoned] {
            let said_nothing = run(status, None, None);
            assert_eq!(
                after_finish(&lp, &said_nothing, Some(&notified), &t),
                HoldChange::Keep
            );
        }
    }

    #[test]
    fn a_step_holds_its_key_without_a_notification_and_releases_only_an_unnotified_past_hold() {
        let t = HoldTiming::DEFAULT;
        let key = HoldKey {
            provider: Provider::Claude,
            account: "work".to_owned(),
        };
        let finished = at("2026-12-02T10:00:00Z");
        let told = StepLimit::new(Some(at("2026-12-02T17:00:00Z")), "fix", "wr1");
        assert!(
            told.reason.contains("step fix of workflow run wr1"),
            "{}",
            told.reason
        );
        let HoldChange::Hold { hold, notify_held } =
            after_step(None, &key, finished, Some(&told), &t)
        else {
            panic!("a step at its usage limit did not hold its key");
        };
        assert!(
            !notify_held,
            "a step names no loop run: no held notification"
        );
        assert_eq!(hold.held_until, at("2026-12-02T17:01:00Z"));
        assert_eq!((hold.probes, hold.notified), (0, false));
        // Without an instant: probes double from the key's earlier hold, as a run's do.
        let silent = StepLimit::new(None, "fix", "wr1");
        let HoldChange::Hold { hold: probe, .. } =
            after_step(Some(&hold), &key, finished, Some(&silent), &t)
        else {
            panic!("not held");
        };
        assert_eq!(probe.probes, 1);
        assert_eq!(probe.held_until, finished + millis(PROBE_FIRST_MS));
        // A notified hold stays notified when a step extends it.
        let mut notified = hold.clone();
        notified.notified = true;
        let HoldChange::Hold { hold: extended, .. } =
            after_step(Some(&notified), &key, finished, Some(&silent), &t)
        else {
            panic!("not held");
        };
        assert!(extended.notified);
        // A step that did not meet the limit: an active hold is kept (it started
        // before the hold), a past one is released only if no `held` went out.
        assert_eq!(
            after_step(Some(&hold), &key, finished, None, &t),
            HoldChange::Keep
        );
        let later = at("2026-12-02T18:00:00Z");
        assert_eq!(
            after_step(Some(&hold), &key, later, None, &t),
            HoldChange::Release {
                notify_resumed: false
            }
        );
        assert_eq!(
            after_step(Some(&notified), &key, later, None, &t),
            HoldChange::Keep
        );
        assert_eq!(after_step(None, &key, later, None, &t), HoldChange::Keep);
    }

    #[test]
    fn active_loops_on_a_held_key_are_marked() {
        let now = at("2026-03-10T12:01:00Z");
        let mut loops = vec![
            looped(agent(Some("work"))),
            looped(agent(Some("home"))),
            looped(agent(Some("work"))),
        ];
        loops[2].status = LoopStatus::Paused;
        let hold = hold_after(
            None,
            &HoldKey::of(&loops[0].target).unwrap(),
            &run(RunStatus::Failed, Some(FailureClass::UsageLimit), None),
            &HoldTiming::DEFAULT,
        );
        mark_held(&mut loops, std::slice::from_ref(&hold), now);
        assert_eq!(loops[0].held_until, Some(hold.held_until));
        assert!(loops[0].held_reason.is_some());
        assert_eq!(loops[1].held_until, None);
        assert_eq!(loops[2].held_until, None, "paused is its own status");
        // Past its instant it holds nothing.
        mark_held(&mut loops, std::slice::from_ref(&hold), hold.held_until);
        assert_eq!(loops[0].held_until, None);
    }
}
