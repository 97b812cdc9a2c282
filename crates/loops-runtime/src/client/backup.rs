//! Backups (issue #23): `loops backup` writes a consistent copy of the live SQLite
//! store, `loops restore` swaps one in while nothing uses the store, `prune
//! --keep-backups` thins `<data dir>/backups`. The copying lives in
//! [`loops_sqlite::backup`]; this layer picks the default path, refuses what the
//! backend cannot do (PostgreSQL has `pg_dump`), and checks the daemon lease.

use super::{Client, ClientError, Result};
use crate::daemon_view::DaemonState;
use loops_sqlite::backup::{self, BackupError, BackupKind};
use loops_sqlite::{BackupInfo, Restored};
use std::path::{Path, PathBuf};

impl From<BackupError> for ClientError {
    fn from(e: BackupError) -> Self {
        match e {
            // Bad input: the file to restore.
            BackupError::BadFile { .. } => ClientError::Invalid(e.to_string()),
            BackupError::Exists(_) | BackupError::InUse(_) => ClientError::Refused(e.to_string()),
            BackupError::Store(e) => ClientError::Store(e),
            // A file of the user's choosing (FILE, its directory): one line, exit 1.
            BackupError::Io { .. } => ClientError::Refused(e.to_string()),
            other => ClientError::Refused(other.to_string()),
        }
    }
}

/// The line `backup` and `restore` answer a PostgreSQL store with.
fn postgres_refusal(verb: &str, tool: &str) -> ClientError {
    let example = match tool {
        "pg_dump" => "`pg_dump -Fc URL > loops.dump`",
        _ => "`pg_restore --clean -d URL loops.dump`",
    };
    ClientError::Refused(format!(
        "{verb} works on the embedded SQLite store; this store is PostgreSQL: use {tool} \
         (e.g. {example})"
    ))
}

/// Refuses a `store` naming a database server: PostgreSQL with `tool`'s name.
fn refuse_server(store: Option<&str>, verb: &str, tool: &str) -> Result<()> {
    if let Some(url) = store
        .map(str::trim)
        .filter(|_| super::store_names_a_server(store))
    {
        if loops_postgres::is_postgres_url(url) {
            return Err(postgres_refusal(verb, tool));
        }
        return Err(ClientError::Invalid(format!(
            "--store {:?}: expected a postgres:// URL or `sqlite`",
            loops_postgres::redact_url(url)
        )));
    }
    Ok(())
}

impl Client {
    /// Writes a consistent copy of this client's SQLite store to `target`, or to
    /// `<data dir>/backups/loops-manual-<UTC time>.db` (see
    /// [`SqliteStore::backup_to`](loops_sqlite::SqliteStore::backup_to)): safe while a
    /// daemon writes, 0600, refused when `target` exists unless `force`. Refused on a
    /// PostgreSQL store (`pg_dump` backs that up).
    pub fn backup(&self, target: Option<&Path>, force: bool) -> Result<BackupInfo> {
        if self.postgres.is_some() {
            return Err(postgres_refusal("backup", "pg_dump"));
        }
        let Some(sqlite) = &self.sqlite else {
            return Err(ClientError::Invalid(format!(
                "backup copies a SQLite store; this one is {}",
                self.backend.kind()
            )));
        };
        let target = match target {
            Some(path) => path.to_path_buf(),
            None => {
                let db = self.data_dir.join(loops_store::DB_FILE);
                backup::backups_dir(&db)?.join(BackupKind::Manual.file_name(0, chrono::Utc::now()))
            }
        };
        Ok(sqlite.backup_to(&target, force)?)
    }

    /// [`Client::backup`] of the store `store` names in `data_dir` (as for
    /// [`Client::open_store`]), opened for reading: a PostgreSQL store is refused
    /// before it is connected to.
    pub fn backup_store(
        data_dir: &Path,
        store: Option<&str>,
        target: Option<&Path>,
        force: bool,
    ) -> Result<BackupInfo> {
        refuse_server(store, "backup", "pg_dump")?;
        Self::open_for_reading(data_dir, None)?.backup(target, force)
    }

    /// Replaces the SQLite store in `data_dir` with the backup `file` (see
    /// [`loops_sqlite::backup::restore`]), keeping the store as it was in
    /// `<data dir>/backups/loops-before-restore-<time>.db`.
    ///
    /// Refused — nothing changed — on a PostgreSQL store (`store` names one:
    /// `pg_restore` restores that), while the store's daemon runs or is stalled (its
    /// lease, as `daemon status` judges it), and while any other process has the store
    /// open (`loops serve`, another command). Refused too while runs are in flight:
    /// a supervisor left by `daemon stop` still holds runs (the restored store would
    /// not know them, and the next daemon would end them unrecorded), or the store has
    /// runs whose end is not recorded yet (a killed daemon's: the next daemon records
    /// them). A `file` that is not a loops store this build can use (damaged, foreign,
    /// newer schema) is [`ClientError::Invalid`].
    pub fn restore(data_dir: &Path, store: Option<&str>, file: &Path) -> Result<Restored> {
        refuse_server(store, "restore", "pg_restore")?;
        if !file.is_file() {
            return Err(ClientError::Invalid(format!(
                "{}: no such file",
                file.display()
            )));
        }
        let db = {
            let client = Self::open_for_reading(data_dir, None)?;
            let view = client.daemon_view()?;
            if let (DaemonState::Running | DaemonState::Stalled, Some(h)) =
                (view.state, &view.holder)
            {
                return Err(ClientError::Refused(format!(
                    "the daemon (pid {} on {}) uses this store: stop it first (`loops daemon \
                     stop`), then restore",
                    h.pid, h.host
                )));
            }
            let supervisors =
                crate::supervisor::live_pids(&crate::supervisor::dir_in(&client.data_dir));
            if !supervisors.is_empty() {
                let pids: Vec<String> = supervisors.iter().map(u32::to_string).collect();
                return Err(ClientError::Refused(format!(
                    "runs are still in flight under {} left by `loops daemon stop` (pid {}): \
                     start the daemon (`loops daemon start`, it takes them over), then \
                     `loops daemon stop --terminate-runs` to end and record them (or wait \
                     until `loops runs --status running` is empty and stop it), then restore",
                    if pids.len() == 1 {
                        "a supervisor"
                    } else {
                        "supervisors"
                    },
                    pids.join(", ")
                )));
            }
            let running = client.running_runs()?;
            if !running.is_empty() {
                return Err(ClientError::Refused(format!(
                    "{} {} in flight in this store, {} end not recorded yet: start the daemon \
                     (`loops daemon start`) to record {}, stop it, then restore",
                    running.len(),
                    if running.len() == 1 {
                        "run is"
                    } else {
                        "runs are"
                    },
                    if running.len() == 1 { "its" } else { "their" },
                    if running.len() == 1 { "it" } else { "them" },
                )));
            }
            client.data_dir.join(loops_store::DB_FILE)
            // The client's connection closes here: restore needs the only one.
        };
        Ok(backup::restore(&db, file, chrono::Utc::now())?)
    }

    /// Removes all but the newest `keep` backups of each kind (manual, before-restore,
    /// migration) in `<data dir>/backups`; only lists them when `dry_run`. Returns
    /// them, oldest first.
    pub fn prune_backups(&self, keep: usize, dry_run: bool) -> Result<Vec<PathBuf>> {
        let dir = self.data_dir.join(backup::BACKUPS_DIR);
        Ok(backup::prune_backups(&dir, None, keep, dry_run)?)
    }
}
