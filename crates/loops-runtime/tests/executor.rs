//! The executor against real child processes: capture, exit codes, lookup, stdin,
//! environment, bounded output, timeouts, cancellation and process identity.
//!
//! Waits poll a condition against a deadline; nothing relies on a fixed sleep.

use std::collections::BTreeMap;
use std::future::pending;
use std::path::Path;
use std::time::{Duration, Instant};

use loops_runtime::env::{build_env, get};
use loops_runtime::executor::{execute, ExecResult, ExecStatus, Invocation};
use loops_runtime::process::{
    is_same_process_alive, process_start_time, process_state, signal_group, ProcessState,
};
use nix::sys::signal::Signal;
use tokio::sync::oneshot;

/// A scrubbed environment: only the test runner's PATH, nothing from the user.
fn test_env() -> Vec<(String, String)> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned());
    build_env([("PATH".to_owned(), path)], None, &BTreeMap::new(), &[])
}

fn shell(command_line: &str) -> Invocation {
    let mut spec = Invocation::shell(command_line);
    spec.env = test_env();
    spec
}

fn direct(program: &str, args: &[&str]) -> Invocation {
    let mut spec = Invocation::direct(program, args.iter().copied());
    spec.env = test_env();
    spec
}

async fn run(spec: Invocation) -> ExecResult {
    execute(spec, |_, _| {}, pending()).await
}

/// Polls `condition` every few milliseconds until it holds or `limit` passes.
async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn is_dead(pid: u32) -> bool {
    // Orphans are reparented to pid 1, which may not reap them in a container.
    process_state(pid) != ProcessState::Alive
}

#[tokio::test]
async fn success_captures_stdout_and_stderr() {
    let result = run(shell("echo out; echo err >&2")).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{result:?}");
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.signal, None);
    assert_eq!(result.error, None);
    assert_eq!(result.stdout, "out\n");
    assert_eq!(result.stderr, "err\n");
    assert!(result.pid.is_some());
    assert!(result.finished_at >= result.started_at);
}

#[tokio::test]
async fn non_zero_exit_is_a_failure_with_its_code() {
    let result = run(shell("echo partial; exit 3")).await;
    assert_eq!(result.status, ExecStatus::Failed);
    assert_eq!(result.exit_code, Some(3));
    assert_eq!(result.error.as_deref(), Some("exited with status 3"));
    assert_eq!(result.stdout, "partial\n");
}

#[tokio::test]
async fn death_by_signal_names_the_signal() {
    let result = run(shell("kill -USR1 $$")).await;
    assert_eq!(result.status, ExecStatus::Failed);
    assert_eq!(result.exit_code, None);
    assert_eq!(result.signal, Some(libc::SIGUSR1));
    assert_eq!(result.error.as_deref(), Some("killed by signal SIGUSR1"));
}

#[tokio::test]
async fn shell_and_direct_exec_treat_arguments_differently() {
    let result = run(direct("echo", &["hello", "a  b"])).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{result:?}");
    assert_eq!(result.stdout, "hello a  b\n");

    // With a shell, the command line is interpreted and the args stay single words.
    let mut spec = shell("printf '%s|' $0 x\"y\"");
    spec.args = vec!["two words".to_owned(), "it's".to_owned()];
    let result = run(spec).await;
    assert_eq!(result.stdout, "/bin/sh|xy|two words|it's|");

    // Without a shell, a command line is just a (missing) executable name.
    let result = run(direct("echo hello", &[])).await;
    assert_eq!(
        result.error.as_deref(),
        Some("Executable not found in PATH: echo hello")
    );
}

#[tokio::test]
async fn missing_executable_is_a_failed_run_with_the_exact_message() {
    let result = run(direct("loops-definitely-missing-xyz", &["arg"])).await;
    assert_eq!(result.status, ExecStatus::Failed);
    assert_eq!(result.exit_code, None);
    assert_eq!(result.pid, None);
    assert_eq!(
        result.error.as_deref(),
        Some("Executable not found in PATH: loops-definitely-missing-xyz")
    );

    let result = run(direct("/nonexistent/dir/tool", &[])).await;
    assert_eq!(result.status, ExecStatus::Failed);
    assert_eq!(
        result.error.as_deref(),
        Some("Executable not found: /nonexistent/dir/tool")
    );
}

#[tokio::test]
async fn lookup_uses_the_childs_path_not_ours() {
    let mut spec = direct("echo", &["hi"]);
    spec.env = vec![("PATH".to_owned(), "/nonexistent".to_owned())];
    let result = run(spec).await;
    assert_eq!(
        result.error.as_deref(),
        Some("Executable not found in PATH: echo")
    );
}

#[tokio::test]
async fn missing_or_bad_working_directory_is_named() {
    let mut spec = shell("true");
    spec.cwd = Some("/nonexistent/loops-cwd".into());
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::Failed);
    assert_eq!(
        result.error.as_deref(),
        Some("working directory /nonexistent/loops-cwd does not exist")
    );

    let file = tempfile::NamedTempFile::new().unwrap();
    let mut spec = shell("true");
    spec.cwd = Some(file.path().to_path_buf());
    let result = run(spec).await;
    assert_eq!(
        result.error,
        Some(format!(
            "working directory {} is not a directory",
            file.path().display()
        ))
    );
}

#[tokio::test]
async fn cwd_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = direct("pwd", &[]);
    spec.cwd = Some(dir.path().to_path_buf());
    let result = run(spec).await;
    let printed = result.stdout.trim_end();
    assert_eq!(
        Path::new(printed).canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
}

#[tokio::test]
async fn non_executable_file_is_permission_denied() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let result = run(direct(script.to_str().unwrap(), &[])).await;
    assert_eq!(result.status, ExecStatus::Failed);
    assert_eq!(
        result.error,
        Some(format!("permission denied executing {}", script.display()))
    );
}

#[tokio::test]
async fn stdin_is_delivered_then_closed() {
    let mut spec = direct("cat", &[]);
    spec.stdin = Some(b"the prompt\nline two".to_vec());
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{result:?}");
    assert_eq!(result.stdout, "the prompt\nline two");
}

#[tokio::test]
async fn large_stdin_and_output_flow_concurrently() {
    // 1 MiB through `cat` overflows both pipes: writing and reading must interleave.
    let mut spec = direct("cat", &[]);
    spec.stdin = Some(vec![b'x'; 1 << 20]);
    spec.max_output_bytes = 1000;
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{result:?}");
    assert_eq!(
        result.stdout,
        format!(
            "[truncated {} bytes]\n{}",
            (1 << 20) - 1000,
            "x".repeat(1000)
        )
    );
}

#[tokio::test]
async fn stdin_is_null_when_not_given() {
    // `cat` on /dev/null returns at once; on an inherited terminal it would hang.
    let mut spec = direct("cat", &[]);
    spec.timeout = Some(Duration::from_secs(30));
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{result:?}");
    assert_eq!(result.stdout, "");
}

#[tokio::test]
async fn environment_layers_reach_the_child() {
    let home = tempfile::tempdir().unwrap();
    let base = [
        ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ("INHERITED".to_owned(), "yes".to_owned()),
        ("OVERRIDDEN".to_owned(), "base".to_owned()),
    ];
    let target = BTreeMap::from([
        ("OVERRIDDEN".to_owned(), "target".to_owned()),
        ("TARGET_ONLY".to_owned(), "t".to_owned()),
        ("LOOPS_ATTEMPT".to_owned(), "spoofed".to_owned()),
    ]);
    let metadata = [
        ("LOOPS_LOOP_ID", "loop123".to_owned()),
        ("LOOPS_ATTEMPT", "2".to_owned()),
    ];
    let mut spec = direct("env", &[]);
    spec.env = build_env(base, Some(home.path()), &target, &metadata);
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{result:?}");

    let seen: Vec<(String, String)> = result
        .stdout
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(get(&seen, "INHERITED"), Some("yes"));
    assert_eq!(get(&seen, "OVERRIDDEN"), Some("target"));
    assert_eq!(get(&seen, "TARGET_ONLY"), Some("t"));
    assert_eq!(get(&seen, "LOOPS_LOOP_ID"), Some("loop123"));
    assert_eq!(get(&seen, "LOOPS_ATTEMPT"), Some("2"));
    let path = get(&seen, "PATH").unwrap();
    assert!(path.starts_with("/usr/bin:/bin:"), "{path}");
    let local_bin = format!("{}/.local/bin", home.path().display());
    assert!(path.split(':').any(|dir| dir == local_bin), "{path}");
    assert!(path.split(':').any(|dir| dir == "/usr/local/bin"), "{path}");
    // Nothing leaks from the test runner's own environment.
    assert_eq!(get(&seen, "HOME"), None);
}

#[tokio::test]
async fn flooding_output_is_bounded_and_never_blocks() {
    const TOTAL: usize = 50_000_000;
    const MAX: usize = 64 * 1024;
    let mut spec = shell(&format!("head -c {TOTAL} /dev/zero | tr '\\0' a"));
    spec.max_output_bytes = MAX;
    spec.timeout = Some(Duration::from_secs(120));
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{:?}", result.error);
    let marker = format!("[truncated {} bytes]\n", TOTAL - MAX);
    assert!(
        result.stdout.starts_with(&marker),
        "{:?}",
        &result.stdout[..60]
    );
    assert_eq!(result.stdout.len(), marker.len() + MAX);
    assert!(result.stdout[marker.len()..].bytes().all(|b| b == b'a'));
    assert_eq!(result.stderr, "");
}

#[tokio::test]
async fn timeout_kills_the_whole_group_including_grandchildren() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut spec = shell(&format!(
        "sleep 300 & echo $! > {p}.tmp; sleep 300 & echo $! >> {p}.tmp; mv {p}.tmp {p}; wait",
        p = pids.display()
    ));
    spec.timeout = Some(Duration::from_secs(1));
    let started = Instant::now();
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::TimedOut, "{result:?}");
    assert_eq!(result.error.as_deref(), Some("timed out after 1s"));
    assert_eq!(result.signal, Some(libc::SIGTERM));
    assert!(started.elapsed() < Duration::from_secs(10));

    let grandchildren: Vec<u32> = std::fs::read_to_string(&pids)
        .expect("the shell recorded its children before the timeout")
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(grandchildren.len(), 2);
    for pid in grandchildren {
        assert!(
            eventually(Duration::from_secs(5), || is_dead(pid)).await,
            "grandchild {pid} survived the timeout"
        );
    }
}

#[tokio::test]
async fn sigterm_ignoring_child_is_killed_after_the_grace_period() {
    let mut spec = shell("trap '' TERM; sleep 300; echo survived");
    spec.timeout = Some(Duration::from_millis(100));
    spec.kill_grace = Duration::from_millis(300);
    let (pid_tx, pid_rx) = oneshot::channel();
    let started = Instant::now();
    let result = execute(spec, |pid, _| pid_tx.send(pid).unwrap(), pending()).await;
    let elapsed = started.elapsed();
    assert_eq!(result.status, ExecStatus::TimedOut, "{result:?}");
    assert_eq!(result.error.as_deref(), Some("timed out after 100ms"));
    assert_eq!(result.signal, Some(libc::SIGKILL));
    assert_eq!(result.stdout, "");
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    let pid = pid_rx.await.unwrap();
    assert!(is_dead(pid));
}

#[tokio::test]
async fn cancellation_stops_the_run_and_on_spawn_sees_its_identity() {
    let (spawned_tx, spawned_rx) = oneshot::channel::<(u32, Option<u64>)>();
    let (cancel_tx, cancel_rx) = oneshot::channel::<()>();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let mut spec = shell(&format!("echo started; : > {}; sleep 300", ready.display()));
    spec.timeout = Some(Duration::from_secs(60));

    let run = tokio::spawn(execute(
        spec,
        move |pid, start| spawned_tx.send((pid, start)).unwrap(),
        async move {
            let _ = cancel_rx.await;
        },
    ));
    let (pid, start) = spawned_rx.await.unwrap();
    // While the run is alive its identity matches what on_spawn reported.
    assert_eq!(process_start_time(pid), start);
    assert_eq!(process_state(pid), ProcessState::Alive);
    assert!(is_same_process_alive(pid, start));
    if cfg!(target_os = "linux") {
        let start = start.expect("Linux knows start times");
        assert!(!is_same_process_alive(pid, Some(start + 1)));
    }

    // Cancel once the output is written, so the test can check it was kept.
    assert!(eventually(Duration::from_secs(10), || ready.exists()).await);
    cancel_tx.send(()).unwrap();
    let result = run.await.unwrap();
    assert_eq!(result.status, ExecStatus::Terminated, "{result:?}");
    assert_eq!(result.error.as_deref(), Some("cancelled"));
    assert_eq!(result.pid, Some(pid));
    assert_eq!(result.pid_start_time, start);
    assert_eq!(result.stdout, "started\n");
    assert!(!is_same_process_alive(pid, start));
}

#[tokio::test]
async fn already_cancelled_runs_never_spawn() {
    let mut spawned = false;
    let result = execute(shell("echo nope"), |_, _| spawned = true, async {}).await;
    assert!(!spawned);
    assert_eq!(result.status, ExecStatus::Terminated);
    assert_eq!(result.pid, None);
    assert_eq!(result.error.as_deref(), Some("cancelled"));
}

#[tokio::test]
async fn dropping_the_run_kills_its_group() {
    let (pid_tx, pid_rx) = oneshot::channel();
    let run = tokio::spawn(execute(
        shell("sleep 300"),
        move |pid, _| pid_tx.send(pid).unwrap(),
        pending(),
    ));
    let pid = pid_rx.await.unwrap();
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    assert!(eventually(Duration::from_secs(5), || is_dead(pid)).await);
}

#[tokio::test]
async fn background_process_holding_the_pipe_does_not_hang_the_run() {
    // The leader exits at once; its background child keeps stdout open for 300 s.
    let started = Instant::now();
    let result = run(shell("echo done; sleep 300 &")).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{result:?}");
    assert_eq!(result.stdout, "done\n");
    assert!(started.elapsed() < Duration::from_secs(5));
    // A normal exit leaves background work alone; clean it up (it is still in the group).
    signal_group(result.pid.unwrap(), Signal::SIGKILL).unwrap();
}

#[test]
fn zombie_is_reported_and_is_not_alive() {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_state(pid) != ProcessState::Zombie && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if cfg!(target_os = "linux") {
        assert_eq!(process_state(pid), ProcessState::Zombie);
    }
    assert!(!is_same_process_alive(pid, process_start_time(pid)) || !cfg!(target_os = "linux"));
    child.wait().unwrap();
    assert_eq!(process_state(pid), ProcessState::Gone);
}

#[test]
fn wrong_start_time_is_not_the_same_process() {
    let pid = std::process::id();
    let start = process_start_time(pid);
    assert!(is_same_process_alive(pid, start));
    if let Some(start) = start {
        assert!(!is_same_process_alive(pid, Some(start + 1)));
    }
}

/// Issue #20 item 5: a run that prints nothing for its idle timeout is terminated like
/// a timeout, with its own message; output on either stream restarts the clock.
#[tokio::test]
async fn an_idle_run_is_terminated_and_output_keeps_a_run_alive() {
    let mut spec = shell("echo working; sleep 30");
    spec.idle_timeout = Some(Duration::from_millis(400));
    let started = Instant::now();
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::TimedOut, "{result:?}");
    assert_eq!(result.error.as_deref(), Some("no output for 400ms"));
    assert_eq!(result.stdout, "working\n");
    assert!(started.elapsed() < Duration::from_secs(10));

    // A run that keeps printing (stderr counts) outlives many idle periods.
    let mut spec = shell("for i in 1 2 3 4 5 6 7 8; do echo tick >&2; sleep 0.15; done");
    spec.idle_timeout = Some(Duration::from_millis(600));
    let started = Instant::now();
    let result = run(spec).await;
    assert_eq!(result.status, ExecStatus::Succeeded, "{result:?}");
    assert!(started.elapsed() >= Duration::from_millis(1_000));

    // The wall-clock timeout still applies to a chatty run.
    let mut spec = shell("while true; do echo tick; sleep 0.1; done");
    spec.idle_timeout = Some(Duration::from_secs(5));
    spec.timeout = Some(Duration::from_millis(500));
    let result = run(spec).await;
    assert_eq!(
        result.error.as_deref(),
        Some("timed out after 500ms"),
        "{result:?}"
    );
}
