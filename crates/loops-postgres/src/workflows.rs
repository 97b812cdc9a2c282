//! Workflow specs, runs, step runs and the event log.

use crate::codec::{
    by_id, encode_usage, get, ms, new_id, opt_ms, opt_text, sat_i64, with_id_prefix, ById, Cols,
};
use crate::error::{Error, Result};
use crate::runs::{prune_finished, Pruned};
use crate::session::{Conn, Db};
use loops_core::workflow::{
    NewEvent, RunOrigin, StepRun, Workflow, WorkflowEvent, WorkflowRun, WorkflowSpec,
};
use loops_core::{Instant, LoopId, RunId, WorkflowRunId, WorkflowStatus};
use loops_store::prune::RunCutoffs;
use loops_store::rows;
use loops_store::workflow_log;
use loops_store::{PrunePolicy, StoreError};
use tokio_postgres::Row;

macro_rules! workflow_cols {
    () => {
        "id, name, version, status, spec_json, created_at, updated_at"
    };
}
macro_rules! wf_run_cols {
    () => {
        "id, workflow_id, workflow_name, loop_id, loop_run_id, scheduled_for, idempotency_key, \
         status, attempt, started_at, finished_at, duration_ms, error, cancel_requested, \
         created_at, updated_at, params_json"
    };
}
macro_rules! step_cols {
    () => {
        "id, workflow_run_id, step_id, sequence, status, attempts, started_at, finished_at, \
         exit_code, pid, pid_start_time, duration_ms, stdout, stderr, error, account_profile, \
         account_tool, created_at, updated_at, summary, usage_json, exit_status_unknown, \
         error_output, provider"
    };
}

fn workflow_from_row(row: &Row) -> Result<Workflow> {
    Ok(rows::workflow_row(&Cols(row))?)
}

fn run_from_row(row: &Row) -> Result<WorkflowRun> {
    Ok(rows::workflow_run_row(&Cols(row))?)
}

fn step_from_row(row: &Row) -> Result<StepRun> {
    Ok(rows::step_run_row(&Cols(row))?)
}

fn event_from_row(row: &Row) -> Result<WorkflowEvent> {
    Ok(rows::workflow_event_row(&Cols(row))?)
}

/// Appends events with the next sequence numbers of the run (its row locked by the
/// caller's update, so two writers never draw the same numbers).
async fn append_events(
    db: &Db<'_, impl Conn>,
    run_id: &str,
    events: &[NewEvent],
    now: Instant,
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    // The next number, and what each entry's mirror in the store's event log names.
    let first = db
        .query_one(
            "SELECT (SELECT COALESCE(MAX(sequence), 0) + 1 FROM workflow_events \
               WHERE workflow_run_id = $1), workflow_name, loop_id \
             FROM workflow_runs WHERE id = $1",
            &[&run_id],
        )
        .await?;
    let workflow_name: String = get(&first, 1, "workflow_name")?;
    let loop_id = get::<Option<String>>(&first, 2, "loop_id")?.map(loops_core::LoopId::new);
    let first: i64 = get(&first, 0, "sequence")?;
    let entries = workflow_log::entries(run_id, &workflow_name, loop_id.as_ref(), first, events)?;
    for entry in &entries {
        db.execute(
            "INSERT INTO workflow_events (id, workflow_run_id, sequence, event_type, step_id, \
             payload_json, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &new_id(),
                &run_id,
                &entry.sequence,
                &entry.event_type,
                &entry.step_id,
                &crate::codec::text(&entry.payload).as_ref(),
                &ms(&now),
            ],
        )
        .await?;
    }
    // Each entry is mirrored into the store's event log, in this transaction.
    let mirrored: Vec<_> = entries.into_iter().map(|e| e.mirror).collect();
    crate::events::append_all(db, &mirrored, now).await
}

fn spec_json(spec: &WorkflowSpec) -> Result<String> {
    serde_json::to_string(spec).map_err(|e| Error::decode(format!("spec: {e}")))
}

pub(crate) async fn create_workflow(
    db: &Db<'_, impl Conn>,
    spec: &WorkflowSpec,
    replace: bool,
    now: Instant,
) -> Result<Workflow> {
    // One creator of a name at a time (the partial unique index is the last word).
    db.execute(
        "SELECT pg_advisory_xact_lock(1819242352, hashtext('workflow:' || $1))",
        &[&spec.name],
    )
    .await?;
    let existing = db
        .query_opt_as(
            concat!(
                "SELECT ",
                workflow_cols!(),
                " FROM workflows WHERE name = $1 AND status = 'active' FOR UPDATE"
            ),
            &[&spec.name],
            workflow_from_row,
        )
        .await?;
    if let Some(old) = &existing {
        if !replace {
            return Err(StoreError::DuplicateWorkflow(spec.name.clone()).into());
        }
        db.execute(
            "UPDATE workflows SET status = 'archived', updated_at = $2 WHERE id = $1",
            &[&old.id.as_str(), &ms(&now)],
        )
        .await?;
    }
    let workflow = rows::new_workflow(spec, existing.as_ref(), now);
    db.execute(
        "INSERT INTO workflows (id, name, version, status, spec_json, created_at, updated_at) \
         VALUES ($1, $2, $3, 'active', $4, $5, $5)",
        &[
            &workflow.id.as_str(),
            &workflow.name,
            &i64::from(workflow.version),
            &spec_json(&workflow.spec)?,
            &ms(&now),
        ],
    )
    .await?;
    Ok(workflow)
}

impl ById for Workflow {
    const SELECT: &'static str =
        concat!("SELECT ", workflow_cols!(), " FROM workflows WHERE id = $1");
    fn decode(row: &Row) -> Result<Self> {
        workflow_from_row(row)
    }
}

impl ById for WorkflowRun {
    const SELECT: &'static str = concat!(
        "SELECT ",
        wf_run_cols!(),
        " FROM workflow_runs WHERE id = $1"
    );
    fn decode(row: &Row) -> Result<Self> {
        run_from_row(row)
    }
}

pub(crate) async fn get_active_workflow(
    db: &Db<'_, impl Conn>,
    name: &str,
) -> Result<Option<Workflow>> {
    db.query_opt_as(
        concat!(
            "SELECT ",
            workflow_cols!(),
            " FROM workflows WHERE name = $1 AND status = 'active'"
        ),
        &[&name],
        workflow_from_row,
    )
    .await
}

pub(crate) async fn workflows_with_id_prefix(
    db: &Db<'_, impl Conn>,
    prefix: &str,
    limit: usize,
) -> Result<Vec<Workflow>> {
    with_id_prefix(
        db,
        concat!(
            "SELECT ",
            workflow_cols!(),
            " FROM workflows WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3"
        ),
        prefix,
        limit,
        workflow_from_row,
        |w| w.id.as_str(),
    )
    .await
}

pub(crate) async fn list_workflows(
    db: &Db<'_, impl Conn>,
    status: Option<WorkflowStatus>,
) -> Result<Vec<Workflow>> {
    db.query_as(
        concat!(
            "SELECT ",
            workflow_cols!(),
            " FROM workflows WHERE $1::text IS NULL OR status = $1 ORDER BY name, version"
        ),
        &[&status.map(|s| s.as_str())],
        workflow_from_row,
    )
    .await
}

pub(crate) async fn archive_workflow(
    db: &Db<'_, impl Conn>,
    id: &str,
    now: Instant,
) -> Result<Workflow> {
    db.query_opt_as(
        concat!(
            "UPDATE workflows SET status = 'archived', updated_at = $2 WHERE id = $1 RETURNING ",
            workflow_cols!()
        ),
        &[&id, &ms(&now)],
        workflow_from_row,
    )
    .await?
    .ok_or_else(|| StoreError::WorkflowNotFound(id.to_owned()).into())
}

pub(crate) async fn create_workflow_run(
    db: &Db<'_, impl Conn>,
    workflow: &Workflow,
    origin: Option<&RunOrigin>,
    params: &loops_core::workflow_params::ParamValues,
    now: Instant,
) -> Result<(WorkflowRun, bool)> {
    let key = origin.map(RunOrigin::key);
    if let Some(key) = &key {
        // One creator of a slot's workflow run at a time.
        db.execute(
            "SELECT pg_advisory_xact_lock(1819242352, hashtext('workflow run:' || $1))",
            &[key],
        )
        .await?;
        let existing = db
            .query_opt(
                concat!(
                    "SELECT ",
                    wf_run_cols!(),
                    " FROM workflow_runs WHERE idempotency_key = $1"
                ),
                &[key],
            )
            .await?;
        if let Some(row) = existing {
            return Ok((run_from_row(&row)?, false));
        }
    }
    let run = WorkflowRun::created(WorkflowRunId::new(new_id()), workflow, origin, params, now);
    db.execute(
        concat!(
            "INSERT INTO workflow_runs (",
            wf_run_cols!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, NULL, NULL, NULL, $11, $11, $12)"
        ),
        &[
            &run.id.as_str(),
            &run.workflow_id.as_str(),
            &run.workflow_name,
            &run.loop_id.as_ref().map(LoopId::as_str),
            &run.loop_run_id.as_ref().map(RunId::as_str),
            &opt_ms(run.scheduled_for.as_ref()),
            &run.idempotency_key,
            &run.status.as_str(),
            &i64::from(run.attempt),
            &ms(&now),
            &ms(&now),
            &loops_store::codec::encode_params(params)?,
        ],
    )
    .await?;
    for (sequence, step) in workflow.spec.steps.iter().enumerate() {
        let account = step.account();
        db.execute(
            "INSERT INTO workflow_step_runs (id, workflow_run_id, step_id, sequence, status, \
             attempts, account_profile, account_tool, created_at, updated_at, provider) \
             VALUES ($1, $2, $3, $4, 'pending', 0, $5, $6, $7, $7, $8)",
            &[
                &new_id(),
                &run.id.as_str(),
                &step.id.as_str(),
                &(sequence as i64),
                &account.map(|a| a.profile.clone()),
                &account.and_then(|a| a.tool.clone()),
                &ms(&now),
                &step.provider().map(|p| p.as_str()),
            ],
        )
        .await?;
    }
    append_events(
        db,
        run.id.as_str(),
        &[rows::workflow_run_created(workflow, &run)],
        now,
    )
    .await?;
    Ok((run, true))
}

pub(crate) async fn workflow_runs_with_id_prefix(
    db: &Db<'_, impl Conn>,
    prefix: &str,
    limit: usize,
) -> Result<Vec<WorkflowRun>> {
    with_id_prefix(
        db,
        concat!(
            "SELECT ",
            wf_run_cols!(),
            " FROM workflow_runs WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3"
        ),
        prefix,
        limit,
        run_from_row,
        |r| r.id.as_str(),
    )
    .await
}

pub(crate) async fn list_workflow_runs(
    db: &Db<'_, impl Conn>,
    workflow_name: Option<&str>,
    limit: Option<usize>,
) -> Result<Vec<WorkflowRun>> {
    db.query_as(
        concat!(
            "SELECT ",
            wf_run_cols!(),
            " FROM workflow_runs WHERE $1::text IS NULL OR workflow_name = $1 \
                 ORDER BY created_at DESC, seq DESC LIMIT $2"
        ),
        &[&workflow_name, &limit.map(|l| sat_i64(l as u64))],
        run_from_row,
    )
    .await
}

pub(crate) async fn step_runs(db: &Db<'_, impl Conn>, run_id: &str) -> Result<Vec<StepRun>> {
    db.query_as(
        concat!(
            "SELECT ",
            step_cols!(),
            " FROM workflow_step_runs WHERE workflow_run_id = $1 ORDER BY sequence"
        ),
        &[&run_id],
        step_from_row,
    )
    .await
}

pub(crate) async fn workflow_events(
    db: &Db<'_, impl Conn>,
    run_id: &str,
    limit: Option<usize>,
) -> Result<Vec<WorkflowEvent>> {
    db.query_as(
        "SELECT * FROM (SELECT id, workflow_run_id, sequence, event_type, step_id, \
               payload_json, created_at FROM workflow_events WHERE workflow_run_id = $1 \
               ORDER BY sequence DESC LIMIT $2) last ORDER BY sequence",
        &[&run_id, &limit.map(|l| sat_i64(l as u64))],
        event_from_row,
    )
    .await
}

pub(crate) async fn save_workflow_run(
    db: &Db<'_, impl Conn>,
    run: &WorkflowRun,
    events: &[NewEvent],
    now: Instant,
) -> Result<()> {
    let changed = db
        .execute(
            "UPDATE workflow_runs SET status = $2, attempt = $3, started_at = $4, \
             finished_at = $5, duration_ms = $6, error = $7, cancel_requested = $8, \
             updated_at = $9 WHERE id = $1",
            &[
                &run.id.as_str(),
                &run.status.as_str(),
                &i64::from(run.attempt),
                &opt_ms(run.started_at.as_ref()),
                &opt_ms(run.finished_at.as_ref()),
                &run.duration_ms.map(sat_i64),
                &opt_text(run.error.as_deref()),
                &opt_text(run.cancel_requested.as_deref()),
                &ms(&now),
            ],
        )
        .await?;
    if changed == 0 {
        return Err(StoreError::WorkflowRunNotFound(run.id.to_string()).into());
    }
    append_events(db, run.id.as_str(), events, now).await
}

pub(crate) async fn save_step_run(
    db: &Db<'_, impl Conn>,
    step: &StepRun,
    events: &[NewEvent],
    now: Instant,
) -> Result<()> {
    let usage = encode_usage(step.usage.as_ref())?;
    // The run's row first, so its event numbers are drawn by one writer at a time.
    db.execute(
        "SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE",
        &[&step.workflow_run_id.as_str()],
    )
    .await?;
    let changed = db
        .execute(
            "UPDATE workflow_step_runs SET status = $2, attempts = $3, started_at = $4, \
             finished_at = $5, exit_code = $6, pid = $7, pid_start_time = $8, duration_ms = $9, \
             stdout = $10, stderr = $11, error = $12, updated_at = $13, summary = $14, \
             usage_json = $15, exit_status_unknown = $16, error_output = $17 WHERE id = $1",
            &[
                &step.id.as_str(),
                &step.status.as_str(),
                &i64::from(step.attempts),
                &opt_ms(step.started_at.as_ref()),
                &opt_ms(step.finished_at.as_ref()),
                &step.exit_code.map(i64::from),
                &step.pid.map(i64::from),
                &step.pid_start_time.map(sat_i64),
                &step.duration_ms.map(sat_i64),
                &opt_text(step.stdout.as_deref()),
                &opt_text(step.stderr.as_deref()),
                &opt_text(step.error.as_deref()),
                &ms(&now),
                &opt_text(step.summary.as_deref()),
                &usage,
                &step.exit_status_unknown,
                &opt_text(step.error_output.as_deref()),
            ],
        )
        .await?;
    if changed == 0 {
        return Err(StoreError::WorkflowRunNotFound(step.workflow_run_id.to_string()).into());
    }
    crate::budgets::after_step(db, step, now).await?;
    append_events(db, step.workflow_run_id.as_str(), events, now).await
}

pub(crate) async fn request_workflow_cancel(
    db: &Db<'_, impl Conn>,
    run_id: &str,
    reason: &str,
    now: Instant,
) -> Result<WorkflowRun> {
    db.execute(
        "UPDATE workflow_runs SET cancel_requested = $2, updated_at = $3 \
         WHERE id = $1 AND status = 'running'",
        &[&run_id, &crate::codec::text(reason).as_ref(), &ms(&now)],
    )
    .await?;
    by_id::<WorkflowRun>(db, run_id)
        .await?
        .ok_or_else(|| StoreError::WorkflowRunNotFound(run_id.to_owned()).into())
}

pub(crate) async fn prune_workflow_runs(
    db: &Db<'_, impl Conn>,
    policy: &PrunePolicy,
    dry_run: bool,
) -> Result<usize> {
    let Some(cuts) = RunCutoffs::of(policy) else {
        return Ok(0);
    };
    let ids = match prune_finished(db, "workflow_runs", "workflow_name", cuts, dry_run).await? {
        Pruned::Counted(n) => return Ok(n),
        Pruned::Deleted(ids) => ids,
    };
    // The events about the pruned runs go with them.
    if !ids.is_empty() {
        crate::events::delete_where(db, "workflow_run_id = ANY($1::text[])", &ids).await?;
    }
    Ok(ids.len())
}
