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
            ClientError::Store(_) => false,
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

    /// Opens the store in `data_dir` for reading only (see
    /// [`SqliteStore::open_read_only`]): for read commands on a store whose file or
    /// directory is not writable. The data dir must exist and pass the same ownership
    /// rule as [`Client::open`]; every write through this client fails with
    /// [`StoreError::ReadOnly`].
    pub fn open_read_only(data_dir: &Path) -> Result<Self> {
        loops_store::prepare_data_dir(data_dir)?;
        let store = SqliteStore::open_read_only(&data_dir.join(loops_store::DB_FILE))?;
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

    /// Deletes a loop and its run history.
    pub fn remove(&self, key: &str) -> Result<Loop> {
        let lp = self.get(key)?;
        self.store.remove_loop(&lp.id)?;
        Ok(lp)
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
