//! Run writes: a batch of pid records and finalizations in one transaction, each
//! finalization followed by its loop's transition as the domain decides it
//! (`loops_core::transitions`), from the loop as stored (locked) and its deferred retry
//! looked up in the same transaction, and the notifications it calls for queued there
//! too (`crate::notify`). The pid records are one statement, and so are the
//! finalizations that cannot see each other ([`FinishSet`]); the two go to the server
//! together with their runs' locks, the notification default and the finalized runs'
//! loops' locks, and `BEGIN` with the fence goes with them (on a connection that has
//! seen the fence pass): a batch costs two round trips whatever its size (those, then
//! the events with `COMMIT`).

use crate::codec::{get, loop_cols, loop_from_row, ms, opt_text, run_cols, run_from_row, Cols};
use crate::error::{Error, Result};
use crate::loops::apply_advance_known;
use crate::runs::{is_running, lock_order, not_running, LOCK_RUNS};
use crate::session::{Conn, Db, Params};
use loops_core::event::{EventKind, LoopBrief};
use loops_core::schedule;
use loops_core::transitions;
use loops_core::{Instant, Loop, LoopId, Run, RunId, RunOutcome};
use loops_store::codec::{StoredRow, META_NOTIFY_DEFAULT};
use loops_store::finish::{self, PidRecord, Write};
use loops_store::{RunWrite, RunWritten};
use std::collections::{HashMap, HashSet};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

pub(crate) async fn record_run_writes(
    db: &Db<'_, impl Conn>,
    writes: &[RunWrite],
    now: Instant,
) -> Result<Vec<loops_store::Result<RunWritten>>> {
    // A write that fails alone (a row no longer running, an outcome that cannot end a
    // run) is found out before it writes anything, and without an SQL error: the
    // transaction goes on with the next write, no savepoint needed.
    let mut batch = Batch::default();
    let pid_set = pid_set(writes);
    let finish_set = finish_set(writes, pid_set.is_some());
    let finishes = writes
        .iter()
        .any(|w| matches!(w.to_write(), Write::Finish { .. }));
    // The batch's statements that need no answer from one another go to the server
    // together, one round trip, in this order: the pid records in one statement (each
    // run's pid record precedes its finalization, so none is moved past a write it
    // depends on), the notification default the finalizations read, the finalizations
    // that can be made together, and their loops' locks.
    let pid_columns = pid_set.as_deref().map(PidColumns::of);
    let pid_params = pid_columns.as_ref().map(PidColumns::params);
    let set_columns = (!finish_set.is_empty()).then(|| SetColumns::of(&finish_set));
    let set_params = set_columns.as_ref().map(SetColumns::params);
    let lock_params = set_columns
        .as_ref()
        .map(|c| -> [&(dyn ToSql + Sync); 1] { [&c.ids] });
    // The rows the set statements update where they found them, locked first: none
    // moves until the transaction ends.
    let set_runs = set_run_ids(pid_columns.as_ref(), set_columns.as_ref());
    let set_runs_params: [&(dyn ToSql + Sync); 1] = [&set_runs];
    let mut statements: Vec<(&str, &Params<'_>)> = Vec::with_capacity(5);
    if !set_runs.is_empty() {
        statements.push((LOCK_RUNS, &set_runs_params));
    }
    if let Some(params) = &pid_params {
        statements.push((UPDATE_PIDS, params));
    }
    if finishes {
        statements.push((
            crate::notify::SELECT_NOTIFY_DEFAULT,
            &[&META_NOTIFY_DEFAULT],
        ));
    }
    if let (Some(params), Some(lock)) = (&set_params, &lock_params) {
        statements.push((UPDATE_SET, params));
        statements.push((LOCK_SET_LOOPS, lock));
    }
    let mut answers = db.query_all(&statements).await?.into_iter();
    if !set_runs.is_empty() {
        answers.next();
    }
    let pid_rows = pid_params.and_then(|_| answers.next());
    if finishes {
        let rows = answers.next().unwrap_or_default();
        batch.notify_default = Some(crate::notify::notify_default_from(&rows)?);
    }
    let set_rows = set_params.and_then(|_| answers.next().zip(answers.next()));
    let mut marked = match (pid_set, pid_rows) {
        (Some(set), Some(rows)) => Some(pids_written(db, set, &rows).await?),
        _ => None,
    };
    // Then the finalizations made together, as if they came first; the rest one by
    // one, in order, after them.
    let mut finalized = match set_rows {
        Some((rows, loops)) => {
            finalized_set(db, finish_set, &rows, &loops, now, &mut batch).await?
        }
        None => HashMap::new(),
    };
    let mut done = Vec::with_capacity(writes.len());
    for (i, write) in writes.iter().enumerate() {
        let result = match write.to_write() {
            Write::Pid(_) if marked.is_some() => match marked.as_mut().and_then(|m| m.remove(&i)) {
                Some(result) => result,
                None => Err(Error::decode("a pid record went missing from its batch")),
            },
            Write::Pid(record) => mark_pid_in(db, &record).await.map(|()| RunWritten::Spawned),
            Write::Finish { run, outcome } => match finalized.remove(&i) {
                Some(result) => result,
                None => finish_one(db, run, outcome, now, &mut batch).await,
            },
        };
        match result {
            Ok(written) => done.push(Ok(written)),
            Err(e) => done.push(Err(e.alone_in_batch()?)),
        }
    }
    // The finished runs' `run.finished`, with their loops as their ends left them, as
    // the transaction's last statements.
    let finished: Vec<(EventKind, &Run)> = done
        .iter()
        .filter_map(|w| match w {
            Ok(RunWritten::Finished { run, .. }) => Some((EventKind::RunFinished, run.as_ref())),
            _ => None,
        })
        .collect();
    if !finished.is_empty() {
        let bodies = crate::events::bodies_of(&finished, &batch.briefs);
        crate::events::append_all(db, &bodies, now).await?;
    }
    Ok(done)
}

/// What the writes of one batch share as they are applied: the default notification
/// settings (read once), and each finished run's loop as the transaction has left it so
/// far — every change a finalization makes to a loop row goes through
/// [`advance_after_finish`], so no read is needed for the `run.finished` events.
#[derive(Default)]
struct Batch {
    notify_default: Option<Option<loops_core::Notify>>,
    briefs: HashMap<LoopId, LoopBrief>,
}

async fn finish_one(
    db: &Db<'_, impl Conn>,
    run: &RunId,
    outcome: &RunOutcome,
    now: Instant,
    batch: &mut Batch,
) -> Result<RunWritten> {
    let usage = finish::outcome_usage_json(outcome)?;
    let finished = finalize_in(db, run, outcome, usage).await?;
    let lp = stored_loop(db, &finished.loop_id).await?;
    after_finalize(db, finished, lp.as_ref(), outcome, now, batch).await
}

/// What follows a run's finalization in its transaction, from its loop as stored and
/// locked (`None`: removed): the loop's transition, then the notifications, holds and
/// budgets the run's end calls for.
async fn after_finalize(
    db: &Db<'_, impl Conn>,
    finished: Run,
    lp: Option<&Loop>,
    outcome: &RunOutcome,
    now: Instant,
    batch: &mut Batch,
) -> Result<RunWritten> {
    let Some(lp) = lp else {
        return Ok(RunWritten::finished(finished, false, Vec::new()));
    };
    let (loop_moved, event, brief) = advance_after_finish(db, lp, &finished, outcome.stop).await?;
    batch.briefs.insert(lp.id.clone(), brief);
    let notify_default = &mut batch.notify_default;
    let mut notifications =
        crate::notify::queue_for_run(db, lp, &finished, now, notify_default).await?;
    if let Some(event) = event {
        notifications.extend(
            crate::notify::queue_event(db, lp, &finished, event, now, notify_default).await?,
        );
    }
    notifications.extend(crate::holds::after_finish(db, lp, &finished, now, notify_default).await?);
    notifications
        .extend(crate::budgets::after_finish(db, lp, &finished, now, notify_default).await?);
    Ok(RunWritten::finished(finished, loop_moved, notifications))
}

/// A batch's finalizations that can be made together (each with its index in
/// `writes`): [`UPDATE_SET`] finalizes them in one `UPDATE … FROM unnest`, and
/// [`finalized_set`] follows each with [`after_finalize`] in the batch's order. The
/// batch then reads as if these came first and the rest one by one after them, which
/// holds because none of them can see another:
/// - each is the only finalization of its run in the batch, and of its loop (the
///   statement leaves any run whose loop another run of the batch shares running: a
///   transition is decided from the loop as the run before left it, and reads that
///   loop's other runs);
/// - none reports usage (a budget's spend is the usage of the runs finished in its
///   window; a run reporting none adds nothing to what another's decision reads);
/// - none has a pid record still to come in the batch (`pids_written`: all are).
///
/// A run the statement did not finalize (no longer running, or sharing its loop) goes
/// one by one, which says why. A set of one too: with the batch's first statements, its
/// finalization costs no round trip of its own.
type FinishSet<'w> = Vec<(usize, &'w RunId, &'w RunOutcome)>;

/// The batch's finalizations that can be made together (see [`FinishSet`]).
fn finish_set(writes: &[RunWrite], pids_written: bool) -> FinishSet<'_> {
    let pid_pending: HashSet<&RunId> = writes
        .iter()
        .filter_map(|w| match w {
            RunWrite::Spawned { run, .. } if !pids_written => Some(run),
            _ => None,
        })
        .collect();
    let mut finishes: HashMap<&RunId, usize> = HashMap::new();
    for w in writes {
        if let RunWrite::Finished { run, .. } = w {
            *finishes.entry(run).or_default() += 1;
        }
    }
    let set: Vec<(usize, &RunId, &RunOutcome)> = writes
        .iter()
        .enumerate()
        .filter_map(|(i, w)| match w.to_write() {
            Write::Finish { run, outcome }
                if finishes.get(run) == Some(&1)
                    && !pid_pending.contains(run)
                    && matches!(finish::outcome_usage_json(outcome), Ok(None)) =>
            {
                Some((i, run, outcome))
            }
            _ => None,
        })
        .collect();
    set
}

/// The runs of the set statements ([`UPDATE_PIDS`], [`UPDATE_SET`]), each once, sorted:
/// [`LOCK_RUNS`] locks them in that order, the same in every recorder batch.
fn set_run_ids<'a>(pids: Option<&PidColumns<'a>>, set: Option<&SetColumns<'a>>) -> Vec<&'a str> {
    let pids = pids.map(|p| p.ids.iter().copied()).into_iter().flatten();
    lock_order(pids.chain(set.map(|s| s.ids.iter().copied()).into_iter().flatten()))
}

/// Finalizes the runs of [`SetColumns`] (each a finalization of [`finish_set`]) in one
/// statement, returning the rows it finalized. The unnest's columns are named apart
/// from `runs`' so `RETURNING` names only the run's.
///
/// Every run is looked up by the primary key, one probe an id that the planner keeps
/// apart (`LATERAL … OFFSET 0`), and its row is updated where the probe found it
/// (`ctid`). Written as `id = ANY($1)` (or a join), the generic plan PostgreSQL keeps
/// for a prepared statement, made while `runs` was small (a new store), scanned the
/// whole table on every batch once it had grown: 26 ms a batch at 40,000 runs, until
/// an `ANALYZE` made it plan again (BENCHMARKS.md §30); see [`is_running`] for the
/// indexes of the running runs. The rows are locked before ([`LOCK_RUNS`]).
pub(crate) const UPDATE_SET: &str = concat!(
    "WITH shared AS (SELECT r.loop_id FROM unnest($1::text[]) AS x(id) \
                       CROSS JOIN LATERAL \
                         (SELECT loop_id FROM runs WHERE runs.id = x.id OFFSET 0) AS r \
                     GROUP BY r.loop_id HAVING count(*) > 1) \
             UPDATE runs SET status = u.n_status, finished_at = u.n_finished_at, \
               exit_code = u.n_exit_code, \
               duration_ms = CASE WHEN runs.started_at IS NULL THEN NULL \
                                  ELSE GREATEST(0, u.n_finished_at - runs.started_at) END, \
               stdout = u.n_stdout, stderr = u.n_stderr, error = u.n_error, \
               summary = u.n_summary, usage_json = NULL, updated_at = u.n_finished_at, \
               error_output = u.n_error_output, failure_class = u.n_failure_class, \
               retry_at = u.n_retry_at, session_id = u.n_session_id, \
               session_note = u.n_session_note \
             FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], \
                         $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
                         $11::bigint[], $12::text[], $13::text[]) \
               AS u(n_id, n_status, n_finished_at, n_exit_code, n_stdout, n_stderr, \
                    n_error, n_summary, n_error_output, n_failure_class, n_retry_at, \
                    n_session_id, n_session_note) \
             CROSS JOIN LATERAL (SELECT ctid AS at FROM runs WHERE runs.id = u.n_id \
                                   AND ",
    is_running!("runs.status"),
    " \
                                   AND runs.loop_id NOT IN (SELECT loop_id FROM shared) \
                                 OFFSET 0) AS r \
             WHERE runs.ctid = r.at AND ",
    is_running!("runs.status"),
    " \
             RETURNING ",
    run_cols!()
);

/// [`finish_set`]'s finalizations as [`UPDATE_SET`]'s columns.
struct SetColumns<'a> {
    ids: Vec<&'a str>,
    statuses: Vec<&'a str>,
    finished_at: Vec<i64>,
    exit_codes: Vec<Option<i64>>,
    stdout: Vec<Option<String>>,
    stderr: Vec<Option<String>>,
    error: Vec<Option<String>>,
    summary: Vec<Option<String>>,
    error_output: Vec<Option<String>>,
    classes: Vec<Option<&'a str>>,
    retry_at: Vec<Option<i64>>,
    session_id: Vec<Option<String>>,
    session_note: Vec<Option<String>>,
}

impl<'a> SetColumns<'a> {
    fn of(set: &FinishSet<'a>) -> Self {
        let texts = |f: fn(&RunOutcome) -> Option<&str>| -> Vec<Option<String>> {
            set.iter().map(|(_, _, o)| opt_text(f(o))).collect()
        };
        Self {
            ids: set.iter().map(|(_, r, _)| r.as_str()).collect(),
            statuses: set.iter().map(|(_, _, o)| o.status.as_str()).collect(),
            finished_at: set.iter().map(|(_, _, o)| ms(&o.finished_at)).collect(),
            exit_codes: set
                .iter()
                .map(|(_, _, o)| o.exit_code.map(i64::from))
                .collect(),
            stdout: texts(|o| Some(o.stdout.as_str())),
            stderr: texts(|o| Some(o.stderr.as_str())),
            error: texts(|o| o.error.as_deref()),
            summary: texts(|o| o.summary.as_deref()),
            error_output: texts(|o| o.error_output.as_deref()),
            classes: set
                .iter()
                .map(|(_, _, o)| o.failure_class.map(|c| c.as_str()))
                .collect(),
            retry_at: set
                .iter()
                .map(|(_, _, o)| o.retry_at.as_ref().map(ms))
                .collect(),
            session_id: texts(|o| o.session_id.as_deref()),
            session_note: texts(|o| o.session_note.as_deref()),
        }
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 13] {
        [
            &self.ids,
            &self.statuses,
            &self.finished_at,
            &self.exit_codes,
            &self.stdout,
            &self.stderr,
            &self.error,
            &self.summary,
            &self.error_output,
            &self.classes,
            &self.retry_at,
            &self.session_id,
            &self.session_note,
        ]
    }
}

/// Locks and reads the loops of the runs `$1` (the ids of [`UPDATE_SET`], sent after
/// it), each loop once and in id order, so two transactions lock in the same order.
/// Each is looked up by its key, as in [`UPDATE_SET`]'s `shared`. A loop whose run the
/// set did not finalize is locked too; the batch's one-by-one finalization of that run
/// locks it anyway, or it stays locked to the commit, unwritten.
///
/// Sent with the finalizations, not after them once their loops are known: a batch is
/// then two round trips, not three (BENCHMARKS.md §31).
pub(crate) const LOCK_SET_LOOPS: &str = concat!(
    "SELECT l.* FROM \
       (SELECT DISTINCT r.loop_id FROM unnest($1::text[]) AS x(id) \
          CROSS JOIN LATERAL (SELECT loop_id FROM runs WHERE runs.id = x.id OFFSET 0) AS r \
        ORDER BY r.loop_id OFFSET 0) AS k \
     CROSS JOIN LATERAL (SELECT ",
    loop_cols!(),
    " FROM loops WHERE loops.id = k.loop_id OFFSET 0 FOR UPDATE) AS l"
);

/// [`finish_set`]'s runs as [`UPDATE_SET`] left them (`rows`), each followed by its
/// loop's transition, from their loops as [`LOCK_SET_LOOPS`] locked them (`loops`).
async fn finalized_set(
    db: &Db<'_, impl Conn>,
    set: FinishSet<'_>,
    rows: &[Row],
    loops: &[Row],
    now: Instant,
    batch: &mut Batch,
) -> Result<HashMap<usize, Result<RunWritten>>> {
    let mut runs: HashMap<RunId, Run> = HashMap::with_capacity(rows.len());
    for row in rows {
        let run = run_from_row(row)?;
        runs.insert(run.id.clone(), run);
    }
    if runs.is_empty() {
        return Ok(HashMap::new());
    }
    // Only the loops of the runs finalized here are decoded: a run the set did not
    // finalize fails alone, whatever its loop's row holds.
    let mut loop_rows: HashMap<String, &Row> = HashMap::with_capacity(loops.len());
    for row in loops {
        loop_rows.insert(get(row, 0, "id")?, row);
    }
    let mut out = HashMap::with_capacity(runs.len());
    for (i, run, outcome) in set {
        let Some(finished) = runs.remove(run) else {
            continue;
        };
        // Each run of the set is of another loop ([`FinishSet`]).
        let lp = loop_rows
            .get(finished.loop_id.as_str())
            .map(|row| loop_from_row(row))
            .transpose()?;
        let written = after_finalize(db, finished, lp.as_ref(), outcome, now, batch).await;
        out.insert(i, written);
    }
    Ok(out)
}

/// The pid records of a batch (each with its index in `writes`), written together:
/// [`UPDATE_PIDS`] in one `UPDATE … FROM unnest`, sent with the batch's first
/// statements, [`pids_written`] the results. `None` for a batch with none, or naming a
/// run twice: those go one by one.
fn pid_set(writes: &[RunWrite]) -> Option<Vec<(usize, PidRecord<'_>)>> {
    let spawned: Vec<(usize, PidRecord<'_>)> = writes
        .iter()
        .enumerate()
        .filter_map(|(i, w)| match w.to_write() {
            Write::Pid(record) => Some((i, record)),
            Write::Finish { .. } => None,
        })
        .collect();
    // One by one when a run has two pid records, or one after its finalization (which
    // must fail as it would in order).
    let mut seen: HashSet<&RunId> = HashSet::with_capacity(writes.len());
    let mut finalized: HashSet<&RunId> = HashSet::new();
    let mut in_order_only = false;
    for w in writes {
        match w {
            RunWrite::Spawned { run, .. } => {
                in_order_only |= finalized.contains(run) || !seen.insert(run);
            }
            RunWrite::Finished { run, .. } => {
                finalized.insert(run);
            }
        }
    }
    (!spawned.is_empty() && !in_order_only).then_some(spawned)
}

/// Writes the pid records of [`PidColumns`] in one statement, inside the caller's
/// transaction: the ids of the rows it wrote. Each row is found as in [`UPDATE_SET`].
pub(crate) const UPDATE_PIDS: &str = concat!(
    "UPDATE runs SET pid = u.pid, pid_start_time = u.pid_start_time, \
       updated_at = u.at, session_note = u.session_note \
     FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[]) \
       AS u(id, pid, pid_start_time, at, session_note) \
     CROSS JOIN LATERAL (SELECT ctid AS at FROM runs WHERE runs.id = u.id \
                           AND ",
    is_running!("runs.status"),
    " OFFSET 0) AS r \
     WHERE runs.ctid = r.at AND ",
    is_running!("runs.status"),
    " RETURNING runs.id"
);

/// [`pid_set`]'s records as [`UPDATE_PIDS`]' columns.
struct PidColumns<'a> {
    ids: Vec<&'a str>,
    pids: Vec<i64>,
    starts: Vec<Option<i64>>,
    ats: Vec<i64>,
    notes: Vec<Option<&'a str>>,
}

impl<'a> PidColumns<'a> {
    fn of(spawned: &[(usize, PidRecord<'a>)]) -> Self {
        Self {
            ids: spawned.iter().map(|(_, p)| p.run.as_str()).collect(),
            pids: spawned.iter().map(|(_, p)| i64::from(p.pid)).collect(),
            starts: spawned.iter().map(|(_, p)| p.pid_start_time).collect(),
            ats: spawned.iter().map(|(_, p)| ms(&p.at)).collect(),
            notes: spawned.iter().map(|(_, p)| p.session_note).collect(),
        }
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [&self.ids, &self.pids, &self.starts, &self.ats, &self.notes]
    }
}

/// Each of [`pid_set`]'s writes' result by its index in `writes`, from the ids
/// [`UPDATE_PIDS`] wrote (`rows`).
async fn pids_written(
    db: &Db<'_, impl Conn>,
    spawned: Vec<(usize, PidRecord<'_>)>,
    rows: &[Row],
) -> Result<HashMap<usize, Result<RunWritten>>> {
    let written: HashSet<String> = rows
        .iter()
        .map(|r| get::<String>(r, 0, "id"))
        .collect::<Result<_>>()?;
    let mut out = HashMap::with_capacity(spawned.len());
    for (i, record) in spawned {
        let result = if written.contains(record.run.as_str()) {
            Ok(RunWritten::Spawned)
        } else {
            Err(not_running(db, record.run).await)
        };
        out.insert(i, result);
    }
    Ok(out)
}

/// [`mark_pid_in`]'s statement: one run's pid record.
pub(crate) const UPDATE_PID: &str = concat!(
    "UPDATE runs SET pid = $2, pid_start_time = $3, updated_at = $4, session_note = $5 \
     WHERE id = $1 AND ",
    is_running!("status")
);

/// [`finalize_in`]'s statement: one run's finalization.
pub(crate) const UPDATE_ONE: &str = concat!(
    "UPDATE runs SET status = $2, finished_at = $3, exit_code = $4, \
       duration_ms = CASE WHEN started_at IS NULL THEN NULL \
                          ELSE GREATEST(0, $3 - started_at) END, \
       stdout = $5, stderr = $6, error = $7, summary = $8, usage_json = $9, \
       updated_at = $3, error_output = $10, failure_class = $11, retry_at = $12, \
       session_id = $13, session_note = $14 \
     WHERE id = $1 AND ",
    is_running!("status"),
    " RETURNING ",
    run_cols!()
);

/// Records the child's pid on a running row, inside the caller's transaction.
async fn mark_pid_in(db: &Db<'_, impl Conn>, record: &PidRecord<'_>) -> Result<()> {
    let n = db
        .execute(
            UPDATE_PID,
            &[
                &record.run.as_str(),
                &i64::from(record.pid),
                &record.pid_start_time,
                &ms(&record.at),
                &record.session_note,
            ],
        )
        .await?;
    if n == 0 {
        return Err(not_running(db, record.run).await);
    }
    Ok(())
}

/// Moves a running row to its terminal status, inside the caller's transaction.
async fn finalize_in(
    db: &Db<'_, impl Conn>,
    run: &RunId,
    outcome: &RunOutcome,
    usage: Option<String>,
) -> Result<Run> {
    let row = db
        .query_opt(
            UPDATE_ONE,
            &[
                &run.as_str(),
                &outcome.status.as_str(),
                &ms(&outcome.finished_at),
                &outcome.exit_code.map(i64::from),
                &crate::codec::text(&outcome.stdout).as_ref(),
                &crate::codec::text(&outcome.stderr).as_ref(),
                &opt_text(outcome.error.as_deref()),
                &opt_text(outcome.summary.as_deref()),
                &usage,
                &opt_text(outcome.error_output.as_deref()),
                &outcome.failure_class.map(|c| c.as_str()),
                &outcome.retry_at.as_ref().map(ms),
                &opt_text(outcome.session_id.as_deref()),
                &opt_text(outcome.session_note.as_deref()),
            ],
        )
        .await?;
    match row {
        Some(r) => run_from_row(&r),
        None => Err(not_running(db, run).await),
    }
}

/// The loop of a run finalized in this transaction, as stored and locked (`None`:
/// removed), so the transition is decided from what no other runner can change until
/// this transaction ends.
async fn stored_loop(db: &Db<'_, impl Conn>, id: &LoopId) -> Result<Option<Loop>> {
    db.query_opt_as(
        concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE id = $1 FOR UPDATE"
        ),
        &[&id.as_str()],
        loop_from_row,
    )
    .await
}

/// After `run` was finalized in this transaction: applies its loop's transition and
/// engine state, as the domain decides them from the loop as stored and locked (`lp`).
/// Returns whether the loop's schedule state changed, the notification about the loop
/// the transition calls for (parked by the circuit breaker, done by a stop condition:
/// `stop` is what the runner found met, [`loops_core::RunOutcome::stop`]), and the
/// loop's brief as it now is. A loop whose schedule no longer computes is left as it
/// is (logged): the next scheduling pass parks it.
async fn advance_after_finish(
    db: &Db<'_, impl Conn>,
    lp: &Loop,
    run: &Run,
    stop: Option<loops_core::stop::StopMet>,
) -> Result<(bool, Option<loops_core::NotifyEvent>, LoopBrief)> {
    let deferred = if transitions::wants_deferred_retry(lp, run) {
        retryable_slot(db, &lp.id, lp.max_attempts, run.scheduled_for).await?
    } else {
        None
    };
    let plan = finish::plan(lp, run, stop, deferred);
    let mut brief = LoopBrief::of(lp);
    let mut moved = false;
    if let Some(advance) = &plan.advance {
        let at = finish::advanced_at(run);
        // The row is locked and its jitter known: no second read.
        moved = apply_advance_known(db, &lp.id, lp.jitter_ms, advance, at).await?;
        if moved {
            brief.status = advance.status;
            brief.next_run_at = advance.next_run_at;
            brief.due_at = schedule::due_at(
                &lp.id,
                advance.next_run_at,
                advance.retry_scheduled_for,
                lp.jitter_ms,
            );
        }
    }
    if let Some(state) = &plan.state {
        crate::loops::set_state(db, &lp.id, state).await?;
    }
    Ok((moved, plan.event, brief))
}

/// The oldest slot of `loop_id` other than `except` whose latest attempt failed with
/// attempts left under `max_attempts` (a deferred retry).
async fn retryable_slot(
    db: &Db<'_, impl Conn>,
    loop_id: &LoopId,
    max_attempts: u32,
    except: Instant,
) -> Result<Option<Instant>> {
    let row = db
        .query_opt(
            loops_store::retryable_slot_sql!("$1", "$2", "$3"),
            &[&loop_id.as_str(), &i64::from(max_attempts), &ms(&except)],
        )
        .await?;
    Ok(row
        .map(|r| Cols(&r).instant(0, "scheduled_for"))
        .transpose()?)
}
