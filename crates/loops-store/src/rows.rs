//! The rows every backend stores, decoded once over [`StoredRow`]: each backend keeps its SQL, selects these columns in this order (the shared column lists are the `*_cols!` macros), and hands its row type in; and the rows a new workflow run's write adds beside its own.

use crate::codec::{corrupt, Result, StoredRow};
use crate::{DaemonLease, LeaseHolder, UnreadableLoop, UsageRow, UsageSource};
use loops_core::budget::{Budget, BudgetHold, BudgetMetric, StoreBudget};
use loops_core::event::{Event, EventBody, EventKind};
use loops_core::hold::AccountHold;
use loops_core::workflow::{NewEvent, StepRun, Workflow, WorkflowEvent, WorkflowRun, WorkflowSpec};
use loops_core::{
    Delivery, Instant, Loop, LoopId, RunId, StepId, StepRunId, StepStatus, WorkflowEventType,
    WorkflowId, WorkflowRunId, WorkflowRunStatus, WorkflowStatus,
};

// The column lists both backends select for the decoders below, identical on each: a
// macro each so the backends can `concat!` them into their statements.

/// The columns of `runs`, in the order [`run_row`] reads them.
#[macro_export]
macro_rules! run_cols {
    () => {
        "id, loop_id, loop_name, scheduled_for, attempt, status, source, started_at, \
         finished_at, exit_code, duration_ms, stdout, stderr, error, pid, pid_start_time, \
         claimed_by, lease_expires_at, summary, usage_json, created_at, updated_at, due_at, \
         error_output, failure_class, retry_at, session_id, session_note, account"
    };
}

/// The columns of `loops`, in the order [`loop_row`] reads them: `loop_cols!()` where the
/// backend stores no runner labels (SQLite), `loop_cols!(with_runs_on)` where it does
/// (PostgreSQL; `loop_row`'s `with_runs_on`).
#[macro_export]
macro_rules! loop_cols {
    () => {
        $crate::loop_cols!(@ "")
    };
    (with_runs_on) => {
        $crate::loop_cols!(@ "runs_on_json, ")
    };
    (@ $runs_on:literal) => {
        concat!(
            "id, name, description, status, schedule_json, target_json, next_run_at, \
             retry_scheduled_for, catch_up, catch_up_limit, overlap, max_attempts, \
             retry_delay_ms, lease_ms, expires_at, created_at, updated_at, jitter_ms, due_at, \
             labels_json, notify_json, ",
            $runs_on,
            "ops_json, ops_state_json"
        )
    };
}

/// The columns of `account_holds`, in the order [`account_hold_row`] reads them.
#[macro_export]
macro_rules! account_hold_cols {
    () => {
        "provider, account, held_until, reason, since, probes, notified, updated_at"
    };
}

/// The columns of `budget_holds`, in the order [`budget_hold_row`] reads them.
#[macro_export]
macro_rules! budget_hold_cols {
    () => {
        "scope, metric, held_until, reason, notified, updated_at"
    };
}

/// The columns of `notification_deliveries`, in the order [`delivery_row`] reads them.
#[macro_export]
macro_rules! delivery_cols {
    () => {
        "id, run_id, loop_id, event, channel, target, status, attempts, last_error, \
         created_at, updated_at, claimed_by, claim_expires_at"
    };
}

/// Decodes a `loops` row selected as [`loop_cols!`](crate::loop_cols) —
/// `runs_on_json` only where the backend stores runner labels (`with_runs_on`).
pub fn loop_row<R: StoredRow>(row: &R, with_runs_on: bool) -> Result<Loop> {
    // The columns after `notify_json` shift by one where `runs_on_json` is selected.
    let (runs_on, ops_idx) = if with_runs_on {
        (row.json(21, "runs_on_json")?, 22)
    } else {
        // No runner labels stored (one daemon, no runners).
        (Vec::new(), 21)
    };
    Ok(Loop {
        id: LoopId::new(row.text(0, "id")?),
        name: row.text(1, "name")?,
        description: row.opt_text(2, "description")?,
        status: row.parsed(3, "status")?,
        schedule: row.json(4, "schedule_json")?,
        target: row.json(5, "target_json")?,
        next_run_at: row.opt_instant(6, "next_run_at")?,
        retry_scheduled_for: row.opt_instant(7, "retry_scheduled_for")?,
        catch_up: row.parsed(8, "catch_up")?,
        catch_up_limit: row.u32(9, "catch_up_limit")?,
        overlap: row.parsed(10, "overlap")?,
        max_attempts: row.u32(11, "max_attempts")?,
        retry_delay_ms: row.u64(12, "retry_delay_ms")?,
        lease_ms: row.u64(13, "lease_ms")?,
        expires_at: row.opt_instant(14, "expires_at")?,
        jitter_ms: row.u64(17, "jitter_ms")?,
        runs_on,
        due_at: row.opt_instant(18, "due_at")?,
        labels: row.json(19, "labels_json")?,
        notify: row.opt_json(20, "notify_json")?,
        ops: row.opt_json(ops_idx, "ops_json")?.unwrap_or_default(),
        state: row
            .opt_json(ops_idx + 1, "ops_state_json")?
            .unwrap_or_default(),
        // Holds are per account, not per loop: the client fills these in.
        held_until: None,
        held_reason: None,
        waiting_for: None,
        created_at: row.instant(15, "created_at")?,
        updated_at: row.instant(16, "updated_at")?,
    })
}

/// A loop row of a listing: decoded, or — when it does not decode — reported in its
/// place rather than as the error of the whole query, so one bad loop never hides or
/// stops the others.
pub fn listed_loop_row<R: StoredRow>(
    row: &R,
    with_runs_on: bool,
) -> std::result::Result<Loop, UnreadableLoop> {
    loop_row(row, with_runs_on).map_err(|e| UnreadableLoop {
        id: LoopId::new(row.text(0, "id").unwrap_or_default()),
        name: row.text(1, "name").unwrap_or_default(),
        error: e.to_string(),
    })
}

/// Decodes a `runs` row selected as `id, loop_id, loop_name, scheduled_for, attempt,
/// status, source, started_at, finished_at, exit_code, duration_ms, stdout, stderr,
/// error, pid, pid_start_time, claimed_by, lease_expires_at, summary, usage_json,
/// created_at, updated_at, due_at, error_output, failure_class, retry_at, session_id,
/// session_note, account`.
pub fn run_row<R: StoredRow>(row: &R) -> Result<loops_core::Run> {
    Ok(loops_core::Run {
        id: RunId::new(row.text(0, "id")?),
        loop_id: LoopId::new(row.text(1, "loop_id")?),
        loop_name: row.text(2, "loop_name")?,
        scheduled_for: row.instant(3, "scheduled_for")?,
        attempt: row.u32(4, "attempt")?,
        status: row.parsed(5, "status")?,
        source: row.parsed(6, "source")?,
        started_at: row.opt_instant(7, "started_at")?,
        finished_at: row.opt_instant(8, "finished_at")?,
        exit_code: row.opt_i32(9, "exit_code")?,
        duration_ms: row.opt_u64(10, "duration_ms")?,
        stdout: row.opt_text(11, "stdout")?,
        stderr: row.opt_text(12, "stderr")?,
        error: row.opt_text(13, "error")?,
        error_output: row.opt_text(23, "error_output")?,
        pid: row.opt_u32(14, "pid")?,
        pid_start_time: row.opt_u64(15, "pid_start_time")?,
        claimed_by: row.opt_text(16, "claimed_by")?,
        lease_expires_at: row.opt_instant(17, "lease_expires_at")?,
        summary: row.opt_text(18, "summary")?,
        usage: row.usage(19)?,
        created_at: row.instant(20, "created_at")?,
        updated_at: row.instant(21, "updated_at")?,
        due_at: row.opt_instant(22, "due_at")?,
        failure_class: row.opt_parsed(24, "failure_class")?,
        retry_at: row.opt_instant(25, "retry_at")?,
        session_id: row.opt_text(26, "session_id")?,
        session_note: row.opt_text(27, "session_note")?,
        account: row.opt_text(28, "account")?,
    })
}

/// Decodes a `daemon_lease` row selected in table order without `id`.
pub fn lease_row<R: StoredRow>(row: &R) -> Result<DaemonLease> {
    Ok(DaemonLease {
        holder: LeaseHolder {
            runner_id: row.text(0, "runner_id")?,
            pid: row.u32(1, "pid")?,
            pid_start_time: row.opt_u64(2, "pid_start_time")?,
            host: row.text(3, "host")?,
        },
        token: row.u64(4, "token")?,
        acquired_at: row.instant(5, "acquired_at")?,
        heartbeat_at: row.instant(6, "heartbeat_at")?,
        expires_at: row.instant(7, "expires_at")?,
    })
}

/// Decodes an `events` row selected as `seq, kind, loop_id, run_id, workflow_run_id,
/// data_json, created_at`.
pub fn event_row<R: StoredRow>(row: &R) -> Result<Event> {
    Ok(Event {
        seq: row.u64(0, "seq")?,
        at: row.instant(6, "created_at")?,
        body: EventBody {
            kind: row.parsed::<EventKind>(1, "kind")?,
            loop_id: row.opt_text(2, "loop_id")?.map(LoopId::new),
            run_id: row.opt_text(3, "run_id")?.map(RunId::new),
            workflow_run_id: row.opt_text(4, "workflow_run_id")?.map(WorkflowRunId::new),
            data: row.json(5, "data_json")?,
        },
    })
}

/// Decodes a `workflows` row selected as `id, name, version, status, spec_json,
/// created_at, updated_at`.
pub fn workflow_row<R: StoredRow>(row: &R) -> Result<Workflow> {
    Ok(Workflow {
        id: WorkflowId::new(row.text(0, "id")?),
        name: row.text(1, "name")?,
        version: row.u32(2, "version")?,
        status: row.parsed::<WorkflowStatus>(3, "status")?,
        spec: row.json(4, "spec_json")?,
        created_at: row.instant(5, "created_at")?,
        updated_at: row.instant(6, "updated_at")?,
    })
}

/// Decodes a `workflow_runs` row selected as `id, workflow_id, workflow_name, loop_id,
/// loop_run_id, scheduled_for, idempotency_key, status, attempt, started_at,
/// finished_at, duration_ms, error, cancel_requested, created_at, updated_at,
/// params_json`.
pub fn workflow_run_row<R: StoredRow>(row: &R) -> Result<WorkflowRun> {
    Ok(WorkflowRun {
        id: WorkflowRunId::new(row.text(0, "id")?),
        workflow_id: WorkflowId::new(row.text(1, "workflow_id")?),
        workflow_name: row.text(2, "workflow_name")?,
        loop_id: row.opt_text(3, "loop_id")?.map(LoopId::new),
        loop_run_id: row.opt_text(4, "loop_run_id")?.map(RunId::new),
        scheduled_for: row.opt_instant(5, "scheduled_for")?,
        idempotency_key: row.opt_text(6, "idempotency_key")?,
        status: row.parsed::<WorkflowRunStatus>(7, "status")?,
        attempt: row.u32(8, "attempt")?,
        started_at: row.opt_instant(9, "started_at")?,
        finished_at: row.opt_instant(10, "finished_at")?,
        duration_ms: row.opt_u64(11, "duration_ms")?,
        error: row.opt_text(12, "error")?,
        cancel_requested: row.opt_text(13, "cancel_requested")?,
        created_at: row.instant(14, "created_at")?,
        updated_at: row.instant(15, "updated_at")?,
        params: row.opt_json(16, "params_json")?.unwrap_or_default(),
    })
}

/// Decodes a `step_runs` row selected as `id, workflow_run_id, step_id, sequence,
/// status, attempts, started_at, finished_at, exit_code, pid, pid_start_time,
/// duration_ms, stdout, stderr, error, account_profile, account_tool, created_at,
/// updated_at, summary, usage_json, exit_status_unknown, error_output, provider`.
pub fn step_run_row<R: StoredRow>(row: &R) -> Result<StepRun> {
    Ok(StepRun {
        id: StepRunId::new(row.text(0, "id")?),
        workflow_run_id: WorkflowRunId::new(row.text(1, "workflow_run_id")?),
        step_id: StepId::new(row.text(2, "step_id")?),
        sequence: row.u32(3, "sequence")?,
        status: row.parsed::<StepStatus>(4, "status")?,
        attempts: row.u32(5, "attempts")?,
        started_at: row.opt_instant(6, "started_at")?,
        finished_at: row.opt_instant(7, "finished_at")?,
        exit_code: row.opt_i32(8, "exit_code")?,
        pid: row.opt_u32(9, "pid")?,
        pid_start_time: row.opt_u64(10, "pid_start_time")?,
        duration_ms: row.opt_u64(11, "duration_ms")?,
        stdout: row.opt_text(12, "stdout")?,
        stderr: row.opt_text(13, "stderr")?,
        error: row.opt_text(14, "error")?,
        error_output: row.opt_text(22, "error_output")?,
        account_profile: row.opt_text(15, "account_profile")?,
        account_tool: row.opt_text(16, "account_tool")?,
        created_at: row.instant(17, "created_at")?,
        updated_at: row.instant(18, "updated_at")?,
        summary: row.opt_text(19, "summary")?,
        usage: row.usage(20)?,
        exit_status_unknown: row.flag(21, "exit_status_unknown")?,
        provider: row.opt_parsed(23, "provider")?,
    })
}

/// Decodes a `workflow_events` row selected as `id, workflow_run_id, sequence,
/// event_type, step_id, payload_json, created_at`.
pub fn workflow_event_row<R: StoredRow>(row: &R) -> Result<WorkflowEvent> {
    Ok(WorkflowEvent {
        id: row.text(0, "id")?,
        workflow_run_id: WorkflowRunId::new(row.text(1, "workflow_run_id")?),
        sequence: row.u64(2, "sequence")?,
        event_type: row.parsed::<WorkflowEventType>(3, "event_type")?,
        step_id: row.opt_text(4, "step_id")?.map(StepId::new),
        payload: row.json(5, "payload_json")?,
        created_at: row.instant(6, "created_at")?,
    })
}

/// Decodes an `account_holds` row selected as `provider, account, held_until, reason,
/// since, probes, notified, updated_at`.
pub fn account_hold_row<R: StoredRow>(row: &R) -> Result<AccountHold> {
    Ok(AccountHold {
        provider: row.parsed(0, "provider")?,
        account: row.text(1, "account")?,
        held_until: row.instant(2, "held_until")?,
        reason: row.text(3, "reason")?,
        since: row.instant(4, "since")?,
        probes: row.u32(5, "probes")?,
        notified: row.flag(6, "notified")?,
        updated_at: row.instant(7, "updated_at")?,
    })
}

/// Decodes a `budget_holds` row selected as `scope, metric, held_until, reason,
/// notified, updated_at`.
pub fn budget_hold_row<R: StoredRow>(row: &R) -> Result<BudgetHold> {
    Ok(BudgetHold {
        scope: row.parsed(0, "scope")?,
        metric: row.parsed(1, "metric")?,
        held_until: row.instant(2, "held_until")?,
        reason: row.text(3, "reason")?,
        notified: row.flag(4, "notified")?,
        updated_at: row.instant(5, "updated_at")?,
    })
}

/// Decodes a `budgets` row selected as `provider, account, tokens, usd, updated_at`
/// (`account` empty: every account of the provider).
pub fn store_budget_row<R: StoredRow>(row: &R) -> Result<StoreBudget> {
    let limit = |idx: usize, col: &str, metric: BudgetMetric| -> Result<Option<Budget>> {
        row.opt_text(idx, col)?
            .map(|text| Budget::parse(metric, &text, col).map_err(|e| corrupt(col, e)))
            .transpose()
    };
    let account = row.text(1, "account")?;
    Ok(StoreBudget {
        provider: row.parsed(0, "provider")?,
        account: (!account.is_empty()).then_some(account),
        tokens: limit(2, "tokens", BudgetMetric::Tokens)?,
        usd: limit(3, "usd", BudgetMetric::Usd)?,
        updated_at: row.instant(4, "updated_at")?,
    })
}

/// Decodes a `deliveries` row selected as `id, run_id, loop_id, event, channel, target,
/// status, attempts, last_error, created_at, updated_at, claimed_by, claim_expires_at`.
pub fn delivery_row<R: StoredRow>(row: &R) -> Result<Delivery> {
    Ok(Delivery {
        id: row.text(0, "id")?,
        run_id: RunId::new(row.text(1, "run_id")?),
        loop_id: LoopId::new(row.text(2, "loop_id")?),
        event: row.parsed(3, "event")?,
        channel: row.parsed(4, "channel")?,
        target: row.text(5, "target")?,
        status: row.parsed(6, "status")?,
        attempts: row.u32(7, "attempts")?,
        last_error: row.opt_text(8, "last_error")?,
        created_at: row.instant(9, "created_at")?,
        updated_at: row.instant(10, "updated_at")?,
        claimed_by: row.opt_text(11, "claimed_by")?,
        claim_expires_at: row.opt_instant(12, "claim_expires_at")?,
    })
}

/// Decodes a usage report's run row selected as `loop_id, loop_name, finished_at,
/// usage_json`; `None` when it reported no usage. Shared so both backends' reports agree.
pub fn usage_run_row<R: StoredRow>(row: &R) -> Result<Option<UsageRow>> {
    let Some(usage) = row.usage(3)? else {
        return Ok(None);
    };
    Ok(Some(UsageRow {
        source: UsageSource::Run {
            loop_id: LoopId::new(row.text(0, "loop_id")?),
            loop_name: row.text(1, "loop_name")?,
        },
        finished_at: row.instant(2, "finished_at")?,
        usage,
    }))
}

/// Decodes a usage report's step run row selected as `workflow_id, workflow_name,
/// step_id, loop_id, finished_at, usage_json` (the workflow run's columns and the step
/// run's); `None` when it reported no usage.
pub fn usage_step_row<R: StoredRow>(row: &R) -> Result<Option<UsageRow>> {
    let Some(usage) = row.usage(5)? else {
        return Ok(None);
    };
    Ok(Some(UsageRow {
        source: UsageSource::Step {
            workflow_id: WorkflowId::new(row.text(0, "workflow_id")?),
            workflow_name: row.text(1, "workflow_name")?,
            step_id: StepId::new(row.text(2, "step_id")?),
            loop_id: row.opt_text(3, "loop_id")?.map(LoopId::new),
        },
        finished_at: row.instant(4, "finished_at")?,
        usage,
    }))
}

/// Orders `deliveries` by their run's place in `runs` (stable: each run's keep their
/// order; a run not named goes last): the order `deliveries_of_runs` promises on every
/// backend.
pub fn sort_by_runs(deliveries: &mut [Delivery], runs: &[RunId]) {
    let order: std::collections::HashMap<&str, usize> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str(), i))
        .collect();
    deliveries.sort_by_key(|d| order.get(d.run_id.as_str()).copied().unwrap_or(usize::MAX));
}

/// The `workflows` row a create writes for `spec`, shared so both backends number
/// versions alike: a fresh id, active, at `spec`'s version (at least 1) — above the
/// version of `replaced`, the active spec of that name it archives, when there is one.
pub fn new_workflow(spec: &WorkflowSpec, replaced: Option<&Workflow>, now: Instant) -> Workflow {
    let mut version = spec.version.max(1);
    if let Some(old) = replaced {
        version = version.max(old.version + 1);
    }
    let mut record_spec = spec.clone();
    record_spec.version = version;
    Workflow {
        id: WorkflowId::new(crate::codec::new_id()),
        name: spec.name.clone(),
        version,
        status: WorkflowStatus::Active,
        spec: record_spec,
        created_at: now,
        updated_at: now,
    }
}

/// The `created` event a new workflow run's write appends, the same on every backend.
pub fn workflow_run_created(workflow: &Workflow, run: &WorkflowRun) -> NewEvent {
    NewEvent::new(
        WorkflowEventType::Created,
        None,
        serde_json::json!({
            "workflowId": workflow.id,
            "workflowName": workflow.name,
            "version": workflow.version,
            "stepCount": workflow.spec.steps.len(),
            "loopId": run.loop_id,
            "loopRunId": run.loop_run_id,
            "idempotencyKey": run.idempotency_key,
        }),
    )
}
