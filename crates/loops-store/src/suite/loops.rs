//! Loop rows: create, look up, list, move, remove, the due index, parking, expiry.

use super::{acquired, holder};
use super::{archive, claim, claim_req, new_loop, run_count, t, TestDb};
use crate::{DaemonLease, Fence, LoopAdvance, RunFilter, SlotMove, StoreError};
use loops_core::{LoopId, LoopStatus, RunStatus};

/// Ids are 12 lowercase hex characters; a loop reads back as created, by id, name and
/// any prefix of its id; names are unique.
pub fn create_get_by_name_prefix_and_duplicate(db: &dyn TestDb) {
    let store = db.open();
    let created = store
        .create_loop(new_loop("alpha", Some(t(1000))), t(0))
        .unwrap();
    assert_eq!(created.id.as_str().len(), 12);
    assert!(created
        .id
        .as_str()
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_eq!(created.status, LoopStatus::Active);
    assert_eq!(created.name, "alpha");
    assert_eq!(created.next_run_at, Some(t(1000)));
    assert_eq!(created.created_at, t(0));
    assert_eq!(created.updated_at, t(0));
    assert_eq!(created.max_attempts, 1);
    assert_eq!(created.lease_ms, 30 * 60_000);

    let got = store.get_loop(&created.id).unwrap().unwrap();
    assert_eq!(got, created);
    assert_eq!(store.get_loop_by_name("alpha").unwrap().unwrap(), created);
    assert!(store.get_loop_by_name("nope").unwrap().is_none());
    assert!(store
        .get_loop(&LoopId::new("000000000000"))
        .unwrap()
        .is_none());

    for len in 1..=12 {
        let prefix = &created.id.as_str()[..len];
        let found = store.loops_with_id_prefix(prefix, 10).unwrap();
        assert!(found.iter().any(|l| l.id == created.id), "prefix {prefix}");
        assert!(found.iter().all(|l| l.id.as_str().starts_with(prefix)));
    }
    assert!(store.loops_with_id_prefix("zz", 10).unwrap().is_empty());
    assert!(store.loops_with_id_prefix("%", 10).unwrap().is_empty());

    let err = store
        .create_loop(new_loop("alpha", None), t(5))
        .unwrap_err();
    assert!(
        matches!(err, StoreError::DuplicateName(ref n) if n == "alpha"),
        "{err:?}"
    );
    assert_eq!(store.list_loops(None).unwrap().len(), 1);
}

/// A prefix lookup returns at most `limit` loops.
pub fn prefix_lookup_respects_limit(db: &dyn TestDb) {
    let store = db.open();
    for i in 0..40 {
        store
            .create_loop(new_loop(&format!("l{i}"), None), t(0))
            .unwrap();
    }
    assert_eq!(store.loops_with_id_prefix("", 5).unwrap().len(), 5);
    let all = store.loops_with_id_prefix("", 100).unwrap();
    assert_eq!(all.len(), 40);
}

/// Listings are ordered by name and filter by status.
pub fn list_loops_orders_by_name_and_filters_status(db: &dyn TestDb) {
    let store = db.open();
    for name in ["charlie", "alpha", "bravo"] {
        store.create_loop(new_loop(name, None), t(0)).unwrap();
    }
    let names: Vec<_> = store
        .list_loops(None)
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, ["alpha", "bravo", "charlie"]);

    let bravo = store.get_loop_by_name("bravo").unwrap().unwrap();
    let advance = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    let updated = store
        .update_loop_schedule(&bravo.id, &advance, t(10), None)
        .unwrap();
    assert_eq!(updated.status, LoopStatus::Paused);
    assert_eq!(updated.updated_at, t(10));
    let paused = store.list_loops(Some(LoopStatus::Paused)).unwrap();
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].name, "bravo");
    assert_eq!(store.list_loops(Some(LoopStatus::Active)).unwrap().len(), 2);
}

/// A loop's schedule state round-trips; a missing loop is an error.
pub fn update_loop_schedule_roundtrip_and_missing(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let advance = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(60_000)),
        retry_scheduled_for: Some(t(0)),
    };
    let updated = store
        .update_loop_schedule(&lp.id, &advance, t(5), None)
        .unwrap();
    assert_eq!(updated.next_run_at, Some(t(60_000)));
    assert_eq!(updated.retry_scheduled_for, Some(t(0)));
    assert_eq!(store.get_loop(&lp.id).unwrap().unwrap(), updated);

    let err = store
        .update_loop_schedule(&LoopId::new("ffffffffffff"), &advance, t(5), None)
        .unwrap_err();
    assert!(matches!(err, StoreError::LoopNotFound(_)), "{err:?}");
}

/// Due loops come earliest first, up to the limit, active ones only; `nextRunAt ==
/// now` is due.
pub fn due_loops_order_limit_and_paused_excluded(db: &dyn TestDb) {
    let store = db.open();
    let c = store
        .create_loop(new_loop("c", Some(t(300))), t(0))
        .unwrap();
    let a = store
        .create_loop(new_loop("a", Some(t(100))), t(0))
        .unwrap();
    let b = store
        .create_loop(new_loop("b", Some(t(200))), t(0))
        .unwrap();
    let _later = store
        .create_loop(new_loop("later", Some(t(10_000))), t(0))
        .unwrap();
    let _never = store.create_loop(new_loop("never", None), t(0)).unwrap();

    let due: Vec<_> = store
        .due_loops(t(500), 10)
        .unwrap()
        .into_iter()
        .map(|l| l.unwrap().id)
        .collect();
    assert_eq!(due, [a.id.clone(), b.id.clone(), c.id.clone()]);
    let due: Vec<_> = store
        .due_loops(t(500), 2)
        .unwrap()
        .into_iter()
        .map(|l| l.unwrap().id)
        .collect();
    assert_eq!(due, [a.id.clone(), b.id.clone()]);
    // Boundary: next_run_at == now is due.
    assert_eq!(store.due_loops(t(100), 10).unwrap().len(), 1);
    assert_eq!(store.next_due_at().unwrap(), Some(t(100)));

    let pause = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: Some(t(100)),
        retry_scheduled_for: None,
    };
    store
        .update_loop_schedule(&a.id, &pause, t(1), None)
        .unwrap();
    let due: Vec<_> = store
        .due_loops(t(500), 10)
        .unwrap()
        .into_iter()
        .map(|l| l.unwrap().id)
        .collect();
    assert_eq!(due, [b.id, c.id]);
    assert_eq!(store.next_due_at().unwrap(), Some(t(200)));
}

/// No loop, or no loop with a next slot: nothing is due.
pub fn next_due_at_empty(db: &dyn TestDb) {
    let store = db.open();
    assert_eq!(store.next_due_at().unwrap(), None);
    store.create_loop(new_loop("x", None), t(0)).unwrap();
    assert_eq!(store.next_due_at().unwrap(), None);
}

/// Only active loops past their expiry expire, once.
pub fn expire_loops_marks_only_active_past_expiry(db: &dyn TestDb) {
    let store = db.open();
    let mut n = new_loop("expiring", Some(t(100)));
    n.policy.expires_at = Some(t(1000));
    let exp = store.create_loop(n, t(0)).unwrap();
    let mut n = new_loop("future", Some(t(100)));
    n.policy.expires_at = Some(t(5000));
    store.create_loop(n, t(0)).unwrap();
    store
        .create_loop(new_loop("forever", Some(t(100))), t(0))
        .unwrap();

    assert!(store.expire_loops(t(999), None).unwrap().is_empty());
    let expired = store.expire_loops(t(1000), None).unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].id, exp.id);
    assert_eq!(expired[0].status, LoopStatus::Expired);
    assert_eq!(expired[0].next_run_at, None);
    assert_eq!(
        store.get_loop(&exp.id).unwrap().unwrap().status,
        LoopStatus::Expired
    );
    // Idempotent.
    assert!(store.expire_loops(t(2000), None).unwrap().is_empty());
}

/// A pass's reads in one call: `None` while an active loop is past its expiry (the
/// pass expires it first), otherwise (when answered) exactly `due_loops_on`'s loops.
pub fn due_loops_unless_expiring_yields_to_expiry(db: &dyn TestDb) {
    let store = db.open();
    let mut n = new_loop("expiring", Some(t(100)));
    n.policy.expires_at = Some(t(1000));
    store.create_loop(n, t(0)).unwrap();
    store
        .create_loop(new_loop("a", Some(t(200))), t(0))
        .unwrap();
    store
        .create_loop(new_loop("b", Some(t(300))), t(0))
        .unwrap();
    store
        .create_loop(new_loop("later", Some(t(5000))), t(0))
        .unwrap();
    let ids = |due: Vec<Result<crate::Loop, crate::UnreadableLoop>>| -> Vec<LoopId> {
        due.into_iter().map(|r| r.unwrap().id).collect()
    };
    let answered_as_due_loops_on = |now, limit| {
        if let Some(due) = store.due_loops_unless_expiring(now, limit, &[]).unwrap() {
            let expected = ids(store.due_loops_on(now, limit, &[]).unwrap());
            assert!(!expected.is_empty());
            assert_eq!(ids(due), expected);
        }
    };
    answered_as_due_loops_on(t(150), 10);
    answered_as_due_loops_on(t(999), 10);
    answered_as_due_loops_on(t(999), 2);
    for now in [t(1000), t(6000)] {
        assert!(store
            .due_loops_unless_expiring(now, 10, &[])
            .unwrap()
            .is_none());
    }
    assert_eq!(store.expire_loops(t(1000), None).unwrap().len(), 1);
    answered_as_due_loops_on(t(1000), 10);
    answered_as_due_loops_on(t(6000), 10);
}

/// Removing a loop removes its runs, and frees its name.
pub fn remove_loop_deletes_its_runs(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let other = store.create_loop(new_loop("b", Some(t(0))), t(0)).unwrap();
    claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    claim(&*store, &claim_req(&other, t(0), t(1))).unwrap();
    assert!(store.remove_loop(&lp.id).unwrap());
    assert!(!store.remove_loop(&lp.id).unwrap());
    assert!(store.get_loop(&lp.id).unwrap().is_none());
    let runs = store.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].loop_id, other.id);
    // The name is free again.
    store.create_loop(new_loop("a", None), t(2)).unwrap();
}

/// A due row that does not decode is reported in its place, naming the column, and
/// does not hide the others.
pub fn due_loops_reports_an_unreadable_row_in_its_place(db: &dyn TestDb) {
    let store = db.open();
    let good = store
        .create_loop(new_loop("good", Some(t(10))), t(0))
        .unwrap();
    let bad = store
        .create_loop(new_loop("bad", Some(t(5))), t(0))
        .unwrap();
    db.spoil_loop_row(&bad.id);
    let due = store.due_loops(t(100), 10).unwrap();
    assert_eq!(due.len(), 2, "the bad row does not hide the good one");
    let unreadable = due[0].as_ref().unwrap_err();
    assert_eq!(unreadable.id, bad.id);
    assert_eq!(unreadable.name, "bad");
    assert!(unreadable.error.contains("catch_up"), "{unreadable:?}");
    assert_eq!(due[1].as_ref().unwrap().id, good.id);
}

/// Parking pauses an active loop and records a failed run saying why, in one fenced
/// write; a parked loop is no longer due.
pub fn park_loop_pauses_it_and_records_why_in_one_write(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(new_loop("tz", Some(t(10))), t(0))
        .unwrap();
    let run = store
        .park_loop(&lp.id, "cannot parse", t(20), None)
        .unwrap()
        .expect("parked");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.scheduled_for, t(10), "at the slot it could not run");
    assert_eq!(run.error.as_deref(), Some("cannot parse"));
    assert_eq!(run.attempt, 1);
    let parked = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(parked.status, LoopStatus::Paused);
    assert_eq!(
        parked.next_run_at,
        Some(t(10)),
        "resume tries the slot again"
    );
    assert!(store.due_loops(t(100), 10).unwrap().is_empty());
    assert_eq!(store.next_due_at().unwrap(), None, "no longer wakes anyone");
    // Parking again (no longer active) changes nothing.
    assert!(store
        .park_loop(&lp.id, "again", t(30), None)
        .unwrap()
        .is_none());
    assert_eq!(run_count(&*store), 1);
    // Fenced like every daemon write.
    let other = store
        .create_loop(new_loop("other", Some(t(10))), t(0))
        .unwrap();
    let never = |_: &DaemonLease| false;
    let always = |_: &DaemonLease| true;
    let old = acquired(
        store
            .acquire_daemon_lease(&holder("d1"), 60_000, t(0), &never)
            .unwrap(),
    );
    acquired(
        store
            .acquire_daemon_lease(&holder("d2"), 60_000, t(1), &always)
            .unwrap(),
    );
    let err = store
        .park_loop(&other.id, "x", t(40), Some(&Fence { token: old.token }))
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost), "{err:?}");
    assert_eq!(
        store.get_loop(&other.id).unwrap().unwrap().status,
        LoopStatus::Active
    );
}

/// Labels and notification settings are stored with the loop and read back as given
/// (labels sorted and unique, as validation hands them over).
pub fn labels_and_notify_round_trip(db: &dyn TestDb) {
    let store = db.open();
    let mut new = new_loop("tagged", Some(t(0)));
    new.labels = vec!["ci".into(), "nightly".into()];
    new.notify = Some(loops_core::Notify {
        cmd: Some("notify-send loops".into()),
        url: Some("https://hooks.example.com/T/B/x".into()),
        on: loops_core::NotifyOn::Always,
    });
    let created = store.create_loop(new.clone(), t(0)).unwrap();
    assert_eq!(created.labels, new.labels);
    assert_eq!(created.notify, new.notify);
    let read = store.get_loop(&created.id).unwrap().unwrap();
    assert_eq!(read.labels, new.labels);
    assert_eq!(read.notify, new.notify);
    let plain = store.create_loop(new_loop("plain", None), t(0)).unwrap();
    assert!(plain.labels.is_empty());
    assert_eq!(plain.notify, None);
}

/// With a jitter the loop becomes due at its slot plus the slot's stable delay: the
/// due index follows it as the loop moves, and a claim records when its attempt
/// became due.
pub fn jitter_moves_the_due_instant_with_each_slot(db: &dyn TestDb) {
    let store = db.open();
    let mut new = new_loop("jittery", Some(t(60_000)));
    new.policy.jitter_ms = 30_000;
    let lp = store.create_loop(new, t(0)).unwrap();
    let delay =
        |slot| i64::try_from(loops_core::schedule::jitter_delay(&lp.id, slot, 30_000)).unwrap();
    let due = t(60_000 + delay(t(60_000)));
    assert_eq!(lp.jitter_ms, 30_000);
    assert_eq!(lp.due_at, Some(due));
    // Not due at its slot, only at its jittered instant.
    if due > t(60_000) {
        assert!(store.due_loops(t(60_000), 10).unwrap().is_empty());
    }
    assert_eq!(store.due_loops(due, 10).unwrap().len(), 1);
    assert_eq!(store.next_due_at().unwrap(), Some(due));
    // Moving the loop moves its due instant with the new slot's own delay.
    let advance = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(120_000)),
        retry_scheduled_for: None,
    };
    let moved = store
        .update_loop_schedule(&lp.id, &advance, t(1), None)
        .unwrap();
    assert_eq!(moved.due_at, Some(t(120_000 + delay(t(120_000)))));
    // A claim of the slot records when the attempt became due.
    let run = claim(&*store, &claim_req(&moved, t(120_000), t(200_000))).unwrap();
    assert_eq!(run.due_at, moved.due_at);
    // A pending retry keeps its slot's delay.
    let retry = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(500_000)),
        retry_scheduled_for: Some(t(120_000)),
    };
    let retrying = store
        .update_loop_schedule(&lp.id, &retry, t(2), None)
        .unwrap();
    assert_eq!(retrying.due_at, Some(t(500_000 + delay(t(120_000)))));
}

/// Slots moved back after the clock went back: in one write, each loop only while it is
/// as it was read (a loop moved, paused, given another jitter or removed meanwhile is
/// left alone), its due instant following the new slot, one `loop_changed` event each.
pub fn move_slots_back_moves_only_loops_still_as_read(db: &dyn TestDb) {
    let store = db.open();
    assert!(store.move_slots_back(&[], t(0), None).unwrap().is_empty());
    let day = 86_400_000;
    let ahead = |name: &str, jitter_ms: u64| {
        let mut new = new_loop(name, Some(t(day)));
        new.policy.jitter_ms = jitter_ms;
        store.create_loop(new, t(0)).unwrap()
    };
    let (kept, moved_meanwhile, paused, jittered, removed) = (
        ahead("kept", 30_000),
        ahead("moved-meanwhile", 0),
        ahead("paused", 0),
        ahead("jittered", 0),
        ahead("removed", 0),
    );
    let moves: Vec<SlotMove> = [&kept, &moved_meanwhile, &paused, &jittered, &removed]
        .into_iter()
        .map(|lp| SlotMove {
            read: lp.clone(),
            to: t(60_000),
        })
        .collect();
    // Between the read and the move, another writer changes four of them.
    let advance = |status, next| LoopAdvance {
        status,
        next_run_at: Some(next),
        retry_scheduled_for: None,
    };
    let other = store
        .update_loop_schedule(
            &moved_meanwhile.id,
            &advance(LoopStatus::Active, t(2 * day)),
            t(1),
            None,
        )
        .unwrap();
    store
        .update_loop_schedule(&paused.id, &advance(LoopStatus::Paused, t(day)), t(1), None)
        .unwrap();
    let mut def = super::definitions::unchanged(&jittered);
    def.definition.policy.jitter_ms = 5_000;
    let rejittered = store
        .update_loop_definition(&jittered.id, &def, &crate::LoopVersion::of(&jittered), t(1))
        .unwrap()
        .unwrap();
    assert!(store.remove_loop(&removed.id).unwrap());
    let seq = store.event_bounds().unwrap().latest;

    let moved = store.move_slots_back(&moves, t(2), None).unwrap();
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!(moved[0].id, kept.id);
    assert_eq!(moved[0].next_run_at, Some(t(60_000)));
    assert_eq!(moved[0].due_at, moves[0].due_at());
    assert_ne!(moved[0].due_at, Some(t(60_000)), "the jitter applies");
    assert_eq!(moved[0].updated_at, t(2));
    assert_eq!(store.get_loop(&kept.id).unwrap().unwrap(), moved[0]);
    assert_eq!(store.get_loop(&moved_meanwhile.id).unwrap().unwrap(), other);
    let still_paused = store.get_loop(&paused.id).unwrap().unwrap();
    assert_eq!(
        (still_paused.status, still_paused.next_run_at),
        (LoopStatus::Paused, Some(t(day)))
    );
    assert_eq!(store.get_loop(&jittered.id).unwrap().unwrap(), rejittered);
    assert!(store.get_loop(&removed.id).unwrap().is_none());
    let events = store.events_after(seq, 10).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0].body.kind,
        loops_core::event::EventKind::LoopChanged
    );
    assert_eq!(events[0].body.loop_id.as_ref(), Some(&kept.id));
}

/// `after_name` pages by name: only loops whose names sort after it, counted alike;
/// with a limit, the next page of a walk that a removed loop does not shift.
pub fn after_name_starts_a_page_after_that_name(db: &dyn TestDb) {
    let store = db.open();
    for name in ["charlie", "alpha", "delta", "bravo"] {
        store.create_loop(new_loop(name, None), t(0)).unwrap();
    }
    let names = |filter: &crate::LoopFilter| -> Vec<String> {
        store
            .loop_rows_matching(filter)
            .unwrap()
            .into_iter()
            .map(|row| row.unwrap().name)
            .collect()
    };
    let after = |name: &str, limit| crate::LoopFilter {
        after_name: Some(name.to_owned()),
        limit,
        ..crate::LoopFilter::default()
    };
    assert_eq!(names(&after("bravo", None)), ["charlie", "delta"]);
    assert_eq!(store.count_loops(&after("bravo", None)).unwrap(), 2);
    assert_eq!(names(&after("b", Some(1))), ["bravo"]);
    // The page after "alpha" is the same with "alpha" gone.
    let alpha = store.get_loop_by_name("alpha").unwrap().unwrap();
    assert!(store.remove_loop(&alpha.id).unwrap());
    assert_eq!(names(&after("alpha", Some(2))), ["bravo", "charlie"]);
    assert!(names(&after("delta", None)).is_empty());
}

/// `LoopOrder::Id` lists by id and `after_id` pages by it: each page the loops whose
/// ids sort after the last one, counted alike; a walk in pages of two meets every loop
/// once, archived ones too when asked for, and a removed loop shifts no later page.
pub fn after_id_walks_the_loops_in_id_order(db: &dyn TestDb) {
    let store = db.open();
    for name in ["e", "b", "d", "a", "c"] {
        store.create_loop(new_loop(name, None), t(0)).unwrap();
    }
    let b = store.get_loop_by_name("b").unwrap().unwrap();
    archive(&*store, &b, t(1));
    let ids = |filter: &crate::LoopFilter| -> Vec<LoopId> {
        store
            .loop_rows_matching(filter)
            .unwrap()
            .into_iter()
            .map(|row| row.unwrap().id)
            .collect()
    };
    let page = |after: Option<&LoopId>, limit| crate::LoopFilter {
        include_archived: true,
        order: crate::LoopOrder::Id,
        after_id: after.cloned(),
        limit,
        ..crate::LoopFilter::default()
    };
    let all = ids(&page(None, None));
    assert_eq!(all.len(), 5, "the archived loop too");
    assert!(all.windows(2).all(|w| w[0] < w[1]), "by id: {all:?}");
    let mut walked = Vec::new();
    let mut after = None;
    loop {
        let next = ids(&page(after.as_ref(), Some(2)));
        walked.extend(next.iter().cloned());
        match next.last() {
            Some(last) if next.len() == 2 => after = Some(last.clone()),
            _ => break,
        }
    }
    assert_eq!(walked, all);
    assert_eq!(ids(&page(Some(&all[1]), None)), all[2..]);
    assert_eq!(store.count_loops(&page(Some(&all[1]), None)).unwrap(), 3);
    // Without archived ones by default; the page after a removed loop is unchanged.
    let active = crate::LoopFilter {
        include_archived: false,
        ..page(Some(&all[0]), None)
    };
    let expected: Vec<_> = all[1..].iter().filter(|id| **id != b.id).cloned().collect();
    assert_eq!(ids(&active), expected);
    assert!(store.remove_loop(&all[0]).unwrap());
    assert_eq!(ids(&page(Some(&all[0]), Some(2))), all[1..3]);
}
