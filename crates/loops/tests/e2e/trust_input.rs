//! Trust in what the user typed (issue #9): names never shadow ids, every input read
//! from outside is bounded, a workflow loop needs its workflow, working directories are
//! stored absolute, and small flag mistakes are refused instead of silently ignored.
//! Every refusal is one line on stderr, exit 2, and leaves `list --json` unchanged.

use crate::util::{wait_for, World};
use loops::core::{CommandTarget, NewLoop, Policy, Schedule, Target};
use loops::sqlite::SqliteStore;
use loops::store::Store;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// Asserts a failure with exit code 2 whose single stderr line contains `expected`.
fn refused(w: &World, args: &[&str], expected: &str) {
    let (code, stderr) = w.fail(args);
    assert_eq!(code, 2, "exit code for {args:?}; stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "one stderr line for {args:?}, got:\n{stderr}"
    );
    assert!(
        lines[0].contains(expected),
        "stderr for {args:?} should contain {expected:?}, got:\n{stderr}"
    );
}

/// `list --json` as it is now (an empty array before the store exists).
fn loops_now(w: &World) -> Value {
    if w.db_path().exists() {
        w.json(&["list"])
    } else {
        json!([])
    }
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
}

/// Opens the store behind the CLI's back, to plant rows a current `create` would refuse
/// (as an older version of loops could have stored them).
fn store(w: &World) -> SqliteStore {
    SqliteStore::open(&w.db_path()).expect("open store")
}

fn plant_loop(w: &World, name: &str) -> String {
    let new = NewLoop {
        name: name.into(),
        description: None,
        schedule: Schedule::Interval {
            every_ms: 3_600_000,
            anchor: loops::core::Anchor::FixedRate,
        },
        target: Target::Command(CommandTarget {
            command: "true".into(),
            args: vec![],
            cwd: None,
            shell: true,
            env: Default::default(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        labels: Vec::new(),
        notify: None,
        next_run_at: Some(chrono::Utc::now() + chrono::TimeDelta::hours(1)),
    };
    store(w)
        .create_loop(new, chrono::Utc::now())
        .expect("plant loop")
        .id
        .to_string()
}

fn write(path: &Path, body: &[u8]) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(path, body).expect("write");
}

fn spec_file(w: &World, file: &str, spec: &Value) -> PathBuf {
    let path = w.root.path().join(file);
    write(&path, spec.to_string().as_bytes());
    path
}

fn one_step_spec(name: &str) -> Value {
    json!({"name": name, "steps": [{"id": "s", "target": {"type": "command", "command": "true"}}]})
}

/// A directory as the OS sees it (`pwd` prints the physical path).
fn same_dir(p: &str) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

// ---------------------------------------------------------------------------------
// 1. Names vs ids: an exact id wins, then an exact name, then an unambiguous prefix.
// ---------------------------------------------------------------------------------

#[test]
fn a_loop_may_not_be_named_like_an_id() {
    let w = World::new();
    let first = w.create_cmd("first", &["--every", "1h"], "true");
    let id = id_of(&first);
    let before = loops_now(&w);
    // The exact reproduction: a loop named another loop's id.
    refused(
        &w,
        &["create", "command", &id, "--every", "1m", "--cmd", "true"],
        &format!("loop name {id:?} looks like a loop id"),
    );
    // Any twelve lowercase hex characters have the shape of an id.
    refused(
        &w,
        &[
            "create",
            "command",
            "0123456789ab",
            "--every",
            "1m",
            "--cmd",
            "true",
        ],
        "loop name \"0123456789ab\" looks like a loop id",
    );
    // A lowercase hex name that is a prefix of an existing id.
    refused(
        &w,
        &[
            "create",
            "command",
            &id[..4],
            "--every",
            "1m",
            "--cmd",
            "true",
        ],
        &format!("loop name {:?} is a prefix of loop id {id}", &id[..4]),
    );
    assert_eq!(loops_now(&w), before, "nothing written");
    // Upper case is not id-shaped (ids are lowercase), and neither is a longer name.
    w.create_cmd(&id.to_uppercase(), &["--every", "1h"], "true");
    w.create_cmd(&format!("{id}0"), &["--every", "1h"], "true");
}

#[test]
fn an_exact_id_wins_over_a_loop_named_like_it() {
    let w = World::new();
    let target = w.create_cmd("target", &["--every", "1h"], "true");
    let id = id_of(&target);
    // Rows an older loops accepted: one named exactly the id, one named a prefix of it.
    let impostor = plant_loop(&w, &id);
    let prefixed = plant_loop(&w, &id[..6]);
    assert_eq!(w.json(&["show", &id])["name"], "target");
    // A name still beats a mere prefix.
    assert_eq!(w.json(&["show", &id[..6]])["id"], prefixed);
    // `remove <id>` removes the loop with that id, not the one named like it.
    w.ok(&["remove", &id]);
    let left: Vec<String> = w
        .json(&["list"])
        .as_array()
        .expect("list")
        .iter()
        .map(id_of)
        .collect();
    assert!(!left.contains(&id), "{left:?}");
    assert!(left.contains(&impostor), "{left:?}");
}

#[test]
fn workflows_follow_the_same_rule() {
    let w = World::new();
    let first = w.json(&[
        "workflows",
        "create",
        s(&spec_file(&w, "first.json", &one_step_spec("first"))),
    ]);
    let id = id_of(&first);
    let listed_before = w.json(&["workflows", "list"]);
    refused(
        &w,
        &[
            "workflows",
            "create",
            s(&spec_file(&w, "id.json", &one_step_spec(&id))),
        ],
        &format!("workflow name {id:?} looks like a workflow id"),
    );
    refused(
        &w,
        &[
            "workflows",
            "create",
            s(&spec_file(&w, "first.json", &one_step_spec("first"))),
            "--name",
            &id[..3],
        ],
        &format!(
            "workflow name {:?} is a prefix of workflow id {id}",
            &id[..3]
        ),
    );
    assert_eq!(w.json(&["workflows", "list"]), listed_before);
    // A spec stored under the id's name by an older loops: the id still wins.
    let mut spec: loops::core::workflow::WorkflowSpec =
        serde_json::from_value(one_step_spec(&id)).expect("spec");
    spec.description = Some("impostor".into());
    let impostor =
        loops::store::WorkflowStore::create_workflow(&store(&w), &spec, false, chrono::Utc::now())
            .expect("plant workflow");
    let shown = w.json(&["workflows", "show", &id]);
    assert_eq!(shown["name"], "first", "{shown}");
    assert_eq!(
        w.json(&["workflows", "show", impostor.id.as_str()])["description"],
        "impostor"
    );
}

#[test]
fn workflow_runs_resolve_by_exact_id_then_prefix() {
    let w = World::new();
    w.json(&[
        "workflows",
        "create",
        s(&spec_file(&w, "wf.json", &one_step_spec("wf"))),
    ]);
    let run = w.json(&["workflows", "run", "wf"]);
    let run_id = run["workflowRun"]["id"]
        .as_str()
        .expect("run id")
        .to_owned();
    assert_eq!(
        w.json(&["workflows", "inspect", &run_id])["workflowRun"]["id"],
        run_id
    );
    assert_eq!(
        w.json(&["workflows", "inspect", &run_id[..5]])["workflowRun"]["id"],
        run_id
    );
    refused(
        &w,
        &["workflows", "inspect", "zz"],
        "no workflow run with id \"zz\"",
    );
}

// ---------------------------------------------------------------------------------
// 2. Unbounded reads: files and text from outside are bounded, read at most limit+1.
// ---------------------------------------------------------------------------------

/// Runs `loops` under a 2 GiB address-space limit (so a build that reads without bound
/// fails fast instead of exhausting the machine) and kills it at `deadline`.
fn run_bounded(w: &World, args: &[&str], deadline: Duration) -> Output {
    let err_path = w.root.path().join("bounded.stderr");
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let base = w.cmd(&[]);
    let mut sh = std::process::Command::new("sh");
    sh.env_clear()
        .envs(base.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .arg("-c")
        .arg("ulimit -v 2097152; exec \"$0\" \"$@\"")
        .arg(crate::util::bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err);
    let mut child = sh.spawn().expect("spawn");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("loops {args:?} still running after {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        use std::io::Read;
        let _ = out.read_to_end(&mut stdout);
    }
    Output {
        status,
        stdout,
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    }
}

fn assert_refused_output(out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(expected),
        "expected {expected:?} in {stderr}"
    );
}

#[test]
fn endless_prompt_files_end_quickly_with_a_clear_error() {
    let w = World::new();
    let before = loops_now(&w);
    let agent = |file: &str| {
        vec![
            "create".to_owned(),
            "agent".to_owned(),
            "reader".to_owned(),
            "--every".to_owned(),
            "1h".to_owned(),
            "--provider".to_owned(),
            "claude".to_owned(),
            "--prompt-file".to_owned(),
            file.to_owned(),
        ]
    };
    let args = agent("/dev/zero");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_bounded(&w, &args, Duration::from_secs(10));
    assert_refused_output(
        &out,
        "cannot read --prompt-file /dev/zero: not a regular file (a character device)",
    );

    // A FIFO nobody writes to: refused at once, never opened for a blocking read.
    let fifo = w.root.path().join("prompt.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let args = agent(s(&fifo));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_bounded(&w, &args, Duration::from_secs(10));
    assert_refused_output(
        &out,
        &format!(
            "cannot read --prompt-file {}: not a regular file (a FIFO)",
            fifo.display()
        ),
    );
    assert_eq!(loops_now(&w), before, "nothing written");
}

/// Issue #19 item 13: every file read from a path the user names — a bundle, an
/// OpenLoops database, a workflow spec and its prompt files, a prompt file, the HTTP
/// token file, the pid file — is a regular file, opened without blocking and read with
/// a bound. A FIFO nobody writes to made `import` (bundle and `--from-openloops`) wait
/// for ever; now each refuses it at once with one line, and writes nothing.
#[test]
fn a_fifo_or_a_device_where_a_file_is_expected_is_refused_at_once_everywhere() {
    let w = World::new();
    w.create_cmd("keep", &["--every", "1h"], "true");
    w.json(&[
        "create",
        "agent",
        "ag",
        "--every",
        "1h",
        "--provider",
        "claude",
        "--prompt",
        "hi",
    ]);
    let before = loops_now(&w);
    let fifo = w.root.path().join("input.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let f = s(&fifo);
    let is_fifo = format!("{f}: not a regular file (a FIFO)");
    let spec_dir = w.root.path().join("specs");
    let spec = spec_dir.join("wf.json");
    let step_fifo = spec_dir.join("prompt.fifo");
    std::fs::create_dir_all(&spec_dir).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(&step_fifo)
        .status()
        .expect("mkfifo")
        .success());
    write(
        &spec,
        json!({"name": "wf", "steps": [{"id": "a", "target": {"type": "agent", "provider": "claude", "promptFile": "prompt.fifo"}}]})
            .to_string()
            .as_bytes(),
    );
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["import", f], is_fifo.clone()),
        (vec!["import", f, "--apply"], is_fifo.clone()),
        (
            vec!["import", "/dev/zero"],
            "/dev/zero: not a regular file (a character device)".to_owned(),
        ),
        (
            vec!["import", "--from-openloops", f],
            format!("{f}: cannot read it: not a regular file (a FIFO)"),
        ),
        (vec!["workflows", "validate", f], is_fifo.clone()),
        (vec!["workflows", "create", f], is_fifo.clone()),
        (
            vec!["workflows", "validate", s(&spec)],
            format!("{}: not a regular file (a FIFO)", step_fifo.display()),
        ),
        (
            vec![
                "create",
                "agent",
                "a",
                "--every",
                "1h",
                "--provider",
                "claude",
                "--prompt-file",
                f,
            ],
            is_fifo.clone(),
        ),
        (vec!["edit", "ag", "--prompt-file", f], is_fifo.clone()),
    ];
    for (args, expected) in cases {
        let out = run_bounded(&w, &args, Duration::from_secs(10));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        assert!(
            lines[0].contains(&expected),
            "{args:?}: expected {expected:?} in {stderr}"
        );
    }
    assert_eq!(loops_now(&w), before, "nothing written");

    // Files of the data dir read by path: the HTTP token and the pid file.
    let token = w.data.join("http.token");
    assert!(std::process::Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(&token)
        .status()
        .expect("mkfifo")
        .success());
    let out = run_bounded(&w, &["serve", "--print-token"], Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("not a regular file (a FIFO)"), "{stderr}");
    std::fs::remove_file(&token).unwrap();
    let pid_file = w.data.join("daemon.pid");
    assert!(std::process::Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(&pid_file)
        .status()
        .expect("mkfifo")
        .success());
    let out = run_bounded(&w, &["--json", "daemon", "status"], Duration::from_secs(10));
    let status: Value = serde_json::from_slice(&out.stdout).expect("status json");
    assert_eq!(status["state"], "stopped", "{status}");
}

#[test]
fn oversized_inputs_are_refused_and_nothing_is_written() {
    let w = World::new();
    w.create_cmd("keep", &["--every", "1h"], "true");
    let before = loops_now(&w);
    let two_mib = vec![b'x'; 2 << 20];
    let big_prompt = w.root.path().join("big.md");
    write(&big_prompt, &two_mib);
    refused(
        &w,
        &[
            "create",
            "agent",
            "big",
            "--every",
            "1h",
            "--provider",
            "claude",
            "--prompt-file",
            s(&big_prompt),
        ],
        &format!(
            "--prompt-file {} is larger than 1 MiB",
            big_prompt.display()
        ),
    );
    // Exactly at the limit is fine (and is refused only for being too large above it).
    let cmd = "x".repeat(70 * 1024);
    refused(
        &w,
        &["create", "command", "long", "--every", "1h", "--cmd", &cmd],
        "command line (command and arguments) is larger than 64 KiB",
    );
    let description = "d".repeat(5 * 1024);
    refused(
        &w,
        &[
            "create",
            "command",
            "described",
            "--every",
            "1h",
            "--cmd",
            "true",
            "-d",
            &description,
        ],
        "description is larger than 4 KiB",
    );
    let env = format!("BIG={}", "v".repeat(70 * 1024));
    refused(
        &w,
        &[
            "create", "command", "env", "--every", "1h", "--cmd", "true", "--env", &env,
        ],
        "environment variable \"BIG\" is larger than 64 KiB",
    );
    assert_eq!(loops_now(&w), before, "nothing written");
}

#[test]
fn oversized_workflow_specs_and_step_prompts_are_refused() {
    let w = World::new();
    // 2 MiB of valid JSON (whitespace padding), for validate and create alike.
    let mut big = one_step_spec("padded").to_string().into_bytes();
    big.extend(std::iter::repeat_n(b' ', 2 << 20));
    let path = w.root.path().join("padded.json");
    write(&path, &big);
    for verb in ["validate", "create"] {
        refused(
            &w,
            &["workflows", verb, s(&path)],
            &format!("{} is larger than 1 MiB", path.display()),
        );
    }
    // A spec file that never ends.
    refused(
        &w,
        &["workflows", "validate", "/dev/zero"],
        "/dev/zero: not a regular file (a character device)",
    );
    let dir = w.root.path().join("specs");
    write(&dir.join("huge.md"), &vec![b'p'; 2 << 20]);
    let spec = json!({"name": "huge", "steps": [{"id": "r", "target": {"type": "agent", "provider": "claude", "promptFile": "huge.md"}}]});
    let spec_path = dir.join("huge.json");
    write(&spec_path, spec.to_string().as_bytes());
    refused(
        &w,
        &["workflows", "create", s(&spec_path)],
        &format!(
            "step \"r\": promptFile {} is larger than 1 MiB",
            dir.join("huge.md").display()
        ),
    );
    assert_eq!(w.json(&["workflows", "list"]), json!([]));
}

// ---------------------------------------------------------------------------------
// 3. A workflow loop needs an active workflow, at create and in doctor.
// ---------------------------------------------------------------------------------

#[test]
fn a_workflow_loop_needs_an_active_workflow() {
    let w = World::new();
    let before = loops_now(&w);
    for extra in [&[][..], &["--preflight"][..]] {
        let mut args = vec![
            "create",
            "workflow",
            "x",
            "--every",
            "1h",
            "--workflow",
            "missing",
        ];
        args.extend_from_slice(extra);
        refused(&w, &args, "no active workflow named \"missing\"");
    }
    assert_eq!(loops_now(&w), before, "nothing written");
}

fn doctor_check(w: &World, name: &str) -> (i32, Value) {
    let out = w.run(&["--json", "doctor"]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("doctor json");
    let check = doc["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["check"] == name).cloned())
        .unwrap_or_else(|| panic!("no check {name}: {doc}"));
    (out.status.code().unwrap_or(-1), check)
}

#[test]
fn doctor_fails_a_workflow_loop_whose_workflow_is_gone() {
    let w = World::new();
    let spec = spec_file(&w, "nightly.json", &one_step_spec("nightly"));
    w.json(&["workflows", "create", s(&spec)]);
    w.json(&[
        "create",
        "workflow",
        "runner",
        "--every",
        "1h",
        "--workflow",
        "nightly",
    ]);
    let (_, check) = doctor_check(&w, "loop runner");
    assert_eq!(check["status"], "ok", "{check}");
    w.ok(&["workflows", "archive", "nightly"]);
    let (code, check) = doctor_check(&w, "loop runner");
    assert_eq!(code, 1);
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap_or("")
            .contains("no active workflow named \"nightly\""),
        "{check}"
    );
}

#[test]
fn doctor_checks_the_steps_of_a_loops_workflow() {
    let w = World::new();
    let spec = json!({"name": "broken", "steps": [
        {"id": "fine", "target": {"type": "command", "command": "true"}},
        {"id": "gone", "target": {"type": "command", "command": "loops-test-no-such-executable"}}
    ]});
    w.json(&[
        "workflows",
        "create",
        s(&spec_file(&w, "broken.json", &spec)),
    ]);
    w.json(&[
        "create",
        "workflow",
        "runner",
        "--every",
        "1h",
        "--workflow",
        "broken",
    ]);
    let (code, check) = doctor_check(&w, "loop runner");
    assert_eq!(code, 1);
    assert_eq!(check["status"], "fail", "{check}");
    let detail = check["detail"].as_str().unwrap_or("");
    assert!(
        detail
            .contains("step \"gone\": Executable not found in PATH: loops-test-no-such-executable"),
        "{check}"
    );
    assert!(!detail.contains("\"fine\""), "{check}");
}

// ---------------------------------------------------------------------------------
// 4. Working directories are stored absolute.
// ---------------------------------------------------------------------------------

#[test]
fn a_relative_cwd_is_stored_absolute_and_used() {
    let w = World::new();
    let here = w.root.path().join("project");
    std::fs::create_dir_all(here.join("sub")).expect("mkdir");
    let out = w
        .cmd(&[
            "--json",
            "create",
            "command",
            "where",
            "--every",
            "1h",
            "--cmd",
            "pwd > out.txt",
            "--cwd",
            "sub",
        ])
        .current_dir(&here)
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).expect("json");
    let expected = here.join("sub");
    assert_eq!(created["target"]["cwd"], s(&expected));
    assert_eq!(w.json(&["show", "where"])["target"]["cwd"], s(&expected));
    // Run it from somewhere else: it runs in the stored directory.
    let ran = w
        .cmd(&["run-now", "where"])
        .current_dir(w.root.path())
        .output()
        .expect("spawn");
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let pwd = std::fs::read_to_string(expected.join("out.txt")).expect("out.txt");
    assert_eq!(same_dir(pwd.trim()), same_dir(s(&expected)));

    // `~/` is the user's home; agents' cwd is resolved the same way.
    std::fs::create_dir_all(w.home.join("work")).expect("mkdir");
    let agent = w.json(&[
        "create",
        "agent",
        "homed",
        "--every",
        "1h",
        "--provider",
        "claude",
        "--prompt",
        "hi",
        "--cwd",
        "~/work",
    ]);
    assert_eq!(agent["target"]["cwd"], s(&w.home.join("work")));
}

#[test]
fn a_workflow_steps_cwd_is_relative_to_the_spec_file() {
    let w = World::new();
    let dir = w.root.path().join("specs");
    std::fs::create_dir_all(dir.join("build")).expect("mkdir");
    let spec = json!({"name": "cwd", "steps": [
        {"id": "where", "target": {"type": "command", "command": "pwd > out.txt", "shell": true, "cwd": "build"}}
    ]});
    let path = dir.join("cwd.json");
    write(&path, spec.to_string().as_bytes());
    // Created from an unrelated directory: the spec's directory is the base.
    let out = w
        .cmd(&["--json", "workflows", "create", "specs/cwd.json"])
        .current_dir(w.root.path())
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).expect("json");
    let expected = dir.join("build");
    assert_eq!(
        created["steps"][0]["target"]["cwd"],
        s(&expected),
        "{created}"
    );
    let ran = w
        .cmd(&["workflows", "run", "cwd"])
        .current_dir(&w.home)
        .output()
        .expect("spawn");
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let pwd = std::fs::read_to_string(expected.join("out.txt")).expect("out.txt");
    assert_eq!(same_dir(pwd.trim()), same_dir(s(&expected)));
}

// ---------------------------------------------------------------------------------
// 5. Small ones: flags that were silently ignored, non-canonical zones, duplicates,
//    and duration messages that say what is wrong.
// ---------------------------------------------------------------------------------

#[test]
fn schedule_modifiers_need_their_schedule() {
    let w = World::new();
    let before = loops_now(&w);
    for schedule in [
        &["--every", "1m"][..],
        &["--dynamic"][..],
        &["--at", "+1h"][..],
    ] {
        let mut args = vec![
            "create",
            "command",
            "tz",
            "--cmd",
            "true",
            "--tz",
            "Europe/Berlin",
        ];
        args.extend_from_slice(schedule);
        refused(&w, &args, "--tz is for --cron");
    }
    refused(
        &w,
        &[
            "create",
            "command",
            "anchor",
            "--cmd",
            "true",
            "--cron",
            "0 * * * *",
            "--anchor",
            "fixed_delay",
        ],
        "--anchor is for --every",
    );
    assert_eq!(loops_now(&w), before, "nothing written");
}

#[test]
fn time_zones_are_stored_canonical() {
    let w = World::new();
    let lp = w.json(&[
        "create",
        "command",
        "berlin",
        "--cron",
        "0 9 * * *",
        "--tz",
        "europe/berlin",
        "--cmd",
        "true",
    ]);
    assert_eq!(lp["schedule"]["timezone"], "Europe/Berlin");
    let mut utc = w.cmd(&[
        "--json",
        "create",
        "command",
        "utc",
        "--cron",
        "0 9 * * *",
        "--cmd",
        "true",
    ]);
    let out = utc.env("TZ", "utc").output().expect("spawn");
    let lp: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(lp["schedule"]["timezone"], "UTC");
}

#[test]
fn duplicate_keys_are_refused() {
    let w = World::new();
    let before = loops_now(&w);
    refused(
        &w,
        &[
            "create", "command", "dup", "--every", "1m", "--cmd", "true", "--env", "A=1", "--env",
            "A=2",
        ],
        "--env A is given twice",
    );
    refused(
        &w,
        &[
            "create",
            "agent",
            "dup",
            "--every",
            "1m",
            "--provider",
            "codex",
            "--prompt",
            "hi",
            "--config-override",
            "model=a",
            "--config-override",
            "model=b",
        ],
        "--config-override model is given twice",
    );
    assert_eq!(loops_now(&w), before, "nothing written");
    // serde_json would keep the last of two equal keys; a spec must not.
    let path = w.root.path().join("dup.json");
    write(
        &path,
        br#"{"name": "dup", "steps": [{"id": "s", "target": {"type": "command", "command": "true", "env": {"A": "1", "A": "2"}}}]}"#,
    );
    refused(
        &w,
        &["workflows", "create", s(&path)],
        "duplicate key \"A\"",
    );
    assert_eq!(w.json(&["workflows", "list"]), json!([]));
}

#[test]
fn duration_messages_say_what_is_allowed() {
    let w = World::new();
    let before = loops_now(&w);
    refused(
        &w,
        &[
            "create", "command", "fast", "--every", "0.0001s", "--cmd", "true",
        ],
        "--every: invalid duration \"0.0001s\": the smallest duration is 1ms",
    );
    for zero in ["0", "0s"] {
        refused(
            &w,
            &[
                "create", "command", "t", "--every", "1m", "--cmd", "true", "--timeout", zero,
            ],
            &format!(
                "--timeout: invalid duration {zero:?}: must be greater than zero (omit --timeout for no limit)"
            ),
        );
    }
    refused(
        &w,
        &[
            "create",
            "command",
            "r",
            "--every",
            "1m",
            "--cmd",
            "true",
            "--retry-delay",
            "0",
        ],
        "--retry-delay: invalid duration \"0\": must be greater than zero",
    );
    assert_eq!(loops_now(&w), before, "nothing written");
}

// ---------------------------------------------------------------------------------
// 6. OpenLoops compatibility.
// ---------------------------------------------------------------------------------

#[test]
fn a_dynamic_loop_first_runs_one_minimum_interval_after_creation() {
    let w = World::new();
    let lp = w.create_cmd("dyn", &["--dynamic", "1h"], "true");
    let created = crate::util::instant(&lp["createdAt"]);
    let next = crate::util::instant(&lp["nextRunAt"]);
    assert_eq!(next - created, chrono::TimeDelta::hours(1), "{lp}");
    // And a short one really runs after about that long, through the daemon.
    let short = w.create_cmd("soon", &["--dynamic", "1s"], "true");
    let created = crate::util::instant(&short["createdAt"]);
    let _daemon = w.daemon_ready(&[]);
    let run = wait_for(
        "the dynamic loop's first run",
        Duration::from_secs(20),
        || w.runs("soon").pop(),
    );
    let started = crate::util::instant(&run["scheduledFor"]);
    assert_eq!(started - created, chrono::TimeDelta::seconds(1), "{run}");
}

#[test]
fn workflows_list_hides_archived_specs_unless_asked() {
    let w = World::new();
    let spec = spec_file(&w, "rel.json", &one_step_spec("rel"));
    let v1 = w.json(&["workflows", "create", s(&spec)]);
    let v2 = w.json(&["workflows", "create", s(&spec), "--replace"]);
    let ids =
        |v: Value| -> Vec<String> { v.as_array().expect("array").iter().map(id_of).collect() };
    assert_eq!(ids(w.json(&["workflows", "list"])), vec![id_of(&v2)]);
    assert_eq!(
        ids(w.json(&["workflows", "list", "--status", "archived"])),
        vec![id_of(&v1)]
    );
    assert_eq!(
        ids(w.json(&["workflows", "list", "--all"])),
        vec![id_of(&v1), id_of(&v2)]
    );
    let human = w.ok(&["workflows", "list"]);
    assert!(!human.contains(&id_of(&v1)), "{human}");
}
