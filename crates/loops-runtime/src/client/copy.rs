//! Moving a store (`loops store copy --to postgres://…`): everything the data dir's
//! SQLite store holds, read through the `Store` trait, written into a PostgreSQL
//! database as it was, in one transaction there.

use super::{Client, ClientError, Result};
use loops_core::RunStatus;
use loops_postgres::{CopySet, PgStore};
use loops_store::RunFilter;
use serde::Serialize;

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
    pub fn copy_store_to(&self, url: &str, force: bool, dry_run: bool) -> Result<CopyReport> {
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
        let set = self.copy_set()?;
        if set.runs.iter().any(|r| r.status == RunStatus::Running) {
            return Err(ClientError::Refused(
                "runs are in flight in this store: stop the daemon (`loops daemon stop`) and \
                 let them finish before copying"
                    .to_owned(),
            ));
        }
        let counts = CopyCounts {
            loops: set.loops.len(),
            workflows: set.workflows.len(),
            runs: set.runs.len(),
            workflow_runs: set.workflow_runs.len(),
            step_runs: set.step_runs.len(),
            workflow_events: set.workflow_events.len(),
            deliveries: set.deliveries.len(),
            events: set.events.len(),
        };
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
        let (replaced, target_migrations) = if dry_run {
            let target = PgStore::inspect(url)?;
            refuse(target.holds_data)?;
            (false, target.migrations_pending())
        } else {
            let target = PgStore::open(url)?;
            let replaced = target.holds_data()?;
            refuse(replaced)?;
            target.copy_in(set, force)?;
            (replaced, target.migrations_applied())
        };
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
