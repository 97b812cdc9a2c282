//! Secrets, second round (issue #19, items 1–4): what a run prints, the store's password
//! and our own secret settings stay where they belong. Each test plants a marker
//! secret and looks for it everywhere the data can leave: JSON and tables, the event
//! log, children's environments, error messages, the daemon's own environment.

use crate::util::{wait_for, write_script, World};
use loops_testkit::PgCluster;
use std::time::Duration;

/// The password the store URLs of these tests carry.
const PASSWORD: &str = "s3cr3tpw";

/// `url` (a test cluster's `postgres://loops@…` URL) with [`PASSWORD`] in its
/// userinfo; the cluster trusts local connections, so it is never checked, only
/// carried.
fn with_password(url: &str) -> String {
    url.replacen(
        "postgres://loops@",
        &format!("postgres://loops:{PASSWORD}@"),
        1,
    )
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD),
        "{what} shows the store's password:\n{text}"
    );
}

/// `loops daemon start` hands the store URL to the daemon on its stdin: neither the
/// daemon's environment nor any child's — a command run, an agent, a workflow step, a
/// notification hook, the accounts helper — holds it (item 4).
#[test]
fn the_store_url_reaches_no_child_and_not_the_daemons_environment() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = with_password(&cluster.database());
    let mut w = World::new();
    let bin = w.root.path().join("bin");
    let seen = w.root.path().join("seen");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&seen).unwrap();
    // A fake `accounts` helper that records its environment, and a fake `claude` that
    // prints its environment to stderr and answers like claude.
    let profile = w.root.path().join("profile");
    std::fs::create_dir_all(&profile).unwrap();
    write_script(
        &bin.join("accounts"),
        &format!(
            "#!/bin/sh\nenv > '{}/accounts.env'\necho \"export GH_CONFIG_DIR='{}'\"\n",
            seen.display(),
            profile.display()
        ),
    );
    write_script(
        &bin.join("claude"),
        "#!/bin/sh\ncat > /dev/null\nenv >&2\n\
         echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\"}'\n",
    );
    w.extra_env
        .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
    w.extra_env.push(("LOOPS_STORE".into(), url.clone()));

    let hook = seen.join("hook.env");
    w.ok(&[
        "create",
        "command",
        "plain",
        "--at",
        "+1s",
        "--cmd",
        "env; exit 3",
        "--notify-cmd",
        &format!("env > '{}'", hook.display()),
    ]);
    w.ok(&[
        "create",
        "command",
        "accounted",
        "--at",
        "+1s",
        "--cmd",
        "env",
        "--account",
        "work",
        "--account-tool",
        "gh",
    ]);
    w.ok(&[
        "create",
        "agent",
        "agent",
        "--at",
        "+1s",
        "--provider",
        "claude",
        "--prompt",
        "hi",
    ]);
    let spec = serde_json::json!({"name": "envwf", "steps": [
        {"id": "dump", "target": {"type": "command", "command": "env", "shell": true}}
    ]});
    let spec_path = w.root.path().join("wf.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    w.ok(&["workflows", "create", spec_path.to_str().unwrap()]);
    w.ok(&[
        "create",
        "workflow",
        "flow",
        "--at",
        "+1s",
        "--workflow",
        "envwf",
    ]);

    // Started the way a user starts it: the URL in LOOPS_STORE of `daemon start`.
    let start = w.run(&["daemon", "start"]);
    assert_no_secret(
        "daemon start",
        &format!(
            "{}{}",
            String::from_utf8_lossy(&start.stdout),
            String::from_utf8_lossy(&start.stderr)
        ),
    );
    let pid = wait_for("the daemon's runner", Duration::from_secs(20), || {
        let status = w.daemon_status();
        (status["state"] == "running")
            .then(|| status["pid"].as_u64())
            .flatten()
    });
    let finished = |name: &str| {
        w.runs(name)
            .first()
            .filter(|r| r["status"] != "running")
            .cloned()
    };
    for name in ["plain", "accounted", "agent", "flow"] {
        wait_for(
            &format!("a finished run of {name}"),
            Duration::from_secs(30),
            || finished(name),
        );
    }
    wait_for("the failure hook", Duration::from_secs(20), || {
        std::fs::read_to_string(&hook)
            .ok()
            .filter(|t| !t.is_empty())
    });

    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let environ = String::from_utf8_lossy(&environ).replace('\0', "\n");
    assert!(environ.contains("LOOPS_DATA_DIR="), "{environ}");
    assert_no_secret("the daemon's environment", &environ);
    assert!(!environ.contains("LOOPS_STORE="), "{environ}");

    for name in ["plain", "accounted", "agent", "flow"] {
        let runs = w.json(&["runs", name, "--show-output"]);
        let run = &runs[0];
        let printed = format!("{}{}", run["stdout"], run["stderr"]);
        // (A workflow loop's own output is its report; its step printed, below.)
        assert!(
            name == "flow" || printed.contains("LOOPS_RUN_ID="),
            "{name} printed its environment: {run}"
        );
        assert_no_secret(&format!("the output of {name}"), &printed);
        assert!(!printed.contains("LOOPS_STORE="), "{name}: {printed}");
    }
    let wf_run = w.json(&["workflows", "runs", "envwf"])[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let inspected = w.json(&["workflows", "inspect", &wf_run, "--show-output"]);
    let step_out = inspected["steps"][0]["stdout"].as_str().unwrap_or_default();
    assert!(
        step_out.contains("LOOPS_WORKFLOW_STEP_ID=dump"),
        "{inspected}"
    );
    assert_no_secret("the workflow step's output", step_out);
    for file in ["hook.env", "accounts.env"] {
        let text = std::fs::read_to_string(seen.join(file)).unwrap();
        assert!(text.contains("PATH="), "{file}: {text}");
        assert_no_secret(file, &text);
        assert!(!text.contains("LOOPS_STORE="), "{file}: {text}");
    }
    let log = std::fs::read_to_string(w.data.join("daemon.log")).unwrap_or_default();
    assert_no_secret("the daemon log", &log);

    w.ok(&["daemon", "stop"]);
}

/// Every place a store URL is shown masks its password, in every form libpq reads
/// (item 3): errors of an unreachable or refused store, `doctor`, `daemon status`,
/// `store copy --to`, the daemon's log.
#[test]
fn store_urls_never_show_their_password() {
    let w = World::new();
    let unreachable = [
        format!("postgres://u:{PASSWORD}@127.0.0.1:1/db"),
        format!("postgres://u:x/{PASSWORD}@127.0.0.1:1/db"),
        format!("postgres://u:x?{PASSWORD}@127.0.0.1:1/db"),
        format!("postgresql://u:{PASSWORD}@127.0.0.1:1,127.0.0.1:2/db"),
        format!("postgres://127.0.0.1:1/db?user=u&password={PASSWORD}"),
        format!("postgres:///db?host=/nonexistent&password={PASSWORD}"),
        format!("host=127.0.0.1 port=1 password='{PASSWORD} x' user=u"),
        format!("mysql://u:{PASSWORD}@127.0.0.1/db"),
    ];
    for store in &unreachable {
        for args in [
            &["--store", store.as_str(), "list"][..],
            &["--store", store.as_str(), "--json", "daemon", "status"],
            &["--store", store.as_str(), "daemon", "status"],
            &["--store", store.as_str(), "run-now", "x"],
            &["store", "copy", "--to", store.as_str()],
        ] {
            let out = w.run(args);
            assert!(!out.status.success(), "{args:?}");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("error: "), "{args:?}: {text}");
            assert_no_secret(&format!("{args:?}"), &text);
        }
        let out = w.run(&["--store", store.as_str(), "--json", "doctor"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("\"database\""), "{text}");
        assert_no_secret(&format!("doctor on {store}"), &text);
    }
    // `--store -` reads the URL from stdin (what `daemon start` gives the daemon).
    let mut piped = w.cmd(&["--store", "-", "list"]);
    piped.stdin(std::process::Stdio::piped());
    piped.stdout(std::process::Stdio::piped());
    piped.stderr(std::process::Stdio::piped());
    let mut child = piped.spawn().unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{}", unreachable[0]).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("postgres://u:***@127.0.0.1:1/db"),
        "the URL came from stdin: {err}"
    );
    let (code, err) = w.fail(&["--store", "-", "list"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--store -: stdin gave no store URL"), "{err}");

    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = with_password(&cluster.database());
    let mut w = World::new();
    w.extra_env.push(("LOOPS_STORE".into(), url.clone()));
    w.create_cmd("a", &["--every", "1h"], "true");
    let mut d = w.daemon(&[]);
    wait_for("the runner", Duration::from_secs(20), || {
        (w.daemon_status()["state"] == "running").then_some(())
    });
    for args in [
        &["daemon", "status"][..],
        &["--json", "daemon", "status"],
        &["doctor"],
        &["--json", "doctor"],
    ] {
        let out = w.run(args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("loops:***@127.0.0.1"), "{args:?}: {text}");
        assert_no_secret(&format!("{args:?}"), &text);
    }
    d.stop();
    assert_no_secret("the daemon's log", &d.log_text());
}

/// Every marker a run of [`leaky_world`] puts in its output, where a failure or the
/// agent's final text would carry it.
pub(crate) const TOKENS: [&str; 6] = [
    "TOKEN-STDERR-1",
    "TOKEN-REPORTED-2",
    "TOKEN-SUMMARY-3",
    "TOKEN-CMD-4",
    "TOKEN-STEP-5",
    "TOKEN-STEPSUM-6",
];

pub(crate) fn assert_no_token(what: &str, text: &str) {
    for token in TOKENS {
        assert!(
            !text.contains(token),
            "{what} shows {token}, which only output may hold:\n{text}"
        );
    }
}

/// A world with a fake `claude` that fails with a secret on stderr, reports an error
/// holding one, or answers with one (by its prompt), a command loop that prints one on
/// stderr, and a workflow whose steps do both; every loop has run once.
pub(crate) fn leaky_world() -> World {
    let mut w = World::new();
    let bin = w.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    write_script(
        &bin.join("claude"),
        r#"#!/bin/sh
p=$(cat)
case "$p" in
  fail*) echo "warming up" >&2; echo "error: TOKEN-STDERR-1" >&2; exit 1;;
  said*) echo '{"type":"result","subtype":"success","is_error":true,"result":"TOKEN-REPORTED-2"}';;
  step-fail*) echo "error: TOKEN-STEP-5" >&2; exit 1;;
  step-ok*) echo '{"type":"result","subtype":"success","is_error":false,"result":"TOKEN-STEPSUM-6"}';;
  *) echo '{"type":"result","subtype":"success","is_error":false,"result":"TOKEN-SUMMARY-3"}';;
esac
"#,
    );
    w.extra_env
        .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
    for (name, prompt) in [
        ("agent-fail", "fail"),
        ("agent-said", "said"),
        ("agent-ok", "ok"),
    ] {
        w.ok(&[
            "create",
            "agent",
            name,
            "--every",
            "1h",
            "--provider",
            "claude",
            "--prompt",
            prompt,
        ]);
    }
    w.create_cmd(
        "cmd-fail",
        &["--every", "1h"],
        // (Not the marker itself: `show` prints the command.)
        "echo TOKEN-CMD-$((2+2)) >&2; exit 3",
    );
    // `bad` after `ok`: side by side, a failing `bad` cancels an `ok` that a loaded
    // machine has not finished yet, and its summary is never recorded.
    let spec = serde_json::json!({"name": "wf", "steps": [
        {"id": "ok", "target": {"type": "agent", "provider": "claude", "prompt": "step-ok"}},
        {"id": "bad", "target": {"type": "agent", "provider": "claude", "prompt": "step-fail"},
         "dependsOn": ["ok"]}
    ]});
    let path = w.root.path().join("wf.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap()]);
    w
}

fn both(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A run's `error` is our words; what the failure quotes from the output
/// (`errorOutput`) and an agent's `summary` are output: redacted wherever stdout is —
/// the CLI's JSON and tables, `show`, `run-now`, `runs --follow`, `health`, workflow
/// runs, the HTTP API and its event log, a hook's `LOOPS_RUN_ERROR` — and shown with
/// `--show-output` (items 1 and 2).
#[test]
fn output_derived_text_is_redacted_wherever_output_is() {
    let w = leaky_world();
    let hook = w.root.path().join("hook");
    w.ok(&[
        "edit",
        "agent-fail",
        "--notify-cmd",
        &format!(
            "printf '%s' \"$LOOPS_RUN_ERROR\" > '{0}.env'; cat > '{0}.json'",
            hook.display()
        ),
    ]);
    // A hook that fails echoing its payload (the run, with its output) on stderr.
    w.ok(&["edit", "agent-said", "--notify-cmd", "cat >&2; exit 1"]);
    // run-now, as a user sees it (human and JSON).
    for name in ["agent-fail", "agent-said", "agent-ok", "cmd-fail"] {
        let out = w.run(&["run-now", name]);
        assert_no_token(&format!("run-now {name}"), &both(&out));
        let out = w.run(&["--json", "run-now", name]);
        assert_no_token(&format!("--json run-now {name}"), &both(&out));
    }
    let human = both(&w.run(&["run-now", "agent-fail"]));
    assert!(
        human.contains("error: claude exited with status 1\n"),
        "{human}"
    );
    let out = w.run(&["workflows", "run", "wf"]);
    assert_no_token("workflows run", &both(&out));
    let out = w.run(&["--json", "workflows", "run", "wf"]);
    assert_no_token("--json workflows run", &both(&out));

    // The recorded runs: errors in our words, output only with --show-output.
    let runs = w.json(&["runs", "--limit", "0"]);
    assert_no_token("runs --json", &runs.to_string());
    let by_name = |name: &str| {
        runs.as_array()
            .unwrap()
            .iter()
            .find(|r| r["loopName"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        by_name("agent-fail")["error"],
        "claude exited with status 1"
    );
    assert_eq!(by_name("agent-said")["error"], "claude reported an error");
    assert_eq!(by_name("cmd-fail")["error"], "exited with status 3");
    // The delivery's error is our words, not what the hook printed.
    let said = &by_name("agent-said")["notifications"][0];
    assert_eq!(said["lastError"], "exited with status 1", "{said}");
    let redacted = by_name("agent-fail")["errorOutput"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(redacted.starts_with("[redacted "), "{redacted}");
    assert!(by_name("agent-ok")["summary"]
        .as_str()
        .unwrap()
        .starts_with("[redacted "));
    let table = w.ok(&["runs"]);
    assert_no_token("the runs table", &table);
    assert!(table.contains("claude exited with status 1"), "{table}");
    for name in ["agent-fail", "agent-said", "agent-ok", "cmd-fail"] {
        assert_no_token(&format!("show {name}"), &w.ok(&["show", name]));
        assert_no_token(
            &format!("--json show {name}"),
            &w.ok(&["--json", "show", name]),
        );
    }
    assert_no_token("health", &both(&w.run(&["health"])));
    assert_no_token("--json health", &both(&w.run(&["--json", "health"])));
    let wf_runs = w.json(&["workflows", "runs"]);
    assert_no_token("workflows runs", &wf_runs.to_string());
    let wf_run = wf_runs[0]["id"].as_str().unwrap().to_owned();
    assert_no_token(
        "workflows inspect",
        &w.ok(&["workflows", "inspect", &wf_run]),
    );
    assert_no_token(
        "--json workflows inspect",
        &w.ok(&["--json", "workflows", "inspect", &wf_run]),
    );

    // Shown when asked for.
    let full = w
        .json(&["runs", "--limit", "0", "--show-output"])
        .to_string();
    for token in TOKENS.iter().filter(|t| !t.contains("STEP")) {
        assert!(full.contains(token), "--show-output shows {token}: {full}");
    }
    let table = w.ok(&["runs", "agent-fail", "--show-output"]);
    assert!(
        table.contains("claude exited with status 1: error: TOKEN-STDERR-1"),
        "{table}"
    );
    let table = w.ok(&["runs", "cmd-fail", "--show-output"]);
    assert!(
        table.contains("exited with status 3: TOKEN-CMD-4"),
        "{table}"
    );
    let show = w.ok(&["show", "agent-ok", "--show-output"]);
    assert!(show.contains("TOKEN-SUMMARY-3"), "{show}");
    let inspected = w.ok(&["workflows", "inspect", &wf_run, "--show-output"]);
    assert!(
        inspected.contains("TOKEN-STEP-5") && inspected.contains("TOKEN-STEPSUM-6"),
        "{inspected}"
    );

    // The failure hook: LOOPS_RUN_ERROR is our words; the payload on stdin is the run
    // with its output, as documented.
    let env = wait_for("the hook", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("{}.env", hook.display())).ok()
    });
    assert_eq!(env, "claude exited with status 1");
    let payload = std::fs::read_to_string(format!("{}.json", hook.display())).unwrap();
    assert!(payload.contains("TOKEN-STDERR-1"), "{payload}");

    // `runs --follow` prints a failure's error in our words.
    let follow_out = w.root.path().join("follow.out");
    let mut follow = w
        .cmd(&["runs", "--follow"])
        .stdout(std::fs::File::create(&follow_out).unwrap())
        .spawn()
        .unwrap();
    let text = wait_for("the follow lines", Duration::from_secs(20), || {
        w.run(&["run-now", "agent-fail"]);
        let text = std::fs::read_to_string(&follow_out).unwrap_or_default();
        text.contains("failed").then_some(text)
    });
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(text.contains(": claude exited with status 1"), "{text}");
    assert_no_token("runs --follow", &text);

    // The HTTP API and its event log.
    let api = w.serve(&[]);
    let listed = api.get("/v1/runs?limit=0");
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert_no_token("GET /v1/runs", &listed.text);
    for run in listed.json().as_array().unwrap() {
        let one = api.get(&format!("/v1/runs/{}", run["id"].as_str().unwrap()));
        assert_eq!(one.status, 200);
        assert_no_token("GET /v1/runs/{id}", &one.text);
    }
    let shown = api.get("/v1/runs?limit=0&showOutput=true");
    assert!(shown.text.contains("TOKEN-STDERR-1"), "{}", shown.text);
    let wf = api.get(&format!("/v1/workflow-runs/{wf_run}"));
    assert_eq!(wf.status, 200, "{}", wf.text);
    assert_no_token("GET /v1/workflow-runs/{id}", &wf.text);
    let events = api.sse("/v1/events?after=0", None);
    let mut finished = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while finished < runs.as_array().unwrap().len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let e = events
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("only {finished} run.finished events: {e}"));
        assert_no_token("/v1/events", &e.data);
        if e.event == "run.finished" {
            finished += 1;
        }
    }
}

/// The daemon's log names a failed run's error in our words, never its output.
#[test]
fn the_daemon_log_keeps_errors_in_our_words() {
    let w = leaky_world();
    w.ok(&[
        "create",
        "agent",
        "ticking",
        "--every",
        "1s",
        "--provider",
        "claude",
        "--prompt",
        "fail",
    ]);
    let mut d = w.daemon(&[]);
    wait_for(
        "a failed run by the daemon",
        Duration::from_secs(20),
        || {
            w.runs("ticking")
                .iter()
                .any(|r| r["status"] == "failed")
                .then_some(())
        },
    );
    d.stop();
    let log = d.log_text();
    assert!(log.contains("claude exited with status 1"), "{log}");
    assert_no_token("the daemon log", &log);
}
