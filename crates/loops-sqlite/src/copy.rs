//! `loops store copy --to sqlite:PATH`: everything another store (PostgreSQL) holds —
//! loops, workflow specs, runs, workflow runs with their steps and logs, notification
//! deliveries, the event log, the store-wide notification default — written into this
//! SQLite file as it was (same ids, same instants, same event numbers), in one
//! transaction: the copy is there completely or not at all. The mirror of
//! `loops-postgres`' `copy_in`.

use crate::codec::{encode_usage, loop_cols, ms, opt_ms, sat_i64};
use crate::error::{Error, Result, StoreResult};
use crate::SqliteStore;
use loops_core::{Loop, Run, RunStatus};
use loops_store::DefinitionJson;
use loops_store::{CopySet, StoreError};
use rusqlite::{params, Connection, ToSql};

/// Whether the store holds anything a copy would write over: loops, specs, runs,
/// workflow runs or events.
fn holds_data(conn: &Connection) -> Result<bool> {
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM loops) OR EXISTS (SELECT 1 FROM workflows) \
         OR EXISTS (SELECT 1 FROM runs) OR EXISTS (SELECT 1 FROM workflow_runs) \
         OR EXISTS (SELECT 1 FROM events)",
        [],
        |r| r.get(0),
    )?)
}

impl SqliteStore {
    /// Whether the store holds loops, specs, runs, workflow runs or events.
    pub fn holds_data(&self) -> StoreResult<bool> {
        self.read(holds_data)
    }

    /// Writes `set` in one transaction, keeping every id, instant and event number.
    /// A store that holds data is refused unless `force`, which replaces what it held
    /// — refused while runs are in flight in it (a daemon would be running rows that
    /// vanish). A loop with runner labels is refused: a SQLite store has one daemon
    /// and no runners to match them.
    pub fn copy_in(&self, set: &CopySet, force: bool) -> StoreResult<()> {
        if let Some(lp) = set.loops.iter().find(|l| !l.runs_on.is_empty()) {
            return Err(StoreError::InvalidArgument(format!(
                "loop {:?} runs only on runners labelled {} (--on), and a SQLite store has no \
                 runners: clear its labels first (`loops edit {} --on ''`)",
                lp.name,
                lp.runs_on.join(","),
                lp.id
            )));
        }
        self.write(None, |tx| {
            if holds_data(tx)? {
                if !force {
                    return Err(Error::invalid(
                        "the target store is not empty (loops, specs, runs or events): copy \
                         into a new file, or pass --force to replace what it holds",
                    ));
                }
                let running: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM runs WHERE status = 'running'",
                    [],
                    |r| r.get(0),
                )?;
                if running > 0 {
                    return Err(Error::invalid(format!(
                        "the target store has {running} run(s) in flight: stop its daemon \
                         before replacing what it holds"
                    )));
                }
                tx.execute_batch(
                    "DELETE FROM events; DELETE FROM notification_deliveries; \
                     DELETE FROM workflow_events; DELETE FROM workflow_step_runs; \
                     DELETE FROM workflow_runs; DELETE FROM workflows; \
                     DELETE FROM loop_labels; DELETE FROM runs; DELETE FROM loops;",
                )?;
            }
            copy_rows(tx, set)?;
            crate::notify::write_default(tx, set.notify_default.as_ref())
        })
    }
}

/// `INSERT INTO runs` of a whole row, `run_cols!()` in order: a copied run and an
/// imported run of history are written by the one statement.
macro_rules! insert_run {
    () => {
        concat!(
            "INSERT INTO runs (",
            $crate::codec::run_cols!(),
            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
             ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29)"
        )
    };
}
pub(crate) use insert_run;

/// Calls `write` with `run`'s columns after its id, in `run_cols!()` order (the
/// parameters ?2 to ?29 of [`insert_run!`]).
pub(crate) fn with_run_values<T>(
    run: &Run,
    write: impl FnOnce(&[&dyn ToSql]) -> Result<T>,
) -> Result<T> {
    let usage = encode_usage(run.usage.as_ref())?;
    write(&[
        &run.loop_id.as_str(),
        &run.loop_name,
        &ms(&run.scheduled_for),
        &run.attempt,
        &run.status.as_str(),
        &run.source.as_str(),
        &opt_ms(run.started_at.as_ref()),
        &opt_ms(run.finished_at.as_ref()),
        &run.exit_code,
        &run.duration_ms.map(sat_i64),
        &run.stdout,
        &run.stderr,
        &run.error,
        &run.pid,
        &run.pid_start_time.map(sat_i64),
        &run.claimed_by,
        &opt_ms(run.lease_expires_at.as_ref()),
        &run.summary,
        &usage,
        &ms(&run.created_at),
        &ms(&run.updated_at),
        &opt_ms(run.due_at.as_ref()),
        &run.error_output,
        &run.failure_class.map(|f| f.as_str()),
        &opt_ms(run.retry_at.as_ref()),
        &run.session_id,
        &run.session_note,
        &run.account,
    ])
}

fn copy_rows(tx: &Connection, set: &CopySet) -> Result<()> {
    for lp in &set.loops {
        insert_loop(tx, lp)?;
    }
    let mut run = tx.prepare_cached(insert_run!())?;
    for r in &set.runs {
        if r.status == RunStatus::Running {
            return Err(Error::invalid(format!(
                "run {} is in flight; a copy takes finished runs only",
                r.id
            )));
        }
        with_run_values(r, |values| {
            let id = r.id.as_str();
            let mut row: Vec<&dyn ToSql> = Vec::with_capacity(values.len() + 1);
            row.push(&id);
            row.extend_from_slice(values);
            Ok(run.execute(row.as_slice())?)
        })?;
    }
    for wf in &set.workflows {
        let spec = serde_json::to_string(&wf.spec)
            .map_err(|e| Error::decode(format!("spec of {}: {e}", wf.name)))?;
        crate::workflows::insert_workflow_row(tx, wf, &spec)?;
    }
    for r in &set.workflow_runs {
        crate::workflows::insert_workflow_run(tx, r)?;
    }
    let mut step = tx.prepare_cached(
        "INSERT INTO workflow_step_runs (id, workflow_run_id, step_id, sequence, status, \
         attempts, started_at, finished_at, exit_code, pid, pid_start_time, duration_ms, \
         stdout, stderr, error, account_profile, account_tool, created_at, updated_at, \
         summary, usage_json, exit_status_unknown, error_output, provider) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
    )?;
    for s in &set.step_runs {
        step.execute(params![
            s.id.as_str(),
            s.workflow_run_id.as_str(),
            s.step_id.as_str(),
            s.sequence,
            s.status.as_str(),
            s.attempts,
            opt_ms(s.started_at.as_ref()),
            opt_ms(s.finished_at.as_ref()),
            s.exit_code,
            s.pid,
            s.pid_start_time.map(sat_i64),
            s.duration_ms.map(sat_i64),
            s.stdout,
            s.stderr,
            s.error,
            s.account_profile,
            s.account_tool,
            ms(&s.created_at),
            ms(&s.updated_at),
            s.summary,
            encode_usage(s.usage.as_ref())?,
            s.exit_status_unknown,
            s.error_output,
            s.provider.map(|p| p.as_str()),
        ])?;
    }
    let mut workflow_event = tx.prepare_cached(crate::workflows::INSERT_EVENT)?;
    for e in &set.workflow_events {
        let payload = serde_json::to_string(&e.payload)
            .map_err(|err| Error::decode(format!("workflow event {}: {err}", e.id)))?;
        workflow_event.execute(params![
            e.id,
            e.workflow_run_id.as_str(),
            sat_i64(e.sequence),
            e.event_type.as_str(),
            e.step_id.as_ref().map(|s| s.as_str()),
            payload,
            ms(&e.created_at),
        ])?;
    }
    let mut delivery = tx.prepare_cached(
        "INSERT INTO notification_deliveries (id, run_id, loop_id, event, channel, target, \
         status, attempts, last_error, created_at, updated_at, claimed_by, claim_expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, NULL, NULL)",
    )?;
    for d in &set.deliveries {
        delivery.execute(params![
            d.id,
            d.run_id.as_str(),
            d.loop_id.as_str(),
            d.event.as_str(),
            d.channel.as_str(),
            d.target,
            d.status.as_str(),
            d.attempts,
            d.last_error,
            ms(&d.created_at),
            ms(&d.updated_at),
        ])?;
    }
    // With their numbers: AUTOINCREMENT then numbers new events after the highest.
    let mut event = tx.prepare_cached(
        "INSERT INTO events (seq, kind, loop_id, run_id, workflow_run_id, data_json, \
         created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for e in &set.events {
        let data = serde_json::to_string(&e.body.data)
            .map_err(|err| Error::decode(format!("event {}: {err}", e.seq)))?;
        event.execute(params![
            sat_i64(e.seq),
            e.body.kind.as_str(),
            e.body.loop_id.as_ref().map(|l| l.as_str()),
            e.body.run_id.as_ref().map(|r| r.as_str()),
            e.body.workflow_run_id.as_ref().map(|r| r.as_str()),
            data,
            ms(&e.at),
        ])?;
    }
    Ok(())
}

fn insert_loop(tx: &Connection, lp: &Loop) -> Result<()> {
    let json = DefinitionJson::of_loop(lp)?;
    tx.prepare_cached(concat!(
        "INSERT INTO loops (",
        loop_cols!(),
        ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18, ?19, ?20, ?21, ?22, ?23)"
    ))?
    .execute(params![
        lp.id.as_str(),
        lp.name,
        lp.description,
        lp.status.as_str(),
        json.schedule,
        json.target,
        opt_ms(lp.next_run_at.as_ref()),
        opt_ms(lp.retry_scheduled_for.as_ref()),
        lp.catch_up.as_str(),
        lp.catch_up_limit,
        lp.overlap.as_str(),
        lp.max_attempts,
        sat_i64(lp.retry_delay_ms),
        sat_i64(lp.lease_ms),
        opt_ms(lp.expires_at.as_ref()),
        ms(&lp.created_at),
        ms(&lp.updated_at),
        sat_i64(lp.jitter_ms),
        opt_ms(lp.due_at.as_ref()),
        json.labels,
        json.notify,
        json.ops,
        crate::codec::encode_state(&lp.state)?,
    ])?;
    crate::loops::set_labels(tx, &lp.id, &lp.labels)
}
