//! A scheduling pass's batch of claims costs a fixed number of round trips to the
//! server, whatever its size (issue #21): `BEGIN` with the fence check, the loops'
//! locks with their slots' state, the runs' insert with the loops' advance, and the
//! events with `COMMIT`. Its own test binary: the round-trip counter is the process's,
//! and no other test may add to it meanwhile. Real PostgreSQL; skips without it (a
//! failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{
    Anchor, CommandTarget, Loop, LoopStatus, NewLoop, Policy, RunSource, Schedule, Target,
};
use loops_postgres::PgStore;
use loops_store::{BatchClaim, ClaimOutcome, ClaimRequest, LoopAdvance, OnRefusal, Store};
use loops_testkit::PgCluster;

fn new_loop(name: &str, at: loops_core::Instant) -> NewLoop {
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
        policy: Policy::default(),
        labels: vec![],
        notify: None,
        next_run_at: Some(at),
    }
}

/// A pass's claim of `lp`'s slot `slot`, advancing it a minute.
fn pass(lp: &Loop, slot: loops_core::Instant) -> BatchClaim {
    BatchClaim {
        caps: Default::default(),
        request: ClaimRequest {
            loop_id: lp.id.clone(),
            scheduled_for: slot,
            runner_id: "me".to_owned(),
            source: RunSource::Scheduled,
            now: slot,
            require_no_running: false,
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

#[test]
fn a_batch_of_claims_is_four_round_trips_whatever_its_size() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let slot = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let loops: Vec<Loop> = (0..40)
        .map(|i| store.create_loop(new_loop(&format!("l{i}"), slot), slot).unwrap())
        .collect();
    // Each batch claims every slot and advances every loop; the first also prepares
    // the statements on the connection.
    for (minute, size) in [(0, 3), (1, 3), (2, 40)] {
        let at = slot + chrono::TimeDelta::minutes(minute);
        let batch: Vec<BatchClaim> = loops[..size].iter().map(|lp| pass(lp, at)).collect();
        let before = loops_postgres::round_trips();
        let out = store.claim_runs(&batch, None).unwrap();
        let trips = loops_postgres::round_trips() - before;
        assert!(
            out.iter().all(|o| matches!(o, ClaimOutcome::Claimed(_))),
            "{out:?}"
        );
        if minute > 0 {
            assert_eq!(trips, 4, "a batch of {size} claims");
        }
        for lp in &loops[..size] {
            let now = store.get_loop(&lp.id).unwrap().unwrap();
            assert_eq!(now.next_run_at, Some(at + chrono::TimeDelta::minutes(1)));
        }
    }
}
