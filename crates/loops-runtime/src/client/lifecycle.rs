//! A loop's life after creation: pause, stop, resume, archive, unarchive, remove
//! (with its runs stopped first when forced).

use super::*;

/// What `remove` removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedLoop {
    pub id: loops_core::LoopId,
    pub name: String,
}

impl Client {
    /// Stops scheduling a loop until `resume`; its next slot is kept.
    pub fn pause(&self, key: &str, now: Instant) -> Result<Loop> {
        self.set_status(key, LoopStatus::Paused, now)
    }

    /// Stops a loop for good (until an explicit `resume`).
    pub fn stop(&self, key: &str, now: Instant) -> Result<Loop> {
        self.set_status(key, LoopStatus::Stopped, now)
    }

    fn set_status(&self, key: &str, status: LoopStatus, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        refuse_archived(&lp)?;
        let advance = LoopAdvance {
            status,
            next_run_at: lp.next_run_at,
            retry_scheduled_for: lp.retry_scheduled_for,
        };
        Ok(self
            .store
            .update_loop_schedule(&lp.id, &advance, now, None)?)
    }

    /// Re-activates a loop. A next slot in the past is kept for `catchUp` `latest` and
    /// `all` (the missed work runs, coalesced or bounded), and recomputed from `now` for
    /// `none`.
    pub fn resume(&self, key: &str, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        refuse_archived(&lp)?;
        if schedule::is_expired(&lp, now) {
            return Err(ClientError::Invalid(format!(
                "loop {:?} expired at {}; it cannot be resumed",
                lp.name,
                lp.expires_at
                    .map(|t| loops_core::format_instant(&t))
                    .unwrap_or_default()
            )));
        }
        let next = match lp.next_run_at {
            Some(next) if next > now => Some(next),
            Some(next) => match lp.catch_up {
                loops_core::CatchUp::None => next_slot_from(&lp.schedule, next, now)?,
                _ => Some(next),
            },
            None => match &lp.schedule {
                Schedule::Once { .. } => {
                    return Err(ClientError::Invalid(format!(
                        "loop {:?} has no slot left (its one run is done); use run-now or create a new loop",
                        lp.name
                    )))
                }
                other => schedule::initial_next_run(other, now)?,
            },
        };
        let advance = LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: next,
            retry_scheduled_for: lp.retry_scheduled_for,
        };
        let resumed = self
            .store
            .update_loop_schedule(&lp.id, &advance, now, None)?;
        crate::wake::poke(&self.data_dir);
        Ok(resumed)
    }

    /// Deletes a loop and its run history. A loop with a run in flight is refused
    /// unless `force`, which first stops its runs (process groups terminated; a
    /// workflow run cancelled) and waits for them to end, so removing a loop never
    /// leaves one of its processes running unsupervised.
    ///
    /// A loop whose stored row can no longer be read is removed by its exact id or
    /// name (it cannot be resolved otherwise), so a bad row never becomes a trap.
    pub fn remove(&self, key: &str, force: bool) -> Result<RemovedLoop> {
        let lp = match self.get(key) {
            Ok(lp) => lp,
            Err(ClientError::Store(StoreError::Decode(_))) => return self.remove_unreadable(key),
            Err(e) => return Err(e),
        };
        let running = self.store.running_runs(Some(&lp.id))?;
        if !running.is_empty() {
            if !force {
                return Err(ClientError::Refused(format!(
                    "loop {:?} has {} run(s) in flight ({}); stop them first, or pass --force to terminate them and remove the loop",
                    lp.name,
                    running.len(),
                    running
                        .iter()
                        .map(describe_running)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            self.stop_runs(&lp, &running)?;
        }
        self.store.remove_loop(&lp.id)?;
        Ok(RemovedLoop {
            id: lp.id,
            name: lp.name,
        })
    }

    fn remove_unreadable(&self, key: &str) -> Result<RemovedLoop> {
        let unreadable = self
            .store
            .loop_rows(None)?
            .into_iter()
            .filter_map(std::result::Result::err)
            .find(|u| u.id.as_str() == key || u.name == key)
            .ok_or_else(|| ClientError::NotFound(key.to_owned()))?;
        if !self.store.running_runs(Some(&unreadable.id))?.is_empty() {
            return Err(ClientError::Refused(format!(
                "loop {:?} cannot be read and has runs in flight; stop the daemon first",
                unreadable.name
            )));
        }
        self.store.remove_loop(&unreadable.id)?;
        Ok(RemovedLoop {
            id: unreadable.id,
            name: unreadable.name,
        })
    }

    /// Terminates the runs in flight of `lp` and waits until they have ended.
    fn stop_runs(&self, lp: &Loop, running: &[Run]) -> Result<()> {
        let host = crate::process::hostname();
        for run in running {
            let elsewhere = run
                .claimed_by
                .as_deref()
                .and_then(crate::engine::parse_runner_id)
                .filter(|(h, _, _)| *h != host);
            if let Some((h, _, _)) = elsewhere {
                return Err(ClientError::Refused(format!(
                    "run {} of loop {:?} runs on host {h}; stop it there",
                    run.id, lp.name
                )));
            }
        }
        let now = chrono::Utc::now();
        // Every process of these runs: a run's own, and the steps of a workflow target's
        // run (cancelled too, so its runner stops starting steps).
        let mut processes: Vec<(u32, Option<u64>)> = Vec::new();
        for run in running {
            processes.extend(run.pid.map(|pid| (pid, run.pid_start_time)));
            for wf in self.store.list_workflow_runs(None, None)? {
                if wf.loop_run_id.as_ref() != Some(&run.id)
                    || wf.status != loops_core::WorkflowRunStatus::Running
                {
                    continue;
                }
                self.store
                    .request_workflow_cancel(wf.id.as_str(), "loop removed", now)?;
                for step in self.store.step_runs(wf.id.as_str())? {
                    if step.status == loops_core::StepStatus::Running {
                        processes.extend(step.pid.map(|pid| (pid, step.pid_start_time)));
                    }
                }
            }
        }
        let alive = |list: &[(u32, Option<u64>)]| -> Vec<u32> {
            list.iter()
                .filter(|(pid, start)| crate::process::is_same_process_alive(*pid, *start))
                .map(|(pid, _)| *pid)
                .collect()
        };
        for pid in alive(&processes) {
            let _ = crate::process::signal_group(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let begun = std::time::Instant::now();
        let grace = crate::executor::DEFAULT_KILL_GRACE;
        let mut killed = false;
        let mut gone_at = None;
        loop {
            let live = alive(&processes);
            let elapsed = begun.elapsed();
            if live.is_empty() {
                // Give the runners a moment to record how the runs ended; a row whose
                // runner died is removed with the loop anyway.
                let gone = *gone_at.get_or_insert(elapsed);
                let finalized = self
                    .store
                    .running_runs(Some(&lp.id))?
                    .iter()
                    .all(|r| !running.iter().any(|o| o.id == r.id));
                if finalized || elapsed >= gone + STOP_WAIT {
                    return Ok(());
                }
            } else if !killed && elapsed >= grace {
                for pid in &live {
                    let _ = crate::process::signal_group(*pid, nix::sys::signal::Signal::SIGKILL);
                }
                killed = true;
            } else if elapsed >= grace + STOP_WAIT {
                return Err(ClientError::Refused(format!(
                    "the runs of loop {:?} did not stop (pids {live:?}); nothing was removed",
                    lp.name
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Archives a loop: it is never scheduled (nor run by `run-now`), `list` hides it
    /// (`list --all` / `--status archived` show it), and its runs are kept. A run in
    /// flight finishes and is recorded. The name stays the loop's (so `show`, `runs`
    /// and `unarchive` still find it by name) unless `free_name`, which renames it
    /// `NAME~ID` in the same write so a new loop can take the name (also of a loop
    /// archived before).
    pub fn archive(&self, key: &str, free_name: bool, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        // An archived loop can still give up its name.
        if lp.status == LoopStatus::Archived && !free_name {
            return Err(ClientError::Invalid(format!(
                "loop {:?} is already archived",
                lp.name
            )));
        }
        self.update_guarded(&lp.id, now, |current| {
            let mut update = same_state(current, LoopStatus::Archived);
            if free_name {
                update.definition.name = freed_name(current);
            }
            Ok(update)
        })
    }

    /// Brings an archived loop back as `paused` — nothing runs until `resume`, which
    /// then applies its catch-up policy to the slot it kept.
    pub fn unarchive(&self, key: &str, now: Instant) -> Result<Loop> {
        let lp = self.get(key)?;
        if lp.status != LoopStatus::Archived {
            return Err(ClientError::Invalid(format!(
                "loop {:?} is not archived (it is {})",
                lp.name, lp.status
            )));
        }
        self.update_guarded(&lp.id, now, |current| {
            Ok(same_state(current, LoopStatus::Paused))
        })
    }

    /// Reads the loop, asks `plan` for its update and writes it guarded on the version
    /// read; when the loop moved meanwhile (a daemon claimed a slot), reads it again
    /// and plans again, a few times.
    pub(super) fn update_guarded(
        &self,
        id: &LoopId,
        now: Instant,
        mut plan: impl FnMut(&Loop) -> Result<LoopUpdate>,
    ) -> Result<Loop> {
        for _ in 0..EDIT_ATTEMPTS {
            let current = self
                .store
                .get_loop(id)?
                .ok_or_else(|| ClientError::NotFound(id.to_string()))?;
            let update = plan(&current)?;
            let version = LoopVersion::of(&current);
            let name = update.definition.name.clone();
            let written = self
                .store
                .update_loop_definition(id, &update, &version, now)
                .map_err(|e| match e {
                    StoreError::DuplicateName(_) => self.name_taken(&name, e),
                    e => ClientError::Store(e),
                })?;
            if let Some(updated) = written {
                return Ok(updated);
            }
        }
        Err(ClientError::Refused(format!(
            "loop {id} kept changing while it was being updated; nothing was written, try again"
        )))
    }
}

/// How many times an update is planned again when the loop moved under it.
const EDIT_ATTEMPTS: usize = 5;

/// `lp` as it is, with `status`: archive and unarchive.
fn same_state(lp: &Loop, status: LoopStatus) -> LoopUpdate {
    LoopUpdate {
        definition: loops_core::bundle::new_loop(lp),
        status,
        retry_scheduled_for: lp.retry_scheduled_for,
    }
}

/// `NAME~ID` (the name shortened so the whole stays within the 200-byte name limit):
/// unique, never shaped like an id, and still telling which loop it was.
fn freed_name(lp: &Loop) -> String {
    const MAX_NAME: usize = 200;
    let room = MAX_NAME - 1 - lp.id.as_str().len();
    let mut end = lp.name.len().min(room);
    while !lp.name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}~{}", &lp.name[..end], lp.id)
}

/// Pause, resume, stop and run-now leave an archived loop alone: `unarchive` first.
pub(super) fn refuse_archived(lp: &Loop) -> Result<()> {
    if lp.status == LoopStatus::Archived {
        return Err(ClientError::Invalid(format!(
            "loop {:?} is archived; `loops unarchive {}` brings it back (paused)",
            lp.name, lp.id
        )));
    }
    Ok(())
}

/// How long `remove --force` waits, after SIGTERM plus the kill grace, for a run's
/// runner to record its end.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn describe_running(run: &Run) -> String {
    match run.pid {
        Some(pid) => format!("run {} pid {pid}", run.id),
        None => format!("run {}", run.id),
    }
}
