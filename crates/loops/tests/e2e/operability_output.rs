//! Issue #11 item 7, live output: `loops logs` (a running run's spooled output as it
//! is written, a finished run's as stored), `runs --follow`, the daemon's per-run log
//! lines at the default level, and a failed run's stderr hint in the `runs` table.

use crate::util::{wait_for, World};
use serde_json::Value;
use std::io::Read;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A child whose stdout goes to a file, read while it runs.
struct Tail {
    child: Child,
    out: std::path::PathBuf,
}

impl Tail {
    fn spawn(w: &World, args: &[&str]) -> Self {
        let out = w
            .root
            .path()
            .join(format!("tail-{}.out", std::process::id() ^ rand_suffix()));
        let file = std::fs::File::create(&out).unwrap();
        let child = w
            .cmd(args)
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn loops");
        Self { child, out }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits for the child to exit by itself; returns its exit code and output.
    fn wait(mut self, timeout: Duration) -> (Option<i32>, String) {
        let code = wait_for("the command to end", timeout, || {
            self.child.try_wait().unwrap().map(|s| s.code())
        });
        (code, self.text())
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rand_suffix() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(1);
    N.fetch_add(1, Ordering::SeqCst) << 16
}

/// Starts `run-now` of `lp` in the background and waits until its run is running.
fn start_run(w: &World, lp: &str) -> (Child, String) {
    let child = w
        .cmd(&["run-now", lp])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn run-now");
    let id = wait_for("the run to start", Duration::from_secs(10), || {
        w.runs(lp)
            .into_iter()
            .find(|r| r["status"] == "running")
            .and_then(|r| r["id"].as_str().map(str::to_owned))
    });
    (child, id)
}

#[test]
fn logs_follow_prints_a_running_runs_output_once_as_it_is_written() {
    let w = World::new();
    w.create_cmd(
        "talker",
        &["--every", "1h"],
        "for i in 1 2 3 4; do echo line$i; echo err$i >&2; sleep 0.4; done; echo done",
    );
    let (mut run_now, id) = start_run(&w, "talker");
    let follow = Tail::spawn(&w, &["logs", &id[..6], "--follow"]);
    let errs = Tail::spawn(&w, &["logs", &id, "--follow", "--stderr"]);
    // Output arrives while the run is still running.
    wait_for("live output", Duration::from_secs(10), || {
        follow.text().contains("line1").then_some(())
    });
    assert_eq!(w.runs("talker")[0]["status"], "running");
    let (code, out) = follow.wait(Duration::from_secs(20));
    assert_eq!(code, Some(0));
    assert_eq!(
        out, "line1\nline2\nline3\nline4\ndone\n",
        "each byte once, in order"
    );
    let (_, err) = errs.wait(Duration::from_secs(20));
    assert_eq!(err, "err1\nerr2\nerr3\nerr4\n");
    assert!(run_now.wait().unwrap().success());
}

#[test]
fn logs_follow_stays_exact_across_rewrites_of_a_truncated_tail() {
    let w = World::new();
    // 40 chunks of 16 KiB: 650 KiB in all, far past the 256 KiB tail kept, written over
    // ~2 s so the spool file is rewritten (and truncated) many times while followed.
    w.create_cmd(
        "flood",
        &["--every", "1h"],
        "for i in $(seq 1 40); do head -c 16384 /dev/zero | tr '\\0' x; echo \" chunk $i\"; sleep 0.05; done",
    );
    let (mut run_now, id) = start_run(&w, "flood");
    let follow = Tail::spawn(&w, &["logs", &id, "--follow"]);
    let (code, out) = follow.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0));
    assert!(run_now.wait().unwrap().success());
    let chunks: Vec<u32> = out
        .lines()
        .filter_map(|l| l.rsplit_once(" chunk ").and_then(|(_, n)| n.parse().ok()))
        .collect();
    assert!(!chunks.is_empty());
    assert!(
        chunks.windows(2).all(|p| p[1] > p[0]),
        "no chunk twice, in order: {chunks:?}"
    );
    assert_eq!(chunks.last(), Some(&40));
    if out.contains("[truncated ") {
        // A poll came too late for some bytes: they are reported, never repeated.
        let total: usize = (1..=40)
            .map(|i| 16384 + format!(" chunk {i}\n").len())
            .sum();
        assert!(out.len() < total + 100);
    } else {
        assert_eq!(chunks, (1..=40).collect::<Vec<_>>());
        let expected: String = (1..=40)
            .map(|i| format!("{} chunk {i}\n", "x".repeat(16384)))
            .collect();
        assert_eq!(out.len(), expected.len());
        assert!(out == expected, "the followed stream is the written stream");
    }
    // The stored output is the bounded tail with its marker.
    let stored = w.ok(&["logs", &id]);
    assert!(stored.starts_with("[truncated "), "{}", &stored[..40]);
}

#[test]
fn logs_of_a_finished_run_print_its_stored_output() {
    let w = World::new();
    w.create_cmd(
        "said",
        &["--every", "1h"],
        "echo hello; echo oops >&2; exit 3",
    );
    w.fail(&["run-now", "said"]);
    let id = w.runs("said")[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(w.ok(&["logs", &id]), "hello\n");
    assert_eq!(w.ok(&["logs", &id[..5], "--stderr"]), "oops\n");
    // --follow of a finished run prints it and ends.
    assert_eq!(w.ok(&["logs", &id, "--follow"]), "hello\n");
    let json = w.json(&["logs", &id, "--stderr"]);
    assert_eq!(json["runId"], id.as_str());
    assert_eq!(json["status"], "failed");
    assert_eq!(json["running"], false);
    assert_eq!(json["stream"], "stderr");
    assert_eq!(json["text"], "oops\n");
    // Bad input: one line, exit 2.
    for key in ["ffffffffffff", "zz", ""] {
        let (code, err) = w.fail(&["logs", key]);
        assert_eq!(code, 2, "{key:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("no run with id"), "{err}");
    }
}

#[test]
fn a_failed_runs_line_shows_the_first_line_of_its_stderr() {
    let w = World::new();
    w.create_cmd(
        "noisy",
        &["--every", "1h"],
        "echo; echo 'config.toml: no such file' >&2; echo more >&2; exit 3",
    );
    w.fail(&["run-now", "noisy"]);
    // Its stderr is output: quoted in the table only with --show-output (issue #19).
    let table = w.ok(&["runs", "noisy", "--show-output"]);
    assert!(
        table.contains("exited with status 3: config.toml: no such file"),
        "{table}"
    );
    let table = w.ok(&["runs", "noisy"]);
    assert!(table.contains("exited with status 3"), "{table}");
    assert!(!table.contains("config.toml"), "{table}");
    assert!(!table.contains("more"));
    // JSON keeps the error as recorded and the output redacted.
    let run = &w.runs("noisy")[0];
    assert_eq!(run["error"], "exited with status 3");
    assert!(run["stderr"].as_str().unwrap().starts_with("[redacted"));
}

#[test]
fn runs_follow_prints_each_run_as_it_starts_and_ends() {
    let w = World::new();
    w.create_cmd("quick", &["--every", "1h"], "true");
    w.create_cmd("slow", &["--every", "1h"], "sleep 1; exit 3");
    w.create_cmd("other", &["--every", "1h"], "true");
    // A run in flight when the followers start is reported by their first poll: that
    // is how the test knows they are watching.
    let (mut slow_run, slow) = start_run(&w, "slow");
    let human = Tail::spawn(&w, &["runs", "--follow"]);
    let json = Tail::spawn(&w, &["--json", "runs", "slow", "--follow"]);
    wait_for(
        "the followers to report the run in flight",
        Duration::from_secs(10),
        || {
            (human
                .text()
                .contains(&format!("run {slow} of slow started"))
                && !json.text().is_empty())
            .then_some(())
        },
    );
    w.ok(&["run-now", "quick"]);
    w.ok(&["run-now", "other"]);
    assert!(!slow_run.wait().unwrap().success());
    let quick = w.runs("quick")[0]["id"].as_str().unwrap().to_owned();
    let text = wait_for("every start and end", Duration::from_secs(10), || {
        let t = human.text();
        (t.contains(&format!("run {slow} of slow failed in")) && t.contains("of other succeeded"))
            .then_some(t)
    });
    assert!(
        text.contains(&format!("run {quick} of quick started (slot ")),
        "{text}"
    );
    assert!(
        text.contains(&format!("run {quick} of quick succeeded in ")),
        "{text}"
    );
    assert!(
        text.contains(&format!("run {slow} of slow failed in"))
            && text.contains("exited with status 3"),
        "{text}"
    );
    assert_eq!(
        text.matches(&format!("run {quick} of quick started"))
            .count(),
        1,
        "{text}"
    );
    // --json: one object per line, only the loop asked for.
    let lines = wait_for("the JSON lines", Duration::from_secs(10), || {
        let lines: Vec<Value> = json
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (lines.len() >= 2).then_some(lines)
    });
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["event"], "started");
    assert_eq!(lines[1]["event"], "ended");
    assert_eq!(lines[1]["run"]["id"], slow.as_str());
    assert_eq!(lines[1]["run"]["status"], "failed");
    assert_eq!(lines[1]["run"]["loopName"], "slow");
}

#[test]
fn daemon_run_logs_each_run_start_and_end_at_the_default_level() {
    let w = World::new();
    w.create_cmd("hello", &["--every", "1s"], "echo hello from loops");
    w.create_cmd("sad", &["--every", "1s"], "exit 3");
    let log = w.root.path().join("daemon-default.log");
    let mut child = w
        .cmd(&["daemon", "run"])
        .env_remove("LOOPS_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let read = || {
        let mut s = String::new();
        std::fs::File::open(&log)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    };
    let text = wait_for(
        "a run of each loop in the log",
        Duration::from_secs(15),
        || {
            let t = read();
            (t.contains(" of hello succeeded in ") && t.contains(" of sad failed in ")).then_some(t)
        },
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let runs = w.runs("hello");
    let done = runs
        .iter()
        .find(|r| r["status"] == "succeeded")
        .and_then(|r| r["id"].as_str())
        .unwrap()
        .to_owned();
    assert!(
        text.contains(&format!("run {done} of hello started (slot ")),
        "{text}"
    );
    assert!(
        text.contains(&format!("run {done} of hello succeeded in ")),
        "{text}"
    );
    assert!(
        text.contains("of sad failed in") && text.contains(": exited with status 3"),
        "{text}"
    );
    // No run output in the log.
    assert!(!text.contains("hello from loops"), "{text}");
    // Debug lines stay off at the default level.
    assert!(!text.contains("DEBUG"), "{text}");
}
