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
//!         env: Default::default(), timeout: None, idle_timeout: None, account: None,
//!     }),
//!     policy: Policy::default(),
//!     labels: vec!["reports".into()],
//!     notify: None,
//! };
//! let created = client.create(def, chrono::Utc::now())?;
//! println!("{} next runs at {:?}", created.name, created.next_run_at);
//! # Ok(()) }
//! ```

mod started;

pub use started::{Interrupter, StartedRun, StartedWorkflowRun};
mod backup;
mod budgets;
mod copy;
mod health;
mod holds;
mod on_runner;
mod portable;
mod top;
mod usage;

pub use copy::{CopyCounts, CopyReport};
pub use health::{HealthCounts, HealthJson, HealthReport, LoopHealth};
pub use loops_sqlite::{BackupInfo, Restored, StoreCounts};
pub use on_runner::DEFAULT_RUNNER_WAIT;
pub use portable::{ImportOptions, ImportReport, ImportedLoop, RunnerLabels};
pub use top::{Applied, TopData, TopFeed, TopLoop, RECENT_FAILURES};

use crate::clock::SystemClock;
use crate::engine::{Engine, EngineConfig};
use crate::workflow::RunEnd;
use loops_core::schedule::{self, ScheduleError};
use loops_core::validate::{self, ValidationError};
use loops_core::workflow::{StepRun, Workflow, WorkflowEvent, WorkflowRun, WorkflowSpec};
use loops_core::{
    Instant, Loop, LoopId, LoopStatus, NewLoop, Policy, Run, RunId, RunSource, Schedule, Target,
    WorkflowId, WorkflowRunId, WorkflowStatus,
};
use loops_postgres::PgStore;
use loops_sqlite::SqliteStore;
use loops_store::{
    DaemonLease, LoopAdvance, LoopFilter, LoopUpdate, LoopVersion, PrunePolicy, RunFilter, Store,
    StoreError, UnreadableLoop,
};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The kinds of record a key typed by the user can name. Every kind resolves the same
/// way (see [`Client::get`]): an exact id wins, then an exact name (loops and
/// workflows), then an unambiguous id prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordKind {
    Loop,
    Workflow,
    WorkflowRun,
    /// A loop run (`loops logs RUN`): by exact id, then unambiguous id prefix.
    Run,
}

impl RecordKind {
    /// `loop`, `workflow`, `workflow run`, `run`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Loop => "loop",
            RecordKind::Workflow => "workflow",
            RecordKind::WorkflowRun => "workflow run",
            RecordKind::Run => "run",
        }
    }
}

impl std::fmt::Display for RecordKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors from client calls. Display strings are complete one-line messages.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("no loop named or with id {0:?}")]
    NotFound(String),
    #[error("ambiguous {kind} {key:?}: matches {}", .matches.join(", "))]
    Ambiguous {
        kind: RecordKind,
        key: String,
        matches: Vec<String>,
    },
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
    #[error("no run with id {0:?}")]
    RunNotFound(String),
    #[error(transparent)]
    Recover(#[from] crate::workflow::RecoverError),
    #[error(transparent)]
    Workflow(#[from] loops_core::workflow::WorkflowError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `tick` and `run-now` ran the engine, which stopped (its store failed, the loop
    /// is busy, the daemon lease was lost).
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
}

/// Result alias for client calls.
pub type Result<T> = std::result::Result<T, ClientError>;

/// What `remove` removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedLoop {
    pub id: loops_core::LoopId,
    pub name: String,
}

/// Everything needed to create a loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDefinition {
    pub name: String,
    pub description: Option<String>,
    pub schedule: Schedule,
    pub target: Target,
    pub policy: Policy,
    /// Labels (`[a-z0-9][a-z0-9._-]*`); stored sorted, each once.
    pub labels: Vec<String>,
    /// Where the loop's failure (or recovery) notifications go, if anywhere besides the
    /// store-wide default.
    pub notify: Option<loops_core::Notify>,
}

impl From<&Loop> for LoopDefinition {
    /// A stored loop's definition, the starting point of an edit ([`Client::edit`]).
    fn from(lp: &Loop) -> Self {
        Self {
            name: lp.name.clone(),
            description: lp.description.clone(),
            schedule: lp.schedule.clone(),
            target: lp.target.clone(),
            policy: lp.policy(),
            labels: lp.labels.clone(),
            notify: lp.notify.clone(),
        }
    }
}

/// What [`Client::check_definition`] hands on: the labels sorted and each once, and
/// the first slot of a new (or changed) schedule.
struct CheckedDefinition {
    labels: Vec<String>,
    first_slot: Option<Instant>,
}

/// A query of runs ([`Client::query_runs`]): every filter that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs of this loop (resolved as [`Client::get`] resolves a key).
    pub loop_key: Option<String>,
    /// Only runs of loops carrying every one of these labels.
    pub labels: Vec<String>,
    /// Only runs with one of these statuses.
    pub statuses: Vec<loops_core::RunStatus>,
    /// Only runs created (started, or recorded skipped) at or after this instant.
    pub since: Option<Instant>,
    /// Only runs created before this instant.
    pub until: Option<Instant>,
    /// At most this many, newest first; `None` = all.
    pub limit: Option<usize>,
}

/// Handle on one loops store.
#[derive(Clone)]
pub struct Client {
    store: Arc<dyn Store>,
    /// The same store, when this client opened it as a SQLite file: for the checks
    /// only that backend has ([`Client::integrity_check`]).
    sqlite: Option<Arc<SqliteStore>>,
    /// The same store, when it is a PostgreSQL database.
    postgres: Option<Arc<PgStore>>,
    backend: Backend,
    data_dir: PathBuf,
}

/// Which database a [`Client`] works on (`doctor` and `daemon status` name it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The embedded default: a SQLite file in the data dir.
    Sqlite { path: PathBuf },
    /// A PostgreSQL database shared by several runners (`--store postgres://…`); the
    /// URL without its password.
    Postgres { url: String },
    /// A store opened by the embedding program ([`Client::with_store`]).
    Other,
}

impl Backend {
    /// `sqlite`, `postgres` or `other`.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres { .. } => "postgres",
            Backend::Other => "other",
        }
    }

    /// Where the data lives: the database file, or the URL without its password.
    pub fn location(&self) -> String {
        match self {
            Backend::Sqlite { path } => path.display().to_string(),
            Backend::Postgres { url } => url.clone(),
            Backend::Other => String::new(),
        }
    }
}

/// The environment variable naming the store (`--store`): a `postgres://` URL, or
/// `sqlite` (the default, a file in the data dir). Never passed on to a child process
/// ([`crate::env::PRIVATE_VARS`]).
pub const STORE_ENV: &str = "LOOPS_STORE";

/// `store` (a `--store` value: a URL, a keyword/value connection string, `sqlite`)
/// as it may be shown: passwords masked (`postgres://u:***@h/db`).
pub fn redact_store(store: &str) -> String {
    loops_postgres::redact_url(store)
}

/// What [`Client::tick`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickSummary {
    /// The runs it started, as recorded once they ended.
    pub claimed: Vec<Run>,
    /// Slots recorded `skipped` (overlap `skip` while a run was in flight).
    pub skipped: Vec<RunId>,
    /// Rows of runners that are gone, recorded `abandoned`.
    pub recovered: Vec<RunId>,
    /// Loops past their `expiresAt`, now `expired`.
    pub expired: Vec<LoopId>,
}

/// What [`Client::run_now`] ran.
#[derive(Debug, Clone, PartialEq)]
pub struct RunNowOutcome {
    /// The run, as recorded once it ended.
    pub run: Run,
    /// Which slot it was: the due one (`due_slot`), a pending retry (`retry_slot`), or
    /// a one-off at now (`ad_hoc`, which leaves the schedule alone).
    pub source: RunSource,
}

/// The JSON document of `run-now --json` (and the MCP tool `loops_run_now`): the
/// run's fields (the run as it is to be shown, redacted or not; its status may still
/// be `running`), and `runNow: {source, advancesLoop}`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunNowJson<'a> {
    #[serde(flatten)]
    pub run: &'a Run,
    pub run_now: RunNowInfo,
}

/// Which slot a run-now run is, in [`RunNowJson`].
#[derive(Debug, Clone, Copy, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunNowInfo {
    pub source: RunSource,
    /// Whether it was the loop's due (or retry) slot, which moves its schedule on.
    pub advances_loop: bool,
}

impl<'a> RunNowJson<'a> {
    /// `run`, claimed for `source`.
    pub fn new(run: &'a Run, source: RunSource) -> Self {
        Self {
            run,
            run_now: RunNowInfo {
                source,
                advances_loop: source != RunSource::AdHoc,
            },
        }
    }
}

/// What [`Client::prune`] deleted (or, on a dry run, would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub runs: usize,
    pub workflow_runs: usize,
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
        Ok(Self::with_sqlite(Arc::new(store), data_dir))
    }

    /// Opens the store in `data_dir` for reading only (see
    /// [`SqliteStore::open_read_only`]): for read commands on a store whose file or
    /// directory is not writable. The data dir must exist and pass the same ownership
    /// rule as [`Client::open`]; every write through this client fails with
    /// [`StoreError::ReadOnly`].
    pub fn open_read_only(data_dir: &Path) -> Result<Self> {
        loops_store::prepare_data_dir(data_dir)?;
        let store = SqliteStore::open_read_only(&data_dir.join(loops_store::DB_FILE))?;
        Ok(Self::with_sqlite(Arc::new(store), data_dir))
    }

    /// Opens the store in `data_dir` for a front end that only reads (`loops list`, the
    /// MCP server's read tools). An existing, current database is opened read-only
    /// ([`Client::open_read_only`]): nothing is written, a writer holding the lock for
    /// seconds does not delay the read, and a store whose file or directory is not
    /// writable can still be read. A missing or older database is opened as by
    /// [`Client::open`] (created or migrated first). `store` is as for
    /// [`Client::open_store`]: a database server (PostgreSQL) needs no special open for
    /// reading.
    pub fn open_for_reading(data_dir: &Path, store: Option<&str>) -> Result<Self> {
        if store_names_a_server(store) {
            return Self::open_store(data_dir, store);
        }
        let db = data_dir.join(loops_store::DB_FILE);
        if std::fs::metadata(&db).is_ok_and(|m| m.len() > 0) {
            match Self::open_read_only(data_dir) {
                Ok(client) => return Ok(client),
                // Needs setting up or migrating: a read-write open does that, or
                // says why it cannot.
                Err(ClientError::Store(StoreError::ReadOnly { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        Self::open(data_dir)
    }

    fn with_sqlite(store: Arc<SqliteStore>, data_dir: &Path) -> Self {
        let backend = Backend::Sqlite {
            path: store
                .path()
                .map_or_else(|| data_dir.join(loops_store::DB_FILE), Path::to_path_buf),
        };
        Self {
            sqlite: Some(Arc::clone(&store)),
            backend,
            ..Self::with_store(store, data_dir)
        }
    }

    /// Opens the store `store` names — a `postgres://` (or `postgresql://`) URL, or
    /// `None` / `sqlite` for the SQLite file in `data_dir` ([`Client::open`]) — with
    /// `data_dir` holding the host-local files either way (pid file, log, wake socket,
    /// spooled output). Anything else is refused ([`ClientError::Invalid`]).
    pub fn open_store(data_dir: &Path, store: Option<&str>) -> Result<Self> {
        match store.map(str::trim).filter(|s| !s.is_empty()) {
            None | Some("sqlite") => Self::open(data_dir),
            Some(url) if loops_postgres::is_postgres_url(url) => {
                loops_store::prepare_data_dir(data_dir)?;
                let pg = Arc::new(PgStore::open(url)?);
                Ok(Self {
                    postgres: Some(Arc::clone(&pg)),
                    backend: Backend::Postgres {
                        url: pg.display_url().to_owned(),
                    },
                    ..Self::with_store(pg, data_dir)
                })
            }
            Some(other) => Err(ClientError::Invalid(format!(
                "--store {:?}: expected a postgres:// URL or `sqlite`",
                loops_postgres::redact_url(other)
            ))),
        }
    }

    /// Wraps an already opened store (tests, other backends).
    pub fn with_store(store: Arc<dyn Store>, data_dir: &Path) -> Self {
        Self {
            store,
            sqlite: None,
            postgres: None,
            backend: Backend::Other,
            data_dir: data_dir.to_path_buf(),
        }
    }

    /// Which database this client works on.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The PostgreSQL server's version and the store's schema version, for `doctor`;
    /// `None` on another backend.
    pub fn postgres_info(&self) -> Result<Option<(String, i64)>> {
        match &self.postgres {
            Some(pg) => Ok(Some((pg.server_version()?, pg.schema_version()?))),
            None => Ok(None),
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
    ///
    /// Refused (nothing written): an invalid name or target, a name that could be
    /// mistaken for an id ([`Client::check_new_name`]), a workflow target naming no
    /// active workflow, a schedule that produces no slot. A cron zone is stored in its
    /// canonical IANA spelling (`europe/berlin` → `Europe/Berlin`).
    pub fn create(&self, mut def: LoopDefinition, now: Instant) -> Result<Loop> {
        let checked = self.check_definition(&mut def, None, now)?;
        let new = NewLoop {
            name: def.name,
            description: def.description,
            schedule: def.schedule,
            target: def.target,
            policy: def.policy,
            labels: checked.labels,
            notify: def.notify,
            next_run_at: checked.first_slot,
        };
        let name = new.name.clone();
        let created = self.store.create_loop(new, now).map_err(|e| match e {
            StoreError::DuplicateName(_) => self.name_taken(&name, e),
            e => ClientError::Store(e),
        })?;
        crate::wake::poke(&self.data_dir);
        Ok(created)
    }

    /// A duplicate name, with the way out when the loop holding it is archived.
    fn name_taken(&self, name: &str, e: StoreError) -> ClientError {
        match self.store.get_loop_by_name(name) {
            Ok(Some(holder)) if holder.status == LoopStatus::Archived => {
                ClientError::Invalid(format!(
                    "{e} (archived; `loops archive {} --free-name` frees the name)",
                    holder.id
                ))
            }
            _ => ClientError::Store(e),
        }
    }

    /// The checks [`Client::create`] and [`Client::edit`] share, in one order, so both
    /// refuse the same definitions with the same messages. `before` is the loop being
    /// edited (`None` on create): a check about a part the edit leaves as it was is
    /// skipped — the name rules, a past `--at` or `--expires-at`, the workflow's
    /// existence — so a loop stored under older rules (or past its expiry) stays
    /// editable. A cron zone is made canonical in `def`.
    fn check_definition(
        &self,
        def: &mut LoopDefinition,
        before: Option<&Loop>,
        now: Instant,
    ) -> Result<CheckedDefinition> {
        let new_name = before.is_none_or(|b| b.name != def.name);
        if new_name {
            validate::loop_name(&def.name)?;
        }
        let label = format!("loop {:?}", def.name);
        validate::description(def.description.as_deref(), &label)?;
        validate::target(&def.target, &label)?;
        validate_policy(&def.policy)?;
        validate::budgets(&def.policy.ops, &def.target)?;
        validate::jitter(&def.schedule, def.policy.jitter_ms)?;
        let labels = validate::labels(&def.labels)?;
        def.policy.runs_on = validate::labels(&def.policy.runs_on)?;
        if !def.policy.runs_on.is_empty() && !self.store.supports_runners() {
            return Err(ClientError::Invalid(format!(
                "--on {}: runner labels need a store with runners (--store postgres://…); \
                 this {} store has one daemon, which takes every loop",
                def.policy.runs_on.join(","),
                self.backend.kind()
            )));
        }
        if let Some(notify) = &def.notify {
            validate::notify(notify, &label)?;
        }
        if let Schedule::Cron { timezone, .. } = &mut def.schedule {
            *timezone = loops_core::cron::canonical_timezone(timezone)
                .map_err(ScheduleError::from)?
                .to_owned();
        }
        let new_schedule = before.is_none_or(|b| b.schedule != def.schedule);
        let first_slot = if new_schedule {
            schedule::initial_next_run(&def.schedule, now)?
        } else {
            None
        };
        if let Some(expires) = def.policy.expires_at {
            if expires <= now && before.is_none_or(|b| b.expires_at != Some(expires)) {
                return Err(ClientError::Invalid(format!(
                    "--expires-at {} is in the past",
                    loops_core::format_instant(&expires)
                )));
            }
        }
        if let Target::Workflow(w) = &def.target {
            let same = before.is_some_and(|b| {
                matches!(&b.target, Target::Workflow(old)
                    if old.workflow == w.workflow && old.params == w.params)
            });
            if !same {
                let workflow = self.active_workflow(&w.workflow)?;
                started::check_params(&workflow, &w.params)?;
            }
        }
        if new_name {
            self.check_new_name(RecordKind::Loop, &def.name)?;
        }
        Ok(CheckedDefinition { labels, first_slot })
    }

    /// All loops, by name, optionally of one status.
    pub fn list(&self, status: Option<LoopStatus>) -> Result<Vec<Loop>> {
        let mut loops = self.store.list_loops(status)?;
        self.mark_held(&mut loops, chrono::Utc::now())?;
        Ok(loops)
    }

    /// Resolves a loop: an exact id wins, then an exact name, then an unambiguous id
    /// prefix. ([`Client::check_new_name`] keeps new names from looking like an id or
    /// an existing id's prefix; a name equal to an id exists only in rows stored before
    /// that rule, and a loop created later may get an id that starts with an existing
    /// name — the name still wins over the prefix.)
    pub fn get(&self, key: &str) -> Result<Loop> {
        let mut lp = self.get_stored(key)?;
        self.mark_held(std::slice::from_mut(&mut lp), chrono::Utc::now())?;
        Ok(lp)
    }

    /// [`Client::get`] as the store keeps the loop, without its account's hold.
    fn get_stored(&self, key: &str) -> Result<Loop> {
        let store = self.store.as_ref();
        resolve(
            RecordKind::Loop,
            key,
            |id| store.get_loop(&LoopId::new(id)),
            Some(&|name: &str| store.get_loop_by_name(name)),
            |prefix, limit| store.loops_with_id_prefix(prefix, limit),
            |l| format!("{} ({})", l.id, l.name),
        )
    }

    /// Refuses a name for a new (or renamed) record of `kind` that could be mistaken
    /// for an id: exactly 12 lowercase hex characters (the shape of every id), or
    /// lowercase hex that is a prefix of an existing record's id. Loops and workflows
    /// each check against their own ids. `create` and `create_workflow` call this; a
    /// future `rename` must too.
    pub fn check_new_name(&self, kind: RecordKind, name: &str) -> Result<()> {
        if validate::is_id_shaped(name) {
            return Err(ClientError::Invalid(format!(
                "{kind} name {name:?} looks like a {kind} id (12 lowercase hex characters); choose another name"
            )));
        }
        if !validate::is_lower_hex(name) {
            return Ok(());
        }
        let shadowed = match kind {
            RecordKind::Loop => self
                .store
                .loops_with_id_prefix(name, 1)?
                .into_iter()
                .next()
                .map(|l| l.id.to_string()),
            // Earlier versions of the same workflow (replaced by this one) don't count.
            RecordKind::Workflow => self
                .store
                .workflows_with_id_prefix(name, PREFIX_MATCHES)?
                .into_iter()
                .find(|w| w.name != name)
                .map(|w| w.id.to_string()),
            // Runs have no names.
            RecordKind::WorkflowRun | RecordKind::Run => None,
        };
        match shadowed {
            Some(id) => Err(ClientError::Invalid(format!(
                "{kind} name {name:?} is a prefix of {kind} id {id}, so it could be mistaken for it; choose another name"
            ))),
            None => Ok(()),
        }
    }

    /// The active workflow a workflow target names (targets name workflows by name).
    fn active_workflow(&self, name: &str) -> Result<Workflow> {
        self.store
            .get_active_workflow(name)?
            .ok_or_else(|| ClientError::Invalid(format!("no active workflow named {name:?}")))
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
        refuse_archived(&lp)?;
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
        refuse_archived(&lp)?;
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
    ///
    /// A loop whose stored row can no longer be read is removed by its exact id or
    /// name (it cannot be resolved otherwise), so a bad row never becomes a trap.
    pub fn remove(&self, key: &str, force: bool) -> Result<RemovedLoop> {
        let lp = match self.get(key) {
            Ok(lp) => lp,
            Err(ClientError::Store(StoreError::Decode(_))) => return self.remove_unreadable(key),
            Err(e) => return Err(e),
        };
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
        Ok(RemovedLoop {
            id: lp.id,
            name: lp.name,
        })
    }

    fn remove_unreadable(&self, key: &str) -> Result<RemovedLoop> {
        let unreadable = self
            .store
            .loop_rows(None)?
            .into_iter()
            .filter_map(std::result::Result::err)
            .find(|u| u.id.as_str() == key || u.name == key)
            .ok_or_else(|| ClientError::NotFound(key.to_owned()))?;
        if !self.store.running_runs(Some(&unreadable.id))?.is_empty() {
            return Err(ClientError::Refused(format!(
                "loop {:?} cannot be read and has runs in flight; stop the daemon first",
                unreadable.name
            )));
        }
        self.store.remove_loop(&unreadable.id)?;
        Ok(RemovedLoop {
            id: unreadable.id,
            name: unreadable.name,
        })
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
                if wf.loop_run_id.as_ref() != Some(&run.id)
                    || wf.status != loops_core::WorkflowRunStatus::Running
                {
                    continue;
                }
                self.store
                    .request_workflow_cancel(wf.id.as_str(), "loop removed", now)?;
                for step in self.store.step_runs(wf.id.as_str())? {
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
        Ok(self.store.list_runs(&RunFilter {
            loop_id,
            limit,
            ..RunFilter::default()
        })?)
    }

    /// The newest run of a loop, if it has one.
    pub fn last_run(&self, id: &LoopId) -> Result<Option<Run>> {
        let filter = RunFilter {
            loop_id: Some(id.clone()),
            limit: Some(1),
            ..RunFilter::default()
        };
        Ok(self.store.list_runs(&filter)?.pop())
    }

    /// Every loop row, optionally of one status, each decoded on its own: a row this
    /// build cannot read is an [`UnreadableLoop`] instead of failing the listing.
    pub fn loop_rows(
        &self,
        status: Option<LoopStatus>,
    ) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        Ok(self.store.loop_rows(status)?)
    }

    /// Runs in flight, of every loop.
    pub fn running_runs(&self) -> Result<Vec<Run>> {
        Ok(self.store.running_runs(None)?)
    }

    /// The active loop due soonest (through the due index: one row, whatever the
    /// number of loops); `None` when nothing is scheduled or its row cannot be read.
    pub fn next_due_loop(&self) -> Result<Option<Loop>> {
        Ok(self
            .store
            .due_loops(chrono::DateTime::<chrono::Utc>::MAX_UTC, 1)?
            .into_iter()
            .next()
            .and_then(std::result::Result::ok))
    }

    /// Whether several daemons ("runners") share this store, each with a lease of its
    /// own (PostgreSQL), instead of the one daemon lease.
    pub fn store_has_runners(&self) -> bool {
        self.store.supports_runners()
    }

    /// The runners registered recently (live ones first); empty on a store without
    /// runners.
    pub fn runners(&self) -> Result<Vec<loops_store::RunnerInfo>> {
        Ok(self.store.runners()?)
    }

    /// The daemon lease row: who holds (or last held) the store.
    pub fn daemon_lease(&self) -> Result<Option<DaemonLease>> {
        Ok(self.store.current_daemon_lease()?)
    }

    /// Problems that would stop `target` from starting here and now (see
    /// [`crate::preflight::check_loop_target`]); empty when it can start.
    pub fn check_target(&self, target: &Target) -> Vec<String> {
        crate::preflight::check_loop_target(self.store.as_ref(), target)
    }

    /// SQLite's full `PRAGMA integrity_check` of the database (`doctor`): `["ok"]`, or
    /// the problems found. `None` for a store this client did not open as a file.
    pub fn integrity_check(&self) -> Result<Option<Vec<String>>> {
        match &self.sqlite {
            Some(store) => Ok(Some(store.integrity_check()?)),
            None => Ok(None),
        }
    }

    /// SQLite's quicker `PRAGMA quick_check` (the daemon's start-up check), as
    /// [`Client::integrity_check`].
    pub fn quick_check(&self) -> Result<Option<Vec<String>>> {
        match &self.sqlite {
            Some(store) => Ok(Some(store.quick_check()?)),
            None => Ok(None),
        }
    }

    /// Deletes finished runs and workflow runs by `policy` (running rows are never
    /// pruned); with `dry_run`, only counts them.
    pub fn prune(&self, policy: &PrunePolicy, dry_run: bool) -> Result<Pruned> {
        Ok(Pruned {
            runs: self.store.prune_runs(policy, dry_run)?,
            workflow_runs: self.store.prune_workflow_runs(policy, dry_run)?,
        })
    }
}

/// Changing loops in place, archiving them, and the filtered listings (issue #11).
impl Client {
    /// Replaces the definition of the loop `key` names with `def` (start from
    /// `LoopDefinition::from(&loop)` and change what should change), keeping its id,
    /// run history and status, and bumping `updatedAt`. Validated exactly as
    /// [`Client::create`] validates (same messages; see
    /// [`Client::check_new_name`] for a new name); an error writes nothing. The
    /// target's type cannot change (a command loop stays a command loop).
    ///
    /// A changed schedule gets its next slot as a new loop would (from `now`); a run in
    /// flight is not disturbed, and a pending retry of the current slot is kept — the
    /// new schedule applies from the slot after it. A loop whose next slot depends on a
    /// run's finish (`fixed_delay`, `dynamic`) and that has a run in flight gets its
    /// next slot when that run ends. An unchanged schedule keeps its next slot; `dueAt`
    /// follows a new jitter. A daemon is poked to re-plan.
    ///
    /// ```no_run
    /// # use loops_runtime::client::{Client, LoopDefinition};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::open_default()?;
    /// let mut def = LoopDefinition::from(&client.get("backup")?);
    /// def.labels.push("nightly".into());
    /// def.policy.max_attempts = 3;
    /// let edited = client.edit("backup", def, chrono::Utc::now())?;
    /// assert_eq!(edited.max_attempts, 3);
    /// # Ok(()) }
    /// ```
    pub fn edit(&self, key: &str, mut def: LoopDefinition, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        if def.target.kind() != lp.target.kind() {
            return Err(ClientError::Invalid(format!(
                "loop {:?} runs a {} target; its type cannot be changed (create a new loop instead)",
                lp.name,
                lp.target.kind()
            )));
        }
        let edited = self.update_guarded(&lp.id, now, |current| {
            let checked = self.check_definition(&mut def, Some(current), now)?;
            let (next_run_at, retry_scheduled_for) =
                self.edited_state(current, &def.schedule, checked.first_slot)?;
            Ok(LoopUpdate {
                definition: NewLoop {
                    name: def.name.clone(),
                    description: def.description.clone(),
                    schedule: def.schedule.clone(),
                    target: def.target.clone(),
                    policy: def.policy.clone(),
                    labels: checked.labels,
                    notify: def.notify.clone(),
                    next_run_at,
                },
                status: current.status,
                retry_scheduled_for,
            })
        })?;
        crate::wake::poke(&self.data_dir);
        Ok(edited)
    }

    /// The schedule state after an edit: kept when the schedule is the same or a
    /// retry of the current slot is pending; else the new schedule's first slot
    /// (`first_slot`), or none yet while a run whose finish decides it is in flight.
    fn edited_state(
        &self,
        current: &Loop,
        schedule: &Schedule,
        first_slot: Option<Instant>,
    ) -> Result<(Option<Instant>, Option<Instant>)> {
        if *schedule == current.schedule || current.retry_scheduled_for.is_some() {
            return Ok((current.next_run_at, current.retry_scheduled_for));
        }
        let waits_for_finish = !matches!(schedule, Schedule::Once { .. })
            && loops_core::transitions::next_depends_on_finish(schedule);
        if waits_for_finish && !self.store.running_runs(Some(&current.id))?.is_empty() {
            return Ok((None, None));
        }
        Ok((first_slot, None))
    }

    /// Gives the loop `key` names a new name, under the rules of [`Client::create`]
    /// (not taken, not shaped like an id: [`Client::check_new_name`]). Its id and run
    /// history stay; its runs carry the new name.
    pub fn rename(&self, key: &str, new_name: &str, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        let mut def = LoopDefinition::from(&lp);
        def.name = new_name.to_owned();
        self.edit(lp.id.as_str(), def, now)
    }

    /// Archives a loop: it is never scheduled (nor run by `run-now`), `list` hides it
    /// (`list --all` / `--status archived` show it), and its runs are kept. A run in
    /// flight finishes and is recorded. The name stays the loop's (so `show`, `runs`
    /// and `unarchive` still find it by name) unless `free_name`, which renames it
    /// `NAME~ID` in the same write so a new loop can take the name (also of a loop
    /// archived before).
    pub fn archive(&self, key: &str, free_name: bool, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        // An archived loop can still give up its name.
        if lp.status == LoopStatus::Archived && !free_name {
            return Err(ClientError::Invalid(format!(
                "loop {:?} is already archived",
                lp.name
            )));
        }
        self.update_guarded(&lp.id, now, |current| {
            let mut update = same_state(current, LoopStatus::Archived);
            if free_name {
                update.definition.name = freed_name(current);
            }
            Ok(update)
        })
    }

    /// Brings an archived loop back as `paused` — nothing runs until `resume`, which
    /// then applies its catch-up policy to the slot it kept.
    pub fn unarchive(&self, key: &str, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        if lp.status != LoopStatus::Archived {
            return Err(ClientError::Invalid(format!(
                "loop {:?} is not archived (it is {})",
                lp.name, lp.status
            )));
        }
        self.update_guarded(&lp.id, now, |current| {
            Ok(same_state(current, LoopStatus::Paused))
        })
    }

    /// Reads the loop, asks `plan` for its update and writes it guarded on the version
    /// read; when the loop moved meanwhile (a daemon claimed a slot), reads it again
    /// and plans again, a few times.
    fn update_guarded(
        &self,
        id: &LoopId,
        now: Instant,
        mut plan: impl FnMut(&Loop) -> Result<LoopUpdate>,
    ) -> Result<Loop> {
        for _ in 0..EDIT_ATTEMPTS {
            let current = self
                .store
                .get_loop(id)?
                .ok_or_else(|| ClientError::NotFound(id.to_string()))?;
            let update = plan(&current)?;
            let version = LoopVersion::of(&current);
            let name = update.definition.name.clone();
            let written = self
                .store
                .update_loop_definition(id, &update, &version, now)
                .map_err(|e| match e {
                    StoreError::DuplicateName(_) => self.name_taken(&name, e),
                    e => ClientError::Store(e),
                })?;
            if let Some(updated) = written {
                return Ok(updated);
            }
        }
        Err(ClientError::Refused(format!(
            "loop {id} kept changing while it was being updated; nothing was written, try again"
        )))
    }

    /// Loops matching `filter` (by default every loop but archived ones), by name;
    /// labels are matched through the store's label index. Fails on a row that cannot
    /// be read, as [`Client::list`] does.
    pub fn list_matching(&self, filter: &LoopFilter) -> Result<Vec<Loop>> {
        for label in &filter.labels {
            validate::label(label)?;
        }
        let mut loops = self
            .store
            .loop_rows_matching(filter)?
            .into_iter()
            .map(|row| row.map_err(|u| ClientError::Store(u.into_error())))
            .collect::<Result<Vec<_>>>()?;
        self.mark_held(&mut loops, chrono::Utc::now())?;
        Ok(loops)
    }

    /// Runs newest first, filtered by loop, labels, statuses and a creation window
    /// (each through an index of the store).
    pub fn query_runs(&self, query: &RunQuery) -> Result<Vec<Run>> {
        for label in &query.labels {
            validate::label(label)?;
        }
        if let (Some(since), Some(until)) = (query.since, query.until) {
            if since >= until {
                return Err(ClientError::Invalid(format!(
                    "--since {} is not before --until {}",
                    loops_core::format_instant(&since),
                    loops_core::format_instant(&until)
                )));
            }
        }
        let loop_id = match &query.loop_key {
            Some(key) => Some(self.get(key)?.id),
            None => None,
        };
        Ok(self.store.list_runs(&RunFilter {
            loop_id,
            limit: query.limit,
            statuses: query.statuses.clone(),
            since: query.since,
            until: query.until,
            labels: query.labels.clone(),
        })?)
    }
}

/// How many times an update is planned again when the loop moved under it.
const EDIT_ATTEMPTS: usize = 5;

/// `lp` as it is, with `status`: archive and unarchive.
fn same_state(lp: &Loop, status: LoopStatus) -> LoopUpdate {
    let def = LoopDefinition::from(lp);
    LoopUpdate {
        definition: NewLoop {
            name: def.name,
            description: def.description,
            schedule: def.schedule,
            target: def.target,
            policy: def.policy,
            labels: def.labels,
            notify: def.notify,
            next_run_at: lp.next_run_at,
        },
        status,
        retry_scheduled_for: lp.retry_scheduled_for,
    }
}

/// `NAME~ID` (the name shortened so the whole stays within the 200-byte name limit):
/// unique, never shaped like an id, and still telling which loop it was.
fn freed_name(lp: &Loop) -> String {
    const MAX_NAME: usize = 200;
    let room = MAX_NAME - 1 - lp.id.as_str().len();
    let mut end = lp.name.len().min(room);
    while !lp.name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}~{}", &lp.name[..end], lp.id)
}

/// Whether `--store` names a database server rather than the data dir's SQLite file.
pub(crate) fn store_names_a_server(store: Option<&str>) -> bool {
    store
        .map(str::trim)
        .is_some_and(|s| !s.is_empty() && s != "sqlite")
}

/// Pause, resume, stop and run-now leave an archived loop alone: `unarchive` first.
fn refuse_archived(lp: &Loop) -> Result<()> {
    if lp.status == LoopStatus::Archived {
        return Err(ClientError::Invalid(format!(
            "loop {:?} is archived; `loops unarchive {}` brings it back (paused)",
            lp.name, lp.id
        )));
    }
    Ok(())
}

/// Running loops in this process (`tick`, `run-now`, the daemon): each call builds an
/// engine on this client's store, with its output spooled in the data dir.
impl Client {
    /// An engine for this process; on a store with runners (PostgreSQL) it runs as a
    /// short-lived runner of its own, so its runs are fenced and, should this process
    /// die, recovered by the others once its lease expires. Call inside a runtime.
    fn engine(&self, max_concurrent: NonZeroUsize) -> Result<(Arc<Engine>, Option<CliRunner>)> {
        let mut cfg = EngineConfig {
            max_concurrent,
            ..EngineConfig::for_data_dir(&self.data_dir)
        };
        let runner = if self.store.supports_runners() {
            // Its runs are held by a supervisor of this process, on deadlines under its
            // runner lease: stopped or cut off, this process cannot leave a run going
            // beside another runner's retry (without a supervisor program — a library
            // embedding the engine — they run here).
            let supervisors = crate::supervisor::program().map(|program| {
                crate::supervisor::Supervisors::lazy(crate::supervisor::SupervisorSettings {
                    program: program.to_path_buf(),
                    dir: crate::supervisor::dir_in(&self.data_dir),
                    kill_grace: cfg.exec.kill_grace,
                    clock: crate::supervisor::protocol::DeadlineClock::Boottime,
                    runner_id: cfg.runner_id.clone(),
                })
            });
            let runner = CliRunner::register(
                &self.store,
                &cfg.runner_id,
                max_concurrent,
                supervisors.clone(),
                cfg.exec.kill_grace,
            )?;
            if let Some(s) = supervisors {
                cfg.exec.launcher = crate::supervisor::Launcher::Supervised(s);
            }
            cfg.fence = Some(runner.fence.clone());
            Some(runner)
        } else {
            None
        };
        let engine = Engine::new(Arc::clone(&self.store), cfg, Arc::new(SystemClock))?;
        Ok((engine, runner))
    }

    /// One scheduling pass here (`loops tick`, e.g. from system cron): recovers the
    /// rows of runners that are gone, expires loops, claims every due slot — at most
    /// `max_concurrent` running at once, the rest as runs finish — and waits for every
    /// run it started, then for the notifications they queued (bounded by
    /// [`crate::notify::CLI_DELIVERY_BOUND`]; the daemon delivers what is left).
    pub async fn tick(&self, max_concurrent: NonZeroUsize) -> Result<TickSummary> {
        let (engine, _runner) = self.engine(max_concurrent)?;
        let _heartbeat = engine.spawn_lease_renewal();
        let mut summary = TickSummary::default();
        let mut claimed = Vec::new();
        loop {
            let report = engine.pass(true)?;
            claimed.extend(report.claimed);
            summary.skipped.extend(report.skipped);
            summary.recovered.extend(report.recovered);
            summary.expired.extend(report.expired);
            if !report.saturated {
                break;
            }
            // Every slot is busy: wait for one to free, then pick up the rest.
            engine.run_finished().await;
        }
        engine.drain().await;
        self.deliver_queued(&engine).await;
        summary.claimed = claimed
            .iter()
            .filter_map(|id| self.store.get_run(id).ok().flatten())
            .collect();
        Ok(summary)
    }

    /// Runs a loop now, here (`loops run-now`): its due slot (or pending retry slot)
    /// when one is due, advancing the loop; else a one-off slot at now that leaves the
    /// schedule alone. A loop with overlap `skip` and a run in flight is refused
    /// ([`crate::engine::EngineError::Busy`]) unless `allow_overlap`. Returns once the
    /// run ended and the notifications it queued were delivered (bounded by
    /// [`crate::notify::CLI_DELIVERY_BOUND`]); a daemon is poked to re-plan.
    pub async fn run_now(&self, key: &str, allow_overlap: bool) -> Result<RunNowOutcome> {
        self.start_run_now(key, allow_overlap)?.finish().await
    }

    /// Refuses daemon settings this store cannot honour (see
    /// [`crate::daemon::runner_budget`]: on a store shared by runners, a lease TTL the
    /// kill grace does not fit), before anything is started or taken.
    pub fn check_daemon_config(
        &self,
        cfg: &crate::daemon::DaemonConfig,
    ) -> std::result::Result<(), crate::daemon::DaemonError> {
        if self.store.supports_runners() {
            crate::daemon::runner_budget(cfg)
                .map_err(|e| crate::daemon::DaemonError::Config(e.to_string()))?;
        }
        Ok(())
    }

    /// Runs the daemon on this client's store until `shutdown` resolves (see
    /// [`crate::daemon::run`]).
    pub async fn run_daemon(
        &self,
        cfg: crate::daemon::DaemonConfig,
        shutdown: impl std::future::Future<Output = crate::daemon::Stop>,
    ) -> std::result::Result<(), crate::daemon::DaemonError> {
        let mut cfg = cfg;
        // Only a SQLite store is a file in the data dir the daemon must watch.
        cfg.watch_store_file &= matches!(self.backend, Backend::Sqlite { .. });
        let ran = crate::daemon::run(Arc::clone(&self.store), cfg, shutdown).await;
        if self.postgres.is_some() {
            // For the benchmarks (BENCHMARKS.md §15): round trips per run.
            tracing::info!(
                round_trips = loops_postgres::round_trips(),
                "PostgreSQL round trips of this daemon"
            );
        }
        ran
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
    ) -> Result<Workflow> {
        loops_core::workflow::validate(spec)?;
        self.check_new_name(RecordKind::Workflow, &spec.name)?;
        Ok(self.store.create_workflow(spec, replace, now)?)
    }

    /// Resolves a workflow like [`Client::get`] resolves a loop: an exact id (of any
    /// version, archived or not) wins, then an active spec's exact name, then an
    /// unambiguous id prefix.
    pub fn get_workflow(&self, key: &str) -> Result<Workflow> {
        let store = self.store.as_ref();
        resolve(
            RecordKind::Workflow,
            key,
            |id| store.get_workflow(id),
            Some(&|name: &str| store.get_active_workflow(name)),
            |prefix, limit| store.workflows_with_id_prefix(prefix, limit),
            |w| format!("{} ({} v{})", w.id, w.name, w.version),
        )
    }

    /// Specs, optionally of one status.
    pub fn list_workflows(&self, status: Option<WorkflowStatus>) -> Result<Vec<Workflow>> {
        Ok(self.store.list_workflows(status)?)
    }

    /// Archives a spec (loops naming it stop finding it).
    pub fn archive_workflow(&self, key: &str, now: Instant) -> Result<Workflow> {
        let wf = self.get_workflow(key)?;
        Ok(self.store.archive_workflow(wf.id.as_str(), now)?)
    }

    /// Resolves a workflow run by exact id, then unambiguous id prefix (runs have no
    /// names).
    pub fn get_workflow_run(&self, key: &str) -> Result<WorkflowRun> {
        let store = self.store.as_ref();
        resolve(
            RecordKind::WorkflowRun,
            key,
            |id| store.get_workflow_run(id),
            None,
            |prefix, limit| store.workflow_runs_with_id_prefix(prefix, limit),
            |r| format!("{} ({})", r.id, r.workflow_name),
        )
    }

    /// Runs newest first, of one workflow (by name) or all.
    pub fn workflow_runs(
        &self,
        workflow: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<WorkflowRun>> {
        let name = match workflow {
            Some(key) => Some(match self.get_workflow(key) {
                Ok(w) => w.name,
                Err(ClientError::WorkflowNotFound(_)) => {
                    // Archived specs' runs are still listed by name.
                    let known = self
                        .store
                        .list_workflows(None)?
                        .into_iter()
                        .any(|w| w.name == key);
                    if !known {
                        return Err(ClientError::WorkflowNotFound(key.to_owned()));
                    }
                    key.to_owned()
                }
                Err(e) => return Err(e),
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
        Ok(self
            .store
            .request_workflow_cancel(run.id.as_str(), reason, now)?)
    }

    /// The stored workflow of exactly this id (any version, archived or not): the spec
    /// a workflow run executed.
    pub fn workflow_by_id(&self, id: &WorkflowId) -> Result<Option<Workflow>> {
        Ok(self.store.get_workflow(id.as_str())?)
    }

    /// The step runs of a workflow run, in spec order.
    pub fn step_runs(&self, run: &WorkflowRunId) -> Result<Vec<StepRun>> {
        Ok(self.store.step_runs(run.as_str())?)
    }

    /// A workflow run's event log, oldest first: all of it, or its last `limit` events.
    pub fn workflow_events(
        &self,
        run: &WorkflowRunId,
        limit: Option<usize>,
    ) -> Result<Vec<WorkflowEvent>> {
        Ok(self.store.workflow_events(run.as_str(), limit)?)
    }

    /// Runs `workflow` with `params` to its end in this process (`workflows run`): not
    /// for a loop's slot, no daemon fence, timestamps from the system clock. Params
    /// that do not fit the spec are refused before anything is recorded. `interrupt`
    /// stops it (Ctrl-C): running steps are terminated and the run ends
    /// [`RunEnd::Interrupted`].
    pub async fn run_workflow(
        &self,
        workflow: &Workflow,
        timeout: Option<std::time::Duration>,
        params: &loops_core::workflow_params::ParamValues,
        interrupt: tokio::sync::watch::Receiver<Option<String>>,
    ) -> Result<RunEnd> {
        started::check_params(workflow, params)?;
        let ctx = self.workflow_context(timeout, params, interrupt);
        Ok(crate::workflow::run(&ctx, workflow).await?)
    }

    /// Resets steps whose processes are gone to `pending`; refuses while any lives.
    pub fn recover_workflow_run(
        &self,
        key: &str,
        reason: &str,
        now: Instant,
    ) -> Result<(WorkflowRun, Vec<StepRun>)> {
        let run = self.get_workflow_run(key)?;
        let steps = crate::workflow::recover(self.store.as_ref(), &run.id, reason, now)?;
        Ok((run, steps))
    }
}

/// The runner lease of a `tick` or `run-now` on a store with runners: renewed every
/// third of its TTL while it lives, released when dropped.
struct CliRunner {
    store: Arc<dyn Store>,
    fence: loops_store::Fence,
    renewal: tokio::task::JoinHandle<()>,
}

impl CliRunner {
    /// Registers, and renews from a task of the current runtime; with `supervisors`,
    /// each renewal that succeeded extends their units' deadlines.
    fn register(
        store: &Arc<dyn Store>,
        runner_id: &str,
        capacity: NonZeroUsize,
        supervisors: Option<Arc<crate::supervisor::Supervisors>>,
        kill_grace: std::time::Duration,
    ) -> Result<Self> {
        let pid = std::process::id();
        let registration = loops_store::RunnerRegistration {
            runner_id: runner_id.to_owned(),
            host: crate::process::hostname(),
            pid,
            pid_start_time: crate::process::process_start_time(pid),
            labels: Vec::new(),
            capacity: capacity.get(),
        };
        let ttl = crate::daemon::DEFAULT_LEASE_TTL;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let began = supervisors.as_ref().map_or(0, |s| s.clock_now());
        let lease = store.register_runner(&registration, ttl_ms)?;
        if let Some(s) = &supervisors {
            let budget = crate::supervisor::deadline::runner_budget(ttl, kill_grace, ttl / 3)
                .map_err(|e| ClientError::Invalid(e.to_string()))?;
            s.set_runner_lease(budget, began);
        }
        let (renewing, fence) = (Arc::clone(store), lease.fence.clone());
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                let began = supervisors.as_ref().map_or(0, |s| s.clock_now());
                match renewing.renew_runner(&fence, ttl_ms) {
                    Ok(Some(_)) => {
                        if let Some(s) = &supervisors {
                            s.runner_renewed(began);
                        }
                    }
                    Ok(None) => {
                        tracing::warn!(
                            "this process's runner lease expired; its writes are refused"
                        );
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot renew this process's runner lease")
                    }
                }
            }
        });
        Ok(Self {
            store: Arc::clone(store),
            fence: lease.fence,
            renewal,
        })
    }
}

impl Drop for CliRunner {
    fn drop(&mut self) {
        self.renewal.abort();
        if let Err(e) = self.store.release_runner(&self.fence) {
            tracing::warn!(error = %e, "cannot release this process's runner lease");
        }
    }
}

/// How many id-prefix matches are fetched: enough to name a few in an "ambiguous" error.
pub(crate) const PREFIX_MATCHES: usize = 6;

/// How long `remove --force` waits, after SIGTERM plus the kill grace, for a run's
/// runner to record its end.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn describe_running(run: &Run) -> String {
    match run.pid {
        Some(pid) => format!("run {} pid {pid}", run.id),
        None => format!("run {}", run.id),
    }
}

pub(crate) type Lookup<'a, T> = &'a dyn Fn(&str) -> std::result::Result<Option<T>, StoreError>;

/// The one resolution rule for every kind of record: an exact id wins, then an exact
/// name (`by_name`, for kinds that have names), then an id prefix that matches exactly
/// one record. No match is `*NotFound`, several are [`ClientError::Ambiguous`] naming a
/// few of them with `label`.
pub(crate) fn resolve<T>(
    kind: RecordKind,
    key: &str,
    by_id: impl Fn(&str) -> std::result::Result<Option<T>, StoreError>,
    by_name: Option<Lookup<'_, T>>,
    by_prefix: impl Fn(&str, usize) -> std::result::Result<Vec<T>, StoreError>,
    label: impl Fn(&T) -> String,
) -> Result<T> {
    let not_found = || match kind {
        RecordKind::Loop => ClientError::NotFound(key.to_owned()),
        RecordKind::Workflow => ClientError::WorkflowNotFound(key.to_owned()),
        RecordKind::WorkflowRun => ClientError::WorkflowRunNotFound(key.to_owned()),
        RecordKind::Run => ClientError::RunNotFound(key.to_owned()),
    };
    if key.is_empty() {
        return Err(not_found());
    }
    if let Some(found) = by_id(key)? {
        return Ok(found);
    }
    if let Some(by_name) = by_name {
        if let Some(found) = by_name(key)? {
            return Ok(found);
        }
    }
    let mut matches = by_prefix(key, PREFIX_MATCHES)?;
    if matches.len() <= 1 {
        return matches.pop().ok_or_else(not_found);
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
        kind,
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
    validate::ops(&policy.ops, policy.retry_delay_ms)
}
