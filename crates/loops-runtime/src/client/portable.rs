//! `loops export` and `loops import`: a store's loops and workflow specs as a bundle
//! ([`loops_core::bundle`]), and importing one — or another scheduler's store, via
//! [`Incoming`] — as a preview or, with `apply`, in one transaction
//! ([`loops_store::Store::import`]).

use super::{next_slot_from, validate_policy, Client, ClientError, RecordKind, Result};
use loops_core::bundle::{
    self, Action, Existing, Incoming, IncomingLoop, OnConflict, Planned, Redaction,
};
use loops_core::schedule;
use loops_core::validate;
use loops_core::workflow::Workflow;
use loops_core::{Instant, Loop, LoopStatus, Schedule, Target, WorkflowStatus};
use loops_store::{ImportBatch, ImportLoop, LoopAdvance};
use std::collections::HashSet;

/// How to import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOptions {
    pub on_conflict: OnConflict,
    /// Write (in one transaction); otherwise only plan.
    pub apply: bool,
    /// Import loops and steps whose secrets the bundle left out without them (the
    /// variables are not set); otherwise such an import is refused.
    pub drop_redacted: bool,
    /// Import loops that require runner labels (`runsOn`) without them: needed on a
    /// store without runners (SQLite), where such an import is refused otherwise.
    pub drop_runner_labels: bool,
    /// Import every loop paused (e.g. while the old machine still runs them).
    pub paused: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            on_conflict: OnConflict::Fail,
            apply: false,
            drop_redacted: false,
            drop_runner_labels: false,
            paused: false,
        }
    }
}

/// One loop of an import report.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportedLoop {
    #[serde(flatten)]
    pub planned: Planned,
    /// The status and next slot it gets here.
    pub status: LoopStatus,
    #[serde(with = "loops_core::timefmt::option")]
    pub next_run_at: Option<Instant>,
    /// History runs it brings.
    pub runs: usize,
    /// Its id here, once applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<loops_core::LoopId>,
}

/// The runner labels (`runsOn`) one imported loop requires, named as it is stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerLabels {
    #[serde(rename = "loop")]
    pub loop_name: String,
    pub runs_on: Vec<String>,
}

impl std::fmt::Display for RunnerLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "loop {:?} on {}", self.loop_name, self.runs_on.join(","))
    }
}

/// What [`Client::import`] planned (and, when applied, wrote).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    pub applied: bool,
    pub on_conflict: OnConflict,
    #[serde(with = "loops_core::timefmt::option")]
    pub exported_at: Option<Instant>,
    pub workflows: Vec<Planned>,
    pub loops: Vec<ImportedLoop>,
    /// Secrets the bundle left out, of the entries that would be imported.
    pub needs_value: Vec<Redaction>,
    /// What could not be carried over (e.g. OpenLoops fields), one line each.
    pub not_mapped: Vec<String>,
    /// Runner labels of the loops that would be imported which this import does not
    /// keep: the store has no runners (SQLite; refused unless `drop_runner_labels`),
    /// or `drop_runner_labels` drops them.
    pub runner_labels: Vec<RunnerLabels>,
    /// Whether `drop_runner_labels` was given: [`ImportReport::runner_labels`] are
    /// dropped rather than refused.
    pub runner_labels_dropped: bool,
    /// History runs written (or that would be).
    pub runs: usize,
}

impl ImportReport {
    /// Why applying would be refused: conflicts, invalid entries, unfilled secrets
    /// (unless `drop_redacted`), runner labels the store has no runners for (unless
    /// the import drops them).
    pub fn refusals(&self, drop_redacted: bool) -> Vec<String> {
        let line = |kind: &str, p: &Planned| {
            matches!(p.action, Action::Conflict | Action::Invalid).then(|| {
                format!(
                    "{kind} {:?}: {}",
                    p.name,
                    p.reason.as_deref().unwrap_or("conflict")
                )
            })
        };
        let mut out: Vec<String> = self
            .workflows
            .iter()
            .filter_map(|p| line("workflow", p))
            .chain(self.loops.iter().filter_map(|l| line("loop", &l.planned)))
            .collect();
        if !drop_redacted && !self.needs_value.is_empty() {
            let named: Vec<String> = self.needs_value.iter().map(ToString::to_string).collect();
            out.push(format!(
                "{} secret(s) left out of the bundle need a value ({}): fill them in, or pass --drop-redacted to import without them",
                named.len(),
                named.join(", ")
            ));
        }
        if !self.runner_labels_dropped && !self.runner_labels.is_empty() {
            let named: Vec<String> = self.runner_labels.iter().map(ToString::to_string).collect();
            out.push(format!(
                "{} loop(s) need runner labels, which a store without runners (SQLite) cannot honour ({}): import into a PostgreSQL store (--store postgres://…), or pass --drop-runner-labels to import them without their runner labels",
                named.len(),
                named.join(", ")
            ));
        }
        out
    }
}

impl Client {
    /// The bundle of the loops carrying every one of `labels` (all loops when empty;
    /// archived ones never)
    /// and of the workflow specs: every active spec when no label narrows the export,
    /// else the ones the exported loops run. Env values and notification URLs are
    /// left out (and named) unless `include_secrets`.
    pub fn export(
        &self,
        labels: &[String],
        include_secrets: bool,
        now: Instant,
    ) -> Result<bundle::Bundle> {
        for label in labels {
            validate::label(label)?;
        }
        let loops: Vec<Loop> = self
            .store
            .list_loops(None)?
            .into_iter()
            // Archived loops are put away: not part of a setup to move.
            .filter(|lp| lp.status != LoopStatus::Archived && has_labels(lp, labels))
            .collect();
        let active = self.store.list_workflows(Some(WorkflowStatus::Active))?;
        let used: HashSet<&str> = loops
            .iter()
            .filter_map(|lp| match &lp.target {
                Target::Workflow(w) => Some(w.workflow.as_str()),
                _ => None,
            })
            .collect();
        let specs: Vec<_> = active
            .iter()
            .filter(|w| labels.is_empty() || used.contains(w.name.as_str()))
            .map(|w| w.spec.clone())
            .collect();
        bundle::export(&loops, &specs, include_secrets, now)
            .map_err(|e| ClientError::Invalid(e.to_string()))
    }

    /// Imports a bundle's text (see [`loops_core::bundle`]): a plan of what would be
    /// created, renamed, skipped or conflict — and, with `opts.apply`, all of it in one
    /// transaction, or nothing (an invalid entry, a conflict under `fail`, a secret left
    /// out without `drop_redacted`, a loop requiring runner labels on a store without
    /// runners without `drop_runner_labels` refuse the whole import).
    pub fn import_bundle(
        &self,
        text: &str,
        opts: ImportOptions,
        now: Instant,
    ) -> Result<ImportReport> {
        let incoming = bundle::parse(text).map_err(|e| ClientError::Invalid(e.to_string()))?;
        self.import(incoming, opts, now)
    }

    /// Imports an OpenLoops 0.3 database, opened read-only (see
    /// [`loops_core::openloops`]): its loops and active workflow specs and, with
    /// `with_history`, the finished runs of those loops; what could not be carried over
    /// is listed in [`ImportReport::not_mapped`]. A cron schedule without a zone gets
    /// `local_zone`. Planned and applied as [`Client::import`].
    pub fn import_openloops(
        &self,
        path: &std::path::Path,
        with_history: bool,
        local_zone: &str,
        opts: ImportOptions,
        now: Instant,
    ) -> Result<ImportReport> {
        let tables = loops_sqlite::openloops::read_openloops(path, with_history)?;
        let incoming = loops_core::openloops::map(&tables, local_zone);
        self.import(incoming, opts, now)
    }

    /// Plans (and with `opts.apply` writes) an import of `incoming`. Each loop is
    /// checked as `create` checks one; its next slot is kept when it lies ahead, and
    /// otherwise follows its catch-up policy as `resume` does.
    pub fn import(
        &self,
        incoming: Incoming,
        opts: ImportOptions,
        now: Instant,
    ) -> Result<ImportReport> {
        let existing = Existing {
            loop_names: self
                .store
                .loop_rows(None)?
                .into_iter()
                .map(|row| match row {
                    Ok(lp) => lp.name,
                    Err(bad) => bad.name,
                })
                .collect(),
            workflows: self
                .store
                .list_workflows(Some(WorkflowStatus::Active))?
                .into_iter()
                .map(|w| (w.name, w.spec))
                .collect(),
        };
        let exported_at = incoming.exported_at;
        let lenient = incoming.lenient;
        let mut not_mapped = incoming.notes.clone();
        let mut plan = bundle::plan(incoming, &existing, opts.on_conflict);
        // Workflows loops may name: the ones here, and the ones this import creates.
        let mut workflows: HashSet<String> = existing.workflows.keys().cloned().collect();
        for (p, w) in &mut plan.workflows {
            if p.writes() {
                if let Err(e) = loops_core::workflow::validate(&w.spec)
                    .map_err(ClientError::from)
                    .and_then(|()| self.check_new_name(RecordKind::Workflow, &w.spec.name))
                {
                    p.action = Action::Invalid;
                    p.reason = Some(e.to_string());
                    if lenient {
                        p.action = Action::Skip;
                        not_mapped.push(format!("workflow {:?}: not imported: {e}", p.name));
                    }
                    continue;
                }
                workflows.insert(w.spec.name.clone());
            }
        }
        let runners = self.store.supports_runners();
        let mut runner_labels = Vec::new();
        let mut loops = Vec::with_capacity(plan.loops.len());
        for (p, l) in &mut plan.loops {
            let (status, next_run_at) = if p.writes() {
                match self.check_imported(l, &workflows, opts.paused, now) {
                    Ok(state) => state,
                    Err(e) => {
                        p.action = Action::Invalid;
                        p.reason = Some(e.to_string());
                        if lenient {
                            p.action = Action::Skip;
                            not_mapped.push(format!("loop {:?}: not imported: {e}", p.name));
                        }
                        (l.definition.status, l.definition.next_run_at)
                    }
                }
            } else {
                (l.definition.status, l.definition.next_run_at)
            };
            l.definition.status = status;
            l.definition.next_run_at = next_run_at;
            // Runner labels this import does not keep: the store cannot honour them,
            // or the import drops them. Dropped, they are not written.
            if p.writes()
                && !l.definition.runs_on.is_empty()
                && (!runners || opts.drop_runner_labels)
            {
                runner_labels.push(RunnerLabels {
                    loop_name: p.stored_name().to_owned(),
                    runs_on: l.definition.runs_on.clone(),
                });
                if opts.drop_runner_labels {
                    l.definition.runs_on.clear();
                }
            }
            loops.push(ImportedLoop {
                planned: p.clone(),
                status,
                next_run_at,
                runs: l.history.len(),
                id: None,
            });
        }
        let mut report = ImportReport {
            applied: false,
            on_conflict: opts.on_conflict,
            exported_at,
            workflows: plan.workflows.iter().map(|(p, _)| p.clone()).collect(),
            needs_value: plan.needs_value(),
            not_mapped,
            runner_labels,
            runner_labels_dropped: opts.drop_runner_labels,
            runs: loops
                .iter()
                .filter(|l| l.planned.writes())
                .map(|l| l.runs)
                .sum(),
            loops,
        };
        if !opts.apply {
            return Ok(report);
        }
        let refusals = report.refusals(opts.drop_redacted);
        if !refusals.is_empty() {
            return Err(ClientError::Invalid(format!(
                "import refused, nothing written: {}",
                refusals.join("; ")
            )));
        }
        let batch = ImportBatch {
            workflows: plan
                .workflows
                .iter()
                .filter(|(p, _)| p.writes())
                .map(|(_, w)| w.spec.clone())
                .collect(),
            loops: plan
                .loops
                .iter()
                .filter(|(p, _)| p.writes())
                .map(|(_, l)| ImportLoop {
                    new: bundle::new_loop(&l.definition),
                    state: LoopAdvance {
                        status: l.definition.status,
                        next_run_at: l.definition.next_run_at,
                        retry_scheduled_for: None,
                    },
                    history: l.history.clone(),
                })
                .collect(),
        };
        let written = self.store.import(&batch, now)?;
        let mut ids = written.loops.into_iter();
        for line in report.loops.iter_mut().filter(|l| l.planned.writes()) {
            line.id = ids.next().map(|lp| lp.id);
        }
        report.runs = written.runs;
        report.applied = true;
        crate::wake::poke(&self.data_dir);
        Ok(report)
    }

    /// Checks an imported loop as `create` checks a new one (normalizing labels and a
    /// cron zone on the way) and returns the status and next slot it gets here.
    fn check_imported(
        &self,
        l: &mut IncomingLoop,
        workflows: &HashSet<String>,
        paused: bool,
        now: Instant,
    ) -> Result<(LoopStatus, Option<Instant>)> {
        let def = &mut l.definition;
        validate::loop_name(&def.name)?;
        let label = format!("loop {:?}", def.name);
        validate::description(def.description.as_deref(), &label)?;
        validate::target(&def.target, &label)?;
        validate_policy(&def.policy())?;
        validate::budgets(&def.ops, &def.target)?;
        validate::jitter(&def.schedule, def.jitter_ms)?;
        def.labels = validate::labels(&def.labels)?;
        def.runs_on = validate::labels(&def.runs_on)?;
        if let Some(notify) = &def.notify {
            validate::notify(notify, &label)?;
        }
        if let Schedule::Cron { timezone, .. } = &mut def.schedule {
            *timezone = loops_core::cron::canonical_timezone(timezone)
                .map_err(schedule::ScheduleError::from)?
                .to_owned();
        }
        if let Target::Workflow(w) = &def.target {
            if !workflows.contains(&w.workflow) {
                return Err(ClientError::Invalid(format!(
                    "no active workflow named {:?} here or in the import",
                    w.workflow
                )));
            }
        }
        self.check_new_name(RecordKind::Loop, &def.name)?;
        let mut status = def.status;
        let next = match def.next_run_at {
            Some(next) if next > now => Some(next),
            Some(next) if status == LoopStatus::Active => match def.catch_up {
                loops_core::CatchUp::None => next_slot_from(&def.schedule, next, now)?,
                _ => Some(next),
            },
            Some(next) => Some(next),
            None if status != LoopStatus::Active => None,
            None => match &def.schedule {
                // Its one slot is done (or never came): nothing left to schedule.
                Schedule::Once { .. } => {
                    status = LoopStatus::Stopped;
                    None
                }
                other => schedule::initial_next_run(other, now)?,
            },
        };
        if paused && status == LoopStatus::Active {
            status = LoopStatus::Paused;
        }
        Ok((status, next))
    }

    /// Active workflows by name (for a report on what an import would use).
    pub fn active_workflows(&self) -> Result<Vec<Workflow>> {
        Ok(self.store.list_workflows(Some(WorkflowStatus::Active))?)
    }
}

/// Whether `lp` carries every one of `labels`.
pub(crate) fn has_labels(lp: &Loop, labels: &[String]) -> bool {
    labels.iter().all(|l| lp.labels.contains(l))
}
