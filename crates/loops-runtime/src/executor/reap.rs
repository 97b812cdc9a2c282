//! Reaping a run's process: its exit status and resource use by wait4, and the reaper
//! that keeps trying for the ones a kill did not end in time.

use super::*;

/// Waits for one child's exit by `wait4` on its pid, woken by SIGCHLD, so the exit
/// comes with the child's resource usage. It reaps only its own pid, which stays ours
/// until reaped: no other child's status can be taken by mistake.
pub(super) struct Reaper {
    pub(super) pid: u32,
    pub(super) sigchld: Option<tokio::signal::unix::Signal>,
}

/// How often to look without SIGCHLD notifications (a runtime without signal support).
pub(super) const REAP_POLL: Duration = Duration::from_millis(20);

impl Reaper {
    /// Starts listening for SIGCHLD; the pid is set once the child is spawned.
    pub(super) fn listening() -> Self {
        let sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
        Self { pid: 0, sigchld }
    }

    /// The child's exit status and resource usage, once it has exited. Cancel-safe:
    /// the reaping and the return happen in one poll.
    pub(super) async fn wait(&mut self) -> io::Result<(ExitStatus, ResourceUse)> {
        loop {
            reap_given_up();
            if let Some(exit) = wait4_nohang(self.pid)? {
                return Ok(exit);
            }
            match &mut self.sigchld {
                Some(sigchld) => {
                    // Bounded anyway: a notification coalesced with another one's is
                    // never waited for long.
                    let _ = tokio::time::timeout(Duration::from_secs(1), sigchld.recv()).await;
                }
                None => tokio::time::sleep(REAP_POLL).await,
            }
        }
    }

    /// The child will not be waited for any more: reap it later, whenever possible.
    pub(super) fn give_up(&mut self) {
        lock_unreaped().push(self.pid);
    }
}

pub(super) fn lock_unreaped() -> std::sync::MutexGuard<'static, Vec<u32>> {
    // Plain pushes and retains: a poisoned list is still consistent.
    UNREAPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(super) fn reap_given_up() {
    let mut unreaped = lock_unreaped();
    if !unreaped.is_empty() {
        unreaped.retain(|&pid| matches!(wait4_nohang(pid), Ok(None)));
    }
}

/// `wait4(pid, WNOHANG)`: the exit status and resource usage of our child `pid` if it
/// has exited (reaping it), `None` while it runs.
#[allow(unsafe_code)]
pub(super) fn wait4_nohang(pid: u32) -> io::Result<Option<(ExitStatus, ResourceUse)>> {
    use std::os::unix::process::ExitStatusExt as _;
    let Ok(raw_pid) = libc::pid_t::try_from(pid) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    if raw_pid <= 0 {
        // 0 or less would mean "any child of a group": never ask for that.
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut status: libc::c_int = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    loop {
        // SAFETY: `status` and `usage` are live, writable locals of this frame of the
        // right types (`c_int`, `rusage`); wait4 writes at most those two objects and
        // keeps no pointer to them after it returns. `raw_pid` is positive, so it only
        // names one process: our own child, unreaped until this call reaps it.
        let reaped =
            unsafe { libc::wait4(raw_pid, &mut status, libc::WNOHANG, usage.as_mut_ptr()) };
        if reaped == raw_pid {
            // SAFETY: `usage` was zero-initialised (a valid `rusage`: plain integers)
            // and wait4 filled it in when it returned the pid.
            let usage = unsafe { usage.assume_init() };
            return Ok(Some((ExitStatus::from_raw(status), resource_use(&usage))));
        }
        if reaped == 0 {
            return Ok(None);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

pub(super) fn resource_use(usage: &libc::rusage) -> ResourceUse {
    let ms = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap_or(0) * 1_000 + u64::try_from(t.tv_usec).unwrap_or(0) / 1_000
    };
    ResourceUse {
        user_ms: ms(usage.ru_utime),
        system_ms: ms(usage.ru_stime),
        // KiB on Linux; bytes on macOS.
        max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0)
            / if cfg!(target_os = "macos") { 1024 } else { 1 },
    }
}
