//! Usage-limit holds (issue #20 item 2, `loops_core::hold`): `loops holds`, `loops holds
//! clear`, and the `heldUntil` / `heldReason` a loop's views show. The store keeps one
//! hold per provider and account; the loops of a held account are marked here.

use super::{Client, Result};
use loops_core::caps::{self, Caps};
use loops_core::hold::{self, AccountHold};
use loops_core::{Instant, Loop, Provider, Target};

impl Client {
    /// Every account hold (active ones, and those past their instant that no run on
    /// their account released yet: `probing`).
    pub fn holds(&self) -> Result<Vec<AccountHold>> {
        Ok(self.store.account_holds()?)
    }

    /// Releases the holds of `provider` (on `account`, or every account of it), for a
    /// person who knows the limit was lifted: the account's loops are due again at
    /// once. Returns what was released; no `resumed` notification.
    pub fn clear_holds(
        &self,
        provider: Provider,
        account: Option<&str>,
    ) -> Result<Vec<AccountHold>> {
        Ok(self.store.clear_account_holds(provider, account)?)
    }

    /// The concurrency caps each daemon (runner) recorded (`--max-concurrent-per`):
    /// `(runner id, caps)`, live runners only on PostgreSQL.
    pub fn concurrency_caps(&self) -> Result<Vec<(String, String)>> {
        Ok(self.store.recorded_caps()?)
    }

    /// Fills in the held fields of `loops` from the store's holds active at `now` (an
    /// account's or a budget's; read only when one of them is an agent loop), then
    /// `waitingFor` of the due loops the daemons' caps keep waiting.
    pub(super) fn mark_held(&self, loops: &mut [Loop], now: Instant) -> Result<()> {
        if loops.iter().any(|l| matches!(l.target, Target::Agent(_))) {
            let holds = self.store.account_holds()?;
            hold::mark_held(loops, &holds, now);
            // A spent budget holds too (`loops_core::budget`); the later end is shown.
            let budget_holds = self.store.budget_holds()?;
            loops_core::budget::mark_held(loops, &budget_holds, now);
        }
        self.mark_waiting(loops, now)
    }

    /// Fills in `waitingFor` of the due loops the daemons' caps keep waiting (reads the
    /// runs in flight only when a daemon recorded caps and a loop is due).
    fn mark_waiting(&self, loops: &mut [Loop], now: Instant) -> Result<()> {
        let recorded = self.store.recorded_caps()?;
        let caps: Vec<Caps> = recorded
            .iter()
            .filter_map(|(_, text)| Caps::parse(text).ok())
            .filter(|c| !c.is_empty())
            .collect();
        let due = |l: &Loop| {
            l.retry_scheduled_for
                .or(l.next_run_at)
                .is_some_and(|t| t <= now)
        };
        if caps.is_empty() || !loops.iter().any(due) {
            return Ok(());
        }
        let in_flight = self.store.running_keys()?;
        caps::mark_waiting(loops, &caps, &in_flight, now);
        Ok(())
    }

    /// What [`Client::mark_held`] reads, read once, for a listing handed out one loop
    /// at a time ([`Marks::apply`]): the holds (whatever the loops' targets) and, when
    /// a daemon recorded caps, the runs in flight.
    pub(super) fn marks(&self, now: Instant) -> Result<Marks> {
        let caps: Vec<Caps> = self
            .store
            .recorded_caps()?
            .iter()
            .filter_map(|(_, text)| Caps::parse(text).ok())
            .filter(|c| !c.is_empty())
            .collect();
        let in_flight = if caps.is_empty() {
            None
        } else {
            Some(self.store.running_keys()?)
        };
        Ok(Marks {
            holds: self.store.account_holds()?,
            budget_holds: self.store.budget_holds()?,
            caps,
            in_flight,
            now,
        })
    }
}

/// The holds and caps [`Client::mark_held`] marks loops by, read once
/// ([`Client::marks`]).
pub(super) struct Marks {
    holds: Vec<AccountHold>,
    budget_holds: Vec<loops_core::budget::BudgetHold>,
    caps: Vec<Caps>,
    in_flight: Option<caps::InFlight>,
    now: Instant,
}

impl Marks {
    /// Marks one loop as [`Client::mark_held`] marks it among others: only an agent
    /// loop can be held (a budget is an agent loop's; `validate::budgets`), and the
    /// caps wait only a due loop.
    pub(super) fn apply(&self, lp: &mut Loop) {
        let one = std::slice::from_mut(lp);
        if matches!(one[0].target, Target::Agent(_)) {
            hold::mark_held(one, &self.holds, self.now);
            loops_core::budget::mark_held(one, &self.budget_holds, self.now);
        }
        if let Some(in_flight) = &self.in_flight {
            caps::mark_waiting(one, &self.caps, in_flight, self.now);
        }
    }
}
