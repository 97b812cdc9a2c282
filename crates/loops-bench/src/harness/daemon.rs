//! The daemon under test (a `loops daemon run` child, started and waited for, stopped
//! cleanly) and the /proc readers: its RSS, CPU ticks, context switches.

use super::{delta_ms, sleep};
use anyhow::{bail, ensure, Context as _, Result};
use chrono::Utc;
use loops_core::Instant;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant as Mono};

/// The `loops daemon run` flags of the dispatch benchmarks: `--max-concurrent N` and
/// retention off (`--keep-runs 0 --keep-for 0`), so every run stays to be counted.
pub(crate) fn keep_every_run(max_concurrent: &str) -> [&str; 6] {
    [
        "--max-concurrent",
        max_concurrent,
        "--keep-runs",
        "0",
        "--keep-for",
        "0",
    ]
}

/// A `loops daemon run` child. Dropped without `stop`, it is killed.
pub(crate) struct Daemon {
    child: Child,
    pid: u32,
    /// Wall clock just before spawn.
    pub(crate) spawned_at: Instant,
    pub(crate) spawned_mono: Mono,
    /// When the pid file appeared (the lease is held and the socket about to be bound).
    pub(crate) ready_at: Instant,
    log: PathBuf,
    data: PathBuf,
}

impl Daemon {
    pub(crate) fn start(
        bin: &Path,
        data: &Path,
        log: &Path,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let log_file = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let spawned_at = Utc::now();
        let spawned_mono = Mono::now();
        let child = Command::new(bin)
            .args(["daemon", "run"])
            .args(flags)
            .env("LOOPS_DATA_DIR", data)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("cannot start {} daemon run", bin.display()))?;
        let pid = child.id();
        let mut daemon = Self {
            child,
            pid,
            spawned_at,
            spawned_mono,
            ready_at: spawned_at,
            log: log.to_path_buf(),
            data: data.to_path_buf(),
        };
        let pid_file = data.join(loops_runtime::daemon::PID_FILE);
        loop {
            if loops_runtime::daemon::read_pid_file(data) == Some(pid) {
                break;
            }
            if let Some(status) = daemon.child.try_wait()? {
                bail!(
                    "daemon exited at startup ({status}); log: {}",
                    daemon.log_tail()
                );
            }
            if spawned_mono.elapsed() > Duration::from_secs(15) {
                bail!(
                    "daemon did not write {} within 15 s; log: {}",
                    pid_file.display(),
                    daemon.log_tail()
                );
            }
            sleep(Duration::from_millis(1));
        }
        daemon.ready_at = Utc::now();
        Ok(daemon)
    }

    /// The round trips to PostgreSQL the daemon logged when it stopped (0 if none).
    pub(crate) fn round_trips(&self) -> u64 {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .rev()
            .find_map(|l| {
                let rest = l.split("round_trips=").nth(1)?;
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    pub(crate) fn startup_ms(&self) -> f64 {
        delta_ms(self.ready_at - self.spawned_at)
    }

    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    pub(crate) fn rss_kb(&self) -> Result<(u64, u64)> {
        Ok((self.status_kb("VmRSS:")?, self.status_kb("VmHWM:")?))
    }

    /// Of the RSS: anonymous memory (heap, stacks) and pages of mapped files (the
    /// `loops` binary's code and data, shared libraries), in kB.
    pub(crate) fn rss_split_kb(&self) -> Result<(u64, u64)> {
        Ok((self.status_kb("RssAnon:")?, self.status_kb("RssFile:")?))
    }

    fn status_kb(&self, name: &str) -> Result<u64> {
        status_kb(self.pid, name)
    }

    /// Context switches (voluntary + involuntary) summed over the daemon's threads: a
    /// count of wake-ups.
    pub(crate) fn context_switches(&self) -> Result<u64> {
        let mut total = 0;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid))? {
            let status = std::fs::read_to_string(task?.path().join("status"))?;
            for line in status.lines() {
                if line.starts_with("voluntary_ctxt_switches:")
                    || line.starts_with("nonvoluntary_ctxt_switches:")
                {
                    total += line
                        .split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
        Ok(total)
    }

    pub(crate) fn cpu(&self) -> Result<CpuTicks> {
        CpuTicks::of(self.pid)
    }

    /// The CPU of the daemon's run supervisors (issue #18; none before it): their own,
    /// and their reaped children's, which are the runs.
    pub(crate) fn supervisor_cpu(&self) -> CpuTicks {
        let mut total = CpuTicks {
            own: 0,
            children: 0,
        };
        for pid in supervisor_pids(&self.data) {
            if let Ok(t) = CpuTicks::of(pid) {
                total.own += t.own;
                total.children += t.children;
            }
        }
        total
    }

    /// Stops the daemon and waits for a clean exit; returns how long the shutdown took.
    /// A daemon with supervisors gets SIGUSR1 (`daemon stop --terminate-runs`: its runs
    /// are recorded before it exits), one without SIGTERM (which did the same).
    pub(crate) fn stop(&mut self) -> Result<Duration> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid)?);
        let signal = if self.data.join("supervise").exists() {
            nix::sys::signal::Signal::SIGUSR1
        } else {
            nix::sys::signal::Signal::SIGTERM
        };
        nix::sys::signal::kill(pid, signal).context("cannot signal the daemon")?;
        let start = Mono::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                ensure!(
                    status.success(),
                    "daemon exited with {status}; log: {}",
                    self.log_tail()
                );
                return Ok(start.elapsed());
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("daemon did not exit within 60 s of SIGTERM");
            }
            sleep(Duration::from_millis(5));
        }
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

/// CPU time of a process from /proc/PID/stat, in clock ticks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuTicks {
    pub(crate) own: u64,
    pub(crate) children: u64,
}

impl CpuTicks {
    pub(crate) fn of(pid: u32) -> Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let after = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .context("malformed /proc stat")?;
        // Fields after the command name start at field 3 (state): utime is field 14.
        let fields: Vec<&str> = after.split_whitespace().collect();
        let num = |i: usize| -> Result<u64> {
            Ok(fields
                .get(i)
                .with_context(|| format!("/proc/{pid}/stat has no field {}", i + 3))?
                .parse()?)
        };
        Ok(Self {
            own: num(11)? + num(12)?,
            children: num(13)? + num(14)?,
        })
    }

    /// (own, children) CPU milliseconds since `earlier`.
    pub(crate) fn since_ms(&self, earlier: &Self, tck: u64) -> (f64, f64) {
        let to_ms = |t: u64| t as f64 * 1_000.0 / tck as f64;
        (
            to_ms(self.own.saturating_sub(earlier.own)),
            to_ms(self.children.saturating_sub(earlier.children)),
        )
    }
}

/// The pids of the supervisors of the data dir `data` (their sockets' names).
fn supervisor_pids(data: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(data.join("supervise")) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".sock")?.parse().ok())
        .collect()
}

/// One `kB` field (`VmRSS:`, `RssAnon:`, …) of `/proc/PID/status`.
pub(crate) fn status_kb(pid: u32, name: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(name))
        .with_context(|| format!("{name} missing from /proc/{pid}/status"))?;
    let kb = line
        .split_whitespace()
        .nth(1)
        .with_context(|| format!("malformed line {line:?}"))?;
    Ok(kb.parse()?)
}
