//! `run-now --on-runner`: instead of running the loop in this process, ask the live
//! runners of a store shared by runners (PostgreSQL) to run it. The request is a row
//! the runners are woken for; the first one that can take the loop (it has the loop's
//! runner labels and a free slot) claims the run as `run-now` would here, and records
//! its answer in the claim's transaction. This process waits for the answer, then for
//! the run to end, and reports it as `run-now` does.

use super::{refuse_archived, Client, ClientError, Result, RunNowOutcome};
use crate::engine::this_runner_id;
use loops_store::{RunRequest, RunRequestAnswer};
use std::time::Duration;

/// How long `run-now --on-runner` waits for a runner to take the request by default.
pub const DEFAULT_RUNNER_WAIT: Duration = Duration::from_secs(10);

/// The first and the longest pause between looks at the request and the run.
const POLL_FIRST: Duration = Duration::from_millis(2);
const POLL_CAP: Duration = Duration::from_millis(250);

impl Client {
    /// Asks a live runner to run the loop now (as [`Client::run_now`] would here: its
    /// due slot or pending retry when one is due, else an ad-hoc slot; overlap `skip`
    /// refuses while a run is in flight unless `allow_overlap`) and waits for the run
    /// to end. Refused when the store has no runners, when no live runner can take
    /// the loop, when the runner refuses, and when no runner took it within `wait`
    /// (the request is then withdrawn: nothing runs later).
    pub async fn run_now_on_runner(
        &self,
        key: &str,
        allow_overlap: bool,
        wait: Duration,
    ) -> Result<RunNowOutcome> {
        let lp = self.get(key)?;
        refuse_archived(&lp)?;
        if !self.store.supports_runners() {
            return Err(ClientError::Invalid(
                "--on-runner needs a store shared by runners (PostgreSQL: --store postgres://… \
                 or LOOPS_STORE); on this store `run-now` runs the loop here"
                    .to_owned(),
            ));
        }
        let able = self
            .store
            .runners()?
            .into_iter()
            .filter(|r| r.live && lp.runs_on.iter().all(|l| r.labels.contains(l)))
            .count();
        if able == 0 {
            let needs = if lp.runs_on.is_empty() {
                String::new()
            } else {
                format!(" (it needs the runner labels {})", lp.runs_on.join(", "))
            };
            return Err(ClientError::Refused(format!(
                "no live runner can take loop {:?}{needs}; start one with `loops daemon start`",
                lp.name
            )));
        }
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let id = self
            .store
            .request_run(&lp.id, allow_overlap, &this_runner_id(), wait_ms)?;
        let answered = match self.answer_of(&id, wait).await {
            Ok(answered) => answered,
            Err(e) => {
                // Whatever went wrong here, no runner may start it later.
                let _ = self.store.withdraw_run_request(&id);
                return Err(e);
            }
        };
        match answered.answer {
            Some(RunRequestAnswer::Started { run_id, source, .. }) => {
                let run = self.wait_for_end(&run_id).await?;
                Ok(RunNowOutcome { run, source })
            }
            Some(RunRequestAnswer::Refused { runner_id, reason }) => Err(ClientError::Refused(
                format!("{reason} (answered by runner {runner_id})"),
            )),
            None => Err(ClientError::Refused(format!(
                "no runner took the request to run loop {:?} within {}; it was withdrawn and \
                 nothing was started",
                lp.name,
                loops_core::duration::Duration::from_millis(wait_ms)
                    .map_or_else(|| "0ms".to_owned(), |d| d.to_string())
            ))),
        }
    }

    /// Waits until the request is answered or `wait` (and a moment for the runner's
    /// own view of the expiry) has passed, then withdraws it; returns it as it was then.
    async fn answer_of(&self, id: &str, wait: Duration) -> Result<RunRequest> {
        let deadline = tokio::time::Instant::now() + wait + Duration::from_millis(500);
        let mut pause = POLL_FIRST;
        loop {
            let now = self.store.run_request(id)?;
            let answered = now.as_ref().is_some_and(|r| r.answer.is_some());
            if answered || tokio::time::Instant::now() >= deadline {
                // Deleting it returns it as it was: answered meanwhile, or withdrawn.
                return match self.store.withdraw_run_request(id)? {
                    Some(r) => Ok(r),
                    None => Err(ClientError::Refused(format!(
                        "run request {id} disappeared before it was answered"
                    ))),
                };
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(POLL_CAP);
        }
    }

    /// The run as recorded once it ended (by its runner, or as abandoned by another
    /// runner when its own was lost).
    async fn wait_for_end(&self, run_id: &loops_core::RunId) -> Result<loops_core::Run> {
        let mut pause = POLL_FIRST * 5;
        loop {
            match self.store.get_run(run_id)? {
                Some(run) if run.status != loops_core::RunStatus::Running => return Ok(run),
                Some(_) => {}
                None => return Err(ClientError::RunNotFound(run_id.to_string())),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(POLL_CAP);
        }
    }
}
