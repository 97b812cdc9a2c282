//! Loop rows: create, look up, list, move (schedule state), remove, the due index,
//! parking and expiry.

use crate::codec::{
    decode_loop_row, instant_from_ms, loop_cols, loop_from_row, ms, new_id, opt_ms, query_all,
    query_first, sat_i64, with_id_prefix, ID_ATTEMPTS,
};
use crate::error::{Error, Result, StoreResult};
use crate::events;
use crate::SqliteStore;
use loops_core::event::{EventBody, EventKind};
use loops_core::{schedule, Instant, Loop, LoopId, LoopStatus, NewLoop, Run, RunStatus};
use loops_store::DefinitionJson;
use loops_store::{
    Fence, LoopAdvance, LoopFilter, LoopOrder, LoopUpdate, LoopVersion, SlotMove, StoreError,
    UnreadableLoop,
};
use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension};

pub(crate) fn create_loop(store: &SqliteStore, new: NewLoop, now: Instant) -> StoreResult<Loop> {
    store.write(None, |tx| {
        let created = insert_loop(tx, &new, now)?;
        events::append(tx, &EventBody::loop_created(&created), now)?;
        Ok(created)
    })
}

/// Inserts a new loop (status `active`, a fresh id) inside the caller's transaction:
/// `create_loop`, and each loop of an import.
pub(crate) fn insert_loop(tx: &Connection, new: &NewLoop, now: Instant) -> Result<Loop> {
    refuse_runner_labels(new)?;
    let json = DefinitionJson::of_new(new)?;
    let p = &new.policy;
    let mut stmt = tx.prepare_cached(concat!(
        "INSERT INTO loops (",
        loop_cols!(),
        ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?15, \
         ?16, ?17, ?18, ?19, ?20, NULL) RETURNING ",
        loop_cols!()
    ))?;
    for _ in 0..ID_ATTEMPTS {
        let id = new_id();
        let due_at = schedule::due_at(&LoopId::new(&id), new.next_run_at, None, p.jitter_ms);
        let mut rows = stmt.query(params![
            id,
            new.name,
            new.description,
            LoopStatus::Active.as_str(),
            json.schedule,
            json.target,
            opt_ms(new.next_run_at.as_ref()),
            p.catch_up.as_str(),
            p.catch_up_limit,
            p.overlap.as_str(),
            p.max_attempts,
            sat_i64(p.retry_delay_ms),
            sat_i64(p.lease_ms),
            opt_ms(p.expires_at.as_ref()),
            ms(&now),
            sat_i64(p.jitter_ms),
            opt_ms(due_at.as_ref()),
            json.labels,
            json.notify,
            json.ops,
        ])?;
        match rows.next() {
            Ok(Some(row)) => {
                let created = loop_from_row(row)?;
                drop(rows);
                set_labels(tx, &created.id, &created.labels)?;
                return Ok(created);
            }
            Ok(None) => break,
            Err(e) if crate::codec::is_unique_violation(&e) => {
                // The UNIQUE constraint is the check (no racy pre-read); the
                // message names the column that collided.
                if e.to_string().contains("loops.name") {
                    return Err(StoreError::DuplicateName(new.name.clone()).into());
                }
                // An id collision: draw another.
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::ids_exhausted("loop"))
}

/// SQLite has one daemon, no runners: a loop cannot require runner labels here.
fn refuse_runner_labels(def: &NewLoop) -> Result<()> {
    if def.policy.runs_on.is_empty() {
        return Ok(());
    }
    Err(StoreError::InvalidArgument(
        "runner labels (runsOn) need a store with runners (PostgreSQL)".to_owned(),
    )
    .into())
}

pub(crate) fn get_loop(store: &SqliteStore, id: &LoopId) -> StoreResult<Option<Loop>> {
    store.read(|conn| loop_in(conn, id))
}

/// Loop `id` as `conn` (a read, or the caller's transaction) sees it (`None`: gone):
/// the one lookup by id behind `get_loop`, a finalization and a park.
pub(crate) fn loop_in(conn: &Connection, id: &LoopId) -> Result<Option<Loop>> {
    query_first(
        conn,
        concat!("SELECT ", loop_cols!(), " FROM loops WHERE id = ?1"),
        [id.as_str()],
        loop_from_row,
    )
}

pub(crate) fn get_loop_by_name(store: &SqliteStore, name: &str) -> StoreResult<Option<Loop>> {
    store.read(|conn| {
        query_first(
            conn,
            concat!("SELECT ", loop_cols!(), " FROM loops WHERE name = ?1"),
            [name],
            loop_from_row,
        )
    })
}

pub(crate) fn loops_with_id_prefix(
    store: &SqliteStore,
    prefix: &str,
    limit: usize,
) -> StoreResult<Vec<Loop>> {
    store.read(|conn| {
        with_id_prefix(
            conn,
            concat!(
                "SELECT ",
                loop_cols!(),
                " FROM loops WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT +?3"
            ),
            prefix,
            limit,
            loop_from_row,
            |l| l.id.as_str(),
        )
    })
}

pub(crate) fn loop_rows(
    store: &SqliteStore,
    status: Option<LoopStatus>,
) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
    store.read(|conn| {
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE ?1 IS NULL OR status = ?1 ORDER BY name"
        ))?;
        let mut rows = stmt.query([status.map(LoopStatus::as_str)])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(decode_loop_row(row));
        }
        Ok(out)
    })
}

pub(crate) fn update_loop_schedule(
    store: &SqliteStore,
    id: &LoopId,
    advance: &LoopAdvance,
    now: Instant,
    fence: Option<&Fence>,
) -> StoreResult<Loop> {
    store.write(fence.map(|f| (f, now)), |tx| {
        let sql = concat!(
            "UPDATE loops SET status = ?2, next_run_at = ?3, retry_scheduled_for = ?4, \
             due_at = loops_due_at(id, ?3, ?4, jitter_ms), updated_at = ?5, \
             ops_state_json = CASE WHEN status != 'active' AND ?2 = 'active' THEN NULL \
                                   ELSE ops_state_json END \
             WHERE id = ?1 RETURNING ",
            loop_cols!()
        );
        let params = params![
            id.as_str(),
            advance.status.as_str(),
            opt_ms(advance.next_run_at.as_ref()),
            opt_ms(advance.retry_scheduled_for.as_ref()),
            ms(&now),
        ];
        let updated = query_first(tx, sql, params, loop_from_row)?
            .ok_or_else(|| Error::from(StoreError::LoopNotFound(id.to_string())))?;
        events::append(tx, &EventBody::loop_changed(&updated), now)?;
        Ok(updated)
    })
}

/// [`Store::move_slots_back`](loops_store::Store::move_slots_back): every move in one
/// transaction, each loop guarded by what was read.
pub(crate) fn move_slots_back(
    store: &SqliteStore,
    moves: &[SlotMove],
    now: Instant,
    fence: Option<&Fence>,
) -> StoreResult<Vec<Loop>> {
    if moves.is_empty() {
        return Ok(Vec::new());
    }
    store.write(fence.map(|f| (f, now)), |tx| {
        let sql = concat!(
            "UPDATE loops SET next_run_at = ?2, \
               due_at = loops_due_at(id, ?2, retry_scheduled_for, jitter_ms), updated_at = ?3 \
             WHERE id = ?1 AND status = 'active' AND next_run_at = ?4 \
               AND retry_scheduled_for IS ?5 AND jitter_ms = ?6 \
             RETURNING ",
            loop_cols!()
        );
        let mut moved = Vec::with_capacity(moves.len());
        for m in moves {
            let params = params![
                m.read.id.as_str(),
                ms(&m.to),
                ms(&now),
                opt_ms(m.read.next_run_at.as_ref()),
                opt_ms(m.read.retry_scheduled_for.as_ref()),
                sat_i64(m.read.jitter_ms),
            ];
            if let Some(lp) = query_first(tx, sql, params, loop_from_row)? {
                events::append(tx, &EventBody::loop_changed(&lp), now)?;
                moved.push(lp);
            }
        }
        Ok(moved)
    })
}

/// Sets a loop's engine state (failure streak, status reason) inside the caller's
/// transaction.
pub(crate) fn set_state(
    conn: &Connection,
    id: &LoopId,
    state: &loops_core::LoopState,
) -> Result<()> {
    let text = crate::codec::encode_state(state)?;
    conn.prepare_cached("UPDATE loops SET ops_state_json = ?2 WHERE id = ?1")?
        .execute(params![id.as_str(), text])?;
    Ok(())
}

/// Sets a loop's schedule state inside the caller's transaction; false when the loop
/// does not exist.
pub(crate) fn apply_advance(
    conn: &Connection,
    id: &LoopId,
    advance: &LoopAdvance,
    now: Instant,
) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE loops SET status = ?2, next_run_at = ?3, retry_scheduled_for = ?4, \
             due_at = loops_due_at(id, ?3, ?4, jitter_ms), updated_at = ?5 WHERE id = ?1",
        )?
        .execute(params![
            id.as_str(),
            advance.status.as_str(),
            opt_ms(advance.next_run_at.as_ref()),
            opt_ms(advance.retry_scheduled_for.as_ref()),
            ms(&now),
        ])?;
    Ok(n > 0)
}

/// SQL functions the statements of this backend use: `loops_due_at(id, next_run_at,
/// retry_scheduled_for, jitter_ms)` is [`schedule::due_at`] (milliseconds in and out),
/// so a loop's `due_at` is kept in the same statement that moves its next slot.
pub(crate) fn register_functions(conn: &Connection) -> Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "loops_due_at",
        4,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let id: String = ctx.get(0)?;
            let at = |v: Option<i64>| v.and_then(chrono::DateTime::from_timestamp_millis);
            let next = at(ctx.get(1)?);
            let retry = at(ctx.get(2)?);
            let jitter = u64::try_from(ctx.get::<i64>(3)?).unwrap_or(0);
            Ok(schedule::due_at(&LoopId::new(id), next, retry, jitter)
                .map(|t| t.timestamp_millis()))
        },
    )?;
    Ok(())
}

/// Replaces a loop's labels in the filter index (its `labels_json` is written by the
/// caller, in the same transaction).
pub(crate) fn set_labels(conn: &Connection, id: &LoopId, labels: &[String]) -> Result<()> {
    conn.prepare_cached("DELETE FROM loop_labels WHERE loop_id = ?1")?
        .execute([id.as_str()])?;
    let mut insert =
        conn.prepare_cached("INSERT INTO loop_labels (label, loop_id) VALUES (?1, ?2)")?;
    for label in labels {
        insert.execute(params![label, id.as_str()])?;
    }
    Ok(())
}

pub(crate) fn remove_loop(store: &SqliteStore, id: &LoopId) -> StoreResult<bool> {
    store.write(None, |tx| {
        // Explicit, so removal does not depend on the foreign_keys pragma.
        tx.prepare_cached("DELETE FROM notification_deliveries WHERE loop_id = ?1")?
            .execute([id.as_str()])?;
        tx.prepare_cached("DELETE FROM loop_labels WHERE loop_id = ?1")?
            .execute([id.as_str()])?;
        tx.prepare_cached("DELETE FROM runs WHERE loop_id = ?1")?
            .execute([id.as_str()])?;
        // Its own budget's hold holds nothing any more.
        tx.prepare_cached("DELETE FROM budget_holds WHERE loop_id = ?1")?
            .execute([id.as_str()])?;
        let name: Option<String> = tx
            .prepare_cached("DELETE FROM loops WHERE id = ?1 RETURNING name")?
            .query_row([id.as_str()], |r| r.get(0))
            .optional()?;
        let Some(name) = name else {
            return Ok(false);
        };
        // The events about the loop and its history go with them; its removal stays.
        tx.prepare_cached("DELETE FROM events WHERE loop_id = ?1")?
            .execute([id.as_str()])?;
        events::append(tx, &EventBody::loop_removed(id, &name), chrono::Utc::now())?;
        Ok(true)
    })
}

pub(crate) fn due_loops(
    store: &SqliteStore,
    now: Instant,
    limit: usize,
) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
    store.read(|conn| {
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE status = 'active' AND due_at <= ?1 AND ",
            loops_store::not_held_at!(crate::holds, "?1"),
            " ORDER BY due_at LIMIT +?2"
        ))?;
        let mut rows = stmt.query(params![ms(&now), sat_i64(limit as u64)])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(decode_loop_row(row));
        }
        Ok(out)
    })
}

/// The earliest instant an active loop becomes due: its `due_at`, or for a loop whose
/// account is held the hold's end when that is later (a held loop that is due must not
/// wake the daemon until then). Without holds (the common case) one index probe.
pub(crate) fn next_due_at(store: &SqliteStore) -> StoreResult<Option<Instant>> {
    store.read(|conn| {
        let sql = if crate::holds::any(conn)? {
            concat!(
                "SELECT MIN(",
                loops_store::waits_until!(crate::holds, "MAX"),
                ") FROM loops WHERE status = 'active' AND due_at IS NOT NULL"
            )
        } else {
            "SELECT due_at FROM loops WHERE status = 'active' AND due_at IS NOT NULL \
             ORDER BY due_at LIMIT 1"
        };
        let next: Option<i64> = conn
            .prepare_cached(sql)?
            .query_row([], |r| r.get::<_, Option<i64>>(0))
            .optional()?
            .flatten();
        Ok(next.map(|v| instant_from_ms(v, "due_at")).transpose()?)
    })
}

pub(crate) fn park_loop(
    store: &SqliteStore,
    id: &LoopId,
    reason: &str,
    now: Instant,
    fence: Option<&Fence>,
) -> StoreResult<Option<Run>> {
    store.write(fence.map(|f| (f, now)), |tx| {
        let found: Option<(String, Option<i64>)> = tx
            .prepare_cached(
                "UPDATE loops SET status = 'paused', updated_at = ?2 \
                 WHERE id = ?1 AND status = 'active' RETURNING name, next_run_at",
            )?
            .query_row(params![id.as_str(), ms(&now)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let Some((name, slot)) = found else {
            return Ok(None);
        };
        let slot = slot.unwrap_or_else(|| ms(&now));
        let run = crate::claims::insert_ended(tx, id, &name, slot, RunStatus::Failed, reason, now)?;
        // A row that does not decode is what parks a loop: then only the run says.
        if let Ok(Some(lp)) = loop_in(tx, id) {
            events::append(tx, &EventBody::loop_changed(&lp), now)?;
        }
        events::append_run(tx, EventKind::RunFinished, &run, now)?;
        Ok(Some(run))
    })
}

pub(crate) fn expire_loops(
    store: &SqliteStore,
    now: Instant,
    fence: Option<&Fence>,
) -> StoreResult<Vec<Loop>> {
    // Every scheduling pass asks; almost always nothing is due to expire, and a
    // read is much cheaper than an (empty) write transaction.
    let any: bool = store.read(|conn| {
        Ok(conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM loops INDEXED BY loops_expiry \
                 WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at <= ?1)",
            )?
            .query_row([ms(&now)], |r| r.get(0))?)
    })?;
    if !any {
        return Ok(Vec::new());
    }
    store.write(fence.map(|f| (f, now)), |tx| {
        let mut loops = query_all(tx, concat!(
            "UPDATE loops INDEXED BY loops_expiry SET status = 'expired', next_run_at = NULL, due_at = NULL, updated_at = ?1 \
             WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at <= ?1 \
             RETURNING ",
            loop_cols!()
        ), [ms(&now)], loop_from_row)?;
        loops.sort_by(|a, b| a.name.cmp(&b.name));
        for lp in &loops {
            events::append(tx, &EventBody::loop_changed(lp), now)?;
        }
        Ok(loops)
    })
}

// ---- loop definitions and labels (issue #11) ----

/// One guarded `UPDATE … RETURNING` of the whole definition and schedule state; then,
/// in the same transaction, the label index and (on a new name) the runs' `loop_name`.
pub(crate) fn update_loop_definition(
    store: &SqliteStore,
    id: &LoopId,
    update: &LoopUpdate,
    expected: &LoopVersion,
    now: Instant,
) -> StoreResult<Option<Loop>> {
    let def = &update.definition;
    let json = DefinitionJson::of_new(def)?;
    let p = &def.policy;
    store.write(None, |tx| {
        let sql = concat!(
            "UPDATE loops SET name = ?2, description = ?3, status = ?4, schedule_json = ?5, \
               target_json = ?6, next_run_at = ?7, retry_scheduled_for = ?8, catch_up = ?9, \
               catch_up_limit = ?10, overlap = ?11, max_attempts = ?12, retry_delay_ms = ?13, \
               lease_ms = ?14, expires_at = ?15, jitter_ms = ?16, \
               due_at = loops_due_at(id, ?7, ?8, ?16), labels_json = ?17, notify_json = ?18, \
               updated_at = ?19, ops_json = ?24 \
             WHERE id = ?1 AND status = ?20 AND next_run_at IS ?21 \
               AND retry_scheduled_for IS ?22 AND updated_at = ?23 \
             RETURNING ",
            loop_cols!()
        );
        let params = params![
            id.as_str(),
            def.name,
            def.description,
            update.status.as_str(),
            json.schedule,
            json.target,
            opt_ms(def.next_run_at.as_ref()),
            opt_ms(update.retry_scheduled_for.as_ref()),
            p.catch_up.as_str(),
            p.catch_up_limit,
            p.overlap.as_str(),
            p.max_attempts,
            sat_i64(p.retry_delay_ms),
            sat_i64(p.lease_ms),
            opt_ms(p.expires_at.as_ref()),
            sat_i64(p.jitter_ms),
            json.labels,
            json.notify,
            ms(&now),
            expected.status.as_str(),
            opt_ms(expected.next_run_at.as_ref()),
            opt_ms(expected.retry_scheduled_for.as_ref()),
            ms(&expected.updated_at),
            json.ops,
        ];
        let updated = match query_first(tx, sql, params, loop_from_row) {
            Ok(updated) => updated,
            Err(Error::Sqlite(e)) if crate::codec::is_unique_violation(&e) => {
                return Err(StoreError::DuplicateName(def.name.clone()).into())
            }
            Err(e) => return Err(e),
        };
        let Some(updated) = updated else {
            let exists = tx
                .prepare_cached("SELECT 1 FROM loops WHERE id = ?1")?
                .query_row([id.as_str()], |_| Ok(()))
                .optional()?;
            return match exists {
                Some(()) => Ok(None),
                None => Err(StoreError::LoopNotFound(id.to_string()).into()),
            };
        };
        set_labels(tx, id, &updated.labels)?;
        crate::budgets::after_edit(tx, &updated, now)?;
        events::append(tx, &EventBody::loop_changed(&updated), now)?;
        // The history belongs to the loop: its runs carry the name it has now.
        tx.prepare_cached("UPDATE runs SET loop_name = ?2 WHERE loop_id = ?1 AND loop_name != ?2")?
            .execute(params![id.as_str(), updated.name])?;
        Ok(Some(updated))
    })
}

/// The statement of [`loop_rows_matching`] and its parameters. With labels, the loops
/// carrying all of them are found in `loop_labels` first (its primary key is
/// `(label, loop_id)`) and only those rows are read: `CROSS JOIN` keeps SQLite from
/// scanning every loop in name order instead.
pub(crate) fn loops_query(filter: &LoopFilter) -> (String, Vec<Value>) {
    let (from, mut params) = loops_from(filter);
    let mut sql = format!(concat!("SELECT ", loop_cols!(), "{}"), from);
    sql.push_str(match filter.order {
        LoopOrder::Name => " ORDER BY name",
        LoopOrder::Id => " ORDER BY id",
        // min() of two values is NULL when either is: each stands in for a missing other.
        LoopOrder::NextSlot => {
            " ORDER BY min(coalesce(retry_scheduled_for, next_run_at), \
               coalesce(next_run_at, retry_scheduled_for)), name"
        }
    });
    if filter.limit.is_some() || filter.offset > 0 {
        // `+?`: a bare bound LIMIT makes SQLite re-prepare the statement (BENCHMARKS §23);
        // -1 is SQLite's "no limit".
        sql.push_str(" LIMIT +? OFFSET +?");
        params.push(Value::Integer(filter.limit.map_or(-1, sql_count)));
        params.push(Value::Integer(sql_count(filter.offset)));
    }
    (sql, params)
}

/// The `FROM … WHERE …` of the loops `filter` matches (its paging aside), and its
/// parameters: shared by the listing and the count.
fn loops_from(filter: &LoopFilter) -> (String, Vec<Value>) {
    let mut labels = filter.labels.clone();
    labels.sort();
    labels.dedup();
    let mut params = Vec::new();
    let mut sql = if labels.is_empty() {
        String::from(" FROM loops")
    } else {
        let from = format!(
            " FROM (SELECT loop_id AS labelled FROM loop_labels WHERE label IN ({}) \
               GROUP BY loop_id HAVING COUNT(*) = {}) AS m \
             CROSS JOIN loops ON loops.id = m.labelled",
            placeholders(labels.len()),
            labels.len()
        );
        params.extend(labels.into_iter().map(Value::Text));
        from
    };
    let mut conditions = Vec::new();
    match filter.status {
        Some(status) => {
            conditions.push("status = ?");
            params.push(Value::Text(status.as_str().to_owned()));
        }
        None if !filter.include_archived => conditions.push("status != 'archived'"),
        None => {}
    }
    if let Some(name) = &filter.after_name {
        conditions.push("name > ?");
        params.push(Value::Text(name.clone()));
    }
    if let Some(id) = &filter.after_id {
        conditions.push("id > ?");
        params.push(Value::Text(id.as_str().to_owned()));
    }
    if filter.order == LoopOrder::NextSlot {
        conditions.push(
            "status = 'active' AND (next_run_at IS NOT NULL OR retry_scheduled_for IS NOT NULL)",
        );
    }
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    (sql, params)
}

pub(crate) fn count_loops(store: &SqliteStore, filter: &LoopFilter) -> StoreResult<usize> {
    let (from, params) = loops_from(filter);
    let sql = format!("SELECT COUNT(*){from}");
    store.read(|conn| {
        let n: i64 = conn
            .prepare_cached(&sql)?
            .query_row(rusqlite::params_from_iter(params), |row| row.get(0))?;
        Ok(usize::try_from(n).unwrap_or(0))
    })
}

/// A count as SQLite's integer (saturating: no store holds `i64::MAX` rows).
fn sql_count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn loop_rows_matching(
    store: &SqliteStore,
    filter: &LoopFilter,
) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
    let mut out = Vec::new();
    each_loop_row(store, filter, &mut |row| {
        out.push(row);
        std::ops::ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// [`loop_rows_matching`]'s rows, decoded one at a time and handed to `each` as the
/// statement steps (one read; nothing kept).
pub(crate) fn each_loop_row(
    store: &SqliteStore,
    filter: &LoopFilter,
    each: &mut dyn FnMut(std::result::Result<Loop, UnreadableLoop>) -> std::ops::ControlFlow<()>,
) -> StoreResult<()> {
    let (sql, params) = loops_query(filter);
    store.read(|conn| {
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        while let Some(row) = rows.next()? {
            if each(decode_loop_row(row)).is_break() {
                break;
            }
        }
        Ok(())
    })
}

/// `?, ?, …` (`n` of them).
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}
