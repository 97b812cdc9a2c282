//! [`WorkflowStore`] for SQLite: specs, runs, step runs and the event log.

use crate::codec::{
    encode_usage, ms, new_id, opt_ms, query_all, query_first, sat_i64, with_id_prefix, Cols,
};
use crate::error::{from_sqlite, Error, Result, StoreResult};
use crate::SqliteStore;
use loops_core::workflow::{
    NewEvent, RunOrigin, StepRun, Workflow, WorkflowEvent, WorkflowRun, WorkflowSpec,
};
use loops_core::{Instant, LoopId, RunId, WorkflowRunId, WorkflowStatus};
use loops_store::prune::{self, RunCutoffs};
use loops_store::rows;
use loops_store::workflow_log;
use loops_store::{Fence, PrunePolicy, StoreError, WorkflowStore};
use rusqlite::{params, Connection, Row, Transaction};

const WORKFLOW_COLS: &str = "id, name, version, status, spec_json, created_at, updated_at";
const RUN_COLS: &str = "id, workflow_id, workflow_name, loop_id, loop_run_id, scheduled_for, idempotency_key, \
     status, attempt, started_at, finished_at, duration_ms, error, cancel_requested, created_at, updated_at, \
     params_json";
const STEP_COLS: &str = "id, workflow_run_id, step_id, sequence, status, attempts, started_at, finished_at, \
     exit_code, pid, pid_start_time, duration_ms, stdout, stderr, error, account_profile, account_tool, \
     created_at, updated_at, summary, usage_json, exit_status_unknown, error_output, provider";

/// Writes one `workflow_events` row: a run's new entries, and each of a store copy.
pub(crate) const INSERT_EVENT: &str = "INSERT INTO workflow_events (id, workflow_run_id, \
     sequence, event_type, step_id, payload_json, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

fn workflow_from_row(row: &Row<'_>) -> Result<Workflow> {
    Ok(rows::workflow_row(&Cols(row))?)
}

fn run_from_row(row: &Row<'_>) -> Result<WorkflowRun> {
    Ok(rows::workflow_run_row(&Cols(row))?)
}

fn step_from_row(row: &Row<'_>) -> Result<StepRun> {
    Ok(rows::step_run_row(&Cols(row))?)
}

fn event_from_row(row: &Row<'_>) -> Result<WorkflowEvent> {
    Ok(rows::workflow_event_row(&Cols(row))?)
}

/// Appends events with the next sequence numbers of the run.
fn append_events(
    tx: &Transaction<'_>,
    run_id: &str,
    events: &[NewEvent],
    now: Instant,
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let first: i64 = tx
        .prepare_cached(
            "SELECT COALESCE(MAX(sequence), 0) + 1 FROM workflow_events WHERE workflow_run_id = ?1",
        )?
        .query_row([run_id], |r| r.get(0))?;
    let mut insert = tx.prepare_cached(INSERT_EVENT)?;
    // Each entry is mirrored into the store's event log, in this transaction.
    let (workflow_name, loop_id): (String, Option<String>) = tx
        .prepare_cached("SELECT workflow_name, loop_id FROM workflow_runs WHERE id = ?1")?
        .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let loop_id = loop_id.map(LoopId::new);
    for entry in workflow_log::entries(run_id, &workflow_name, loop_id.as_ref(), first, events)? {
        crate::events::append(tx, &entry.mirror, now)?;
        insert.execute(params![
            new_id(),
            run_id,
            entry.sequence,
            entry.event_type,
            entry.step_id,
            entry.payload,
            ms(&now)
        ])?;
    }
    Ok(())
}

fn spec_json(spec: &WorkflowSpec) -> Result<String> {
    serde_json::to_string(spec).map_err(|e| Error::decode(format!("spec: {e}")))
}

/// Stores a new active spec inside the caller's transaction (`create_workflow`, and
/// each spec of an import).
pub(crate) fn insert_workflow(
    tx: &Transaction<'_>,
    spec: &WorkflowSpec,
    replace: bool,
    now: Instant,
) -> Result<Workflow> {
    let json = spec_json(spec)?;
    let existing = query_first(
        tx,
        &format!("SELECT {WORKFLOW_COLS} FROM workflows WHERE name = ?1 AND status = 'active'"),
        [&spec.name],
        workflow_from_row,
    )?;
    if let Some(old) = &existing {
        if !replace {
            return Err(StoreError::DuplicateWorkflow(spec.name.clone()).into());
        }
        tx.execute(
            "UPDATE workflows SET status = 'archived', updated_at = ?2 WHERE id = ?1",
            params![old.id.as_str(), ms(&now)],
        )?;
    }
    let workflow = rows::new_workflow(spec, existing.as_ref(), now);
    let json = if workflow.version == spec.version {
        json
    } else {
        spec_json(&workflow.spec)?
    };
    insert_workflow_row(tx, &workflow, &json)?;
    Ok(workflow)
}

/// Writes `workflow` as its row, `spec_json` its spec encoded: a new spec, and each
/// spec of a store copy.
pub(crate) fn insert_workflow_row(
    conn: &Connection,
    workflow: &Workflow,
    spec_json: &str,
) -> Result<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO workflows ({WORKFLOW_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    ))?
    .execute(params![
        workflow.id.as_str(),
        workflow.name,
        workflow.version,
        workflow.status.as_str(),
        spec_json,
        ms(&workflow.created_at),
        ms(&workflow.updated_at),
    ])?;
    Ok(())
}

/// Writes `run` as its row, every column: a new run ([`WorkflowRun::created`]), and
/// each run of a store copy.
pub(crate) fn insert_workflow_run(conn: &Connection, run: &WorkflowRun) -> Result<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO workflow_runs ({RUN_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
         ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
    ))?
    .execute(params![
        run.id.as_str(),
        run.workflow_id.as_str(),
        run.workflow_name,
        run.loop_id.as_ref().map(LoopId::as_str),
        run.loop_run_id.as_ref().map(RunId::as_str),
        opt_ms(run.scheduled_for.as_ref()),
        run.idempotency_key,
        run.status.as_str(),
        run.attempt,
        opt_ms(run.started_at.as_ref()),
        opt_ms(run.finished_at.as_ref()),
        run.duration_ms.map(sat_i64),
        run.error,
        run.cancel_requested,
        ms(&run.created_at),
        ms(&run.updated_at),
        loops_store::codec::encode_params(&run.params)?,
    ])?;
    Ok(())
}

impl WorkflowStore for SqliteStore {
    fn create_workflow(
        &self,
        spec: &WorkflowSpec,
        replace: bool,
        now: Instant,
    ) -> StoreResult<Workflow> {
        self.write(None, |tx| insert_workflow(tx, spec, replace, now))
    }

    fn get_workflow(&self, id: &str) -> StoreResult<Option<Workflow>> {
        let sql = format!("SELECT {WORKFLOW_COLS} FROM workflows WHERE id = ?1");
        self.read(|conn| query_first(conn, &sql, [id], workflow_from_row))
    }

    fn get_active_workflow(&self, name: &str) -> StoreResult<Option<Workflow>> {
        let sql =
            format!("SELECT {WORKFLOW_COLS} FROM workflows WHERE name = ?1 AND status = 'active'");
        self.read(|conn| query_first(conn, &sql, [name], workflow_from_row))
    }

    fn workflows_with_id_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Workflow>> {
        let sql =
            format!("SELECT {WORKFLOW_COLS} FROM workflows WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT +?3");
        self.read(|conn| {
            with_id_prefix(conn, &sql, prefix, limit, workflow_from_row, |t| {
                t.id.as_str()
            })
        })
    }

    fn list_workflows(&self, status: Option<WorkflowStatus>) -> StoreResult<Vec<Workflow>> {
        let sql = format!(
            "SELECT {WORKFLOW_COLS} FROM workflows WHERE ?1 IS NULL OR status = ?1 ORDER BY name, version"
        );
        self.read(|conn| query_all(conn, &sql, [status.map(|s| s.as_str())], workflow_from_row))
    }

    fn archive_workflow(&self, id: &str, now: Instant) -> StoreResult<Workflow> {
        self.write(None, |tx| {
            tx.execute(
                "UPDATE workflows SET status = 'archived', updated_at = ?2 WHERE id = ?1",
                params![id, ms(&now)],
            )?;
            query_first(
                tx,
                &format!("SELECT {WORKFLOW_COLS} FROM workflows WHERE id = ?1"),
                [id],
                workflow_from_row,
            )?
            .ok_or_else(|| StoreError::WorkflowNotFound(id.to_owned()).into())
        })
    }

    fn create_workflow_run(
        &self,
        workflow: &Workflow,
        origin: Option<&RunOrigin>,
        params: &loops_core::workflow_params::ParamValues,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<(WorkflowRun, bool)> {
        let key = origin.map(RunOrigin::key);
        self.write(fence.map(|f| (f, now)), |tx| {
            if let Some(key) = &key {
                let existing = query_first(tx, &format!(
                        "SELECT {RUN_COLS} FROM workflow_runs WHERE idempotency_key = ?1"
                    ),
                    [key],
                    run_from_row,
                )?;
                if let Some(run) = existing {
                    return Ok((run, false));
                }
            }
            let run =
                WorkflowRun::created(WorkflowRunId::new(new_id()), workflow, origin, params, now);
            insert_workflow_run(tx, &run)?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO workflow_step_runs (id, workflow_run_id, step_id, sequence, status, attempts, \
                 account_profile, account_tool, created_at, updated_at, provider) \
                 VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5, ?6, ?7, ?7, ?8)",
            )?;
            for (sequence, step) in workflow.spec.steps.iter().enumerate() {
                let account = step.account();
                insert.execute(params![
                    new_id(),
                    run.id.as_str(),
                    step.id.as_str(),
                    sequence as i64,
                    account.map(|a| a.profile.clone()),
                    account.and_then(|a| a.tool.clone()),
                    ms(&now),
                    step.provider().map(|p| p.as_str()),
                ])?;
            }
            append_events(
                tx,
                run.id.as_str(),
                &[rows::workflow_run_created(workflow, &run)],
                now,
            )?;
            Ok((run, true))
        })
    }

    fn get_workflow_run(&self, id: &str) -> StoreResult<Option<WorkflowRun>> {
        let sql = format!("SELECT {RUN_COLS} FROM workflow_runs WHERE id = ?1");
        self.read(|conn| query_first(conn, &sql, [id], run_from_row))
    }

    fn workflow_runs_with_id_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<WorkflowRun>> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM workflow_runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT +?3"
        );
        self.read(|conn| with_id_prefix(conn, &sql, prefix, limit, run_from_row, |t| t.id.as_str()))
    }

    fn list_workflow_runs(
        &self,
        workflow_name: Option<&str>,
        limit: Option<usize>,
    ) -> StoreResult<Vec<WorkflowRun>> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM workflow_runs WHERE ?1 IS NULL OR workflow_name = ?1 \
             ORDER BY created_at DESC, rowid DESC LIMIT +?2"
        );
        let limit = limit.map_or(-1, |l| sat_i64(l as u64));
        self.read(|conn| query_all(conn, &sql, params![workflow_name, limit], run_from_row))
    }

    fn step_runs(&self, run_id: &str) -> StoreResult<Vec<StepRun>> {
        let sql = format!(
            "SELECT {STEP_COLS} FROM workflow_step_runs WHERE workflow_run_id = ?1 ORDER BY sequence"
        );
        self.read(|conn| query_all(conn, &sql, [run_id], step_from_row))
    }

    fn workflow_events(
        &self,
        run_id: &str,
        limit: Option<usize>,
    ) -> StoreResult<Vec<WorkflowEvent>> {
        let limit = limit.map_or(-1, |l| sat_i64(l as u64));
        let sql = "SELECT * FROM (SELECT id, workflow_run_id, sequence, event_type, step_id, payload_json, created_at \
             FROM workflow_events WHERE workflow_run_id = ?1 ORDER BY sequence DESC LIMIT +?2) ORDER BY sequence";
        self.read(|conn| query_all(conn, sql, params![run_id, limit], event_from_row))
    }

    fn save_workflow_run(
        &self,
        run: &WorkflowRun,
        events: &[NewEvent],
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<()> {
        self.write(fence.map(|f| (f, now)), |tx| {
            let changed = tx.execute(
                "UPDATE workflow_runs SET status = ?2, attempt = ?3, started_at = ?4, finished_at = ?5, \
                 duration_ms = ?6, error = ?7, cancel_requested = ?8, updated_at = ?9 WHERE id = ?1",
                params![
                    run.id.as_str(),
                    run.status.as_str(),
                    run.attempt,
                    opt_ms(run.started_at.as_ref()),
                    opt_ms(run.finished_at.as_ref()),
                    run.duration_ms.map(sat_i64),
                    run.error,
                    run.cancel_requested,
                    ms(&now),
                ],
            )?;
            if changed == 0 {
                return Err(StoreError::WorkflowRunNotFound(run.id.to_string()).into());
            }
            append_events(tx, run.id.as_str(), events, now)
        })
    }

    fn save_step_run(
        &self,
        step: &StepRun,
        events: &[NewEvent],
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<()> {
        let usage = encode_usage(step.usage.as_ref())?;
        self.write(fence.map(|f| (f, now)), |tx| {
            let changed = tx.execute(
                "UPDATE workflow_step_runs SET status = ?2, attempts = ?3, started_at = ?4, finished_at = ?5, \
                 exit_code = ?6, pid = ?7, pid_start_time = ?8, duration_ms = ?9, stdout = ?10, stderr = ?11, \
                 error = ?12, updated_at = ?13, summary = ?14, usage_json = ?15, \
                 exit_status_unknown = ?16, error_output = ?17 WHERE id = ?1",
                params![
                    step.id.as_str(),
                    step.status.as_str(),
                    step.attempts,
                    opt_ms(step.started_at.as_ref()),
                    opt_ms(step.finished_at.as_ref()),
                    step.exit_code,
                    step.pid,
                    step.pid_start_time.map(sat_i64),
                    step.duration_ms.map(sat_i64),
                    step.stdout,
                    step.stderr,
                    step.error,
                    ms(&now),
                    step.summary,
                    usage,
                    step.exit_status_unknown,
                    step.error_output,
                ],
            )?;
            if changed == 0 {
                return Err(StoreError::WorkflowRunNotFound(
                    step.workflow_run_id.to_string(),
                ).into());
            }
            crate::budgets::after_step(tx, step, now)?;
            append_events(tx, step.workflow_run_id.as_str(), events, now)
        })
    }

    fn request_workflow_cancel(
        &self,
        run_id: &str,
        reason: &str,
        now: Instant,
    ) -> StoreResult<WorkflowRun> {
        self.write(None, |tx| {
            tx.execute(
                "UPDATE workflow_runs SET cancel_requested = ?2, updated_at = ?3 WHERE id = ?1 AND status = 'running'",
                params![run_id, reason, ms(&now)],
            )?;
            query_first(tx, &format!("SELECT {RUN_COLS} FROM workflow_runs WHERE id = ?1"),
                [run_id],
                run_from_row,
            )?
            .ok_or_else(|| StoreError::WorkflowRunNotFound(run_id.to_owned()).into())
        })
    }

    fn prune_workflow_runs(&self, policy: &PrunePolicy, dry_run: bool) -> StoreResult<usize> {
        let Some(RunCutoffs {
            finished_before: older,
            keep,
        }) = RunCutoffs::of(policy)
        else {
            return Ok(0);
        };
        let select = "SELECT id FROM (SELECT id, finished_at, ROW_NUMBER() OVER \
             (PARTITION BY workflow_name ORDER BY created_at DESC, rowid DESC) AS rn \
             FROM workflow_runs WHERE status != 'running') \
             WHERE (?1 IS NOT NULL AND finished_at < ?1) OR (?2 IS NOT NULL AND rn > ?2)";
        if dry_run {
            let conn = self.lock();
            let n: i64 = conn
                .prepare_cached(&format!("SELECT COUNT(*) FROM ({select})"))
                .and_then(|mut stmt| stmt.query_row(params![older, keep], |r| r.get(0)))
                .map_err(from_sqlite)?;
            return Ok(prune::count(n));
        }
        self.write(None, |tx| {
            crate::events::prune_with(
                tx,
                "DELETE FROM events WHERE workflow_run_id IN (SELECT id FROM temp.pruned)",
                &format!("INSERT INTO temp.pruned (id) {select}"),
                params![older, keep],
            )?;
            let n = tx.execute(
                "DELETE FROM workflow_runs WHERE id IN (SELECT id FROM temp.pruned)",
                [],
            )?;
            tx.execute("DELETE FROM temp.pruned", [])?;
            Ok(n)
        })
    }
}
