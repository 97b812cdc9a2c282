//! Usage-limit holds (issue #20 item 2, `loops_core::hold`): the `account_holds` rows a
//! finalization writes and releases in its own transaction — under an advisory lock of
//! the key, so runners meeting the limit at once queue one `held` notification — and
//! PostgreSQL's pieces of the condition the due-loop queries use to leave a held key's
//! loops out (composed by `loops_store::not_held_at!`), which makes every runner of the
//! store honour a hold another one wrote.

use crate::codec::{get, loop_cols, ms, text, Cols};
use crate::error::Result;
use crate::session::{Conn, Db};
use loops_core::hold::{self, AccountHold, HoldChange, HoldKey, StepLimit};
use loops_core::{Delivery, Instant, Loop, Notify, NotifyEvent, Provider, Run};
use loops_store::rows;
use loops_store::{hold_covers, CoveredKey};
use tokio_postgres::Row;

/// The hold key of the loop row `loops` as SQL: its agent target's provider (NULL for
/// other targets) and its account profile or 'default' (`HoldKey::of`).
macro_rules! key_provider {
    () => {
        "(CASE WHEN (loops.target_json::jsonb ->> 'type') = 'agent' \
           THEN loops.target_json::jsonb ->> 'provider' END)"
    };
}
macro_rules! key_account {
    () => {
        "COALESCE(loops.target_json::jsonb #>> '{account,profile}', 'default')"
    };
}

/// Until when the loop row `loops` is held (NULL or an instant past: not held): its
/// key's hold; for a pooled agent (`accountPool`) the earliest end among its accounts'
/// holds when every account has one, else 0 (a pooled loop is held only while all its
/// accounts are, `loops_core::hold::mark_held`).
macro_rules! hold_end_of_loop {
    () => {
        concat!(
            "(CASE WHEN jsonb_typeof(loops.target_json::jsonb -> 'accountPool') = 'array' \
             THEN (SELECT MIN(COALESCE((SELECT MAX(h.held_until) FROM account_holds h \
                     WHERE h.provider = ",
            $crate::holds::key_provider!(),
            " AND h.account = p.value), 0)) \
                   FROM jsonb_array_elements_text(loops.target_json::jsonb -> 'accountPool') \
                     AS p(value)) \
             ELSE (SELECT MAX(h.held_until) FROM account_holds h WHERE ",
            loops_store::hold_of_loop!(crate::holds),
            ") END)"
        )
    };
}
pub(crate) use {hold_end_of_loop, key_account, key_provider};

use loops_store::account_hold_cols as hold_cols;

fn hold_from_row(row: &Row) -> Result<AccountHold> {
    Ok(rows::account_hold_row(&Cols(row))?)
}

/// Whether the store has any hold (the due-loop queries' fast path when it has none).
pub(crate) async fn any(db: &Db<'_, impl Conn>) -> Result<bool> {
    let row = db
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM account_holds) OR EXISTS (SELECT 1 FROM budget_holds)",
            &[],
        )
        .await?;
    get(&row, 0, "exists")
}

/// After `run` of `lp` was finalized in this transaction: writes or releases the hold
/// of its key as the domain decides, and queues the key's `held` / `resumed`
/// notification. `default` is the batch's cache of the store's notification default.
pub(crate) async fn after_finish(
    db: &Db<'_, impl Conn>,
    lp: &Loop,
    run: &Run,
    now: Instant,
    default: &mut Option<Option<Notify>>,
) -> Result<Vec<Delivery>> {
    let Some(key) = HoldKey::of_run(&lp.target, run) else {
        return Ok(Vec::new());
    };
    let covers = hold_covers(&key);
    let current = lock_and_read(db, &key).await?;
    match hold::after_finish(lp, run, current.as_ref(), &loops_store::hold_timing()) {
        HoldChange::Keep => Ok(Vec::new()),
        HoldChange::Hold {
            mut hold,
            notify_held,
        } => {
            let sent = if notify_held {
                queue_hold_event(db, covers, lp, run, NotifyEvent::Held, now, default).await?
            } else {
                Vec::new()
            };
            hold.notified |= !sent.is_empty();
            upsert(db, &hold).await?;
            Ok(sent)
        }
        HoldChange::Release { notify_resumed } => {
            delete(db, &key).await?;
            if notify_resumed {
                queue_hold_event(db, covers, lp, run, NotifyEvent::Resumed, now, default).await
            } else {
                Ok(Vec::new())
            }
        }
    }
}

/// After a workflow agent step on `key` ended: writes or releases the key's hold as the
/// domain decides (`loops_core::hold::after_step`); returns the hold as it is after.
pub(crate) async fn after_step(
    db: &Db<'_, impl Conn>,
    key: &HoldKey,
    limit: Option<&StepLimit>,
    now: Instant,
) -> Result<Option<AccountHold>> {
    let current = lock_and_read(db, key).await?;
    match hold::after_step(
        current.as_ref(),
        key,
        now,
        limit,
        &loops_store::hold_timing(),
    ) {
        HoldChange::Keep => Ok(current),
        HoldChange::Hold { hold, .. } => {
            upsert(db, &hold).await?;
            Ok(Some(hold))
        }
        HoldChange::Release { .. } => {
            delete(db, key).await?;
            Ok(None)
        }
    }
}

/// The hold of `key`, read under the key's advisory lock for the rest of the
/// transaction: two runners meeting the limit on one key at once, the second sees the
/// first's hold.
async fn lock_and_read(db: &Db<'_, impl Conn>, key: &HoldKey) -> Result<Option<AccountHold>> {
    db.execute(
        "SELECT pg_advisory_xact_lock(hashtext('account_holds/' || $1 || '/' || $2))",
        &[&key.provider.as_str(), &text(&key.account).as_ref()],
    )
    .await?;
    db.query_opt_as(
        concat!(
            "SELECT ",
            hold_cols!(),
            " FROM account_holds WHERE provider = $1 AND account = $2"
        ),
        &[&key.provider.as_str(), &text(&key.account).as_ref()],
        hold_from_row,
    )
    .await
}

async fn upsert(db: &Db<'_, impl Conn>, hold: &AccountHold) -> Result<()> {
    db.execute(
        concat!(
            "INSERT INTO account_holds (",
            hold_cols!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (provider, account) DO UPDATE SET \
               held_until = excluded.held_until, reason = excluded.reason, \
               since = excluded.since, probes = excluded.probes, \
               notified = excluded.notified, updated_at = excluded.updated_at"
        ),
        &[
            &hold.provider.as_str(),
            &text(&hold.account).as_ref(),
            &ms(&hold.held_until),
            &text(&hold.reason).as_ref(),
            &ms(&hold.since),
            &i64::from(hold.probes),
            &hold.notified,
            &ms(&hold.updated_at),
        ],
    )
    .await?;
    Ok(())
}

async fn delete(db: &Db<'_, impl Conn>, key: &HoldKey) -> Result<()> {
    db.execute(
        "DELETE FROM account_holds WHERE provider = $1 AND account = $2",
        &[&key.provider.as_str(), &text(&key.account).as_ref()],
    )
    .await?;
    Ok(())
}

/// `lp` and the other active loops of the hold key `provider` / `account` (`None`:
/// every account of the provider), by name: the loops an account's hold or a store-wide
/// budget's covers.
async fn key_loops(
    db: &Db<'_, impl Conn>,
    provider: Provider,
    account: Option<&str>,
    lp: &Loop,
) -> Result<Vec<Loop>> {
    let account = account.map(|a| text(a).into_owned());
    let rows = db
        .query(
            concat!(
                "SELECT ",
                loop_cols!(),
                " FROM loops WHERE status = 'active' AND id != $3 AND ",
                key_provider!(),
                " = $1 AND ($2::text IS NULL OR ",
                key_account!(),
                " = $2) ORDER BY name"
            ),
            &[&provider.as_str(), &account, &lp.id.as_str()],
        )
        .await?;
    let mut loops = vec![lp.clone()];
    // A loop that does not decode has no settings to read; the others still count.
    loops.extend(
        rows.iter()
            .filter_map(|r| crate::codec::loop_from_row(r).ok()),
    );
    Ok(loops)
}

/// Queues `event` about a hold once per channel of the loops it covers (`lp`, the
/// run's own, and the other active loops of `covers`), each loop's settings or else
/// the store-wide default, whatever their `on` ([`loops_store::hold_channels`]): a hold
/// needs a person, once per account or budget rather than once per loop. The
/// deliveries name `run`, the run that met (or no longer met) the limit. `default` is
/// the batch's cache of the store's notification default.
pub(crate) async fn queue_hold_event(
    db: &Db<'_, impl Conn>,
    covers: CoveredKey<'_>,
    lp: &Loop,
    run: &Run,
    event: NotifyEvent,
    now: Instant,
    default: &mut Option<Option<Notify>>,
) -> Result<Vec<Delivery>> {
    let loops = match covers {
        Some((provider, account)) => key_loops(db, provider, account, lp).await?,
        None => vec![lp.clone()],
    };
    let store_default = crate::notify::cached_default(db, default).await?;
    let mut sent = Vec::new();
    for (channel, target) in loops_store::hold_channels(&loops, store_default.as_ref()) {
        sent.push(crate::notify::insert(db, run, event, channel, target, now).await?);
    }
    Ok(sent)
}

pub(crate) async fn account_holds(db: &Db<'_, impl Conn>) -> Result<Vec<AccountHold>> {
    db.query_as(
        concat!(
            "SELECT ",
            hold_cols!(),
            " FROM account_holds ORDER BY provider, account"
        ),
        &[],
        hold_from_row,
    )
    .await
}

pub(crate) async fn clear_account_holds(
    db: &Db<'_, impl Conn>,
    provider: Provider,
    account: Option<&str>,
) -> Result<Vec<AccountHold>> {
    let account = account.map(|a| text(a).into_owned());
    let mut cleared = db
        .query_as(
            concat!(
                "DELETE FROM account_holds \
                 WHERE provider = $1 AND ($2::text IS NULL OR account = $2) RETURNING ",
                hold_cols!()
            ),
            &[&provider.as_str(), &account],
            hold_from_row,
        )
        .await?;
    cleared.sort_by(|a, b| a.account.cmp(&b.account));
    Ok(cleared)
}
