//! The library side of issue #11 items 1–3 and 8: `Client::edit` validates exactly as
//! `Client::create` does (same refusals, same messages, nothing written), keeps a
//! loop's id, history and status; archive/unarchive and the filtered listings.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{TimeDelta, Utc};
use loops_core::{
    Anchor, CommandTarget, Instant, LoopStatus, Notify, NotifyOn, Policy, RunStatus, Schedule,
    Target,
};
use loops_runtime::client::{Client, LoopDefinition, RunQuery};
use loops_store::LoopFilter;

fn def(name: &str) -> LoopDefinition {
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
            env: Default::default(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        labels: vec![],
        notify: None,
    }
}

/// One way to spoil a definition.
type Spoil = Box<dyn Fn(&mut LoopDefinition)>;

fn now() -> Instant {
    Utc::now()
}

#[test]
fn edit_refuses_what_create_refuses_with_the_same_message_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    let stored = client.create(def("base"), now()).unwrap();
    client.create(def("taken"), now()).unwrap();
    let an_hour_ago = Utc::now() - TimeDelta::hours(1);
    let bad: Vec<(&str, Spoil)> = vec![
        ("jitter", Box::new(|d| d.policy.jitter_ms = 3_600_000)),
        ("label", Box::new(|d| d.labels = vec!["Not Ok".into()])),
        ("attempts", Box::new(|d| d.policy.max_attempts = 0)),
        (
            "description",
            Box::new(|d| d.description = Some("x".repeat(5_000))),
        ),
        (
            "notify",
            Box::new(|d| {
                d.notify = Some(Notify {
                    cmd: None,
                    url: Some("ftp://example.com".into()),
                    on: NotifyOn::Failure,
                })
            }),
        ),
        (
            "relative cwd",
            Box::new(|d| {
                if let Target::Command(c) = &mut d.target {
                    c.cwd = Some("relative/dir".into());
                }
            }),
        ),
        (
            "expiry",
            // One instant for both calls: the message quotes it.
            Box::new(move |d| d.policy.expires_at = Some(an_hour_ago)),
        ),
        (
            "cron",
            Box::new(|d| {
                d.schedule = Schedule::Cron {
                    expression: "0 3 * * *".into(),
                    timezone: "Mars/Olympus_Mons".into(),
                }
            }),
        ),
    ];
    for (what, spoil) in bad {
        let mut fresh = def("fresh");
        spoil(&mut fresh);
        let created = client.create(fresh, now()).unwrap_err().to_string();
        let mut edited = LoopDefinition::from(&stored);
        spoil(&mut edited);
        edited.name = "fresh".into();
        let refused = client.edit("base", edited, now()).unwrap_err().to_string();
        // The messages name the loop by the name it was given.
        assert_eq!(refused, created, "{what}");
        assert_eq!(
            client.get("base").unwrap(),
            stored,
            "{what}: nothing written"
        );
    }
    // A new name follows create's rules; an unchanged one is not checked again.
    let mut renamed = LoopDefinition::from(&stored);
    renamed.name = "taken".into();
    let err = client.edit("base", renamed, now()).unwrap_err().to_string();
    assert_eq!(err, "a loop named \"taken\" already exists");
    let err = client.rename("base", "abcdef012345", now()).unwrap_err();
    assert!(err.to_string().contains("looks like a loop id"), "{err}");
    // The target's type is fixed.
    let mut agent = LoopDefinition::from(&stored);
    agent.target = Target::Workflow(loops_core::WorkflowTarget {
        workflow: "w".into(),
        timeout: None,
        params: Default::default(),
    });
    let err = client.edit("base", agent, now()).unwrap_err().to_string();
    assert!(err.contains("its type cannot be changed"), "{err}");
    assert_eq!(client.get("base").unwrap(), stored);
}

#[test]
fn edit_keeps_id_and_status_archive_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    let mut tagged = def("tagged");
    tagged.labels = vec!["ci".into()];
    let lp = client.create(tagged, now()).unwrap();
    client.pause("tagged", now()).unwrap();
    let mut edit = LoopDefinition::from(&client.get("tagged").unwrap());
    edit.description = Some("edited".into());
    edit.labels.push("nightly".into());
    let edited = client.edit("tagged", edit, now()).unwrap();
    assert_eq!(edited.id, lp.id);
    assert_eq!(edited.status, LoopStatus::Paused);
    assert_eq!(
        edited.next_run_at, lp.next_run_at,
        "same schedule, same slot"
    );
    assert_eq!(edited.labels, ["ci", "nightly"]);

    client.create(def("plain"), now()).unwrap();
    let by = |labels: &[&str]| -> Vec<String> {
        client
            .list_matching(&LoopFilter {
                labels: labels.iter().map(|l| (*l).to_owned()).collect(),
                ..LoopFilter::default()
            })
            .unwrap()
            .into_iter()
            .map(|l| l.name)
            .collect()
    };
    assert_eq!(by(&[]), ["plain", "tagged"]);
    assert_eq!(by(&["ci", "nightly"]), ["tagged"]);
    assert!(client
        .list_matching(&LoopFilter {
            labels: vec!["Bad".into()],
            ..LoopFilter::default()
        })
        .is_err());

    let archived = client.archive("tagged", false, now()).unwrap();
    assert_eq!(archived.status, LoopStatus::Archived);
    assert_eq!(by(&[]), ["plain"]);
    assert!(client.resume("tagged", now()).is_err());
    let freed = client.archive("tagged", true, now()).unwrap();
    assert_eq!(freed.name, format!("tagged~{}", lp.id));
    let back = client.unarchive(lp.id.as_str(), now()).unwrap();
    assert_eq!(back.status, LoopStatus::Paused);

    let runs = client
        .query_runs(&RunQuery {
            statuses: vec![RunStatus::Failed],
            since: Some(now() - TimeDelta::days(1)),
            ..RunQuery::default()
        })
        .unwrap();
    assert!(runs.is_empty());
    let err = client
        .query_runs(&RunQuery {
            since: Some(now()),
            until: Some(now() - TimeDelta::hours(1)),
            ..RunQuery::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("is not before --until"), "{err}");
}
