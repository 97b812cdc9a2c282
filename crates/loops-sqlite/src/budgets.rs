//! Budgets (issue #20 item 7, `loops_core::budget`): the store-wide `budgets` rows, the
//! spend of a scope's window, and the `budget_holds` rows a finalization (or a changed
//! budget) writes and releases in its transaction, with the one `held` / `resumed`
//! notification of each budget. The condition the due-loop queries use to leave a
//! budget-held loop out is `loops_store::not_held_at!`'s.

use crate::codec::{get, ms, query_all, query_first, Cols};
use crate::error::{Result, StoreResult};
use crate::holds::{self, key_account, key_provider};
use crate::SqliteStore;
use loops_core::budget::{
    self, Budget, BudgetChange, BudgetHold, BudgetMetric, BudgetScope, Spend, StoreBudget,
};
use loops_core::workflow::StepRun;
use loops_core::{Delivery, Instant, Loop, NotifyEvent, Provider, Run, Target};
use loops_store::budget_covers;
use loops_store::budgets::{self, add_usage_json};
use loops_store::codec::StoredRow;
use loops_store::rows;
use rusqlite::{params, Connection, Row};

use loops_store::budget_hold_cols as hold_cols;

fn hold_from_row(row: &Row<'_>) -> Result<BudgetHold> {
    Ok(rows::budget_hold_row(&Cols(row))?)
}

fn budget_from_row(row: &Row<'_>) -> Result<StoreBudget> {
    Ok(rows::store_budget_row(&Cols(row))?)
}

fn read_budgets(conn: &Connection) -> Result<Vec<StoreBudget>> {
    query_all(
        conn,
        "SELECT provider, account, tokens, usd, updated_at FROM budgets ORDER BY provider, account",
        [],
        budget_from_row,
    )
}

fn read_hold(
    conn: &Connection,
    scope: &BudgetScope,
    metric: BudgetMetric,
) -> Result<Option<BudgetHold>> {
    query_first(
        conn,
        concat!(
            "SELECT ",
            hold_cols!(),
            " FROM budget_holds WHERE scope = ?1 AND metric = ?2"
        ),
        params![scope.to_string(), metric.as_str()],
        hold_from_row,
    )
}

/// What the runs of `scope` finished at or after `since` reported.
fn spend(conn: &Connection, scope: &BudgetScope, since: Instant) -> Result<Spend> {
    let mut total = Spend::default();
    let mut add = |text: String| add_usage_json(&mut total, &text);
    match scope {
        BudgetScope::Loop(id) => {
            let mut stmt = conn.prepare_cached(
                "SELECT usage_json FROM runs WHERE loop_id = ?1 AND finished_at >= ?2 \
                 AND usage_json IS NOT NULL",
            )?;
            let mut rows = stmt.query(params![id.as_str(), ms(&since)])?;
            while let Some(row) = rows.next()? {
                add(get(row, 0, "usage_json")?)?;
            }
        }
        BudgetScope::Key { provider, account } => {
            // A workflow's agent steps spend from their provider's budgets too.
            let mut stmt = conn.prepare_cached(concat!(
                "SELECT runs.usage_json FROM runs JOIN loops ON loops.id = runs.loop_id \
                 WHERE runs.finished_at >= ?1 AND runs.usage_json IS NOT NULL AND ",
                key_provider!(),
                " = ?2 AND (?3 IS NULL OR COALESCE(runs.account, ",
                key_account!(),
                ") = ?3) \
                 UNION ALL SELECT usage_json FROM workflow_step_runs \
                 WHERE finished_at >= ?1 AND usage_json IS NOT NULL AND provider = ?2 \
                   AND (?3 IS NULL OR COALESCE(account_profile, 'default') = ?3)"
            ))?;
            let mut rows = stmt.query(params![ms(&since), provider.as_str(), account])?;
            while let Some(row) = rows.next()? {
                add(get(row, 0, "usage_json")?)?;
            }
        }
    }
    Ok(total)
}

/// Decides `budget` of `scope` at `now` and writes the result; with `noting` (the loop
/// and the run just finalized) queues the budget's `held` / `resumed` notification.
fn decide_and_write(
    conn: &Connection,
    scope: &BudgetScope,
    budget: &Budget,
    noting: Option<(&Loop, &Run)>,
    now: Instant,
) -> Result<Vec<Delivery>> {
    let (start, _) = budget::window_at(budget.window, now);
    let spent = spend(conn, scope, start)?;
    let current = read_hold(conn, scope, budget.metric)?;
    match budget::decide(scope, budget, &spent, current.as_ref(), now) {
        BudgetChange::Keep => Ok(Vec::new()),
        BudgetChange::Hold {
            mut hold,
            notify_held,
        } => {
            let sent = match noting {
                Some((lp, run)) if notify_held => {
                    queue_scope_event(conn, scope, lp, run, NotifyEvent::Held, now)?
                }
                _ => Vec::new(),
            };
            hold.notified |= !sent.is_empty();
            let (loop_id, provider, account) = budgets::scope_columns(scope);
            conn.prepare_cached(
                "INSERT INTO budget_holds (scope, metric, loop_id, provider, account, \
                   held_until, reason, notified, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
                 ON CONFLICT (scope, metric) DO UPDATE SET \
                   held_until = excluded.held_until, reason = excluded.reason, \
                   notified = excluded.notified, updated_at = excluded.updated_at",
            )?
            .execute(params![
                scope.to_string(),
                hold.metric.as_str(),
                loop_id,
                provider,
                account,
                ms(&hold.held_until),
                hold.reason,
                hold.notified,
                ms(&hold.updated_at),
            ])?;
            Ok(sent)
        }
        BudgetChange::Release { notify_resumed } => match noting {
            Some((lp, run)) => {
                delete_hold(conn, scope, Some(budget.metric))?;
                if notify_resumed {
                    queue_scope_event(conn, scope, lp, run, NotifyEvent::Resumed, now)
                } else {
                    Ok(Vec::new())
                }
            }
            None => {
                end_hold(conn, scope, Some(budget.metric), now)?;
                Ok(Vec::new())
            }
        },
    }
}

/// Releases the holds of `scope` (one metric's, or all) at `now` with no run to name: a
/// hold whose `held` notification went out is ended rather than deleted, so that the
/// next finished run it covers deletes it and sends its one `resumed` notification
/// ([`sweep_ended`]); the others go at once.
fn end_hold(
    conn: &Connection,
    scope: &BudgetScope,
    metric: Option<BudgetMetric>,
    now: Instant,
) -> Result<()> {
    let (scope, metric) = (scope.to_string(), metric.map(BudgetMetric::as_str));
    conn.prepare_cached(
        "DELETE FROM budget_holds WHERE scope = ?1 AND (?2 IS NULL OR metric = ?2) \
         AND NOT notified",
    )?
    .execute(params![scope, metric])?;
    conn.prepare_cached(
        "UPDATE budget_holds SET held_until = MIN(held_until, ?3), updated_at = ?3 \
         WHERE scope = ?1 AND (?2 IS NULL OR metric = ?2)",
    )?
    .execute(params![scope, metric, ms(&now)])?;
    Ok(())
}

/// Deletes the ended holds covering the run of `lp` just finalized (their window
/// passed, or their budget was raised, removed or cleared) that its budgets' own
/// decisions left, and queues the `resumed` notification of each one that was notified.
fn sweep_ended(conn: &Connection, lp: &Loop, run: &Run, at: Instant) -> Result<Vec<Delivery>> {
    let holds = budget_holds_in(conn)?;
    let ended = budget::ended_holds_of_run(lp, run.account.as_deref(), &holds, at);
    for h in &ended {
        delete_hold(conn, &h.scope, Some(h.metric))?;
    }
    let mut sent = Vec::new();
    for scope in &budgets::resumed_scopes(&ended) {
        sent.extend(queue_scope_event(
            conn,
            scope,
            lp,
            run,
            NotifyEvent::Resumed,
            at,
        )?);
    }
    Ok(sent)
}

fn delete_hold(conn: &Connection, scope: &BudgetScope, metric: Option<BudgetMetric>) -> Result<()> {
    conn.prepare_cached(
        "DELETE FROM budget_holds WHERE scope = ?1 AND (?2 IS NULL OR metric = ?2)",
    )?
    .execute(params![scope.to_string(), metric.map(BudgetMetric::as_str)])?;
    Ok(())
}

/// Queues `event` about a budget of `scope` ([`holds::queue_hold_event`]).
fn queue_scope_event(
    conn: &Connection,
    scope: &BudgetScope,
    lp: &Loop,
    run: &Run,
    event: NotifyEvent,
    now: Instant,
) -> Result<Vec<Delivery>> {
    holds::queue_hold_event(conn, budget_covers(scope), lp, run, event, now)
}

/// After `run` of `lp` was finalized in this transaction: decides every budget that
/// covers the loop at the run's finish (agent loops only).
pub(crate) fn after_finish(
    conn: &Connection,
    lp: &Loop,
    run: &Run,
    now: Instant,
) -> Result<Vec<Delivery>> {
    if !matches!(lp.target, Target::Agent(_)) {
        return Ok(Vec::new());
    }
    let at = run.finished_at.unwrap_or(now);
    let mut sent = Vec::new();
    let store_wide = read_budgets(conn)?;
    for (scope, budget) in budget::budgets_of_run(lp, run.account.as_deref(), &store_wide) {
        sent.extend(decide_and_write(
            conn,
            &scope,
            &budget,
            Some((lp, run)),
            at,
        )?);
    }
    sent.extend(sweep_ended(conn, lp, run, at)?);
    Ok(sent)
}

/// After workflow step run `step` was saved in this transaction: when it is an agent
/// step that finished with usage, decides its provider's store-wide budgets at its
/// finish, so that the agent loops they cover are held once the steps spent them.
/// No notification: a step has no run of a loop to name (the next run of a covered
/// loop that finishes sends the budget's `held`).
pub(crate) fn after_step(conn: &Connection, step: &StepRun, now: Instant) -> Result<()> {
    let (Some(at), Some(_)) = (step.finished_at, step.usage.as_ref()) else {
        return Ok(());
    };
    let key = query_first(
        conn,
        "SELECT provider, account_profile FROM workflow_step_runs WHERE id = ?1",
        [step.id.as_str()],
        |row| {
            Ok((
                Cols(row).opt_parsed::<Provider>(0, "provider")?,
                get::<Option<String>>(row, 1, "account_profile")?,
            ))
        },
    )?;
    let Some((Some(provider), account)) = key else {
        return Ok(());
    };
    let store_wide = read_budgets(conn)?;
    for (scope, budget) in budget::budgets_of_step(provider, account.as_deref(), &store_wide) {
        decide_and_write(conn, &scope, &budget, None, at.min(now))?;
    }
    Ok(())
}

/// After loop `lp`'s definition changed: its own budgets decided again at `now` (a
/// raised or removed budget releases its hold), without notification.
pub(crate) fn after_edit(conn: &Connection, lp: &Loop, now: Instant) -> Result<()> {
    let scope = BudgetScope::Loop(lp.id.clone());
    decide_limits(conn, &scope, budgets::loop_limits(lp), now)
}

/// Decides each of `limits` of `scope` again at `now`, without notification; a metric
/// without a limit ends its hold.
fn decide_limits(
    conn: &Connection,
    scope: &BudgetScope,
    limits: budgets::Limits,
    now: Instant,
) -> Result<()> {
    for (metric, limit) in limits {
        match limit {
            Some(budget) => {
                decide_and_write(conn, scope, &budget, None, now)?;
            }
            None => end_hold(conn, scope, Some(metric), now)?,
        }
    }
    Ok(())
}

pub(crate) fn budgets(store: &SqliteStore) -> StoreResult<Vec<StoreBudget>> {
    store.read(read_budgets)
}

pub(crate) fn set_budget(store: &SqliteStore, b: &StoreBudget) -> StoreResult<()> {
    let now = b.updated_at;
    store.write(None, |tx| {
        tx.prepare_cached(
            "INSERT INTO budgets (provider, account, tokens, usd, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (provider, account) DO UPDATE SET \
               tokens = excluded.tokens, usd = excluded.usd, updated_at = excluded.updated_at",
        )?
        .execute(params![
            b.provider.as_str(),
            b.account.as_deref().unwrap_or(""),
            b.tokens.map(|t| t.to_string()),
            b.usd.map(|u| u.to_string()),
            ms(&now),
        ])?;
        decide_limits(tx, &b.scope(), budgets::store_limits(b), now)
    })
}

pub(crate) fn clear_budget(
    store: &SqliteStore,
    provider: Provider,
    account: Option<&str>,
    now: Instant,
) -> StoreResult<Option<StoreBudget>> {
    store.write(None, |tx| {
        let cleared = query_first(
            tx,
            "DELETE FROM budgets WHERE provider = ?1 AND account = ?2 \
             RETURNING provider, account, tokens, usd, updated_at",
            params![provider.as_str(), account.unwrap_or("")],
            budget_from_row,
        )?;
        let scope = BudgetScope::Key {
            provider,
            account: account.map(str::to_owned),
        };
        end_hold(tx, &scope, None, now)?;
        Ok(cleared)
    })
}

pub(crate) fn budget_holds(store: &SqliteStore) -> StoreResult<Vec<BudgetHold>> {
    store.read(budget_holds_in)
}

/// Every budget hold, as `conn` (maybe a claim's transaction) sees them.
pub(crate) fn budget_holds_in(conn: &Connection) -> Result<Vec<BudgetHold>> {
    query_all(
        conn,
        concat!(
            "SELECT ",
            hold_cols!(),
            " FROM budget_holds ORDER BY scope, metric"
        ),
        [],
        hold_from_row,
    )
}

pub(crate) fn budget_spend(
    store: &SqliteStore,
    scope: &BudgetScope,
    since: Instant,
) -> StoreResult<Spend> {
    store.read(|conn| spend(conn, scope, since))
}
