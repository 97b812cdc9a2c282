//! `loops top`: a live full-screen view of the loops, the runs in flight and the recent
//! failures (README, "Live view: loops top"). The data comes from the runtime's
//! [`TopFeed`](loops_runtime::client::TopFeed): read whole once, then kept current from
//! the store's event log; a timer only moves the countdowns. `model` says what is
//! shown, `draw` draws it (ratatui); this module owns the terminal and the keys.
//!
//! The terminal is restored on every way out: a guard leaves the alternate screen and
//! raw mode when the loop ends (q, Ctrl-C, an error), a panic hook does the same
//! before the panic's message is printed, and SIGTERM, SIGHUP (the SSH session closed)
//! and SIGQUIT end the loop, restore the terminal, then end the process by that signal.

mod draw;
mod model;

use super::{runtime, Context};
use crate::exit::Exit;
use crate::output::write_stdout_bytes;
use crate::Failure;
use clap::Args;
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, terminal};
use loops_runtime::client::{Client, TopFeed};
use loops_runtime::live::{OutputFollow, OutputPiece, Stream, OUTPUT_POLL};
use model::{Filter, Glyphs, Mode, Pane, Snapshot, Sort, Ui};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant as Clock};

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Start with this filter: words that must all match (part of the name,
    /// label:NAME, status:WORD).
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// Order of the loops: name, next, health or status.
    #[arg(long, value_name = "KEY")]
    pub sort: Option<String>,
    /// Show what failed runs quoted from their output in their error lines.
    #[arg(long)]
    pub show_output: bool,
    /// Print one snapshot and exit (with --json, the view's model as JSON); needs no
    /// terminal.
    #[arg(long)]
    pub once: bool,
}

/// How often the event log is read (one primary-key probe when nothing happened).
const EVENTS_POLL: Duration = Duration::from_millis(250);
/// How often the time-only health rules are applied again (no store read).
const REASSESS: Duration = Duration::from_secs(5);
/// Lines of a followed run's output kept on screen.
const FOLLOW_LINES: usize = 1_000;

pub fn run(ctx: &Context, args: TopArgs) -> Result<Exit, Failure> {
    let sort = match args.sort.as_deref() {
        None | Some("name") => Sort::Name,
        Some("next") => Sort::Next,
        Some("health") => Sort::Health,
        Some("status") => Sort::Status,
        Some(other) => {
            return Err(Failure::usage(format!(
                "--sort {other:?}: expected name, next, health or status"
            )))
        }
    };
    let filter = Filter(args.filter.clone().unwrap_or_default());
    let glyphs = Glyphs::from_env();
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if !args.once && !terminal {
        return Err(Failure::usage(
            "loops top needs a terminal (stdin and stdout); for scripts use `loops --json list` or `loops top --once --json`",
        ));
    }
    let client = ctx.client()?;
    let feed = client.top(chrono::Utc::now())?;
    if args.once {
        let snap = model::snapshot(
            feed.data(),
            &filter,
            sort,
            glyphs,
            args.show_output,
            chrono::Utc::now(),
        );
        return once(ctx, &snap, glyphs);
    }
    // Noted here, acted on by the loop: a signal handler may not touch the terminal.
    let signalled = Arc::new(AtomicUsize::new(0));
    for signal in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ] {
        signal_hook::flag::register_usize(signal, Arc::clone(&signalled), signal as usize)
            .map_err(|e| Failure::failed(format!("cannot handle signal {signal}: {e}")))?;
    }
    let colour = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let mut app = App {
        client,
        feed,
        filter,
        sort,
        glyphs,
        reveal: args.show_output,
        ui: Ui::new(colour),
        follow: None,
        partial: String::new(),
        done: mpsc::channel(),
        failing: false,
        signalled: Arc::clone(&signalled),
    };
    let restore = Restore::enter()?;
    let mut term = Terminal::new(CrosstermBackend::new(std::io::stdout()))
        .map_err(|e| Failure::failed(format!("cannot draw on the terminal: {e}")))?;
    app.run(&mut term)?;
    drop(term);
    drop(restore);
    let signal = signalled.load(Ordering::SeqCst);
    if signal != 0 {
        // The terminal is back; now end as the signal would have, so a parent (a shell,
        // sshd, a supervisor) sees what ended us.
        if let Ok(signal) = i32::try_from(signal) {
            let _ = signal_hook::low_level::emulate_default_handler(signal);
        }
        return Ok(Exit::Failed);
    }
    Ok(Exit::Success)
}

/// `--once`: one snapshot, as JSON or as the screen drawn at the terminal's size (80×24
/// when not a terminal).
fn once(ctx: &Context, snap: &Snapshot, glyphs: Glyphs) -> Result<Exit, Failure> {
    if ctx.json {
        crate::output::print_json(snap)?;
        return Ok(Exit::Success);
    }
    let (w, h) = terminal::size()
        .ok()
        .filter(|_| std::io::stdout().is_terminal())
        .unwrap_or((80, 24));
    let mut term = Terminal::new(ratatui::backend::TestBackend::new(w, h))
        .map_err(|e| Failure::failed(format!("cannot draw: {e}")))?;
    term.draw(|f| draw::draw(f, snap, &Ui::new(false), glyphs == Glyphs::Ascii))
        .map_err(|e| Failure::failed(format!("cannot draw: {e}")))?;
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..h {
        let mut line = String::new();
        for x in 0..w {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    write_stdout_bytes(out.trim_end().as_bytes())?;
    write_stdout_bytes(b"\n")?;
    Ok(Exit::Success)
}

/// Leaves the alternate screen and raw mode (and shows the cursor) when dropped, and on
/// a panic before its message is printed.
struct Restore;

impl Restore {
    fn enter() -> Result<Self, Failure> {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            leave();
            hook(info);
        }));
        terminal::enable_raw_mode()
            .map_err(|e| Failure::failed(format!("cannot put the terminal in raw mode: {e}")))?;
        let entered = execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        );
        if let Err(e) = entered {
            leave();
            return Err(Failure::failed(format!(
                "cannot open the terminal's alternate screen: {e}"
            )));
        }
        Ok(Restore)
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        leave();
    }
}

/// Back to the shell's screen: best effort, never fails.
fn leave() {
    let _ = execute!(
        std::io::stdout(),
        cursor::Show,
        terminal::LeaveAlternateScreen
    );
    let _ = terminal::disable_raw_mode();
}

struct App {
    client: Client,
    feed: TopFeed,
    filter: Filter,
    sort: Sort,
    glyphs: Glyphs,
    reveal: bool,
    ui: Ui,
    follow: Option<OutputFollow>,
    /// A followed run's last line, until its newline comes.
    partial: String,
    /// Messages of `run now`s ending in the background.
    done: (mpsc::Sender<String>, mpsc::Receiver<String>),
    /// The last poll of the event log failed.
    failing: bool,
    /// The number of a terminating signal received (0: none).
    signalled: Arc<AtomicUsize>,
}

impl App {
    fn snapshot(&self) -> Snapshot {
        model::snapshot(
            self.feed.data(),
            &self.filter,
            self.sort,
            self.glyphs,
            self.reveal,
            chrono::Utc::now(),
        )
    }

    fn run<B: ratatui::backend::Backend>(&mut self, term: &mut Terminal<B>) -> Result<(), Failure>
    where
        B::Error: std::fmt::Display,
    {
        let mut last_events = Clock::now();
        let mut last_reassess = Clock::now();
        let mut last_follow = Clock::now();
        loop {
            let snap = self.snapshot();
            let ascii = self.glyphs == Glyphs::Ascii;
            term.draw(|f| draw::draw(f, &snap, &self.ui, ascii))
                .map_err(|e| Failure::failed(format!("cannot draw on the terminal: {e}")))?;
            // The e2e tests' way to prove a panic restores the terminal (debug builds).
            #[cfg(debug_assertions)]
            if std::env::var_os("LOOPS_TEST_TOP_PANIC").is_some() {
                panic!("LOOPS_TEST_TOP_PANIC");
            }
            let wait = if self.follow.is_some() {
                OUTPUT_POLL
            } else {
                EVENTS_POLL
            };
            if event::poll(wait)
                .map_err(|e| Failure::failed(format!("cannot read the terminal: {e}")))?
            {
                let ev = event::read()
                    .map_err(|e| Failure::failed(format!("cannot read the terminal: {e}")))?;
                if let Event::Key(key) = ev {
                    if key.kind != KeyEventKind::Release && self.key(key, &snap)? {
                        return Ok(());
                    }
                }
            }
            if self.signalled.load(Ordering::SeqCst) != 0 {
                return Ok(());
            }
            while let Ok(message) = self.done.1.try_recv() {
                self.ui.message = Some(message);
            }
            let now = chrono::Utc::now();
            if last_events.elapsed() >= EVENTS_POLL {
                // A store that cannot be read for a moment (busy, being replaced) is
                // said on the message line and read again at the next poll.
                match self.feed.poll(now) {
                    Ok(_) if self.failing => {
                        self.failing = false;
                        self.ui.message = Some("reading the store works again".to_owned());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.failing = true;
                        self.ui.message = Some(
                            crate::output::one_line(&format!(
                                "cannot read the store: {e}; retrying"
                            ))
                            .into_owned(),
                        );
                    }
                }
                last_events = Clock::now();
            }
            if last_reassess.elapsed() >= REASSESS {
                self.feed.reassess(now);
                last_reassess = Clock::now();
            }
            if self.follow.is_some() && last_follow.elapsed() >= OUTPUT_POLL {
                self.follow_step()?;
                last_follow = Clock::now();
            }
        }
    }

    /// Handles a key; true to quit.
    fn key(&mut self, key: KeyEvent, snap: &Snapshot) -> Result<bool, Failure> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return Ok(true);
        }
        match self.ui.mode.clone() {
            Mode::Filtering => {
                match key.code {
                    KeyCode::Enter => self.ui.mode = Mode::Normal,
                    KeyCode::Esc => {
                        self.filter.0.clear();
                        self.ui.mode = Mode::Normal;
                    }
                    KeyCode::Backspace => {
                        self.filter.0.pop();
                    }
                    KeyCode::Char(c) if !ctrl => self.filter.0.push(c),
                    _ => {}
                }
                self.ui.selected[0] = 0;
                return Ok(false);
            }
            Mode::ConfirmArchive { id, name } => {
                self.ui.mode = Mode::Normal;
                self.ui.message = Some(if key.code == KeyCode::Char('y') {
                    match self.client.archive(&id, false, chrono::Utc::now()) {
                        Ok(_) => format!("archived {name}"),
                        Err(e) => format!("cannot archive {name}: {e}"),
                    }
                } else {
                    format!("kept {name}")
                });
                return Ok(false);
            }
            Mode::Follow { .. } => {
                if matches!(key.code, KeyCode::Esc | KeyCode::Char('o')) {
                    self.ui.mode = Mode::Normal;
                    self.follow = None;
                    return Ok(false);
                }
                if key.code == KeyCode::Char('q') {
                    return Ok(true);
                }
                return Ok(false);
            }
            Mode::Normal => {}
        }
        let len = match self.ui.pane {
            Pane::Loops => snap.loops.len(),
            Pane::Running => snap.running.len(),
            Pane::Failures => snap.failures.len(),
        };
        let selected = model::selected_loop(snap, &self.ui).map(|l| (l.id.clone(), l.name.clone()));
        let now = chrono::Utc::now();
        match key.code {
            KeyCode::Char('q') => return Ok(true),
            KeyCode::Down | KeyCode::Char('j') => self.ui.move_by(1, len),
            KeyCode::Up | KeyCode::Char('k') => self.ui.move_by(-1, len),
            KeyCode::PageDown => self.ui.move_by(10, len),
            KeyCode::PageUp => self.ui.move_by(-10, len),
            KeyCode::Tab => self.ui.pane = self.ui.pane.next(),
            KeyCode::Char('/') => self.ui.mode = Mode::Filtering,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('p') => {
                if let Some((id, name)) = selected {
                    self.ui.message = Some(match self.client.pause(&id, now) {
                        Ok(_) => format!("paused {name}"),
                        Err(e) => format!("cannot pause {name}: {e}"),
                    });
                }
            }
            KeyCode::Char('r') => {
                if let Some((id, name)) = selected {
                    self.ui.message = Some(match self.client.resume(&id, now) {
                        Ok(_) => format!("resumed {name}"),
                        Err(e) => format!("cannot resume {name}: {e}"),
                    });
                }
            }
            KeyCode::Char('a') => {
                if let Some((id, name)) = selected {
                    self.ui.mode = Mode::ConfirmArchive { id, name };
                }
            }
            KeyCode::Char('n') => {
                if let Some((id, name)) = selected {
                    self.run_now(id, name);
                }
            }
            KeyCode::Char('o') | KeyCode::Enter => match model::selected_run(snap, &self.ui) {
                Some((run, loop_name)) => self.start_follow(&run, loop_name)?,
                None => {
                    self.ui.message =
                        Some("no run selected (tab moves to the runs in flight)".to_owned())
                }
            },
            _ => {}
        }
        Ok(false)
    }

    /// `n`: runs the loop here, as `loops run-now` does, in the background; its end is
    /// reported on the message line (quitting `top` interrupts it).
    fn run_now(&mut self, id: String, name: String) {
        let client = self.client.clone();
        let tx = self.done.0.clone();
        self.ui.message = Some(format!("running {name} now"));
        std::thread::spawn(move || {
            let message = match runtime() {
                Ok(rt) => match rt.block_on(client.run_now(&id, false)) {
                    Ok(outcome) => format!(
                        "run {} of {name}: {}{}",
                        outcome.run.id,
                        outcome.run.status,
                        outcome
                            .run
                            .error
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    ),
                    Err(e) => format!("cannot run {name} now: {e}"),
                },
                Err(e) => format!("cannot run {name} now: {e}"),
            };
            let _ = tx.send(crate::output::one_line(&message).into_owned());
        });
    }

    fn start_follow(&mut self, run: &str, loop_name: String) -> Result<(), Failure> {
        let found = self.client.get_run(run)?;
        self.follow = Some(self.client.follow_output(&found, Stream::Stdout));
        self.partial.clear();
        self.ui.mode = Mode::Follow {
            run: run.to_owned(),
            loop_name,
            lines: Vec::new(),
            ended: None,
        };
        self.follow_step()
    }

    /// Reads what the followed run wrote since the last look.
    fn follow_step(&mut self) -> Result<(), Failure> {
        let Some(follow) = self.follow.as_mut() else {
            return Ok(());
        };
        let step = follow.poll()?;
        let Mode::Follow { lines, ended, .. } = &mut self.ui.mode else {
            return Ok(());
        };
        for piece in step.pieces {
            match piece {
                OutputPiece::Gap(n) => {
                    lines.push(format!("[truncated {n} bytes]"));
                }
                OutputPiece::Bytes(bytes) => {
                    self.partial.push_str(&String::from_utf8_lossy(&bytes));
                    while let Some(at) = self.partial.find('\n') {
                        let line: String = self.partial.drain(..=at).collect();
                        lines.push(
                            crate::output::one_line(line.trim_end_matches(['\n', '\r']))
                                .into_owned(),
                        );
                    }
                }
            }
        }
        if let Some(run) = step.ended {
            if !self.partial.is_empty() {
                lines
                    .push(crate::output::one_line(&std::mem::take(&mut self.partial)).into_owned());
            }
            *ended = Some(run.status.to_string());
            self.follow = None;
        }
        let extra = lines.len().saturating_sub(FOLLOW_LINES);
        lines.drain(..extra);
        Ok(())
    }
}
