//! The library side of issue #11 items 6, 9 and 11: `Client::health`, `export` /
//! `import_bundle` and `usage`, as an embedding program calls them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::Utc;
use loops_core::bundle::{Action, OnConflict};
use loops_core::health::Verdict;
use loops_core::usage::GroupBy;
use loops_core::{Anchor, CommandTarget, Policy, Schedule, Target};
use loops_runtime::client::{Client, ImportOptions, LoopDefinition};
use std::collections::BTreeMap;

fn def(name: &str, labels: &[&str], env: &[(&str, &str)]) -> LoopDefinition {
    LoopDefinition {
        name: name.into(),
        description: None,
        schedule: Schedule::Interval {
            every_ms: 3_600_000,
            anchor: Anchor::FixedRate,
        },
        target: Target::Command(CommandTarget {
            command: "true".into(),
            args: vec![],
            cwd: None,
            shell: true,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        notify: None,
    }
}

#[test]
fn export_then_import_bundle_round_trips_and_refuses_conflicts_as_a_whole() {
    let src_dir = tempfile::tempdir().unwrap();
    let src = Client::open(src_dir.path()).unwrap();
    src.create(def("alpha", &["ops"], &[("TOKEN", "t0k")]), Utc::now())
        .unwrap();
    src.create(def("beta", &[], &[]), Utc::now()).unwrap();

    let redacted = src.export(&[], false, Utc::now()).unwrap();
    assert_eq!(redacted.format, "loops-bundle");
    assert_eq!(redacted.version, 2);
    assert_eq!(redacted.loops.len(), 2);
    assert_eq!(redacted.redacted.len(), 1);
    assert_eq!(redacted.redacted[0].field, "target.env.TOKEN");
    let ops = src.export(&["ops".into()], true, Utc::now()).unwrap();
    assert_eq!(ops.loops.len(), 1);
    assert!(src.export(&["Bad".into()], true, Utc::now()).is_err());

    let dst_dir = tempfile::tempdir().unwrap();
    let dst = Client::open(dst_dir.path()).unwrap();
    dst.create(def("beta", &[], &[]), Utc::now()).unwrap();
    let text = serde_json::to_string(&src.export(&[], true, Utc::now()).unwrap()).unwrap();
    // A preview names the conflict and writes nothing.
    let preview = dst
        .import_bundle(&text, ImportOptions::default(), Utc::now())
        .unwrap();
    assert!(!preview.applied);
    let actions: Vec<Action> = preview.loops.iter().map(|l| l.planned.action).collect();
    assert_eq!(actions, [Action::Create, Action::Conflict]);
    assert_eq!(preview.refusals(false).len(), 1);
    let apply = ImportOptions {
        apply: true,
        ..ImportOptions::default()
    };
    let err = dst.import_bundle(&text, apply, Utc::now()).unwrap_err();
    assert!(
        err.to_string()
            .contains("loop \"beta\": a loop with this name exists"),
        "{err}"
    );
    assert_eq!(dst.list(None).unwrap().len(), 1, "nothing written");
    // Renamed: both written, in one go.
    let done = dst
        .import_bundle(
            &text,
            ImportOptions {
                on_conflict: OnConflict::Rename,
                ..apply
            },
            Utc::now(),
        )
        .unwrap();
    assert!(done.applied);
    assert_eq!(done.loops[1].planned.as_name.as_deref(), Some("beta-2"));
    assert!(done.loops.iter().all(|l| l.id.is_some()));
    assert_eq!(dst.list(None).unwrap().len(), 3);
    // An unknown version: refused before anything else.
    let newer = text.replace("\"version\":2", "\"version\":7");
    let err = dst.import_bundle(&newer, apply, Utc::now()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unsupported bundle version 7 (this loops reads versions 1 to 2)"
    );
}

#[test]
fn health_and_usage_of_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    let report = client.health(Utc::now(), &[]).unwrap();
    assert!(report.loops.is_empty());
    assert_eq!(report.verdict(), Verdict::Ok);
    client
        .create(def("alpha", &["ops"], &[]), Utc::now())
        .unwrap();
    client.create(def("beta", &[], &[]), Utc::now()).unwrap();
    let report = client.health(Utc::now(), &[]).unwrap();
    assert_eq!(report.loops.len(), 2);
    // New loops without runs yet are fine.
    assert_eq!(report.count(Verdict::Ok), 2, "{:?}", report.loops);
    let ops = client.health(Utc::now(), &["ops".into()]).unwrap();
    assert_eq!(ops.loops.len(), 1);
    assert_eq!(ops.loops[0].loop_name, "alpha");
    assert!(client.health(Utc::now(), &["No Label".into()]).is_err());

    let usage = client.usage(Utc::now(), GroupBy::Provider).unwrap();
    assert!(usage.groups.is_empty());
    assert_eq!(usage.total.runs, 0);
    assert_eq!(usage.total.cost_usd, None);
}

/// `each_matching` hands out `list_matching`'s loops one at a time, marked alike, for
/// each filter, and none after its visitor breaks (`loops list` of 100,000 loops).
#[test]
fn each_matching_hands_out_the_listed_loops_one_at_a_time() {
    use loops_store::LoopFilter;
    use std::ops::ControlFlow;
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    // Names no loop id can start with: a name that is a prefix of an id is refused.
    for (name, labels) in [
        ("loop-c", &["ops"][..]),
        ("loop-a", &[]),
        ("loop-b", &["ops", "db"]),
    ] {
        client
            .create(def(name, labels, &[("K", "v")]), Utc::now())
            .unwrap();
    }
    client.archive("loop-a", false, Utc::now()).unwrap();
    let now = Utc::now();
    for filter in [
        LoopFilter::default(),
        LoopFilter {
            include_archived: true,
            ..LoopFilter::default()
        },
        LoopFilter {
            labels: vec!["ops".into()],
            ..LoopFilter::default()
        },
    ] {
        let mut handed = Vec::new();
        client
            .each_matching(&filter, now, |lp| {
                handed.push(lp);
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(handed, client.list_matching(&filter).unwrap(), "{filter:?}");
    }
    let mut seen = 0;
    client
        .each_matching(&LoopFilter::default(), now, |_| {
            seen += 1;
            ControlFlow::Break(())
        })
        .unwrap();
    assert_eq!(seen, 1);
    let bad = LoopFilter {
        labels: vec!["No Label".into()],
        ..LoopFilter::default()
    };
    assert!(client
        .each_matching(&bad, now, |_| ControlFlow::Continue(()))
        .is_err());
}

/// `health` reads and judges the loops a batch at a time in id order: any batch size
/// gives the report of one batch of all of them — loops with varied histories (none,
/// failing, succeeding, skipped slots), paused and archived ones, labels, and a row
/// that cannot be decoded. A row whose id cannot be read either (a blob, after every
/// text id) gives a walk no place to go on from: the loops are then judged all at
/// once, each once.
#[test]
fn health_in_batches_is_the_report_of_one_batch() {
    use chrono::TimeDelta;
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    let now = Utc::now();
    let hour = TimeDelta::hours(1);
    // Created now, their runs of the hours before: every verdict, no slot missed.
    let created = now;
    for k in 0..23 {
        let labels: &[&str] = if k % 4 == 0 { &["ops"] } else { &[] };
        client
            .create(def(&format!("l{k:02}"), labels, &[]), created)
            .unwrap();
    }
    client.pause("l03", now).unwrap();
    client.archive("l07", false, now).unwrap();
    let conn = rusqlite::Connection::open(dir.path().join(loops_store::DB_FILE)).unwrap();
    let loops: Vec<(String, String)> = conn
        .prepare("SELECT id, name FROM loops ORDER BY name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let statuses = ["succeeded", "failed", "skipped", "timed_out", "failed"];
    for (k, (id, name)) in loops.iter().enumerate() {
        let runs = (k % 6) * 5;
        for slot in 0..runs {
            let at = (now - hour * (runs - slot) as i32).timestamp_millis();
            // Every fifth loop only succeeds; the others cycle through the statuses.
            let status = statuses[if k % 5 == 4 {
                0
            } else {
                (k + slot) % statuses.len()
            }];
            conn.execute(
                "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, \
                   source, started_at, finished_at, error, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, 1, ?5, 'scheduled', ?4, ?4, \
                   CASE WHEN ?5 IN ('failed', 'timed_out') THEN 'boom' END, ?4, ?4)",
                rusqlite::params![format!("{id}-{slot}"), id, name, at, status],
            )
            .unwrap();
        }
    }
    conn.execute(
        "UPDATE loops SET schedule_json = 'not json' WHERE name = 'l05'",
        [],
    )
    .unwrap();
    let each = |labels: &[String], batch| client.health_in_batches(now, labels, batch).unwrap();
    let ops = ["ops".to_owned()];
    let whole = each(&[], usize::MAX);
    assert_eq!(
        whole.loops.len(),
        21,
        "all but the archived and the paused one"
    );
    for verdict in [Verdict::Ok, Verdict::Warn, Verdict::Fail] {
        assert!(whole.count(verdict) > 1, "{verdict:?}: {:?}", whole.loops);
    }
    assert!(whole.loops.iter().any(|l| l.status.is_none()));
    assert!(whole
        .loops
        .windows(2)
        .all(|w| w[0].loop_name < w[1].loop_name));
    let whole_ops = each(&ops, usize::MAX);
    assert_eq!(
        whole_ops.loops.len(),
        7,
        "the six labelled and the unreadable one"
    );
    for batch in [1, 2, 3, 5, 22, 23, 24] {
        assert_eq!(each(&[], batch), whole, "batches of {batch}");
        assert_eq!(each(&ops, batch), whole_ops, "batches of {batch}, labelled");
    }
    assert_eq!(client.health(now, &[]).unwrap(), whole);

    // Two copies of a loop under blob ids: unreadable, each listed once whatever the
    // batches.
    conn.execute_batch(
        "CREATE TEMP TABLE copied AS SELECT * FROM loops WHERE name = 'l01';
         UPDATE copied SET id = X'ff00', name = 'zz-blob-1';
         INSERT INTO loops SELECT * FROM copied;
         UPDATE copied SET id = X'ff01', name = 'zz-blob-2';
         INSERT INTO loops SELECT * FROM copied;",
    )
    .unwrap();
    let whole = each(&[], usize::MAX);
    assert_eq!(whole.loops.len(), 23);
    for (line, name) in whole.loops[21..].iter().zip(["zz-blob-1", "zz-blob-2"]) {
        assert_eq!((line.loop_name.as_str(), line.status), (name, None));
    }
    // 25 rows, the blobs last: pages of 1, 2, 3, 6 and 24 end on one; of 5 and 25, no.
    for batch in [1, 2, 3, 5, 6, 24, 25] {
        assert_eq!(each(&[], batch), whole, "batches of {batch} with a blob id");
    }
}
