//! What the PostgreSQL tests share: a command loop due at an instant, and a scheduling
//! pass's claim of one of its slots.

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
