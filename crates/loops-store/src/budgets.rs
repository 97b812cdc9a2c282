//! What both backends' budgets compute the same way around the domain's decisions
//! (`loops_core::budget`): the limits a changed budget is decided again by, the columns
//! a budget hold's row names its scope with, the scopes of ended holds whose `resumed`
//! notification is due, and a window's spend added up from the `usage_json` column.

use crate::codec::{parse_json, Result};
use loops_core::budget::{Budget, BudgetHold, BudgetMetric, BudgetScope, Spend, StoreBudget};
use loops_core::{Loop, Target, Usage};

/// A budget's limit of each metric (`None`: none), in the order they are decided.
pub type Limits = [(BudgetMetric, Option<Budget>); 2];

/// The limits of loop `lp`'s own budgets (`budgetTokens`, `budgetUsd`): none for a loop
/// that is not an agent loop, whose runs spend nothing.
pub fn loop_limits(lp: &Loop) -> Limits {
    let agent = matches!(lp.target, Target::Agent(_));
    [
        (BudgetMetric::Tokens, lp.ops.budget_tokens.filter(|_| agent)),
        (BudgetMetric::Usd, lp.ops.budget_usd.filter(|_| agent)),
    ]
}

/// The limits of store-wide budget `b`.
pub fn store_limits(b: &StoreBudget) -> Limits {
    [(BudgetMetric::Tokens, b.tokens), (BudgetMetric::Usd, b.usd)]
}

/// The columns a `budget_holds` row names its scope with: `(loop_id, provider,
/// account)`, a loop's id for a loop's own budget, else the provider and its account
/// (`None`: every account).
pub fn scope_columns(scope: &BudgetScope) -> (Option<&str>, Option<&str>, Option<&str>) {
    match scope {
        BudgetScope::Loop(id) => (Some(id.as_str()), None, None),
        BudgetScope::Key { provider, account } => {
            (None, Some(provider.as_str()), account.as_deref())
        }
    }
}

/// The scopes of `ended` (holds just deleted) whose `held` notification went out, each
/// once in order: their `resumed` notification is due.
pub fn resumed_scopes(ended: &[&BudgetHold]) -> Vec<BudgetScope> {
    let mut resumed: Vec<BudgetScope> = Vec::new();
    for h in ended {
        if h.notified && !resumed.contains(&h.scope) {
            resumed.push(h.scope.clone());
        }
    }
    resumed
}

/// Adds the usage a `usage_json` column holds to `total`.
pub fn add_usage_json(total: &mut Spend, text: &str) -> Result<()> {
    let usage: Usage = parse_json(text, "usage_json")?;
    total.add(&usage);
    Ok(())
}
