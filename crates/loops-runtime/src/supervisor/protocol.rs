//! The supervisor's wire protocol: length-prefixed JSON frames over a Unix stream
//! socket in the data dir (`supervise/`, 0700), between one daemon (the owner) and
//! one supervisor.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of JSON. Frames
//! are bounded ([`MAX_FRAME`]): a prompt (1 MiB at most), an environment and two
//! output tails fit many times over; anything longer is a broken peer, and the
//! connection is dropped rather than read into memory.
//!
//! The daemon speaks [`Request`]s, the supervisor [`Event`]s. Units are named by a key
//! the daemon chooses (`run-<run id>`, `step-<step run id>`) and belong to a group (the
//! loop run whose lease bounds them), so one extension covers a workflow's steps too.

use crate::executor::{ExecResult, Invocation};
use crate::spool::SpoolFiles;
use serde::{Deserialize, Serialize};
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Version of this protocol; a supervisor answers `Hello` with its own, and a daemon
/// refuses to adopt units from a supervisor it cannot speak to.
pub const PROTOCOL: u32 = 1;

/// Longest frame accepted, in bytes.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// Which clock a deadline is read on. Both are system-wide, so the daemon and its
/// supervisor read the same value. `Boottime` also counts time the machine was
/// suspended: after a resume, a deadline that passed meanwhile has passed (another
/// host may have taken the slot over). `Monotonic` does not: on a single host
/// (SQLite) nobody else can take a run over, and a laptop's sleep must not kill its
/// runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadlineClock {
    Monotonic,
    Boottime,
}

impl DeadlineClock {
    /// Milliseconds on this clock now.
    pub fn now_ms(self) -> u64 {
        use nix::time::{clock_gettime, ClockId};
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let id = match self {
            DeadlineClock::Monotonic => ClockId::CLOCK_MONOTONIC,
            DeadlineClock::Boottime => ClockId::CLOCK_BOOTTIME,
        };
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let id = ClockId::CLOCK_MONOTONIC;
        match clock_gettime(id) {
            Ok(t) => {
                u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000
                    + u64::try_from(t.tv_nsec()).unwrap_or(0) / 1_000_000
            }
            // Cannot fail for these clocks; a reading of 0 makes every deadline pass,
            // the safe side.
            Err(_) => u64::MAX,
        }
    }
}

/// The instant after which a unit is terminated unless its deadline is extended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deadline {
    pub clock: DeadlineClock,
    /// Milliseconds on `clock`.
    pub at_ms: u64,
}

/// A daemon's request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Request {
    /// Makes this connection the owner: every unit's events go to it from now on. Sent
    /// first; answered with [`Event::Welcome`].
    #[serde(rename_all = "camelCase")]
    Hello { daemon_pid: u32, runner_id: String },
    /// Starts a unit. Answered with `Spawned` then `Exited` (only `Exited` when it
    /// cannot start).
    #[serde(rename_all = "camelCase")]
    Start {
        unit: String,
        group: String,
        invocation: Box<Invocation>,
        deadline: Option<Deadline>,
    },
    /// New deadlines for running units (units not named keep theirs).
    Extend { deadlines: Vec<(String, Deadline)> },
    /// Terminates a unit's process group (SIGTERM, its kill grace, SIGKILL).
    Terminate { unit: String, reason: String },
    /// The owner recorded the unit's end: forget it and its status file.
    Ack { unit: String },
    /// Take no new units; exit once the last one is acknowledged (a supervisor of an
    /// earlier daemon, adopted by a new one).
    Retire,
}

/// A supervisor's event.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    /// The answer to `Hello`: who this supervisor is and every unit it holds.
    #[serde(rename_all = "camelCase")]
    Welcome {
        protocol: u32,
        pid: u32,
        version: String,
        units: Vec<UnitReport>,
    },
    /// A unit's process started.
    #[serde(rename_all = "camelCase")]
    Spawned {
        unit: String,
        pid: u32,
        pid_start_time: Option<u64>,
    },
    /// A unit ended (or never started).
    Exited {
        unit: String,
        report: Box<ExitReport>,
    },
}

/// A unit as a supervisor reports it to a daemon that re-attaches.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnitReport {
    pub unit: String,
    pub group: String,
    pub pid: Option<u32>,
    pub pid_start_time: Option<u64>,
    pub deadline: Option<Deadline>,
    pub spool: Option<SpoolFiles>,
    /// Set once it ended.
    pub exited: Option<ExitReport>,
}

/// How a unit ended, as its supervisor saw it (also the status file's content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitReport {
    pub unit: String,
    pub group: String,
    /// The process's outcome: status, exit code or signal, output tails, timing, usage.
    pub result: ExecResult,
    /// Why the supervisor itself terminated it (its deadline passed, the supervisor
    /// was told to stop), when it did; a termination the owner asked for says nothing
    /// here (the owner knows its reason).
    pub terminated_by: Option<String>,
}

/// Writes one frame.
pub async fn write_frame<W, T>(out: &mut W, message: &T) -> io::Result<()>
where
    W: tokio::io::AsyncWrite + Unpin,
    T: Serialize,
{
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {} bytes is over the limit", body.len()),
        ));
    }
    let len = u32::try_from(body.len()).map_err(io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    out.write_all(&frame).await
}

/// Reads one frame; `None` at a clean end of stream (between frames).
pub async fn read_frame<R, T>(input: &mut R) -> io::Result<Option<T>>
where
    R: tokio::io::AsyncRead + Unpin,
    T: for<'de> Deserialize<'de>,
{
    let mut len = [0u8; 4];
    match input.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = usize::try_from(u32::from_be_bytes(len)).map_err(io::Error::other)?;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the limit"),
        ));
    }
    let mut body = vec![0u8; len];
    input.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Whether `unit` is a key of ours: `run-`/`step-` and a lowercase hex/alnum id, so it
/// is safe as a file name in the supervise dir.
pub fn is_unit_key(unit: &str) -> bool {
    let id = unit
        .strip_prefix("run-")
        .or_else(|| unit.strip_prefix("step-"));
    id.is_some_and(|id| {
        !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_end_cleanly() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let request = Request::Terminate {
            unit: "run-0123456789ab".to_owned(),
            reason: "because".to_owned(),
        };
        write_frame(&mut a, &request).await.unwrap();
        drop(a);
        let got: Request = read_frame(&mut b).await.unwrap().unwrap();
        assert!(matches!(got, Request::Terminate { unit, .. } if unit == "run-0123456789ab"));
        assert!(read_frame::<_, Request>(&mut b).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn an_oversized_frame_is_refused_unread() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let len = u32::try_from(MAX_FRAME + 1).unwrap().to_be_bytes();
        a.write_all(&len).await.unwrap();
        let err = read_frame::<_, Request>(&mut b).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn unit_keys_are_safe_file_names() {
        assert!(is_unit_key("run-0123456789ab"));
        assert!(is_unit_key("step-abc_def"));
        for bad in [
            "run-", "run-../x", "x-abc", "run-ABC", "step-a/b", "run-a b",
        ] {
            assert!(!is_unit_key(bad), "{bad}");
        }
    }

    #[test]
    fn both_clocks_move_forward() {
        for clock in [DeadlineClock::Monotonic, DeadlineClock::Boottime] {
            let a = clock.now_ms();
            let b = clock.now_ms();
            assert!(a > 0 && b >= a, "{clock:?}: {a} {b}");
        }
    }
}
