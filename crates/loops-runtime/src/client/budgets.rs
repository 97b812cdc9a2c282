//! Budgets (issue #20 item 7, `loops_core::budget`): `loops budget set|list|clear`, the
//! spend of each budget in its window (`loops usage`, `show`), and the budget holds a
//! loop's `heldUntil` / `heldReason` show beside an account's.

use super::{Client, ClientError, Result};
use loops_core::budget::{
    self, Budget, BudgetHold, BudgetMetric, BudgetScope, BudgetStatus, StoreBudget,
};
use loops_core::{Instant, Loop, Target};

impl Client {
    /// The store-wide budgets.
    pub fn budgets(&self) -> Result<Vec<StoreBudget>> {
        Ok(self.store.budgets()?)
    }

    /// Every budget hold row (those past their window wait for a run to release them).
    pub fn budget_holds(&self) -> Result<Vec<BudgetHold>> {
        Ok(self.store.budget_holds()?)
    }

    /// Sets the store-wide budget of `key` (`provider=claude[,account=work]`): the limits
    /// given replace the key's, a limit not given stays as it was. The store decides
    /// the key's holds again at once (a raised limit releases its loops).
    pub fn set_budget(
        &self,
        key: &str,
        tokens: Option<&str>,
        usd: Option<&str>,
        now: Instant,
    ) -> Result<StoreBudget> {
        let BudgetScope::Key { provider, account } =
            BudgetScope::parse_key(key).map_err(ClientError::Invalid)?
        else {
            return Err(ClientError::Invalid(format!("invalid budget key {key:?}")));
        };
        if tokens.is_none() && usd.is_none() {
            return Err(ClientError::Invalid(
                "budget set needs --tokens N/day|week or --usd X/day|week".into(),
            ));
        }
        let parse = |metric, text: Option<&str>, flag: &str| {
            text.map(|t| Budget::parse(metric, t, flag))
                .transpose()
                .map_err(ClientError::Invalid)
        };
        let tokens = parse(BudgetMetric::Tokens, tokens, "--tokens")?;
        let usd = parse(BudgetMetric::Usd, usd, "--usd")?;
        let current = self
            .store
            .budgets()?
            .into_iter()
            .find(|b| b.provider == provider && b.account == account);
        let budget = StoreBudget {
            provider,
            tokens: tokens.or(current.as_ref().and_then(|c| c.tokens)),
            usd: usd.or(current.as_ref().and_then(|c| c.usd)),
            account,
            updated_at: now,
        };
        self.store.set_budget(&budget)?;
        Ok(budget)
    }

    /// Removes the store-wide budget of exactly `key` and releases its holds at `now`.
    pub fn clear_budget(&self, key: &str, now: Instant) -> Result<StoreBudget> {
        let BudgetScope::Key { provider, account } =
            BudgetScope::parse_key(key).map_err(ClientError::Invalid)?
        else {
            return Err(ClientError::Invalid(format!("invalid budget key {key:?}")));
        };
        self.store
            .clear_budget(provider, account.as_deref(), now)?
            .ok_or_else(|| ClientError::Invalid(format!("no budget for {key}")))
    }

    /// Each budget covering `loops` (their own; with `store_wide`, every store-wide
    /// budget too, else those covering them) against its spend in its window at `now`.
    pub fn budget_status(
        &self,
        loops: &[Loop],
        store_wide: bool,
        now: Instant,
    ) -> Result<Vec<BudgetStatus>> {
        let keyed = self.store.budgets()?;
        let mut wanted: Vec<(BudgetScope, Budget)> = Vec::new();
        for lp in loops {
            for (scope, b) in budget::budgets_of(lp, &keyed) {
                if !wanted.contains(&(scope.clone(), b)) {
                    wanted.push((scope, b));
                }
            }
        }
        if store_wide {
            for sb in &keyed {
                for b in [sb.tokens, sb.usd].into_iter().flatten() {
                    if !wanted.contains(&(sb.scope(), b)) {
                        wanted.push((sb.scope(), b));
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(wanted.len());
        for (scope, b) in wanted {
            let (start, _) = budget::window_at(b.window, now);
            let spend = self.store.budget_spend(&scope, start)?;
            out.push(BudgetStatus::new(scope, &b, &spend, now));
        }
        Ok(out)
    }

    /// Every budget of the store against its spend: the loops' own and the store-wide
    /// ones (`loops usage`).
    pub fn all_budget_status(&self, now: Instant) -> Result<Vec<BudgetStatus>> {
        let loops: Vec<Loop> = self
            .store
            .list_loops(None)?
            .into_iter()
            .filter(|l| {
                matches!(l.target, Target::Agent(_))
                    && (l.ops.budget_tokens.is_some() || l.ops.budget_usd.is_some())
            })
            .collect();
        // The loops' own, then each store-wide budget once.
        let mut own = Vec::new();
        for lp in &loops {
            let scope = BudgetScope::Loop(lp.id.clone());
            for b in [lp.ops.budget_tokens, lp.ops.budget_usd]
                .into_iter()
                .flatten()
            {
                let (start, _) = budget::window_at(b.window, now);
                let spend = self.store.budget_spend(&scope, start)?;
                let mut status = BudgetStatus::new(scope.clone(), &b, &spend, now);
                status.loop_name = Some(lp.name.clone());
                own.push(status);
            }
        }
        own.extend(self.budget_status(&[], true, now)?);
        Ok(own)
    }
}
