//! Loop rows: create, look up, list, move (schedule state), remove, the due index,
//! parking and expiry.

use crate::codec::{
    by_id, decode_loop_row, loop_cols, loop_from_row, ms, new_id, opt_ms, sat_i64, text,
    with_id_prefix, Cols, ID_ATTEMPTS,
};
use crate::error::{is_unique_violation, violated_constraint, Error, Result};
use crate::session::{Conn, Db, Params};
use loops_core::event::{EventBody, EventKind};
use loops_core::{schedule, Instant, Loop, LoopId, LoopStatus, NewLoop, Run, RunStatus};
use loops_store::codec::StoredRow;
use loops_store::{
    DefinitionJson, LoopAdvance, LoopFilter, LoopOrder, LoopUpdate, LoopVersion, SlotMove,
    StoreError, UnreadableLoop,
};
use tokio_postgres::types::ToSql;

pub(crate) async fn create_loop(
    db: &Db<'_, impl Conn>,
    new: &NewLoop,
    now: Instant,
) -> Result<Loop> {
    let json = DefinitionJson::of_new(new)?;
    let p = &new.policy;
    for _ in 0..ID_ATTEMPTS {
        let id = new_id();
        let due_at = schedule::due_at(&LoopId::new(&id), new.next_run_at, None, p.jitter_ms);
        // A savepoint, so a collision (name or id) leaves the transaction usable.
        db.batch("SAVEPOINT create_loop").await?;
        let inserted = db
            .query_one(
                concat!(
                    "INSERT INTO loops (",
                    loop_cols!(),
                    ") VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9, $10, $11, $12, $13, $14, \
                     $15, $15, $16, $17, $18, $19, $20, $21, NULL) RETURNING ",
                    loop_cols!()
                ),
                &[
                    &id,
                    &new.name,
                    &new.description,
                    &LoopStatus::Active.as_str(),
                    &json.schedule,
                    &json.target,
                    &opt_ms(new.next_run_at.as_ref()),
                    &p.catch_up.as_str(),
                    &i64::from(p.catch_up_limit),
                    &p.overlap.as_str(),
                    &i64::from(p.max_attempts),
                    &sat_i64(p.retry_delay_ms),
                    &sat_i64(p.lease_ms),
                    &opt_ms(p.expires_at.as_ref()),
                    &ms(&now),
                    &sat_i64(p.jitter_ms),
                    &opt_ms(due_at.as_ref()),
                    &json.labels,
                    &json.notify,
                    &json.runs_on,
                    &json.ops,
                ],
            )
            .await;
        match inserted {
            Ok(row) => {
                db.batch("RELEASE SAVEPOINT create_loop").await?;
                let created = loop_from_row(&row)?;
                set_labels(db, &created.id, &created.labels).await?;
                return Ok(created);
            }
            Err(e) if is_unique_violation(&e) => {
                db.batch("ROLLBACK TO SAVEPOINT create_loop").await?;
                if violated_constraint(&e).as_deref() == Some("loops_name_key") {
                    return Err(StoreError::DuplicateName(new.name.clone()).into());
                }
                // An id collision: draw another.
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::ids_exhausted("loop"))
}

pub(crate) async fn get_loop_by_name(db: &Db<'_, impl Conn>, name: &str) -> Result<Option<Loop>> {
    db.query_opt_as(
        concat!("SELECT ", loop_cols!(), " FROM loops WHERE name = $1"),
        &[&name],
        loop_from_row,
    )
    .await
}

pub(crate) async fn loops_with_id_prefix(
    db: &Db<'_, impl Conn>,
    prefix: &str,
    limit: usize,
) -> Result<Vec<Loop>> {
    with_id_prefix(
        db,
        concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3"
        ),
        prefix,
        limit,
        loop_from_row,
        |l| l.id.as_str(),
    )
    .await
}

pub(crate) async fn loop_rows(
    db: &Db<'_, impl Conn>,
    status: Option<LoopStatus>,
) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                loop_cols!(),
                " FROM loops WHERE $1::text IS NULL OR status = $1 ORDER BY name"
            ),
            &[&status.map(LoopStatus::as_str)],
        )
        .await?;
    Ok(rows.iter().map(decode_loop_row).collect())
}

pub(crate) async fn update_loop_schedule(
    db: &Db<'_, impl Conn>,
    id: &LoopId,
    advance: &LoopAdvance,
    now: Instant,
) -> Result<Loop> {
    // A loop made active again starts a fresh engine state (failure streak, status
    // reason): `resume` after the circuit breaker parked it.
    db.execute(
        "UPDATE loops SET ops_state_json = NULL \
         WHERE id = $1 AND status != 'active' AND $2 = 'active'",
        &[&id.as_str(), &advance.status.as_str()],
    )
    .await?;
    if !apply_advance(db, id, advance, now).await? {
        return Err(StoreError::LoopNotFound(id.to_string()).into());
    }
    by_id::<Loop>(db, id.as_str())
        .await?
        .ok_or_else(|| StoreError::LoopNotFound(id.to_string()).into())
}

/// [`Store::move_slots_back`](loops_store::Store::move_slots_back): the loops locked in
/// id order (as every batch locks loops, so two batches never wait on each other in a
/// cycle), then moved by one statement, each guarded by what was read.
pub(crate) async fn move_slots_back(
    db: &Db<'_, impl Conn>,
    moves: &[SlotMove],
    now: Instant,
) -> Result<Vec<Loop>> {
    let n = moves.len();
    let (mut ids, mut was, mut retry) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut jitter, mut to, mut due) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for m in moves {
        ids.push(m.read.id.as_str());
        was.push(opt_ms(m.read.next_run_at.as_ref()));
        retry.push(opt_ms(m.read.retry_scheduled_for.as_ref()));
        jitter.push(sat_i64(m.read.jitter_ms));
        to.push(ms(&m.to));
        due.push(opt_ms(m.due_at().as_ref()));
    }
    db.execute(
        "SELECT 1 FROM loops WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        &[&ids],
    )
    .await?;
    let rows = db
        .query(
            concat!(
                "UPDATE loops SET next_run_at = m.next_at, due_at = m.due, updated_at = $7 \
                 FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], \
                   $6::bigint[]) AS m(move_id, was, retry, jitter, next_at, due) \
                 WHERE id = m.move_id AND status = 'active' AND next_run_at = m.was \
                   AND retry_scheduled_for IS NOT DISTINCT FROM m.retry AND jitter_ms = m.jitter \
                 RETURNING ",
                loop_cols!()
            ),
            &[&ids, &was, &retry, &jitter, &to, &due, &ms(&now)],
        )
        .await?;
    rows.iter().map(loop_from_row).collect()
}

/// Sets a loop's schedule state inside the caller's transaction (its `due_at` computed
/// here, from its jitter, as [`schedule::due_at`] does); false when the loop does not
/// exist.
pub(crate) async fn apply_advance(
    db: &Db<'_, impl Conn>,
    id: &LoopId,
    advance: &LoopAdvance,
    now: Instant,
) -> Result<bool> {
    let jitter = db
        .query_opt(
            "SELECT jitter_ms FROM loops WHERE id = $1 FOR UPDATE",
            &[&id.as_str()],
        )
        .await?;
    let Some(jitter) = jitter else {
        return Ok(false);
    };
    let jitter: i64 = crate::codec::get(&jitter, 0, "jitter_ms")?;
    apply_advance_known(db, id, u64::try_from(jitter).unwrap_or(0), advance, now).await
}

/// [`apply_advance`] when the loop row is already locked and its jitter known.
pub(crate) async fn apply_advance_known(
    db: &Db<'_, impl Conn>,
    id: &LoopId,
    jitter_ms: u64,
    advance: &LoopAdvance,
    now: Instant,
) -> Result<bool> {
    let due_at = schedule::due_at(
        id,
        advance.next_run_at,
        advance.retry_scheduled_for,
        jitter_ms,
    );
    let n = db
        .execute(
            "UPDATE loops SET status = $2, next_run_at = $3, retry_scheduled_for = $4, \
             due_at = $5, updated_at = $6 WHERE id = $1",
            &[
                &id.as_str(),
                &advance.status.as_str(),
                &opt_ms(advance.next_run_at.as_ref()),
                &opt_ms(advance.retry_scheduled_for.as_ref()),
                &opt_ms(due_at.as_ref()),
                &ms(&now),
            ],
        )
        .await?;
    Ok(n > 0)
}

/// Sets a loop's engine state (failure streak, status reason) inside the caller's
/// transaction.
pub(crate) async fn set_state(
    db: &Db<'_, impl Conn>,
    id: &LoopId,
    state: &loops_core::LoopState,
) -> Result<()> {
    let text = crate::codec::encode_state(state)?;
    db.execute(
        "UPDATE loops SET ops_state_json = $2 WHERE id = $1",
        &[&id.as_str(), &text],
    )
    .await?;
    Ok(())
}

/// Replaces a loop's labels in the filter index (its `labels_json` is written by the
/// caller, in the same transaction).
pub(crate) async fn set_labels(
    db: &Db<'_, impl Conn>,
    id: &LoopId,
    labels: &[String],
) -> Result<()> {
    db.execute(
        "DELETE FROM loop_labels WHERE loop_id = $1",
        &[&id.as_str()],
    )
    .await?;
    if !labels.is_empty() {
        db.execute(
            "INSERT INTO loop_labels (label, loop_id) SELECT unnest($1::text[]), $2",
            &[&labels, &id.as_str()],
        )
        .await?;
    }
    Ok(())
}

/// Deletes a loop with its history, deliveries and events, and logs its removal; false
/// when it does not exist.
pub(crate) async fn remove_loop(db: &Db<'_, impl Conn>, loop_id: &LoopId) -> Result<bool> {
    let id = loop_id.as_str();
    db.execute(
        "DELETE FROM notification_deliveries WHERE loop_id = $1",
        &[&id],
    )
    .await?;
    db.execute("DELETE FROM loop_labels WHERE loop_id = $1", &[&id])
        .await?;
    db.execute("DELETE FROM runs WHERE loop_id = $1", &[&id])
        .await?;
    // Its own budget's hold holds nothing any more.
    db.execute("DELETE FROM budget_holds WHERE loop_id = $1", &[&id])
        .await?;
    let name = db
        .query_opt("DELETE FROM loops WHERE id = $1 RETURNING name", &[&id])
        .await?;
    let Some(name) = name else {
        return Ok(false);
    };
    let name: String = crate::codec::get(&name, 0, "name")?;
    // The events about the loop and its history go with them; its removal stays.
    crate::events::delete_where(db, "loop_id = $1", &id).await?;
    crate::events::append_all(
        db,
        &[EventBody::loop_removed(loop_id, &name)],
        chrono::Utc::now(),
    )
    .await?;
    Ok(true)
}

/// The condition a runner advertising `$N` (its labels as a JSON array) adds to a due
/// read: only loops whose `runsOn` it has.
macro_rules! runs_on {
    ($n:literal) => {
        concat!(
            " AND (runs_on_json = '[]' OR runs_on_json::jsonb <@ ($",
            $n,
            "::text)::jsonb)"
        )
    };
}

/// The due read: active loops due by `$1`, not held, earliest first, at most `$2`;
/// `$filter` narrows it.
macro_rules! due_sql {
    ($filter:expr) => {
        concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE status = 'active' AND due_at <= $1",
            $filter,
            " AND ",
            loops_store::not_held_at!(crate::holds, "$1"),
            " ORDER BY due_at LIMIT $2"
        )
    };
}

/// A runner's labels as the JSON array [`runs_on!`] compares with.
fn labels_json(labels: &[String]) -> Result<String> {
    serde_json::to_string(labels).map_err(|e| Error::invalid(e.to_string()))
}

/// The loops due by `now`, at most `limit`; with `labels`, only those a runner
/// advertising them can take.
pub(crate) async fn due_loops(
    db: &Db<'_, impl Conn>,
    now: Instant,
    limit: usize,
    labels: Option<&[String]>,
) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>> {
    let (now, limit) = (ms(&now), sat_i64(limit as u64));
    let rows = match labels {
        None => db.query(due_sql!(""), &[&now, &limit]).await?,
        Some(labels) => {
            let labels = labels_json(labels)?;
            db.query(due_sql!(runs_on!("3")), &[&now, &limit, &labels])
                .await?
        }
    };
    Ok(rows.iter().map(decode_loop_row).collect())
}

/// [`due_loops`] for a runner advertising `labels` unless a loop is past its expiry
/// (`None`): both statements go to the server together, one round trip for a
/// scheduling pass's reads.
pub(crate) async fn due_loops_unless_expiring(
    db: &Db<'_, impl Conn>,
    now: Instant,
    limit: usize,
    labels: &[String],
) -> Result<Option<Vec<std::result::Result<Loop, UnreadableLoop>>>> {
    let (expiring, due) = crate::session::together(
        any_expired(db, now),
        due_loops(db, now, limit, Some(labels)),
    )
    .await;
    if expiring? {
        return Ok(None);
    }
    due.map(Some)
}

/// The earliest instant an active loop becomes due ([`loops_store::waits_until`]); without holds
/// (the common case) one index probe. With `labels`, among the loops a runner advertising
/// them can take (the filter of [`due_loops`]).
pub(crate) async fn next_due_at(
    db: &Db<'_, impl Conn>,
    labels: Option<&[String]>,
) -> Result<Option<Instant>> {
    macro_rules! plain {
        ($filter:expr) => {
            concat!(
                "SELECT due_at FROM loops WHERE status = 'active' AND due_at IS NOT NULL",
                $filter,
                " ORDER BY due_at LIMIT 1"
            )
        };
    }
    macro_rules! held {
        ($filter:expr) => {
            concat!(
                "SELECT MIN(",
                loops_store::waits_until!(crate::holds, "GREATEST"),
                ") FROM loops WHERE status = 'active' AND due_at IS NOT NULL",
                $filter
            )
        };
    }
    match labels {
        None => earliest_due(db, plain!(""), held!(""), &[]).await,
        Some(labels) => {
            let labels = labels_json(labels)?;
            let (plain, held) = (plain!(runs_on!("1")), held!(runs_on!("1")));
            earliest_due(db, plain, held, &[&labels]).await
        }
    }
}

/// The first instant `plain` finds (one index probe, right while no hold exists) or,
/// when a hold exists, `held`'s (each loop's wait past its holds). The hold check and
/// `plain` go to the server together, one round trip in the common case: one statement
/// asking both made PostgreSQL run the hold branch every time (BENCHMARKS §27).
async fn earliest_due(
    db: &Db<'_, impl Conn>,
    plain: &str,
    held: &str,
    params: &Params<'_>,
) -> Result<Option<Instant>> {
    let (any_hold, row) =
        crate::session::together(crate::holds::any(db), db.query_opt(plain, params)).await;
    let row = if any_hold? {
        db.query_opt(held, params).await?
    } else {
        row?
    };
    first_instant(row)
}

/// The instant of a `next_due_at` query's row (none, or NULL: nothing is due).
fn first_instant(row: Option<tokio_postgres::Row>) -> Result<Option<Instant>> {
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Cols(&row).opt_instant(0, "due_at")?)
}

pub(crate) async fn park_loop(
    db: &Db<'_, impl Conn>,
    id: &LoopId,
    reason: &str,
    now: Instant,
) -> Result<Option<Run>> {
    let found = db
        .query_opt(
            "UPDATE loops SET status = 'paused', updated_at = $2 \
             WHERE id = $1 AND status = 'active' RETURNING name, next_run_at",
            &[&id.as_str(), &ms(&now)],
        )
        .await?;
    let Some(found) = found else {
        return Ok(None);
    };
    let name: String = crate::codec::get(&found, 0, "name")?;
    let slot: Option<i64> = crate::codec::get(&found, 1, "next_run_at")?;
    let slot = slot.unwrap_or_else(|| ms(&now));
    let reason = text(reason);
    let run =
        crate::claims::insert_ended(db, id, &name, slot, RunStatus::Failed, &reason, now).await?;
    let mut bodies = Vec::with_capacity(2);
    // A row that does not decode is what parks a loop: then only the run says.
    if let Ok(Some(lp)) = by_id::<Loop>(db, id.as_str()).await {
        bodies.push(EventBody::loop_changed(&lp));
    }
    bodies.extend(crate::events::run_bodies(db, &[(EventKind::RunFinished, &run)]).await?);
    crate::events::append_all(db, &bodies, now).await?;
    Ok(Some(run))
}

/// Whether any active loop is past its expiry (a cheap read before the write).
pub(crate) async fn any_expired(db: &Db<'_, impl Conn>, now: Instant) -> Result<bool> {
    let row = db
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM loops \
             WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at <= $1)",
            &[&ms(&now)],
        )
        .await?;
    crate::codec::get(&row, 0, "exists")
}

pub(crate) async fn expire_loops(db: &Db<'_, impl Conn>, now: Instant) -> Result<Vec<Loop>> {
    let mut loops = db
        .query_as(
            concat!(
                "UPDATE loops SET status = 'expired', next_run_at = NULL, due_at = NULL, \
                 updated_at = $1 \
                 WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at <= $1 \
                 RETURNING ",
                loop_cols!()
            ),
            &[&ms(&now)],
            loop_from_row,
        )
        .await?;
    loops.sort_by(|a, b| a.name.cmp(&b.name));
    let bodies: Vec<EventBody> = loops.iter().map(EventBody::loop_changed).collect();
    crate::events::append_all(db, &bodies, now).await?;
    Ok(loops)
}

/// One guarded `UPDATE … RETURNING` of the whole definition and schedule state; then,
/// in the same transaction, the label index and (on a new name) the runs' `loop_name`.
pub(crate) async fn update_loop_definition(
    db: &Db<'_, impl Conn>,
    id: &LoopId,
    update: &LoopUpdate,
    expected: &LoopVersion,
    now: Instant,
) -> Result<Option<Loop>> {
    let def = &update.definition;
    let json = DefinitionJson::of_new(def)?;
    let p = &def.policy;
    let due_at = schedule::due_at(id, def.next_run_at, update.retry_scheduled_for, p.jitter_ms);
    db.batch("SAVEPOINT edit_loop").await?;
    let updated = db
        .query_opt(
            concat!(
                "UPDATE loops SET name = $2, description = $3, status = $4, schedule_json = $5, \
                   target_json = $6, next_run_at = $7, retry_scheduled_for = $8, catch_up = $9, \
                   catch_up_limit = $10, overlap = $11, max_attempts = $12, retry_delay_ms = $13, \
                   lease_ms = $14, expires_at = $15, jitter_ms = $16, due_at = $17, \
                   labels_json = $18, notify_json = $19, updated_at = $20, runs_on_json = $25, \
                   ops_json = $26 \
                 WHERE id = $1 AND status = $21 AND next_run_at IS NOT DISTINCT FROM $22 \
                   AND retry_scheduled_for IS NOT DISTINCT FROM $23 AND updated_at = $24 \
                 RETURNING ",
                loop_cols!()
            ),
            &[
                &id.as_str(),
                &def.name,
                &def.description,
                &update.status.as_str(),
                &json.schedule,
                &json.target,
                &opt_ms(def.next_run_at.as_ref()),
                &opt_ms(update.retry_scheduled_for.as_ref()),
                &p.catch_up.as_str(),
                &i64::from(p.catch_up_limit),
                &p.overlap.as_str(),
                &i64::from(p.max_attempts),
                &sat_i64(p.retry_delay_ms),
                &sat_i64(p.lease_ms),
                &opt_ms(p.expires_at.as_ref()),
                &sat_i64(p.jitter_ms),
                &opt_ms(due_at.as_ref()),
                &json.labels,
                &json.notify,
                &ms(&now),
                &expected.status.as_str(),
                &opt_ms(expected.next_run_at.as_ref()),
                &opt_ms(expected.retry_scheduled_for.as_ref()),
                &ms(&expected.updated_at),
                &json.runs_on,
                &json.ops,
            ],
        )
        .await;
    let updated = match updated {
        Ok(updated) => {
            db.batch("RELEASE SAVEPOINT edit_loop").await?;
            updated
        }
        Err(e) if is_unique_violation(&e) => {
            db.batch("ROLLBACK TO SAVEPOINT edit_loop").await?;
            return Err(StoreError::DuplicateName(def.name.clone()).into());
        }
        Err(e) => return Err(e),
    };
    let Some(updated) = updated else {
        let exists = db
            .query_opt("SELECT 1 FROM loops WHERE id = $1", &[&id.as_str()])
            .await?;
        return match exists {
            Some(_) => Ok(None),
            None => Err(StoreError::LoopNotFound(id.to_string()).into()),
        };
    };
    let updated = loop_from_row(&updated)?;
    set_labels(db, id, &updated.labels).await?;
    crate::budgets::after_edit(db, &updated, now).await?;
    db.execute(
        "UPDATE runs SET loop_name = $2 WHERE loop_id = $1 AND loop_name != $2",
        &[&id.as_str(), &updated.name],
    )
    .await?;
    crate::events::append_all(db, &[EventBody::loop_changed(&updated)], now).await?;
    Ok(Some(updated))
}

/// The statement of [`loop_rows_matching`] and its parameters. With labels, the loops
/// carrying all of them are found in `loop_labels` first (its primary key is
/// `(label, loop_id)`) and only those rows are read.
/// Boxed statement parameters, in placeholder order.
type BoxedParams = Vec<Box<dyn ToSql + Sync + Send>>;

pub(crate) fn loops_query(filter: &LoopFilter) -> (String, BoxedParams) {
    let (from, mut params) = loops_from(filter);
    let mut sql = format!(concat!("SELECT ", loop_cols!(), "{}"), from);
    sql.push_str(match filter.order {
        LoopOrder::Name => " ORDER BY name",
        LoopOrder::Id => " ORDER BY id",
        // LEAST() passes over a NULL.
        LoopOrder::NextSlot => " ORDER BY LEAST(retry_scheduled_for, next_run_at), name",
    });
    if let Some(limit) = filter.limit {
        params.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ${}", params.len()));
    }
    if filter.offset > 0 {
        params.push(Box::new(i64::try_from(filter.offset).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" OFFSET ${}", params.len()));
    }
    (sql, params)
}

/// The `FROM … WHERE …` of the loops `filter` matches (its paging aside), and its
/// parameters: shared by the listing and the count.
fn loops_from(filter: &LoopFilter) -> (String, BoxedParams) {
    let mut labels = filter.labels.clone();
    labels.sort();
    labels.dedup();
    let mut params: BoxedParams = Vec::new();
    let mut conditions = Vec::new();
    if !labels.is_empty() {
        let n = labels.len() as i64;
        params.push(Box::new(labels));
        params.push(Box::new(n));
        conditions.push(
            "id IN (SELECT loop_id FROM loop_labels \
               WHERE label = ANY($1::text[]) GROUP BY loop_id HAVING COUNT(*) = $2)"
                .to_owned(),
        );
    }
    match filter.status {
        Some(status) => {
            params.push(Box::new(status.as_str().to_owned()));
            conditions.push(format!("status = ${}", params.len()));
        }
        None if !filter.include_archived => conditions.push("status != 'archived'".to_owned()),
        None => {}
    }
    if let Some(name) = &filter.after_name {
        params.push(Box::new(name.clone()));
        conditions.push(format!("name > ${}", params.len()));
    }
    if let Some(id) = &filter.after_id {
        params.push(Box::new(id.as_str().to_owned()));
        conditions.push(format!("id > ${}", params.len()));
    }
    if filter.order == LoopOrder::NextSlot {
        conditions.push(
            "status = 'active' AND (next_run_at IS NOT NULL OR retry_scheduled_for IS NOT NULL)"
                .to_owned(),
        );
    }
    let mut sql = String::from(" FROM loops");
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    (sql, params)
}

pub(crate) async fn count_loops(db: &Db<'_, impl Conn>, filter: &LoopFilter) -> Result<usize> {
    let (from, params) = loops_from(filter);
    let refs: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let row = db
        .query_one(&format!("SELECT COUNT(*){from}"), &refs)
        .await?;
    let n: i64 = row.try_get(0)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

pub(crate) async fn loop_rows_matching(
    db: &Db<'_, impl Conn>,
    filter: &LoopFilter,
) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>> {
    let (sql, params) = loops_query(filter);
    let refs: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let rows = db.query(&sql, &refs).await?;
    Ok(rows.iter().map(decode_loop_row).collect())
}
