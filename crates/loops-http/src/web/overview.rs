//! `/`: every loop at a glance — status, schedule in words, next run (a live
//! countdown), the last 20 runs as a strip, health verdict, labels — with filters by
//! name, label and status; the last 24 hours' counts; what runs now; the next 10 slots
//! across all loops.
//!
//! Cost: a count of the matching loops, one page of them and the ten next due (the
//! store pages; a name filter reads every loop the other filters match), the page's
//! health ([`Client::health_of`]: the store's `run_facts`, bounded per loop), one
//! set-based read of the page's newest 20 runs ([`loops_store::Store::recent_runs`]),
//! one count by status, the running rows.

use super::PageRequest;
use super::{ansi::escape, words, Base};
use crate::error::ApiError;
use crate::request::Params;
use askama::Template;
use axum::response::Response;
use loops_core::cron::CronSchedule;
use loops_core::health::Verdict;
use loops_core::{Anchor, Instant, Loop, LoopId, LoopStatus, RunStatus, Schedule};
use loops_runtime::Client;
use loops_store::{LoopFilter, LoopOrder, RunSummary};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Runs in a strip.
pub const STRIP: usize = loops_core::health::RECENT_RUNS;
/// Upcoming slots listed.
const UPCOMING: usize = 10;
/// Loops on one page of the overview (a thousand loops' strips are over 1 MB of HTML).
pub const PAGE: usize = 250;

/// The overview's filters (`?name=&label=&status=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverviewQuery {
    /// A part of the name (any case).
    pub name: String,
    /// Labels, every one required.
    pub labels: Vec<String>,
    pub status: Option<LoopStatus>,
    /// The page (0 first).
    pub page: usize,
    /// Loops per page ([`PAGE`] unless asked).
    pub per_page: usize,
}

impl Default for OverviewQuery {
    fn default() -> Self {
        Self {
            name: String::new(),
            labels: Vec::new(),
            status: None,
            page: 0,
            per_page: PAGE,
        }
    }
}

impl OverviewQuery {
    /// The query string of this filter on page `page`.
    fn href(&self, page: usize) -> String {
        let mut parts = Vec::new();
        if !self.name.is_empty() {
            parts.push(format!("name={}", crate::request::encode(&self.name)));
        }
        if !self.labels.is_empty() {
            parts.push(format!(
                "label={}",
                crate::request::encode(&self.labels.join(","))
            ));
        }
        if let Some(s) = self.status {
            parts.push(format!("status={s}"));
        }
        if page > 0 {
            parts.push(format!("page={}", page + 1));
        }
        format!("/?{}", parts.join("&"))
    }

    fn parse(q: Option<&str>) -> Result<Self, ApiError> {
        let p = Params::parse(q, &["name", "label", "status", "page"])?;
        let status = match p.get("status").map(str::trim) {
            None | Some("") => None,
            Some(s) => Some(
                loops_runtime::definition::parse_enum::<LoopStatus>("status", s)
                    .map_err(ApiError::invalid)?,
            ),
        };
        Ok(Self {
            name: p.get("name").unwrap_or("").trim().to_owned(),
            labels: p.all("label"),
            status,
            page: p.count("page")?.unwrap_or(1).max(1) - 1,
            per_page: PAGE,
        })
    }
}

/// One loop's line.
pub(crate) struct Row {
    pub id: String,
    pub name: String,
    pub status: &'static str,
    /// Why a held loop is held (a usage limit or a spent budget), its badge's title.
    pub held_reason: String,
    pub schedule: String,
    pub next_iso: String,
    pub next_text: String,
    /// The strip, as HTML (built here: 20 000 cells are too many for a template loop
    /// to be cheap; each title escaped).
    pub strip: String,
    pub verdict: &'static str,
    pub verdict_marker: &'static str,
    pub reasons: String,
    pub labels: Vec<String>,
}

/// One option of the status filter.
pub(crate) struct Choice {
    pub value: &'static str,
    pub selected: bool,
}

pub(crate) struct RunningRow {
    pub id: String,
    pub short: String,
    pub loop_id: String,
    pub loop_name: String,
    pub started_iso: String,
    pub started_text: String,
}

pub(crate) struct Slot {
    pub at_iso: String,
    /// `14:00:05 UTC`.
    pub at_clock: String,
    /// `in 4m`.
    pub at_text: String,
    pub loop_id: String,
    pub loop_name: String,
}

#[derive(Template)]
#[template(path = "overview.html")]
pub(crate) struct OverviewPage {
    pub base: Base,
    pub query: OverviewQuery,
    pub status_options: Vec<Choice>,
    pub label_text: String,
    pub rows: Vec<Row>,
    pub total: usize,
    /// The first and last loop shown (1-based), and the links to the pages around.
    pub first: usize,
    pub last: usize,
    pub prev_href: String,
    pub next_href: String,
    pub succeeded: u64,
    pub failed: u64,
    pub skipped: u64,
    pub running: Vec<RunningRow>,
    pub upcoming: Vec<Slot>,
    pub at: String,
}

/// The strip of a loop's newest runs, oldest left: one cell per run, its class the
/// status (colour and, by CSS, a marker), its title the slot, duration and status.
pub fn strip_html(runs: &[RunSummary]) -> String {
    let mut s = String::with_capacity(runs.len() * 48);
    for r in runs.iter().rev() {
        let word = words::run_status(r.status).word;
        let duration = match (r.started_at, r.finished_at) {
            (Some(a), Some(b)) => words::elapsed((b - a).num_milliseconds().max(0) as u64),
            _ if r.status == RunStatus::Running => "so far".to_owned(),
            _ => "-".to_owned(),
        };
        let _ = write!(
            s,
            "<i class={} title=\"{} {} {}\"></i>",
            words::cell_class(r.status),
            r.scheduled_for.format("%m-%d %H:%M:%S"),
            escape(&duration),
            word
        );
    }
    s
}

/// The overview's HTML for `query` at `now` (the page handler's work, without the
/// request; also what the render tests and `loops-bench dashboard` call).
pub fn overview_html(
    c: &Client,
    query: &OverviewQuery,
    now: Instant,
    csrf: &str,
) -> Result<String, ApiError> {
    let page = build(c, query, now, csrf)?;
    page.render()
        .map_err(|e| ApiError::failed(format!("cannot render the page: {e}")))
}

fn build(
    c: &Client,
    query: &OverviewQuery,
    now: Instant,
    csrf: &str,
) -> Result<OverviewPage, ApiError> {
    let filter = LoopFilter {
        status: query.status,
        include_archived: false,
        labels: query.labels.clone(),
        ..LoopFilter::default()
    };
    let per = query.per_page.max(1);
    let needle = query.name.to_lowercase();
    // `next`: the loops the upcoming slots come from — the first UPCOMING by next slot
    // are all `upcoming` looks at.
    let (total, page, shown, next) = if needle.is_empty() {
        // The store counts and pages, and finds the next slots by its own order: a
        // page of a large store reads the page's loops and ten more, not every loop.
        let total = c.count_matching(&filter)?;
        let page = query.page.min(total.saturating_sub(1) / per);
        let shown = c.list_matching(&LoopFilter {
            offset: page * per,
            limit: Some(per),
            ..filter.clone()
        })?;
        let next = c.list_matching(&LoopFilter {
            order: LoopOrder::NextSlot,
            limit: Some(UPCOMING),
            ..filter
        })?;
        (total, page, shown, next)
    } else {
        // A part of a name in any case is matched here, with Unicode's lower case (no
        // SQL dialect's), so every loop the other filters match is read.
        let loops: Vec<Loop> = c
            .list_matching(&filter)?
            .into_iter()
            .filter(|lp| lp.name.to_lowercase().contains(&needle))
            .collect();
        let total = loops.len();
        let page = query.page.min(total.saturating_sub(1) / per);
        let shown = loops[(page * per).min(total)..((page + 1) * per).min(total)].to_vec();
        (total, page, shown, loops)
    };
    let verdicts: HashMap<LoopId, (Verdict, String)> = c
        .health_of(shown.clone(), now)?
        .into_iter()
        .map(|l| (l.loop_id, (l.health.verdict, l.health.reasons.join("; "))))
        .collect();
    let ids: Vec<_> = shown.iter().map(|l| l.id.clone()).collect();
    let strips = c.store().recent_runs(&ids, STRIP)?;
    let counts = c
        .store()
        .run_status_counts(now - chrono::TimeDelta::hours(24))?;
    let count = |f: &dyn Fn(RunStatus) -> bool| -> u64 {
        counts.iter().filter(|(s, _)| f(*s)).map(|(_, n)| n).sum()
    };
    let running = c.running_runs()?;
    let rows = shown
        .iter()
        .zip(&strips)
        .map(|(lp, strip)| {
            let (verdict, marker, reasons) = match verdicts.get(&lp.id) {
                Some((Verdict::Ok, r)) => ("ok", "✓", r.clone()),
                Some((Verdict::Warn, r)) => ("warn", "▲", r.clone()),
                Some((Verdict::Fail, r)) => ("fail", "✕", r.clone()),
                None => ("none", "–", String::new()),
            };
            // A loop whose account is held waits for the hold's end (`loops holds`).
            let next = lp.held_until.or_else(|| next_slot(lp));
            Row {
                id: lp.id.as_str().to_owned(),
                name: lp.name.clone(),
                status: if lp.held_until.is_some() {
                    "held"
                } else {
                    lp.status.as_str()
                },
                held_reason: lp.held_reason.clone().unwrap_or_default(),
                schedule: words::schedule(&lp.schedule),
                next_iso: next.map(|t| words::iso(&t)).unwrap_or_default(),
                next_text: next.map_or_else(|| "—".to_owned(), |t| words::relative(t, now)),
                strip: strip_html(strip),
                verdict,
                verdict_marker: marker,
                reasons,
                labels: lp.labels.clone(),
            }
        })
        .collect();
    let status_options = std::iter::once(Choice {
        value: "",
        selected: query.status.is_none(),
    })
    .chain(LoopStatus::ALL.iter().map(|s| Choice {
        value: s.as_str(),
        selected: query.status == Some(*s),
    }))
    .collect();
    Ok(OverviewPage {
        base: Base {
            title: "Overview".to_owned(),
            nav: "overview",
            csrf: csrf.to_owned(),
        },
        label_text: query.labels.join(","),
        query: query.clone(),
        status_options,
        total,
        first: if total == 0 { 0 } else { page * per + 1 },
        last: (page * per + shown.len()).min(total),
        prev_href: if page > 0 {
            query.href(page - 1)
        } else {
            String::new()
        },
        next_href: if (page + 1) * per < total {
            query.href(page + 1)
        } else {
            String::new()
        },
        rows,
        succeeded: count(&|s| s == RunStatus::Succeeded),
        failed: count(&RunStatus::is_failure),
        skipped: count(&|s| s == RunStatus::Skipped),
        running: running
            .iter()
            .map(|r| {
                let started = r.started_at.unwrap_or(r.created_at);
                RunningRow {
                    id: r.id.as_str().to_owned(),
                    short: words::short_id(r.id.as_str()),
                    loop_id: r.loop_id.as_str().to_owned(),
                    loop_name: r.loop_name.clone(),
                    started_iso: words::iso(&started),
                    started_text: words::relative(started, now),
                }
            })
            .collect(),
        upcoming: upcoming(&next, now),
        at: words::instant(&now),
    })
}

/// When the loop runs next: its pending retry, else its next slot (only while it is
/// scheduled).
fn next_slot(lp: &Loop) -> Option<Instant> {
    if lp.status != LoopStatus::Active {
        return None;
    }
    match (lp.retry_scheduled_for, lp.next_run_at) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The next [`UPCOMING`] slots across the active loops: each loop's next slot, and
/// the ones after it its schedule already knows (fixed-rate intervals and cron; the
/// others depend on when a run finishes). Only loops whose next slot is among the
/// first [`UPCOMING`] are asked for more.
pub(crate) fn upcoming(loops: &[Loop], now: Instant) -> Vec<Slot> {
    let mut firsts: Vec<(Instant, &Loop)> = loops
        .iter()
        .filter_map(|lp| next_slot(lp).map(|t| (t, lp)))
        .collect();
    firsts.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
    let horizon = firsts.get(UPCOMING - 1).map(|(t, _)| *t);
    let mut slots: Vec<(Instant, &Loop)> = Vec::new();
    for &(first, lp) in firsts.iter().take(UPCOMING) {
        slots.push((first, lp));
        let more: Vec<Instant> = match &lp.schedule {
            Schedule::Interval {
                every_ms,
                anchor: Anchor::FixedRate,
            } => {
                let every =
                    chrono::TimeDelta::milliseconds(i64::try_from(*every_ms).unwrap_or(i64::MAX));
                (1..UPCOMING as i32)
                    .filter_map(|k| first.checked_add_signed(every * k))
                    .collect()
            }
            Schedule::Cron {
                expression,
                timezone,
            } => match CronSchedule::parse(expression, timezone) {
                Ok(cron) => cron.iter_after(first).take(UPCOMING - 1).collect(),
                Err(_) => Vec::new(),
            },
            _ => Vec::new(),
        };
        for t in more {
            if horizon.is_some_and(|h| t > h) {
                break;
            }
            slots.push((t, lp));
        }
    }
    slots.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
    slots
        .into_iter()
        .take(UPCOMING)
        .map(|(t, lp)| Slot {
            at_iso: words::iso(&t),
            at_clock: format!("{} UTC", t.format("%H:%M:%S")),
            at_text: words::relative(t, now),
            loop_id: lp.id.as_str().to_owned(),
            loop_name: lp.name.clone(),
        })
        .collect()
}

pub(crate) async fn page(request: PageRequest) -> Response {
    request
        .show(OverviewQuery::parse, |c, query, csrf| {
            build(c, &query, chrono::Utc::now(), &csrf)
        })
        .await
}
