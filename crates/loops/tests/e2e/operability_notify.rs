//! Issue #11 item 4, notifications: command hooks and webhooks through the real binary,
//! against a real HTTP server on 127.0.0.1 that each test starts (a few lines of
//! `std::net::TcpListener`, answering each request with the next status of a script).

use crate::util::{instant, wait_for, World};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the hook server received.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A webhook receiver on 127.0.0.1: the n-th request gets `statuses[n]` (the last one
/// repeats); every request is recorded.
struct HookServer {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

impl HookServer {
    fn start(statuses: &[u16]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let received = Arc::new(Mutex::new(Vec::new()));
        let statuses = statuses.to_vec();
        let log = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let _ = serve(stream, &statuses, &log);
            }
        });
        Self { addr, received }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, statuses: &[u16], log: &Mutex<Vec<Received>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_owned();
    let path = parts.next().unwrap_or("").to_owned();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let status = {
        let mut log = log.lock().unwrap();
        log.push(Received {
            method,
            path,
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        });
        statuses[(log.len() - 1).min(statuses.len() - 1)]
    };
    let text = format!("status {status}");
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )?;
    stream.flush()
}

/// The `notifications` of a run in `runs --json`.
fn notifications(run: &Value) -> Vec<Value> {
    run["notifications"].as_array().cloned().unwrap_or_default()
}

/// Waits until some run of `lp` has a delivery in a final state; returns that run.
fn wait_delivered(w: &World, lp: &str, timeout: Duration) -> Value {
    wait_for("a notification's delivery to end", timeout, || {
        w.runs(lp).into_iter().find(|r| {
            notifications(r)
                .iter()
                .any(|d| d["status"] == "delivered" || d["status"] == "failed")
        })
    })
}

#[test]
fn a_webhook_that_answers_500_then_200_is_delivered_on_the_second_try() {
    let w = World::new();
    let server = HookServer::start(&[500, 200]);
    let url = server.url("/hooks/T0/secret");
    w.json(&[
        "create",
        "command",
        "breaks",
        "--every",
        "1h",
        "--cmd",
        "echo partial; echo 'disk full' >&2; exit 3",
        "--notify-url",
        &url,
    ]);
    // run-now delivers its own notifications before it exits.
    let (code, _) = w.fail(&["run-now", "breaks"]);
    assert_eq!(code, 1);
    let runs = w.runs("breaks");
    let sent = notifications(&runs[0]);
    assert_eq!(sent.len(), 1, "{sent:?}");
    let d = &sent[0];
    assert_eq!(d["event"], "failure");
    assert_eq!(d["channel"], "url");
    assert_eq!(d["status"], "delivered");
    assert_eq!(d["attempts"], 2);
    assert_eq!(d["lastError"], Value::Null);
    // The webhook's path is its secret: redacted in listings unless asked for.
    let target = d["target"].as_str().unwrap();
    assert!(
        target.contains("[redacted") && !target.contains("secret"),
        "{target}"
    );
    let shown = w.json(&["runs", "breaks", "--show-output"]);
    assert_eq!(shown[0]["notifications"][0]["target"], url.as_str());

    let got = server.received();
    assert_eq!(got.len(), 2, "one 500, then the 200");
    for r in &got {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/hooks/T0/secret");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("x-loops-event"), Some("failure"));
        assert_eq!(r.header("x-loops-delivery"), d["id"].as_str());
        assert_eq!(r.body["version"], 1);
        assert_eq!(r.body["event"], "failure");
        assert_eq!(r.body["deliveryId"], d["id"]);
        assert_eq!(r.body["loop"]["name"], "breaks");
        assert_eq!(r.body["run"]["id"], runs[0]["id"]);
        assert_eq!(r.body["run"]["status"], "failed");
        assert_eq!(r.body["run"]["exitCode"], 3);
        assert_eq!(r.body["run"]["error"], "exited with status 3");
        // The hook gets the output tails (not redacted: see README, Notifications).
        assert_eq!(r.body["run"]["stderr"], "disk full\n");
        assert_eq!(r.body["run"]["stdout"], "partial\n");
    }
    // `show` names the last notification.
    let shown = w.ok(&["show", "breaks"]);
    assert!(
        shown.contains("notified") && shown.contains("delivered (2 tries)"),
        "{shown}"
    );
    // A success sends nothing under the default `--notify-on failure`.
    w.json(&[
        "create",
        "command",
        "fine",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--notify-url",
        &url,
    ]);
    w.ok(&["run-now", "fine"]);
    assert!(notifications(&w.runs("fine")[0]).is_empty());
    assert_eq!(server.received().len(), 2);
}

#[test]
fn failure_notifies_once_per_slot_after_the_last_attempt() {
    let w = World::new();
    let hits = w.root.path().join("hits");
    let hook = format!(
        "echo \"$LOOPS_EVENT $LOOPS_ATTEMPT $LOOPS_RUN_STATUS\" >> {}",
        hits.display()
    );
    w.json(&[
        "create",
        "command",
        "flaky",
        "--dynamic",
        "1h",
        "--attempts",
        "3",
        "--retry-delay",
        "100ms",
        "--cmd",
        "exit 1",
        "--notify-cmd",
        &hook,
    ]);
    w.make_due("flaky");
    let mut d = w.daemon_ready(&[]);
    let runs = wait_for(
        "three attempts and a delivery",
        Duration::from_secs(20),
        || {
            let runs = w.runs("flaky");
            let done = runs.len() == 3
                && runs
                    .iter()
                    .any(|r| notifications(r).iter().any(|n| n["status"] == "delivered"));
            done.then_some(runs)
        },
    );
    assert_eq!(d.stop(), Some(0));
    for r in &runs {
        let sent = notifications(r);
        if r["attempt"] == 3 {
            assert_eq!(sent.len(), 1, "{sent:?}");
            assert_eq!(sent[0]["event"], "failure");
            assert_eq!(sent[0]["channel"], "cmd");
            assert_eq!(sent[0]["attempts"], 1);
        } else {
            assert!(
                sent.is_empty(),
                "no notification for a retried attempt: {r}"
            );
        }
    }
    let lines = std::fs::read_to_string(&hits).unwrap();
    assert_eq!(lines, "failure 3 failed\n");
}

/// `--notify-on always` is every finished slot (issue #19): a success notifies too,
/// as `success`, or as `recovery` right after a failed slot.
#[test]
fn always_notifies_every_finished_slot() {
    let w = World::new();
    let flag = w.root.path().join("broken");
    let hits = w.root.path().join("events");
    let cmd = format!("test ! -e {}", flag.display());
    let hook = format!(
        "cat >/dev/null; echo \"$LOOPS_EVENT $LOOPS_RUN_STATUS\" >> {}",
        hits.display()
    );
    let lp = w.json(&[
        "create",
        "command",
        "every",
        "--every",
        "1h",
        "--cmd",
        &cmd,
        "--notify-cmd",
        &hook,
        "--notify-on",
        "always",
    ]);
    assert_eq!(lp["notify"]["on"], "always");
    w.ok(&["run-now", "every"]);
    std::fs::write(&flag, "").unwrap();
    w.fail(&["run-now", "every"]);
    std::fs::remove_file(&flag).unwrap();
    w.ok(&["run-now", "every"]);
    w.ok(&["run-now", "every"]);
    assert_eq!(
        std::fs::read_to_string(&hits).unwrap(),
        "success succeeded\nfailure failed\nrecovery succeeded\nsuccess succeeded\n"
    );
    // `runs --json`: each run names its delivery's event (newest first).
    let events: Vec<Value> = w
        .runs("every")
        .iter()
        .map(|r| notifications(r)[0]["event"].clone())
        .collect();
    assert_eq!(events, ["success", "recovery", "failure", "success"]);
}

#[test]
fn recovery_fires_on_the_first_success_after_a_failure() {
    let w = World::new();
    let flag = w.root.path().join("broken");
    let hits = w.root.path().join("events");
    std::fs::write(&flag, "").unwrap();
    let cmd = format!("test ! -e {}", flag.display());
    let hook = format!(
        "cat >/dev/null; echo \"$LOOPS_EVENT\" >> {}",
        hits.display()
    );
    w.json(&[
        "create",
        "command",
        "healing",
        "--every",
        "1h",
        "--cmd",
        &cmd,
        "--notify-cmd",
        &hook,
        "--notify-on",
        "changes",
    ]);
    w.fail(&["run-now", "healing"]);
    std::fs::remove_file(&flag).unwrap();
    w.ok(&["run-now", "healing"]);
    w.ok(&["run-now", "healing"]);
    assert_eq!(
        std::fs::read_to_string(&hits).unwrap(),
        "failure\nrecovery\n"
    );
    let runs = w.runs("healing");
    let events: Vec<Vec<Value>> = runs
        .iter()
        .map(|r| {
            notifications(r)
                .iter()
                .map(|n| n["event"].clone())
                .collect()
        })
        .collect();
    // Newest first: the second success sends nothing.
    assert_eq!(
        events,
        vec![
            vec![],
            vec![Value::from("recovery")],
            vec![Value::from("failure")]
        ]
    );
    // Under `recovery` alone a failure sends nothing.
    std::fs::write(&flag, "").unwrap();
    std::fs::remove_file(&hits).unwrap();
    w.json(&[
        "create",
        "command",
        "quiet",
        "--every",
        "1h",
        "--cmd",
        &cmd,
        "--notify-cmd",
        &hook,
        "--notify-on",
        "recovery",
    ]);
    w.fail(&["run-now", "quiet"]);
    assert!(!hits.exists());
}

#[test]
fn the_default_applies_to_loops_without_settings_and_notify_test_sends_one_now() {
    let w = World::new();
    let server = HookServer::start(&[200]);
    let url = server.url("/default");
    // Bad input: one line, exit 2, nothing written.
    for (args, needle) in [
        (
            vec!["notify", "set", "--notify-url", "ftp://example.com/x"],
            "is not an http:// or https:// URL",
        ),
        (
            vec!["notify", "set"],
            "notify set needs --notify-cmd or --notify-url",
        ),
        (
            vec![
                "notify",
                "set",
                "--notify-cmd",
                "x",
                "--notify-on",
                "sometimes",
            ],
            "invalid --notify-on",
        ),
    ] {
        let (code, err) = w.fail(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(w.json(&["notify", "show"]), Value::Null, "nothing written");
    }
    let (code, err) = w.fail(&["notify", "test"]);
    assert_eq!(code, 2);
    assert!(err.contains("no default notification settings"), "{err}");

    let set = w.json(&[
        "notify",
        "set",
        "--notify-url",
        &url,
        "--notify-on",
        "always",
    ]);
    assert_eq!(set["on"], "always");
    assert!(set["url"].as_str().unwrap().contains("[redacted"), "{set}");
    let shown = w.json(&["notify", "show", "--show-output"]);
    assert_eq!(shown["url"], url.as_str());
    assert!(w
        .ok(&["notify", "show"])
        .contains("default notifications: on always: POST http://127.0.0.1"));

    let tested = w.json(&["notify", "test"]);
    assert_eq!(tested["source"], "default");
    assert_eq!(tested["deliveries"][0]["delivered"], true);
    assert_eq!(tested["deliveries"][0]["attempts"], 1);
    let got = server.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body["event"], "test");
    assert_eq!(got[0].body["run"], Value::Null);

    // A loop without settings of its own uses the default; one with its own does not.
    w.json(&[
        "create", "command", "plain", "--every", "1h", "--cmd", "exit 2",
    ]);
    let hits = w.root.path().join("own");
    let hook = format!("cat > {}", hits.display());
    w.json(&[
        "create",
        "command",
        "own",
        "--every",
        "1h",
        "--cmd",
        "exit 2",
        "--notify-cmd",
        &hook,
    ]);
    w.fail(&["run-now", "plain"]);
    w.fail(&["run-now", "own"]);
    let got = server.received();
    assert_eq!(got.len(), 2, "the default fired for plain only");
    assert_eq!(got[1].body["loop"]["name"], "plain");
    let own: Value = serde_json::from_str(&std::fs::read_to_string(&hits).unwrap()).unwrap();
    assert_eq!(own["loop"]["name"], "own");
    assert_eq!(own["event"], "failure");

    // `notify test --loop` uses the loop's settings and its newest run.
    let tested = w.json(&["notify", "test", "--loop", "own"]);
    assert_eq!(tested["source"], "loop");
    let test_payload: Value =
        serde_json::from_str(&std::fs::read_to_string(&hits).unwrap()).unwrap();
    assert_eq!(test_payload["event"], "test");
    assert_eq!(test_payload["run"]["loopName"], "own");
    // A failing test exits 1 and says why.
    w.ok(&["notify", "set", "--notify-cmd", "echo nope >&2; exit 4"]);
    let out = w.run(&["notify", "test"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("failed after 1 try: exited with status 4: nope"),
        "{text}"
    );

    assert_eq!(w.json(&["notify", "clear"])["cleared"], true);
    assert_eq!(w.json(&["notify", "show"]), Value::Null);
    assert_eq!(w.json(&["notify", "clear"])["cleared"], false);
}

#[test]
fn a_slow_or_broken_hook_never_delays_scheduling() {
    let w = World::new();
    let server = HookServer::start(&[500]);
    w.json(&[
        "create",
        "command",
        "hangs",
        "--dynamic",
        "1h",
        "--cmd",
        "exit 1",
        "--notify-cmd",
        "sleep 30",
    ]);
    w.json(&[
        "create",
        "command",
        "unheard",
        "--dynamic",
        "1h",
        "--cmd",
        "exit 1",
        "--notify-url",
        &server.url("/down"),
    ]);
    w.make_due("hangs");
    w.make_due("unheard");
    w.create_cmd("ticker", &["--every", "1s"], "true");
    let mut d = w.daemon_ready(&["--notify-timeout", "1s"]);
    // The hook is killed after its timeout and recorded failed.
    let hung = wait_delivered(&w, "hangs", Duration::from_secs(20));
    let n = &notifications(&hung)[0];
    assert_eq!(n["status"], "failed");
    assert_eq!(n["attempts"], 1);
    assert!(
        n["lastError"]
            .as_str()
            .unwrap()
            .contains("timed out after 1s"),
        "{n}"
    );
    // The webhook that always answers 500 is tried 4 times (1 s, 2 s, 4 s apart).
    let unheard = wait_delivered(&w, "unheard", Duration::from_secs(30));
    let n = &notifications(&unheard)[0];
    assert_eq!(n["status"], "failed");
    assert_eq!(n["attempts"], 4);
    // What the receiver answered is not kept (it may echo the payload's output).
    assert_eq!(n["lastError"], "HTTP 500");
    assert_eq!(server.received().len(), 4);
    // Meanwhile the ticker ran every second, on time.
    let ticks = w.runs("ticker");
    assert_eq!(d.stop(), Some(0));
    assert!(ticks.len() >= 6, "{} ticker runs", ticks.len());
    for r in &ticks {
        assert_eq!(r["status"], "succeeded");
        let lag = instant(&r["startedAt"]) - instant(&r["scheduledFor"]);
        assert!(lag.num_milliseconds() < 500, "ticker started {lag} late");
    }
}

#[test]
fn a_delivery_cut_off_by_a_daemon_crash_is_resumed_after_restart() {
    let w = World::new();
    let hits = w.root.path().join("delivered");
    let hook = format!("sleep 1; echo \"$LOOPS_DELIVERY_ID\" >> {}", hits.display());
    w.json(&[
        "create",
        "command",
        "crashy",
        "--dynamic",
        "1h",
        "--cmd",
        "exit 1",
        "--notify-cmd",
        &hook,
    ]);
    w.make_due("crashy");
    let mut d = w.daemon_ready(&[]);
    // The delivery is under way (claimed, its hook sleeping): kill the daemon.
    let pending = wait_for("the delivery to start", Duration::from_secs(10), || {
        let runs = w.runs("crashy");
        let sent = runs.first().map(notifications).unwrap_or_default();
        (!sent.is_empty()).then_some(sent)
    });
    assert_eq!(pending[0]["status"], "pending");
    d.signal("KILL");
    d.wait_exit(Duration::from_secs(5));
    let mut d = w.daemon_ready(&[]);
    let run = wait_delivered(&w, "crashy", Duration::from_secs(20));
    assert_eq!(d.stop(), Some(0));
    let n = &notifications(&run)[0];
    assert_eq!(n["status"], "delivered", "{n}");
    // At least once: the interrupted hook may have finished on its own too.
    let lines = std::fs::read_to_string(&hits).unwrap();
    assert!(!lines.is_empty());
    assert!(
        lines.lines().all(|l| l == n["id"].as_str().unwrap()),
        "{lines}"
    );
}
