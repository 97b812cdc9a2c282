//! Agent operations (issue #20): what a run's failure was and when its provider said to
//! come back, as the runs and the health facts keep them.

use super::{claim, claim_req, finish, new_loop, outcome, t, TestDb};
use crate::{ClaimOutcome, ClaimRefused, LoopAdvance, RunWrite, RunWritten};
use loops_core::budget;
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
fn agent_loop(name: &str, account: Option<&str>, hook: &str) -> loops_core::NewLoop {
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
fn finish_noting(
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

fn due_names(store: &dyn crate::Store, now: loops_core::Instant) -> Vec<String> {
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

/// Budgets (issue #20 item 7): a loop's own token budget and a store-wide budget of its
/// provider, checked in the finalization: once a window's spend reaches the limit the
/// loop (the key's loops) is held until the UTC day ends — the other store's due query
/// leaves it out and its next due instant waits — with one `held` notification; a
/// raised store-wide budget releases its hold at once and the next run it covers sends
/// the one `resumed`; a lowered one holds at once, a cleared one is gone; the next
/// day's first run releases the loop's hold with one `resumed`.
pub fn budgets_hold_a_spent_loop_and_key_until_the_window_resets(db: &dyn TestDb) {
    use loops_core::budget::{Budget, BudgetMetric, BudgetScope, StoreBudget};
    let (one, other) = (db.open(), db.open());
    let tokens = |text: &str| Budget::parse(BudgetMetric::Tokens, text, "tokens").unwrap();
    // t(0) is 2023-11-14 22:13:20 UTC: the day ends at t(6_400_000).
    let midnight = t(6_400_000);
    let mut a = agent_loop("a", Some("work"), "hook-work");
    a.policy.ops.budget_tokens = Some(tokens("1000/day"));
    let a = one.create_loop(a, t(0)).unwrap();
    assert_eq!(a.ops.budget_tokens, Some(tokens("1000/day")));
    assert_eq!(one.get_loop(&a.id).unwrap().unwrap(), a);
    let b = one
        .create_loop(agent_loop("b", None, "hook-work"), t(0))
        .unwrap();
    let mut codex = agent_loop("c", None, "hook-work");
    codex.target = serde_json::from_value(
        serde_json::json!({"type": "agent", "provider": "codex", "prompt": "hi"}),
    )
    .unwrap();
    one.create_loop(codex, t(0)).unwrap();
    one.create_loop(new_loop("d", Some(t(0))), t(0)).unwrap();
    let used = |at, input: u64, output: u64| RunOutcome {
        usage: Some(loops_core::Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cost_usd: None,
        }),
        ..outcome(RunStatus::Succeeded, at)
    };

    // 600 of 1000: not spent.
    let first = claim(&*one, &claim_req(&a, t(0), t(1))).unwrap();
    let (_, sent) = finish_noting(&*one, &first.id, used(t(2), 400, 200));
    assert!(sent.is_empty(), "{sent:?}");
    assert!(other.budget_holds().unwrap().is_empty());
    // 1200 of 1000: held until midnight, one `held`.
    let second = claim(&*one, &claim_req(&a, t(60_000), t(60_001))).unwrap();
    let (_, sent) = finish_noting(&*one, &second.id, used(t(60_002), 400, 200));
    assert_eq!(sent, [NotifyEvent::Held]);
    let holds = other.budget_holds().unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(holds[0].scope, BudgetScope::Loop(a.id.clone()));
    assert_eq!(holds[0].held_until, midnight);
    assert!(holds[0].notified);
    assert_eq!(
        holds[0].reason,
        "budget spent: 1,200 of 1,000 tokens today (resets 2023-11-15 00:00 UTC)"
    );
    let spend = other
        .budget_spend(&BudgetScope::Loop(a.id.clone()), t(0))
        .unwrap();
    assert_eq!((spend.runs, spend.tokens, spend.unpriced), (2, 1_200, 2));
    assert_eq!(due_names(&*other, t(120_000)), ["b", "c", "d"]);
    let move_others = |to| {
        for name in ["b", "c", "d"] {
            let lp = other.get_loop_by_name(name).unwrap().unwrap();
            let later = LoopAdvance {
                status: LoopStatus::Active,
                next_run_at: Some(to),
                retry_scheduled_for: None,
            };
            other
                .update_loop_schedule(&lp.id, &later, t(3), None)
                .unwrap();
        }
    };
    // With nothing else due before, a runner wakes at midnight.
    move_others(t(100_000_000));
    assert_eq!(other.next_due_at().unwrap(), Some(midnight));
    assert_eq!(other.next_due_at_on(&[]).unwrap(), Some(midnight));
    move_others(t(5_000_000));

    // A store-wide budget of claude (every account): 1,600 of 1,500 once b ran.
    let claude = StoreBudget {
        provider: loops_core::Provider::Claude,
        account: None,
        tokens: Some(tokens("1500/day")),
        usd: None,
        updated_at: t(200_000),
    };
    one.set_budget(&claude).unwrap();
    assert_eq!(other.budgets().unwrap(), std::slice::from_ref(&claude));
    assert_eq!(other.budget_holds().unwrap().len(), 1, "1,200 < 1,500");
    let mut now_req = claim_req(&b, t(200_001), t(200_001));
    now_req.source = loops_core::RunSource::AdHoc;
    let run_b = claim(&*one, &now_req).unwrap();
    let (_, sent) = finish_noting(&*one, &run_b.id, used(t(200_002), 300, 100));
    assert_eq!(
        sent,
        [NotifyEvent::Held],
        "one per channel of the key's loops"
    );
    let key = BudgetScope::parse_key("provider=claude").unwrap();
    let key_hold = other
        .budget_holds()
        .unwrap()
        .into_iter()
        .find(|h| h.scope == key)
        .unwrap();
    assert_eq!(
        key_hold.reason,
        "claude budget spent: 1,600 of 1,500 tokens today (resets 2023-11-15 00:00 UTC)"
    );
    assert_eq!(
        other.budget_spend(&key, t(0)).unwrap().tokens,
        1_600,
        "a's and b's runs"
    );
    assert_eq!(due_names(&*other, t(5_000_001)), ["c", "d"]);
    // Raised: released at once. With no run to name, the notified hold ends rather
    // than goes: the next run it covers deletes it with the one `resumed`.
    one.set_budget(&StoreBudget {
        tokens: Some(tokens("2000/day")),
        updated_at: t(300_000),
        ..claude.clone()
    })
    .unwrap();
    let ended: Vec<_> = other
        .budget_holds()
        .unwrap()
        .into_iter()
        .filter(|h| h.scope == key)
        .collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert!(!ended[0].is_active(t(300_000)) && ended[0].notified);
    assert_eq!(
        due_names(&*other, t(5_000_001)),
        ["b", "c", "d"],
        "a still held"
    );
    let mut again = claim_req(&b, t(5_000_001), t(5_000_001));
    again.source = loops_core::RunSource::AdHoc;
    let run_b = claim(&*other, &again).unwrap();
    let (_, sent) = finish_noting(&*other, &run_b.id, used(t(5_000_002), 1, 1));
    assert_eq!(sent, [NotifyEvent::Resumed], "the raise's one `resumed`");
    assert!(other.budget_holds().unwrap().iter().all(|h| h.scope != key));
    // Lowered below the spend: held at once, with no run to name for a `held`; cleared
    // before any run: its unnotified hold goes with it, and nothing is sent.
    one.set_budget(&StoreBudget {
        tokens: Some(tokens("1000/day")),
        updated_at: t(5_000_003),
        ..claude.clone()
    })
    .unwrap();
    assert_eq!(due_names(&*other, t(5_000_004)), ["c", "d"]);
    assert!(other
        .clear_budget(loops_core::Provider::Claude, Some("work"), t(5_000_004))
        .unwrap()
        .is_none());
    let cleared = other
        .clear_budget(loops_core::Provider::Claude, None, t(5_000_004))
        .unwrap()
        .unwrap();
    assert!(other.budget_holds().unwrap().iter().all(|h| h.scope != key));
    assert_eq!(due_names(&*other, t(5_000_004)), ["b", "c", "d"]);
    assert_eq!(cleared.tokens, Some(tokens("1000/day")));
    assert!(one.budgets().unwrap().is_empty());

    // The next day: due again; its first run releases the hold with one `resumed`.
    assert!(
        due_names(&*other, midnight + chrono::TimeDelta::milliseconds(1)).contains(&"a".to_owned())
    );
    let next = claim(&*other, &claim_req(&a, midnight, midnight)).unwrap();
    let (_, sent) = finish_noting(
        &*other,
        &next.id,
        used(midnight + chrono::TimeDelta::seconds(5), 10, 10),
    );
    assert_eq!(sent, [NotifyEvent::Resumed]);
    assert!(one.budget_holds().unwrap().is_empty());
}

/// An agent loop on claude (`pool`: its account pool), due at `t(0)`.
fn claude_loop(name: &str, pool: &[&str]) -> loops_core::NewLoop {
    let mut n = new_loop(name, Some(t(0)));
    n.target = serde_json::from_value(serde_json::json!({
        "type": "agent", "provider": "claude", "prompt": "hi", "accountPool": pool,
    }))
    .unwrap();
    n
}

/// A scheduling pass's claim of `lp`'s slot at `t(0)` under `caps`.
fn capped(lp: &loops_core::Loop, runner: &str, caps: &Caps) -> crate::BatchClaim {
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

/// Budgets and account pools together (#20 items 6 and 7): a store-wide budget of one
/// account counts the runs a pool ran on that account (not the loop's target, which
/// names none), and once it is spent the pool passes over the account as it passes
/// over a usage limit's — the next run takes the other one.
pub fn a_pooled_run_spends_its_accounts_budget_and_the_pool_moves_on(db: &dyn TestDb) {
    use loops_core::budget::{Budget, BudgetMetric, BudgetScope, StoreBudget};
    let store = db.open();
    store
        .set_budget(&StoreBudget {
            provider: loops_core::Provider::Claude,
            account: Some("work".to_owned()),
            tokens: Some(Budget::parse(BudgetMetric::Tokens, "1000/day", "tokens").unwrap()),
            usd: None,
            updated_at: t(0),
        })
        .unwrap();
    let lp = store
        .create_loop(claude_loop("pooled", &["work", "home"]), t(0))
        .unwrap();
    let first = claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    assert_eq!(first.account.as_deref(), Some("work"));
    let spent = RunOutcome {
        usage: Some(loops_core::Usage {
            input_tokens: Some(900),
            output_tokens: Some(300),
            cost_usd: None,
        }),
        ..outcome(RunStatus::Succeeded, t(2))
    };
    finish_noting(&*store, &first.id, spent);
    let holds = store.budget_holds().unwrap();
    assert_eq!(holds.len(), 1, "work's budget is spent: {holds:?}");
    assert_eq!(
        holds[0].scope,
        BudgetScope::Key {
            provider: loops_core::Provider::Claude,
            account: Some("work".to_owned()),
        }
    );
    // Not the loop held: its pool has another account, which the next run takes.
    let lp = store.get_loop(&lp.id).unwrap().unwrap();
    let second = claim(&*store, &claim_req(&lp, t(10), t(11))).unwrap();
    assert_eq!(second.account.as_deref(), Some("home"));
}

/// A workflow's agent steps spend from their provider's store-wide budgets (#20 item
/// 7): a finished claude step with usage is counted in the key's spend beside the agent
/// loops' runs and, once the window is spent, holds the key's loops on the other store
/// too; a command step and another provider's step count for nothing. A removed loop
/// takes its own budget's hold row with it.
pub fn workflow_agent_steps_spend_their_providers_budget(db: &dyn TestDb) {
    use loops_core::budget::{BudgetMetric, BudgetScope, BudgetWindow, StoreBudget};
    use loops_core::workflow::parse_spec;
    let one = db.open();
    let other = db.open();
    let a = one
        .create_loop(agent_loop("a", None, "true"), t(0))
        .unwrap();
    one.set_budget(&StoreBudget {
        provider: loops_core::Provider::Claude,
        account: None,
        tokens: Some(budget::Budget {
            metric: BudgetMetric::Tokens,
            amount: 1_000,
            window: BudgetWindow::Day,
        }),
        usd: None,
        updated_at: t(0),
    })
    .unwrap();
    let spec = parse_spec(
        r#"{"name":"w","steps":[
            {"id":"c","target":{"type":"command","command":"true"}},
            {"id":"x","target":{"type":"agent","provider":"codex","prompt":"hi"}},
            {"id":"s","target":{"type":"agent","provider":"claude","prompt":"hi"}}]}"#,
    )
    .unwrap();
    let wf = one.create_workflow(&spec, false, t(0)).unwrap();
    let (run, _) = one
        .create_workflow_run(&wf, None, &Default::default(), t(1), None)
        .unwrap();
    let steps = one.step_runs(run.id.as_str()).unwrap();
    let providers: Vec<_> = steps.iter().map(|s| s.provider).collect();
    assert_eq!(
        providers,
        [
            None,
            Some(loops_core::Provider::Codex),
            Some(loops_core::Provider::Claude)
        ]
    );
    let key = BudgetScope::parse_key("provider=claude").unwrap();
    for (i, mut step) in steps.into_iter().enumerate() {
        step.status = loops_core::StepStatus::Succeeded;
        step.started_at = Some(t(2));
        step.finished_at = Some(t(10 + i as i64));
        step.usage = Some(loops_core::Usage {
            input_tokens: Some(700),
            output_tokens: Some(400),
            cost_usd: None,
        });
        one.save_step_run(&step, &[], t(10 + i as i64), None)
            .unwrap();
    }
    let spend = other.budget_spend(&key, t(0)).unwrap();
    assert_eq!(
        (spend.runs, spend.tokens),
        (1, 1_100),
        "the claude step only"
    );
    let holds = other.budget_holds().unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(holds[0].scope, key);
    assert!(holds[0].is_active(t(20)));
    assert!(!holds[0].notified, "a step has no run to name");
    assert!(due_names(&*other, t(20)).is_empty(), "a is held");

    // The loop's own budget, spent by its run; removing the loop removes the hold row.
    one.clear_budget(loops_core::Provider::Claude, None, t(30))
        .unwrap();
    let mut new_b = agent_loop("b", None, "true");
    new_b.policy.ops.budget_tokens = Some(budget::Budget {
        metric: BudgetMetric::Tokens,
        amount: 10,
        window: BudgetWindow::Day,
    });
    let b = one.create_loop(new_b, t(30)).unwrap();
    let run_b = claim(&*one, &claim_req(&b, t(0), t(31))).unwrap();
    let mut done = outcome(RunStatus::Succeeded, t(32));
    done.usage = Some(loops_core::Usage {
        input_tokens: Some(20),
        output_tokens: Some(0),
        cost_usd: None,
    });
    finish_noting(&*one, &run_b.id, done);
    let own = BudgetScope::Loop(b.id.clone());
    assert!(other.budget_holds().unwrap().iter().any(|h| h.scope == own));
    assert!(one.remove_loop(&b.id).unwrap());
    assert!(other.budget_holds().unwrap().iter().all(|h| h.scope != own));
    let _ = a;
}
