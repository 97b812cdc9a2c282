//! Workflow tools: list, show, validate, run (detached), inspect a run, cancel a run.
//! Each is the `loops workflows` verb of the same name, with its `--json` document.

use crate::flags;
use crate::params::{
    CancelParams, InspectParams, ValidateParams, WorkflowParams, WorkflowRunParams,
    WorkflowsListParams,
};
use crate::server::{blocking, json, result, LoopsMcp, Outcome};
use loops_core::redact::redact_step;
use loops_core::workflow::StepRun;
use loops_core::WorkflowStatus;
use loops_runtime::workflow_file::{load_spec_file, load_spec_text, workflow_json};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

#[tool_router(router = workflow_router, vis = "pub(crate)")]
impl LoopsMcp {
    #[tool(
        name = "workflows_list",
        description = "List stored workflows (DAGs of steps), like `loops workflows list --json`: active ones by default, archived versions with all: true or status: archived. Returns a JSON array; each workflow has id, name, version, status, createdAt and its spec's fields (description, maxParallel, steps with id, dependsOn and a command or agent target). Prompts and env values are redacted.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn workflows_list(
        &self,
        Parameters(p): Parameters<WorkflowsListParams>,
    ) -> CallToolResult {
        result(self.workflows_list_impl(p).await)
    }

    #[tool(
        name = "workflow_show",
        description = "Show one stored workflow (like `loops workflows show --json`): its steps, their dependencies and targets. `workflow` is an exact id, an active workflow's exact name, or an unambiguous id prefix. Returns one JSON workflow object; prompts and env values are redacted.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn workflow_show(&self, Parameters(p): Parameters<WorkflowParams>) -> CallToolResult {
        result(self.workflow_show_impl(p).await)
    }

    #[tool(
        name = "workflow_validate",
        description = "Check a workflow spec without storing it (like `loops workflows validate --json`): from a JSON file (`file`) or given inline (`spec`). Use it before asking the user to store a workflow. Returns {valid: true, name, steps: <count>}; an invalid spec is a tool error naming the problem (e.g. `steps[1].dependsOn: unknown step \"x\"`).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn workflow_validate(&self, Parameters(p): Parameters<ValidateParams>) -> CallToolResult {
        result(self.workflow_validate_impl(p).await)
    }

    #[tool(
        name = "workflow_run",
        description = "Start a run of a stored workflow now, in the MCP server's process, and return once it has started (detached): {workflowRun: {id, status: running, …}, steps}. Follow it with workflow_run_inspect; stop it with workflow_cancel. With wait: true it waits up to waitTimeout (default 60s, at most 10m) for the end. Needs a server started with --allow-mutations.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn workflow_run(&self, Parameters(p): Parameters<WorkflowRunParams>) -> CallToolResult {
        result(self.workflow_run_impl(p).await)
    }

    #[tool(
        name = "workflow_run_inspect",
        description = "Inspect one workflow run (like `loops workflows inspect --json`): {workflowRun: {id, workflowName, status, attempt, startedAt, durationMs, error, …}, steps: [{stepId, status, exitCode, durationMs, error, summary, …}], events: [the run's event log]}. The steps' output — stdout, stderr, summary, errorOutput — is replaced by its size unless showOutput is allowed.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn workflow_run_inspect(
        &self,
        Parameters(p): Parameters<InspectParams>,
    ) -> CallToolResult {
        result(self.workflow_run_inspect_impl(p).await)
    }

    #[tool(
        name = "workflow_cancel",
        description = "Ask a running workflow run to stop (like `loops workflows cancel --json`), from whichever process runs it: its running steps are terminated and the rest cancelled within about a second. Returns the workflow run with the cancellation requested. A run that is not running is refused. Needs a server started with --allow-mutations.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn workflow_cancel(&self, Parameters(p): Parameters<CancelParams>) -> CallToolResult {
        result(self.workflow_cancel_impl(p).await)
    }
}

impl LoopsMcp {
    async fn workflows_list_impl(&self, p: WorkflowsListParams) -> Outcome {
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

    async fn workflow_show_impl(&self, p: WorkflowParams) -> Outcome {
        self.read(move |c| Ok(workflow_json(&c.get_workflow(&p.workflow)?)))
            .await
    }

    async fn workflow_validate_impl(&self, p: ValidateParams) -> Outcome {
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

    async fn workflow_run_impl(&self, p: WorkflowRunParams) -> Outcome {
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
        let mut run = started.run.clone();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let interrupter = started.interrupter();
        self.shared.started.spawn(
            async move {
                let end = started.finish().await;
                if let Err(e) = &end {
                    tracing::warn!(error = %e, "a workflow run started over MCP did not complete");
                }
                let _ = done_tx.send(end);
            },
            interrupter,
        );
        if let Some(limit) = wait {
            match tokio::time::timeout(limit, done_rx).await {
                Ok(Ok(Ok(end))) => run = end.into_run(),
                Ok(Ok(Err(e))) => return Err(e.to_string()),
                Ok(Err(_)) => return Err("the run's task ended abnormally".to_owned()),
                Err(_) => {}
            }
        }
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

    async fn workflow_run_inspect_impl(&self, p: InspectParams) -> Outcome {
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

    async fn workflow_cancel_impl(&self, p: CancelParams) -> Outcome {
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
