//! Usage-limit holds (issue #20 item 2, `loops_core::hold`): the `account_holds` rows a
//! finalization writes and releases in its own transaction, with the one `held` /
//! `resumed` notification of their key, and SQLite's pieces of the condition the
//! due-loop queries use to leave a held key's loops out (composed by
//! `loops_store::not_held_at!`).

use crate::codec::{loop_cols, ms, query_all, query_first, Cols};
use crate::error::{Result, StoreResult};
use crate::SqliteStore;
use loops_core::hold::{self, AccountHold, HoldChange, HoldKey, StepLimit};
use loops_core::{Delivery, Instant, Loop, NotifyEvent, Provider, Run};
use loops_store::rows;
use loops_store::{hold_covers, CoveredKey};
use rusqlite::{params, Connection, Row};

/// The hold key of the loop row `loops` as SQL: its agent target's provider, and its
/// account profile or 'default' (`HoldKey::of`); NULL for other targets (and for a
/// `target_json` that is not JSON, which must not fail the due-loop queries).
macro_rules! key_provider {
    () => {
        "(CASE WHEN json_valid(loops.target_json) THEN \
           CASE WHEN json_extract(loops.target_json, '$.type') = 'agent' \
             THEN json_extract(loops.target_json, '$.provider') END END)"
    };
}
macro_rules! key_account {
    () => {
        "(CASE WHEN json_valid(loops.target_json) THEN \
           COALESCE(json_extract(loops.target_json, '$.account.profile'), 'default') END)"
    };
}

/// Until when the loop row `loops` is held (NULL or an instant past: not held): its
/// key's hold; for a pooled agent (`accountPool`) the earliest end among its accounts'
/// holds when every account has one, else 0 (a pooled loop is held only while all its
/// accounts are, `loops_core::hold::mark_held`).
macro_rules! hold_end_of_loop {
    () => {
        concat!(
            "(CASE WHEN json_valid(loops.target_json) \
               AND json_type(loops.target_json, '$.accountPool') = 'array' \
             THEN (SELECT MIN(COALESCE((SELECT MAX(h.held_until) FROM account_holds h \
                     WHERE h.provider = ",
            $crate::holds::key_provider!(),
            " AND h.account = p.value), 0)) \
                   FROM json_each(loops.target_json, '$.accountPool') p) \
             ELSE (SELECT MAX(h.held_until) FROM account_holds h WHERE ",
            loops_store::hold_of_loop!(crate::holds),
            ") END)"
        )
    };
}
pub(crate) use {hold_end_of_loop, key_account, key_provider};

use loops_store::account_hold_cols as hold_cols;

fn hold_from_row(row: &Row<'_>) -> Result<AccountHold> {
    Ok(rows::account_hold_row(&Cols(row))?)
}

/// Whether the store has any hold, an account's or a budget's (the due-loop queries'
/// fast path when it has none).
pub(crate) fn any(conn: &Connection) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM account_holds) OR EXISTS (SELECT 1 FROM budget_holds)",
        )?
        .query_row([], |r| r.get(0))?)
}

fn read(conn: &Connection, key: &HoldKey) -> Result<Option<AccountHold>> {
    query_first(
        conn,
        concat!(
            "SELECT ",
            hold_cols!(),
            " FROM account_holds WHERE provider = ?1 AND account = ?2"
        ),
        params![key.provider.as_str(), key.account],
        hold_from_row,
    )
}

/// After `run` of `lp` was finalized in this transaction: writes or releases the hold
/// of its key as the domain decides, and queues the key's `held` / `resumed`
/// notification.
pub(crate) fn after_finish(
    conn: &Connection,
    lp: &Loop,
    run: &Run,
    now: Instant,
) -> Result<Vec<Delivery>> {
    let Some(key) = HoldKey::of_run(&lp.target, run) else {
        return Ok(Vec::new());
    };
    let covers = hold_covers(&key);
    let current = read(conn, &key)?;
    match hold::after_finish(lp, run, current.as_ref(), &loops_store::hold_timing()) {
        HoldChange::Keep => Ok(Vec::new()),
        HoldChange::Hold {
            mut hold,
            notify_held,
        } => {
            let sent = if notify_held {
                queue_hold_event(conn, covers, lp, run, NotifyEvent::Held, now)?
            } else {
                Vec::new()
            };
            hold.notified |= !sent.is_empty();
            upsert(conn, &hold)?;
            Ok(sent)
        }
        HoldChange::Release { notify_resumed } => {
            delete(conn, &key)?;
            if notify_resumed {
                queue_hold_event(conn, covers, lp, run, NotifyEvent::Resumed, now)
            } else {
                Ok(Vec::new())
            }
        }
    }
}

/// After a workflow agent step on `key` ended: writes or releases the key's hold as the
/// domain decides (`loops_core::hold::after_step`); returns the hold as it is after.
pub(crate) fn after_step(
    conn: &Connection,
    key: &HoldKey,
    limit: Option<&StepLimit>,
    now: Instant,
) -> Result<Option<AccountHold>> {
    let current = read(conn, key)?;
    match hold::after_step(
        current.as_ref(),
        key,
        now,
        limit,
        &loops_store::hold_timing(),
    ) {
        HoldChange::Keep => Ok(current),
        HoldChange::Hold { hold, .. } => {
            upsert(conn, &hold)?;
            Ok(Some(hold))
        }
        HoldChange::Release { .. } => {
            delete(conn, key)?;
            Ok(None)
        }
    }
}

fn upsert(conn: &Connection, hold: &AccountHold) -> Result<()> {
    conn.prepare_cached(concat!(
        "INSERT INTO account_holds (",
        hold_cols!(),
        ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (provider, account) DO UPDATE SET \
           held_until = excluded.held_until, reason = excluded.reason, \
           since = excluded.since, probes = excluded.probes, \
           notified = excluded.notified, updated_at = excluded.updated_at"
    ))?
    .execute(params![
        hold.provider.as_str(),
        hold.account,
        ms(&hold.held_until),
        hold.reason,
        ms(&hold.since),
        hold.probes,
        hold.notified,
        ms(&hold.updated_at),
    ])?;
    Ok(())
}

fn delete(conn: &Connection, key: &HoldKey) -> Result<()> {
    conn.prepare_cached("DELETE FROM account_holds WHERE provider = ?1 AND account = ?2")?
        .execute(params![key.provider.as_str(), key.account])?;
    Ok(())
}

/// `lp` and the other active loops of the hold key `provider` / `account` (`None`:
/// every account of the provider), by name: the loops an account's hold or a store-wide
/// budget's covers.
fn key_loops(
    conn: &Connection,
    provider: Provider,
    account: Option<&str>,
    lp: &Loop,
) -> Result<Vec<Loop>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        loop_cols!(),
        " FROM loops WHERE status = 'active' AND id != ?3 AND ",
        key_provider!(),
        " = ?1 AND (?2 IS NULL OR ",
        key_account!(),
        " = ?2) ORDER BY name"
    ))?;
    let mut rows = stmt.query(params![provider.as_str(), account, lp.id.as_str()])?;
    let mut loops = vec![lp.clone()];
    while let Some(row) = rows.next()? {
        // A loop that does not decode has no settings to read; the others still count.
        if let Ok(other) = crate::codec::loop_from_row(row) {
            loops.push(other);
        }
    }
    Ok(loops)
}

/// Queues `event` about a hold once per channel of the loops it covers (`lp`, the
/// run's own, and the other active loops of `covers`), each loop's settings or else
/// the store-wide default, whatever their `on` ([`loops_store::hold_channels`]): a hold
/// needs a person, once per account or budget rather than once per loop. The
/// deliveries name `run`, the run that met (or no longer met) the limit.
pub(crate) fn queue_hold_event(
    conn: &Connection,
    covers: CoveredKey<'_>,
    lp: &Loop,
    run: &Run,
    event: NotifyEvent,
    now: Instant,
) -> Result<Vec<Delivery>> {
    let loops = match covers {
        Some((provider, account)) => key_loops(conn, provider, account, lp)?,
        None => vec![lp.clone()],
    };
    let default = crate::notify::read_default(conn)?;
    let mut sent = Vec::new();
    for (channel, target) in loops_store::hold_channels(&loops, default.as_ref()) {
        sent.push(crate::notify::insert(
            conn, run, event, channel, target, now,
        )?);
    }
    Ok(sent)
}

pub(crate) fn account_holds(store: &SqliteStore) -> StoreResult<Vec<AccountHold>> {
    store.read(all_in)
}

/// Every hold, by provider and account, as `conn` (a claim's transaction) sees them.
pub(crate) fn all_in(conn: &Connection) -> Result<Vec<AccountHold>> {
    query_all(
        conn,
        concat!(
            "SELECT ",
            hold_cols!(),
            " FROM account_holds ORDER BY provider, account"
        ),
        [],
        hold_from_row,
    )
}

pub(crate) fn clear_account_holds(
    store: &SqliteStore,
    provider: Provider,
    account: Option<&str>,
) -> StoreResult<Vec<AccountHold>> {
    store.write(None, |tx| {
        let mut cleared = query_all(
            tx,
            concat!(
                "DELETE FROM account_holds WHERE provider = ?1 AND (?2 IS NULL OR account = ?2) \
             RETURNING ",
                hold_cols!()
            ),
            params![provider.as_str(), account],
            hold_from_row,
        )?;
        cleared.sort_by(|a, b| a.account.cmp(&b.account));
        Ok(cleared)
    })
}
