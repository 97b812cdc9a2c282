//! One import in one transaction: new workflow specs, new loops with their schedule
//! state, and their history rows. The loops and specs are inserted by the same code
//! as `create_loop` and `create_workflow`, so an imported row is what creating it
//! would have stored.

use crate::codec::{encode_usage, insert_with_new_id, ms, opt_ms, sat_i64};
use crate::error::{Result, StoreResult};
use crate::SqliteStore;
use loops_core::{Instant, Loop, Run, RunStatus};
use loops_store::{ImportBatch, Imported, StoreError};
use rusqlite::{params, Connection};

pub(crate) fn import(
    store: &SqliteStore,
    batch: &ImportBatch,
    now: Instant,
) -> StoreResult<Imported> {
    store.write(None, |tx| {
        let mut workflows = Vec::with_capacity(batch.workflows.len());
        for spec in &batch.workflows {
            workflows.push(crate::workflows::insert_workflow(tx, spec, false, now)?);
        }
        let mut loops = Vec::with_capacity(batch.loops.len());
        let mut runs = 0;
        for item in &batch.loops {
            let created = crate::loops::insert_loop(tx, &item.new, now)?;
            crate::loops::apply_advance(tx, &created.id, &item.state, now)?;
            for run in &item.history {
                insert_history_run(tx, &created, run)?;
                runs += 1;
            }
            let stored = item.stored(created);
            // An imported loop appears in the event log as created (its history does
            // not: it happened elsewhere).
            crate::events::append(
                tx,
                &loops_core::event::EventBody::loop_created(&stored),
                now,
            )?;
            loops.push(stored);
        }
        Ok(Imported {
            workflows,
            loops,
            runs,
        })
    })
}

/// Inserts a finished run of `lp` as history: a new id, the loop's id and name, no
/// process or lease left on it, everything else as given.
fn insert_history_run(tx: &Connection, lp: &Loop, run: &Run) -> Result<()> {
    if run.status == RunStatus::Running {
        return Err(StoreError::running_history(&lp.name).into());
    }
    let usage = encode_usage(run.usage.as_ref())?;
    insert_with_new_id(
        tx,
        "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, source, \
         started_at, finished_at, exit_code, duration_ms, stdout, stderr, error, claimed_by, \
         summary, usage_json, created_at, updated_at, due_at, error_output, failure_class, \
         retry_at, session_id, session_note, account) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, \
         ?22, ?23, ?24, ?25, ?26) \
         RETURNING id",
        params![
            lp.id.as_str(),
            lp.name,
            ms(&run.scheduled_for),
            run.attempt,
            run.status.as_str(),
            run.source.as_str(),
            opt_ms(run.started_at.as_ref()),
            opt_ms(run.finished_at.as_ref()),
            run.exit_code,
            run.duration_ms.map(sat_i64),
            run.stdout,
            run.stderr,
            run.error,
            run.claimed_by,
            run.summary,
            usage,
            ms(&run.created_at),
            ms(&run.updated_at),
            opt_ms(run.due_at.as_ref()),
            run.error_output,
            run.failure_class.map(|c| c.as_str()),
            opt_ms(run.retry_at.as_ref()),
            run.session_id,
            run.session_note,
            run.account,
        ],
        "run",
        |_| Ok(()),
        // A second row for the same slot attempt is the input's mistake; an id
        // collision draws another id.
        |e| {
            (crate::codec::is_unique_violation(e) && e.to_string().contains("runs.scheduled_for"))
                .then(|| StoreError::duplicate_history_slot(&lp.name, run).into())
        },
    )
}
