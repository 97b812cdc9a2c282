//! `loops store copy --to postgres://…`: everything another store holds — loops,
//! workflow specs, runs, workflow runs with their steps and logs, notification
//! deliveries, the event log, the store-wide notification default — written into this
//! database as it was (same ids, same instants, same event numbers), in one
//! transaction: the copy is there completely or not at all.

use crate::codec::{encode_usage, ms, opt_ms, opt_text, sat_i64, text};
use crate::error::{Error, Result};
use crate::events::EventRows;
use crate::session::{Conn, Db};
use loops_core::{Loop, Run};
pub use loops_store::CopySet;
use loops_store::DefinitionJson;
use loops_store::StoreError;

/// Whether the database holds anything a copy would write over: loops, specs, runs,
/// workflow runs or events.
pub(crate) async fn holds_data(db: &Db<'_, impl Conn>) -> Result<bool> {
    let row = db
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM loops) OR EXISTS (SELECT 1 FROM workflows) \
             OR EXISTS (SELECT 1 FROM runs) OR EXISTS (SELECT 1 FROM workflow_runs) \
             OR EXISTS (SELECT 1 FROM events)",
            &[],
        )
        .await?;
    crate::codec::get(&row, 0, "exists")
}

/// Writes `set` inside the caller's transaction; with `force`, what the database held
/// goes first (refused while a runner is live: it would be running on rows that
/// vanish).
pub(crate) async fn copy_in(db: &Db<'_, impl Conn>, set: &CopySet, force: bool) -> Result<()> {
    // One copy at a time, and no runner registering meanwhile.
    db.execute("LOCK TABLE loops, runners IN EXCLUSIVE MODE", &[])
        .await?;
    if holds_data(db).await? {
        if !force {
            return Err(StoreError::InvalidArgument(
                "the target store is not empty (loops, specs, runs or events): \
                 copy into an empty database, or pass --force to replace what it holds"
                    .to_owned(),
            )
            .into());
        }
        let live = db
            .query_one(
                concat!(
                    "SELECT COUNT(*) FROM runners WHERE released_at IS NULL AND expires_at > ",
                    crate::codec::db_now_ms!()
                ),
                &[],
            )
            .await?;
        let live: i64 = crate::codec::get(&live, 0, "count")?;
        if live > 0 {
            return Err(StoreError::InvalidArgument(format!(
                "the target store has {live} live runner(s): stop them before replacing \
                 what it holds"
            ))
            .into());
        }
        db.batch(
            "TRUNCATE events, notification_deliveries, workflow_events, workflow_step_runs, \
             workflow_runs, workflows, loop_labels, runs, loops",
        )
        .await?;
        db.execute("DELETE FROM meta WHERE key = 'events_pruned_through'", &[])
            .await?;
    }
    for lp in &set.loops {
        insert_loop(db, lp).await?;
    }
    insert_runs(db, &set.runs).await?;
    for wf in &set.workflows {
        let spec = serde_json::to_string(&wf.spec)
            .map_err(|e| Error::decode(format!("spec of {}: {e}", wf.name)))?;
        db.execute(
            "INSERT INTO workflows (id, name, version, status, spec_json, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &wf.id.as_str(),
                &wf.name,
                &i64::from(wf.version),
                &wf.status.as_str(),
                &text(&spec).as_ref(),
                &ms(&wf.created_at),
                &ms(&wf.updated_at),
            ],
        )
        .await?;
    }
    for r in &set.workflow_runs {
        db.execute(
            "INSERT INTO workflow_runs (id, workflow_id, workflow_name, loop_id, loop_run_id, \
             scheduled_for, idempotency_key, status, attempt, started_at, finished_at, \
             duration_ms, error, cancel_requested, created_at, updated_at, params_json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
            &[
                &r.id.as_str(),
                &r.workflow_id.as_str(),
                &r.workflow_name,
                &r.loop_id.as_ref().map(|l| l.as_str()),
                &r.loop_run_id.as_ref().map(|l| l.as_str()),
                &opt_ms(r.scheduled_for.as_ref()),
                &r.idempotency_key,
                &r.status.as_str(),
                &i64::from(r.attempt),
                &opt_ms(r.started_at.as_ref()),
                &opt_ms(r.finished_at.as_ref()),
                &r.duration_ms.map(sat_i64),
                &opt_text(r.error.as_deref()),
                &opt_text(r.cancel_requested.as_deref()),
                &ms(&r.created_at),
                &ms(&r.updated_at),
                &loops_store::codec::encode_params(&r.params)?,
            ],
        )
        .await?;
    }
    for s in &set.step_runs {
        let usage = encode_usage(s.usage.as_ref())?;
        db.execute(
            "INSERT INTO workflow_step_runs (id, workflow_run_id, step_id, sequence, status, \
             attempts, started_at, finished_at, exit_code, pid, pid_start_time, duration_ms, \
             stdout, stderr, error, account_profile, account_tool, created_at, updated_at, \
             summary, usage_json, exit_status_unknown, error_output, provider) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
             $17, $18, $19, $20, $21, $22, $23, $24)",
            &[
                &s.id.as_str(),
                &s.workflow_run_id.as_str(),
                &s.step_id.as_str(),
                &i64::from(s.sequence),
                &s.status.as_str(),
                &i64::from(s.attempts),
                &opt_ms(s.started_at.as_ref()),
                &opt_ms(s.finished_at.as_ref()),
                &s.exit_code.map(i64::from),
                &s.pid.map(i64::from),
                &s.pid_start_time.map(sat_i64),
                &s.duration_ms.map(sat_i64),
                &opt_text(s.stdout.as_deref()),
                &opt_text(s.stderr.as_deref()),
                &opt_text(s.error.as_deref()),
                &s.account_profile,
                &s.account_tool,
                &ms(&s.created_at),
                &ms(&s.updated_at),
                &opt_text(s.summary.as_deref()),
                &usage,
                &s.exit_status_unknown,
                &opt_text(s.error_output.as_deref()),
                &s.provider.map(|p| p.as_str()),
            ],
        )
        .await?;
    }
    for e in &set.workflow_events {
        let payload = serde_json::to_string(&e.payload)
            .map_err(|err| Error::decode(format!("workflow event {}: {err}", e.id)))?;
        db.execute(
            "INSERT INTO workflow_events (id, workflow_run_id, sequence, event_type, step_id, \
             payload_json, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &e.id,
                &e.workflow_run_id.as_str(),
                &sat_i64(e.sequence),
                &e.event_type.as_str(),
                &e.step_id.as_ref().map(|s| s.as_str()),
                &text(&payload).as_ref(),
                &ms(&e.created_at),
            ],
        )
        .await?;
    }
    for d in &set.deliveries {
        db.execute(
            "INSERT INTO notification_deliveries (id, run_id, loop_id, event, channel, target, \
             status, attempts, last_error, created_at, updated_at, claimed_by, claim_expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL, NULL)",
            &[
                &d.id,
                &d.run_id.as_str(),
                &d.loop_id.as_str(),
                &d.event.as_str(),
                &d.channel.as_str(),
                &d.target,
                &d.status.as_str(),
                &i64::from(d.attempts),
                &opt_text(d.last_error.as_deref()),
                &ms(&d.created_at),
                &ms(&d.updated_at),
            ],
        )
        .await?;
    }
    for chunk in set.events.chunks(1_000) {
        let mut seq = Vec::with_capacity(chunk.len());
        let mut cols = EventRows::default();
        for e in chunk {
            seq.push(sat_i64(e.seq));
            cols.push(&e.body, e.at)
                .map_err(|err| Error::decode(format!("event {}: {err}", e.seq)))?;
        }
        db.execute(
            "INSERT INTO events (seq, kind, loop_id, run_id, workflow_run_id, data_json, \
             created_at) OVERRIDING SYSTEM VALUE \
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], \
                                  $6::text[], $7::bigint[])",
            &[
                &seq,
                &cols.kind,
                &cols.loop_id,
                &cols.run_id,
                &cols.workflow_run_id,
                &cols.data,
                &cols.created_at,
            ],
        )
        .await?;
    }
    // New events are numbered after the copied ones.
    db.execute(
        "SELECT setval(pg_get_serial_sequence('events', 'seq'), \
                GREATEST((SELECT MAX(seq) FROM events), 1), \
                (SELECT MAX(seq) FROM events) IS NOT NULL)",
        &[],
    )
    .await?;
    crate::notify::set_notify_default(db, set.notify_default.as_ref()).await?;
    Ok(())
}

async fn insert_loop(db: &Db<'_, impl Conn>, lp: &Loop) -> Result<()> {
    let json = DefinitionJson::of_loop(lp)?;
    db.execute(
        concat!(
            "INSERT INTO loops (",
            crate::codec::loop_cols!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
             $17, $18, $19, $20, $21, $22, $23, $24)"
        ),
        &[
            &lp.id.as_str(),
            &lp.name,
            &lp.description,
            &lp.status.as_str(),
            &text(&json.schedule).as_ref(),
            &text(&json.target).as_ref(),
            &opt_ms(lp.next_run_at.as_ref()),
            &opt_ms(lp.retry_scheduled_for.as_ref()),
            &lp.catch_up.as_str(),
            &i64::from(lp.catch_up_limit),
            &lp.overlap.as_str(),
            &i64::from(lp.max_attempts),
            &sat_i64(lp.retry_delay_ms),
            &sat_i64(lp.lease_ms),
            &opt_ms(lp.expires_at.as_ref()),
            &ms(&lp.created_at),
            &ms(&lp.updated_at),
            &sat_i64(lp.jitter_ms),
            &opt_ms(lp.due_at.as_ref()),
            &json.labels,
            &json.notify,
            &json.runs_on,
            &json.ops,
            &crate::codec::encode_state(&lp.state)?,
        ],
    )
    .await?;
    crate::loops::set_labels(db, &lp.id, &lp.labels).await
}

/// Inserts `runs` whole, a thousand at a time (one statement each: a copy of a long history
/// must not take one round trip per row).
pub(crate) async fn insert_runs(db: &Db<'_, impl Conn>, runs: &[Run]) -> Result<()> {
    for chunk in runs.chunks(1_000) {
        let mut c = RunColumns::default();
        for run in chunk {
            c.id.push(run.id.as_str().to_owned());
            c.loop_id.push(run.loop_id.as_str().to_owned());
            c.loop_name.push(text(&run.loop_name).into_owned());
            c.scheduled_for.push(ms(&run.scheduled_for));
            c.attempt.push(i64::from(run.attempt));
            c.status.push(run.status.as_str().to_owned());
            c.source.push(run.source.as_str().to_owned());
            c.started_at.push(opt_ms(run.started_at.as_ref()));
            c.finished_at.push(opt_ms(run.finished_at.as_ref()));
            c.exit_code.push(run.exit_code.map(i64::from));
            c.duration_ms.push(run.duration_ms.map(sat_i64));
            c.stdout.push(opt_text(run.stdout.as_deref()));
            c.stderr.push(opt_text(run.stderr.as_deref()));
            c.error.push(opt_text(run.error.as_deref()));
            c.pid.push(run.pid.map(i64::from));
            c.pid_start_time.push(run.pid_start_time.map(sat_i64));
            c.claimed_by.push(opt_text(run.claimed_by.as_deref()));
            c.lease_expires_at
                .push(opt_ms(run.lease_expires_at.as_ref()));
            c.summary.push(opt_text(run.summary.as_deref()));
            c.usage.push(encode_usage(run.usage.as_ref())?);
            c.created_at.push(ms(&run.created_at));
            c.updated_at.push(ms(&run.updated_at));
            c.due_at.push(opt_ms(run.due_at.as_ref()));
            c.error_output.push(opt_text(run.error_output.as_deref()));
            c.failure_class
                .push(run.failure_class.map(|f| f.as_str().to_owned()));
            c.retry_at.push(opt_ms(run.retry_at.as_ref()));
            c.session_id.push(opt_text(run.session_id.as_deref()));
            c.session_note.push(opt_text(run.session_note.as_deref()));
            c.account.push(opt_text(run.account.as_deref()));
        }
        db.execute(
            concat!(
                "INSERT INTO runs (",
                crate::codec::run_cols!(),
                ") SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], \
                 $5::bigint[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::bigint[], \
                 $11::bigint[], $12::text[], $13::text[], $14::text[], $15::bigint[], \
                 $16::bigint[], $17::text[], $18::bigint[], $19::text[], $20::text[], \
                 $21::bigint[], $22::bigint[], $23::bigint[], $24::text[], $25::text[], $26::bigint[], \
                 $27::text[], $28::text[], $29::text[])"
            ),
            &[
                &c.id,
                &c.loop_id,
                &c.loop_name,
                &c.scheduled_for,
                &c.attempt,
                &c.status,
                &c.source,
                &c.started_at,
                &c.finished_at,
                &c.exit_code,
                &c.duration_ms,
                &c.stdout,
                &c.stderr,
                &c.error,
                &c.pid,
                &c.pid_start_time,
                &c.claimed_by,
                &c.lease_expires_at,
                &c.summary,
                &c.usage,
                &c.created_at,
                &c.updated_at,
                &c.due_at,
                &c.error_output,
                &c.failure_class,
                &c.retry_at,
                &c.session_id,
                &c.session_note,
                &c.account,
            ],
        )
        .await?;
    }
    Ok(())
}

/// The columns of a chunk of runs, as arrays.
#[derive(Default)]
struct RunColumns {
    id: Vec<String>,
    loop_id: Vec<String>,
    loop_name: Vec<String>,
    scheduled_for: Vec<i64>,
    attempt: Vec<i64>,
    status: Vec<String>,
    source: Vec<String>,
    started_at: Vec<Option<i64>>,
    finished_at: Vec<Option<i64>>,
    exit_code: Vec<Option<i64>>,
    duration_ms: Vec<Option<i64>>,
    stdout: Vec<Option<String>>,
    stderr: Vec<Option<String>>,
    error: Vec<Option<String>>,
    pid: Vec<Option<i64>>,
    pid_start_time: Vec<Option<i64>>,
    claimed_by: Vec<Option<String>>,
    lease_expires_at: Vec<Option<i64>>,
    summary: Vec<Option<String>>,
    usage: Vec<Option<String>>,
    created_at: Vec<i64>,
    updated_at: Vec<i64>,
    due_at: Vec<Option<i64>>,
    error_output: Vec<Option<String>>,
    failure_class: Vec<Option<String>>,
    retry_at: Vec<Option<i64>>,
    session_id: Vec<Option<String>>,
    session_note: Vec<Option<String>>,
    account: Vec<Option<String>>,
}
