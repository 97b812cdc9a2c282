//! Notifications: the store-wide default (in `meta`), the delivery rows a finalization
//! queues in its own transaction (the decision is the domain's,
//! `loops_core::notify::decide`), their claims and their results.

use crate::codec::{insert_with_new_id, ms, query_all, query_first, sat_i64, Cols};
use crate::error::{Result, StoreResult};
use crate::SqliteStore;
use loops_core::notify;
use loops_core::{
    Delivery, DeliveryStatus, Instant, Loop, Notify, NotifyChannel, NotifyEvent, Run, RunId,
};
use loops_store::codec::{decode_notify_default, encode_notify_default, META_NOTIFY_DEFAULT};
use loops_store::rows;
use rusqlite::{params, Connection, OptionalExtension, Row};

use loops_store::delivery_cols;
use loops_store::DeliveryTry;

fn delivery_from_row(row: &Row<'_>) -> Result<Delivery> {
    Ok(rows::delivery_row(&Cols(row))?)
}

pub(crate) fn read_default(conn: &Connection) -> Result<Option<Notify>> {
    let text: Option<String> = conn
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([META_NOTIFY_DEFAULT], |r| r.get(0))
        .optional()?;
    Ok(text.as_deref().map(decode_notify_default).transpose()?)
}

pub(crate) fn notify_default(store: &SqliteStore) -> StoreResult<Option<Notify>> {
    store.read(read_default)
}

pub(crate) fn set_notify_default(store: &SqliteStore, notify: Option<&Notify>) -> StoreResult<()> {
    store.write(None, |tx| write_default(tx, notify))
}

/// Writes the store-wide default (`None`: removes it) inside the caller's transaction.
pub(crate) fn write_default(conn: &Connection, notify: Option<&Notify>) -> Result<()> {
    match encode_notify_default(notify)? {
        Some(text) => conn
            .prepare_cached(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![META_NOTIFY_DEFAULT, text])?,
        None => conn
            .prepare_cached("DELETE FROM meta WHERE key = ?1")?
            .execute([META_NOTIFY_DEFAULT])?,
    };
    Ok(())
}

/// After `run` was finalized in this transaction: queues the notifications its loop's
/// settings (else the store-wide default) call for, one `pending` row per channel.
pub(crate) fn queue_for_run(
    conn: &Connection,
    lp: &Loop,
    run: &Run,
    now: Instant,
) -> Result<Vec<Delivery>> {
    // Skipped and successful runs under `failure` (the common case) stop here, after
    // at most one point read of the default.
    // A usage limit holds its account instead of failing: its key's one `held`
    // notification stands for it (`crate::holds`).
    if run.status == loops_core::RunStatus::Skipped || loops_core::hold::holds(lp, run) {
        return Ok(Vec::new());
    }
    let default = match &lp.notify {
        Some(_) => None,
        None => read_default(conn)?,
    };
    let Some(settings) = notify::effective(lp.notify.as_ref(), default.as_ref()) else {
        return Ok(Vec::new());
    };
    let allowed = loops_core::transitions::attempts_allowed(lp, run);
    let event = notify::decide(settings.on, run, allowed, || {
        previous_slot_failed(conn, lp, run)
    })?;
    let Some(event) = event else {
        return Ok(Vec::new());
    };
    notify::channels(settings)
        .into_iter()
        .map(|(channel, target)| insert(conn, run, event, channel, target, now))
        .collect()
}

/// After `run` was finalized in this transaction: queues a notification about its
/// loop (`event`: parked by the circuit breaker, …) on every channel of the loop's
/// settings (else the store-wide default), whatever their `on`: it happens once per
/// loop and needs a person.
pub(crate) fn queue_event(
    conn: &Connection,
    lp: &Loop,
    run: &Run,
    event: NotifyEvent,
    now: Instant,
) -> Result<Vec<Delivery>> {
    let default = match &lp.notify {
        Some(_) => None,
        None => read_default(conn)?,
    };
    let Some(settings) = notify::effective(lp.notify.as_ref(), default.as_ref()) else {
        return Ok(Vec::new());
    };
    notify::channels(settings)
        .into_iter()
        .map(|(channel, target)| insert(conn, run, event, channel, target, now))
        .collect()
}

/// Whether the newest other slot of the loop whose last attempt is known (a success,
/// or a failure on its last attempt; ad-hoc runs have one) failed. Walks the loop's
/// runs newest first through `runs_loop_created` and stops at the first such run.
fn previous_slot_failed(conn: &Connection, lp: &Loop, run: &Run) -> Result<bool> {
    let status: Option<String> = conn
        .prepare_cached(
            "SELECT status FROM runs INDEXED BY runs_loop_created \
             WHERE loop_id = ?1 AND id != ?2 AND scheduled_for != ?3 \
               AND (status = 'succeeded' \
                    OR (status IN ('failed', 'timed_out', 'abandoned') \
                        AND (attempt >= ?4 OR source = 'ad_hoc'))) \
             ORDER BY created_at DESC, rowid DESC LIMIT 1",
        )?
        .query_row(
            params![
                lp.id.as_str(),
                run.id.as_str(),
                ms(&run.scheduled_for),
                lp.max_attempts
            ],
            |r| r.get(0),
        )
        .optional()?;
    Ok(status.is_some_and(|s| s != "succeeded"))
}

pub(crate) fn insert(
    conn: &Connection,
    run: &Run,
    event: NotifyEvent,
    channel: NotifyChannel,
    target: &str,
    now: Instant,
) -> Result<Delivery> {
    insert_with_new_id(
        conn,
        concat!(
            "INSERT INTO notification_deliveries \
               (id, run_id, loop_id, event, channel, target, status, attempts, created_at, \
                updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', 0, ?7, ?7) RETURNING ",
            delivery_cols!()
        ),
        params![
            run.id.as_str(),
            run.loop_id.as_str(),
            event.as_str(),
            channel.as_str(),
            target,
            ms(&now)
        ],
        "notification delivery",
        delivery_from_row,
        |_| None,
    )
}

pub(crate) fn deliveries_of_runs(
    store: &SqliteStore,
    runs: &[RunId],
) -> StoreResult<Vec<Delivery>> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let ids = serde_json::to_string(&runs.iter().map(RunId::as_str).collect::<Vec<_>>())
        .map_err(|e| loops_store::StoreError::InvalidArgument(format!("run ids: {e}")))?;
    let mut found = store.read(|conn| {
        query_all(
            conn,
            concat!(
                "SELECT ",
                delivery_cols!(),
                " FROM notification_deliveries \
             WHERE run_id IN (SELECT value FROM json_each(?1)) ORDER BY created_at, rowid"
            ),
            [ids],
            delivery_from_row,
        )
    })?;
    rows::sort_by_runs(&mut found, runs);
    Ok(found)
}

pub(crate) fn pending_deliveries(store: &SqliteStore, limit: usize) -> StoreResult<Vec<Delivery>> {
    store.read(|conn| {
        query_all(
            conn,
            concat!(
                "SELECT ",
                delivery_cols!(),
                " FROM notification_deliveries INDEXED BY notification_deliveries_pending \
             WHERE status = 'pending' ORDER BY created_at, rowid LIMIT +?1"
            ),
            [sat_i64(limit as u64)],
            delivery_from_row,
        )
    })
}

pub(crate) fn claim_delivery(
    store: &SqliteStore,
    id: &str,
    from: Option<&str>,
    runner_id: &str,
    until: Instant,
    now: Instant,
) -> StoreResult<Option<Delivery>> {
    store.write(None, |tx| {
        query_first(
            tx,
            concat!(
                "UPDATE notification_deliveries SET claimed_by = ?3, claim_expires_at = ?4, \
               updated_at = ?5 \
             WHERE id = ?1 AND status = 'pending' AND claimed_by IS ?2 RETURNING ",
                delivery_cols!()
            ),
            params![id, from, runner_id, ms(&until), ms(&now)],
            delivery_from_row,
        )
    })
}

pub(crate) fn record_delivery(
    store: &SqliteStore,
    attempt: &DeliveryTry,
    now: Instant,
) -> StoreResult<Option<Delivery>> {
    let done = attempt.status != DeliveryStatus::Pending;
    store.write(None, |tx| {
        query_first(
            tx,
            concat!(
                "UPDATE notification_deliveries SET status = ?3, attempts = ?4, last_error = ?5, \
               updated_at = ?6, \
               claimed_by = CASE WHEN ?7 THEN NULL ELSE claimed_by END, \
               claim_expires_at = CASE WHEN ?7 THEN NULL ELSE claim_expires_at END \
             WHERE id = ?1 AND status = 'pending' AND claimed_by = ?2 RETURNING ",
                delivery_cols!()
            ),
            params![
                attempt.id,
                attempt.runner_id,
                attempt.status.as_str(),
                attempt.attempts,
                attempt.last_error,
                ms(&now),
                done
            ],
            delivery_from_row,
        )
    })
}
