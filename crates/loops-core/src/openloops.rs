//! Mapping an OpenLoops 0.3 database onto an import ([`crate::bundle::Incoming`]):
//! `loops import --from-openloops`. Pure: the backend reads the tables (each row as
//! column name → JSON value, instants as the ISO text OpenLoops stores) into
//! [`OpenLoopsTables`]; this module turns rows into loop definitions, workflow specs
//! and history runs, and says, one line each, what it could not carry over.
//!
//! The mapping (README, "Import from OpenLoops"):
//! - `loops`: name, description, status, `schedule_json`, `target_json`, next run,
//!   expiry and the policy columns; our JSON field names are OpenLoops 0.3's, so
//!   schedules and targets read as they are. A workflow target's `workflowId` (an id
//!   or a name there) becomes the workflow's name. A command or agent target without
//!   `timeoutMs` ran with OpenLoops' 30-minute default; it gets that timeout here
//!   explicitly (here no timeout means no limit). A cron schedule without a zone gets
//!   the host's. A pending retry is not carried over.
//! - `workflow_specs`: the active ones (archived versions are history).
//! - `loop_runs` (`--with-history`): finished runs of imported loops, source
//!   `scheduled` (OpenLoops does not record one), attempt and output kept; running
//!   rows are left behind.
//! - `workflow_runs` and their step runs and events are not imported.

use crate::bundle::{Incoming, IncomingLoop, IncomingWorkflow};
use crate::workflow::WorkflowSpec;
use crate::{Anchor, Instant, Loop, Run, RunStatus};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// OpenLoops' timeout for a command or agent target that names none (30 minutes).
pub const OPENLOOPS_DEFAULT_TIMEOUT_MS: u64 = 30 * 60_000;

/// One table row: column name → value (integers, reals and text as JSON; NULL as
/// `null`).
pub type Row = Map<String, Value>;

/// What the backend read from an OpenLoops database.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenLoopsTables {
    pub loops: Vec<Row>,
    pub workflow_specs: Vec<Row>,
    /// `loop_runs` rows, when history was asked for (else empty).
    pub loop_runs: Vec<Row>,
    /// Rows of `workflow_runs` (not imported, only reported).
    pub workflow_runs: u64,
}

/// Loop columns this mapping reads; any other column with a value is reported.
const LOOP_COLUMNS: &[&str] = &[
    "id",
    "name",
    "description",
    "status",
    "schedule_json",
    "target_json",
    "next_run_at",
    "retry_scheduled_for",
    "catch_up",
    "catch_up_limit",
    "overlap",
    "max_attempts",
    "retry_delay_ms",
    "lease_ms",
    "expires_at",
    "created_at",
    "updated_at",
];

/// Maps `tables` (see the module comment). `local_zone` is the zone a cron schedule
/// without one gets (the host's, as OpenLoops used).
pub fn map(tables: &OpenLoopsTables, local_zone: &str) -> Incoming {
    let mut notes = Vec::new();
    // Workflow names by id, of every version (a loop may name an archived one's id).
    let spec_names: HashMap<String, String> = tables
        .workflow_specs
        .iter()
        .filter_map(|row| Some((text(row, "id")?, text(row, "name")?)))
        .collect();
    let mut workflows = Vec::new();
    let mut archived = 0;
    let mut spec_seen = HashSet::new();
    for row in &tables.workflow_specs {
        let name = text(row, "name").unwrap_or_else(|| "?".into());
        if text(row, "status").as_deref() != Some("active") {
            archived += 1;
            continue;
        }
        match workflow_spec(row) {
            Ok(spec) if spec_seen.insert(spec.name.clone()) => {
                workflows.push(IncomingWorkflow {
                    spec,
                    redacted: Vec::new(),
                });
            }
            Ok(_) => notes.push(format!(
                "workflow {name:?}: a second active spec of this name is not imported"
            )),
            Err(why) => notes.push(format!("workflow {name:?}: not imported: {why}")),
        }
    }
    if archived > 0 {
        notes.push(format!(
            "{archived} archived workflow spec version(s) not imported (only active specs are)"
        ));
    }

    let mut unknown_columns: BTreeMap<String, usize> = BTreeMap::new();
    let mut loops = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut names = HashSet::new();
    for row in &tables.loops {
        for (col, value) in row {
            if !value.is_null() && !LOOP_COLUMNS.contains(&col.as_str()) {
                *unknown_columns.entry(col.clone()).or_default() += 1;
            }
        }
        let name = text(row, "name").unwrap_or_else(|| "?".into());
        match loop_definition(row, &spec_names, local_zone, &mut notes) {
            Ok(definition) => {
                if !names.insert(definition.name.clone()) {
                    notes.push(format!(
                        "loop {name:?}: a second loop of this name is not imported"
                    ));
                    continue;
                }
                if let Some(id) = text(row, "id") {
                    by_id.insert(id, loops.len());
                }
                loops.push(IncomingLoop {
                    definition,
                    redacted: Vec::new(),
                    history: Vec::new(),
                });
            }
            Err(why) => notes.push(format!("loop {name:?}: not imported: {why}")),
        }
    }
    for (col, count) in unknown_columns {
        notes.push(format!(
            "loops.{col}: not mapped (set on {count} loop(s)); loops has no such field"
        ));
    }

    let (mut running, mut orphaned, mut unreadable) = (0, 0, 0);
    for row in &tables.loop_runs {
        let Some(index) = text(row, "loop_id").and_then(|id| by_id.get(&id).copied()) else {
            orphaned += 1;
            continue;
        };
        match history_run(row) {
            Ok(Some(run)) => loops[index].history.push(run),
            Ok(None) => running += 1,
            Err(why) => {
                unreadable += 1;
                if unreadable <= 3 {
                    notes.push(format!(
                        "loop {:?}: a run not imported: {why}",
                        loops[index].definition.name
                    ));
                }
            }
        }
    }
    for lp in &mut loops {
        lp.history
            .sort_by_key(|r| (r.created_at, r.scheduled_for, r.attempt));
    }
    if running > 0 {
        notes.push(format!(
            "{running} running run(s) not imported (still running under OpenLoops)"
        ));
    }
    if orphaned > 0 {
        notes.push(format!(
            "{orphaned} run(s) of loops not imported left behind"
        ));
    }
    if unreadable > 3 {
        notes.push(format!("{} more run(s) not imported", unreadable - 3));
    }
    if tables.workflow_runs > 0 {
        notes.push(format!(
            "{} workflow run(s) not imported (with their step runs and events)",
            tables.workflow_runs
        ));
    }
    Incoming {
        exported_at: None,
        loops,
        workflows,
        notes,
        lenient: true,
    }
}

fn text(row: &Row, col: &str) -> Option<String> {
    match row.get(col) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

fn json_column(row: &Row, col: &str) -> Result<Value, String> {
    let raw = text(row, col).ok_or_else(|| format!("no {col}"))?;
    serde_json::from_str(&raw).map_err(|e| format!("{col} is not JSON ({e})"))
}

/// An instant column: ISO text (as OpenLoops writes), or milliseconds.
fn instant(row: &Row, col: &str) -> Result<Option<Instant>, String> {
    match row.get(col) {
        None | Some(Value::Null) => Ok(None),
        // Millisecond precision, as every stored instant (`timefmt::parse_instant`).
        Some(Value::String(s)) => crate::timefmt::parse_instant(s)
            .map(Some)
            .map_err(|e| format!("{col} {s:?}: {e}")),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map(Some)
            .ok_or_else(|| format!("{col} {n} is not an instant")),
        Some(other) => Err(format!("{col} is {other}")),
    }
}

fn loop_definition(
    row: &Row,
    spec_names: &HashMap<String, String>,
    local_zone: &str,
    notes: &mut Vec<String>,
) -> Result<Loop, String> {
    let name = text(row, "name").ok_or("no name")?;
    let mut schedule = json_column(row, "schedule_json")?;
    if let Some(s) = schedule.as_object_mut() {
        if s.get("type").and_then(Value::as_str) == Some("cron") && !s.contains_key("timezone") {
            s.insert("timezone".into(), Value::String(local_zone.to_owned()));
        }
        if s.get("type").and_then(Value::as_str) == Some("interval") && !s.contains_key("anchor") {
            s.insert(
                "anchor".into(),
                Value::String(Anchor::DEFAULT.as_str().into()),
            );
        }
    }
    let mut target = json_column(row, "target_json")?;
    if let Some(t) = target.as_object_mut() {
        match t.get("type").and_then(Value::as_str) {
            Some("workflow") => {
                if let Some(reference) = t.remove("workflowId") {
                    let reference = reference.as_str().unwrap_or_default().to_owned();
                    let name = spec_names.get(&reference).cloned().unwrap_or(reference);
                    t.insert("workflow".into(), Value::String(name));
                }
            }
            Some("command" | "agent") if !t.contains_key("timeoutMs") => {
                t.insert("timeoutMs".into(), OPENLOOPS_DEFAULT_TIMEOUT_MS.into());
                notes.push(format!(
                    "loop {name:?}: no timeout there means OpenLoops' default; imported with timeoutMs {OPENLOOPS_DEFAULT_TIMEOUT_MS} (30m)"
                ));
            }
            _ => {}
        }
    }
    let retry = instant(row, "retry_scheduled_for")?;
    if let Some(slot) = retry {
        notes.push(format!(
            "loop {name:?}: its pending retry of slot {} is not carried over",
            crate::format_instant(&slot)
        ));
    }
    let placeholder = crate::format_instant(&chrono::DateTime::UNIX_EPOCH);
    let fmt = |t: Option<Instant>| t.map_or(Value::Null, |t| crate::format_instant(&t).into());
    let int = |col: &str, default: u64| -> Result<Value, String> {
        match row.get(col) {
            None | Some(Value::Null) => Ok(default.into()),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(Value::Number(n.clone())),
            Some(other) => Err(format!("{col} is {other}, not a count")),
        }
    };
    let defaults = crate::Policy::default();
    let word = |col: &str, default: &str| text(row, col).unwrap_or_else(|| default.to_owned());
    let doc = serde_json::json!({
        "id": "",
        "name": name,
        "description": text(row, "description"),
        "status": word("status", "active"),
        "schedule": schedule,
        "target": target,
        "nextRunAt": fmt(instant(row, "next_run_at")?),
        "retryScheduledFor": null,
        "catchUp": word("catch_up", defaults.catch_up.as_str()),
        "catchUpLimit": int("catch_up_limit", u64::from(defaults.catch_up_limit))?,
        "overlap": word("overlap", defaults.overlap.as_str()),
        "maxAttempts": int("max_attempts", u64::from(defaults.max_attempts))?,
        "retryDelayMs": int("retry_delay_ms", defaults.retry_delay_ms)?,
        "leaseMs": int("lease_ms", defaults.lease_ms)?,
        "expiresAt": fmt(instant(row, "expires_at")?),
        "createdAt": placeholder,
        "updatedAt": placeholder,
    });
    let lp: Loop = serde_path_to_error::deserialize(doc)
        .map_err(|e| format!("{}: {}", e.path(), e.inner()))?;
    // OpenLoops 0.3 has neither status (nor stop conditions): archived and done are
    // our own.
    if matches!(
        lp.status,
        crate::LoopStatus::Archived | crate::LoopStatus::Done
    ) {
        return Err(format!("status {} is not an OpenLoops status", lp.status));
    }
    Ok(lp)
}

fn workflow_spec(row: &Row) -> Result<WorkflowSpec, String> {
    let steps = json_column(row, "steps_json")?;
    let mut doc = Map::new();
    doc.insert(
        "name".into(),
        Value::String(text(row, "name").ok_or("no name")?),
    );
    if let Some(d) = text(row, "description") {
        doc.insert("description".into(), Value::String(d));
    }
    if let Some(v) = row.get("version").filter(|v| v.is_u64()) {
        doc.insert("version".into(), v.clone());
    }
    doc.insert("steps".into(), steps);
    serde_path_to_error::deserialize(Value::Object(doc))
        .map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

/// A finished `loop_runs` row as a run (ids are placeholders); `None` for a running
/// one.
fn history_run(row: &Row) -> Result<Option<Run>, String> {
    let status: RunStatus = text(row, "status").ok_or("no status")?.parse()?;
    if status == RunStatus::Running {
        return Ok(None);
    }
    let scheduled_for = instant(row, "scheduled_for")?.ok_or("no scheduled_for")?;
    let created_at = instant(row, "created_at")?.unwrap_or(scheduled_for);
    let count = |col: &str| row.get(col).and_then(Value::as_u64);
    let attempt = count("attempt").unwrap_or(1).clamp(1, u64::from(u32::MAX)) as u32;
    // OpenLoops' error may quote the run's output: unless it is just the exit status
    // in our words, it is kept as output (`errorOutput`), and the error says what
    // happened in ours.
    let exit_code = row.get("exit_code").and_then(Value::as_i64);
    let (error, error_output) = match (text(row, "error"), exit_code) {
        (None, _) => (None, None),
        (Some(e), Some(code)) if e == format!("exited with status {code}") => (Some(e), None),
        (Some(e), Some(code)) if code != 0 => (Some(format!("exited with status {code}")), Some(e)),
        (Some(e), _) => (Some(format!("{status} in OpenLoops")), Some(e)),
    };
    Ok(Some(Run {
        loop_name: text(row, "loop_name").unwrap_or_default(),
        due_at: Some(scheduled_for),
        started_at: instant(row, "started_at")?,
        finished_at: instant(row, "finished_at")?,
        exit_code: exit_code.and_then(|c| i32::try_from(c).ok()),
        duration_ms: count("duration_ms"),
        stdout: text(row, "stdout"),
        stderr: text(row, "stderr"),
        error,
        error_output,
        claimed_by: text(row, "claimed_by"),
        updated_at: instant(row, "updated_at")?.unwrap_or(created_at),
        ..Run::history(scheduled_for, attempt, status, created_at)
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Schedule, Target};
    use serde_json::json;

    fn row(v: Value) -> Row {
        v.as_object().unwrap().clone()
    }

    fn loop_row(id: &str, name: &str, schedule: Value, target: Value) -> Row {
        row(json!({
            "id": id, "name": name, "description": null, "status": "active",
            "schedule_json": schedule.to_string(), "target_json": target.to_string(),
            "next_run_at": "2026-12-01T10:00:00.000Z", "retry_scheduled_for": null,
            "catch_up": "all", "catch_up_limit": 5, "overlap": "allow", "max_attempts": 2,
            "retry_delay_ms": 1000, "lease_ms": 60000, "expires_at": null,
            "created_at": "2026-11-01T00:00:00.000Z", "updated_at": "2026-11-01T00:00:00.000Z",
        }))
    }

    /// The class of the `bundle_import` fuzz finding: instants finer than a
    /// millisecond are read at millisecond precision, as a store keeps them.
    #[test]
    fn instants_are_read_at_millisecond_precision() {
        let mut lp = loop_row(
            "l1",
            "fine",
            json!({"type": "interval", "everyMs": 60000}),
            json!({"type": "command", "command": "x"}),
        );
        lp.insert(
            "next_run_at".into(),
            json!("2026-12-01T10:00:00.123456789Z"),
        );
        let tables = OpenLoopsTables {
            loops: vec![lp],
            loop_runs: vec![row(
                json!({"id": "r1", "loop_id": "l1", "scheduled_for": "2026-11-30T00:00:00.000999Z",
                       "attempt": 1, "status": "succeeded", "created_at": "2026-11-30T00:00:01.5004Z",
                       "finished_at": "2026-11-30T00:00:02.0000001Z"}),
            )],
            ..OpenLoopsTables::default()
        };
        let got = map(&tables, "UTC");
        let next = got.loops[0].definition.next_run_at.unwrap();
        assert_eq!(next.timestamp_subsec_nanos(), 123_000_000);
        let run = &got.loops[0].history[0];
        assert_eq!(run.scheduled_for.timestamp_subsec_nanos(), 0);
        assert_eq!(run.created_at.timestamp_subsec_nanos(), 500_000_000);
        assert_eq!(run.finished_at.unwrap().timestamp_subsec_nanos(), 0);
    }

    /// Provider options in an agent target's JSON read as they are (the field names
    /// are ours and OpenLoops' alike); no seed of OpenLoops shows other names for them.
    #[test]
    fn an_agent_targets_provider_options_are_carried_over() {
        let tables = OpenLoopsTables {
            loops: vec![loop_row(
                "l1",
                "review",
                json!({"type": "interval", "everyMs": 60000}),
                json!({"type": "agent", "provider": "claude", "prompt": "hi",
                       "permissionMode": "plan", "effort": "high", "addDirs": ["/data"],
                       "maxTurns": 5, "allowTools": ["Read"], "denyTools": ["WebFetch"]}),
            )],
            ..OpenLoopsTables::default()
        };
        let got = map(&tables, "UTC");
        let Target::Agent(a) = &got.loops[0].definition.target else {
            panic!("{:?}", got.loops[0].definition.target);
        };
        assert_eq!(a.permission_mode.as_deref(), Some("plan"));
        assert_eq!(a.effort.as_deref(), Some("high"));
        assert_eq!(a.add_dirs, ["/data"]);
        assert_eq!(a.max_turns, Some(5));
        assert_eq!((a.allow_tools.len(), a.deny_tools.len()), (1, 1));
    }

    #[test]
    fn maps_rows_and_notes_what_it_cannot_carry_over() {
        let mut retrying = loop_row(
            "l2",
            "review",
            json!({"type": "cron", "expression": "0 9 * * *"}),
            json!({"type": "agent", "provider": "claude", "prompt": "hi", "account": {"profile": "work"}}),
        );
        retrying.insert(
            "retry_scheduled_for".into(),
            json!("2026-12-01T09:00:00.000Z"),
        );
        retrying.insert("owner".into(), json!("ops"));
        let tables = OpenLoopsTables {
            loops: vec![
                loop_row(
                    "l1",
                    "ship",
                    json!({"type": "interval", "everyMs": 60000}),
                    json!({"type": "workflow", "workflowId": "w2"}),
                ),
                retrying,
                loop_row(
                    "l3",
                    "broken",
                    json!({"type": "hourly"}),
                    json!({"type": "command", "command": "x"}),
                ),
                loop_row(
                    "l4",
                    "ship",
                    json!({"type": "interval", "everyMs": 1000}),
                    json!({"type": "command", "command": "y", "timeoutMs": 5}),
                ),
            ],
            workflow_specs: vec![
                row(
                    json!({"id": "w1", "name": "release", "status": "archived", "version": 1,
                           "steps_json": "[]"}),
                ),
                row(
                    json!({"id": "w2", "name": "release", "status": "active", "version": 2,
                           "description": "d",
                           "steps_json": json!([{"id": "a", "target": {"type": "command", "command": "make"}}]).to_string()}),
                ),
            ],
            loop_runs: vec![
                row(
                    json!({"id": "r1", "loop_id": "l1", "loop_name": "ship", "scheduled_for": "2026-11-30T00:00:00.000Z",
                           "attempt": 2, "status": "failed", "exit_code": 3, "created_at": "2026-11-30T00:00:01.000Z",
                           "finished_at": "2026-11-30T00:00:02.000Z"}),
                ),
                row(
                    json!({"id": "r2", "loop_id": "l1", "scheduled_for": "2026-11-30T00:01:00.000Z",
                           "attempt": 1, "status": "running", "created_at": "2026-11-30T00:01:00.000Z"}),
                ),
                row(
                    json!({"id": "r3", "loop_id": "l3", "scheduled_for": "2026-11-30T00:01:00.000Z",
                           "attempt": 1, "status": "succeeded", "created_at": "2026-11-30T00:01:00.000Z"}),
                ),
            ],
            workflow_runs: 4,
        };
        let got = map(&tables, "Europe/Berlin");
        assert!(got.lenient);
        let names: Vec<&str> = got
            .loops
            .iter()
            .map(|l| l.definition.name.as_str())
            .collect();
        assert_eq!(names, ["ship", "review"]);
        let ship = &got.loops[0].definition;
        assert!(matches!(&ship.target, Target::Workflow(w) if w.workflow == "release"));
        assert!(matches!(
            ship.schedule,
            Schedule::Interval {
                anchor: crate::Anchor::FixedRate,
                ..
            }
        ));
        assert_eq!(
            (ship.max_attempts, ship.catch_up_limit, ship.retry_delay_ms),
            (2, 5, 1000)
        );
        assert_eq!(ship.overlap, crate::Overlap::Allow);
        assert_eq!(
            crate::format_instant(&ship.next_run_at.unwrap()),
            "2026-12-01T10:00:00.000Z"
        );
        let history = &got.loops[0].history;
        assert_eq!(history.len(), 1);
        assert_eq!(
            (history[0].attempt, history[0].status, history[0].exit_code),
            (2, RunStatus::Failed, Some(3))
        );
        let review = &got.loops[1].definition;
        assert!(
            matches!(&review.schedule, Schedule::Cron { timezone, .. } if timezone == "Europe/Berlin")
        );
        match &review.target {
            Target::Agent(a) => {
                assert_eq!(
                    a.timeout.map(|d| d.as_millis()),
                    Some(OPENLOOPS_DEFAULT_TIMEOUT_MS)
                );
                assert_eq!(a.account.as_ref().unwrap().profile, "work");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(got.workflows.len(), 1);
        assert_eq!(got.workflows[0].spec.version, 2);
        assert_eq!(got.workflows[0].spec.description.as_deref(), Some("d"));
        let notes = got.notes.join("\n");
        for needle in [
            "1 archived workflow spec version(s) not imported",
            "loop \"review\": no timeout there means OpenLoops' default",
            "loop \"review\": its pending retry of slot 2026-12-01T09:00:00.000Z is not carried over",
            "loop \"broken\": not imported: schedule",
            "loop \"ship\": a second loop of this name is not imported",
            "loops.owner: not mapped (set on 1 loop(s))",
            "1 running run(s) not imported",
            "1 run(s) of loops not imported left behind",
            "4 workflow run(s) not imported",
        ] {
            assert!(notes.contains(needle), "{needle:?} not in:\n{notes}");
        }
        assert_eq!(got.notes.iter().filter(|n| n.contains('\n')).count(), 0);
    }
}
