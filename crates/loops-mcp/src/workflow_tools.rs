//! Workflow tools: list, show, validate, run (detached), inspect a run, cancel a run.
//! Each is the `loops workflows` verb of the same name, with its `--json` document.
//! (The tools are declared in [`crate::tools`]; here is what answers them.)

use crate::flags;
use crate::params::{
    CancelParams, InspectParams, ValidateParams, WorkflowParams, WorkflowRunParams,
    WorkflowsListParams,
};
use crate::server::{blocking, json, LoopsMcp, Outcome};
use loops_core::redact::redact_step;
use loops_core::workflow::StepRun;
use loops_core::WorkflowStatus;
use loops_runtime::workflow_file::{load_spec_file, load_spec_text, workflow_json};

impl LoopsMcp {
    pub(crate) async fn workflows_list_impl(&self, p: WorkflowsListParams) -> Outcome {
        if p.all && p.status.is_some() {
            return Err("--status cannot be used with --all".to_owned());
        }
        let status = match p.status.as_deref() {
            Some(s) => Some(loops_runtime::definition::parse_enum::<WorkflowStatus>(
                "--status", s,
            )?),
            None if p.all => None,
            None => Some(WorkflowStatus::Active),
        };
        self.read(move |c| {
            let list = c.list_workflows(status)?;
            Ok(list.iter().map(workflow_json).collect::<Vec<_>>())
        })
        .await
    }

    pub(crate) async fn workflow_show_impl(&self, p: WorkflowParams) -> Outcome {
        self.read(move |c| Ok(workflow_json(&c.get_workflow(&p.workflow)?)))
            .await
    }

    pub(crate) async fn workflow_validate_impl(&self, p: ValidateParams) -> Outcome {
        let base = self.options().base_dir.clone();
        blocking(move || {
            let spec = match (&p.file, &p.spec) {
                (Some(file), None) => {
                    load_spec_file(&base.join(file), p.name.as_deref(), p.preflight)?
                }
                (None, Some(spec)) => {
                    let text = serde_json::Value::Object(spec.clone()).to_string();
                    load_spec_text(&text, "spec", &base, p.name.as_deref(), p.preflight)?
                }
                _ => return Err("give exactly one of file (a spec file's path) or spec (the spec as a JSON object)".to_owned()),
            };
            json(&loops_runtime::workflow_file::validated_json(&spec))
        })
        .await
    }

    pub(crate) async fn workflow_run_impl(&self, p: WorkflowRunParams) -> Outcome {
        self.mutation("workflow_run")?;
        let reveal = self.reveal(p.show_output)?;
        let timeout = p
            .timeout
            .as_deref()
            .map(|t| flags::timeout("--timeout", t))
            .transpose()?
            .map(loops_core::Duration::to_std);
        let wait = flags::wait(p.wait, p.wait_timeout.as_deref())?;
        let client = self.writer()?;
        let workflow = {
            let client = client.clone();
            let key = p.workflow.clone();
            blocking(move || client.runnable_workflow(&key).map_err(|e| e.to_string())).await?
        };
        self.params_gate(workflow.id.as_str(), p.params.keys())
            .await?;
        let started = client
            .start_workflow_run(&workflow, timeout, &p.params)
            .await
            .map_err(|e| e.to_string())?;
        let run = started.run.clone();
        let runs = &self.shared.started;
        let ended = runs
            .spawn_and_wait(
                "workflow run",
                started.interrupter(),
                started.finish(),
                wait,
            )
            .await?;
        let run = ended.map_or(run, |end| end.into_run());
        blocking(move || {
            // The run's row as it is now (a run still going has moved on since its
            // start), and its steps.
            let run = run_shown(
                client.get_workflow_run(run.id.as_str()).unwrap_or(run),
                reveal,
            );
            let steps = steps_shown(
                client.step_runs(&run.id).map_err(|e| e.to_string())?,
                reveal,
            );
            json(&serde_json::json!({ "workflowRun": run, "steps": steps }))
        })
        .await
    }

    pub(crate) async fn workflow_run_inspect_impl(&self, p: InspectParams) -> Outcome {
        let reveal = self.reveal(p.show_output)?;
        let client = self.reader()?;
        blocking(move || {
            let run = run_shown(
                client.get_workflow_run(&p.run).map_err(|e| e.to_string())?,
                reveal,
            );
            let steps = steps_shown(
                client.step_runs(&run.id).map_err(|e| e.to_string())?,
                reveal,
            );
            let events = client
                .workflow_events(&run.id, None)
                .map_err(|e| e.to_string())?;
            json(&serde_json::json!({ "workflowRun": run, "steps": steps, "events": events }))
        })
        .await
    }

    pub(crate) async fn workflow_cancel_impl(&self, p: CancelParams) -> Outcome {
        self.mutation("workflow_cancel")?;
        let reason = p.reason.unwrap_or_else(|| "cancelled over MCP".to_owned());
        self.write(move |c| {
            let run = c.cancel_workflow_run(&p.run, &reason, chrono::Utc::now())?;
            Ok(run_shown(run, false))
        })
        .await
    }
}

/// A workflow run as shown: its params' values redacted unless `reveal`, as env
/// values are.
fn run_shown(
    mut run: loops_core::workflow::WorkflowRun,
    reveal: bool,
) -> loops_core::workflow::WorkflowRun {
    if !reveal {
        loops_core::redact::redact_workflow_run(&mut run);
    }
    run
}

/// Step runs as shown: output redacted to sizes unless `reveal`.
fn steps_shown(mut steps: Vec<StepRun>, reveal: bool) -> Vec<StepRun> {
    if !reveal {
        steps.iter_mut().for_each(redact_step);
    }
    steps
}
