//! Runs one resolved command as a child process and reports how it ended.
//!
//! [`execute`] takes an [`Invocation`] (program, args, cwd, the complete environment,
//! optional stdin, limits) and always returns an [`ExecResult`]: a command that cannot
//! be found, a missing working directory, a non-zero exit, a timeout and a
//! cancellation are all data, never `Err` or a panic (STYLE.md §4).
//!
//! Invariants:
//! - The child leads its own process group, so a timeout or cancel reaches everything
//!   it started: SIGTERM to the group, up to `kill_grace` to exit, then SIGKILL.
//! - stdin is `/dev/null` unless the invocation carries bytes (an agent's prompt), which are
//!   written concurrently with reading the output, then the pipe is closed.
//! - stdout and stderr are always drained and keep a bounded tail
//!   ([`crate::capture`]). Once the leader has exited, the pipes get a short bounded
//!   wait: a process that left the group (`setsid`) may hold them open forever.
//! - One run is one future on the caller's task: no threads, no extra tasks.
//! - The child is reaped here, by `wait4` on its own pid after SIGCHLD, which also
//!   yields its resource usage; nothing else in the process reaps by pid, so a pid is
//!   never reaped twice nor mistaken for a reused one.
//!
//! The same function runs in the daemon's process (`loops tick`, `run-now`, tests) and
//! in a run's supervisor ([`crate::supervisor`]), which gets the [`Invocation`] over
//! its socket: both types serialize.
//!
//! Non-goals: resolving targets, accounts or metadata (see [`crate::env`]) and
//! recording anything; the caller stores the result.

use std::ffi::OsString;
use std::future::{poll_fn, Future};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::pin::{pin, Pin};
use std::process::{ExitStatus, Stdio};
use std::task::Poll;
use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::capture::PipeCapture;
use crate::env::resolve_executable_in;
use crate::process::{process_start_time, signal_group, signal_name, terminate_group};
use crate::spool::SpoolFiles;

mod reap;
mod spawn;

use reap::*;
use spawn::*;

/// Time between SIGTERM and SIGKILL when an invocation does not say otherwise.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// Bytes of each output stream kept when an invocation does not say otherwise.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// The shell that runs `shell: true` command lines.
pub const SHELL: &str = "/bin/sh";

/// Whether children get SIGKILL when this process dies (`PR_SET_PDEATHSIG`, Linux):
/// set by a supervisor, whose death must not leave a run's process without anyone to
/// enforce its deadline. Off elsewhere: a CLI's `run-now` child already dies with its
/// pipes, and the parent-death signal follows the *thread* that spawned, which in a
/// multi-threaded runtime may end before the child.
static DIE_WITH_PARENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every child spawned from now on die with this process (see
/// `DIE_WITH_PARENT`). Only for a process that spawns from one long-lived thread.
pub fn children_die_with_this_process() {
    DIE_WITH_PARENT.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// After a normal exit, how long to keep reading pipes that something else still
/// holds open (a backgrounded `cmd &`). Pipes that close at exit end at once.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);
/// The same after a kill: the group is dead, only an escaped process can remain.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);
/// How long after SIGKILL to wait for the kernel to let us reap the leader. Only a
/// process stuck in uninterruptible I/O takes longer; tokio reaps it later.
const REAP_AFTER_KILL: Duration = Duration::from_secs(5);

/// What to run, fully resolved: no lookups in the store or the daemon's environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Invocation {
    /// The executable (looked up on the PATH of `env` unless it contains `/`), or the
    /// command line when `shell` is true.
    pub program: String,
    /// Arguments. With `shell`, they are single-quoted and appended to the command line.
    pub args: Vec<String>,
    /// Run `program` as `/bin/sh -c <program>` instead of executing it directly.
    pub shell: bool,
    /// Working directory; `None` inherits the daemon's.
    pub cwd: Option<PathBuf>,
    /// The child's complete environment (nothing else is inherited); see
    /// [`crate::env::build_env`].
    pub env: Vec<(String, String)>,
    /// Bytes written to the child's stdin, which is then closed; `None` → `/dev/null`.
    #[serde(with = "stdin_text")]
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit from spawn; `None` means no limit.
    pub timeout: Option<Duration>,
    /// Longest time without any output (stdout or stderr) before the run is terminated
    /// like a timeout (`timed_out`, "no output for …"); `None` means no limit.
    /// (Defaulted when absent: a supervisor may read a request of an older build.)
    #[serde(default)]
    pub idle_timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL on timeout or cancel.
    pub kill_grace: Duration,
    /// Bytes kept per output stream (the tail).
    pub max_output_bytes: usize,
    /// Where the output tails are spilled while the child runs; `None` keeps them in
    /// memory only.
    pub spool: Option<SpoolFiles>,
}

impl Invocation {
    /// Executes `program` directly with `args`, with default limits, no cwd and an
    /// empty environment.
    pub fn direct(
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            shell: false,
            cwd: None,
            env: Vec::new(),
            stdin: None,
            timeout: None,
            idle_timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            spool: None,
        }
    }

    /// Runs `command_line` through `/bin/sh -c`, with the defaults of [`Invocation::direct`].
    pub fn shell(command_line: impl Into<String>) -> Self {
        Self {
            shell: true,
            ..Self::direct(command_line, Vec::<String>::new())
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// Exited with status 0.
    Succeeded,
    /// Could not start, exited non-zero or was killed by someone else's signal.
    Failed,
    /// Killed by us because the timeout expired.
    TimedOut,
    /// Terminated by us (or never started) before it ended: its runner was interrupted
    /// (shutdown, lease loss), its workflow run was cancelled, or a sibling step failed.
    Terminated,
}

/// What a finished process used, from `wait4` (the process and its reaped
/// descendants, as `time` reports it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUse {
    /// CPU time in user mode, in milliseconds.
    pub user_ms: u64,
    /// CPU time in the kernel, in milliseconds.
    pub system_ms: u64,
    /// Largest resident set size, in KiB.
    pub max_rss_kib: u64,
}

/// The outcome of [`execute`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    pub status: ExecStatus,
    /// The exit code, if the child exited (rather than being killed or never started).
    pub exit_code: Option<i32>,
    /// The signal that killed the child, if any.
    pub signal: Option<i32>,
    /// Captured stdout tail, possibly opening with `[truncated N bytes]\n`.
    pub stdout: String,
    /// Captured stderr tail, same format.
    pub stderr: String,
    /// Human-readable cause for anything but success.
    pub error: Option<String>,
    /// The child's PID (also its process group id), if it was spawned.
    pub pid: Option<u32>,
    /// The child's start time as read by [`crate::process::process_start_time`].
    pub pid_start_time: Option<u64>,
    /// When `execute` began (just before the spawn).
    pub started_at: DateTime<Utc>,
    /// When the child was reaped and its output collected.
    pub finished_at: DateTime<Utc>,
    /// What the child used, when it was reaped.
    #[serde(default)]
    pub resources: Option<ResourceUse>,
}

impl ExecResult {
    /// Wall time from start to finish.
    pub fn duration(&self) -> chrono::TimeDelta {
        self.finished_at - self.started_at
    }

    /// A failed attempt that never got a process because it could not be specified
    /// (an unknown account, a bad target), as of `at`.
    pub fn unspecified(error: String, at: DateTime<Utc>) -> Self {
        Self {
            finished_at: at,
            ..Self::not_started(ExecStatus::Failed, error, at)
        }
    }

    /// A run that never got a process.
    fn not_started(status: ExecStatus, error: String, started_at: DateTime<Utc>) -> Self {
        Self {
            status,
            exit_code: None,
            signal: None,
            stdout: String::new(),
            stderr: String::new(),
            error: Some(error),
            pid: None,
            pid_start_time: None,
            started_at,
            finished_at: Utc::now(),
            resources: None,
        }
    }
}

/// Runs `invocation` to completion and reports the outcome; never fails or panics.
///
/// `on_spawn(pid, start_time)` is called once, right after a successful spawn, so the
/// caller can record the PID before the run ends (it must not block). The run is
/// cancelled when `cancel` completes; pass `std::future::pending()` for never. A
/// `watch::Receiver<bool>` adapts as
/// `async move { if rx.wait_for(|c| *c).await.is_err() { std::future::pending::<()>().await } }`.
/// A `cancel` that is already complete prevents the spawn.
///
/// Dropping the returned future while the child runs sends SIGKILL to its group, so
/// an aborted task leaves no unsupervised process behind.
///
/// ```no_run
/// # async fn demo() {
/// use loops_runtime::executor::{execute, Invocation, ExecStatus};
/// let mut invocation = Invocation::shell("echo hello");
/// invocation.env = loops_runtime::env::build_env(std::env::vars(), None, &Default::default(), &[]);
/// let result = execute(invocation, |_pid, _start| {}, std::future::pending()).await;
/// assert_eq!(result.status, ExecStatus::Succeeded);
/// # }
/// ```
pub async fn execute<F, C>(mut invocation: Invocation, on_spawn: F, cancel: C) -> ExecResult
where
    F: FnOnce(u32, Option<u64>) + Send,
    C: Future<Output = ()> + Send,
{
    let started_at = Utc::now();
    let mut cancel = pin!(cancel);
    if is_ready(cancel.as_mut()).await {
        return ExecResult::not_started(ExecStatus::Terminated, "cancelled".to_owned(), started_at);
    }

    // Listening for SIGCHLD before the spawn: an exit right after it is not missed.
    let mut reaper = Reaper::listening();
    let mut child = match spawn(&invocation) {
        Ok(child) => child,
        Err(error) => return ExecResult::not_started(ExecStatus::Failed, error, started_at),
    };
    let pid = Some(child.pid);
    reaper.pid = child.pid;
    let pid_start_time = pid.and_then(process_start_time);
    let mut guard = GroupGuard(pid);
    if let Some(pid) = pid {
        tracing::debug!(pid, program = %invocation.program, "spawned");
        on_spawn(pid, pid_start_time);
    }

    let feed = feed_stdin(child.stdin.take(), invocation.stdin.take());
    let mut capture = PipeCapture::new(
        child.stdout.take(),
        child.stderr.take(),
        invocation.max_output_bytes,
    )
    .with_spool(invocation.spool.take());
    let (ending, exit) = supervise(&mut reaper, pid, feed, &mut capture, &invocation, cancel).await;
    // The leader is reaped (or given up on), so its PID may be reused: never signal it again.
    guard.0 = None;

    let drain_for = match ending {
        Ending::Exited => DRAIN_AFTER_EXIT,
        Ending::TimedOut | Ending::IdleTimedOut | Ending::Cancelled => DRAIN_AFTER_KILL,
    };
    if tokio::time::timeout(drain_for, capture.drain())
        .await
        .is_err()
    {
        tracing::debug!(
            ?pid,
            "output pipes still open after the process ended; stopped reading"
        );
    }
    let (stdout, stderr) = capture.finish();

    let (exit_code, signal) = match &exit {
        Some(Ok((status, _))) => (status.code(), status.signal()),
        _ => (None, None),
    };
    let resources = match &exit {
        Some(Ok((_, used))) => Some(*used),
        _ => None,
    };
    let (status, error) = match ending {
        Ending::TimedOut => (
            ExecStatus::TimedOut,
            Some(format!(
                "timed out after {}",
                human_duration(invocation.timeout.unwrap_or_default())
            )),
        ),
        Ending::IdleTimedOut => (
            ExecStatus::TimedOut,
            Some(format!(
                "no output for {}",
                human_duration(invocation.idle_timeout.unwrap_or_default())
            )),
        ),
        Ending::Cancelled => (ExecStatus::Terminated, Some("cancelled".to_owned())),
        Ending::Exited => match exit {
            Some(Ok((status, _))) if status.success() => (ExecStatus::Succeeded, None),
            Some(Ok((status, _))) => (ExecStatus::Failed, Some(describe_exit(status))),
            Some(Err(e)) => (
                ExecStatus::Failed,
                Some(format!("failed to wait for the process: {e}")),
            ),
            None => (
                ExecStatus::Failed,
                Some("the process could not be reaped".to_owned()),
            ),
        },
    };
    let result = ExecResult {
        status,
        exit_code,
        signal,
        stdout: stdout.into_string(),
        stderr: stderr.into_string(),
        error,
        pid,
        pid_start_time,
        started_at,
        finished_at: Utc::now(),
        resources,
    };
    tracing::debug!(?pid, status = ?result.status, exit_code = ?result.exit_code, "finished");
    result
}

/// Why supervision stopped waiting on the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Exited,
    TimedOut,
    /// Nothing was printed for `idle_timeout`.
    IdleTimedOut,
    Cancelled,
}

/// Waits for the child while feeding stdin and draining output; on timeout or cancel,
/// terminates the group. Returns the leader's exit status, `None` if it could not be
/// reaped in time after SIGKILL.
async fn supervise<C, O, E>(
    child: &mut Reaper,
    pid: Option<u32>,
    feed: impl Future<Output = ()>,
    capture: &mut PipeCapture<O, E>,
    invocation: &Invocation,
    mut cancel: Pin<&mut C>,
) -> (Ending, Option<io::Result<(ExitStatus, ResourceUse)>>)
where
    C: Future<Output = ()>,
    O: tokio::io::AsyncRead + Unpin,
    E: tokio::io::AsyncRead + Unpin,
{
    let mut feed = pin!(feed);
    let mut fed = false;
    let timeout = invocation.timeout;
    let mut expiry = pin!(async move {
        match timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    });

    // The idle timer restarts whenever output arrives (a closed pipe prints nothing).
    let idle_limit = invocation.idle_timeout;
    let mut idle = pin!(tokio::time::sleep(idle_limit.unwrap_or(Duration::MAX / 4)));
    let mut received = capture.received();

    let ending = loop {
        tokio::select! {
            // An exit that races the timer wins: the work did finish.
            biased;
            exit = child.wait() => return (Ending::Exited, Some(exit)),
            () = &mut cancel => break Ending::Cancelled,
            () = &mut expiry => break Ending::TimedOut,
            () = &mut idle, if idle_limit.is_some() => break Ending::IdleTimedOut,
            () = &mut feed, if !fed => fed = true,
            () = capture.read_some(), if capture.is_open() => {
                if let Some(limit) = idle_limit {
                    let now = capture.received();
                    if now != received {
                        received = now;
                        idle.as_mut().reset(tokio::time::Instant::now() + limit);
                    }
                }
            }
        }
    };

    // Stop the run with SIGTERM → grace → SIGKILL on the whole group, while reaping the
    // leader (a zombie leader would keep the group alive) and draining the pipes (a
    // child may print while shutting down and must not block on a full pipe).
    let Some(pgid) = pid else {
        // No PID: there is nothing left to stop.
        return (ending, None);
    };
    let mut terminate = pin!(terminate_group(pgid, invocation.kill_grace));
    let mut terminated = false;
    let mut give_up = pin!(tokio::time::sleep(
        invocation.kill_grace.saturating_add(REAP_AFTER_KILL)
    ));
    let mut exit = None;
    let mut reaped = false;
    while !(reaped && terminated) {
        tokio::select! {
            biased;
            status = child.wait(), if !reaped => {
                exit = Some(status);
                reaped = true;
            }
            _ = &mut terminate, if !terminated => terminated = true,
            () = &mut give_up, if !reaped => {
                tracing::warn!(pgid, "process did not exit after SIGKILL; giving up on it");
                child.give_up();
                reaped = true;
            }
            () = capture.read_some(), if capture.is_open() => {}
        }
    }
    (ending, exit)
}

/// Children given up on after SIGKILL (stuck in the kernel): reaped whenever a later
/// [`Reaper`] looks, so they do not stay zombies for the life of the process.
static UNREAPED: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Writes the prompt, then closes stdin (by dropping the pipe) so the child sees EOF.
async fn feed_stdin(pipe: Option<ChildStdin>, data: Option<Vec<u8>>) {
    if let (Some(mut pipe), Some(data)) = (pipe, data) {
        if let Err(e) = pipe.write_all(&data).await {
            // Typically EPIPE: the child exited or closed stdin without reading it all.
            tracing::debug!(error = %e, "could not write all of stdin");
        }
    }
}

fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by signal {}", signal_name(signal)),
        (None, None) => format!("exited abnormally ({status})"),
    }
}

/// `2s`, `1500ms`, `5m`: the same rendering as durations elsewhere in loops.
fn human_duration(duration: Duration) -> String {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    loops_core::Duration::from_millis(ms).map_or_else(|| format!("{ms}ms"), |d| d.to_string())
}

/// Polls `future` once: whether it has already completed.
pub(crate) async fn is_ready<C: Future<Output = ()>>(mut future: Pin<&mut C>) -> bool {
    poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_ready())).await
}

/// SIGKILLs the child's group if `execute` is dropped while the leader is unreaped
/// (and leaves the leader to be reaped later).
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // While the leader is unreaped its PID, hence the group id, cannot be reused.
            let _ = signal_group(pgid, Signal::SIGKILL);
            lock_unreaped().push(pgid);
        }
    }
}

/// `Invocation::stdin` as text on the wire: an agent's prompt is UTF-8 (it comes from
/// a `String`), and a JSON array of byte numbers would be four times its size.
mod stdin_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(stdin: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match stdin {
            Some(bytes) => s.serialize_some(&String::from_utf8_lossy(bytes)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.map(String::into_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_args_are_quoted_words() {
        assert_eq!(shell_command_line("echo", &[]), "echo");
        assert_eq!(
            shell_command_line("echo", &["a b".to_owned(), "it's".to_owned()]),
            r"echo 'a b' 'it'\''s'"
        );
    }

    #[test]
    fn durations_read_like_the_cli() {
        assert_eq!(human_duration(Duration::from_secs(2)), "2s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(human_duration(Duration::from_secs(300)), "5m");
        assert_eq!(human_duration(Duration::ZERO), "0ms");
    }
}
