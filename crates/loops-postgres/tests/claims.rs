//! Set-based claims on PostgreSQL (issue #12): a scheduling pass's batch is claimed in
//! a fixed number of statements, with the same outcomes as one claim at a time — also
//! while other runners race for the same loops. Real PostgreSQL; each test skips
//! without it (a failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{Loop, Overlap, RunSource, RunStatus};
use loops_postgres::PgStore;
use loops_store::{BatchClaim, ClaimOutcome, ClaimRequest, RunFilter, Store};
use loops_testkit::PgCluster;

mod common;
use common::{new_loop, pass};

/// Three runners claim the same 60 due loops in batches at once: each slot is claimed
/// exactly once, every loop advanced once, every other claim passed over (`Moved`); a
/// later batch of the same slots claims nothing more.
#[test]
fn racing_batches_claim_each_slot_exactly_once() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    let setup = PgStore::open(&url).unwrap();
    let slot = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let loops: Vec<Loop> = (0..60)
        .map(|i| {
            setup
                .create_loop(new_loop(&format!("l{i}"), slot, Overlap::Allow), slot)
                .unwrap()
        })
        .collect();
    let handles: Vec<_> = (0..3)
        .map(|r| {
            let url = url.clone();
            let mut mine = loops.clone();
            // Each runner in another order, so their locks interleave.
            mine.rotate_left(r * 20);
            std::thread::spawn(move || {
                let store = PgStore::open(&url).unwrap();
                let batch: Vec<BatchClaim> = mine
                    .iter()
                    .map(|lp| pass(lp, slot, &format!("runner-{r}")))
                    .collect();
                store.claim_runs(&batch, None).unwrap()
            })
        })
        .collect();
    let outcomes: Vec<ClaimOutcome> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let claimed = outcomes
        .iter()
        .filter(|o| matches!(o, ClaimOutcome::Claimed(_)))
        .count();
    assert_eq!(claimed, 60, "{outcomes:?}");
    assert!(outcomes
        .iter()
        .all(|o| matches!(o, ClaimOutcome::Claimed(_) | ClaimOutcome::Moved)));
    let runs = setup.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(runs.len(), 60);
    let mut ids: Vec<&str> = runs.iter().map(|r| r.loop_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 60, "one run per loop");
    for lp in &loops {
        let now = setup.get_loop(&lp.id).unwrap().unwrap();
        assert_eq!(now.next_run_at, Some(slot + chrono::TimeDelta::minutes(1)));
    }
    // Each claim logged its start, once.
    let started = setup
        .events_after(0, 10_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.body.kind == loops_core::event::EventKind::RunStarted)
        .count();
    assert_eq!(started, 60);
    // The same slots again: all stale now, nothing claimed.
    let again: Vec<BatchClaim> = loops.iter().map(|lp| pass(lp, slot, "late")).collect();
    let late = setup.claim_runs(&again, None).unwrap();
    assert!(
        late.iter().all(|o| matches!(o, ClaimOutcome::Moved)),
        "{late:?}"
    );
    assert_eq!(setup.list_runs(&RunFilter::default()).unwrap().len(), 60);
}

/// In one batch: a plain claim, a busy overlap-`skip` loop (its slot recorded
/// `skipped`, the loop advanced) and a loop that is gone — the outcomes of the
/// one-by-one path, in order.
#[test]
fn a_batch_mixes_claims_skips_and_gone_loops() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let slot = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let plain = store
        .create_loop(new_loop("plain", slot, Overlap::Allow), slot)
        .unwrap();
    let busy = store
        .create_loop(new_loop("busy", slot, Overlap::Skip), slot)
        .unwrap();
    let gone = store
        .create_loop(new_loop("gone", slot, Overlap::Allow), slot)
        .unwrap();
    // `busy` has a run in flight (an ad-hoc one), `gone` is removed.
    store
        .claim_run(
            &ClaimRequest {
                loop_id: busy.id.clone(),
                scheduled_for: slot - chrono::TimeDelta::seconds(1),
                runner_id: "other".to_owned(),
                source: RunSource::AdHoc,
                now: slot,
                require_no_running: false,
            },
            None,
            None,
        )
        .unwrap()
        .unwrap();
    store.remove_loop(&gone.id).unwrap();
    let out = store
        .claim_runs(
            &[
                pass(&plain, slot, "me"),
                pass(&busy, slot, "me"),
                pass(&gone, slot, "me"),
            ],
            None,
        )
        .unwrap();
    assert!(
        matches!(&out[0], ClaimOutcome::Claimed(r) if r.loop_id == plain.id),
        "{out:?}"
    );
    match &out[1] {
        ClaimOutcome::Skipped(runs) => {
            assert_eq!(runs.len(), 1);
            assert_eq!(runs[0].status, RunStatus::Skipped);
        }
        other => panic!("busy: {other:?}"),
    }
    assert!(matches!(out[2], ClaimOutcome::NotActive), "{out:?}");
    let busy_now = store.get_loop(&busy.id).unwrap().unwrap();
    assert_eq!(
        busy_now.next_run_at,
        Some(slot + chrono::TimeDelta::minutes(1))
    );
}
