//! `/workflows`: every workflow spec; `/workflows/{key}`: its DAG drawn as SVG
//! ([`super::svg`]: levels left to right, an edge per dependency) and its runs;
//! `/workflow-runs/{id}`: one run's DAG with each step coloured and labelled by its
//! status (kept live by our script from `/v1/events`), and the output of the step
//! clicked (`?step=ID`).

use super::words::{self, Badge};
use super::PageRequest;
use super::{ansi, svg, Base};
use crate::error::ApiError;
use crate::request::Params;
use askama::Template;
use axum::extract::Path;
use axum::response::Response;
use loops_core::redact::redact_spec;
use loops_core::workflow::WorkflowRun;
use loops_core::{StepStatus, WorkflowRunStatus};
use loops_runtime::Client;

/// Runs listed on a spec's page.
const RUNS: usize = 25;

pub(crate) struct SpecRow {
    pub id: String,
    pub name: String,
    pub version: u32,
    pub status: String,
    pub steps: usize,
    pub description: String,
}

pub(crate) struct RunRow {
    pub id: String,
    pub short: String,
    pub badge: Badge,
    pub created: String,
    pub duration: String,
}

#[derive(Template)]
#[template(path = "workflows.html")]
pub(crate) struct ListPage {
    pub base: Base,
    pub specs: Vec<SpecRow>,
    pub runs: Vec<(String, RunRow)>,
}

#[derive(Template)]
#[template(path = "workflow.html")]
pub(crate) struct SpecPage {
    pub base: Base,
    pub id: String,
    pub name: String,
    pub version: u32,
    pub status: String,
    pub description: String,
    pub dag: String,
    pub spec: String,
    pub runs: Vec<RunRow>,
}

pub(crate) struct StepRow {
    pub id: String,
    pub badge: Badge,
    pub attempts: u32,
    pub duration: String,
    pub exit: String,
    pub error: String,
    pub selected: bool,
}

/// The step clicked: its output.
pub(crate) struct Chosen {
    pub id: String,
    pub word: &'static str,
    pub stdout: String,
    pub stderr: String,
    /// What the step's error quoted from its output (the section shows the output).
    pub error_output: String,
    pub summary: String,
}

#[derive(Template)]
#[template(path = "workflow_run.html")]
pub(crate) struct RunPage {
    pub base: Base,
    pub id: String,
    pub workflow_id: String,
    pub workflow_name: String,
    pub badge: Badge,
    pub running: bool,
    pub facts: Vec<(&'static str, String)>,
    pub error: String,
    pub dag: String,
    pub steps: Vec<StepRow>,
    pub chosen: Option<Chosen>,
}

fn run_row(r: &WorkflowRun) -> RunRow {
    RunRow {
        id: r.id.as_str().to_owned(),
        short: words::short_id(r.id.as_str()),
        badge: words::workflow_run_status(r.status),
        created: words::instant(&r.created_at),
        duration: r.duration_ms.map(words::elapsed).unwrap_or_default(),
    }
}

fn base(title: String, csrf: String) -> Base {
    Base {
        title,
        nav: "workflows",
        csrf,
    }
}

pub(crate) async fn list(request: PageRequest) -> Response {
    request.show(super::no_query, list_page).await
}

fn list_page(c: &Client, (): (), csrf: String) -> Result<ListPage, ApiError> {
    let specs = c
        .list_workflows(None)?
        .into_iter()
        .map(|w| SpecRow {
            id: w.id.as_str().to_owned(),
            steps: w.spec.steps.len(),
            description: w.spec.description.clone().unwrap_or_default(),
            name: w.name,
            version: w.version,
            status: w.status.to_string(),
        })
        .collect();
    let runs = c
        .workflow_runs(None, Some(RUNS))?
        .iter()
        .map(|r| (r.workflow_name.clone(), run_row(r)))
        .collect();
    Ok(ListPage {
        base: base("Workflows".to_owned(), csrf),
        specs,
        runs,
    })
}

fn spec_page(c: &Client, key: &str, csrf: String) -> Result<SpecPage, ApiError> {
    let w = match c.get_workflow(key) {
        Ok(w) => w,
        // Any stored version by its exact id (an archived one, a run's).
        Err(e) => c
            .workflow_by_id(&loops_core::WorkflowId::new(key))?
            .ok_or(e)?,
    };
    let layout = svg::layout(&w.spec);
    let dag = svg::dag(&layout, None, |step| format!("#step-{step}"));
    let mut spec = w.spec.clone();
    redact_spec(&mut spec);
    let spec_json = serde_json::to_string_pretty(&spec)
        .map_err(|e| ApiError::failed(format!("cannot encode the spec: {e}")))?;
    let runs = c
        .workflow_runs(Some(&w.name), Some(RUNS))?
        .iter()
        .map(run_row)
        .collect();
    Ok(SpecPage {
        base: base(w.name.clone(), csrf),
        id: w.id.as_str().to_owned(),
        version: w.version,
        status: w.status.to_string(),
        description: w.spec.description.clone().unwrap_or_default(),
        dag,
        spec: spec_json,
        runs,
        name: w.name,
    })
}

pub(crate) async fn spec(Path(key): Path<String>, request: PageRequest) -> Response {
    request
        .show(super::no_query, move |c, (), csrf| spec_page(c, &key, csrf))
        .await
}

fn run_page(
    c: &Client,
    key: &str,
    step: Option<String>,
    csrf: String,
) -> Result<RunPage, ApiError> {
    let run = c.get_workflow_run(key)?;
    let workflow = c.workflow_by_id(&run.workflow_id)?.ok_or_else(|| {
        ApiError::not_found(format!("the spec of workflow run {} is gone", run.id))
    })?;
    let step_runs = c.step_runs(&run.id)?;
    let status_of = |id: &str| {
        step_runs
            .iter()
            .filter(|s| s.step_id.as_str() == id)
            .max_by_key(|s| s.sequence)
    };
    let statuses: Vec<StepStatus> = workflow
        .spec
        .steps
        .iter()
        .map(|s| status_of(s.id.as_str()).map_or(StepStatus::Pending, |r| r.status))
        .collect();
    let layout = svg::layout(&workflow.spec);
    let id = run.id.as_str().to_owned();
    let dag = svg::dag(&layout, Some(statuses.as_slice()), |step| {
        format!(
            "/workflow-runs/{id}?step={}#chosen",
            crate::request::encode(step)
        )
    });
    let steps = workflow
        .spec
        .steps
        .iter()
        .zip(&statuses)
        .map(|(s, &st)| {
            let r = status_of(s.id.as_str());
            StepRow {
                id: s.id.as_str().to_owned(),
                badge: words::step_status(st),
                attempts: r.map_or(0, |r| r.attempts),
                duration: r
                    .and_then(|r| r.duration_ms)
                    .map(words::elapsed)
                    .unwrap_or_default(),
                exit: r
                    .and_then(|r| r.exit_code)
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
                error: r.and_then(|r| r.error.clone()).unwrap_or_default(),
                selected: step.as_deref() == Some(s.id.as_str()),
            }
        })
        .collect();
    let chosen = step.as_deref().and_then(|want| {
        let r = status_of(want)?;
        Some(Chosen {
            id: want.to_owned(),
            word: words::step_status(r.status).word,
            stdout: ansi::to_html(r.stdout.as_deref().unwrap_or("")),
            stderr: ansi::to_html(r.stderr.as_deref().unwrap_or("")),
            error_output: r.error_output.clone().unwrap_or_default(),
            summary: r.summary.clone().unwrap_or_default(),
        })
    });
    let badge = words::workflow_run_status(run.status);
    let mut facts = vec![("created", words::instant(&run.created_at))];
    if let Some(s) = run.started_at {
        facts.push(("started", words::instant(&s)));
    }
    if let Some(f) = run.finished_at {
        facts.push(("finished", words::instant(&f)));
    }
    if let Some(d) = run.duration_ms {
        facts.push(("duration", words::elapsed(d)));
    }
    facts.push(("attempt", run.attempt.to_string()));
    if let Some(l) = &run.loop_id {
        facts.push(("loop", l.as_str().to_owned()));
    }
    if !run.params.is_empty() {
        // Names only: the values are redacted as env values are (`loops show`).
        let mut shown = run.clone();
        loops_core::redact::redact_workflow_run(&mut shown);
        let params: Vec<String> = shown
            .params
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        facts.push(("params", params.join(", ")));
    }
    Ok(RunPage {
        base: base(format!("{} run", run.workflow_name), csrf),
        id,
        workflow_id: workflow.id.as_str().to_owned(),
        workflow_name: run.workflow_name.clone(),
        badge,
        running: run.status == WorkflowRunStatus::Running,
        facts,
        error: run.error.clone().unwrap_or_default(),
        dag,
        steps,
        chosen,
    })
}

pub(crate) async fn run(Path(key): Path<String>, request: PageRequest) -> Response {
    let step = |query: Option<&str>| {
        Params::parse(query, &["step"]).map(|p| p.get("step").map(str::to_owned))
    };
    request
        .show(step, move |c, step, csrf| run_page(c, &key, step, csrf))
        .await
}
