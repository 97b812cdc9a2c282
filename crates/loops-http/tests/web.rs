//! The dashboard's pages rendered from a real store (server-side render tests), and
//! its login, session cookie and CSRF rule over a real server on a free loopback port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::Utc;
use loops_core::{Anchor, CommandTarget, Policy, Schedule, Target};
use loops_http::web::OverviewQuery;
use loops_http::{ServeConfig, Server};
use loops_runtime::client::{Client, LoopDefinition};
use std::collections::BTreeMap;
use std::net::SocketAddr;

fn def(name: &str, command: &str, schedule: Schedule, labels: &[&str]) -> LoopDefinition {
    LoopDefinition {
        name: name.into(),
        description: None,
        schedule,
        target: Target::Command(CommandTarget {
            command: command.into(),
            args: vec![],
            cwd: None,
            shell: true,
            env: BTreeMap::from([("SECRET".to_owned(), "hunter2".to_owned())]),
            timeout: None,
            idle_timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        notify: None,
    }
}

fn every(ms: u64) -> Schedule {
    Schedule::Interval {
        every_ms: ms,
        anchor: Anchor::FixedRate,
    }
}

const EVIL: &str = "<script>alert(1)</script>";

/// A store with a warned loop named like a script (two failed runs), a cron loop
/// (one success) and a paused loop.
async fn store() -> (tempfile::TempDir, Client) {
    let dir = tempfile::tempdir().unwrap();
    let c = Client::open(dir.path()).unwrap();
    let now = Utc::now();
    let evil = c
        .create(
            def(EVIL, "echo boom >&2; exit 3", every(30_000), &["web"]),
            now,
        )
        .unwrap();
    let nightly = c
        .create(
            def(
                "nightly",
                "printf '\\033[32mgreen\\033[0m <b>'",
                Schedule::Cron {
                    expression: "0 2 * * *".into(),
                    timezone: "Europe/Berlin".into(),
                },
                &["db"],
            ),
            now,
        )
        .unwrap();
    let idle = c
        .create(def("idle", "true", every(3_600_000), &[]), now)
        .unwrap();
    c.pause(idle.id.as_str(), now).unwrap();
    for _ in 0..2 {
        c.start_run_now(evil.id.as_str(), true)
            .unwrap()
            .finish()
            .await
            .unwrap();
    }
    c.start_run_now(nightly.id.as_str(), true)
        .unwrap()
        .finish()
        .await
        .unwrap();
    (dir, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_escapes_names_and_shows_schedules_strips_and_counts() {
    let (_dir, c) = store().await;
    let html =
        loops_http::web::overview_html(&c, &OverviewQuery::default(), Utc::now(), "t0k").unwrap();
    // The name is text, never markup.
    assert!(!html.contains(EVIL), "{html}");
    // (askama writes numeric character references.)
    assert!(
        html.contains(">&#60;script&#62;alert(1)&#60;/script&#62;</a>"),
        "{}",
        html.lines()
            .filter(|l| l.contains("alert"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Schedules in words.
    assert!(html.contains("every 30s"));
    assert!(html.contains("at 02:00 Europe/Berlin"));
    // Two failed cells, one succeeded cell, each with its tooltip.
    assert_eq!(html.matches("<i class=f title=").count(), 2, "{html}");
    assert_eq!(html.matches("<i class=s title=").count(), 1, "{html}");
    assert!(html.contains(" failed\"></i>"));
    // The 24 h counters.
    assert!(html.contains("data-count=\"failed\">2<"), "{html}");
    assert!(html.contains("data-count=\"succeeded\">1<"), "{html}");
    // Health verdicts in words; the paused loop's status as text.
    assert!(html.contains("class=\"badge st-paused\">paused<"));
    assert!(html.contains("<meta name=\"loops-csrf\" content=\"t0k\">"));
    // Filters: by name, by label, by status.
    let only = |q: OverviewQuery| loops_http::web::overview_html(&c, &q, Utc::now(), "").unwrap();
    let by_name = only(OverviewQuery {
        name: "NIGHT".into(),
        ..OverviewQuery::default()
    });
    assert!(by_name.contains(">nightly</a>") && !by_name.contains("alert(1)"));
    let by_label = only(OverviewQuery {
        labels: vec!["web".into()],
        ..OverviewQuery::default()
    });
    assert!(by_label.contains("alert(1)") && !by_label.contains(">nightly</a>"));
    let paused = only(OverviewQuery {
        status: Some(loops_core::LoopStatus::Paused),
        ..OverviewQuery::default()
    });
    assert!(paused.contains(">idle</a>") && !paused.contains(">nightly</a>"));
}

/// The part of `html` from `start` to the first `end` after it.
fn between<'a>(html: &'a str, start: &str, end: &str) -> &'a str {
    let from = html
        .find(start)
        .unwrap_or_else(|| panic!("{start} in {html}"));
    let len = html[from..]
        .find(end)
        .unwrap_or_else(|| panic!("{end} in {html}"));
    &html[from..from + len]
}

/// Without a name filter the store counts, pages and finds the next slots; with one,
/// every loop is read and paged here. A name every loop has must show the same rows,
/// totals and next slots on every page, the last page clamped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_paged_by_the_store_shows_what_paging_in_memory_shows() {
    let dir = tempfile::tempdir().unwrap();
    let c = Client::open(dir.path()).unwrap();
    let now = Utc::now();
    for i in 0..23u64 {
        // Intervals out of name order, two of them equal: ties go by name.
        let every_ms = 60_000 * ((i * 7) % 11 + 1);
        let labels: &[&str] = if i % 3 == 0 { &["web"] } else { &[] };
        let lp = c
            .create(
                def(&format!("loop-{i:02}"), "exit 3", every(every_ms), labels),
                now,
            )
            .unwrap();
        if i % 5 == 0 {
            c.pause(lp.id.as_str(), now).unwrap();
        }
        if i % 4 == 0 {
            c.start_run_now(lp.id.as_str(), true)
                .unwrap()
                .finish()
                .await
                .unwrap();
        }
    }
    let at = Utc::now();
    let (mut pages_seen, mut warned) = (0, 0);
    for labels in [vec![], vec!["web".to_owned()]] {
        for page in [0, 1, 2, 3, 9] {
            let query = OverviewQuery {
                labels: labels.clone(),
                page,
                per_page: 7,
                ..OverviewQuery::default()
            };
            let store_paged = loops_http::web::overview_html(&c, &query, at, "").unwrap();
            let by_name = OverviewQuery {
                name: "LOOP-".into(),
                ..query
            };
            let memory_paged = loops_http::web::overview_html(&c, &by_name, at, "").unwrap();
            for (start, end) in [
                ("<tbody id=\"loops\"", "</tbody>"),
                ("<nav class=\"pager\"", "<a "),
                ("<section id=\"upcoming\"", "</section>"),
            ] {
                assert_eq!(
                    between(&store_paged, start, end),
                    between(&memory_paged, start, end),
                    "page {page}, labels {labels:?}"
                );
            }
            warned += store_paged
                .matches("<span class=\"verdict v-warn\"")
                .count();
            pages_seen += 1;
        }
    }
    assert_eq!(pages_seen, 10);
    // Each page judged its own loops: those whose one run failed are warned about.
    assert!(warned > 0);
    // The pages and the next slots hold what they should.
    let first = loops_http::web::overview_html(
        &c,
        &OverviewQuery {
            per_page: 7,
            ..OverviewQuery::default()
        },
        at,
        "",
    )
    .unwrap();
    assert!(first.contains("Loops 1–7 of 23"), "{first}");
    assert_eq!(
        between(&first, "<tbody id=\"loops\"", "</tbody>")
            .matches("<tr data-loop=")
            .count(),
        7
    );
    let upcoming = between(&first, "<section id=\"upcoming\"", "</section>");
    assert_eq!(upcoming.matches("<li>").count(), 10, "{upcoming}");
    // loop-11 (every minute, active) is due first; paused loop-00 and loop-05 never show.
    let names: Vec<&str> = upcoming
        .split("\">")
        .filter_map(|p| p.strip_prefix("loop-").map(|_| &p[..7]))
        .collect();
    assert_eq!(names.first(), Some(&"loop-11"), "{upcoming}");
    assert!(!upcoming.contains(">loop-00<") && !upcoming.contains(">loop-05<"));
    let last = loops_http::web::overview_html(
        &c,
        &OverviewQuery {
            page: 9,
            per_page: 7,
            ..OverviewQuery::default()
        },
        at,
        "",
    )
    .unwrap();
    assert!(last.contains("Loops 22–23 of 23"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_strip_of_recent_runs_is_read_in_one_call_newest_first() {
    let (_dir, c) = store().await;
    let loops = c.list(None).unwrap();
    let ids: Vec<_> = loops.iter().map(|l| l.id.clone()).collect();
    let strips = c.store().recent_runs(&ids, 20).unwrap();
    assert_eq!(strips.len(), loops.len());
    for (lp, strip) in loops.iter().zip(&strips) {
        let expected = match lp.name.as_str() {
            EVIL => 2,
            "nightly" => 1,
            _ => 0,
        };
        assert_eq!(strip.len(), expected, "{}", lp.name);
        assert!(strip.windows(2).all(|w| w[0].created_at >= w[1].created_at));
    }
    // At most `recent` each.
    let one = c.store().recent_runs(&ids, 1).unwrap();
    assert!(one.iter().all(|s| s.len() <= 1));
    let counts = c
        .store()
        .run_status_counts(Utc::now() - chrono::TimeDelta::hours(1))
        .unwrap();
    assert!(
        counts.contains(&(loops_core::RunStatus::Failed, 2)),
        "{counts:?}"
    );
    assert!(
        counts.contains(&(loops_core::RunStatus::Succeeded, 1)),
        "{counts:?}"
    );
}

/// A server on a free loopback port, stopped when the returned sender drops.
async fn serve(c: Client) -> (SocketAddr, String, tokio::sync::oneshot::Sender<()>) {
    let server = Server::bind(
        c,
        ServeConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..ServeConfig::default()
        },
    )
    .await
    .unwrap();
    let addr = server.local_addr().unwrap();
    let token = std::fs::read_to_string(server.token_path())
        .unwrap()
        .trim()
        .to_owned();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));
    (addr, token, tx)
}

struct Got {
    status: u16,
    location: String,
    cookie: String,
    body: String,
}

fn request(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Got {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(body.unwrap_or("").to_owned()).unwrap();
    let mut r = agent.run(req).unwrap();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let (location, cookie) = (header("location"), header("set-cookie"));
    Got {
        status: r.status().as_u16(),
        location,
        cookie,
        body: r.body_mut().read_to_string().unwrap_or_default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_a_session_and_writes_by_session_need_its_csrf_token() {
    let (_dir, c) = store().await;
    let (addr, token, _stop) = serve(c).await;
    let base = format!("http://{addr}");
    tokio::task::spawn_blocking(move || {
        // Strangers: a page sends them to the login form; the API refuses them.
        let g = request("GET", &format!("{base}/loops/nightly"), &[], None);
        assert_eq!(g.status, 303, "{}", g.body);
        assert_eq!(g.location, "/login?next=/loops/nightly");
        assert!(!g.body.contains("nightly</"));
        assert_eq!(
            request("GET", &format!("{base}/v1/loops"), &[], None).status,
            401
        );
        // Assets need no session, and are our own.
        let css = request("GET", &format!("{base}/assets/app.css"), &[], None);
        assert_eq!(css.status, 200);
        assert!(!css.body.contains("http://") && !css.body.contains("https://"));
        // A wrong token is refused; the right one opens a session.
        let form = [("content-type", "application/x-www-form-urlencoded")];
        let wrong = request(
            "POST",
            &format!("{base}/login"),
            &form,
            Some("token=nope&next=/"),
        );
        assert_eq!(wrong.status, 401);
        assert!(wrong.cookie.is_empty());
        let ok = request(
            "POST",
            &format!("{base}/login"),
            &form,
            Some(&format!("token={token}&next=%2Floops%2Fnightly")),
        );
        assert_eq!(ok.status, 303);
        assert_eq!(ok.location, "/loops/nightly");
        assert!(
            ok.cookie.contains("HttpOnly") && ok.cookie.contains("SameSite=Strict"),
            "{}",
            ok.cookie
        );
        assert!(ok.cookie.contains("Path=/"));
        let session = ok.cookie.split(';').next().unwrap().to_owned();
        // An open redirect is not followed.
        let away = request(
            "POST",
            &format!("{base}/login"),
            &form,
            Some(&format!("token={token}&next=//evil.example/")),
        );
        assert_eq!(away.location, "/");
        // With the cookie: the pages, and the API's reads.
        let cookie = [("cookie", session.as_str())];
        let page = request("GET", &format!("{base}/loops/nightly"), &cookie, None);
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains("at 02:00 Europe/Berlin"));
        // The definition is redacted as `loops show` redacts it.
        assert!(!page.body.contains("hunter2"));
        assert!(page.body.contains("[redacted]"));
        let csrf = page
            .body
            .split("name=\"loops-csrf\" content=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap()
            .to_owned();
        assert_eq!(csrf.len(), 64);
        assert_eq!(
            request("GET", &format!("{base}/v1/loops"), &cookie, None).status,
            200
        );
        // A write by the cookie alone is refused; with the CSRF header it is done.
        let pause = format!("{base}/v1/loops/nightly/pause");
        assert_eq!(request("POST", &pause, &cookie, None).status, 401);
        assert_eq!(
            request(
                "POST",
                &pause,
                &[cookie[0], ("x-loops-csrf", "0".repeat(64).as_str())],
                None
            )
            .status,
            401
        );
        let done = request(
            "POST",
            &pause,
            &[cookie[0], ("x-loops-csrf", csrf.as_str())],
            None,
        );
        assert_eq!(done.status, 200, "{}", done.body);
        assert!(done.body.contains("\"status\":\"paused\""));
        // Every page renders for a session.
        for path in ["/", "/workflows", "/runners", "/?status=paused&name=ni"] {
            let g = request("GET", &format!("{base}{path}"), &cookie, None);
            assert_eq!(g.status, 200, "{path}: {}", g.body);
        }
        let bad = request("GET", &format!("{base}/?status=bogus"), &cookie, None);
        assert_eq!(bad.status, 400);
        assert!(bad.body.contains("invalid status"), "{}", bad.body);
        // The run page shows stored output with its colours, escaped.
        let runs = request(
            "GET",
            &format!("{base}/v1/runs?loop=nightly"),
            &cookie,
            None,
        );
        let id = runs
            .body
            .split("\"id\":\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap()
            .to_owned();
        let run = request("GET", &format!("{base}/runs/{id}"), &cookie, None);
        assert_eq!(run.status, 200, "{}", run.body);
        assert!(
            run.body
                .contains("<span class=\"f2\">green</span> &lt;b&gt;"),
            "{}",
            run.body
        );
        // Logging out ends the session.
        let out = request(
            "POST",
            &format!("{base}/logout"),
            &[cookie[0], form[0]],
            Some(&format!("csrf={csrf}")),
        );
        assert_eq!(out.status, 303);
        assert_eq!(
            request("GET", &format!("{base}/"), &cookie, None).status,
            303
        );
    })
    .await
    .unwrap();
}

/// An agent loop's page lists its provider options (issue #20 item 10), in the words
/// `show` uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_page_lists_an_agents_provider_options() {
    let dir = tempfile::tempdir().unwrap();
    let c = Client::open(dir.path()).unwrap();
    let mut d = def("review", "true", every(3_600_000), &[]);
    d.target = serde_json::from_value(serde_json::json!({
        "type": "agent", "provider": "claude", "prompt": "hi",
        "permissionMode": "plan", "addDirs": ["/srv/lib", "/data"], "denyTools": ["WebFetch"]
    }))
    .unwrap();
    c.create(d, Utc::now()).unwrap();
    let (addr, token, _stop) = serve(c).await;
    let base = format!("http://{addr}");
    tokio::task::spawn_blocking(move || {
        let session = login(&base, &token);
        let page = request(
            "GET",
            &format!("{base}/loops/review"),
            &[("cookie", session.as_str())],
            None,
        );
        assert_eq!(page.status, 200, "{}", page.body);
        for fact in [
            "<dt>permission mode</dt><dd>plan</dd>",
            "<dt>add dirs</dt><dd>/srv/lib, /data</dd>",
            "<dt>deny tools</dt><dd>WebFetch</dd>",
        ] {
            assert!(page.body.contains(fact), "{fact} in {}", page.body);
        }
    })
    .await
    .unwrap();
}

/// A workflow run's page names the params it ran with, their values redacted as env
/// values are (issue #23 item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_runs_page_names_its_params_with_their_values_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let c = Client::open(dir.path()).unwrap();
    let spec = loops_core::workflow::parse_spec(
        r#"{"name":"fixer","params":[{"name":"branch","required":true},{"name":"tests","default":"unit"}],
            "steps":[{"id":"s","target":{"type":"command","command":"echo","args":["${params.branch}"]}}]}"#,
    )
    .unwrap();
    let workflow = c.create_workflow(&spec, false, Utc::now()).unwrap();
    let params = [("branch".to_owned(), "sekrit-branch".to_owned())].into();
    let (_tx, rx) = tokio::sync::watch::channel(None::<String>);
    let run = c
        .run_workflow(&workflow, None, &params, rx)
        .await
        .unwrap()
        .into_run();
    assert_eq!(run.params["tests"], "unit");
    let (addr, token, _stop) = serve(c).await;
    let base = format!("http://{addr}");
    let id = run.id.to_string();
    tokio::task::spawn_blocking(move || {
        let session = login(&base, &token);
        let page = request(
            "GET",
            &format!("{base}/workflow-runs/{id}"),
            &[("cookie", session.as_str())],
            None,
        );
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(
            page.body
                .contains("<dt>params</dt><dd>branch=[redacted], tests=[redacted]</dd>"),
            "{}",
            page.body
        );
        assert!(!page.body.contains("sekrit-branch"), "{}", page.body);
    })
    .await
    .unwrap();
}

/// Logs in with the owner's `token`; returns the session cookie (`name=value`).
fn login(base: &str, token: &str) -> String {
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let ok = request(
        "POST",
        &format!("{base}/login"),
        &form,
        Some(&format!("token={token}&next=/")),
    );
    ok.cookie.split(';').next().unwrap().to_owned()
}
