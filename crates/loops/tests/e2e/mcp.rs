//! `loops mcp` driven by a real MCP client (the official Rust SDK's, `rmcp`) over the
//! binary's stdin/stdout: initialize, the tool list against the golden file of the
//! schemas, every tool called, the outputs compared with the CLI's `--json`, errors
//! as tool errors with the CLI's messages, and the safety switches (mutations, code,
//! secrets) refused and then allowed (`trust_mcp` tries the ways around them).
//!
//! The real agent's side (`real_claude_*`): the pinned `claude` CLI started with
//! `--mcp-config` pointing at `loops mcp`, against the mock model server, which asks
//! for `mcp__loops__loops_list` (and `loops_create_command`) and then answers text.

use crate::mock_model::{MockModel, Mode};
use crate::util::{wait_for, World};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Every tool the server must list (and the tests call).
const TOOLS: [&str; 25] = [
    "loops_budgets",
    "loops_create_agent",
    "loops_create_command",
    "loops_create_workflow",
    "loops_daemon_status",
    "loops_doctor",
    "loops_edit",
    "loops_health",
    "loops_holds",
    "loops_holds_clear",
    "loops_list",
    "loops_pause",
    "loops_remove",
    "loops_resume",
    "loops_run_now",
    "loops_runs",
    "loops_show",
    "loops_stop",
    "loops_usage",
    "workflow_cancel",
    "workflow_run",
    "workflow_run_inspect",
    "workflow_show",
    "workflow_validate",
    "workflows_list",
];

/// The tools the mutation switch guards.
const MUTATING: [&str; 12] = [
    "loops_create_agent",
    "loops_create_command",
    "loops_create_workflow",
    "loops_edit",
    "loops_holds_clear",
    "loops_pause",
    "loops_remove",
    "loops_resume",
    "loops_run_now",
    "loops_stop",
    "workflow_cancel",
    "workflow_run",
];

fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../loops-mcp/tests/golden/tools.json")
}

/// A `loops mcp` child of a world and the client connected to it.
pub(crate) struct Mcp {
    rt: tokio::runtime::Runtime,
    client: Option<RunningService<RoleClient, ()>>,
    child: tokio::process::Child,
    stderr: PathBuf,
}

/// One tool call's result: whether it is a tool error, and its text.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) is_error: bool,
    pub(crate) text: String,
}

impl Mcp {
    /// Starts `loops mcp FLAGS` in `w` and initializes the session.
    pub(crate) fn start(w: &World, flags: &[&str]) -> Self {
        let mut args = vec!["mcp"];
        args.extend_from_slice(flags);
        let stderr = w.root.path().join(format!("mcp-{}.stderr", next_tag()));
        let mut cmd = tokio::process::Command::from(w.cmd(&args));
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (child, client) = rt.block_on(async {
            let mut child = cmd.spawn().expect("spawn loops mcp");
            let stdout = child.stdout.take().unwrap();
            let stdin = child.stdin.take().unwrap();
            let client = tokio::time::timeout(Duration::from_secs(30), ().serve((stdout, stdin)))
                .await
                .expect("initialize within 30s")
                .expect("initialize");
            (child, client)
        });
        Self {
            rt,
            client: Some(client),
            child,
            stderr,
        }
    }

    fn client(&self) -> &RunningService<RoleClient, ()> {
        self.client.as_ref().unwrap()
    }

    pub(crate) fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Calls `tool` with `args`; a protocol error fails the test.
    pub(crate) fn call(&self, tool: &str, args: Value) -> Reply {
        let result = self.try_call(tool, args.clone()).unwrap_or_else(|e| {
            panic!(
                "{tool} {args}: protocol error {e}; server stderr:\n{}",
                self.stderr_text()
            )
        });
        let text = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("");
        Reply {
            is_error: result.is_error == Some(true),
            text,
        }
    }

    fn try_call(&self, tool: &str, args: Value) -> Result<CallToolResult, rmcp::ServiceError> {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), self.client().call_tool(params))
                .await
                .expect("tool call within 60s")
        })
    }

    /// Calls `tool`, asserts success, and parses the JSON document it returned.
    pub(crate) fn ok(&self, tool: &str, args: Value) -> Value {
        let reply = self.call(tool, args.clone());
        assert!(!reply.is_error, "{tool} {args} failed: {}", reply.text);
        serde_json::from_str(&reply.text)
            .unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {}", reply.text))
    }

    /// Calls `tool`, asserts a tool error, and returns its message.
    pub(crate) fn err(&self, tool: &str, args: Value) -> String {
        let reply = self.call(tool, args.clone());
        assert!(
            reply.is_error,
            "{tool} {args} unexpectedly succeeded: {}",
            reply.text
        );
        reply.text
    }

    pub(crate) fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.rt
            .block_on(self.client().list_all_tools())
            .expect("tools/list")
    }

    /// Closes the session (the server's stdin ends) and waits for the server to exit.
    pub(crate) fn close(mut self) -> std::process::ExitStatus {
        let client = self.client.take().unwrap();
        self.rt.block_on(async {
            let _ = client.cancel().await;
            tokio::time::timeout(Duration::from_secs(30), self.child.wait())
                .await
                .expect("loops mcp exits within 30s of its stdin closing")
                .unwrap()
        })
    }
}

/// A name for the next server's stderr file in a world.
fn next_tag() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

/// `loops --json ARGS`'s document whatever its exit code (`doctor` and `daemon status`
/// exit 1 on a failed check).
fn cli_doc(w: &World, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = w.run(&all);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "loops {args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The CLI's error line for `args`, without its `error: ` prefix.
pub(crate) fn cli_error(w: &World, args: &[&str]) -> String {
    let (_, stderr) = w.fail(args);
    let line = stderr.trim_end();
    line.strip_prefix("error: ")
        .unwrap_or_else(|| panic!("not an error line: {line:?}"))
        .to_owned()
}

/// A workflow spec file with one command step per `(id, shell command)`, in order.
pub(crate) fn write_spec(w: &World, name: &str, steps: &[(&str, &str)]) -> PathBuf {
    let steps: Vec<Value> = steps
        .iter()
        .map(|(id, cmd)| json!({"id": id, "target": {"type": "command", "command": cmd, "shell": true}}))
        .collect();
    let path = w.root.path().join(format!("{name}.json"));
    std::fs::write(&path, json!({"name": name, "steps": steps}).to_string()).unwrap();
    path
}

#[test]
fn initializes_and_lists_the_golden_tool_schemas() {
    let w = World::new();
    let mcp = Mcp::start(&w, &[]);
    let info = mcp.client().peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("loops")
    );
    assert!(info.capabilities.tools.is_some());
    assert!(info
        .instructions
        .as_deref()
        .is_some_and(|i| i.contains("--allow-mutations")));
    let tools = mcp.tools();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, TOOLS, "the tools listed");
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or("");
        assert!(
            description.len() > 80,
            "{}: describe it for a model",
            tool.name
        );
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["type"], "object", "{}", tool.name);
        let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint);
        assert_eq!(
            read_only,
            Some(!MUTATING.contains(&&*tool.name)),
            "{}: readOnlyHint",
            tool.name
        );
    }
    // What the binary lists over the wire is the golden file (`UPDATE_GOLDEN=1 cargo
    // test -p loops-mcp --test golden` rewrites it from the same list).
    let listed = loops_mcp::tools_document(&tools);
    let golden = std::fs::read_to_string(golden_path()).unwrap();
    assert!(
        listed == golden,
        "the tool schemas served differ from {}; run UPDATE_GOLDEN=1 cargo test -p loops-mcp --test golden and commit the diff",
        golden_path().display()
    );
    // Nothing but protocol on stdout: the client parsed every line of it.
    assert!(mcp.close().success());
}

#[test]
fn read_tools_return_what_the_cli_prints() {
    let w = World::new();
    w.create_cmd("alpha", &["--every", "5m", "--label", "team"], "echo alpha");
    w.create_cmd("beta", &["--cron", "0 9 * * *"], "echo beta");
    w.ok(&["pause", "beta"]);
    w.ok(&["run-now", "alpha"]);
    let spec = write_spec(&w, "pipeline", &[("build", "echo built")]);
    w.ok(&["workflows", "create", spec.to_str().unwrap()]);
    w.ok(&["workflows", "run", "pipeline"]);
    let wf_run = w.json(&["workflows", "runs"])[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let mcp = Mcp::start(&w, &[]);
    let same = |tool: &str, args: Value, cli: &[&str]| {
        assert_eq!(
            mcp.ok(tool, args.clone()),
            w.json(cli),
            "{tool} {args} vs loops {cli:?}"
        );
    };
    same("loops_list", json!({}), &["list"]);
    same(
        "loops_list",
        json!({"status": "paused"}),
        &["list", "--status", "paused"],
    );
    same(
        "loops_list",
        json!({"labels": ["team"]}),
        &["list", "--label", "team"],
    );
    let limited = mcp.ok("loops_list", json!({"limit": 1}));
    assert_eq!(limited, json!([w.json(&["list"])[0]]));
    same("loops_show", json!({"loop": "alpha"}), &["show", "alpha"]);
    same("loops_runs", json!({}), &["runs"]);
    same(
        "loops_runs",
        json!({"loop": "alpha", "status": ["succeeded"], "since": "1h", "limit": 0}),
        &[
            "runs",
            "alpha",
            "--status",
            "succeeded",
            "--since",
            "1h",
            "--limit",
            "0",
        ],
    );
    let runs = mcp.ok("loops_runs", json!({"loop": "alpha"}));
    assert_eq!(runs[0]["stdout"], "[redacted 6 bytes; use --show-output]");
    assert_eq!(
        mcp.ok("loops_daemon_status", json!({})),
        cli_doc(&w, &["daemon", "status"])
    );
    assert_eq!(mcp.ok("loops_doctor", json!({})), cli_doc(&w, &["doctor"]));
    // health and usage carry the instant they were taken at / from.
    let without = |mut doc: Value, field: &str| {
        doc.as_object_mut().unwrap().remove(field);
        doc
    };
    assert_eq!(
        without(mcp.ok("loops_health", json!({"labels": ["team"]})), "at"),
        without(cli_doc(&w, &["health", "--label", "team"]), "at")
    );
    assert_eq!(
        without(
            mcp.ok("loops_usage", json!({"by": "day", "since": "2d"})),
            "since"
        ),
        without(w.json(&["usage", "--by", "day", "--since", "2d"]), "since")
    );
    same("workflows_list", json!({}), &["workflows", "list"]);
    same(
        "workflows_list",
        json!({"all": true}),
        &["workflows", "list", "--all"],
    );
    same(
        "workflow_show",
        json!({"workflow": "pipeline"}),
        &["workflows", "show", "pipeline"],
    );
    same(
        "workflow_run_inspect",
        json!({"run": wf_run}),
        &["workflows", "inspect", &wf_run],
    );
    same(
        "workflow_validate",
        json!({"file": spec}),
        &["workflows", "validate", spec.to_str().unwrap()],
    );
    let inline = mcp.ok(
        "workflow_validate",
        json!({"spec": {"name": "inline", "steps": [{"id": "a", "target": {"type": "command", "command": "true", "args": [], "shell": false}}]}}),
    );
    assert_eq!(inline, json!({"valid": true, "name": "inline", "steps": 1}));
    assert!(mcp.close().success());
}

#[test]
fn errors_are_tool_errors_with_the_cli_messages() {
    let w = World::new();
    w.create_cmd("alpha", &["--every", "5m"], "echo alpha");
    let mcp = Mcp::start(&w, &["--allow-code"]);
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("loops_show", json!({"loop": "nope"}), vec!["show", "nope"]),
        (
            "loops_list",
            json!({"status": "sleeping"}),
            vec!["list", "--status", "sleeping"],
        ),
        (
            "loops_runs",
            json!({"since": "yesterday-ish"}),
            vec!["runs", "--since", "yesterday-ish"],
        ),
        (
            "loops_create_command",
            json!({"name": "broken", "cmd": "/bin/true", "noShell": true, "every": "0s"}),
            vec![
                "create",
                "command",
                "broken",
                "--cmd",
                "/bin/true",
                "--no-shell",
                "--every",
                "0s",
            ],
        ),
        (
            "loops_create_command",
            json!({"name": "broken", "cmd": "/bin/true", "noShell": true, "every": "1m", "catchUp": "sometimes"}),
            vec![
                "create",
                "command",
                "broken",
                "--cmd",
                "/bin/true",
                "--no-shell",
                "--every",
                "1m",
                "--catch-up",
                "sometimes",
            ],
        ),
        (
            "loops_create_command",
            json!({"name": "alpha", "cmd": "/bin/true", "noShell": true, "every": "1m"}),
            vec![
                "create",
                "command",
                "alpha",
                "--cmd",
                "/bin/true",
                "--no-shell",
                "--every",
                "1m",
            ],
        ),
        (
            "loops_edit",
            json!({"loop": "alpha", "prompt": "hi"}),
            vec!["edit", "alpha", "--prompt", "hi"],
        ),
        (
            "loops_resume",
            json!({"loop": "nope"}),
            vec!["resume", "nope"],
        ),
        (
            "workflow_show",
            json!({"workflow": "nope"}),
            vec!["workflows", "show", "nope"],
        ),
        (
            "workflow_run_inspect",
            json!({"run": "nope"}),
            vec!["workflows", "inspect", "nope"],
        ),
    ];
    for (tool, args, cli) in cases {
        assert_eq!(
            mcp.err(tool, args.clone()),
            cli_error(&w, &cli),
            "{tool} {args}"
        );
    }
    // Nothing was created by the refused calls.
    let names: Vec<Value> = w
        .json(&["list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].clone())
        .collect();
    assert_eq!(names, [json!("alpha")]);
    // Protocol errors are for malformed calls only: an unknown tool.
    assert!(mcp.try_call("loops_nope", json!({})).is_err());
    // Parameters that do not fit the schema are refused, naming the field.
    let misspelled = mcp.err("loops_show", json!({"lop": "alpha"}));
    assert!(misspelled.contains("unknown field `lop`"), "{misspelled}");
    assert!(mcp.close().success());
}

#[test]
fn mutations_are_refused_then_allowed() {
    let w = World::new();
    w.create_cmd("alpha", &["--every", "5m"], "echo alpha");
    let spec = write_spec(&w, "slow", &[("nap", "sleep 30")]);
    w.ok(&["workflows", "create", spec.to_str().unwrap()]);
    let before = w.json(&["list"]);

    // Read-only by default: every mutating tool is listed, and refuses.
    let mcp = Mcp::start(&w, &[]);
    let attempts: Vec<(&str, Value)> = vec![
        (
            "loops_create_command",
            json!({"name": "n", "cmd": "/bin/true", "noShell": true, "every": "1m"}),
        ),
        (
            "loops_create_agent",
            json!({"name": "n", "provider": "claude", "prompt": "hi", "every": "1m"}),
        ),
        (
            "loops_create_workflow",
            json!({"name": "n", "workflow": "slow", "every": "1m"}),
        ),
        ("loops_edit", json!({"loop": "alpha", "every": "1m"})),
        ("loops_holds_clear", json!({"provider": "claude"})),
        ("loops_pause", json!({"loop": "alpha"})),
        ("loops_resume", json!({"loop": "alpha"})),
        ("loops_stop", json!({"loop": "alpha"})),
        ("loops_remove", json!({"loop": "alpha", "confirm": true})),
        ("loops_run_now", json!({"loop": "alpha"})),
        ("workflow_run", json!({"workflow": "slow"})),
        ("workflow_cancel", json!({"run": "nope"})),
    ];
    let refused: BTreeSet<&str> = attempts.iter().map(|(t, _)| *t).collect();
    assert_eq!(refused, MUTATING.into_iter().collect());
    for (tool, args) in &attempts {
        let message = mcp.err(tool, args.clone());
        assert!(
            message.starts_with(&format!(
                "{tool} changes loops or runs, and this MCP server is read-only"
            )) && message.contains("--allow-mutations")
                && message.contains("LOOPS_MCP_ALLOW_MUTATIONS=1"),
            "{message}"
        );
    }
    assert!(mcp.close().success());
    assert_eq!(w.json(&["list"]), before, "a refused call changed nothing");
    assert_eq!(w.json(&["runs"]), json!([]));

    // Allowed by the environment variable as by the flag; defining what runs needs
    // --allow-code (trust_mcp tries every way around that).
    let mut w = w;
    w.extra_env
        .push(("LOOPS_MCP_ALLOW_MUTATIONS".into(), "1".into()));
    let mcp = Mcp::start(&w, &[]);
    assert_eq!(
        mcp.ok("loops_pause", json!({"loop": "alpha"}))["status"],
        "paused"
    );
    let refused = mcp.err(
        "loops_create_command",
        json!({"name": "argv", "cmd": "/bin/echo", "noShell": true, "every": "10m"}),
    );
    assert!(
        refused.starts_with("loops_create_command defines what runs"),
        "{refused}"
    );
    assert!(mcp.close().success());
    w.extra_env = vec![("LOOPS_MCP_ALLOW_CODE".into(), "1".into())];
    let mcp = Mcp::start(&w, &[]);
    let created = mcp.ok(
        "loops_create_command",
        json!({"name": "argv", "cmd": "/bin/echo", "noShell": true, "args": ["from", "mcp"], "every": "10m", "labels": ["mcp"]}),
    );
    assert_eq!(created, w.json(&["show", "argv"]));
    assert_eq!(created["target"]["args"], json!(["from", "mcp"]));
    // A program with its args is argv without noShell, as `create command` takes it
    // (issue #19, item 15).
    let argv = mcp.ok(
        "loops_create_command",
        json!({"name": "argv2", "cmd": "/bin/echo", "args": ["a b"], "every": "10m"}),
    );
    assert_eq!(argv["target"]["shell"], false, "{argv}");
    assert_eq!(argv["target"]["args"], json!(["a b"]));
    // A cmd alone is a shell line, as in the CLI.
    let line = mcp.ok(
        "loops_create_command",
        json!({"name": "line", "cmd": "echo hi", "every": "10m"}),
    );
    assert_eq!(line["target"]["shell"], true, "{line}");
    let agent = mcp.ok(
        "loops_create_agent",
        json!({"name": "agent", "provider": "claude", "prompt": "secret plan", "every": "1h", "env": {"TOKEN": "s3cret"}}),
    );
    assert_eq!(
        agent["target"]["prompt"],
        "[redacted 11 chars; use --show-output]"
    );
    assert_eq!(agent["target"]["env"]["TOKEN"], "[redacted]");
    let wf_loop = mcp.ok(
        "loops_create_workflow",
        json!({"name": "nightly", "workflow": "slow", "cron": "0 3 * * *", "tz": "UTC"}),
    );
    assert_eq!(wf_loop["target"]["workflow"], "slow");

    let edited = mcp.ok(
        "loops_edit",
        json!({"loop": "argv", "every": "20m", "attempts": 3, "unlabel": ["mcp"]}),
    );
    assert_eq!(edited["schedule"]["everyMs"], 1_200_000);
    assert_eq!(edited["maxAttempts"], 3);
    assert_eq!(edited["labels"], json!([]));
    assert_eq!(
        mcp.ok("loops_pause", json!({"loop": "argv"}))["status"],
        "paused"
    );
    assert_eq!(
        mcp.ok("loops_resume", json!({"loop": "argv"}))["status"],
        "active"
    );
    assert_eq!(
        mcp.ok("loops_stop", json!({"loop": "argv"}))["status"],
        "stopped"
    );
    assert_eq!(w.json(&["show", "argv"])["status"], "stopped");

    // run-now returns at once with the running run; with wait, as recorded.
    let started = mcp.ok("loops_run_now", json!({"loop": "argv"}));
    assert_eq!(started["loopName"], "argv");
    assert_eq!(started["runNow"]["source"], "ad_hoc");
    let id = started["id"].as_str().unwrap().to_owned();
    let done = wait_for(
        "the detached run to be recorded",
        Duration::from_secs(30),
        || {
            let runs = mcp.ok("loops_runs", json!({"loop": "argv"}));
            runs.as_array()?
                .iter()
                .find(|r| r["id"] == id.as_str() && r["status"] != "running")
                .cloned()
        },
    );
    assert_eq!(done["status"], "succeeded", "{done:#}");
    let waited = mcp.ok(
        "loops_run_now",
        json!({"loop": "argv", "wait": true, "waitTimeout": "30s"}),
    );
    assert_eq!(waited["status"], "succeeded", "{waited:#}");
    assert_eq!(waited["stdout"], "[redacted 9 bytes; use --show-output]");
    assert_eq!(waited["exitCode"], 0);

    // A workflow run detached, then cancelled from the same session.
    let run = mcp.ok("workflow_run", json!({"workflow": "slow"}));
    assert_eq!(run["workflowRun"]["status"], "running", "{run:#}");
    let run_id = run["workflowRun"]["id"].as_str().unwrap().to_owned();
    wait_for("the step to start", Duration::from_secs(30), || {
        let doc = mcp.ok("workflow_run_inspect", json!({"run": run_id}));
        (doc["steps"][0]["status"] == "running").then_some(())
    });
    let cancelled = mcp.ok(
        "workflow_cancel",
        json!({"run": run_id, "reason": "test over"}),
    );
    assert_eq!(cancelled["id"], run_id.as_str());
    let ended = wait_for("the cancelled run to end", Duration::from_secs(30), || {
        let doc = mcp.ok("workflow_run_inspect", json!({"run": run_id}));
        (doc["workflowRun"]["status"] != "running").then_some(doc)
    });
    assert_eq!(ended["workflowRun"]["status"], "cancelled", "{ended:#}");

    // remove needs confirm: true.
    let unconfirmed = mcp.err("loops_remove", json!({"loop": "argv"}));
    assert!(unconfirmed.contains("confirm: true"), "{unconfirmed}");
    assert_eq!(w.json(&["show", "argv"])["name"], "argv");
    let removed = mcp.ok("loops_remove", json!({"loop": "argv", "confirm": true}));
    assert_eq!(
        removed,
        json!({"removed": true, "id": created["id"], "name": "argv"})
    );
    let (_, gone) = w.fail(&["show", "argv"]);
    assert!(gone.contains("no loop named"), "{gone}");
    assert!(mcp.close().success());
}

#[test]
fn runner_labels_are_set_over_mcp_as_with_the_cli() {
    let Some((w, _)) = crate::several_hosts::pg_world() else {
        return;
    };
    let spec = write_spec(&w, "wf", &[("a", "true")]);
    w.ok(&["workflows", "create", spec.to_str().unwrap()]);
    let mcp = Mcp::start(&w, &["--allow-code"]);
    let created = mcp.ok(
        "loops_create_command",
        json!({"name": "cmd", "cmd": "/bin/true", "noShell": true, "every": "1h", "on": ["gpu", "claude-auth"]}),
    );
    assert_eq!(created["runsOn"], json!(["claude-auth", "gpu"]));
    assert_eq!(created, w.json(&["show", "cmd"]));
    let agent = mcp.ok(
        "loops_create_agent",
        json!({"name": "agent", "provider": "claude", "prompt": "hi", "every": "1h", "on": ["claude-auth"]}),
    );
    assert_eq!(agent["runsOn"], json!(["claude-auth"]));
    let flow = mcp.ok(
        "loops_create_workflow",
        json!({"name": "flow", "workflow": "wf", "every": "1h", "on": ["gpu"]}),
    );
    assert_eq!(flow["runsOn"], json!(["gpu"]));
    // edit adds, clear "on" clears (as `edit --on` and `edit --clear on`).
    let edited = mcp.ok("loops_edit", json!({"loop": "flow", "on": ["big"]}));
    assert_eq!(edited["runsOn"], json!(["big", "gpu"]));
    let cleared = mcp.ok("loops_edit", json!({"loop": "flow", "clear": ["on"]}));
    assert!(cleared.get("runsOn").is_none(), "{cleared}");
    assert_eq!(cleared, w.json(&["show", "flow"]));
    // A bad runner label: the CLI's message.
    let bad = mcp.err(
        "loops_create_command",
        json!({"name": "mislabelled", "cmd": "/bin/true", "noShell": true, "every": "1h", "on": ["Not Ok"]}),
    );
    assert_eq!(
        bad,
        cli_error(
            &w,
            &[
                "create",
                "command",
                "mislabelled",
                "--cmd",
                "true",
                "--every",
                "1h",
                "--on",
                "Not Ok"
            ]
        )
    );
    assert!(mcp.close().success());

    // On SQLite the same refusal as the CLI's, and nothing written.
    let w = World::new();
    w.create_cmd("plain", &["--every", "1h"], "true");
    let mcp = Mcp::start(&w, &["--allow-code"]);
    let refused = mcp.err(
        "loops_create_command",
        json!({"name": "cmd", "cmd": "/bin/true", "noShell": true, "every": "1h", "on": ["gpu"]}),
    );
    let cli = cli_error(
        &w,
        &[
            "create", "command", "cmd", "--cmd", "true", "--every", "1h", "--on", "gpu",
        ],
    );
    assert_eq!(refused, cli);
    assert!(
        refused.contains("runner labels need a store with runners"),
        "{refused}"
    );
    let refused = mcp.err("loops_edit", json!({"loop": "plain", "on": ["gpu"]}));
    assert_eq!(refused, cli_error(&w, &["edit", "plain", "--on", "gpu"]));
    assert!(mcp.close().success());
    let names: Vec<Value> = w
        .json(&["list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].clone())
        .collect();
    assert_eq!(names, [json!("plain")]);
    assert!(w.json(&["show", "plain"]).get("runsOn").is_none());
}

#[test]
fn code_and_secrets_need_their_switches() {
    let w = World::new();
    w.ok(&[
        "create",
        "agent",
        "agent",
        "--provider",
        "claude",
        "--prompt",
        "the secret plan",
        "--every",
        "1h",
        "--env",
        "TOKEN=s3cret",
    ]);
    let mcp = Mcp::start(&w, &["--allow-mutations"]);
    let refused = mcp.err("loops_show", json!({"loop": "agent", "showOutput": true}));
    assert!(refused.contains("--allow-secrets"), "{refused}");
    let shown = mcp.ok("loops_show", json!({"loop": "agent"}));
    assert_eq!(shown["target"]["env"]["TOKEN"], "[redacted]");
    let refused = mcp.err(
        "loops_create_command",
        json!({"name": "sh", "cmd": "echo $((6 * 7))", "every": "1h"}),
    );
    assert!(refused.contains("--allow-code"), "{refused}");
    assert!(mcp.close().success());

    let mcp = Mcp::start(&w, &["--allow-code", "--allow-secrets"]);
    let shown = mcp.ok("loops_show", json!({"loop": "agent", "showOutput": true}));
    assert_eq!(shown, w.json(&["show", "agent", "--show-output"]));
    assert_eq!(shown["target"]["prompt"], "the secret plan");
    let sh = mcp.ok(
        "loops_create_command",
        json!({"name": "sh", "cmd": "echo $((6 * 7))", "every": "1h"}),
    );
    assert_eq!(sh["target"]["shell"], true);
    let run = mcp.ok(
        "loops_run_now",
        json!({"loop": "sh", "wait": true, "showOutput": true}),
    );
    assert_eq!(run["stdout"], "42\n", "{run:#}");
    assert!(mcp.close().success());
}

#[test]
fn a_run_started_over_mcp_is_seen_through_when_the_client_goes_away() {
    let w = World::new();
    w.ok(&[
        "create",
        "command",
        "slow",
        "--cmd",
        "sleep 1; echo done",
        "--every",
        "1h",
    ]);
    let mcp = Mcp::start(&w, &["--allow-mutations"]);
    let started = mcp.ok("loops_run_now", json!({"loop": "slow"}));
    assert_eq!(started["status"], "running");
    // The client leaves at once; the server finishes the run, then exits.
    assert!(mcp.close().success());
    let runs = w.json(&["runs", "slow", "--show-output"]);
    assert_eq!(runs[0]["status"], "succeeded", "{runs:#}");
    assert_eq!(runs[0]["stdout"], "done\n");
}

#[test]
fn every_listed_tool_answers() {
    let w = World::new();
    w.create_cmd("alpha", &["--every", "5m"], "echo alpha");
    let spec = write_spec(&w, "quick", &[("a", "echo a")]);
    w.ok(&["workflows", "create", spec.to_str().unwrap()]);
    w.ok(&["workflows", "run", "quick"]);
    let done_run = w.json(&["workflows", "runs"])[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mcp = Mcp::start(&w, &["--allow-code"]);
    let calls: Vec<(&str, Value)> = vec![
        ("loops_list", json!({})),
        ("loops_show", json!({"loop": "alpha"})),
        ("loops_runs", json!({"limit": 5})),
        ("loops_daemon_status", json!({})),
        ("loops_doctor", json!({})),
        ("loops_health", json!({})),
        ("loops_usage", json!({"by": "provider", "since": "30d"})),
        ("loops_holds", json!({})),
        ("loops_budgets", json!({})),
        (
            "loops_holds_clear",
            json!({"provider": "claude", "account": "work"}),
        ),
        ("workflows_list", json!({})),
        ("workflow_show", json!({"workflow": "quick"})),
        ("workflow_validate", json!({"file": spec})),
        ("workflow_run_inspect", json!({"run": done_run})),
        (
            "loops_create_command",
            json!({"name": "cmd-loop", "cmd": "/bin/true", "noShell": true, "every": "1h"}),
        ),
        (
            "loops_create_agent",
            json!({"name": "agent-loop", "provider": "codex", "prompt": "hi", "dynamic": "1h"}),
        ),
        (
            "loops_create_workflow",
            json!({"name": "wf-loop", "workflow": "quick", "at": "+1h"}),
        ),
        (
            "loops_edit",
            json!({"loop": "cmd-loop", "description": "edited over MCP"}),
        ),
        ("loops_pause", json!({"loop": "cmd-loop"})),
        ("loops_resume", json!({"loop": "cmd-loop"})),
        ("loops_stop", json!({"loop": "cmd-loop"})),
        ("loops_run_now", json!({"loop": "cmd-loop", "wait": true})),
        ("workflow_run", json!({"workflow": "quick", "wait": true})),
        ("loops_remove", json!({"loop": "cmd-loop", "confirm": true})),
    ];
    for (tool, args) in &calls {
        mcp.ok(tool, args.clone());
    }
    // workflow_cancel answers for a run that is over with the CLI's refusal.
    let over = mcp.err("workflow_cancel", json!({"run": done_run}));
    assert_eq!(over, cli_error(&w, &["workflows", "cancel", &done_run]));
    let called: BTreeSet<&str> = calls
        .iter()
        .map(|(t, _)| *t)
        .chain(["workflow_cancel"])
        .collect();
    assert_eq!(called, TOOLS.into_iter().collect(), "every tool is called");
    assert!(mcp.close().success());
}

// ---------------------------------------------------------------------------------
// A real agent: claude with `loops mcp` as its MCP server.

/// Runs the pinned `claude` once with `prompt`, `loops mcp FLAGS` as its only MCP
/// server, against `mock`; `None` when claude is not installed (see
/// [`crate::agents::real_cli`]). Returns claude's stdout.
fn claude_with_loops(
    w: &World,
    mock: &MockModel,
    mcp_flags: &[&str],
    prompt: &str,
) -> Option<String> {
    let bin = crate::agents::real_cli("claude")?;
    let mut args = vec!["mcp".to_owned()];
    args.extend(mcp_flags.iter().map(|f| (*f).to_owned()));
    let config = json!({"mcpServers": {"loops": {
        "type": "stdio",
        "command": crate::util::bin(),
        "args": args,
        "env": {"LOOPS_DATA_DIR": w.data.to_str().unwrap(), "TZ": "UTC"}
    }}});
    let config_path = w.root.path().join("mcp.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let work = w.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let out = std::process::Command::new(bin.join("claude"))
        .env_clear()
        .env("PATH", format!("{}:{path}", bin.display()))
        .env("HOME", &w.home)
        .env("ANTHROPIC_BASE_URL", mock.url())
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .env("MCP_TIMEOUT", "30000")
        // MCP tools in the request itself, not deferred behind a tool search.
        .env("ENABLE_TOOL_SEARCH", "false")
        .current_dir(&work)
        .args([
            "-p",
            prompt,
            "--output-format",
            "json",
            "--mcp-config",
            config_path.to_str().unwrap(),
            "--strict-mcp-config",
            "--allowedTools",
            "mcp__loops__loops_list,mcp__loops__loops_create_command",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run claude");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "claude failed ({:?}):\nstdout: {stdout}\nstderr: {}\nmock saw: {:#?}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        mock.requests()
    );
    Some(stdout)
}

/// The `tool_result` blocks of the model requests, in order: (content text, isError).
fn tool_results(mock: &MockModel) -> Vec<(String, bool)> {
    let mut found: Vec<(String, bool)> = Vec::new();
    for request in mock.requests() {
        let body: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
        let Some(messages) = body["messages"].as_array() else {
            continue;
        };
        let here: Vec<(String, bool)> = messages
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| {
                let text = match &b["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(""),
                    other => other.to_string(),
                };
                (text, b["is_error"] == true)
            })
            .collect();
        // Each request carries the whole conversation: keep the longest.
        if here.len() > found.len() {
            found = here;
        }
    }
    found
}

#[test]
fn real_claude_lists_loops_and_creates_one_through_mcp() {
    let w = World::new();
    w.create_cmd("nightly-backup", &["--cron", "0 2 * * *"], "echo backup");
    w.create_cmd("hourly-report", &["--every", "1h"], "echo report");
    let create = json!({"name": "follow-up", "cmd": "/bin/echo", "noShell": true, "args": ["check", "the", "build"], "at": "+1h"});
    let mock = MockModel::start(Mode::Tools {
        calls: vec![
            ("mcp__loops__loops_list".into(), json!({})),
            ("mcp__loops__loops_create_command".into(), create),
        ],
        reply: "Scheduled the follow-up.".into(),
    });
    let Some(stdout) = claude_with_loops(
        &w,
        &mock,
        &["--allow-code"],
        "List my loops and schedule a follow-up check in an hour.",
    ) else {
        return;
    };
    let results = tool_results(&mock);
    if std::env::var_os("LOOPS_DEBUG_MOCK").is_some() {
        for r in mock.requests() {
            eprintln!("REQUEST {} {}\n{}\n", r.method, r.path, r.body);
        }
    }
    assert_eq!(
        results.len(),
        2,
        "tool results the model received: {results:#?}\nclaude: {stdout}"
    );
    let (listed, listed_error) = &results[0];
    assert!(!listed_error, "{listed}");
    assert!(
        listed.contains("nightly-backup") && listed.contains("hourly-report"),
        "the model did not get the loop names: {listed}"
    );
    let (created, created_error) = &results[1];
    assert!(!created_error, "{created}");
    assert!(created.contains("follow-up"), "{created}");
    let lp = w.json(&["show", "follow-up"]);
    assert_eq!(lp["target"]["args"], json!(["check", "the", "build"]));
    assert_eq!(lp["schedule"]["type"], "once");
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    assert_eq!(answer["result"], "Scheduled the follow-up.", "{stdout}");
}

#[test]
fn real_claude_is_refused_a_mutation_by_a_read_only_server() {
    let w = World::new();
    w.create_cmd("nightly-backup", &["--cron", "0 2 * * *"], "echo backup");
    let create = json!({"name": "sneaky", "cmd": "/bin/true", "noShell": true, "every": "1m"});
    let mock = MockModel::start(Mode::Tools {
        calls: vec![
            ("mcp__loops__loops_list".into(), json!({})),
            ("mcp__loops__loops_create_command".into(), create),
        ],
        reply: "I could not schedule it.".into(),
    });
    let Some(stdout) = claude_with_loops(&w, &mock, &[], "Schedule something.") else {
        return;
    };
    let results = tool_results(&mock);
    assert_eq!(results.len(), 2, "{results:#?}\nclaude: {stdout}");
    assert!(results[0].0.contains("nightly-backup"), "{results:#?}");
    let (refusal, is_error) = &results[1];
    assert!(is_error, "{refusal}");
    assert!(
        refusal.contains("read-only") && refusal.contains("--allow-mutations"),
        "{refusal}"
    );
    let names: Vec<Value> = w
        .json(&["list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].clone())
        .collect();
    assert_eq!(names, [json!("nightly-backup")], "nothing was created");
}

/// Output-derived text (an agent's summary, what a failure quoted from the output) is
/// redacted by every read and run tool, as stdout is, unless `showOutput` is allowed
/// (issue #19, items 1 and 2).
#[test]
fn output_derived_text_stays_redacted_over_mcp() {
    use crate::trust_secrets::{assert_no_token, leaky_world, TOKENS};
    let w = leaky_world();
    for name in ["agent-fail", "agent-said", "agent-ok", "cmd-fail"] {
        w.run(&["run-now", name]);
    }
    w.run(&["workflows", "run", "wf"]);
    let wf_run = w.json(&["workflows", "runs"])[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mcp = Mcp::start(&w, &["--allow-mutations"]);
    let runs = mcp.ok("loops_runs", json!({"limit": 0}));
    assert_no_token("loops_runs", &runs.to_string());
    assert_eq!(runs.as_array().unwrap().len(), 4, "{runs}");
    for name in ["agent-fail", "agent-said", "agent-ok", "cmd-fail"] {
        let shown = mcp.ok("loops_show", json!({"loop": name}));
        assert_no_token("loops_show", &shown.to_string());
        let reply = mcp.call("loops_run_now", json!({"loop": name, "wait": true}));
        assert_no_token("loops_run_now", &reply.text);
    }
    let inspected = mcp.ok("workflow_run_inspect", json!({"run": wf_run}));
    assert_no_token("workflow_run_inspect", &inspected.to_string());
    let reply = mcp.call("workflow_run", json!({"workflow": "wf", "wait": true}));
    assert_no_token("workflow_run", &reply.text);
    assert_no_token(
        "loops_health",
        &mcp.ok("loops_health", json!({})).to_string(),
    );
    mcp.close();
    // Allowed and asked for, they are shown.
    let mcp = Mcp::start(&w, &["--allow-secrets"]);
    let runs = mcp
        .ok("loops_runs", json!({"limit": 0, "showOutput": true}))
        .to_string();
    for token in TOKENS.iter().filter(|t| !t.contains("STEP")) {
        assert!(runs.contains(token), "{token}: {runs}");
    }
    mcp.close();
}
