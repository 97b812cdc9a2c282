//! Supervised runs (issue #18): every run's process is held by a supervisor apart from
//! the daemon, so a daemon that is killed, stopped or replaced leaves its runs running,
//! and the next one re-attaches and records them with their real exit status and their
//! whole output; a run nobody re-attached to in time is ended by its supervisor on its
//! own deadline. SQLite unless a test says PostgreSQL (those skip without it, except
//! under `CI=true`).

use crate::several_hosts::pg_world;
use crate::util::{
    children_of, kill_supervisors, pid_alive, supervisor_pids, wait_for, Daemon, World,
};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

/// A command printing `line 1` … `line N`, one every 100 ms.
fn printer(lines: u32) -> String {
    format!("for i in $(seq 1 {lines}); do echo line $i; sleep 0.1; done")
}

fn expected(lines: u32) -> String {
    (1..=lines).map(|i| format!("line {i}\n")).collect()
}

fn spooled(w: &World, run_id: &str) -> String {
    std::fs::read_to_string(w.data.join("spool").join(format!("run-{run_id}.stdout")))
        .unwrap_or_default()
}

/// The loop's only run, once it is running with its pid and has spooled `marker`.
fn running_with(w: &World, name: &str, marker: &str) -> serde_json::Value {
    wait_for(&format!("{name} to print {marker:?}"), LONG, || {
        let run = w
            .runs(name)
            .into_iter()
            .find(|r| r["status"] == "running" && r["pid"].is_u64())?;
        spooled(w, run["id"].as_str()?)
            .contains(marker)
            .then_some(run)
    })
}

fn shown(w: &World, name: &str) -> Vec<serde_json::Value> {
    w.json(&["runs", name, "--show-output", "--limit", "0"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The loop's run `id` once it is no longer running, with its output.
fn ended(w: &World, name: &str, id: &serde_json::Value) -> serde_json::Value {
    wait_for(&format!("{name}'s run to be recorded"), LONG, || {
        shown(w, name)
            .into_iter()
            .find(|r| r["id"] == *id && r["status"] != "running")
    })
}

/// kill -9 of the daemon while its run prints, a new daemon a while later: the run
/// printed on meanwhile (its supervisor holds its pipes: no SIGPIPE), and is recorded
/// `succeeded`, exit 0, with every line from before and after the crash.
fn killed_daemon_mid_run(w: &World) {
    w.create_cmd("printer", &["--at", "+1s"], &printer(30));
    let mut first = w.daemon_ready(&[]);
    let run = running_with(w, "printer", "line 3\n");
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(5));
    // It goes on printing while no daemon runs.
    wait_for("more lines with no daemon", LONG, || {
        spooled(w, run["id"].as_str()?)
            .contains("line 12\n")
            .then_some(())
    });
    let mut second = w.daemon_ready(&[]);
    let row = ended(w, "printer", &run["id"]);
    assert_eq!(second.stop(), Some(0), "{}", second.log_text());
    assert_eq!(row["status"], "succeeded", "{row}");
    assert_eq!(row["exitCode"], 0, "{row}");
    assert_eq!(row["stdout"], expected(30), "{row}");
    assert_eq!(row["error"], serde_json::Value::Null, "{row}");
    assert_eq!(w.runs("printer").len(), 1, "one attempt, no retry");
    assert!(
        spooled(w, run["id"].as_str().unwrap()).is_empty(),
        "spool cleaned up"
    );
    assert!(
        !w.data
            .join("supervise")
            .join(format!("run-{}.status", run["id"].as_str().unwrap()))
            .exists(),
        "no status file left"
    );
}

#[test]
fn kill_dash_nine_mid_print_then_a_new_daemon_records_every_line_and_exit_0() {
    killed_daemon_mid_run(&World::new());
}

#[test]
fn kill_dash_nine_mid_print_on_postgres_records_every_line_and_exit_0() {
    let Some((w, _url)) = pg_world() else {
        return;
    };
    killed_daemon_mid_run(&w);
}

/// SIGTERM (`daemon stop`) and SIGINT (Ctrl-C of `daemon run`) stop claiming and leave
/// the run to its supervisor; the next daemon records it as it ended.
#[test]
fn sigterm_and_ctrl_c_leave_the_run_to_its_supervisor() {
    for signal in ["TERM", "INT"] {
        let w = World::new();
        w.create_cmd("printer", &["--dynamic", "1h"], &printer(20));
        w.make_due("printer");
        let mut first = w.daemon_ready(&[]);
        let run = running_with(&w, "printer", "line 2\n");
        let child = run["pid"].as_u64().unwrap();
        first.signal(signal);
        let begun = std::time::Instant::now();
        assert_eq!(
            first.wait_exit(Duration::from_secs(10)),
            Some(0),
            "{}",
            first.log_text()
        );
        assert!(
            begun.elapsed() < Duration::from_secs(2),
            "SIG{signal}: the daemon left at once, not after its shutdown grace"
        );
        assert!(pid_alive(child), "SIG{signal}: the run goes on");
        assert_eq!(w.runs("printer")[0]["status"], "running");
        assert!(
            first
                .log_text()
                .contains("leaving the runs in flight to their supervisors"),
            "{}",
            first.log_text()
        );
        let mut second = w.daemon_ready(&[]);
        let row = ended(&w, "printer", &run["id"]);
        assert_eq!(second.stop(), Some(0));
        assert_eq!(row["status"], "succeeded", "SIG{signal}: {row}");
        assert_eq!(row["stdout"], expected(20), "SIG{signal}: {row}");
    }
}

/// `daemon restart` replaces a running daemon (its flags kept, a given one replaced)
/// without interrupting its run.
#[test]
fn daemon_restart_mid_run_keeps_the_run_and_the_flags() {
    let w = World::new();
    w.create_cmd("printer", &["--dynamic", "1h"], &printer(30));
    w.make_due("printer");
    let started = w.json(&[
        "daemon",
        "start",
        "--kill-grace",
        "700ms",
        "--max-concurrent",
        "5",
    ]);
    let old = started["pid"].as_u64().unwrap();
    let run = running_with(&w, "printer", "line 3\n");
    let restarted = w.json(&["daemon", "restart", "--max-concurrent", "9"]);
    let new = restarted["pid"].as_u64().unwrap();
    assert_ne!(old, new);
    assert!(!pid_alive(old));
    let args = std::fs::read_to_string(w.data.join("daemon.args")).unwrap();
    assert!(
        args.contains("\"--max-concurrent\",\"9\""),
        "given flag replaced: {args}"
    );
    assert!(
        args.contains("\"--kill-grace\",\"700ms\""),
        "others kept: {args}"
    );
    let row = ended(&w, "printer", &run["id"]);
    assert_eq!(row["status"], "succeeded", "{row}");
    assert_eq!(row["stdout"], expected(30), "{row}");
    assert!(
        row["claimedBy"]
            .as_str()
            .unwrap()
            .contains(&format!("/{new}/")),
        "recorded by the new daemon: {row}"
    );
    // Bad flags change nothing.
    let (code, err) = w.fail(&["daemon", "restart", "--max-concurrent", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("max-concurrent"), "{err}");
    assert_eq!(
        w.daemon_status()["pid"].as_u64(),
        Some(new),
        "still running"
    );
    w.ok(&["daemon", "stop"]);
}

/// 100 runs in flight across `daemon restart`: each is recorded once, `succeeded`, with
/// its own output, and no slot ran twice (the journal the runs write).
#[test]
fn a_hundred_runs_in_flight_across_a_restart_are_each_recorded_once() {
    let w = World::new();
    let journal = w.root.path().join("journal");
    let gate = w.root.path().join("gate");
    let cmd = format!(
        "echo \"$LOOPS_RUN_ID\" >> {j}; n=0; while [ ! -e {g} ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done; echo \"done $LOOPS_RUN_ID\"",
        j = journal.display(),
        g = gate.display()
    );
    for i in 0..100 {
        w.create_cmd(&format!("r{i:03}"), &["--dynamic", "1h"], &cmd);
        w.make_due(&format!("r{i:03}"));
    }
    w.json(&["daemon", "start", "--max-concurrent", "128"]);
    wait_for("100 runs in flight", Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        (text.lines().count() == 100).then_some(())
    });
    let restarted = w.json(&["daemon", "restart"]);
    let new = restarted["pid"].as_u64().unwrap();
    wait_for(
        "the new daemon to hold all 100",
        Duration::from_secs(60),
        || {
            let runs = w.json(&["runs", "--limit", "0"]);
            let runs = runs.as_array()?;
            (runs.len() == 100
                && runs.iter().all(|r| {
                    r["status"] == "running"
                        && r["claimedBy"]
                            .as_str()
                            .is_some_and(|c| c.contains(&format!("/{new}/")))
                }))
            .then_some(())
        },
    );
    std::fs::write(&gate, b"open").unwrap();
    let runs = wait_for("all 100 recorded", Duration::from_secs(60), || {
        let runs = w.json(&["runs", "--limit", "0", "--show-output"]);
        let runs = runs.as_array()?.clone();
        runs.iter()
            .all(|r| r["status"] != "running")
            .then_some(runs)
    });
    w.ok(&["daemon", "stop"]);
    assert_eq!(runs.len(), 100, "none lost, none doubled");
    for r in &runs {
        assert_eq!(r["status"], "succeeded", "{r}");
        assert_eq!(r["attempt"], 1, "{r}");
        assert_eq!(
            r["stdout"],
            format!("done {}\n", r["id"].as_str().unwrap()),
            "{r}"
        );
    }
    let lines: Vec<String> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let unique: std::collections::HashSet<&String> = lines.iter().collect();
    assert_eq!((lines.len(), unique.len()), (100, 100), "each ran once");
}

/// The supervisor killed with SIGKILL while its daemon runs (documented behaviour): its
/// run's process group is ended, the run recorded `abandoned` saying why, with what was
/// spooled; the next run gets a new supervisor.
#[test]
fn a_killed_supervisor_ends_its_runs_and_the_daemon_says_why() {
    let w = World::new();
    w.json(&[
        "create",
        "command",
        "printer",
        "--dynamic",
        "1h",
        "--attempts",
        "2",
        "--retry-delay",
        "100ms",
        "--cmd",
        &printer(100),
    ]);
    w.make_due("printer");
    let mut d = w.daemon_ready(&[]);
    let run = running_with(&w, "printer", "line 3\n");
    let child = run["pid"].as_u64().unwrap();
    let sups = supervisor_pids(&w.data);
    assert_eq!(sups.len(), 1, "{sups:?}");
    let sup = sups[0];
    assert!(children_of(sup).contains(&u32::try_from(child).unwrap()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sup as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let row = ended(&w, "printer", &run["id"]);
    assert!(!pid_alive(child), "its process died with its supervisor");
    assert_eq!(row["status"], "abandoned", "{row}");
    let error = row["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("its supervisor (pid {sup}) died unexpectedly")),
        "{error}"
    );
    assert!(
        row["stdout"].as_str().unwrap().contains("line 3\n"),
        "{row}"
    );
    // The retry runs under a new supervisor.
    let retry = wait_for("the retry", LONG, || {
        w.runs("printer")
            .into_iter()
            .find(|r| r["attempt"] == 2 && r["status"] == "running" && r["pid"].is_u64())
    });
    let now: Vec<u32> = supervisor_pids(&w.data);
    assert!(!now.contains(&sup) && now.len() == 1, "{now:?}");
    assert!(children_of(now[0]).contains(&u32::try_from(retry["pid"].as_u64().unwrap()).unwrap()));
    assert!(
        d.log_text().contains("a supervisor died"),
        "{}",
        d.log_text()
    );
    assert_eq!(d.stop_terminating_runs(), Some(0));
}

/// A run whose daemon never came back: its supervisor ends it when its deadline passes
/// (kill grace + margin before its lease, `--lease 3s`, could expire), writes down why,
/// and `loops tick` records it `abandoned` with the supervisor's reason and its output.
#[test]
fn a_run_whose_deadline_passed_with_no_daemon_is_abandoned_with_the_supervisors_reason() {
    let w = World::new();
    w.json(&[
        "create",
        "command",
        "printer",
        "--dynamic",
        "1h",
        "--lease",
        "3s",
        "--cmd",
        &printer(600),
    ]);
    w.make_due("printer");
    let mut d = w.daemon_ready(&[]);
    let run = running_with(&w, "printer", "line 2\n");
    let child = run["pid"].as_u64().unwrap();
    d.signal("KILL");
    d.wait_exit(Duration::from_secs(5));
    let killed = chrono::Utc::now();
    wait_for("its supervisor to end it", Duration::from_secs(15), || {
        (!pid_alive(child)).then_some(())
    });
    let gone = chrono::Utc::now();
    // Before its lease (as the store has it) could expire.
    let expires = crate::util::instant(&w.runs("printer")[0]["leaseExpiresAt"]);
    assert!(
        gone < expires,
        "ended at {gone}, its lease expires at {expires}"
    );
    assert!(
        gone - killed < chrono::TimeDelta::seconds(3),
        "ended {} ms after the kill",
        (gone - killed).num_milliseconds()
    );
    let status = w
        .data
        .join("supervise")
        .join(format!("run-{}.status", run["id"].as_str().unwrap()));
    wait_for("the status file", Duration::from_secs(5), || {
        status.exists().then_some(())
    });
    w.ok(&["tick"]);
    let row = ended(&w, "printer", &run["id"]);
    assert_eq!(row["status"], "abandoned", "{row}");
    assert!(
        row["error"]
            .as_str()
            .unwrap()
            .starts_with("terminated by its supervisor: its deadline passed"),
        "{row}"
    );
    assert!(
        row["stdout"].as_str().unwrap().contains("line 2\n"),
        "{row}"
    );
    assert!(!status.exists(), "the status file is removed once recorded");
}

/// A run that ended while no daemon ran is recorded from its supervisor's status file
/// by `loops tick`: its real exit code and output, not "abandoned".
#[test]
fn a_run_that_ended_with_no_daemon_is_recorded_from_its_status_file_by_tick() {
    let w = World::new();
    let gate = w.root.path().join("gate");
    let cmd = format!(
        "echo first; while [ ! -e {} ]; do sleep 0.05; done; echo last >&2; exit 3",
        gate.display()
    );
    w.create_cmd("job", &["--dynamic", "1h"], &cmd);
    w.make_due("job");
    let mut d = w.daemon_ready(&[]);
    let run = running_with(&w, "job", "first\n");
    d.signal("KILL");
    d.wait_exit(Duration::from_secs(5));
    std::fs::write(&gate, b"open").unwrap();
    let status = w
        .data
        .join("supervise")
        .join(format!("run-{}.status", run["id"].as_str().unwrap()));
    wait_for("the status file", Duration::from_secs(10), || {
        status.exists().then_some(())
    });
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&status).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    // With nothing left to supervise and no daemon, the supervisor exits.
    wait_for("the supervisor to exit", Duration::from_secs(10), || {
        supervisor_pids(&w.data).is_empty().then_some(())
    });
    w.ok(&["tick"]);
    let row = ended(&w, "job", &run["id"]);
    assert_eq!(row["status"], "failed", "{row}");
    assert_eq!(row["exitCode"], 3, "{row}");
    assert_eq!(row["stdout"], "first\n", "{row}");
    assert_eq!(row["stderr"], "last\n", "{row}");
    assert_eq!(row["error"], "exited with status 3", "{row}");
    assert!(!status.exists());
}

/// On a store shared by runners, a lease TTL the kill grace does not fit is refused at
/// start with one line naming the numbers, before anything is taken.
#[test]
fn unhonourable_lease_ttl_and_kill_grace_are_refused_naming_the_numbers() {
    let Some((w, _url)) = pg_world() else {
        return;
    };
    let (code, err) = w.fail(&["daemon", "run", "--lease-ttl", "3s"]);
    assert_eq!(code, 2, "{err}");
    let line = err.trim();
    assert_eq!(line.lines().count(), 1, "{err}");
    for part in [
        "--lease-ttl 3s",
        "--kill-grace 2s",
        "300ms margin",
        "700ms",
        "1s between two renewals",
    ] {
        assert!(line.contains(part), "{part}: {line}");
    }
    assert!(
        w.json(&["runners"]).as_array().unwrap().is_empty(),
        "nothing registered"
    );
    // What it advises fits.
    let mut ok = w.daemon_ready(&["--lease-ttl", "3s", "--kill-grace", "500ms"]);
    assert_eq!(ok.stop(), Some(0));
    // SQLite's daemon lease bounds no run: the same flags are fine there.
    let plain = World::new();
    let mut d: Daemon = plain.daemon_ready(&["--lease-ttl", "3s"]);
    assert_eq!(d.stop(), Some(0));
    kill_supervisors(&plain.data);
}

/// A run re-attached across `daemon restart` is recorded as the runner that started it
/// would have recorded it: with the session note of its resume (written with its pid,
/// so the new daemon finds it on the row) and its stop condition checked (issue #20
/// items 8 and 9 over #18). Before, the new daemon recorded it without either: no
/// `sessionNote`, and a loop whose `--until-output` the run met stayed active.
#[test]
fn a_reattached_run_keeps_its_session_note_and_its_stop_check() {
    use crate::agents::{create_agent, fixture, run_now, Fakes};
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let gate = w.root.path().join("gate");
    let started = w.root.path().join("started");
    let failing = w.root.path().join("failing.json");
    let passing = w.root.path().join("passing.json");
    let saying = |summary: &str| {
        fixture("claude_success.json").replace(
            "\"result\":\"Hello from the mock model.\"",
            &format!("\"result\":{}", serde_json::Value::from(summary)),
        )
    };
    std::fs::write(&failing, saying("2 tests failed")).unwrap();
    std::fs::write(&passing, saying("all tests pass")).unwrap();
    // A claude whose resumed run waits for the gate, then says the work is done.
    crate::util::write_script(
        &fakes.bin.join("claude"),
        &format!(
            r#"#!/bin/sh
cat >/dev/null
case " $* " in
  *" --resume "*)
    touch "{started}"
    n=0; while [ ! -e "{gate}" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done
    cat "{passing}" ;;
  *) cat "{failing}" ;;
esac
"#,
            started = started.display(),
            gate = gate.display(),
            passing = passing.display(),
            failing = failing.display()
        ),
    );
    create_agent(
        &w,
        "fixer",
        "claude",
        &[
            "--prompt",
            "fix the tests",
            "--session",
            "continue",
            "--until-output",
            "all tests pass",
        ],
    );
    let (code, first) = run_now(&w, "fixer");
    assert_eq!(code, 0, "{first:#}");
    let id = first["sessionId"].as_str().unwrap().to_owned();
    w.json(&["daemon", "start"]);
    w.make_due("fixer");
    wait_for("the resumed run to start", LONG, || {
        started.exists().then_some(())
    });
    let restarted = w.json(&["daemon", "restart"]);
    let new = restarted["pid"].as_u64().unwrap();
    wait_for("the new daemon to hold the run", LONG, || {
        let runs = w.runs("fixer");
        runs.iter()
            .any(|r| {
                r["status"] == "running"
                    && r["claimedBy"]
                        .as_str()
                        .is_some_and(|c| c.contains(&format!("/{new}/")))
            })
            .then_some(())
    });
    std::fs::write(&gate, b"open").unwrap();
    let lp = wait_for("the loop to be done", LONG, || {
        let lp = w.json(&["show", "fixer"]);
        (lp["status"] == "done").then_some(lp)
    });
    w.ok(&["daemon", "stop"]);
    let runs = w.runs("fixer");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let second = &runs[0];
    assert_eq!(second["status"], "succeeded", "{second:#}");
    assert_eq!(
        second["sessionNote"],
        format!("resumed session {id}"),
        "{second:#}"
    );
    let reason = lp["statusReason"].as_str().unwrap_or_default();
    assert!(reason.contains("matched /all tests pass/"), "{lp:#}");
    assert!(
        reason.contains(second["id"].as_str().unwrap()),
        "the reason names the run that met it: {lp:#}"
    );
}
