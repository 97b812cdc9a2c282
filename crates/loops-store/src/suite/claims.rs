//! Claims: attempts, refusals, overlap `skip`, ad-hoc slots, races between stores,
//! and a scheduling pass's batch.

use super::{
    acquired, claim, claim_req, finish, holder, new_loop, outcome, pass_over, run_count, t,
    with_attempts, TestDb,
};
use crate::{
    BatchClaim, ClaimOutcome, ClaimRefused, DaemonLease, Fence, LoopAdvance, OnRefusal, RunFilter,
    StoreError,
};
use loops_core::{LoopId, LoopStatus, Run, RunSource, RunStatus};
use std::sync::Barrier;

/// A claim creates attempt 1 (running, claimed, leased); a running slot is refused;
/// a failed slot gets its next attempt until `maxAttempts`; a succeeded slot is done.
pub fn claim_semantics(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 2), t(0))
        .unwrap();
    let req = claim_req(&lp, t(0), t(10));

    let run = claim(&*store, &req).unwrap();
    assert_eq!(run.attempt, 1);
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.source, RunSource::Scheduled);
    assert_eq!(run.scheduled_for, t(0));
    assert_eq!(run.started_at, Some(t(10)));
    assert_eq!(run.claimed_by.as_deref(), Some("runner-a"));
    assert_eq!(run.lease_expires_at, Some(t(10 + 30 * 60_000)));
    assert_eq!(run.loop_name, "a");
    assert_eq!(run.id.as_str().len(), 12);
    assert_eq!(store.get_run(&run.id).unwrap().unwrap(), run);

    // Same slot while running.
    assert_eq!(claim(&*store, &req), Err(ClaimRefused::SlotRunning));

    // After a failure: attempt 2.
    finish(&*store, &run.id, outcome(RunStatus::Failed, t(20))).unwrap();
    let run2 = claim(&*store, &claim_req(&lp, t(0), t(30))).unwrap();
    assert_eq!(run2.attempt, 2);
    finish(&*store, &run2.id, outcome(RunStatus::TimedOut, t(40))).unwrap();
    // Max attempts (2) used.
    assert_eq!(
        claim(&*store, &claim_req(&lp, t(0), t(50))),
        Err(ClaimRefused::SlotDone)
    );

    // After success: done.
    let r = claim(&*store, &claim_req(&lp, t(60_000), t(60_001))).unwrap();
    finish(&*store, &r.id, outcome(RunStatus::Succeeded, t(60_002))).unwrap();
    assert_eq!(
        claim(&*store, &claim_req(&lp, t(60_000), t(60_003))),
        Err(ClaimRefused::SlotDone)
    );

    // Unknown loop.
    let mut ghost = claim_req(&lp, t(0), t(0));
    ghost.loop_id = LoopId::new("ffffffffffff");
    assert_eq!(claim(&*store, &ghost), Err(ClaimRefused::LoopNotActive));
}

/// With `require_no_running`, a loop with a running row is busy; without, the next
/// slot overlaps.
pub fn claim_overlap_skip_reports_busy(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let first = claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    let mut next = claim_req(&lp, t(60_000), t(60_001));
    next.require_no_running = true;
    assert_eq!(claim(&*store, &next), Err(ClaimRefused::LoopBusy));
    // Overlap allowed.
    next.require_no_running = false;
    let overlapping = claim(&*store, &next).unwrap();
    assert_eq!(overlapping.attempt, 1);
    // Once nothing runs, skip-mode claims go through.
    for r in [&first, &overlapping] {
        finish(&*store, &r.id, outcome(RunStatus::Succeeded, t(60_002))).unwrap();
    }
    let mut later = claim_req(&lp, t(120_000), t(120_001));
    later.require_no_running = true;
    assert!(claim(&*store, &later).is_ok());
}

/// A loop that is not active refuses scheduled claims; an ad-hoc claim ignores the
/// status and gets a single attempt.
pub fn claim_status_rules_and_ad_hoc(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let pause = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: Some(t(0)),
        retry_scheduled_for: None,
    };
    store
        .update_loop_schedule(&lp.id, &pause, t(1), None)
        .unwrap();
    assert_eq!(
        claim(&*store, &claim_req(&lp, t(0), t(2))),
        Err(ClaimRefused::LoopNotActive)
    );

    // Ad hoc ignores the status, and gets a single attempt.
    let mut adhoc = claim_req(&lp, t(5), t(5));
    adhoc.source = RunSource::AdHoc;
    let run = claim(&*store, &adhoc).unwrap();
    assert_eq!(run.source, RunSource::AdHoc);
    assert_eq!(run.attempt, 1);
    finish(&*store, &run.id, outcome(RunStatus::Failed, t(6))).unwrap();
    assert_eq!(claim(&*store, &adhoc), Err(ClaimRefused::SlotDone));
}

/// A slot a busy loop skipped is recorded `skipped` (instant, zero duration, the
/// reason) and is done; a skip after a failed attempt takes the next attempt number;
/// a loop that is gone skips nothing.
pub fn skipped_slot_is_done(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    // An older slot still running makes the loop busy for overlap `skip`.
    let busy = claim(&*store, &claim_req(&lp, t(-60_000), t(1))).unwrap();
    let skip = |slot, now| {
        let mut req = claim_req(&lp, slot, now);
        req.require_no_running = true;
        let outcomes = store
            .claim_runs(&[pass_over(req, None, vec![slot])], None)
            .unwrap();
        match &outcomes[..] {
            [ClaimOutcome::Skipped(runs)] if runs.len() == 1 => runs[0].clone(),
            other => panic!("expected one skipped run, got {other:?}"),
        }
    };
    let skipped = skip(t(0), t(3));
    assert_eq!(skipped.status, RunStatus::Skipped);
    assert_eq!(skipped.attempt, 1);
    assert_eq!(skipped.error.as_deref(), Some("previous run still active"));
    assert_eq!(skipped.started_at, Some(t(3)));
    assert_eq!(skipped.finished_at, Some(t(3)));
    assert_eq!(skipped.duration_ms, Some(0));
    assert_eq!(
        claim(&*store, &claim_req(&lp, t(0), t(4))),
        Err(ClaimRefused::SlotDone)
    );

    // A skip after a failed attempt takes the next attempt number.
    let r = claim(&*store, &claim_req(&lp, t(100), t(101))).unwrap();
    finish(&*store, &r.id, outcome(RunStatus::Failed, t(102))).unwrap();
    let s = skip(t(100), t(103));
    assert_eq!(s.attempt, 2);
    assert_eq!(
        store.get_run(&busy.id).unwrap().unwrap().status,
        RunStatus::Running
    );

    // Unknown loop: nothing recorded.
    let before = run_count(&*store);
    let mut ghost = claim_req(&lp, t(0), t(0));
    ghost.loop_id = LoopId::new("ffffffffffff");
    ghost.require_no_running = true;
    let outcomes = store
        .claim_runs(&[pass_over(ghost, None, vec![t(0)])], None)
        .unwrap();
    assert_eq!(outcomes, [ClaimOutcome::NotActive]);
    assert_eq!(run_count(&*store), before);
}

/// Stores on one database (as separate processes) race for the same slots: each slot
/// has exactly one winner, the others are refused `SlotRunning`.
pub fn racing_claims_have_exactly_one_winner(db: &dyn TestDb) {
    const THREADS: usize = 8;
    const SLOTS: i64 = 20;
    let lp = db
        .open()
        .create_loop(with_attempts(new_loop("race", Some(t(0))), 5), t(0))
        .unwrap();
    let barrier = Barrier::new(THREADS);
    let wins: Vec<Run> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (barrier, lp) = (&barrier, &lp);
                s.spawn(move || {
                    // Each thread has its own store, as separate processes would.
                    let store = db.open();
                    let mut wins = Vec::new();
                    for slot in 0..SLOTS {
                        let mut req = claim_req(lp, t(slot * 60_000), t(slot * 60_000 + 1));
                        req.runner_id = format!("runner-{i}");
                        barrier.wait();
                        match store.claim_run(&req, None, None).unwrap() {
                            Ok(run) => wins.push(run),
                            Err(refused) => assert_eq!(refused, ClaimRefused::SlotRunning),
                        }
                    }
                    wins
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(wins.len(), SLOTS as usize, "one winner per slot");
    for slot in 0..SLOTS {
        let n = wins
            .iter()
            .filter(|r| r.scheduled_for == t(slot * 60_000))
            .count();
        assert_eq!(n, 1, "slot {slot}");
    }
    let rows = db.open().list_runs(&RunFilter::default()).unwrap();
    assert_eq!(rows.len(), SLOTS as usize);
    assert!(rows.iter().all(|r| r.attempt == 1));
}

/// A pass's batch claims in order, in one transaction: a winner advances its loop, a
/// slot that is someone else's is passed over with its loop advanced, an inactive loop
/// is left alone, and a later claim of the batch sees an earlier one's row.
pub fn claim_runs_claims_each_in_order_and_advances_only_the_winners(db: &dyn TestDb) {
    let store = db.open();
    let a = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let b = store.create_loop(new_loop("b", Some(t(0))), t(0)).unwrap();
    let c = store.create_loop(new_loop("c", Some(t(0))), t(0)).unwrap();
    // b's slot already succeeded; c is paused.
    let done = claim(&*store, &claim_req(&b, t(0), t(1))).unwrap();
    finish(&*store, &done.id, outcome(RunStatus::Succeeded, t(2))).unwrap();
    let pause = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    store
        .update_loop_schedule(&c.id, &pause, t(3), None)
        .unwrap();

    let advance = |next: i64| LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(next)),
        retry_scheduled_for: None,
    };
    let batch: Vec<BatchClaim> = [(&a, 60_000), (&b, 60_000), (&c, 60_000), (&a, 120_000)]
        .iter()
        .map(|(lp, next)| pass_over(claim_req(lp, t(0), t(10)), Some(advance(*next)), vec![t(0)]))
        .collect();
    let results = store.claim_runs(&batch, None).unwrap();
    assert_eq!(results.len(), 4);
    let ClaimOutcome::Claimed(won) = &results[0] else {
        panic!("{:?}", results[0]);
    };
    assert_eq!((won.loop_id.clone(), won.attempt), (a.id.clone(), 1));
    assert_eq!(won.started_at, Some(t(10)));
    // b's slot is done: passed over, its loop advanced in the same transaction.
    assert_eq!(results[1], ClaimOutcome::Moved);
    assert_eq!(
        store.get_loop(&b.id).unwrap().unwrap().next_run_at,
        Some(t(60_000))
    );
    assert_eq!(results[2], ClaimOutcome::NotActive);
    // The same slot twice in one batch: the second sees the first's running row.
    assert_eq!(results[3], ClaimOutcome::Moved);
    assert_eq!(
        store.get_loop(&a.id).unwrap().unwrap().next_run_at,
        Some(t(120_000))
    );
    assert_eq!(
        store.get_loop(&c.id).unwrap().unwrap().status,
        LoopStatus::Paused
    );
    assert!(store.claim_runs(&[], None).unwrap().is_empty());
}

/// A busy loop's due slots are recorded `skipped` and the loop advanced, in the
/// claim's transaction; its running row is untouched.
pub fn a_busy_loop_is_skipped_and_advanced_in_the_claims_transaction(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(new_loop("busy", Some(t(0))), t(0))
        .unwrap();
    let running = claim(&*store, &claim_req(&lp, t(-60_000), t(-59_000))).unwrap();
    let mut req = claim_req(&lp, t(0), t(10));
    req.require_no_running = true;
    let next = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(120_000)),
        retry_scheduled_for: None,
    };
    let results = store
        .claim_runs(&[pass_over(req, Some(next), vec![t(0), t(60_000)])], None)
        .unwrap();
    let ClaimOutcome::Skipped(skipped) = &results[0] else {
        panic!("{:?}", results[0]);
    };
    assert_eq!(skipped.len(), 2);
    assert!(skipped.iter().all(|r| r.status == RunStatus::Skipped));
    assert_eq!(
        skipped.iter().map(|r| r.scheduled_for).collect::<Vec<_>>(),
        vec![t(0), t(60_000)]
    );
    assert_eq!(
        skipped[0].error.as_deref(),
        Some("previous run still active")
    );
    let after = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(after.next_run_at, Some(t(120_000)));
    assert_eq!(
        store.get_run(&running.id).unwrap().unwrap().status,
        RunStatus::Running
    );
}

/// A claim with an advance sets the loop in the same write; a refused one leaves the
/// loop untouched; a stale fence writes nothing.
pub fn claim_and_advance_is_one_write(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let advance = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(60_000)),
        retry_scheduled_for: None,
    };
    let run = store
        .claim_run(&claim_req(&lp, t(0), t(5)), Some(&advance), None)
        .unwrap()
        .unwrap();
    assert_eq!(run.attempt, 1);
    let after = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(after.next_run_at, Some(t(60_000)));
    assert_eq!(after.updated_at, t(5));

    // Refused: the loop is untouched.
    let other = LoopAdvance {
        status: LoopStatus::Stopped,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    let refused = store
        .claim_run(&claim_req(&lp, t(0), t(6)), Some(&other), None)
        .unwrap();
    assert_eq!(refused, Err(ClaimRefused::SlotRunning));
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap(), after);

    // Fenced with a lease another daemon took over: nothing written.
    let never = |_: &DaemonLease| false;
    let l = acquired(
        store
            .acquire_daemon_lease(&holder("d1"), 10, t(0), &never)
            .unwrap(),
    );
    acquired(
        store
            .acquire_daemon_lease(&holder("d2"), 10, t(20), &never)
            .unwrap(),
    );
    let err = store
        .claim_run(
            &claim_req(&lp, t(60_000), t(60_000)),
            Some(&other),
            Some(&Fence { token: l.token }),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost), "{err:?}");
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap(), after);
    assert_eq!(run_count(&*store), 1);
}

/// Claims that keep their refusals say why — the loop busy, the slot running or
/// done, the loop not active — and change nothing, beside a winner of the same batch.
pub fn kept_refusals_say_why_and_change_nothing(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let paused = store.create_loop(new_loop("p", Some(t(0))), t(0)).unwrap();
    let pause = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: Some(t(0)),
        retry_scheduled_for: None,
    };
    store
        .update_loop_schedule(&paused.id, &pause, t(1), None)
        .unwrap();
    let done = claim(&*store, &claim_req(&lp, t(-60_000), t(1))).unwrap();
    finish(&*store, &done.id, outcome(RunStatus::Succeeded, t(2))).unwrap();
    let before = store.get_loop(&lp.id).unwrap().unwrap();
    let moved = LoopAdvance {
        status: LoopStatus::Stopped,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    let keep = |request| BatchClaim {
        caps: Default::default(),
        request,
        advance: Some(moved.clone()),
        on_refusal: OnRefusal::Keep,
    };
    let mut busy = claim_req(&lp, t(120_000), t(10));
    busy.require_no_running = true;
    let batch = [
        keep(claim_req(&lp, t(-60_000), t(10))),
        keep(claim_req(&paused, t(0), t(10))),
        BatchClaim {
            caps: Default::default(),
            request: claim_req(&lp, t(0), t(10)),
            advance: None,
            on_refusal: OnRefusal::Keep,
        },
        keep(claim_req(&lp, t(0), t(10))),
        keep(busy),
    ];
    let results = store.claim_runs(&batch, None).unwrap();
    assert_eq!(results[0], ClaimOutcome::Refused(ClaimRefused::SlotDone));
    assert_eq!(
        results[1],
        ClaimOutcome::Refused(ClaimRefused::LoopNotActive)
    );
    assert!(
        matches!(results[2], ClaimOutcome::Claimed(_)),
        "{:?}",
        results[2]
    );
    assert_eq!(results[3], ClaimOutcome::Refused(ClaimRefused::SlotRunning));
    assert_eq!(results[4], ClaimOutcome::Refused(ClaimRefused::LoopBusy));
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap(), before);
    assert_eq!(
        store.get_loop(&paused.id).unwrap().unwrap().status,
        LoopStatus::Paused
    );
    assert_eq!(run_count(&*store), 2, "no skipped rows either");
}
