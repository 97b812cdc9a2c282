//! `loops serve`: the real binary serving the HTTP API on a free loopback port, driven
//! by a real HTTP client — every route, the token, the error documents, the events
//! stream with its resume, and the output follow of a running run.

use crate::util::{wait_for, write_script, World};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A `loops serve` child on a free loopback port.
pub struct Api {
    child: Child,
    pub url: String,
    pub token: String,
    agent: ureq::Agent,
    stderr: std::path::PathBuf,
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An answer: status, body text, and the body as JSON when it is some.
pub struct Answer {
    pub status: u16,
    pub text: String,
    pub content_type: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
    /// The error document's message (asserting its shape).
    pub fn error(&self) -> String {
        let v = self.json();
        assert!(v["error"]["code"].is_string(), "{v}");
        v["error"]["message"].as_str().unwrap().to_owned()
    }
}

impl World {
    pub fn serve(&self, extra: &[&str]) -> Api {
        self.serve_on("127.0.0.1:0", extra)
    }

    /// `loops serve --addr ADDR`; the client reaches it on loopback whatever ADDR is.
    pub fn serve_on(&self, addr: &str, extra: &[&str]) -> Api {
        self.serve_via(&[], addr, extra)
    }

    /// [`World::serve_on`] started through `wrapper` (see [`World::cmd_via`]).
    pub fn serve_via(&self, wrapper: &[&str], addr: &str, extra: &[&str]) -> Api {
        let stderr = self.root.path().join("serve.log");
        let mut args = vec!["serve", "--addr", addr];
        args.extend_from_slice(extra);
        let mut child = self
            .cmd_via(wrapper, &args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawn loops serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| {
                panic!(
                    "no URL in {line:?}; stderr: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            })
            .replace("//0.0.0.0:", "//127.0.0.1:");
        let token = self.ok(&["serve", "--print-token"]).trim().to_owned();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Api {
            child,
            url,
            token,
            agent,
            stderr,
        }
    }
}

impl Api {
    fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
        let mut r = r.expect("HTTP request");
        let content_type = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Answer {
            status: r.status().as_u16(),
            text: r
                .body_mut()
                .with_config()
                .limit(64 << 20)
                .read_to_string()
                .unwrap(),
            content_type,
        }
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server wrote to its stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    pub fn get(&self, path: &str) -> Answer {
        Self::answer(
            self.agent
                .get(format!("{}{path}", self.url))
                .header("Authorization", self.auth())
                .call(),
        )
    }

    pub fn get_as(&self, path: &str, auth: Option<&str>) -> Answer {
        let mut req = self.agent.get(format!("{}{path}", self.url));
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        Self::answer(req.call())
    }

    pub fn send(&self, method: &str, path: &str, body: Option<&str>) -> Answer {
        let url = format!("{}{path}", self.url);
        let auth = self.auth();
        let r = match (method, body) {
            ("POST", Some(b)) => self
                .agent
                .post(url)
                .header("Authorization", auth)
                .content_type("application/json")
                .send(b),
            ("POST", None) => self
                .agent
                .post(url)
                .header("Authorization", auth)
                .send_empty(),
            ("PATCH", Some(b)) => self
                .agent
                .patch(url)
                .header("Authorization", auth)
                .content_type("application/json")
                .send(b),
            ("PUT", Some(b)) => self
                .agent
                .put(url)
                .header("Authorization", auth)
                .content_type("application/json")
                .send(b),
            ("DELETE", _) => self.agent.delete(url).header("Authorization", auth).call(),
            other => panic!("unsupported {other:?}"),
        };
        Self::answer(r)
    }

    pub fn post(&self, path: &str, body: Value) -> Answer {
        self.send("POST", path, Some(&body.to_string()))
    }

    /// Opens an SSE stream; its events arrive on the returned channel (a reader
    /// thread parses them) until the server closes it.
    pub fn sse(&self, path: &str, last_event_id: Option<u64>) -> mpsc::Receiver<SseEvent> {
        let mut req = self
            .agent
            .get(format!("{}{path}", self.url))
            .header("Authorization", self.auth())
            .config()
            .timeout_global(None)
            .build();
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let r = req.call().expect("SSE request");
        assert_eq!(r.status().as_u16(), 200);
        let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        let (tx, rx) = mpsc::channel();
        let reader = r.into_body().into_reader();
        std::thread::spawn(move || read_sse(reader, tx));
        rx
    }

    pub fn stop(&mut self) -> Option<i32> {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            assert!(
                Instant::now() < deadline,
                "loops serve did not stop: {}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
    /// When the reader got it.
    pub at: chrono::DateTime<chrono::Utc>,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

fn read_sse(reader: impl Read, tx: mpsc::Sender<SseEvent>) {
    let mut lines = BufReader::new(reader).lines();
    let (mut id, mut event, mut data) = (None, String::new(), Vec::<String>::new());
    while let Some(Ok(line)) = lines.next() {
        if line.is_empty() {
            if !data.is_empty() || !event.is_empty() {
                let e = SseEvent {
                    id: id.take(),
                    event: if event.is_empty() {
                        "message".to_owned()
                    } else {
                        std::mem::take(&mut event)
                    },
                    data: data.join("\n"),
                    at: chrono::Utc::now(),
                };
                data.clear();
                if tx.send(e).is_err() {
                    return;
                }
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.to_owned()),
            "event" => event = value.to_owned(),
            "data" => data.push(value.to_owned()),
            _ => {}
        }
    }
}

/// The next event on `rx` that `want` accepts, within `timeout`.
pub(crate) fn next_event(
    rx: &mpsc::Receiver<SseEvent>,
    timeout: Duration,
    mut want: impl FnMut(&SseEvent) -> bool,
) -> SseEvent {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) if want(&e) => return e,
            Ok(_) => {}
            Err(e) => panic!("no wanted event within {timeout:?}: {e}"),
        }
    }
}

/// The documents the CLI prints and the API serves are the same ones.
#[test]
fn http_serves_the_cli_documents_on_every_route() {
    let w = World::new();
    w.ok(&[
        "create",
        "command",
        "cli-made",
        "--every",
        "1h",
        "--cmd",
        "echo made",
        "--env",
        "TOKEN=s3cret",
        "--label",
        "team-a",
    ]);
    let api = w.serve(&[]);

    // Loops: list and show equal the CLI's --json (redacted alike).
    let list = api.get("/v1/loops");
    assert_eq!(list.status, 200, "{}", list.text);
    assert!(list.content_type.starts_with("application/json"));
    assert_eq!(list.json(), w.json(&["list"]));
    assert!(!list.text.contains("s3cret"), "{}", list.text);
    let shown = api.get("/v1/loops/cli-made");
    assert_eq!(shown.json(), w.json(&["show", "cli-made"]));
    let revealed = api.get("/v1/loops/cli-made?showOutput=true");
    assert_eq!(revealed.json()["target"]["env"]["TOKEN"], "s3cret");
    assert_eq!(
        api.get("/v1/loops?label=team-a").json(),
        w.json(&["list", "--label", "team-a"])
    );
    assert_eq!(api.get("/v1/loops?label=nobody").json(), json!([]));
    assert_eq!(api.get("/v1/loops?status=paused").json(), json!([]));

    // Create: validated as the CLI validates; the answer is what `show` prints.
    let created = api.post(
        "/v1/loops",
        json!({
            "name": "api-made",
            "schedule": {"type": "interval", "everyMs": 3_600_000, "anchor": "fixed_rate"},
            "target": {"type": "command", "command": "echo", "args": ["from", "api"], "shell": false},
            "maxAttempts": 2,
            "labels": ["team-b"],
        }),
    );
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.json(), w.json(&["show", "api-made"]));
    assert_eq!(created.json()["maxAttempts"], 2);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let again = api.post(
        "/v1/loops",
        json!({"name": "api-made", "schedule": {"type": "dynamic", "minIntervalMs": 60000},
               "target": {"type": "command", "command": "true"}}),
    );
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(again.error().contains("api-made"), "{}", again.text);
    // Paging (done by the store): `offset` first, then at most `limit`, by name.
    let names = |path: &str| -> Vec<String> {
        let page = api.get(path);
        assert_eq!(page.status, 200, "{path}: {}", page.text);
        let list = page.json();
        let list = list.as_array().unwrap();
        list.iter()
            .map(|l| l["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names("/v1/loops"), ["api-made", "cli-made"]);
    assert_eq!(names("/v1/loops?limit=1"), ["api-made"]);
    assert_eq!(names("/v1/loops?limit=1&offset=1"), ["cli-made"]);
    assert_eq!(names("/v1/loops?offset=1"), ["cli-made"]);
    assert!(names("/v1/loops?offset=2").is_empty());
    assert!(names("/v1/loops?limit=0").is_empty());
    assert_eq!(names("/v1/loops?label=team-b&limit=5"), ["api-made"]);
    assert_eq!(api.get("/v1/loops?limit=-1").status, 400);
    // The CLI's messages, word for word.
    let zero = api.post(
        "/v1/loops",
        json!({"name": "zero", "schedule": {"type": "dynamic", "minIntervalMs": 60000},
               "target": {"type": "command", "command": "true"}, "maxAttempts": 0}),
    );
    assert_eq!(zero.status, 400);
    let (_, cli) = w.fail(&[
        "create",
        "command",
        "zero",
        "--dynamic",
        "1m",
        "--cmd",
        "true",
        "--attempts",
        "0",
    ]);
    assert!(
        cli.contains(&zero.error()),
        "CLI: {cli} / API: {}",
        zero.error()
    );
    let id_like = api.post(
        "/v1/loops",
        json!({"name": "abcdefabcdef", "schedule": {"type": "dynamic", "minIntervalMs": 60000},
               "target": {"type": "command", "command": "true"}}),
    );
    assert_eq!(id_like.status, 400);
    assert!(
        id_like.error().contains("looks like a loop id"),
        "{}",
        id_like.text
    );

    // Edit: a merge patch; the target merges, other fields stay.
    let edited = api.send(
        "PATCH",
        &format!("/v1/loops/{id}"),
        Some(r#"{"target": {"args": ["edited"]}, "description": "via http"}"#),
    );
    assert_eq!(edited.status, 200, "{}", edited.text);
    let shown = w.json(&["show", "api-made"]);
    assert_eq!(edited.json(), shown);
    assert_eq!(shown["target"]["args"], json!(["edited"]));
    assert_eq!(shown["target"]["command"], "echo");
    assert_eq!(shown["description"], "via http");
    assert_eq!(shown["maxAttempts"], 2);
    let bad = api.send(
        "PATCH",
        &format!("/v1/loops/{id}"),
        Some(r#"{"target": {"type": "agent"}}"#),
    );
    assert_eq!(bad.status, 400, "{}", bad.text);

    // Lifecycle: each answer is the loop the CLI then shows.
    for (verb, status) in [
        ("pause", "paused"),
        ("resume", "active"),
        ("stop", "stopped"),
        ("archive", "archived"),
        ("unarchive", "paused"),
    ] {
        let a = api.send("POST", &format!("/v1/loops/api-made/{verb}"), None);
        assert_eq!(a.status, 200, "{verb}: {}", a.text);
        assert_eq!(a.json()["status"], status, "{verb}");
        assert_eq!(a.json(), w.json(&["show", "api-made"]), "{verb}");
    }
    let unarchive = api.send("POST", "/v1/loops/api-made/unarchive", None);
    assert_eq!(unarchive.status, 400);
    assert_eq!(
        unarchive.error(),
        "loop \"api-made\" is not archived (it is paused)"
    );

    // Runs: a run made by the CLI, listed and shown as `runs --json` prints it.
    w.ok(&["run-now", "cli-made"]);
    let runs = api.get("/v1/runs");
    assert_eq!(runs.json(), w.json(&["runs"]));
    assert_eq!(
        api.get("/v1/runs?loop=cli-made&status=succeeded&since=1h")
            .json(),
        w.json(&["runs", "cli-made", "--status", "succeeded", "--since", "1h"])
    );
    let run_id = runs.json()[0]["id"].as_str().unwrap().to_owned();
    let one = api.get(&format!("/v1/runs/{run_id}"));
    assert_eq!(one.json(), runs.json()[0]);
    assert!(one.json()["stdout"]
        .as_str()
        .unwrap()
        .starts_with("[redacted"));
    let out = api.get(&format!("/v1/runs/{}/output", &run_id[..8]));
    assert_eq!(out.status, 200);
    assert!(out.content_type.starts_with("text/plain"));
    assert_eq!(out.text, "made\n");
    assert_eq!(out.text, w.ok(&["logs", &run_id]));
    let bad = api.get("/v1/runs?status=done");
    assert_eq!(bad.status, 400);
    assert!(
        bad.error().contains("invalid status \"done\""),
        "{}",
        bad.text
    );
    assert_eq!(api.get("/v1/runs/ffffffffffff").status, 404);

    // Workflows.
    let spec = json!({"name": "wf", "steps": [
        {"id": "a", "target": {"type": "command", "command": "true"}},
        {"id": "b", "dependsOn": ["a"], "target": {"type": "command", "command": "true"}}]});
    let v = api.post("/v1/workflows/validate", spec.clone());
    assert_eq!(v.json(), json!({"valid": true, "name": "wf", "steps": 2}));
    let cyclic = api.post(
        "/v1/workflows/validate",
        json!({"name": "c", "steps": [
            {"id": "a", "dependsOn": ["b"], "target": {"type": "command", "command": "true"}},
            {"id": "b", "dependsOn": ["a"], "target": {"type": "command", "command": "true"}}]}),
    );
    assert_eq!(cyclic.status, 400);
    assert!(cyclic.error().contains("cycle"), "{}", cyclic.text);
    let made = api.post("/v1/workflows", spec.clone());
    assert_eq!(made.status, 201, "{}", made.text);
    assert_eq!(made.json(), w.json(&["workflows", "show", "wf"]));
    assert_eq!(api.post("/v1/workflows", spec.clone()).status, 409);
    let replaced = api.post("/v1/workflows?replace=true", spec);
    assert_eq!(replaced.json()["version"], 2);
    assert_eq!(
        api.get("/v1/workflows").json(),
        w.json(&["workflows", "list"])
    );
    assert_eq!(
        api.get("/v1/workflows?all=true").json(),
        w.json(&["workflows", "list", "--all"])
    );
    assert_eq!(
        api.get("/v1/workflows/wf").json(),
        w.json(&["workflows", "show", "wf"])
    );
    w.ok(&["workflows", "run", "wf"]);
    let wruns = api.get("/v1/workflow-runs");
    assert_eq!(wruns.json(), w.json(&["workflows", "runs"]));
    assert_eq!(api.get("/v1/workflows/wf/runs").json(), wruns.json());
    let wrun = wruns.json()[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        api.get(&format!("/v1/workflow-runs/{wrun}")).json(),
        w.json(&["workflows", "inspect", &wrun])
    );
    let cancel = api.post(&format!("/v1/workflow-runs/{wrun}/cancel"), json!({}));
    assert_eq!(cancel.status, 400);
    assert!(cancel.error().contains("not running"), "{}", cancel.text);

    // Health and usage, as the CLI reports them (`at` / `since` are the instant asked).
    let strip = |mut v: Value, key: &str| {
        v.as_object_mut().unwrap().remove(key);
        v
    };
    let health = api.get("/v1/health");
    assert_eq!(health.status, 200, "{}", health.text);
    let cli = w.run(&["--json", "health"]);
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(strip(health.json(), "at"), strip(cli, "at"));
    assert_eq!(
        strip(api.get("/v1/health?label=team-a").json(), "at")["loops"],
        strip(
            serde_json::from_slice(&w.run(&["--json", "health", "--label", "team-a"]).stdout)
                .unwrap(),
            "at"
        )["loops"]
    );
    let usage = api.get("/v1/usage?since=30d&by=day");
    assert_eq!(usage.status, 200, "{}", usage.text);
    assert_eq!(
        strip(usage.json(), "since"),
        strip(w.json(&["usage", "--since", "30d", "--by", "day"]), "since")
    );
    let bad = api.get("/v1/usage?by=week");
    assert_eq!(bad.status, 400);
    assert!(bad.error().contains("week"), "{}", bad.text);

    // The daemon: stopped (none runs), as the CLI says.
    let d = api.get("/v1/daemon").json();
    assert_eq!(d, w.daemon_status());
    assert_eq!(d["state"], "stopped");
    assert_eq!(d["backend"], "sqlite");
    // Runners: on SQLite its one daemon, none while it is stopped — as the CLI says.
    let runners = api.get("/v1/runners");
    assert_eq!(runners.status, 200, "{}", runners.text);
    assert_eq!(runners.json(), json!([]));
    assert_eq!(runners.json(), w.json(&["runners"]));

    // Remove.
    let gone = api.send("DELETE", "/v1/loops/api-made", None);
    assert_eq!(
        gone.json(),
        json!({"removed": true, "id": id, "name": "api-made"})
    );
    assert_eq!(api.get("/v1/loops/api-made").status, 404);

    // The document itself.
    let doc = api.get("/v1/openapi.json");
    assert_eq!(doc.status, 200);
    assert_eq!(doc.text, loops_http_document());
}

/// `/v1/daemon` and `/v1/runners` send exactly the properties their OpenAPI schemas
/// describe (both once left out the runners' concurrency caps).
#[test]
fn the_daemon_and_runner_documents_are_their_schemas() {
    let w = World::new();
    let mut daemon = w.daemon_ready(&["--max-concurrent-per", "provider=claude:2"]);
    let api = w.serve(&[]);
    let doc: Value = serde_json::from_str(&loops_http_document()).unwrap();
    let described = |schema: &str| -> Vec<String> {
        let props = doc["components"]["schemas"][schema]["properties"].as_object();
        let mut keys: Vec<String> = props.unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let sent = |v: &Value| -> Vec<String> {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    // The caps are recorded once the daemon's supervisor is up, a moment after the
    // lease `daemon_ready` waits for.
    let status = wait_for("the daemon's caps", Duration::from_secs(10), || {
        let status = api.get("/v1/daemon").json();
        (status["caps"][0]["caps"] == json!("provider=claude:2")).then_some(status)
    });
    assert_eq!(sent(&status), described("DaemonStatusDocument"), "{status}");
    assert_eq!(
        status["caps"][0]["caps"],
        json!("provider=claude:2"),
        "{status}"
    );
    assert_eq!(sent(&status["caps"][0]), described("RunnerCaps"));
    let runners = api.get("/v1/runners").json();
    assert_eq!(sent(&runners[0]), described("RunnerDocument"), "{runners}");
    daemon.stop();
}

/// The checked-in OpenAPI document (what the server must serve).
fn loops_http_document() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../loops-http/openapi.json");
    std::fs::read_to_string(path).unwrap()
}

/// The token is required on every request and compared exactly; errors are JSON.
#[test]
fn http_refuses_without_the_token_and_answers_errors_as_json() {
    let w = World::new();
    let api = w.serve(&[]);
    // The token file: 64 hex characters, owner-only.
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(w.data.join("http.token")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(api.token.len(), 64);

    let wrong = format!("Bearer {}", "0".repeat(64));
    let almost = format!("Bearer {}", &api.token[..63]);
    for path in ["/v1/loops", "/v1/openapi.json", "/v1/nope", "/v1/events"] {
        for auth in [
            None,
            Some(wrong.as_str()),
            Some(almost.as_str()),
            Some("Basic x"),
        ] {
            let a = api.get_as(path, auth);
            assert_eq!(a.status, 401, "{path} {auth:?}: {}", a.text);
            assert_eq!(a.json()["error"]["code"], "unauthorized");
        }
    }
    // Unknown routes: a JSON 404.
    let nope = api.get("/v1/nope");
    assert_eq!(nope.status, 404);
    assert!(
        nope.error().contains("no route GET /v1/nope"),
        "{}",
        nope.text
    );
    assert_eq!(api.send("DELETE", "/v1/runs", None).status, 405);
    // Malformed JSON: 400 with the parser's message; wrong fields named.
    let broken = api.send("POST", "/v1/loops", Some("{\"name\": "));
    assert_eq!(broken.status, 400);
    assert!(
        broken.error().starts_with("invalid JSON body"),
        "{}",
        broken.text
    );
    let typo = api.post(
        "/v1/loops",
        json!({"name": "x", "schedule": {"type": "dynamic", "minIntervalMs": 60000},
               "target": {"type": "command", "command": "true"}, "maxAttempt": 2}),
    );
    assert_eq!(typo.status, 400);
    assert!(typo.error().contains("maxAttempt"), "{}", typo.text);
    let empty = api.send("POST", "/v1/loops", None);
    assert_eq!(empty.status, 400, "{}", empty.text);
    // Too large: 413, before anything is parsed — by its declared length, and by what
    // arrives (chunked, no length given).
    let (status, text) = raw_post(&api, "/v1/loops", 2 << 20, false);
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("\"too_large\""), "{text}");
    let (status, text) = raw_post(&api, "/v1/loops", 2 << 20, true);
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("\"too_large\""), "{text}");
    // A filter the route does not know is an error, not ignored.
    let typo = api.get("/v1/loops?lable=x");
    assert_eq!(typo.status, 400);
    assert!(typo.error().contains("unknown query parameter \"lable\""));
    // No CORS headers unless configured.
    let r = api
        .agent
        .get(format!("{}/v1/loops", api.url))
        .header("Authorization", api.auth())
        .header("Origin", "http://evil.example")
        .call()
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());

    // A non-loopback address needs --allow-remote.
    let (code, err) = w.fail(&["serve", "--addr", "0.0.0.0:0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--allow-remote"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn http_on_a_non_loopback_address_warns_and_still_needs_the_token() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1h"], "true");
    let api = w.serve_on("0.0.0.0:0", &["--allow-remote"]);
    let warning = std::fs::read_to_string(&api.stderr).unwrap();
    assert!(
        warning.contains("warning: serving on 0.0.0.0:")
            && warning.contains("which other hosts can reach"),
        "{warning}"
    );
    assert_eq!(api.get_as("/v1/loops", None).status, 401);
    let listed = api.get("/v1/loops");
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()[0]["name"], "job");
}

/// A POST of `size` bytes of JSON-ish body over a raw socket (the server answers 413
/// before the body is all sent, which a client that writes the whole body first
/// cannot read); `chunked` sends it without a declared length. Returns the status and
/// the response's text.
fn raw_post(api: &Api, path: &str, size: usize, chunked: bool) -> (u16, String) {
    use std::io::Write;
    let addr = api.url.trim_start_matches("http://").to_owned();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let length = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {size}")
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n{length}\r\nConnection: close\r\n\r\n",
        api.token
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut writer = s.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let block = vec![b'x'; 64 << 10];
        let mut sent = 0;
        while sent < size {
            let ok = if chunked {
                writer
                    .write_all(format!("{:x}\r\n", block.len()).as_bytes())
                    .and_then(|()| writer.write_all(&block))
                    .and_then(|()| writer.write_all(b"\r\n"))
            } else {
                writer.write_all(&block)
            };
            if ok.is_err() {
                return;
            }
            sent += block.len();
        }
        if chunked {
            let _ = writer.write_all(b"0\r\n\r\n");
        }
    });
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let _ = sender.join();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// CORS for a configured origin only, preflight included.
#[test]
fn http_cors_only_for_configured_origins() {
    let w = World::new();
    let api = w.serve(&["--cors-origin", "http://localhost:3000"]);
    let pre = api
        .agent
        .options(format!("{}/v1/loops", api.url))
        .header("Origin", "http://localhost:3000")
        .header("Access-Control-Request-Method", "GET")
        .call()
        .unwrap();
    assert_eq!(pre.status().as_u16(), 204);
    assert_eq!(
        pre.headers()["access-control-allow-origin"],
        "http://localhost:3000"
    );
    let other = api
        .agent
        .get(format!("{}/v1/loops", api.url))
        .header("Authorization", api.auth())
        .header("Origin", "http://elsewhere:3000")
        .call()
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
}

/// Events reach a connected client as they commit (from the CLI, the daemon and the
/// API alike) and a client that reconnects with `Last-Event-ID` gets exactly what it
/// missed, in order.
#[test]
fn http_events_are_delivered_live_and_resumed_with_last_event_id() {
    let w = World::new();
    let api = w.serve(&[]);
    let rx = api.sse("/v1/events", None);
    // A loop created by the CLI (another process).
    let made = w.json(&[
        "create",
        "command",
        "ticker",
        "--every",
        "1s",
        "--cmd",
        "echo tick",
    ]);
    let created = next_event(&rx, Duration::from_secs(10), |e| e.event == "loop.created");
    let doc = created.json();
    assert_eq!(doc["kind"], "loop.created");
    assert_eq!(doc["loopId"], made["id"]);
    assert_eq!(doc["data"]["loop"]["name"], "ticker");
    assert_eq!(created.id.as_deref(), Some(doc["seq"].to_string().as_str()));
    // Delivered within a generous bound of its commit (the benchmark measures it).
    let at = crate::util::instant(&doc["at"]);
    assert!(
        created.at - at < chrono::TimeDelta::seconds(2),
        "{at} → {}",
        created.at
    );

    // The daemon's runs.
    let mut daemon = w.daemon_ready(&[]);
    let started = next_event(&rx, Duration::from_secs(15), |e| e.event == "run.started");
    let run_id = started.json()["runId"].as_str().unwrap().to_owned();
    assert_eq!(started.json()["data"]["run"]["status"], "running");
    let finished = next_event(&rx, Duration::from_secs(15), |e| {
        e.event == "run.finished" && e.json()["runId"] == run_id.as_str()
    });
    assert_eq!(finished.json()["data"]["run"]["status"], "succeeded");
    assert!(finished.json()["data"]["loop"]["nextRunAt"].is_string());
    daemon.stop();
    let last_seen: u64 = finished.id.clone().unwrap().parse().unwrap();
    drop(rx);

    // Missed while disconnected: changes through the API and the CLI.
    let paused = api.send("POST", "/v1/loops/ticker/pause", None);
    assert_eq!(paused.status, 200);
    w.ok(&[
        "create", "command", "second", "--every", "1h", "--cmd", "true",
    ]);
    w.ok(&["remove", "second"]);
    let expected: Vec<Value> = {
        // What the log holds after the last event seen, read from the start.
        let all = api.sse("/v1/events?after=0", None);
        let mut v = Vec::new();
        loop {
            let e = next_event(&all, Duration::from_secs(10), |_| true);
            let doc = e.json();
            let seq = doc["seq"].as_u64().unwrap();
            if seq > last_seen {
                v.push(doc.clone());
            }
            if doc["kind"] == "loop.removed" {
                break;
            }
        }
        v
    };
    let kinds: Vec<&str> = expected
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    // Runs may have finished after the one we saw; the changes come last. Removing a
    // loop takes its earlier events along: `second` was created and removed while we
    // were away, so only its removal is left.
    assert!(kinds.len() >= 2, "{kinds:?}");
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["loop.changed", "loop.removed"],
        "{kinds:?}"
    );
    assert_eq!(expected.last().unwrap()["data"]["loop"]["name"], "second");
    let resumed = api.sse("/v1/events", Some(last_seen));
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let e = next_event(&resumed, Duration::from_secs(10), |_| true);
        assert_eq!(e.id, Some(e.json()["seq"].to_string()));
        got.push(e.json());
    }
    assert_eq!(got, expected, "exactly the missed events, in order");
    // Nothing more, and the next change arrives on the resumed stream.
    w.ok(&["resume", "ticker"]);
    let next = next_event(&resumed, Duration::from_secs(10), |_| true);
    assert_eq!(next.json()["kind"], "loop.changed");
    assert_eq!(next.json()["data"]["loop"]["status"], "active");
    assert_eq!(
        next.json()["seq"].as_u64().unwrap(),
        expected.last().unwrap()["seq"].as_u64().unwrap() + 1
    );

    // Filters, and a number the log no longer has (or never had): `reset` first.
    let only = api.sse("/v1/events?after=0&kind=loop.removed", None);
    let e = next_event(&only, Duration::from_secs(10), |_| true);
    assert_eq!(e.event, "loop.removed");
    let future = api.sse("/v1/events", Some(1_000_000));
    let e = next_event(&future, Duration::from_secs(10), |_| true);
    assert_eq!(e.event, "reset");
    assert_eq!(e.json()["after"], 1_000_000);
    let bad = api.get_as("/v1/events?kind=loop.exploded", Some(&api.auth()));
    assert_eq!(bad.status, 400);
}

/// A running run's output streams while it is written, and the stream ends with the
/// run as recorded.
#[test]
fn http_follows_the_output_of_a_running_run() {
    let w = World::new();
    let script = w.root.path().join("slow.sh");
    let gate = w.root.path().join("gate");
    write_script(
        &script,
        &format!(
            "#!/bin/sh\necho first\nwhile [ ! -e {} ]; do sleep 0.05; done\necho second\necho oops >&2\n",
            gate.display()
        ),
    );
    let script = script.display().to_string();
    w.ok(&[
        "create",
        "command",
        "slow",
        "--dynamic",
        "1h",
        "--cmd",
        &script,
    ]);
    w.make_due("slow");
    let api = w.serve(&[]);
    let mut daemon = w.daemon_ready(&[]);
    let running = wait_for("the run to start", Duration::from_secs(15), || {
        let runs = api.get("/v1/runs?loop=slow&status=running").json();
        runs.as_array().and_then(|r| r.first().cloned())
    });
    let id = running["id"].as_str().unwrap().to_owned();
    let rx = api.sse(&format!("/v1/runs/{id}/output?follow=true"), None);
    let first = next_event(&rx, Duration::from_secs(10), |e| e.event == "output");
    assert_eq!(first.json()["text"], "first\n");
    // Still running: the text so far, without follow.
    assert_eq!(api.get(&format!("/v1/runs/{id}/output")).text, "first\n");
    std::fs::write(&gate, "").unwrap();
    let second = next_event(&rx, Duration::from_secs(10), |e| e.event == "output");
    assert_eq!(second.json()["text"], "second\n");
    let end = next_event(&rx, Duration::from_secs(10), |e| e.event == "end");
    assert_eq!(end.json()["status"], "succeeded");
    assert_eq!(end.json()["id"], id.as_str());
    assert!(end.json()["stdout"]
        .as_str()
        .unwrap()
        .starts_with("[redacted"));
    // The stream closes after `end`.
    assert!(rx.recv_timeout(Duration::from_secs(10)).is_err());
    let err = api.get(&format!("/v1/runs/{id}/output?stream=stderr"));
    assert_eq!(err.text, "oops\n");
    assert_eq!(
        api.get(&format!("/v1/runs/{id}/output?stream=both")).status,
        400
    );
    daemon.stop();
}

/// SIGTERM stops the server promptly, also with event streams open.
#[test]
fn http_server_stops_on_sigterm_with_streams_open() {
    let w = World::new();
    let mut api = w.serve(&[]);
    let rx = api.sse("/v1/events", None);
    assert_eq!(api.stop(), Some(0));
    // The stream ended with the server.
    wait_for("the stream to end", Duration::from_secs(10), || {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(()),
            _ => None,
        }
    });
}

/// Run-now and workflow runs start in the server and answer at once (or, with
/// `wait=true`, when the run ended); runs still going when the server stops are
/// interrupted and recorded, never left running unsupervised.
#[test]
fn http_runs_loops_and_workflows_now_and_sees_them_through() {
    let w = World::new();
    w.ok(&[
        "create", "command", "now", "--every", "1h", "--cmd", "echo now",
    ]);
    w.ok(&[
        "create", "command", "long", "--every", "1h", "--cmd", "sleep 30",
    ]);
    let mut api = w.serve(&[]);
    let started = api.send("POST", "/v1/loops/now/run-now", None);
    assert_eq!(started.status, 202, "{}", started.text);
    let doc = started.json();
    assert_eq!(doc["status"], "running");
    assert_eq!(
        doc["runNow"],
        json!({"source": "ad_hoc", "advancesLoop": false})
    );
    let id = doc["id"].as_str().unwrap().to_owned();
    wait_for("the run to end", Duration::from_secs(15), || {
        (api.get(&format!("/v1/runs/{id}")).json()["status"] == "succeeded").then_some(())
    });
    let waited = api.send("POST", "/v1/loops/now/run-now?wait=true&timeout=30", None);
    assert_eq!(waited.status, 200, "{}", waited.text);
    let doc = waited.json();
    assert_eq!(doc["status"], "succeeded");
    assert!(doc["stdout"].as_str().unwrap().starts_with("[redacted"));
    // The document has the fields `loops run-now --json` prints.
    let cli = w.json(&["run-now", "now"]);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&doc), keys(&cli));
    let shown = api.send(
        "POST",
        "/v1/loops/now/run-now?wait=true&showOutput=true",
        None,
    );
    assert_eq!(shown.json()["stdout"], "now\n");
    // Refusals, with the CLI's words.
    w.ok(&["archive", "now"]);
    let archived = api.send("POST", "/v1/loops/now/run-now", None);
    assert_eq!(archived.status, 400);
    let (_, cli) = w.fail(&["run-now", "now"]);
    assert!(
        cli.contains(&archived.error()),
        "{cli} / {}",
        archived.error()
    );
    assert_eq!(api.send("POST", "/v1/loops/nope/run-now", None).status, 404);

    // A workflow run.
    let spec = json!({"name": "pair", "steps": [
        {"id": "a", "target": {"type": "command", "command": "true"}},
        {"id": "b", "dependsOn": ["a"], "target": {"type": "command", "command": "true"}}]});
    assert_eq!(api.post("/v1/workflows", spec).status, 201);
    let run = api.send("POST", "/v1/workflows/pair/run", None);
    assert_eq!(run.status, 202, "{}", run.text);
    let wid = run.json()["workflowRun"]["id"].as_str().unwrap().to_owned();
    assert_eq!(run.json()["steps"].as_array().unwrap().len(), 2);
    let done = wait_for("the workflow run to end", Duration::from_secs(15), || {
        let v = api.get(&format!("/v1/workflow-runs/{wid}")).json();
        (v["workflowRun"]["status"] == "succeeded").then_some(v)
    });
    assert!(done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["status"] == "succeeded"));
    assert_eq!(api.send("POST", "/v1/workflows/nope/run", None).status, 404);
    let bad = api.send("POST", "/v1/workflows/pair/run?timeout=soon", None);
    assert_eq!(bad.status, 400);

    // A long run the server started, then the server stops: interrupted, recorded.
    let long = api.send("POST", "/v1/loops/long/run-now", None);
    assert_eq!(long.status, 202);
    let long_id = long.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(api.stop(), Some(0));
    let runs = w.runs("long");
    let recorded = runs.iter().find(|r| r["id"] == long_id.as_str()).unwrap();
    assert_eq!(recorded["status"], "abandoned", "{recorded}");
    assert!(
        recorded["error"]
            .as_str()
            .unwrap()
            .contains("the HTTP server stopped"),
        "{recorded}"
    );
}

/// `POST /v1/loops` takes a definition as small as the CLI needs, and fills in what is
/// left out exactly as `loops create` does (issue #19, item 15): the interval's anchor,
/// a cron's zone, whether a command runs through the shell, an agent's config
/// isolation, the policy, the notification trigger.
#[test]
fn post_loops_fills_in_the_clis_defaults() {
    let w = World::new();
    let api = w.serve(&[]);
    // (name in the API, the API's minimal body, the CLI's create args)
    let cases: Vec<(&str, serde_json::Value, Vec<&str>)> = vec![
        (
            "interval",
            json!({"schedule": {"type": "interval", "everyMs": 3_600_000},
                   "target": {"type": "command", "command": "echo hi"}}),
            vec!["command", "--every", "1h", "--cmd", "echo hi"],
        ),
        (
            "argv",
            json!({"schedule": {"type": "dynamic", "minIntervalMs": 60_000},
                   "target": {"type": "command", "command": "echo", "args": ["a b"]}}),
            // Arguments after `--` make it argv without --no-shell.
            vec!["command", "--dynamic", "1m", "--cmd", "echo", "--", "a b"],
        ),
        (
            "cron",
            json!({"schedule": {"type": "cron", "expression": "0 9 * * *"},
                   "target": {"type": "agent", "provider": "claude", "prompt": "hi"},
                   "notify": {"cmd": "true"}}),
            vec![
                "agent",
                "--cron",
                "0 9 * * *",
                "--provider",
                "claude",
                "--prompt",
                "hi",
                "--notify-cmd",
                "true",
            ],
        ),
    ];
    for (name, mut body, args) in cases {
        body["name"] = json!(format!("api-{name}"));
        let created = api.post("/v1/loops", body.clone());
        assert_eq!(created.status, 201, "{name}: {}", created.text);
        let cli_name = format!("cli-{name}");
        let mut create = vec!["create", args[0], cli_name.as_str()];
        create.extend_from_slice(&args[1..]);
        w.ok(&create);
        // The same definition: all but what is the record's own.
        let definition = |mut lp: serde_json::Value| {
            for key in ["id", "name", "createdAt", "updatedAt", "nextRunAt", "dueAt"] {
                lp.as_object_mut().unwrap().remove(key);
            }
            lp
        };
        assert_eq!(
            definition(created.json()),
            definition(w.json(&["show", &cli_name])),
            "{name}: {body}"
        );
    }
    let shown = w.json(&["show", "api-interval"]);
    assert_eq!(shown["schedule"]["anchor"], "fixed_rate");
    assert_eq!(shown["target"]["shell"], true);
    assert_eq!(w.json(&["show", "api-argv"])["target"]["shell"], false);
    let cron = w.json(&["show", "api-cron"]);
    assert_eq!(
        cron["schedule"]["timezone"], "UTC",
        "the server's zone (TZ)"
    );
    assert_eq!(cron["target"]["configIsolation"], "safe");
    assert_eq!(cron["notify"]["on"], "failure");
    // What the CLI refuses, the API refuses: a shell with separate arguments.
    let refused = api.post(
        "/v1/loops",
        json!({"name": "both", "schedule": {"type": "interval", "everyMs": 60_000},
               "target": {"type": "command", "command": "echo", "args": ["x"], "shell": true}}),
    );
    assert_eq!(refused.status, 400, "{}", refused.text);
}

/// `GET /v1/holds` lists the accounts a usage limit holds, as `loops holds --json`
/// does, and `DELETE /v1/holds/{provider}[?account=]` releases them as `loops holds
/// clear` does; a name that is no provider is a 400 naming it (issue #20 item 2).
#[test]
fn http_lists_and_clears_usage_limit_holds() {
    use crate::agents::{create_agent, fixture, run_now, Fakes};
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &fixture("claude_usage_limit.json"), 1);
    create_agent(&w, "limited", "claude", &["--prompt", "hi"]);
    let (_, run) = run_now(&w, "limited");
    assert_eq!(run["failureClass"], "usage_limit", "{run:#}");
    let api = w.serve(&[]);
    let listed = api.get("/v1/holds");
    assert_eq!(listed.status, 200, "{}", listed.text);
    let holds: Value = serde_json::from_str(&listed.text).unwrap();
    assert_eq!(holds, w.json(&["holds"]), "the CLI's document");
    assert_eq!(holds.as_array().map(Vec::len), Some(1), "{holds:#}");
    assert_eq!(holds[0]["provider"], "claude", "{holds:#}");
    assert_eq!(holds[0]["account"], "default", "{holds:#}");

    let other = api.send("DELETE", "/v1/holds/codex", None);
    assert_eq!(other.status, 200, "{}", other.text);
    assert_eq!(other.text.trim(), "[]", "nothing of codex was held");
    let wrong = api.send("DELETE", "/v1/holds/chatgpt", None);
    assert_eq!(wrong.status, 400, "{}", wrong.text);
    assert!(wrong.text.contains("chatgpt"), "{}", wrong.text);

    let cleared = api.send("DELETE", "/v1/holds/claude?account=default", None);
    assert_eq!(cleared.status, 200, "{}", cleared.text);
    let cleared: Value = serde_json::from_str(&cleared.text).unwrap();
    assert_eq!(cleared[0]["provider"], "claude", "{cleared:#}");
    assert_eq!(api.get("/v1/holds").text.trim(), "[]");
    assert_eq!(w.json(&["holds"]), json!([]));
}

/// `/v1/budgets` answers as every route does: a body that is not the document is a
/// JSON 400 naming why (it was axum's plain-text rejection, which schemathesis found),
/// an unknown query parameter a 400, and a good body sets the budget.
#[test]
fn http_budgets_answer_bad_requests_as_json() {
    let w = World::new();
    let api = w.serve(&[]);
    let bad = api.send("PUT", "/v1/budgets/provider=claude", Some("\u{0}"));
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(
        bad.content_type.starts_with("application/json"),
        "{}",
        bad.content_type
    );
    assert!(!bad.error().is_empty());
    let unknown = api.get("/v1/budgets?nope=1");
    assert_eq!(unknown.status, 400, "{}", unknown.text);
    assert!(unknown.error().contains("nope"), "{}", unknown.text);
    let set = api.send(
        "PUT",
        "/v1/budgets/provider=claude",
        Some(r#"{"tokens": "1000/day"}"#),
    );
    assert_eq!(set.status, 200, "{}", set.text);
    assert_eq!(set.json()["provider"], "claude", "{}", set.text);
}
