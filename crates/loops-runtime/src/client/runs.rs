//! Reading runs: of a loop, filtered (`runs --status … --since …`), in flight; and
//! pruning the finished ones.

use super::*;

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

/// What [`Client::prune`] deleted (or, on a dry run, would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub runs: usize,
    pub workflow_runs: usize,
}

impl Client {
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

    /// Deletes finished runs and workflow runs by `policy` (running rows are never
    /// pruned); with `dry_run`, only counts them.
    pub fn prune(&self, policy: &PrunePolicy, dry_run: bool) -> Result<Pruned> {
        Ok(Pruned {
            runs: self.store.prune_runs(policy, dry_run)?,
            workflow_runs: self.store.prune_workflow_runs(policy, dry_run)?,
        })
    }
}
