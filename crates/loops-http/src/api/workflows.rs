//! `/v1/workflows` and `/v1/workflow-runs`: specs (list, show, validate, create, run)
//! and their runs (list, inspect, cancel), as `loops workflows …` does them.

use super::blocking;
use crate::error::{ApiError, ErrorBody};
use crate::request::{optional_json, read_body, Params};
use crate::State;
use axum::extract::{Path, RawQuery, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use loops_core::workflow::{Step, StepRun, Workflow, WorkflowEvent, WorkflowRun, WorkflowSpec};
use loops_core::WorkflowStatus;
use serde::Serialize;

/// A stored workflow as `loops workflows show --json` prints it (OpenLoops 0.3's
/// shape): the record's fields with the spec's at top level, prompts and env values
/// redacted.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the runtime's document
pub struct WorkflowDocument {
    pub id: String,
    pub name: String,
    pub version: u32,
    pub status: WorkflowStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    pub steps: Vec<Step>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: String,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: String,
}

/// The document `loops workflows show --json` prints (the runtime's, shared).
fn document(w: &Workflow) -> serde_json::Value {
    loops_runtime::workflow_file::workflow_json(w)
}

/// What validate answers (`loops workflows validate --json`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Validated {
    pub valid: bool,
    pub name: String,
    pub steps: usize,
    /// The params the spec declares (left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<loops_core::workflow_params::Param>,
}

/// A workflow run with its steps (`loops workflows run --json`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRunDocument {
    pub workflow_run: WorkflowRun,
    pub steps: Vec<StepRun>,
}

/// A workflow run with its steps and events (`loops workflows inspect --json`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InspectDocument {
    pub workflow_run: WorkflowRun,
    pub steps: Vec<StepRun>,
    pub events: Vec<WorkflowEvent>,
}

/// What a run of a workflow is given.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    /// Values for the workflow's params, by name (checked against its spec: an unknown
    /// name or a missing required param is a 400 in the spec's words).
    #[serde(default)]
    pub params: std::collections::BTreeMap<String, String>,
}

/// Why a cancel was asked for.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Recorded with the cancellation (default "cancelled over HTTP").
    #[serde(default)]
    pub reason: Option<String>,
}

/// A spec sent over HTTP: parsed and validated as a spec file is; its paths (a step's
/// `cwd`, a `promptFile`) must be absolute, since there is no file to be relative to,
/// and a `promptFile` is not read (its prompt comes in `prompt`).
pub(crate) fn spec_from(bytes: &[u8]) -> Result<WorkflowSpec, ApiError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::invalid("invalid JSON body: not UTF-8"))?;
    if text.trim().is_empty() {
        return Err(ApiError::invalid(
            "the request body is empty; send a workflow spec",
        ));
    }
    let spec = loops_core::workflow::parse_spec(text)
        .map_err(|e| ApiError::invalid(format!("invalid workflow spec: {e}")))?;
    for step in &spec.steps {
        if let loops_core::workflow::StepTarget::Agent(a) = &step.target {
            if a.prompt_file.is_some() && a.prompt.trim().is_empty() {
                return Err(ApiError::invalid(format!(
                    "step {:?}: promptFile is not read over HTTP; send the prompt's text in prompt",
                    step.id
                )));
            }
        }
    }
    loops_core::workflow::validate(&spec)
        .map_err(|e| ApiError::invalid(format!("invalid workflow spec: {e}")))?;
    Ok(spec)
}

fn unreadable_status(s: &str) -> ApiError {
    ApiError::invalid(format!(
        "invalid status {s:?}: expected one of active, archived"
    ))
}

/// Active specs (or archived ones, or all).
#[utoipa::path(get, path = "/v1/workflows", tag = "workflows",
    params(
        ("status" = Option<WorkflowStatus>, Query, description = "Only specs of this status (default active)."),
        ("all" = Option<bool>, Query, description = "Every status."),
    ),
    responses(
        (status = 200, description = "Specs by name then version (`loops workflows list --json`).", body = Vec<WorkflowDocument>),
        (status = 400, description = "A bad filter.", body = ErrorBody),
    ))]
pub(crate) async fn list(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let p = Params::parse(q.as_deref(), &["status", "all"])?;
    let status = match p.get("status") {
        Some(s) => Some(
            s.parse::<WorkflowStatus>()
                .map_err(|_| unreadable_status(s))?,
        ),
        None if p.flag("all", false)? => None,
        None => Some(WorkflowStatus::Active),
    };
    let list = blocking(&state, move |c| Ok(c.list_workflows(status)?)).await?;
    Ok(Json(list.iter().map(document).collect()))
}

/// One spec, by id (any version), active name, or id prefix.
#[utoipa::path(get, path = "/v1/workflows/{key}", tag = "workflows",
    params(("key" = String, Path, description = "The workflow's id, active name or an unambiguous id prefix.")),
    responses(
        (status = 200, description = "The spec (`loops workflows show --json`).", body = WorkflowDocument),
        (status = 404, description = "No such workflow.", body = ErrorBody),
    ))]
pub(crate) async fn show(
    axum::extract::State(state): axum::extract::State<State>,
    Path(key): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    Params::parse(q.as_deref(), &[])?;
    let w = blocking(&state, move |c| Ok(c.get_workflow(&key)?)).await?;
    Ok(Json(document(&w)))
}

/// Validates a spec without storing it (`loops workflows validate`).
#[utoipa::path(post, path = "/v1/workflows/validate", tag = "workflows",
    request_body = WorkflowSpec,
    responses(
        (status = 200, description = "Valid (`loops workflows validate --json`).", body = Validated),
        (status = 400, description = "Invalid, with the reason.", body = ErrorBody),
    ))]
pub(crate) async fn validate(
    axum::extract::State(state): axum::extract::State<State>,
    req: Request,
) -> Result<Json<Validated>, ApiError> {
    Params::parse(req.uri().query(), &[])?;
    let spec = spec_from(&read_body(req, &state).await?)?;
    Ok(Json(Validated {
        valid: true,
        name: spec.name.clone(),
        steps: spec.steps.len(),
        params: spec.params.clone(),
    }))
}

/// Stores a spec (`loops workflows create [--replace]`).
#[utoipa::path(post, path = "/v1/workflows", tag = "workflows",
    params(("replace" = Option<bool>, Query, description = "Archive the active spec of the name and store this one a version higher.")),
    request_body = WorkflowSpec,
    responses(
        (status = 201, description = "The stored spec (`loops workflows create --json`).", body = WorkflowDocument),
        (status = 400, description = "Invalid spec.", body = ErrorBody),
        (status = 409, description = "An active spec has the name (without replace).", body = ErrorBody),
        (status = 413, description = "Body too large.", body = ErrorBody),
    ))]
pub(crate) async fn create(
    axum::extract::State(state): axum::extract::State<State>,
    req: Request,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let p = Params::parse(req.uri().query(), &["replace"])?;
    let replace = p.flag("replace", false)?;
    let spec = spec_from(&read_body(req, &state).await?)?;
    let w = blocking(&state, move |c| {
        Ok(c.create_workflow(&spec, replace, chrono::Utc::now())?)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(document(&w))))
}

/// A workflow run as answered: its params' values redacted unless `reveal`, as env
/// values are.
fn run_shown(mut run: WorkflowRun, reveal: bool) -> WorkflowRun {
    if !reveal {
        loops_core::redact::redact_workflow_run(&mut run);
    }
    run
}

fn redacted_steps(steps: Vec<StepRun>, reveal: bool) -> Vec<StepRun> {
    steps
        .into_iter()
        .map(|mut s| {
            if !reveal {
                loops_core::redact::redact_step(&mut s);
            }
            s
        })
        .collect()
}

/// Runs a workflow now, in this server (`loops workflows run`), answering once its
/// attempt is recorded (202): follow it with `/v1/workflow-runs/{id}` or the events.
#[utoipa::path(post, path = "/v1/workflows/{key}/run", tag = "workflows",
    params(
        ("key" = String, Path, description = "The workflow's id, active name or an unambiguous id prefix."),
        ("timeout" = Option<String>, Query, description = "Stop the run after this long (`30m`)."),
    ),
    request_body(content = Option<RunBody>, description = "Optional: values for the workflow's params.", content_type = "application/json"),
    responses(
        (status = 202, description = "The run as started, with its steps.", body = WorkflowRunDocument),
        (status = 400, description = "Archived, a bad timeout, or params that do not fit the spec.", body = ErrorBody),
        (status = 404, description = "No such workflow.", body = ErrorBody),
    ))]
pub(crate) async fn run(
    axum::extract::State(state): axum::extract::State<State>,
    Path(key): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let p = Params::parse(req.uri().query(), &["timeout"])?;
    let timeout = p
        .get("timeout")
        .map(|t| {
            loops_core::Duration::parse(t)
                .map_err(|e| ApiError::invalid(format!("invalid timeout: {e}")))
        })
        .transpose()?
        .map(loops_core::Duration::to_std);
    let bytes = read_body(req, &state).await?;
    let params = optional_json::<RunBody>(&bytes)?
        .map(|b| b.params)
        .unwrap_or_default();
    let workflow = blocking(&state, move |c| Ok(c.runnable_workflow(&key)?)).await?;
    let started = state
        .client
        .start_workflow_run(&workflow, timeout, &params)
        .await?;
    let run = started.run.clone();
    let interrupter = started.interrupter();
    let task = tokio::spawn(async move {
        if let Err(e) = started.finish().await {
            tracing::warn!(error = %e, "a workflow run started over HTTP failed");
        }
    });
    state
        .started
        .keep(task, move |reason| interrupter.interrupt(reason));
    let id = run.id.clone();
    let steps = blocking(&state, move |c| Ok(c.step_runs(&id)?)).await?;
    let doc = WorkflowRunDocument {
        workflow_run: run_shown(run, false),
        steps: redacted_steps(steps, false),
    };
    Ok((StatusCode::ACCEPTED, Json(doc)).into_response())
}

fn runs_limit(p: &Params) -> Result<Option<usize>, ApiError> {
    Ok(loops_core::limits::runs_listed(p.count("limit")?))
}

/// Workflow runs newest first (`loops workflows runs [WORKFLOW]`).
#[utoipa::path(get, path = "/v1/workflow-runs", tag = "workflows",
    params(
        ("workflow" = Option<String>, Query, description = "Only runs of this workflow (by name, also archived)."),
        ("limit" = Option<usize>, Query, description = "At most this many (default 20; 0 = all)."),
    ),
    responses(
        (status = 200, description = "Runs newest first (`loops workflows runs --json`).", body = Vec<WorkflowRun>),
        (status = 404, description = "No such workflow.", body = ErrorBody),
    ))]
pub(crate) async fn runs(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<Vec<WorkflowRun>>, ApiError> {
    let p = Params::parse(q.as_deref(), &["workflow", "limit"])?;
    let limit = runs_limit(&p)?;
    let workflow = p.get("workflow").map(str::to_owned);
    let runs = blocking(&state, move |c| {
        Ok(c.workflow_runs(workflow.as_deref(), limit)?)
    })
    .await?;
    Ok(Json(
        runs.into_iter().map(|r| run_shown(r, false)).collect(),
    ))
}

/// The runs of one workflow (`loops workflows runs WORKFLOW`).
#[utoipa::path(get, path = "/v1/workflows/{key}/runs", tag = "workflows",
    params(
        ("key" = String, Path, description = "The workflow's name (also archived), id or id prefix."),
        ("limit" = Option<usize>, Query, description = "At most this many (default 20; 0 = all)."),
    ),
    responses(
        (status = 200, description = "Runs newest first.", body = Vec<WorkflowRun>),
        (status = 404, description = "No such workflow.", body = ErrorBody),
    ))]
pub(crate) async fn runs_of(
    axum::extract::State(state): axum::extract::State<State>,
    Path(key): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<Vec<WorkflowRun>>, ApiError> {
    let p = Params::parse(q.as_deref(), &["limit"])?;
    let limit = runs_limit(&p)?;
    let runs = blocking(&state, move |c| Ok(c.workflow_runs(Some(&key), limit)?)).await?;
    Ok(Json(
        runs.into_iter().map(|r| run_shown(r, false)).collect(),
    ))
}

/// A workflow run with its steps and events (`loops workflows inspect`).
#[utoipa::path(get, path = "/v1/workflow-runs/{id}", tag = "workflows",
    params(
        ("id" = String, Path, description = "The workflow run's id or an unambiguous prefix."),
        ("showOutput" = Option<bool>, Query, description = "The steps' output unredacted."),
    ),
    responses(
        (status = 200, description = "`loops workflows inspect --json`.", body = InspectDocument),
        (status = 404, description = "No such workflow run.", body = ErrorBody),
    ))]
pub(crate) async fn inspect(
    axum::extract::State(state): axum::extract::State<State>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<InspectDocument>, ApiError> {
    let p = Params::parse(q.as_deref(), &["showOutput"])?;
    let reveal = p.flag("showOutput", false)?;
    let doc = blocking(&state, move |c| {
        let run = c.get_workflow_run(&id)?;
        let steps = c.step_runs(&run.id)?;
        let events = c.workflow_events(&run.id, None)?;
        Ok(InspectDocument {
            workflow_run: run_shown(run, reveal),
            steps: redacted_steps(steps, reveal),
            events,
        })
    })
    .await?;
    Ok(Json(doc))
}

/// Asks a running workflow run to stop (`loops workflows cancel`).
#[utoipa::path(post, path = "/v1/workflow-runs/{id}/cancel", tag = "workflows",
    params(("id" = String, Path, description = "The workflow run's id or an unambiguous prefix.")),
    request_body(content = Option<CancelBody>, description = "Optional: the reason.", content_type = "application/json"),
    responses(
        (status = 200, description = "The run with its cancellation requested (`loops workflows cancel --json`).", body = WorkflowRun),
        (status = 400, description = "Not running.", body = ErrorBody),
        (status = 404, description = "No such workflow run.", body = ErrorBody),
    ))]
pub(crate) async fn cancel(
    axum::extract::State(state): axum::extract::State<State>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Json<WorkflowRun>, ApiError> {
    Params::parse(req.uri().query(), &[])?;
    let bytes = read_body(req, &state).await?;
    let reason = optional_json::<CancelBody>(&bytes)?
        .and_then(|b| b.reason)
        .unwrap_or_else(|| "cancelled over HTTP".to_owned());
    let run = blocking(&state, move |c| {
        Ok(c.cancel_workflow_run(&id, &reason, chrono::Utc::now())?)
    })
    .await?;
    Ok(Json(run_shown(run, false)))
}
