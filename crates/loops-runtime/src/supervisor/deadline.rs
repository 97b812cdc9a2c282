//! The deadline arithmetic: how long a supervised process may go on after a lease
//! renewal that succeeded, so that it is gone before the lease can expire as the store
//! judges it (DESIGN.md §8; `shared/design/supervisor.md`).
//!
//! After a renewal that began at `t0` and succeeded, the store's lease runs until at
//! least `t0 + ttl`. The process must be gone by then with room to spare: its
//! supervisor starts terminating it (SIGTERM, kill grace `g`, SIGKILL) at
//! `t0 + ttl - g - m`, where the margin `m` covers clock-rate drift and scheduling
//! noise. Renewals come every `r` (a third of the lease); the budget `ttl - g - m` must
//! be longer than `r`, or a healthy runner could not extend the deadline in time.

use std::time::Duration;

/// The margin of a lease of `ttl`: a tenth of it, at least 200 ms.
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(200))
}

/// How long after a renewal's start a process may run, and with which kill grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// From the start of the renewal that succeeded to the deadline.
    pub run_for: Duration,
    /// The kill grace that fits (never longer than asked).
    pub kill_grace: Duration,
}

/// A runner lease (`daemon run --lease-ttl`) that the kill grace cannot fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unhonourable {
    pub ttl: Duration,
    pub grace: Duration,
    pub margin: Duration,
    pub left: Duration,
    pub renewal: Duration,
    /// The shortest TTL that fits this grace.
    pub need: Duration,
}

impl std::fmt::Display for Unhonourable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--lease-ttl {ttl} cannot be honoured with --kill-grace {grace}: a run must be \
             terminated {grace} + a {margin} margin before its runner's lease can expire, \
             which leaves {left}, not more than the {renewal} between two renewals; use a \
             --lease-ttl of at least {need} or a shorter --kill-grace",
            ttl = show(self.ttl),
            grace = show(self.grace),
            margin = show(self.margin),
            left = show(self.left),
            renewal = show(self.renewal),
            need = show(self.need),
        )
    }
}

impl std::error::Error for Unhonourable {}

/// The budget under a runner lease of `ttl` renewed every `renewal`, with the kill
/// grace `grace` kept whole; refused when it leaves no room for a renewal.
pub fn runner_budget(
    ttl: Duration,
    grace: Duration,
    renewal: Duration,
) -> Result<Budget, Unhonourable> {
    let m = margin(ttl);
    let left = ttl.saturating_sub(grace).saturating_sub(m);
    if left > renewal {
        return Ok(Budget {
            run_for: left,
            kill_grace: grace,
        });
    }
    // ttl - g - max(200ms, ttl/10) > ttl/3: the smallest ttl that fits, rounded up to
    // a whole 100 ms.
    let mut need = ttl.max(Duration::from_millis(100));
    while need.saturating_sub(grace).saturating_sub(margin(need)) <= need / 3 {
        need += Duration::from_millis(100);
    }
    Err(Unhonourable {
        ttl,
        grace,
        margin: m,
        left,
        renewal,
        need,
    })
}

/// The budget under a run lease of `lease` renewed every `renewal`. A loop's `--lease`
/// is its own and may be short: rather than refuse the run, the kill grace is
/// shortened so that one and a half renewal periods still fit before the deadline
/// (a lease so short that nothing fits gets SIGKILL at once when its deadline passes).
pub fn run_budget(lease: Duration, grace: Duration, renewal: Duration) -> Budget {
    let m = margin(lease);
    let room = lease
        .saturating_sub(m)
        .saturating_sub(renewal + renewal / 2);
    let kill_grace = grace.min(room);
    Budget {
        run_for: lease.saturating_sub(kill_grace).saturating_sub(m),
        kill_grace,
    }
}

fn show(d: Duration) -> String {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    loops_core::Duration::from_millis(ms).map_or_else(|| format!("{ms}ms"), |d| d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_defaults_leave_room_for_renewals() {
        let b = runner_budget(ms(30_000), ms(2_000), ms(10_000)).expect("fits");
        assert_eq!(b.run_for, ms(25_000));
        assert_eq!(b.kill_grace, ms(2_000));
    }

    #[test]
    fn a_short_ttl_with_a_long_grace_is_refused_naming_the_numbers() {
        let err = runner_budget(ms(3_000), ms(2_000), ms(1_000)).unwrap_err();
        let text = err.to_string();
        for part in [
            "--lease-ttl 3s",
            "--kill-grace 2s",
            "300ms margin",
            "leaves 700ms",
            "1s between",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        // The advice is right: the ttl it names fits, 100 ms less does not.
        let need = err.need;
        assert!(runner_budget(need, ms(2_000), need / 3).is_ok(), "{text}");
        let less = need - ms(100);
        assert!(runner_budget(less, ms(2_000), less / 3).is_err(), "{text}");
    }

    #[test]
    fn a_short_ttl_with_a_short_grace_fits() {
        let b = runner_budget(ms(3_000), ms(500), ms(1_000)).expect("fits");
        assert_eq!(b.run_for, ms(2_200));
        assert!(runner_budget(ms(2_000), ms(200), ms(666)).is_ok());
    }

    #[test]
    fn a_short_run_lease_shortens_the_kill_grace_and_keeps_renewals_in() {
        let long = run_budget(ms(30 * 60_000), ms(2_000), ms(10_000));
        assert_eq!(long.kill_grace, ms(2_000));
        assert_eq!(long.run_for, ms(30 * 60_000 - 2_000 - 180_000));
        let short = run_budget(ms(1_000), ms(2_000), ms(333));
        assert!(short.kill_grace < ms(2_000));
        assert!(short.run_for > ms(333), "{short:?}");
        assert!(short.run_for + short.kill_grace + margin(ms(1_000)) <= ms(1_000));
        let tiny = run_budget(ms(100), ms(2_000), ms(50));
        assert_eq!(tiny.kill_grace, Duration::ZERO);
    }
}
