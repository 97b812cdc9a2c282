//! Facts about OS processes and signalling process groups.
//!
//! A PID alone does not identify a process: PIDs are reused (quickly, where
//! `pid_max` is 32768). Runs and daemon leases therefore record the PID *and* the
//! process start time, and liveness checks compare both ([`is_same_process_alive`]).
//! A zombie has exited and only waits for its parent to reap it, so it counts as gone.
//!
//! Start times and zombie detection come from `/proc` on Linux. Elsewhere the start
//! time is unknown (`None`) and liveness falls back to `kill(pid, 0)`, which cannot
//! tell a zombie from a live process.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// Whether a PID names a running process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProcessState {
    /// The process exists and has not exited.
    Alive,
    /// The process exited but its parent has not reaped it yet.
    Zombie,
    /// No such process (or the PID cannot name one, such as 0).
    Gone,
}

/// How [`terminate_group`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupTermination {
    /// The group did not exist when SIGTERM was due.
    AlreadyGone,
    /// Every member exited within the grace period after SIGTERM.
    Terminated,
    /// Members outlived the grace period and the group was sent SIGKILL.
    Killed,
}

/// The process's start time in clock ticks since boot (field 22 `starttime` of
/// `/proc/<pid>/stat`). `None` if the process does not exist or on non-Linux systems.
/// Only meaningful for comparing against another reading on the same host and boot.
pub fn process_start_time(pid: u32) -> Option<u64> {
    read_stat(pid)?.start_time
}

/// Whether `pid` is alive, a zombie or gone.
pub fn process_state(pid: u32) -> ProcessState {
    let Some(target) = to_pid(pid) else {
        return ProcessState::Gone;
    };
    if let Some(stat) = read_stat(pid) {
        return stat.state();
    }
    // No /proc entry readable (not Linux, /proc hidden or the process just went away):
    // ask the kernel. EPERM means it exists but belongs to someone else.
    match kill(target, None) {
        Ok(()) | Err(Errno::EPERM) => ProcessState::Alive,
        Err(_) => ProcessState::Gone,
    }
}

/// Whether `pid` is alive (not a zombie) and is the same process that was recorded
/// with `start_time`. When either start time is unknown only liveness is checked:
/// wrongly calling a live run gone would abandon it, which is the worse mistake.
pub fn is_same_process_alive(pid: u32, start_time: Option<u64>) -> bool {
    if to_pid(pid).is_none() {
        return false;
    }
    match read_stat(pid) {
        Some(stat) => {
            stat.state() == ProcessState::Alive
                && match (start_time, stat.start_time) {
                    (Some(recorded), Some(current)) => recorded == current,
                    _ => true,
                }
        }
        None => process_state(pid) == ProcessState::Alive,
    }
}

/// Sends `signal` to every member of process group `pgid`. Refuses group 0 (ours)
/// and 1 (init's) so a bad id can never signal the wrong processes.
pub fn signal_group(pgid: u32, signal: Signal) -> nix::Result<()> {
    match to_pid(pgid) {
        Some(group) if pgid > 1 => killpg(group, signal),
        _ => Err(Errno::EINVAL),
    }
}

/// Whether any process, zombies included, is still in group `pgid`.
pub fn group_exists(pgid: u32) -> bool {
    match to_pid(pgid) {
        Some(group) if pgid > 1 => matches!(killpg(group, None), Ok(()) | Err(Errno::EPERM)),
        _ => false,
    }
}

/// Stops a process group politely, then firmly: SIGTERM to the group, wait up to
/// `grace` for every member to exit, then SIGKILL whatever is left.
///
/// An unreaped zombie still counts as a member, so a caller that is the parent of
/// the group leader must keep reaping it concurrently (the executor polls
/// `Child::wait` alongside), or this waits out the full grace period.
pub async fn terminate_group(pgid: u32, grace: Duration) -> GroupTermination {
    match signal_group(pgid, Signal::SIGTERM) {
        Err(Errno::ESRCH | Errno::EINVAL) => return GroupTermination::AlreadyGone,
        Err(e) => tracing::warn!(pgid, error = %e, "SIGTERM to process group failed"),
        Ok(()) => {}
    }
    let now = tokio::time::Instant::now();
    // An absurd grace (Duration::MAX) means "as long as it takes", not a panic.
    let deadline = now
        .checked_add(grace)
        .unwrap_or(now + Duration::from_secs(86_400 * 365));
    // Most processes die within a millisecond of SIGTERM: start polling fast, then
    // back off so a slow shutdown costs few wakeups.
    let mut pause = Duration::from_millis(1);
    loop {
        if !group_exists(pgid) {
            return GroupTermination::Terminated;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(25));
    }
    match signal_group(pgid, Signal::SIGKILL) {
        Err(Errno::ESRCH) => GroupTermination::Terminated,
        Err(e) => {
            tracing::warn!(pgid, error = %e, "SIGKILL to process group failed");
            GroupTermination::Killed
        }
        Ok(()) => GroupTermination::Killed,
    }
}

/// The conventional name of a signal number (`SIGKILL`), or `signal N` if unknown.
pub fn signal_name(signal: i32) -> String {
    Signal::try_from(signal)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {signal}"))
}

/// This machine's host name, recorded next to PIDs so a PID is only ever checked on
/// the host that owns it. Falls back to `localhost` if the kernel call fails.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

/// PIDs the kernel can address individually: 0 and negatives mean groups to `kill`.
fn to_pid(pid: u32) -> Option<Pid> {
    match i32::try_from(pid) {
        Ok(raw) if raw > 0 => Some(Pid::from_raw(raw)),
        _ => None,
    }
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    state: char,
    start_time: Option<u64>,
}

impl Stat {
    fn state(self) -> ProcessState {
        match self.state {
            'Z' => ProcessState::Zombie,
            // `X` (dead) is only visible for an instant during teardown.
            'X' | 'x' => ProcessState::Gone,
            _ => ProcessState::Alive,
        }
    }
}

#[cfg(target_os = "linux")]
fn read_stat(pid: u32) -> Option<Stat> {
    to_pid(pid)?;
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

#[cfg(not(target_os = "linux"))]
fn read_stat(_pid: u32) -> Option<Stat> {
    None
}

/// Parses `pid (comm) state ppid … starttime …`. `comm` may contain spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // `state` is field 3; skip fields 4..=21 to reach field 22, `starttime`.
    let start_time = fields.nth(18).and_then(|field| field.parse().ok());
    Some(Stat { state, start_time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_hostile_comm() {
        let text = "4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 \
                    1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                state: 'S',
                start_time: Some(987_654)
            })
        );
        assert_eq!(
            parse_stat("7 (z) Z 1").map(Stat::state),
            Some(ProcessState::Zombie)
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn nonsense_pids_are_gone_and_never_signalled() {
        assert_eq!(process_state(0), ProcessState::Gone);
        assert_eq!(process_state(u32::MAX), ProcessState::Gone);
        assert!(!is_same_process_alive(0, None));
        assert_eq!(signal_group(0, Signal::SIGTERM), Err(Errno::EINVAL));
        assert_eq!(signal_group(1, Signal::SIGTERM), Err(Errno::EINVAL));
        assert!(!group_exists(0));
    }

    #[test]
    fn this_process_is_alive_with_a_stable_start_time() {
        let pid = std::process::id();
        assert_eq!(process_state(pid), ProcessState::Alive);
        let start = process_start_time(pid);
        assert_eq!(start, process_start_time(pid));
        assert!(is_same_process_alive(pid, start));
        if cfg!(target_os = "linux") {
            assert!(start.is_some());
        }
    }

    #[test]
    fn names_signals() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(1000), "signal 1000");
    }

    #[test]
    fn hostname_is_not_empty() {
        assert!(!hostname().is_empty());
    }
}
