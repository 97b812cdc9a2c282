//! Admitting agent steps past holds: the account and budget holds as last read (at
//! most once a second while a step waits), a step held pending, a hold released.

use super::*;

/// How long the holds read for admitting agent steps are trusted: while a step waits
/// for its key, the store is asked again at most this often (so `loops holds clear`
/// or a raised budget lets it start within about this long).
pub(super) const HOLDS_MAX_AGE: Duration = Duration::from_secs(1);

/// The account holds and budget holds as last read, for admitting agent steps: a step
/// whose provider and account are held waits, pending, instead of meeting the limit
/// (or spending past the budget) again.
#[derive(Default)]
pub(super) struct Holds {
    read_at: Option<tokio::time::Instant>,
    pub(super) accounts: Vec<AccountHold>,
    pub(super) budgets: Vec<BudgetHold>,
}

impl Holds {
    /// The holds, read again when older than [`HOLDS_MAX_AGE`].
    pub(super) fn fresh(&mut self, store: &dyn Store) -> Result<&Self, StoreError> {
        let now = tokio::time::Instant::now();
        if self
            .read_at
            .is_none_or(|at| now.duration_since(at) >= HOLDS_MAX_AGE)
        {
            self.accounts = store.account_holds()?;
            self.budgets = store.budget_holds()?;
            self.read_at = Some(now);
        }
        Ok(self)
    }

    /// Forgets what was read: the next admission asks the store.
    pub(super) fn expire(&mut self) {
        self.read_at = None;
    }
}

/// The provider and account an agent step runs on (what holds and budgets key it by);
/// `None` for a command step, which nothing holds.
pub(super) fn step_key(step: &Step) -> Option<HoldKey> {
    let StepTarget::Agent(agent) = &step.target else {
        return None;
    };
    Some(HoldKey {
        provider: agent.provider,
        account: step.account().map_or_else(
            || loops_core::hold::DEFAULT_ACCOUNT.to_owned(),
            |a| a.profile.clone(),
        ),
    })
}

/// What a pending step waiting for its key says, in our words (its `error` while it
/// waits, and its `step_held` event's).
pub(super) fn held_note(until: Instant, reason: &str) -> String {
    format!("held until {}: {reason}", format_instant(&until))
}

/// Leaves `record` pending while its key is held until `until`: its `error` says so
/// while it waits, and a `step_held` event records the hold (`usageLimit`: the step
/// itself met the limit).
pub(super) fn hold_step(
    ctx: &RunContext,
    record: &mut StepRun,
    until: Instant,
    reason: &str,
    met_limit: bool,
) -> Result<(), StoreError> {
    record.status = StepStatus::Pending;
    record.error = Some(held_note(until, reason));
    let ev = NewEvent::new(
        WorkflowEventType::StepHeld,
        Some(&record.step_id),
        json!({ "heldUntil": format_instant(&until), "reason": reason, "usageLimit": met_limit }),
    );
    ctx.store
        .save_step_run(record, &[ev], ctx.now(), ctx.fence())
}

/// After an agent step on `key` ended without meeting a usage limit: the key's hold,
/// when it is past its instant and told nobody, is released (the step was the probe);
/// one a `held` went out for is left to the next run of a loop, which sends `resumed`.
pub(super) fn release_past_hold(
    ctx: &RunContext,
    holds: &Holds,
    key: &HoldKey,
) -> Result<(), StoreError> {
    let now = ctx.now();
    let stale = holds.accounts.iter().any(|h| {
        h.provider == key.provider && h.account == key.account && !h.is_active(now) && !h.notified
    });
    if stale {
        ctx.store.hold_after_step(key, None, now, ctx.fence())?;
    }
    Ok(())
}
