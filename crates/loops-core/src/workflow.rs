//! Workflow specs: JSON-defined DAGs of steps, their validation, and the DAG rules the
//! runner follows (which steps are ready, which must be skipped). Pure: reading a
//! `promptFile` is the front end's job; validation runs after it filled the prompt.

use crate::validate::{self, ValidationError};
use crate::{
    Account, AgentTarget, CommandTarget, Duration, Instant, LoopId, RunId, StepId, StepRunId,
    StepStatus, WorkflowEventType, WorkflowId, WorkflowRunId, WorkflowRunStatus, WorkflowStatus,
};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Steps of one workflow run executing at once unless the spec says otherwise.
pub const DEFAULT_MAX_PARALLEL: u32 = 4;

/// A workflow spec as written by the user (and stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default = "one")]
    pub version: u32,
    /// Most steps running at once (default [`DEFAULT_MAX_PARALLEL`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    /// The params a run gives values for (`${params.NAME}` in the steps;
    /// [`crate::workflow_params`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<crate::workflow_params::Param>,
    pub steps: Vec<Step>,
}

fn one() -> u32 {
    1
}

impl WorkflowSpec {
    /// The effective parallelism bound.
    pub fn max_parallel(&self) -> usize {
        self.max_parallel.unwrap_or(DEFAULT_MAX_PARALLEL).max(1) as usize
    }
}

/// One node of the DAG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Step {
    pub id: StepId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub target: StepTarget,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<StepId>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_on_failure: bool,
    /// Step timeout: `"30s"` or milliseconds; overrides the target's own. JSON:
    /// `timeout` or `timeoutMs` (written as `timeoutMs`).
    #[serde(
        default,
        rename = "timeoutMs",
        alias = "timeout",
        deserialize_with = "duration_or_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<Account>,
}

/// What a step runs. Command steps exec directly unless `shell: true`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
// As `Target`: one per step, not worth a box.
#[allow(clippy::large_enum_variant)]
pub enum StepTarget {
    Command(CommandTarget),
    Agent(AgentTarget),
}

impl Step {
    /// The step's effective timeout (its own, else its target's).
    pub fn effective_timeout(&self) -> Option<Duration> {
        self.timeout.or(match &self.target {
            StepTarget::Command(c) => c.timeout,
            StepTarget::Agent(a) => a.timeout,
        })
    }

    /// The provider an agent step runs (`None` for a command step).
    pub fn provider(&self) -> Option<crate::Provider> {
        match &self.target {
            StepTarget::Command(_) => None,
            StepTarget::Agent(a) => Some(a.provider),
        }
    }

    /// The account a step runs under (its own, else its target's).
    pub fn account(&self) -> Option<&Account> {
        self.account.as_ref().or(match &self.target {
            StepTarget::Command(c) => c.account.as_ref(),
            StepTarget::Agent(a) => a.account.as_ref(),
        })
    }
}

fn duration_or_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Ms(u64),
        Text(String),
    }
    match Option::<Raw>::deserialize(d)? {
        None => Ok(None),
        Some(Raw::Ms(0)) => Err(serde::de::Error::custom(
            "timeout must be greater than zero",
        )),
        Some(Raw::Ms(ms)) => Ok(Duration::from_millis(ms)),
        Some(Raw::Text(t)) => Duration::parse(&t)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// A spec that cannot be used, with a message naming the step and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WorkflowError(pub String);

/// Parses spec JSON; errors carry the JSON path (`steps[1].dependOn: unknown field …`).
/// Text longer than [`crate::limits::MAX_SPEC_BYTES`] is refused before parsing.
pub fn parse_spec(json: &str) -> Result<WorkflowSpec, WorkflowError> {
    crate::limits::check("workflow spec", json.len(), crate::limits::MAX_SPEC_BYTES)
        .map_err(WorkflowError)?;
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            WorkflowError(format!("invalid workflow spec: {inner}"))
        } else {
            WorkflowError(format!("invalid workflow spec at {path}: {inner}"))
        }
    })
}

/// Checks a spec; every problem found, joined on one line.
pub fn validate(spec: &WorkflowSpec) -> Result<(), WorkflowError> {
    let mut problems = Vec::new();
    if spec.name.trim().is_empty() {
        problems.push("workflow name is empty".to_owned());
    }
    if spec.steps.is_empty() {
        problems.push("workflow has no steps".to_owned());
    }
    if spec.max_parallel == Some(0) {
        problems.push("maxParallel must be at least 1".to_owned());
    }
    let mut sized = |what: String, len: usize, limit: usize| {
        if let Err(e) = crate::limits::check(&what, len, limit) {
            problems.push(e);
        }
    };
    use crate::limits::{MAX_DESCRIPTION_BYTES, MAX_FIELD_BYTES, MAX_WORKFLOW_PROMPTS_BYTES};
    sized("workflow name".into(), spec.name.len(), MAX_FIELD_BYTES);
    let len = |t: &Option<String>| t.as_deref().map_or(0, str::len);
    sized(
        "workflow description".into(),
        len(&spec.description),
        MAX_DESCRIPTION_BYTES,
    );
    use crate::text::Lines;
    let mut plain = |what: &str, text: Option<&str>, lines: Lines, label: &str| {
        if let Err(e) = validate::no_controls(what, text.unwrap_or(""), lines, label) {
            problems.push(e.0);
        }
    };
    plain("name", Some(&spec.name), Lines::One, "workflow");
    plain(
        "description",
        spec.description.as_deref(),
        Lines::Many,
        "workflow",
    );
    for step in &spec.steps {
        let label = format!("step {:?}", truncated(step.id.as_str()));
        plain("id", Some(step.id.as_str()), Lines::One, &label);
        plain("name", step.name.as_deref(), Lines::One, &label);
        plain(
            "description",
            step.description.as_deref(),
            Lines::Many,
            &label,
        );
    }
    let mut sized = |what: String, len: usize, limit: usize| {
        if let Err(e) = crate::limits::check(&what, len, limit) {
            problems.push(e);
        }
    };
    for step in &spec.steps {
        let label = format!("step {:?}", truncated(step.id.as_str()));
        sized(
            format!("{label}: id"),
            step.id.as_str().len(),
            MAX_FIELD_BYTES,
        );
        sized(format!("{label}: name"), len(&step.name), MAX_FIELD_BYTES);
        sized(
            format!("{label}: description"),
            len(&step.description),
            MAX_DESCRIPTION_BYTES,
        );
    }
    let prompts: usize = spec
        .steps
        .iter()
        .map(|s| match &s.target {
            StepTarget::Agent(a) => a.prompt.len(),
            StepTarget::Command(_) => 0,
        })
        .sum();
    sized(
        "all prompts of the workflow together".into(),
        prompts,
        MAX_WORKFLOW_PROMPTS_BYTES,
    );
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for step in &spec.steps {
        if step.id.as_str().trim().is_empty() {
            problems.push("a step has an empty id".to_owned());
            continue;
        }
        if seen.insert(step.id.as_str(), 0).is_some() {
            problems.push(format!("duplicate step id {:?}", step.id));
        }
    }
    for step in &spec.steps {
        let label = format!("step {:?}", step.id);
        for dep in &step.depends_on {
            if dep == &step.id {
                problems.push(format!("{label} depends on itself"));
            } else if !seen.contains_key(dep.as_str()) {
                problems.push(format!("{label} depends on unknown step {dep:?}"));
            }
        }
        let checked: Result<(), ValidationError> = match &step.target {
            StepTarget::Command(c) => validate::command(c, &label),
            StepTarget::Agent(a) if crate::session::continues(a.session) => {
                Err(ValidationError(format!(
                    "{label}: session continue is for agent loops; a workflow step always starts fresh"
                )))
            }
            // A pool's choice is made at a loop's claim and recorded on its run; a step
            // has neither, so it would silently run under no account.
            StepTarget::Agent(a) if !a.account_pool.is_empty() => Err(ValidationError(format!(
                "{label}: accountPool is for agent loops; a workflow step names its account"
            ))),
            StepTarget::Agent(a) => validate::agent(a, &label),
        };
        if let Err(e) = checked {
            problems.push(e.0);
        }
    }
    problems.extend(crate::workflow_params::problems(spec));
    if problems.is_empty() {
        if let Some(cycle) = find_cycle(spec) {
            problems.push(format!("dependency cycle: {}", cycle.join(" → ")));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(WorkflowError(problems.join("; ")))
    }
}

/// At most the first 40 characters of a (possibly huge) user string, for messages.
pub(crate) fn truncated(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Each step's dependencies as indices into `spec.steps`; one naming no step is left
/// out ([`validate()`] reports it).
fn dependency_indices(spec: &WorkflowSpec) -> Vec<Vec<usize>> {
    let index: HashMap<&str, usize> = spec
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    spec.steps
        .iter()
        .map(|s| {
            s.depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect()
        })
        .collect()
}

/// A cycle as step ids, first repeated at the end (`a → b → a`), if any.
fn find_cycle(spec: &WorkflowSpec) -> Option<Vec<String>> {
    let deps = dependency_indices(spec);
    // Iterative DFS with colours; the grey stack is the current path.
    let mut colour = vec![0u8; deps.len()];
    for start in 0..deps.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        colour[start] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&dep) = deps[node].get(*next) {
                *next += 1;
                match colour[dep] {
                    0 => {
                        colour[dep] = 1;
                        stack.push((dep, 0));
                    }
                    1 => {
                        let from = stack.iter().position(|(n, _)| *n == dep).unwrap_or(0);
                        let mut path: Vec<String> = stack[from..]
                            .iter()
                            .map(|(n, _)| spec.steps[*n].id.to_string())
                            .collect();
                        // Edges point at dependencies; print in execution order.
                        path.reverse();
                        path.push(path[0].clone());
                        return Some(path);
                    }
                    _ => {}
                }
            } else {
                colour[node] = 2;
                stack.pop();
            }
        }
    }
    None
}

/// The DAG of a validated spec, by step index.
#[derive(Debug, Clone)]
pub struct Dag {
    deps: Vec<Vec<usize>>,
    continue_on_failure: Vec<bool>,
}

/// What the runner should do with a pending step now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Every dependency is satisfied: start it.
    Ready,
    /// Some dependency has not finished.
    Waiting,
    /// A dependency ended without satisfying it: skip with this reason.
    Blocked(String),
}

impl Dag {
    /// Builds the DAG; the spec must have passed [`validate()`].
    pub fn new(spec: &WorkflowSpec) -> Self {
        Self {
            deps: dependency_indices(spec),
            continue_on_failure: spec.steps.iter().map(|s| s.continue_on_failure).collect(),
        }
    }

    /// Number of steps.
    pub fn len(&self) -> usize {
        self.deps.len()
    }

    /// Whether the DAG has no steps.
    pub fn is_empty(&self) -> bool {
        self.deps.is_empty()
    }

    /// Indices of the steps `step` depends on.
    pub fn dependencies(&self, step: usize) -> &[usize] {
        &self.deps[step]
    }

    /// Whether a pending step can start given every step's status. A dependency counts
    /// as satisfied when it succeeded, or failed / timed out with `continueOnFailure`.
    pub fn readiness(&self, step: usize, states: &[StepStatus], ids: &[&str]) -> Readiness {
        let mut waiting = false;
        for &dep in &self.deps[step] {
            match states[dep] {
                StepStatus::Succeeded => {}
                StepStatus::Failed | StepStatus::TimedOut if self.continue_on_failure[dep] => {}
                StepStatus::Pending | StepStatus::Running => waiting = true,
                other => {
                    return Readiness::Blocked(format!("dependency {:?} {}", ids[dep], other));
                }
            }
        }
        if waiting {
            Readiness::Waiting
        } else {
            Readiness::Ready
        }
    }

    /// Whether a failed step stops the whole run.
    pub fn failure_stops_run(&self, step: usize) -> bool {
        !self.continue_on_failure[step]
    }

    /// Depth of each step (0 for roots): the levels `inspect` prints.
    pub fn levels(&self) -> Vec<usize> {
        let mut level = vec![usize::MAX; self.deps.len()];
        fn depth(i: usize, deps: &[Vec<usize>], level: &mut [usize], guard: usize) -> usize {
            if level[i] != usize::MAX {
                return level[i];
            }
            if guard > deps.len() {
                return 0; // cycles are rejected by validation; never loop forever
            }
            let d = deps[i]
                .iter()
                .map(|&p| depth(p, deps, level, guard + 1) + 1)
                .max()
                .unwrap_or(0);
            level[i] = d;
            d
        }
        for i in 0..self.deps.len() {
            depth(i, &self.deps, &mut level, 0);
        }
        level
    }
}

/// A stored workflow spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Workflow {
    pub id: WorkflowId,
    pub name: String,
    pub version: u32,
    pub status: WorkflowStatus,
    pub spec: WorkflowSpec,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Instant,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
}

/// Where a workflow run came from when a loop started it: it belongs to that slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOrigin {
    pub loop_id: LoopId,
    pub loop_run_id: RunId,
    pub scheduled_for: Instant,
}

impl RunOrigin {
    /// The idempotency key of the slot: `loopId:scheduledFor`.
    pub fn key(&self) -> String {
        format!(
            "{}:{}",
            self.loop_id,
            crate::format_instant(&self.scheduled_for)
        )
    }
}

/// One execution of a workflow spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowRun {
    pub id: WorkflowRunId,
    pub workflow_id: WorkflowId,
    pub workflow_name: String,
    pub loop_id: Option<LoopId>,
    pub loop_run_id: Option<RunId>,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub scheduled_for: Option<Instant>,
    pub idempotency_key: Option<String>,
    pub status: WorkflowRunStatus,
    /// How many times this run was started (a slot retry or restart continues it).
    pub attempt: u32,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub started_at: Option<Instant>,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub finished_at: Option<Instant>,
    pub duration_ms: Option<u64>,
    pub error: Option<String>,
    /// Set by `workflows cancel`; the runner stops within a second.
    pub cancel_requested: Option<String>,
    /// The values of the spec's params this run uses (every declared param, defaults
    /// filled in); a continued run keeps them. Redacted in listings as env values are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: crate::workflow_params::ParamValues,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Instant,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
}

impl WorkflowRun {
    /// A new run `id` of `workflow` created at `now` (for `origin`'s slot, when a loop
    /// started it) with `params`: running, no attempt yet. What both stores insert.
    pub fn created(
        id: WorkflowRunId,
        workflow: &Workflow,
        origin: Option<&RunOrigin>,
        params: &crate::workflow_params::ParamValues,
        now: Instant,
    ) -> Self {
        Self {
            id,
            workflow_id: workflow.id.clone(),
            workflow_name: workflow.name.clone(),
            loop_id: origin.map(|o| o.loop_id.clone()),
            loop_run_id: origin.map(|o| o.loop_run_id.clone()),
            scheduled_for: origin.map(|o| o.scheduled_for),
            idempotency_key: origin.map(RunOrigin::key),
            status: WorkflowRunStatus::Running,
            attempt: 0,
            started_at: Some(now),
            finished_at: None,
            duration_ms: None,
            error: None,
            cancel_requested: None,
            params: params.clone(),
            created_at: now,
            updated_at: now,
        }
    }
}

/// One step of one workflow run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepRun {
    pub id: StepRunId,
    pub workflow_run_id: WorkflowRunId,
    pub step_id: StepId,
    pub sequence: u32,
    pub status: StepStatus,
    /// How many times the step was started across the run's attempts.
    pub attempts: u32,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub started_at: Option<Instant>,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub finished_at: Option<Instant>,
    pub exit_code: Option<i32>,
    pub pid: Option<u32>,
    pub pid_start_time: Option<u64>,
    pub duration_ms: Option<u64>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    /// Why the step did not succeed, in our own words only, like a run's `error`.
    pub error: Option<String>,
    /// What the failure quoted from the step's output, like a run's `errorOutput`:
    /// redacted like its stdout/stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_output: Option<String>,
    pub account_profile: Option<String>,
    pub account_tool: Option<String>,
    /// An agent step's provider, recorded when the run was created: its spend counts
    /// against that provider's store-wide budgets (`loops_core::budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<crate::Provider>,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Instant,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
    /// An agent step's final message, parsed from its provider's output: output,
    /// redacted where stdout is.
    #[serde(default)]
    pub summary: Option<String>,
    /// An agent step's token and cost usage, when its provider reports it.
    #[serde(default)]
    pub usage: Option<crate::Usage>,
    /// The step's process outlived a runner that died, so its exit status could not
    /// be known. Recorded as `failed`; never started again, by the continuing run or
    /// by a later attempt of its slot (its side effects may have happened).
    #[serde(default)]
    pub exit_status_unknown: bool,
}

/// An entry of a workflow run's append-only event log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowEvent {
    pub id: String,
    pub workflow_run_id: WorkflowRunId,
    pub sequence: u64,
    pub event_type: WorkflowEventType,
    pub step_id: Option<StepId>,
    pub payload: serde_json::Value,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Instant,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_type: WorkflowEventType,
    pub step_id: Option<StepId>,
    pub payload: serde_json::Value,
}

impl NewEvent {
    /// An event of `event_type`, about `step_id` when it concerns one step.
    pub fn new(
        event_type: WorkflowEventType,
        step_id: Option<&StepId>,
        payload: serde_json::Value,
    ) -> Self {
        Self {
            event_type,
            step_id: step_id.cloned(),
            payload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Result<WorkflowSpec, WorkflowError> {
        let spec = parse_spec(json)?;
        validate(&spec)?;
        Ok(spec)
    }

    fn cmd_step(id: &str, deps: &[&str]) -> String {
        format!(
            r#"{{"id":"{id}","target":{{"type":"command","command":"true"}},"dependsOn":[{}]}}"#,
            deps.iter()
                .map(|d| format!("\"{d}\""))
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    fn wf(steps: &[String]) -> String {
        format!(r#"{{"name":"w","steps":[{}]}}"#, steps.join(","))
    }

    #[test]
    fn parses_a_diamond() {
        let s = spec(&wf(&[
            cmd_step("a", &[]),
            cmd_step("b", &["a"]),
            cmd_step("c", &["a"]),
            cmd_step("d", &["b", "c"]),
        ]))
        .unwrap();
        assert_eq!(s.version, 1);
        let dag = Dag::new(&s);
        assert_eq!(dag.levels(), vec![0, 1, 1, 2]);
        let ids = ["a", "b", "c", "d"];
        let mut states = vec![StepStatus::Pending; 4];
        assert_eq!(dag.readiness(0, &states, &ids), Readiness::Ready);
        assert_eq!(dag.readiness(1, &states, &ids), Readiness::Waiting);
        states[0] = StepStatus::Succeeded;
        states[1] = StepStatus::Failed;
        states[2] = StepStatus::Succeeded;
        assert_eq!(
            dag.readiness(3, &states, &ids),
            Readiness::Blocked("dependency \"b\" failed".into())
        );
    }

    #[test]
    fn continue_on_failure_satisfies_dependents() {
        let b =
            r#"{"id":"b","continueOnFailure":true,"target":{"type":"command","command":"false"}}"#
                .to_owned();
        let s = spec(&wf(&[b, cmd_step("d", &["b"])])).unwrap();
        let dag = Dag::new(&s);
        assert_eq!(
            dag.readiness(1, &[StepStatus::Failed, StepStatus::Pending], &["b", "d"]),
            Readiness::Ready
        );
        assert!(!dag.failure_stops_run(0));
    }

    #[test]
    fn rejects_cycles_naming_the_path() {
        let err = spec(&wf(&[cmd_step("a", &["b"]), cmd_step("b", &["a"])])).unwrap_err();
        assert!(
            err.0 == "dependency cycle: a → b → a" || err.0 == "dependency cycle: b → a → b",
            "{err}"
        );
        let err = spec(&wf(&[
            cmd_step("x", &[]),
            cmd_step("a", &["c"]),
            cmd_step("b", &["a"]),
            cmd_step("c", &["b"]),
        ]))
        .unwrap_err();
        assert!(err.0.starts_with("dependency cycle: "), "{err}");
        for id in ["a", "b", "c"] {
            assert!(err.0.contains(id), "{err}");
        }
    }

    #[test]
    fn every_validation_problem_is_named() {
        let cases = [
            (
                r#"{"name":"","steps":[]}"#.to_owned(),
                "workflow name is empty; workflow has no steps",
            ),
            (
                wf(&[cmd_step("a", &[]), cmd_step("a", &[])]),
                "duplicate step id \"a\"",
            ),
            (
                wf(&[cmd_step("a", &["zz"])]),
                "step \"a\" depends on unknown step \"zz\"",
            ),
            (wf(&[cmd_step("a", &["a"])]), "step \"a\" depends on itself"),
            (
                wf(&[
                    r#"{"id":"a","target":{"type":"command","command":"git status"}}"#.to_owned(),
                ]),
                "put flags in args or set shell true",
            ),
            (
                wf(&[
                    r#"{"id":"a","target":{"type":"agent","provider":"claude","prompt":" "}}"#
                        .to_owned(),
                ]),
                "step \"a\": prompt is empty",
            ),
            (
                wf(&[
                    r#"{"id":"a","target":{"type":"agent","provider":"claude","prompt":"p","accountPool":["a","b"]}}"#
                        .to_owned(),
                ]),
                "step \"a\": accountPool is for agent loops; a workflow step names its account",
            ),
        ];
        for (json, needle) in cases {
            let err = spec(&json).unwrap_err();
            assert!(err.0.contains(needle), "{json}: {err}");
        }
    }

    #[test]
    fn sizes_are_bounded() {
        use crate::limits::*;
        let padded = format!(
            "{}{}",
            wf(&[cmd_step("a", &[])]),
            " ".repeat(MAX_SPEC_BYTES)
        );
        assert_eq!(
            parse_spec(&padded).unwrap_err().0,
            "workflow spec is larger than 1 MiB"
        );
        let agent = |id: &str, bytes: usize| {
            format!(
                r#"{{"id":"{id}","target":{{"type":"agent","provider":"claude","prompt":"{}"}}}}"#,
                "p".repeat(bytes)
            )
        };
        let big = agent("a", MAX_PROMPT_BYTES + 1);
        let err = validate(&serde_json::from_str(&wf(&[big])).unwrap()).unwrap_err();
        assert!(
            err.0.contains("step \"a\": prompt is larger than 1 MiB"),
            "{err}"
        );
        let steps: Vec<String> = (0..5)
            .map(|i| agent(&format!("s{i}"), MAX_PROMPT_BYTES))
            .collect();
        let err = validate(&serde_json::from_str(&wf(&steps)).unwrap()).unwrap_err();
        assert_eq!(
            err.0,
            "all prompts of the workflow together is larger than 4 MiB"
        );
        let described = format!(
            r#"{{"name":"w","description":"{}","steps":[{}]}}"#,
            "d".repeat(MAX_DESCRIPTION_BYTES + 1),
            cmd_step("a", &[])
        );
        assert_eq!(
            spec(&described).unwrap_err().0,
            "workflow description is larger than 4 KiB"
        );
    }

    #[test]
    fn unknown_fields_and_providers_are_rejected_with_their_path() {
        let err = spec(&wf(&[
            r#"{"id":"a","dependOn":[],"target":{"type":"command","command":"true"}}"#.to_owned(),
        ]))
        .unwrap_err();
        assert!(
            err.0.starts_with("invalid workflow spec at steps[0]"),
            "{err}"
        );
        assert!(err.0.contains("dependOn"), "{err}");
        let err = spec(&wf(&[
            r#"{"id":"a","target":{"type":"command","command":"true","shel":true}}"#.to_owned(),
        ]))
        .unwrap_err();
        assert!(
            err.0.contains("steps[0].target") && err.0.contains("shel"),
            "{err}"
        );
        let err = spec(&wf(&[
            r#"{"id":"a","target":{"type":"agent","provider":"gpt","prompt":"x"}}"#.to_owned(),
        ]))
        .unwrap_err();
        assert!(
            err.0.contains("steps[0].target") && err.0.contains("gpt"),
            "{err}"
        );
    }

    #[test]
    fn timeouts_accept_text_or_ms() {
        let s = spec(&wf(&[
            r#"{"id":"a","timeout":"1.5s","target":{"type":"command","command":"true"}}"#
                .to_owned(),
        ]))
        .unwrap();
        assert_eq!(
            s.steps[0].effective_timeout().map(Duration::as_millis),
            Some(1500)
        );
        let s = spec(&wf(&[
            r#"{"id":"a","timeoutMs":200,"target":{"type":"command","command":"true"}}"#.to_owned(),
        ]))
        .unwrap();
        assert_eq!(
            s.steps[0].effective_timeout().map(Duration::as_millis),
            Some(200)
        );
        // Round trip through our own serialization.
        let back = parse_spec(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        // A target's timeout is a duration too: zero is refused with its path.
        let err = spec(&wf(&[
            r#"{"id":"a","target":{"type":"command","command":"true","timeoutMs":0}}"#.to_owned(),
        ]))
        .unwrap_err();
        assert!(
            err.0
                .starts_with("invalid workflow spec at steps[0].target")
                && err.0.contains("greater than zero"),
            "{err}"
        );
    }
}
