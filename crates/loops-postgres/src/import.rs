//! One import in one transaction: new workflow specs, new loops with their schedule
//! state, and their history rows. The loops and specs are inserted by the same code
//! as `create_loop` and `create_workflow`, so an imported row is what creating it
//! would have stored.

use crate::codec::{new_id, ID_ATTEMPTS};
use crate::error::{is_unique_violation, violated_constraint, Error, Result};
use crate::session::{Conn, Db};
use loops_core::event::EventBody;
use loops_core::{Instant, Loop, Run, RunId};
use loops_store::{ImportBatch, ImportLoop, Imported, StoreError};

pub(crate) async fn import(
    db: &Db<'_, impl Conn>,
    batch: &ImportBatch,
    now: Instant,
) -> Result<Imported> {
    let mut workflows = Vec::with_capacity(batch.workflows.len());
    for spec in &batch.workflows {
        workflows.push(crate::workflows::create_workflow(db, spec, false, now).await?);
    }
    let mut loops = Vec::with_capacity(batch.loops.len());
    let mut bodies = Vec::with_capacity(batch.loops.len());
    let mut runs = 0;
    for item in &batch.loops {
        let created = crate::loops::create_loop(db, &item.new, now).await?;
        crate::loops::apply_advance(db, &created.id, &item.state, now).await?;
        for run in &item.history {
            insert_history_run(db, &created, run).await?;
            runs += 1;
        }
        let stored = item.stored(created);
        // An imported loop appears in the event log as created (its history does not:
        // it happened elsewhere).
        bodies.push(EventBody::loop_created(&stored));
        loops.push(stored);
    }
    crate::events::append_all(db, &bodies, now).await?;
    Ok(Imported {
        workflows,
        loops,
        runs,
    })
}

/// Inserts a finished run of `lp` as history ([`ImportLoop::history_row`]) with a new id.
async fn insert_history_run(db: &Db<'_, impl Conn>, lp: &Loop, run: &Run) -> Result<()> {
    let mut history = ImportLoop::history_row(lp, run)?;
    for _ in 0..ID_ATTEMPTS {
        history.id = RunId::new(new_id());
        // A savepoint, so a collision leaves the transaction usable.
        db.batch("SAVEPOINT import_run").await?;
        let inserted = crate::copy::insert_runs(db, std::slice::from_ref(&history)).await;
        match inserted {
            Ok(_) => {
                db.batch("RELEASE SAVEPOINT import_run").await?;
                return Ok(());
            }
            Err(e) if is_unique_violation(&e) => {
                db.batch("ROLLBACK TO SAVEPOINT import_run").await?;
                // A second row for the same slot attempt is the input's mistake; an id
                // collision draws another id.
                if violated_constraint(&e).as_deref() == Some("runs_slot_attempt") {
                    return Err(StoreError::duplicate_history_slot(&lp.name, run).into());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::ids_exhausted("run"))
}
