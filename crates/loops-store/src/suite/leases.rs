//! The daemon lease (acquire, heartbeat, take-over, release, tokens that only grow)
//! and the fence on every daemon write.

use super::{acquired, claim_req, holder, new_loop, outcome, pass_over, t, with_attempts, TestDb};
use crate::{DaemonLease, Fence, LeaseAcquire, LoopAdvance, RunFilter, RunWrite, StoreError};
use loops_core::{LoopStatus, RunStatus};

/// The lease is taken when free, refused while another holds it live, renewed by its
/// holder's heartbeat (also once expired, while nobody took it), re-acquired with a
/// new token, taken over when the holder is gone or expired, and released only by its
/// current holder; tokens keep growing across releases.
pub fn daemon_lease_lifecycle(db: &dyn TestDb) {
    let store = db.open();
    let never = |_: &DaemonLease| false;
    let always = |_: &DaemonLease| true;
    assert!(store.current_daemon_lease().unwrap().is_none());

    let l1 = acquired(
        store
            .acquire_daemon_lease(&holder("d1"), 1000, t(0), &never)
            .unwrap(),
    );
    assert_eq!(l1.token, 1);
    assert_eq!(l1.holder, holder("d1"));
    assert_eq!(l1.acquired_at, t(0));
    assert_eq!(l1.heartbeat_at, t(0));
    assert_eq!(l1.expires_at, t(1000));
    assert_eq!(store.current_daemon_lease().unwrap(), Some(l1.clone()));

    // Held by d1: d2 is refused and sees the holder.
    match store
        .acquire_daemon_lease(&holder("d2"), 1000, t(500), &never)
        .unwrap()
    {
        LeaseAcquire::Held(l) => assert_eq!(l, l1),
        other => panic!("{other:?}"),
    }

    // Heartbeat extends.
    let fence1 = Fence { token: l1.token };
    assert!(store.renew_daemon_lease(&fence1, 1000, t(900)).unwrap());
    let cur = store.current_daemon_lease().unwrap().unwrap();
    assert_eq!(cur.heartbeat_at, t(900));
    assert_eq!(cur.expires_at, t(1900));
    assert_eq!(cur.acquired_at, t(0));

    // Same runner re-acquires: new token.
    let l1b = acquired(
        store
            .acquire_daemon_lease(&holder("d1"), 1000, t(950), &never)
            .unwrap(),
    );
    assert_eq!(l1b.token, 2);
    assert!(!store.renew_daemon_lease(&fence1, 1000, t(960)).unwrap());

    // Takeover callback says the holder is gone.
    let l2 = acquired(
        store
            .acquire_daemon_lease(&holder("d2"), 1000, t(1000), &always)
            .unwrap(),
    );
    assert_eq!(l2.token, 3);
    assert_eq!(l2.holder.runner_id, "d2");

    // Expired: anyone acquires without takeover.
    let l3 = acquired(
        store
            .acquire_daemon_lease(&holder("d3"), 1000, t(2000), &never)
            .unwrap(),
    );
    assert_eq!(l3.token, 4);
    let fence3 = Fence { token: 4 };
    // Expired but taken by nobody: still d3's, and its heartbeat renews it (a daemon
    // whose writes failed on a full disk resumes once they work again).
    assert!(store.renew_daemon_lease(&fence3, 1000, t(3000)).unwrap());
    assert_eq!(
        store.current_daemon_lease().unwrap().unwrap().expires_at,
        t(4000)
    );

    // Release by a stale fence is a no-op; by the holder removes it.
    let l4 = acquired(
        store
            .acquire_daemon_lease(&holder("d3"), 1000, t(4000), &never)
            .unwrap(),
    );
    // Once someone else holds it, the old fence's heartbeat fails.
    assert!(!store.renew_daemon_lease(&fence3, 1000, t(4001)).unwrap());
    store.release_daemon_lease(&fence3).unwrap();
    assert_eq!(store.current_daemon_lease().unwrap(), Some(l4.clone()));
    store
        .release_daemon_lease(&Fence { token: l4.token })
        .unwrap();
    assert!(store.current_daemon_lease().unwrap().is_none());

    // Tokens keep growing after a release.
    let l5 = acquired(
        store
            .acquire_daemon_lease(&holder("d9"), 1000, t(3100), &never)
            .unwrap(),
    );
    assert!(l5.token > l4.token);
}

/// The take-over callback is asked only about a live lease of another runner.
pub fn takeover_is_only_asked_about_a_live_foreign_holder(db: &dyn TestDb) {
    let store = db.open();
    let asked = std::cell::Cell::new(0);
    let count = |_: &DaemonLease| {
        asked.set(asked.get() + 1);
        false
    };
    acquired(
        store
            .acquire_daemon_lease(&holder("d1"), 1000, t(0), &count)
            .unwrap(),
    );
    assert_eq!(asked.get(), 0);
    let _ = store
        .acquire_daemon_lease(&holder("d2"), 1000, t(10), &count)
        .unwrap();
    assert_eq!(asked.get(), 1);
    acquired(
        store
            .acquire_daemon_lease(&holder("d2"), 1000, t(5000), &count)
            .unwrap(),
    );
    assert_eq!(asked.get(), 1);
}

/// Once another daemon acquired the lease, every write carrying the old fence fails
/// with `LeaseLost` and writes nothing; the new holder's fence works (also past its
/// expiry while nobody took it over) until a third daemon takes over.
pub fn fenced_writes_after_losing_the_lease_write_nothing(db: &dyn TestDb) {
    let store = db.open();
    let never = |_: &DaemonLease| false;
    let always = |_: &DaemonLease| true;
    let lp = store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let mut n = new_loop("exp", Some(t(0)));
    n.policy.expires_at = Some(t(1));
    let expiring = store.create_loop(n, t(0)).unwrap();

    let old = acquired(
        store
            .acquire_daemon_lease(&holder("d1"), 60_000, t(0), &never)
            .unwrap(),
    );
    let old_fence = Fence { token: old.token };

    // While held, fenced writes apply.
    let running = store
        .claim_run(&claim_req(&lp, t(0), t(10)), None, Some(&old_fence))
        .unwrap()
        .unwrap();

    // Another daemon takes over.
    let new = acquired(
        store
            .acquire_daemon_lease(&holder("d2"), 60_000, t(20), &always)
            .unwrap(),
    );
    assert_ne!(new.token, old.token);

    let before_loop = store.get_loop(&lp.id).unwrap().unwrap();
    let before_runs = store.list_runs(&RunFilter::default()).unwrap();
    let lost = |r: Result<(), StoreError>| {
        assert!(matches!(r, Err(StoreError::LeaseLost)), "{r:?}");
    };
    let now = t(30);
    lost(
        store
            .claim_run(&claim_req(&lp, t(60_000), now), None, Some(&old_fence))
            .map(|_| ()),
    );
    // A busy loop's skipped slot.
    let mut busy = claim_req(&lp, t(60_000), now);
    busy.require_no_running = true;
    lost(
        store
            .claim_runs(&[pass_over(busy, None, vec![t(60_000)])], Some(&old_fence))
            .map(|_| ()),
    );
    let spawned = RunWrite::Spawned {
        run: running.id.clone(),
        pid: 99,
        pid_start_time: None,
        session_note: None,
        at: now,
    };
    lost(
        store
            .record_run_writes(std::slice::from_ref(&spawned), now, Some(&old_fence))
            .map(|_| ()),
    );
    lost(
        store
            .renew_run_leases(
                std::slice::from_ref(&running.id),
                "runner-a",
                now,
                Some(&old_fence),
            )
            .map(|_| ()),
    );
    let finished = RunWrite::Finished {
        run: running.id.clone(),
        outcome: outcome(RunStatus::Failed, now),
    };
    lost(
        store
            .record_run_writes(std::slice::from_ref(&finished), now, Some(&old_fence))
            .map(|_| ()),
    );
    let advance = LoopAdvance {
        status: LoopStatus::Stopped,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    lost(
        store
            .update_loop_schedule(&lp.id, &advance, now, Some(&old_fence))
            .map(|_| ()),
    );
    lost(store.expire_loops(t(100), Some(&old_fence)).map(|_| ()));
    let back = crate::SlotMove {
        read: before_loop.clone(),
        to: t(1),
    };
    lost(
        store
            .move_slots_back(&[back], now, Some(&old_fence))
            .map(|_| ()),
    );
    lost(
        store
            .claim_runs(
                &[pass_over(claim_req(&lp, t(60_000), now), None, vec![])],
                Some(&old_fence),
            )
            .map(|_| ()),
    );
    lost(
        store
            .record_run_writes(&[spawned, finished], now, Some(&old_fence))
            .map(|_| ()),
    );
    assert!(!store.renew_daemon_lease(&old_fence, 60_000, now).unwrap());

    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap(), before_loop);
    assert_eq!(
        store.get_loop(&expiring.id).unwrap().unwrap().status,
        LoopStatus::Active
    );
    assert_eq!(store.list_runs(&RunFilter::default()).unwrap(), before_runs);

    // The new holder's fence works, even past its expiry while nobody took it over.
    let new_fence = Fence { token: new.token };
    let finish = RunWrite::Finished {
        run: running.id.clone(),
        outcome: outcome(RunStatus::Failed, now),
    };
    let results = store
        .record_run_writes(&[finish], now, Some(&new_fence))
        .unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);
    store
        .expire_loops(t(20 + 60_000), Some(&new_fence))
        .unwrap();
    // Taken over by a third daemon: now it fails.
    acquired(
        store
            .acquire_daemon_lease(&holder("d3"), 60_000, t(20 + 60_001), &never)
            .unwrap(),
    );
    lost(
        store
            .update_loop_schedule(&lp.id, &advance, t(20 + 60_002), Some(&new_fence))
            .map(|_| ()),
    );
}

/// [`crate::Store::open_another`] on a database file or server is another handle with
/// a connection of its own, on the same data: what one writes the other reads, and it
/// outlives the handle that opened it.
pub fn another_handle_is_the_same_store(db: &dyn TestDb) {
    let store = db.open();
    let another = store
        .open_another()
        .unwrap()
        .expect("a store on a file or a server opens another handle");
    let a = store
        .create_loop(new_loop("from-first", None), t(0))
        .unwrap();
    let b = another
        .create_loop(new_loop("from-another", None), t(0))
        .unwrap();
    assert_eq!(another.get_loop(&a.id).unwrap().unwrap().name, "from-first");
    drop(store);
    assert_eq!(
        another.get_loop(&b.id).unwrap().unwrap().name,
        "from-another"
    );
    let reopened = db.open();
    assert_eq!(reopened.list_loops(None).unwrap().len(), 2);
}
