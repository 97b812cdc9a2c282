//! Agent targets through the real binary.
//!
//! Fake providers: scripts named like each provider CLI (`claude`, `codex`, `agent`,
//! `codewith`, `aicopilot`, `opencode`) first on PATH record their argv, stdin and
//! environment and print canned output captured from the real CLIs; the tests check
//! the argv each adapter builds, that the prompt arrives on stdin only, the account
//! handling, and the run's `summary` / `usage` / status.
//!
//! Real CLIs (`real_*`): the pinned claude, codex and opencode installed by
//! `ci/install-agent-clis.sh` run real agent loops through the daemon against
//! [`crate::mock_model`] on 127.0.0.1. Without the CLIs these tests print
//! "skipped: real CLIs not installed" and pass, except under `CI=true`, where a
//! missing CLI fails them so CI can never skip them silently.

use crate::mock_model::{MockModel, Mode};
use crate::util::{wait_for, write_script, World};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../loops-runtime/tests/fixtures"
);

pub(crate) fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}")).expect("fixture")
}

/// The fake provider CLIs of one world.
pub(crate) struct Fakes {
    pub(crate) bin: PathBuf,
    log: PathBuf,
    out: PathBuf,
}

const FAKE_CLIS: [&str; 6] = [
    "claude",
    "codex",
    "agent",
    "codewith",
    "aicopilot",
    "opencode",
];

impl Fakes {
    /// Installs the fakes in `w` and puts them first on its PATH.
    pub(crate) fn install(w: &mut World) -> Self {
        let bin = w.root.path().join("fakebin");
        let log = w.root.path().join("fakelog");
        let out = w.root.path().join("fakeout");
        for dir in [&bin, &log, &out] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let script = format!(
            r#"#!/bin/sh
# Fake provider CLI: records argv, stdin and env, then prints canned output.
name="${{0##*/}}"
dir="{log}/$name"
mkdir -p "$dir"
: > "$dir/argv"
for a in "$@"; do printf '%s\n' "$a" >> "$dir/argv"; done
cat > "$dir/stdin"
env > "$dir/env"
[ -f "{out}/$name.out" ] && cat "{out}/$name.out"
code=0
[ -f "{out}/$name.exit" ] && code=$(cat "{out}/$name.exit")
exit "$code"
"#,
            log = log.display(),
            out = out.display()
        );
        for name in FAKE_CLIS {
            write_script(&bin.join(name), &script);
        }
        w.extra_env
            .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
        Self { bin, log, out }
    }

    /// What `exe` prints and how it exits.
    pub(crate) fn canned(&self, exe: &str, stdout: &str, exit: i32) {
        std::fs::write(self.out.join(format!("{exe}.out")), stdout).unwrap();
        std::fs::write(self.out.join(format!("{exe}.exit")), exit.to_string()).unwrap();
    }

    pub(crate) fn ran(&self, exe: &str) -> bool {
        self.log.join(exe).join("argv").exists()
    }

    pub(crate) fn argv(&self, exe: &str) -> Vec<String> {
        let text = std::fs::read_to_string(self.log.join(exe).join("argv"))
            .unwrap_or_else(|_| panic!("{exe} never ran"));
        text.lines().map(str::to_owned).collect()
    }

    pub(crate) fn stdin(&self, exe: &str) -> String {
        std::fs::read_to_string(self.log.join(exe).join("stdin")).unwrap()
    }

    pub(crate) fn env(&self, exe: &str) -> HashMap<String, String> {
        std::fs::read_to_string(self.log.join(exe).join("env"))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

/// `loops --json run-now <name>`: (exit code, the run).
/// `--json run-now NAME --show-output`: the run with its output (the agent's summary
/// and what its error quoted are output, redacted without the flag).
pub(crate) fn run_now(w: &World, name: &str) -> (i32, Value) {
    let out = w.run(&["--json", "run-now", name, "--show-output"]);
    let run: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad run-now json ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), run)
}

/// `create agent NAME --provider P …`, every hour unless `extra` has a schedule.
pub(crate) fn create_agent(w: &World, name: &str, provider: &str, extra: &[&str]) -> Value {
    let mut args = vec!["create", "agent", name, "--provider", provider];
    if !extra
        .iter()
        .any(|a| ["--dynamic", "--at", "--every", "--cron"].contains(a))
    {
        args.extend(["--every", "1h"]);
    }
    args.extend_from_slice(extra);
    w.json(&args)
}

/// One row of the per-provider table.
struct Case<'a> {
    provider: &'a str,
    /// The CLI's executable name.
    exe: &'a str,
    /// Extra `create agent` flags.
    extra: Vec<&'a str>,
    /// What the fake CLI prints.
    stdout: String,
    /// The argv the adapter must build, space-joined.
    argv: String,
    summary: &'a str,
    /// Expected `usage` (`null`: none).
    usage: Value,
}

#[test]
fn every_provider_gets_its_argv_and_the_prompt_on_stdin() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let work = w.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let work_s = work.display().to_string();
    let cases = vec![
        Case {
            provider: "claude",
            exe: "claude",
            extra: vec!["--model", "sonnet", "--agent", "reviewer"],
            stdout: fixture("claude_success.json"),
            argv: "--safe-mode --setting-sources local --no-session-persistence -p --output-format json --model sonnet --agent reviewer".into(),
            summary: "Hello from the mock model.",
            usage: serde_json::json!({"inputTokens": 11, "outputTokens": 7}),
        },
        Case {
            provider: "cursor",
            exe: "agent",
            extra: vec!["--model", "gpt-5"],
            stdout: fixture("cursor_text.txt"),
            argv: "-p --model gpt-5".into(),
            summary: "All 42 tests pass.\nNo changes were needed.",
            usage: Value::Null,
        },
        Case {
            provider: "codex",
            exe: "codex",
            extra: vec!["--cwd", &work_s, "--model", "gpt-5", "--config-isolation", "none"],
            stdout: fixture("codex_success.jsonl"),
            argv: format!("--ask-for-approval never exec --json --ephemeral --sandbox workspace-write --skip-git-repo-check --cd {work_s} --model gpt-5"),
            summary: "Hello from the mock model.",
            usage: serde_json::json!({"inputTokens": 12, "outputTokens": 8}),
        },
        Case {
            provider: "codewith",
            exe: "codewith",
            extra: vec!["--auth-profile", "work"],
            stdout: fixture("codex_item_error_warning.jsonl"),
            argv: "--ask-for-approval never --auth-profile work exec --json --ephemeral --sandbox workspace-write --skip-git-repo-check --ignore-rules".into(),
            summary: "The workspace has one Cargo.toml.",
            usage: serde_json::json!({"inputTokens": 1200, "outputTokens": 40}),
        },
        Case {
            provider: "opencode",
            exe: "opencode",
            extra: vec!["--model", "mock/mock-model", "--cwd", &work_s],
            stdout: fixture("opencode_success.jsonl"),
            argv: format!("run --format json --pure --dir {work_s} --model mock/mock-model"),
            summary: "Hello from the mock model.",
            usage: serde_json::json!({"inputTokens": 13, "outputTokens": 9}),
        },
        Case {
            provider: "aicopilot",
            exe: "aicopilot",
            extra: vec!["--agent", "plan"],
            stdout: fixture("opencode_multi_step.jsonl"),
            argv: "run --format json --pure --agent plan".into(),
            summary: "There is one Cargo.toml.",
            usage: serde_json::json!({"inputTokens": 255, "outputTokens": 35, "costUsd": 0.003}),
        },
    ];
    for Case {
        provider,
        exe,
        extra,
        stdout,
        argv,
        summary,
        usage,
    } in cases
    {
        fakes.canned(exe, &stdout, 0);
        let name = format!("{provider}-loop");
        let prompt = format!("Prompt for {provider}:\n  keep 'quotes' and $dollars\n");
        let mut flags = vec!["--prompt", prompt.as_str(), "--env", "TARGET_VAR=1"];
        flags.extend(extra.iter().copied());
        create_agent(&w, &name, provider, &flags);
        let (code, run) = run_now(&w, &name);
        assert_eq!(code, 0, "{provider}: {run}");
        assert_eq!(run["status"], "succeeded", "{provider}: {run}");
        assert_eq!(run["summary"], summary, "{provider}");
        if usage.is_null() {
            assert!(run.get("usage").is_none(), "{provider}: {run}");
        } else {
            let got = &run["usage"];
            assert_eq!(
                got["inputTokens"], usage["inputTokens"],
                "{provider}: {got}"
            );
            assert_eq!(
                got["outputTokens"], usage["outputTokens"],
                "{provider}: {got}"
            );
            if let Some(cost) = usage["costUsd"].as_f64() {
                assert!(
                    (got["costUsd"].as_f64().unwrap() - cost).abs() < 1e-9,
                    "{got}"
                );
            }
        }
        assert_eq!(fakes.argv(exe).join(" "), argv, "{provider} argv");
        assert_eq!(fakes.stdin(exe), prompt, "{provider} stdin");
        assert!(
            fakes.argv(exe).iter().all(|a| !a.contains("Prompt for")),
            "{provider}: prompt leaked into argv"
        );
        let env = fakes.env(exe);
        assert_eq!(env.get("LOOPS_LOOP_NAME"), Some(&name), "{provider}");
        assert_eq!(
            env.get("LOOPS_RUN_ID"),
            run["id"].as_str().map(str::to_owned).as_ref()
        );
        assert_eq!(env.get("TARGET_VAR").map(String::as_str), Some("1"));
        assert!(!env.contains_key("LOOPS_ACCOUNT_PROFILE"), "{provider}");
        // The same fields through `runs` (the summary is output: shown when asked).
        let listed = &w.json(&["runs", &name, "--show-output"])[0];
        assert_eq!(listed["summary"], summary);
        assert!(
            w.runs(&name)[0]["summary"]
                .as_str()
                .is_none_or(|s| s.starts_with("[redacted ")),
            "{provider}"
        );
    }
}

#[test]
fn prompt_file_is_stored_with_its_source_and_sent_on_stdin() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &fixture("claude_success.json"), 0);
    let file = w.root.path().join("review.md");
    std::fs::write(&file, "Review the latest commit.\nBe brief.\n").unwrap();
    let lp = create_agent(
        &w,
        "review",
        "claude",
        &["--prompt-file", file.to_str().unwrap()],
    );
    assert_eq!(lp["target"]["promptFile"], file.display().to_string());
    let shown = w.json(&["show", "review"]);
    assert!(
        shown["target"]["prompt"]
            .as_str()
            .unwrap()
            .starts_with("[redacted"),
        "{shown}"
    );
    assert_eq!(shown["target"]["promptFile"], file.display().to_string());
    let (code, _) = run_now(&w, "review");
    assert_eq!(code, 0);
    assert_eq!(
        fakes.stdin("claude"),
        "Review the latest commit.\nBe brief.\n"
    );
}

#[test]
fn agent_workflow_steps_keep_their_summary_and_usage() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &fixture("claude_success.json"), 0);
    let spec = serde_json::json!({"name": "agentic", "steps": [
        {"id": "review", "target": {"type": "agent", "provider": "claude", "prompt": "Review it."}},
        {"id": "after", "dependsOn": ["review"], "target": {"type": "command", "command": "true"}}
    ]});
    let path = w.root.path().join("wf.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap()]);
    let out = w.run(&["--json", "workflows", "run", "agentic", "--show-output"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = |id: &str| {
        doc["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stepId"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no step {id} in {doc}"))
    };
    assert_eq!(step("review")["summary"], "Hello from the mock model.");
    let usage = &step("review")["usage"];
    assert_eq!(
        (&usage["inputTokens"], &usage["outputTokens"]),
        (&11.into(), &7.into()),
        "{usage}"
    );
    assert!(
        usage["costUsd"].as_f64().is_some_and(|c| c > 0.0),
        "{usage}"
    );
    assert_eq!(step("after")["summary"], Value::Null);
    assert_eq!(fakes.stdin("claude"), "Review it.");

    // Stored, not only printed: `inspect` reads them back, and the text view shows them.
    let run_id = doc["workflowRun"]["id"].as_str().unwrap();
    let inspected = w.json(&["workflows", "inspect", run_id, "--show-output"]);
    let stored = &inspected["steps"][0];
    assert_eq!(stored["stepId"], "review");
    assert_eq!(stored["summary"], "Hello from the mock model.");
    let text = w.ok(&["workflows", "inspect", run_id, "--show-output"]);
    assert!(
        text.contains("--- step review result ---\n[summary]\nHello from the mock model."),
        "{text}"
    );
    // The summary is output: without --show-output only its size shows.
    let text = w.ok(&["workflows", "inspect", run_id]);
    assert!(
        text.contains(
            "--- step review result ---\n[summary]\n[redacted 26 bytes; use --show-output]"
        ),
        "{text}"
    );
}

/// Steps and loop runs share one verdict: a step that times out keeps what the agent
/// reported before it was stopped, as a timed-out loop run does.
#[test]
fn a_timed_out_agent_step_keeps_its_summary_and_usage() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let out = fakes.out.join("slow.out");
    std::fs::write(&out, fixture("claude_success.json")).unwrap();
    write_script(
        &fakes.bin.join("claude"),
        &format!(
            "#!/bin/sh\ncat > /dev/null\ncat {}\nexec sleep 30\n",
            out.display()
        ),
    );
    let spec = serde_json::json!({"name": "slow", "steps": [
        {"id": "review", "timeout": "1s", "target": {"type": "agent", "provider": "claude", "prompt": "Review it."}}
    ]});
    let path = w.root.path().join("wf.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap()]);
    let out = w.run(&["--json", "workflows", "run", "slow", "--show-output"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = &doc["steps"][0];
    assert_eq!(step["status"], "timed_out", "{doc}");
    assert_eq!(step["summary"], "Hello from the mock model.", "{doc}");
    assert_eq!(step["usage"]["outputTokens"], 7, "{doc}");
}

#[test]
fn reported_errors_fail_the_run_with_the_providers_message() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    // claude: `is_error: true` (subtype "success") with exit 0.
    fakes.canned("claude", &fixture("claude_api_error.json"), 0);
    create_agent(&w, "c", "claude", &["--prompt", "hi"]);
    let (code, run) = run_now(&w, "c");
    assert_eq!(code, 1, "{run}");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["exitCode"], 0);
    // Our words in `error`; the provider's own in `errorOutput` (output).
    assert_eq!(run["error"], "claude reported an error");
    assert_eq!(run["errorOutput"], "API Error: 400 mock says: bad request");
    assert!(run.get("summary").is_none(), "{run}");
    // codex: turn.failed.
    fakes.canned("codex", &fixture("codex_turn_failed.jsonl"), 1);
    create_agent(&w, "x", "codex", &["--prompt", "hi"]);
    let (_, run) = run_now(&w, "x");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"], "codex exited with status 1");
    assert_eq!(run["errorOutput"], "mock says: bad request");
    // opencode: exit 1 and no stdout means it rejected its arguments.
    fakes.canned("opencode", "", 1);
    create_agent(&w, "o", "opencode", &["--prompt", "hi", "--model", "p/m"]);
    let (_, run) = run_now(&w, "o");
    assert_eq!(run["status"], "failed");
    let error = run["error"].as_str().unwrap();
    assert!(error.contains("rejected its arguments"), "{error}");
    // opencode: an error event.
    fakes.canned("aicopilot", &fixture("opencode_api_error.jsonl"), 0);
    create_agent(&w, "copilot", "aicopilot", &["--prompt", "hi"]);
    let (_, run) = run_now(&w, "copilot");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"], "aicopilot reported an error");
    assert_eq!(run["errorOutput"], "mock says: bad request");
}

/// A fake `accounts` CLI recording its argv and printing `stdout` (exit `code`).
fn fake_accounts(fakes: &Fakes, stdout: &str, stderr: &str, code: i32) -> PathBuf {
    let record = fakes.log.join("accounts.argv");
    let script = format!(
        "#!/bin/sh\nprintf '%s ' \"$@\" > '{}'\ncat <<'EOF'\n{stdout}\nEOF\nprintf '%s' '{stderr}' >&2\nexit {code}\n",
        record.display()
    );
    write_script(&fakes.bin.join("accounts"), &script);
    record
}

#[test]
fn accounts_apply_the_profile_and_scrub_inherited_auth() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &fixture("claude_success.json"), 0);
    let profile = w.root.path().join("accounts/work claude");
    std::fs::create_dir_all(&profile).unwrap();
    let record = fake_accounts(
        &fakes,
        &format!(
            "# profile work\nexport CLAUDE_CONFIG_DIR='{}'\nexport ANTHROPIC_BASE_URL=\"https://profile.example\"\nexport XDG_CONFIG_HOME='{}/xdg'",
            profile.display(),
            profile.display()
        ),
        "",
        0,
    );
    for (k, v) in [
        ("ANTHROPIC_API_KEY", "daemon-secret"),
        ("OPENAI_API_KEY", "daemon-secret"),
        ("GH_TOKEN", "daemon-secret"),
        ("GITHUB_TOKEN", "daemon-secret"),
        ("CLAUDE_CONFIG_DIR", "/daemon/claude"),
        ("CODEX_HOME", "/daemon/codex"),
        ("XDG_CONFIG_HOME", "/daemon/config"),
        ("XDG_DATA_HOME", "/daemon/data"),
        ("KEEP_ME", "1"),
    ] {
        w.extra_env.push((k.into(), v.into()));
    }
    create_agent(
        &w,
        "acct",
        "claude",
        &["--prompt", "hi", "--account", "work", "--env", "EXTRA=1"],
    );
    let (code, run) = run_now(&w, "acct");
    assert_eq!(code, 0, "{run}");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap().trim_end(),
        "env work --tool claude"
    );
    let env = fakes.env("claude");
    for gone in [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GH_TOKEN",
        "GITHUB_TOKEN",
        "CODEX_HOME",
        "XDG_DATA_HOME",
    ] {
        assert!(!env.contains_key(gone), "{gone} leaked: {env:?}");
    }
    let get = |k: &str| env.get(k).map(String::as_str);
    assert_eq!(get("CLAUDE_CONFIG_DIR"), profile.to_str());
    assert_eq!(get("ANTHROPIC_BASE_URL"), Some("https://profile.example"));
    assert_eq!(
        get("XDG_CONFIG_HOME").map(PathBuf::from),
        Some(profile.join("xdg"))
    );
    assert_eq!(get("LOOPS_ACCOUNT_PROFILE"), Some("work"));
    assert_eq!(get("LOOPS_ACCOUNT_TOOL"), Some("claude"));
    assert_eq!(get("KEEP_ME"), Some("1"));
    assert_eq!(get("EXTRA"), Some("1"));
}

#[test]
fn accounts_resolve_for_runs_started_by_the_daemon() {
    // The daemon prepares runs on a multi-threaded runtime, where `accounts env` must
    // not stall other work; this is the path `run-now` does not take.
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("codex", &fixture("codex_success.jsonl"), 0);
    let profile = w.root.path().join("codex-profile");
    std::fs::create_dir_all(&profile).unwrap();
    let record = fake_accounts(
        &fakes,
        &format!("export CODEX_HOME={}", profile.display()),
        "",
        0,
    );
    create_agent(
        &w,
        "teamed",
        "codex",
        &["--at", "+1s", "--prompt", "hi", "--account", "team"],
    );
    let mut d = w.daemon_ready(&[]);
    let run = wait_for("the daemon's run", Duration::from_secs(30), || {
        w.runs("teamed")
            .into_iter()
            .find(|r| r["status"] != "running")
    });
    assert_eq!(d.stop(), Some(0), "{}", d.log_text());
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap().trim_end(),
        "env team --tool codex"
    );
    let env = fakes.env("codex");
    assert_eq!(
        env.get("CODEX_HOME"),
        profile.to_str().map(str::to_owned).as_ref()
    );
    assert_eq!(
        env.get("LOOPS_ACCOUNT_TOOL").map(String::as_str),
        Some("codex")
    );
}

#[test]
fn accounts_work_for_command_targets_with_an_explicit_tool() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let profile = w.root.path().join("gh-profile");
    std::fs::create_dir_all(&profile).unwrap();
    let record = fake_accounts(
        &fakes,
        &format!(
            "export GH_CONFIG_DIR={}\nexport GH_TOKEN=profile-token",
            profile.display()
        ),
        "",
        0,
    );
    w.extra_env.push(("GH_TOKEN".into(), "daemon-token".into()));
    let out = w.root.path().join("cmd-env.txt");
    // Without a tool, a command target cannot know which credentials to fetch.
    let (code, err) = w.fail(&[
        "create",
        "command",
        "gh",
        "--every",
        "1h",
        "--account",
        "work",
        "--cmd",
        "true",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("needs a tool"), "{err}");
    w.json(&[
        "create",
        "command",
        "gh",
        "--every",
        "1h",
        "--account",
        "work",
        "--account-tool",
        "gh",
        "--cmd",
        &format!("env > '{}'", out.display()),
    ]);
    let (code, run) = run_now(&w, "gh");
    assert_eq!(code, 0, "{run}");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap().trim_end(),
        "env work --tool gh"
    );
    let env = std::fs::read_to_string(&out).unwrap();
    assert!(env.lines().any(|l| l == "GH_TOKEN=profile-token"), "{env}");
    assert!(env.lines().any(|l| l == "LOOPS_ACCOUNT_TOOL=gh"), "{env}");
    assert!(!env.contains("daemon-token"), "{env}");
}

#[test]
fn account_failures_fail_the_run_before_the_provider_starts() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &fixture("claude_success.json"), 0);
    create_agent(
        &w,
        "acct",
        "claude",
        &["--prompt", "hi", "--account", "work"],
    );
    let missing_dir = w.root.path().join("no-such-profile-dir");
    let cases: Vec<(Box<dyn Fn()>, String)> = vec![
        (
            Box::new(|| {}),
            "account work/claude: Executable not found in PATH: accounts".into(),
        ),
        (
            Box::new(|| {
                fake_accounts(&fakes, "", "no profile named work", 3);
            }),
            // The helper's output is not quoted (it may hold credentials).
            "accounts env failed for work/claude (status 3); run `accounts env work --tool claude` to see what it says".into(),
        ),
        (
            Box::new(|| {
                fake_accounts(&fakes, "export CLAUDE_CONFIG_DIR='unterminated", "", 0);
            }),
            "accounts env for work/claude printed an unreadable line 1: unterminated single quote".into(),
        ),
        (
            Box::new(|| {
                fake_accounts(&fakes, "# nothing to export", "", 0);
            }),
            "accounts env returned no profile directory for work/claude".into(),
        ),
        (
            Box::new(|| {
                fake_accounts(
                    &fakes,
                    &format!("export CLAUDE_CONFIG_DIR={}", missing_dir.display()),
                    "",
                    0,
                );
            }),
            format!(
                "account profile directory does not exist for work/claude: {}",
                missing_dir.display()
            ),
        ),
    ];
    for (setup, expected) in cases {
        setup();
        let (code, run) = run_now(&w, "acct");
        assert_eq!(code, 1, "{run}");
        assert_eq!(run["status"], "failed");
        assert_eq!(run["error"], expected.as_str());
        assert!(run["pid"].is_null(), "{run}");
        assert!(!fakes.ran("claude"), "the provider must not start");
    }
}

#[test]
fn preflight_checks_executable_account_and_fields() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    // The executable must resolve on the effective PATH.
    std::fs::remove_file(fakes.bin.join("aicopilot")).unwrap();
    let (code, err) = w.fail(&[
        "create",
        "agent",
        "a",
        "--every",
        "1h",
        "--provider",
        "aicopilot",
        "--prompt",
        "hi",
        "--preflight",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("preflight failed: Executable not found in PATH: aicopilot"),
        "{err}"
    );
    // Found in a user bin dir that the daemon's PATH lacks: preflight passes.
    let user_bin = w.home.join(".local/bin");
    std::fs::create_dir_all(&user_bin).unwrap();
    std::fs::copy(fakes.bin.join("opencode"), user_bin.join("aicopilot")).unwrap();
    w.json(&[
        "create",
        "agent",
        "a",
        "--every",
        "1h",
        "--provider",
        "aicopilot",
        "--prompt",
        "hi",
        "--preflight",
    ]);
    // Accounts must resolve.
    fake_accounts(&fakes, "", "no such profile", 1);
    let (code, err) = w.fail(&[
        "create",
        "agent",
        "bk",
        "--every",
        "1h",
        "--provider",
        "claude",
        "--prompt",
        "hi",
        "--account",
        "nope",
        "--preflight",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "preflight failed: accounts env failed for nope/claude (status 1); run `accounts env nope --tool claude` to see what it says"
        ),
        "{err}"
    );
    // Nothing was written by the failed creates.
    let names: Vec<String> = w
        .json(&["list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["a"]);
}

#[test]
fn provider_rules_are_validated_at_create() {
    let w = World::new();
    let base = ["create", "agent", "x", "--every", "1h", "--prompt", "hi"];
    let cases: [(&[&str], &str); 6] = [
        (
            &["--provider", "codex", "--agent", "a"],
            "codex has no --agent",
        ),
        (&["--provider", "opencode"], "needs --model provider/model"),
        (
            &["--provider", "claude", "--auth-profile", "p"],
            "only supported by provider codewith",
        ),
        (
            &["--provider", "claude", "--config-override", "model=x"],
            "only supported by providers codex and codewith",
        ),
        (
            &["--provider", "codex", "--config-override=--sandbox=x"],
            "invalid config override key",
        ),
        (
            &["--provider", "codex", "--config-override", "novalue"],
            "expected KEY=VALUE",
        ),
    ];
    for (extra, message) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let (code, err) = w.fail(&args);
        assert_eq!(code, 2, "{extra:?}");
        assert!(err.contains(message), "{extra:?}: {err}");
    }
    assert_eq!(w.json(&["list"]).as_array().unwrap().len(), 0);
}

#[test]
fn config_overrides_reach_codex_as_c_pairs() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("codex", &fixture("codex_success.jsonl"), 0);
    let lp = create_agent(
        &w,
        "cx",
        "codex",
        &[
            "--prompt",
            "hi",
            "--config-override",
            "model_provider=mock",
            "--config-override",
            r#"model_providers.mock={name="Mock",base_url="http://127.0.0.1:9/v1"}"#,
        ],
    );
    assert_eq!(lp["target"]["configOverrides"]["model_provider"], "mock");
    run_now(&w, "cx");
    let argv = fakes.argv("codex");
    let pairs: Vec<&str> = argv
        .windows(2)
        .filter(|p| p[0] == "-c")
        .map(|p| p[1].as_str())
        .collect();
    assert_eq!(
        pairs,
        [
            "model_provider=mock",
            r#"model_providers.mock={name="Mock",base_url="http://127.0.0.1:9/v1"}"#
        ]
    );
    let exec = argv.iter().position(|a| a == "exec").unwrap();
    assert!(argv.iter().position(|a| a == "-c").unwrap() > exec);
}

// ---------------------------------------------------------------------------------
// Real CLIs against the mock model server.

/// Where the pinned real CLIs live: `$LOOPS_TEST_AGENT_BIN`, else the default prefix
/// of `ci/install-agent-clis.sh`.
fn real_bin_dir() -> PathBuf {
    std::env::var_os("LOOPS_TEST_AGENT_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci-npm/node_modules/.bin"),
        PathBuf::from,
    )
}

/// The bin dir when `cli` is installed; otherwise says why the test is skipped (and
/// fails under CI, which installs the CLIs).
pub(crate) fn real_cli(cli: &str) -> Option<PathBuf> {
    let dir = real_bin_dir();
    if dir.join(cli).exists() {
        return Some(dir);
    }
    let message = format!(
        "skipped: real CLIs not installed ({} missing; run ci/install-agent-clis.sh)",
        dir.join(cli).display()
    );
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{message}"
    );
    eprintln!("{message}");
    None
}

/// A world whose PATH starts with the real CLIs, and a scratch working dir.
pub(crate) fn real_world(bin: &Path) -> (World, PathBuf) {
    let mut w = World::new();
    let path = std::env::var("PATH").unwrap_or_default();
    w.extra_env
        .push(("PATH".into(), format!("{}:{path}", bin.display())));
    let work = w.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    (w, work)
}

/// Starts the daemon, waits for the loop's first finished run, stops the daemon.
fn first_run_through_daemon(w: &World, name: &str) -> Value {
    let mut d = w.daemon_ready(&[]);
    let run = wait_for(
        &format!("{name} to finish a run"),
        Duration::from_secs(90),
        || {
            let runs = w.json(&["runs", name, "--limit", "0", "--show-output"]);
            runs.as_array()?
                .iter()
                .find(|r| r["status"] != "running")
                .cloned()
        },
    );
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    run
}

/// With `LOOPS_CAPTURE_FIXTURES=DIR`, saves a real CLI's stdout as a parser fixture.
fn capture_fixture(run: &Value, file: &str) {
    if let Some(dir) = std::env::var_os("LOOPS_CAPTURE_FIXTURES") {
        let stdout = run["stdout"].as_str().unwrap_or_default();
        std::fs::write(Path::new(&dir).join(file), stdout).unwrap();
    }
}

pub(crate) const REPLY: &str = "Hello from the mock model.";

/// One real CLI of the table: how a loop points it at the mock model server, and what
/// its success and its failure look like there. Each row runs the same two stories
/// ([`real_success`], [`real_failure`]); the `real_*` tests name one row each.
pub(crate) struct RealCli {
    /// The executable `ci/install-agent-clis.sh` installs, and the loop's `--provider`.
    pub(crate) cli: &'static str,
    /// A marker in the success prompt: the mock's log shows the prompt got through.
    prompt: &'static str,
    /// `create agent` flags that point the CLI at `mock_url` (besides the common
    /// `--at`, `--prompt`, `--cwd` and `--timeout`).
    pub(crate) flags: fn(mock_url: &str) -> Vec<String>,
    /// The request the CLI sends the model (a POST to this path).
    pub(crate) path: fn(&str) -> bool,
    /// Fixture names for `LOOPS_CAPTURE_FIXTURES` (success, then the failed call).
    fixtures: [&'static str; 2],
    /// Whether the CLI prices its usage (`usage.costUsd`).
    reports_cost: bool,
}

pub(crate) const CLAUDE: RealCli = RealCli {
    cli: "claude",
    prompt: "Say hello (real-claude-prompt-7f3a)",
    flags: |url| {
        env(&[
            ("ANTHROPIC_BASE_URL", url),
            ("ANTHROPIC_API_KEY", "dummy"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
        ])
    },
    path: |p| p.starts_with("/v1/messages"),
    fixtures: ["claude_success.json", "claude_api_error.json"],
    reports_cost: true,
};

pub(crate) const CODEX: RealCli = RealCli {
    cli: "codex",
    prompt: "Say hello (real-codex-prompt-91c2)",
    // Codex ignores OPENAI_BASE_URL: a custom provider is configured through the
    // modeled `configOverrides` (`-c` pairs), retries off.
    flags: |url| {
        let provider = format!(
            r#"model_providers.mock={{name="Mock",base_url="{url}/v1",env_key="MOCK_API_KEY",wire_api="responses",request_max_retries=0,stream_max_retries=0}}"#
        );
        let mut flags = vec![
            "--config-override".to_owned(),
            "model_provider=mock".to_owned(),
            "--config-override".to_owned(),
            provider,
        ];
        flags.extend(env(&[("MOCK_API_KEY", "dummy")]));
        flags
    },
    path: |p| p == "/v1/responses",
    fixtures: ["codex_success.jsonl", "codex_turn_failed.jsonl"],
    reports_cost: false,
};

pub(crate) const OPENCODE: RealCli = RealCli {
    cli: "opencode",
    prompt: "Say hello (real-opencode-prompt-5d0e)",
    flags: |url| {
        let config = serde_json::json!({"provider": {"mock": {
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": format!("{url}/v1"), "apiKey": "dummy"},
            // A variant, for `--variant high` (provider_options::real_opencode_*).
            "models": {"mock-model": {"variants": {"high": {"reasoningEffort": "high"}}}}
        }}})
        .to_string();
        let mut flags = vec!["--model".to_owned(), "mock/mock-model".to_owned()];
        flags.extend(env(&[
            ("OPENCODE_CONFIG_CONTENT", &config),
            // Offline: no models.dev fetch, no self-update, no LSP downloads.
            ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
            ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
            ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1"),
        ]));
        flags
    },
    path: |p| p == "/v1/chat/completions",
    fixtures: ["opencode_success.jsonl", "opencode_api_error.jsonl"],
    reports_cost: false,
};

/// `--env K=V` flags.
fn env(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| ["--env".to_owned(), format!("{k}={v}")])
        .collect()
}

/// The loop name of a row.
fn real_name(cli: &RealCli) -> String {
    format!("real-{}", cli.cli)
}

/// Creates the row's loop (one run, a second from now) against `mock`, runs the
/// daemon until that run finished, and returns it; `None` when the CLI is not
/// installed (see [`real_cli`]).
fn real_run(cli: &RealCli, mock: &MockModel, prompt: &str) -> Option<Value> {
    let bin = real_cli(cli.cli)?;
    let (w, work) = real_world(&bin);
    create_real_loop(&w, &work, cli, mock, prompt);
    Some(first_run_through_daemon(&w, &real_name(cli)))
}

/// Creates the row's loop in `w` (one run, a second from now) against `mock`.
fn create_real_loop(w: &World, work: &Path, cli: &RealCli, mock: &MockModel, prompt: &str) {
    let mut args: Vec<String> = [
        "--at",
        "+1s",
        "--prompt",
        prompt,
        "--cwd",
        work.to_str().unwrap(),
        "--timeout",
        "60s",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend((cli.flags)(&mock.url()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    create_agent(w, &real_name(cli), cli.cli, &args);
}

/// The model replies: the run succeeds with the reply as its summary and the usage
/// the CLI reported, after the CLI sent the prompt.
fn real_success(cli: &RealCli) {
    let mock = MockModel::start(Mode::Reply(REPLY.into()));
    let Some(run) = real_run(cli, &mock, cli.prompt) else {
        return;
    };
    capture_fixture(&run, cli.fixtures[0]);
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert!(
        mock.saw(cli.prompt),
        "the model never saw the prompt: {:?}",
        mock.requests()
    );
    assert_eq!(run["summary"], REPLY, "{run:#}");
    assert!(run["usage"]["outputTokens"].as_u64().is_some(), "{run:#}");
    if cli.reports_cost {
        assert!(run["usage"]["costUsd"].as_f64().is_some(), "{run:#}");
    }
    assert!(mock
        .requests()
        .iter()
        .any(|r| r.method == "POST" && (cli.path)(&r.path)));
}

/// The model answers HTTP 400: the run fails with the model's message.
fn real_failure(cli: &RealCli) {
    let mock = MockModel::start(Mode::Fail {
        status: 400,
        message: "mock says: bad request".into(),
    });
    let Some(run) = real_run(cli, &mock, "Say hello") else {
        return;
    };
    capture_fixture(&run, cli.fixtures[1]);
    assert_eq!(run["status"], "failed", "{run:#}");
    assert!(!mock.requests().is_empty(), "the CLI never called the mock");
    // The error in our words, the model's message quoted from the output.
    let error = run["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("exited with status") || error.ends_with("reported an error"),
        "{run:#}"
    );
    let quoted = run["errorOutput"].as_str().unwrap_or_default();
    let message = "mock says: bad request";
    assert!(
        quoted.contains(message),
        "errorOutput {quoted:?} lacks {message:?}: {run:#}"
    );
}

#[test]
fn real_claude_succeeds_against_the_mock() {
    real_success(&CLAUDE);
}

#[test]
fn real_claude_http_400_fails_the_run() {
    real_failure(&CLAUDE);
}

/// Issue #20 item 2 with the real claude: the mock answers 429 with claude's
/// usage-limit message; the run is classed `usage_limit`, with the reset instant, and
/// holds claude's default account in the store until a minute past it, the loop's
/// slot waiting to be retried.
#[test]
fn real_claude_usage_limit_holds_its_account() {
    let Some(bin) = real_cli(CLAUDE.cli) else {
        return;
    };
    let mock = MockModel::start(Mode::Fail {
        status: 429,
        message: "Claude usage limit reached. Your limit will reset at 9am (America/Chicago)."
            .into(),
    });
    let (w, work) = real_world(&bin);
    create_real_loop(&w, &work, &CLAUDE, &mock, "Say hello");
    let name = real_name(&CLAUDE);
    let run = first_run_through_daemon(&w, &name);
    assert_eq!(run["status"], "failed", "{run:#}");
    assert_eq!(run["failureClass"], "usage_limit", "{run:#}");
    let reset = crate::util::instant(&run["retryAt"]);
    let holds = w.json(&["holds"]);
    assert_eq!(holds.as_array().map(Vec::len), Some(1), "{holds:#}");
    assert_eq!(holds[0]["provider"], "claude");
    assert_eq!(holds[0]["account"], "default");
    assert_eq!(
        crate::util::instant(&holds[0]["heldUntil"]) - reset,
        chrono::TimeDelta::minutes(1),
        "{holds:#}"
    );
    let lp = w.json(&["show", &name]);
    assert_eq!(lp["heldUntil"], holds[0]["heldUntil"], "{lp:#}");
    assert_eq!(lp["retryScheduledFor"], run["scheduledFor"], "{lp:#}");
}

/// Issue #20 item 2 with the real codex: the mock answers 429 `usage_limit_reached`
/// with its `resets_at` (as OpenAI does for a plan's limit); codex says "try again at
/// H:MM AM" in its local time, the run is classed `usage_limit` with that instant, and
/// codex's default account is held until a minute past it.
#[test]
fn real_codex_usage_limit_holds_its_account() {
    let Some(bin) = real_cli(CODEX.cli) else {
        return;
    };
    let resets = chrono::Utc::now() + chrono::TimeDelta::hours(2);
    let mock = MockModel::start(Mode::FailWith {
        status: 429,
        body: serde_json::json!({"error": {
            "type": "usage_limit_reached",
            "message": "The usage limit has been reached",
            "plan_type": "plus",
            "resets_at": resets.timestamp(),
        }}),
    });
    let (w, work) = real_world(&bin);
    create_real_loop(&w, &work, &CODEX, &mock, "Say hello");
    let name = real_name(&CODEX);
    let run = first_run_through_daemon(&w, &name);
    assert_eq!(run["status"], "failed", "{run:#}");
    assert_eq!(run["failureClass"], "usage_limit", "{run:#}");
    // Codex names the minute, in its local time: the instant is that minute.
    let reset = crate::util::instant(&run["retryAt"]);
    let off = (reset - resets).num_seconds();
    assert!(
        (-60..=60).contains(&off),
        "retryAt {reset} for {resets}: {run:#}"
    );
    let holds = w.json(&["holds"]);
    assert_eq!(holds.as_array().map(Vec::len), Some(1), "{holds:#}");
    assert_eq!(
        (&holds[0]["provider"], &holds[0]["account"]),
        (&"codex".into(), &"default".into())
    );
    assert_eq!(
        crate::util::instant(&holds[0]["heldUntil"]) - reset,
        chrono::TimeDelta::minutes(1),
        "{holds:#}"
    );
    let lp = w.json(&["show", &name]);
    assert_eq!(lp["heldUntil"], holds[0]["heldUntil"], "{lp:#}");
    assert_eq!(lp["retryScheduledFor"], run["scheduledFor"], "{lp:#}");
}

/// Issue #20 item 1 with the real CLIs: the API refuses the key (401 with each API's
/// error document); the run is classed `auth`, and `health` fails the loop at once
/// (another attempt cannot fix a key).
fn real_auth_failure(cli: &RealCli, body: serde_json::Value) {
    let Some(bin) = real_cli(cli.cli) else {
        return;
    };
    let mock = MockModel::start(Mode::FailWith { status: 401, body });
    let (w, work) = real_world(&bin);
    create_real_loop(&w, &work, cli, &mock, "Say hello");
    let name = real_name(cli);
    // Recurring, so that `health` (of active loops) judges it after the run.
    w.ok(&["edit", &name, "--every", "1h"]);
    w.make_due(&name);
    let run = first_run_through_daemon(&w, &name);
    assert_eq!(run["status"], "failed", "{run:#}");
    assert_eq!(run["failureClass"], "auth", "{run:#}");
    assert!(w.json(&["holds"]).as_array().unwrap().is_empty());
    let out = w.run(&["--json", "health"]);
    assert_eq!(out.status.code(), Some(1), "a failing loop: health exits 1");
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    let line = health["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["loopName"] == name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in {health:#}"));
    assert_eq!(line["verdict"], "fail", "{health:#}");
    assert_eq!(line["lastFailureClass"], "auth", "{health:#}");
}

#[test]
fn real_claude_auth_failure_is_classed_auth() {
    real_auth_failure(
        &CLAUDE,
        serde_json::json!({"type": "error", "error": {
            "type": "authentication_error", "message": "invalid x-api-key"}}),
    );
}

#[test]
fn real_codex_auth_failure_is_classed_auth() {
    real_auth_failure(
        &CODEX,
        serde_json::json!({"error": {"type": "invalid_request_error",
            "code": "invalid_api_key", "message": "Incorrect API key provided"}}),
    );
}

#[test]
fn real_codex_succeeds_against_the_mock() {
    real_success(&CODEX);
}

#[test]
fn real_codex_http_400_fails_the_run() {
    real_failure(&CODEX);
}

#[test]
fn real_opencode_succeeds_against_the_mock() {
    real_success(&OPENCODE);
}

#[test]
fn real_opencode_http_400_fails_the_run() {
    real_failure(&OPENCODE);
}

/// `loops usage` (#11 item 11): the usage agent runs and agent steps reported, added
/// up by loop, provider or day, from `--since` on, with totals.
#[test]
fn usage_adds_up_agent_runs_and_steps_by_loop_provider_and_day() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    // claude reports 11 in / 7 out and a cost; codex 12 / 8 and no cost.
    fakes.canned("claude", &fixture("claude_success.json"), 0);
    fakes.canned("codex", &fixture("codex_success.jsonl"), 0);
    let doc = w.json(&["usage"]);
    assert_eq!(doc["groups"], serde_json::json!([]));
    assert!(w.ok(&["usage"]).contains("no agent usage recorded since"));

    create_agent(&w, "review", "claude", &["--prompt", "Review."]);
    create_agent(&w, "triage", "codex", &["--prompt", "Triage."]);
    w.create_cmd("plain", &["--every", "1h"], "true");
    let mut review_runs = Vec::new();
    for _ in 0..3 {
        let (code, run) = run_now(&w, "review");
        assert_eq!(code, 0, "{run}");
        review_runs.push(run["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(run_now(&w, "triage").0, 0);
    assert_eq!(run_now(&w, "plain").0, 0);
    let spec = serde_json::json!({"name": "agentic", "steps": [
        {"id": "review", "target": {"type": "agent", "provider": "claude", "prompt": "Review it."}}
    ]});
    let path = w.root.path().join("wf.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap()]);
    w.ok(&["workflows", "run", "agentic"]);
    // One review run finished ten days ago.
    let conn = rusqlite::Connection::open(w.db_path()).unwrap();
    let changed = conn
        .execute(
            "UPDATE runs SET finished_at = finished_at - 864000000 WHERE id = ?1",
            [&review_runs[0]],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);

    let cost = 0.000_184; // claude_success.json's total_cost_usd, about
    let near = |v: &Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-9;
    let doc = w.json(&["usage"]);
    assert_eq!(doc["by"], "loop");
    let groups = doc["groups"].as_array().unwrap();
    let keys: Vec<&str> = groups.iter().map(|g| g["key"].as_str().unwrap()).collect();
    // By cost, then tokens: the two priced review runs, the priced step, then codex.
    assert_eq!(keys, ["review", "workflow agentic", "triage"], "{doc}");
    let review = &groups[0];
    assert_eq!((&review["runs"], &review["steps"]), (&2.into(), &0.into()));
    assert_eq!(
        (&review["inputTokens"], &review["outputTokens"]),
        (&22.into(), &14.into())
    );
    assert!(near(&review["costUsd"], 2.0 * cost), "{review}");
    let triage = &groups[2];
    assert_eq!(
        (&triage["inputTokens"], &triage["outputTokens"]),
        (&12.into(), &8.into())
    );
    assert_eq!(triage["costUsd"], Value::Null);
    assert_eq!(triage["unpriced"], 1);
    assert_eq!(groups[1]["steps"], 1);
    let total = &doc["total"];
    assert_eq!((&total["runs"], &total["steps"]), (&3.into(), &1.into()));
    assert_eq!(
        (&total["inputTokens"], &total["outputTokens"]),
        (&45.into(), &29.into())
    );
    assert!(near(&total["costUsd"], 3.0 * cost), "{total}");
    assert_eq!(total["unpriced"], 1);

    // A longer window takes the old run in.
    let month = w.json(&["usage", "--since", "30d"]);
    assert_eq!(month["groups"][0]["runs"], 3);
    assert_eq!(month["total"]["inputTokens"], 56);
    // By provider: the step's provider from its spec.
    let by_provider = w.json(&["usage", "--by", "provider"]);
    let providers: Vec<(&str, u64, u64)> = by_provider["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["key"].as_str().unwrap(),
                g["runs"].as_u64().unwrap(),
                g["steps"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(providers, [("claude", 2, 1), ("codex", 1, 0)]);
    // By day (UTC): the old run's day first.
    let by_day = w.json(&["usage", "--by", "day", "--since", "30d"]);
    let days = by_day["groups"].as_array().unwrap();
    let old_day = (chrono::Utc::now() - chrono::TimeDelta::days(10))
        .format("%Y-%m-%d")
        .to_string();
    assert_eq!(days[0]["key"], old_day.as_str(), "{by_day}");
    assert_eq!(days[0]["runs"], 1);
    let counted: u64 = days.iter().map(|d| d["runs"].as_u64().unwrap()).sum();
    assert_eq!(counted, 4);

    // The table, with a total line.
    let text = w.ok(&["usage"]);
    for needle in [
        "LOOP",
        "INPUT",
        "OUTPUT",
        "COST",
        "review",
        "workflow agentic",
        "total",
        "(1 unpriced)",
    ] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
    // Bad input: one line, exit 2.
    for (args, needle) in [
        (
            vec!["usage", "--by", "week"],
            "invalid --by \"week\": expected one of loop, provider, day",
        ),
        (vec!["usage", "--since", "0"], "--since"),
    ] {
        let (code, err) = w.fail(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}
