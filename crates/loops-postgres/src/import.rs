//! One import in one transaction: new workflow specs, new loops with their schedule
//! state, and their history rows. The loops and specs are inserted by the same code
//! as `create_loop` and `create_workflow`, so an imported row is what creating it
//! would have stored.

use crate::codec::{encode_usage, ms, new_id, opt_ms, opt_text, sat_i64, text, ID_ATTEMPTS};
use crate::error::{is_unique_violation, violated_constraint, Error, Result};
use crate::session::{Conn, Db};
use loops_core::event::EventBody;
use loops_core::{Instant, Loop, Run, RunStatus};
use loops_store::{ImportBatch, Imported, StoreError};

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

/// Inserts a finished run of `lp` as history: a new id, the loop's id and name, no
/// process or lease left on it.
async fn insert_history_run(db: &Db<'_, impl Conn>, lp: &Loop, run: &Run) -> Result<()> {
    if run.status == RunStatus::Running {
        return Err(StoreError::running_history(&lp.name).into());
    }
    let usage = encode_usage(run.usage.as_ref())?;
    for _ in 0..ID_ATTEMPTS {
        // A savepoint, so a collision leaves the transaction usable.
        db.batch("SAVEPOINT import_run").await?;
        let inserted = db
            .execute(
                "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, \
                 source, started_at, finished_at, exit_code, duration_ms, stdout, stderr, error, \
                 claimed_by, summary, usage_json, created_at, updated_at, due_at, error_output, \
                 failure_class, retry_at, session_id, session_note, account) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                 $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)",
                &[
                    &new_id(),
                    &lp.id.as_str(),
                    &text(&lp.name).as_ref(),
                    &ms(&run.scheduled_for),
                    &i64::from(run.attempt),
                    &run.status.as_str(),
                    &run.source.as_str(),
                    &opt_ms(run.started_at.as_ref()),
                    &opt_ms(run.finished_at.as_ref()),
                    &run.exit_code.map(i64::from),
                    &run.duration_ms.map(sat_i64),
                    &opt_text(run.stdout.as_deref()),
                    &opt_text(run.stderr.as_deref()),
                    &opt_text(run.error.as_deref()),
                    &opt_text(run.claimed_by.as_deref()),
                    &opt_text(run.summary.as_deref()),
                    &usage,
                    &ms(&run.created_at),
                    &ms(&run.updated_at),
                    &opt_ms(run.due_at.as_ref()),
                    &opt_text(run.error_output.as_deref()),
                    &run.failure_class.map(|c| c.as_str()),
                    &opt_ms(run.retry_at.as_ref()),
                    &opt_text(run.session_id.as_deref()),
                    &opt_text(run.session_note.as_deref()),
                    &opt_text(run.account.as_deref()),
                ],
            )
            .await;
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
