//! The library client: the one API the CLI (and any embedding program) uses to define,
//! inspect and control loops. It writes through the [`Store`] directly; the daemon is
//! not a required middleman.
//!
//! ```no_run
//! use loops_runtime::client::{Client, LoopDefinition};
//! use loops_core::{Schedule, Target, CommandTarget, Policy};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::open_default()?;
//! let def = LoopDefinition {
//!     name: "disk-report".into(),
//!     description: None,
//!     schedule: Schedule::Cron { expression: "0 9 * * MON".into(), timezone: "Europe/Berlin".into() },
//!     target: Target::Command(CommandTarget {
//!         command: "df -h".into(), args: vec![], cwd: None, shell: true,
//!         env: Default::default(), timeout_ms: None, account: None,
//!     }),
//!     policy: Policy::default(),
//! };
//! let created = client.create(def, chrono::Utc::now())?;
//! println!("{} next runs at {:?}", created.name, created.next_run_at);
//! # Ok(()) }
//! ```

use loops_core::schedule::{self, ScheduleError};
use loops_core::validate::{self, ValidationError};
use loops_core::workflow::{StepRun, WorkflowRecord, WorkflowRun, WorkflowSpec};
use loops_core::{
    Instant, Loop, LoopStatus, NewLoop, Policy, Run, Schedule, Target, WorkflowStatus,
};
use loops_store::{LoopAdvance, RunFilter, SqliteStore, Store, StoreError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Errors from client calls. Display strings are complete one-line messages.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("no loop named or with id {0:?}")]
    NotFound(String),
    #[error("ambiguous loop {key:?}: matches {}", .matches.join(", "))]
    Ambiguous { key: String, matches: Vec<String> },
    #[error("{0}")]
    Invalid(String),
    /// The operation was refused in the store's current state (e.g. removing a loop
    /// with a run in flight); nothing was changed.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Validation(#[from] ValidationError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("no workflow named or with id {0:?}")]
    WorkflowNotFound(String),
    #[error("no workflow run with id {0:?}")]
    WorkflowRunNotFound(String),
    #[error(transparent)]
    Recover(#[from] crate::workflow::RecoverError),
    #[error(transparent)]
    Workflow(#[from] loops_core::workflow::WorkflowError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ClientError {
    /// Whether the error is the caller's input (exit code 2) rather than the system's.
    pub fn is_user_error(&self) -> bool {
        match self {
            ClientError::Store(StoreError::DuplicateName(_) | StoreError::DuplicateWorkflow(_)) => {
                true
            }
            ClientError::Recover(crate::workflow::RecoverError::Store(_)) => false,
            ClientError::Store(_) | ClientError::Refused(_) => false,
            _ => true,
        }
    }
}

/// Result alias for client calls.
pub type Result<T> = std::result::Result<T, ClientError>;

/// Everything needed to create a loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDefinition {
    pub name: String,
    pub description: Option<String>,
    pub schedule: Schedule,
    pub target: Target,
    pub policy: Policy,
}

/// Handle on one loops store.
#[derive(Clone)]
pub struct Client {
    store: Arc<dyn Store>,
    data_dir: PathBuf,
}

impl Client {
    /// Opens the store in `$LOOPS_DATA_DIR` or the platform data dir.
    pub fn open_default() -> Result<Self> {
        let dir = loops_store::data_dir()?;
        Self::open(&dir)
    }

    /// Opens (creating if needed) the store in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self> {
        loops_store::prepare_data_dir(data_dir)?;
        let store = SqliteStore::open(&data_dir.join(loops_store::DB_FILE))?;
        Ok(Self::with_store(Arc::new(store), data_dir))
    }

    /// Wraps an already opened store (tests, other backends).
    pub fn with_store(store: Arc<dyn Store>, data_dir: &Path) -> Self {
        Self {
            store,
            data_dir: data_dir.to_path_buf(),
        }
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The data dir holding the database, pid file and log.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Validates and stores a new loop, computing its first slot from `now`.
    pub fn create(&self, def: LoopDefinition, now: Instant) -> Result<Loop> {
        validate::loop_name(&def.name)?;
        validate::target(&def.target, &format!("loop {:?}", def.name))?;
        validate_policy(&def.policy)?;
        let next_run_at = schedule::initial_next_run(&def.schedule, now)?;
        if let Some(expires) = def.policy.expires_at {
            if expires <= now {
                return Err(ClientError::Invalid(format!(
                    "--expires-at {} is in the past",
                    loops_core::format_instant(&expires)
                )));
            }
        }
        let new = NewLoop {
            name: def.name,
            description: def.description,
            schedule: def.schedule,
            target: def.target,
            policy: def.policy,
            next_run_at,
        };
        let created = self.store.create_loop(new, now)?;
        crate::wake::poke(&self.data_dir);
        Ok(created)
    }

    /// All loops, by name, optionally of one status.
    pub fn list(&self, status: Option<LoopStatus>) -> Result<Vec<Loop>> {
        Ok(self.store.list_loops(status)?)
    }

    /// Resolves a loop by exact name, exact id, or unambiguous id prefix.
    pub fn get(&self, key: &str) -> Result<Loop> {
        if let Some(found) = self.store.get_loop_by_name(key)? {
            return Ok(found);
        }
        if key.is_empty() {
            return Err(ClientError::NotFound(key.to_owned()));
        }
        let matches = self.store.loops_with_id_prefix(key, PREFIX_MATCHES)?;
        one_match(
            key,
            matches,
            |l| l.id.as_str(),
            |l| format!("{} ({})", l.id, l.name),
        )?
        .ok_or_else(|| ClientError::NotFound(key.to_owned()))
    }

    /// Stops scheduling a loop until `resume`; its next slot is kept.
    pub fn pause(&self, key: &str, now: Instant) -> Result<Loop> {
        self.set_status(key, LoopStatus::Paused, now)
    }

    /// Stops a loop for good (until an explicit `resume`).
    pub fn stop(&self, key: &str, now: Instant) -> Result<Loop> {
        self.set_status(key, LoopStatus::Stopped, now)
    }

    fn set_status(&self, key: &str, status: LoopStatus, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        let advance = LoopAdvance {
            status,
            next_run_at: lp.next_run_at,
            retry_scheduled_for: lp.retry_scheduled_for,
        };
        Ok(self
            .store
            .update_loop_schedule(&lp.id, &advance, now, None)?)
    }

    /// Re-activates a loop. A next slot in the past is kept for `catchUp` `latest` and
    /// `all` (the missed work runs, coalesced or bounded), and recomputed from `now` for
    /// `none`.
    pub fn resume(&self, key: &str, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        if schedule::is_expired(&lp, now) {
            return Err(ClientError::Invalid(format!(
                "loop {:?} expired at {}; it cannot be resumed",
                lp.name,
                lp.expires_at
                    .map(|t| loops_core::format_instant(&t))
                    .unwrap_or_default()
            )));
        }
        let next = match lp.next_run_at {
            Some(next) if next > now => Some(next),
            Some(next) => match lp.catch_up {
                loops_core::CatchUp::None => next_slot_from(&lp.schedule, next, now)?,
                _ => Some(next),
            },
            None => match &lp.schedule {
                Schedule::Once { .. } => {
                    return Err(ClientError::Invalid(format!(
                        "loop {:?} has no slot left (its one run is done); use run-now or create a new loop",
                        lp.name
                    )))
                }
                other => schedule::initial_next_run(other, now)?,
            },
        };
        let advance = LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: next,
            retry_scheduled_for: lp.retry_scheduled_for,
        };
        let resumed = self
            .store
            .update_loop_schedule(&lp.id, &advance, now, None)?;
        crate::wake::poke(&self.data_dir);
        Ok(resumed)
    }

    /// Deletes a loop and its run history. A loop with a run in flight is refused
    /// unless `force`, which first stops its runs (process groups terminated; a
    /// workflow run cancelled) and waits for them to end, so removing a loop never
    /// leaves one of its processes running unsupervised.
    pub fn remove(&self, key: &str, force: bool) -> Result<Loop> {
        let lp = self.get(key)?;
        let running = self.store.running_runs(Some(&lp.id))?;
        if !running.is_empty() {
            if !force {
                return Err(ClientError::Refused(format!(
                    "loop {:?} has {} run(s) in flight ({}); stop them first, or pass --force to terminate them and remove the loop",
                    lp.name,
                    running.len(),
                    running
                        .iter()
                        .map(describe_running)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            self.stop_runs(&lp, &running)?;
        }
        self.store.remove_loop(&lp.id)?;
        Ok(lp)
    }

    /// Terminates the runs in flight of `lp` and waits until they have ended.
    fn stop_runs(&self, lp: &Loop, running: &[Run]) -> Result<()> {
        let host = crate::process::hostname();
        for run in running {
            let elsewhere = run
                .claimed_by
                .as_deref()
                .and_then(crate::engine::parse_runner_id)
                .filter(|(h, _, _)| *h != host);
            if let Some((h, _, _)) = elsewhere {
                return Err(ClientError::Refused(format!(
                    "run {} of loop {:?} runs on host {h}; stop it there",
                    run.id, lp.name
                )));
            }
        }
        let now = chrono::Utc::now();
        // Every process of these runs: a run's own, and the steps of a workflow target's
        // run (cancelled too, so its runner stops starting steps).
        let mut processes: Vec<(u32, Option<u64>)> = Vec::new();
        for run in running {
            processes.extend(run.pid.map(|pid| (pid, run.pid_start_time)));
            for wf in self.store.list_workflow_runs(None, None)? {
                if wf.loop_run_id.as_deref() != Some(run.id.as_str())
                    || wf.status != loops_core::WorkflowRunStatus::Running
                {
                    continue;
                }
                self.store
                    .request_workflow_cancel(&wf.id, "loop removed", now)?;
                for step in self.store.step_runs(&wf.id)? {
                    if step.status == loops_core::StepStatus::Running {
                        processes.extend(step.pid.map(|pid| (pid, step.pid_start_time)));
                    }
                }
            }
        }
        let alive = |list: &[(u32, Option<u64>)]| -> Vec<u32> {
            list.iter()
                .filter(|(pid, start)| crate::process::is_same_process_alive(*pid, *start))
                .map(|(pid, _)| *pid)
                .collect()
        };
        for pid in alive(&processes) {
            let _ = crate::process::signal_group(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let begun = std::time::Instant::now();
        let grace = crate::executor::DEFAULT_KILL_GRACE;
        let mut killed = false;
        let mut gone_at = None;
        loop {
            let live = alive(&processes);
            let elapsed = begun.elapsed();
            if live.is_empty() {
                // Give the runners a moment to record how the runs ended; a row whose
                // runner died is removed with the loop anyway.
                let gone = *gone_at.get_or_insert(elapsed);
                let finalized = self
                    .store
                    .running_runs(Some(&lp.id))?
                    .iter()
                    .all(|r| !running.iter().any(|o| o.id == r.id));
                if finalized || elapsed >= gone + STOP_WAIT {
                    return Ok(());
                }
            } else if !killed && elapsed >= grace {
                for pid in &live {
                    let _ = crate::process::signal_group(*pid, nix::sys::signal::Signal::SIGKILL);
                }
                killed = true;
            } else if elapsed >= grace + STOP_WAIT {
                return Err(ClientError::Refused(format!(
                    "the runs of loop {:?} did not stop (pids {live:?}); nothing was removed",
                    lp.name
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Runs newest first, of one loop or all, up to `limit`.
    pub fn runs(&self, key: Option<&str>, limit: Option<usize>) -> Result<Vec<Run>> {
        let loop_id = match key {
            Some(key) => Some(self.get(key)?.id),
            None => None,
        };
        Ok(self.store.list_runs(&RunFilter { loop_id, limit })?)
    }
}

/// Workflow specs and runs.
impl Client {
    /// Validates and stores a spec (see [`loops_store::WorkflowStore::create_workflow`]).
    pub fn create_workflow(
        &self,
        spec: &WorkflowSpec,
        replace: bool,
        now: Instant,
    ) -> Result<WorkflowRecord> {
        loops_core::workflow::validate(spec)?;
        Ok(self.store.create_workflow(spec, replace, now)?)
    }

    /// Resolves a workflow by active name, exact id or unambiguous id prefix.
    pub fn get_workflow(&self, key: &str) -> Result<WorkflowRecord> {
        if let Some(found) = self.store.get_active_workflow(key)? {
            return Ok(found);
        }
        if key.is_empty() {
            return Err(ClientError::WorkflowNotFound(key.to_owned()));
        }
        let matches = self.store.workflows_with_id_prefix(key, PREFIX_MATCHES)?;
        one_match(
            key,
            matches,
            |w| w.id.as_str(),
            |w| format!("{} ({} v{})", w.id, w.name, w.version),
        )?
        .ok_or_else(|| ClientError::WorkflowNotFound(key.to_owned()))
    }

    /// Specs, optionally of one status.
    pub fn list_workflows(&self, status: Option<WorkflowStatus>) -> Result<Vec<WorkflowRecord>> {
        Ok(self.store.list_workflows(status)?)
    }

    /// Archives a spec (loops naming it stop finding it).
    pub fn archive_workflow(&self, key: &str, now: Instant) -> Result<WorkflowRecord> {
        let wf = self.get_workflow(key)?;
        Ok(self.store.archive_workflow(&wf.id, now)?)
    }

    /// Resolves a workflow run by exact id or unambiguous id prefix.
    pub fn get_workflow_run(&self, key: &str) -> Result<WorkflowRun> {
        if key.is_empty() {
            return Err(ClientError::WorkflowRunNotFound(key.to_owned()));
        }
        let matches = self
            .store
            .workflow_runs_with_id_prefix(key, PREFIX_MATCHES)?;
        one_match(
            key,
            matches,
            |r| r.id.as_str(),
            |r| format!("{} ({})", r.id, r.workflow_name),
        )?
        .ok_or_else(|| ClientError::WorkflowRunNotFound(key.to_owned()))
    }

    /// Runs newest first, of one workflow (by name) or all.
    pub fn workflow_runs(
        &self,
        workflow: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<WorkflowRun>> {
        let name = match workflow {
            Some(key) => Some(match self.store.get_active_workflow(key)? {
                Some(w) => w.name,
                None => self.get_workflow(key).map(|w| w.name).or_else(|_| {
                    // Archived specs' runs are still listed by name.
                    let known = self
                        .store
                        .list_workflows(None)?
                        .into_iter()
                        .any(|w| w.name == key);
                    if known {
                        Ok(key.to_owned())
                    } else {
                        Err(ClientError::WorkflowNotFound(key.to_owned()))
                    }
                })?,
            }),
            None => None,
        };
        Ok(self.store.list_workflow_runs(name.as_deref(), limit)?)
    }

    /// Asks a running workflow run to stop; its runner cancels within a second.
    pub fn cancel_workflow_run(
        &self,
        key: &str,
        reason: &str,
        now: Instant,
    ) -> Result<WorkflowRun> {
        let run = self.get_workflow_run(key)?;
        if run.status != loops_core::WorkflowRunStatus::Running {
            return Err(ClientError::Invalid(format!(
                "workflow run {} is {}, not running",
                run.id, run.status
            )));
        }
        Ok(self.store.request_workflow_cancel(&run.id, reason, now)?)
    }

    /// Resets steps whose processes are gone to `pending`; refuses while any lives.
    pub fn recover_workflow_run(
        &self,
        key: &str,
        reason: &str,
    ) -> Result<(WorkflowRun, Vec<StepRun>)> {
        let run = self.get_workflow_run(key)?;
        let steps = crate::workflow::recover(self.store.as_ref(), &run.id, reason)?;
        Ok((run, steps))
    }
}

/// How many id-prefix matches are fetched: enough to name a few in an "ambiguous" error.
const PREFIX_MATCHES: usize = 6;

/// How long `remove --force` waits, after SIGTERM plus the kill grace, for a run's
/// runner to record its end.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn describe_running(run: &Run) -> String {
    match run.pid {
        Some(pid) => format!("run {} pid {pid}", run.id),
        None => format!("run {}", run.id),
    }
}

/// The single record an id prefix names: `None` for no match, the exact id when it is
/// among several, else an "ambiguous" error listing a few of them.
fn one_match<T>(
    key: &str,
    mut matches: Vec<T>,
    id: impl Fn(&T) -> &str,
    label: impl Fn(&T) -> String,
) -> Result<Option<T>> {
    if matches.len() <= 1 {
        return Ok(matches.pop());
    }
    if let Some(exact) = matches.iter().position(|m| id(m) == key) {
        return Ok(Some(matches.swap_remove(exact)));
    }
    let mut shown: Vec<String> = matches
        .iter()
        .take(PREFIX_MATCHES - 1)
        .map(&label)
        .collect();
    if matches.len() >= PREFIX_MATCHES {
        shown.push("…".into());
    }
    Err(ClientError::Ambiguous {
        key: key.to_owned(),
        matches: shown,
    })
}

/// The first slot of `schedule` strictly after `now`, phase-aligned to `slot` where the
/// schedule has a phase (fixed-rate intervals, cron).
fn next_slot_from(
    schedule: &Schedule,
    slot: Instant,
    now: Instant,
) -> std::result::Result<Option<Instant>, ScheduleError> {
    match schedule {
        Schedule::Once { at } => Ok(Some(*at)),
        Schedule::Dynamic { .. } => Ok(Some(now)),
        other => schedule::next_after_finish(other, slot, now),
    }
}

fn validate_policy(policy: &Policy) -> std::result::Result<(), ValidationError> {
    if policy.max_attempts == 0 {
        return Err(ValidationError("--attempts must be at least 1".into()));
    }
    if policy.catch_up_limit == 0 {
        return Err(ValidationError(
            "--catch-up-limit must be at least 1".into(),
        ));
    }
    Ok(())
}
