//! `loops health`: every active (or parked) loop judged by the rules of
//! [`loops_core::health`], from the facts the store gathers per loop.

use super::{Client, Result};
use loops_core::health::{self, Health, Verdict};
use loops_core::{Instant, Loop, LoopId, LoopStatus};
use loops_store::{LoopFilter, LoopOrder};

/// The loops [`Client::health`] reads and judges at a time: their facts come from one
/// range of the runs' index, and 100,000 loops are never all decoded at once.
const HEALTH_BATCH: usize = 2_048;

/// One line of a health report (JSON: the loop's id, name and status, then the
/// [`Health`] fields).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopHealth {
    pub loop_id: LoopId,
    pub loop_name: String,
    /// `None` for a row this build cannot read.
    pub status: Option<LoopStatus>,
    #[serde(flatten)]
    pub health: Health,
}

/// What [`Client::health`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthReport {
    /// The instant the rules were applied at.
    pub at: Instant,
    /// By loop name.
    pub loops: Vec<LoopHealth>,
}

/// The JSON document of `health --json` (and the MCP tool `loops_health`): the worst
/// verdict, the instant, the count of each verdict and the loops' lines, serialized
/// straight from the report (no JSON tree built in between).
#[derive(Debug, Clone, serde::Serialize)]
pub struct HealthJson<'a> {
    pub verdict: Verdict,
    #[serde(with = "loops_core::timefmt")]
    pub at: Instant,
    pub counts: HealthCounts,
    pub loops: &'a [LoopHealth],
}

/// How many loops got each verdict.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct HealthCounts {
    pub ok: usize,
    pub warn: usize,
    pub fail: usize,
}

impl HealthReport {
    /// The report as its JSON document.
    pub fn json(&self) -> HealthJson<'_> {
        HealthJson {
            verdict: self.verdict(),
            at: self.at,
            counts: HealthCounts {
                ok: self.count(Verdict::Ok),
                warn: self.count(Verdict::Warn),
                fail: self.count(Verdict::Fail),
            },
            loops: &self.loops,
        }
    }

    /// The worst verdict (`ok` for no loops).
    pub fn verdict(&self) -> Verdict {
        self.loops
            .iter()
            .map(|l| l.health.verdict)
            .max()
            .unwrap_or(Verdict::Ok)
    }

    /// How many loops got `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.loops
            .iter()
            .filter(|l| l.health.verdict == verdict)
            .count()
    }
}

impl Client {
    /// Judges every active loop, and every loop the engine parked, at `now` — only
    /// those carrying every one of `labels`, when any are given. A loop row this build
    /// cannot read is reported as failing (whatever the labels). Costs a few index
    /// lookups per loop, or one pass over their runs ([`loops_store::Store::run_facts`]).
    pub fn health(&self, now: Instant, labels: &[String]) -> Result<HealthReport> {
        self.health_in_batches(now, labels, HEALTH_BATCH)
    }

    /// [`Client::health`], reading and judging the loops `batch` at a time in id order
    /// (a test's small batches walk the same way as 100,000 loops do).
    #[doc(hidden)]
    pub fn health_in_batches(
        &self,
        now: Instant,
        labels: &[String],
        batch: usize,
    ) -> Result<HealthReport> {
        for label in labels {
            loops_core::validate::label(label)?;
        }
        let mut loops = Vec::new();
        let mut page = LoopFilter {
            include_archived: true,
            order: LoopOrder::Id,
            limit: Some(batch.max(1)),
            ..LoopFilter::default()
        };
        loop {
            let mut readable = Vec::new();
            let (mut read, mut last) = (0, None);
            self.store.each_loop_row(&page, &mut |row| {
                read += 1;
                match row {
                    // Paused loops are asked about too: a parked one is paused.
                    Ok(lp) => {
                        last = Some(lp.id.clone());
                        if matches!(lp.status, LoopStatus::Active | LoopStatus::Paused)
                            && super::portable::has_labels(&lp, labels)
                        {
                            readable.push(lp);
                        }
                    }
                    Err(bad) => {
                        last = Some(bad.id.clone());
                        loops.push(LoopHealth {
                            loop_id: bad.id,
                            loop_name: bad.name,
                            status: None,
                            health: unreadable(bad.error),
                        });
                    }
                }
                std::ops::ControlFlow::Continue(())
            })?;
            // Only this batch's loops are held at once: their runs are one range of the
            // runs' index (BENCHMARKS.md §36).
            loops.extend(self.judge(readable, now)?);
            if page.limit.is_none_or(|n| read < n) {
                break;
            }
            // The next batch starts after this one's last id. A row whose id cannot be
            // read (hostile state) leaves no place to go on from: the loops are then
            // read and judged again all at once.
            let next = last.filter(|id| match &page.after_id {
                Some(after) => id > after,
                None => !id.as_str().is_empty(),
            });
            match next {
                Some(id) => page.after_id = Some(id),
                None => {
                    loops.clear();
                    page.after_id = None;
                    page.limit = None;
                }
            }
        }
        Ok(HealthReport {
            at: now,
            loops: by_name(loops),
        })
    }

    /// The health lines of `loops` alone, in their order: what a page of a listing
    /// shows, without judging every loop of the store. Loops that are neither active
    /// nor paused, and loops with nothing to report, have no line.
    pub fn health_of(&self, loops: Vec<Loop>, now: Instant) -> Result<Vec<LoopHealth>> {
        let judged = loops
            .into_iter()
            .filter(|lp| matches!(lp.status, LoopStatus::Active | LoopStatus::Paused))
            .collect();
        self.judge(judged, now)
    }

    /// Each loop's line from its facts (one store read for all of them).
    fn judge(&self, mut readable: Vec<Loop>, now: Instant) -> Result<Vec<LoopHealth>> {
        let mut loops = Vec::with_capacity(readable.len());
        self.mark_held(&mut readable, now)?;
        let queries: Vec<_> = readable
            .iter()
            .map(|lp| health::facts_query(lp, now))
            .collect();
        let facts = self.store.run_facts(&queries, health::RECENT_RUNS)?;
        let live = if readable.iter().any(|lp| !lp.runs_on.is_empty()) {
            self.live_runner_labels()?
        } else {
            None
        };
        for (lp, facts) in readable.into_iter().zip(facts) {
            if !health::is_listed(&lp, &facts) {
                continue;
            }
            let health = health::assess_with_runners(&lp, &facts, now, live.as_deref());
            loops.push(LoopHealth {
                loop_id: lp.id,
                loop_name: lp.name,
                status: Some(lp.status),
                health,
            });
        }
        Ok(loops)
    }
}

impl Client {
    /// The labels of each live runner of a store shared by runners; `None` on a store
    /// with one daemon.
    pub fn live_runner_labels(&self) -> Result<Option<Vec<Vec<String>>>> {
        if !self.store_has_runners() {
            return Ok(None);
        }
        Ok(Some(
            self.runners()?
                .into_iter()
                .filter(|r| r.live && !r.released)
                .map(|r| r.labels)
                .collect(),
        ))
    }

    /// Why no live runner can take `lp` ([`health::runner_wait`]): `None` when one can,
    /// when it requires no runner labels or is not active, or on a store with one daemon.
    pub fn runner_wait(&self, lp: &loops_core::Loop) -> Result<Option<String>> {
        if lp.runs_on.is_empty() || lp.status != LoopStatus::Active {
            return Ok(None);
        }
        Ok(self
            .live_runner_labels()?
            .and_then(|live| health::runner_wait(&lp.runs_on, &live)))
    }
}

/// `lines` by loop name (lines of one name in the order given), each moved once: the
/// names are sorted with their positions, not the 200-byte lines themselves (sorting
/// 100,000 lines read in id order moved them 17 times each; BENCHMARKS.md §36).
fn by_name(lines: Vec<LoopHealth>) -> Vec<LoopHealth> {
    let mut order: Vec<(&str, usize)> = lines
        .iter()
        .enumerate()
        .map(|(i, line)| (line.loop_name.as_str(), i))
        .collect();
    order.sort_unstable();
    let order: Vec<usize> = order.into_iter().map(|(_, i)| i).collect();
    let mut lines: Vec<Option<LoopHealth>> = lines.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| lines[i].take()).collect()
}

fn unreadable(error: String) -> Health {
    Health {
        verdict: Verdict::Fail,
        reasons: vec![format!("cannot be read: {error}")],
        last_status: None,
        last_run_at: None,
        last_success_at: None,
        consecutive_failures: 0,
        last_failure_class: None,
        success_rate: None,
        rated_runs: 0,
        missed_slots: 0,
        skipped_slots: 0,
        parked: false,
        waiting_for_runner: None,
        waiting_for_cap: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_name_sorts_the_lines_keeping_the_order_of_equal_names() {
        let line = |id: &str, name: &str| LoopHealth {
            loop_id: LoopId::new(id.to_owned()),
            loop_name: name.to_owned(),
            status: None,
            health: unreadable(String::new()),
        };
        let lines = vec![
            line("1", "b"),
            line("2", ""),
            line("3", "a"),
            line("4", ""),
            line("5", "c"),
        ];
        let ids: Vec<_> = by_name(lines)
            .into_iter()
            .map(|l| l.loop_id.as_str().to_owned())
            .collect();
        assert_eq!(ids, ["2", "4", "3", "1", "5"]);
    }
}
