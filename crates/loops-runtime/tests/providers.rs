//! Provider adapters: argv per provider and option combination (table tests), and the
//! output parsers on outputs captured from the real CLIs (see `fixtures/README.md`).

// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use loops_core::{
    AgentTarget, ConfigIsolation, Provider, RunOutcome, RunStatus, SessionMode, StepStatus, Usage,
};
use loops_runtime::executor::{ExecResult, ExecStatus};
use loops_runtime::providers::{
    account_tool, agent_args, bounded_summary, detect_providers, interpret, judge, parse_output,
    resume_refused, Verdict, SUMMARY_MAX_BYTES,
};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn target(provider: Provider) -> AgentTarget {
    AgentTarget {
        account_pool: Vec::new(),
        provider,
        prompt: "review the diff".into(),
        prompt_file: None,
        cwd: None,
        model: None,
        agent: None,
        auth_profile: None,
        config_isolation: ConfigIsolation::Safe,
        config_overrides: BTreeMap::new(),
        env: BTreeMap::new(),
        timeout: None,
        idle_timeout: None,
        account: None,
        session: SessionMode::DEFAULT,
        permission_mode: None,
        sandbox: None,
        effort: None,
        variant: None,
        add_dirs: Vec::new(),
        max_turns: None,
        allow_tools: Vec::new(),
        deny_tools: Vec::new(),
    }
}

/// Options applied to a base target, for the table.
#[derive(Default, Clone, Copy)]
struct Opts {
    none: bool,
    model: Option<&'static str>,
    agent: Option<&'static str>,
    cwd: Option<&'static str>,
    auth: Option<&'static str>,
    config: &'static [(&'static str, &'static str)],
}

fn build(provider: Provider, o: Opts) -> AgentTarget {
    let mut t = target(provider);
    if o.none {
        t.config_isolation = ConfigIsolation::None;
    }
    t.model = o.model.map(Into::into);
    t.agent = o.agent.map(Into::into);
    t.cwd = o.cwd.map(Into::into);
    t.auth_profile = o.auth.map(Into::into);
    t.config_overrides = o
        .config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    t
}

#[test]
fn argv_table() {
    use Provider::*;
    let o = Opts::default();
    let cases: Vec<(Provider, Opts, &str)> = vec![
        // claude
        (Claude, o, "--safe-mode --setting-sources local --no-session-persistence -p --output-format json"),
        (Claude, Opts { none: true, ..o }, "-p --output-format json"),
        (
            Claude,
            Opts { model: Some("sonnet"), agent: Some("reviewer"), ..o },
            "--safe-mode --setting-sources local --no-session-persistence -p --output-format json --model sonnet --agent reviewer",
        ),
        // cwd is the process's working directory for claude, not a flag
        (Claude, Opts { none: true, cwd: Some("/src"), ..o }, "-p --output-format json"),
        // codex
        (
            Codex,
            o,
            "--ask-for-approval never exec --json --ephemeral --sandbox workspace-write --skip-git-repo-check --ignore-rules",
        ),
        (
            Codex,
            Opts { none: true, cwd: Some("/src"), model: Some("gpt-5"), ..o },
            "--ask-for-approval never exec --json --ephemeral --sandbox workspace-write --skip-git-repo-check --cd /src --model gpt-5",
        ),
        (
            Codex,
            Opts {
                config: &[
                    ("model_providers.mock", r#"{name="Mock",base_url="http://127.0.0.1:1/v1"}"#),
                    ("model_provider", "mock"),
                ],
                ..o
            },
            // BTreeMap order: keys sorted
            r#"--ask-for-approval never exec --json --ephemeral --sandbox workspace-write --skip-git-repo-check --ignore-rules -c model_provider=mock -c model_providers.mock={name="Mock",base_url="http://127.0.0.1:1/v1"}"#,
        ),
        // codewith: codex-shaped, --auth-profile before exec
        (
            Codewith,
            Opts { auth: Some("work"), cwd: Some("/src"), model: Some("m"), ..o },
            "--ask-for-approval never --auth-profile work exec --json --ephemeral --sandbox workspace-write --skip-git-repo-check --ignore-rules --cd /src --model m",
        ),
        (
            Codewith,
            Opts { none: true, ..o },
            "--ask-for-approval never exec --json --ephemeral --sandbox workspace-write --skip-git-repo-check",
        ),
        // opencode / aicopilot
        (Opencode, Opts { model: Some("anthropic/claude"), ..o }, "run --format json --pure --model anthropic/claude"),
        (
            Opencode,
            Opts { none: true, cwd: Some("/src"), model: Some("p/m"), agent: Some("build"), ..o },
            "run --format json --dir /src --model p/m --agent build",
        ),
        (Aicopilot, o, "run --format json --pure"),
        (
            Aicopilot,
            Opts { cwd: Some("/w"), model: Some("p/m"), agent: Some("plan"), ..o },
            "run --format json --pure --dir /w --model p/m --agent plan",
        ),
        // cursor's `agent`
        (Cursor, o, "-p"),
        (Cursor, Opts { none: true, model: Some("gpt-5"), agent: Some("a"), cwd: Some("/x"), ..o }, "-p --model gpt-5 --agent a"),
    ];
    for (provider, opts, expected) in cases {
        let t = build(provider, opts);
        assert_eq!(agent_args(&t, None).join(" "), expected, "{provider}");
    }
}

/// Each adapter places the provider options where its CLI takes them: claude's before
/// `--resume`, codex's after exec's own options (its `--sandbox` replacing the
/// default, effort as `-c`) and before `resume ID -`, opencode's before `--session`.
#[test]
fn provider_options_take_their_place_in_each_adapters_argv() {
    let mut c = target(Provider::Claude);
    c.config_isolation = ConfigIsolation::None;
    c.permission_mode = Some("plan".into());
    c.effort = Some("max".into());
    c.add_dirs = vec!["/srv/lib".into(), "/data".into()];
    c.max_turns = Some(20);
    c.allow_tools = vec!["Bash(git:*)".into()];
    c.deny_tools = vec!["WebFetch".into()];
    let id = "0b5e3c1a-1d2e-4f5a-8b9c-0d1e2f3a4b5c";
    assert_eq!(
        agent_args(&c, Some(id)).join(" "),
        format!("-p --output-format json --permission-mode plan --effort max --add-dir /srv/lib --add-dir /data --max-turns 20 --allowed-tools Bash(git:*) --disallowed-tools WebFetch --resume {id}")
    );
    let mut x = target(Provider::Codex);
    x.sandbox = Some("read-only".into());
    x.effort = Some("high".into());
    x.add_dirs = vec!["/data".into()];
    x.model = Some("gpt-5".into());
    assert_eq!(
        agent_args(&x, Some(id)).join(" "),
        format!("--ask-for-approval never exec --json --ephemeral --skip-git-repo-check --ignore-rules --model gpt-5 --sandbox read-only -c model_reasoning_effort=high --add-dir /data resume {id} -")
    );
    let mut o = target(Provider::Opencode);
    o.model = Some("p/m".into());
    o.variant = Some("high".into());
    assert_eq!(
        agent_args(&o, Some("ses_abc123")).join(" "),
        "run --format json --pure --model p/m --variant high --session ses_abc123"
    );
}

#[test]
fn prompt_never_reaches_argv() {
    for provider in Provider::ALL {
        let mut t = build(
            *provider,
            Opts {
                model: Some("p/m"),
                ..Opts::default()
            },
        );
        t.prompt = "SECRET-PROMPT-TEXT".into();
        assert!(
            agent_args(&t, None)
                .iter()
                .all(|a| !a.contains("SECRET-PROMPT-TEXT")),
            "{provider}"
        );
    }
}

#[test]
fn config_override_values_stay_one_word() {
    let mut t = target(Provider::Codex);
    t.config_overrides.insert(
        "model".into(),
        "x --dangerously-bypass-approvals-and-sandbox".into(),
    );
    let args = agent_args(&t, None);
    assert!(args.contains(&"model=x --dangerously-bypass-approvals-and-sandbox".to_owned()));
    assert!(!args.contains(&"--dangerously-bypass-approvals-and-sandbox".to_owned()));
}

/// `--session continue` (#20 item 9), checked against claude 2.1.332 `--help`, codex
/// 0.171.0 `exec --help` / `exec resume --help` and opencode 1.18.33 `run --help`: the
/// session is kept (no `--no-session-persistence`, no `--ephemeral`) and a resumed run
/// names it; `fresh` is what it always was.
#[test]
fn argv_with_and_without_a_session() {
    use Provider::*;
    const ID: &str = "4650a78d-c9d1-4006-8d2c-6c5f22d811ff";
    let cases: Vec<(Provider, Option<&str>, &str)> = vec![
        (Claude, None, "--safe-mode --setting-sources local -p --output-format json"),
        (
            Claude,
            Some(ID),
            "--safe-mode --setting-sources local -p --output-format json --model m --resume 4650a78d-c9d1-4006-8d2c-6c5f22d811ff",
        ),
        (
            Codex,
            None,
            "--ask-for-approval never exec --json --sandbox workspace-write --skip-git-repo-check --ignore-rules",
        ),
        (
            Codex,
            Some(ID),
            "--ask-for-approval never exec --json --sandbox workspace-write --skip-git-repo-check --ignore-rules --model m resume 4650a78d-c9d1-4006-8d2c-6c5f22d811ff -",
        ),
        (Opencode, None, "run --format json --pure --model p/m"),
        (
            Opencode,
            Some("ses_dd6dfff06ffe8b1Hs0VleCu8RP"),
            "run --format json --pure --model p/m --session ses_dd6dfff06ffe8b1Hs0VleCu8RP",
        ),
    ];
    for (provider, resume, expected) in cases {
        let model = match (provider, resume) {
            (Opencode, _) => Some("p/m"),
            (_, Some(_)) => Some("m"),
            _ => None,
        };
        let mut t = build(
            provider,
            Opts {
                model,
                ..Opts::default()
            },
        );
        t.session = SessionMode::Continue;
        assert_eq!(
            agent_args(&t, resume).join(" "),
            expected,
            "{provider} {resume:?}"
        );
    }
    // Fresh: never a resume flag, and the unattended run keeps no session files.
    for provider in [Claude, Codex, Opencode] {
        let t = build(
            provider,
            Opts {
                model: Some("p/m"),
                ..Opts::default()
            },
        );
        let fresh = agent_args(&t, None);
        assert!(
            !fresh
                .iter()
                .any(|a| a == "--resume" || a == "resume" || a == "--session"),
            "{provider}: {fresh:?}"
        );
    }
    // An id that is not well-formed never reaches argv: the run starts fresh.
    let mut t = build(Claude, Opts::default());
    t.session = SessionMode::Continue;
    for bad in ["--dangerously-skip-permissions", "a b", "x;rm -rf /", ""] {
        let args = agent_args(&t, Some(bad));
        assert!(
            !args.iter().any(|a| a == "--resume" || a == bad),
            "{bad:?}: {args:?}"
        );
    }
}

/// The verdict keeps the session id a CLI reported only when it is well-formed: an
/// identifier, never a way for output text to leave the redacted fields.
#[test]
fn only_a_well_formed_session_id_is_kept() {
    let ok = judge(
        &target(Provider::Claude),
        &ended(
            ExecStatus::Succeeded,
            Some(0),
            &fixture("claude_success.json"),
            None,
        ),
    );
    let id = ok
        .session_id
        .expect("claude_success.json names its session");
    assert!(loops_core::session::is_valid_id(&id), "{id}");
    let forged =
        r#"{"type":"result","is_error":false,"result":"hi","session_id":"sk-LEAK token here"}"#;
    let v = judge(
        &target(Provider::Claude),
        &ended(ExecStatus::Succeeded, Some(0), forged, None),
    );
    assert_eq!(v.session_id, None);
}

/// What each CLI does with `--resume` of a made-up id (captured by running the real
/// CLIs): exit 1, nothing on stdout, its message on stderr.
#[test]
fn a_refused_resume_is_told_apart_from_other_failures() {
    let result = |code: i32, stdout: &str, stderr: &str| ExecResult {
        stderr: stderr.to_owned(),
        ..ended(ExecStatus::Failed, Some(code), stdout, None)
    };
    let refused = [
        (
            Provider::Claude,
            "No conversation found with session ID: 123e4567-e89b-12d3-a456-426614174000\n",
        ),
        (
            Provider::Codex,
            "WARNING: proceeding, even though we could not create PATH aliases\nError: thread/resume: thread/resume failed: no rollout found for thread id 123e4567-e89b-12d3-a456-426614174000 (code -32600)\n",
        ),
        (Provider::Opencode, "\u{1b}[91m\u{1b}[1mError: \u{1b}[0mSession not found\n"),
    ];
    for (provider, stderr) in refused {
        assert!(
            resume_refused(provider, &result(1, "", stderr)),
            "{provider}"
        );
        // Output on stdout: the CLI ran a turn, so it knew the session.
        assert!(
            !resume_refused(provider, &result(1, "{\"type\":\"result\"}", stderr)),
            "{provider}"
        );
        assert!(
            !resume_refused(provider, &result(1, "", "API Error: 500")),
            "{provider}"
        );
    }
    assert!(!resume_refused(
        Provider::Cursor,
        &result(1, "", "No conversation found with session ID: x")
    ));
}

#[test]
fn account_tool_defaults_to_the_provider() {
    assert_eq!(account_tool(Provider::Claude), "claude");
    assert_eq!(account_tool(Provider::Cursor), "cursor");
    assert_eq!(account_tool(Provider::Codex), "codex");
}

fn outcome(status: RunStatus, exit_code: Option<i32>, stdout: &str, stderr: &str) -> RunOutcome {
    RunOutcome {
        status,
        finished_at: chrono::Utc::now(),
        exit_code,
        stdout: stdout.to_owned(),
        stderr: stderr.to_owned(),
        error: match status {
            RunStatus::Succeeded => None,
            _ => exit_code.map(|c| format!("exited with status {c}")),
        },
        error_output: None,
        summary: None,
        usage: None,
        failure_class: None,
        retry_at: None,
        stop: None,
        session_id: None,
        session_note: None,
    }
}

fn interpreted(provider: Provider, exit_code: i32, stdout: &str, stderr: &str) -> RunOutcome {
    let status = if exit_code == 0 {
        RunStatus::Succeeded
    } else {
        RunStatus::Failed
    };
    let mut o = outcome(status, Some(exit_code), stdout, stderr);
    let model = (provider == Provider::Opencode).then_some("p/m");
    interpret(
        &build(
            provider,
            Opts {
                model,
                ..Opts::default()
            },
        ),
        &mut o,
    );
    o
}

#[test]
fn claude_success() {
    let o = interpreted(Provider::Claude, 0, &fixture("claude_success.json"), "");
    assert_eq!(o.status, RunStatus::Succeeded);
    assert_eq!(o.summary.as_deref(), Some("Hello from the mock model."));
    let usage = o.usage.unwrap();
    assert_eq!(usage.input_tokens, Some(11));
    assert_eq!(usage.output_tokens, Some(7));
    assert!(usage.cost_usd.is_some_and(|c| c > 0.0));
    assert_eq!(o.error, None);
}

#[test]
fn claude_api_error_is_a_failure_even_with_exit_zero() {
    let text = fixture("claude_api_error.json");
    // As captured: exit 1.
    // The error is our words; what the agent said is output (`errorOutput`).
    let o = interpreted(Provider::Claude, 1, &text, "");
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(o.error.as_deref(), Some("claude exited with status 1"));
    let quoted = o.error_output.unwrap();
    assert!(
        quoted.starts_with("API Error: 400 mock says: bad request"),
        "{quoted}"
    );
    assert_eq!(o.summary, None);
    // `subtype: "success"` with `is_error: true` and exit 0 must still fail.
    let o = interpreted(Provider::Claude, 0, &text, "");
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(o.error.as_deref(), Some("claude reported an error"));
    assert_eq!(
        o.error_output.as_deref(),
        Some("API Error: 400 mock says: bad request")
    );
}

#[test]
fn claude_unknown_agent_quotes_stderr() {
    let o = interpreted(
        Provider::Claude,
        1,
        "",
        "--agent 'nosuch' not found. Available agents: claude, Explore, general-purpose, Plan\n",
    );
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(o.error.as_deref(), Some("claude exited with status 1"));
    assert_eq!(
        o.error_output.as_deref(),
        Some(
            "--agent 'nosuch' not found. Available agents: claude, Explore, general-purpose, Plan"
        )
    );
}

#[test]
fn codex_success_and_turn_failure() {
    let o = interpreted(Provider::Codex, 0, &fixture("codex_success.jsonl"), "");
    assert_eq!(o.status, RunStatus::Succeeded);
    assert_eq!(o.summary.as_deref(), Some("Hello from the mock model."));
    assert_eq!(
        o.usage,
        Some(Usage {
            input_tokens: Some(12),
            output_tokens: Some(8),
            cost_usd: None
        })
    );
    let o = interpreted(Provider::Codex, 1, &fixture("codex_turn_failed.jsonl"), "");
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(
        o.error.as_deref(),
        Some("codex exited with status 1"),
        "{o:?}"
    );
    assert_eq!(o.error_output.as_deref(), Some("mock says: bad request"));
    // A turn.failed with exit 0 still fails the run.
    let o = interpreted(Provider::Codex, 0, &fixture("codex_turn_failed.jsonl"), "");
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(o.error.as_deref(), Some("codex reported an error"));
    assert_eq!(o.error_output.as_deref(), Some("mock says: bad request"));
}

#[test]
fn codex_error_item_alone_is_a_warning() {
    let o = interpreted(
        Provider::Codewith,
        0,
        &fixture("codex_item_error_warning.jsonl"),
        "",
    );
    assert_eq!(o.status, RunStatus::Succeeded, "{o:?}");
    assert_eq!(
        o.summary.as_deref(),
        Some("The workspace has one Cargo.toml.")
    );
    assert_eq!(o.usage.unwrap().input_tokens, Some(1200));
}

#[test]
fn codex_rejected_flag_quotes_stderr() {
    let stderr = "WARNING: proceeding, even though we could not create PATH aliases\n\
                  error: unexpected argument '--ask-for-approval' found\n\n  tip: to pass it as a value, use '-- --ask-for-approval'\n";
    let o = interpreted(Provider::Codex, 2, "", stderr);
    assert_eq!(o.error.as_deref(), Some("codex exited with status 2"));
    assert_eq!(
        o.error_output.as_deref(),
        Some("error: unexpected argument '--ask-for-approval' found")
    );
}

#[test]
fn opencode_success_error_and_rejection() {
    let o = interpreted(
        Provider::Opencode,
        0,
        &fixture("opencode_success.jsonl"),
        "",
    );
    assert_eq!(o.status, RunStatus::Succeeded);
    assert_eq!(o.summary.as_deref(), Some("Hello from the mock model."));
    assert_eq!(
        o.usage,
        Some(Usage {
            input_tokens: Some(13),
            output_tokens: Some(9),
            cost_usd: None
        })
    );
    let o = interpreted(
        Provider::Opencode,
        1,
        &fixture("opencode_api_error.jsonl"),
        "",
    );
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(
        o.error.as_deref(),
        Some("opencode exited with status 1"),
        "{o:?}"
    );
    assert_eq!(o.error_output.as_deref(), Some("mock says: bad request"));
    // An error event with exit 0 fails too.
    let o = interpreted(
        Provider::Aicopilot,
        0,
        &fixture("opencode_api_error.jsonl"),
        "",
    );
    assert_eq!(o.status, RunStatus::Failed);
    // Exit 1 with nothing on stdout: the CLI rejected its arguments.
    let o = interpreted(
        Provider::Opencode,
        1,
        "",
        "opencode run [message..]\n\n  --pure  [boolean]\n",
    );
    let error = o.error.unwrap();
    assert!(error.contains("rejected its arguments"), "{error}");
    assert_eq!(o.error_output, None, "usage text is not worth quoting");
    let o = interpreted(
        Provider::Aicopilot,
        1,
        "",
        "\u{1b}[91m\u{1b}[1mError: \u{1b}[0mYou must provide a message or a command\n",
    );
    assert_eq!(
        o.error.as_deref(),
        Some(
            "aicopilot exited with status 1 and no output: the CLI rejected its arguments or input"
        )
    );
    assert_eq!(
        o.error_output.as_deref(),
        Some("Error: You must provide a message or a command")
    );
}

#[test]
fn opencode_final_text_is_the_last_step() {
    let report = parse_output(Provider::Opencode, &fixture("opencode_multi_step.jsonl"));
    assert_eq!(report.text.as_deref(), Some("There is one Cargo.toml."));
    let usage = report.usage.unwrap();
    assert_eq!(usage.input_tokens, Some(100 + 5 + 140 + 10));
    assert_eq!(usage.output_tokens, Some(20 + 5 + 10));
    assert!((usage.cost_usd.unwrap() - 0.003).abs() < 1e-9);
}

#[test]
fn cursor_text_and_json() {
    let o = interpreted(Provider::Cursor, 0, &fixture("cursor_text.txt"), "");
    assert_eq!(o.status, RunStatus::Succeeded);
    assert_eq!(
        o.summary.as_deref(),
        Some("All 42 tests pass.\nNo changes were needed.")
    );
    assert_eq!(o.usage, None);
    let o = interpreted(Provider::Cursor, 0, &fixture("cursor_result.json"), "");
    assert_eq!(o.summary.as_deref(), Some("Refactored the parser."));
    let errored =
        r#"{"type":"result","subtype":"error","is_error":true,"result":"quota exceeded"}"#;
    let o = interpreted(Provider::Cursor, 0, errored, "");
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(o.error.as_deref(), Some("agent reported an error"));
    assert_eq!(o.error_output.as_deref(), Some("quota exceeded"));
}

#[test]
fn summaries_are_bounded() {
    let long = "x".repeat(SUMMARY_MAX_BYTES * 3);
    let stdout =
        serde_json::json!({"type": "result", "is_error": false, "result": long}).to_string();
    let o = interpreted(Provider::Claude, 0, &stdout, "");
    let summary = o.summary.unwrap();
    assert!(summary.len() <= SUMMARY_MAX_BYTES + 64, "{}", summary.len());
    assert!(summary.ends_with(&format!("[truncated {} bytes]", SUMMARY_MAX_BYTES * 2)));
    assert_eq!(bounded_summary("ok"), "ok");
}

#[test]
fn unreadable_output_never_breaks_a_run() {
    for provider in Provider::ALL {
        for stdout in [
            "",
            "garbage",
            "{\"type\":",
            "[truncated 10 bytes]\n}}}",
            "null",
        ] {
            let o = interpreted(*provider, 0, stdout, "");
            assert_eq!(o.status, RunStatus::Succeeded, "{provider} {stdout:?}");
        }
    }
}

#[test]
fn timeouts_keep_their_error_and_record_progress() {
    let mut o = outcome(
        RunStatus::TimedOut,
        None,
        &fixture("codex_success.jsonl"),
        "",
    );
    o.error = Some("timed out after 1m".into());
    interpret(&target(Provider::Codex), &mut o);
    assert_eq!(o.status, RunStatus::TimedOut);
    assert_eq!(o.error.as_deref(), Some("timed out after 1m"));
    assert_eq!(o.summary.as_deref(), Some("Hello from the mock model."));
    // A process that never started keeps the executor's message.
    let mut o = outcome(RunStatus::Failed, None, "", "");
    o.error = Some("Executable not found in PATH: claude".into());
    interpret(&target(Provider::Claude), &mut o);
    assert_eq!(
        o.error.as_deref(),
        Some("Executable not found in PATH: claude")
    );
}

#[test]
fn detect_providers_finds_clis_on_the_given_path_with_versions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script("claude", "echo '2.1.332 (Claude Code)'");
    script("agent", "echo 'cursor 1.0' >&2");
    script("opencode", "exit 3");
    let env = vec![(
        "PATH".to_owned(),
        format!("{}:/usr/bin:/bin", dir.path().display()),
    )];
    let found = detect_providers(&env);
    let summary: Vec<(Provider, Option<&str>)> = found
        .iter()
        .map(|p| (p.provider, p.version.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            (Provider::Claude, Some("2.1.332 (Claude Code)")),
            (Provider::Cursor, Some("cursor 1.0")),
            (Provider::Opencode, None),
        ]
    );
    assert_eq!(found[0].path, dir.path().join("claude"));
}

/// An agent process that ended with `status` (exit code 0 for success, else `exit`).
fn ended(status: ExecStatus, exit: Option<i32>, stdout: &str, error: Option<&str>) -> ExecResult {
    let now = chrono::Utc::now();
    ExecResult {
        status,
        exit_code: exit,
        signal: None,
        stdout: stdout.to_owned(),
        stderr: String::new(),
        error: error.map(str::to_owned),
        pid: Some(1),
        pid_start_time: None,
        started_at: now,
        finished_at: now,
        resources: None,
    }
}

#[test]
fn one_verdict_for_loop_runs_and_workflow_steps() {
    // claude's `is_error` with exit 0 fails a loop run and a workflow step alike.
    let v = judge(
        &target(Provider::Claude),
        &ended(
            ExecStatus::Succeeded,
            Some(0),
            &fixture("claude_api_error.json"),
            None,
        ),
    );
    assert_eq!(v.status, ExecStatus::Failed);
    assert_eq!(
        (v.run_status(), v.step_status()),
        (RunStatus::Failed, StepStatus::Failed)
    );
    assert_eq!(v.error.as_deref(), Some("claude reported an error"));
    assert_eq!(
        v.error_output.as_deref(),
        Some("API Error: 400 mock says: bad request")
    );
    let v = judge(
        &target(Provider::Codex),
        &ended(
            ExecStatus::Succeeded,
            Some(0),
            &fixture("codex_success.jsonl"),
            None,
        ),
    );
    assert_eq!(
        (v.run_status(), v.step_status()),
        (RunStatus::Succeeded, StepStatus::Succeeded)
    );
    assert_eq!(v.summary.as_deref(), Some("Hello from the mock model."));
    assert_eq!(v.usage.and_then(|u| u.output_tokens), Some(8));
    // A timed-out or stopped agent keeps the executor's error and what it got done.
    for (status, run, step) in [
        (
            ExecStatus::TimedOut,
            RunStatus::TimedOut,
            StepStatus::TimedOut,
        ),
        (
            ExecStatus::Terminated,
            RunStatus::Abandoned,
            StepStatus::Cancelled,
        ),
    ] {
        let v = judge(
            &target(Provider::Codex),
            &ended(
                status,
                None,
                &fixture("codex_success.jsonl"),
                Some("stopped"),
            ),
        );
        assert_eq!((v.run_status(), v.step_status()), (run, step));
        assert_eq!(v.error.as_deref(), Some("stopped"));
        assert_eq!(v.summary.as_deref(), Some("Hello from the mock model."));
    }
    // A command's verdict is its process's ending, output unread.
    let v = Verdict::of_process(&ended(
        ExecStatus::Succeeded,
        Some(0),
        &fixture("claude_api_error.json"),
        None,
    ));
    assert_eq!(
        (v.status, v.summary, v.usage),
        (ExecStatus::Succeeded, None, None)
    );
}

#[test]
fn interpret_is_judge_on_a_run_outcome() {
    let stdout = fixture("claude_api_error.json");
    let mut o = outcome(RunStatus::Succeeded, Some(0), &stdout, "");
    interpret(&target(Provider::Claude), &mut o);
    let v = judge(
        &target(Provider::Claude),
        &ended(ExecStatus::Succeeded, Some(0), &stdout, None),
    );
    assert_eq!(
        (o.status, o.error, o.summary),
        (v.run_status(), v.error, v.summary)
    );
    // An interrupted run stays abandoned.
    let mut o = outcome(
        RunStatus::Abandoned,
        None,
        &fixture("codex_success.jsonl"),
        "",
    );
    o.error = Some("interrupted: daemon stopped".into());
    interpret(&target(Provider::Codex), &mut o);
    assert_eq!(o.status, RunStatus::Abandoned);
    assert_eq!(o.error.as_deref(), Some("interrupted: daemon stopped"));
    assert_eq!(o.summary.as_deref(), Some("Hello from the mock model."));
}

/// Failure classes (#20 item 1) from the outputs the real CLIs printed when the mock
/// model answered a usage limit, a rate limit, an overload, a bad key and a prompt too
/// long (`fixtures/README.md`), with the reset instant where the CLI said one.
#[test]
fn failures_are_classified_from_the_real_clis_outputs() {
    use loops_core::failure::FailureClass as C;
    let cases = [
        (
            Provider::Claude,
            "claude_usage_limit.json",
            C::UsageLimit,
            true,
        ),
        (
            Provider::Claude,
            "claude_session_limit.json",
            C::UsageLimit,
            true,
        ),
        (
            Provider::Claude,
            "claude_rate_limit.json",
            C::RateLimit,
            false,
        ),
        (
            Provider::Claude,
            "claude_overloaded.json",
            C::Overloaded,
            false,
        ),
        (Provider::Claude, "claude_auth.json", C::Auth, false),
        (
            Provider::Claude,
            "claude_prompt_too_long.json",
            C::ContextLength,
            false,
        ),
        (Provider::Claude, "claude_api_error.json", C::Other, false),
        (
            Provider::Codex,
            "codex_usage_limit.jsonl",
            C::UsageLimit,
            true,
        ),
        (
            Provider::Codex,
            "codex_rate_limit.jsonl",
            C::RateLimit,
            false,
        ),
        (Provider::Codex, "codex_auth.jsonl", C::Auth, false),
        (
            Provider::Codex,
            "codex_unavailable.jsonl",
            C::Overloaded,
            false,
        ),
        (Provider::Codex, "codex_turn_failed.jsonl", C::Other, false),
        (
            Provider::Opencode,
            "opencode_api_error.jsonl",
            C::Other,
            false,
        ),
    ];
    for (provider, file, class, reset) in cases {
        let o = interpreted(provider, 1, &fixture(file), "");
        assert_eq!(o.status, RunStatus::Failed, "{file}");
        assert_eq!(o.failure_class, Some(class), "{file}: {:?}", o.error);
        assert_eq!(o.retry_at.is_some(), reset, "{file}: {:?}", o.retry_at);
        if let Some(at) = o.retry_at {
            assert!(at > o.finished_at, "{file}: a reset lies ahead: {at}");
            assert!(
                at <= o.finished_at + chrono::TimeDelta::days(1),
                "{file}: {at}"
            );
        }
    }
    // A success has no class.
    let o = interpreted(Provider::Claude, 0, &fixture("claude_success.json"), "");
    assert_eq!((o.failure_class, o.retry_at), (None, None));
    // A crashed CLI (stderr only) and a timeout.
    let o = interpreted(
        Provider::Codex,
        101,
        "",
        "thread 'main' panicked at core/src/x.rs:1:1",
    );
    assert_eq!(o.failure_class, Some(C::Crash));
    let mut timed_out = outcome(
        RunStatus::TimedOut,
        None,
        &fixture("claude_rate_limit.json"),
        "",
    );
    timed_out.error = Some("timed out after 1s".into());
    interpret(&target(Provider::Claude), &mut timed_out);
    assert_eq!(timed_out.failure_class, Some(C::Timeout));
}

/// Commands have no provider words: their failures are timeouts, crashes (killed by
/// a signal) or other.
#[test]
fn command_failures_are_classified_by_their_ending() {
    use loops_core::failure::FailureClass as C;
    let class = |status, exit, signal| {
        let mut r = ended(status, exit, "usage limit reached", Some("x"));
        r.signal = signal;
        Verdict::of_process(&r).failure.map(|f| f.class)
    };
    assert_eq!(class(ExecStatus::Succeeded, Some(0), None), None);
    assert_eq!(class(ExecStatus::Failed, Some(1), None), Some(C::Other));
    assert_eq!(class(ExecStatus::Failed, None, Some(9)), Some(C::Crash));
    assert_eq!(
        class(ExecStatus::TimedOut, None, Some(15)),
        Some(C::Timeout)
    );
    assert_eq!(class(ExecStatus::Terminated, None, Some(15)), None);
}

/// The conversation ids the CLIs report, for `--session continue`.
#[test]
fn session_ids_are_read_from_each_cli() {
    let id = |p, f| parse_output(p, &fixture(f)).session_id;
    assert_eq!(
        id(Provider::Claude, "claude_success.json").as_deref(),
        Some("d8279595-ecaf-46b2-973e-1b8f2e1dc49e")
    );
    assert!(id(Provider::Codex, "codex_success.jsonl").is_some());
    assert_eq!(
        id(Provider::Opencode, "opencode_api_error.jsonl").as_deref(),
        Some("ses_dd6dffc75ffeW2M9E95YumkKB0")
    );
}
