//! The daemon lease (one row, a fencing token that only grows) and the fence check
//! every daemon write makes inside its own transaction.
//!
//! The fence check reads the lease row `FOR SHARE`: an acquire (which updates the row)
//! waits for every fenced transaction in flight to end, and a fenced transaction that
//! starts after an acquire committed sees the new token and fails. So no write carrying
//! an old token ever commits after a new holder took the lease.

use crate::codec::{db_now_ms, get, lease_from_row, ms, sat_i64};
use crate::error::{Error, Result};
use crate::session::{Conn, Db};
use loops_core::Instant;
use loops_store::{DaemonLease, Fence, LeaseAcquire, LeaseHolder, StoreError};
use tokio_postgres::SimpleQueryMessage;

/// `meta` key of the last fencing token handed out, so tokens never repeat even after
/// the lease row is released.
pub(crate) const META_LEASE_TOKEN: &str = "daemon_lease_token";

/// The text that opens a fenced transaction: `BEGIN`, then the fence check when there
/// is a fence (`token`, written into the text), as one message of PostgreSQL's simple
/// protocol. One request, so it can go to the server ahead of the transaction's first
/// statements, in the same round trip ([`crate::session::Session::begin`]).
pub(crate) fn opening_sql(token: Option<i64>) -> String {
    match token {
        None => "BEGIN".to_owned(),
        Some(token) => format!(
            concat!(
                "BEGIN; SELECT EXISTS (SELECT 1 FROM runners WHERE epoch = {token} \
                   AND released_at IS NULL AND expires_at > ",
                db_now_ms!(),
                " FOR SHARE), \
                 EXISTS (SELECT 1 FROM daemon_lease WHERE id = 1 AND token = {token} FOR SHARE)"
            ),
            token = token
        ),
    }
}

/// The answer of [`opening_sql`]'s message: fails with [`StoreError::LeaseLost`] unless
/// the fence is a live lease — the daemon lease row still carries its token (see
/// [`Fence`]), or it is the epoch of a runner whose lease has not expired by the
/// database's clock nor been released. Returns the runner's epoch for a runner fence
/// (recorded on the runs it claims), `None` for the daemon lease's or no fence.
pub(crate) fn opened(token: Option<i64>, answer: &[SimpleQueryMessage]) -> Result<Option<i64>> {
    let Some(token) = token else {
        return Ok(None);
    };
    let row = answer
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .ok_or_else(|| Error::decode("the fence check returned no row"))?;
    let live = |i: usize| -> Result<bool> {
        match row.try_get(i)? {
            Some("t") => Ok(true),
            Some("f") => Ok(false),
            other => Err(Error::decode(format!("the fence check returned {other:?}"))),
        }
    };
    if live(0)? {
        Ok(Some(token))
    } else if live(1)? {
        Ok(None)
    } else {
        Err(StoreError::LeaseLost.into())
    }
}

async fn read_lease(db: &Db<'_, impl Conn>, lock: bool) -> Result<Option<DaemonLease>> {
    let sql = if lock {
        "SELECT runner_id, pid, pid_start_time, host, token, acquired_at, heartbeat_at, \
         expires_at FROM daemon_lease WHERE id = 1 FOR UPDATE"
    } else {
        "SELECT runner_id, pid, pid_start_time, host, token, acquired_at, heartbeat_at, \
         expires_at FROM daemon_lease WHERE id = 1"
    };
    db.query_opt_as(sql, &[], lease_from_row).await
}

/// The decision of an acquire, given the lease as it is (read under its lock).
pub(crate) async fn lease_for_acquire(db: &Db<'_, impl Conn>) -> Result<Option<DaemonLease>> {
    // Serializes acquires even while there is no row to lock.
    db.execute("SELECT pg_advisory_xact_lock(7105200521)", &[])
        .await?;
    read_lease(db, true).await
}

/// Takes the lease for `holder` (the caller decided it may): a new token, higher than
/// any handed out before.
pub(crate) async fn take_lease(
    db: &Db<'_, impl Conn>,
    existing: Option<&DaemonLease>,
    holder: &LeaseHolder,
    ttl_ms: u64,
    now: Instant,
) -> Result<DaemonLease> {
    // One atomic step of the token counter it shares with the runners' epochs: a
    // separate read and write would let a runner registering at the same moment draw
    // the same number.
    let floor = sat_i64(existing.map_or(0, |l| l.token).saturating_add(1));
    let row = db
        .query_one(
            "INSERT INTO meta (key, value) VALUES ($1, $2::bigint::text) \
             ON CONFLICT (key) DO UPDATE \
               SET value = GREATEST((meta.value)::bigint + 1, $2::bigint)::text \
             RETURNING (value)::bigint",
            &[&META_LEASE_TOKEN, &floor],
        )
        .await?;
    let token: i64 = get(&row, 0, "value")?;
    let now_ms = ms(&now);
    db.execute(
        "INSERT INTO daemon_lease (id, runner_id, pid, pid_start_time, host, token, \
           acquired_at, heartbeat_at, expires_at) \
         VALUES (1, $1, $2, $3, $4, $5, $6, $6, $7) \
         ON CONFLICT (id) DO UPDATE SET runner_id = excluded.runner_id, pid = excluded.pid, \
           pid_start_time = excluded.pid_start_time, host = excluded.host, \
           token = excluded.token, acquired_at = excluded.acquired_at, \
           heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at",
        &[
            &holder.runner_id,
            &i64::from(holder.pid),
            &holder.pid_start_time.map(sat_i64),
            &holder.host,
            &token,
            &now_ms,
            &now_ms.saturating_add(sat_i64(ttl_ms)),
        ],
    )
    .await?;
    read_lease(db, false)
        .await?
        .ok_or_else(|| Error::decode("daemon_lease row missing after acquire"))
}

/// Whether `existing` keeps `holder` out (a live lease of another runner that the
/// take-over callback does not declare gone).
pub(crate) fn acquire_decision(
    existing: Option<&DaemonLease>,
    holder: &LeaseHolder,
    now: Instant,
    takeover: &dyn Fn(&DaemonLease) -> bool,
) -> Option<LeaseAcquire> {
    let cur = existing?;
    let live = cur.expires_at > now;
    (live && cur.holder.runner_id != holder.runner_id && !takeover(cur))
        .then(|| LeaseAcquire::Held(cur.clone()))
}

pub(crate) async fn renew_daemon_lease(
    db: &Db<'_, impl Conn>,
    fence: &Fence,
    ttl_ms: u64,
    now: Instant,
) -> Result<bool> {
    let now_ms = ms(&now);
    let n = db
        .execute(
            "UPDATE daemon_lease SET heartbeat_at = $2, expires_at = $3 \
             WHERE id = 1 AND token = $1",
            &[
                &sat_i64(fence.token),
                &now_ms,
                &now_ms.saturating_add(sat_i64(ttl_ms)),
            ],
        )
        .await?;
    Ok(n == 1)
}

pub(crate) async fn release_daemon_lease(db: &Db<'_, impl Conn>, fence: &Fence) -> Result<()> {
    db.execute(
        "DELETE FROM daemon_lease WHERE id = 1 AND token = $1",
        &[&sat_i64(fence.token)],
    )
    .await?;
    Ok(())
}

pub(crate) async fn current_daemon_lease(db: &Db<'_, impl Conn>) -> Result<Option<DaemonLease>> {
    read_lease(db, false).await
}
