//! The run engine and daemon through the real binary: concurrency, retries, overlap,
//! crash safety, fencing, shutdown. Every wait polls a condition with a deadline.

use crate::util::{instant, pid_alive, wait_for, World};
use serde_json::Value;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn count(runs: &[Value], status: &str) -> usize {
    runs.iter().filter(|r| r["status"] == status).count()
}

#[test]
fn every_second_loop_runs_repeatedly_with_metadata() {
    let w = World::new();
    let out = w.root.path().join("env.txt");
    let cmd = format!(
        "echo \"$LOOPS_LOOP_NAME $LOOPS_ATTEMPT $LOOPS_SCHEDULED_FOR\" >> {}",
        out.display()
    );
    w.create_cmd("tick", &["--every", "1s"], &cmd);
    let mut d = w.daemon_ready(&[]);
    let runs = wait_for("3 succeeded runs", LONG, || {
        let runs = w.runs("tick");
        (count(&runs, "succeeded") >= 3).then_some(runs)
    });
    assert_eq!(d.stop(), Some(0), "clean exit; log:\n{}", d.log_text());
    let mut slots: Vec<_> = runs
        .iter()
        .filter(|r| r["status"] == "succeeded")
        .map(|r| instant(&r["scheduledFor"]))
        .collect();
    slots.sort();
    for pair in slots.windows(2) {
        let gap = (pair[1] - pair[0]).num_milliseconds();
        assert!(
            gap >= 1000 && gap % 1000 == 0,
            "slots are whole seconds apart: {slots:?}"
        );
    }
    let lines = std::fs::read_to_string(&out).expect("env file");
    assert!(lines.lines().all(|l| l.starts_with("tick 1 ")), "{lines}");
    assert_eq!(w.json(&["daemon", "status"])["running"], false);
}

#[test]
fn slow_run_does_not_starve_other_loops() {
    let w = World::new();
    w.create_cmd("slow", &["--dynamic", "1s"], "sleep 30");
    for i in 0..20 {
        w.create_cmd(&format!("fast{i:02}"), &["--every", "1s"], "true");
    }
    let mut d = w.daemon_ready(&[]);
    // Slots from a second after the daemon is up: the first ones also wait for its
    // start (its supervisor is a process to exec, slow on a loaded machine).
    let steady = chrono::Utc::now() + chrono::TimeDelta::seconds(1);
    wait_for("every fast loop to run 3 times", LONG, || {
        let runs = w.json(&["runs", "--limit", "0"]);
        let runs = runs.as_array()?;
        let ok = (0..20).all(|i| {
            let name = format!("fast{i:02}");
            runs.iter()
                .filter(|r| {
                    r["loopName"] == name.as_str()
                        && r["status"] == "succeeded"
                        && instant(&r["scheduledFor"]) >= steady
                })
                .count()
                >= 3
        });
        ok.then_some(())
    });
    let slow = w.runs("slow");
    assert_eq!(slow.len(), 1);
    assert_eq!(slow[0]["status"], "running", "the slow run is still going");
    // Dispatch lag stays small for the fast loops even with the slow run in flight.
    let runs = w.json(&["runs", "--limit", "0"]);
    for r in runs
        .as_array()
        .expect("array")
        .iter()
        .filter(|r| r["status"] == "succeeded" && instant(&r["scheduledFor"]) >= steady)
    {
        let lag = (instant(&r["startedAt"]) - instant(&r["scheduledFor"])).num_milliseconds();
        assert!(lag < 900, "run started {lag}ms after its slot: {r}");
    }
    assert_eq!(d.stop_terminating_runs(), Some(0));
    let slow = w.runs("slow");
    assert_eq!(
        slow[0]["status"], "abandoned",
        "interrupted run is recorded: {}",
        slow[0]
    );
    assert!(
        slow[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("daemon stopped"),
        "{}",
        slow[0]
    );
}

#[test]
fn timeout_kills_grandchildren() {
    let w = World::new();
    let pidfile = w.root.path().join("grandchild.pid");
    let cmd = format!("sleep 300 & echo $! > {}; sleep 300", pidfile.display());
    w.json(&[
        "create",
        "command",
        "hang",
        "--every",
        "1h",
        "--timeout",
        "1s",
        "--cmd",
        &cmd,
    ]);
    let out = w.run(&["--json", "run-now", "hang"]);
    assert_eq!(out.status.code(), Some(1), "timed-out run exits non-zero");
    let run: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(run["status"], "timed_out");
    assert_eq!(run["error"], "timed out after 1s");
    assert_eq!(run["runNow"]["source"], "ad_hoc");
    let grandchild: u64 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("num");
    wait_for("grandchild to die", Duration::from_secs(10), || {
        (!pid_alive(grandchild)).then_some(())
    });
}

#[test]
fn retries_keep_the_slot_and_count_attempts() {
    let w = World::new();
    w.json(&[
        "create",
        "command",
        "flaky",
        "--dynamic",
        "1h",
        "--attempts",
        "3",
        "--retry-delay",
        "200ms",
        "--cmd",
        "exit 7",
    ]);
    w.make_due("flaky");
    let mut d = w.daemon_ready(&[]);
    let runs = wait_for("3 failed attempts", LONG, || {
        let runs = w.runs("flaky");
        (count(&runs, "failed") == 3).then_some(runs)
    });
    d.stop();
    let slot = &runs[0]["scheduledFor"];
    let mut attempts: Vec<u64> = runs
        .iter()
        .map(|r| r["attempt"].as_u64().expect("attempt"))
        .collect();
    attempts.sort();
    assert_eq!(attempts, vec![1, 2, 3]);
    assert!(
        runs.iter()
            .all(|r| &r["scheduledFor"] == slot && r["exitCode"] == 7),
        "{runs:?}"
    );
    let lp = w.json(&["show", "flaky"]);
    assert!(lp["retryScheduledFor"].is_null(), "no retry left: {lp}");
    assert!(
        instant(&lp["nextRunAt"]) > chrono::Utc::now() + chrono::TimeDelta::minutes(50),
        "next slot after the exhausted one: {lp}"
    );
}

#[test]
fn overlap_skip_records_skipped_runs() {
    let w = World::new();
    w.create_cmd("busy", &["--every", "1s"], "sleep 2.5");
    let mut d = w.daemon_ready(&[]);
    let runs = wait_for("a skipped run", LONG, || {
        let runs = w.runs("busy");
        (count(&runs, "skipped") >= 1).then_some(runs)
    });
    d.stop();
    let skipped = runs
        .iter()
        .find(|r| r["status"] == "skipped")
        .expect("skipped");
    assert_eq!(skipped["error"], "previous run still active");
    let running_at_once = runs.iter().filter(|r| r["status"] == "running").count();
    assert!(running_at_once <= 1, "{runs:?}");
}

#[test]
fn overlap_allow_runs_concurrently() {
    let w = World::new();
    w.json(&[
        "create",
        "command",
        "par",
        "--every",
        "1s",
        "--overlap",
        "allow",
        "--cmd",
        "sleep 3",
    ]);
    let d = w.daemon_ready(&[]);
    wait_for("two overlapping runs", LONG, || {
        let runs = w.runs("par");
        (count(&runs, "running") >= 2).then_some(())
    });
    drop(d);
}

#[test]
fn kill_dash_nine_then_restart_reattaches_to_the_live_child_and_records_its_exit() {
    let w = World::new();
    let marker = w.root.path().join("done.txt");
    let cmd = format!("sleep 4; echo done >> {}", marker.display());
    w.json(&[
        "create",
        "command",
        "job",
        "--dynamic",
        "1h",
        "--attempts",
        "2",
        "--retry-delay",
        "100ms",
        "--cmd",
        &cmd,
    ]);
    w.make_due("job");
    let mut first = w.daemon_ready(&["--lease-ttl", "30s"]);
    let run = wait_for("run with a pid", LONG, || {
        w.runs("job")
            .into_iter()
            .find(|r| r["status"] == "running" && r["pid"].is_u64())
    });
    let child = run["pid"].as_u64().expect("pid");
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(5));
    assert!(
        pid_alive(child),
        "the child outlives the daemon (own process group)"
    );
    // The holder's process is gone: the new daemon takes over at once, not after 30 s.
    let started = std::time::Instant::now();
    let mut second = w.daemon_ready(&["--lease-ttl", "30s"]);
    assert!(started.elapsed() < Duration::from_secs(10));
    // While the child lives, the row stays running (re-attached), never abandoned.
    assert_eq!(w.runs("job")[0]["status"], "running");
    let runs = wait_for("the re-attached run to end", LONG, || {
        let runs = w.runs("job");
        (count(&runs, "succeeded") == 1).then_some(runs)
    });
    assert_eq!(second.stop(), Some(0));
    // Recorded as it ended, under the new daemon: no second attempt was needed.
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["attempt"], 1);
    assert_eq!(runs[0]["exitCode"], 0, "{}", runs[0]);
    assert_eq!(runs[0]["error"], serde_json::Value::Null, "{}", runs[0]);
    assert_eq!(runs[0]["pid"].as_u64(), Some(child));
    let done = std::fs::read_to_string(&marker).expect("marker");
    assert_eq!(done.lines().count(), 1, "the process ran once: {done}");
}

#[test]
fn kill_dash_nine_with_a_child_killed_meanwhile_records_its_real_end_and_retries() {
    let w = World::new();
    w.json(&[
        "create",
        "command",
        "job",
        "--dynamic",
        "1h",
        "--attempts",
        "2",
        "--retry-delay",
        "100ms",
        "--cmd",
        "sleep 60",
    ]);
    w.make_due("job");
    let mut first = w.daemon_ready(&[]);
    let run = wait_for("run with a pid", LONG, || {
        w.runs("job")
            .into_iter()
            .find(|r| r["status"] == "running" && r["pid"].is_u64())
    });
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(5));
    let child = run["pid"].as_u64().expect("pid");
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(child).expect("pid"));
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL)
        .expect("kill the run's group");
    wait_for("child gone", Duration::from_secs(5), || {
        (!pid_alive(child)).then_some(())
    });
    let _second = w.daemon_ready(&[]);
    let runs = wait_for("attempt 2 running", LONG, || {
        let runs = w.runs("job");
        (runs.len() == 2 && count(&runs, "running") == 1).then_some(runs)
    });
    let first_attempt = runs.iter().find(|r| r["attempt"] == 1).expect("attempt 1");
    // Its supervisor saw how it ended while no daemon ran.
    assert_eq!(first_attempt["status"], "failed", "{first_attempt}");
    assert_eq!(
        first_attempt["error"], "killed by signal SIGKILL",
        "{first_attempt}"
    );
}

/// A daemon stopped while it held the store's write lock (SIGSTOP mid-commit, or
/// during a checkpoint's reset) leaves every writer waiting: a second `daemon run`
/// still names the holder at once, from a read of the lease, instead of failing after
/// the busy timeout with "database is locked" (seen in CI, one run in many). The write
/// lock is held here by the test, deterministically.
#[test]
fn a_second_daemon_names_a_holder_that_keeps_the_write_lock() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1h"], "true");
    let first = w.daemon_ready(&["--lease-ttl", "30s"]);
    first.signal("STOP");
    let conn = rusqlite::Connection::open(w.db_path()).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = std::time::Instant::now();
    let refused = w.run(&["daemon", "run"]);
    let took = started.elapsed();
    conn.execute_batch("ROLLBACK").unwrap();
    first.signal("CONT");
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{msg}");
    assert!(
        msg.contains(&format!("pid {}", first.pid())),
        "names the holder: {msg}"
    );
    assert!(
        took < Duration::from_secs(4),
        "answered without waiting out the lock: {took:?}"
    );
}

#[test]
fn stopped_daemon_loses_its_lease_and_exits() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1s"], "true");
    let mut first = w.daemon_ready(&["--lease-ttl", "1s"]);
    first.signal("STOP");
    // A stopped holder is alive: a second daemon must wait for the TTL to run out.
    let refused = w.run(&["daemon", "run", "--lease-ttl", "1s"]);
    assert!(!refused.status.success());
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(
        msg.contains(&format!("pid {}", first.pid())),
        "names the holder: {msg}"
    );
    wait_for(
        "the stopped daemon's lease to lapse",
        Duration::from_secs(10),
        || {
            // A stalled daemon makes `daemon status` exit 1: parse, whatever the code.
            let status = w.daemon_status();
            (instant(&status["leaseExpiresAt"]) < chrono::Utc::now()).then_some(())
        },
    );
    let mut second = w.daemon_ready(&["--lease-ttl", "1s"]);
    first.signal("CONT");
    let code = first.wait_exit(Duration::from_secs(15));
    assert_ne!(
        code,
        Some(0),
        "the fenced-out daemon exits non-zero; log:\n{}",
        first.log_text()
    );
    assert!(first.log_text().contains("lease"), "{}", first.log_text());
    let before = count(&w.runs("job"), "succeeded");
    wait_for("second daemon keeps running the loop", LONG, || {
        (count(&w.runs("job"), "succeeded") >= before + 2).then_some(())
    });
    assert_eq!(second.stop(), Some(0));
}

#[test]
fn two_daemons_started_together_exactly_one_runs() {
    let w = World::new();
    let mut a = w.daemon(&[]);
    let mut b = w.daemon(&[]);
    let exited = wait_for("one daemon to refuse", Duration::from_secs(10), || {
        if let Ok(Some(s)) = a.child.try_wait() {
            return Some((s, b.log_text(), a.log_text()));
        }
        if let Ok(Some(s)) = b.child.try_wait() {
            return Some((s, a.log_text(), b.log_text()));
        }
        None
    });
    assert!(!exited.0.success());
    assert!(exited.2.contains("already running"), "{}", exited.2);
    let status = w.json(&["daemon", "status"]);
    assert_eq!(status["running"], true);
    let live = [&mut a, &mut b]
        .into_iter()
        .map(|d| matches!(d.child.try_wait(), Ok(None)))
        .filter(|alive| *alive)
        .count();
    assert_eq!(live, 1);
}

#[test]
fn daemon_start_stop_finalizes_runs_in_flight() {
    let w = World::new();
    w.create_cmd("long", &["--dynamic", "1s"], "sleep 60");
    let started = w.json(&["daemon", "start", "--shutdown-grace", "300ms"]);
    let pid = started["pid"].as_u64().expect("pid");
    assert!(w.data.join("daemon.pid").exists());
    wait_for("run in flight", LONG, || {
        (count(&w.runs("long"), "running") == 1).then_some(())
    });
    let again = w.run(&["daemon", "start"]);
    assert!(!again.status.success(), "second start refused");
    let status = w.json(&["daemon", "status"]);
    assert_eq!(status["pid"].as_u64(), Some(pid));
    assert_eq!(status["runningRuns"].as_array().map(Vec::len), Some(1));
    // A plain stop leaves the run to its supervisor: still running, still its process.
    let stop = w.json(&["daemon", "stop"]);
    assert_eq!(stop["stopped"], true);
    assert!(!pid_alive(pid));
    let runs = w.runs("long");
    assert_eq!(runs[0]["status"], "running", "{}", runs[0]);
    let child = runs[0]["pid"].as_u64().expect("pid");
    assert!(pid_alive(child), "the run goes on without its daemon");
    assert!(!w.data.join("daemon.pid").exists(), "pid file removed");
    // The next daemon takes it back; `--terminate-runs` ends it and records it.
    let again = w.json(&["daemon", "start", "--shutdown-grace", "300ms"]);
    let pid = again["pid"].as_u64().expect("pid");
    wait_for("the run re-attached", LONG, || {
        let runs = w.runs("long");
        runs[0]["claimedBy"]
            .as_str()?
            .contains(&format!("/{pid}/"))
            .then_some(())
    });
    let stop = w.json(&["daemon", "stop", "--terminate-runs"]);
    assert_eq!(stop["stopped"], true);
    assert_eq!(stop["runsTerminated"], true);
    let runs = w.runs("long");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "abandoned", "{}", runs[0]);
    assert!(!pid_alive(child), "its process was terminated");
    let logs = w.ok(&["daemon", "logs", "-n", "200"]);
    assert!(logs.contains("daemon lease acquired"), "{logs}");
    assert!(logs.contains("daemon stopped"), "{logs}");
    assert_eq!(w.json(&["daemon", "stop"])["running"], false);
}

#[test]
fn create_wakes_an_idle_daemon_promptly() {
    let w = World::new();
    w.create_cmd("later", &["--every", "1h"], "true");
    let mut d = w.daemon_ready(&[]);
    let lp = w.create_cmd("now", &["--dynamic", "1s"], "true");
    let run = wait_for("the new loop's run", Duration::from_secs(10), || {
        w.runs("now")
            .into_iter()
            .find(|r| r["status"] == "succeeded")
    });
    let lag = (instant(&run["startedAt"]) - instant(&lp["nextRunAt"])).num_milliseconds();
    assert!(
        lag < 1_000,
        "idle daemon started the new loop {lag}ms after its first slot (it would sleep ~1h otherwise)"
    );
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn run_now_sources() {
    let w = World::new();
    let hourly = w.create_cmd("hourly", &["--every", "1h"], "echo hi");
    let out = w.json(&["run-now", "hourly", "--show-output"]);
    assert_eq!(out["runNow"]["source"], "ad_hoc");
    assert_eq!(out["runNow"]["advancesLoop"], false);
    assert_eq!(out["stdout"], "hi\n");
    assert_eq!(
        w.json(&["show", "hourly"])["nextRunAt"],
        hourly["nextRunAt"],
        "future slot untouched"
    );

    w.create_cmd("due", &["--dynamic", "1h"], "true");
    w.make_due("due");
    let out = w.json(&["run-now", "due"]);
    assert_eq!(out["runNow"]["source"], "due_slot");
    assert_eq!(out["runNow"]["advancesLoop"], true);
    let lp = w.json(&["show", "due"]);
    assert!(
        instant(&lp["nextRunAt"]) > chrono::Utc::now() + chrono::TimeDelta::minutes(50),
        "{lp}"
    );

    w.json(&[
        "create",
        "command",
        "retry",
        "--dynamic",
        "1h",
        "--attempts",
        "2",
        "--retry-delay",
        "100ms",
        "--cmd",
        "exit 3",
    ]);
    w.make_due("retry");
    let failed = w.run(&["--json", "run-now", "retry"]);
    assert_eq!(failed.status.code(), Some(1));
    let failed: Value = serde_json::from_slice(&failed.stdout).expect("json");
    assert_eq!(failed["runNow"]["source"], "due_slot");
    assert_eq!(failed["exitCode"], 3);
    let lp = w.json(&["show", "retry"]);
    assert_eq!(lp["retryScheduledFor"], failed["scheduledFor"]);
    wait_for("retry to come due", Duration::from_secs(5), || {
        (instant(&w.json(&["show", "retry"])["nextRunAt"]) <= chrono::Utc::now()).then_some(())
    });
    let again: Value =
        serde_json::from_slice(&w.run(&["--json", "run-now", "retry"]).stdout).expect("json");
    assert_eq!(again["runNow"]["source"], "retry_slot");
    assert_eq!(again["attempt"], 2);
    assert_eq!(again["scheduledFor"], failed["scheduledFor"]);
}

#[test]
fn tick_runs_due_loops_once() {
    let w = World::new();
    w.create_cmd("due", &["--dynamic"], "echo due");
    w.make_due("due");
    w.create_cmd("hourly", &["--every", "1h"], "echo hourly");
    let report = w.json(&["tick"]);
    assert_eq!(report["claimed"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["claimed"][0]["loopName"], "due");
    assert_eq!(report["claimed"][0]["status"], "succeeded");
    let again = w.json(&["tick"]);
    assert_eq!(
        again["claimed"].as_array().map(Vec::len),
        Some(0),
        "a slot never runs twice"
    );
}

#[test]
fn missing_executable_is_a_failed_run() {
    let w = World::new();
    w.json(&[
        "create",
        "command",
        "ghost",
        "--every",
        "1h",
        "--no-shell",
        "--cmd",
        "definitely-not-a-real-binary",
    ]);
    let out = w.run(&["--json", "run-now", "ghost"]);
    assert_eq!(out.status.code(), Some(1));
    let run: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(run["status"], "failed");
    assert_eq!(
        run["error"],
        "Executable not found in PATH: definitely-not-a-real-binary"
    );
}

#[test]
fn prune_and_retention() {
    let w = World::new();
    w.create_cmd("p", &["--every", "1h"], "true");
    for _ in 0..5 {
        w.ok(&["run-now", "p"]);
    }
    assert_eq!(w.json(&["prune", "--keep", "2", "--dry-run"])["matched"], 3);
    assert_eq!(w.runs("p").len(), 5, "dry run deletes nothing");
    w.ok(&["prune", "--keep", "2"]);
    assert_eq!(w.runs("p").len(), 2);
    let (code, stderr) = w.fail(&["prune", "--older-than", "soon"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("--older-than: invalid duration \"soon\""),
        "{stderr}"
    );
}

/// The daemon applies retention by itself, at start and every `--prune-every` (on a
/// thread and a connection of its own), with the policy its flags give.
#[test]
fn the_daemon_prunes_by_itself() {
    let w = World::new();
    w.create_cmd("p", &["--every", "1h"], "true");
    for _ in 0..5 {
        w.ok(&["run-now", "p"]);
    }
    let mut d = w.daemon_ready(&["--keep-runs", "2", "--prune-every", "300ms"]);
    wait_for("the first prune", LONG, || {
        (w.runs("p").len() == 2).then_some(())
    });
    // And again later: more runs, pruned back to two.
    for _ in 0..3 {
        w.ok(&["run-now", "p"]);
    }
    wait_for("a later prune", LONG, || {
        (w.runs("p").len() == 2).then_some(())
    });
    let log = d.log_text();
    assert!(log.contains("retention"), "{log}");
    assert_eq!(d.stop(), Some(0), "{log}");
}

#[test]
fn doctor_reports_and_fails_on_corrupt_db() {
    let mut w = World::new();
    let bin = w.root.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    crate::util::write_script(&bin.join("codex"), "#!/bin/sh\necho 'codex-cli 0.171.0'\n");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    w.extra_env.push(("PATH".into(), path));
    w.create_cmd("good", &["--every", "1h"], "true");
    w.json(&[
        "create",
        "command",
        "broken",
        "--every",
        "1h",
        "--no-shell",
        "--cmd",
        "no-such-tool-xyz",
    ]);
    let out = w.run(&["--json", "doctor"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a loop whose executable is missing fails doctor"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let checks = report["checks"].as_array().expect("checks");
    let find = |name: &str| {
        checks
            .iter()
            .find(|c| c["check"] == name)
            .cloned()
            .expect(name)
    };
    assert_eq!(find("data dir")["status"], "ok");
    assert_eq!(find("database")["status"], "ok");
    assert_eq!(find("daemon")["status"], "warn");
    assert_eq!(find("loop good")["status"], "ok");
    assert_eq!(find("loop broken")["status"], "fail");
    assert!(find("loop broken")["detail"]
        .as_str()
        .unwrap_or("")
        .contains("Executable not found in PATH: no-such-tool-xyz"));

    let corrupt = World::new();
    std::fs::create_dir_all(&corrupt.data).expect("mkdir");
    std::fs::write(corrupt.db_path(), vec![0x42u8; 4096]).expect("write");
    let out = corrupt.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("database"))
        .expect("database line");
    assert!(
        line.contains("fail") && line.contains("not a loops database"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(corrupt.db_path()).expect("read"),
        vec![0x42u8; 4096]
    );
}

#[test]
fn install_writes_a_systemd_unit() {
    let w = World::new();
    let out = w.json(&["daemon", "install"]);
    let path = std::path::PathBuf::from(out["path"].as_str().expect("path"));
    assert_eq!(path, w.home.join(".config/systemd/user/loops.service"));
    let unit = std::fs::read_to_string(&path).expect("unit");
    assert!(
        unit.contains(&format!("ExecStart=\"{}\" daemon run", crate::util::bin())),
        "{unit}"
    );
    assert!(
        unit.contains(&format!(
            "Environment=\"LOOPS_DATA_DIR={}\"",
            w.data.display()
        )),
        "{unit}"
    );
    assert!(unit.contains("WantedBy=default.target"));
    assert_eq!(
        out["commands"],
        serde_json::json!([
            "systemctl --user daemon-reload",
            "systemctl --user enable --now loops.service"
        ])
    );
}

/// `daemon logs -n N` reads the log's end, not the whole file: a 2 GiB log (sparse
/// here) is tailed at once under a 512 MiB address-space limit (#9 leftover).
#[test]
fn logs_read_the_last_lines_from_the_end() {
    use std::io::Write as _;
    let w = World::new();
    w.ok(&["list"]);
    let log = w.data.join("daemon.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&log)
        .expect("log");
    file.set_len(2 << 30).expect("sparse");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("log");
    file.write_all(b"\nalpha\nbeta\ngamma\n").expect("append");
    let begun = std::time::Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 524288 && exec {} --data-dir {} daemon logs -n 2",
            crate::util::bin(),
            w.data.display()
        ))
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "beta\ngamma\n");
    assert!(
        begun.elapsed() < Duration::from_secs(10),
        "{:?}",
        begun.elapsed()
    );
    // A last line without its newline still prints as a line.
    std::fs::write(&log, "one\ntwo").expect("write");
    assert_eq!(w.ok(&["daemon", "logs", "-n", "1"]), "two\n");
    assert_eq!(w.ok(&["daemon", "logs", "-n", "0"]), "");
}

/// `--follow` prints only what is appended, and starts over when the log is
/// truncated or replaced.
#[test]
fn logs_follow_prints_new_bytes_only() {
    use std::io::{BufRead, Write as _};
    let w = World::new();
    w.ok(&["list"]);
    let log = w.data.join("daemon.log");
    std::fs::write(&log, "old 1\nold 2\n").expect("write");
    let mut child = w
        .cmd(&["daemon", "logs", "-n", "1", "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = || rx.recv_timeout(LONG).expect("a line within the deadline");
    assert_eq!(next(), "old 2");
    let mut append = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("log");
    append.write_all(b"new 1\nnew 2\n").expect("append");
    assert_eq!(next(), "new 1");
    assert_eq!(next(), "new 2");
    // Truncated and rewritten (shorter than before): read from its start.
    std::fs::write(&log, "after\n").expect("truncate");
    assert_eq!(next(), "after");
    // Replaced by another file under the same name.
    let other = w.data.join("daemon.log.new");
    std::fs::write(
        &other,
        "rotated 1\nrotated 2 is a longer line than the rest\n",
    )
    .expect("new");
    std::fs::rename(&other, &log).expect("rotate");
    assert_eq!(next(), "rotated 1");
    assert_eq!(next(), "rotated 2 is a longer line than the rest");
    let _ = child.kill();
    let _ = child.wait();
}
