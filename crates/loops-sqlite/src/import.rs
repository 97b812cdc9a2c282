//! One import in one transaction: new workflow specs, new loops with their schedule
//! state, and their history rows. The loops and specs are inserted by the same code
//! as `create_loop` and `create_workflow`, so an imported row is what creating it
//! would have stored.

use crate::codec::insert_with_new_id;
use crate::copy::{insert_run, with_run_values};
use crate::error::{Result, StoreResult};
use crate::SqliteStore;
use loops_core::{Instant, Loop, Run};
use loops_store::{ImportBatch, ImportLoop, Imported, StoreError};
use rusqlite::Connection;

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

/// Inserts a finished run of `lp` as history ([`ImportLoop::history_row`]) with a new id.
fn insert_history_run(tx: &Connection, lp: &Loop, run: &Run) -> Result<()> {
    let history = ImportLoop::history_row(lp, run)?;
    with_run_values(&history, |values| {
        insert_with_new_id(
            tx,
            concat!(insert_run!(), " RETURNING id"),
            values,
            "run",
            |_| Ok(()),
            // A second row for the same slot attempt is the input's mistake; an id
            // collision draws another id.
            |e| {
                (crate::codec::is_unique_violation(e)
                    && e.to_string().contains("runs.scheduled_for"))
                .then(|| StoreError::duplicate_history_slot(&lp.name, run).into())
            },
        )
    })
}
