//! Moving a store: `loops store copy --to postgres://…` takes everything the data
//! dir's SQLite store holds, `--to sqlite:PATH` everything a PostgreSQL store holds
//! back into a SQLite file — read through the `Store` trait, written into the target
//! as it was (ids, instants, history, event numbers), in one transaction there.

use super::{Client, ClientError, Result};
use loops_core::RunStatus;
use loops_postgres::PgStore;
use loops_sqlite::SqliteStore;
use loops_store::{CopySet, RunFilter};
use serde::Serialize;
use std::path::Path;

/// How many of each thing a copy wrote (or, on a dry run, would write).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyCounts {
    pub loops: usize,
    pub workflows: usize,
    pub runs: usize,
    pub workflow_runs: usize,
    pub step_runs: usize,
    pub workflow_events: usize,
    pub deliveries: usize,
    pub events: usize,
}

/// What [`Client::copy_store_to`] did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyReport {
    /// The source (the SQLite file).
    pub from: String,
    /// The target, without its password.
    pub to: String,
    pub dry_run: bool,
    /// The target held data that `--force` replaced.
    pub replaced: bool,
    /// Schema migrations applied to the target (on a dry run: that the copy would
    /// apply; a dry run applies none).
    pub target_migrations: usize,
    pub counts: CopyCounts,
}

impl Client {
    /// Copies everything in this client's SQLite store — loops, workflow specs, runs,
    /// workflow runs with their steps and logs, notification deliveries, the event log
    /// and the notification default — into the PostgreSQL database `url` names (its
    /// schema created or migrated first), keeping every id, instant and event number.
    /// Refuses a target that holds data unless `force` (which replaces it, refused
    /// while a runner is live there), a source with runs in flight (stop the daemon
    /// first), and a source that is not SQLite. `dry_run` reads and counts only: the
    /// target is inspected on a read-only session, without even its migrations
    /// ([`PgStore::inspect`]).
    ///
    /// `url` may instead be `sqlite:PATH`: then this client's store must be PostgreSQL,
    /// and the copy goes into the SQLite file PATH (created 0600 with the current
    /// schema when missing) — see [`Client::copy_store_to_sqlite`].
    pub fn copy_store_to(&self, url: &str, force: bool, dry_run: bool) -> Result<CopyReport> {
        if let Some(path) = url.strip_prefix("sqlite:") {
            return self.copy_store_to_sqlite(Path::new(path), force, dry_run);
        }
        if self.sqlite.is_none() {
            return Err(ClientError::Invalid(format!(
                "store copy reads a SQLite store; this one is {}",
                self.backend.kind()
            )));
        }
        if !loops_postgres::is_postgres_url(url) {
            return Err(ClientError::Invalid(format!(
                "--to {:?}: expected a postgres:// URL",
                loops_postgres::redact_url(url)
            )));
        }
        let to = loops_postgres::redact_url(url);
        let refuse = |replaced: bool| {
            if replaced && !force {
                return Err(ClientError::Refused(format!(
                    "{to} is not empty (loops, specs, runs or events): copy into an empty \
                     database, or pass --force to replace what it holds"
                )));
            }
            Ok(())
        };
        self.copy_into(to.clone(), dry_run, |set| {
            if dry_run {
                let target = PgStore::inspect(url)?;
                refuse(target.holds_data)?;
                Ok((false, target.migrations_pending()))
            } else {
                let target = PgStore::open(url)?;
                let replaced = target.holds_data()?;
                refuse(replaced)?;
                target.copy_in(set, force)?;
                Ok((replaced, target.migrations_applied()))
            }
        })
    }

    /// Copies everything this client's PostgreSQL store holds into the SQLite file
    /// `path` (created, 0600, with the current schema, when missing), keeping every id,
    /// instant and event number, in one transaction there
    /// ([`SqliteStore::copy_in`]). Refused as the copy to PostgreSQL is: runs in flight
    /// in the source (stop its runners first), a target that holds data unless `force`
    /// (itself refused with runs in flight there). `dry_run` reads and counts only; a
    /// missing target is not created.
    pub fn copy_store_to_sqlite(
        &self,
        path: &Path,
        force: bool,
        dry_run: bool,
    ) -> Result<CopyReport> {
        if self.postgres.is_none() {
            return Err(ClientError::Invalid(format!(
                "--to sqlite:{}: copying into SQLite reads a PostgreSQL store (--store \
                 postgres://…); a SQLite store is copied with `loops backup`",
                path.display()
            )));
        }
        if path.as_os_str().is_empty() {
            return Err(ClientError::Invalid(
                "--to sqlite:PATH: give the file to copy into".to_owned(),
            ));
        }
        let refuse = |replaced: bool| {
            if replaced && !force {
                return Err(ClientError::Refused(format!(
                    "{} is not empty (loops, specs, runs or events): copy into a new file, or \
                     pass --force to replace what it holds",
                    path.display()
                )));
            }
            Ok(())
        };
        let to = format!("sqlite:{}", path.display());
        self.copy_into(to, dry_run, |set| {
            let exists = std::fs::metadata(path).is_ok_and(|m| m.len() > 0);
            if dry_run {
                let replaced = if exists {
                    SqliteStore::open_read_only(path)?.holds_data()?
                } else {
                    false
                };
                refuse(replaced)?;
                Ok((false, 0))
            } else {
                let target = SqliteStore::open(path)?;
                let replaced = target.holds_data()?;
                refuse(replaced)?;
                target.copy_in(&set, force)?;
                let migrations = if exists {
                    0
                } else {
                    usize::try_from(loops_sqlite::SCHEMA_VERSION).unwrap_or(0)
                };
                Ok((replaced, migrations))
            }
        })
    }

    /// The steps every copy shares: this store's contents read (refused while runs are
    /// in flight) and counted, handed to `write` — which says whether the target held
    /// data it replaced and how many migrations it applied — then reported as a copy
    /// to `to`.
    fn copy_into(
        &self,
        to: String,
        dry_run: bool,
        write: impl FnOnce(CopySet) -> Result<(bool, usize)>,
    ) -> Result<CopyReport> {
        let set = self.copy_set()?;
        refuse_runs_in_flight(&set)?;
        let counts = counts_of(&set);
        let (replaced, target_migrations) = write(set)?;
        Ok(CopyReport {
            from: self.backend.location(),
            to,
            dry_run,
            replaced,
            target_migrations,
            counts,
        })
    }

    /// Everything the store holds, read through the trait.
    fn copy_set(&self) -> Result<CopySet> {
        let store = self.store.as_ref();
        let mut loops = Vec::new();
        for row in store.loop_rows(None)? {
            match row {
                Ok(lp) => loops.push(lp),
                Err(bad) => {
                    return Err(ClientError::Refused(format!(
                        "loop {:?} cannot be read ({}); fix or remove it before copying",
                        bad.name, bad.error
                    )))
                }
            }
        }
        let mut runs = store.list_runs(&RunFilter::default())?;
        // Oldest first, so the target's insertion order is the source's.
        runs.reverse();
        let workflows = store.list_workflows(None)?;
        let mut workflow_runs = store.list_workflow_runs(None, None)?;
        workflow_runs.reverse();
        let mut step_runs = Vec::new();
        let mut workflow_events = Vec::new();
        for r in &workflow_runs {
            step_runs.extend(store.step_runs(r.id.as_str())?);
            workflow_events.extend(store.workflow_events(r.id.as_str(), None)?);
        }
        let run_ids: Vec<_> = runs.iter().map(|r| r.id.clone()).collect();
        let mut deliveries = Vec::new();
        for chunk in run_ids.chunks(500) {
            deliveries.extend(store.deliveries_of_runs(chunk)?);
        }
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let page = store.events_after(after, 10_000)?;
            let Some(last) = page.last() else {
                break;
            };
            after = last.seq;
            events.extend(page);
        }
        Ok(CopySet {
            loops,
            runs,
            workflows,
            workflow_runs,
            step_runs,
            workflow_events,
            deliveries,
            events,
            notify_default: store.notify_default()?,
        })
    }
}

/// Refuses a source with runs in flight: their outcome would be lost to the copy.
fn refuse_runs_in_flight(set: &CopySet) -> Result<()> {
    if set.runs.iter().any(|r| r.status == RunStatus::Running) {
        return Err(ClientError::Refused(
            "runs are in flight in this store: stop the daemon (`loops daemon stop`) and \
             let them finish before copying"
                .to_owned(),
        ));
    }
    Ok(())
}

fn counts_of(set: &CopySet) -> CopyCounts {
    CopyCounts {
        loops: set.loops.len(),
        workflows: set.workflows.len(),
        runs: set.runs.len(),
        workflow_runs: set.workflow_runs.len(),
        step_runs: set.step_runs.len(),
        workflow_events: set.workflow_events.len(),
        deliveries: set.deliveries.len(),
        events: set.events.len(),
    }
}
