//! Read-only roll-ups over runs: the facts `loops health` judges loops by, and the
//! agent usage `loops usage` adds up. Each goes through an index: per loop, its
//! newest rows (the covering `runs_loop_recent`) and the rows of its window (the slot index of
//! the `UNIQUE (loop_id, scheduled_for, attempt)` constraint, read without touching
//! the table); usage through the partial indexes of rows that carry usage.

use crate::codec::{failure_statuses, get, instant_from_ms, ms, sat_i64, Cols};
use crate::error::{Error, Result, StoreResult};
use crate::SqliteStore;
use loops_core::failure::FailureClass;
use loops_core::health::{FactsQuery, RecentRun, RunBrief, RunFacts, SlotRows};
use loops_core::{Instant, LoopId, RunStatus};
use loops_store::rows::{usage_run_row, usage_step_row};
use loops_store::UsageRow;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, Row, Statement};

/// The columns of a [`RunBrief`] but its error, all in the `runs_loop_recent` index,
/// then the row's rowid (to read the error of a failed attempt).
const BRIEF_COLS: &str =
    "created_at, scheduled_for, attempt, status, started_at, finished_at, rowid";
/// Newest first: by creation, then (rows created in the same millisecond, like a
/// skipped slot and the claim after it) by slot and attempt — the order of the
/// `runs_loop_recent` index, so the newest rows come out of it without a sort.
const NEWEST_FIRST: &str = "ORDER BY created_at DESC, scheduled_for DESC, attempt DESC";

/// A loop's newest `limit` rows (`?1` the loop). The limit is part of the text, not a
/// parameter: SQLite re-plans a statement whose LIMIT is a parameter each time it is
/// rebound (one re-preparation per loop asked about, a third of the whole report).
fn recent_sql(limit: usize) -> String {
    format!("SELECT {BRIEF_COLS} FROM runs WHERE loop_id = ?1 {NEWEST_FIRST} LIMIT {limit}")
}

/// A loop's oldest slot, its skipped rows in `[?2, ?3]` and — for a grid (`?6` its
/// anchor, `?7` its period) — its distinct slots in `[?4, ?5]` on the grid.
const WINDOW_SQL: &str = "SELECT (SELECT MIN(scheduled_for) FROM runs WHERE loop_id = ?1), \
       (SELECT COUNT(*) FROM runs WHERE loop_id = ?1 AND status = 'skipped' \
          AND scheduled_for >= ?2 AND scheduled_for <= ?3), \
       CASE WHEN ?6 IS NULL THEN NULL ELSE \
         (SELECT COUNT(DISTINCT scheduled_for) FROM runs WHERE loop_id = ?1 \
            AND scheduled_for >= ?4 AND scheduled_for <= ?5 \
            AND (scheduled_for - ?6) % ?7 = 0) END";

/// Runs with usage that finished at or after `?1`.
const USAGE_RUNS_SQL: &str = "SELECT loop_id, loop_name, finished_at, usage_json FROM runs \
     WHERE usage_json IS NOT NULL AND finished_at >= ?1";

/// Step runs with usage that finished at or after `?1`, with their workflow run.
const USAGE_STEPS_SQL: &str =
    "SELECT r.workflow_id, r.workflow_name, s.step_id, r.loop_id, s.finished_at, s.usage_json \
     FROM workflow_step_runs s JOIN workflow_runs r ON r.id = s.workflow_run_id \
     WHERE s.usage_json IS NOT NULL AND s.finished_at >= ?1";

/// The statements `run_facts` and `usage_since` run, by name, with sample parameters
/// (for [`SqliteStore::report_query_plans`]).
pub(crate) fn report_queries() -> Vec<(&'static str, String, Vec<rusqlite::types::Value>)> {
    use rusqlite::types::Value as V;
    let id = || V::Text("000000000000".into());
    vec![
        ("recent", recent_sql(20), vec![id()]),
        (
            "window",
            WINDOW_SQL.to_owned(),
            vec![
                id(),
                V::Integer(0),
                V::Integer(1),
                V::Integer(0),
                V::Integer(1),
                V::Integer(0),
                V::Integer(60_000),
            ],
        ),
        ("usage runs", USAGE_RUNS_SQL.to_owned(), vec![V::Integer(0)]),
        (
            "usage steps",
            USAGE_STEPS_SQL.to_owned(),
            vec![V::Integer(0)],
        ),
        (
            "status counts",
            status_counts_sql(),
            status_counts_params(1_800_000).map(V::Integer).to_vec(),
        ),
        ("scan", SCAN_SQL.to_owned(), vec![id(), id()]),
        (
            "scan count",
            SCAN_COUNT_SQL.to_owned(),
            vec![id(), id(), V::Integer(20)],
        ),
    ]
}

/// A brief without its error, and the row's rowid. Read with borrowed values (no
/// allocation per column): `loops health` decodes 20 rows of each loop.
fn brief_from_row(row: &Row<'_>) -> Result<(RunBrief, i64)> {
    let instant = |idx: usize, col: &str| instant_from_ms(int(row, idx, col)?, col);
    let opt_instant = |idx: usize, col: &str| {
        opt_int(row, idx, col)?
            .map(|v| instant_from_ms(v, col))
            .transpose()
    };
    let attempt = int(row, 2, "attempt")?;
    Ok((
        RunBrief {
            created_at: instant(0, "created_at")?,
            scheduled_for: instant(1, "scheduled_for")?,
            attempt: u32::try_from(attempt)
                .map_err(|_| Error::decode(format!("column attempt: {attempt} out of range")))?,
            status: status(row, 3)?,
            started_at: opt_instant(4, "started_at")?,
            finished_at: opt_instant(5, "finished_at")?,
            error: None,
            failure_class: None,
        },
        int(row, 6, "rowid")?,
    ))
}

fn int(row: &Row<'_>, idx: usize, col: &str) -> Result<i64> {
    match row.get_ref(idx)? {
        ValueRef::Integer(v) => Ok(v),
        other => Err(Error::decode(format!(
            "column {col}: expected an integer, found {:?}",
            other.data_type()
        ))),
    }
}

fn opt_int(row: &Row<'_>, idx: usize, col: &str) -> Result<Option<i64>> {
    match row.get_ref(idx)? {
        ValueRef::Null => Ok(None),
        _ => int(row, idx, col).map(Some),
    }
}

fn status(row: &Row<'_>, idx: usize) -> Result<RunStatus> {
    let text = match row.get_ref(idx)? {
        ValueRef::Text(t) => std::str::from_utf8(t).ok(),
        _ => None,
    };
    text.ok_or_else(|| Error::decode("column status: not text".to_owned()))?
        .parse()
        .map_err(|e| Error::decode(format!("column status: {e}")))
}

/// The statements `run_facts` runs for every loop, prepared once per call.
struct FactsStatements<'c> {
    recent: Statement<'c>,
    error: Statement<'c>,
    window: Statement<'c>,
    listed: Statement<'c>,
}

/// The distinct slots of a loop's rows in `[?2, ?3]`.
const LISTED_SQL: &str = "SELECT DISTINCT scheduled_for FROM runs \
     WHERE loop_id = ?1 AND scheduled_for >= ?2 AND scheduled_for <= ?3 \
     ORDER BY scheduled_for";

/// The error and failure class of the row `rowid` (a failed attempt's).
fn error_of(
    stmt: &mut Statement<'_>,
    rowid: i64,
) -> Result<(Option<String>, Option<FailureClass>)> {
    let found = stmt
        .query_row([rowid], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                r.get::<_, Option<String>>(1)?,
            ))
        })
        .optional()?;
    let Some((error, class)) = found else {
        return Ok((None, None));
    };
    let class = class
        .map(|c| {
            c.parse()
                .map_err(|e| Error::decode(format!("column failure_class: {e}")))
        })
        .transpose()?;
    Ok((error, class))
}

/// How `run_facts` reads the runs: a few index probes per loop, or one pass over
/// every run (see `FactsRead::for_store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactsRead {
    /// Each loop's newest rows, then its window, from the indexes (≈ 4 probes a loop).
    PerLoop,
    /// Every run once, from the covering `runs_loop_recent` index read backwards (loops
    /// by descending id, each one's rows newest first), the facts added up as they pass.
    Scan,
}

impl FactsRead {
    /// One pass over the runs of the loops asked about — the range of the runs' index
    /// between their least and greatest id — when those runs are no more than `recent`
    /// a loop asked about on average, where the probes of every loop cost more than the
    /// pass (100,000 loops with a run each: BENCHMARKS.md §25); else the probes, which
    /// read only each loop's newest rows whatever the history (10 million runs). The
    /// runs are bounded by the largest rowid first (one index probe), else counted in
    /// the range, up to one past the budget (no more than the pass would read).
    fn for_store(
        conn: &Connection,
        range: (&str, &str),
        loops: usize,
        recent: usize,
    ) -> Result<Self> {
        let budget = (loops as u64).saturating_mul(recent.max(1) as u64);
        let most: Option<i64> = conn
            .prepare_cached("SELECT max(rowid) FROM runs")?
            .query_row([], |r| r.get(0))?;
        if u64::try_from(most.unwrap_or(0)).unwrap_or(0) <= budget {
            return Ok(FactsRead::Scan);
        }
        let counted: i64 = conn
            .prepare_cached(SCAN_COUNT_SQL)?
            .query_row(params![range.0, range.1, sat_i64(budget + 1)], |r| r.get(0))?;
        Ok(if u64::try_from(counted).unwrap_or(u64::MAX) <= budget {
            FactsRead::Scan
        } else {
            FactsRead::PerLoop
        })
    }
}

/// The least and the greatest loop id of `queries` (`None` for none): the range of the
/// runs' index [`scanned_facts`] reads and [`FactsRead::for_store`] counts. A caller
/// that asks about its loops a batch at a time in id order (`loops health`) reads each
/// run once over all its batches.
fn id_range(queries: &[FactsQuery]) -> Option<(&str, &str)> {
    let mut ids = queries.iter().map(|q| q.loop_id.as_str());
    let first = ids.next()?;
    Some(ids.fold((first, first), |(lo, hi), id| (lo.min(id), hi.max(id))))
}

pub(crate) fn run_facts(
    store: &SqliteStore,
    queries: &[FactsQuery],
    recent: usize,
    how: Option<FactsRead>,
) -> StoreResult<Vec<RunFacts>> {
    let Some(range) = id_range(queries) else {
        return Ok(Vec::new());
    };
    store.read(|conn| {
        // One read transaction: one snapshot for every loop, and SQLite takes its
        // shared lock once instead of once per statement (thousands of fcntl calls).
        let tx = conn.unchecked_transaction()?;
        let how = match how {
            Some(how) => how,
            None => FactsRead::for_store(&tx, range, queries.len(), recent)?,
        };
        let facts = {
            let mut error = tx.prepare("SELECT error, failure_class FROM runs WHERE rowid = ?1")?;
            match how {
                FactsRead::Scan => scanned_facts(&tx, &mut error, queries, range, recent)?,
                FactsRead::PerLoop => {
                    // Prepared once, not looked up in the statement cache for every loop.
                    let mut stmts = FactsStatements {
                        recent: tx.prepare(&recent_sql(recent))?,
                        error,
                        window: tx.prepare(WINDOW_SQL)?,
                        listed: tx.prepare(LISTED_SQL)?,
                    };
                    queries
                        .iter()
                        .map(|q| loop_facts(&tx, &mut stmts, q, recent))
                        .collect::<Result<Vec<_>>>()?
                }
            }
        };
        tx.finish()?;
        Ok(facts)
    })
}

/// Every run of the loops with ids in `[?1, ?2]`: [`BRIEF_COLS`], then its loop; loops
/// by descending id, each one's rows newest first — one range of `runs_loop_recent`
/// read backwards, no sort, no table row.
const SCAN_SQL: &str = "SELECT created_at, scheduled_for, attempt, status, started_at, \
       finished_at, rowid, loop_id FROM runs WHERE loop_id >= ?1 AND loop_id <= ?2 \
     ORDER BY loop_id DESC, created_at DESC, scheduled_for DESC, attempt DESC";

/// The runs of the loops with ids in `[?1, ?2]`, counted up to `?3`: what
/// [`SCAN_SQL`] would read, from the same range of the index.
const SCAN_COUNT_SQL: &str = "SELECT count(*) FROM (SELECT 1 FROM runs \
     WHERE loop_id >= ?1 AND loop_id <= ?2 LIMIT +?3)";

/// [`FactsRead::Scan`]: the facts of every query from one pass over the runs, equal to
/// [`loop_facts`]'s (`crates/loops-sqlite/tests/sqlite.rs` compares them).
fn scanned_facts(
    conn: &Connection,
    error: &mut Statement<'_>,
    queries: &[FactsQuery],
    range: (&str, &str),
    recent: usize,
) -> Result<Vec<RunFacts>> {
    // The queries in the scan's order (by descending loop id), met as the scan goes.
    // A batch asked about in id order (`loops health`) needs only reversing.
    let mut order: Vec<usize> = (0..queries.len()).rev().collect();
    let id = |i: usize| queries[i].loop_id.as_str();
    if !order.is_sorted_by(|&a, &b| id(a) >= id(b)) {
        order.sort_by(|&a, &b| id(b).cmp(id(a)));
    }
    let mut pending = order.into_iter().peekable();
    let mut out: Vec<Option<RunFacts>> = vec![None; queries.len()];
    let mut stmt = conn.prepare(SCAN_SQL)?;
    let mut rows = stmt.query(params![range.0, range.1])?;
    // The loop whose rows are passing, and its queries' tallies.
    let mut current = String::new();
    let mut tallies: Vec<(usize, Tally)> = Vec::new();
    while let Some(row) = rows.next()? {
        let id = match row.get_ref(7)? {
            ValueRef::Text(t) => std::str::from_utf8(t)
                .map_err(|_| Error::decode("column loop_id: not UTF-8".to_owned()))?,
            _ => return Err(Error::decode("column loop_id: not text".to_owned())),
        };
        if id != current {
            for (i, tally) in tallies.drain(..) {
                out[i] = Some(tally.finish(error, recent)?);
            }
            // Queries of loops above this one in the order have no rows; this one's
            // queries start their tallies.
            while let Some(&i) = pending.peek() {
                match queries[i].loop_id.as_str().cmp(id) {
                    std::cmp::Ordering::Greater => {}
                    std::cmp::Ordering::Equal => tallies.push((i, Tally::new(&queries[i]))),
                    std::cmp::Ordering::Less => break,
                }
                pending.next();
            }
            current.clear();
            current.push_str(id);
        }
        if tallies.is_empty() {
            // A loop nobody asked about (archived, say): its rows pass by.
            continue;
        }
        let status = status(row, 3)?;
        let slot = int(row, 1, "scheduled_for")?;
        for (_, tally) in &mut tallies {
            tally.add(row, status, slot, recent)?;
        }
    }
    for (i, tally) in tallies {
        out[i] = Some(tally.finish(error, recent)?);
    }
    // A loop without a run: nothing passed by.
    queries
        .iter()
        .zip(out)
        .map(|(q, facts)| match facts {
            Some(facts) => Ok(facts),
            None => Tally::new(q).finish(error, recent),
        })
        .collect()
}

/// One query's facts, added up from its loop's rows as [`scanned_facts`] passes them
/// (newest first).
struct Tally {
    facts: RunFacts,
    /// The query's windows and grid, in milliseconds.
    window: (i64, i64),
    slot_window: (i64, i64),
    grid: Option<(i64, i64)>,
    /// The newest success among the newest `recent` rows (its index and brief).
    newest_success: Option<(usize, RunBrief)>,
    /// The newest `recent` rows that failed: their index and rowid.
    failed: Vec<(usize, i64)>,
    /// The newest success of all, and the failed attempts before it (newer than it).
    last_success: Option<RunBrief>,
    failures_before_success: u64,
    failures: u64,
    oldest: Option<i64>,
    skipped: u64,
    slots: Vec<i64>,
}

impl Tally {
    fn new(q: &FactsQuery) -> Self {
        Tally {
            facts: RunFacts::default(),
            window: (ms(&q.window.0), ms(&q.window.1)),
            slot_window: (ms(&q.slot_window.0), ms(&q.slot_window.1)),
            grid: q
                .grid
                .map(|(anchor, every)| (ms(&anchor), sat_i64(every).max(1))),
            newest_success: None,
            failed: Vec::new(),
            last_success: None,
            failures_before_success: 0,
            failures: 0,
            oldest: None,
            skipped: 0,
            slots: Vec::new(),
        }
    }

    /// The next row (older than those before it): what [`loop_facts`]'s statements
    /// would find of it.
    fn add(&mut self, row: &Row<'_>, status: RunStatus, slot: i64, recent: usize) -> Result<()> {
        let index = self.facts.recent.len();
        if index < recent {
            let first = self.facts.newest.is_none();
            let first_success = status == RunStatus::Succeeded && self.newest_success.is_none();
            if first || first_success {
                let (brief, _) = brief_from_row(row)?;
                if first_success {
                    self.newest_success = Some((index, brief.clone()));
                }
                if first {
                    self.facts.newest = Some(brief);
                }
            }
            if status.is_failure() {
                self.failed.push((index, int(row, 6, "rowid")?));
            }
            self.facts.recent.push(RecentRun {
                status,
                error: None,
                failure_class: None,
            });
        }
        if status == RunStatus::Succeeded && self.last_success.is_none() {
            self.last_success = Some(brief_from_row(row)?.0);
        }
        if status.is_failure() {
            self.failures += 1;
            if self.last_success.is_none() {
                self.failures_before_success += 1;
            }
        }
        self.oldest = Some(self.oldest.map_or(slot, |o| o.min(slot)));
        if status == RunStatus::Skipped && slot >= self.window.0 && slot <= self.window.1 {
            self.skipped += 1;
        }
        if slot >= self.slot_window.0 && slot <= self.slot_window.1 {
            let on_grid = match self.grid {
                Some((anchor, every)) => slot.checked_sub(anchor).is_some_and(|d| d % every == 0),
                None => true,
            };
            if on_grid {
                self.slots.push(slot);
            }
        }
        Ok(())
    }

    /// The facts: the failed attempts' errors read by rowid, as [`loop_facts`] reads them.
    fn finish(mut self, error: &mut Statement<'_>, recent: usize) -> Result<RunFacts> {
        let mut facts = std::mem::take(&mut self.facts);
        for (i, rowid) in self.failed {
            let (error, class) = error_of(error, rowid)?;
            facts.recent[i].error = error;
            facts.recent[i].failure_class = class;
        }
        if let (Some(newest), Some(first)) = (facts.newest.as_mut(), facts.recent.first()) {
            newest.error.clone_from(&first.error);
            newest.failure_class = first.failure_class;
        }
        if !loops_store::facts::success_from_recent(&mut facts, self.newest_success, recent) {
            facts.failures_since_success = if self.last_success.is_some() {
                self.failures_before_success
            } else {
                self.failures
            };
            facts.last_success = self.last_success;
        }
        facts.oldest_slot = self
            .oldest
            .map(|v| instant_from_ms(v, "scheduled_for"))
            .transpose()?;
        facts.window_skipped = self.skipped;
        self.slots.sort_unstable();
        self.slots.dedup();
        facts.window_slots = match self.grid {
            Some(_) => SlotRows::OnGrid(self.slots.len() as u64),
            None => {
                let mut listed = Vec::with_capacity(self.slots.len());
                for slot in self.slots {
                    listed.push(instant_from_ms(slot, "scheduled_for")?);
                }
                SlotRows::Listed(listed)
            }
        };
        Ok(facts)
    }
}

fn loop_facts(
    conn: &Connection,
    stmts: &mut FactsStatements<'_>,
    q: &FactsQuery,
    recent: usize,
) -> Result<RunFacts> {
    let id = q.loop_id.as_str();
    let mut facts = RunFacts::default();
    // The newest rows from the covering index alone (no table row is read): each one's
    // status, the newest and the newest success in full, and a failed attempt's error
    // looked up by rowid.
    let mut newest_success = None;
    let mut failed = Vec::new();
    {
        let mut query = stmts.recent.query([id])?;
        while let Some(row) = query.next()? {
            let status = status(row, 3)?;
            let first = facts.newest.is_none();
            let first_success = status == RunStatus::Succeeded && newest_success.is_none();
            if first || first_success {
                let (brief, _) = brief_from_row(row)?;
                if first_success {
                    newest_success = Some((facts.recent.len(), brief.clone()));
                }
                if first {
                    facts.newest = Some(brief);
                }
            }
            if status.is_failure() {
                failed.push((facts.recent.len(), int(row, 6, "rowid")?));
            }
            facts.recent.push(RecentRun {
                status,
                error: None,
                failure_class: None,
            });
        }
    }
    for (i, rowid) in failed {
        let (error, class) = error_of(&mut stmts.error, rowid)?;
        facts.recent[i].error = error;
        facts.recent[i].failure_class = class;
    }
    if let (Some(newest), Some(first)) = (facts.newest.as_mut(), facts.recent.first()) {
        newest.error.clone_from(&first.error);
        newest.failure_class = first.failure_class;
    }
    // Only failures (and skips) among the newest rows: look further back.
    if !loops_store::facts::success_from_recent(&mut facts, newest_success, recent) {
        let last = conn
            .prepare_cached(&format!(
                "SELECT {BRIEF_COLS} FROM runs WHERE loop_id = ?1 AND status = 'succeeded' \
                 {NEWEST_FIRST} LIMIT 1"
            ))?
            .query_row([id], |row| Ok(brief_from_row(row)))
            .optional()?
            .transpose()?;
        facts.failures_since_success = match &last {
            Some((success, _)) => conn
                .prepare_cached(concat!(
                    "SELECT COUNT(*) FROM runs WHERE loop_id = ?1 AND created_at >= ?2 \
                     AND (created_at, scheduled_for, attempt) > (?2, ?3, ?4) AND status IN ",
                    failure_statuses!()
                ))?
                .query_row(
                    params![
                        id,
                        ms(&success.created_at),
                        ms(&success.scheduled_for),
                        success.attempt
                    ],
                    |r| r.get::<_, i64>(0),
                )?,
            // Through the partial index of failed attempts.
            None => conn
                .prepare_cached(concat!(
                    "SELECT COUNT(*) FROM runs WHERE loop_id = ?1 AND status IN ",
                    failure_statuses!()
                ))?
                .query_row([id], |r| r.get::<_, i64>(0))?,
        }
        .try_into()
        .unwrap_or(0);
        facts.last_success = last.map(|(r, _)| r);
    }

    // One statement for the rest: the oldest slot (one index probe), the window's
    // skipped rows (the partial index of skipped rows) and, for a grid, its distinct
    // slots counted from the slot index alone (no row leaves SQLite).
    let (from, to) = (ms(&q.window.0), ms(&q.window.1));
    let (slots_from, slots_to) = (ms(&q.slot_window.0), ms(&q.slot_window.1));
    let (anchor, every) = match q.grid {
        Some((anchor, every)) => (Some(ms(&anchor)), Some(sat_i64(every).max(1))),
        None => (None, None),
    };
    let (oldest, skipped, on_grid): (Option<i64>, i64, Option<i64>) = stmts.window.query_row(
        params![id, from, to, slots_from, slots_to, anchor, every],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    facts.oldest_slot = oldest
        .map(|v| instant_from_ms(v, "scheduled_for"))
        .transpose()?;
    facts.window_skipped = skipped.try_into().unwrap_or(0);
    facts.window_slots = match on_grid {
        Some(count) => SlotRows::OnGrid(count.try_into().unwrap_or(0)),
        None => {
            let mut listed = Vec::new();
            let mut query = stmts.listed.query(params![id, slots_from, slots_to])?;
            while let Some(row) = query.next()? {
                listed.push(instant_from_ms(row.get(0)?, "scheduled_for")?);
            }
            SlotRows::Listed(listed)
        }
    };
    Ok(facts)
}

/// The newest `recent` rows of every loop of the JSON array `?1`, in one statement:
/// per loop, the newest rowids from the `runs_loop_recent` index (a correlated
/// subquery, re-run per loop), each row then read by rowid. `?1`'s element index comes
/// back with each row. The limit is part of the text (see [`recent_sql`]).
fn strips_sql(recent: usize) -> String {
    format!(
        "SELECT j.key, r.id, r.scheduled_for, r.attempt, r.status, r.created_at, \
                r.started_at, r.finished_at, r.exit_code \
         FROM json_each(?1) AS j CROSS JOIN runs AS r \
         WHERE r.rowid IN (SELECT rowid FROM runs WHERE loop_id = j.value {NEWEST_FIRST} \
                           LIMIT {recent})"
    )
}

pub(crate) fn recent_runs(
    store: &SqliteStore,
    loops: &[LoopId],
    recent: usize,
) -> StoreResult<Vec<Vec<loops_store::RunSummary>>> {
    let mut out: Vec<Vec<loops_store::RunSummary>> = vec![Vec::new(); loops.len()];
    if loops.is_empty() || recent == 0 {
        return Ok(out);
    }
    let ids = serde_json::to_string(&loops.iter().map(LoopId::as_str).collect::<Vec<_>>())
        .map_err(|e| Error::decode(format!("cannot encode loop ids: {e}")))?;
    store.read(|conn| {
        let mut stmt = conn.prepare_cached(&strips_sql(recent))?;
        let mut rows = stmt.query([&ids])?;
        while let Some(row) = rows.next()? {
            let index = usize::try_from(int(row, 0, "key")?)
                .map_err(|_| Error::decode("json_each key out of range".to_owned()))?;
            let opt_instant = |idx: usize, col: &str| {
                opt_int(row, idx, col)?
                    .map(|v| instant_from_ms(v, col))
                    .transpose()
            };
            let attempt = int(row, 3, "attempt")?;
            let summary = loops_store::RunSummary {
                id: loops_core::RunId::new(get::<String>(row, 1, "id")?),
                scheduled_for: instant_from_ms(int(row, 2, "scheduled_for")?, "scheduled_for")?,
                attempt: u32::try_from(attempt).map_err(|_| {
                    Error::decode(format!("column attempt: {attempt} out of range"))
                })?,
                status: status(row, 4)?,
                created_at: instant_from_ms(int(row, 5, "created_at")?, "created_at")?,
                started_at: opt_instant(6, "started_at")?,
                finished_at: opt_instant(7, "finished_at")?,
                exit_code: opt_int(row, 8, "exit_code")?
                    .map(|v| {
                        i32::try_from(v).map_err(|_| {
                            Error::decode(format!("column exit_code: {v} out of range"))
                        })
                    })
                    .transpose()?,
            };
            if let Some(strip) = out.get_mut(index) {
                strip.push(summary);
            }
        }
        for strip in &mut out {
            strip.sort_by(|a, b| {
                (b.created_at, b.scheduled_for, b.attempt).cmp(&(
                    a.created_at,
                    a.scheduled_for,
                    a.attempt,
                ))
            });
        }
        Ok(std::mem::take(&mut out))
    })
}

/// One hour in milliseconds: the bucket of the `run_counts` table (migration 21).
const HOUR_MS: i64 = 3_600_000;

/// Runs created at or after `?1`, counted by status: the hours wholly in the window
/// (from hour `?3` on) from the per-hour `run_counts`, kept by triggers on `runs`, so
/// a day of counts reads ~24 rows per status whatever the day's runs; the part of an
/// hour before them (`?1` up to `?2`, that hour's end) from `runs_status_created`.
/// Every status named (`IN`), so that part is one range of the index per status:
/// without it SQLite scans the whole index, every run ever kept (BENCHMARKS.md §25).
fn status_counts_sql() -> String {
    let statuses: Vec<String> = RunStatus::ALL
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    let statuses = statuses.join(", ");
    format!(
        "SELECT status, SUM(n) FROM ( \
           SELECT status, COUNT(*) AS n FROM runs WHERE status IN ({statuses}) \
             AND created_at >= ?1 AND created_at < ?2 GROUP BY status \
           UNION ALL \
           SELECT status, n FROM run_counts WHERE hour >= ?3 AND status IN ({statuses})) \
         GROUP BY status ORDER BY status"
    )
}

/// The parameters of [`status_counts_sql`] for a window from `since` (ms): `since`, the
/// end of its partial hour (`since` itself on an hour's first millisecond) and that
/// hour's number, rounded as the migration's triggers round (down, also before 1970).
fn status_counts_params(since: i64) -> [i64; 3] {
    let hour = since.div_euclid(HOUR_MS) + i64::from(since.rem_euclid(HOUR_MS) != 0);
    [since, hour.saturating_mul(HOUR_MS), hour]
}

pub(crate) fn run_status_counts(
    store: &SqliteStore,
    since: Instant,
) -> StoreResult<Vec<(RunStatus, u64)>> {
    store.read(|conn| {
        let mut stmt = conn.prepare_cached(&status_counts_sql())?;
        let mut rows = stmt.query(status_counts_params(ms(&since)))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let n = u64::try_from(int(row, 1, "count")?).unwrap_or(0);
            out.push((status(row, 0)?, n));
        }
        Ok(out)
    })
}

pub(crate) fn usage_since(store: &SqliteStore, since: Instant) -> StoreResult<Vec<UsageRow>> {
    store.read(|conn| {
        let mut out = Vec::new();
        let mut stmt = conn.prepare_cached(USAGE_RUNS_SQL)?;
        let mut rows = stmt.query([ms(&since)])?;
        while let Some(row) = rows.next()? {
            out.extend(usage_run_row(&Cols(row))?);
        }
        let mut stmt = conn.prepare_cached(USAGE_STEPS_SQL)?;
        let mut rows = stmt.query([ms(&since)])?;
        while let Some(row) = rows.next()? {
            out.extend(usage_step_row(&Cols(row))?);
        }
        out.sort_by_key(|r| r.finished_at);
        Ok(out)
    })
}
