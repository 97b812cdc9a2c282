//! Budgets (issue #20 item 7, `loops_core::budget`): the store-wide `budgets` rows, the
//! spend of a scope's window, and the `budget_holds` rows a finalization (or a changed
//! budget) writes and releases in its transaction — under an advisory lock of the
//! scope, so runners spending one budget at once queue one `held` notification. The
//! condition the due-loop queries use to leave a budget-held loop out is
//! `loops_store::not_held_at!`'s, which makes every runner of the store honour a hold
//! another one wrote.

use crate::codec::{get, ms, text, Cols};
use crate::error::Result;
use crate::holds::{self, key_account, key_provider};
use crate::session::{Conn, Db};
use loops_core::budget::{
    self, Budget, BudgetChange, BudgetHold, BudgetMetric, BudgetScope, Spend, StoreBudget,
};
use loops_core::workflow::StepRun;
use loops_core::{Delivery, Instant, Loop, Notify, NotifyEvent, Provider, Run, Target};
use loops_store::budget_covers;
use loops_store::budgets::{self, add_usage_json};
use loops_store::codec::StoredRow;
use loops_store::rows;
use tokio_postgres::Row;

use loops_store::budget_hold_cols as hold_cols;

macro_rules! budget_cols {
    () => {
        "provider, account, tokens, usd, updated_at"
    };
}

fn hold_from_row(row: &Row) -> Result<BudgetHold> {
    Ok(rows::budget_hold_row(&Cols(row))?)
}

fn budget_from_row(row: &Row) -> Result<StoreBudget> {
    Ok(rows::store_budget_row(&Cols(row))?)
}

pub(crate) async fn budgets(db: &Db<'_, impl Conn>) -> Result<Vec<StoreBudget>> {
    db.query_as(
        concat!(
            "SELECT ",
            budget_cols!(),
            " FROM budgets ORDER BY provider, account"
        ),
        &[],
        budget_from_row,
    )
    .await
}

async fn read_hold(
    db: &Db<'_, impl Conn>,
    scope: &BudgetScope,
    metric: BudgetMetric,
) -> Result<Option<BudgetHold>> {
    db.query_opt_as(
        concat!(
            "SELECT ",
            hold_cols!(),
            " FROM budget_holds WHERE scope = $1 AND metric = $2"
        ),
        &[&text(&scope.to_string()).as_ref(), &metric.as_str()],
        hold_from_row,
    )
    .await
}

/// What the runs of `scope` finished at or after `since` reported.
pub(crate) async fn spend(
    db: &Db<'_, impl Conn>,
    scope: &BudgetScope,
    since: Instant,
) -> Result<Spend> {
    let rows = match scope {
        BudgetScope::Loop(id) => {
            db.query(
                "SELECT usage_json FROM runs WHERE loop_id = $1 AND finished_at >= $2 \
                 AND usage_json IS NOT NULL",
                &[&id.as_str(), &ms(&since)],
            )
            .await?
        }
        BudgetScope::Key { provider, account } => {
            let account = account.as_deref().map(|a| text(a).into_owned());
            // A workflow's agent steps spend from their provider's budgets too.
            db.query(
                concat!(
                    "SELECT runs.usage_json FROM runs JOIN loops ON loops.id = runs.loop_id \
                     WHERE runs.finished_at >= $1 AND runs.usage_json IS NOT NULL AND ",
                    key_provider!(),
                    " = $2 AND ($3::text IS NULL OR COALESCE(runs.account, ",
                    key_account!(),
                    ") = $3) \
                     UNION ALL SELECT usage_json FROM workflow_step_runs \
                     WHERE finished_at >= $1 AND usage_json IS NOT NULL AND provider = $2 \
                       AND ($3::text IS NULL OR COALESCE(account_profile, 'default') = $3)"
                ),
                &[&ms(&since), &provider.as_str(), &account],
            )
            .await?
        }
    };
    let mut total = Spend::default();
    for row in &rows {
        add_usage_json(&mut total, &get::<String>(row, 0, "usage_json")?)?;
    }
    Ok(total)
}

/// Decides `budget` of `scope` at `now` and writes the result; with `noting` (the loop
/// and the run just finalized) queues the budget's `held` / `resumed` notification.
async fn decide_and_write(
    db: &Db<'_, impl Conn>,
    scope: &BudgetScope,
    budget: &Budget,
    noting: Option<(&Loop, &Run)>,
    now: Instant,
    default: &mut Option<Option<Notify>>,
) -> Result<Vec<Delivery>> {
    let scope_text = text(&scope.to_string()).into_owned();
    // Two runners finishing runs of one budget: the second sees the first's hold.
    db.execute(
        "SELECT pg_advisory_xact_lock(hashtext('budget_holds/' || $1 || '/' || $2))",
        &[&scope_text, &budget.metric.as_str()],
    )
    .await?;
    let (start, _) = budget::window_at(budget.window, now);
    let spent = spend(db, scope, start).await?;
    let current = read_hold(db, scope, budget.metric).await?;
    match budget::decide(scope, budget, &spent, current.as_ref(), now) {
        BudgetChange::Keep => Ok(Vec::new()),
        BudgetChange::Hold {
            mut hold,
            notify_held,
        } => {
            let sent = match noting {
                Some((lp, run)) if notify_held => {
                    queue_scope_event(db, scope, lp, run, NotifyEvent::Held, now, default).await?
                }
                _ => Vec::new(),
            };
            hold.notified |= !sent.is_empty();
            let (loop_id, provider, account) = budgets::scope_columns(scope);
            let account = account.map(|a| text(a).into_owned());
            db.execute(
                "INSERT INTO budget_holds (scope, metric, loop_id, provider, account, \
                   held_until, reason, notified, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ON CONFLICT (scope, metric) DO UPDATE SET \
                   held_until = excluded.held_until, reason = excluded.reason, \
                   notified = excluded.notified, updated_at = excluded.updated_at",
                &[
                    &scope_text,
                    &hold.metric.as_str(),
                    &loop_id,
                    &provider,
                    &account,
                    &ms(&hold.held_until),
                    &text(&hold.reason).as_ref(),
                    &hold.notified,
                    &ms(&hold.updated_at),
                ],
            )
            .await?;
            Ok(sent)
        }
        BudgetChange::Release { notify_resumed } => match noting {
            Some((lp, run)) => {
                delete_hold(db, scope, Some(budget.metric)).await?;
                if notify_resumed {
                    queue_scope_event(db, scope, lp, run, NotifyEvent::Resumed, now, default).await
                } else {
                    Ok(Vec::new())
                }
            }
            None => {
                end_hold(db, scope, Some(budget.metric), now).await?;
                Ok(Vec::new())
            }
        },
    }
}

/// Releases the holds of `scope` (one metric's, or all) at `now` with no run to name: a
/// hold whose `held` notification went out is ended rather than deleted, so that the
/// next finished run it covers deletes it and sends its one `resumed` notification
/// ([`sweep_ended`]); the others go at once.
async fn end_hold(
    db: &Db<'_, impl Conn>,
    scope: &BudgetScope,
    metric: Option<BudgetMetric>,
    now: Instant,
) -> Result<()> {
    let scope = text(&scope.to_string()).into_owned();
    let metric = metric.map(BudgetMetric::as_str);
    db.execute(
        "DELETE FROM budget_holds WHERE scope = $1 AND ($2::text IS NULL OR metric = $2) \
         AND NOT notified",
        &[&scope, &metric],
    )
    .await?;
    db.execute(
        "UPDATE budget_holds SET held_until = LEAST(held_until, $3), updated_at = $3 \
         WHERE scope = $1 AND ($2::text IS NULL OR metric = $2)",
        &[&scope, &metric, &ms(&now)],
    )
    .await?;
    Ok(())
}

/// Deletes the ended holds covering the run of `lp` just finalized (their window
/// passed, or their budget was raised, removed or cleared) that its budgets' own
/// decisions left, and queues the `resumed` notification of each one that was notified.
async fn sweep_ended(
    db: &Db<'_, impl Conn>,
    lp: &Loop,
    run: &Run,
    at: Instant,
    default: &mut Option<Option<Notify>>,
) -> Result<Vec<Delivery>> {
    let holds = budget_holds(db).await?;
    let ended = budget::ended_holds_of_run(lp, run.account.as_deref(), &holds, at);
    for h in &ended {
        delete_hold(db, &h.scope, Some(h.metric)).await?;
    }
    let mut sent = Vec::new();
    for scope in &budgets::resumed_scopes(&ended) {
        sent.extend(
            queue_scope_event(db, scope, lp, run, NotifyEvent::Resumed, at, default).await?,
        );
    }
    Ok(sent)
}

async fn delete_hold(
    db: &Db<'_, impl Conn>,
    scope: &BudgetScope,
    metric: Option<BudgetMetric>,
) -> Result<()> {
    db.execute(
        "DELETE FROM budget_holds WHERE scope = $1 AND ($2::text IS NULL OR metric = $2)",
        &[
            &text(&scope.to_string()).as_ref(),
            &metric.map(BudgetMetric::as_str),
        ],
    )
    .await?;
    Ok(())
}

/// Queues `event` about a budget of `scope` ([`holds::queue_hold_event`]).
async fn queue_scope_event(
    db: &Db<'_, impl Conn>,
    scope: &BudgetScope,
    lp: &Loop,
    run: &Run,
    event: NotifyEvent,
    now: Instant,
    default: &mut Option<Option<Notify>>,
) -> Result<Vec<Delivery>> {
    holds::queue_hold_event(db, budget_covers(scope), lp, run, event, now, default).await
}

/// After `run` of `lp` was finalized in this transaction: decides every budget that
/// covers the loop at the run's finish (agent loops only).
pub(crate) async fn after_finish(
    db: &Db<'_, impl Conn>,
    lp: &Loop,
    run: &Run,
    now: Instant,
    default: &mut Option<Option<Notify>>,
) -> Result<Vec<Delivery>> {
    if !matches!(lp.target, Target::Agent(_)) {
        return Ok(Vec::new());
    }
    let at = run.finished_at.unwrap_or(now);
    let mut sent = Vec::new();
    let store_wide = budgets(db).await?;
    for (scope, b) in budget::budgets_of_run(lp, run.account.as_deref(), &store_wide) {
        sent.extend(decide_and_write(db, &scope, &b, Some((lp, run)), at, default).await?);
    }
    sent.extend(sweep_ended(db, lp, run, at, default).await?);
    Ok(sent)
}

/// After workflow step run `step` was saved in this transaction: when it is an agent
/// step that finished with usage, decides its provider's store-wide budgets at its
/// finish, so that the agent loops they cover are held once the steps spent them.
/// No notification: a step has no run of a loop to name (the next run of a covered
/// loop that finishes sends the budget's `held`).
pub(crate) async fn after_step(db: &Db<'_, impl Conn>, step: &StepRun, now: Instant) -> Result<()> {
    let (Some(at), Some(_)) = (step.finished_at, step.usage.as_ref()) else {
        return Ok(());
    };
    let row = db
        .query_opt(
            "SELECT provider, account_profile FROM workflow_step_runs WHERE id = $1",
            &[&step.id.as_str()],
        )
        .await?;
    let Some(row) = row else {
        return Ok(());
    };
    let Some(provider) = Cols(&row).opt_parsed::<Provider>(0, "provider")? else {
        return Ok(());
    };
    let account: Option<String> = get(&row, 1, "account_profile")?;
    let store_wide = budgets(db).await?;
    let mut default = None;
    for (scope, b) in budget::budgets_of_step(provider, account.as_deref(), &store_wide) {
        decide_and_write(db, &scope, &b, None, at.min(now), &mut default).await?;
    }
    Ok(())
}

/// After loop `lp`'s definition changed: its own budgets decided again at `now` (a
/// raised or removed budget releases its hold), without notification.
pub(crate) async fn after_edit(db: &Db<'_, impl Conn>, lp: &Loop, now: Instant) -> Result<()> {
    let scope = BudgetScope::Loop(lp.id.clone());
    decide_limits(db, &scope, budgets::loop_limits(lp), now).await
}

/// Decides each of `limits` of `scope` again at `now`, without notification; a metric
/// without a limit ends its hold.
async fn decide_limits(
    db: &Db<'_, impl Conn>,
    scope: &BudgetScope,
    limits: budgets::Limits,
    now: Instant,
) -> Result<()> {
    let mut default = None;
    for (metric, limit) in limits {
        match limit {
            Some(b) => {
                decide_and_write(db, scope, &b, None, now, &mut default).await?;
            }
            None => end_hold(db, scope, Some(metric), now).await?,
        }
    }
    Ok(())
}

pub(crate) async fn set_budget(db: &Db<'_, impl Conn>, b: &StoreBudget) -> Result<()> {
    let now = b.updated_at;
    let account = text(b.account.as_deref().unwrap_or("")).into_owned();
    db.execute(
        "INSERT INTO budgets (provider, account, tokens, usd, updated_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider, account) DO UPDATE SET \
           tokens = excluded.tokens, usd = excluded.usd, updated_at = excluded.updated_at",
        &[
            &b.provider.as_str(),
            &account,
            &b.tokens.map(|t| t.to_string()),
            &b.usd.map(|u| u.to_string()),
            &ms(&now),
        ],
    )
    .await?;
    decide_limits(db, &b.scope(), budgets::store_limits(b), now).await
}

pub(crate) async fn clear_budget(
    db: &Db<'_, impl Conn>,
    provider: Provider,
    account: Option<&str>,
    now: Instant,
) -> Result<Option<StoreBudget>> {
    let stored = text(account.unwrap_or("")).into_owned();
    let cleared = db
        .query_opt_as(
            concat!(
                "DELETE FROM budgets WHERE provider = $1 AND account = $2 RETURNING ",
                budget_cols!()
            ),
            &[&provider.as_str(), &stored],
            budget_from_row,
        )
        .await?;
    let scope = BudgetScope::Key {
        provider,
        account: account.map(str::to_owned),
    };
    end_hold(db, &scope, None, now).await?;
    Ok(cleared)
}

pub(crate) async fn budget_holds(db: &Db<'_, impl Conn>) -> Result<Vec<BudgetHold>> {
    db.query_as(
        concat!(
            "SELECT ",
            hold_cols!(),
            " FROM budget_holds ORDER BY scope, metric"
        ),
        &[],
        hold_from_row,
    )
    .await
}
