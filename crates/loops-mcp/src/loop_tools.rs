//! Loop tools: list, show, runs, and the lifecycle verbs (`pause`, `resume`, `stop`,
//! `remove`, `run_now`). Each is the CLI verb of the same name: the same client call,
//! the same JSON document `--json` prints, the same messages. (The tools themselves
//! are declared in [`crate::tools`]; here is what answers them.)

use crate::flags;
use crate::params::{ListParams, RemoveParams, RunNowParams, RunsParams, ShowParams};
use crate::server::{blocking, json, LoopsMcp, Outcome};
use loops_core::redact::{redact_loop, redact_run};
use loops_core::{Loop, LoopStatus, RunStatus};
use loops_runtime::client::{RunNowJson, RunQuery};
use loops_runtime::client_notify::runs_with_notifications;
use loops_runtime::definition::parse_enum;
use loops_runtime::timeparse::parse_past;
use loops_store::LoopFilter;

impl LoopsMcp {
    pub(crate) async fn list(&self, p: ListParams) -> Outcome {
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

    pub(crate) async fn show(&self, p: ShowParams) -> Outcome {
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

    pub(crate) async fn runs(&self, p: RunsParams) -> Outcome {
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
    pub(crate) async fn lifecycle(
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

    pub(crate) async fn remove(&self, p: RemoveParams) -> Outcome {
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

    pub(crate) async fn run_now(&self, p: RunNowParams) -> Outcome {
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
        let runs = &self.shared.started;
        let ended = runs
            .spawn_and_wait("run", started.interrupter(), started.finish(), wait)
            .await?;
        // Still going (or not waited for): the run as claimed, status running.
        let mut run = ended.map_or(claimed, |outcome| outcome.run);
        if !reveal {
            redact_run(&mut run);
        }
        json(&RunNowJson::new(&run, source))
    }
}
