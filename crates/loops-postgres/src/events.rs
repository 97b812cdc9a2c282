//! The event log (`events`, migration 3): appended inside the transaction of the
//! change it records, read by number, pruned with what it is about.
//!
//! Unlike SQLite, PostgreSQL runs writers side by side, and an identity number is
//! drawn at insert time, not at commit: two transactions could commit their events
//! out of number order, and a reader that saw number 8 would never see 7. So every
//! append first takes [`EVENTS_LOCK`] (a transaction-level advisory lock, held to the
//! commit): appends are serialized and commit in number order. A transaction's events
//! are written last, in one statement that takes the lock too, sent with its `COMMIT`,
//! so the lock is held for that statement and the commit, not for a round trip.

use crate::codec::{get, ms, sat_i64, Cols};
use crate::error::{Error, Result};
use crate::session::{Conn, Db};
use loops_core::event::{Event, EventBody, EventKind, LoopBrief};
use loops_core::{Instant, LoopId, LoopStatus, Run, RunId, WorkflowRunId};
use loops_store::codec::StoredRow;
use loops_store::rows;
use loops_store::EventBounds;
use std::collections::HashMap;

/// The advisory lock an appending transaction holds to its commit ("levt").
const EVENTS_LOCK: i64 = 0x6C65_7674;

/// The meta key holding the highest number of any pruned event.
const PRUNED_THROUGH: &str = "events_pruned_through";

/// Appends `bodies` at `now`, in order, inside the caller's transaction — as its last
/// statements (see the module docs). In a transaction of [`crate::session::Tx`] they
/// are kept and written with its `COMMIT`, one round trip for both.
pub(crate) async fn append_all(
    db: &Db<'_, impl Conn>,
    bodies: &[EventBody],
    now: Instant,
) -> Result<()> {
    if bodies.is_empty() {
        return Ok(());
    }
    match db.deferred_events() {
        Some(rows) => rows.borrow_mut().push_all(bodies, now),
        None => {
            let mut rows = EventRows::default();
            rows.push_all(bodies, now)?;
            let st = db.prepare(INSERT_EVENTS).await?;
            crate::session::count_round_trip();
            db.c.execute(&st, &rows.params()).await?;
            Ok(())
        }
    }
}

/// The insert of [`EventRows`]. The lock is a one-row subquery the insert's rows are
/// joined to: no row reaches the insert, which draws its number, before the lock is
/// taken.
pub(crate) const INSERT_EVENTS: &str =
    "INSERT INTO events (kind, loop_id, run_id, workflow_run_id, data_json, created_at) \
     SELECT k, l, r, w, d, c \
     FROM (SELECT pg_advisory_xact_lock($7)) AS events_lock, \
       unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) \
       WITH ORDINALITY AS e(k, l, r, w, d, c, n) \
     ORDER BY n";

/// Event rows as parallel arrays, each bound as one `unnest` parameter of a multi-row
/// insert: what a transaction appends ([`INSERT_EVENTS`]) and what `store copy` writes.
#[derive(Default)]
pub(crate) struct EventRows {
    pub(crate) kind: Vec<&'static str>,
    pub(crate) loop_id: Vec<Option<String>>,
    pub(crate) run_id: Vec<Option<String>>,
    pub(crate) workflow_run_id: Vec<Option<String>>,
    pub(crate) data: Vec<String>,
    pub(crate) created_at: Vec<i64>,
}

impl EventRows {
    pub(crate) fn is_empty(&self) -> bool {
        self.kind.is_empty()
    }

    /// Adds `body`'s row at `at`; fails (adding nothing) only if its data does not
    /// serialize.
    pub(crate) fn push(&mut self, body: &EventBody, at: Instant) -> serde_json::Result<()> {
        let data = serde_json::to_string(&body.data)?;
        let owned = |id: Option<&str>| id.map(str::to_owned);
        self.kind.push(body.kind.as_str());
        self.loop_id
            .push(owned(body.loop_id.as_ref().map(LoopId::as_str)));
        self.run_id
            .push(owned(body.run_id.as_ref().map(RunId::as_str)));
        self.workflow_run_id.push(owned(
            body.workflow_run_id.as_ref().map(WorkflowRunId::as_str),
        ));
        self.data.push(crate::codec::text(&data).into_owned());
        self.created_at.push(ms(&at));
        Ok(())
    }

    /// Adds `bodies`' rows at `now`. On an error the rows added so far stay: the append
    /// fails its transaction, which then writes none of them.
    fn push_all(&mut self, bodies: &[EventBody], now: Instant) -> Result<()> {
        for body in bodies {
            self.push(body, now)
                .map_err(|e| Error::decode(e.to_string()))?;
        }
        Ok(())
    }

    /// The parameters of [`INSERT_EVENTS`].
    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 7] {
        [
            &self.kind,
            &self.loop_id,
            &self.run_id,
            &self.workflow_run_id,
            &self.data,
            &self.created_at,
            &EVENTS_LOCK,
        ]
    }
}

/// The briefs of `ids` as this transaction sees them (a loop that is gone is missing).
pub(crate) async fn loop_briefs(
    db: &Db<'_, impl Conn>,
    ids: &[&LoopId],
) -> Result<HashMap<LoopId, LoopBrief>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let list: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
    let rows = db.query(SELECT_BRIEFS, &[&list]).await?;
    let mut out = HashMap::with_capacity(rows.len());
    for row in &rows {
        let brief = brief_from_row(row)?;
        out.insert(brief.id.clone(), brief);
    }
    Ok(out)
}

/// A loop's brief from a row of [`SELECT_BRIEFS`].
pub(crate) fn brief_from_row(row: &tokio_postgres::Row) -> Result<LoopBrief> {
    let at = |idx: usize, col: &str| Cols(row).opt_instant(idx, col);
    Ok(LoopBrief {
        id: LoopId::new(get::<String>(row, 0, "id")?),
        name: get(row, 1, "name")?,
        status: Cols(row).parsed::<LoopStatus>(2, "status")?,
        next_run_at: at(3, "next_run_at")?,
        due_at: at(4, "due_at")?,
    })
}

/// The briefs of the loops of the ids `$1`, in [`brief_from_row`]'s columns, each loop
/// looked up by its key (as the claim batch's statements do: see
/// `crate::claim_set::LOCK_LOOPS`).
pub(crate) const SELECT_BRIEFS: &str = "SELECT b.* FROM unnest($1::text[]) AS x(id) \
     CROSS JOIN LATERAL (SELECT id, name, status, next_run_at, due_at FROM loops \
                         WHERE loops.id = x.id OFFSET 0) AS b";

/// `run.started` / `run.finished` for each of `runs`, with its loop as this transaction
/// left it.
pub(crate) async fn run_bodies(
    db: &Db<'_, impl Conn>,
    runs: &[(EventKind, &Run)],
) -> Result<Vec<EventBody>> {
    run_bodies_knowing(db, runs, HashMap::new()).await
}

/// [`run_bodies`] with the briefs of the loops this transaction last wrote already in
/// `known` (from their writes' `RETURNING`): only the others are read.
pub(crate) async fn run_bodies_knowing(
    db: &Db<'_, impl Conn>,
    runs: &[(EventKind, &Run)],
    mut known: HashMap<LoopId, LoopBrief>,
) -> Result<Vec<EventBody>> {
    let mut ids: Vec<&LoopId> = runs
        .iter()
        .map(|(_, r)| &r.loop_id)
        .filter(|id| !known.contains_key(*id))
        .collect();
    ids.sort();
    ids.dedup();
    if !ids.is_empty() {
        known.extend(loop_briefs(db, &ids).await?);
    }
    Ok(bodies_of(runs, &known))
}

/// [`run_bodies`] with the loops' briefs known (a loop missing from `briefs` is gone).
pub(crate) fn bodies_of(
    runs: &[(EventKind, &Run)],
    briefs: &HashMap<LoopId, LoopBrief>,
) -> Vec<EventBody> {
    runs.iter()
        .map(|(kind, run)| {
            let lp = briefs.get(&run.loop_id);
            match kind {
                EventKind::RunStarted => EventBody::run_started(run, lp),
                _ => EventBody::run_finished(run, lp),
            }
        })
        .collect()
}

fn event_from_row(row: &tokio_postgres::Row) -> Result<Event> {
    Ok(rows::event_row(&Cols(row))?)
}

pub(crate) async fn events_after(
    db: &Db<'_, impl Conn>,
    after: u64,
    limit: usize,
) -> Result<Vec<Event>> {
    db.query_as(
        "SELECT seq, kind, loop_id, run_id, workflow_run_id, data_json, created_at \
             FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
        &[&sat_i64(after), &sat_i64(limit as u64)],
        event_from_row,
    )
    .await
}

pub(crate) async fn event_bounds(db: &Db<'_, impl Conn>) -> Result<EventBounds> {
    // One statement, one snapshot: the oldest and newest kept, and the highest number
    // pruned (the newest number ever given when the newest rows were pruned).
    let row = db
        .query_one(
            "SELECT (SELECT MIN(seq) FROM events), (SELECT MAX(seq) FROM events), \
                    (SELECT value::bigint FROM meta WHERE key = $1)",
            &[&PRUNED_THROUGH],
        )
        .await?;
    let num = |v: Option<i64>| v.map(|v| u64::try_from(v).unwrap_or(0));
    let oldest = num(get(&row, 0, "min")?);
    let newest = num(get(&row, 1, "max")?).unwrap_or(0);
    let pruned = num(get(&row, 2, "pruned")?).unwrap_or(0);
    Ok(EventBounds {
        oldest,
        latest: newest.max(pruned),
    })
}

/// Deletes the events `condition` (an SQL condition on `events`, `$1` its one
/// parameter) selects, remembering the highest number deleted; inside the caller's
/// transaction. Returns how many went.
pub(crate) async fn delete_where(
    db: &Db<'_, impl Conn>,
    condition: &str,
    param: &(dyn tokio_postgres::types::ToSql + Sync),
) -> Result<u64> {
    let sql = format!(
        "WITH gone AS (DELETE FROM events WHERE {condition} RETURNING seq), \
              high AS (INSERT INTO meta (key, value) \
                SELECT '{PRUNED_THROUGH}', MAX(seq)::text FROM gone HAVING MAX(seq) IS NOT NULL \
                ON CONFLICT (key) DO UPDATE \
                  SET value = GREATEST(meta.value::bigint, EXCLUDED.value::bigint)::text) \
         SELECT COUNT(*) FROM gone"
    );
    let row = db.query_one(&sql, &[param]).await?;
    Ok(u64::try_from(get::<i64>(&row, 0, "count")?).unwrap_or(0))
}

/// Keeps the newest `keep` events (one range of numbers), remembering the highest
/// number deleted.
pub(crate) async fn trim(db: &Db<'_, impl Conn>, keep: usize) -> Result<u64> {
    delete_where(
        db,
        "seq <= (SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET $1)",
        &sat_i64(keep as u64),
    )
    .await
}

/// Deletes events written before `older_than` (`None`: nothing).
pub(crate) async fn prune_older(
    db: &Db<'_, impl Conn>,
    older_than: Option<&Instant>,
) -> Result<u64> {
    match older_than {
        Some(before) => delete_where(db, "created_at < $1", &ms(before)).await,
        None => Ok(0),
    }
}
