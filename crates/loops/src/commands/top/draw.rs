//! How `loops top` draws a [`Snapshot`]: a header, the loops, the runs in flight, the
//! recent failures (or a followed run's output), the prompt and the help line. Columns
//! are dropped as the terminal narrows; below 20×6 only a one-line notice is drawn.

use super::model::{Mode, Pane, Snapshot, Ui};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Row, Table, TableState};
use ratatui::Frame;

/// The help line.
pub const HELP: &str =
    "q quit  ↑↓ select  tab pane  p pause  r resume  n run now  a archive  o follow  / filter  s sort";
const HELP_ASCII: &str =
    "q quit  up/dn select  tab pane  p pause  r resume  n run now  a archive  o follow  / filter  s sort";

/// Smallest area drawn in full.
const MIN_WIDTH: u16 = 20;
const MIN_HEIGHT: u16 = 6;

pub fn draw(frame: &mut Frame, snap: &Snapshot, ui: &Ui, ascii: bool) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!("loops top: {}x{} is too small", area.width, area.height);
        frame.render_widget(Paragraph::new(text), area);
        return;
    }
    let following = matches!(ui.mode, Mode::Follow { .. });
    let runs_h = if following {
        0
    } else {
        pane_height(snap.running.len(), area.height)
    };
    let fails_h = if following {
        0
    } else {
        pane_height(snap.failures.len(), area.height)
    };
    let follow_h = if following { area.height / 2 } else { 0 };
    let [header, loops, runs, fails, follow, prompt, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(2),
        Constraint::Length(runs_h),
        Constraint::Length(fails_h),
        Constraint::Length(follow_h),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(frame, header, snap);
    draw_loops(frame, loops, snap, ui);
    if following {
        draw_follow(frame, follow, ui);
    } else {
        draw_runs(frame, runs, snap, ui, false);
        draw_runs(frame, fails, snap, ui, true);
    }
    draw_prompt(frame, prompt, snap, ui);
    let help_text = if ascii { HELP_ASCII } else { HELP };
    frame.render_widget(
        Paragraph::new(help_text).style(Style::default().add_modifier(Modifier::DIM)),
        help,
    );
}

/// A pane of runs: its title and up to 5 rows, less on a short terminal.
fn pane_height(rows: usize, height: u16) -> u16 {
    let most = if height >= 20 { 5 } else { 2 };
    1 + (rows.max(1) as u16).min(most)
}

fn colour(ui: &Ui, c: Color) -> Style {
    if ui.colour {
        Style::default().fg(c)
    } else {
        Style::default()
    }
}

fn draw_header(frame: &mut Frame, area: Rect, snap: &Snapshot) {
    let mut text = format!(
        "loops top  {} loops  {} running  sort {}",
        snap.loops.len(),
        snap.running.len(),
        snap.sort.as_str()
    );
    if !snap.filter.is_empty() {
        text.push_str(&format!(
            "  filter {:?} ({} hidden)",
            snap.filter, snap.hidden
        ));
    }
    frame.render_widget(
        Paragraph::new(text).style(Style::default().add_modifier(Modifier::BOLD)),
        area,
    );
}

/// The loops' columns that fit `width`, widest first dropped: reason, schedule, last
/// runs, health.
fn loop_columns(width: u16) -> Vec<(&'static str, Constraint)> {
    let mut cols = vec![
        ("NAME", Constraint::Min(10)),
        ("STATUS", Constraint::Length(10)),
        ("NEXT", Constraint::Length(10)),
    ];
    if width >= 40 {
        cols.push(("HEALTH", Constraint::Length(6)));
    }
    if width >= 56 {
        cols.push(("LAST", Constraint::Length(10)));
    }
    if width >= 76 {
        cols.push(("SCHEDULE", Constraint::Length(16)));
    }
    if width >= 110 {
        cols.push(("REASON", Constraint::Min(20)));
    }
    cols
}

fn draw_loops(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &Ui) {
    let cols = loop_columns(area.width);
    let header = Row::new(cols.iter().map(|(h, _)| *h))
        .style(Style::default().add_modifier(Modifier::UNDERLINED));
    let rows = snap.loops.iter().map(|row| {
        let cells = cols.iter().map(|(h, _)| {
            let (text, style) = match *h {
                "NAME" => (row.name.clone(), Style::default()),
                "STATUS" => (row.status.clone(), status_style(ui, &row.status)),
                "NEXT" => (row.next.clone(), Style::default()),
                "HEALTH" => (row.health.clone(), health_style(ui, &row.health)),
                "LAST" => (row.strip.clone(), Style::default()),
                "SCHEDULE" => (row.schedule.clone(), Style::default()),
                _ => (row.reason.clone(), Style::default()),
            };
            ratatui::widgets::Cell::from(text).style(style)
        });
        Row::new(cells)
    });
    let table = Table::new(rows, cols.iter().map(|(_, c)| *c))
        .header(header)
        .column_spacing(1)
        .row_highlight_style(highlight(ui, Pane::Loops));
    let mut state =
        TableState::default().with_selected(ui.selection(Pane::Loops, snap.loops.len()));
    frame.render_stateful_widget(table, area, &mut state);
    if snap.loops.is_empty() && area.height > 1 {
        let msg = if snap.hidden > 0 {
            "no loop matches the filter"
        } else {
            "no loops; create one with `loops create`"
        };
        let below = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        frame.render_widget(Paragraph::new(msg), below);
    }
}

fn highlight(ui: &Ui, pane: Pane) -> Style {
    if ui.pane == pane {
        Style::default().add_modifier(Modifier::REVERSED)
    } else {
        Style::default().add_modifier(Modifier::BOLD)
    }
}

fn status_style(ui: &Ui, status: &str) -> Style {
    let word = status.split(' ').next().unwrap_or("");
    match word {
        "active" => colour(ui, Color::Green),
        "paused" | "held" | "waiting" | "stopped" => colour(ui, Color::Yellow),
        "parked" | "expired" => colour(ui, Color::Red),
        _ => Style::default(),
    }
}

fn health_style(ui: &Ui, health: &str) -> Style {
    match health {
        "ok" => colour(ui, Color::Green),
        "warn" => colour(ui, Color::Yellow),
        "fail" => colour(ui, Color::Red),
        _ => Style::default(),
    }
}

fn draw_runs(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &Ui, failures: bool) {
    if area.height == 0 {
        return;
    }
    let (title, rows, pane) = if failures {
        ("FAILED RUN", &snap.failures, Pane::Failures)
    } else {
        ("RUNNING", &snap.running, Pane::Running)
    };
    let widths = [
        Constraint::Length(12),
        Constraint::Length(14),
        Constraint::Length(8),
        Constraint::Min(0),
    ];
    let header = Row::new(vec![
        title.to_owned(),
        "LOOP".to_owned(),
        if failures { "ENDED" } else { "ELAPSED" }.to_owned(),
        if failures { "ERROR" } else { "" }.to_owned(),
    ])
    .style(Style::default().add_modifier(Modifier::UNDERLINED));
    let lines = rows.iter().map(|r| {
        let status = if failures {
            // The error says what happened (`exited with status 3`, `timed out after
            // 5s`); the status word only when there is none.
            ratatui::widgets::Cell::from(if r.error.is_empty() {
                r.status.clone()
            } else {
                r.error.clone()
            })
        } else {
            ratatui::widgets::Cell::from("")
        };
        Row::new(vec![
            ratatui::widgets::Cell::from(r.id.clone()),
            ratatui::widgets::Cell::from(r.loop_name.clone()),
            ratatui::widgets::Cell::from(r.when.clone()),
            status.style(if failures {
                colour(ui, Color::Red)
            } else {
                Style::default()
            }),
        ])
    });
    let table = Table::new(lines, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(highlight(ui, pane));
    let selected = if ui.pane == pane {
        ui.selection(pane, rows.len())
    } else {
        None
    };
    let mut state = TableState::default().with_selected(selected);
    frame.render_stateful_widget(table, area, &mut state);
    if rows.is_empty() && area.height > 1 {
        let below = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        let none = if failures {
            "none"
        } else {
            "nothing in flight"
        };
        frame.render_widget(Paragraph::new(none), below);
    }
}

fn draw_follow(frame: &mut Frame, area: Rect, ui: &Ui) {
    let Mode::Follow {
        run,
        loop_name,
        lines,
        ended,
    } = &ui.mode
    else {
        return;
    };
    if area.height == 0 {
        return;
    }
    let title = match ended {
        Some(end) => format!("OUTPUT of run {run} ({loop_name}): {end}  esc back"),
        None => format!("OUTPUT of run {run} ({loop_name}), following  esc back"),
    };
    let room = usize::from(area.height.saturating_sub(1));
    let start = lines.len().saturating_sub(room);
    let mut text = vec![Line::from(Span::styled(
        title,
        Style::default().add_modifier(Modifier::UNDERLINED),
    ))];
    text.extend(lines[start..].iter().map(|l| Line::from(l.as_str())));
    frame.render_widget(Paragraph::new(text), area);
}

fn draw_prompt(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &Ui) {
    let text = match &ui.mode {
        Mode::Filtering => format!(
            "filter (name, label:X, status:X; enter keeps, esc clears): {}",
            snap.filter
        ),
        Mode::ConfirmArchive { name, .. } => {
            format!("archive loop {name}? y archives, any other key keeps it")
        }
        _ => ui.message.clone().unwrap_or_default(),
    };
    let style = match &ui.mode {
        Mode::ConfirmArchive { .. } => colour(ui, Color::Yellow).add_modifier(Modifier::BOLD),
        _ => Style::default(),
    };
    frame.render_widget(Paragraph::new(text).style(style), area);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::model::{LoopRow, RunRow, Snapshot, Sort};
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn snap() -> Snapshot {
        let row = |name: &str, status: &str, health: &str| LoopRow {
            id: "aaaaaaaaaaaa".into(),
            name: name.into(),
            status: status.into(),
            schedule: "every 5m".into(),
            next: "in 4m12s".into(),
            next_run_at: None,
            strip: "✓✓✗✓".into(),
            health: health.into(),
            reason: "last run failed: exited with status 3".into(),
            labels: vec![],
        };
        Snapshot {
            at: chrono::Utc::now(),
            filter: String::new(),
            sort: Sort::Name,
            loops: vec![
                row("backup", "active", "ok"),
                row("report", "parked", "fail"),
                row("sync", "held 14:05", "warn"),
            ],
            running: vec![RunRow {
                id: "bbbbbbbbbbbb".into(),
                loop_name: "backup".into(),
                status: "running".into(),
                when: "12s".into(),
                error: String::new(),
            }],
            failures: vec![RunRow {
                id: "cccccccccccc".into(),
                loop_name: "report".into(),
                status: "failed".into(),
                when: "3m ago".into(),
                error: "exited with status 3".into(),
            }],
            hidden: 0,
            event: 7,
        }
    }

    fn screen(w: u16, h: u16, snap: &Snapshot, ui: &Ui) -> String {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, snap, ui, false)).unwrap();
        let buf = term.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..h {
            for x in 0..w {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn everything_fits_80_by_24() {
        let text = screen(80, 24, &snap(), &Ui::new(true));
        for want in [
            "loops top  3 loops  1 running",
            "backup",
            "parked",
            "held 14:05",
            "in 4m12s",
            "✓✓✗✓",
            "every 5m",
            "bbbbbbbbbbbb",
            "12s",
            "cccccccccccc",
            "exited with status 3",
            "q quit",
        ] {
            assert!(text.contains(want), "{want:?} not on\n{text}");
        }
        // The reason column needs a wider terminal.
        assert!(!text.contains("last run failed"), "{text}");
        let wide = screen(140, 30, &snap(), &Ui::new(true));
        assert!(wide.contains("last run failed"), "{wide}");
    }

    #[test]
    fn narrow_and_tiny_terminals_drop_columns_and_never_panic() {
        let narrow = screen(40, 12, &snap(), &Ui::new(false));
        assert!(narrow.contains("backup"));
        assert!(!narrow.contains("every 5m"));
        for (w, h) in [(0, 0), (1, 1), (5, 3), (19, 40), (200, 5), (20, 6), (30, 7)] {
            let _ = screen(w, h, &snap(), &Ui::new(true));
        }
        assert!(screen(10, 3, &snap(), &Ui::new(true)).contains("loops top"));
    }

    #[test]
    fn archive_asks_and_follow_shows_output() {
        let mut ui = Ui::new(true);
        ui.mode = Mode::ConfirmArchive {
            id: "aaaaaaaaaaaa".into(),
            name: "backup".into(),
        };
        assert!(screen(80, 24, &snap(), &ui).contains("archive loop backup? y archives"));
        ui.mode = Mode::Follow {
            run: "bbbbbbbbbbbb".into(),
            loop_name: "backup".into(),
            lines: vec!["hello from the run".into()],
            ended: None,
        };
        let text = screen(80, 24, &snap(), &ui);
        assert!(text.contains("OUTPUT of run bbbbbbbbbbbb"), "{text}");
        assert!(text.contains("hello from the run"));
    }

    #[test]
    fn no_colour_draws_no_colour() {
        let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
        term.draw(|f| draw(f, &snap(), &Ui::new(false), false))
            .unwrap();
        let buf = term.backend().buffer();
        for cell in buf.content() {
            assert_eq!(cell.fg, Color::Reset);
            assert_eq!(cell.bg, Color::Reset);
        }
    }
}
