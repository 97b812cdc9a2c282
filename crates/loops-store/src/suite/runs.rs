//! Runs after their claim: finalization and pid records (alone and in batches), the
//! transitions they apply, run leases, listings, pruning, take-over.

use super::{
    claim, claim_req, finish, new_loop, one, outcome, run_count, spawned, t, with_attempts, TestDb,
};
use crate::{LoopAdvance, PrunePolicy, RunFilter, RunWrite, RunWritten, StoreError};
use loops_core::{LoopStatus, Run, RunId, RunSource, RunStatus, Usage};

/// A finalization records the outcome (duration from the start) and happens once; a
/// missing run and an outcome of `running` are refused.
pub fn finalize_is_guarded(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let run = claim(&*store, &claim_req(&lp, t(0), t(1000))).unwrap();
    let mut out = outcome(RunStatus::Succeeded, t(3500));
    out.summary = Some("all good".to_owned());
    out.error_output = Some("quoted from the output".to_owned());
    out.usage = Some(Usage {
        input_tokens: Some(10),
        output_tokens: Some(20),
        cost_usd: Some(0.5),
    });
    let done = finish(&*store, &run.id, out.clone()).unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.finished_at, Some(t(3500)));
    assert_eq!(done.duration_ms, Some(2500));
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(done.stdout.as_deref(), Some("out"));
    assert_eq!(done.stderr.as_deref(), Some("err"));
    assert_eq!(done.summary.as_deref(), Some("all good"));
    assert_eq!(done.error_output.as_deref(), Some("quoted from the output"));
    assert_eq!(done.usage, out.usage);
    assert_eq!(store.get_run(&run.id).unwrap().unwrap(), done);

    let again = finish(&*store, &run.id, outcome(RunStatus::Failed, t(4000))).unwrap_err();
    assert!(matches!(again, StoreError::NotRunning(_)), "{again:?}");
    assert_eq!(
        store.get_run(&run.id).unwrap().unwrap().status,
        RunStatus::Succeeded
    );
    let missing = finish(&*store, &RunId::new("ffffffffffff"), out).unwrap_err();
    assert!(matches!(missing, StoreError::RunNotFound(_)), "{missing:?}");
    let invalid = finish(&*store, &run.id, outcome(RunStatus::Running, t(4000))).unwrap_err();
    assert!(
        matches!(invalid, StoreError::InvalidArgument(_)),
        "{invalid:?}"
    );
}

/// A pid record lands on a running row (start times beyond `u32` included) and is
/// refused once the row is finished.
pub fn mark_run_pid_records_and_guards(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let run = claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    spawned(&*store, &run.id, 777, Some(u64::from(u32::MAX) + 5), t(2)).unwrap();
    let got = store.get_run(&run.id).unwrap().unwrap();
    assert_eq!(got.pid, Some(777));
    assert_eq!(got.pid_start_time, Some(u64::from(u32::MAX) + 5));
    assert_eq!(got.updated_at, t(2));
    finish(&*store, &run.id, outcome(RunStatus::Failed, t(3))).unwrap();
    let err = spawned(&*store, &run.id, 1, None, t(4)).unwrap_err();
    assert!(matches!(err, StoreError::NotRunning(_)), "{err:?}");
}

/// A batch applies in order, fails rows that are not running alone, and moves each
/// finished run's loop as the domain decides, from the loop as stored and its
/// deferred retry.
pub fn record_run_writes_applies_in_order_and_fails_rows_alone(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let other = store.create_loop(new_loop("b", Some(t(0))), t(0)).unwrap();
    // An older slot of `lp` failed with attempts left: a deferred retry. (Finalizing it
    // scheduled its retry; the loop is put back as if another slot's retry had been
    // pending then, so the batch below has to find the older slot itself.)
    let old = claim(&*store, &claim_req(&lp, t(-60_000), t(-59_000))).unwrap();
    finish(&*store, &old.id, outcome(RunStatus::Failed, t(-58_000))).unwrap();
    let as_created = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(0)),
        retry_scheduled_for: None,
    };
    store
        .update_loop_schedule(&lp.id, &as_created, t(-58_000), None)
        .unwrap();
    let run = claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    let run_b = claim(&*store, &claim_req(&other, t(0), t(1))).unwrap();
    let missing = RunId::new("ffffffffffff");

    let writes = vec![
        RunWrite::Spawned {
            run: run.id.clone(),
            pid: 4321,
            pid_start_time: Some(99),
            session_note: None,
            at: t(2),
        },
        RunWrite::Finished {
            run: run.id.clone(),
            outcome: outcome(RunStatus::Succeeded, t(5)),
        },
        // After its finalization in the same batch: fails alone.
        RunWrite::Spawned {
            run: run.id.clone(),
            pid: 1,
            pid_start_time: None,
            session_note: None,
            at: t(6),
        },
        RunWrite::Finished {
            run: missing.clone(),
            outcome: outcome(RunStatus::Failed, t(6)),
        },
        RunWrite::Finished {
            run: run_b.id.clone(),
            outcome: outcome(RunStatus::Failed, t(7)),
        },
    ];
    let results = store.record_run_writes(&writes, t(8), None).unwrap();
    assert_eq!(results.len(), 5);
    assert!(
        matches!(results[0], Ok(RunWritten::Spawned)),
        "{:?}",
        results[0]
    );
    match &results[1] {
        Ok(RunWritten::Finished {
            run: done,
            loop_moved,
            ..
        }) => {
            assert!(*loop_moved);
            assert_eq!(done.status, RunStatus::Succeeded);
            assert_eq!(done.pid, Some(4321), "the pid write came first");
            assert_eq!(done.duration_ms, Some(4));
        }
        other => panic!("expected a finished run, got {other:?}"),
    }
    assert!(
        matches!(results[2], Err(StoreError::NotRunning(_))),
        "{:?}",
        results[2]
    );
    assert!(
        matches!(results[3], Err(StoreError::RunNotFound(_))),
        "{:?}",
        results[3]
    );
    match &results[4] {
        Ok(RunWritten::Finished {
            run: done,
            loop_moved,
            ..
        }) => {
            assert!(
                !*loop_moved,
                "b has no attempts left and was advanced at its claim"
            );
            assert_eq!(done.status, RunStatus::Failed);
        }
        other => panic!("expected a finished run, got {other:?}"),
    }
    // The domain decided a's move inside the transaction, from the loop as stored and
    // its deferred retry (the older failed slot): retried one retry delay after the
    // finish.
    let a = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(a.next_run_at, Some(t(5 + 60_000)));
    assert_eq!(a.retry_scheduled_for, Some(t(-60_000)));
    assert_eq!(store.get_run(&run.id).unwrap().unwrap().pid, Some(4321));
    assert!(store.record_run_writes(&[], t(9), None).unwrap().is_empty());

    // Many pid records in one batch (a backend may write them at once): each still
    // succeeds or fails alone, before the finalizations that follow them.
    let c = store.create_loop(new_loop("c", Some(t(0))), t(0)).unwrap();
    let d = store.create_loop(new_loop("d", Some(t(0))), t(0)).unwrap();
    let e = store.create_loop(new_loop("e", Some(t(0))), t(0)).unwrap();
    let run_c = claim(&*store, &claim_req(&c, t(0), t(10))).unwrap();
    let run_d = claim(&*store, &claim_req(&d, t(0), t(10))).unwrap();
    let run_e = claim(&*store, &claim_req(&e, t(0), t(10))).unwrap();
    let pid = |run: &RunId, pid: u32| RunWrite::Spawned {
        run: run.clone(),
        pid,
        pid_start_time: Some(u64::from(pid)),
        // A note on every other pid, so a batch writes both kinds.
        session_note: (pid % 2 == 1).then(|| format!("resumed session s-{pid}")),
        at: t(11),
    };
    let writes = vec![
        pid(&run_c.id, 11),
        pid(&run.id, 12),
        pid(&missing, 13),
        RunWrite::Finished {
            run: run_e.id.clone(),
            outcome: outcome(RunStatus::Succeeded, t(12)),
        },
        pid(&run_d.id, 15),
        RunWrite::Finished {
            run: run_c.id.clone(),
            outcome: outcome(RunStatus::Succeeded, t(13)),
        },
    ];
    let results = store.record_run_writes(&writes, t(14), None).unwrap();
    assert!(matches!(results[0], Ok(RunWritten::Spawned)), "{results:?}");
    assert!(
        matches!(results[1], Err(StoreError::NotRunning(_))),
        "{results:?}"
    );
    assert!(
        matches!(results[2], Err(StoreError::RunNotFound(_))),
        "{results:?}"
    );
    assert!(
        matches!(results[3], Ok(RunWritten::Finished { .. })),
        "{results:?}"
    );
    assert!(matches!(results[4], Ok(RunWritten::Spawned)), "{results:?}");
    match &results[5] {
        Ok(RunWritten::Finished { run: done, .. }) => assert_eq!(done.pid, Some(11)),
        other => panic!("expected a finished run, got {other:?}"),
    }
    let stored_d = store.get_run(&run_d.id).unwrap().unwrap();
    assert_eq!(
        (stored_d.pid, stored_d.pid_start_time),
        (Some(15), Some(15))
    );
    // The session note a spawn records is on the row before the run ends (whoever
    // records the end reads it from there).
    assert_eq!(
        stored_d.session_note.as_deref(),
        Some("resumed session s-15")
    );
}

/// A batch of finalizations ends where the same writes, one call each, end — however a
/// backend groups them: two runs of one loop (the second's transition is decided from
/// the loop as the first left it, and sees the first's failed slot as a deferred
/// retry), runs of other loops between them (one retried), and two runs whose usage
/// one budget counts (its `held` goes out with the run that spent it, not the one
/// before).
pub fn a_batch_of_finalizations_ends_where_one_by_one_ends(db: &dyn TestDb) {
    use super::agent_ops::agent_loop;
    use loops_core::budget::{Budget, BudgetMetric, StoreBudget};
    use loops_core::{Loop, Provider, RunOutcome};
    let store = db.open();
    let used = |at, tokens: u64| RunOutcome {
        usage: Some(Usage {
            input_tokens: Some(tokens),
            output_tokens: Some(0),
            cost_usd: None,
        }),
        ..outcome(RunStatus::Succeeded, at)
    };
    // One world for each way of writing: its own loops, and a budget of its own
    // account (spend is counted store-wide).
    let world = |w: &str| -> (Vec<Loop>, Vec<RunWrite>) {
        store
            .set_budget(&StoreBudget {
                provider: Provider::Claude,
                account: Some(w.to_owned()),
                tokens: Some(Budget::parse(BudgetMetric::Tokens, "1000/day", "tokens").unwrap()),
                usd: None,
                updated_at: t(0),
            })
            .unwrap();
        let create = |new| store.create_loop(new, t(0)).unwrap();
        let a = create(with_attempts(new_loop(&format!("{w}-a"), Some(t(0))), 3));
        let b = create(with_attempts(new_loop(&format!("{w}-b"), Some(t(0))), 2));
        let c = create(new_loop(&format!("{w}-c"), Some(t(0))));
        let x = create(agent_loop(&format!("{w}-x"), Some(w), "hook"));
        let y = create(agent_loop(&format!("{w}-y"), Some(w), "hook"));
        let run = |lp: &Loop, slot| claim(&*store, &claim_req(lp, t(slot), t(slot + 1))).unwrap();
        let (a1, a2, b1) = (run(&a, 0), run(&a, 60_000), run(&b, 0));
        let (c1, x1, y1) = (run(&c, 0), run(&x, 0), run(&y, 0));
        let end = |r: Run, outcome| RunWrite::Finished { run: r.id, outcome };
        let writes = vec![
            end(a1, outcome(RunStatus::Failed, t(70_000))),
            end(b1, outcome(RunStatus::Failed, t(70_010))),
            end(x1, used(t(70_020), 600)),
            end(a2, outcome(RunStatus::Failed, t(70_030))),
            end(c1, outcome(RunStatus::Failed, t(70_040))),
            end(y1, used(t(70_050), 600)),
        ];
        (vec![a, b, c, x, y], writes)
    };
    let (batch_loops, batch_writes) = world("batch");
    let (alone_loops, alone_writes) = world("alone");
    let batched = store
        .record_run_writes(&batch_writes, t(80_000), None)
        .unwrap();
    let alone: Vec<_> = alone_writes
        .iter()
        .map(|w| {
            one(store
                .record_run_writes(std::slice::from_ref(w), t(80_000), None)
                .unwrap())
        })
        .collect();
    let written = |w: &Result<RunWritten, StoreError>| match w {
        Ok(RunWritten::Finished {
            run,
            loop_moved,
            notifications,
        }) => (
            (run.status, run.attempt, run.finished_at, run.duration_ms),
            *loop_moved,
            notifications.iter().map(|d| d.event).collect::<Vec<_>>(),
        ),
        other => panic!("expected a finished run, got {other:?}"),
    };
    let batched: Vec<_> = batched.iter().map(written).collect();
    let alone: Vec<_> = alone.iter().map(written).collect();
    assert_eq!(batched, alone);
    assert_eq!(
        batched[5].2,
        [loops_core::NotifyEvent::Held],
        "the second agent run spent the budget: {batched:?}"
    );
    let state = |lp: &Loop| {
        let lp = store.get_loop(&lp.id).unwrap().unwrap();
        (lp.status, lp.next_run_at, lp.retry_scheduled_for, lp.state)
    };
    let batch_states: Vec<_> = batch_loops.iter().map(state).collect();
    let alone_states: Vec<_> = alone_loops.iter().map(state).collect();
    assert_eq!(batch_states, alone_states);
    // The loop with two runs failed twice: both slots are retried, the older first.
    assert_eq!(batch_states[0].2, Some(t(0)), "{batch_states:?}");
    // Each `run.finished` of the batch carries its loop as the batch's transaction left
    // it (the loop that moved included).
    let events = store.events_after(0, 1_000).unwrap();
    let mut checked = 0;
    for lp in &batch_loops {
        let stored = store.get_loop(&lp.id).unwrap().unwrap();
        let at = |t: Option<loops_core::Instant>| t.as_ref().map(loops_core::format_instant);
        let brief = serde_json::json!({
            "id": stored.id,
            "name": stored.name,
            "status": stored.status,
            "nextRunAt": at(stored.next_run_at),
            "dueAt": at(stored.due_at),
        });
        for e in events.iter().filter(|e| {
            e.body.kind == loops_core::event::EventKind::RunFinished
                && e.body.loop_id.as_ref() == Some(&lp.id)
        }) {
            assert_eq!(e.body.data["loop"], brief, "{}", lp.name);
            checked += 1;
        }
    }
    assert_eq!(checked, 6, "one run.finished a write");
}

/// A write of a run no longer running fails alone, even when its loop's row can no
/// longer be read: the batch's other finalizations are made (a backend that reads the
/// batch's loops at once reads that row only for a run it finalized).
pub fn a_finished_runs_unreadable_loop_fails_only_its_own_write(db: &dyn TestDb) {
    let store = db.open();
    let create = |name| store.create_loop(new_loop(name, Some(t(0))), t(0)).unwrap();
    let (p, q, r) = (create("p"), create("q"), create("r"));
    let run = |lp| claim(&*store, &claim_req(lp, t(0), t(1))).unwrap();
    let (p1, q1, r1) = (run(&p), run(&q), run(&r));
    finish(&*store, &r1.id, outcome(RunStatus::Succeeded, t(2))).unwrap();
    db.spoil_loop_row(&r.id);
    let end = |r: &Run| RunWrite::Finished {
        run: r.id.clone(),
        outcome: outcome(RunStatus::Succeeded, t(3)),
    };
    let results = store
        .record_run_writes(&[end(&r1), end(&p1), end(&q1)], t(4), None)
        .unwrap();
    assert!(
        matches!(results[0], Err(StoreError::NotRunning(_))),
        "{results:?}"
    );
    for result in &results[1..] {
        assert!(
            matches!(result, Ok(RunWritten::Finished { .. })),
            "{results:?}"
        );
    }
}

/// The deferred retry a finish schedules is the oldest other slot whose latest attempt
/// failed with attempts left — not a done, exhausted, running or ad-hoc one.
pub fn deferred_retry_is_the_oldest_failed_slot_with_attempts_left(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let slot = |i: i64| t(i * 60_000);
    let run_once = |s, status| {
        let r = claim(&*store, &claim_req(&lp, s, s)).unwrap();
        finish(&*store, &r.id, outcome(status, s)).unwrap();
    };
    // slot 0: failed twice, then succeeded → done.
    run_once(slot(0), RunStatus::Failed);
    run_once(slot(0), RunStatus::Failed);
    run_once(slot(0), RunStatus::Succeeded);
    // slot 1: failed 3 times → out of attempts.
    for _ in 0..3 {
        run_once(slot(1), RunStatus::Failed);
    }
    // slot 2: timed out once → retryable. slot 3: abandoned once → retryable.
    run_once(slot(2), RunStatus::TimedOut);
    run_once(slot(3), RunStatus::Abandoned);
    // slot 4: failed once, retry currently running → not retryable.
    run_once(slot(4), RunStatus::Failed);
    claim(&*store, &claim_req(&lp, slot(4), slot(4))).unwrap();
    // ad hoc failure → ignored.
    let mut adhoc = claim_req(&lp, t(-5), t(-5));
    adhoc.source = RunSource::AdHoc;
    let r = claim(&*store, &adhoc).unwrap();
    finish(&*store, &r.id, outcome(RunStatus::Failed, t(-4))).unwrap();

    // A new slot succeeds with no retry pending: the loop turns to the oldest
    // retryable slot.
    let reset = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(slot(10)),
        retry_scheduled_for: None,
    };
    store
        .update_loop_schedule(&lp.id, &reset, slot(10), None)
        .unwrap();
    run_once(slot(10), RunStatus::Succeeded);
    let a = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(a.retry_scheduled_for, Some(slot(2)));
    assert_eq!(
        a.next_run_at,
        Some(slot(10) + chrono::TimeDelta::minutes(1))
    );
    // That slot succeeds on its retry: the next oldest is slot 3.
    run_once(slot(2), RunStatus::Succeeded);
    let a = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(a.retry_scheduled_for, Some(slot(3)));
}

/// A heartbeat renews exactly the listed running rows of its runner, each by its
/// loop's `leaseMs`.
pub fn heartbeat_extends_only_listed_rows_of_the_runner(db: &dyn TestDb) {
    let store = db.open();
    let mut n = new_loop("a", Some(t(0)));
    n.policy.lease_ms = 1000;
    let a = store.create_loop(n, t(0)).unwrap();
    let mut n = new_loop("b", Some(t(0)));
    n.policy.lease_ms = 5000;
    let b = store.create_loop(n, t(0)).unwrap();

    let r1 = claim(&*store, &claim_req(&a, t(0), t(0))).unwrap();
    let r2 = claim(&*store, &claim_req(&b, t(0), t(0))).unwrap();
    let r3 = claim(&*store, &claim_req(&a, t(60_000), t(0))).unwrap(); // not listed
    let mut other = claim_req(&b, t(60_000), t(0));
    other.runner_id = "runner-b".to_owned();
    let r4 = claim(&*store, &other).unwrap(); // another runner's
    let r5 = claim(&*store, &claim_req(&b, t(120_000), t(0))).unwrap();
    finish(&*store, &r5.id, outcome(RunStatus::Failed, t(1))).unwrap(); // not running

    let listed = [r1.id.clone(), r2.id.clone(), r4.id.clone(), r5.id.clone()];
    let n = store
        .renew_run_leases(&listed, "runner-a", t(500), None)
        .unwrap();
    assert_eq!(n, 2);
    let lease = |id: &RunId| store.get_run(id).unwrap().unwrap().lease_expires_at;
    assert_eq!(lease(&r1.id), Some(t(1500)));
    assert_eq!(lease(&r2.id), Some(t(5500)));
    assert_eq!(lease(&r3.id), Some(t(1000)));
    assert_eq!(lease(&r4.id), Some(t(5000)));
    assert_eq!(
        store
            .renew_run_leases(&[], "runner-a", t(600), None)
            .unwrap(),
        0
    );
}

/// Running rows, all or of one loop, oldest first, each with its lease expiry (from
/// its loop's `leaseMs`), from which recovery tells a gone runner; finished rows are
/// not listed.
pub fn running_runs_and_their_leases(db: &dyn TestDb) {
    let store = db.open();
    let mut n = new_loop("a", Some(t(0)));
    n.policy.lease_ms = 1000;
    let a = store.create_loop(n, t(0)).unwrap();
    let mut n = new_loop("b", Some(t(0)));
    n.policy.lease_ms = 10_000;
    let b = store.create_loop(n, t(0)).unwrap();
    let ra = claim(&*store, &claim_req(&a, t(0), t(0))).unwrap();
    let rb = claim(&*store, &claim_req(&b, t(0), t(1))).unwrap();
    let done = claim(&*store, &claim_req(&a, t(60_000), t(2))).unwrap();
    finish(&*store, &done.id, outcome(RunStatus::Succeeded, t(3))).unwrap();

    let running = store.running_runs(None).unwrap();
    assert_eq!(
        running.iter().map(|r| &r.id).collect::<Vec<_>>(),
        [&ra.id, &rb.id]
    );
    let leases: Vec<_> = running.iter().map(|r| r.lease_expires_at).collect();
    assert_eq!(leases, [Some(t(1000)), Some(t(10_001))]);
    let running_a = store.running_runs(Some(&a.id)).unwrap();
    assert_eq!(running_a.len(), 1);
    assert_eq!(running_a[0].id, ra.id);
}

/// Runs list newest first (insertion breaks a tie of the same millisecond), by loop
/// and up to a limit.
pub fn list_runs_newest_first_with_filter_and_limit(db: &dyn TestDb) {
    let store = db.open();
    let a = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let b = store.create_loop(new_loop("b", Some(t(0))), t(0)).unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let lp = if i % 2 == 0 { &a } else { &b };
        // Same creation instant for two rows: insertion order breaks the tie.
        let now = t(i / 2);
        let r = claim(&*store, &claim_req(lp, t(i * 60_000), now)).unwrap();
        ids.push(r.id);
    }
    let all: Vec<_> = store
        .list_runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(all, expected);

    let limited = store
        .list_runs(&RunFilter {
            loop_id: None,
            limit: Some(2),
            ..RunFilter::default()
        })
        .unwrap();
    assert_eq!(limited.len(), 2);
    assert_eq!(limited[0].id, ids[4]);

    let of_a: Vec<_> = store
        .list_runs(&RunFilter {
            loop_id: Some(a.id.clone()),
            limit: None,
            ..RunFilter::default()
        })
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(of_a, [ids[4].clone(), ids[2].clone(), ids[0].clone()]);
}

/// Pruning deletes finished runs matching either rule (age, newest N per loop), never
/// running ones; a dry run only counts.
pub fn prune_policies(db: &dyn TestDb) {
    let store = db.open();
    let a = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let b = store.create_loop(new_loop("b", Some(t(0))), t(0)).unwrap();
    // 5 finished runs per loop at t(i*1000), plus one running row each (oldest).
    let mut running = Vec::new();
    for lp in [&a, &b] {
        running.push(
            claim(&*store, &claim_req(lp, t(-60_000), t(-60_000)))
                .unwrap()
                .id,
        );
        for i in 0..5 {
            let r = claim(&*store, &claim_req(lp, t(i * 60_000), t(i * 1000))).unwrap();
            finish(
                &*store,
                &r.id,
                outcome(RunStatus::Succeeded, t(i * 1000 + 10)),
            )
            .unwrap();
        }
    }
    assert_eq!(run_count(&*store), 12);

    // No rule: nothing.
    assert_eq!(store.prune_runs(&PrunePolicy::default(), false).unwrap(), 0);

    // Age only: finished before t(2000) → i = 0, 1 per loop.
    let age = PrunePolicy {
        older_than: Some(t(2000)),
        keep_per_loop: None,
        keep_events: None,
    };
    assert_eq!(store.prune_runs(&age, true).unwrap(), 4);
    assert_eq!(run_count(&*store), 12, "dry run deletes nothing");
    assert_eq!(store.prune_runs(&age, false).unwrap(), 4);
    assert_eq!(run_count(&*store), 8);

    // Keep only: keep 2 newest finished per loop → deletes i = 2 per loop.
    let keep = PrunePolicy {
        older_than: None,
        keep_per_loop: Some(2),
        keep_events: None,
    };
    assert_eq!(store.prune_runs(&keep, true).unwrap(), 2);
    assert_eq!(store.prune_runs(&keep, false).unwrap(), 2);
    let left: Vec<_> = store.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(left.len(), 6);
    for id in &running {
        assert!(left.iter().any(|r| &r.id == id), "running rows are kept");
    }

    // Both: either rule deletes. keep 5 (no-op) OR older than t(4000) → i = 3 per loop.
    let both = PrunePolicy {
        older_than: Some(t(4000)),
        keep_per_loop: Some(5),
        keep_events: None,
    };
    assert_eq!(store.prune_runs(&both, false).unwrap(), 2);
    // keep 0 deletes every finished row, never running ones.
    let all = PrunePolicy {
        older_than: Some(t(0)),
        keep_per_loop: Some(0),
        keep_events: None,
    };
    assert_eq!(store.prune_runs(&all, false).unwrap(), 2);
    let left = store.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|r| r.status == RunStatus::Running));
}

/// A take-over moves a running row from the runner that holds it to another, with a
/// fresh lease that the new runner's heartbeat renews; a finished row cannot be taken.
pub fn take_over_run_moves_a_running_row_to_a_new_runner(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let run = claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    assert_eq!(run.claimed_by.as_deref(), Some("runner-a"));
    // Only from the runner that holds it.
    let err = store
        .take_over_run(&run.id, Some("runner-x"), "runner-b", t(5), None)
        .unwrap_err();
    assert!(matches!(err, StoreError::NotRunning(_)), "{err:?}");
    let moved = store
        .take_over_run(&run.id, Some("runner-a"), "runner-b", t(5), None)
        .unwrap();
    assert_eq!(moved.claimed_by.as_deref(), Some("runner-b"));
    assert_eq!(
        moved.lease_expires_at,
        Some(t(5) + chrono::TimeDelta::milliseconds(lp.lease_ms as i64))
    );
    // The new runner's heartbeat now renews it.
    let renewed = store
        .renew_run_leases(std::slice::from_ref(&run.id), "runner-b", t(9), None)
        .unwrap();
    assert_eq!(renewed, 1);
    // A finished row cannot be taken.
    finish(&*store, &run.id, outcome(RunStatus::Succeeded, t(10))).unwrap();
    let err = store
        .take_over_run(&run.id, Some("runner-b"), "runner-c", t(11), None)
        .unwrap_err();
    assert!(matches!(err, StoreError::NotRunning(_)), "{err:?}");
}
