//! Backups of the store file (issue #23): consistent copies made with SQLite's online
//! backup API — one read transaction, so a daemon writing through WAL is neither
//! stopped nor seen half-way — written to a private temp file beside the target and
//! renamed into place; restoring one over the store; the copy the store makes of
//! itself before a schema migration; and pruning `<data dir>/backups`.
//!
//! A backup is the database file as it was (every table, run history and event log);
//! a bundle (`loops export`) is only definitions, and is not a backup.

use crate::error::{corrupt_at, from_sqlite};
use crate::open::{has_sqlite_header, inspect_schema, quick_check};
use crate::SqliteStore;
use loops_store::{CorruptKind, StoreError};
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory of backups inside the data dir.
pub const BACKUPS_DIR: &str = "backups";

/// How many backups made before migrations are kept (the newest).
pub const KEEP_MIGRATION_BACKUPS: usize = 3;

/// How long a backup waits, in all, for a writer that holds the source locked (in WAL
/// mode only a checkpoint's truncation or a change out of WAL does).
const BUSY_WAIT: Duration = Duration::from_secs(30);

/// The time in a backup's name: UTC, to the millisecond, sorting as it reads.
const NAME_TIME_FORMAT: &str = "%Y%m%dT%H%M%S%.3fZ";

/// Which backup a file of `<data dir>/backups` is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum BackupKind {
    /// `loops backup` (`loops-manual-<time>.db`).
    Manual,
    /// The store as it was before `loops restore` replaced it
    /// (`loops-before-restore-<time>.db`).
    BeforeRestore,
    /// The store as it was before a schema migration, at that version
    /// (`loops-<version>-<time>.db`).
    Migration,
}

impl BackupKind {
    /// The file name of a backup of this kind made at `at` (`version`: the schema
    /// version the store had, named by a migration backup only).
    pub fn file_name(self, version: i64, at: chrono::DateTime<chrono::Utc>) -> String {
        let time = at.format(NAME_TIME_FORMAT);
        match self {
            BackupKind::Manual => format!("loops-manual-{time}.db"),
            BackupKind::BeforeRestore => format!("loops-before-restore-{time}.db"),
            BackupKind::Migration => format!("loops-{version}-{time}.db"),
        }
    }

    /// The kind and time of a file named as [`BackupKind::file_name`] names one.
    pub fn of_file_name(name: &str) -> Option<(BackupKind, &str)> {
        let stem = name.strip_prefix("loops-")?.strip_suffix(".db")?;
        let (head, time) = stem.rsplit_once('-')?;
        chrono::NaiveDateTime::parse_from_str(time, NAME_TIME_FORMAT).ok()?;
        let kind = match head {
            "manual" => BackupKind::Manual,
            "before-restore" => BackupKind::BeforeRestore,
            v if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => BackupKind::Migration,
            _ => return None,
        };
        Some((kind, time))
    }
}

/// How many of each thing a store file holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreCounts {
    pub loops: u64,
    pub workflows: u64,
    pub runs: u64,
    pub workflow_runs: u64,
    pub step_runs: u64,
    pub events: u64,
}

/// A store file written (a backup) or checked (a file to restore).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupInfo {
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// The schema version it is at.
    pub schema_version: i64,
    pub counts: StoreCounts,
}

/// What [`restore`] did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Restored {
    /// The store file, now holding what the backup held.
    pub store: BackupInfo,
    /// The file restored from.
    pub from: PathBuf,
    /// Where the store as it was is kept (`None` when it was empty).
    pub kept: Option<BackupInfo>,
}

/// Why a backup or restore did nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The target file exists and replacing it was not asked for.
    #[error("{} exists (not replaced without --force)", .0.display())]
    Exists(PathBuf),
    /// The file to restore is not a store this build can use.
    #[error("{}: {reason}", .path.display())]
    BadFile { path: PathBuf, reason: String },
    /// Another process has the store open.
    #[error("{0}")]
    InUse(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for BackupError {
    fn from(e: rusqlite::Error) -> Self {
        BackupError::Store(from_sqlite(e))
    }
}

impl From<BackupError> for StoreError {
    /// For the backup a migration makes, which is reported as the open's failure.
    fn from(e: BackupError) -> Self {
        match e {
            BackupError::Store(e) => e,
            BackupError::Io { context, source } => StoreError::DataDir {
                path: context,
                source,
            },
            other => StoreError::Backend {
                kind: loops_store::BackendErrorKind::Other,
                message: other.to_string(),
                source: Box::new(other),
            },
        }
    }
}

type Result<T> = std::result::Result<T, BackupError>;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let context = context.into();
    move |source| BackupError::Io { context, source }
}

impl SqliteStore {
    /// Writes a consistent copy of this store to `target` (see [`write_copy`]):
    /// refused when `target` exists, unless `overwrite`.
    pub fn backup_to(&self, target: &Path, overwrite: bool) -> Result<BackupInfo> {
        if self.path().is_none() {
            return Err(BackupError::Store(StoreError::InvalidArgument(
                "an in-memory store has no file to back up".to_owned(),
            )));
        }
        let conn = self.lock();
        write_copy(&conn, target, overwrite)
    }
}

/// `<dir of the store file>/backups`, created (mode 0700) when missing.
pub fn backups_dir(db: &Path) -> Result<PathBuf> {
    let dir = db
        .parent()
        .map_or_else(|| PathBuf::from(BACKUPS_DIR), |p| p.join(BACKUPS_DIR));
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(&dir)
        .map_err(io(format!("cannot create {}", dir.display())))?;
    Ok(dir)
}

/// Removes the file it names when dropped, unless disarmed.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            for suffix in ["", "-journal", "-wal", "-shm"] {
                let mut p = self.path.as_os_str().to_owned();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// A new, empty, private (0600) file beside `target`, removed again unless disarmed.
fn temp_beside(target: &Path) -> Result<TempFile> {
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty());
    let name = target
        .file_name()
        .map_or_else(|| "loops".into(), |n| n.to_string_lossy().into_owned());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    for _ in 0..16 {
        let tmp_name = format!(
            ".{name}.tmp-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let path = dir.map_or_else(|| PathBuf::from(&tmp_name), |d| d.join(&tmp_name));
        match options.open(&path) {
            Ok(_) => return Ok(TempFile { path, armed: true }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(io(format!(
                    "cannot write {} (its temp file {})",
                    target.display(),
                    path.display()
                ))(e))
            }
        }
    }
    Err(BackupError::Io {
        context: format!("cannot create a temp file beside {}", target.display()),
        source: std::io::ErrorKind::AlreadyExists.into(),
    })
}

/// Copies the database `src` is connected to, in one read transaction, into the
/// private temp file `tmp`, then makes the copy a self-contained rollback-journal file
/// (no `-wal` beside it) and checks it. Returns its schema version and counts.
fn copy_into(src: &Connection, tmp: &Path) -> Result<(i64, StoreCounts)> {
    let mut dest = Connection::open_with_flags(
        tmp,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    {
        let backup = Backup::new(src, &mut dest)?;
        let deadline = std::time::Instant::now() + BUSY_WAIT;
        loop {
            // -1: every page in one step, under one read transaction of the source.
            match backup.step(-1)? {
                StepResult::Done => break,
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                StepResult::Busy | StepResult::Locked => {
                    return Err(BackupError::InUse(
                        "the store stayed locked by another writer for 30 s; try again".to_owned(),
                    ))
                }
                _ => {}
            }
        }
    }
    dest.query_row("PRAGMA journal_mode = DELETE", [], |r| {
        r.get::<_, String>(0)
    })?;
    let problems = quick_check(&dest)?;
    if problems != ["ok"] {
        return Err(BackupError::Store(corrupt_at(
            &tmp.display().to_string(),
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                Some(format!(
                    "the copy fails quick_check: {}",
                    problems.join("; ")
                )),
            ),
        )));
    }
    let version = inspect_schema(&dest, &tmp.display().to_string())?;
    let counts = counts(&dest)?;
    dest.close().map_err(|(_, e)| BackupError::from(e))?;
    sync_file(tmp)?;
    Ok((version, counts))
}

/// Writes a consistent copy of the database `src` is connected to at `target`: into a
/// private (0600) temp file beside it, checked (`quick_check`), synced, then moved into
/// place — atomically, and without replacing an existing `target` unless `overwrite`.
/// Nothing is left behind on failure.
pub fn write_copy(src: &Connection, target: &Path, overwrite: bool) -> Result<BackupInfo> {
    if !overwrite && target.symlink_metadata().is_ok() {
        return Err(BackupError::Exists(target.to_path_buf()));
    }
    let mut tmp = temp_beside(target)?;
    let (schema_version, counts) = copy_into(src, &tmp.path)?;
    publish(&tmp.path, target, overwrite)?;
    tmp.armed = false;
    sync_parent(target);
    let bytes = std::fs::metadata(target)
        .map_err(io(format!("cannot read {}", target.display())))?
        .len();
    Ok(BackupInfo {
        path: target.to_path_buf(),
        bytes,
        schema_version,
        counts,
    })
}

/// Moves `tmp` to `target`: a rename when replacing is allowed, else a hard link that
/// fails if `target` appeared meanwhile (then `tmp` is removed).
fn publish(tmp: &Path, target: &Path, overwrite: bool) -> Result<()> {
    if overwrite {
        return std::fs::rename(tmp, target)
            .map_err(io(format!("cannot move the copy to {}", target.display())));
    }
    match std::fs::hard_link(tmp, target) {
        Ok(()) => {
            let _ = std::fs::remove_file(tmp);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(BackupError::Exists(target.to_path_buf()))
        }
        // A file system without hard links: checked above, so a rename.
        Err(_) => std::fs::rename(tmp, target)
            .map_err(io(format!("cannot move the copy to {}", target.display()))),
    }
}

fn sync_file(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(format!("cannot sync {}", path.display())))
}

/// Makes a rename in `path`'s directory durable (best effort: not every file system
/// lets a directory be synced).
fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Rows of the tables counted, each 0 when the schema has no such table yet (an older
/// store).
fn counts(conn: &Connection) -> Result<StoreCounts> {
    let count = |table: &str| -> Result<u64> {
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
            [table],
            |r| r.get(0),
        )?;
        if !exists {
            return Ok(0);
        }
        let n: i64 = conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    Ok(StoreCounts {
        loops: count("loops")?,
        workflows: count("workflows")?,
        runs: count("runs")?,
        workflow_runs: count("workflow_runs")?,
        step_runs: count("workflow_step_runs")?,
        events: count("events")?,
    })
}

/// Whether any table of the store but `schema_migrations` holds a row.
fn holds_data(conn: &Connection) -> Result<bool> {
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name <> 'schema_migrations'",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for table in tables {
        let quoted = table.replace('"', "\"\"");
        let any: bool = conn.query_row(
            &format!("SELECT EXISTS (SELECT 1 FROM \"{quoted}\")"),
            [],
            |r| r.get(0),
        )?;
        if any {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Opens `path` read-only, as a loops store file this build can use, and checks it:
/// `quick_check` ok, a loops store (its `application_id` and `schema_migrations`), at
/// a schema version not newer than ours. A file that fails is [`BackupError::BadFile`].
///
/// Returns the open connection with the file's claim (keep it while the connection is
/// open: [`loops_store::open_files`]).
pub fn check_file(path: &Path) -> Result<(Connection, loops_store::open_files::Claim, BackupInfo)> {
    let bad = |reason: String| BackupError::BadFile {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".to_owned()));
    }
    let display = path.display().to_string();
    let (has_header, claim) = has_sqlite_header(path).map_err(|e| bad(short_reason(&e)))?;
    if !has_header {
        return Err(bad("empty, not a loops store".to_owned()));
    }
    let conn = crate::open::open_read_only(path).map_err(|e| bad(short_reason(&from_sqlite(e))))?;
    let problems = quick_check(&conn).map_err(|e| bad(from_sqlite(e).to_string()))?;
    if problems != ["ok"] {
        return Err(bad(format!(
            "damaged: quick_check found {}",
            problems
                .first()
                .map_or("problems", String::as_str)
                .to_owned()
        )));
    }
    let version = inspect_schema(&conn, &display).map_err(|e| bad(short_reason(&e)))?;
    if version == 0 {
        return Err(bad("not a loops store (no tables)".to_owned()));
    }
    let counts = counts(&conn).map_err(|e| bad(e.to_string()))?;
    Ok((
        conn,
        claim,
        BackupInfo {
            path: path.to_path_buf(),
            bytes: meta.len(),
            schema_version: version,
            counts,
        },
    ))
}

/// A store error about a file to restore, without the path the caller names anyway.
fn short_reason(e: &StoreError) -> String {
    match e {
        StoreError::TooNew { found, known, .. } => format!(
            "written by a newer loops (schema {found}, this build knows {known}); \
             restore it with that version"
        ),
        StoreError::Corrupt {
            kind: CorruptKind::NotAStore,
            source,
            ..
        } => format!("not a loops store ({source})"),
        StoreError::Corrupt { source, .. } => format!("damaged ({source})"),
        other => other.to_string(),
    }
}

/// Replaces the store file `db` with a copy of the backup `from`, keeping the store as
/// it was in `<dir of db>/backups/loops-before-restore-<time>.db`.
///
/// Checks `from` first ([`check_file`]); then takes the store exclusively — refused
/// ([`BackupError::InUse`]) while any other connection has it open, a daemon's,
/// `loops serve`'s or another command's — and, holding it: keeps the current store
/// (when it holds anything), writes the copy of `from` into a private temp file beside
/// `db`, checks it, removes the store's `-wal`/`-shm` (which the switch out of WAL
/// already emptied) and renames the copy over `db`. A failure before the rename leaves
/// the store as it was.
pub fn restore(db: &Path, from: &Path, now: chrono::DateTime<chrono::Utc>) -> Result<Restored> {
    let same = match (std::fs::canonicalize(db), std::fs::canonicalize(from)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(BackupError::BadFile {
            path: from.to_path_buf(),
            reason: "this is the store itself".to_owned(),
        });
    }
    let (source, source_claim, _checked) = check_file(from)?;
    let store_len = std::fs::metadata(db).map(|m| m.len()).unwrap_or(0);
    // The store, held exclusively until the copy is in its place.
    let held = if store_len > 0 {
        Some(take_exclusively(db)?)
    } else {
        None
    };
    let kept = match &held {
        Some((conn, _)) if holds_data(conn)? => {
            let dir = backups_dir(db)?;
            let name = BackupKind::BeforeRestore.file_name(0, now);
            Some(write_copy(conn, &dir.join(name), false)?)
        }
        _ => None,
    };
    let mut tmp = temp_beside(db)?;
    let (schema_version, counts) = copy_into(&source, &tmp.path)?;
    drop(source);
    drop(source_claim);
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut side = db.as_os_str().to_owned();
        side.push(suffix);
        match std::fs::remove_file(&side) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(io(format!("cannot remove {}", Path::new(&side).display()))(
                    e,
                ));
            }
        }
    }
    std::fs::rename(&tmp.path, db).map_err(io(format!(
        "cannot move the restored copy to {}",
        db.display()
    )))?;
    tmp.armed = false;
    sync_parent(db);
    // The old file's connection (its inode is gone), then its claim.
    drop(held);
    let bytes = std::fs::metadata(db)
        .map_err(io(format!("cannot read {}", db.display())))?
        .len();
    Ok(Restored {
        store: BackupInfo {
            path: db.to_path_buf(),
            bytes,
            schema_version,
            counts,
        },
        from: from.to_path_buf(),
        kept,
    })
}

/// A connection holding `db`'s exclusive lock, after switching it out of WAL — which
/// SQLite allows only to the one connection open to the file, so any other (another
/// process's, or this one's) makes it fail: the store is in use. The switch
/// checkpoints the WAL into the file and removes it.
fn take_exclusively(db: &Path) -> Result<(Connection, loops_store::open_files::Claim)> {
    let in_use = || {
        BackupError::InUse(format!(
            "{} is in use by another process (a daemon, `loops serve` or another command): \
             stop it first",
            db.display()
        ))
    };
    let (_, claim) = has_sqlite_header(db)?;
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::ZERO)?;
    let busy = |e: &rusqlite::Error| {
        matches!(
            e.sqlite_error_code(),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        )
    };
    conn.query_row("PRAGMA locking_mode = EXCLUSIVE", [], |r| {
        r.get::<_, String>(0)
    })?;
    match conn.query_row("PRAGMA journal_mode = DELETE", [], |r| {
        r.get::<_, String>(0)
    }) {
        Ok(mode) if mode.eq_ignore_ascii_case("delete") => {}
        Ok(_) => return Err(in_use()),
        Err(e) if busy(&e) => return Err(in_use()),
        Err(e) => return Err(e.into()),
    }
    // An empty exclusive transaction: no journal is opened, and in exclusive locking
    // mode the lock stays with the connection until it closes.
    match conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;") {
        Ok(()) => {}
        Err(e) if busy(&e) => return Err(in_use()),
        Err(e) => return Err(e.into()),
    }
    Ok((conn, claim))
}

/// Before migrating the store at `db` from schema `from_version`: when it holds data,
/// a copy as it is, `<dir>/backups/loops-<from_version>-<time>.db`; then only the
/// newest [`KEEP_MIGRATION_BACKUPS`] of those are kept.
pub(crate) fn before_migration(conn: &Connection, db: &Path, from_version: i64) -> Result<()> {
    if !holds_data(conn)? {
        return Ok(());
    }
    let dir = backups_dir(db)?;
    let name = BackupKind::Migration.file_name(from_version, chrono::Utc::now());
    let info = write_copy(conn, &dir.join(name), false)?;
    tracing::info!(
        backup = %info.path.display(),
        from_version,
        "backed up the store before migrating it"
    );
    prune_backups(
        &dir,
        Some(BackupKind::Migration),
        KEEP_MIGRATION_BACKUPS,
        false,
    )?;
    Ok(())
}

/// The backups in `dir` (named as loops names them), of `kind` or of every kind, that
/// are not among the newest `keep` of their kind: removed unless `dry_run`. Returns
/// them, oldest first.
pub fn prune_backups(
    dir: &Path,
    kind: Option<BackupKind>,
    keep: usize,
    dry_run: bool,
) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(format!("cannot read {}", dir.display()))(e)),
    };
    let mut found: Vec<(BackupKind, String, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(format!("cannot read {}", dir.display())))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((k, time)) = BackupKind::of_file_name(name) else {
            continue;
        };
        if kind.is_some_and(|want| want != k) || !entry.path().is_file() {
            continue;
        }
        found.push((k, time.to_owned(), entry.path()));
    }
    // Newest first within each kind.
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.2.cmp(&a.2)));
    let mut seen: std::collections::HashMap<BackupKind, usize> = Default::default();
    let mut removed = Vec::new();
    for (k, _, path) in found {
        let n = seen.entry(k).or_default();
        *n += 1;
        if *n <= keep {
            continue;
        }
        if !dry_run {
            std::fs::remove_file(&path).map_err(io(format!("cannot remove {}", path.display())))?;
        }
        removed.push(path);
    }
    removed.reverse();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used)]
    fn backup_names_read_back() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-05T09:04:05.123Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let cases = [
            (BackupKind::Manual, "loops-manual-20261205T090405.123Z.db"),
            (
                BackupKind::BeforeRestore,
                "loops-before-restore-20261205T090405.123Z.db",
            ),
            (BackupKind::Migration, "loops-18-20261205T090405.123Z.db"),
        ];
        for (kind, name) in cases {
            assert_eq!(kind.file_name(18, at), name);
            assert_eq!(
                BackupKind::of_file_name(name),
                Some((kind, "20261205T090405.123Z"))
            );
        }
        assert_eq!(BackupKind::of_file_name("loops.db"), None);
        assert_eq!(
            BackupKind::of_file_name("loops-x-20261205T090405.123Z.db"),
            None
        );
        assert_eq!(BackupKind::of_file_name("loops-manual-yesterday.db"), None);
    }
}
