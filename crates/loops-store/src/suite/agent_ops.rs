//! Agent operations (issue #20): what a run's failure was and when its provider said to
//! come back, as the runs and the health facts keep them.

use super::{claim, claim_req, finish, new_loop, outcome, t, TestDb};
use crate::{LoopAdvance, RunWrite, RunWritten};
use loops_core::failure::FailureClass;
use loops_core::health::FactsQuery;
use loops_core::{LoopStatus, Notify, NotifyEvent, NotifyOn, RetryBackoff, RunStatus};

/// A finalized run keeps its failure class and its provider's retry instant, in the
/// row and in the health facts of its loop; a success has neither.
pub fn failure_classes_round_trip_into_runs_and_health_facts(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(new_loop("agent", Some(t(0))), t(0))
        .unwrap();
    let first = claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    let mut out = outcome(RunStatus::Failed, t(2));
    out.failure_class = Some(FailureClass::UsageLimit);
    out.retry_at = Some(t(3_600_000));
    let done = finish(&*store, &first.id, out).unwrap();
    assert_eq!(done.failure_class, Some(FailureClass::UsageLimit));
    assert_eq!(done.retry_at, Some(t(3_600_000)));
    assert_eq!(store.get_run(&first.id).unwrap().unwrap(), done);

    let facts = store
        .run_facts(
            &[FactsQuery {
                loop_id: lp.id.clone(),
                window: (t(0), t(10)),
                slot_window: (t(0), t(10)),
                grid: None,
            }],
            5,
        )
        .unwrap();
    let newest = facts[0].newest.as_ref().unwrap();
    assert_eq!(newest.failure_class, Some(FailureClass::UsageLimit));
    assert_eq!(
        facts[0].recent[0].failure_class,
        Some(FailureClass::UsageLimit)
    );

    let second = claim(&*store, &claim_req(&lp, t(60_000), t(60_001))).unwrap();
    let ok = finish(
        &*store,
        &second.id,
        outcome(RunStatus::Succeeded, t(60_002)),
    )
    .unwrap();
    assert_eq!((ok.failure_class, ok.retry_at), (None, None));
    let listed = store.running_runs(None).unwrap();
    assert!(listed.is_empty());
}

/// A loop's agent-operations settings round-trip; finishing failed slots counts the
/// failure streak in the loop's row, and the circuit breaker parks the loop in the
/// finalization's transaction with its reason and one `parked` notification; making
/// the loop active again starts a fresh streak, an edit keeps it.
pub fn the_circuit_breaker_state_lives_in_the_loops_row(db: &dyn TestDb) {
    let store = db.open();
    let mut new = new_loop("breaker", Some(t(0)));
    new.policy.ops.retry_backoff = RetryBackoff::Exponential;
    new.policy.ops.retry_delay_max_ms = 120_000;
    new.policy.ops.max_failures = Some(2);
    new.notify = Some(Notify {
        cmd: Some("true".to_owned()),
        url: None,
        on: NotifyOn::Failure,
    });
    let lp = store.create_loop(new, t(0)).unwrap();
    assert_eq!(lp.ops.retry_backoff, RetryBackoff::Exponential);
    assert_eq!(lp.ops.retry_delay_max_ms, 120_000);
    assert_eq!(lp.ops.max_failures, Some(2));
    assert!(lp.state.is_fresh());
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap(), lp);

    let fail = |slot: i64| {
        let run = claim(&*store, &claim_req(&lp, t(slot), t(slot + 1))).unwrap();
        let write = RunWrite::Finished {
            run: run.id.clone(),
            outcome: outcome(RunStatus::Failed, t(slot + 2)),
        };
        match store
            .record_run_writes(&[write], t(slot + 2), None)
            .unwrap()
            .remove(0)
        {
            Ok(RunWritten::Finished { notifications, .. }) => notifications,
            other => panic!("{other:?}"),
        }
    };
    let sent = fail(0);
    assert_eq!(sent.len(), 1);
    let after = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(
        (after.status, after.state.failure_streak),
        (LoopStatus::Active, 1)
    );
    let sent = fail(60_000);
    let events: Vec<NotifyEvent> = sent.iter().map(|d| d.event).collect();
    assert_eq!(events, [NotifyEvent::Failure, NotifyEvent::Parked]);
    let parked = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(parked.status, LoopStatus::Paused);
    assert_eq!(parked.state.failure_streak, 2);
    assert!(parked
        .state
        .status_reason
        .as_deref()
        .is_some_and(|r| r.starts_with("circuit breaker: 2 consecutive failed slots")));

    // Pausing or stopping keeps the state; making it active again starts over.
    let paused = LoopAdvance {
        status: LoopStatus::Stopped,
        next_run_at: parked.next_run_at,
        retry_scheduled_for: None,
    };
    let stopped = store
        .update_loop_schedule(&lp.id, &paused, t(70_000), None)
        .unwrap();
    assert_eq!(stopped.state, parked.state);
    let active = LoopAdvance {
        status: LoopStatus::Active,
        ..paused
    };
    let resumed = store
        .update_loop_schedule(&lp.id, &active, t(80_000), None)
        .unwrap();
    assert!(resumed.state.is_fresh(), "{:?}", resumed.state);
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap().ops, lp.ops);
}

/// `--session continue` (#20 item 9): a finalized run keeps the session id its agent
/// reported and our note on what became of the resume; the lookup of a loop's last
/// session finds the newest run of that loop that reported one and finished
/// succeeded, failed or timed out — an abandoned run, a run without a session and
/// another loop's runs are passed over.
pub fn session_ids_round_trip_and_the_last_session_is_found(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(new_loop("agent", Some(t(0))), t(0))
        .unwrap();
    let other = store
        .create_loop(new_loop("other", Some(t(0))), t(0))
        .unwrap();
    assert_eq!(store.last_session_run(&lp.id).unwrap(), None);
    let finish_with = |lp: &loops_core::Loop, slot: i64, status, session: Option<&str>| {
        let run = claim(&*store, &claim_req(lp, t(slot), t(slot + 1))).unwrap();
        let mut out = outcome(status, t(slot + 2));
        out.session_id = session.map(str::to_owned);
        out.session_note = session.map(|s| format!("resumed session {s}"));
        finish(&*store, &run.id, out).unwrap()
    };

    let first = finish_with(&lp, 0, RunStatus::Succeeded, Some("sess-1"));
    assert_eq!(first.session_id.as_deref(), Some("sess-1"));
    assert_eq!(
        first.session_note.as_deref(),
        Some("resumed session sess-1")
    );
    assert_eq!(store.get_run(&first.id).unwrap().unwrap(), first);
    assert_eq!(store.last_session_run(&lp.id).unwrap(), Some(first.clone()));

    // Passed over: abandoned, no session, another loop's.
    finish_with(&lp, 60_000, RunStatus::Abandoned, Some("sess-torn"));
    finish_with(&lp, 120_000, RunStatus::Succeeded, None);
    finish_with(&other, 180_000, RunStatus::Succeeded, Some("sess-other"));
    let last = store.last_session_run(&lp.id).unwrap().unwrap();
    assert_eq!(last.id, first.id);

    // A failed run that reported a session is the newest to resume.
    let failed = finish_with(&lp, 240_000, RunStatus::Failed, Some("sess-4"));
    let last = store.last_session_run(&lp.id).unwrap().unwrap();
    assert_eq!(
        (last.id, last.session_id.as_deref()),
        (failed.id, Some("sess-4"))
    );
    let timed_out = finish_with(&lp, 300_000, RunStatus::TimedOut, Some("sess-5"));
    assert_eq!(
        store.last_session_run(&lp.id).unwrap().map(|r| r.id),
        Some(timed_out.id)
    );
    assert_eq!(
        store
            .last_session_run(&other.id)
            .unwrap()
            .and_then(|r| r.session_id),
        Some("sess-other".to_owned())
    );
}
