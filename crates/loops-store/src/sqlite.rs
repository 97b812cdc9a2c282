//! The SQLite backend of [`Store`].
//!
//! One connection behind a mutex per [`SqliteStore`]; several processes (or several
//! stores in one process) share a file through WAL mode and the busy timeout. Every
//! write runs in a `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so
//! concurrent writers queue on the busy timeout instead of failing on a stale read
//! snapshot, and a fenced write checks the daemon lease in the same transaction.
//!
//! Instants are stored as INTEGER milliseconds since the epoch, so values read back
//! carry millisecond precision (sub-millisecond parts of inputs are dropped).

use crate::{
    BatchClaim, ClaimOutcome, ClaimRefused, ClaimRequest, DaemonLease, Fence, LeaseAcquire,
    LeaseHolder, LoopAdvance, PrunePolicy, Result, RunFilter, RunWrite, RunWritten, Store,
    StoreError, UnreadableLoop,
};
use loops_core::transitions;
use loops_core::{
    Instant, Loop, LoopId, LoopStatus, NewLoop, Run, RunId, RunOutcome, RunSource, RunStatus, Usage,
};
use rusqlite::types::FromSql;
use rusqlite::{
    ffi, params, Connection, ErrorCode, OpenFlags, OptionalExtension, Row, Transaction,
    TransactionBehavior,
};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// First 16 bytes of every SQLite 3 database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// `PRAGMA application_id` of a loops database (ASCII "loop"); set by migration 1.
const APPLICATION_ID: i64 = 0x6C6F_6F70;
/// `meta` key of the last fencing token handed out, so tokens never repeat even after
/// the lease row is released.
const META_LEASE_TOKEN: &str = "daemon_lease_token";
/// New ids are retried on the (astronomically unlikely) collision of 48 random bits.
const ID_ATTEMPTS: usize = 8;

/// One embedded schema migration. Applied migrations are never edited: add a file.
struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "workflows",
        sql: include_str!("../migrations/0002_workflows.sql"),
    },
    Migration {
        version: 3,
        name: "step summaries",
        sql: include_str!("../migrations/0003_step_summaries.sql"),
    },
    Migration {
        version: 4,
        name: "step exit status unknown",
        sql: include_str!("../migrations/0004_step_exit_status_unknown.sql"),
    },
];

/// The newest schema version this build knows (the last entry of the migrations).
pub const SCHEMA_VERSION: i64 = 4;

mod workflows;

macro_rules! loop_cols {
    () => {
        "id, name, description, status, schedule_json, target_json, next_run_at, \
         retry_scheduled_for, catch_up, catch_up_limit, overlap, max_attempts, \
         retry_delay_ms, lease_ms, expires_at, created_at, updated_at"
    };
}

macro_rules! run_cols {
    () => {
        "id, loop_id, loop_name, scheduled_for, attempt, status, source, started_at, \
         finished_at, exit_code, duration_ms, stdout, stderr, error, pid, pid_start_time, \
         claimed_by, lease_expires_at, summary, usage_json, created_at, updated_at"
    };
}

/// Failure statuses as a SQL list; must match [`RunStatus::is_failure`] and the
/// `runs_failed_slot` partial index (SQLite only uses it for an identical term).
macro_rules! failure_statuses {
    () => {
        "('failed', 'timed_out', 'abandoned')"
    };
}

/// The SQLite implementation of [`Store`].
pub struct SqliteStore {
    /// Shared (weakly) with the background checkpointer, which briefly holds it.
    conn: Arc<Mutex<Connection>>,
    /// `None` for an in-memory store.
    path: Option<PathBuf>,
    /// The background checkpointer, once started; dropping it stops the thread.
    checkpointer: OnceLock<Checkpointer>,
}

/// Handle to the background checkpoint thread: commits nudge it.
struct Checkpointer {
    nudge: mpsc::SyncSender<()>,
    /// A nudge is on its way and not yet acted on, so a busy writer sends one, not one
    /// per commit.
    pending: Arc<AtomicBool>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating when missing, mode 0600) the database at `path`, switches it to
    /// WAL and applies pending migrations.
    ///
    /// A file that is not a loops database yields [`StoreError::Corrupt`] and is left
    /// byte-for-byte untouched: it is inspected read-only before anything is written. A
    /// database from a newer build yields [`StoreError::TooNew`], also untouched. A file
    /// or directory that cannot be written yields [`StoreError::ReadOnly`].
    pub fn open(path: &Path) -> Result<Self> {
        create_db_file(path)?;
        let found = inspect(path)?;
        let display = path.display().to_string();
        let readonly = |e: StoreError| match e {
            StoreError::Sqlite(se) if is_readonly_error(&se, true) => StoreError::ReadOnly {
                path: display.clone(),
                source: Box::new(se),
            },
            other => other,
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| readonly(e.into()))?;
        // SQLite silently falls back to read-only when the file is not writable.
        if conn.is_readonly(rusqlite::MAIN_DB)? {
            return Err(StoreError::ReadOnly {
                path: display,
                source: "the database file cannot be opened for writing".into(),
            });
        }
        let mut conn = conn;
        setup_connection(&mut conn, Some(&display), found).map_err(readonly)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: Some(path.to_path_buf()),
            checkpointer: OnceLock::new(),
        })
    }

    /// Opens an existing, current-schema database for reading only: nothing is
    /// created, migrated or written, and every write fails with
    /// [`StoreError::ReadOnly`]. This is how read commands (`list`, `show`, `runs`…)
    /// serve a store whose file or directory is not writable.
    ///
    /// A WAL database needs its `-shm` index; where that cannot be created (a read-only
    /// directory after the last writer removed it), the file is opened `immutable`:
    /// SQLite then reads the database file alone, which is exact because nobody can
    /// have written a WAL next to it.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        let display = path.display().to_string();
        let needs_setup = |found: i64| StoreError::ReadOnly {
            path: display.clone(),
            source: format!(
                "the store (schema {found}) needs setting up or migrating to schema \
                 {SCHEMA_VERSION}, which needs write access"
            )
            .into(),
        };
        if !has_sqlite_header(path)? {
            return Err(needs_setup(0));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let opened = Connection::open_with_flags(path, flags).and_then(|conn| {
            conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            })?;
            Ok(conn)
        });
        let conn = match opened {
            Ok(conn) => conn,
            // No -shm index and none can be created (read-only directory).
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::CannotOpen) => {
                let uri = format!("file:{}?immutable=1", uri_path(path));
                Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
                    .map_err(|e| classify_open_error(e, &display))?
            }
            Err(e) => return Err(classify_open_error(e, &display)),
        };
        let found = inspect_schema(&conn, &display)?;
        if found < SCHEMA_VERSION {
            return Err(needs_setup(found));
        }
        conn.pragma_update(None, "foreign_keys", true)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: Some(path.to_path_buf()),
            checkpointer: OnceLock::new(),
        })
    }

    /// `PRAGMA quick_check`: `["ok"]` for a healthy database, else SQLite's list of
    /// problems. Checks every page and b-tree (not index contents against tables), in
    /// time linear in the file size; the daemon runs it before taking the store.
    pub fn quick_check(&self) -> Result<Vec<String>> {
        let conn = self.lock();
        let result = (|| {
            let mut stmt = conn.prepare("PRAGMA quick_check")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })();
        match result {
            Ok(rows) => Ok(rows),
            // A page too damaged to walk fails the pragma itself.
            Err(e) if crate::error::is_corruption(&e) => Ok(vec![e.to_string()]),
            Err(e) => Err(StoreError::from(e).with_path_of(self)),
        }
    }

    /// A private in-memory store with the full schema (for tests and dry runs).
    pub fn open_in_memory() -> Result<Self> {
        let mut conn = Connection::open_in_memory()?;
        setup_connection(&mut conn, None, 0)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: None,
            checkpointer: OnceLock::new(),
        })
    }

    /// Opens the default store: [`crate::data_dir`], created when missing, then
    /// [`crate::DB_FILE`] inside it.
    pub fn open_default() -> Result<Self> {
        let dir = crate::data_dir()?;
        crate::prepare_data_dir(&dir)?;
        Self::open(&dir.join(crate::DB_FILE))
    }

    /// The database file, or `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The schema version recorded in `schema_migrations`.
    pub fn schema_version(&self) -> Result<i64> {
        let conn = self.lock();
        Ok(conn.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |r| r.get(0),
        )?)
    }

    /// `PRAGMA integrity_check`: `["ok"]` for a healthy database, else SQLite's list of
    /// problems (for `loops doctor`).
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        let conn = self.lock();
        let mut stmt = conn.prepare("PRAGMA integrity_check")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-applied write behind (the
        // transaction rolls back when dropped), so the connection is still usable.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn display_path(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| ":memory:".to_owned(), |p| p.display().to_string())
    }

    /// Tells the background checkpointer (if any) that the WAL grew.
    fn nudge_checkpointer(&self) {
        if let Some(cp) = self.checkpointer.get() {
            if !cp.pending.swap(true, Ordering::AcqRel) {
                // Full means a nudge is already queued; gone means the thread ended.
                let _ = cp.nudge.try_send(());
            }
        }
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, after checking `fence` (at the
    /// given instant) inside it; commits only when `f` succeeds.
    fn write<T>(
        &self,
        fence: Option<(&Fence, Instant)>,
        f: impl FnOnce(&Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.lock();
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some((fence, now)) = fence {
                check_fence(&tx, fence, now)?;
            }
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })();
        drop(conn);
        if result.is_ok() {
            self.nudge_checkpointer();
        }
        result.map_err(|e| match e {
            StoreError::Sqlite(se) if is_readonly_error(&se, false) => StoreError::ReadOnly {
                path: self.display_path(),
                source: Box::new(se),
            },
            other => other.with_path_of(self),
        })
    }
}

// ---------------------------------------------------------------------------------
// Opening and migrations
// ---------------------------------------------------------------------------------

/// Creates the database file with mode 0600 when missing, so SQLite never creates it
/// with the umask's (usually world-readable) mode.
///
/// A `-wal` or `-shm` file found next to a database we just created belongs to a
/// database that was deleted (`rm loops.db`), maybe still open in a daemon that has
/// not noticed yet. SQLite would adopt them for the new file — replaying the old
/// database's pages into it and sharing one WAL between two databases — so their
/// names are removed first (a process holding them keeps its own inodes).
fn create_db_file(path: &Path) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => {
            // The umask can only narrow 0600, but an odd umask could drop the owner's
            // bits; we created the file, so we own its mode.
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| io_error(path, e))?;
            }
            for suffix in ["-wal", "-shm", "-journal"] {
                let mut orphan = path.as_os_str().to_owned();
                orphan.push(suffix);
                match std::fs::remove_file(&orphan) {
                    Ok(()) => tracing::warn!(
                        file = %Path::new(&orphan).display(),
                        "removed a leftover of a deleted database"
                    ),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error(Path::new(&orphan), e)),
                }
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Maps an I/O error on the database file: permission problems read as "read-only",
/// anything else is reported against the data dir.
fn io_error(path: &Path, e: std::io::Error) -> StoreError {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => StoreError::ReadOnly {
            path: path.display().to_string(),
            source: Box::new(e),
        },
        _ => StoreError::DataDir {
            path: path
                .parent()
                .map_or_else(|| path.display().to_string(), |p| p.display().to_string()),
            source: e,
        },
    }
}

/// Whether a SQLite error means "cannot write here". While opening, `CANTOPEN` also
/// counts: the read-only inspection already proved the file readable, so failing to
/// open it (or its `-wal`/`-shm` companions) for writing is a permission problem.
fn is_readonly_error(e: &rusqlite::Error, opening: bool) -> bool {
    match e.sqlite_error_code() {
        Some(ErrorCode::ReadOnly) => true,
        Some(ErrorCode::CannotOpen) => opening,
        _ => false,
    }
}

/// `path` for a `file:` URI: everything but unreserved characters and `/`
/// percent-encoded, so spaces, `?`, `#` and `%` in a data dir stay part of the path.
fn uri_path(path: &Path) -> String {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    #[cfg(not(unix))]
    let bytes = path.to_string_lossy().replace('\\', "/").into_bytes();
    let mut out = String::new();
    for &b in &bytes {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn not_a_database(detail: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_NOTADB), Some(detail.to_owned()))
}

/// Checks, without writing anything, that `path` is empty or a loops database this
/// build can use. Returns its schema version (0 when empty).
fn inspect(path: &Path) -> Result<i64> {
    if !has_sqlite_header(path)? {
        return Ok(0);
    }
    let display = path.display().to_string();
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| classify_open_error(e, &display))?;
    inspect_schema(&conn, &display)
}

/// SQLite's error on opening or inspecting `display` as a store error.
fn classify_open_error(e: rusqlite::Error, display: &str) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: display.to_owned(),
            source: e,
        },
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly) => StoreError::ReadOnly {
            path: display.to_owned(),
            source: Box::new(e),
        },
        _ => StoreError::Sqlite(e),
    }
}

/// Reads only the first bytes of `path`: `false` when it is empty, `true` when it
/// starts like a SQLite database, [`StoreError::Corrupt`] otherwise — so SQLite never
/// even sees a foreign file.
fn has_sqlite_header(path: &Path) -> Result<bool> {
    let display = path.display().to_string();
    let corrupt = |source: rusqlite::Error| StoreError::Corrupt {
        path: display.clone(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let meta = file.metadata().map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(StoreError::DataDir {
            path: display,
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        });
    }
    if meta.len() == 0 {
        return Ok(false);
    }
    let mut head = [0u8; 16];
    if file.read_exact(&mut head).is_err() || &head != SQLITE_MAGIC {
        return Err(corrupt(not_a_database("no SQLite header")));
    }
    Ok(true)
}

/// Checks on an open (read-only) connection that the database is empty or a loops
/// database this build can use; returns its schema version (0 when empty).
fn inspect_schema(conn: &Connection, display: &str) -> Result<i64> {
    let corrupt = |source: rusqlite::Error| StoreError::Corrupt {
        path: display.to_owned(),
        source,
    };
    let classify = |e: rusqlite::Error| classify_open_error(e, display);
    conn.busy_timeout(BUSY_TIMEOUT).map_err(classify)?;
    let app_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(classify)?;
    if app_id != 0 && app_id != APPLICATION_ID {
        return Err(corrupt(not_a_database(
            "the file belongs to another application (application_id)",
        )));
    }
    let (tables, has_migrations): (i64, bool) = conn
        .query_row(
            "SELECT COUNT(*), COALESCE(MAX(name = 'schema_migrations'), 0) \
             FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(classify)?;
    if !has_migrations {
        if tables > 0 {
            return Err(corrupt(not_a_database(
                "a SQLite database without loops' schema_migrations table",
            )));
        }
        return Ok(0);
    }
    let version: i64 = conn
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |r| r.get(0),
        )
        .map_err(classify)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: display.to_owned(),
            found: version,
            known: SCHEMA_VERSION,
        });
    }
    Ok(version)
}

/// Connection pragmas, then migrations when `found` (the inspected version) is behind.
/// `path` is `None` for an in-memory database.
fn setup_connection(conn: &mut Connection, path: Option<&str>, found: i64) -> Result<()> {
    // First, so that the journal-mode switch below also waits for other openers.
    conn.busy_timeout(BUSY_TIMEOUT)?;
    if path.is_some() {
        // Readers never block the writer and vice versa; the setting is persistent.
        // Switching a fresh file to WAL needs an exclusive lock, and SQLite reports
        // SQLITE_BUSY for it without consulting the busy handler when another process
        // opens the same new file at that instant: retry within the busy timeout.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
                Ok(_) => break,
                Err(e)
                    if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => return Err(e.into()),
            }
        }
        // In WAL mode NORMAL is durable against application crashes and keeps
        // the database consistent on power loss; only the last commits may roll back.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // After a checkpoint, truncate the WAL back to 1 MiB instead of keeping its
        // high-water size forever.
        conn.pragma_update(None, "journal_size_limit", 1_048_576)?;
    }
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.set_prepared_statement_cache_capacity(64);
    if found < SCHEMA_VERSION {
        migrate(conn, path.unwrap_or(":memory:"))?;
    } else if path.is_some() {
        // Migrations prove the file writable; without them, probe the write lock so a
        // read-only directory (no -wal/-shm possible) fails here rather than at the
        // first write. SQLite would otherwise serve reads from heap memory.
        conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;")?;
    }
    Ok(())
}

/// Applies every pending migration, each in its own `BEGIN IMMEDIATE` transaction. The
/// version is re-read under the write lock, so concurrent openers apply each once.
fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    for m in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version    INTEGER PRIMARY KEY,
                 name       TEXT NOT NULL,
                 applied_at TEXT NOT NULL
             )",
        )?;
        let current: i64 = tx.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |r| r.get(0),
        )?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: path.to_owned(),
                found: current,
                known: SCHEMA_VERSION,
            });
        }
        if current >= m.version {
            continue;
        }
        tx.execute_batch(m.sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            params![
                m.version,
                m.name,
                loops_core::format_instant(&chrono::Utc::now())
            ],
        )?;
        tx.commit()?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Encoding and decoding
// ---------------------------------------------------------------------------------

fn ms(t: &Instant) -> i64 {
    t.timestamp_millis()
}

fn opt_ms(t: Option<&Instant>) -> Option<i64> {
    t.map(ms)
}

/// `u64` quantities (durations, tokens, start times) saturate at `i64::MAX` in storage.
fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn instant_from_ms(v: i64, col: &str) -> Result<Instant> {
    chrono::DateTime::from_timestamp_millis(v)
        .ok_or_else(|| StoreError::Decode(format!("column {col}: instant {v} out of range")))
}

fn get<T: FromSql>(row: &Row<'_>, idx: usize, col: &str) -> Result<T> {
    row.get(idx)
        .map_err(|e| StoreError::Decode(format!("column {col}: {e}")))
}

fn get_instant(row: &Row<'_>, idx: usize, col: &str) -> Result<Instant> {
    instant_from_ms(get(row, idx, col)?, col)
}

fn get_opt_instant(row: &Row<'_>, idx: usize, col: &str) -> Result<Option<Instant>> {
    get::<Option<i64>>(row, idx, col)?
        .map(|v| instant_from_ms(v, col))
        .transpose()
}

fn get_enum<T: FromStr<Err = String>>(row: &Row<'_>, idx: usize, col: &str) -> Result<T> {
    let text: String = get(row, idx, col)?;
    text.parse()
        .map_err(|e| StoreError::Decode(format!("column {col}: {e}")))
}

fn get_json<T: serde::de::DeserializeOwned>(row: &Row<'_>, idx: usize, col: &str) -> Result<T> {
    let text: String = get(row, idx, col)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Decode(format!("column {col}: {e}")))
}

fn get_u32(row: &Row<'_>, idx: usize, col: &str) -> Result<u32> {
    let v: i64 = get(row, idx, col)?;
    u32::try_from(v).map_err(|_| StoreError::Decode(format!("column {col}: {v} out of range")))
}

fn get_u64(row: &Row<'_>, idx: usize, col: &str) -> Result<u64> {
    let v: i64 = get(row, idx, col)?;
    u64::try_from(v).map_err(|_| StoreError::Decode(format!("column {col}: {v} is negative")))
}

fn get_opt_u64(row: &Row<'_>, idx: usize, col: &str) -> Result<Option<u64>> {
    get::<Option<i64>>(row, idx, col)?
        .map(|v| {
            u64::try_from(v)
                .map_err(|_| StoreError::Decode(format!("column {col}: {v} is negative")))
        })
        .transpose()
}

/// Decodes a row selected with `loop_cols!()`.
fn loop_from_row(row: &Row<'_>) -> Result<Loop> {
    Ok(Loop {
        id: LoopId::new(get::<String>(row, 0, "id")?),
        name: get(row, 1, "name")?,
        description: get(row, 2, "description")?,
        status: get_enum(row, 3, "status")?,
        schedule: get_json(row, 4, "schedule_json")?,
        target: get_json(row, 5, "target_json")?,
        next_run_at: get_opt_instant(row, 6, "next_run_at")?,
        retry_scheduled_for: get_opt_instant(row, 7, "retry_scheduled_for")?,
        catch_up: get_enum(row, 8, "catch_up")?,
        catch_up_limit: get_u32(row, 9, "catch_up_limit")?,
        overlap: get_enum(row, 10, "overlap")?,
        max_attempts: get_u32(row, 11, "max_attempts")?,
        retry_delay_ms: get_u64(row, 12, "retry_delay_ms")?,
        lease_ms: get_u64(row, 13, "lease_ms")?,
        expires_at: get_opt_instant(row, 14, "expires_at")?,
        created_at: get_instant(row, 15, "created_at")?,
        updated_at: get_instant(row, 16, "updated_at")?,
    })
}

/// A loop row of a listing: decoded, or — when it does not decode — reported in its
/// place rather than as the error of the whole query, so one bad loop never hides or
/// stops the others.
fn decode_loop_row(row: &Row<'_>) -> std::result::Result<Loop, UnreadableLoop> {
    loop_from_row(row).map_err(|e| UnreadableLoop {
        id: LoopId::new(row.get::<_, String>(0).unwrap_or_default()),
        name: row.get::<_, String>(1).unwrap_or_default(),
        error: e.to_string(),
    })
}

/// Decodes a row selected with `run_cols!()`.
fn run_from_row(row: &Row<'_>) -> Result<Run> {
    let pid: Option<i64> = get(row, 14, "pid")?;
    Ok(Run {
        id: RunId::new(get::<String>(row, 0, "id")?),
        loop_id: LoopId::new(get::<String>(row, 1, "loop_id")?),
        loop_name: get(row, 2, "loop_name")?,
        scheduled_for: get_instant(row, 3, "scheduled_for")?,
        attempt: get_u32(row, 4, "attempt")?,
        status: get_enum(row, 5, "status")?,
        source: get_enum(row, 6, "source")?,
        started_at: get_opt_instant(row, 7, "started_at")?,
        finished_at: get_opt_instant(row, 8, "finished_at")?,
        exit_code: get(row, 9, "exit_code")?,
        duration_ms: get_opt_u64(row, 10, "duration_ms")?,
        stdout: get(row, 11, "stdout")?,
        stderr: get(row, 12, "stderr")?,
        error: get(row, 13, "error")?,
        pid: pid
            .map(|v| {
                u32::try_from(v)
                    .map_err(|_| StoreError::Decode(format!("column pid: {v} out of range")))
            })
            .transpose()?,
        pid_start_time: get_opt_u64(row, 15, "pid_start_time")?,
        claimed_by: get(row, 16, "claimed_by")?,
        lease_expires_at: get_opt_instant(row, 17, "lease_expires_at")?,
        summary: get(row, 18, "summary")?,
        usage: get_usage(row, 19)?,
        created_at: get_instant(row, 20, "created_at")?,
        updated_at: get_instant(row, 21, "updated_at")?,
    })
}

/// Decodes a `daemon_lease` row selected in table order without `id`.
fn lease_from_row(row: &Row<'_>) -> Result<DaemonLease> {
    let pid: i64 = get(row, 1, "pid")?;
    Ok(DaemonLease {
        holder: LeaseHolder {
            runner_id: get(row, 0, "runner_id")?,
            pid: u32::try_from(pid)
                .map_err(|_| StoreError::Decode(format!("column pid: {pid} out of range")))?,
            pid_start_time: get_opt_u64(row, 2, "pid_start_time")?,
            host: get(row, 3, "host")?,
        },
        token: get_u64(row, 4, "token")?,
        acquired_at: get_instant(row, 5, "acquired_at")?,
        heartbeat_at: get_instant(row, 6, "heartbeat_at")?,
        expires_at: get_instant(row, 7, "expires_at")?,
    })
}

/// Runs `stmt` and decodes every row.
fn query_all<T, P: rusqlite::Params>(
    stmt: &mut rusqlite::Statement<'_>,
    params: P,
    decode: fn(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// Runs `stmt` and decodes the first row, if any.
fn query_first<T, P: rusqlite::Params>(
    stmt: &mut rusqlite::Statement<'_>,
    params: P,
    decode: fn(&Row<'_>) -> Result<T>,
) -> Result<Option<T>> {
    let mut rows = stmt.query(params)?;
    match rows.next()? {
        Some(row) => Ok(Some(decode(row)?)),
        None => Ok(None),
    }
}

/// 12 lowercase hex characters (48 random bits): short enough to type.
fn new_id() -> String {
    format!("{:012x}", rand::random::<u64>() >> 16)
}

fn constraint_code(e: &rusqlite::Error) -> Option<i32> {
    match e {
        rusqlite::Error::SqliteFailure(err, _) if err.code == ErrorCode::ConstraintViolation => {
            Some(err.extended_code)
        }
        _ => None,
    }
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        constraint_code(e),
        Some(ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
    )
}

fn is_foreign_key_violation(e: &rusqlite::Error) -> bool {
    constraint_code(e) == Some(ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
}

/// Fails with [`StoreError::LeaseLost`] unless the lease row still carries `fence`'s
/// token, i.e. nobody acquired the lease since (see [`Fence`]). Runs inside the
/// caller's write transaction, so it is serialized with any acquire.
fn check_fence(conn: &Connection, fence: &Fence, _now: Instant) -> Result<()> {
    let held: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM daemon_lease WHERE id = 1 AND token = ?1)")?
        .query_row(params![sat_i64(fence.token)], |r| r.get(0))?;
    if held {
        Ok(())
    } else {
        Err(StoreError::LeaseLost)
    }
}

/// After a guarded update touched no row: tells a missing run from a finished one.
fn not_running(conn: &Connection, id: &RunId) -> StoreError {
    let exists = conn
        .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")
        .and_then(|mut s| s.query_row([id.as_str()], |_| Ok(())).optional());
    match exists {
        Ok(Some(())) => StoreError::NotRunning(id.to_string()),
        Ok(None) => StoreError::RunNotFound(id.to_string()),
        Err(e) => e.into(),
    }
}

fn read_lease(conn: &Connection) -> Result<Option<DaemonLease>> {
    let mut stmt = conn.prepare_cached(
        "SELECT runner_id, pid, pid_start_time, host, token, acquired_at, heartbeat_at, expires_at \
         FROM daemon_lease WHERE id = 1",
    )?;
    query_first(&mut stmt, [], lease_from_row)
}

/// The claim itself, inside the caller's write transaction; see [`Store::claim_run`].
/// On success, applies `advance` to the loop in the same transaction.
fn claim_in_tx(
    tx: &Transaction<'_>,
    req: &ClaimRequest,
    advance: Option<&LoopAdvance>,
) -> Result<std::result::Result<Run, ClaimRefused>> {
    let now = ms(&req.now);
    let slot = ms(&req.scheduled_for);
    let ad_hoc = req.source == RunSource::AdHoc;
    let lp: Option<(String, String, i64, i64)> = tx
        .prepare_cached("SELECT status, name, max_attempts, lease_ms FROM loops WHERE id = ?1")?
        .query_row([req.loop_id.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let Some((status, name, max_attempts, lease_ms)) = lp else {
        return Ok(Err(ClaimRefused::LoopNotActive));
    };
    if !ad_hoc && status != LoopStatus::Active.as_str() {
        return Ok(Err(ClaimRefused::LoopNotActive));
    }

    // Before the slot's own state: "the loop is busy" is the answer that explains a
    // refused exclusive claim, whatever its slot looks like.
    if req.require_no_running {
        let busy: bool = tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE loop_id = ?1 AND status = 'running')",
            )?
            .query_row([req.loop_id.as_str()], |r| r.get(0))?;
        if busy {
            return Ok(Err(ClaimRefused::LoopBusy));
        }
    }

    let (running, done, last_attempt): (i64, i64, i64) = tx
        .prepare_cached(
            "SELECT COALESCE(SUM(status = 'running'), 0), \
                        COALESCE(SUM(status IN ('succeeded', 'skipped')), 0), \
                        COALESCE(MAX(attempt), 0) \
                 FROM runs WHERE loop_id = ?1 AND scheduled_for = ?2",
        )?
        .query_row(params![req.loop_id.as_str(), slot], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    if running > 0 {
        return Ok(Err(ClaimRefused::SlotRunning));
    }
    if done > 0 {
        return Ok(Err(ClaimRefused::SlotDone));
    }
    // An ad-hoc slot gets a single attempt; a loop never gets fewer than one.
    let allowed = if ad_hoc { 1 } else { max_attempts.max(1) };
    if last_attempt >= allowed {
        return Ok(Err(ClaimRefused::SlotDone));
    }

    let mut stmt = tx.prepare_cached(concat!(
        "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, source, \
             started_at, claimed_by, lease_expires_at, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?9, ?7, ?7) RETURNING ",
        run_cols!()
    ))?;
    for _ in 0..ID_ATTEMPTS {
        let mut rows = stmt.query(params![
            new_id(),
            req.loop_id.as_str(),
            name,
            slot,
            last_attempt + 1,
            req.source.as_str(),
            now,
            req.runner_id,
            now.saturating_add(lease_ms),
        ])?;
        match rows.next() {
            Ok(Some(row)) => {
                let run = run_from_row(row)?;
                drop(rows);
                if let Some(advance) = advance {
                    apply_advance(tx, &req.loop_id, advance, req.now)?;
                }
                return Ok(Ok(run));
            }
            Ok(None) => break,
            Err(e) if is_unique_violation(&e) => {
                // The slot-attempt key is the final guard of the claim.
                if e.to_string().contains("runs.scheduled_for") {
                    return Ok(Err(ClaimRefused::SlotRunning));
                }
                // A run id collision: draw another.
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
        ffi::Error::new(ffi::SQLITE_CONSTRAINT),
        Some("could not allocate a unique run id".to_owned()),
    )))
}

/// Sets a loop's schedule state; false when the loop does not exist.
fn apply_advance(
    conn: &Connection,
    id: &LoopId,
    advance: &LoopAdvance,
    now: Instant,
) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE loops SET status = ?2, next_run_at = ?3, retry_scheduled_for = ?4, \
             updated_at = ?5 WHERE id = ?1",
        )?
        .execute(params![
            id.as_str(),
            advance.status.as_str(),
            opt_ms(advance.next_run_at.as_ref()),
            opt_ms(advance.retry_scheduled_for.as_ref()),
            ms(&now),
        ])?;
    Ok(n > 0)
}

/// See [`Store::next_retryable_slot`]; usable inside a transaction.
fn retryable_slot(
    conn: &Connection,
    loop_id: &LoopId,
    max_attempts: u32,
    except: Instant,
) -> Result<Option<Instant>> {
    // Start from failed attempts (partial index), keep those that are the latest
    // attempt of their slot and whose slot is neither running nor done.
    let slot: Option<i64> = conn
        .prepare_cached(concat!(
            "SELECT f.scheduled_for FROM runs f \
             WHERE f.loop_id = ?1 AND f.status IN ",
            failure_statuses!(),
            " AND f.source != 'ad_hoc' AND f.scheduled_for != ?3 AND f.attempt < ?2 \
               AND NOT EXISTS ( \
                 SELECT 1 FROM runs x \
                 WHERE x.loop_id = f.loop_id AND x.scheduled_for = f.scheduled_for \
                   AND (x.attempt > f.attempt OR x.status IN ('running', 'succeeded', 'skipped'))) \
             ORDER BY f.scheduled_for LIMIT 1"
        ))?
        .query_row(params![loop_id.as_str(), max_attempts, ms(&except)], |r| {
            r.get(0)
        })
        .optional()?;
    slot.map(|v| instant_from_ms(v, "scheduled_for"))
        .transpose()
}

/// The `usage_json` column of a run or step run.
fn encode_usage(usage: Option<&Usage>) -> Result<Option<String>> {
    usage
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::InvalidArgument(format!("usage: {e}")))
}

/// Reads a `usage_json` column back.
fn get_usage(row: &Row<'_>, idx: usize) -> Result<Option<Usage>> {
    get::<Option<String>>(row, idx, "usage_json")?
        .map(|text| {
            serde_json::from_str(&text)
                .map_err(|e| StoreError::Decode(format!("column usage_json: {e}")))
        })
        .transpose()
}

/// Checks that `outcome` can end a run and encodes its usage.
fn outcome_usage_json(outcome: &RunOutcome) -> Result<Option<String>> {
    if outcome.status == RunStatus::Running {
        return Err(StoreError::InvalidArgument(
            "a run cannot be finalized as running".to_owned(),
        ));
    }
    encode_usage(outcome.usage.as_ref())
}

/// See [`Store::mark_run_pid`]; inside the caller's transaction.
fn mark_pid_in(
    conn: &Connection,
    run: &RunId,
    pid: u32,
    pid_start_time: Option<u64>,
    now: Instant,
) -> Result<()> {
    let n = conn
        .prepare_cached(
            "UPDATE runs SET pid = ?2, pid_start_time = ?3, updated_at = ?4 \
             WHERE id = ?1 AND status = 'running'",
        )?
        .execute(params![
            run.as_str(),
            pid,
            pid_start_time.map(sat_i64),
            ms(&now)
        ])?;
    if n == 0 {
        return Err(not_running(conn, run));
    }
    Ok(())
}

/// See [`Store::finalize_run`]; inside the caller's transaction.
fn finalize_in(
    conn: &Connection,
    run: &RunId,
    outcome: &RunOutcome,
    usage: Option<&str>,
) -> Result<Run> {
    let mut stmt = conn.prepare_cached(concat!(
        "UPDATE runs SET status = ?2, finished_at = ?3, exit_code = ?4, \
           duration_ms = CASE WHEN started_at IS NULL THEN NULL ELSE MAX(0, ?3 - started_at) END, \
           stdout = ?5, stderr = ?6, error = ?7, summary = ?8, usage_json = ?9, updated_at = ?3 \
         WHERE id = ?1 AND status = 'running' RETURNING ",
        run_cols!()
    ))?;
    let params = params![
        run.as_str(),
        outcome.status.as_str(),
        ms(&outcome.finished_at),
        outcome.exit_code,
        outcome.stdout,
        outcome.stderr,
        outcome.error,
        outcome.summary,
        usage,
    ];
    match query_first(&mut stmt, params, run_from_row)? {
        Some(r) => Ok(r),
        None => Err(not_running(conn, run)),
    }
}

/// After `run` was finalized in this transaction: applies its loop's transition, as
/// the domain decides it from the loop as stored. True when the loop's schedule state
/// changed. A loop whose schedule no longer computes is left as it is (logged): the
/// next scheduling pass parks it.
fn advance_after_finish(conn: &Connection, run: &Run) -> Result<bool> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        loop_cols!(),
        " FROM loops WHERE id = ?1"
    ))?;
    let Some(lp) = query_first(&mut stmt, [run.loop_id.as_str()], loop_from_row)? else {
        return Ok(false);
    };
    let deferred = if transitions::wants_deferred_retry(&lp, run) {
        retryable_slot(conn, &lp.id, lp.max_attempts, run.scheduled_for)?
    } else {
        None
    };
    match transitions::on_finish(&lp, run, deferred) {
        Ok(Some(advance)) => apply_advance(
            conn,
            &lp.id,
            &advance,
            run.finished_at.unwrap_or(run.updated_at),
        ),
        Ok(None) => Ok(false),
        Err(e) => {
            tracing::warn!(loop_id = %lp.id, error = %e, "could not plan the loop's next run");
            Ok(false)
        }
    }
}

/// Records a `skipped` row for `slot` of `lp` inside the caller's transaction.
fn skip_in(
    conn: &Connection,
    lp: &LoopId,
    name: &str,
    slot: Instant,
    reason: &str,
    now: Instant,
) -> Result<Run> {
    let mut stmt = conn.prepare_cached(concat!(
        "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, source, \
         started_at, finished_at, duration_ms, error, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, \
           (SELECT COALESCE(MAX(attempt), 0) + 1 FROM runs WHERE loop_id = ?2 AND scheduled_for = ?4), \
           'skipped', ?5, ?6, ?6, 0, ?7, ?6, ?6) RETURNING ",
        run_cols!()
    ))?;
    for _ in 0..ID_ATTEMPTS {
        let mut rows = stmt.query(params![
            new_id(),
            lp.as_str(),
            name,
            ms(&slot),
            RunSource::Scheduled.as_str(),
            ms(&now),
            reason,
        ])?;
        match rows.next() {
            Ok(Some(row)) => return run_from_row(row),
            Ok(None) => break,
            Err(e) if is_foreign_key_violation(&e) => {
                return Err(StoreError::LoopNotFound(lp.to_string()))
            }
            // Run id collision (the attempt number is computed under the lock).
            Err(e) if is_unique_violation(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
        ffi::Error::new(ffi::SQLITE_CONSTRAINT),
        Some("could not allocate a unique run id".to_owned()),
    )))
}

/// The reason recorded on a slot skipped because its loop was still running.
const SKIPPED_BUSY: &str = "previous run still active";

/// One claim of a batch and what a refusal implies, inside the caller's transaction.
fn batch_claim_in(tx: &Transaction<'_>, claim: &BatchClaim) -> Result<ClaimOutcome> {
    let req = &claim.request;
    let advance = claim.advance.as_ref();
    match claim_in_tx(tx, req, advance)? {
        Ok(run) => Ok(ClaimOutcome::Claimed(Box::new(run))),
        Err(ClaimRefused::LoopBusy) => {
            let name: String = tx
                .prepare_cached("SELECT name FROM loops WHERE id = ?1")?
                .query_row([req.loop_id.as_str()], |r| r.get(0))?;
            let skipped = claim
                .skip_slots
                .iter()
                .map(|slot| skip_in(tx, &req.loop_id, &name, *slot, SKIPPED_BUSY, req.now))
                .collect::<Result<Vec<_>>>()?;
            if let Some(advance) = advance {
                apply_advance(tx, &req.loop_id, advance, req.now)?;
            }
            Ok(ClaimOutcome::Skipped(skipped))
        }
        Err(ClaimRefused::SlotDone | ClaimRefused::SlotRunning) => {
            if let Some(advance) = advance {
                apply_advance(tx, &req.loop_id, advance, req.now)?;
            }
            Ok(ClaimOutcome::Moved)
        }
        Err(ClaimRefused::LoopNotActive) => Ok(ClaimOutcome::NotActive),
    }
}

/// Size the daemon's WAL is cut back to when it rewinds (see
/// [`Store::start_background_maintenance`]).
const DAEMON_WAL_LIMIT: i64 = 64 * 1_048_576;

/// How long the background checkpointer lets commits accumulate before it copies the
/// WAL into the database: at most one checkpoint per period while writes go on.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Body of the checkpoint thread; returns when the store is dropped. An idle store
/// sends no nudge, so the thread sleeps in `recv` with no wake-ups at all.
///
/// Each round has two phases. The first (`PASSIVE`) copies the WAL into the database
/// and fsyncs both without holding the store's connection, so the store's writers go
/// on. But a checkpoint running beside writers does not make SQLite rewind the WAL:
/// measured in the daemon, the WAL grew by 13 MB/s at 200 runs/s although every
/// round completed. The second phase (`RESTART`) holds the store's connection, so this
/// process neither reads nor writes meanwhile, copies the few frames written during
/// the first, and resets the WAL so the next commit writes from its start. It never
/// waits on other processes (busy timeout 0): a CLI reading at that instant only
/// defers the rewind to the next round.
fn checkpoint_loop(
    ckpt: &Connection,
    store_conn: &Weak<Mutex<Connection>>,
    nudges: &mpsc::Receiver<()>,
    pending: &AtomicBool,
) {
    while nudges.recv().is_ok() {
        std::thread::sleep(CHECKPOINT_EVERY);
        // Cleared before checkpointing: a commit landing during it nudges again.
        pending.store(false, Ordering::Release);
        let t0 = std::time::Instant::now();
        let copied = checkpoint(ckpt, "PASSIVE");
        tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, complete = ?copied, "WAL checkpoint");
        if let Err(e) = copied {
            tracing::warn!(error = %e, "WAL checkpoint failed");
            continue;
        }
        let Some(store_conn) = store_conn.upgrade() else {
            return;
        };
        let t1 = std::time::Instant::now();
        let _store_idle = store_conn.lock().unwrap_or_else(PoisonError::into_inner);
        let t2 = std::time::Instant::now();
        let reset = checkpoint(ckpt, "RESTART");
        tracing::debug!(
            wait_ms = (t2 - t1).as_secs_f64() * 1e3,
            ms = t2.elapsed().as_secs_f64() * 1e3,
            complete = ?reset,
            "WAL reset"
        );
        if let Err(e) = reset {
            tracing::warn!(error = %e, "WAL checkpoint failed");
        }
    }
}

/// `PRAGMA wal_checkpoint(MODE)`: true when every frame of the WAL is now in the
/// database (for `RESTART`, also that the WAL was reset).
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<bool> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        let busy: i64 = r.get(0)?;
        let frames: i64 = r.get(1)?;
        let copied: i64 = r.get(2)?;
        Ok(busy == 0 && frames == copied)
    })
}

// ---------------------------------------------------------------------------------
// The Store implementation
// ---------------------------------------------------------------------------------

impl Store for SqliteStore {
    fn create_loop(&self, new: NewLoop, now: Instant) -> Result<Loop> {
        let schedule = serde_json::to_string(&new.schedule)
            .map_err(|e| StoreError::InvalidArgument(format!("schedule: {e}")))?;
        let target = serde_json::to_string(&new.target)
            .map_err(|e| StoreError::InvalidArgument(format!("target: {e}")))?;
        let p = &new.policy;
        self.write(None, |tx| {
            let mut stmt = tx.prepare_cached(concat!(
                "INSERT INTO loops (",
                loop_cols!(),
                ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?15) \
                 RETURNING ",
                loop_cols!()
            ))?;
            for _ in 0..ID_ATTEMPTS {
                let id = new_id();
                let mut rows = stmt.query(params![
                    id,
                    new.name,
                    new.description,
                    LoopStatus::Active.as_str(),
                    schedule,
                    target,
                    opt_ms(new.next_run_at.as_ref()),
                    p.catch_up.as_str(),
                    p.catch_up_limit,
                    p.overlap.as_str(),
                    p.max_attempts,
                    sat_i64(p.retry_delay_ms),
                    sat_i64(p.lease_ms),
                    opt_ms(p.expires_at.as_ref()),
                    ms(&now),
                ])?;
                match rows.next() {
                    Ok(Some(row)) => return loop_from_row(row),
                    Ok(None) => break,
                    Err(e) if is_unique_violation(&e) => {
                        // The UNIQUE constraint is the check (no racy pre-read); the
                        // message names the column that collided.
                        if e.to_string().contains("loops.name") {
                            return Err(StoreError::DuplicateName(new.name.clone()));
                        }
                        // An id collision: draw another.
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                ffi::Error::new(ffi::SQLITE_CONSTRAINT),
                Some("could not allocate a unique loop id".to_owned()),
            )))
        })
    }

    fn get_loop(&self, id: &LoopId) -> Result<Option<Loop>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE id = ?1"
        ))?;
        query_first(&mut stmt, [id.as_str()], loop_from_row)
    }

    fn get_loop_by_name(&self, name: &str) -> Result<Option<Loop>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE name = ?1"
        ))?;
        query_first(&mut stmt, [name], loop_from_row)
    }

    fn loops_with_id_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<Loop>> {
        // A primary-key range scan: every string starting with `prefix` sorts in
        // [prefix, prefix + U+10FFFF) under the binary collation. The Rust-side filter
        // keeps the result exact for any input.
        let upper = format!("{prefix}\u{10FFFF}");
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3"
        ))?;
        let loops = query_all(
            &mut stmt,
            params![prefix, upper, sat_i64(limit as u64)],
            loop_from_row,
        )?;
        Ok(loops
            .into_iter()
            .filter(|l| l.id.as_str().starts_with(prefix))
            .collect())
    }

    fn loop_rows(
        &self,
        status: Option<LoopStatus>,
    ) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE ?1 IS NULL OR status = ?1 ORDER BY name"
        ))?;
        let mut rows = stmt.query([status.map(LoopStatus::as_str)])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(decode_loop_row(row));
        }
        Ok(out)
    }

    fn update_loop_schedule(
        &self,
        id: &LoopId,
        advance: &LoopAdvance,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Loop> {
        self.write(fence.map(|f| (f, now)), |tx| {
            let mut stmt = tx.prepare_cached(concat!(
                "UPDATE loops SET status = ?2, next_run_at = ?3, retry_scheduled_for = ?4, \
                 updated_at = ?5 WHERE id = ?1 RETURNING ",
                loop_cols!()
            ))?;
            let params = params![
                id.as_str(),
                advance.status.as_str(),
                opt_ms(advance.next_run_at.as_ref()),
                opt_ms(advance.retry_scheduled_for.as_ref()),
                ms(&now),
            ];
            query_first(&mut stmt, params, loop_from_row)?
                .ok_or_else(|| StoreError::LoopNotFound(id.to_string()))
        })
    }

    fn remove_loop(&self, id: &LoopId) -> Result<bool> {
        self.write(None, |tx| {
            // Explicit, so removal does not depend on the foreign_keys pragma.
            tx.prepare_cached("DELETE FROM runs WHERE loop_id = ?1")?
                .execute([id.as_str()])?;
            let n = tx
                .prepare_cached("DELETE FROM loops WHERE id = ?1")?
                .execute([id.as_str()])?;
            Ok(n > 0)
        })
    }

    fn due_loops(
        &self,
        now: Instant,
        limit: usize,
    ) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            loop_cols!(),
            " FROM loops WHERE status = 'active' AND next_run_at <= ?1 \
             ORDER BY next_run_at LIMIT ?2"
        ))?;
        let mut rows = stmt.query(params![ms(&now), sat_i64(limit as u64)])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(decode_loop_row(row));
        }
        Ok(out)
    }

    fn park_loop(
        &self,
        id: &LoopId,
        reason: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Option<Run>> {
        self.write(fence.map(|f| (f, now)), |tx| {
            let found: Option<(String, Option<i64>)> = tx
                .prepare_cached(
                    "UPDATE loops SET status = 'paused', updated_at = ?2 \
                     WHERE id = ?1 AND status = 'active' RETURNING name, next_run_at",
                )?
                .query_row(params![id.as_str(), ms(&now)], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let Some((name, slot)) = found else {
                return Ok(None);
            };
            let mut stmt = tx.prepare_cached(concat!(
                "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, source, \
                 started_at, finished_at, duration_ms, error, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, \
                   (SELECT COALESCE(MAX(attempt), 0) + 1 FROM runs WHERE loop_id = ?2 AND scheduled_for = ?4), \
                   'failed', 'scheduled', ?5, ?5, 0, ?6, ?5, ?5) RETURNING ",
                run_cols!()
            ))?;
            let slot = slot.unwrap_or_else(|| ms(&now));
            for _ in 0..ID_ATTEMPTS {
                let mut rows =
                    stmt.query(params![new_id(), id.as_str(), name, slot, ms(&now), reason])?;
                match rows.next() {
                    Ok(Some(row)) => return run_from_row(row).map(Some),
                    Ok(None) => break,
                    // A run id collision: draw another.
                    Err(e) if is_unique_violation(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                ffi::Error::new(ffi::SQLITE_CONSTRAINT),
                Some("could not allocate a unique run id".to_owned()),
            )))
        })
    }

    fn next_due_at(&self) -> Result<Option<Instant>> {
        let conn = self.lock();
        let next: Option<i64> = conn
            .prepare_cached(
                "SELECT next_run_at FROM loops WHERE status = 'active' AND next_run_at IS NOT NULL \
                 ORDER BY next_run_at LIMIT 1",
            )?
            .query_row([], |r| r.get(0))
            .optional()?;
        next.map(|v| instant_from_ms(v, "next_run_at")).transpose()
    }

    fn expire_loops(&self, now: Instant, fence: Option<&Fence>) -> Result<Vec<Loop>> {
        // Every scheduling pass asks; almost always nothing is due to expire, and a
        // read is much cheaper than an (empty) write transaction.
        let any: bool = self
            .lock()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM loops INDEXED BY loops_expiry \
                 WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at <= ?1)",
            )?
            .query_row([ms(&now)], |r| r.get(0))?;
        if !any {
            return Ok(Vec::new());
        }
        self.write(fence.map(|f| (f, now)), |tx| {
            let mut stmt = tx.prepare_cached(concat!(
                "UPDATE loops INDEXED BY loops_expiry SET status = 'expired', next_run_at = NULL, updated_at = ?1 \
                 WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at <= ?1 \
                 RETURNING ",
                loop_cols!()
            ))?;
            let mut loops = query_all(&mut stmt, [ms(&now)], loop_from_row)?;
            loops.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(loops)
        })
    }

    fn claim_run(
        &self,
        req: &ClaimRequest,
        fence: Option<&Fence>,
    ) -> Result<std::result::Result<Run, ClaimRefused>> {
        self.write(fence.map(|f| (f, req.now)), |tx| claim_in_tx(tx, req, None))
    }

    fn claim_run_and_advance(
        &self,
        req: &ClaimRequest,
        advance: Option<&LoopAdvance>,
        fence: Option<&Fence>,
    ) -> Result<std::result::Result<Run, ClaimRefused>> {
        self.write(fence.map(|f| (f, req.now)), |tx| {
            claim_in_tx(tx, req, advance)
        })
    }

    fn claim_runs(
        &self,
        claims: &[BatchClaim],
        fence: Option<&Fence>,
    ) -> Result<Vec<ClaimOutcome>> {
        let Some(first) = claims.first() else {
            return Ok(Vec::new());
        };
        self.write(fence.map(|f| (f, first.request.now)), |tx| {
            claims.iter().map(|c| batch_claim_in(tx, c)).collect()
        })
    }

    fn record_skipped_run(
        &self,
        lp: &Loop,
        scheduled_for: Instant,
        reason: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Run> {
        self.write(fence.map(|f| (f, now)), |tx| {
            skip_in(tx, &lp.id, &lp.name, scheduled_for, reason, now)
        })
    }

    fn mark_run_pid(
        &self,
        run: &RunId,
        pid: u32,
        pid_start_time: Option<u64>,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<()> {
        self.write(fence.map(|f| (f, now)), |tx| {
            mark_pid_in(tx, run, pid, pid_start_time, now)
        })
    }

    fn heartbeat_runs(
        &self,
        runs: &[RunId],
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<usize> {
        let ids = serde_json::to_string(&runs.iter().map(RunId::as_str).collect::<Vec<_>>())
            .map_err(|e| StoreError::InvalidArgument(format!("run ids: {e}")))?;
        self.write(fence.map(|f| (f, now)), |tx| {
            Ok(tx
                .prepare_cached(
                    "UPDATE runs SET \
                       lease_expires_at = ?1 + (SELECT l.lease_ms FROM loops l WHERE l.id = runs.loop_id), \
                       updated_at = ?1 \
                     WHERE status = 'running' AND claimed_by = ?2 \
                       AND id IN (SELECT value FROM json_each(?3))",
                )?
                .execute(params![ms(&now), runner_id, ids])?)
        })
    }

    fn finalize_run(
        &self,
        run: &RunId,
        outcome: &RunOutcome,
        fence: Option<&Fence>,
    ) -> Result<Run> {
        let usage = outcome_usage_json(outcome)?;
        self.write(fence.map(|f| (f, outcome.finished_at)), |tx| {
            finalize_in(tx, run, outcome, usage.as_deref())
        })
    }

    fn record_run_writes(
        &self,
        writes: &[RunWrite],
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Vec<Result<RunWritten>>> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        self.write(fence.map(|f| (f, now)), |tx| {
            let mut done = Vec::with_capacity(writes.len());
            for write in writes {
                let result = match write {
                    RunWrite::Spawned {
                        run,
                        pid,
                        pid_start_time,
                        at,
                    } => mark_pid_in(tx, run, *pid, *pid_start_time, *at)
                        .map(|()| RunWritten::Spawned),
                    RunWrite::Finished { run, outcome } => outcome_usage_json(outcome)
                        .and_then(|usage| finalize_in(tx, run, outcome, usage.as_deref()))
                        .and_then(|finished| {
                            let loop_moved = advance_after_finish(tx, &finished)?;
                            Ok(RunWritten::Finished {
                                run: Box::new(finished),
                                loop_moved,
                            })
                        }),
                };
                match result {
                    // A bad outcome fails alone, like a row that is no longer running.
                    Err(e) if !e.is_per_row() && !matches!(e, StoreError::InvalidArgument(_)) => {
                        return Err(e)
                    }
                    result => done.push(result),
                }
            }
            Ok(done)
        })
    }

    fn take_over_run(
        &self,
        run: &RunId,
        from: Option<&str>,
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Run> {
        self.write(fence.map(|f| (f, now)), |tx| {
            let mut stmt = tx.prepare_cached(concat!(
                "UPDATE runs SET claimed_by = ?3, \
                   lease_expires_at = ?4 + (SELECT l.lease_ms FROM loops l WHERE l.id = runs.loop_id), \
                   updated_at = ?4 \
                 WHERE id = ?1 AND status = 'running' AND claimed_by IS ?2 RETURNING ",
                run_cols!()
            ))?;
            match query_first(
                &mut stmt,
                params![run.as_str(), from, runner_id, ms(&now)],
                run_from_row,
            )? {
                Some(r) => Ok(r),
                None => Err(not_running(tx, run)),
            }
        })
    }

    fn expired_running_runs(&self, now: Instant) -> Result<Vec<Run>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            run_cols!(),
            " FROM runs WHERE status = 'running' AND lease_expires_at <= ?1 \
             ORDER BY lease_expires_at"
        ))?;
        query_all(&mut stmt, [ms(&now)], run_from_row)
    }

    fn running_runs(&self, loop_id: Option<&LoopId>) -> Result<Vec<Run>> {
        // Through the partial index of running rows only, so the cost follows the number
        // of running rows, not the run history; an ORDER BY would let the planner pick
        // the creation-order index and scan every run, so sort here instead.
        let conn = self.lock();
        let mut runs = match loop_id {
            Some(id) => {
                let mut stmt = conn.prepare_cached(concat!(
                    "SELECT ",
                    run_cols!(),
                    " FROM runs INDEXED BY runs_running_loop WHERE status = 'running' AND loop_id = ?1"
                ))?;
                query_all(&mut stmt, [id.as_str()], run_from_row)?
            }
            None => {
                let mut stmt = conn.prepare_cached(concat!(
                    "SELECT ",
                    run_cols!(),
                    " FROM runs INDEXED BY runs_running_loop WHERE status = 'running'"
                ))?;
                query_all(&mut stmt, [], run_from_row)?
            }
        };
        runs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(runs)
    }

    fn get_run(&self, id: &RunId) -> Result<Option<Run>> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare_cached(concat!("SELECT ", run_cols!(), " FROM runs WHERE id = ?1"))?;
        query_first(&mut stmt, [id.as_str()], run_from_row)
    }

    /// Newest first by creation time; rows created in the same millisecond are ordered
    /// by insertion (rowid), newest first.
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<Run>> {
        // LIMIT -1 is SQLite's "no limit".
        let limit = filter.limit.map_or(-1, |n| sat_i64(n as u64));
        let conn = self.lock();
        match &filter.loop_id {
            Some(id) => {
                let mut stmt = conn.prepare_cached(concat!(
                    "SELECT ",
                    run_cols!(),
                    " FROM runs WHERE loop_id = ?1 ORDER BY created_at DESC, rowid DESC LIMIT ?2"
                ))?;
                query_all(&mut stmt, params![id.as_str(), limit], run_from_row)
            }
            None => {
                let mut stmt = conn.prepare_cached(concat!(
                    "SELECT ",
                    run_cols!(),
                    " FROM runs ORDER BY created_at DESC, rowid DESC LIMIT ?1"
                ))?;
                query_all(&mut stmt, [limit], run_from_row)
            }
        }
    }

    fn next_retryable_slot(
        &self,
        loop_id: &LoopId,
        max_attempts: u32,
        except: Instant,
    ) -> Result<Option<Instant>> {
        retryable_slot(&self.lock(), loop_id, max_attempts, except)
    }

    /// Deletes finished runs (never `running` ones) matching EITHER rule of the policy:
    /// - `older_than`: the run finished before that instant;
    /// - `keep_per_loop = N`: the run is not among its loop's N newest finished runs
    ///   (by creation time).
    ///
    /// So a run survives only when it satisfies every rule that is set. With neither
    /// rule set nothing is deleted.
    fn prune_runs(&self, policy: &PrunePolicy, dry_run: bool) -> Result<usize> {
        let older = policy.older_than.as_ref().map(ms);
        let keep = policy.keep_per_loop.map(|n| sat_i64(n as u64));
        if older.is_none() && keep.is_none() {
            return Ok(0);
        }
        // The window function is only needed for the per-loop rule.
        let candidates = if keep.is_some() {
            "WITH ranked AS ( \
               SELECT id, finished_at, \
                      ROW_NUMBER() OVER (PARTITION BY loop_id ORDER BY created_at DESC, rowid DESC) AS rn \
               FROM runs WHERE status != 'running') \
             SELECT id FROM ranked \
             WHERE (?1 IS NOT NULL AND finished_at < ?1) OR rn > ?2"
        } else {
            "SELECT id FROM runs WHERE status != 'running' AND finished_at < ?1 AND ?2 IS NULL"
        };
        if dry_run {
            let conn = self.lock();
            let n: i64 = conn
                .prepare_cached(&format!("SELECT COUNT(*) FROM ({candidates})"))?
                .query_row(params![older, keep], |r| r.get(0))?;
            return Ok(usize::try_from(n).unwrap_or(0));
        }
        self.write(None, |tx| {
            Ok(tx
                .prepare_cached(&format!("DELETE FROM runs WHERE id IN ({candidates})"))?
                .execute(params![older, keep])?)
        })
    }

    fn acquire_daemon_lease(
        &self,
        holder: &LeaseHolder,
        ttl_ms: u64,
        now: Instant,
        takeover: &dyn Fn(&DaemonLease) -> bool,
    ) -> Result<LeaseAcquire> {
        self.write(None, |tx| {
            let existing = read_lease(tx)?;
            if let Some(cur) = &existing {
                let live = cur.expires_at > now;
                if live && cur.holder.runner_id != holder.runner_id && !takeover(cur) {
                    return Ok(LeaseAcquire::Held(cur.clone()));
                }
            }
            // Tokens only grow, also across releases (the row is deleted then).
            let last: Option<String> = tx
                .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
                .query_row([META_LEASE_TOKEN], |r| r.get(0))
                .optional()?;
            let last = match last {
                Some(text) => text.parse::<u64>().map_err(|e| {
                    StoreError::Decode(format!("meta {META_LEASE_TOKEN}: {e}"))
                })?,
                None => 0,
            };
            let token = last.max(existing.map_or(0, |l| l.token)).saturating_add(1);
            tx.prepare_cached(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![META_LEASE_TOKEN, token.to_string()])?;
            let now_ms = ms(&now);
            tx.prepare_cached(
                "INSERT INTO daemon_lease (id, runner_id, pid, pid_start_time, host, token, \
                   acquired_at, heartbeat_at, expires_at) \
                 VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7) \
                 ON CONFLICT (id) DO UPDATE SET runner_id = excluded.runner_id, pid = excluded.pid, \
                   pid_start_time = excluded.pid_start_time, host = excluded.host, \
                   token = excluded.token, acquired_at = excluded.acquired_at, \
                   heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at",
            )?
            .execute(params![
                holder.runner_id,
                holder.pid,
                holder.pid_start_time.map(sat_i64),
                holder.host,
                sat_i64(token),
                now_ms,
                now_ms.saturating_add(sat_i64(ttl_ms)),
            ])?;
            let lease = read_lease(tx)?.ok_or_else(|| {
                StoreError::Decode("daemon_lease row missing after acquire".to_owned())
            })?;
            Ok(LeaseAcquire::Acquired(lease))
        })
    }

    fn heartbeat_daemon_lease(&self, fence: &Fence, ttl_ms: u64, now: Instant) -> Result<bool> {
        let now_ms = ms(&now);
        self.write(None, |tx| {
            let n = tx
                .prepare_cached(
                    "UPDATE daemon_lease SET heartbeat_at = ?2, expires_at = ?3 \
                     WHERE id = 1 AND token = ?1",
                )?
                .execute(params![
                    sat_i64(fence.token),
                    now_ms,
                    now_ms.saturating_add(sat_i64(ttl_ms))
                ])?;
            Ok(n == 1)
        })
    }

    fn release_daemon_lease(&self, fence: &Fence) -> Result<()> {
        self.write(None, |tx| {
            tx.prepare_cached("DELETE FROM daemon_lease WHERE id = 1 AND token = ?1")?
                .execute([sat_i64(fence.token)])?;
            Ok(())
        })
    }

    /// Checkpoints the WAL from a thread with its own connection, `CHECKPOINT_EVERY`
    /// after a commit of this store (no wake-ups while idle), and turns off the
    /// automatic checkpoint of this connection.
    /// An automatic checkpoint runs inside the commit that crosses 1,000 WAL pages and
    /// fsyncs the WAL and the database there, stalling that commit (and every caller
    /// waiting on this connection) for up to tens of milliseconds; a busy daemon crossed
    /// it several times a second. The bulk of the copy and its fsyncs now happen on
    /// another connection beside the writers; only the short tail, and the reset that
    /// makes the WAL rewind (see `checkpoint_loop`), hold this connection.
    fn start_background_maintenance(&self) -> Result<()> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        if self.checkpointer.get().is_some() {
            return Ok(());
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // Never wait on other processes: a busy round is retried after the next commit.
        conn.busy_timeout(Duration::ZERO)?;
        let (nudge, nudges) = mpsc::sync_channel::<()>(1);
        let pending = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&pending);
        let store_conn = Arc::downgrade(&self.conn);
        std::thread::Builder::new()
            .name("loops-checkpoint".into())
            .spawn(move || checkpoint_loop(&conn, &store_conn, &nudges, &flag))
            .map_err(|e| StoreError::DataDir {
                path: path.display().to_string(),
                source: e,
            })?;
        // Only now that checkpoints are taken care of.
        let conn = self.lock();
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        // The WAL now rewinds several times a second under load. Cutting it back to
        // 1 MiB at each rewind (the default set in `setup_connection`) made every
        // rewind free and re-allocate its blocks, and those truncations stalled
        // commits for up to hundreds of milliseconds on ext4. The daemon's WAL keeps
        // its working size instead, capped here.
        conn.pragma_update(None, "journal_size_limit", DAEMON_WAL_LIMIT)?;
        drop(conn);
        // A concurrent second start loses here; its thread ends with its dropped handle.
        let _ = self.checkpointer.set(Checkpointer { nudge, pending });
        // Whatever is in the WAL already.
        self.nudge_checkpointer();
        Ok(())
    }

    fn current_daemon_lease(&self) -> Result<Option<DaemonLease>> {
        let conn = self.lock();
        read_lease(&conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used)]
    fn read_only_open_rejects_writes_and_uri_paths_are_encoded() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a b?#%.db");
        drop(SqliteStore::open(&db).unwrap());
        let store = SqliteStore::open_read_only(&db).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let err = store.remove_loop(&LoopId::new("x")).unwrap_err();
        assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
        assert!(
            uri_path(&db).ends_with("/a%20b%3F%23%25.db"),
            "{}",
            uri_path(&db)
        );
    }

    #[test]
    fn schema_version_is_the_last_migration() {
        let last = MIGRATIONS.last().map(|m| m.version);
        assert_eq!(last, Some(SCHEMA_VERSION));
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "migrations are numbered 1, 2, 3…");
        }
    }

    #[test]
    fn ids_are_12_lowercase_hex() {
        for _ in 0..100 {
            let id = new_id();
            assert_eq!(id.len(), 12);
            assert!(id.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
        }
    }
}
