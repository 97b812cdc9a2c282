//! Test harness: a scrubbed environment, a temp data dir, and helpers to run `loops`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_loops")
}

/// An isolated world: data dir + HOME in a temp dir, user env scrubbed.
pub struct World {
    pub root: tempfile::TempDir,
    pub data: PathBuf,
    pub home: PathBuf,
    pub extra_env: Vec<(String, String)>,
}

impl World {
    pub fn new() -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let data = root.path().join("data");
        let home = root.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        Self {
            root,
            data,
            home,
            extra_env: Vec::new(),
        }
    }

    /// A `loops` command with a scrubbed environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_via(&[], args)
    }

    /// [`World::cmd`] started through `wrapper` (a program and its arguments that end
    /// by executing the rest, e.g. `ip netns exec NAME`); the plain command when empty.
    pub fn cmd_via(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("LOOPS_DATA_DIR", &self.data)
            .env("TZ", "UTC")
            .env("NO_COLOR", "1")
            .args(args)
            .stdin(Stdio::null());
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("spawn loops")
    }

    /// Runs and asserts exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "loops {args:?} failed ({:?}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs with `--json` and parses stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("bad json from {args:?}: {e}\n{text}"))
    }

    /// Runs, asserts failure; returns (exit code, stderr).
    pub fn fail(&self, args: &[&str]) -> (i32, String) {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "loops {args:?} unexpectedly succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn db_path(&self) -> PathBuf {
        self.data.join("loops.db")
    }

    /// Creates a shell command loop.
    pub fn create_cmd(&self, name: &str, schedule: &[&str], cmd: &str) -> serde_json::Value {
        let mut args = vec!["create", "command", name, "--cmd", cmd];
        args.extend_from_slice(schedule);
        self.json(&args)
    }
}

impl Drop for World {
    /// Leaves no process behind: the supervisors a test's daemons left (they outlive
    /// their daemon by design) and their runs' process groups.
    fn drop(&mut self) {
        kill_supervisors(&self.data);
    }
}

/// The pids of the supervisors of the data dir `data` (by their sockets).
pub fn supervisor_pids(data: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(data.join("supervise")) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".sock")?.parse().ok())
        .filter(|pid| pid_alive(u64::from(*pid)))
        .collect();
    pids.sort_unstable();
    pids
}

/// The children of `parent` (from `/proc/*/stat`).
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// SIGKILLs the supervisors of `data`, then what is left of their runs' process
/// groups (the supervisor first, so it records nothing of their end).
pub fn kill_supervisors(data: &Path) {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    for sup in supervisor_pids(data) {
        let children = children_of(sup);
        let _ = kill(Pid::from_raw(sup as i32), Signal::SIGKILL);
        for child in children {
            let _ = killpg(Pid::from_raw(child as i32), Signal::SIGKILL);
        }
    }
}

/// Polls `cond` until it returns Some or the deadline passes.
pub fn wait_for<T>(what: &str, timeout: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Writes an executable script.
pub fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, body).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A `loops daemon run` child process with its stderr captured to a file.
pub struct Daemon {
    pub child: std::process::Child,
    pub log: PathBuf,
}

impl World {
    /// Starts `loops daemon run` with the given extra flags.
    pub fn daemon(&self, extra: &[&str]) -> Daemon {
        self.daemon_via(&[], extra)
    }

    /// [`World::daemon`] started through `wrapper` (see [`World::cmd_via`]); the
    /// daemon's pid is the child's as long as the wrapper executes rather than forks.
    pub fn daemon_via(&self, wrapper: &[&str], extra: &[&str]) -> Daemon {
        let log = self.root.path().join(format!("daemon-{}.log", unique()));
        let file = std::fs::File::create(&log).expect("log");
        let mut args = vec!["daemon", "run"];
        args.extend_from_slice(extra);
        let child = self
            .cmd_via(wrapper, &args)
            .env("LOOPS_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn daemon");
        Daemon { child, log }
    }

    /// Starts a daemon and waits until it holds the store lease.
    pub fn daemon_ready(&self, extra: &[&str]) -> Daemon {
        let mut d = self.daemon(extra);
        let pid = d.pid();
        wait_for("daemon to hold the lease", Duration::from_secs(10), || {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("daemon exited early ({status}): {}", d.log_text());
            }
            let status = self.daemon_status();
            (status["pid"].as_u64() == Some(u64::from(pid))).then_some(())
        });
        d
    }

    /// `daemon status --json`, whatever its exit code (it exits 1 while a daemon is
    /// stalled); `null` when it printed nothing parseable.
    pub fn daemon_status(&self) -> serde_json::Value {
        let out = self.run(&["--json", "daemon", "status"]);
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    }

    /// All runs (newest first) as JSON objects.
    pub fn runs(&self, lp: &str) -> Vec<serde_json::Value> {
        self.json(&["runs", lp, "--limit", "0"])
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{sig}");
    }

    /// Waits for the daemon to exit and returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not exit; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait; returns the exit code. Runs in flight are left to their
    /// supervisors.
    pub fn stop(&mut self) -> Option<i32> {
        self.signal("TERM");
        self.wait_exit(Duration::from_secs(30))
    }

    /// SIGUSR1 (`daemon stop --terminate-runs`) and wait: runs in flight get the
    /// shutdown grace, the rest are terminated and recorded. Returns the exit code.
    pub fn stop_terminating_runs(&mut self) -> Option<i32> {
        self.signal("USR1");
        self.wait_exit(Duration::from_secs(30))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether a pid names a live (non-zombie) process.
pub fn pid_alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Parses an RFC 3339 instant from a JSON field.
pub fn instant(v: &serde_json::Value) -> chrono::DateTime<chrono::Utc> {
    v.as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_else(|| panic!("not an instant: {v}"))
}

impl World {
    /// Moves a loop's next slot to now, through the store (a clock jump for one loop):
    /// how tests get "due now, next slot far away" — e.g. `--dynamic 1h` — without
    /// waiting, since a new loop's first slot is always one period ahead. Call it
    /// before the daemon starts (a running daemon is not woken).
    pub fn make_due(&self, name: &str) {
        use loops::store::Store;
        let store = loops::sqlite::SqliteStore::open(&self.db_path()).expect("open store");
        let lp = store
            .get_loop_by_name(name)
            .expect("read loop")
            .unwrap_or_else(|| panic!("no loop {name}"));
        let now = chrono::Utc::now();
        let advance = loops::core::transitions::LoopAdvance {
            status: lp.status,
            next_run_at: Some(now),
            retry_scheduled_for: lp.retry_scheduled_for,
        };
        store
            .update_loop_schedule(&lp.id, &advance, now, None)
            .expect("make due");
    }
}
