//! Loops changed in place, the label index, and the run filters (issue #11).

use super::*;
use crate::{LoopFilter, LoopOrder, LoopUpdate, LoopVersion};
use loops_core::LoopStatus;

fn names(rows: Vec<std::result::Result<Loop, crate::UnreadableLoop>>) -> Vec<String> {
    rows.into_iter().map(|r| r.unwrap().name).collect()
}

fn labelled(labels: &[&str]) -> LoopFilter {
    LoopFilter {
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        ..LoopFilter::default()
    }
}

/// The update of `lp` that leaves it as it is (callers change what they test).
pub(super) fn unchanged(lp: &Loop) -> LoopUpdate {
    LoopUpdate {
        definition: NewLoop {
            name: lp.name.clone(),
            description: lp.description.clone(),
            schedule: lp.schedule.clone(),
            target: lp.target.clone(),
            policy: lp.policy(),
            labels: lp.labels.clone(),
            notify: lp.notify.clone(),
            next_run_at: lp.next_run_at,
        },
        status: lp.status,
        retry_scheduled_for: lp.retry_scheduled_for,
    }
}

/// An update replaces the whole definition and schedule state in one write: the id,
/// creation time and runs stay, `updatedAt` is the update's instant, `dueAt` follows
/// the new slot and jitter, the label index follows the labels, and the runs carry
/// the new name.
pub fn update_loop_definition_replaces_the_definition_keeping_id_and_history(db: &dyn TestDb) {
    let store = db.open();
    let mut new = new_loop("before", Some(t(60_000)));
    new.labels = vec!["a".into(), "b".into()];
    let lp = store.create_loop(new, t(0)).unwrap();
    let run = claim(&*store, &claim_req(&lp, t(60_000), t(60_000))).unwrap();
    finish(&*store, &run.id, outcome(RunStatus::Succeeded, t(61_000))).unwrap();
    let lp = store.get_loop(&lp.id).unwrap().unwrap();

    let mut update = unchanged(&lp);
    let d = &mut update.definition;
    d.name = "after".into();
    d.description = Some("edited".into());
    d.schedule = Schedule::Interval {
        every_ms: 3_600_000,
        anchor: Anchor::FixedDelay,
    };
    d.policy.max_attempts = 3;
    d.policy.jitter_ms = 60_000;
    d.labels = vec!["b".into(), "c".into()];
    d.notify = Some(loops_core::Notify {
        cmd: Some("logger".into()),
        url: None,
        on: loops_core::NotifyOn::Always,
    });
    d.next_run_at = Some(t(3_600_000));
    update.status = LoopStatus::Paused;
    let edited = store
        .update_loop_definition(&lp.id, &update, &LoopVersion::of(&lp), t(100_000))
        .unwrap()
        .expect("the loop did not move, so the update applies");
    assert_eq!(edited.id, lp.id);
    assert_eq!(edited.created_at, lp.created_at);
    assert_eq!(edited.updated_at, t(100_000));
    assert_eq!(edited.name, "after");
    assert_eq!(edited.description.as_deref(), Some("edited"));
    assert_eq!(edited.schedule, update.definition.schedule);
    assert_eq!(edited.max_attempts, 3);
    assert_eq!(edited.status, LoopStatus::Paused);
    assert_eq!(edited.labels, vec!["b".to_owned(), "c".to_owned()]);
    assert_eq!(edited.notify, update.definition.notify);
    assert_eq!(edited.next_run_at, Some(t(3_600_000)));
    let delay = loops_core::schedule::jitter_delay(&lp.id, t(3_600_000), 60_000);
    assert_eq!(
        edited.due_at,
        Some(t(3_600_000 + i64::try_from(delay).unwrap()))
    );
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap(), edited);
    assert!(store.get_loop_by_name("before").unwrap().is_none());
    // The history stays, under the new name.
    let runs = store
        .list_runs(&RunFilter {
            loop_id: Some(lp.id.clone()),
            ..RunFilter::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].id, run.id);
    assert_eq!(runs[0].loop_name, "after");
    // The label index follows.
    let all = LoopFilter {
        include_archived: true,
        ..labelled(&["c"])
    };
    assert_eq!(names(store.loop_rows_matching(&all).unwrap()), ["after"]);
    assert!(store
        .loop_rows_matching(&labelled(&["a"]))
        .unwrap()
        .is_empty());
}

/// An update applies only to the version it was decided on: a loop moved meanwhile
/// (a claim advanced it) is left as it is (`None`); a missing loop and a taken name
/// are errors; none of them writes anything.
pub fn update_loop_definition_is_guarded_and_writes_nothing_when_refused(db: &dyn TestDb) {
    let store = db.open();
    let other = store.create_loop(new_loop("other", None), t(0)).unwrap();
    let mut new = new_loop("mine", Some(t(60_000)));
    new.labels = vec!["keep".into()];
    let read = store.create_loop(new, t(0)).unwrap();
    let advance = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(120_000)),
        retry_scheduled_for: None,
    };
    let moved = store
        .update_loop_schedule(&read.id, &advance, t(1), None)
        .unwrap();
    let mut update = unchanged(&read);
    update.definition.description = Some("stale".into());
    assert_eq!(
        store
            .update_loop_definition(&read.id, &update, &LoopVersion::of(&read), t(2))
            .unwrap(),
        None
    );
    assert_eq!(store.get_loop(&read.id).unwrap().unwrap(), moved);

    let mut taken = unchanged(&moved);
    taken.definition.name = "other".into();
    taken.definition.labels = vec!["lost".into()];
    let err = store
        .update_loop_definition(&moved.id, &taken, &LoopVersion::of(&moved), t(3))
        .unwrap_err();
    assert!(
        matches!(err, StoreError::DuplicateName(ref n) if n == "other"),
        "{err:?}"
    );
    assert_eq!(store.get_loop(&moved.id).unwrap().unwrap(), moved);
    assert!(store
        .loop_rows_matching(&labelled(&["lost"]))
        .unwrap()
        .is_empty());
    assert_eq!(
        names(store.loop_rows_matching(&labelled(&["keep"])).unwrap()),
        ["mine"]
    );
    assert_eq!(store.get_loop(&other.id).unwrap().unwrap(), other);

    let missing = LoopId::new("000000000000");
    let err = store
        .update_loop_definition(&missing, &update, &LoopVersion::of(&moved), t(4))
        .unwrap_err();
    assert!(matches!(err, StoreError::LoopNotFound(_)), "{err:?}");
}

/// `each_loop_row` hands out `loop_rows_matching`'s rows one at a time: the same rows
/// in the same order for every filter, a row that does not decode in its place, and
/// none after the visitor breaks.
pub fn each_loop_row_hands_out_the_listing_rows_in_order(db: &dyn TestDb) {
    let store = db.open();
    for (name, labels) in [
        ("d", vec!["ci"]),
        ("b", vec![]),
        ("a", vec!["ci"]),
        ("c", vec![]),
    ] {
        let mut new = new_loop(name, Some(t(0)));
        new.labels = labels.into_iter().map(str::to_owned).collect();
        store.create_loop(new, t(0)).unwrap();
    }
    let c = store.get_loop_by_name("c").unwrap().unwrap();
    db.spoil_loop_row(&c.id);
    let key = |row: &std::result::Result<Loop, crate::UnreadableLoop>| match row {
        Ok(lp) => (lp.id.clone(), lp.name.clone(), true),
        Err(bad) => (bad.id.clone(), bad.name.clone(), false),
    };
    let all = LoopFilter {
        include_archived: true,
        ..LoopFilter::default()
    };
    for filter in [LoopFilter::default(), all.clone(), labelled(&["ci"])] {
        let listed: Vec<_> = store
            .loop_rows_matching(&filter)
            .unwrap()
            .iter()
            .map(key)
            .collect();
        let mut handed = Vec::new();
        store
            .each_loop_row(&filter, &mut |row| {
                handed.push(key(&row));
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(handed, listed, "{filter:?}");
    }
    let mut handed = Vec::new();
    store
        .each_loop_row(&all, &mut |row| {
            handed.push(key(&row).1);
            if handed.len() == 2 {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(handed, ["a", "b"], "nothing after the break");
    let mut unreadable = Vec::new();
    store
        .each_loop_row(&all, &mut |row| {
            if let Err(bad) = row {
                unreadable.push(bad.name);
            }
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(unreadable, ["c"], "the spoiled row in its place");
}

/// Listing by labels (all of them must match) and status; archived loops are left
/// out unless asked for.
pub fn loop_rows_matching_filters_by_labels_and_hides_archived(db: &dyn TestDb) {
    let store = db.open();
    for (name, labels) in [
        ("x", vec!["ci", "nightly"]),
        ("y", vec!["ci"]),
        ("z", vec!["ci"]),
        ("w", vec![]),
    ] {
        let mut new = new_loop(name, Some(t(0)));
        new.labels = labels.into_iter().map(str::to_owned).collect();
        store.create_loop(new, t(0)).unwrap();
    }
    let z = store.get_loop_by_name("z").unwrap().unwrap();
    archive(&*store, &z, t(1));
    let rows = |f: LoopFilter| names(store.loop_rows_matching(&f).unwrap());
    assert_eq!(rows(LoopFilter::default()), ["w", "x", "y"]);
    let all = LoopFilter {
        include_archived: true,
        ..LoopFilter::default()
    };
    assert_eq!(rows(all.clone()), ["w", "x", "y", "z"]);
    assert_eq!(
        rows(LoopFilter {
            status: Some(LoopStatus::Archived),
            ..LoopFilter::default()
        }),
        ["z"]
    );
    assert_eq!(rows(labelled(&["ci"])), ["x", "y"]);
    assert_eq!(rows(labelled(&["ci", "ci"])), ["x", "y"]);
    assert_eq!(rows(labelled(&["nightly", "ci"])), ["x"]);
    assert_eq!(
        rows(LoopFilter {
            labels: vec!["ci".into()],
            ..all.clone()
        }),
        ["x", "y", "z"]
    );
    assert!(rows(labelled(&["nope"])).is_empty());
    assert!(rows(labelled(&["ci", "nope"])).is_empty());
    // Paging is applied after the filter, in name order.
    let page = |offset: usize, limit: Option<usize>, base: &LoopFilter| {
        rows(LoopFilter {
            offset,
            limit,
            ..base.clone()
        })
    };
    assert_eq!(page(1, Some(2), &all), ["x", "y"]);
    assert_eq!(page(3, Some(2), &all), ["z"]);
    assert_eq!(page(2, None, &all), ["y", "z"]);
    assert_eq!(page(0, Some(1), &LoopFilter::default()), ["w"]);
    assert!(page(0, Some(0), &all).is_empty());
    assert!(page(9, Some(2), &all).is_empty());
    assert_eq!(page(1, Some(5), &labelled(&["ci"])), ["y"]);
    assert_eq!(page(usize::MAX, None, &all), Vec::<String>::new());
    // The due index never sees an archived loop.
    let due: Vec<String> = store
        .due_loops(t(10), 10)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().name)
        .collect();
    assert!(!due.contains(&"z".to_owned()), "{due:?}");
}

/// The next-slot order takes active loops with a slot only, earliest first (a pending
/// retry counts when it is earlier; ties by name), under the same filters and paging;
/// a count is the listing's length without its paging.
pub fn loops_by_next_slot_and_counted(db: &dyn TestDb) {
    let store = db.open();
    let mut made = std::collections::HashMap::new();
    for (name, next, labels) in [
        ("late", Some(t(50_000)), vec!["ci"]),
        ("early", Some(t(10_000)), vec![]),
        ("tie-b", Some(t(20_000)), vec!["ci"]),
        ("tie-a", Some(t(20_000)), vec![]),
        ("retrying", Some(t(90_000)), vec!["ci"]),
        ("idle", None, vec![]),
        ("paused", Some(t(1_000)), vec![]),
        ("gone", Some(t(2_000)), vec!["ci"]),
    ] {
        let mut new = new_loop(name, next);
        new.labels = labels.into_iter().map(str::to_owned).collect();
        made.insert(name, store.create_loop(new, t(0)).unwrap());
    }
    let set = |name: &str, status: LoopStatus, retry: Option<Instant>| {
        let lp = &made[name];
        let advance = LoopAdvance {
            status,
            next_run_at: lp.next_run_at,
            retry_scheduled_for: retry,
        };
        store
            .update_loop_schedule(&lp.id, &advance, t(1), None)
            .unwrap();
    };
    // A retry earlier than its next slot puts "retrying" first.
    set("retrying", LoopStatus::Active, Some(t(5_000)));
    set("paused", LoopStatus::Paused, None);
    set("gone", LoopStatus::Archived, None);
    let next = LoopFilter {
        order: LoopOrder::NextSlot,
        ..LoopFilter::default()
    };
    let rows = |f: &LoopFilter| names(store.loop_rows_matching(f).unwrap());
    assert_eq!(rows(&next), ["retrying", "early", "tie-a", "tie-b", "late"]);
    assert_eq!(store.count_loops(&next).unwrap(), 5);
    let paged = LoopFilter {
        offset: 1,
        limit: Some(2),
        ..next.clone()
    };
    assert_eq!(rows(&paged), ["early", "tie-a"]);
    assert_eq!(store.count_loops(&paged).unwrap(), 5);
    let ci = LoopFilter {
        labels: vec!["ci".into()],
        ..next.clone()
    };
    assert_eq!(rows(&ci), ["retrying", "tie-b", "late"]);
    assert_eq!(store.count_loops(&ci).unwrap(), 3);
    // A status other than active has no next slot to order by.
    let paused = LoopFilter {
        status: Some(LoopStatus::Paused),
        ..next.clone()
    };
    assert!(rows(&paused).is_empty());
    assert_eq!(store.count_loops(&paused).unwrap(), 0);
    // Counts in name order follow the same filters as the listing.
    assert_eq!(store.count_loops(&LoopFilter::default()).unwrap(), 7);
    let all = LoopFilter {
        include_archived: true,
        limit: Some(1),
        ..LoopFilter::default()
    };
    assert_eq!(store.count_loops(&all).unwrap(), 8);
    assert_eq!(store.count_loops(&labelled(&["ci"])).unwrap(), 3);
    assert_eq!(
        store
            .count_loops(&LoopFilter {
                status: Some(LoopStatus::Paused),
                ..LoopFilter::default()
            })
            .unwrap(),
        1
    );
    assert_eq!(store.count_loops(&labelled(&["nope"])).unwrap(), 0);
}

/// Runs filtered by statuses (any of them), a creation window (since inclusive, until
/// exclusive), a loop and labels, combined, newest first, with the limit applied last.
pub fn list_runs_filters_by_status_window_loop_and_labels(db: &dyn TestDb) {
    let store = db.open();
    let mut a = new_loop("a", None);
    a.labels = vec!["team".into()];
    let a = store.create_loop(a, t(0)).unwrap();
    let b = store.create_loop(new_loop("b", None), t(0)).unwrap();
    let mut ids = std::collections::HashMap::new();
    for (lp, at, status) in [
        (&a, 1_000, Some(RunStatus::Succeeded)),
        (&b, 1_500, Some(RunStatus::Failed)),
        (&a, 2_000, Some(RunStatus::Failed)),
        (&b, 2_500, Some(RunStatus::Succeeded)),
        (&a, 3_000, Some(RunStatus::TimedOut)),
        (&b, 3_500, None),
    ] {
        let run = claim(&*store, &claim_req(lp, t(at), t(at))).unwrap();
        if let Some(status) = status {
            finish(&*store, &run.id, outcome(status, t(at + 100))).unwrap();
        }
        ids.insert(run.id.clone(), format!("{}{at}", lp.name));
    }
    let list = |f: RunFilter| -> Vec<String> {
        store
            .list_runs(&f)
            .unwrap()
            .iter()
            .map(|r| ids[&r.id].clone())
            .collect()
    };
    let statuses = |s: &[RunStatus]| RunFilter {
        statuses: s.to_vec(),
        ..RunFilter::default()
    };
    assert_eq!(list(statuses(&[RunStatus::Failed])), ["a2000", "b1500"]);
    assert_eq!(
        list(statuses(&[RunStatus::Failed, RunStatus::TimedOut])),
        ["a3000", "a2000", "b1500"]
    );
    assert_eq!(list(statuses(&[RunStatus::Running])), ["b3500"]);
    assert_eq!(
        list(RunFilter {
            since: Some(t(2_000)),
            ..RunFilter::default()
        }),
        ["b3500", "a3000", "b2500", "a2000"]
    );
    assert_eq!(
        list(RunFilter {
            until: Some(t(2_000)),
            ..RunFilter::default()
        }),
        ["b1500", "a1000"]
    );
    assert_eq!(
        list(RunFilter {
            since: Some(t(1_500)),
            until: Some(t(3_000)),
            ..statuses(&[RunStatus::Failed])
        }),
        ["a2000", "b1500"]
    );
    assert_eq!(
        list(RunFilter {
            loop_id: Some(a.id.clone()),
            ..statuses(&[RunStatus::Failed, RunStatus::TimedOut])
        }),
        ["a3000", "a2000"]
    );
    let team = RunFilter {
        labels: vec!["team".into()],
        ..RunFilter::default()
    };
    assert_eq!(list(team.clone()), ["a3000", "a2000", "a1000"]);
    assert_eq!(
        list(RunFilter {
            statuses: vec![RunStatus::Failed],
            ..team.clone()
        }),
        ["a2000"]
    );
    assert_eq!(
        list(RunFilter {
            loop_id: Some(b.id.clone()),
            ..team
        }),
        Vec::<String>::new()
    );
    assert!(list(RunFilter {
        labels: vec!["nope".into()],
        ..RunFilter::default()
    })
    .is_empty());
    assert_eq!(
        list(RunFilter {
            limit: Some(1),
            ..statuses(&[RunStatus::Failed])
        }),
        ["a2000"]
    );
}
