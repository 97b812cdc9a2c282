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

mod definitions;
mod lifecycle;
mod running;
mod runs;
mod workflows;

pub use lifecycle::RemovedLoop;
pub use loops_core::LoopDefinition;
pub use running::{RunNowInfo, RunNowJson, RunNowOutcome, TickSummary};
pub use runs::{Pruned, RunQuery};

use definitions::{next_slot_from, validate_policy};
use lifecycle::refuse_archived;
use running::CliRunner;

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
    Instant, Loop, LoopId, LoopStatus, Policy, Run, RunId, RunSource, Schedule, Target, WorkflowId,
    WorkflowRunId, WorkflowStatus,
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

impl ClientError {
    /// The store's error under this one, however it was reached: directly, through the
    /// engine (`tick`, `run-now`) or through a workflow run's recovery. Front ends map
    /// it as a store error (a corrupt store is the same failure on every route).
    pub fn store_error(&self) -> Option<&StoreError> {
        use crate::engine::EngineError;
        use crate::workflow::RecoverError;
        match self {
            ClientError::Store(e)
            | ClientError::Engine(EngineError::Store(e))
            | ClientError::Recover(RecoverError::Store(e)) => Some(e),
            _ => None,
        }
    }

    /// Refused in the store's current state, nothing changed: a refusal, or a loop
    /// busy with a run in flight (`run-now` without `--allow-overlap`).
    pub fn is_refused(&self) -> bool {
        matches!(
            self,
            ClientError::Refused(_) | ClientError::Engine(crate::engine::EngineError::Busy { .. })
        )
    }

    /// Started and did not succeed: the engine stopped for a reason other than its
    /// store or a busy loop (a lost lease, a task that failed).
    pub fn is_failure(&self) -> bool {
        matches!(self, ClientError::Engine(_)) && !self.is_refused() && self.store_error().is_none()
    }
}

/// Result alias for client calls.
pub type Result<T> = std::result::Result<T, ClientError>;

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
        crate::preflight::check_loop_target(target, |name| self.store.get_active_workflow(name))
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
}

/// Whether `--store` names a database server rather than the data dir's SQLite file.
pub(crate) fn store_names_a_server(store: Option<&str>) -> bool {
    store
        .map(str::trim)
        .is_some_and(|s| !s.is_empty() && s != "sqlite")
}

/// How many id-prefix matches are fetched: enough to name a few in an "ambiguous" error.
pub(crate) const PREFIX_MATCHES: usize = 6;

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
