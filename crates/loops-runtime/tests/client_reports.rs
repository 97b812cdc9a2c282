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
