//! Notifications: the store-wide default (in `meta`), the delivery rows a finalization
//! queues in its own transaction (the decision is the domain's,
//! `loops_core::notify::decide`), their claims and their results.

use crate::codec::{get, ms, opt_text, sat_i64, text, Cols};
use crate::error::{Error, Result};
use crate::session::{Conn, Db};
use loops_core::notify;
use loops_core::{
    Delivery, DeliveryStatus, Instant, Loop, Notify, NotifyChannel, NotifyEvent, Run, RunId,
};
use loops_store::codec::{decode_notify_default, encode_notify_default, META_NOTIFY_DEFAULT};
use loops_store::rows;
use tokio_postgres::Row;

use loops_store::delivery_cols;
use loops_store::DeliveryTry;

fn delivery_from_row(row: &Row) -> Result<Delivery> {
    Ok(rows::delivery_row(&Cols(row))?)
}

pub(crate) async fn notify_default(db: &Db<'_, impl Conn>) -> Result<Option<Notify>> {
    let rows = db
        .query(SELECT_NOTIFY_DEFAULT, &[&META_NOTIFY_DEFAULT])
        .await?;
    notify_default_from(&rows)
}

/// Reads the default notification settings (`$1`: [`META_NOTIFY_DEFAULT`]).
pub(crate) const SELECT_NOTIFY_DEFAULT: &str = "SELECT value FROM meta WHERE key = $1";

/// The default notification settings from [`SELECT_NOTIFY_DEFAULT`]'s rows.
pub(crate) fn notify_default_from(rows: &[tokio_postgres::Row]) -> Result<Option<Notify>> {
    rows.first()
        .map(|r| Ok(decode_notify_default(&get::<String>(r, 0, "value")?)?))
        .transpose()
}

pub(crate) async fn set_notify_default(
    db: &Db<'_, impl Conn>,
    notify: Option<&Notify>,
) -> Result<()> {
    match encode_notify_default(notify)? {
        Some(value) => {
            db.execute(
                "INSERT INTO meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&META_NOTIFY_DEFAULT, &value],
            )
            .await?
        }
        None => {
            db.execute("DELETE FROM meta WHERE key = $1", &[&META_NOTIFY_DEFAULT])
                .await?
        }
    };
    Ok(())
}

/// The store-wide notification default, read into `default` (the caller's
/// transaction's cache) on first need and reused after.
pub(crate) async fn cached_default(
    db: &Db<'_, impl Conn>,
    default: &mut Option<Option<Notify>>,
) -> Result<Option<Notify>> {
    if default.is_none() {
        *default = Some(notify_default(db).await?);
    }
    Ok(default.clone().flatten())
}

/// After `run` was finalized in this transaction: queues a notification about its
/// loop (`event`: parked by the circuit breaker, …) on every channel of the loop's
/// settings (else the store-wide default), whatever their `on`: it happens once per
/// loop and needs a person.
pub(crate) async fn queue_event(
    db: &Db<'_, impl Conn>,
    lp: &Loop,
    run: &Run,
    event: loops_core::NotifyEvent,
    now: Instant,
    default: &mut Option<Option<Notify>>,
) -> Result<Vec<Delivery>> {
    let default = match &lp.notify {
        Some(_) => None,
        None => cached_default(db, default).await?,
    };
    let Some(settings) = notify::effective(lp.notify.as_ref(), default.as_ref()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (channel, target) in notify::channels(settings) {
        out.push(insert(db, run, event, channel, target, now).await?);
    }
    Ok(out)
}

/// After `run` was finalized in this transaction: queues the notifications its loop's
/// settings (else the store-wide default) call for, one `pending` row per channel.
///
/// `default` caches the store's notification default for the caller's transaction:
/// read on first need, then reused by the batch's other runs.
pub(crate) async fn queue_for_run(
    db: &Db<'_, impl Conn>,
    lp: &Loop,
    run: &Run,
    now: Instant,
    default: &mut Option<Option<Notify>>,
) -> Result<Vec<Delivery>> {
    // A usage limit holds its account instead of failing: its key's one `held`
    // notification stands for it (`crate::holds`).
    if run.status == loops_core::RunStatus::Skipped || loops_core::hold::holds(lp, run) {
        return Ok(Vec::new());
    }
    let default = match &lp.notify {
        Some(_) => None,
        None => cached_default(db, default).await?,
    };
    let Some(settings) = notify::effective(lp.notify.as_ref(), default.as_ref()) else {
        return Ok(Vec::new());
    };
    // The domain asks about the previous slot only when it needs to; the answer is
    // looked up first here (an async lookup cannot run inside its callback).
    let previous_failed = if run.status == loops_core::RunStatus::Succeeded {
        previous_slot_failed(db, lp, run).await?
    } else {
        false
    };
    let allowed = loops_core::transitions::attempts_allowed(lp, run);
    let event = notify::decide(settings.on, run, allowed, || {
        Ok::<_, Error>(previous_failed)
    })?;
    let Some(event) = event else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (channel, target) in notify::channels(settings) {
        out.push(insert(db, run, event, channel, target, now).await?);
    }
    Ok(out)
}

/// Whether the newest other slot of the loop whose last attempt is known (a success,
/// or a failure on its last attempt; ad-hoc runs have one) failed.
async fn previous_slot_failed(db: &Db<'_, impl Conn>, lp: &Loop, run: &Run) -> Result<bool> {
    let row = db
        .query_opt(
            "SELECT status FROM runs \
             WHERE loop_id = $1 AND id != $2 AND scheduled_for != $3 \
               AND (status = 'succeeded' \
                    OR (status IN ('failed', 'timed_out', 'abandoned') \
                        AND (attempt >= $4 OR source = 'ad_hoc'))) \
             ORDER BY created_at DESC, seq DESC LIMIT 1",
            &[
                &lp.id.as_str(),
                &run.id.as_str(),
                &ms(&run.scheduled_for),
                &i64::from(lp.max_attempts),
            ],
        )
        .await?;
    Ok(match row {
        Some(r) => get::<String>(&r, 0, "status")? != "succeeded",
        None => false,
    })
}

pub(crate) async fn insert(
    db: &Db<'_, impl Conn>,
    run: &Run,
    event: NotifyEvent,
    channel: NotifyChannel,
    target: &str,
    now: Instant,
) -> Result<Delivery> {
    let row = db
        .insert_with_new_id(
            concat!(
                "INSERT INTO notification_deliveries \
                   (id, run_id, loop_id, event, channel, target, status, attempts, \
                    created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $7) \
                 ON CONFLICT (id) DO NOTHING RETURNING ",
                delivery_cols!()
            ),
            &[
                &run.id.as_str(),
                &run.loop_id.as_str(),
                &event.as_str(),
                &channel.as_str(),
                &text(target).as_ref(),
                &ms(&now),
            ],
            "notification delivery",
        )
        .await?;
    delivery_from_row(&row)
}

pub(crate) async fn deliveries_of_runs(
    db: &Db<'_, impl Conn>,
    runs: &[RunId],
) -> Result<Vec<Delivery>> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = runs.iter().map(RunId::as_str).collect();
    let mut found = db
        .query_as(
            concat!(
                "SELECT ",
                delivery_cols!(),
                " FROM notification_deliveries WHERE run_id = ANY($1::text[]) \
                 ORDER BY created_at, seq"
            ),
            &[&ids],
            delivery_from_row,
        )
        .await?;
    loops_store::rows::sort_by_runs(&mut found, runs);
    Ok(found)
}

pub(crate) async fn pending_deliveries(
    db: &Db<'_, impl Conn>,
    limit: usize,
) -> Result<Vec<Delivery>> {
    db.query_as(
        concat!(
            "SELECT ",
            delivery_cols!(),
            " FROM notification_deliveries WHERE status = 'pending' \
                 ORDER BY created_at, seq LIMIT $1"
        ),
        &[&sat_i64(limit as u64)],
        delivery_from_row,
    )
    .await
}

pub(crate) async fn claim_delivery(
    db: &Db<'_, impl Conn>,
    id: &str,
    from: Option<&str>,
    runner_id: &str,
    until: Instant,
    now: Instant,
) -> Result<Option<Delivery>> {
    db.query_opt_as(
        concat!(
            "UPDATE notification_deliveries SET claimed_by = $3, claim_expires_at = $4, \
               updated_at = $5 \
             WHERE id = $1 AND status = 'pending' AND claimed_by IS NOT DISTINCT FROM $2 \
             RETURNING ",
            delivery_cols!()
        ),
        &[&id, &from, &runner_id, &ms(&until), &ms(&now)],
        delivery_from_row,
    )
    .await
}

pub(crate) async fn record_delivery(
    db: &Db<'_, impl Conn>,
    attempt: &DeliveryTry,
    now: Instant,
) -> Result<Option<Delivery>> {
    let done = attempt.status != DeliveryStatus::Pending;
    db.query_opt_as(
        concat!(
            "UPDATE notification_deliveries SET status = $3, attempts = $4, last_error = $5, \
               updated_at = $6, \
               claimed_by = CASE WHEN $7 THEN NULL ELSE claimed_by END, \
               claim_expires_at = CASE WHEN $7 THEN NULL ELSE claim_expires_at END \
             WHERE id = $1 AND status = 'pending' AND claimed_by = $2 RETURNING ",
            delivery_cols!()
        ),
        &[
            &attempt.id,
            &attempt.runner_id,
            &attempt.status.as_str(),
            &i64::from(attempt.attempts),
            &opt_text(attempt.last_error.as_deref()),
            &ms(&now),
            &done,
        ],
        delivery_from_row,
    )
    .await
}
