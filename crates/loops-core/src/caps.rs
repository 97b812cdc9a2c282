//! Concurrency caps and account pools (issue #20 item 6; README, "Agent operations").
//!
//! - A [`Cap`] bounds the runs in flight at once on one key ([`CapKey`]): a run kind
//!   (`kind=agent`), an agent provider (`provider=claude`) or an account profile
//!   (`account=work`, on any provider). `daemon run --max-concurrent-per
//!   provider=claude:2,account=work:1` sets them ([`Caps::parse`]); they add to
//!   `--max-concurrent`, which still bounds everything.
//! - A run counts against the keys of its [`RunKeys`]: its loop's target kind, and for
//!   an agent its provider and account (the pooled account chosen at claim, else the
//!   target's profile, else [`DEFAULT_ACCOUNT`]). The stores record them on the run at
//!   claim, so the count is of the store's running rows, across runners ([`InFlight`]).
//! - [`Caps::blocking`] is the one decision: a loop whose run would exceed a cap
//!   waits, still due (no slot missed or skipped), until a run on the key ends.
//! - An account pool ([`choose_account`]) picks, among its profiles, the least-loaded
//!   one (fewest runs in flight on the provider and profile, ties in pool order) that
//!   is neither held by a usage limit nor at a cap.
//!
//! Pure: the engine decides with the counts it read, the claim checks again in its
//! transaction (under a lock on PostgreSQL), both with these functions.

use crate::hold::{AccountHold, DEFAULT_ACCOUNT};
use crate::{Instant, Loop, LoopStatus, Provider, Target};
use std::fmt;

/// The kinds of run a `kind=` cap may name (`Target::kind`).
pub const KINDS: &[&str] = &["command", "agent", "workflow"];

/// What a cap counts runs by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CapKey {
    /// Runs of loops of this target kind (`command`, `agent`, `workflow`).
    Kind(String),
    /// Agent runs on this provider.
    Provider(Provider),
    /// Agent runs on this account profile, whatever their provider.
    Account(String),
}

impl fmt::Display for CapKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapKey::Kind(k) => write!(f, "kind={k}"),
            CapKey::Provider(p) => write!(f, "provider={p}"),
            CapKey::Account(a) => write!(f, "account={a}"),
        }
    }
}

/// At most `limit` runs at once on `key`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cap {
    pub key: CapKey,
    pub limit: u32,
}

impl Cap {
    /// Why a loop waits for this cap, as `show` says it: "waiting for a free claude
    /// slot (cap 2)".
    pub fn waiting_text(&self) -> String {
        let what = match &self.key {
            CapKey::Kind(k) => format!("a free {k} slot"),
            CapKey::Provider(p) => format!("a free {p} slot"),
            CapKey::Account(a) => format!("a free slot of account {a}"),
        };
        format!("waiting for {what} (cap {})", self.limit)
    }
}

impl fmt::Display for Cap {
    /// The form [`Caps::parse`] reads back: `provider=claude:2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key, self.limit)
    }
}

/// A daemon's caps (`--max-concurrent-per`), one per key, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caps(Vec<Cap>);

impl Caps {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Cap> {
        self.0.iter()
    }

    /// Adds the caps of `text`, comma-separated `key=value:limit` items (`kind=agent:4,
    /// provider=claude:2, account=work:1`). A key given twice, an unknown key, kind or
    /// provider, or a limit that is not a whole number of at least 1 is refused.
    pub fn parse_into(&mut self, text: &str) -> Result<(), String> {
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let cap = parse_cap(item)?;
            if self.0.iter().any(|c| c.key == cap.key) {
                return Err(format!("cap {} given twice", cap.key));
            }
            self.0.push(cap);
        }
        Ok(())
    }

    /// Adds `other`'s caps, each replacing this one's on the same key (repeated
    /// `--max-concurrent-per` flags: the later wins, as `daemon restart` relies on).
    pub fn merge(&mut self, other: &Caps) {
        for cap in &other.0 {
            match self.0.iter_mut().find(|c| c.key == cap.key) {
                Some(mine) => mine.limit = cap.limit,
                None => self.0.push(cap.clone()),
            }
        }
    }

    /// The caps of `text` ([`Caps::parse_into`]).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut caps = Self::new();
        caps.parse_into(text)?;
        Ok(caps)
    }

    /// The first cap a run on `keys` would exceed with `in_flight` already running.
    pub fn blocking(&self, keys: &RunKeys, in_flight: &InFlight) -> Option<&Cap> {
        self.0.iter().find(|cap| {
            keys.counts_against(&cap.key) && in_flight.count(&cap.key) >= cap.limit as usize
        })
    }

    /// The caps as `--max-concurrent-per` reads them back (`provider=claude:2,…`).
    pub fn to_flag(&self) -> String {
        self.0
            .iter()
            .map(Cap::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_flag())
    }
}

impl std::str::FromStr for Caps {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

fn parse_cap(item: &str) -> Result<Cap, String> {
    let shape = || {
        format!(
            "invalid cap {item:?}: expected KEY=VALUE:LIMIT with KEY one of kind, provider, \
             account (e.g. provider=claude:2)"
        )
    };
    let (key, rest) = item.split_once('=').ok_or_else(shape)?;
    let (value, limit) = rest.rsplit_once(':').ok_or_else(shape)?;
    let limit: u32 = limit
        .trim()
        .parse()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("invalid cap {item:?}: the limit must be a whole number >= 1"))?;
    let value = value.trim();
    let key = match key.trim() {
        "kind" => {
            if !KINDS.contains(&value) {
                return Err(format!(
                    "invalid cap {item:?}: unknown kind {value:?} (expected one of {})",
                    KINDS.join(", ")
                ));
            }
            CapKey::Kind(value.to_owned())
        }
        "provider" => CapKey::Provider(
            value
                .parse()
                .map_err(|e: String| format!("invalid cap {item:?}: {e}"))?,
        ),
        "account" => {
            let ok = !value.is_empty() && value.chars().all(crate::validate::is_name_char);
            if !ok {
                return Err(format!(
                    "invalid cap {item:?}: an account profile is letters, digits, '.', '_' or '-'"
                ));
            }
            CapKey::Account(value.to_owned())
        }
        _ => return Err(shape()),
    };
    Ok(Cap { key, limit })
}

/// What one run counts against: its loop's target kind, and for an agent run its
/// provider and account (as the stores record them on the run at claim).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunKeys {
    pub kind: String,
    pub provider: Option<Provider>,
    pub account: Option<String>,
}

impl RunKeys {
    /// The keys of a run of `target`; `chosen` is the account a pool chose for it (an
    /// agent without an account or pool counts as [`DEFAULT_ACCOUNT`]).
    pub fn of(target: &Target, chosen: Option<&str>) -> Self {
        match target {
            Target::Agent(agent) => Self {
                kind: target.kind().to_owned(),
                provider: Some(agent.provider),
                account: Some(
                    chosen
                        .map(str::to_owned)
                        .or_else(|| agent.account.as_ref().map(|a| a.profile.clone()))
                        .unwrap_or_else(|| DEFAULT_ACCOUNT.to_owned()),
                ),
            },
            _ => Self {
                kind: target.kind().to_owned(),
                provider: None,
                account: None,
            },
        }
    }

    /// The keys as a store recorded them on a run (`run_kind`, `provider`, `account`
    /// columns): an agent run without an account is [`DEFAULT_ACCOUNT`]'s.
    pub fn recorded(kind: String, provider: Option<Provider>, account: Option<String>) -> Self {
        let account = provider.map(|_| account.unwrap_or_else(|| DEFAULT_ACCOUNT.to_owned()));
        Self {
            kind,
            provider,
            account,
        }
    }

    /// The account the stores record (and `Run::account` shows): `None` for an agent
    /// on [`DEFAULT_ACCOUNT`], which is no profile of its own.
    pub fn recorded_account(&self) -> Option<&str> {
        self.account.as_deref().filter(|a| *a != DEFAULT_ACCOUNT)
    }

    /// Whether a run on these keys counts against a cap on `key`.
    pub fn counts_against(&self, key: &CapKey) -> bool {
        match key {
            CapKey::Kind(k) => self.kind == *k,
            CapKey::Provider(p) => self.provider == Some(*p),
            CapKey::Account(a) => self.account.as_deref() == Some(a.as_str()),
        }
    }
}

/// The runs in flight, by their keys (the store's running rows, grouped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InFlight(Vec<(RunKeys, usize)>);

impl InFlight {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n` runs on `keys`.
    pub fn add(&mut self, keys: &RunKeys, n: usize) {
        match self.0.iter_mut().find(|(k, _)| k == keys) {
            Some((_, count)) => *count += n,
            None => self.0.push((keys.clone(), n)),
        }
    }

    /// The runs in flight that count against `key`.
    pub fn count(&self, key: &CapKey) -> usize {
        self.0
            .iter()
            .filter(|(k, _)| k.counts_against(key))
            .map(|(_, n)| n)
            .sum()
    }

    /// The runs in flight on `provider` and `account` (an account's load in a pool).
    pub fn load(&self, provider: Provider, account: &str) -> usize {
        self.0
            .iter()
            .filter(|(k, _)| k.provider == Some(provider) && k.account.as_deref() == Some(account))
            .map(|(_, n)| n)
            .sum()
    }
}

impl FromIterator<(RunKeys, usize)> for InFlight {
    fn from_iter<I: IntoIterator<Item = (RunKeys, usize)>>(iter: I) -> Self {
        let mut in_flight = Self::new();
        for (keys, n) in iter {
            in_flight.add(&keys, n);
        }
        in_flight
    }
}

/// Why a loop may not start now ([`admit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// A run would exceed this cap.
    Cap(Cap),
    /// Every account of its pool is held by a usage limit.
    PoolHeld,
}

impl Wait {
    /// As `show` says it.
    pub fn text(&self) -> String {
        match self {
            Wait::Cap(cap) => cap.waiting_text(),
            Wait::PoolHeld => "every account of its pool is held by a usage limit".to_owned(),
        }
    }
}

/// Whether a run of `target` may start now, and on which keys (with the account its
/// pool chose): the one decision of a scheduling pass and of a counted claim.
pub fn admit(
    target: &Target,
    caps: &Caps,
    in_flight: &InFlight,
    holds: &[AccountHold],
    now: Instant,
) -> Result<RunKeys, Wait> {
    let keys = match pool_of(target) {
        Some((provider, pool)) => {
            let account = choose_account(provider, pool, caps, in_flight, holds, now)?;
            RunKeys::of(target, Some(account))
        }
        None => RunKeys::of(target, None),
    };
    match caps.blocking(&keys, in_flight) {
        Some(cap) => Err(Wait::Cap(cap.clone())),
        None => Ok(keys),
    }
}

/// An agent target's provider and account pool, when it has one.
pub fn pool_of(target: &Target) -> Option<(Provider, &[String])> {
    match target {
        Target::Agent(agent) if !agent.account_pool.is_empty() => {
            Some((agent.provider, agent.account_pool.as_slice()))
        }
        _ => None,
    }
}

/// The account of `pool` a run on `provider` takes: the least loaded (fewest runs in
/// flight on the provider and account; ties in pool order) that no usage limit holds
/// at `now` and no cap stops. When none is free: [`Wait::PoolHeld`] if every one is
/// held, else the cap that stops the least loaded unheld one.
pub fn choose_account<'a>(
    provider: Provider,
    pool: &'a [String],
    caps: &Caps,
    in_flight: &InFlight,
    holds: &[AccountHold],
    now: Instant,
) -> Result<&'a str, Wait> {
    let held = |account: &str| {
        holds
            .iter()
            .any(|h| h.is_active(now) && h.provider == provider && h.account == account)
    };
    let mut unheld: Vec<(usize, usize, &'a str)> = pool
        .iter()
        .enumerate()
        .filter(|(_, a)| !held(a))
        .map(|(i, a)| (in_flight.load(provider, a), i, a.as_str()))
        .collect();
    unheld.sort();
    let mut first_cap = None;
    for (_, _, account) in &unheld {
        let keys = RunKeys {
            kind: "agent".to_owned(),
            provider: Some(provider),
            account: Some((*account).to_owned()),
        };
        match caps.blocking(&keys, in_flight) {
            None => return Ok(account),
            Some(cap) => {
                first_cap.get_or_insert_with(|| cap.clone());
            }
        }
    }
    Err(first_cap.map_or(Wait::PoolHeld, Wait::Cap))
}

/// Whether `lp` is due at `now` (its slot or its retry), as a pass would fetch it.
fn is_due(lp: &Loop, now: Instant) -> bool {
    lp.status == LoopStatus::Active
        && lp.held_until.is_none()
        && lp
            .retry_scheduled_for
            .or(lp.next_run_at)
            .is_some_and(|t| t <= now)
}

/// Fills in `waitingFor` of each due loop that no daemon may start now: under every
/// daemon's caps (`caps`, one set per daemon) a run of it would exceed a cap, the
/// first daemon's reason given. Loops held by a usage limit say so instead.
pub fn mark_waiting(loops: &mut [Loop], caps: &[Caps], in_flight: &InFlight, now: Instant) {
    if caps.iter().all(Caps::is_empty) {
        return;
    }
    for lp in loops {
        lp.waiting_for = None;
        if !is_due(lp, now) {
            continue;
        }
        let mut first = None;
        let waits = caps
            .iter()
            .all(|caps| match admit(&lp.target, caps, in_flight, &[], now) {
                Ok(_) => false,
                Err(wait) => {
                    first.get_or_insert(wait);
                    true
                }
            });
        if waits {
            lp.waiting_for = first.map(|w| w.text());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Account, AgentTarget, CommandTarget};
    use chrono::TimeZone;

    fn now() -> Instant {
        chrono::Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).unwrap()
    }

    fn agent(provider: Provider, account: Option<&str>, pool: &[&str]) -> Target {
        let mut t: AgentTarget = serde_json::from_value(serde_json::json!({
            "provider": provider.as_str(),
            "prompt": "hi",
        }))
        .unwrap();
        t.account = account.map(|p| Account {
            profile: p.to_owned(),
            tool: None,
        });
        t.account_pool = pool.iter().map(|s| (*s).to_owned()).collect();
        Target::Agent(t)
    }

    fn command() -> Target {
        Target::Command(
            serde_json::from_value::<CommandTarget>(serde_json::json!({"command": "true"}))
                .unwrap(),
        )
    }

    fn hold(provider: Provider, account: &str, until_min: i64) -> AccountHold {
        AccountHold {
            provider,
            account: account.to_owned(),
            held_until: now() + chrono::TimeDelta::minutes(until_min),
            reason: "usage limit".to_owned(),
            since: now(),
            probes: 0,
            notified: false,
            updated_at: now(),
        }
    }

    #[test]
    fn caps_parse_and_print_back() {
        let caps = Caps::parse("provider=claude:2, account=work:1,kind=agent:4").unwrap();
        assert_eq!(
            caps.to_flag(),
            "provider=claude:2,account=work:1,kind=agent:4"
        );
        assert_eq!(Caps::parse(&caps.to_flag()).unwrap(), caps);
        let mut more = caps.clone();
        more.parse_into("kind=command:1").unwrap();
        assert_eq!(more.iter().count(), 4);
        more.merge(&Caps::parse("provider=claude:5,kind=workflow:1").unwrap());
        assert_eq!(
            more.to_flag(),
            "provider=claude:5,account=work:1,kind=agent:4,kind=command:1,kind=workflow:1"
        );
    }

    #[test]
    fn bad_caps_are_refused_with_one_clear_error() {
        for (text, says) in [
            ("provider=gemini:2", "invalid Provider"),
            ("model=opus:1", "expected KEY=VALUE:LIMIT"),
            ("kind=shell:1", "unknown kind"),
            ("provider=claude:0", "whole number >= 1"),
            ("provider=claude", "expected KEY=VALUE:LIMIT"),
            ("account=a b:1", "account profile"),
            ("provider=claude:1,provider=claude:2", "given twice"),
        ] {
            let err = Caps::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn a_cap_blocks_only_its_key_and_counts_what_is_in_flight() {
        let caps = Caps::parse("provider=claude:2,account=work:1,kind=command:1").unwrap();
        let claude = RunKeys::of(&agent(Provider::Claude, None, &[]), None);
        let codex_work = RunKeys::of(&agent(Provider::Codex, Some("work"), &[]), None);
        let cmd = RunKeys::of(&command(), None);
        let mut in_flight = InFlight::new();
        assert_eq!(caps.blocking(&claude, &in_flight), None);
        in_flight.add(&claude, 1);
        assert_eq!(caps.blocking(&claude, &in_flight), None);
        in_flight.add(&claude, 1);
        let cap = caps.blocking(&claude, &in_flight).unwrap();
        assert_eq!(cap.waiting_text(), "waiting for a free claude slot (cap 2)");
        // Other keys are not stopped by claude's cap.
        assert_eq!(caps.blocking(&codex_work, &in_flight), None);
        assert_eq!(caps.blocking(&cmd, &in_flight), None);
        in_flight.add(&codex_work, 1);
        in_flight.add(&cmd, 1);
        // The account cap counts the account on any provider.
        let claude_work = RunKeys::of(&agent(Provider::Claude, Some("work"), &[]), None);
        let codex_work_again = caps.blocking(&codex_work, &in_flight).unwrap();
        assert_eq!(
            codex_work_again.waiting_text(),
            "waiting for a free slot of account work (cap 1)"
        );
        assert!(caps.blocking(&claude_work, &in_flight).is_some());
        assert_eq!(
            caps.blocking(&cmd, &in_flight).unwrap().waiting_text(),
            "waiting for a free command slot (cap 1)"
        );
    }

    #[test]
    fn within_one_pass_each_admitted_run_counts() {
        let caps = Caps::parse("provider=claude:1").unwrap();
        let target = agent(Provider::Claude, None, &[]);
        let mut in_flight = InFlight::new();
        let first = admit(&target, &caps, &in_flight, &[], now()).unwrap();
        in_flight.add(&first, 1);
        assert_eq!(
            admit(&target, &caps, &in_flight, &[], now()),
            Err(Wait::Cap(Cap {
                key: CapKey::Provider(Provider::Claude),
                limit: 1
            }))
        );
    }

    #[test]
    fn a_pool_takes_the_least_loaded_unheld_account_in_pool_order() {
        let pool = ["a", "b", "c"];
        let target = agent(Provider::Claude, None, &pool);
        let caps = Caps::new();
        let mut in_flight = InFlight::new();
        let pick = |in_flight: &InFlight, holds: &[AccountHold]| {
            admit(&target, &caps, in_flight, holds, now()).map(|k| k.account.unwrap())
        };
        // Ties in pool order.
        assert_eq!(pick(&in_flight, &[]).unwrap(), "a");
        in_flight.add(&RunKeys::of(&target, Some("a")), 1);
        assert_eq!(pick(&in_flight, &[]).unwrap(), "b");
        in_flight.add(&RunKeys::of(&target, Some("b")), 1);
        assert_eq!(pick(&in_flight, &[]).unwrap(), "c");
        // Load on another provider does not count against the account here.
        in_flight.add(
            &RunKeys::of(&agent(Provider::Codex, Some("c"), &[]), None),
            5,
        );
        assert_eq!(pick(&in_flight, &[]).unwrap(), "c");
        // A held account is passed over; a hold past its instant is not.
        let holds = [
            hold(Provider::Claude, "c", 10),
            hold(Provider::Claude, "a", -1),
        ];
        assert_eq!(pick(&in_flight, &holds).unwrap(), "a");
        // A hold on another provider does not hold the pool's account.
        let holds = [
            hold(Provider::Codex, "a", 10),
            hold(Provider::Claude, "c", 10),
        ];
        assert_eq!(pick(&in_flight, &holds).unwrap(), "a");
        let all = [
            hold(Provider::Claude, "a", 10),
            hold(Provider::Claude, "b", 10),
            hold(Provider::Claude, "c", 10),
        ];
        assert_eq!(pick(&in_flight, &all), Err(Wait::PoolHeld));
    }

    #[test]
    fn a_pool_skips_an_account_at_its_cap_and_waits_when_all_are() {
        let target = agent(Provider::Claude, None, &["work", "home"]);
        let caps = Caps::parse("account=work:1").unwrap();
        let mut in_flight = InFlight::new();
        in_flight.add(&RunKeys::of(&target, Some("work")), 1);
        in_flight.add(&RunKeys::of(&target, Some("home")), 1);
        // Equal load: work comes first in the pool but is at its cap.
        let keys = admit(&target, &caps, &in_flight, &[], now()).unwrap();
        assert_eq!(keys.account.as_deref(), Some("home"));
        let caps = Caps::parse("provider=claude:2").unwrap();
        assert!(matches!(
            admit(&target, &caps, &in_flight, &[], now()),
            Err(Wait::Cap(_))
        ));
        let holds = [hold(Provider::Claude, "home", 5)];
        let caps = Caps::parse("account=work:1").unwrap();
        assert_eq!(
            admit(&target, &caps, &in_flight, &holds, now()),
            Err(Wait::Cap(Cap {
                key: CapKey::Account("work".into()),
                limit: 1
            }))
        );
    }
}
