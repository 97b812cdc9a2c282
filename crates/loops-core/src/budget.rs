//! Budgets (issue #20 item 7; README, "Agent operations"): a limit on the tokens or the
//! US dollars an agent loop — or every loop of a provider (and account) — may spend in
//! a calendar day or week. A loop whose budget is spent is *held* until the window
//! resets, like a usage-limit hold ([`crate::hold`]) but its own thing: `loops holds
//! clear` does not release it; the window's end, a raised or removed budget do.
//!
//! - A window ([`BudgetWindow`]) is a calendar day or week in UTC: a day starts at
//!   00:00 UTC, a week on Monday 00:00 UTC ([`window_at`]). UTC rather than the loop's
//!   zone because a store-wide budget spans loops in several zones and must have one
//!   window for all of them; a day is always 24 h (no daylight-saving days).
//! - Spend ([`Spend`]) is the usage the runs of the loop (or of the key's loops)
//!   reported and that finished in the current window: tokens = input + output, USD =
//!   `costUsd`; a run without a cost counts 0 and the spend says how many there were
//!   (`unpriced`: the cost is partial). Workflow steps are not counted.
//! - A budget is spent when the spend reaches its limit. The check runs in each
//!   finalization of an agent loop's run ([`decide`]), which writes a [`BudgetHold`]
//!   until the window's end; the stores' due-loop queries leave held loops out and
//!   `next_due_at` waits for the hold's end, so a spent loop is not refetched on every
//!   pass. A run already started is not stopped. The next run after the reset releases
//!   the hold row (a `resumed` notification, if `held` was sent).
//!
//! Pure: the stores add up the spend and write what [`decide`] says.

use crate::{AgentTarget, Instant, Loop, LoopId, LoopStatus, Provider, Target, Usage};
use chrono::{Datelike, NaiveTime, TimeDelta};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

string_enum!(
    /// The calendar window a budget counts in (UTC).
    BudgetWindow {
        /// 00:00 UTC to the next 00:00 UTC.
        Day = "day",
        /// Monday 00:00 UTC to the next Monday.
        Week = "week",
    }
);

string_enum!(
    /// What a budget limits.
    BudgetMetric {
        /// Input + output tokens.
        Tokens = "tokens",
        /// The reported cost in US dollars.
        Usd = "usd",
    }
);

/// Micro-dollars per dollar: USD limits and spend are kept as integers of these.
const MICROS: u64 = 1_000_000;

/// One limit: `200000/day` tokens or `5/week` dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    pub metric: BudgetMetric,
    /// Tokens, or micro-dollars.
    pub amount: u64,
    pub window: BudgetWindow,
}

impl Budget {
    /// Parses `AMOUNT/day|week`: whole tokens, or dollars with up to six decimals (a
    /// leading `$` allowed). `flag` names the setting in the message.
    pub fn parse(metric: BudgetMetric, text: &str, flag: &str) -> Result<Budget, String> {
        let bad = |why: &str| {
            let example = match metric {
                BudgetMetric::Tokens => "200000/day",
                BudgetMetric::Usd => "5/week",
            };
            format!("invalid {flag} {text:?}: {why} (expected e.g. {example})")
        };
        let (amount, window) = text
            .trim()
            .split_once('/')
            .ok_or_else(|| bad("no /day or /week"))?;
        let window =
            BudgetWindow::from_str(window.trim()).map_err(|_| bad("the window is day or week"))?;
        let amount = amount.trim().replace(['_', ','], "");
        let amount = match metric {
            BudgetMetric::Tokens => amount
                .parse::<u64>()
                .map_err(|_| bad("the amount is a whole number of tokens"))?,
            BudgetMetric::Usd => parse_micros(amount.trim_start_matches('$'))
                .ok_or_else(|| bad("the amount is dollars, e.g. 5 or 0.25"))?,
        };
        if amount == 0 {
            return Err(bad("a budget must be above 0"));
        }
        Ok(Budget {
            metric,
            amount,
            window,
        })
    }

    /// How much of the budget `spend` used, in the budget's units.
    pub fn used(&self, spend: &Spend) -> u64 {
        match self.metric {
            BudgetMetric::Tokens => spend.tokens,
            BudgetMetric::Usd => spend.usd_micros,
        }
    }

    /// Whether `spend` reached the limit.
    pub fn is_spent(&self, spend: &Spend) -> bool {
        self.used(spend) >= self.amount
    }

    /// An amount in the budget's units for people: `120,431 tokens`, `$5.00`.
    pub fn show_amount(&self, amount: u64) -> String {
        match self.metric {
            BudgetMetric::Tokens => format!("{} tokens", group_digits(amount)),
            BudgetMetric::Usd => format!(
                "${}.{:02}",
                group_digits(amount / MICROS),
                (amount % MICROS) / 10_000
            ),
        }
    }
}

/// The stored form: `200000/day`, `5/week`, `0.25/day`.
impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.metric {
            BudgetMetric::Tokens => write!(f, "{}/{}", self.amount, self.window),
            BudgetMetric::Usd => {
                let (whole, frac) = (self.amount / MICROS, self.amount % MICROS);
                if frac == 0 {
                    write!(f, "{whole}/{}", self.window)
                } else {
                    let frac = format!("{frac:06}");
                    write!(f, "{whole}.{}/{}", frac.trim_end_matches('0'), self.window)
                }
            }
        }
    }
}

fn parse_micros(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && frac.is_empty() || frac.len() > 6 {
        return None;
    }
    if !whole
        .bytes()
        .chain(frac.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let frac: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<6}").parse().ok()?
    };
    whole.checked_mul(MICROS)?.checked_add(frac)
}

/// `120431` → `120,431`.
fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Serde for `LoopOps::budget_tokens` (`"200000/day"`).
pub mod serde_tokens {
    use super::{Budget, BudgetMetric};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<Budget>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => s.collect_str(b),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Budget>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| Budget::parse(BudgetMetric::Tokens, &t, "budgetTokens"))
            .transpose()
            .map_err(serde::de::Error::custom)
    }
}

/// Serde for `LoopOps::budget_usd` (`"5/week"`).
pub mod serde_usd {
    use super::{Budget, BudgetMetric};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<Budget>, s: S) -> Result<S::Ok, S::Error> {
        super::serde_tokens::serialize(b, s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Budget>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| Budget::parse(BudgetMetric::Usd, &t, "budgetUsd"))
            .transpose()
            .map_err(serde::de::Error::custom)
    }
}

/// The window of kind `window` that `now` is in: `[start, end)`.
pub fn window_at(window: BudgetWindow, now: Instant) -> (Instant, Instant) {
    let day = now.date_naive();
    let (first, days) = match window {
        BudgetWindow::Day => (day, 1),
        BudgetWindow::Week => (
            day - TimeDelta::days(i64::from(day.weekday().num_days_from_monday())),
            7,
        ),
    };
    let start = first.and_time(NaiveTime::MIN).and_utc();
    (start, start + TimeDelta::days(days))
}

/// What the runs of a window reported, added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Spend {
    /// Runs with usage counted.
    pub runs: u64,
    /// Input + output tokens.
    pub tokens: u64,
    /// The reported costs, in micro-dollars.
    pub usd_micros: u64,
    /// Runs that reported no cost (counted as 0: the dollars are partial).
    pub unpriced: u64,
}

impl Spend {
    /// Adds one run's usage.
    pub fn add(&mut self, usage: &Usage) {
        self.runs += 1;
        self.tokens = self
            .tokens
            .saturating_add(usage.input_tokens.unwrap_or(0))
            .saturating_add(usage.output_tokens.unwrap_or(0));
        match usage.cost_usd {
            // Float dollars to micro-dollars: costs are small and positive.
            Some(cost) if cost.is_finite() && cost > 0.0 => {
                self.usd_micros = self
                    .usd_micros
                    .saturating_add((cost * MICROS as f64).round() as u64);
            }
            Some(_) => {}
            None => self.unpriced += 1,
        }
    }
}

/// What a budget covers: one loop, or every agent loop of a provider (on one account
/// profile, when it names one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BudgetScope {
    Loop(LoopId),
    Key {
        provider: Provider,
        account: Option<String>,
    },
}

impl BudgetScope {
    /// Whether the scope covers loop `lp` (a key: its agent target's provider, and
    /// account profile when the key names one; `default` is the profile of an agent
    /// without an account, as for holds).
    pub fn covers(&self, lp: &Loop) -> bool {
        match self {
            BudgetScope::Loop(id) => *id == lp.id,
            BudgetScope::Key { provider, account } => match &lp.target {
                Target::Agent(agent) => {
                    agent.provider == *provider
                        && account.as_ref().is_none_or(|a| *a == account_of(agent))
                }
                _ => false,
            },
        }
    }

    /// Whether this store-wide scope covers a run of `provider` under `account` (a
    /// pool's choice, a workflow step's profile): a loop's own scope covers none.
    pub fn covers_key(&self, provider: Provider, account: &str) -> bool {
        match self {
            BudgetScope::Loop(_) => false,
            BudgetScope::Key {
                provider: p,
                account: a,
            } => *p == provider && a.as_deref().is_none_or(|a| a == account),
        }
    }

    /// Parses a store-wide key: `provider=claude[,account=work]`.
    pub fn parse_key(text: &str) -> Result<BudgetScope, String> {
        let bad = |why: String| {
            format!("invalid budget key {text:?}: {why} (expected provider=NAME[,account=PROFILE])")
        };
        let (mut provider, mut account) = (None, None);
        for part in text.split(',') {
            match part.trim().split_once('=') {
                Some(("provider", v)) if provider.is_none() => {
                    provider = Some(Provider::from_str(v.trim()).map_err(bad)?);
                }
                Some(("account", v)) if account.is_none() && !v.trim().is_empty() => {
                    account = Some(v.trim().to_owned());
                }
                _ => return Err(bad(format!("unexpected {part:?}"))),
            }
        }
        let provider = provider.ok_or_else(|| bad("no provider".into()))?;
        Ok(BudgetScope::Key { provider, account })
    }

    /// The scope's label in a hold's reason: `` (a loop's own), `claude `, `claude/work `.
    fn label(&self) -> String {
        match self {
            BudgetScope::Loop(_) => String::new(),
            BudgetScope::Key {
                provider,
                account: None,
            } => format!("{provider} "),
            BudgetScope::Key {
                provider,
                account: Some(a),
            } => format!("{provider}/{a} "),
        }
    }
}

/// The stored form: `loop:ID`, `provider=claude`, `provider=claude,account=work`.
impl fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetScope::Loop(id) => write!(f, "loop:{id}"),
            BudgetScope::Key {
                provider,
                account: None,
            } => write!(f, "provider={provider}"),
            BudgetScope::Key {
                provider,
                account: Some(a),
            } => write!(f, "provider={provider},account={a}"),
        }
    }
}

impl FromStr for BudgetScope {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.strip_prefix("loop:") {
            Some(id) => Ok(BudgetScope::Loop(LoopId::new(id))),
            None => BudgetScope::parse_key(text),
        }
    }
}

impl Serialize for BudgetScope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn account_of(agent: &AgentTarget) -> String {
    agent.account.as_ref().map_or_else(
        || crate::hold::DEFAULT_ACCOUNT.to_owned(),
        |a| a.profile.clone(),
    )
}

/// A store-wide budget (`loops budget set`): a row of the store's `budgets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoreBudget {
    pub provider: Provider,
    /// The account profile; `None`: every account of the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "serde_tokens"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "1000000/day"))]
    pub tokens: Option<Budget>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_usd")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "20/week"))]
    pub usd: Option<Budget>,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
}

impl StoreBudget {
    pub fn scope(&self) -> BudgetScope {
        BudgetScope::Key {
            provider: self.provider,
            account: self.account.clone(),
        }
    }
}

/// Every budget that covers `lp`, with its scope: the loop's own (`budgetTokens`,
/// `budgetUsd`) and the store-wide ones of its provider and account. Command and
/// workflow loops have none.
pub fn budgets_of(lp: &Loop, store_wide: &[StoreBudget]) -> Vec<(BudgetScope, Budget)> {
    if !matches!(lp.target, Target::Agent(_)) {
        return Vec::new();
    }
    let own = BudgetScope::Loop(lp.id.clone());
    let mut out: Vec<(BudgetScope, Budget)> = [lp.ops.budget_tokens, lp.ops.budget_usd]
        .into_iter()
        .flatten()
        .map(|b| (own.clone(), b))
        .collect();
    for sb in store_wide {
        let scope = sb.scope();
        if scope.covers(lp) {
            out.extend(limits_of(sb).map(|b| (scope.clone(), b)));
        }
    }
    out
}

/// The budgets a finished run of `lp` spent from: [`budgets_of`], and the store-wide
/// budgets of the account its pool chose (`run_account`), which the loop's target
/// does not name.
pub fn budgets_of_run(
    lp: &Loop,
    run_account: Option<&str>,
    store_wide: &[StoreBudget],
) -> Vec<(BudgetScope, Budget)> {
    let mut out = budgets_of(lp, store_wide);
    let (Some(chosen), Target::Agent(agent)) = (run_account, &lp.target) else {
        return out;
    };
    for sb in store_wide {
        let scope = sb.scope();
        let of_chosen = matches!(
            &scope,
            BudgetScope::Key {
                account: Some(_),
                ..
            }
        ) && scope.covers_key(agent.provider, chosen);
        if of_chosen && !scope.covers(lp) {
            out.extend(limits_of(sb).map(|b| (scope.clone(), b)));
        }
    }
    out
}

/// The store-wide budgets a finished workflow agent step of `provider` spent from,
/// under its account profile (`default` when it names none). A step has no budget of
/// its own: a loop's budgets are its agent runs'.
pub fn budgets_of_step(
    provider: Provider,
    account: Option<&str>,
    store_wide: &[StoreBudget],
) -> Vec<(BudgetScope, Budget)> {
    let account = account.unwrap_or(crate::hold::DEFAULT_ACCOUNT);
    store_wide
        .iter()
        .filter(|sb| sb.scope().covers_key(provider, account))
        .flat_map(|sb| limits_of(sb).map(move |b| (sb.scope(), b)))
        .collect()
}

fn limits_of(sb: &StoreBudget) -> impl Iterator<Item = Budget> {
    [sb.tokens, sb.usd].into_iter().flatten()
}

/// The holds of `holds` that a finished run of `lp` (under `run_account`, a pool's
/// choice) ends at `now` besides what its budgets decide: those covering it whose
/// window passed or whose budget was raised, removed or cleared (which ends a notified
/// hold rather than deleting it, so that its one `resumed` notification names a run).
pub fn ended_holds_of_run<'a>(
    lp: &Loop,
    run_account: Option<&str>,
    holds: &'a [BudgetHold],
    now: Instant,
) -> Vec<&'a BudgetHold> {
    let Target::Agent(agent) = &lp.target else {
        return Vec::new();
    };
    holds
        .iter()
        .filter(|h| !h.is_active(now))
        .filter(|h| {
            h.scope.covers(lp) || run_account.is_some_and(|a| h.scope.covers_key(agent.provider, a))
        })
        .collect()
}

/// A spent budget holding its loops until its window ends: a row of the store's
/// `budget_holds`, one per scope and metric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetHold {
    /// `loop:ID`, `provider=claude` or `provider=claude,account=work`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub scope: BudgetScope,
    pub metric: BudgetMetric,
    /// The window's end: until then no slot of the scope's loops is claimed.
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub held_until: Instant,
    pub reason: String,
    /// Whether the `held` notification was queued (a `resumed` one follows only then).
    pub notified: bool,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
}

impl BudgetHold {
    pub fn is_active(&self, now: Instant) -> bool {
        self.held_until > now
    }
}

/// The accounts that spent budgets of one account (`provider=claude,account=work`)
/// hold, as account holds: an account pool's choice ([`crate::caps::choose_account`])
/// passes over them as it passes over a usage limit's, so a pooled loop moves to the
/// next account instead of spending past the budget. A loop's own budget and a
/// provider-wide one hold the loop itself (the due queries), not one account.
pub fn pool_holds(holds: &[BudgetHold]) -> Vec<crate::hold::AccountHold> {
    holds
        .iter()
        .filter_map(|h| match &h.scope {
            BudgetScope::Key {
                provider,
                account: Some(account),
            } => Some(crate::hold::AccountHold {
                provider: *provider,
                account: account.clone(),
                held_until: h.held_until,
                reason: h.reason.clone(),
                since: h.updated_at,
                probes: 0,
                notified: h.notified,
                updated_at: h.updated_at,
            }),
            _ => None,
        })
        .collect()
}

/// Until when, and why, a workflow agent step on `provider` under `account` (its
/// profile, `default` without one) is held at `now`: by its key's usage-limit hold or a
/// spent store-wide budget covering its key, whichever ends last. `None`: it may start.
/// (A loop's own budget holds that loop's runs, never a workflow's steps.)
pub fn step_held(
    provider: Provider,
    account: Option<&str>,
    account_holds: &[crate::hold::AccountHold],
    budget_holds: &[BudgetHold],
    now: Instant,
) -> Option<(Instant, String)> {
    let account = account.unwrap_or(crate::hold::DEFAULT_ACCOUNT);
    let usage = account_holds
        .iter()
        .filter(|h| h.is_active(now) && h.provider == provider && h.account == account)
        .map(|h| (h.held_until, &h.reason));
    let spent = budget_holds
        .iter()
        .filter(|h| h.is_active(now) && h.scope.covers_key(provider, account))
        .map(|h| (h.held_until, &h.reason));
    usage
        .chain(spent)
        .max_by_key(|(until, _)| *until)
        .map(|(until, reason)| (until, reason.clone()))
}

/// What a finalization (or a changed budget) does about one budget's hold row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetChange {
    Keep,
    /// Write (insert or replace) the hold; queue `held` when `notify_held` and a run
    /// is at hand.
    Hold {
        hold: BudgetHold,
        notify_held: bool,
    },
    /// Delete the hold row; queue `resumed` when `notify_resumed`.
    Release {
        notify_resumed: bool,
    },
}

/// Decides about `budget` of `scope` at `now`, its window's `spend` added up, with the
/// hold row `current` (of this scope and metric) if there is one.
pub fn decide(
    scope: &BudgetScope,
    budget: &Budget,
    spend: &Spend,
    current: Option<&BudgetHold>,
    now: Instant,
) -> BudgetChange {
    let (_, end) = window_at(budget.window, now);
    if budget.is_spent(spend) {
        let active = current.filter(|h| h.is_active(now));
        return BudgetChange::Hold {
            hold: BudgetHold {
                scope: scope.clone(),
                metric: budget.metric,
                held_until: end,
                reason: reason(scope, budget, spend, end),
                notified: active.is_some_and(|h| h.notified),
                updated_at: now,
            },
            notify_held: active.is_none(),
        };
    }
    match current {
        None => BudgetChange::Keep,
        Some(h) => BudgetChange::Release {
            notify_resumed: h.notified,
        },
    }
}

/// `budget spent: 120,431 of 100,000 tokens today (resets 2026-12-03 00:00 UTC)`, a
/// store-wide budget's prefixed by its key (`claude/work budget spent: …`).
fn reason(scope: &BudgetScope, budget: &Budget, spend: &Spend, end: Instant) -> String {
    let when = match budget.window {
        BudgetWindow::Day => "today",
        BudgetWindow::Week => "this week",
    };
    let limit = budget.show_amount(budget.amount);
    let used = match budget.metric {
        // `120,431 of 100,000 tokens`: the unit once.
        BudgetMetric::Tokens => group_digits(spend.tokens),
        BudgetMetric::Usd => budget.show_amount(spend.usd_micros),
    };
    let partial = if budget.metric == BudgetMetric::Usd && spend.unpriced > 0 {
        format!(", {} runs without a cost", spend.unpriced)
    } else {
        String::new()
    };
    format!(
        "{}budget spent: {used} of {limit} {when}{partial} (resets {} UTC)",
        scope.label(),
        end.format("%Y-%m-%d %H:%M")
    )
}

/// Fills in `heldUntil` / `heldReason` of the active loops a budget hold active at
/// `now` covers, where it ends later than what they have (an account hold, already
/// marked by [`crate::hold::mark_held`]).
pub fn mark_held(loops: &mut [Loop], holds: &[BudgetHold], now: Instant) {
    for lp in loops {
        if lp.status != LoopStatus::Active {
            continue;
        }
        let latest = holds
            .iter()
            .filter(|h| h.is_active(now) && h.scope.covers(lp))
            .max_by_key(|h| h.held_until);
        if let Some(h) = latest {
            if lp.held_until.is_none_or(|until| h.held_until > until) {
                lp.held_until = Some(h.held_until);
                lp.held_reason = Some(h.reason.clone());
            }
        }
    }
}

/// One budget against its spend in the current window (`loops usage`, `show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetStatus {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub scope: BudgetScope,
    /// The loop's name, for a loop's own budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    pub metric: BudgetMetric,
    pub window: BudgetWindow,
    /// The limit: tokens, or dollars as text (`5`, `0.25`).
    pub limit: String,
    /// What the window's runs used: tokens, or dollars as text.
    pub spent: String,
    /// Whole percent of the limit used.
    pub percent: u64,
    /// Runs counted without a cost (a USD spend is partial then).
    pub unpriced: u64,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub window_start: Instant,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub resets_at: Instant,
    pub spent_out: bool,
    #[serde(skip)]
    pub budget: Budget,
    #[serde(skip)]
    pub spend: Spend,
}

impl BudgetStatus {
    pub fn new(scope: BudgetScope, budget: &Budget, spend: &Spend, now: Instant) -> Self {
        let (start, end) = window_at(budget.window, now);
        let used = budget.used(spend);
        let text = |amount: u64| match budget.metric {
            BudgetMetric::Tokens => amount.to_string(),
            BudgetMetric::Usd => {
                let b = Budget { amount, ..*budget };
                let shown = b.to_string();
                shown.split('/').next().unwrap_or_default().to_owned()
            }
        };
        BudgetStatus {
            scope,
            loop_name: None,
            metric: budget.metric,
            window: budget.window,
            limit: text(budget.amount),
            spent: text(used),
            percent: used.saturating_mul(100) / budget.amount.max(1),
            unpriced: if budget.metric == BudgetMetric::Usd {
                spend.unpriced
            } else {
                0
            },
            window_start: start,
            resets_at: end,
            spent_out: budget.is_spent(spend),
            budget: *budget,
            spend: *spend,
        }
    }

    /// `1,200 of 1,000 tokens today (120 %)` for people.
    pub fn line(&self) -> String {
        let (budget, spend) = (&self.budget, &self.spend);
        let when = match self.window {
            BudgetWindow::Day => "today",
            BudgetWindow::Week => "this week",
        };
        let used = match self.metric {
            BudgetMetric::Tokens => group_digits(spend.tokens),
            BudgetMetric::Usd => budget.show_amount(spend.usd_micros),
        };
        let partial = if self.unpriced > 0 {
            format!(", partial: {} runs without a cost", self.unpriced)
        } else {
            String::new()
        };
        format!(
            "{used} of {} {when} ({} %{partial})",
            budget.show_amount(budget.amount),
            self.percent
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn at(text: &str) -> Instant {
        crate::timefmt::parse_instant(text).unwrap()
    }

    fn tokens(text: &str) -> Budget {
        Budget::parse(BudgetMetric::Tokens, text, "--budget-tokens").unwrap()
    }

    #[test]
    fn budgets_parse_and_print_in_their_stored_form() {
        assert_eq!(tokens("200000/day").to_string(), "200000/day");
        assert_eq!(tokens("200_000/week").amount, 200_000);
        let usd = Budget::parse(BudgetMetric::Usd, "$0.25/day", "--budget-usd").unwrap();
        assert_eq!(
            (usd.amount, usd.to_string()),
            (250_000, "0.25/day".to_owned())
        );
        assert_eq!(
            Budget::parse(BudgetMetric::Usd, "5/week", "--budget-usd")
                .unwrap()
                .to_string(),
            "5/week"
        );
        assert_eq!(usd.show_amount(5_120_000), "$5.12");
        for bad in ["5", "5/month", "0/day", "1.5/day", "-3/day", "/day"] {
            let err = Budget::parse(BudgetMetric::Tokens, bad, "--budget-tokens").unwrap_err();
            assert!(err.starts_with("invalid --budget-tokens"), "{bad}: {err}");
        }
        assert!(Budget::parse(BudgetMetric::Usd, "0.0000001/day", "--budget-usd").is_err());
    }

    #[test]
    fn days_start_at_utc_midnight_and_weeks_on_monday() {
        // Wednesday.
        let now = at("2026-12-02T16:30:00Z");
        assert_eq!(
            window_at(BudgetWindow::Day, now),
            (at("2026-12-02T00:00:00Z"), at("2026-12-03T00:00:00Z"))
        );
        assert_eq!(
            window_at(BudgetWindow::Week, now),
            (at("2026-11-30T00:00:00Z"), at("2026-12-07T00:00:00Z"))
        );
        // The boundaries belong to the window they start.
        assert_eq!(
            window_at(BudgetWindow::Day, at("2026-12-03T00:00:00Z")).0,
            at("2026-12-03T00:00:00Z")
        );
        assert_eq!(
            window_at(BudgetWindow::Day, at("2026-12-02T23:59:59.999Z")).1,
            at("2026-12-03T00:00:00Z")
        );
        // A Monday is its week's first day, a Sunday its last.
        assert_eq!(
            window_at(BudgetWindow::Week, at("2026-11-30T00:00:00Z")).0,
            at("2026-11-30T00:00:00Z")
        );
        assert_eq!(
            window_at(BudgetWindow::Week, at("2026-12-06T23:59:00Z")).0,
            at("2026-11-30T00:00:00Z")
        );
        // Across the year's end.
        assert_eq!(
            window_at(BudgetWindow::Week, at("2027-01-01T12:00:00Z")),
            (at("2026-12-28T00:00:00Z"), at("2027-01-04T00:00:00Z"))
        );
    }

    #[test]
    fn windows_are_utc_so_a_daylight_saving_day_is_24_hours() {
        // 2026-03-08: New York springs forward; 2026-11-01: it falls back. The windows
        // are UTC days, 24 h each, whatever the loop's cron zone.
        for day in [
            "2026-03-08T12:00:00Z",
            "2026-11-01T12:00:00Z",
            "2026-03-29T01:30:00Z",
        ] {
            let (start, end) = window_at(BudgetWindow::Day, at(day));
            assert_eq!(end - start, TimeDelta::hours(24), "{day}");
        }
        let (start, end) = window_at(BudgetWindow::Week, at("2026-03-08T12:00:00Z"));
        assert_eq!(end - start, TimeDelta::hours(7 * 24));
    }

    fn usage(input: u64, output: u64, cost: Option<f64>) -> Usage {
        Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cost_usd: cost,
        }
    }

    #[test]
    fn spend_holds_until_the_window_ends_and_the_next_window_releases() {
        let scope = BudgetScope::Loop(LoopId::new("aaaaaaaaaaaa"));
        let budget = tokens("1000/day");
        let now = at("2026-12-02T16:30:00Z");
        let mut spend = Spend::default();
        spend.add(&usage(400, 200, Some(0.01)));
        assert_eq!(
            decide(&scope, &budget, &spend, None, now),
            BudgetChange::Keep
        );
        spend.add(&usage(400, 200, None));
        assert_eq!(
            (spend.tokens, spend.usd_micros, spend.unpriced),
            (1_200, 10_000, 1)
        );
        let BudgetChange::Hold { hold, notify_held } = decide(&scope, &budget, &spend, None, now)
        else {
            panic!("not held");
        };
        assert!(notify_held);
        assert_eq!(hold.held_until, at("2026-12-03T00:00:00Z"));
        assert_eq!(
            hold.reason,
            "budget spent: 1,200 of 1,000 tokens today (resets 2026-12-03 00:00 UTC)"
        );
        // Still spent (a run-now while held): held again, not notified again.
        let notified = BudgetHold {
            notified: true,
            ..hold.clone()
        };
        let later = at("2026-12-02T20:00:00Z");
        match decide(&scope, &budget, &spend, Some(&notified), later) {
            BudgetChange::Hold { hold, notify_held } => assert!(!notify_held && hold.notified),
            other => panic!("{other:?}"),
        }
        // The next day's first run: the window's spend is low again.
        let next_day = at("2026-12-03T00:05:00Z");
        let mut fresh = Spend::default();
        fresh.add(&usage(10, 10, None));
        assert_eq!(
            decide(&scope, &budget, &fresh, Some(&notified), next_day),
            BudgetChange::Release {
                notify_resumed: true
            }
        );
        // A store-wide USD budget's reason names its key and the partial cost.
        let key = BudgetScope::parse_key("provider=claude,account=work").unwrap();
        let usd = Budget::parse(BudgetMetric::Usd, "0.01/week", "--usd").unwrap();
        let BudgetChange::Hold { hold, .. } = decide(&key, &usd, &spend, None, now) else {
            panic!("not held");
        };
        assert_eq!(
            hold.reason,
            "claude/work budget spent: $0.01 of $0.01 this week, 1 runs without a cost (resets 2026-12-07 00:00 UTC)"
        );
    }

    #[test]
    fn a_step_is_held_by_its_keys_usage_limit_or_store_wide_budget_whichever_ends_last() {
        let now = at("2026-12-02T10:00:00Z");
        let usage = crate::hold::AccountHold {
            provider: Provider::Claude,
            account: "work".to_owned(),
            held_until: at("2026-12-02T12:00:00Z"),
            reason: "usage limit reached".to_owned(),
            since: now,
            probes: 0,
            notified: false,
            updated_at: now,
        };
        let budget = |scope: &str, until: &str| BudgetHold {
            scope: match scope.strip_prefix("loop:") {
                Some(id) => BudgetScope::Loop(LoopId::new(id)),
                None => BudgetScope::parse_key(scope).unwrap(),
            },
            metric: BudgetMetric::Tokens,
            held_until: at(until),
            reason: format!("{scope} spent"),
            notified: false,
            updated_at: now,
        };
        let claude = budget("provider=claude", "2026-12-03T00:00:00Z");
        let own = budget("loop:l1", "2026-12-09T00:00:00Z");
        let other = budget("provider=claude,account=home", "2026-12-09T00:00:00Z");
        let holds = [usage.clone()];
        // The usage limit of its own account only.
        assert_eq!(
            step_held(Provider::Claude, Some("work"), &holds, &[], now),
            Some((usage.held_until, usage.reason.clone()))
        );
        assert_eq!(step_held(Provider::Claude, None, &holds, &[], now), None);
        assert_eq!(
            step_held(Provider::Codex, Some("work"), &holds, &[], now),
            None
        );
        // A provider-wide budget outlasts it; a loop's own budget and another
        // account's never hold a step.
        let budgets = [claude.clone(), own, other];
        assert_eq!(
            step_held(Provider::Claude, Some("work"), &holds, &budgets, now),
            Some((claude.held_until, claude.reason.clone()))
        );
        assert_eq!(
            step_held(Provider::Claude, None, &[], &budgets[1..], now),
            None
        );
        // Nothing is held once its instant passed.
        let later = at("2026-12-03T00:00:00Z");
        assert_eq!(
            step_held(Provider::Claude, Some("work"), &holds, &budgets[..1], later),
            None
        );
    }

    #[test]
    fn keys_parse_and_cover_their_providers_loops() {
        let lp = |target: serde_json::Value| -> Loop {
            serde_json::from_value(serde_json::json!({
                "id": "aaaaaaaaaaaa", "name": "a", "status": "active",
                "schedule": {"type": "interval", "everyMs": 60_000, "anchor": "fixed_rate"},
                "target": target,
                "nextRunAt": null, "retryScheduledFor": null,
                "catchUp": "latest", "catchUpLimit": 10, "overlap": "skip", "maxAttempts": 1,
                "retryDelayMs": 60000, "leaseMs": 1800000, "expiresAt": null,
                "budgetTokens": "100/day",
                "createdAt": "2026-03-10T12:00:00.000Z", "updatedAt": "2026-03-10T12:00:00.000Z",
            }))
            .unwrap()
        };
        let work = lp(
            serde_json::json!({"type": "agent", "provider": "claude", "prompt": "hi", "account": {"profile": "work"}}),
        );
        let plain = lp(serde_json::json!({"type": "agent", "provider": "claude", "prompt": "hi"}));
        let codex = lp(serde_json::json!({"type": "agent", "provider": "codex", "prompt": "hi"}));
        let command = lp(serde_json::json!({"type": "command", "command": "true"}));
        let any = BudgetScope::parse_key("provider=claude").unwrap();
        let on_work = BudgetScope::parse_key(" provider=claude , account=work").unwrap();
        assert_eq!(on_work.to_string(), "provider=claude,account=work");
        assert_eq!(
            "provider=claude,account=work"
                .parse::<BudgetScope>()
                .unwrap(),
            on_work
        );
        assert!(any.covers(&work) && any.covers(&plain) && !any.covers(&codex));
        assert!(on_work.covers(&work) && !on_work.covers(&plain));
        let default = BudgetScope::parse_key("provider=claude,account=default").unwrap();
        assert!(default.covers(&plain));
        for bad in [
            "claude",
            "provider=gpt",
            "account=work",
            "provider=claude,provider=codex",
            "provider=claude,x=1",
        ] {
            assert!(BudgetScope::parse_key(bad).is_err(), "{bad}");
        }
        let store_wide = [StoreBudget {
            provider: Provider::Claude,
            account: None,
            tokens: Some(tokens("5000/week")),
            usd: None,
            updated_at: at("2026-12-01T00:00:00Z"),
        }];
        let of = budgets_of(&work, &store_wide);
        assert_eq!(of.len(), 2, "{of:?}");
        assert_eq!(of[0].0, BudgetScope::Loop(LoopId::new("aaaaaaaaaaaa")));
        assert_eq!(of[1], (any.clone(), tokens("5000/week")));
        assert_eq!(budgets_of(&codex, &store_wide).len(), 1);
        assert!(budgets_of(&command, &store_wide).is_empty());

        // A budget hold marks the loop unless an account hold ends later.
        let hold = BudgetHold {
            scope: any,
            metric: BudgetMetric::Tokens,
            held_until: at("2026-12-03T00:00:00Z"),
            reason: "claude budget spent".into(),
            notified: false,
            updated_at: at("2026-12-02T00:00:00Z"),
        };
        let mut loops = [work.clone(), codex.clone()];
        mark_held(
            &mut loops,
            std::slice::from_ref(&hold),
            at("2026-12-02T10:00:00Z"),
        );
        assert_eq!(loops[0].held_reason.as_deref(), Some("claude budget spent"));
        assert!(loops[1].held_until.is_none());
        let mut later = [work];
        later[0].held_until = Some(at("2026-12-04T00:00:00Z"));
        mark_held(&mut later, &[hold], at("2026-12-02T10:00:00Z"));
        assert_eq!(later[0].held_until, Some(at("2026-12-04T00:00:00Z")));
    }
}
