//! Workflow parameters (issue #23 item 3) through the real binary: a spec declares
//! `params`, its steps use `${params.NAME}`; `workflows run --param`, a workflow
//! loop's `--param` (create, edit), the HTTP API and MCP give values, checked against
//! the spec in its own words; the run records what it used, redacted as env values are.

use crate::mcp::Mcp;
use crate::util::World;
use serde_json::{json, Value};

/// `fixer`: `branch` (required), `tests` (a default) and `note` (neither); a step
/// with the branch as one argument, in its cwd and env; a shell step echoing it; a
/// file per run naming the branch, written where the test can read it.
fn fixer(w: &World) -> std::path::PathBuf {
    let out = w.root.path().join("out");
    std::fs::create_dir_all(out.join("main")).unwrap();
    std::fs::create_dir_all(out.join("dev")).unwrap();
    let spec = json!({"name": "fixer",
    "params": [
        {"name": "branch", "required": true, "description": "the branch to fix"},
        {"name": "tests", "default": "unit"},
        {"name": "note"}
    ],
    "steps": [
        {"id": "args", "target": {"type": "command", "command": "printf",
            "args": ["[%s]", "${params.branch}"],
            "cwd": format!("{}/${{params.branch}}", out.display()),
            "env": {"BRANCH": "${params.branch}"}}},
        {"id": "shell", "dependsOn": ["args"], "target": {"type": "command", "shell": true,
            "command": "echo ${params.branch} '$${params.branch}' ${params.tests}; pwd > ran; echo \"$BRANCH\" >> ran",
            "cwd": format!("{}/${{params.branch}}", out.display()),
            "env": {"BRANCH": "${params.branch}"}}}
    ]});
    let path = w.root.path().join("fixer.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap()]);
    out
}

fn step_stdout(doc: &Value, id: &str) -> String {
    doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stepId"] == id)
        .and_then(|s| s["stdout"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn workflows_run_puts_each_value_in_as_one_piece_and_records_it() {
    let w = World::new();
    let out = fixer(&w);
    // Only an existing directory works as the cwd: `main` does.
    let doc = w.json(&[
        "workflows",
        "run",
        "fixer",
        "--param",
        "branch=main",
        "--show-output",
    ]);
    assert_eq!(doc["workflowRun"]["status"], "succeeded", "{doc:#}");
    assert_eq!(step_stdout(&doc, "args"), "[main]");
    // `$${…}` is the literal text.
    assert_eq!(step_stdout(&doc, "shell"), "main ${params.branch} unit\n");
    let ran = std::fs::read_to_string(out.join("main").join("ran")).unwrap();
    assert_eq!(ran, format!("{}\nmain\n", out.join("main").display()));
    assert_eq!(
        doc["workflowRun"]["params"],
        json!({"branch": "main", "note": "", "tests": "unit"}),
        "every declared param, defaults filled in"
    );

    // A hostile value stays one argument, and the shell sees it as one quoted word.
    let hostile = "main; touch pwned '$(id)'";
    std::fs::create_dir_all(out.join(hostile)).unwrap();
    let doc = w.json(&[
        "workflows",
        "run",
        "fixer",
        "--param",
        &format!("branch={hostile}"),
        "--param",
        "tests=$(touch pwned2)",
        "--show-output",
    ]);
    assert_eq!(doc["workflowRun"]["status"], "succeeded", "{doc:#}");
    assert_eq!(step_stdout(&doc, "args"), format!("[{hostile}]"));
    assert_eq!(
        step_stdout(&doc, "shell"),
        format!("{hostile} ${{params.branch}} $(touch pwned2)\n")
    );
    for dir in [out.join(hostile), w.root.path().to_owned()] {
        assert!(!dir.join("pwned").exists() && !dir.join("pwned2").exists());
    }

    // Without --show-output the values are redacted, as env values are; the names stay.
    let run_id = doc["workflowRun"]["id"].as_str().unwrap();
    let inspected = w.json(&["workflows", "inspect", run_id]);
    assert_eq!(
        inspected["workflowRun"]["params"],
        json!({"branch": "[redacted]", "note": "[redacted]", "tests": "[redacted]"})
    );
    let shown = w.json(&["workflows", "inspect", run_id, "--show-output"]);
    assert_eq!(shown["workflowRun"]["params"]["branch"], hostile);
    let text = w.ok(&["workflows", "inspect", run_id]);
    assert!(
        text.contains("params: branch=[redacted], note=[redacted], tests=[redacted]"),
        "{text}"
    );
    let listed = w.json(&["workflows", "runs"]);
    assert!(
        !listed.to_string().contains("pwned"),
        "runs lists redact: {listed}"
    );
    // The spec's params are shown where the spec is.
    let text = w.ok(&["workflows", "show", "fixer"]);
    assert!(
        text.contains("param branch (required): the branch to fix"),
        "{text}"
    );
    assert!(text.contains("param tests (default \"unit\")"), "{text}");
}

#[test]
fn values_that_do_not_fit_the_spec_are_refused_in_its_words_and_nothing_runs() {
    let w = World::new();
    fixer(&w);
    let cases: [(&[&str], &str); 5] = [
        (
            &[],
            "workflow \"fixer\" needs param \"branch\": the branch to fix (--param branch=VALUE)",
        ),
        (
            &["--param", "branch=main", "--param", "brnach=x"],
            "workflow \"fixer\" has no param \"brnach\" (its params: branch, tests, note)",
        ),
        (
            &["--param", "branch"],
            "--param \"branch\": expected NAME=VALUE",
        ),
        (
            &["--param", "branch=a", "--param", "branch=b"],
            "--param branch is given twice",
        ),
        (
            &["--param", "branch=a\u{1b}[2J"],
            "param \"branch\": the value holds a control character",
        ),
    ];
    for (extra, message) in cases {
        let mut args = vec!["workflows", "run", "fixer"];
        args.extend_from_slice(extra);
        let (code, err) = w.fail(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
    assert_eq!(
        w.json(&["workflows", "runs"]),
        json!([]),
        "nothing was recorded"
    );

    // validate lists the declared params.
    let spec_file = w.root.path().join("fixer.json");
    let valid = w.json(&["workflows", "validate", spec_file.to_str().unwrap()]);
    assert_eq!(valid["params"][0]["name"], "branch", "{valid:#}");
    assert_eq!(valid["params"][0]["required"], true, "{valid:#}");
    assert_eq!(valid["params"].as_array().unwrap().len(), 3, "{valid:#}");

    // A spec that uses a param it does not declare, or declares one badly, is refused.
    let bad = json!({"name": "bad", "params": [{"name": "a", "required": true, "default": "x"}],
        "steps": [{"id": "s", "target": {"type": "command", "command": "echo",
            "args": ["${params.b}"]}}]});
    let path = w.root.path().join("bad.json");
    std::fs::write(&path, bad.to_string()).unwrap();
    let (code, err) = w.fail(&["workflows", "validate", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("param \"a\": required and default exclude each other"),
        "{err}"
    );
    assert!(
        err.contains("step \"s\": args uses undeclared param \"b\""),
        "{err}"
    );
}

#[test]
fn a_workflow_loop_gives_its_values_to_every_run_and_edit_changes_them() {
    let w = World::new();
    let out = fixer(&w);
    let lp = w.json(&[
        "create",
        "workflow",
        "nightly",
        "--workflow",
        "fixer",
        "--every",
        "1h",
        "--param",
        "branch=main",
    ]);
    assert_eq!(lp["target"]["params"], json!({"branch": "[redacted]"}));
    let shown = w.json(&["show", "nightly", "--show-output"]);
    assert_eq!(shown["target"]["params"], json!({"branch": "main"}));
    w.make_due("nightly");
    w.ok(&["tick"]);
    let runs = w.json(&["workflows", "runs"]);
    assert_eq!(runs[0]["status"], "succeeded", "{runs:#}");
    let run = w.json(&[
        "workflows",
        "inspect",
        runs[0]["id"].as_str().unwrap(),
        "--show-output",
    ]);
    assert_eq!(run["workflowRun"]["params"]["branch"], "main");
    assert!(out.join("main").join("ran").exists());

    // edit: another value for the next run; a change that leaves a required param
    // out, or names one the spec lacks, is refused and changes nothing.
    w.ok(&["edit", "nightly", "--param", "branch=dev"]);
    let (code, err) = w.fail(&["edit", "nightly", "--unset-param", "branch"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs param \"branch\""), "{err}");
    let (code, err) = w.fail(&["edit", "nightly", "--param", "nope=1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no param \"nope\""), "{err}");
    let (code, err) = w.fail(&[
        "create",
        "workflow",
        "other",
        "--workflow",
        "fixer",
        "--every",
        "1h",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs param \"branch\""), "{err}");
    let (code, err) = w.fail(&["edit", "nightly", "--cmd", "true"]);
    assert_eq!(code, 2, "{err}");
    let (code, err) = w.fail(&[
        "create", "command", "c", "--every", "1h", "--cmd", "true", "--param", "a=b",
    ]);
    assert_eq!(code, 2, "--param is not a flag of command loops: {err}");
    w.make_due("nightly");
    w.ok(&["tick"]);
    assert!(out.join("dev").join("ran").exists());
    let runs = w.json(&["workflows", "runs"]);
    let run = w.json(&[
        "workflows",
        "inspect",
        runs[0]["id"].as_str().unwrap(),
        "--show-output",
    ]);
    assert_eq!(run["workflowRun"]["params"]["branch"], "dev");

    // The spec changes under the loop: a new version needs a param the loop lacks. The
    // next run fails at once, saying so, and starts no step.
    let v2 = json!({"name": "fixer", "params": [{"name": "branch", "required": true},
        {"name": "ticket", "required": true}],
        "steps": [{"id": "s", "target": {"type": "command", "command": "touch",
            "args": [format!("{}/v2-ran", out.display())]}}]});
    let path = w.root.path().join("fixer2.json");
    std::fs::write(&path, v2.to_string()).unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap(), "--replace"]);
    w.make_due("nightly");
    w.run(&["tick"]);
    let runs = w.json(&["workflows", "runs"]);
    assert_eq!(runs[0]["status"], "failed", "{runs:#}");
    assert_eq!(
        runs[0]["error"],
        "params: workflow \"fixer\" needs param \"ticket\" (--param ticket=VALUE)"
    );
    let steps = w.json(&["workflows", "inspect", runs[0]["id"].as_str().unwrap()]);
    assert_eq!(steps["steps"][0]["status"], "skipped", "{steps:#}");
    assert!(!out.join("v2-ran").exists(), "no step started");
    let loop_runs = w.runs("nightly");
    assert_eq!(loop_runs[0]["status"], "failed", "{loop_runs:?}");

    // A bundle leaves the values out unless secrets are asked for, as it does env
    // values, and says so.
    let bundle = w.json(&["export"]);
    let entry = &bundle["loops"][0];
    assert_eq!(
        entry["target"]["params"]["branch"],
        Value::Null,
        "{bundle:#}"
    );
    assert!(
        bundle["redacted"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["field"] == "target.params.branch"),
        "{bundle:#}"
    );
    let secret = w.json(&["export", "--include-secrets"]);
    assert_eq!(secret["loops"][0]["target"]["params"]["branch"], "dev");
}

#[test]
fn the_api_and_mcp_take_values_and_mcp_gates_a_program_choice_behind_allow_code() {
    let w = World::new();
    fixer(&w);
    // `picker`'s param chooses the program of a step without a shell: code.
    let picker = json!({"name": "picker", "params": [{"name": "prog", "default": "true"},
        {"name": "word", "default": "x"}],
        "steps": [{"id": "s", "target": {"type": "command", "command": "${params.prog}",
            "args": ["${params.word}"]}}]});
    let path = w.root.path().join("picker.json");
    std::fs::write(&path, picker.to_string()).unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap()]);

    let mut api = w.serve(&[]);
    let bad = api.post("/v1/workflows/fixer/run", json!({"params": {"nope": "1"}}));
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(
        bad.error().contains("needs param \"branch\""),
        "{}",
        bad.text
    );
    let started = api.post(
        "/v1/workflows/fixer/run",
        json!({"params": {"branch": "main"}}),
    );
    assert_eq!(started.status, 202, "{}", started.text);
    let doc = started.json();
    assert_eq!(doc["workflowRun"]["params"]["branch"], "[redacted]");
    let id = doc["workflowRun"]["id"].as_str().unwrap().to_owned();
    let done = crate::util::wait_for(
        "the API's run to end",
        std::time::Duration::from_secs(30),
        || {
            let doc = api
                .get(&format!("/v1/workflow-runs/{id}?showOutput=true"))
                .json();
            (doc["workflowRun"]["status"] != "running").then_some(doc)
        },
    );
    assert_eq!(done["workflowRun"]["status"], "succeeded", "{done:#}");
    assert_eq!(done["workflowRun"]["params"]["branch"], "main");
    assert_eq!(api.stop(), Some(0));

    let mcp = Mcp::start(&w, &["--allow-mutations"]);
    let run = mcp.ok(
        "workflow_run",
        json!({"workflow": "picker", "params": {"word": "y"}, "wait": true}),
    );
    assert_eq!(run["workflowRun"]["status"], "succeeded", "{run:#}");
    assert_eq!(run["workflowRun"]["params"]["word"], "[redacted]");
    let err = mcp.err(
        "workflow_run",
        json!({"workflow": "picker", "params": {"prog": "touch"}}),
    );
    assert!(
        err.contains("params.prog (it sets a step's program or an env value) defines what runs"),
        "{err}"
    );
    let err = mcp.err(
        "loops_create_workflow",
        json!({"name": "p", "workflow": "picker", "every": "1h", "params": {"prog": "touch"}}),
    );
    assert!(err.contains("--allow-code"), "{err}");
    let err = mcp.err("workflow_run", json!({"workflow": "fixer"}));
    assert!(err.contains("needs param \"branch\""), "{err}");
    drop(mcp);
    let code = Mcp::start(&w, &["--allow-mutations", "--allow-code"]);
    let run = code.ok(
        "workflow_run",
        json!({"workflow": "picker", "params": {"prog": "echo"}, "wait": true}),
    );
    assert_eq!(run["workflowRun"]["status"], "succeeded", "{run:#}");
}
