//! `loops top` (#23 item 2) through a pseudo-terminal (`expectrl`), against a real store
//! and a real daemon; what it drew is read back as a screen with `vt100` (ratatui only
//! redraws the cells that changed, so the raw bytes alone do not say what is shown).

use crate::util::{wait_for, World};
use expectrl::session::OsSession;
use std::io::Write as _;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(20);
/// Leaving the alternate screen: the last thing `top` writes on every way out.
const LEAVE_ALT_SCREEN: &[u8] = b"\x1b[?1049l";

/// `loops top` running in an 80×24 pseudo-terminal.
struct Top {
    session: OsSession,
    screen: vt100::Parser,
    raw: Vec<u8>,
}

impl Top {
    fn start(w: &World, args: &[&str], colour: bool) -> Self {
        Self::start_with(w, args, colour, &[])
    }

    fn start_with(w: &World, args: &[&str], colour: bool, env: &[(&str, &str)]) -> Self {
        let mut all = vec!["top"];
        all.extend_from_slice(args);
        let mut cmd = w.cmd(&all);
        // The pty is stdin, stdout and stderr.
        cmd.stdin(std::process::Stdio::inherit())
            .env("TERM", "xterm-256color")
            .env("LANG", "C.UTF-8");
        if colour {
            cmd.env_remove("NO_COLOR");
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut session = OsSession::spawn(cmd).expect("spawn loops top in a pty");
        session
            .get_process_mut()
            .set_window_size(80, 24)
            .expect("window size");
        Self {
            session,
            screen: vt100::Parser::new(
                std::num::NonZeroU16::new(24).expect("rows"),
                std::num::NonZeroU16::new(80).expect("columns"),
                0,
            ),
            raw: Vec::new(),
        }
    }

    /// Reads what `top` wrote so far (without blocking).
    fn pump(&mut self) {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.session.try_read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    self.screen.process(&buf[..n]);
                    self.raw.extend_from_slice(&buf[..n]);
                }
                Err(_) => return,
            }
        }
    }

    fn text(&self) -> String {
        self.screen.screen().contents()
    }

    /// Waits until the screen satisfies `cond`; returns it.
    fn wait_screen(&mut self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(what, DEADLINE, || {
                self.pump();
                last = self.text();
                cond(&last).then(|| last.clone())
            })
        }));
        match found {
            Ok(text) => text,
            Err(_) => panic!("timed out waiting for {what}; the screen:\n{last}"),
        }
    }

    fn keys(&mut self, keys: &str) {
        self.session.write_all(keys.as_bytes()).expect("send keys");
        self.session.flush().expect("flush keys");
    }

    /// Waits for the process to exit; its exit code.
    fn wait_exit(&mut self) -> i32 {
        use expectrl::process::unix::WaitStatus;
        let code = wait_for("loops top to exit", DEADLINE, || {
            self.pump();
            match self.session.get_process().status() {
                Ok(WaitStatus::Exited(_, code)) => Some(code),
                Ok(WaitStatus::Signaled(_, sig, _)) => Some(128 + sig as i32),
                _ => None,
            }
        });
        self.pump();
        code
    }
}

/// The SGR sequences in `raw` that set a colour (`ESC [ 3x m`, `ESC [ 38;5;N m`, …;
/// the defaults `39` and `49` are no colour).
fn colour_sequences(raw: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(raw);
    let mut found = Vec::new();
    for part in text.split("\x1b[").skip(1) {
        let Some(end) = part.find(|c: char| !(c.is_ascii_digit() || c == ';')) else {
            continue;
        };
        if !part[end..].starts_with('m') {
            continue;
        }
        let params = &part[..end];
        let colour = params.split(';').any(|p| {
            matches!(p.len(), 2 | 3)
                && (p.starts_with('3')
                    || p.starts_with('4')
                    || p.starts_with('9')
                    || p.starts_with("10"))
                && p != "39"
                && p != "49"
        });
        if colour {
            found.push(format!("ESC[{params}m"));
        }
    }
    found.sort();
    found.dedup();
    found
}

fn status(w: &World, name: &str) -> String {
    w.json(&["show", name])["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn top_follows_the_event_log_and_pauses_and_archives_with_a_confirm() {
    let w = World::new();
    w.create_cmd("early-bird", &["--every", "1h"], "true");
    let _daemon = w.daemon_ready(&[]);
    let mut top = Top::start(&w, &[], false);
    let screen = top.wait_screen("the loop created before start", |s| {
        s.contains("early-bird") && s.contains("q quit")
    });
    assert!(screen.contains("every 1h"), "{screen}");
    // Created while top runs: the event log brings it.
    w.create_cmd("night-owl", &["--every", "2h"], "true");
    top.wait_screen("the loop created while running", |s| {
        s.contains("night-owl")
    });

    // Filter down to it, pause it.
    top.keys("/night");
    top.wait_screen("the filter prompt", |s| {
        s.contains("filter") && s.contains("night")
    });
    top.keys("\r");
    top.wait_screen("early-bird filtered out", |s| !s.contains("early-bird"));
    top.keys("p");
    wait_for("night-owl paused", DEADLINE, || {
        (status(&w, "night-owl") == "paused").then_some(())
    });
    top.wait_screen("the pause on screen", |s| {
        s.contains("paused night-owl") && s.contains("paused")
    });
    assert_eq!(status(&w, "early-bird"), "active");

    // Archive asks first; anything but y keeps the loop.
    top.keys("a");
    top.wait_screen("the archive confirm", |s| {
        s.contains("archive loop night-owl? y archives")
    });
    top.keys("n");
    top.wait_screen("kept", |s| s.contains("kept night-owl"));
    assert_eq!(status(&w, "night-owl"), "paused");
    top.keys("a");
    top.wait_screen("the archive confirm again", |s| {
        s.contains("archive loop night-owl?")
    });
    top.keys("y");
    top.wait_screen("archived", |s| s.contains("archived night-owl"));
    assert_eq!(status(&w, "night-owl"), "archived");

    top.keys("q");
    assert_eq!(top.wait_exit(), 0);
    assert!(
        top.raw.ends_with(LEAVE_ALT_SCREEN),
        "the terminal was not restored: {:?}",
        String::from_utf8_lossy(&top.raw[top.raw.len().saturating_sub(80)..])
    );
    // NO_COLOR: no colour sequence (ESC [ 3x m / ESC [ 3x; …) was ever drawn.
    let colours = colour_sequences(&top.raw);
    assert!(
        colours.is_empty(),
        "colour drawn under NO_COLOR: {colours:?}"
    );
}

#[test]
fn top_runs_in_80_by_24_with_colour_and_exits_on_ctrl_c() {
    let w = World::new();
    for i in 0..30 {
        w.create_cmd(&format!("loop-{i:02}"), &["--every", "1h"], "true");
    }
    let mut top = Top::start(&w, &[], true);
    let screen = top.wait_screen("the loops", |s| {
        s.contains("loop-00") && s.contains("q quit")
    });
    // 80 columns: the schedule fits, the reason column is dropped.
    assert!(screen.contains("SCHEDULE"), "{screen}");
    assert!(!screen.contains("REASON"), "{screen}");
    assert_eq!(
        top.session.get_process().get_window_size().unwrap(),
        (80, 24)
    );
    let colours = colour_sequences(&top.raw);
    assert!(!colours.is_empty(), "no colour without NO_COLOR");
    top.keys("\x03");
    assert_eq!(top.wait_exit(), 0);
    assert!(top.raw.ends_with(LEAVE_ALT_SCREEN));
}

#[test]
fn top_redacts_what_a_failure_quoted_from_its_output() {
    let w = World::new();
    w.create_cmd(
        "leaky",
        &["--every", "1h"],
        "echo 'TOKEN42 is wrong' >&2; exit 3",
    );
    let _ = w.run(&["run-now", "leaky"]);
    let mut top = Top::start(&w, &[], false);
    let screen = top.wait_screen("the failure", |s| s.contains("exited with status 3"));
    assert!(!screen.contains("TOKEN42"), "{screen}");
    top.keys("q");
    assert_eq!(top.wait_exit(), 0);
    assert!(!String::from_utf8_lossy(&top.raw).contains("TOKEN42"));

    // --show-output shows it; so does the snapshot's JSON, only then.
    let mut top = Top::start(&w, &["--show-output"], false);
    top.wait_screen("the quoted output", |s| s.contains("TOKEN42"));
    top.keys("q");
    assert_eq!(top.wait_exit(), 0);
    let snap = w.json(&["top", "--once"]);
    assert_eq!(snap["failures"][0]["error"], "exited with status 3");
    let shown = w.json(&["top", "--once", "--show-output"]);
    assert!(shown["failures"][0]["error"]
        .as_str()
        .unwrap()
        .contains("TOKEN42"));
}

#[test]
fn top_needs_a_terminal_and_once_needs_none() {
    let w = World::new();
    w.create_cmd("hello", &["--every", "5m"], "true");
    let (code, err) = w.fail(&["top"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("loops --json list"), "{err}");
    let snap = w.json(&["top", "--once"]);
    assert_eq!(snap["loops"][0]["name"], "hello");
    assert_eq!(snap["loops"][0]["status"], "active");
    assert_eq!(snap["loops"][0]["schedule"], "every 5m");
    assert!(snap["loops"][0]["next"]
        .as_str()
        .unwrap()
        .starts_with("in "));
    let text = w.ok(&["top", "--once"]);
    assert!(text.contains("hello"), "{text}");
}

#[test]
fn top_runs_a_loop_now_shows_it_in_flight_and_follows_its_output() {
    let w = World::new();
    w.create_cmd(
        "talker",
        &["--every", "1h"],
        "echo hello-from-talker; sleep 30",
    );
    let _daemon = w.daemon_ready(&[]);
    let mut top = Top::start(&w, &[], false);
    top.wait_screen("the loop", |s| {
        s.contains("talker") && s.contains("nothing in flight")
    });
    top.keys("n");
    let screen = top.wait_screen("the run in flight", |s| {
        s.contains("1 running") && s.lines().any(|l| l.contains("talker") && l.ends_with("s"))
    });
    assert!(screen.contains("running"), "{screen}");
    // o on the loop follows its run in flight, as `loops logs --follow` does.
    top.keys("o");
    top.wait_screen("the run's output", |s| {
        s.contains("OUTPUT of run") && s.contains("hello-from-talker")
    });
    top.keys("\x1b");
    top.wait_screen("back to the panes", |s| s.contains("RUNNING"));
    top.keys("q");
    assert_eq!(top.wait_exit(), 0);
    assert!(top.raw.ends_with(LEAVE_ALT_SCREEN));
}

#[test]
fn a_panic_leaves_the_terminal_restored() {
    let w = World::new();
    w.create_cmd("hello", &["--every", "5m"], "true");
    let mut top = Top::start_with(&w, &[], false, &[("LOOPS_TEST_TOP_PANIC", "1")]);
    let code = top.wait_exit();
    assert_eq!(code, 101, "{}", String::from_utf8_lossy(&top.raw));
    let raw = String::from_utf8_lossy(&top.raw);
    let left = raw
        .find("\x1b[?1049l")
        .expect("the alternate screen was left");
    let message = raw
        .find("LOOPS_TEST_TOP_PANIC")
        .expect("the panic's message");
    assert!(
        left < message,
        "the message was printed on the alternate screen: {raw:?}"
    );
    // Raw mode is off too: the message's newline came out as CR LF (the pty's output
    // processing, which raw mode turns off).
    assert!(raw[message..].contains("\r\n"), "{raw:?}");
}

/// SIGTERM (a `kill`) and SIGHUP (the SSH session closed) end `top` the same way: the
/// terminal is restored first, then the process ends by that signal.
#[test]
fn a_terminating_signal_restores_the_terminal_then_ends_top_by_it() {
    use nix::sys::signal::{kill, Signal};
    let w = World::new();
    w.create_cmd("signalled", &["--every", "5m"], "true");
    for signal in [Signal::SIGTERM, Signal::SIGHUP] {
        let mut top = Top::start(&w, &[], false);
        top.wait_screen("the first frame", |s| s.contains("signalled"));
        let drawn = top.raw.len();
        kill(
            nix::unistd::Pid::from_raw(top.session.get_process().pid().as_raw()),
            signal,
        )
        .expect("signal loops top");
        let code = top.wait_exit();
        assert_eq!(
            code,
            128 + signal as i32,
            "{signal}: {}",
            String::from_utf8_lossy(&top.raw)
        );
        let after = &top.raw[drawn..];
        let left = after
            .windows(LEAVE_ALT_SCREEN.len())
            .position(|w| w == LEAVE_ALT_SCREEN);
        assert!(
            left.is_some(),
            "{signal}: the alternate screen was not left: {:?}",
            String::from_utf8_lossy(after)
        );
        assert!(
            String::from_utf8_lossy(after).contains("\x1b[?25h"),
            "{signal}: the cursor was not shown again"
        );
    }
}
