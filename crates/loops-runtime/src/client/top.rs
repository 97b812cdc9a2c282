//! `loops top`'s data: the loops (each with its health and its newest runs' statuses),
//! the runs in flight and the recent failures — read whole once, then kept current
//! from the store's event log ([`Store::events_after`], as `/v1/events` reads it): each
//! [`TopFeed::poll`] reads the events committed since the last one and re-reads only
//! what they name — a loop created or changed (with its run facts), a run started or
//! finished. Nothing else is read again: the health rules that depend only on the time
//! are applied again to the facts already read ([`TopFeed::reassess`]). When the
//! events after the feed's place were pruned, the feed reads everything again.

use super::{Client, Result};
use loops_core::event::{Event, EventKind};
use loops_core::health::{self, Health, RunFacts};
use loops_core::{Instant, Loop, LoopId, LoopStatus, Run, RunId, RunStatus, Target};
use loops_store::{LoopFilter, RunFilter};
use std::collections::{BTreeMap, BTreeSet};

/// How many recent failures the feed keeps (newest first).
pub const RECENT_FAILURES: usize = 50;
/// Events one read of the log returns at most (the rest come with the next poll).
const EVENT_PAGE: usize = 2_000;

/// One loop as `top` shows it.
#[derive(Debug, Clone)]
pub struct TopLoop {
    /// The loop, with its hold and what it waits for filled in.
    pub lp: Loop,
    /// What the store knows of its runs ([`loops_store::Store::run_facts`]): its newest statuses
    /// (`recent`, newest first) are the strip.
    pub facts: RunFacts,
    /// Its verdict, for the loops `loops health` judges (active and parked ones).
    pub health: Option<Health>,
}

/// Everything `top` shows, as of the last poll.
#[derive(Debug, Clone, Default)]
pub struct TopData {
    /// Every loop but archived ones, by id.
    pub loops: BTreeMap<LoopId, TopLoop>,
    /// Runs in flight, by id.
    pub running: BTreeMap<RunId, Run>,
    /// Runs that failed, timed out or were abandoned, newest first (at most
    /// [`RECENT_FAILURES`]); their output trimmed to what an error line quotes.
    pub failures: Vec<Run>,
    /// The number of the newest event applied.
    pub cursor: u64,
}

/// What one [`TopFeed::poll`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Events read.
    pub events: usize,
    /// Loops read again.
    pub loops: usize,
    /// The log no longer held the events after the feed's place: everything was read
    /// again.
    pub reloaded: bool,
}

/// `top`'s data, kept current from the event log.
pub struct TopFeed {
    client: Client,
    data: TopData,
}

impl Client {
    /// Reads everything `top` shows at `now` (see [`TopFeed`]).
    pub fn top(&self, now: Instant) -> Result<TopFeed> {
        let mut feed = TopFeed {
            client: self.clone(),
            data: TopData::default(),
        };
        feed.reload(now)?;
        Ok(feed)
    }
}

impl TopFeed {
    /// What the feed holds.
    pub fn data(&self) -> &TopData {
        &self.data
    }

    /// Reads everything again: the loops with their facts, the runs in flight, the
    /// recent failures. The cursor is taken first, so a change committed while reading
    /// comes again with the next poll (applying an event twice changes nothing).
    pub fn reload(&mut self, now: Instant) -> Result<()> {
        let store = self.client.store();
        let cursor = store.event_bounds()?.latest;
        let loops = self.client.list_matching(&LoopFilter::default())?;
        let mut data = TopData {
            cursor,
            ..TopData::default()
        };
        for top in self.judge(loops, now)? {
            data.loops.insert(top.lp.id.clone(), top);
        }
        for run in store.running_runs(None)? {
            data.running.insert(run.id.clone(), run);
        }
        data.failures = store
            .list_runs(&RunFilter {
                statuses: vec![RunStatus::Failed, RunStatus::TimedOut, RunStatus::Abandoned],
                limit: Some(RECENT_FAILURES),
                ..RunFilter::default()
            })?
            .into_iter()
            .map(trim_output)
            .collect();
        self.data = data;
        Ok(())
    }

    /// Applies the events committed since the last poll: re-reads the loops they name
    /// and the runs that started or ended.
    pub fn poll(&mut self, now: Instant) -> Result<Applied> {
        let store = std::sync::Arc::clone(self.client.store());
        let bounds = store.event_bounds()?;
        let pruned = bounds
            .oldest
            .is_some_and(|oldest| oldest > self.data.cursor.saturating_add(1));
        if bounds.latest < self.data.cursor || pruned {
            // Pruned past our place (or a store started over): read everything again.
            self.reload(now)?;
            return Ok(Applied {
                reloaded: true,
                loops: self.data.loops.len(),
                ..Applied::default()
            });
        }
        let mut applied = Applied::default();
        loop {
            let events = store.events_after(self.data.cursor, EVENT_PAGE)?;
            let full = events.len() == EVENT_PAGE;
            applied.events += events.len();
            applied.loops += self.apply(&events, now)?;
            if !full {
                break;
            }
        }
        Ok(applied)
    }

    /// Applies one batch of events; returns how many loops were read again.
    pub fn apply(&mut self, events: &[Event], now: Instant) -> Result<usize> {
        let store = std::sync::Arc::clone(self.client.store());
        let mut touched: BTreeSet<LoopId> = BTreeSet::new();
        let mut removed: BTreeSet<LoopId> = BTreeSet::new();
        let mut runs: BTreeSet<RunId> = BTreeSet::new();
        let mut finished = false;
        for e in events {
            self.data.cursor = self.data.cursor.max(e.seq);
            let Some(loop_id) = e.body.loop_id.clone() else {
                continue;
            };
            match e.body.kind {
                EventKind::LoopRemoved => {
                    touched.remove(&loop_id);
                    removed.insert(loop_id);
                }
                EventKind::LoopCreated | EventKind::LoopChanged => {
                    removed.remove(&loop_id);
                    touched.insert(loop_id);
                }
                EventKind::RunStarted | EventKind::RunFinished => {
                    finished |= e.body.kind == EventKind::RunFinished;
                    if let Some(run) = &e.body.run_id {
                        runs.insert(run.clone());
                    }
                    if !removed.contains(&loop_id) {
                        touched.insert(loop_id);
                    }
                }
                // A workflow run's steps: its loop's run events say what top shows.
                EventKind::WorkflowEvent => {}
            }
        }
        for id in &removed {
            self.data.loops.remove(id);
            self.data.running.retain(|_, r| &r.loop_id != id);
            self.data.failures.retain(|r| &r.loop_id != id);
        }
        for id in runs {
            match store.get_run(&id)? {
                Some(run) if run.status == RunStatus::Running => {
                    self.data.running.insert(id, run);
                }
                Some(run) => {
                    self.data.running.remove(&id);
                    if run.status.is_failure() && !self.data.failures.iter().any(|f| f.id == id) {
                        let at = sort_key(&run);
                        let place = self
                            .data
                            .failures
                            .iter()
                            .position(|f| sort_key(f) < at)
                            .unwrap_or(self.data.failures.len());
                        self.data.failures.insert(place, trim_output(run));
                        self.data.failures.truncate(RECENT_FAILURES);
                    }
                }
                // Pruned already.
                None => {
                    self.data.running.remove(&id);
                }
            }
        }
        let mut loops = Vec::with_capacity(touched.len());
        for id in &touched {
            match store.get_loop(id)? {
                Some(lp) if lp.status != LoopStatus::Archived => loops.push(lp),
                // Archived or gone: no longer shown.
                _ => {
                    self.data.loops.remove(id);
                }
            }
        }
        let count = loops.len();
        self.client.mark_held(&mut loops, now)?;
        for top in self.judge(loops, now)? {
            self.data.loops.insert(top.lp.id.clone(), top);
        }
        if finished {
            self.mark_holds(now)?;
        }
        Ok(count)
    }

    /// Applies the health rules again at `now` to the facts already read: what changes
    /// with the time alone (a next slot overdue, no success for too long).
    pub fn reassess(&mut self, now: Instant) {
        for top in self.data.loops.values_mut() {
            if top.health.is_some() {
                let waiting = top
                    .health
                    .as_ref()
                    .and_then(|h| h.waiting_for_runner.clone());
                let mut health = health::assess(&top.lp, &top.facts, now);
                health.waiting_for_runner = waiting.or(health.waiting_for_runner);
                top.health = Some(health);
            }
        }
    }

    /// The facts and verdicts of `loops` (few index lookups per loop, one read).
    fn judge(&self, loops: Vec<Loop>, now: Instant) -> Result<Vec<TopLoop>> {
        if loops.is_empty() {
            return Ok(Vec::new());
        }
        let queries: Vec<_> = loops
            .iter()
            .map(|lp| health::facts_query(lp, now))
            .collect();
        let facts = self
            .client
            .store()
            .run_facts(&queries, health::RECENT_RUNS)?;
        let live = if loops.iter().any(|lp| !lp.runs_on.is_empty()) {
            self.client.live_runner_labels()?
        } else {
            None
        };
        Ok(loops
            .into_iter()
            .zip(facts)
            .map(|(lp, facts)| {
                let health = health::is_listed(&lp, &facts)
                    .then(|| health::assess_with_runners(&lp, &facts, now, live.as_deref()));
                TopLoop { lp, facts, health }
            })
            .collect())
    }

    /// A run's end may hold (or free) an account for every agent loop on it: their
    /// holds are marked again (a read of the holds, none of the loops).
    fn mark_holds(&mut self, now: Instant) -> Result<()> {
        let mut agents: Vec<Loop> = self
            .data
            .loops
            .values()
            .filter(|t| matches!(t.lp.target, Target::Agent(_)))
            .map(|t| {
                let mut lp = t.lp.clone();
                lp.held_until = None;
                lp.held_reason = None;
                lp
            })
            .collect();
        if agents.is_empty() {
            return Ok(());
        }
        self.client.mark_held(&mut agents, now)?;
        for lp in agents {
            if let Some(top) = self.data.loops.get_mut(&lp.id) {
                top.lp.held_until = lp.held_until;
                top.lp.held_reason = lp.held_reason;
            }
        }
        Ok(())
    }
}

/// Newest first: by when the run ended, else when it was created.
fn sort_key(run: &Run) -> Instant {
    run.finished_at.unwrap_or(run.created_at)
}

/// A failed run as the feed keeps it: no stdout, and of its stderr only the first line
/// an error line quotes ([`loops_core::redact::error_line`]).
fn trim_output(mut run: Run) -> Run {
    run.stdout = None;
    run.stderr = run.stderr.as_deref().and_then(|t| {
        loops_core::notify::first_line(t, loops_core::redact::ERROR_LINE_QUOTE_CHARS)
    });
    if let Some(text) = run.error_output.as_mut() {
        if let Some(line) =
            loops_core::notify::first_line(text, loops_core::redact::ERROR_LINE_QUOTE_CHARS)
        {
            *text = line;
        }
    }
    run
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::client::LoopDefinition;
    use loops_core::{CommandTarget, Policy, Schedule};

    fn def(name: &str) -> LoopDefinition {
        LoopDefinition {
            name: name.into(),
            description: None,
            schedule: Schedule::Interval {
                every_ms: 60_000,
                anchor: loops_core::Anchor::FixedRate,
            },
            target: Target::Command(CommandTarget {
                command: "true".into(),
                args: vec![],
                cwd: None,
                shell: true,
                env: Default::default(),
                timeout: None,
                idle_timeout: None,
                account: None,
            }),
            policy: Policy::default(),
            labels: vec![],
            notify: None,
        }
    }

    #[test]
    fn events_bring_new_changed_and_removed_loops() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::open(dir.path()).unwrap();
        let now = chrono::Utc::now();
        client.create(def("first"), now).unwrap();
        let mut feed = client.top(now).unwrap();
        assert_eq!(feed.data().loops.len(), 1);
        let one = feed.data().loops.values().next().unwrap();
        assert!(one.health.is_some());

        let second = client.create(def("second"), now).unwrap();
        client.pause("first", now).unwrap();
        let applied = feed.poll(now).unwrap();
        assert_eq!(applied.events, 2);
        assert_eq!(applied.loops, 2);
        assert!(!applied.reloaded);
        let names: Vec<_> = feed
            .data()
            .loops
            .values()
            .map(|t| (t.lp.name.as_str(), t.lp.status))
            .collect();
        assert!(names.contains(&("first", LoopStatus::Paused)));
        assert!(names.contains(&("second", LoopStatus::Active)));

        // Nothing new: nothing read.
        assert_eq!(feed.poll(now).unwrap(), Applied::default());

        client.archive("first", false, now).unwrap();
        client.remove(second.id.as_str(), true).unwrap();
        feed.poll(now).unwrap();
        assert!(feed.data().loops.is_empty());
    }

    #[test]
    fn run_events_bring_failures_and_the_strip() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::open(dir.path()).unwrap();
        let now = chrono::Utc::now();
        let mut bad = def("bad");
        if let Target::Command(c) = &mut bad.target {
            c.command = "echo quoted-output >&2; exit 3".into();
        }
        client.create(bad, now).unwrap();
        let mut feed = client.top(now).unwrap();
        assert!(feed.data().failures.is_empty());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome = rt.block_on(client.run_now("bad", false)).unwrap();
        let applied = feed.poll(chrono::Utc::now()).unwrap();
        assert!(applied.events >= 2, "{applied:?}");
        let data = feed.data();
        assert!(data.running.is_empty());
        assert_eq!(data.failures.len(), 1);
        let failed = &data.failures[0];
        assert_eq!(failed.id, outcome.run.id);
        // Output kept only as far as an error line quotes it.
        assert_eq!(failed.stdout, None);
        assert_eq!(failed.stderr.as_deref(), Some("quoted-output"));
        let top = data.loops.values().next().unwrap();
        assert_eq!(top.facts.recent.len(), 1);
        assert_eq!(top.facts.recent[0].status, RunStatus::Failed);
        assert_eq!(
            top.health.as_ref().map(|h| h.verdict),
            Some(health::Verdict::Warn)
        );
        // Applying the same events again changes nothing.
        let again = feed.data().clone();
        let events = client.store().events_after(0, 100).unwrap();
        feed.apply(&events, chrono::Utc::now()).unwrap();
        assert_eq!(feed.data().failures.len(), again.failures.len());
        assert_eq!(feed.data().loops.len(), again.loops.len());
    }
}
