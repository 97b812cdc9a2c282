//! Issue #9, the engine's half: faults and hostile state that must neither stop other
//! loops, nor spin, nor run anything twice — a loop whose stored schedule no longer
//! parses, a full disk, a store locked by another process, a daemon stopped past its
//! lease, a backwards clock jump, a crash mid-run (output kept), run-now against a
//! run in flight, and removing a loop that runs. Every test drives the real binary and
//! a real daemon; waits poll a condition against a deadline.

use crate::util::{pid_alive, wait_for, World};
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn count(runs: &[Value], status: &str) -> usize {
    runs.iter().filter(|r| r["status"] == status).count()
}

/// Runs one SQL statement against the store, as another process (or a hand edit, or
/// an older or newer build) might.
fn sql(w: &World, statement: &str) {
    let conn = rusqlite::Connection::open(w.db_path()).expect("open db");
    conn.busy_timeout(Duration::from_secs(10)).expect("busy");
    conn.execute_batch(statement).expect("sql");
}

/// CPU time (user + system, in clock ticks) a process has used so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("comm")
        .1
        .split_whitespace()
        .collect();
    // Fields 14 and 15 of stat(5) (utime, stime); `fields` starts at field 3.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

fn lines_with(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// Every line of a journal written by the runs (`$LOOPS_SCHEDULED_FOR $LOOPS_ATTEMPT`)
/// is distinct: no slot attempt ran twice.
fn assert_no_duplicates(journal: &std::path::Path) -> usize {
    let text = std::fs::read_to_string(journal).unwrap_or_default();
    let mut seen = HashSet::new();
    for line in text.lines() {
        assert!(seen.insert(line.to_owned()), "ran twice: {line}\n{text}");
    }
    seen.len()
}

fn journal_cmd(journal: &std::path::Path) -> String {
    format!(
        "echo \"$LOOPS_SCHEDULED_FOR $LOOPS_ATTEMPT\" >> {}",
        journal.display()
    )
}

// ---- item 4a: one loop that cannot be scheduled ----

#[test]
fn a_loop_whose_schedule_no_longer_parses_is_parked_and_the_others_run() {
    let w = World::new();
    let journal = w.root.path().join("journal");
    w.create_cmd("good", &["--every", "1s"], &journal_cmd(&journal));
    let bad = w.create_cmd("bad-zone", &["--cron", "* * * * *"], "true");
    let unreadable = w.create_cmd("bad-row", &["--every", "1s"], "true");
    let mut d = w.daemon_ready(&[]);
    // A zone this build does not know and an enum value it cannot read, both due now.
    let due = chrono::Utc::now().timestamp_millis() - 1_000;
    sql(
        &w,
        &format!(
            "UPDATE loops SET schedule_json = '{{\"type\":\"cron\",\"expression\":\"* * * * *\",\"timezone\":\"Mars/Olympus_Mons\"}}', \
             next_run_at = {due}, due_at = {due} WHERE id = '{}';
             UPDATE loops SET catch_up = 'sometimes', next_run_at = {due}, due_at = {due} WHERE id = '{}';",
            bad["id"].as_str().unwrap(),
            unreadable["id"].as_str().unwrap()
        ),
    );
    wait_for("the good loop to run 3 times", LONG, || {
        (count(&w.runs("good"), "succeeded") >= 3).then_some(())
    });
    wait_for("the bad loops to be parked", LONG, || {
        let conn = rusqlite::Connection::open(w.db_path()).ok()?;
        let paused: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM loops WHERE status = 'paused'",
                [],
                |r| r.get(0),
            )
            .ok()?;
        (paused == 2).then_some(())
    });
    let parked = w.json(&["show", "bad-zone"]);
    assert_eq!(parked["status"], "paused");
    let runs = w.runs("bad-zone");
    assert_eq!(runs.len(), 1, "one failed run says why: {runs:?}");
    assert_eq!(runs[0]["status"], "failed");
    let error = runs[0]["error"].as_str().unwrap();
    assert!(
        error.contains("parked") && error.contains("Mars/Olympus_Mons"),
        "{error}"
    );
    let runs = w.json(&["runs", "--limit", "0"]);
    let row_run = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["loopId"] == unreadable["id"])
        .expect("the unreadable loop's failed run");
    assert!(
        row_run["error"].as_str().unwrap().contains("catch_up"),
        "{row_run}"
    );
    assert_eq!(d.stop(), Some(0));
    let log = d.log_text();
    assert_eq!(lines_with(&log, "loop parked"), 2, "said once each:\n{log}");
    assert_eq!(lines_with(&log, "scheduler pass failed"), 0, "{log}");
    assert_no_duplicates(&journal);
    // doctor names the parked loop and why (the one whose row still decodes).
    let doctor = w.run(&["--json", "doctor"]);
    let doc: Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    let parked = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "loop bad-zone")
        .unwrap_or_else(|| panic!("no check for the parked loop: {doc}"));
    assert_eq!(parked["status"], "warn");
    assert!(parked["detail"]
        .as_str()
        .unwrap()
        .contains("Mars/Olympus_Mons"));
    let unreadable = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "loop bad-row")
        .unwrap_or_else(|| panic!("no check for the unreadable loop: {doc}"));
    assert_eq!(unreadable["status"], "fail");
    // A row that cannot be read can still be removed, by its name or id.
    assert_eq!(w.json(&["remove", "bad-row"])["removed"], true);
    assert!(
        w.json(&["list"]).as_array().unwrap().len() == 2,
        "good and bad-zone remain"
    );
}

// ---- item 4b and the fault injection tests: disk full, busy store, stall ----

/// A tiny tmpfs mounted at `path` (root only), unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(path: &std::path::Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(path).expect("mount point");
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(path.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Whether faults needing root can be injected; says why not otherwise. Under CI
/// (`CI=true`, run as root) they must be.
fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} needs root under CI"
    );
    eprintln!("skipped: {test} needs root (mount a tmpfs)");
    false
}

/// Writes into `dir` until the file system is full; returns the filler's path.
fn fill_up(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("filler");
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.sync_all();
    path
}

#[test]
fn disk_full_backs_off_keeps_the_lease_and_resumes_when_space_returns() {
    if !root_or_skip("disk_full_backs_off_keeps_the_lease_and_resumes_when_space_returns") {
        return;
    }
    let w = World::new();
    let Some(_mount) = Tmpfs::mount(&w.data, "6m") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "cannot mount a tmpfs under CI"
        );
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    let journal = w.root.path().join("journal");
    // Each run stores ~16 KiB of output, so the database has to grow all the time.
    let cmd = format!(
        "{}; head -c 16000 /dev/zero | tr '\\0' x",
        journal_cmd(&journal)
    );
    w.create_cmd("job", &["--every", "300ms"], &cmd);
    let mut d = w.daemon_ready(&["--lease-ttl", "2s"]);
    wait_for("a few runs", LONG, || {
        (count(&w.runs("job"), "succeeded") >= 3).then_some(())
    });
    let filler = fill_up(&w.data);
    wait_for("the daemon to notice the full disk", LONG, || {
        let log = d.log_text();
        (log.contains("failed; retrying with back-off") || log.contains("cannot record run writes"))
            .then_some(())
    });
    // Observe the daemon while the disk stays full: it backs off instead of spinning,
    // and keeps its lease although its heartbeats fail for longer than the TTL.
    let before = cpu_ticks(d.pid());
    std::thread::sleep(Duration::from_secs(4));
    let used = cpu_ticks(d.pid()) - before;
    assert!(
        used < 100,
        "{used} ticks of CPU in 4 s with a full disk: spinning?"
    );
    assert!(
        d.child.try_wait().expect("wait").is_none(),
        "the daemon must not give up; log:\n{}",
        d.log_text()
    );
    let log = d.log_text();
    assert!(
        lines_with(&log, "ERROR") <= 4,
        "each fault is said once, not on every retry:\n{log}"
    );
    std::fs::remove_file(&filler).expect("free the space");
    let done = count(&w.runs("job"), "succeeded");
    wait_for("runs to resume by themselves", LONG, || {
        (count(&w.runs("job"), "succeeded") >= done + 3).then_some(())
    });
    assert_eq!(d.stop(), Some(0), "log:\n{}", d.log_text());
    let log = d.log_text();
    assert!(!log.contains("lease lost"), "{log}");
    let runs = w.runs("job");
    assert_eq!(
        count(&runs, "running"),
        0,
        "every run was recorded: {runs:?}"
    );
    assert_eq!(count(&runs, "abandoned"), 0, "nothing lost: {runs:?}");
    let ran = assert_no_duplicates(&journal);
    assert_eq!(
        ran,
        runs.len() - count(&runs, "skipped"),
        "every run that executed is recorded, and only those"
    );
}

#[test]
fn a_store_locked_by_another_process_delays_but_loses_nothing() {
    let w = World::new();
    let journal = w.root.path().join("journal");
    // Runs that are in flight while the lock is held must be recorded afterwards.
    let cmd = format!("{}; sleep 1", journal_cmd(&journal));
    w.create_cmd("job", &["--every", "500ms", "--overlap", "allow"], &cmd);
    let mut d = w.daemon_ready(&[]);
    wait_for("a first run", LONG, || {
        (count(&w.runs("job"), "succeeded") >= 1).then_some(())
    });
    // Another process takes the write lock for longer than the busy timeout (5 s).
    {
        let conn = rusqlite::Connection::open(w.db_path()).expect("open");
        conn.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let before = cpu_ticks(d.pid());
        std::thread::sleep(Duration::from_secs(8));
        let used = cpu_ticks(d.pid()) - before;
        assert!(
            used < 150,
            "{used} ticks of CPU in 8 s while locked: spinning?"
        );
        conn.execute_batch("ROLLBACK").expect("unlock");
    }
    let done = count(&w.runs("job"), "succeeded");
    wait_for("runs to go on", LONG, || {
        (count(&w.runs("job"), "succeeded") >= done + 3).then_some(())
    });
    assert_eq!(d.stop_terminating_runs(), Some(0), "log:\n{}", d.log_text());
    let log = d.log_text();
    assert!(
        log.contains("retrying with back-off"),
        "the lock was noticed:\n{log}"
    );
    let runs = w.runs("job");
    assert_eq!(count(&runs, "running"), 0, "{runs:?}");
    assert_eq!(count(&runs, "abandoned"), 0, "nothing lost: {runs:?}");
    assert_eq!(
        assert_no_duplicates(&journal),
        runs.len() - count(&runs, "skipped")
    );
}

#[test]
fn a_daemon_stopped_past_its_ttl_that_nobody_replaced_carries_on() {
    let w = World::new();
    w.create_cmd("job", &["--every", "500ms"], "true");
    let mut d = w.daemon_ready(&["--lease-ttl", "1s"]);
    wait_for("a run", LONG, || {
        (count(&w.runs("job"), "succeeded") >= 1).then_some(())
    });
    d.signal("STOP");
    wait_for("the lease to lapse", Duration::from_secs(10), || {
        let status = w.daemon_status();
        let expires = crate::util::instant(status.get("leaseExpiresAt")?);
        (expires + chrono::TimeDelta::seconds(1) < chrono::Utc::now()).then_some(())
    });
    d.signal("CONT");
    let done = count(&w.runs("job"), "succeeded");
    wait_for("the same daemon to go on running the loop", LONG, || {
        assert!(
            d.child.try_wait().expect("wait").is_none(),
            "nobody took the lease: the daemon must not exit; log:\n{}",
            d.log_text()
        );
        (count(&w.runs("job"), "succeeded") >= done + 3).then_some(())
    });
    assert_eq!(d.stop(), Some(0));
    assert!(!d.log_text().contains("lease lost"), "{}", d.log_text());
}

#[test]
fn a_daemon_fenced_out_by_another_says_who_took_the_lease() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1s"], "true");
    let mut first = w.daemon_ready(&["--lease-ttl", "1s"]);
    first.signal("STOP");
    wait_for("the lease to lapse", Duration::from_secs(10), || {
        let status = w.daemon_status();
        let expires = crate::util::instant(status.get("leaseExpiresAt")?);
        (expires < chrono::Utc::now()).then_some(())
    });
    let mut second = w.daemon_ready(&["--lease-ttl", "1s"]);
    first.signal("CONT");
    assert_ne!(first.wait_exit(LONG), Some(0));
    let log = first.log_text();
    assert!(
        log.contains(&format!("taken over by pid {}", second.pid())),
        "names the new holder:\n{log}"
    );
    assert_eq!(second.stop(), Some(0));
}

// ---- item 16: a backwards clock jump ----

pub(crate) const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

#[test]
fn loops_advanced_under_a_clock_that_ran_ahead_are_replanned_when_it_jumps_back() {
    if !std::path::Path::new(FAKETIME_LIB).exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "libfaketime must be installed under CI (.ci/run installs the faketime package)"
        );
        eprintln!("skipped: libfaketime not installed (apt-get install faketime)");
        return;
    }
    let mut w = World::new();
    let offset = w.root.path().join("faketime");
    // The host's clock runs a day ahead, then NTP steps it back.
    std::fs::write(&offset, "+1d\n").expect("offset");
    w.extra_env = vec![
        ("LD_PRELOAD".into(), FAKETIME_LIB.into()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            offset.display().to_string(),
        ),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ];
    let journal = w.root.path().join("journal");
    w.create_cmd("job", &["--every", "1s"], &journal_cmd(&journal));
    let mut d = w.daemon_ready(&[]);
    wait_for("runs under the fast clock", LONG, || {
        (count(&w.runs("job"), "succeeded") >= 2).then_some(())
    });
    std::fs::write(&offset, "+0\n").expect("jump back");
    let real_now = chrono::Utc::now();
    wait_for("runs at the corrected time", LONG, || {
        let runs = w.runs("job");
        let fresh = runs
            .iter()
            .filter(|r| r["status"] == "succeeded")
            .filter(|r| {
                (crate::util::instant(&r["scheduledFor"]) - real_now)
                    .num_hours()
                    .abs()
                    < 1
            })
            .count();
        (fresh >= 2).then_some(())
    });
    assert_eq!(d.stop(), Some(0));
    assert!(
        d.log_text().contains("the wall clock went back"),
        "{}",
        d.log_text()
    );
    assert_no_duplicates(&journal);
}

#[test]
fn a_daemon_started_after_the_clock_went_back_replans_at_once() {
    let w = World::new();
    let lp = w.create_cmd("job", &["--every", "1h"], "true");
    // As if the loop had been advanced by a clock a day ahead.
    let ahead = chrono::Utc::now().timestamp_millis() + 86_400_000;
    sql(
        &w,
        &format!(
            "UPDATE loops SET next_run_at = {ahead}, due_at = {ahead} WHERE id = '{}'",
            lp["id"].as_str().unwrap()
        ),
    );
    // doctor says so before any daemon has moved it.
    let doctor = w.run(&["--json", "doctor"]);
    let doc: Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    let warned = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "schedule job")
        .unwrap_or_else(|| panic!("no schedule check: {doc}"));
    assert_eq!(warned["status"], "warn", "{warned}");
    assert!(
        warned["detail"]
            .as_str()
            .unwrap()
            .contains("clock set back"),
        "{warned}"
    );
    // Two more loops left ahead: one warning names them all, not a line each.
    for name in ["job-b", "job-c"] {
        let lp = w.create_cmd(name, &["--every", "1h"], "true");
        sql(
            &w,
            &format!(
                "UPDATE loops SET next_run_at = {ahead}, due_at = {ahead} WHERE id = '{}'",
                lp["id"].as_str().unwrap()
            ),
        );
    }
    let mut d = w.daemon_ready(&[]);
    wait_for("the loops to be re-planned", LONG, || {
        ["job", "job-b", "job-c"]
            .iter()
            .all(|name| {
                let shown = w.json(&["show", name]);
                let next = crate::util::instant(&shown["nextRunAt"]);
                next <= chrono::Utc::now() + chrono::TimeDelta::hours(1)
            })
            .then_some(())
    });
    assert_eq!(d.stop(), Some(0));
    let log = d.log_text();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("moved them back"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("moved=3"), "{}", warned[0]);
    assert!(warned[0].contains("job, job-b, job-c"), "{}", warned[0]);
}

// ---- issue #19 item 9: jitter and catch-up after downtime ----

/// Whether libfaketime is here (a failure under CI, where it must be).
pub(crate) fn have_faketime() -> bool {
    if std::path::Path::new(FAKETIME_LIB).exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "libfaketime must be installed under CI (.ci/run installs the faketime package)"
    );
    eprintln!("skipped: libfaketime not installed (apt-get install faketime)");
    false
}

/// `loops tick` with the wall clock `offset` ahead (libfaketime's `+302m`).
fn tick_at(w: &World, offset: &str) {
    let out = w
        .cmd(&["tick"])
        .env("LD_PRELOAD", FAKETIME_LIB)
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .expect("tick");
    assert!(
        out.status.success(),
        "tick at {offset}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An `--every 1h --jitter 50m` loop whose 5th slot (5 h after creation) waits more than
/// 10 minutes, so that 302 minutes after creation it is not due yet while the 4th is
/// (the case); a loop whose delay is shorter is made again.
fn jittered_hourly(w: &World, name: &str, catch_up: &str, journal: &std::path::Path) -> Value {
    use loops::core::schedule::jitter_delay;
    for _ in 0..50 {
        let lp = w.json(&[
            "create",
            "command",
            name,
            "--every",
            "1h",
            "--jitter",
            "50m",
            "--catch-up",
            catch_up,
            "--cmd",
            &journal_cmd(journal),
        ]);
        let id = loops::core::LoopId::new(lp["id"].as_str().unwrap());
        let fifth = crate::util::instant(&lp["nextRunAt"]) + chrono::TimeDelta::hours(4);
        if jitter_delay(&id, fifth, 50 * 60_000) > 10 * 60_000 {
            return lp;
        }
        w.ok(&["remove", name]);
    }
    panic!("no loop id with a long enough delay in 50 tries");
}

fn journal_slots(journal: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(journal)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn jittered_catch_up_after_downtime_runs_the_newest_due_slot_and_drops_none() {
    if !have_faketime() {
        return;
    }
    let w = World::new();
    let latest_journal = w.root.path().join("latest");
    let all_journal = w.root.path().join("all");
    let latest = jittered_hourly(&w, "latest", "latest", &latest_journal);
    let all = jittered_hourly(&w, "all", "all", &all_journal);
    let slot = |lp: &Value, hours: i64| {
        loops::core::format_instant(
            &(crate::util::instant(&lp["nextRunAt"]) + chrono::TimeDelta::hours(hours)),
        )
    };

    // Down for 5 h: slots 1–4 h are due, the 5 h slot's delay has not passed.
    tick_at(&w, "+302m");
    assert_eq!(
        journal_slots(&latest_journal),
        [slot(&latest, 3)],
        "latest: one run, for the newest due slot (LOOPS_SCHEDULED_FOR)"
    );
    let runs = w.runs("latest");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["scheduledFor"], slot(&latest, 3).as_str());
    assert_eq!(
        w.json(&["show", "latest"])["nextRunAt"],
        slot(&latest, 4).as_str(),
        "latest: the slot not yet due is next"
    );
    assert_eq!(
        journal_slots(&all_journal),
        (0..4).map(|h| slot(&all, h)).collect::<Vec<_>>(),
        "all: every due slot, oldest first"
    );
    assert_eq!(
        w.json(&["show", "all"])["nextRunAt"],
        slot(&all, 4).as_str(),
        "all: the slot not yet due is next, not dropped"
    );

    // 5 h 50 min after creation: the 5 h slot is due (its delay is under 50 min), the 6 h
    // one not yet — each loop runs the 5 h slot, once.
    tick_at(&w, "+350m");
    assert_eq!(
        journal_slots(&latest_journal),
        [slot(&latest, 3), slot(&latest, 4)]
    );
    assert_eq!(
        journal_slots(&all_journal),
        (0..5).map(|h| slot(&all, h)).collect::<Vec<_>>()
    );
    assert_no_duplicates(&latest_journal);
    assert_no_duplicates(&all_journal);
}

// ---- item 5: run-now and overlap skip ----

#[test]
fn run_now_refuses_a_second_concurrent_run_unless_overlap_is_allowed() {
    let w = World::new();
    let gate = w.root.path().join("gate");
    let wait = format!(
        "n=0; while [ ! -e {} ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done",
        gate.display()
    );
    w.create_cmd("slow", &["--every", "1h"], &wait);
    let mut first = w.cmd(&["run-now", "slow"]).spawn().expect("run-now");
    wait_for("the first run to be running", LONG, || {
        (count(&w.runs("slow"), "running") == 1).then_some(())
    });
    let (code, err) = w.fail(&["run-now", "slow"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("already running") && err.contains("--allow-overlap"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(w.runs("slow").len(), 1, "nothing was claimed");
    let mut second = w
        .cmd(&["run-now", "slow", "--allow-overlap"])
        .spawn()
        .expect("run-now");
    wait_for("two runs in flight", LONG, || {
        (count(&w.runs("slow"), "running") == 2).then_some(())
    });
    std::fs::write(&gate, b"open").expect("gate");
    assert!(first.wait().expect("wait").success());
    assert!(second.wait().expect("wait").success());
    assert_eq!(count(&w.runs("slow"), "succeeded"), 2);
}

#[test]
fn run_now_refuses_while_the_daemon_runs_the_loop() {
    let w = World::new();
    let gate = w.root.path().join("gate");
    let wait = format!(
        "n=0; while [ ! -e {} ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done",
        gate.display()
    );
    w.create_cmd("slow", &["--every", "1s"], &wait);
    let mut d = w.daemon_ready(&[]);
    wait_for("the daemon's run", LONG, || {
        (count(&w.runs("slow"), "running") == 1).then_some(())
    });
    let (code, err) = w.fail(&["run-now", "slow"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already running"), "{err}");
    assert_eq!(count(&w.runs("slow"), "running"), 1);
    std::fs::write(&gate, b"open").expect("gate");
    assert_eq!(d.stop(), Some(0));
}

// ---- item 14: removing a loop that runs ----

#[test]
fn remove_refuses_a_running_loop_and_force_stops_its_process_first() {
    let w = World::new();
    w.create_cmd("busy", &["--every", "1s"], "sleep 60");
    let mut d = w.daemon_ready(&[]);
    let pid = wait_for("the run's pid", LONG, || {
        w.runs("busy")
            .iter()
            .find(|r| r["status"] == "running")
            .and_then(|r| r["pid"].as_u64())
    });
    let (code, err) = w.fail(&["remove", "busy"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("in flight") && err.contains("--force"),
        "{err}"
    );
    assert!(pid_alive(pid));
    assert_eq!(w.json(&["show", "busy"])["name"], "busy", "nothing removed");
    let out = w.json(&["remove", "busy", "--force"]);
    assert_eq!(out["removed"], true);
    assert!(!pid_alive(pid), "the run's process was stopped");
    let (code, _) = w.fail(&["show", "busy"]);
    assert_eq!(code, 2);
    assert_eq!(d.stop(), Some(0));
    assert!(
        !d.log_text().contains("WARN"),
        "the runner was not surprised:\n{}",
        d.log_text()
    );
}

// ---- item 15: output survives the runner ----

fn spooled(w: &World, run_id: &str) -> String {
    std::fs::read_to_string(w.data.join("spool").join(format!("run-{run_id}.stdout")))
        .unwrap_or_default()
}

#[test]
fn an_abandoned_run_keeps_what_it_printed_before_the_crash() {
    let w = World::new();
    w.create_cmd(
        "chatty",
        &["--every", "1s"],
        "echo before-the-crash; sleep 60",
    );
    let mut d = w.daemon_ready(&[]);
    let run = wait_for("the output to be spooled", LONG, || {
        let run = w
            .runs("chatty")
            .into_iter()
            .find(|r| r["status"] == "running")?;
        spooled(&w, run["id"].as_str()?)
            .contains("before-the-crash")
            .then_some(run)
    });
    // The daemon, its supervisor and the run all killed: nobody saw the run end, and
    // what was spooled is all there is.
    d.signal("KILL");
    d.wait_exit(Duration::from_secs(5));
    let pid = run["pid"].as_u64().expect("pid");
    crate::util::kill_supervisors(&w.data);
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    wait_for("the child to be gone", Duration::from_secs(5), || {
        (!pid_alive(pid)).then_some(())
    });
    let mut second = w.daemon_ready(&[]);
    let abandoned = wait_for("the run to be abandoned", LONG, || {
        w.runs("chatty")
            .into_iter()
            .find(|r| r["id"] == run["id"] && r["status"] == "abandoned")
    });
    assert_eq!(second.stop(), Some(0));
    let shown = w.json(&["runs", "chatty", "--show-output"]);
    let row = shown
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == abandoned["id"])
        .unwrap();
    assert!(
        row["stdout"].as_str().unwrap().contains("before-the-crash"),
        "{row}"
    );
    assert!(
        spooled(&w, run["id"].as_str().unwrap()).is_empty(),
        "the spool is cleaned up once recorded"
    );
}

#[test]
fn a_reattached_run_keeps_what_it_printed_before_and_after_the_crash() {
    let w = World::new();
    let gate = w.root.path().join("gate");
    let cmd = format!(
        "echo printed-early; n=0; while [ ! -e {} ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done; echo printed-late",
        gate.display()
    );
    w.create_cmd("adoptee", &["--every", "1s"], &cmd);
    let mut d = w.daemon_ready(&[]);
    let run = wait_for("the output to be spooled", LONG, || {
        let run = w
            .runs("adoptee")
            .into_iter()
            .find(|r| r["status"] == "running")?;
        spooled(&w, run["id"].as_str()?)
            .contains("printed-early")
            .then_some(run)
    });
    d.signal("KILL");
    d.wait_exit(Duration::from_secs(5));
    let mut second = w.daemon_ready(&[]);
    wait_for("the run to be re-attached", LONG, || {
        second
            .log_text()
            .contains("re-attached to a run")
            .then_some(())
    });
    std::fs::write(&gate, b"open").expect("gate");
    let row = wait_for("the re-attached run to end", LONG, || {
        let shown = w.json(&["runs", "adoptee", "--show-output", "--limit", "0"]);
        shown
            .as_array()?
            .iter()
            .find(|r| r["id"] == run["id"] && r["status"] == "succeeded")
            .cloned()
    });
    assert_eq!(second.stop(), Some(0));
    assert_eq!(
        row["stdout"], "printed-early\nprinted-late\n",
        "every line, before and after the crash: {row}"
    );
    assert_eq!(row["exitCode"], 0, "{row}");
}
