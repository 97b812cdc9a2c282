//! What `loops top` shows, apart from how it is drawn: the rows of its three panes built
//! from the feed's data ([`TopData`]) and the view's state (filter, sort, selection),
//! and the same as one JSON document (`top --once --json`).

use crate::output;
use chrono::TimeDelta;
use loops_core::{Instant, LoopStatus, Run, RunStatus};
use loops_runtime::client::{TopData, TopLoop};
use serde::Serialize;

/// How the loops are ordered (`s` goes to the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sort {
    Name,
    Next,
    Health,
    Status,
}

impl Sort {
    pub fn next(self) -> Self {
        match self {
            Sort::Name => Sort::Next,
            Sort::Next => Sort::Health,
            Sort::Health => Sort::Status,
            Sort::Status => Sort::Name,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Next => "next",
            Sort::Health => "health",
            Sort::Status => "status",
        }
    }
}

/// A filter: every word must match — `label:NAME` a label, `status:WORD` the status
/// shown (`active`, `paused`, `held`, `parked`, …), anything else part of the name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter(pub String);

impl Filter {
    pub fn matches(&self, row: &LoopRow, labels: &[String]) -> bool {
        self.0.split_whitespace().all(|word| {
            let word = word.to_lowercase();
            if let Some(label) = word.strip_prefix("label:") {
                labels.iter().any(|l| l == label)
            } else if let Some(status) = word.strip_prefix("status:") {
                row.status == status || row.status.starts_with(&format!("{status} "))
            } else {
                row.name.to_lowercase().contains(&word)
            }
        })
    }
}

/// Glyphs of the strip, verdicts and markers: Unicode, or ASCII (`LANG` without UTF-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Glyphs {
    Unicode,
    Ascii,
}

impl Glyphs {
    /// ASCII unless the locale says UTF-8.
    pub fn from_env() -> Self {
        let utf8 = ["LC_ALL", "LC_CTYPE", "LANG"]
            .iter()
            .filter_map(|k| std::env::var(k).ok())
            .find(|v| !v.is_empty())
            .map(|v| {
                let v = v.to_lowercase();
                v.contains("utf-8") || v.contains("utf8")
            })
            .unwrap_or(false);
        if utf8 {
            Glyphs::Unicode
        } else {
            Glyphs::Ascii
        }
    }

    /// One character per run status.
    pub fn run(self, status: RunStatus) -> char {
        // Each status once: its Unicode glyph, then its ASCII one.
        let (unicode, ascii) = match status {
            RunStatus::Succeeded => ('✓', '+'),
            RunStatus::Failed => ('✗', 'x'),
            RunStatus::TimedOut => ('⏱', 't'),
            RunStatus::Abandoned => ('!', '!'),
            RunStatus::Skipped => ('·', '.'),
            RunStatus::Running => ('▶', '>'),
        };
        match self {
            Glyphs::Unicode => unicode,
            Glyphs::Ascii => ascii,
        }
    }
}

/// Runs the strip shows, newest on the right.
pub const STRIP: usize = 10;

/// One loop's line.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopRow {
    pub id: String,
    pub name: String,
    /// `active`, `paused`, `parked`, `held 14:05`, `waiting`, `done`, …
    pub status: String,
    pub schedule: String,
    /// `in 4m12s`, `due`, `running`, `-`.
    pub next: String,
    #[serde(with = "loops_core::timefmt::option")]
    pub next_run_at: Option<Instant>,
    /// The newest runs' statuses, oldest first, newest last.
    pub strip: String,
    /// `ok`, `warn`, `fail`, or `-` for a loop not judged (paused by a user, stopped…).
    pub health: String,
    /// Why it is held, parked, waiting or done, else the verdict's first reason.
    pub reason: String,
    pub labels: Vec<String>,
}

/// One run's line (in flight, or failed).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    pub id: String,
    pub loop_name: String,
    pub status: String,
    /// In flight: how long it has run; failed: how long ago it ended.
    pub when: String,
    /// A failure's error line: our words, and with `--show-output` what it quoted.
    pub error: String,
}

/// Everything shown, in the order shown (also `top --once --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    #[serde(with = "loops_core::timefmt")]
    pub at: Instant,
    pub filter: String,
    pub sort: Sort,
    pub loops: Vec<LoopRow>,
    pub running: Vec<RunRow>,
    pub failures: Vec<RunRow>,
    /// The loops the filter left out.
    pub hidden: usize,
    /// The newest event applied.
    pub event: u64,
}

/// Builds what is shown at `now`.
pub fn snapshot(
    data: &TopData,
    filter: &Filter,
    sort: Sort,
    glyphs: Glyphs,
    reveal: bool,
    now: Instant,
) -> Snapshot {
    let mut loops: Vec<(LoopRow, &TopLoop)> = data
        .loops
        .values()
        .map(|t| (loop_row(t, data, glyphs, now), t))
        .collect();
    let total = loops.len();
    loops.retain(|(row, t)| filter.matches(row, &t.lp.labels));
    let hidden = total - loops.len();
    match sort {
        Sort::Name => loops.sort_by(|a, b| a.0.name.cmp(&b.0.name)),
        Sort::Next => loops.sort_by(|a, b| {
            let key = |t: &TopLoop| t.lp.next_run_at.unwrap_or(Instant::MAX_UTC);
            key(a.1).cmp(&key(b.1)).then(a.0.name.cmp(&b.0.name))
        }),
        Sort::Health => loops.sort_by(|a, b| {
            let key = |t: &TopLoop| std::cmp::Reverse(t.health.as_ref().map(|h| h.verdict));
            key(a.1).cmp(&key(b.1)).then(a.0.name.cmp(&b.0.name))
        }),
        Sort::Status => {
            loops.sort_by(|a, b| a.0.status.cmp(&b.0.status).then(a.0.name.cmp(&b.0.name)))
        }
    }
    let shown: std::collections::HashSet<&str> =
        loops.iter().map(|(_, t)| t.lp.id.as_str()).collect();
    let mut running: Vec<&Run> = data
        .running
        .values()
        .filter(|r| shown.contains(r.loop_id.as_str()))
        .collect();
    running.sort_by_key(|r| r.started_at.unwrap_or(r.created_at));
    let running = running
        .into_iter()
        .map(|r| RunRow {
            id: r.id.to_string(),
            loop_name: one_line(&r.loop_name),
            status: r.status.to_string(),
            when: elapsed(r.started_at.unwrap_or(r.created_at), now),
            error: String::new(),
        })
        .collect();
    let failures = data
        .failures
        .iter()
        .filter(|r| shown.contains(r.loop_id.as_str()))
        .map(|r| RunRow {
            id: r.id.to_string(),
            loop_name: one_line(&r.loop_name),
            status: r.status.to_string(),
            when: output::relative(r.finished_at.unwrap_or(r.created_at), now),
            error: one_line(&loops_core::redact::error_line(r, reveal)),
        })
        .collect();
    Snapshot {
        at: now,
        filter: filter.0.clone(),
        sort,
        loops: loops.into_iter().map(|(row, _)| row).collect(),
        running,
        failures,
        hidden,
        event: data.cursor,
    }
}

fn one_line(text: &str) -> String {
    output::one_line(text).into_owned()
}

/// `3s`, `4m12s`, `2h05m`, `3d4h`.
pub fn span(d: TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

fn elapsed(since: Instant, now: Instant) -> String {
    span(now - since)
}

fn loop_row(t: &TopLoop, data: &TopData, glyphs: Glyphs, now: Instant) -> LoopRow {
    let lp = &t.lp;
    let parked = t.health.as_ref().is_some_and(|h| h.parked);
    let in_flight = data.running.values().any(|r| r.loop_id == lp.id);
    let status = match (lp.held_until, &lp.waiting_for) {
        (Some(until), _) => format!(
            "held {}",
            until.with_timezone(&chrono::Local).format("%H:%M")
        ),
        (None, Some(_)) if lp.status == LoopStatus::Active => "waiting".to_owned(),
        _ if parked => "parked".to_owned(),
        _ => lp.status.to_string(),
    };
    let next = if in_flight {
        "running".to_owned()
    } else {
        match (lp.status, lp.retry_scheduled_for.or(lp.next_run_at)) {
            (LoopStatus::Active, Some(at)) if at > now => format!("in {}", span(at - now)),
            (LoopStatus::Active, Some(at)) => format!("due {}", span(now - at)),
            _ => "-".to_owned(),
        }
    };
    let mut strip: Vec<char> = t
        .facts
        .recent
        .iter()
        .take(STRIP)
        .map(|r| glyphs.run(r.status))
        .collect();
    strip.reverse();
    let reason = if let (Some(_), Some(why)) = (lp.held_until, &lp.held_reason) {
        why.clone()
    } else if let Some(why) = &lp.waiting_for {
        why.clone()
    } else if let Some(why) = &lp.state.status_reason {
        why.clone()
    } else {
        t.health
            .as_ref()
            .and_then(|h| h.reasons.first().cloned())
            .unwrap_or_default()
    };
    LoopRow {
        id: lp.id.to_string(),
        name: one_line(&lp.name),
        status,
        schedule: one_line(&loops_http::web::words::schedule(&lp.schedule)),
        next,
        next_run_at: lp.next_run_at,
        strip: strip.into_iter().collect(),
        health: t
            .health
            .as_ref()
            .map_or("-".to_owned(), |h| h.verdict.as_str().to_owned()),
        reason: one_line(&reason),
        labels: lp.labels.clone(),
    }
}

/// Which pane the arrows move in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Loops,
    Running,
    Failures,
}

impl Pane {
    pub fn next(self) -> Self {
        match self {
            Pane::Loops => Pane::Running,
            Pane::Running => Pane::Failures,
            Pane::Failures => Pane::Loops,
        }
    }
}

/// What the bottom line is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// Typing a filter (the text so far is the view's filter).
    Filtering,
    /// `a` asked: archive this loop (id, name)?
    ConfirmArchive {
        id: String,
        name: String,
    },
    /// Following a run's output (its id, its loop's name, the lines so far).
    Follow {
        run: String,
        loop_name: String,
        lines: Vec<String>,
        ended: Option<String>,
    },
}

/// The view's state: focus, selection, mode, the last message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ui {
    pub pane: Pane,
    /// Selected row of each pane.
    pub selected: [usize; 3],
    pub mode: Mode,
    pub message: Option<String>,
    /// Colours (off with `NO_COLOR`).
    pub colour: bool,
}

impl Ui {
    pub fn new(colour: bool) -> Self {
        Self {
            pane: Pane::Loops,
            selected: [0; 3],
            mode: Mode::Normal,
            message: None,
            colour,
        }
    }

    fn index(pane: Pane) -> usize {
        match pane {
            Pane::Loops => 0,
            Pane::Running => 1,
            Pane::Failures => 2,
        }
    }

    /// The selected row of `pane`, kept inside `len` rows.
    pub fn selection(&self, pane: Pane, len: usize) -> Option<usize> {
        (len > 0).then(|| self.selected[Self::index(pane)].min(len - 1))
    }

    /// Moves the focused pane's selection by `by` rows within `len`.
    pub fn move_by(&mut self, by: isize, len: usize) {
        let i = Self::index(self.pane);
        let at = self.selected[i].min(len.saturating_sub(1)) as isize + by;
        self.selected[i] = at.clamp(0, len.saturating_sub(1) as isize) as usize;
    }
}

/// The id and loop of the selected run (or, in the loops pane, the selected loop's run
/// in flight).
pub fn selected_run(snap: &Snapshot, ui: &Ui) -> Option<(String, String)> {
    let pick = |rows: &[RunRow], pane| {
        ui.selection(pane, rows.len())
            .map(|i| (rows[i].id.clone(), rows[i].loop_name.clone()))
    };
    match ui.pane {
        Pane::Running => pick(&snap.running, Pane::Running),
        Pane::Failures => pick(&snap.failures, Pane::Failures),
        Pane::Loops => {
            let lp = selected_loop(snap, ui)?;
            snap.running
                .iter()
                .find(|r| r.loop_name == lp.name)
                .map(|r| (r.id.clone(), r.loop_name.clone()))
        }
    }
}

/// The selected loop.
pub fn selected_loop<'a>(snap: &'a Snapshot, ui: &Ui) -> Option<&'a LoopRow> {
    ui.selection(Pane::Loops, snap.loops.len())
        .map(|i| &snap.loops[i])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn spans_read_short() {
        assert_eq!(span(TimeDelta::seconds(5)), "5s");
        assert_eq!(span(TimeDelta::seconds(252)), "4m12s");
        assert_eq!(span(TimeDelta::seconds(7_500)), "2h05m");
        assert_eq!(span(TimeDelta::seconds(3 * 86_400 + 4 * 3_600)), "3d4h");
        assert_eq!(span(TimeDelta::seconds(-3)), "0s");
    }

    #[test]
    fn filters_match_name_label_and_status() {
        let row = LoopRow {
            id: "aaaaaaaaaaaa".into(),
            name: "Nightly-Backup".into(),
            status: "held 14:05".into(),
            schedule: String::new(),
            next: String::new(),
            next_run_at: None,
            strip: String::new(),
            health: "ok".into(),
            reason: String::new(),
            labels: vec![],
        };
        let labels = vec!["db".to_owned()];
        assert!(Filter("backup".into()).matches(&row, &labels));
        assert!(Filter("label:db status:held".into()).matches(&row, &labels));
        assert!(!Filter("label:web".into()).matches(&row, &labels));
        assert!(!Filter("status:active".into()).matches(&row, &labels));
        assert!(Filter(String::new()).matches(&row, &labels));
    }

    /// A store with an ok loop and a failing one (labelled `db`), each run once.
    fn data() -> (tempfile::TempDir, TopData) {
        let dir = tempfile::tempdir().unwrap();
        let client = loops_runtime::client::Client::open(dir.path()).unwrap();
        let now = chrono::Utc::now();
        let rt = crate::commands::runtime().unwrap();
        for (name, cmd, label) in [
            ("good", "true", None),
            ("failing", "echo SECRET-LINE >&2; exit 3", Some("db")),
        ] {
            let def = loops_runtime::client::LoopDefinition {
                name: name.into(),
                description: None,
                schedule: loops_core::Schedule::Interval {
                    every_ms: 300_000,
                    anchor: loops_core::Anchor::FixedRate,
                },
                target: loops_core::Target::Command(loops_core::CommandTarget {
                    command: cmd.into(),
                    args: vec![],
                    cwd: None,
                    shell: true,
                    env: Default::default(),
                    timeout: None,
                    idle_timeout: None,
                    account: None,
                }),
                policy: loops_core::Policy::default(),
                labels: label.into_iter().map(str::to_owned).collect(),
                notify: None,
            };
            client.create(def, now).unwrap();
            rt.block_on(client.run_now(name, false)).unwrap();
        }
        let feed = client.top(chrono::Utc::now()).unwrap();
        (dir, feed.data().clone())
    }

    #[test]
    fn rows_say_status_countdown_strip_health_and_redacted_errors() {
        let (_dir, data) = data();
        let now = chrono::Utc::now();
        let snap = snapshot(
            &data,
            &Filter::default(),
            Sort::Name,
            Glyphs::Ascii,
            false,
            now,
        );
        let names: Vec<&str> = snap.loops.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["failing", "good"]);
        let bad = &snap.loops[0];
        assert_eq!(bad.status, "active");
        assert_eq!(bad.schedule, "every 5m");
        assert!(bad.next.starts_with("in 4m"), "{}", bad.next);
        assert_eq!(bad.strip, "x");
        assert_eq!(bad.health, "warn");
        assert!(
            bad.reason.contains("exited with status 3"),
            "{}",
            bad.reason
        );
        assert_eq!(snap.loops[1].strip, "+");
        assert_eq!(snap.loops[1].health, "ok");
        assert_eq!(snap.failures.len(), 1);
        assert_eq!(snap.failures[0].error, "exited with status 3");
        let json = serde_json::to_string(&snap).unwrap();
        assert!(!json.contains("SECRET-LINE"), "{json}");

        let shown = snapshot(
            &data,
            &Filter::default(),
            Sort::Name,
            Glyphs::Unicode,
            true,
            now,
        );
        assert_eq!(shown.failures[0].error, "exited with status 3: SECRET-LINE");
        assert_eq!(shown.loops[0].strip, "✗");
    }

    #[test]
    fn filters_hide_and_sorts_order() {
        let (_dir, data) = data();
        let now = chrono::Utc::now();
        let only_db = snapshot(
            &data,
            &Filter("label:db".into()),
            Sort::Name,
            Glyphs::Ascii,
            false,
            now,
        );
        assert_eq!(only_db.loops.len(), 1);
        assert_eq!(only_db.hidden, 1);
        assert_eq!(only_db.failures.len(), 1);
        let good = snapshot(
            &data,
            &Filter("goo".into()),
            Sort::Name,
            Glyphs::Ascii,
            false,
            now,
        );
        assert_eq!(good.loops[0].name, "good");
        // A failing loop's failures go with it.
        assert!(good.failures.is_empty());
        let by_health = snapshot(
            &data,
            &Filter::default(),
            Sort::Health,
            Glyphs::Ascii,
            false,
            now,
        );
        assert_eq!(by_health.loops[0].name, "failing");
        let mut sort = Sort::Name;
        for _ in 0..4 {
            sort = sort.next();
        }
        assert_eq!(sort, Sort::Name);
    }

    #[test]
    fn selection_stays_inside_the_rows() {
        let mut ui = Ui::new(false);
        assert_eq!(ui.selection(Pane::Loops, 0), None);
        ui.move_by(5, 3);
        assert_eq!(ui.selection(Pane::Loops, 3), Some(2));
        ui.move_by(-10, 3);
        assert_eq!(ui.selection(Pane::Loops, 3), Some(0));
        ui.pane = ui.pane.next();
        ui.move_by(1, 2);
        assert_eq!(ui.selection(Pane::Running, 2), Some(1));
        assert_eq!(ui.selection(Pane::Running, 1), Some(0));
    }
}
