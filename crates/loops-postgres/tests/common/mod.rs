//! What the PostgreSQL tests share: a command loop due at an instant, a scheduling
//! pass's claim of one of its slots, and a recorder batch of pid records and ends.

// Each test binary uses what it needs of these.
#![allow(dead_code)]

use loops_core::{
    Anchor, CommandTarget, Loop, LoopStatus, NewLoop, Overlap, Policy, RunSource, Schedule, Target,
};
use loops_store::{BatchClaim, ClaimRequest, LoopAdvance, OnRefusal};

/// A loop of `true` every minute, its next slot `at`, overlapping as `overlap` says.
pub fn new_loop(name: &str, at: loops_core::Instant, overlap: Overlap) -> NewLoop {
    NewLoop {
        name: name.to_owned(),
        description: None,
        schedule: Schedule::Interval {
            every_ms: 60_000,
            anchor: Anchor::FixedRate,
        },
        target: Target::Command(CommandTarget {
            command: "true".to_owned(),
            args: vec![],
            cwd: None,
            shell: true,
            env: Default::default(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }),
        policy: Policy {
            overlap,
            ..Policy::default()
        },
        labels: vec![],
        notify: None,
        next_run_at: Some(at),
    }
}

/// A pass's claim of `lp`'s slot `slot` by `runner`, advancing it a minute.
pub fn pass(lp: &Loop, slot: loops_core::Instant, runner: &str) -> BatchClaim {
    BatchClaim {
        caps: Default::default(),
        request: ClaimRequest {
            loop_id: lp.id.clone(),
            scheduled_for: slot,
            runner_id: runner.to_owned(),
            source: RunSource::Scheduled,
            now: slot,
            require_no_running: lp.overlap == Overlap::Skip,
        },
        advance: Some(LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: Some(slot + chrono::TimeDelta::minutes(1)),
            retry_scheduled_for: None,
        }),
        on_refusal: OnRefusal::PassOver {
            skip_slots: vec![slot],
        },
    }
}

/// An ad-hoc claim of `lp` by `runner` at `now` (as `run-now` makes one).
pub fn ad_hoc(lp: &Loop, runner: &str, now: loops_core::Instant) -> ClaimRequest {
    ClaimRequest {
        loop_id: lp.id.clone(),
        scheduled_for: now,
        runner_id: runner.to_owned(),
        source: RunSource::AdHoc,
        now,
        require_no_running: false,
    }
}

/// A recorder batch: each run's pid record (pid 4242) at `at`, then each run's end as
/// succeeded at `end`.
pub fn pid_records_then_ends(
    runs: &[loops_core::Run],
    at: loops_core::Instant,
    end: loops_core::Instant,
) -> Vec<loops_store::RunWrite> {
    use loops_core::{RunOutcome, RunStatus};
    use loops_store::RunWrite;
    let mut writes: Vec<RunWrite> = runs
        .iter()
        .map(|run| RunWrite::Spawned {
            run: run.id.clone(),
            pid: 4242,
            pid_start_time: Some(7),
            session_note: None,
            at,
        })
        .collect();
    writes.extend(runs.iter().map(|run| RunWrite::Finished {
        run: run.id.clone(),
        outcome: RunOutcome {
            exit_code: Some(0),
            ..RunOutcome::new(RunStatus::Succeeded, end)
        },
    }));
    writes
}

/// Every write of [`pid_records_then_ends`]'s batch done: each run ended succeeded,
/// its pid recorded before.
pub fn assert_pid_records_then_ends(
    writes: &[loops_store::RunWrite],
    written: &[loops_store::Result<loops_store::RunWritten>],
) {
    use loops_store::{RunWrite, RunWritten};
    assert_eq!(written.len(), writes.len());
    for (write, done) in writes.iter().zip(written) {
        match (write, done) {
            (RunWrite::Spawned { .. }, Ok(RunWritten::Spawned)) => {}
            (RunWrite::Finished { .. }, Ok(RunWritten::Finished { run, .. })) => {
                assert_eq!(run.status, loops_core::RunStatus::Succeeded);
                assert_eq!(run.pid, Some(4242), "the pid record went first");
            }
            other => panic!("{other:?}"),
        }
    }
}
