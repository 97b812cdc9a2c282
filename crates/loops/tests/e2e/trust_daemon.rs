//! Issue #9 (trust), daemon and store side: stale pid files, data dir ownership and
//! modes, a store deleted under a running daemon, `daemon install` escaping, corrupt
//! pages, closed stdout, stalled daemons, read-only stores and `--interval-ms`. Each
//! fault is injected into a real binary (and, where it matters, a real daemon), and
//! each test checks that nothing is lost, the message is one clear line, and that the
//! store recovers by itself where it can.

use crate::util::{bin, pid_alive, wait_for, World};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--json daemon status`, whatever its exit code (a stalled daemon exits 1).
fn status_json(w: &World) -> (Option<i32>, Value) {
    let out = w.run(&["--json", "daemon", "status"]);
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad json ({e}): {}{}", stdout(&out), stderr(&out)));
    (out.status.code(), value)
}

/// The `doctor --json` check named `name`.
fn doctor_check(w: &World, name: &str) -> Value {
    let out = w.run(&["--json", "doctor"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad doctor json ({e}): {}{}", stdout(&out), stderr(&out)));
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["check"] == name).cloned())
        .unwrap_or_else(|| panic!("no {name} check: {report}"))
}

/// A process we started and must not leave behind.
struct Spawned(Child);

impl Spawned {
    fn sleep() -> Self {
        Spawned(
            Command::new("sleep")
                .arg("100")
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn sleep"),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A daemon started with `loops daemon start` (not our child): killed by pid if a
/// test fails before stopping it.
struct Detached(u32);

impl Drop for Detached {
    fn drop(&mut self) {
        if pid_alive(u64::from(self.0)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0 as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// Item 1: stale pid file
// ---------------------------------------------------------------------------------

#[test]
fn stale_pid_file_is_reported_and_removed_never_signalled() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1h"], "true");
    let victim = Spawned::sleep();
    let pid_file = w.data.join("daemon.pid");
    let plant = || std::fs::write(&pid_file, format!("{}\n", victim.pid())).expect("pid file");

    plant();
    assert_eq!(doctor_check(&w, "daemon")["status"], "warn");
    let check = doctor_check(&w, "pid file");
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["detail"].as_str().unwrap_or("").contains("stale"),
        "{check}"
    );

    let (code, status) = status_json(&w);
    assert_eq!(code, Some(0), "{status}");
    assert_eq!(status["running"], false, "{status}");
    assert_eq!(status["state"], "stopped", "{status}");
    assert_eq!(status["stalePidFile"], true, "{status}");
    assert!(status["pid"].is_null(), "{status}");
    plant();
    let text = w.ok(&["daemon", "status"]);
    assert!(text.contains("not running"), "{text}");
    assert!(text.contains("stale pid file"), "{text}");

    plant();
    let out = w.run(&["daemon", "stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("no daemon is running"),
        "{}",
        stdout(&out)
    );
    assert!(
        pid_alive(u64::from(victim.pid())),
        "`daemon stop` must not signal a pid named only by a pid file"
    );
    assert!(!pid_file.exists(), "stale pid file removed by stop");

    // `start` agrees: nothing runs, so it starts a daemon and replaces the file.
    plant();
    let started = w.json(&["daemon", "start"]);
    let pid = started["pid"].as_u64().expect("pid") as u32;
    let _guard = Detached(pid);
    assert_ne!(pid, victim.pid());
    assert_eq!(
        std::fs::read_to_string(&pid_file).expect("pid file").trim(),
        pid.to_string()
    );
    let (code, status) = status_json(&w);
    assert_eq!((code, status["state"].as_str()), (Some(0), Some("running")));
    assert_eq!(status["pid"].as_u64(), Some(u64::from(pid)));
    assert_eq!(doctor_check(&w, "daemon")["status"], "ok");
    assert_eq!(w.json(&["daemon", "stop"])["stopped"], true);
    assert!(!pid_alive(u64::from(pid)));
    assert!(
        pid_alive(u64::from(victim.pid())),
        "the sleep survived it all"
    );
}

// ---------------------------------------------------------------------------------
// Item 16 (part): a stopped (SIGSTOP) daemon is stalled, not running
// ---------------------------------------------------------------------------------

#[test]
fn stalled_daemon_is_reported_stalled_and_can_be_stopped() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1h"], "true");
    let mut d = w.daemon_ready(&["--lease-ttl", "1s"]);
    d.signal("STOP");
    let status = wait_for("the lease of the stopped daemon to lapse", LONG, || {
        let (code, status) = status_json(&w);
        (status["state"] == "stalled").then_some((code, status))
    });
    assert_eq!(status.0, Some(1), "stalled is not success: {}", status.1);
    assert_eq!(
        status.1["running"], true,
        "the process is there: {}",
        status.1
    );
    assert_eq!(status.1["pid"].as_u64(), Some(u64::from(d.pid())));
    let out = w.run(&["daemon", "status"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("daemon: stalled (pid {}", d.pid())) && text.contains("expired"),
        "{text}"
    );
    let check = doctor_check(&w, "daemon");
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"].as_str().unwrap_or("").contains("stalled"),
        "{check}"
    );
    let (code, err) = w.fail(&["daemon", "start"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("stalled") && err.contains("daemon stop"),
        "{err}"
    );
    // It is provably this store's daemon (lease pid + start time + host): stop may
    // signal it, and wakes it so it can act on SIGTERM.
    let stop = w.run(&["--json", "daemon", "stop"]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    assert!(d.wait_exit(LONG).is_some());
}

// ---------------------------------------------------------------------------------
// Item 2: data dir ownership and modes
// ---------------------------------------------------------------------------------

#[test]
fn loose_data_dir_and_files_are_tightened() {
    let w = World::new();
    std::fs::create_dir_all(&w.data).expect("mkdir");
    std::fs::set_permissions(&w.data, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let log = w.data.join("daemon.log");
    std::fs::write(&log, b"old log\n").expect("log");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    w.create_cmd("job", &["--every", "1h"], "true");
    assert_eq!(mode(&w.data), 0o700, "dir tightened");
    assert_eq!(mode(&w.db_path()), 0o600);
    assert_eq!(mode(&log), 0o600, "existing log tightened");

    // A db made world-readable later is tightened again by the next command.
    std::fs::set_permissions(w.db_path(), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    w.ok(&["list"]);
    assert_eq!(mode(&w.db_path()), 0o600);

    let started = w.json(&["daemon", "start"]);
    let _guard = Detached(started["pid"].as_u64().expect("pid") as u32);
    for file in [
        "daemon.pid",
        "daemon.log",
        "daemon.sock",
        "loops.db",
        "loops.db-wal",
    ] {
        let path = w.data.join(file);
        assert_eq!(mode(&path), 0o600, "{file}");
    }
    let check = doctor_check(&w, "permissions");
    assert_eq!(check["status"], "ok", "{check}");
    w.ok(&["daemon", "stop"]);
}

#[test]
fn data_dir_owned_by_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: chown to another uid needs root");
        return;
    }
    let nobody = nix::unistd::Uid::from_raw(65534);
    let w = World::new();
    std::fs::create_dir_all(&w.data).expect("mkdir");
    std::fs::set_permissions(&w.data, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    nix::unistd::chown(&w.data, Some(nobody), None).expect("chown");
    for args in [
        &["list"][..],
        &["create", "command", "x", "--every", "1m", "--cmd", "true"][..],
        &["daemon", "run"][..],
    ] {
        let (code, err) = w.fail(args);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("is owned by uid 65534") && err.contains("refusing"),
            "{err}"
        );
    }
    assert!(!w.db_path().exists(), "nothing was created in it");
    let out = w.run(&["--json", "doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let check = doctor_check(&w, "permissions");
    assert_eq!(check["status"], "fail", "{check}");

    // Our own dir, but a database someone else planted in it.
    let w = World::new();
    w.create_cmd("job", &["--every", "1h"], "true");
    nix::unistd::chown(&w.db_path(), Some(nobody), None).expect("chown");
    let (code, err) = w.fail(&["list"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("loops.db is owned by uid 65534"), "{err}");
    assert_eq!(doctor_check(&w, "permissions")["status"], "fail");

    // A symlinked data dir is fine when we own the target; not when someone else does.
    let w = World::new();
    let target = w.root.path().join("real");
    std::fs::create_dir_all(&target).expect("mkdir");
    std::os::unix::fs::symlink(&target, &w.data).expect("symlink");
    w.create_cmd("job", &["--every", "1h"], "true");
    assert!(target.join("loops.db").exists());
    nix::unistd::chown(&target, Some(nobody), None).expect("chown");
    let (code, err) = w.fail(&["list"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("owned by uid 65534"), "{err}");
}

// ---------------------------------------------------------------------------------
// Item 9: the store deleted under a running daemon
// ---------------------------------------------------------------------------------

fn delete_store(w: &World) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(w.data.join(format!("loops.db{suffix}")));
    }
}

#[test]
fn store_deleted_under_a_running_daemon() {
    // A daemon with caps records them in the store at startup: that write must not
    // keep it from noticing (issue #20 item 6).
    let caps: &[&str] = &["--max-concurrent-per", "provider=claude:1,kind=command:2"];
    for (db_only, extra) in [(false, &[][..]), (true, &[][..]), (false, caps)] {
        let w = World::new();
        w.create_cmd("old", &["--every", "1h"], "true");
        let mut d = w.daemon_ready(extra);
        if db_only {
            // Only loops.db: its -wal/-shm stay behind, still open in the daemon.
            std::fs::remove_file(w.db_path()).expect("rm");
        } else {
            delete_store(&w);
        }
        // A new store appears with the next command, which pokes the daemon.
        let marker = w.root.path().join("ran");
        w.create_cmd(
            "new",
            &["--every", "1s"],
            &format!("touch {}", marker.display()),
        );
        // The poke wakes it at once; the deadline is for a loaded machine (a full local run saw the
        // whole exit take over 10 s with other builds on its two cores).
        let code = d.wait_exit(Duration::from_secs(30));
        assert_ne!(code, Some(0), "exits non-zero; log:\n{}", d.log_text());
        let log = d.log_text();
        assert!(
            log.contains("was removed or replaced; exiting"),
            "one clear line: {log}"
        );
        // status, doctor and start agree: no daemon, and a new one can start.
        let (code, status) = status_json(&w);
        assert_eq!((code, status["state"].as_str()), (Some(0), Some("stopped")));
        assert_eq!(status["stalePidFile"], false, "{status}");
        assert_eq!(doctor_check(&w, "daemon")["status"], "warn");
        let listed = w.json(&["list"]);
        let names: Vec<_> = listed
            .as_array()
            .expect("array")
            .iter()
            .map(|l| l["name"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(names, ["new"], "the new store holds only the new loop");
        let started = w.json(&["daemon", "start"]);
        let _guard = Detached(started["pid"].as_u64().expect("pid") as u32);
        wait_for("the new loop to run on the new store", LONG, || {
            marker.exists().then_some(())
        });
        assert_eq!(w.json(&["daemon", "stop"])["stopped"], true);
        let runs = w.runs("new");
        assert!(runs.iter().any(|r| r["status"] == "succeeded"), "{runs:?}");
    }
}

#[test]
fn new_store_does_not_share_a_deleted_stores_live_wal() {
    let w = World::new();
    w.create_cmd("old", &["--every", "1h"], "true");
    // Another process (here: this test) still has the old store open with commits
    // only in its WAL, as a daemon that has not noticed the deletion yet would.
    let old = rusqlite::Connection::open(w.db_path()).expect("open");
    old.pragma_update(None, "wal_autocheckpoint", 0)
        .expect("pragma");
    old.execute_batch("UPDATE loops SET description = 'in the WAL only'")
        .expect("write");
    std::fs::remove_file(w.db_path()).expect("rm");
    assert!(w.data.join("loops.db-wal").exists());
    // A new store at the same path must not pick up the live -wal/-shm.
    w.create_cmd("new", &["--every", "1h"], "true");
    let names: Vec<String> = w
        .json(&["list"])
        .as_array()
        .expect("array")
        .iter()
        .map(|l| l["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(names, ["new"]);
    // The old connection keeps working on its own (unlinked) files.
    let description: String = old
        .query_row("SELECT description FROM loops", [], |r| r.get(0))
        .expect("read");
    assert_eq!(description, "in the WAL only");
    drop(old);
    assert_eq!(w.json(&["list"]).as_array().map(Vec::len), Some(1));
}

// ---------------------------------------------------------------------------------
// Item 11: `daemon install` escaping
// ---------------------------------------------------------------------------------

#[test]
fn install_escapes_a_hostile_data_dir() {
    let mut w = World::new();
    w.data = w.root.path().join("my data%n \"dir\"");
    let out = w.json(&["daemon", "install"]);
    let path = PathBuf::from(out["path"].as_str().expect("path"));
    let unit = std::fs::read_to_string(&path).expect("unit");
    let expected = format!(
        "Environment=\"LOOPS_DATA_DIR={}/my data%%n \\\"dir\\\"\"\n",
        w.root.path().display()
    );
    assert!(unit.contains(&expected), "{unit}");
    assert!(
        unit.contains(&format!("ExecStart=\"{}\" daemon run\n", bin())),
        "{unit}"
    );
    // Every line is one known key: nothing was injected.
    for line in unit
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('['))
    {
        let key = line.split('=').next().unwrap_or("");
        assert!(
            [
                "Description",
                "Documentation",
                "Type",
                "ExecStart",
                "Environment",
                "Restart",
                "RestartSec",
                "KillMode",
                "KillSignal",
                "TimeoutStopSec",
                "WantedBy"
            ]
            .contains(&key),
            "unexpected line {line:?} in\n{unit}"
        );
    }
    // systemd itself agrees, when it is here to ask.
    if let Ok(out) = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
    {
        let text = stderr(&out);
        assert!(
            !text.contains("Invalid") && !text.contains("Failed to resolve"),
            "systemd-analyze: {text}"
        );
    }

    // A relative data dir is made absolute.
    let rel = World::new();
    let out = rel
        .cmd(&["--json", "daemon", "install"])
        .env("LOOPS_DATA_DIR", "rel dir")
        .current_dir(rel.root.path())
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", stderr(&out));
    let unit =
        std::fs::read_to_string(rel.home.join(".config/systemd/user/loops.service")).expect("unit");
    assert!(
        unit.contains(&format!(
            "Environment=\"LOOPS_DATA_DIR={}/rel dir\"",
            rel.root.path().display()
        )),
        "{unit}"
    );
}

#[test]
fn install_refuses_a_data_dir_with_a_newline() {
    let mut w = World::new();
    w.data = w
        .root
        .path()
        .join("evil\nExecStartPre=/bin/touch /tmp/pwned");
    let (code, err) = w.fail(&["daemon", "install"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("control character"), "{err}");
    assert!(
        !w.home.join(".config/systemd/user/loops.service").exists(),
        "nothing written"
    );
}

// ---------------------------------------------------------------------------------
// Item 12: corruption
// ---------------------------------------------------------------------------------

fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Copies the WAL into the database; closing the last connection then removes the
/// `-wal` and `-shm` files.
fn checkpoint(db: &Path) {
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
}

/// Overwrites one b-tree page of `table` (a leaf in the middle of the file when the
/// table spans several pages) with garbage; the daemon must be stopped. Returns the
/// page number.
fn corrupt_table_page(db: &Path, table: &str) -> u32 {
    let (page_size, root): (u32, u32) = {
        let conn = rusqlite::Connection::open(db).expect("open");
        let page_size = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .expect("page size");
        let root = conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .expect("root page");
        (page_size, root)
    };
    checkpoint(db);
    let mut bytes = file_bytes(db);
    let offset = |page: u32| (page as usize - 1) * page_size as usize;
    let root_at = offset(root);
    // An interior table page (0x05) names its right-most child at bytes 8..12.
    let page = if bytes[root_at] == 0x05 {
        u32::from_be_bytes(
            bytes[root_at + 8..root_at + 12]
                .try_into()
                .expect("4 bytes"),
        )
    } else {
        root
    };
    let at = offset(page);
    assert!(
        at > 0 && at + (page_size as usize) <= bytes.len(),
        "page {page} in the file"
    );
    for (i, b) in bytes[at..at + page_size as usize].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(db, &bytes).expect("write");
    page
}

#[test]
fn corrupt_page_is_refused_everywhere_and_nothing_is_written() {
    let w = World::new();
    for i in 0..3 {
        w.create_cmd(&format!("job{i}"), &["--every", "1h"], "true");
    }
    w.create_cmd(
        "noisy",
        &["--every", "1h"],
        "head -c 1500 /dev/zero | tr '\\0' x",
    );
    for _ in 0..40 {
        w.ok(&["run-now", "noisy"]);
    }
    corrupt_table_page(&w.db_path(), "runs");
    let before = file_bytes(&w.db_path());

    let mut daemon = w.daemon(&[]);
    let code = daemon.wait_exit(Duration::from_secs(20));
    let log = daemon.log_text();
    assert_eq!(code, Some(3), "daemon run refuses a corrupt store: {log}");
    assert_eq!(log.lines().count(), 1, "one line: {log}");
    assert!(
        log.starts_with("error: ") && log.contains("corrupt"),
        "{log}"
    );
    assert!(log.contains("loops.db"), "{log}");

    for args in [
        &["runs", "noisy", "--limit", "0"][..],
        &["--json", "runs"][..],
        &["run-now", "noisy"][..],
    ] {
        let (code, err) = w.fail(args);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains("corrupt"),
            "{err}"
        );
    }
    assert_eq!(file_bytes(&w.db_path()), before, "nothing written");
    let check = doctor_check(&w, "database");
    assert_eq!(check["status"], "fail", "{check}");

    // A corrupt page of the loops table: `list` and writes refuse it too.
    let w = World::new();
    for i in 0..60 {
        w.create_cmd(
            &format!("job{i:02}-{}", "x".repeat(100)),
            &["--every", "1h"],
            "true",
        );
    }
    corrupt_table_page(&w.db_path(), "loops");
    let before = file_bytes(&w.db_path());
    for args in [
        &["list"][..],
        &["--json", "list"][..],
        &[
            "create", "command", "late", "--every", "1m", "--cmd", "true",
        ][..],
    ] {
        let (code, err) = w.fail(args);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("corrupt"), "{err}");
    }
    assert_eq!(file_bytes(&w.db_path()), before, "nothing written");
    let mut daemon = w.daemon(&[]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)), Some(3));
}

/// The engine (`tick`, `run-now`) meets the damaged page only when it claims: the
/// loop itself reads fine. A corrupt store exits 3 however it is reached (#10 item 6).
#[test]
fn a_corrupt_store_met_by_the_engine_exits_3() {
    let w = World::new();
    w.create_cmd(
        "noisy",
        &["--every", "1h"],
        "head -c 1500 /dev/zero | tr '\\0' x",
    );
    for _ in 0..40 {
        w.ok(&["run-now", "noisy"]);
    }
    w.make_due("noisy");
    corrupt_table_page(&w.db_path(), "runs");
    let before = file_bytes(&w.db_path());
    // The loop is readable: what fails is the engine's claim.
    assert_eq!(w.json(&["show", "noisy"])["name"], "noisy");
    for args in [
        &["tick"][..],
        &["--json", "tick"][..],
        &["tick", "--max-concurrent", "1"][..],
        &["run-now", "noisy"][..],
        &["--json", "run-now", "noisy"][..],
    ] {
        let (code, err) = w.fail(args);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains("corrupt"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(file_bytes(&w.db_path()), before, "nothing written");
}

// ---------------------------------------------------------------------------------
// Item 13: a closed stdout
// ---------------------------------------------------------------------------------

/// Runs `loops args` with stdout a pipe whose read end is already closed.
fn run_into_closed_pipe(w: &World, args: &[&str]) -> Output {
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    w.cmd(args)
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .expect("spawn")
}

#[test]
fn closed_stdout_is_not_a_panic() {
    let w = World::new();
    for i in 0..30 {
        w.create_cmd(&format!("job{i:02}"), &["--every", "1h"], "true");
    }
    w.ok(&["run-now", "job00"]);
    std::fs::write(w.data.join("daemon.log"), "a log line\n".repeat(1000)).expect("log");
    for args in [
        &["completions", "bash"][..],
        &["completions", "zsh"][..],
        &["daemon", "status"][..],
        &["--json", "daemon", "status"][..],
        &["--json", "list"][..],
        &["list"][..],
        &["show", "job00"][..],
        &["runs"][..],
        &["--json", "runs"][..],
        &["doctor"][..],
        &["workflows", "list"][..],
        &["daemon", "logs"][..],
        &["--help"][..],
    ] {
        let out = run_into_closed_pipe(&w, args);
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?} is silent on a closed pipe: {err}");
    }
}

// ---------------------------------------------------------------------------------
// Item 16 (part): a read-only store still serves read commands
// ---------------------------------------------------------------------------------

/// Makes `path` unwritable even for root (`chattr +i`, which CI as root supports on
/// ext4), else by mode. Returns an undo closure, or None when neither works.
fn make_unwritable(path: &Path, mode_bits: u32) -> Option<impl Fn()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode_bits)).expect("chmod");
    let immutable = is_root()
        && Command::new("chattr")
            .arg("+i")
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if is_root() && !immutable {
        return None;
    }
    let path = path.to_path_buf();
    Some(move || {
        if immutable {
            let _ = Command::new("chattr").arg("-i").arg(&path).status();
        }
        let restore = if path.is_dir() { 0o700 } else { 0o600 };
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(restore));
    })
}

fn read_commands_work(w: &World) {
    let listed = w.json(&["list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    assert!(w.ok(&["list"]).contains("job"));
    assert_eq!(w.json(&["show", "job"])["name"], "job");
    assert_eq!(w.json(&["runs", "job"]).as_array().map(Vec::len), Some(1));
    assert_eq!(w.json(&["workflows", "list"]), serde_json::json!([]));
    let (code, status) = status_json(w);
    assert_eq!((code, status["state"].as_str()), (Some(0), Some("stopped")));
    let out = w.run(&["--json", "doctor"]);
    let report: Value = serde_json::from_slice(&out.stdout).expect("doctor json");
    let db = report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["check"] == "database").cloned())
        .expect("database check");
    assert!(
        db["detail"].as_str().unwrap_or("").contains("read-only"),
        "{db}"
    );
}

fn writes_fail_read_only(w: &World) {
    for args in [
        &["create", "command", "x", "--every", "1m", "--cmd", "true"][..],
        &["pause", "job"][..],
        &["run-now", "job"][..],
    ] {
        let (code, err) = w.fail(args);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("read-only"), "{err}");
    }
}

fn small_store() -> World {
    let w = World::new();
    w.create_cmd("job", &["--every", "1h"], "true");
    w.create_cmd("other", &["--every", "1h"], "true");
    w.ok(&["run-now", "job"]);
    w
}

#[test]
fn read_only_database_file_serves_reads() {
    let w = small_store();
    let before = file_bytes(&w.db_path());
    let Some(undo) = make_unwritable(&w.db_path(), 0o400) else {
        eprintln!("skipped: cannot make a file read-only here (root without chattr)");
        return;
    };
    read_commands_work(&w);
    writes_fail_read_only(&w);
    undo();
    assert_eq!(file_bytes(&w.db_path()), before);
    // Writable again: everything works as before.
    w.create_cmd("after", &["--every", "1h"], "true");
}

#[test]
fn read_only_data_dir_serves_reads() {
    let w = small_store();
    // The hard case: no -shm to reuse and none can be created, so SQLite cannot use
    // the WAL index at all.
    checkpoint(&w.db_path());
    for file in ["loops.db-wal", "loops.db-shm"] {
        assert!(!w.data.join(file).exists(), "{file} left behind");
    }
    let Some(undo) = make_unwritable(&w.data, 0o500) else {
        eprintln!("skipped: cannot make a directory read-only here (root without chattr)");
        return;
    };
    read_commands_work(&w);
    writes_fail_read_only(&w);
    undo();
    w.create_cmd("after", &["--every", "1h"], "true");
}

// ---------------------------------------------------------------------------------
// Item 17 (part): OpenLoops' `--interval-ms`
// ---------------------------------------------------------------------------------

#[test]
fn interval_ms_is_accepted_by_run_and_start() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1h"], "true");
    let mut d = w.daemon_ready(&["--interval-ms", "200"]);
    assert_eq!(d.stop(), Some(0), "{}", d.log_text());
    let started = w.json(&["daemon", "start", "--interval-ms", "200"]);
    let pid = started["pid"].as_u64().expect("pid") as u32;
    let _guard = Detached(pid);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let args: Vec<_> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert!(
        args.windows(2)
            .any(|p| p[0] == "--interval-ms" && p[1] == "200"),
        "passed through: {args:?}"
    );
    w.ok(&["daemon", "stop"]);
    let (code, err) = w.fail(&["daemon", "run", "--interval-ms", "0"]);
    assert_eq!(code, 2, "{err}");
    let help = w.ok(&["daemon", "run", "--help"]);
    assert!(help.contains("--interval-ms"), "{help}");
    assert!(help.contains("event-driven"), "{help}");
}
