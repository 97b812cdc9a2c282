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
