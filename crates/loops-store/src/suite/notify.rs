//! Notifications: the store-wide default, the deliveries a finalization queues in its
//! own transaction (failure once per slot, recovery after a failed slot), their claims
//! and results; and the run lookups of the live views.

use super::{claim, claim_req, new_loop, outcome, t, with_attempts, TestDb};
use crate::{RunWrite, RunWritten, Store};
use loops_core::{
    Delivery, DeliveryStatus, Loop, Notify, NotifyChannel, NotifyEvent, NotifyOn, Run, RunId,
    RunSource, RunStatus,
};

fn settings(on: NotifyOn) -> Notify {
    Notify {
        cmd: Some("notify-hook".into()),
        url: Some("https://hooks.example.com/x".into()),
        on,
    }
}

/// Claims and finalizes one attempt of `slot` (ms offset) with `status`; returns the
/// run and the deliveries its finalization queued.
fn attempt(store: &dyn Store, lp: &Loop, slot: i64, status: RunStatus) -> (Run, Vec<Delivery>) {
    let run = claim(store, &claim_req(lp, t(slot), t(slot + 1))).unwrap();
    let write = RunWrite::Finished {
        run: run.id.clone(),
        outcome: outcome(status, t(slot + 2)),
    };
    let mut results = store
        .record_run_writes(&[write], t(slot + 2), None)
        .unwrap();
    match results.remove(0).unwrap() {
        RunWritten::Finished {
            run, notifications, ..
        } => (*run, notifications),
        other => panic!("a finalization answered {other:?}"),
    }
}

/// The default is stored, read back and cleared.
pub fn notify_default_round_trips_and_clears(db: &dyn TestDb) {
    let store = db.open();
    assert_eq!(store.notify_default().unwrap(), None);
    let n = settings(NotifyOn::Recovery);
    store.set_notify_default(Some(&n)).unwrap();
    assert_eq!(db.open().notify_default().unwrap(), Some(n.clone()));
    let replaced = Notify {
        cmd: None,
        ..settings(NotifyOn::Always)
    };
    store.set_notify_default(Some(&replaced)).unwrap();
    assert_eq!(store.notify_default().unwrap(), Some(replaced));
    store.set_notify_default(None).unwrap();
    assert_eq!(store.notify_default().unwrap(), None);
    // Clearing twice is fine.
    store.set_notify_default(None).unwrap();
}

/// A slot that fails queues its failure notification once, with the finalization of
/// its last attempt (one pending row per channel), never on a retry; a loop without
/// settings queues nothing.
pub fn failure_is_queued_once_per_slot_after_the_last_attempt(db: &dyn TestDb) {
    let store = db.open();
    let mut new = with_attempts(new_loop("flaky", Some(t(0))), 3);
    new.notify = Some(settings(NotifyOn::Failure));
    let lp = store.create_loop(new, t(0)).unwrap();
    for _ in 0..2 {
        let (_, queued) = attempt(&*store, &lp, 0, RunStatus::Failed);
        assert!(queued.is_empty(), "not on a retry: {queued:?}");
    }
    let (last, queued) = attempt(&*store, &lp, 0, RunStatus::TimedOut);
    assert_eq!(last.attempt, 3);
    assert_eq!(queued.len(), 2, "{queued:?}");
    assert_eq!(
        queued
            .iter()
            .map(|d| (d.channel, d.target.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (NotifyChannel::Cmd, "notify-hook"),
            (NotifyChannel::Url, "https://hooks.example.com/x")
        ]
    );
    for d in &queued {
        assert_eq!(d.run_id, last.id);
        assert_eq!(d.loop_id, lp.id);
        assert_eq!(d.event, NotifyEvent::Failure);
        assert_eq!(d.status, DeliveryStatus::Pending);
        assert_eq!(d.attempts, 0);
        assert_eq!(d.last_error, None);
        assert_eq!(d.created_at, t(2));
        assert_eq!(d.claimed_by, None);
    }
    assert_eq!(
        store
            .deliveries_of_runs(std::slice::from_ref(&last.id))
            .unwrap(),
        queued
    );
    assert_eq!(store.pending_deliveries(10).unwrap(), queued);
    // A success under `failure` queues nothing.
    let (_, queued) = attempt(&*store, &lp, 60_000, RunStatus::Succeeded);
    assert!(queued.is_empty());
    // Nor does anything of a loop without settings.
    let quiet = store
        .create_loop(new_loop("quiet", Some(t(0))), t(0))
        .unwrap();
    assert!(attempt(&*store, &quiet, 0, RunStatus::Failed).1.is_empty());
}

/// `recovery` fires on the first success after a failed slot, not on later ones, not
/// after a slot that failed only on a retried attempt, and `always` fires on both.
pub fn recovery_is_queued_on_the_first_success_after_a_failed_slot(db: &dyn TestDb) {
    let store = db.open();
    let mut new = with_attempts(new_loop("healing", Some(t(0))), 2);
    new.notify = Some(Notify {
        url: None,
        ..settings(NotifyOn::Recovery)
    });
    let lp = store.create_loop(new, t(0)).unwrap();
    let events = |queued: &[Delivery]| queued.iter().map(|d| d.event).collect::<Vec<_>>();
    // The first success of a loop has nothing to recover from.
    assert!(attempt(&*store, &lp, 0, RunStatus::Succeeded).1.is_empty());
    // Slot 1 fails on both attempts: no failure notification under `recovery`.
    assert!(attempt(&*store, &lp, 60_000, RunStatus::Failed)
        .1
        .is_empty());
    assert!(attempt(&*store, &lp, 60_000, RunStatus::Abandoned)
        .1
        .is_empty());
    let (ok, queued) = attempt(&*store, &lp, 120_000, RunStatus::Succeeded);
    assert_eq!(events(&queued), vec![NotifyEvent::Recovery]);
    assert_eq!(queued[0].run_id, ok.id);
    assert!(attempt(&*store, &lp, 180_000, RunStatus::Succeeded)
        .1
        .is_empty());
    // A slot that failed once and then succeeded never failed as a slot.
    assert!(attempt(&*store, &lp, 240_000, RunStatus::Failed)
        .1
        .is_empty());
    assert!(attempt(&*store, &lp, 240_000, RunStatus::Succeeded)
        .1
        .is_empty());
    assert!(attempt(&*store, &lp, 300_000, RunStatus::Succeeded)
        .1
        .is_empty());

    let mut both = new_loop("both", Some(t(0)));
    both.notify = Some(Notify {
        cmd: None,
        ..settings(NotifyOn::Changes)
    });
    let both = store.create_loop(both, t(0)).unwrap();
    let (_, queued) = attempt(&*store, &both, 0, RunStatus::Failed);
    assert_eq!(events(&queued), vec![NotifyEvent::Failure]);
    let (_, queued) = attempt(&*store, &both, 60_000, RunStatus::Succeeded);
    assert_eq!(events(&queued), vec![NotifyEvent::Recovery]);
    let (_, queued) = attempt(&*store, &both, 120_000, RunStatus::Succeeded);
    assert!(queued.is_empty(), "changes: a second success is no change");

    // `always`: every finished slot, a success after a failure being a recovery.
    let mut every = new_loop("every", Some(t(0)));
    every.notify = Some(Notify {
        cmd: None,
        ..settings(NotifyOn::Always)
    });
    let every = store.create_loop(every, t(0)).unwrap();
    let mut seen = Vec::new();
    for (slot, status) in [
        (0, RunStatus::Succeeded),
        (60_000, RunStatus::Failed),
        (120_000, RunStatus::Succeeded),
        (180_000, RunStatus::Succeeded),
    ] {
        seen.extend(events(&attempt(&*store, &every, slot, status).1));
    }
    assert_eq!(
        seen,
        vec![
            NotifyEvent::Success,
            NotifyEvent::Failure,
            NotifyEvent::Recovery,
            NotifyEvent::Success
        ]
    );
}

/// Loops without settings of their own use the store-wide default; a loop's own
/// settings replace it.
pub fn the_default_applies_to_loops_without_settings_of_their_own(db: &dyn TestDb) {
    let store = db.open();
    let plain = store
        .create_loop(new_loop("plain", Some(t(0))), t(0))
        .unwrap();
    let mut own = new_loop("own", Some(t(0)));
    own.notify = Some(Notify {
        cmd: Some("own-hook".into()),
        url: None,
        on: NotifyOn::Recovery,
    });
    let own = store.create_loop(own, t(0)).unwrap();
    store
        .set_notify_default(Some(&Notify {
            cmd: Some("default-hook".into()),
            url: None,
            on: NotifyOn::Failure,
        }))
        .unwrap();
    let (_, queued) = attempt(&*store, &plain, 0, RunStatus::Failed);
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].target, "default-hook");
    // `own` fires on recovery only, and to its own hook.
    assert!(attempt(&*store, &own, 0, RunStatus::Failed).1.is_empty());
    let (_, queued) = attempt(&*store, &own, 60_000, RunStatus::Succeeded);
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].target, "own-hook");
}

/// A pending delivery is claimed by one runner at a time (a take-over names the old
/// claimer), its tries are recorded only by its claimer, a final status drops it from
/// the pending list, and deliveries go with their run.
pub fn deliveries_are_claimed_by_one_runner_and_recorded(db: &dyn TestDb) {
    let store = db.open();
    let mut new = new_loop("watched", Some(t(0)));
    new.notify = Some(settings(NotifyOn::Failure));
    let lp = store.create_loop(new, t(0)).unwrap();
    let (run, queued) = attempt(&*store, &lp, 0, RunStatus::Failed);
    let (cmd, url) = (&queued[0], &queued[1]);

    let other = db.open();
    let won = store
        .claim_delivery(&url.id, None, "runner-a", t(60_000), t(10))
        .unwrap()
        .unwrap();
    assert_eq!(won.claimed_by.as_deref(), Some("runner-a"));
    assert_eq!(won.claim_expires_at, Some(t(60_000)));
    assert_eq!(
        other
            .claim_delivery(&url.id, None, "runner-b", t(60_000), t(11))
            .unwrap(),
        None,
        "already claimed"
    );
    // Only the claimer records tries.
    assert_eq!(
        other
            .record_delivery(
                &try_of(&url.id, "runner-b", DeliveryStatus::Failed, 1, None),
                t(12)
            )
            .unwrap(),
        None
    );
    let tried = store
        .record_delivery(
            &try_of(
                &url.id,
                "runner-a",
                DeliveryStatus::Pending,
                1,
                Some("HTTP 500"),
            ),
            t(13),
        )
        .unwrap()
        .unwrap();
    assert_eq!(tried.attempts, 1);
    assert_eq!(tried.last_error.as_deref(), Some("HTTP 500"));
    assert_eq!(tried.status, DeliveryStatus::Pending);
    assert_eq!(tried.claimed_by.as_deref(), Some("runner-a"));
    // runner-a died: runner-b takes its claim over, naming it.
    let taken = other
        .claim_delivery(&url.id, Some("runner-a"), "runner-b", t(90_000), t(14))
        .unwrap()
        .unwrap();
    assert_eq!(taken.claimed_by.as_deref(), Some("runner-b"));
    assert_eq!(taken.attempts, 1, "tries so far are kept");
    let done = other
        .record_delivery(
            &try_of(&url.id, "runner-b", DeliveryStatus::Delivered, 2, None),
            t(15),
        )
        .unwrap()
        .unwrap();
    assert_eq!(done.status, DeliveryStatus::Delivered);
    assert_eq!(done.last_error, None);
    assert_eq!(done.claimed_by, None);
    assert_eq!(done.updated_at, t(15));
    // A delivered row can no longer be claimed or recorded.
    assert_eq!(
        store
            .claim_delivery(&url.id, None, "runner-a", t(60_000), t(16))
            .unwrap(),
        None
    );
    let pending: Vec<String> = store
        .pending_deliveries(10)
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(pending, vec![cmd.id.clone()]);
    let failed = store
        .claim_delivery(&cmd.id, None, "runner-a", t(60_000), t(17))
        .and_then(|_| {
            store.record_delivery(
                &try_of(
                    &cmd.id,
                    "runner-a",
                    DeliveryStatus::Failed,
                    1,
                    Some("exited with status 1"),
                ),
                t(18),
            )
        })
        .unwrap()
        .unwrap();
    assert_eq!(failed.status, DeliveryStatus::Failed);
    assert!(store.pending_deliveries(10).unwrap().is_empty());
    let of_run = store
        .deliveries_of_runs(std::slice::from_ref(&run.id))
        .unwrap();
    assert_eq!(
        of_run.iter().map(|d| d.status).collect::<Vec<_>>(),
        vec![DeliveryStatus::Failed, DeliveryStatus::Delivered]
    );
    assert!(store
        .deliveries_of_runs(&[RunId::new("ffffffffffff")])
        .unwrap()
        .is_empty());
    // Removing the loop removes its runs and their deliveries.
    store.remove_loop(&lp.id).unwrap();
    assert!(store.deliveries_of_runs(&[run.id]).unwrap().is_empty());
}

/// Runs resolve by id prefix, and are listed from a creation instant on, oldest first
/// (all loops or one), bounded.
pub fn runs_by_id_prefix_and_created_since(db: &dyn TestDb) {
    let store = db.open();
    let a = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let b = store.create_loop(new_loop("b", Some(t(0))), t(0)).unwrap();
    let r1 = claim(&*store, &claim_req(&a, t(0), t(100))).unwrap();
    let r2 = claim(&*store, &claim_req(&b, t(0), t(200))).unwrap();
    let mut adhoc = claim_req(&a, t(300), t(300));
    adhoc.source = RunSource::AdHoc;
    let r3 = claim(&*store, &adhoc).unwrap();
    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.runs_created_since(t(0), None, 10).unwrap()),
        vec![r1.id.clone(), r2.id.clone(), r3.id.clone()]
    );
    assert_eq!(
        ids(store.runs_created_since(t(150), None, 10).unwrap()),
        vec![r2.id.clone(), r3.id.clone()]
    );
    assert_eq!(
        ids(store.runs_created_since(t(0), None, 1).unwrap()),
        vec![r1.id.clone()]
    );
    assert_eq!(
        ids(store.runs_created_since(t(0), Some(&a.id), 10).unwrap()),
        vec![r1.id.clone(), r3.id.clone()]
    );
    assert!(store
        .runs_created_since(t(301), None, 10)
        .unwrap()
        .is_empty());

    let whole = store.runs_with_id_prefix(r2.id.as_str(), 5).unwrap();
    assert_eq!(ids(whole), vec![r2.id.clone()]);
    let all = store.runs_with_id_prefix("", 5).unwrap();
    assert_eq!(all.len(), 3);
    assert!(all.windows(2).all(|w| w[0].id.as_str() < w[1].id.as_str()));
    assert_eq!(store.runs_with_id_prefix("", 2).unwrap().len(), 2);
    assert!(store.runs_with_id_prefix("zz", 5).unwrap().is_empty());
}

/// A try of delivery `id` by `runner_id`, as a runner records it.
fn try_of(
    id: &str,
    runner_id: &str,
    status: DeliveryStatus,
    attempts: u32,
    last_error: Option<&str>,
) -> crate::DeliveryTry {
    crate::DeliveryTry {
        id: id.to_owned(),
        runner_id: runner_id.to_owned(),
        status,
        attempts,
        last_error: last_error.map(str::to_owned),
    }
}
