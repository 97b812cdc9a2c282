//! Workflows through the real binary: parallel DAGs, failure handling, timeouts,
//! cancellation from another process, crash recovery and slot continuation.

use crate::util::{instant, pid_alive, wait_for, World};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn step(id: &str, cmd: &str, deps: &[&str]) -> Value {
    json!({ "id": id, "target": { "type": "command", "command": cmd, "shell": true }, "dependsOn": deps })
}

fn write_spec(w: &World, name: &str, steps: Vec<Value>, extra: Value) -> std::path::PathBuf {
    let mut spec = json!({ "name": name, "steps": steps });
    if let (Some(obj), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    let path = w.root.path().join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&spec).expect("json")).expect("write spec");
    path
}

fn create(w: &World, name: &str, steps: Vec<Value>, extra: Value) {
    let path = write_spec(w, name, steps, extra);
    w.json(&["workflows", "create", path.to_str().expect("utf8")]);
}

/// Runs a workflow inline; returns (exit code, {workflowRun, steps}).
fn run(w: &World, name: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["--json", "workflows", "run", name];
    args.extend_from_slice(extra);
    let out = w.run(&args);
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), doc)
}

fn step_of<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["stepId"] == id))
        .unwrap_or_else(|| panic!("no step {id}: {doc}"))
}

fn inspect(w: &World, run_id: &str) -> Value {
    w.json(&["workflows", "inspect", run_id])
}

fn events_of(doc: &Value, event_type: &str) -> Vec<Value> {
    doc["events"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter(|e| e["eventType"] == event_type)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn diamond_runs_independent_branches_in_parallel() {
    let w = World::new();
    create(
        &w,
        "diamond",
        vec![
            step("a", "true", &[]),
            step("b", "sleep 1", &["a"]),
            step("c", "sleep 1", &["a"]),
            step("d", "true", &["b", "c"]),
        ],
        json!({}),
    );
    let started = Instant::now();
    let (code, doc) = run(&w, "diamond", &[]);
    let wall = started.elapsed();
    assert_eq!(code, 0, "{doc}");
    assert!(
        wall < Duration::from_millis(1800),
        "b and c overlap: took {wall:?}"
    );
    assert_eq!(doc["workflowRun"]["status"], "succeeded");
    let run_id = doc["workflowRun"]["id"].as_str().expect("id");
    let full = inspect(&w, run_id);
    let b = step_of(&full, "b");
    let c = step_of(&full, "c");
    let (b0, b1) = (instant(&b["startedAt"]), instant(&b["finishedAt"]));
    let (c0, c1) = (instant(&c["startedAt"]), instant(&c["finishedAt"]));
    assert!(
        b0 < c1 && c0 < b1,
        "b [{b0}, {b1}] and c [{c0}, {c1}] overlap"
    );
    let d0 = instant(&step_of(&full, "d")["startedAt"]);
    assert!(d0 >= b1 && d0 >= c1, "d starts after both dependencies");
    // Events are sequenced 1..n without gaps and cover every transition.
    let seqs: Vec<u64> = full["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["sequence"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(events_of(&full, "step_started").len(), 4);
    assert_eq!(events_of(&full, "step_succeeded").len(), 4);
    assert_eq!(events_of(&full, "created").len(), 1);
    assert_eq!(events_of(&full, "succeeded").len(), 1);
}

#[test]
fn failure_cancels_running_siblings_and_skips_the_rest() {
    let w = World::new();
    let marker = w.root.path().join("c-finished");
    create(
        &w,
        "fail",
        vec![
            step("a", "true", &[]),
            step("b", "sleep 0.3; exit 3", &["a"]),
            step(
                "c",
                &format!("sleep 20; touch {}", marker.display()),
                &["a"],
            ),
            step("d", "true", &["b", "c"]),
            step("e", "true", &["d"]),
        ],
        json!({}),
    );
    let started = Instant::now();
    let (code, doc) = run(&w, "fail", &[]);
    assert_eq!(code, 1);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "c was cancelled, not waited for"
    );
    assert_eq!(doc["workflowRun"]["status"], "failed");
    assert_eq!(doc["workflowRun"]["error"], "step \"b\" failed");
    assert_eq!(step_of(&doc, "b")["status"], "failed");
    assert_eq!(step_of(&doc, "b")["exitCode"], 3);
    assert_eq!(step_of(&doc, "c")["status"], "cancelled");
    assert_eq!(step_of(&doc, "d")["status"], "skipped");
    assert_eq!(step_of(&doc, "e")["status"], "skipped");
    assert!(
        step_of(&doc, "d")["error"]
            .as_str()
            .unwrap_or("")
            .contains("step \"b\" failed"),
        "{doc}"
    );
    assert!(!marker.exists());
}

#[test]
fn continue_on_failure_lets_dependents_run() {
    let w = World::new();
    let mut b = step("b", "exit 1", &["a"]);
    b["continueOnFailure"] = json!(true);
    create(
        &w,
        "cof",
        vec![step("a", "true", &[]), b, step("d", "true", &["b"])],
        json!({}),
    );
    let (code, doc) = run(&w, "cof", &[]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(step_of(&doc, "b")["status"], "failed");
    assert_eq!(step_of(&doc, "d")["status"], "succeeded");
}

#[test]
fn invalid_specs_are_rejected_naming_the_problem() {
    let w = World::new();
    let cycle = write_spec(
        &w,
        "cyc",
        vec![step("a", "true", &["b"]), step("b", "true", &["a"])],
        json!({}),
    );
    let (code, stderr) = w.fail(&["workflows", "validate", cycle.to_str().expect("utf8")]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("dependency cycle: a → b → a")
            || stderr.contains("dependency cycle: b → a → b"),
        "{stderr}"
    );
    let typo = write_spec(
        &w,
        "typo",
        vec![json!({"id": "a", "dependOn": [], "target": {"type": "command", "command": "true"}})],
        json!({}),
    );
    let (_, stderr) = w.fail(&["workflows", "create", typo.to_str().expect("utf8")]);
    assert!(
        stderr.contains("steps[0]") && stderr.contains("dependOn"),
        "{stderr}"
    );
    let spaces = write_spec(
        &w,
        "sp",
        vec![json!({"id": "a", "target": {"type": "command", "command": "git status"}})],
        json!({}),
    );
    let (_, stderr) = w.fail(&["workflows", "validate", spaces.to_str().expect("utf8")]);
    assert!(
        stderr.contains("step \"a\"") && stderr.contains("put flags in args or set shell true"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(w.json(&["workflows", "list"]), json!([]), "nothing stored");

    let ok = write_spec(&w, "ok", vec![step("a", "true", &[])], json!({}));
    w.json(&["workflows", "create", ok.to_str().expect("utf8")]);
    let (code, stderr) = w.fail(&["workflows", "create", ok.to_str().expect("utf8")]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("already exists") && stderr.contains("--replace"),
        "{stderr}"
    );
    let v2 = w.json(&[
        "workflows",
        "create",
        ok.to_str().expect("utf8"),
        "--replace",
    ]);
    assert_eq!(v2["version"], 2);
    let all = w.json(&["workflows", "list", "--all"]);
    let statuses: Vec<&str> = all
        .as_array()
        .expect("list")
        .iter()
        .map(|w| w["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, vec!["archived", "active"]);
}

#[test]
fn prompt_file_resolves_relative_to_the_spec() {
    let w = World::new();
    let dir = w.root.path().join("specs");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("review.md"), "Review it.\n").expect("prompt");
    let spec = json!({"name": "agentic", "steps": [{"id": "r", "target": {"type": "agent", "provider": "claude", "promptFile": "review.md"}}]});
    let path = dir.join("wf.json");
    std::fs::write(&path, spec.to_string()).expect("write");
    let created = w.json(&["workflows", "create", path.to_str().expect("utf8")]);
    let target = &created["steps"][0]["target"];
    assert_eq!(
        target["promptFile"],
        dir.join("review.md").to_str().expect("utf8")
    );
    assert!(
        target["prompt"]
            .as_str()
            .unwrap_or("")
            .starts_with("[redacted"),
        "{created}"
    );
}

#[test]
fn step_and_workflow_timeouts() {
    let w = World::new();
    let mut slow = step("slow", "sleep 30", &[]);
    slow["timeout"] = json!("500ms");
    create(
        &w,
        "st",
        vec![slow, step("after", "true", &["slow"])],
        json!({}),
    );
    let (code, doc) = run(&w, "st", &[]);
    assert_eq!(code, 1);
    assert_eq!(doc["workflowRun"]["status"], "timed_out");
    assert_eq!(step_of(&doc, "slow")["status"], "timed_out");
    assert_eq!(step_of(&doc, "after")["status"], "skipped");

    create(
        &w,
        "wt",
        vec![step("a", "sleep 30", &[]), step("b", "sleep 30", &[])],
        json!({}),
    );
    let started = Instant::now();
    let (code, doc) = run(&w, "wt", &["--timeout", "700ms"]);
    assert_eq!(code, 1);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(doc["workflowRun"]["status"], "timed_out");
    assert_eq!(
        doc["workflowRun"]["error"],
        "workflow timed out after 700ms"
    );
    assert_eq!(step_of(&doc, "a")["status"], "cancelled");
}

#[test]
fn cancel_from_another_process() {
    let w = World::new();
    create(
        &w,
        "long",
        vec![step("a", "sleep 30", &[]), step("b", "true", &["a"])],
        json!({}),
    );
    let child = w
        .cmd(&["--json", "workflows", "run", "long"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let run_id = wait_for("run with a running step", LONG, || {
        let runs = w.json(&["workflows", "runs", "long"]);
        let id = runs[0]["id"].as_str()?.to_owned();
        let doc = inspect(&w, &id);
        (step_of(&doc, "a")["status"] == "running").then_some(id)
    });
    let asked = Instant::now();
    w.json(&["workflows", "cancel", &run_id, "--reason", "enough"]);
    let out = child.wait_with_output().expect("wait");
    let stopped_in = asked.elapsed();
    assert_eq!(out.status.code(), Some(1));
    let doc = inspect(&w, &run_id);
    assert_eq!(doc["workflowRun"]["status"], "cancelled");
    assert_eq!(step_of(&doc, "a")["status"], "cancelled");
    assert_eq!(step_of(&doc, "b")["status"], "cancelled");
    assert!(step_of(&doc, "a")["finishedAt"].is_string());
    let a_end = instant(&step_of(&doc, "a")["finishedAt"]);
    let cancel_ev = events_of(&doc, "cancelled");
    assert_eq!(cancel_ev.len(), 1);
    assert!(stopped_in < Duration::from_secs(5), "{stopped_in:?}");
    let _ = a_end;
}

#[test]
fn recover_refuses_while_the_step_process_lives() {
    let w = World::new();
    let pidfile = w.root.path().join("step.pid");
    create(
        &w,
        "rec",
        vec![step(
            "a",
            &format!("echo $$ > {}; exec sleep 30", pidfile.display()),
            &[],
        )],
        json!({}),
    );
    let mut child = w
        .cmd(&["workflows", "run", "rec"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let run_id = wait_for("running step", LONG, || {
        let runs = w.json(&["workflows", "runs", "rec"]);
        let id = runs[0]["id"].as_str()?.to_owned();
        (step_of(&inspect(&w, &id), "a")["pid"].is_u64()).then_some(id)
    });
    // The runner dies; its step process lives on (own process group).
    child.kill().expect("kill runner");
    let _ = child.wait();
    let (code, stderr) = w.fail(&["workflows", "recover", &run_id]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("still alive") && stderr.contains("a (pid"),
        "{stderr}"
    );
    let pid: u64 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("num");
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    wait_for("step process gone", Duration::from_secs(5), || {
        (!pid_alive(pid)).then_some(())
    });
    let out = w.json(&[
        "workflows",
        "recover",
        &run_id,
        "--reason",
        "runner crashed",
    ]);
    assert_eq!(out["recoveredSteps"][0]["stepId"], "a");
    let doc = inspect(&w, &run_id);
    assert_eq!(step_of(&doc, "a")["status"], "pending");
    assert_eq!(events_of(&doc, "recovered").len(), 1);
}

#[test]
fn slot_retry_reruns_only_what_failed() {
    let w = World::new();
    let flag = w.root.path().join("c-failed-once");
    let counter = w.root.path().join("a-runs");
    create(
        &w,
        "retry",
        vec![
            step("a", &format!("echo run >> {}", counter.display()), &[]),
            step("b", "true", &["a"]),
            step(
                "c",
                &format!(
                    "if [ -e {0} ]; then exit 0; else touch {0}; exit 1; fi",
                    flag.display()
                ),
                // After b, not beside it: a failing step terminates running siblings,
                // and a b still running when c failed would be rerun (seen under load).
                &["a", "b"],
            ),
            step("d", "true", &["b", "c"]),
        ],
        json!({}),
    );
    w.json(&[
        "create",
        "workflow",
        "nightly",
        "--dynamic",
        "1h",
        "--workflow",
        "retry",
        "--attempts",
        "2",
        "--retry-delay",
        "100ms",
    ]);
    w.make_due("nightly");
    let first = w.run(&["--json", "run-now", "nightly"]);
    assert_eq!(first.status.code(), Some(1));
    wait_for("retry due", Duration::from_secs(5), || {
        (instant(&w.json(&["show", "nightly"])["nextRunAt"]) <= chrono::Utc::now()).then_some(())
    });
    let second: Value =
        serde_json::from_slice(&w.run(&["--json", "run-now", "nightly"]).stdout).expect("json");
    assert_eq!(second["status"], "succeeded", "{second}");
    assert_eq!(second["attempt"], 2);
    let runs = w.json(&["workflows", "runs", "retry"]);
    assert_eq!(
        runs.as_array().map(Vec::len),
        Some(1),
        "one workflow run for the slot: {runs}"
    );
    let doc = inspect(&w, runs[0]["id"].as_str().expect("id"));
    assert_eq!(doc["workflowRun"]["attempt"], 2);
    assert_eq!(doc["workflowRun"]["status"], "succeeded");
    assert_eq!(
        step_of(&doc, "a")["attempts"],
        1,
        "a succeeded on attempt 1 and was not rerun"
    );
    assert_eq!(step_of(&doc, "b")["attempts"], 1);
    assert_eq!(step_of(&doc, "c")["attempts"], 2);
    assert_eq!(
        step_of(&doc, "d")["attempts"],
        1,
        "d was skipped on attempt 1, ran on attempt 2"
    );
    assert_eq!(
        std::fs::read_to_string(&counter)
            .expect("counter")
            .lines()
            .count(),
        1
    );
    assert_eq!(events_of(&doc, "attempt_started").len(), 2);
}

/// A workflow a → b → c whose step b counts its starts and waits for a gate, run by
/// a loop; kills the daemon (-9) while b runs. Returns (workflow run id, b's pid).
fn crash_during_b(w: &World, b_extra: Value, attempts: &str) -> (String, u64) {
    let counter = w.root.path().join("a-runs");
    let b_starts = w.root.path().join("b-starts");
    let gate = w.root.path().join("gate");
    let mut b = step(
        "b",
        &format!(
            "echo start >> {}; n=0; while [ ! -e {} ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done",
            b_starts.display(),
            gate.display()
        ),
        &["a"],
    );
    if let (Some(obj), Some(extra)) = (b.as_object_mut(), b_extra.as_object()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    create(
        w,
        "crash",
        vec![
            step("a", &format!("echo run >> {}", counter.display()), &[]),
            b,
            step("c", "true", &["b"]),
        ],
        json!({}),
    );
    w.json(&[
        "create",
        "workflow",
        "wf",
        "--dynamic",
        "1s",
        "--workflow",
        "crash",
        "--attempts",
        attempts,
        "--retry-delay",
        "100ms",
    ]);
    w.make_due("wf");
    let mut first = w.daemon_ready(&[]);
    let run_id = wait_for("step b running", LONG, || {
        let runs = w.json(&["workflows", "runs", "crash"]);
        let id = runs[0]["id"].as_str()?.to_owned();
        let b = step_of(&inspect(w, &id), "b").clone();
        (b["status"] == "running" && b["pid"].is_u64()).then_some(id)
    });
    let b_pid = step_of(&inspect(w, &run_id), "b")["pid"]
        .as_u64()
        .expect("pid");
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(5));
    (run_id, b_pid)
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn daemon_crash_mid_workflow_continues_the_same_run() {
    let w = World::new();
    let (run_id, b_pid) = crash_during_b(&w, json!({ "continueOnFailure": true }), "2");
    // Step b's process outlived the daemon, under its supervisor; let it finish.
    std::fs::write(w.root.path().join("gate"), b"open").expect("gate");
    wait_for("b's process to exit", Duration::from_secs(10), || {
        (!pid_alive(b_pid)).then_some(())
    });
    let mut second = w.daemon_ready(&[]);
    let doc = wait_for("the same run to finish", LONG, || {
        let doc = inspect(&w, &run_id);
        (doc["workflowRun"]["status"] == "succeeded").then_some(doc)
    });
    assert_eq!(second.stop(), Some(0));
    assert_eq!(
        w.json(&["workflows", "runs", "crash"])
            .as_array()
            .map(Vec::len),
        Some(1),
        "no duplicate run for the slot"
    );
    assert_eq!(lines(&w.root.path().join("a-runs")), 1, "a was not rerun");
    assert_eq!(
        lines(&w.root.path().join("b-starts")),
        1,
        "b's process outlived the daemon: it is never started again"
    );
    assert_eq!(step_of(&doc, "a")["attempts"], 1);
    // Its supervisor kept its exit status: recorded as it ended.
    let b = step_of(&doc, "b");
    assert_eq!(b["status"], "succeeded", "{b}");
    assert_eq!(b["exitCode"], 0, "{b}");
    assert_eq!(b["exitStatusUnknown"], false, "{b}");
    assert_eq!(b["pid"].as_u64(), Some(b_pid), "{b}");
    assert_eq!(step_of(&doc, "c")["status"], "succeeded");
    assert_eq!(doc["workflowRun"]["attempt"], 2);
    // The loop run was continued by the second daemon, not abandoned.
    let loop_runs = w.runs("wf");
    assert_eq!(loop_runs.len(), 1, "{loop_runs:?}");
    assert_eq!(loop_runs[0]["status"], "succeeded", "{loop_runs:?}");
}

#[test]
fn a_step_killed_while_no_daemon_ran_is_recorded_as_it_ended_and_retried() {
    let w = World::new();
    let (run_id, b_pid) = crash_during_b(&w, json!({}), "2");
    // While no daemon runs, b's process is killed: its supervisor sees how it ended.
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(b_pid).expect("pid"));
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).expect("kill b");
    wait_for("b gone", Duration::from_secs(10), || {
        (!pid_alive(b_pid)).then_some(())
    });
    std::fs::write(w.root.path().join("gate"), b"open").expect("gate");
    let mut second = w.daemon_ready(&[]);
    wait_for("the slot's retry to succeed", LONG, || {
        let runs = w.runs("wf");
        (runs.len() == 2 && runs.iter().any(|r| r["status"] == "succeeded")).then_some(())
    });
    assert_eq!(second.stop(), Some(0));
    let runs = w.runs("wf");
    let first = runs.iter().find(|r| r["attempt"] == 1).expect("attempt 1");
    assert_eq!(first["status"], "failed", "{first}");
    let doc = inspect(&w, &run_id);
    let b = step_of(&doc, "b");
    assert_eq!(b["exitStatusUnknown"], false, "a known end: {b}");
    assert_eq!(b["status"], "succeeded", "the retry reran it: {b}");
    assert_eq!(
        lines(&w.root.path().join("b-starts")),
        2,
        "b failed with a known end, so the next attempt ran it again"
    );
    let events = w.json(&["workflows", "events", &run_id]);
    let text = events.to_string();
    assert!(text.contains("killed by signal SIGKILL"), "{text}");
}

#[test]
fn a_workflow_run_abandoned_by_tick_says_its_run_continues() {
    let w = World::new();
    let (_run_id, b_pid) = crash_during_b(&w, json!({}), "2");
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(b_pid).expect("pid"));
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    wait_for("b gone", Duration::from_secs(5), || {
        (!pid_alive(b_pid)).then_some(())
    });
    // `loops tick` (no daemon) recovers the loop run; it cannot continue it itself.
    w.ok(&["tick"]);
    let runs = w.runs("wf");
    let first = runs.iter().find(|r| r["attempt"] == 1).expect("attempt 1");
    assert_eq!(first["status"], "abandoned", "{first}");
    let error = first["error"].as_str().unwrap();
    assert!(
        error.contains("workflow run continues") && !error.contains("before the process started"),
        "{error}"
    );
}

#[test]
fn random_dag_of_200_steps_respects_every_dependency() {
    let w = World::new();
    // Deterministic pseudo-random DAG: edges only point to earlier steps.
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut steps = Vec::new();
    let mut deps_of = Vec::new();
    for i in 0..200usize {
        let mut deps: Vec<String> = Vec::new();
        if i > 0 {
            for _ in 0..(next() % 4) {
                let d = format!("s{}", next() as usize % i);
                if !deps.contains(&d) {
                    deps.push(d);
                }
            }
        }
        let refs: Vec<&str> = deps.iter().map(String::as_str).collect();
        steps.push(json!({"id": format!("s{i}"), "target": {"type": "command", "command": "true"}, "dependsOn": refs}));
        deps_of.push(deps);
    }
    create(&w, "big", steps, json!({"maxParallel": 8}));
    let (code, doc) = run(&w, "big", &[]);
    assert_eq!(code, 0, "{}", doc["workflowRun"]);
    let full = inspect(&w, doc["workflowRun"]["id"].as_str().expect("id"));
    for (i, deps) in deps_of.iter().enumerate() {
        let me = step_of(&full, &format!("s{i}"));
        assert_eq!(me["status"], "succeeded");
        for d in deps {
            assert!(
                instant(&step_of(&full, d)["finishedAt"]) <= instant(&me["startedAt"]),
                "s{i} started before {d} finished"
            );
        }
    }
}

#[test]
fn step_env_carries_workflow_metadata() {
    let w = World::new();
    let out = w.root.path().join("env");
    create(
        &w,
        "envwf",
        vec![step(
            "only",
            &format!(
                "echo \"$LOOPS_WORKFLOW_NAME $LOOPS_WORKFLOW_STEP_ID $LOOPS_WORKFLOW_RUN_ID\" > {}",
                out.display()
            ),
            &[],
        )],
        json!({}),
    );
    let (code, doc) = run(&w, "envwf", &[]);
    assert_eq!(code, 0);
    let line = std::fs::read_to_string(&out).expect("env");
    assert_eq!(
        line.trim(),
        format!(
            "envwf only {}",
            doc["workflowRun"]["id"].as_str().expect("id")
        )
    );
}
