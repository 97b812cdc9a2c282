//! Provider options (issue #20 item 10): `--permission-mode`, `--sandbox`, `--effort`,
//! `--variant`, `--add-dir`, `--max-turns`, `--allow-tool`, `--deny-tool` through the
//! real binary — the argv each fake CLI is given, `show`, `edit` and `--clear`,
//! bundles, the API, MCP's gate, the one-line refusals — and each real CLI run with
//! each option it has against the mock model server.

use crate::agents::{create_agent, real_cli, real_world, run_now, Fakes, RealCli, REPLY};
use crate::mock_model::{MockModel, Mode};
use crate::util::World;
use serde_json::{json, Value};
use std::path::Path;

/// `create agent` run in `dir` (relative `--add-dir`s resolve against it).
fn create_in(w: &World, dir: &Path, name: &str, provider: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "--json",
        "create",
        "agent",
        name,
        "--provider",
        provider,
        "--every",
        "1h",
    ];
    args.extend_from_slice(extra);
    let out = w.cmd(&args).current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The words of `argv` after `flag`, each time it appears.
fn after(argv: &[String], flag: &str) -> Vec<String> {
    argv.windows(2)
        .filter(|p| p[0] == flag)
        .map(|p| p[1].clone())
        .collect()
}

#[test]
fn options_reach_each_cli_and_are_shown_edited_and_cleared() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &crate::agents::fixture("claude_success.json"), 0);
    fakes.canned("codex", &crate::agents::fixture("codex_success.jsonl"), 0);
    fakes.canned(
        "opencode",
        &crate::agents::fixture("opencode_success.jsonl"),
        0,
    );
    let work = w.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Made absolute as --cwd is: joined to where create ran.
    let lib_s = format!("{}/../lib", work.display());

    let lp = create_in(
        &w,
        &work,
        "review",
        "claude",
        &[
            "--prompt",
            "hi",
            "--permission-mode",
            "plan",
            "--effort",
            "high",
            "--add-dir",
            "../lib",
            "--add-dir",
            "/data",
            "--max-turns",
            "20",
            "--allow-tool",
            "Bash(git:*)",
            "--deny-tool",
            "WebFetch",
        ],
    );
    let t = &lp["target"];
    assert_eq!(t["permissionMode"], "plan", "{t:#}");
    assert_eq!(t["effort"], "high");
    assert_eq!(
        t["addDirs"],
        json!([lib_s, "/data"]),
        "relative to where create ran"
    );
    assert_eq!(t["maxTurns"], 20);
    assert_eq!(t["allowTools"], json!(["Bash(git:*)"]));
    assert_eq!(t["denyTools"], json!(["WebFetch"]));
    let (code, run) = run_now(&w, "review");
    assert_eq!(code, 0, "{run:#}");
    let argv = fakes.argv("claude");
    assert_eq!(after(&argv, "--permission-mode"), ["plan"]);
    assert_eq!(after(&argv, "--effort"), ["high"]);
    assert_eq!(after(&argv, "--add-dir"), [lib_s.as_str(), "/data"]);
    assert_eq!(after(&argv, "--max-turns"), ["20"]);
    assert_eq!(after(&argv, "--allowed-tools"), ["Bash(git:*)"]);
    assert_eq!(after(&argv, "--disallowed-tools"), ["WebFetch"]);

    let text = w.ok(&["show", "review"]);
    for line in [
        "permission mode  plan",
        "effort  high",
        &format!("add dirs  {lib_s}, /data"),
        "max turns  20",
        "allow tools  Bash(git:*)",
        "deny tools  WebFetch",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }

    // edit: a value replaced, a list added to, then cleared.
    let edited = w.json(&[
        "edit",
        "review",
        "--permission-mode",
        "acceptEdits",
        "--allow-tool",
        "Read",
        "--clear",
        "deny-tools",
        "--clear",
        "max-turns",
    ]);
    let t = &edited["target"];
    assert_eq!(t["permissionMode"], "acceptEdits", "{t:#}");
    assert_eq!(t["allowTools"], json!(["Bash(git:*)", "Read"]));
    assert!(
        t.get("denyTools").is_none() && t.get("maxTurns").is_none(),
        "{t:#}"
    );
    let (code, err) = w.fail(&["edit", "review", "--sandbox", "read-only"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("provider claude has no --sandbox option"),
        "{err}"
    );
    let cleared = w.json(&[
        "edit",
        "review",
        "--clear",
        "permission-mode",
        "--clear",
        "effort",
        "--clear",
        "add-dirs",
        "--clear",
        "allow-tools",
    ]);
    for field in ["permissionMode", "effort", "addDirs", "allowTools"] {
        assert!(
            cleared["target"].get(field).is_none(),
            "{field}: {cleared:#}"
        );
    }

    // codex: its sandbox replaces the default, effort is a -c pair.
    create_agent(
        &w,
        "cx",
        "codex",
        &[
            "--prompt",
            "hi",
            "--sandbox",
            "read-only",
            "--effort",
            "xhigh",
            "--add-dir",
            "/data",
        ],
    );
    let (code, run) = run_now(&w, "cx");
    assert_eq!(code, 0, "{run:#}");
    let argv = fakes.argv("codex");
    assert_eq!(after(&argv, "--sandbox"), ["read-only"], "{argv:?}");
    assert_eq!(after(&argv, "-c"), ["model_reasoning_effort=xhigh"]);
    assert_eq!(after(&argv, "--add-dir"), ["/data"]);
    let (code, err) = w.fail(&[
        "edit",
        "cx",
        "--config-override",
        "sandbox_mode=danger-full-access",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("config override \"sandbox_mode\" duplicates --sandbox; use that instead"),
        "{err}"
    );

    create_agent(
        &w,
        "oc",
        "opencode",
        &["--prompt", "hi", "--model", "p/m", "--variant", "high"],
    );
    let (code, run) = run_now(&w, "oc");
    assert_eq!(code, 0, "{run:#}");
    assert_eq!(after(&fakes.argv("opencode"), "--variant"), ["high"]);
}

/// A provider without the option, or a value outside the CLI's list: exit 2, one line
/// naming the provider and the option (or the accepted values), nothing created.
#[test]
fn options_a_provider_lacks_are_refused_in_one_line() {
    let mut w = World::new();
    let _fakes = Fakes::install(&mut w);
    let cases: &[(&str, &[&str], &str)] = &[
        ("opencode", &["--model", "p/m", "--permission-mode", "plan"], "provider opencode has no --permission-mode option (providers with it: claude)"),
        ("opencode", &["--model", "p/m", "--effort", "high"], "provider opencode has no --effort option (providers with it: claude, codex)"),
        ("opencode", &["--model", "p/m", "--add-dir", "/x"], "provider opencode has no --add-dir option (providers with it: claude, codex)"),
        ("claude", &["--sandbox", "read-only"], "provider claude has no --sandbox option (providers with it: codex)"),
        ("claude", &["--variant", "high"], "provider claude has no --variant option (providers with it: opencode)"),
        ("codex", &["--max-turns", "3"], "provider codex has no --max-turns option (providers with it: claude)"),
        ("codex", &["--permission-mode", "plan"], "provider codex has no --permission-mode option"),
        ("codex", &["--allow-tool", "Bash"], "provider codex has no --allow-tool option (providers with it: claude)"),
        ("codex", &["--deny-tool", "Bash"], "provider codex has no --deny-tool option"),
        ("cursor", &["--effort", "high"], "provider cursor has no --effort option"),
        ("codewith", &["--sandbox", "read-only"], "provider codewith has no --sandbox option"),
        ("aicopilot", &["--variant", "high"], "provider aicopilot has no --variant option"),
        ("claude", &["--permission-mode", "yolo"], "invalid --permission-mode \"yolo\" for provider claude: expected one of acceptEdits, auto, bypassPermissions, manual, dontAsk, plan"),
        ("codex", &["--sandbox", "full"], "invalid --sandbox \"full\" for provider codex: expected one of read-only, workspace-write, danger-full-access"),
        ("codex", &["--config-override", "model_reasoning_effort=high"], "config override \"model_reasoning_effort\" duplicates --effort; use that instead"),
        ("claude", &["--max-turns", "0"], "--max-turns must be at least 1"),
    ];
    for (provider, extra, message) in cases {
        let mut args = vec![
            "create",
            "agent",
            "x",
            "--provider",
            provider,
            "--prompt",
            "hi",
            "--every",
            "1h",
        ];
        args.extend_from_slice(extra);
        let (code, err) = w.fail(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    assert_eq!(w.json(&["list"]).as_array().unwrap().len(), 0);
}

/// Bundles carry the options (export → import elsewhere gives the same target); the
/// API takes them in a loop body and a PATCH; MCP sets them only with --allow-code.
#[test]
fn options_travel_in_bundles_the_api_and_mcp_with_allow_code() {
    let mut w = World::new();
    let _fakes = Fakes::install(&mut w);
    create_agent(
        &w,
        "review",
        "claude",
        &[
            "--prompt",
            "hi",
            "--permission-mode",
            "dontAsk",
            "--add-dir",
            "/data",
            "--allow-tool",
            "Read",
            "--max-turns",
            "4",
        ],
    );
    let out = w.run(&["export"]);
    assert!(out.status.success());
    let other = World::new();
    let bundle = other.root.path().join("bundle.json");
    std::fs::write(&bundle, &out.stdout).unwrap();
    other.json(&["import", bundle.to_str().unwrap(), "--apply"]);
    let there = other.json(&["show", "review"])["target"].clone();
    let here = w.json(&["show", "review"])["target"].clone();
    assert_eq!(there, here);
    assert_eq!(there["permissionMode"], "dontAsk", "{there:#}");

    let mut api = w.serve(&[]);
    let created = api.post(
        "/v1/loops",
        json!({"name": "cx", "schedule": {"type": "interval", "everyMs": 3_600_000},
               "target": {"type": "agent", "provider": "codex", "prompt": "hi",
                          "sandbox": "read-only", "effort": "low", "addDirs": ["/data"]}}),
    );
    assert_eq!(created.status, 201, "{}", created.text);
    let lp = created.json();
    assert_eq!(lp["target"]["sandbox"], "read-only", "{lp:#}");
    let patched = api.send(
        "PATCH",
        "/v1/loops/cx",
        Some(&json!({"target": {"effort": "max", "sandbox": null}}).to_string()),
    );
    assert_eq!(patched.status, 200, "{}", patched.text);
    let t = &patched.json()["target"];
    assert_eq!(t["effort"], "max", "{t:#}");
    assert!(t.get("sandbox").is_none(), "{t:#}");
    let refused = api.post(
        "/v1/loops",
        json!({"name": "oc", "schedule": {"type": "interval", "everyMs": 3_600_000},
               "target": {"type": "agent", "provider": "opencode", "prompt": "hi", "model": "p/m",
                          "maxTurns": 3}}),
    );
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(
        refused
            .error()
            .contains("provider opencode has no --max-turns option"),
        "{}",
        refused.text
    );
    api.stop();

    let mcp = crate::mcp::Mcp::start(&w, &["--allow-mutations"]);
    let refused = mcp.err(
        "loops_edit",
        json!({"loop": "review", "permissionMode": "bypassPermissions"}),
    );
    assert!(refused.contains("--allow-code"), "{refused}");
    assert!(mcp.close().success());
    assert_eq!(
        w.json(&["show", "review"])["target"]["permissionMode"],
        "dontAsk"
    );
    let mcp = crate::mcp::Mcp::start(&w, &["--allow-mutations", "--allow-code"]);
    let edited = mcp.ok(
        "loops_edit",
        json!({"loop": "review", "permissionMode": "plan", "denyTools": ["WebFetch"], "clear": ["add-dirs"]}),
    );
    let t = &edited["target"];
    assert_eq!(t["permissionMode"], "plan", "{t:#}");
    assert_eq!(t["denyTools"], json!(["WebFetch"]));
    assert!(t.get("addDirs").is_none(), "{t:#}");
    let created = mcp.ok(
        "loops_create_agent",
        json!({"name": "cx2", "provider": "codex", "prompt": "hi", "every": "1h",
               "sandbox": "workspace-write", "effort": "medium"}),
    );
    assert_eq!(created["target"]["effort"], "medium", "{created:#}");
    let refused = mcp.err(
        "loops_create_agent",
        json!({"name": "oc", "provider": "opencode", "model": "p/m", "prompt": "hi", "every": "1h",
               "allowTools": ["Read"]}),
    );
    assert!(
        refused.contains("provider opencode has no --allow-tool option"),
        "{refused}"
    );
    assert!(mcp.close().success());
}

/// A workflow's agent step takes the same options (its target is an agent target):
/// they reach the step's CLI, and one its provider lacks refuses the spec.
#[test]
fn workflow_agent_steps_take_the_same_options() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &crate::agents::fixture("claude_success.json"), 0);
    let spec = |target: Value| json!({"name": "wf", "steps": [{"id": "a", "target": target}]});
    let file = w.root.path().join("wf.json");
    std::fs::write(
        &file,
        spec(
            json!({"type": "agent", "provider": "opencode", "model": "p/m", "prompt": "hi",
                    "permissionMode": "plan"}),
        )
        .to_string(),
    )
    .unwrap();
    let (code, err) = w.fail(&["workflows", "validate", file.to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("provider opencode has no --permission-mode option"),
        "{err}"
    );
    std::fs::write(
        &file,
        spec(
            json!({"type": "agent", "provider": "claude", "prompt": "hi",
                    "permissionMode": "plan", "maxTurns": 2}),
        )
        .to_string(),
    )
    .unwrap();
    w.ok(&["workflows", "create", file.to_str().unwrap()]);
    let out = w.run(&["workflows", "run", "wf"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let argv = fakes.argv("claude");
    assert_eq!(after(&argv, "--permission-mode"), ["plan"], "{argv:?}");
    assert_eq!(after(&argv, "--max-turns"), ["2"], "{argv:?}");
}

// ---------------------------------------------------------------------------------
// The real CLIs against the mock model server.

/// Creates `name` for the real `cli` against `mock` with `options`, runs it now and
/// returns the run (it must have succeeded: the CLI accepted its argv), with the
/// model requests the mock saw and the argv the CLI was started with (a wrapper first
/// on PATH records it, then execs the real CLI); `None` when the CLI is not installed.
fn real_run_with(
    cli: &RealCli,
    name: &str,
    options: &[&str],
) -> Option<(Value, MockModel, Vec<String>)> {
    let bin = real_cli(cli.cli)?;
    let mock = MockModel::start(Mode::Reply(REPLY.into()));
    let (mut w, work) = real_world(&bin);
    let wrapper = w.root.path().join("wrapper");
    std::fs::create_dir_all(&wrapper).unwrap();
    let argv_file = w.root.path().join("argv");
    crate::util::write_script(
        &wrapper.join(cli.cli),
        &format!(
            "#!/bin/sh
printf '%s\\n' \"$@\" > {}\nexec {} \"$@\"\n",
            argv_file.display(),
            bin.join(cli.cli).display()
        ),
    );
    for (key, value) in w.extra_env.iter_mut() {
        if key == "PATH" {
            *value = format!("{}:{value}", wrapper.display());
        }
    }
    let mut args: Vec<String> = [
        "--prompt",
        "Say hello",
        "--cwd",
        work.to_str().unwrap(),
        "--timeout",
        "60s",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend((cli.flags)(&mock.url()));
    args.extend(options.iter().map(|o| (*o).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    create_agent(&w, name, cli.cli, &args);
    let (code, run) = run_now(&w, name);
    assert_eq!(code, 0, "{} refused {options:?}: {run:#}", cli.cli);
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert_eq!(run["summary"], REPLY, "{run:#}");
    let argv = std::fs::read_to_string(&argv_file).unwrap();
    Some((run, mock, argv.lines().map(str::to_owned).collect()))
}

/// The bodies of the model requests `cli` sent.
fn model_bodies(cli: &RealCli, mock: &MockModel) -> Vec<String> {
    mock.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && (cli.path)(&r.path))
        .map(|r| r.body)
        .collect()
}

#[test]
fn real_claude_accepts_every_option_it_has() {
    let extra = tempfile::tempdir().unwrap();
    let dir = extra.path().to_str().unwrap();
    let options = [
        "--permission-mode",
        "dontAsk",
        "--effort",
        "high",
        "--add-dir",
        dir,
        "--max-turns",
        "3",
        "--allow-tool",
        "Read",
        "--deny-tool",
        "Write",
    ];
    let Some((_, mock, _)) = real_run_with(&crate::agents::CLAUDE, "real-claude-options", &options)
    else {
        return;
    };
    let bodies = model_bodies(&crate::agents::CLAUDE, &mock);
    assert!(!bodies.is_empty(), "claude never called the model");
    // The extra directory reaches the model's context.
    assert!(
        bodies.iter().any(|b| b.contains(dir)),
        "no request names {dir}: {bodies:?}"
    );
    // The effort is the request's; the denied tool (offered without the option) is
    // not offered, the others are.
    assert!(
        bodies
            .iter()
            .any(|b| b.contains(r#""output_config":{"effort":"high"}"#)),
        "no request with effort high: {bodies:?}"
    );
    assert!(
        bodies.iter().all(|b| !b.contains(r#""name":"Write""#)),
        "Write offered: {bodies:?}"
    );
    assert!(bodies.iter().any(|b| b.contains(r#""name":"Read""#)));
}

#[test]
fn real_claude_accepts_each_permission_mode() {
    // Not bypassPermissions: claude refuses it as root ("--dangerously-skip-permissions
    // cannot be used with root/sudo privileges"), and CI runs as root.
    for mode in ["plan", "acceptEdits", "auto", "manual"] {
        let Some((_, _, argv)) = real_run_with(
            &crate::agents::CLAUDE,
            &format!("real-claude-{}", mode.to_lowercase()),
            &["--permission-mode", mode],
        ) else {
            return;
        };
        // Accepted (the run succeeded) with the mode in its argv.
        assert_eq!(after(&argv, "--permission-mode"), [mode], "{argv:?}");
    }
}

#[test]
fn real_codex_accepts_every_option_it_has() {
    let extra = tempfile::tempdir().unwrap();
    let dir = extra.path().to_str().unwrap();
    let options = [
        "--sandbox",
        "read-only",
        "--effort",
        "high",
        "--add-dir",
        dir,
    ];
    let Some((_, mock, _)) = real_run_with(&crate::agents::CODEX, "real-codex-options", &options)
    else {
        return;
    };
    let bodies = model_bodies(&crate::agents::CODEX, &mock);
    assert!(!bodies.is_empty(), "codex never called the model");
    // The reasoning effort reaches the model request.
    assert!(
        bodies
            .iter()
            .any(|b| b.contains(r#""reasoning":{"effort":"high""#)),
        "no request with effort high: {bodies:?}"
    );
    // The extra directory is one of the workspace roots codex tells the model.
    assert!(
        bodies
            .iter()
            .any(|b| b.contains(&format!("<root>{dir}</root>"))),
        "no workspace root {dir}: {bodies:?}"
    );
}

#[test]
fn real_opencode_accepts_its_variant() {
    const HIGH: &str = r#""reasoning_effort":"high""#;
    // The conversation's requests: opencode also asks the model for a title, with an
    // effort of its own choosing whatever the options.
    let turns = |mock: &MockModel| -> Vec<String> {
        model_bodies(&crate::agents::OPENCODE, mock)
            .into_iter()
            .filter(|b| !b.contains("You are a title generator"))
            .collect()
    };
    // Without the option the conversation asks for no effort: the variant is what does.
    let Some((_, plain, _)) = real_run_with(&crate::agents::OPENCODE, "real-opencode-plain", &[])
    else {
        return;
    };
    let bodies = turns(&plain);
    assert!(!bodies.is_empty(), "opencode never called the model");
    assert!(
        bodies.iter().all(|b| !b.contains(HIGH)),
        "high effort without --variant: {bodies:?}"
    );
    let Some((_, mock, _)) = real_run_with(
        &crate::agents::OPENCODE,
        "real-opencode-variant",
        &["--variant", "high"],
    ) else {
        return;
    };
    // The model's variant "high" (its config, agents::OPENCODE) sets the reasoning
    // effort of the conversation's requests.
    let bodies = turns(&mock);
    assert!(!bodies.is_empty(), "opencode never called the model");
    assert!(
        bodies.iter().all(|b| b.contains(HIGH)),
        "a request without reasoning_effort high: {bodies:?}"
    );
}
