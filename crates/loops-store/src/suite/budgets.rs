//! Budgets (issue #20): spend counted from the usage runs and agent steps report, a
//! spent loop or key held until its window resets, a pool passing over a spent account.

use super::agent_ops::{agent_loop, claude_loop, due_names, finish_noting};
use super::{claim, claim_req, new_loop, outcome, t, TestDb};
use crate::LoopAdvance;
use loops_core::budget;
use loops_core::{LoopStatus, NotifyEvent, RunOutcome, RunStatus};

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
