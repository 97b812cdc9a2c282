//! Usage-limit holds (issue #20 item 2, `loops_core::hold`): `loops holds`, `loops holds
//! clear`, and the `heldUntil` / `heldReason` a loop's views show. The store keeps one
//! hold per provider and account; the loops of a held account are marked here.

use super::{Client, Result};
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

    /// Fills in the held fields of `loops` from the store's holds active at `now` (an
    /// account's or a budget's); reads the holds only when one of them is an agent loop.
    pub(super) fn mark_held(&self, loops: &mut [Loop], now: Instant) -> Result<()> {
        if !loops.iter().any(|l| matches!(l.target, Target::Agent(_))) {
            return Ok(());
        }
        let holds = self.store.account_holds()?;
        hold::mark_held(loops, &holds, now);
        // A spent budget holds too (`loops_core::budget`); the later end is shown.
        let budget_holds = self.store.budget_holds()?;
        loops_core::budget::mark_held(loops, &budget_holds, now);
        Ok(())
    }
}
