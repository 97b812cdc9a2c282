//! Defining loops: create, edit, rename, the listings, and the one check every
//! definition passes (name, target, schedule, policy, labels).

use super::*;

/// What [`Client::check_definition`] hands on: the labels sorted and each once, and
/// the first slot of a new (or changed) schedule.
struct CheckedDefinition {
    labels: Vec<String>,
    first_slot: Option<Instant>,
}

impl Client {
    /// Validates and stores a new loop, computing its first slot from `now`.
    ///
    /// Refused (nothing written): an invalid name or target, a name that could be
    /// mistaken for an id ([`Client::check_new_name`]), a workflow target naming no
    /// active workflow, a schedule that produces no slot. A cron zone is stored in its
    /// canonical IANA spelling (`europe/berlin` → `Europe/Berlin`).
    pub fn create(&self, mut def: LoopDefinition, now: Instant) -> Result<Loop> {
        let checked = self.check_definition(&mut def, None, now)?;
        let new = def.into_new_loop(checked.labels, checked.first_slot);
        let name = new.name.clone();
        let created = self.store.create_loop(new, now).map_err(|e| match e {
            StoreError::DuplicateName(_) => self.name_taken(&name, e),
            e => ClientError::Store(e),
        })?;
        crate::wake::poke(&self.data_dir);
        Ok(created)
    }

    /// A duplicate name, with the way out when the loop holding it is archived.
    pub(super) fn name_taken(&self, name: &str, e: StoreError) -> ClientError {
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

    /// The active workflow a workflow target names (targets name workflows by name).
    fn active_workflow(&self, name: &str) -> Result<Workflow> {
        self.store
            .get_active_workflow(name)?
            .ok_or_else(|| ClientError::Invalid(format!("no active workflow named {name:?}")))
    }

    /// All loops, by name, optionally of one status.
    pub fn list(&self, status: Option<LoopStatus>) -> Result<Vec<Loop>> {
        let mut loops = self.store.list_loops(status)?;
        self.mark_held(&mut loops, chrono::Utc::now())?;
        Ok(loops)
    }

    /// Loops matching `filter` (by default every loop but archived ones), by name;
    /// labels are matched through the store's label index. Fails on a row that cannot
    /// be read, as [`Client::list`] does.
    pub fn list_matching(&self, filter: &LoopFilter) -> Result<Vec<Loop>> {
        valid_labels(filter)?;
        let mut loops = self
            .store
            .loop_rows_matching(filter)?
            .into_iter()
            .map(|row| row.map_err(|u| ClientError::Store(u.into_error())))
            .collect::<Result<Vec<_>>>()?;
        self.mark_held(&mut loops, chrono::Utc::now())?;
        Ok(loops)
    }

    /// [`Client::list_matching`]'s loops handed to `each` one at a time, in its order
    /// and marked as it marks them, from one read of the store, until `each` breaks: a
    /// listing of 100,000 loops need not hold them all (BENCHMARKS.md §25). Fails, as
    /// [`Client::list_matching`] does, on a row that cannot be read — after handing
    /// out the loops before it.
    pub fn each_matching(
        &self,
        filter: &LoopFilter,
        now: Instant,
        mut each: impl FnMut(Loop) -> std::ops::ControlFlow<()>,
    ) -> Result<()> {
        valid_labels(filter)?;
        let marks = self.marks(now)?;
        let mut unreadable = None;
        self.store.each_loop_row(filter, &mut |row| match row {
            Ok(mut lp) => {
                marks.apply(&mut lp);
                each(lp)
            }
            Err(bad) => {
                unreadable = Some(bad);
                std::ops::ControlFlow::Break(())
            }
        })?;
        match unreadable {
            Some(bad) => Err(ClientError::Store(bad.into_error())),
            None => Ok(()),
        }
    }

    /// How many loops [`Client::list_matching`] lists for `filter` without its paging
    /// (a page's total), counted by the store.
    pub fn count_matching(&self, filter: &LoopFilter) -> Result<usize> {
        valid_labels(filter)?;
        Ok(self.store.count_loops(filter)?)
    }

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
                definition: def.clone().into_new_loop(checked.labels, next_run_at),
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
}

/// The first slot of `schedule` strictly after `now`, phase-aligned to `slot` where the
/// schedule has a phase (fixed-rate intervals, cron).
pub(super) fn next_slot_from(
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

pub(super) fn validate_policy(policy: &Policy) -> std::result::Result<(), ValidationError> {
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

/// Refuses a filter naming a label no loop could carry, before the store is asked.
fn valid_labels(filter: &LoopFilter) -> Result<()> {
    for label in &filter.labels {
        validate::label(label)?;
    }
    Ok(())
}
