//! Terminal escapes (issue #19): definition fields refuse control characters (tab and
//! newline only where a field is multi-line), every human output shows the control
//! characters of stored text escaped — rows written before the refusal, and output
//! derived from runs, included — and a run's own output reaches a terminal with only
//! its SGR colours (`--raw` for the exact bytes) and a pipe byte for byte. Terminal
//! behaviour is checked through a real pseudo-terminal.

use crate::util::{wait_for, World};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::Duration;

/// OSC 52 (write the clipboard), OSC 0 (the window title), clear screen, BEL: what a
/// hostile description or output would carry.
const HOSTILE: &str = "\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J";

/// Whether `bytes` hold a control character a terminal would act on: ESC, BEL, CSI
/// (C1, in UTF-8), or any other C0 control but tab, newline and carriage return.
fn has_raw_controls(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
}

/// Runs `cmd` with its stdout and stderr on a new pseudo-terminal; what the terminal
/// received (the pty turns `\n` into `\r\n`) and the exit code.
fn in_pty(mut cmd: Command) -> (Vec<u8>, i32) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave: OwnedFd = pty.slave;
    cmd.stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()));
    let mut child = cmd.spawn().unwrap();
    drop(slave);
    drop(cmd);
    let mut master = std::fs::File::from(pty.master);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // EIO: every slave end is closed (the child exited).
            Err(_) => break,
        }
    }
    let code = child.wait().unwrap().code().unwrap_or(-1);
    (out, code)
}

/// The `loops` command `args` of `w` (not started).
fn loops(w: &World, args: &[&str]) -> Command {
    w.cmd(args)
}

#[test]
fn definitions_refuse_control_characters() {
    let w = World::new();
    let spec = |body: serde_json::Value| {
        let path = w.root.path().join("spec.json");
        std::fs::write(&path, body.to_string()).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let esc_desc = spec(
        serde_json::json!({"name": "wf", "description": HOSTILE, "steps": [{"id": "a", "target": {"type": "command", "command": "true"}}]}),
    );
    let refused: Vec<(&str, Vec<String>)> = vec![
        (
            "description",
            vec![
                "create", "command", "x", "--every", "1h", "--cmd", "true", "-d", HOSTILE,
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "shell command",
            vec![
                "create",
                "command",
                "x",
                "--every",
                "1h",
                "--cmd",
                &format!("echo {HOSTILE}"),
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "shell command with CR",
            vec![
                "create",
                "command",
                "x",
                "--every",
                "1h",
                "--cmd",
                "echo a\rb",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "argv command",
            vec![
                "create",
                "command",
                "x",
                "--every",
                "1h",
                "--no-shell",
                "--cmd",
                "/bin/echo\x07",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "argument",
            vec![
                "create",
                "command",
                "x",
                "--every",
                "1h",
                "--no-shell",
                "--cmd",
                "/bin/echo",
                "--",
                HOSTILE,
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "env value",
            vec![
                "create",
                "command",
                "x",
                "--every",
                "1h",
                "--cmd",
                "true",
                "--env",
                &format!("A={HOSTILE}"),
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "cwd",
            vec![
                "create",
                "command",
                "x",
                "--every",
                "1h",
                "--cmd",
                "true",
                "--cwd",
                "/tmp/\x1b[2J",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "prompt",
            vec![
                "create",
                "agent",
                "x",
                "--every",
                "1h",
                "--provider",
                "claude",
                "--prompt",
                HOSTILE,
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "model",
            vec![
                "create",
                "agent",
                "x",
                "--every",
                "1h",
                "--provider",
                "claude",
                "--prompt",
                "hi",
                "--model",
                "m\x1b",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "notify command",
            vec![
                "create",
                "command",
                "x",
                "--every",
                "1h",
                "--cmd",
                "true",
                "--notify-cmd",
                &format!("echo {HOSTILE}"),
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "workflow name of a loop",
            vec![
                "create",
                "workflow",
                "x",
                "--every",
                "1h",
                "--workflow",
                "w\x1bx",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        (
            "workflow description",
            vec!["workflows", "create", &esc_desc]
                .into_iter()
                .map(String::from)
                .collect(),
        ),
    ];
    for (what, args) in &refused {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = w.run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("control character"), "{what}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{what}: {stderr}");
        assert!(
            !has_raw_controls(&out.stderr),
            "{what}: the error echoes them: {stderr:?}"
        );
    }
    // Workflow specs: step fields.
    for (what, step) in [
        (
            "step name",
            serde_json::json!({"id": "a", "name": "a\x1b[2J", "target": {"type": "command", "command": "true"}}),
        ),
        (
            "step id",
            serde_json::json!({"id": "a\x07", "target": {"type": "command", "command": "true"}}),
        ),
        (
            "step command",
            serde_json::json!({"id": "a", "target": {"type": "command", "command": format!("echo {HOSTILE}"), "shell": true}}),
        ),
        (
            "step description",
            serde_json::json!({"id": "a", "description": HOSTILE, "target": {"type": "command", "command": "true"}}),
        ),
        (
            "step prompt",
            serde_json::json!({"id": "a", "target": {"type": "agent", "provider": "claude", "prompt": HOSTILE}}),
        ),
    ] {
        let path = spec(serde_json::json!({"name": "wf", "steps": [step]}));
        for verb in ["validate", "create"] {
            let out = w.run(&["workflows", verb, &path]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{what} ({verb}): {stderr}");
            assert!(stderr.contains("control character"), "{what}: {stderr}");
            assert!(!has_raw_controls(&out.stderr), "{what}: {stderr:?}");
        }
    }
    let wf_name = spec(
        serde_json::json!({"name": "w\x1b]0;x\x07", "steps": [{"id": "a", "target": {"type": "command", "command": "true"}}]}),
    );
    let (code, stderr) = w.fail(&["workflows", "create", &wf_name]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("control character") && !has_raw_controls(stderr.as_bytes()),
        "{stderr:?}"
    );
    // edit and import go through the same validation.
    w.create_cmd("ok", &["--every", "1h"], "true");
    let (code, stderr) = w.fail(&["edit", "ok", "-d", HOSTILE]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("control character"), "{stderr}");
    let bundle = w.ok(&["export"]);
    let hostile_bundle = bundle.replacen(
        "\"command\": \"true\"",
        "\"command\": \"echo \\u001b]0;x\\u0007\"",
        1,
    );
    assert_ne!(bundle, hostile_bundle);
    let path = w.root.path().join("bundle.json");
    std::fs::write(
        &path,
        hostile_bundle.replace("\"name\": \"ok\"", "\"name\": \"ok2\""),
    )
    .unwrap();
    let out = w.run(&["import", "--apply", path.to_str().unwrap()]);
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("control character (U+001B)"), "{said}");
    assert!(!has_raw_controls(&out.stdout), "{said:?}");
    assert_eq!(
        w.json(&["list"]).as_array().unwrap().len(),
        1,
        "nothing half-written"
    );
    assert_eq!(w.json(&["workflows", "list"]), serde_json::json!([]));

    // The HTTP API and the MCP tools go through the same validation.
    let api = w.serve(&[]);
    let refused = api.post(
        "/v1/loops",
        serde_json::json!({"name": "h", "description": HOSTILE, "schedule": {"type": "dynamic", "minIntervalMs": 60000}, "target": {"type": "command", "command": "true", "shell": true}}),
    );
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(
        refused.error().contains("control character (U+001B)"),
        "{}",
        refused.text
    );
    drop(api);
    let mcp = crate::mcp::Mcp::start(&w, &["--allow-code"]);
    let refused = mcp.err(
        "loops_create_command",
        serde_json::json!({"name": "m", "cmd": "/bin/echo", "noShell": true, "args": [HOSTILE], "every": "1h"}),
    );
    assert!(refused.contains("control character (U+001B)"), "{refused}");
    assert!(mcp.close().success());
    assert_eq!(w.json(&["list"]).as_array().unwrap().len(), 1);

    // Multi-line fields keep their tabs and newlines.
    w.ok(&[
        "create",
        "command",
        "script",
        "--every",
        "1h",
        "--cmd",
        "set -e\n\techo one\necho two",
        "-d",
        "line one\n\tline two",
    ]);
    w.ok(&[
        "create",
        "command",
        "argv",
        "--every",
        "1h",
        "--no-shell",
        "--cmd",
        "/bin/echo",
        "--",
        "a\nb",
    ]);
    w.ok(&[
        "create",
        "agent",
        "agent",
        "--every",
        "1h",
        "--provider",
        "claude",
        "--prompt",
        "step one\r\n\tstep two\n",
    ]);
    let shown = w.json(&["show", "script"]);
    assert_eq!(shown["target"]["command"], "set -e\n\techo one\necho two");
    assert_eq!(shown["description"], "line one\n\tline two");
}

/// Rows with control characters stored before the refusal existed (or by any other
/// writer of the file): every human view shows them escaped.
#[test]
fn stored_control_characters_are_shown_escaped() {
    let w = World::new();
    w.ok(&[
        "create", "command", "evil", "--every", "1h", "--cmd", "echo hi", "-d", "plain",
    ]);
    let conn = rusqlite::Connection::open(w.db_path()).unwrap();
    let target: String = conn
        .query_row(
            "SELECT target_json FROM loops WHERE name = 'evil'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let hostile_json = serde_json::to_string(&format!("echo {HOSTILE}")).unwrap();
    let target = target.replace("\"echo hi\"", &hostile_json);
    conn.execute(
        "UPDATE loops SET description = ?1, target_json = ?2 WHERE name = 'evil'",
        rusqlite::params![format!("about {HOSTILE}\nsecond line"), target],
    )
    .unwrap();
    drop(conn);
    assert!(w.json(&["show", "evil"])["description"]
        .as_str()
        .unwrap()
        .contains('\x1b'));
    for args in [
        vec!["show", "evil"],
        vec!["list"],
        vec!["health"],
        vec!["doctor"],
    ] {
        let out = w.run(&args);
        assert!(
            !has_raw_controls(&out.stdout) && !has_raw_controls(&out.stderr),
            "{args:?}: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let shown = w.ok(&["show", "evil"]);
    assert!(shown.contains("\\x1b]52;c;cHduZWQ=\\x07"), "{shown}");
    // A multi-line description stays readable: its next line is indented under it.
    let second = shown.lines().find(|l| l.contains("second line")).unwrap();
    assert!(second.starts_with("  "), "{shown}");
    let (out, _) = in_pty(loops(&w, &["show", "evil"]));
    assert!(
        !has_raw_controls(&out),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
}

/// A run that prints hostile escapes and colours, and fails with them on stderr.
#[test]
fn run_output_reaches_a_terminal_with_only_its_colours() {
    let w = World::new();
    let script = w.root.path().join("hostile.sh");
    crate::util::write_script(
        &script,
        "#!/bin/sh\nprintf '\\033[31mred\\033[0m \\033]0;pwned\\007title \\033[2Jclear \\302\\233c1\\n'\nprintf '\\033]52;c;cHduZWQ=\\007boom\\n' >&2\nexit 3\n",
    );
    let s = script.to_str().unwrap();
    w.ok(&[
        "create",
        "command",
        "hostile",
        "--every",
        "1h",
        "--no-shell",
        "--cmd",
        s,
    ]);
    let run_now = w.run(&["run-now", "hostile", "--show-output"]);
    assert_eq!(run_now.status.code(), Some(1));
    let exact = b"\x1b[31mred\x1b[0m \x1b]0;pwned\x07title \x1b[2Jclear \xc2\x9bc1\n";
    // To a pipe: byte for byte.
    assert!(
        run_now.stdout.windows(exact.len()).any(|w| w == exact),
        "{:?}",
        String::from_utf8_lossy(&run_now.stdout)
    );
    let id = w.json(&["runs", "hostile"])[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let logs = w.run(&["logs", &id]);
    assert_eq!(
        logs.stdout,
        exact,
        "{:?}",
        String::from_utf8_lossy(&logs.stdout)
    );
    let shown = w.run(&["runs", "hostile", "--show-output"]);
    assert!(shown.stdout.windows(exact.len()).any(|w| w == exact));

    // To a terminal: the SGR colours pass, nothing else; --raw gives the bytes.
    for args in [
        vec!["logs", id.as_str()],
        vec!["runs", "hostile", "--show-output"],
        vec!["run-now", "hostile", "--show-output"],
    ] {
        let (out, _) = in_pty(loops(&w, &args));
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("\x1b[31mred\x1b[0m"), "{args:?}: {text:?}");
        assert!(!text.contains("\x1b]"), "{args:?}: {text:?}");
        assert!(
            !text.contains("\x1b[2J") && !text.contains('\x07'),
            "{args:?}: {text:?}"
        );
        assert!(!text.contains('\u{9b}'), "{args:?}: {text:?}");
        assert!(
            text.contains("\\x1b]0;pwned\\x07title"),
            "{args:?}: {text:?}"
        );
        let mut raw = args.clone();
        raw.push("--raw");
        let (out, _) = in_pty(loops(&w, &raw));
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("\x1b]0;pwned\x07title"), "{raw:?}: {text:?}");
    }
    // Summaries of it — the runs table's error line with the first stderr line — are
    // human output: escaped wherever they go.
    for args in [vec!["runs", "hostile"], vec!["runs"]] {
        let out = w.run(&args);
        assert!(
            !has_raw_controls(&out.stdout),
            "{args:?}: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // runs --follow: its lines quote the error too. New runs until the follower has
    // shown one ending.
    let mut follow = w
        .cmd(&["runs", "--follow", "hostile"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    wait_for(
        "runs --follow to show a run ending",
        Duration::from_secs(30),
        || {
            let _ = w.run(&["run-now", "hostile"]);
            while let Ok(chunk) = rx.recv_timeout(Duration::from_millis(500)) {
                lines.extend(chunk);
            }
            String::from_utf8_lossy(&lines)
                .contains(" failed")
                .then_some(())
        },
    );
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        !has_raw_controls(&lines),
        "{:?}",
        String::from_utf8_lossy(&lines)
    );
}

/// A workflow step's output, shown by `workflows run --show-output`, is run output too.
#[test]
fn workflow_step_output_reaches_a_terminal_with_only_its_colours() {
    let w = World::new();
    let path = w.root.path().join("wf.json");
    std::fs::write(
        &path,
        serde_json::json!({"name": "wf", "steps": [{"id": "a", "target": {"type": "command", "command": "printf '\\033[32mok\\033[0m \\033]0;pwned\\007t\\n'", "shell": true}}]}).to_string(),
    )
    .unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap()]);
    let piped = w.run(&["workflows", "run", "wf", "--show-output"]);
    assert!(String::from_utf8_lossy(&piped.stdout).contains("\x1b]0;pwned\x07t"));
    let (out, _) = in_pty(loops(&w, &["workflows", "run", "wf", "--show-output"]));
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("\x1b[32mok\x1b[0m"), "{text:?}");
    assert!(
        !text.contains("\x1b]") && !text.contains('\x07'),
        "{text:?}"
    );
    let (out, _) = in_pty(loops(
        &w,
        &["workflows", "run", "wf", "--show-output", "--raw"],
    ));
    assert!(String::from_utf8_lossy(&out).contains("\x1b]0;pwned\x07t"));
}
