//! Opening and migrations: creating the file privately, inspecting an existing file
//! read-only before anything is written to it, the connection's pragmas, the embedded
//! migrations, read-only opens, and the integrity checks `loops doctor` and the daemon
//! run.

use crate::error::{corrupt_at, from_sqlite, is_corruption, is_readonly_error};
use crate::error::{Error, Result, StoreResult};
use crate::SqliteStore;
use loops_store::open_files::{self, Claim, Header};
use loops_store::schema::{refuse_newer, Migration};
use loops_store::StoreError;
use rusqlite::{ffi, params, Connection, ErrorCode, OpenFlags, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// First 16 bytes of every SQLite 3 database file.
/// `PRAGMA application_id` of a loops database (ASCII "loop"); set by migration 1.
pub(crate) const APPLICATION_ID: i64 = 0x6C6F_6F70;

/// How much of the file a read-only connection maps into memory (SQLite's
/// `mmap_size`; the file is read through the mapping, not with a syscall per page).
const READ_ONLY_MMAP_BYTES: i64 = 256 << 20;

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
    Migration {
        version: 5,
        name: "labels, jitter, notifications",
        sql: include_str!("../migrations/0005_operability.sql"),
    },
    Migration {
        version: 6,
        name: "run filters",
        sql: include_str!("../migrations/0006_run_filters.sql"),
    },
    Migration {
        version: 7,
        name: "notification delivery claims",
        sql: include_str!("../migrations/0007_notification_claims.sql"),
    },
    Migration {
        version: 8,
        name: "health and usage indexes",
        sql: include_str!("../migrations/0008_health_usage_indexes.sql"),
    },
    Migration {
        version: 9,
        name: "health recent-runs index",
        sql: include_str!("../migrations/0009_health_recent_index.sql"),
    },
    Migration {
        version: 10,
        name: "event log",
        sql: include_str!("../migrations/0010_event_log.sql"),
    },
    Migration {
        version: 11,
        name: "event log as a feed",
        sql: include_str!("../migrations/0011_event_log_feed.sql"),
    },
    Migration {
        version: 12,
        name: "error output, notify-on changes",
        sql: include_str!("../migrations/0012_error_output_notify_changes.sql"),
    },
    Migration {
        version: 13,
        name: "failure classes",
        sql: include_str!("../migrations/0013_failure_classes.sql"),
    },
    Migration {
        version: 14,
        name: "retry back-off and circuit breaker",
        sql: include_str!("../migrations/0014_backoff_breaker.sql"),
    },
    Migration {
        version: 15,
        name: "account holds",
        sql: include_str!("../migrations/0015_account_holds.sql"),
    },
    Migration {
        version: 16,
        name: "sessions",
        sql: include_str!("../migrations/0016_sessions.sql"),
    },
    Migration {
        version: 17,
        name: "budgets",
        sql: include_str!("../migrations/0017_budgets.sql"),
    },
    Migration {
        version: 18,
        name: "concurrency caps",
        sql: include_str!("../migrations/0018_caps.sql"),
    },
    Migration {
        version: 19,
        name: "step provider",
        sql: include_str!("../migrations/0019_step_provider.sql"),
    },
    Migration {
        version: 20,
        name: "workflow run params",
        sql: include_str!("../migrations/0020_workflow_run_params.sql"),
    },
    Migration {
        version: 21,
        name: "run counts by hour",
        sql: include_str!("../migrations/0021_run_counts.sql"),
    },
];

/// The newest schema version this build knows (the last entry of the migrations).
pub const SCHEMA_VERSION: i64 = 21;

impl SqliteStore {
    /// Opens (creating when missing, mode 0600) the database at `path`, switches it to
    /// WAL and applies pending migrations.
    ///
    /// A file that is not a loops database yields [`StoreError::Corrupt`] and is left
    /// byte-for-byte untouched: it is inspected read-only before anything is written. A
    /// database from a newer build yields [`StoreError::TooNew`], also untouched. A file
    /// or directory that cannot be written yields [`StoreError::ReadOnly`].
    pub fn open(path: &Path) -> StoreResult<Self> {
        create_db_file(path)?;
        let (found, claim) = inspect(path)?;
        let display = path.display().to_string();
        let readonly = |e: Error| match e {
            Error::Sqlite(se) if is_readonly_error(&se, true) => StoreError::ReadOnly {
                path: display.clone(),
                source: Box::new(se),
            },
            other => other.into(),
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| readonly(e.into()))?;
        // SQLite silently falls back to read-only when the file is not writable.
        if conn.is_readonly(rusqlite::MAIN_DB).map_err(from_sqlite)? {
            return Err(StoreError::ReadOnly {
                path: display,
                source: "the database file cannot be opened for writing".into(),
            });
        }
        let mut conn = conn;
        setup_connection(&mut conn, Some(&display), found).map_err(readonly)?;
        Ok(Self::with_connection(conn, Some((path, claim))))
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
    pub fn open_read_only(path: &Path) -> StoreResult<Self> {
        let display = path.display().to_string();
        let needs_setup = |found: i64| StoreError::ReadOnly {
            path: display.clone(),
            source: format!(
                "the store (schema {found}) needs setting up or migrating to schema \
                 {SCHEMA_VERSION}, which needs write access"
            )
            .into(),
        };
        let (has_header, claim) = has_sqlite_header(path)?;
        if !has_header {
            return Err(needs_setup(0));
        }
        let conn = match open_read_only(path) {
            Ok(conn) => conn,
            Err(e) => return Err(classify_open_error(e, &display)),
        };
        let found = inspect_schema(&conn, &display)?;
        if found < SCHEMA_VERSION {
            return Err(needs_setup(found));
        }
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(from_sqlite)?;
        // A reader touches pages of the whole file (`health` reads every loop's newest
        // runs): mapped, they are read without a pread(2) each.
        conn.pragma_update(None, "mmap_size", READ_ONLY_MMAP_BYTES)
            .map_err(from_sqlite)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Self::with_connection(conn, Some((path, claim))))
    }

    /// A private in-memory store with the full schema (for tests and dry runs).
    pub fn open_in_memory() -> StoreResult<Self> {
        let mut conn = Connection::open_in_memory().map_err(from_sqlite)?;
        setup_connection(&mut conn, None, 0)?;
        Ok(Self::with_connection(conn, None))
    }

    /// Opens the default store: [`loops_store::data_dir`], created when missing, then
    /// [`loops_store::DB_FILE`] inside it.
    pub fn open_default() -> StoreResult<Self> {
        let dir = loops_store::data_dir()?;
        loops_store::prepare_data_dir(&dir)?;
        Self::open(&dir.join(loops_store::DB_FILE))
    }

    /// `PRAGMA quick_check`: `["ok"]` for a healthy database, else SQLite's list of
    /// problems. Checks every page and b-tree (not index contents against tables), in
    /// time linear in the file size; the daemon runs it before taking the store.
    pub fn quick_check(&self) -> StoreResult<Vec<String>> {
        quick_check(&self.lock()).map_err(|e| self.with_path(from_sqlite(e)))
    }

    /// The schema version recorded in `schema_migrations`.
    pub fn schema_version(&self) -> StoreResult<i64> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                [],
                |r| r.get(0),
            )?)
        })
    }

    /// `PRAGMA integrity_check`: `["ok"]` for a healthy database, else SQLite's list of
    /// problems (for `loops doctor`).
    pub fn integrity_check(&self) -> StoreResult<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare("PRAGMA integrity_check")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
}

/// Creates the database file with mode 0600 when missing, so SQLite never creates it
/// with the umask's (usually world-readable) mode.
///
/// A `-wal` or `-shm` file found next to a database we just created belongs to a
/// database that was deleted (`rm loops.db`), maybe still open in a daemon that has
/// not noticed yet. SQLite would adopt them for the new file — replaying the old
/// database's pages into it and sharing one WAL between two databases — so their
/// names are removed first (a process holding them keeps its own inodes).
fn create_db_file(path: &Path) -> StoreResult<()> {
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

/// `path` for a `file:` URI: everything but unreserved characters and `/`
/// percent-encoded, so spaces, `?`, `#` and `%` in a data dir stay part of the path.
pub(crate) fn uri_path(path: &Path) -> String {
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
/// build can use. Returns its schema version (0 when empty), and the file's claim
/// (held while a connection of ours is open to it: [`loops_store::open_files`]).
fn inspect(path: &Path) -> StoreResult<(i64, Claim)> {
    let (has_header, claim) = has_sqlite_header(path)?;
    if !has_header {
        return Ok((0, claim));
    }
    let display = path.display().to_string();
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| classify_open_error(e, &display))?;
    Ok((inspect_schema(&conn, &display)?, claim))
}

/// SQLite's error on opening or inspecting `display` as a store error.
fn classify_open_error(e: rusqlite::Error, display: &str) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => corrupt_at(display, e),
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly) => StoreError::ReadOnly {
            path: display.to_owned(),
            source: Box::new(e),
        },
        _ => from_sqlite(e),
    }
}

/// Reads only the first bytes of `path`: `false` when it is empty, `true` when it
/// starts like a SQLite database, [`StoreError::Corrupt`] otherwise — so SQLite never
/// even sees a foreign file. Returns the file's [`Claim`], to be kept while a
/// connection to the file is open: the check never closes a descriptor of a file this
/// process has open through SQLite, which would drop its locks
/// ([`loops_store::open_files`]).
pub(crate) fn has_sqlite_header(path: &Path) -> StoreResult<(bool, Claim)> {
    let display = path.display().to_string();
    // A regular file only, never blocking on a FIFO (`loops_store::user_file`).
    let (header, claim) = match open_files::claim(path, loops_store::user_file::open_regular) {
        Ok(found) => found,
        Err(source) if source.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(StoreError::DataDir {
                path: display,
                source,
            })
        }
        Err(e) => return Err(io_error(path, e)),
    };
    match header {
        Header::Empty => Ok((false, claim)),
        Header::Sqlite => Ok((true, claim)),
        Header::Foreign => Err(corrupt_at(&display, not_a_database("no SQLite header"))),
    }
}

/// Checks on an open (read-only) connection that the database is empty or a loops
/// database this build can use; returns its schema version (0 when empty).
pub(crate) fn inspect_schema(conn: &Connection, display: &str) -> StoreResult<i64> {
    let classify = |e: rusqlite::Error| classify_open_error(e, display);
    conn.busy_timeout(BUSY_TIMEOUT).map_err(classify)?;
    let app_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(classify)?;
    if app_id != 0 && app_id != APPLICATION_ID {
        return Err(corrupt_at(
            display,
            not_a_database("the file belongs to another application (application_id)"),
        ));
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
            return Err(corrupt_at(
                display,
                not_a_database("a SQLite database without loops' schema_migrations table"),
            ));
        }
        return Ok(0);
    }
    let recorded: Vec<i64> = conn
        .prepare("SELECT version FROM schema_migrations ORDER BY version")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()
        })
        .map_err(classify)?;
    let version = recorded.last().copied().unwrap_or(0);
    refuse_newer(display, version, SCHEMA_VERSION)?;
    Ok(complete_up_to(&recorded))
}

/// The schema version a database with these migrations recorded is complete up to:
/// the last of ours before the first one it lacks. Below [`SCHEMA_VERSION`] means
/// migrations are pending — also one numbered below a recorded one, as when two
/// branches each added a migration and the higher-numbered one landed first.
fn complete_up_to(recorded: &[i64]) -> i64 {
    let mut complete = 0;
    for m in MIGRATIONS {
        if !recorded.contains(&m.version) {
            break;
        }
        complete = m.version;
    }
    complete
}

/// Connection pragmas, then migrations when `found` (the inspected version) is behind.
/// `path` is `None` for an in-memory database.
fn setup_connection(conn: &mut Connection, path: Option<&str>, found: i64) -> Result<()> {
    // First, so that the journal-mode switch below also waits for other openers.
    conn.busy_timeout(BUSY_TIMEOUT)?;
    crate::loops::register_functions(conn)?;
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
        // An existing store with data is copied first (`backups/loops-<found>-<time>.db`).
        if let Some(path) = path.filter(|_| found > 0) {
            crate::backup::before_migration(conn, Path::new(path), found)
                .map_err(|e| Error::Store(e.into()))?;
        }
        migrate(conn, path.unwrap_or(":memory:"))?;
    } else if path.is_some() {
        // Migrations prove the file writable; without them, probe the write lock so a
        // read-only directory (no -wal/-shm possible) fails here rather than at the
        // first write. SQLite would otherwise serve reads from heap memory.
        // Without waiting: a writer holding the lock (a daemon stopped mid-commit, a
        // long checkpoint) proves the file writable, and is the caller's to meet —
        // `daemon run` reads the lease and names its holder rather than time out here.
        conn.busy_timeout(Duration::ZERO)?;
        let probed = conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;");
        conn.busy_timeout(BUSY_TIMEOUT)?;
        match probed {
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) => {}
            other => other?,
        }
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
        let (current, applied): (i64, bool) = tx.query_row(
            "SELECT COALESCE(MAX(version), 0), EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?1) \
             FROM schema_migrations",
            [m.version],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        refuse_newer(path, current, SCHEMA_VERSION)?;
        // By version, not by the highest one recorded: a migration numbered below an
        // applied one (another branch's, landed later) is still applied.
        if applied {
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

/// Opens the database at `path` read-only and reads its schema once (which fails on a
/// file that is not a database). A WAL database in a directory where no `-shm` index
/// can be created (a read-only directory) is opened `immutable` instead.
pub(crate) fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let opened = Connection::open_with_flags(path, flags).and_then(|conn| {
        conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })?;
        Ok(conn)
    });
    match opened {
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::CannotOpen) => {
            let uri = format!("file:{}?immutable=1", uri_path(path));
            Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
        }
        other => other,
    }
}

/// `PRAGMA quick_check` on `conn`: `["ok"]`, else SQLite's list of problems — a page
/// too damaged to walk fails the pragma itself, and is reported as its one problem.
/// The one check behind [`SqliteStore::quick_check`] and a backup's or restore's.
pub(crate) fn quick_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let result = (|| {
        let mut stmt = conn.prepare("PRAGMA quick_check")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })();
    match result {
        Err(e) if is_corruption(&e) => Ok(vec![e.to_string()]),
        checked => checked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loops_core::LoopId;
    use loops_store::Store;

    /// Whether some lock on `probe`'s file would stop a write lock on SQLite's shared
    /// range: a connection's shared lock. An open-file-description query sees the
    /// POSIX locks of this very process too (fcntl(2)).
    #[allow(clippy::unwrap_used)]
    fn shared_lock_held(probe: &std::fs::File) -> bool {
        use nix::fcntl::{fcntl, FcntlArg};
        // SQLite's lock bytes (os_unix.c): PENDING_BYTE 0x40000000, then RESERVED,
        // then the 510 bytes of the shared range.
        const SHARED_FIRST: i64 = 0x4000_0000 + 2;
        const SHARED_SIZE: i64 = 510;
        let mut lock = nix::libc::flock {
            l_type: nix::libc::F_WRLCK as i16,
            l_whence: nix::libc::SEEK_SET as i16,
            l_start: SHARED_FIRST,
            l_len: SHARED_SIZE,
            l_pid: 0,
        };
        fcntl(probe, FcntlArg::F_OFD_GETLK(&mut lock)).unwrap();
        lock.l_type != nix::libc::F_UNLCK as i16
    }

    /// The bug this module exists for: opening a second store on a file the first has
    /// open read its header with a plain open/close, which dropped the first's shared
    /// lock — and the daemon that left next removed the WAL under it.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn opening_a_store_again_keeps_the_locks_of_the_one_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loops.db");
        let first = SqliteStore::open(&path).unwrap();
        first.current_daemon_lease().unwrap();
        // Opened once and never closed while a store is open: closing it would drop
        // the locks this test looks at.
        let probe = std::fs::File::open(&path).unwrap();
        assert!(
            shared_lock_held(&probe),
            "an idle WAL connection holds a shared lock"
        );
        let second = SqliteStore::open(&path).unwrap();
        assert!(
            shared_lock_held(&probe),
            "opening the second store dropped it"
        );
        let reader = SqliteStore::open_read_only(&path).unwrap();
        assert!(shared_lock_held(&probe), "opening a reader dropped it");
        drop(reader);
        drop(second);
        assert!(
            shared_lock_held(&probe),
            "closing the others dropped the first's"
        );
        drop(first);
        drop(probe);
    }

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
        for (i, pair) in MIGRATIONS.windows(2).enumerate() {
            assert!(
                pair[0].version < pair[1].version,
                "migrations are numbered upwards (entry {i})"
            );
        }
        // Every number from 1 on, none left out (branches reserve theirs; a gap is a
        // branch that has not landed, and must not survive its merge).
        let versions: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    }

    #[test]
    fn a_migration_below_a_recorded_one_is_still_pending() {
        let all: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(complete_up_to(&all), SCHEMA_VERSION);
        assert_eq!(complete_up_to(&[]), 0);
        assert_eq!(complete_up_to(&[1, 2, 3]), 3);
        // 4 missing under a recorded 5: complete up to 3 only, so 4 is applied.
        assert_eq!(complete_up_to(&[1, 2, 3, 5]), 3);
        // A store made by a branch build with 8 before 6 and 7 landed: both pending.
        assert_eq!(complete_up_to(&[1, 2, 3, 4, 5, 8]), 5);
    }
}
