//! Agent operations (issue #20): what a run's failure was and when its provider said to
//! come back, as the runs and the health facts keep them.

use super::{claim, claim_req, finish, new_loop, outcome, t, TestDb};
use crate::{ClaimOutcome, ClaimRefused, LoopAdvance, RunWrite, RunWritten};
use loops_core::caps::{CapKey, Caps};
use loops_core::failure::FailureClass;
use loops_core::health::FactsQuery;
use loops_core::stop::StopMet;
use loops_core::{LoopStatus, Notify, NotifyEvent, NotifyOn, RetryBackoff, RunOutcome, RunStatus};
use std::sync::Barrier;

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

/// An agent loop (claude) on `account` (`None`: no account), due at `t(0)`, with a
/// hook of its own.
pub(super) fn agent_loop(name: &str, account: Option<&str>, hook: &str) -> loops_core::NewLoop {
    let mut new = new_loop(name, Some(t(0)));
    let mut target = serde_json::json!({"type": "agent", "provider": "claude", "prompt": "hi"});
    if let Some(profile) = account {
        target["account"] = serde_json::json!({ "profile": profile });
    }
    new.target = serde_json::from_value(target).unwrap();
    new.notify = Some(Notify {
        cmd: Some(hook.to_owned()),
        url: None,
        on: NotifyOn::Failure,
    });
    new
}

/// Finalizes `run` alone: the row and the notifications queued with it.
pub(super) fn finish_noting(
    store: &dyn crate::Store,
    run: &loops_core::RunId,
    outcome: loops_core::RunOutcome,
) -> (loops_core::Run, Vec<NotifyEvent>) {
    let at = outcome.finished_at;
    let write = RunWrite::Finished {
        run: run.clone(),
        outcome,
    };
    match store
        .record_run_writes(&[write], at, None)
        .unwrap()
        .remove(0)
    {
        Ok(RunWritten::Finished {
            run, notifications, ..
        }) => (*run, notifications.iter().map(|d| d.event).collect()),
        other => panic!("{other:?}"),
    }
}

pub(super) fn due_names(store: &dyn crate::Store, now: loops_core::Instant) -> Vec<String> {
    let mut names: Vec<String> = store
        .due_loops(now, 100)
        .unwrap()
        .into_iter()
        .map(|l| l.unwrap().name)
        .collect();
    names.sort();
    names
}

/// A usage-limit run holds every loop of its provider and account, in the store: the
/// finalization on one store writes the hold (one `held` notification for the account,
/// channels deduplicated, no failure notification) and the other store's due-loop
/// query leaves the account's loops out until the hold's end, where its next due
/// instant waits; the slot is retried without counting the attempt, the failure streak
/// untouched; a success on the account releases it with one `resumed`.
pub fn a_usage_limit_holds_every_loop_of_its_account_across_stores(db: &dyn TestDb) {
    let (one, other) = (db.open(), db.open());
    let mut a = agent_loop("a", Some("work"), "hook-work");
    a.policy.ops.max_failures = Some(1);
    let a = one.create_loop(a, t(0)).unwrap();
    let b = one
        .create_loop(agent_loop("b", Some("work"), "hook-work"), t(0))
        .unwrap();
    one.create_loop(agent_loop("c", Some("home"), "hook-home"), t(0))
        .unwrap();
    one.create_loop(new_loop("d", Some(t(0))), t(0)).unwrap();
    assert_eq!(due_names(&*other, t(1)), ["a", "b", "c", "d"]);
    assert!(other.account_holds().unwrap().is_empty());

    let run = claim(&*one, &claim_req(&a, t(0), t(1))).unwrap();
    let mut out = outcome(RunStatus::Failed, t(2));
    out.failure_class = Some(FailureClass::UsageLimit);
    out.retry_at = Some(t(600_000));
    out.error = Some("Claude usage limit reached. Your limit will reset at 9am.".to_owned());
    let (_, sent) = finish_noting(&*one, &run.id, out.clone());
    assert_eq!(sent, [NotifyEvent::Held], "one per account, no failure");

    let holds = other.account_holds().unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    let hold = &holds[0];
    assert_eq!(
        (hold.provider, hold.account.as_str()),
        (loops_core::Provider::Claude, "work")
    );
    assert_eq!(hold.held_until, t(660_000), "the reset plus a minute");
    assert_eq!(hold.since, t(2));
    assert!(hold.notified);
    assert_eq!(
        hold.reason,
        format!(
            "usage limit reached, resets at {} (run {} of loop a)",
            loops_core::format_instant(&t(600_000)),
            run.id
        )
    );
    // The other store: the account's loops are not due, the others are.
    assert_eq!(due_names(&*other, t(3)), ["c", "d"]);
    let held = other.get_loop(&a.id).unwrap().unwrap();
    assert_eq!(held.status, LoopStatus::Active);
    assert_eq!(held.retry_scheduled_for, Some(t(0)), "the same slot again");
    assert_eq!(held.state.failure_streak, 0);
    assert_eq!(held.state.held_attempts, 1);
    // With nothing else due, a runner wakes when the hold ends.
    for name in ["c", "d"] {
        let lp = other.get_loop_by_name(name).unwrap().unwrap();
        let later = LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: Some(t(10_000_000)),
            retry_scheduled_for: None,
        };
        other
            .update_loop_schedule(&lp.id, &later, t(3), None)
            .unwrap();
    }
    assert_eq!(other.next_due_at().unwrap(), Some(t(660_000)));
    assert_eq!(other.next_due_at_on(&[]).unwrap(), Some(t(660_000)));

    // Another loop meeting the limit meanwhile (run now): held again, not notified.
    let mut now_req = claim_req(&b, t(5), t(5));
    now_req.source = loops_core::RunSource::AdHoc;
    let adhoc = claim(&*other, &now_req).unwrap();
    let mut again = out.clone();
    again.finished_at = t(6);
    let (_, sent) = finish_noting(&*other, &adhoc.id, again);
    assert!(sent.is_empty(), "{sent:?}");

    // At the hold's end both are due; the one-attempt slot runs again (attempt 2).
    assert_eq!(due_names(&*other, t(660_001)), ["a", "b"]);
    let retry = claim(&*other, &claim_req(&a, t(0), t(660_001))).unwrap();
    assert_eq!(retry.attempt, 2);
    let (_, sent) = finish_noting(
        &*other,
        &retry.id,
        outcome(RunStatus::Succeeded, t(660_002)),
    );
    assert_eq!(sent, [NotifyEvent::Resumed]);
    assert!(one.account_holds().unwrap().is_empty());
    let after = one.get_loop(&a.id).unwrap().unwrap();
    assert_eq!(
        (after.state.held_slot, after.state.held_attempts),
        (None, 0)
    );
    assert_eq!(after.status, LoopStatus::Active);

    // Without a reset instant: a 5-minute probe; cleared by hand, due again.
    let probe = claim(&*one, &claim_req(&b, t(0), t(700_000))).unwrap();
    let mut silent = outcome(RunStatus::Failed, t(700_001));
    silent.failure_class = Some(FailureClass::UsageLimit);
    let (_, sent) = finish_noting(&*one, &probe.id, silent);
    assert_eq!(sent, [NotifyEvent::Held]);
    let hold = one.account_holds().unwrap().remove(0);
    assert_eq!((hold.held_until, hold.probes), (t(1_000_001), 1));
    assert_eq!(due_names(&*other, t(700_002)), Vec::<String>::new());
    let cleared = other
        .clear_account_holds(loops_core::Provider::Claude, None)
        .unwrap();
    assert_eq!(cleared.len(), 1);
    assert!(other
        .clear_account_holds(loops_core::Provider::Claude, Some("work"))
        .unwrap()
        .is_empty());
    assert!(due_names(&*other, t(700_002)).contains(&"b".to_owned()));
}

/// A workflow agent step that met its account's usage limit holds the key in the store
/// (so every runner's agent loops on it wait) as a loop's run does, without a
/// notification; the key's probes double; a step that did not meet the limit releases
/// a past hold that sent no `held`, never an active one nor one a person was told of.
pub fn a_workflow_step_at_its_usage_limit_holds_its_key_across_stores(db: &dyn TestDb) {
    use loops_core::hold::{HoldKey, StepLimit};
    let (one, other) = (db.open(), db.open());
    one.create_loop(agent_loop("a", Some("work"), "hook-work"), t(0))
        .unwrap();
    one.create_loop(agent_loop("c", Some("home"), "hook-home"), t(0))
        .unwrap();
    let key = HoldKey {
        provider: loops_core::Provider::Claude,
        account: "work".to_owned(),
    };
    let limit = StepLimit::new(Some(t(600_000)), "fix", "wr1");
    let hold = one
        .hold_after_step(&key, Some(&limit), t(2), None)
        .unwrap()
        .expect("held");
    assert_eq!(hold.held_until, t(660_000), "the reset plus a minute");
    assert!(!hold.notified, "a step sends no held");
    assert_eq!(other.account_holds().unwrap(), std::slice::from_ref(&hold));
    assert_eq!(due_names(&*other, t(3)), ["c"]);
    // An active hold outlives a step that started before it and succeeded.
    assert_eq!(
        other.hold_after_step(&key, None, t(4), None).unwrap(),
        Some(hold.clone())
    );
    // Without an instant: the probe doubles on the key's count.
    let silent = StepLimit::new(None, "fix", "wr1");
    let first = one
        .hold_after_step(&key, Some(&silent), t(5), None)
        .unwrap()
        .expect("held");
    let second = other
        .hold_after_step(&key, Some(&silent), t(6), None)
        .unwrap()
        .expect("held");
    assert_eq!((first.probes, second.probes), (1, 2));
    assert_eq!(second.held_until, t(6 + 10 * 60_000));
    // Past its instant and never notified: the next step that did not meet it
    // releases it, and the account's loops are due.
    let past = t(6 + 10 * 60_000 + 1);
    assert_eq!(one.hold_after_step(&key, None, past, None).unwrap(), None);
    assert!(other.account_holds().unwrap().is_empty());
    assert_eq!(due_names(&*other, past), ["a", "c"]);
}

/// Stop conditions (issue #20 item 8): their settings round-trip; a loop with one
/// counts its ended slots in its row; the finalization of the run its runner found the
/// condition met by ends the loop (`done`, the reason, one `done` notification) in its
/// transaction, and another run of the same batch finishing after it neither counts nor
/// notifies again; making the loop active again starts a fresh count.
pub fn a_stop_condition_ends_the_loop_in_the_finalizations_transaction(db: &dyn TestDb) {
    let store = db.open();
    let mut new = new_loop("until", Some(t(0)));
    new.policy.ops.until_cmd = Some("test -e marker".to_owned());
    new.policy.ops.until_output = Some("PASS".to_owned());
    new.policy.ops.max_runs = Some(5);
    new.notify = Some(Notify {
        cmd: Some("true".to_owned()),
        url: None,
        on: NotifyOn::Failure,
    });
    let lp = store.create_loop(new, t(0)).unwrap();
    assert_eq!(lp.ops.until_cmd.as_deref(), Some("test -e marker"));
    assert_eq!(lp.ops.until_output.as_deref(), Some("PASS"));
    assert_eq!(lp.ops.max_runs, Some(5));
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap(), lp);

    let record = |writes: Vec<(loops_core::RunId, RunOutcome)>, at| -> Vec<NotifyEvent> {
        let writes: Vec<RunWrite> = writes
            .into_iter()
            .map(|(run, outcome)| RunWrite::Finished { run, outcome })
            .collect();
        let mut events = Vec::new();
        for written in store.record_run_writes(&writes, at, None).unwrap() {
            match written {
                Ok(RunWritten::Finished { notifications, .. }) => {
                    events.extend(notifications.iter().map(|d| d.event));
                }
                other => panic!("{other:?}"),
            }
        }
        events
    };
    let succeeded = |at, stop| RunOutcome {
        stop,
        ..outcome(RunStatus::Succeeded, at)
    };
    // A success that meets nothing: counted, still active.
    let first = claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    let events = record(vec![(first.id, succeeded(t(2), None))], t(2));
    assert!(events.is_empty(), "{events:?}");
    let after = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(
        (after.status, after.state.run_count),
        (LoopStatus::Active, 1)
    );

    // Two runs in flight; both are recorded in one batch, the first meeting the
    // condition.
    let a = claim(&*store, &claim_req(&lp, t(60_000), t(60_001))).unwrap();
    let b = claim(&*store, &claim_req(&lp, t(120_000), t(120_001))).unwrap();
    let events = record(
        vec![
            (
                a.id.clone(),
                succeeded(t(120_002), Some(StopMet::UntilOutput)),
            ),
            (b.id.clone(), succeeded(t(120_003), Some(StopMet::UntilCmd))),
        ],
        t(120_003),
    );
    assert_eq!(events, [NotifyEvent::Done]);
    let done = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(done.status, LoopStatus::Done);
    assert_eq!(done.state.run_count, 2);
    assert_eq!(
        done.state.status_reason,
        Some(format!("stdout matched /PASS/ in run 2 ({})", a.id))
    );
    // The run rows are the runs: nothing of the condition on them.
    assert_eq!(
        store.get_run(&b.id).unwrap().unwrap().status,
        RunStatus::Succeeded
    );
    let listed = store.list_loops(Some(LoopStatus::Done)).unwrap();
    assert_eq!(listed.len(), 1);

    // `resume`: active again, with a fresh count.
    let active = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: done.next_run_at,
        retry_scheduled_for: None,
    };
    let resumed = store
        .update_loop_schedule(&lp.id, &active, t(130_000), None)
        .unwrap();
    assert!(resumed.state.is_fresh(), "{:?}", resumed.state);
    assert_eq!(resumed.ops, lp.ops);
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

/// An agent loop on claude (`pool`: its account pool), due at `t(0)`.
pub(super) fn claude_loop(name: &str, pool: &[&str]) -> loops_core::NewLoop {
    let mut n = new_loop(name, Some(t(0)));
    n.target = serde_json::from_value(serde_json::json!({
        "type": "agent", "provider": "claude", "prompt": "hi", "accountPool": pool,
    }))
    .unwrap();
    n
}

/// A scheduling pass's claim of `lp`'s slot at `t(0)` under `caps`.
pub(super) fn capped(lp: &loops_core::Loop, runner: &str, caps: &Caps) -> crate::BatchClaim {
    let mut request = claim_req(lp, t(0), t(1));
    request.runner_id = runner.to_owned();
    crate::BatchClaim {
        request,
        advance: None,
        on_refusal: crate::OnRefusal::PassOver {
            skip_slots: vec![t(0)],
        },
        caps: caps.clone(),
    }
}

/// Concurrency caps (#20 item 6) count the store's running rows in the claim's
/// transaction: within one batch (two of three claude loops under `provider=claude:2`;
/// the third refused, its loop left due), and across stores claiming at once, as
/// several runners do (never more running than the cap). A pooled claim records the
/// least-loaded account of its pool on the run.
pub fn counted_claims_never_exceed_a_cap_across_stores(db: &dyn TestDb) {
    let store = db.open();
    let loops: Vec<_> = (0..8)
        .map(|i| {
            store
                .create_loop(claude_loop(&format!("capped-{i}"), &[]), t(0))
                .unwrap()
        })
        .collect();
    let two = Caps::parse("provider=claude:2").unwrap();
    let batch: Vec<_> = loops[..3]
        .iter()
        .map(|lp| capped(lp, "runner-a", &two))
        .collect();
    let outcomes = store.claim_runs(&batch, None).unwrap();
    let claimed: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            ClaimOutcome::Claimed(run) => Some(run.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(claimed.len(), 2, "{outcomes:?}");
    assert_eq!(
        outcomes[2],
        ClaimOutcome::Refused(ClaimRefused::AtCap(
            "waiting for a free claude slot (cap 2)".to_owned()
        ))
    );
    let waiting = store.get_loop(&loops[2].id).unwrap().unwrap();
    assert_eq!(waiting.next_run_at, Some(t(0)), "still due");
    assert!(store.running_runs(Some(&loops[2].id)).unwrap().is_empty());
    let claude = CapKey::Provider(loops_core::Provider::Claude);
    assert_eq!(store.running_keys().unwrap().count(&claude), 2);
    for run in &claimed {
        finish(&*store, &run.id, outcome(RunStatus::Succeeded, t(2))).unwrap();
    }
    assert_eq!(store.running_keys().unwrap().count(&claude), 0);

    // Stores of their own claiming at once, one loop each: exactly the cap wins.
    let three = Caps::parse("provider=claude:3").unwrap();
    let barrier = Barrier::new(loops.len() - 2);
    let wins: usize = std::thread::scope(|s| {
        let handles: Vec<_> = loops[2..]
            .iter()
            .enumerate()
            .map(|(i, lp)| {
                let (barrier, three) = (&barrier, &three);
                s.spawn(move || {
                    let store = db.open();
                    let claim = capped(lp, &format!("runner-{i}"), three);
                    barrier.wait();
                    let out = store.claim_runs(&[claim], None).unwrap();
                    usize::from(matches!(out[0], ClaimOutcome::Claimed(_)))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(wins, 3, "never over the cap, and the cap filled");
    assert_eq!(store.running_keys().unwrap().count(&claude), 3);

    // A pool takes its least-loaded account (ties in pool order), recorded on the run.
    let a = store
        .create_loop(claude_loop("pool-a", &["work", "home"]), t(0))
        .unwrap();
    let b = store
        .create_loop(claude_loop("pool-b", &["work", "home"]), t(0))
        .unwrap();
    let first = claim(&*store, &claim_req(&a, t(0), t(1))).unwrap();
    let second = claim(&*store, &claim_req(&b, t(0), t(1))).unwrap();
    assert_eq!(first.account.as_deref(), Some("work"));
    assert_eq!(second.account.as_deref(), Some("home"));
    assert_eq!(
        store
            .get_run(&second.id)
            .unwrap()
            .unwrap()
            .account
            .as_deref(),
        Some("home")
    );
    let in_flight = store.running_keys().unwrap();
    assert_eq!(in_flight.count(&CapKey::Account("work".into())), 1);
    assert_eq!(in_flight.count(&claude), 5);
}

/// Item 10: an agent target's provider options live in its JSON, so they come back as
/// written from every read (get, the list, an export) and from a definition update.
pub fn provider_options_round_trip_in_the_agent_target(db: &dyn TestDb) {
    let store = db.open();
    let mut new = new_loop("review", Some(t(0)));
    new.target = serde_json::from_value(serde_json::json!({
        "type": "agent", "provider": "claude", "prompt": "hi",
        "permissionMode": "plan", "effort": "high", "addDirs": ["/srv/lib", "/data"],
        "maxTurns": 20, "allowTools": ["Bash(git:*)"], "denyTools": ["WebFetch"]
    }))
    .unwrap();
    let target = new.target.clone();
    let lp = store.create_loop(new, t(0)).unwrap();
    assert_eq!(lp.target, target);
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap().target, target);
    let listed = store.list_loops(None).unwrap();
    assert_eq!(listed[0].target, target);

    let mut update = super::definitions::unchanged(&lp);
    let loops_core::Target::Agent(a) = &mut update.definition.target else {
        panic!("an agent target");
    };
    a.permission_mode = Some("acceptEdits".into());
    a.add_dirs.clear();
    a.max_turns = None;
    let edited_target = update.definition.target.clone();
    let edited = store
        .update_loop_definition(&lp.id, &update, &crate::LoopVersion::of(&lp), t(1_000))
        .unwrap()
        .expect("the update applies");
    assert_eq!(edited.target, edited_target);
    assert_eq!(
        store.get_loop(&lp.id).unwrap().unwrap().target,
        edited_target
    );
}
