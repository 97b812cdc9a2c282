//! Loop tools: list, show, runs, and the lifecycle verbs (`pause`, `resume`, `stop`,
//! `remove`, `run_now`). Each is the CLI verb of the same name: the same client call,
//! the same JSON document `--json` prints, the same messages.

use crate::flags;
use crate::params::{ListParams, LoopParams, RemoveParams, RunNowParams, RunsParams, ShowParams};
use crate::server::{blocking, json, result, LoopsMcp, Outcome};
use loops_core::redact::{redact_loop, redact_run};
use loops_core::{Loop, LoopStatus, RunStatus};
use loops_runtime::client::{RunNowJson, RunQuery};
use loops_runtime::client_notify::runs_with_notifications;
use loops_runtime::definition::parse_enum;
use loops_runtime::timeparse::parse_past;
use loops_store::LoopFilter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

#[tool_router(router = loop_router, vis = "pub(crate)")]
impl LoopsMcp {
    #[tool(
        name = "loops_list",
        description = "List the scheduled loops (like `loops list --json`). Use it first to see what exists, to find a loop's exact name or id, or to check statuses. Archived loops are hidden unless all: true; labels filters by labels (all of them). Returns a JSON array of loops by name, each with id, name, status (active, paused, stopped, expired, done, archived; done: a stop condition ended it, statusReason says which), schedule, target (command, agent or workflow), policy fields, labels, nextRunAt and timestamps. Prompts and env values are redacted.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_list(&self, Parameters(p): Parameters<ListParams>) -> CallToolResult {
        result(self.list(p).await)
    }

    #[tool(
        name = "loops_show",
        description = "Show one loop in full (like `loops show --json`): its schedule, target, policy, labels, notification settings, next slot and status. Use it to inspect a loop before changing it or to check when it runs next. `loop` is an exact id, an exact name, or an unambiguous id prefix. Returns one JSON loop object; prompt and env values are redacted unless showOutput is allowed.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_show(&self, Parameters(p): Parameters<ShowParams>) -> CallToolResult {
        result(self.show(p).await)
    }

    #[tool(
        name = "loops_runs",
        description = "List runs (attempts at a loop's slots), newest first (like `loops runs --json`). Use it to see whether a loop ran, succeeded or failed, and why: each run has id, loopId, loopName, scheduledFor, attempt, status (running, succeeded, failed, timed_out, abandoned, skipped), startedAt, finishedAt, durationMs, exitCode, error, for agents summary and usage, and notifications (their deliveries). Filter by loop, status (any of), labels, since/until (\"1d\" ago or an instant). The run's output — stdout, stderr, an agent's summary, errorOutput (what a failure quoted from the output; error itself is our words) — is replaced by its size unless showOutput is allowed. Default 20 runs; limit 0 for all.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_runs(&self, Parameters(p): Parameters<RunsParams>) -> CallToolResult {
        result(self.runs(p).await)
    }

    #[tool(
        name = "loops_pause",
        description = "Pause a loop: it is not scheduled until loops_resume; its next slot is kept. A run in flight finishes. Returns the loop as changed (status paused). Needs a server started with --allow-mutations.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn loops_pause(&self, Parameters(p): Parameters<LoopParams>) -> CallToolResult {
        result(
            self.lifecycle("loops_pause", p.key, |c, key, now| c.pause(key, now))
                .await,
        )
    }

    #[tool(
        name = "loops_resume",
        description = "Re-activate a paused or stopped loop. A slot missed meanwhile runs as its catch-up policy says (latest: once; all: each, bounded; none: skipped). Returns the loop as changed (status active, nextRunAt). Needs a server started with --allow-mutations.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn loops_resume(&self, Parameters(p): Parameters<LoopParams>) -> CallToolResult {
        result(
            self.lifecycle("loops_resume", p.key, |c, key, now| c.resume(key, now))
                .await,
        )
    }

    #[tool(
        name = "loops_stop",
        description = "Stop a loop: it is no longer scheduled (until an explicit loops_resume) but stays listed with its run history. Does not terminate a run in flight. Returns the loop as changed (status stopped). Needs a server started with --allow-mutations.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn loops_stop(&self, Parameters(p): Parameters<LoopParams>) -> CallToolResult {
        result(
            self.lifecycle("loops_stop", p.key, |c, key, now| c.stop(key, now))
                .await,
        )
    }

    #[tool(
        name = "loops_remove",
        description = "Delete a loop and its whole run history, for good. Prefer loops_stop to keep the history. Requires confirm: true; a loop with a run in flight is refused unless force: true, which terminates that run first. Returns {removed: true, id, name}. Needs a server started with --allow-mutations.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn loops_remove(&self, Parameters(p): Parameters<RemoveParams>) -> CallToolResult {
        result(self.remove(p).await)
    }

    #[tool(
        name = "loops_run_now",
        description = "Run a loop now, in the MCP server's process: its due slot (or pending retry) when one is due, which moves the schedule on, else a one-off ad-hoc run that leaves the schedule alone. Returns at once with the run (id, status running) and runNow {source, advancesLoop}; follow it with loops_runs. With wait: true it waits up to waitTimeout (default 60s, at most 10m) and returns the run as recorded (succeeded, failed, timed_out, …). Needs a server started with --allow-mutations.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn loops_run_now(&self, Parameters(p): Parameters<RunNowParams>) -> CallToolResult {
        result(self.run_now(p).await)
    }
}

impl LoopsMcp {
    async fn list(&self, p: ListParams) -> Outcome {
        let reveal = self.reveal(p.show_output)?;
        if p.all && p.status.is_some() {
            return Err("--status cannot be used with --all".to_owned());
        }
        let status = p
            .status
            .as_deref()
            .map(|s| parse_enum::<LoopStatus>("--status", s))
            .transpose()?;
        let filter = LoopFilter {
            status,
            include_archived: p.all,
            labels: p.labels,
            offset: 0,
            // 0 or none: every loop.
            limit: p.limit.filter(|n| *n > 0),
            ..LoopFilter::default()
        };
        self.read(move |c| {
            let mut loops = c.list_matching(&filter)?;
            if !reveal {
                loops.iter_mut().for_each(redact_loop);
            }
            Ok(loops)
        })
        .await
    }

    async fn show(&self, p: ShowParams) -> Outcome {
        let reveal = self.reveal(p.show_output)?;
        self.read(move |c| {
            let mut lp = c.get(&p.key)?;
            if !reveal {
                redact_loop(&mut lp);
            }
            Ok(lp)
        })
        .await
    }

    async fn runs(&self, p: RunsParams) -> Outcome {
        let reveal = self.reveal(p.show_output)?;
        let limit = loops_core::limits::runs_listed(p.limit);
        let now = chrono::Utc::now();
        let statuses = p
            .status
            .iter()
            .map(|s| parse_enum::<RunStatus>("--status", s))
            .collect::<Result<Vec<_>, _>>()?;
        let past =
            |flag: &str, text: Option<&str>| text.map(|t| parse_past(flag, t, now)).transpose();
        let query = RunQuery {
            loop_key: p.key,
            labels: p.labels,
            statuses,
            since: past("--since", p.since.as_deref())?,
            until: past("--until", p.until.as_deref())?,
            limit,
        };
        let client = self.reader()?;
        blocking(move || {
            let mut runs = client.query_runs(&query).map_err(|e| e.to_string())?;
            if !reveal {
                runs.iter_mut().for_each(redact_run);
            }
            let ids: Vec<_> = runs.iter().map(|r| r.id.clone()).collect();
            let deliveries = client.deliveries_of_runs(&ids).map_err(|e| e.to_string())?;
            json(&runs_with_notifications(runs, deliveries, reveal))
        })
        .await
    }

    /// `pause`, `resume`, `stop`: the loop as changed, redacted (as `--json` prints it).
    async fn lifecycle(
        &self,
        tool: &str,
        key: String,
        change: fn(
            &loops_runtime::Client,
            &str,
            loops_core::Instant,
        ) -> loops_runtime::client::Result<Loop>,
    ) -> Outcome {
        self.mutation(tool)?;
        self.write(move |c| {
            let mut lp = change(c, &key, chrono::Utc::now())?;
            redact_loop(&mut lp);
            Ok(lp)
        })
        .await
    }

    async fn remove(&self, p: RemoveParams) -> Outcome {
        self.mutation("loops_remove")?;
        if !p.confirm {
            return Err(format!(
                "loops_remove deletes loop {:?} and its whole run history; call it again with confirm: true to remove it (or use loops_stop to keep the history)",
                p.key
            ));
        }
        self.write(move |c| {
            let removed = c.remove(&p.key, p.force)?;
            Ok(serde_json::json!({ "removed": true, "id": removed.id, "name": removed.name }))
        })
        .await
    }

    async fn run_now(&self, p: RunNowParams) -> Outcome {
        self.mutation("loops_run_now")?;
        let reveal = self.reveal(p.show_output)?;
        let wait = flags::wait(p.wait, p.wait_timeout.as_deref())?;
        let client = self.writer()?;
        let (key, allow_overlap) = (p.key, p.allow_overlap);
        let started = blocking(move || {
            client
                .start_run_now(&key, allow_overlap)
                .map_err(|e| e.to_string())
        })
        .await?;
        let (claimed, source) = (started.run.clone(), started.source);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let interrupter = started.interrupter();
        self.shared.started.spawn(
            async move {
                let outcome = started.finish().await;
                if let Err(e) = &outcome {
                    tracing::warn!(error = %e, "a run started over MCP did not complete");
                }
                let _ = done_tx.send(outcome);
            },
            interrupter,
        );
        let mut run = match wait {
            None => claimed,
            Some(limit) => match tokio::time::timeout(limit, done_rx).await {
                Ok(Ok(Ok(outcome))) => outcome.run,
                Ok(Ok(Err(e))) => return Err(e.to_string()),
                Ok(Err(_)) => return Err("the run's task ended abnormally".to_owned()),
                // Still going: the run as claimed, status running.
                Err(_) => claimed,
            },
        };
        if !reveal {
            redact_run(&mut run);
        }
        json(&RunNowJson::new(&run, source))
    }
}
