//! Runners: several daemons sharing one store, each with a lease of its own whose
//! expiry the database's clock judges, and whose epoch fences its writes (see
//! `lease::check_fence`). A running row records its runner's epoch; its lease ends
//! when that runner's does (`runs::running_runs`), so any live runner recovers the
//! runs of one that stalled, crashed or was cut off.

use crate::codec::{db_now_ms, get, instant_from_ms, sat_i64, Cols};
use crate::error::{Error, Result};
use crate::lease::META_LEASE_TOKEN;
use crate::session::{Conn, Db};
use loops_store::codec::StoredRow;
use loops_store::{Fence, RunnerInfo, RunnerLease, RunnerRegistration};
use tokio_postgres::Row;

/// Rows of runners that ended longer ago than this are deleted on the next
/// registration.
const KEEP_ENDED_MS: i64 = 3_600_000;

fn lease_from_row(row: &Row) -> Result<RunnerLease> {
    Ok(RunnerLease {
        fence: Fence {
            token: Cols(row).u64(0, "epoch")?,
        },
        expires_at: Cols(row).instant(1, "expires_at")?,
        now: Cols(row).instant(2, "now")?,
    })
}

pub(crate) async fn register_runner(
    db: &Db<'_, impl Conn>,
    runner: &RunnerRegistration,
    ttl_ms: u64,
) -> Result<RunnerLease> {
    let row = db
        .query_one(
            "INSERT INTO meta (key, value) VALUES ($1, '1') \
             ON CONFLICT (key) DO UPDATE SET value = ((meta.value)::bigint + 1)::text \
             RETURNING (value)::bigint",
            &[&META_LEASE_TOKEN],
        )
        .await?;
    let epoch: i64 = get(&row, 0, "value")?;
    db.execute(
        concat!(
            "DELETE FROM runners WHERE expires_at < ",
            db_now_ms!(),
            " - $1 AND NOT EXISTS (SELECT 1 FROM runs \
               WHERE runs.status = 'running' AND runs.runner_epoch = runners.epoch)"
        ),
        &[&KEEP_ENDED_MS],
    )
    .await?;
    let labels = serde_json::to_string(&runner.labels)
        .map_err(|e| Error::invalid(format!("runner labels: {e}")))?;
    let row = db
        .query_one(
            concat!(
                "WITH clock AS (SELECT ",
                db_now_ms!(),
                " AS now) \
                 INSERT INTO runners (epoch, runner_id, host, pid, pid_start_time, labels_json, \
                   capacity, started_at, heartbeat_at, expires_at) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, now, now, now + $8 FROM clock \
                 RETURNING epoch, expires_at, heartbeat_at"
            ),
            &[
                &epoch,
                &runner.runner_id,
                &runner.host,
                &i64::from(runner.pid),
                &runner.pid_start_time.map(sat_i64),
                &labels,
                &sat_i64(runner.capacity as u64),
                &sat_i64(ttl_ms),
            ],
        )
        .await?;
    lease_from_row(&row)
}

pub(crate) async fn renew_runner(
    db: &Db<'_, impl Conn>,
    fence: &Fence,
    ttl_ms: u64,
) -> Result<Option<RunnerLease>> {
    db.query_opt_as(
        concat!(
            "WITH clock AS (SELECT ",
            db_now_ms!(),
            " AS now) \
                 UPDATE runners SET heartbeat_at = clock.now, expires_at = clock.now + $2 \
                 FROM clock \
                 WHERE epoch = $1 AND released_at IS NULL AND expires_at > clock.now \
                 RETURNING epoch, expires_at, heartbeat_at"
        ),
        &[&sat_i64(fence.token), &sat_i64(ttl_ms)],
        lease_from_row,
    )
    .await
}

pub(crate) async fn release_runner(db: &Db<'_, impl Conn>, fence: &Fence) -> Result<()> {
    db.execute(
        concat!(
            "WITH clock AS (SELECT ",
            db_now_ms!(),
            " AS now) \
             UPDATE runners SET released_at = clock.now, \
               expires_at = LEAST(expires_at, clock.now) \
             FROM clock WHERE epoch = $1 AND released_at IS NULL"
        ),
        &[&sat_i64(fence.token)],
    )
    .await?;
    Ok(())
}

pub(crate) async fn runners(db: &Db<'_, impl Conn>) -> Result<Vec<RunnerInfo>> {
    let rows = db
        .query(
            concat!(
                "WITH clock AS (SELECT ",
                db_now_ms!(),
                " AS now) \
                 SELECT r.epoch, r.runner_id, r.host, r.pid, r.pid_start_time, r.labels_json, \
                   r.capacity, r.started_at, r.heartbeat_at, r.expires_at, \
                   (r.released_at IS NULL AND r.expires_at > clock.now) AS live, \
                   r.released_at IS NOT NULL AS released, \
                   (SELECT COUNT(*) FROM runs \
                    WHERE runs.status = 'running' AND runs.runner_epoch = r.epoch) AS running, \
                   clock.now \
                 FROM runners r, clock \
                 ORDER BY live DESC, r.host, r.started_at, r.epoch"
            ),
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let pid: i64 = get(row, 3, "pid")?;
            let labels: String = get(row, 5, "labels_json")?;
            Ok(RunnerInfo {
                epoch: Cols(row).u64(0, "epoch")?,
                runner_id: get(row, 1, "runner_id")?,
                host: get(row, 2, "host")?,
                pid: u32::try_from(pid)
                    .map_err(|_| Error::decode(format!("column pid: {pid} out of range")))?,
                pid_start_time: Cols(row).opt_u64(4, "pid_start_time")?,
                labels: serde_json::from_str(&labels)
                    .map_err(|e| Error::decode(format!("column labels_json: {e}")))?,
                capacity: usize::try_from(Cols(row).u64(6, "capacity")?).unwrap_or(usize::MAX),
                started_at: Cols(row).instant(7, "started_at")?,
                heartbeat_at: Cols(row).instant(8, "heartbeat_at")?,
                expires_at: Cols(row).instant(9, "expires_at")?,
                live: get(row, 10, "live")?,
                released: get(row, 11, "released")?,
                running: usize::try_from(get::<i64>(row, 12, "running")?).unwrap_or(0),
                now: instant_from_ms(get(row, 13, "now")?, "now")?,
            })
        })
        .collect()
}

/// Records (or, for empty `caps`, removes) the concurrency caps of `runner_id`.
pub(crate) async fn record_caps(
    db: &Db<'_, impl Conn>,
    runner_id: &str,
    caps: &str,
    now: loops_core::Instant,
) -> Result<()> {
    if caps.is_empty() {
        db.execute(
            "DELETE FROM concurrency_caps WHERE runner_id = $1",
            &[&runner_id],
        )
        .await?;
    } else {
        db.execute(
            "INSERT INTO concurrency_caps (runner_id, caps, recorded_at) VALUES ($1, $2, $3) \
             ON CONFLICT (runner_id) DO UPDATE SET caps = EXCLUDED.caps, \
             recorded_at = EXCLUDED.recorded_at",
            &[&runner_id, &caps, &crate::codec::ms(&now)],
        )
        .await?;
    }
    Ok(())
}

/// The caps of the live runners (a crashed runner's row stays until it starts again,
/// but says nothing once its lease expired).
pub(crate) async fn recorded_caps(db: &Db<'_, impl Conn>) -> Result<Vec<(String, String)>> {
    let rows = db
        .query(
            concat!(
                "SELECT c.runner_id, c.caps FROM concurrency_caps c \
                 WHERE EXISTS (SELECT 1 FROM runners r WHERE r.runner_id = c.runner_id \
                   AND r.released_at IS NULL AND r.expires_at > ",
                db_now_ms!(),
                ") ORDER BY c.runner_id"
            ),
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| Ok((get(row, 0, "runner_id")?, get(row, 1, "caps")?)))
        .collect()
}
