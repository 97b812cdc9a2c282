//! Runs after their claim: the leases of running rows (renewal, take-over), the
//! queries over runs, and pruning.

use crate::codec::{ms, run_cols, run_from_row, sat_i64, with_id_prefix};
use crate::error::{Error, Result};
use crate::session::{Conn, Db};
use loops_core::{Instant, LoopId, Run, RunId};
use loops_store::prune::{self, RunCutoffs};
use loops_store::{PrunePolicy, RunFilter, StoreError};
use tokio_postgres::types::ToSql;

/// After a guarded update touched no row: tells a missing run from a finished one.
pub(crate) async fn not_running(db: &Db<'_, impl Conn>, id: &RunId) -> Error {
    match db
        .query_opt("SELECT 1 FROM runs WHERE id = $1", &[&id.as_str()])
        .await
    {
        Ok(Some(_)) => StoreError::NotRunning(id.to_string()).into(),
        Ok(None) => StoreError::RunNotFound(id.to_string()).into(),
        Err(e) => e,
    }
}

/// Whether a run is running, as the statements on runs ask it: `IS NOT DISTINCT FROM`,
/// which no index of the running runs (`… WHERE status = 'running'`) can answer. Asked
/// as `status = 'running'` beside the run's key, it let the plan scan such an index
/// instead of the key, and so every run finished since the table's last vacuum: 7 ms
/// a batch (BENCHMARKS.md §32).
macro_rules! is_running {
    ($status:literal) => {
        concat!($status, " IS NOT DISTINCT FROM 'running'")
    };
}
pub(crate) use is_running;

/// Locks the runs `$1` (sorted: every caller locks in one order), each looked up by its
/// key. The recorder's set statements (`crate::finalize`) and the run leases' renewal update each row where
/// their probe found it (`ctid`); a row another transaction updated
/// between the probe and the update is no longer there, and would be passed over, its
/// write lost. Locked by the statement before, no row moves: each is found as it was
/// last committed and stays there until this transaction ends.
pub(crate) const LOCK_RUNS: &str = "SELECT r.id FROM unnest($1::text[]) AS x(id) \
     CROSS JOIN LATERAL (SELECT id FROM runs WHERE runs.id = x.id OFFSET 0 FOR UPDATE) AS r";

/// `ids` in the order [`LOCK_RUNS`] takes them, each once.
pub(crate) fn lock_order<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut ids: Vec<&str> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn ids(runs: &[RunId]) -> Vec<&str> {
    runs.iter().map(RunId::as_str).collect()
}

/// Extends the leases of the running runs `$3` that `$2` holds, each run and its loop
/// found by their keys and the runs locked first ([`LOCK_RUNS`]):
/// written `runs.id = ANY($3) AND status = 'running'`, its generic plan scanned an
/// index of the running runs (BENCHMARKS.md §32).
pub(crate) const RENEW_RUN_LEASES: &str = concat!(
    "UPDATE runs SET lease_expires_at = $1 + l.lease_ms, updated_at = $1 \
     FROM unnest($3::text[]) AS x(id) \
     CROSS JOIN LATERAL (SELECT ctid AS at, loop_id FROM runs \
                         WHERE runs.id = x.id AND runs.claimed_by = $2 AND ",
    is_running!("runs.status"),
    " OFFSET 0) AS r \
     CROSS JOIN LATERAL (SELECT lease_ms FROM loops WHERE loops.id = r.loop_id OFFSET 0) AS l \
     WHERE runs.ctid = r.at RETURNING runs.id"
);

pub(crate) async fn renew_run_leases(
    db: &Db<'_, impl Conn>,
    runs: &[RunId],
    runner_id: &str,
    now: Instant,
) -> Result<usize> {
    let ids = lock_order(ids(runs));
    let [_, renewed] = db
        .query_each([
            (LOCK_RUNS, &[&ids]),
            (RENEW_RUN_LEASES, &[&ms(&now), &runner_id, &ids]),
        ])
        .await?;
    Ok(renewed.len())
}

/// Moves the running run `$1` from its holder `$2` to the runner `$3`. "Running" is
/// asked as `IS NOT DISTINCT FROM`, so that the run is found by its key, never through
/// an index of the running runs (BENCHMARKS.md §32).
pub(crate) const TAKE_OVER_RUN: &str = concat!(
    "UPDATE runs SET claimed_by = $3, runner_epoch = $5, \
       lease_expires_at = $4 + (SELECT l.lease_ms FROM loops l WHERE l.id = runs.loop_id), \
       updated_at = $4 \
     WHERE id = $1 AND status IS NOT DISTINCT FROM 'running' \
       AND claimed_by IS NOT DISTINCT FROM $2 \
     RETURNING ",
    run_cols!()
);

pub(crate) async fn take_over_run(
    db: &Db<'_, impl Conn>,
    run: &RunId,
    from: Option<&str>,
    runner_id: &str,
    now: Instant,
    epoch: Option<i64>,
) -> Result<Run> {
    let row = db
        .query_opt(
            TAKE_OVER_RUN,
            &[&run.as_str(), &from, &runner_id, &ms(&now), &epoch],
        )
        .await?;
    match row {
        Some(r) => run_from_row(&r),
        None => Err(not_running(db, run).await),
    }
}

pub(crate) async fn running_runs(
    db: &Db<'_, impl Conn>,
    loop_id: Option<&LoopId>,
) -> Result<Vec<Run>> {
    // A row a runner claimed holds its lease only while its runner's lease lasts: the
    // earlier of the two is its lease (a runner gone from the table: already over).
    db.query_as(
        "SELECT r.id, r.loop_id, r.loop_name, r.scheduled_for, r.attempt, r.status, \
               r.source, r.started_at, r.finished_at, r.exit_code, r.duration_ms, r.stdout, \
               r.stderr, r.error, r.pid, r.pid_start_time, r.claimed_by, \
               CASE WHEN r.runner_epoch IS NULL THEN r.lease_expires_at \
                    ELSE LEAST(r.lease_expires_at, COALESCE(rn.expires_at, 0)) END, \
               r.summary, r.usage_json, r.created_at, r.updated_at, r.due_at, r.error_output, \
               r.failure_class, r.retry_at, r.session_id, r.session_note, r.account \
             FROM runs r LEFT JOIN runners rn ON rn.epoch = r.runner_epoch \
             WHERE r.status = 'running' AND ($1::text IS NULL OR r.loop_id = $1) \
             ORDER BY r.created_at, r.id",
        &[&loop_id.map(LoopId::as_str)],
        run_from_row,
    )
    .await
}

/// See [`loops_store::Store::last_session_run`]; through the `runs_loop_session` index.
pub(crate) async fn last_session_run(
    db: &Db<'_, impl Conn>,
    loop_id: &LoopId,
) -> Result<Option<Run>> {
    db.query_opt_as(
        concat!(
            "SELECT ",
            run_cols!(),
            " FROM runs WHERE loop_id = $1 AND session_id IS NOT NULL \
               AND status IN ('succeeded', 'failed', 'timed_out') \
             ORDER BY created_at DESC, seq DESC LIMIT 1"
        ),
        &[&loop_id.as_str()],
        run_from_row,
    )
    .await
}

type Param = Box<dyn ToSql + Sync + Send>;

/// The statement of [`list_runs`] and its parameters, newest first by creation time
/// (rows created in the same millisecond by insertion, newest first).
pub(crate) fn runs_query(filter: &RunFilter) -> (String, Vec<Param>) {
    let mut labels = filter.labels.clone();
    labels.sort();
    labels.dedup();
    let mut statuses: Vec<String> = filter
        .statuses
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    statuses.sort_unstable();
    statuses.dedup();
    let mut params: Vec<Param> = Vec::new();
    let mut terms = Vec::new();
    let mut sql = String::from(concat!("SELECT ", run_cols!(), " FROM runs"));
    if !labels.is_empty() {
        let n = labels.len() as i64;
        params.push(Box::new(labels));
        params.push(Box::new(n));
        terms.push(
            "loop_id IN (SELECT loop_id FROM loop_labels WHERE label = ANY($1::text[]) \
             GROUP BY loop_id HAVING COUNT(*) = $2)"
                .to_owned(),
        );
    }
    if let Some(id) = &filter.loop_id {
        params.push(Box::new(id.as_str().to_owned()));
        terms.push(format!("loop_id = ${}", params.len()));
    }
    if !statuses.is_empty() {
        params.push(Box::new(statuses));
        terms.push(format!("status = ANY(${}::text[])", params.len()));
    }
    if let Some(since) = &filter.since {
        params.push(Box::new(ms(since)));
        terms.push(format!("created_at >= ${}", params.len()));
    }
    if let Some(until) = &filter.until {
        params.push(Box::new(ms(until)));
        terms.push(format!("created_at < ${}", params.len()));
    }
    if !terms.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&terms.join(" AND "));
    }
    sql.push_str(" ORDER BY created_at DESC, seq DESC");
    if let Some(limit) = filter.limit {
        params.push(Box::new(sat_i64(limit as u64)));
        sql.push_str(&format!(" LIMIT ${}", params.len()));
    }
    (sql, params)
}

pub(crate) async fn list_runs(db: &Db<'_, impl Conn>, filter: &RunFilter) -> Result<Vec<Run>> {
    let (sql, params) = runs_query(filter);
    let refs: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect();
    db.query_as(&sql, &refs, run_from_row).await
}

/// Deletes finished runs (never `running` ones) matching EITHER rule of the policy
/// (see `PrunePolicy`); with neither rule set nothing is deleted.
pub(crate) async fn prune_runs(
    db: &Db<'_, impl Conn>,
    policy: &PrunePolicy,
    dry_run: bool,
) -> Result<usize> {
    // The log's size first (a range of its numbers, the primary key).
    if let Some(n) = prune::events_to_keep(policy, dry_run) {
        crate::events::trim(db, n).await?;
    }
    let Some(cuts) = RunCutoffs::of(policy) else {
        return Ok(0);
    };
    let ids = match prune_finished(db, "runs", "loop_id", cuts, dry_run).await? {
        Pruned::Counted(n) => return Ok(n),
        Pruned::Deleted(ids) => ids,
    };
    // The events about the pruned runs go with them; then events older than the age
    // rule.
    if !ids.is_empty() {
        crate::events::delete_where(db, "run_id = ANY($1::text[])", &ids).await?;
    }
    crate::events::prune_older(db, policy.older_than.as_ref()).await?;
    Ok(ids.len())
}

/// What [`prune_finished`] did: counted the rows (a dry run) or deleted them.
pub(crate) enum Pruned {
    Counted(usize),
    /// The ids of the deleted rows.
    Deleted(Vec<String>),
}

/// Counts (`dry_run`) or deletes the finished rows of `table` (runs or workflow runs,
/// never `running` ones) that either rule of `cuts` selects, ranking the rows newest
/// first within each `partition` column value.
pub(crate) async fn prune_finished(
    db: &Db<'_, impl Conn>,
    table: &str,
    partition: &str,
    cuts: RunCutoffs,
    dry_run: bool,
) -> Result<Pruned> {
    let RunCutoffs {
        finished_before: older,
        keep,
    } = cuts;
    let candidates = format!(
        "SELECT id FROM ( \
           SELECT id, finished_at, \
                  ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY created_at DESC, seq DESC) AS rn \
           FROM {table} WHERE status != 'running') ranked \
         WHERE ($1::bigint IS NOT NULL AND finished_at < $1) OR ($2::bigint IS NOT NULL AND rn > $2)"
    );
    if dry_run {
        let row = db
            .query_one(
                &format!("SELECT COUNT(*) FROM ({candidates}) c"),
                &[&older, &keep],
            )
            .await?;
        return Ok(Pruned::Counted(prune::count(crate::codec::get(
            &row, 0, "count",
        )?)));
    }
    let gone = db
        .query(
            &format!("DELETE FROM {table} WHERE id IN ({candidates}) RETURNING id"),
            &[&older, &keep],
        )
        .await?;
    gone.iter()
        .map(|r| crate::codec::get::<String>(r, 0, "id"))
        .collect::<Result<Vec<_>>>()
        .map(Pruned::Deleted)
}

pub(crate) async fn runs_with_id_prefix(
    db: &Db<'_, impl Conn>,
    prefix: &str,
    limit: usize,
) -> Result<Vec<Run>> {
    with_id_prefix(
        db,
        concat!(
            "SELECT ",
            run_cols!(),
            " FROM runs WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3"
        ),
        prefix,
        limit,
        run_from_row,
        |r| r.id.as_str(),
    )
    .await
}

pub(crate) async fn runs_created_since(
    db: &Db<'_, impl Conn>,
    since: Instant,
    loop_id: Option<&LoopId>,
    limit: usize,
) -> Result<Vec<Run>> {
    db.query_as(
        concat!(
            "SELECT ",
            run_cols!(),
            " FROM runs WHERE created_at >= $1 AND ($2::text IS NULL OR loop_id = $2) \
                 ORDER BY created_at, seq LIMIT $3"
        ),
        &[
            &ms(&since),
            &loop_id.map(LoopId::as_str),
            &sat_i64(limit as u64),
        ],
        run_from_row,
    )
    .await
}
