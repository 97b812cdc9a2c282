//! `/loops/{key}`: one loop — its definition (secrets redacted as `loops show` does),
//! a chart of its last runs' durations and dispatch lag with failures marked, its run
//! history (paged by creation, newest first), the buttons pause / resume / run now /
//! archive (our script calls the API with the session's CSRF header), and its
//! notification settings with their last deliveries.

use super::PageRequest;
use super::{svg, words, Base};
use crate::error::ApiError;
use crate::request::Params;
use askama::Template;
use axum::extract::Path;
use axum::response::Response;
use loops_core::redact::{redact_delivery, redact_loop};
use loops_core::{Instant, Loop, LoopStatus, Target};
use loops_runtime::client::RunQuery;
use loops_runtime::Client;

/// Runs on one page of the history.
const HISTORY: usize = 25;
/// Runs in the chart.
const CHART: usize = 100;
/// Deliveries listed.
const DELIVERIES: usize = 10;

pub(crate) struct HistoryRow {
    pub id: String,
    pub short: String,
    pub badge: words::Badge,
    pub slot: String,
    pub attempt: u32,
    pub source: String,
    pub duration: String,
    pub exit: String,
    pub error: String,
}

pub(crate) struct DeliveryRow {
    pub at: String,
    pub event: String,
    pub channel: String,
    pub target: String,
    pub status: String,
    pub attempts: u32,
    pub error: String,
    pub run_id: String,
}

pub(crate) struct Action {
    pub name: &'static str,
    pub label: &'static str,
    pub confirm: &'static str,
}

#[derive(Template)]
#[template(path = "loop.html")]
pub(crate) struct LoopPage {
    pub base: Base,
    /// The budgets covering the loop: (what, percent spent capped at 100, the spend).
    pub budgets: Vec<(String, u64, String)>,
    pub id: String,
    pub name: String,
    pub description: String,
    pub status: &'static str,
    pub schedule: String,
    pub target: String,
    pub target_kind: &'static str,
    pub next_iso: String,
    pub next_text: String,
    pub labels: Vec<String>,
    pub policy: Vec<(&'static str, String)>,
    pub definition: String,
    pub verdict: String,
    pub reasons: String,
    pub chart: String,
    pub history: Vec<HistoryRow>,
    pub older_href: String,
    pub newest_href: String,
    pub notify: Vec<(&'static str, String)>,
    pub notify_source: &'static str,
    pub deliveries: Vec<DeliveryRow>,
    pub actions: Vec<Action>,
}

/// What a loop runs, in one line (prompts never shown).
fn target_line(t: &Target) -> String {
    match t {
        Target::Command(c) => {
            if c.args.is_empty() {
                c.command.clone()
            } else {
                format!("{} {}", c.command, c.args.join(" "))
            }
        }
        Target::Agent(a) => format!(
            "{} agent{}",
            a.provider,
            a.model
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        ),
        Target::Workflow(w) => format!("workflow {}", w.workflow),
    }
}

fn actions(status: LoopStatus) -> Vec<Action> {
    let a = |name, label, confirm| Action {
        name,
        label,
        confirm,
    };
    let run_now = a("run-now", "Run now", "");
    let archive = a(
        "archive",
        "Archive",
        "Archive this loop? It is no longer scheduled; its history is kept.",
    );
    match status {
        LoopStatus::Active => vec![a("pause", "Pause", ""), run_now, archive],
        // A done loop resumes with a fresh count of its stop conditions.
        LoopStatus::Paused | LoopStatus::Stopped | LoopStatus::Done => {
            vec![a("resume", "Resume", ""), run_now, archive]
        }
        LoopStatus::Expired => vec![run_now, archive],
        LoopStatus::Archived => vec![a("unarchive", "Unarchive (paused)", "")],
    }
}

/// Where a page of the run history starts: after the `skip` newest runs created in the
/// millisecond `before` (already shown: runs of one millisecond can straddle pages),
/// then everything older.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HistoryCursor {
    pub before: Instant,
    pub skip: usize,
}

impl HistoryCursor {
    /// The cursor of the page after the one `cursor` started, whose rows were created
    /// at `created` (newest first).
    fn after(created: &[Instant], cursor: Option<HistoryCursor>) -> Option<Self> {
        let last = *created.last()?;
        let same = created.iter().filter(|&&t| t == last).count();
        let earlier = cursor.filter(|c| c.before == last).map_or(0, |c| c.skip);
        Some(Self {
            before: last,
            skip: same + earlier,
        })
    }

    fn href(&self, id: &str) -> String {
        format!(
            "/loops/{id}?before={}&skip={}#history",
            crate::request::encode(&words::iso(&self.before)),
            self.skip
        )
    }
}

/// One page of `size` rows from `cursor`, and whether more follow. `fetch(until, limit)`
/// answers at most `limit` rows created before `until` (exclusive), newest first.
fn history_page<T>(
    cursor: Option<HistoryCursor>,
    size: usize,
    fetch: impl FnOnce(Option<Instant>, usize) -> Result<Vec<T>, ApiError>,
) -> Result<(Vec<T>, bool), ApiError> {
    let skip = cursor.map_or(0, |c| c.skip);
    // One millisecond on takes in the cursor's own millisecond, whose first `skip` rows
    // the pages before showed.
    let until = cursor.map(|c| c.before + chrono::TimeDelta::milliseconds(1));
    let mut rows = fetch(until, size + 1 + skip)?;
    rows.drain(..skip.min(rows.len()));
    let more = rows.len() > size;
    rows.truncate(size);
    Ok((rows, more))
}

fn build(
    c: &Client,
    key: &str,
    before: Option<HistoryCursor>,
    now: Instant,
    csrf: String,
) -> Result<LoopPage, ApiError> {
    let mut lp: Loop = c.get(key)?;
    redact_loop(&mut lp);
    let definition = serde_json::to_string_pretty(&lp)
        .map_err(|e| ApiError::failed(format!("cannot encode the loop: {e}")))?;
    let id = lp.id.clone();
    let recent = c
        .store()
        .recent_runs(std::slice::from_ref(&id), CHART)?
        .pop()
        .unwrap_or_default();
    let points: Vec<svg::Point> = recent
        .iter()
        .rev()
        .map(|r| {
            let duration = match (r.started_at, r.finished_at) {
                (Some(a), Some(b)) => Some((b - a).num_milliseconds().max(0) as u64),
                _ => None,
            };
            let lag = r
                .started_at
                .map(|s| (s - r.scheduled_for).num_milliseconds().max(0) as u64);
            let word = words::run_status(r.status).word;
            svg::Point {
                duration_ms: duration,
                lag_ms: lag,
                failed: r.status.is_failure(),
                label: format!(
                    "{} · {} · duration {} · lag {}",
                    words::instant(&r.scheduled_for),
                    word,
                    duration.map_or_else(|| "-".to_owned(), words::elapsed),
                    lag.map_or_else(|| "-".to_owned(), words::elapsed)
                ),
            }
        })
        .collect();
    let (runs, more) = history_page(before, HISTORY, |until, limit| {
        Ok(c.query_runs(&RunQuery {
            loop_key: Some(id.as_str().to_owned()),
            until,
            limit: Some(limit),
            ..RunQuery::default()
        })?)
    })?;
    let created: Vec<Instant> = runs.iter().map(|r| r.created_at).collect();
    let older_href = match (more, HistoryCursor::after(&created, before)) {
        (true, Some(next)) => next.href(id.as_str()),
        _ => String::new(),
    };
    let history = runs
        .iter()
        .map(|r| HistoryRow {
            id: r.id.as_str().to_owned(),
            short: words::short_id(r.id.as_str()),
            badge: words::run_status(r.status),
            slot: words::instant(&r.scheduled_for),
            attempt: r.attempt,
            source: r.source.to_string(),
            duration: r.duration_ms.map(words::elapsed).unwrap_or_default(),
            exit: r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            error: r.error.clone().unwrap_or_default(),
        })
        .collect();
    let run_ids: Vec<_> = recent.iter().map(|r| r.id.clone()).collect();
    let mut deliveries = c.deliveries_of_runs(&run_ids)?;
    deliveries.sort_by_key(|d| std::cmp::Reverse(d.created_at));
    let deliveries = deliveries
        .into_iter()
        .take(DELIVERIES)
        .map(|mut d| {
            redact_delivery(&mut d, false);
            DeliveryRow {
                at: words::instant(&d.updated_at),
                event: d.event.to_string(),
                channel: d.channel.to_string(),
                target: d.target,
                status: d.status.to_string(),
                attempts: d.attempts,
                error: d.last_error.unwrap_or_default(),
                run_id: d.run_id.as_str().to_owned(),
            }
        })
        .collect();
    let (notify, notify_source) = match &lp.notify {
        Some(n) => (Some(n.clone()), "this loop's"),
        None => (
            c.notify_default()?.map(|mut n| {
                if let Some(url) = n.url.as_mut() {
                    *url = loops_core::redact::redact_url(url);
                }
                n
            }),
            "the store's default",
        ),
    };
    let notify = notify
        .map(|n| {
            let mut v = Vec::new();
            if let Some(cmd) = n.cmd {
                v.push(("command", cmd));
            }
            if let Some(url) = n.url {
                v.push(("webhook", url));
            }
            v.push(("on", n.on.to_string()));
            v
        })
        .unwrap_or_default();
    let health = c.health(now, &[])?;
    let mine = health.loops.iter().find(|l| l.loop_id == id);
    let next = match (lp.status, lp.retry_scheduled_for.or(lp.next_run_at)) {
        // A held account's loops wait for the hold's end.
        (LoopStatus::Active, _) if lp.held_until.is_some() => lp.held_until,
        (LoopStatus::Active, Some(t)) => Some(t),
        _ => None,
    };
    let mut policy = vec![
        (
            "catch-up",
            format!("{} (limit {})", lp.catch_up, lp.catch_up_limit),
        ),
        ("overlap", lp.overlap.to_string()),
        ("attempts", format!("at most {}", lp.max_attempts)),
        ("retry delay", words::duration_ms(lp.retry_delay_ms)),
        ("lease", words::duration_ms(lp.lease_ms)),
        ("jitter", words::duration_ms(lp.jitter_ms)),
        (
            "expires",
            lp.expires_at
                .map_or_else(|| "never".to_owned(), |t| words::instant(&t)),
        ),
        (
            "timeout",
            lp.target
                .timeout()
                .map_or_else(|| "none".to_owned(), |d| d.to_string()),
        ),
    ];
    // What the agent may do: its provider options, after the target's line.
    if let Target::Agent(a) = &lp.target {
        let options = loops_core::provider_options::ProviderOption::set_on(a)
            .into_iter()
            .map(|(option, values)| (option.label(), values.join(", ")));
        policy.splice(0..0, options);
    }
    if let Some(until) = lp.held_until {
        policy.insert(
            0,
            (
                "held until",
                // The reason says what holds it: a usage limit or a spent budget.
                format!(
                    "{}: {}",
                    words::instant(&until),
                    lp.held_reason.as_deref().unwrap_or("usage limit")
                ),
            ),
        );
    }
    // The stop conditions, and why a done (or parked) loop is no longer scheduled.
    if let Some(reason) = &lp.state.status_reason {
        policy.push(("status reason", reason.clone()));
    }
    if let Some(cmd) = &lp.ops.until_cmd {
        policy.push(("until cmd", cmd.clone()));
    }
    if let Some(pattern) = &lp.ops.until_output {
        let field = loops_core::stop::output_field(&lp);
        policy.push(("until output", format!("{field} matches /{pattern}/")));
    }
    if let Some(n) = lp.ops.max_runs {
        policy.push(("max runs", format!("{n} ({} ended)", lp.state.run_count)));
    }
    if !lp.runs_on.is_empty() {
        let on = lp.runs_on.join(", ");
        let runs_on = match c.runner_wait(&lp)? {
            Some(why) => format!("{on} ({why})"),
            None => on,
        };
        policy.push(("runs on", runs_on));
    }
    // A bar per budget: spend / limit in its current UTC window.
    let budgets = c
        .budget_status(std::slice::from_ref(&lp), false, now)?
        .into_iter()
        .map(|b| {
            let whose = match &b.scope {
                loops_core::budget::BudgetScope::Loop(_) => String::new(),
                key => format!(" ({key})"),
            };
            (
                format!("{} {}/{}{whose}", b.metric, b.limit, b.window),
                b.percent.min(100),
                b.line(),
            )
        })
        .collect();
    Ok(LoopPage {
        budgets,
        base: Base {
            title: lp.name.clone(),
            nav: "overview",
            csrf,
        },
        id: id.as_str().to_owned(),
        description: lp.description.clone().unwrap_or_default(),
        status: if lp.held_until.is_some() {
            "held"
        } else {
            lp.status.as_str()
        },
        schedule: words::schedule(&lp.schedule),
        target: target_line(&lp.target),
        target_kind: lp.target.kind(),
        next_iso: next.map(|t| words::iso(&t)).unwrap_or_default(),
        next_text: next.map_or_else(|| "—".to_owned(), |t| words::relative(t, now)),
        labels: lp.labels.clone(),
        policy,
        definition,
        verdict: mine.map_or_else(
            || "none".to_owned(),
            |m| m.health.verdict.as_str().to_owned(),
        ),
        reasons: mine
            .map(|m| m.health.reasons.join("; "))
            .unwrap_or_default(),
        chart: svg::chart(&points),
        history,
        newest_href: if before.is_some() {
            format!("/loops/{}#history", id.as_str())
        } else {
            String::new()
        },
        older_href,
        notify,
        notify_source,
        deliveries,
        actions: actions(lp.status),
        name: lp.name,
    })
}

pub(crate) async fn page(Path(key): Path<String>, request: PageRequest) -> Response {
    request
        .show(history_cursor, move |c, before, csrf| {
            build(c, &key, before, chrono::Utc::now(), csrf)
        })
        .await
}

/// The history page asked for: `before` (an RFC 3339 instant) and `skip` (how many
/// runs at that instant the pages before showed).
fn history_cursor(query: Option<&str>) -> Result<Option<HistoryCursor>, ApiError> {
    let p = Params::parse(query, &["before", "skip"])?;
    let skip = p
        .get("skip")
        .map(|n| {
            n.parse::<usize>()
                .map_err(|_| ApiError::invalid(format!("invalid skip {n:?}: expected a count")))
        })
        .transpose()?
        .unwrap_or(0);
    p.get("before")
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| HistoryCursor {
                    before: t.with_timezone(&chrono::Utc),
                    skip,
                })
                .map_err(|e| ApiError::invalid(format!("invalid before {t:?}: {e}")))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::{history_page, HistoryCursor};
    use loops_core::Instant;

    /// Paging through runs of which many share a millisecond shows each exactly once.
    #[test]
    fn history_pages_show_every_run_once_also_within_one_millisecond() {
        let t = |ms: i64| Instant::from_timestamp_millis(ms).unwrap_or_default();
        // Newest first: 3 at 9 ms, 7 at 5 ms (a burst longer than a page), 2 at 1 ms.
        let mut rows: Vec<(Instant, u32)> = Vec::new();
        let mut n = 0;
        for (ms, count) in [(9, 3), (5, 7), (1, 2)] {
            for _ in 0..count {
                rows.push((t(ms), n));
                n += 1;
            }
        }
        let fetch = |until: Option<Instant>, limit: usize| {
            Ok(rows
                .iter()
                .filter(|(c, _)| until.is_none_or(|u| *c < u))
                .take(limit)
                .copied()
                .collect::<Vec<_>>())
        };
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let (page, more) = history_page(cursor, 4, fetch).unwrap();
            assert!(page.len() <= 4);
            seen.extend(page.iter().map(|(_, n)| *n));
            if !more {
                break;
            }
            let created: Vec<Instant> = page.iter().map(|(c, _)| *c).collect();
            cursor = HistoryCursor::after(&created, cursor);
            assert!(seen.len() < 100, "paging does not end");
        }
        assert_eq!(seen, (0..12).collect::<Vec<_>>());
        // The cursor in the middle of the burst counts what the pages before showed.
        let href = HistoryCursor {
            before: t(5),
            skip: 5,
        }
        .href("abc");
        assert!(href.contains("skip=5"), "{href}");
    }
}
