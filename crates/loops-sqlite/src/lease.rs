//! The daemon lease (one row, a fencing token that only grows) and the fence check
//! every daemon write makes inside its own transaction.

use crate::codec::{lease_from_row, ms, query_first, sat_i64};
use crate::error::{Error, Result, StoreResult};
use crate::SqliteStore;
use loops_core::Instant;
use loops_store::{DaemonLease, Fence, LeaseAcquire, LeaseHolder, StoreError};
use rusqlite::{params, Connection, OptionalExtension};

/// `meta` key of the last fencing token handed out, so tokens never repeat even after
/// the lease row is released.
const META_LEASE_TOKEN: &str = "daemon_lease_token";

/// Fails with [`StoreError::LeaseLost`] unless the lease row still carries `fence`'s
/// token, i.e. nobody acquired the lease since (see [`Fence`]). Runs inside the
/// caller's write transaction, so it is serialized with any acquire.
pub(crate) fn check_fence(conn: &Connection, fence: &Fence, _now: Instant) -> Result<()> {
    let held: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM daemon_lease WHERE id = 1 AND token = ?1)")?
        .query_row(params![sat_i64(fence.token)], |r| r.get(0))?;
    if held {
        Ok(())
    } else {
        Err(StoreError::LeaseLost.into())
    }
}

fn read_lease(conn: &Connection) -> Result<Option<DaemonLease>> {
    query_first(conn, "SELECT runner_id, pid, pid_start_time, host, token, acquired_at, heartbeat_at, expires_at \
         FROM daemon_lease WHERE id = 1", [], lease_from_row)
}

pub(crate) fn acquire_daemon_lease(
    store: &SqliteStore,
    holder: &LeaseHolder,
    ttl_ms: u64,
    now: Instant,
    takeover: &dyn Fn(&DaemonLease) -> bool,
) -> StoreResult<LeaseAcquire> {
    store.write(None, |tx| {
        let existing = read_lease(tx)?;
        if let Some(cur) = &existing {
            let live = cur.expires_at > now;
            if live && cur.holder.runner_id != holder.runner_id && !takeover(cur) {
                return Ok(LeaseAcquire::Held(cur.clone()));
            }
        }
        // Tokens only grow, also across releases (the row is deleted then).
        let last: Option<String> = tx
            .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
            .query_row([META_LEASE_TOKEN], |r| r.get(0))
            .optional()?;
        let last = match last {
            Some(text) => text
                .parse::<u64>()
                .map_err(|e| Error::decode(format!("meta {META_LEASE_TOKEN}: {e}")))?,
            None => 0,
        };
        let token = last.max(existing.map_or(0, |l| l.token)).saturating_add(1);
        tx.prepare_cached(
            "INSERT INTO meta (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )?
        .execute(params![META_LEASE_TOKEN, token.to_string()])?;
        let now_ms = ms(&now);
        tx.prepare_cached(
            "INSERT INTO daemon_lease (id, runner_id, pid, pid_start_time, host, token, \
               acquired_at, heartbeat_at, expires_at) \
             VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7) \
             ON CONFLICT (id) DO UPDATE SET runner_id = excluded.runner_id, pid = excluded.pid, \
               pid_start_time = excluded.pid_start_time, host = excluded.host, \
               token = excluded.token, acquired_at = excluded.acquired_at, \
               heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at",
        )?
        .execute(params![
            holder.runner_id,
            holder.pid,
            holder.pid_start_time.map(sat_i64),
            holder.host,
            sat_i64(token),
            now_ms,
            now_ms.saturating_add(sat_i64(ttl_ms)),
        ])?;
        let lease = read_lease(tx)?
            .ok_or_else(|| Error::decode("daemon_lease row missing after acquire"))?;
        Ok(LeaseAcquire::Acquired(lease))
    })
}

pub(crate) fn renew_daemon_lease(
    store: &SqliteStore,
    fence: &Fence,
    ttl_ms: u64,
    now: Instant,
) -> StoreResult<bool> {
    let now_ms = ms(&now);
    store.write(None, |tx| {
        let n = tx
            .prepare_cached(
                "UPDATE daemon_lease SET heartbeat_at = ?2, expires_at = ?3 \
                 WHERE id = 1 AND token = ?1",
            )?
            .execute(params![
                sat_i64(fence.token),
                now_ms,
                now_ms.saturating_add(sat_i64(ttl_ms))
            ])?;
        Ok(n == 1)
    })
}

pub(crate) fn release_daemon_lease(store: &SqliteStore, fence: &Fence) -> StoreResult<()> {
    store.write(None, |tx| {
        tx.prepare_cached("DELETE FROM daemon_lease WHERE id = 1 AND token = ?1")?
            .execute([sat_i64(fence.token)])?;
        Ok(())
    })
}

pub(crate) fn current_daemon_lease(store: &SqliteStore) -> StoreResult<Option<DaemonLease>> {
    store.read(read_lease)
}
