//! The web dashboard in a real browser: Debian's `chromium`, driven by `playwright-core`
//! (pinned in tests/browser/package.json, installed into its git-ignored node_modules)
//! from tests/browser/dashboard.mjs, against a real `loops serve` on a free loopback
//! port and a real `loops daemon run` in a temp data dir. The script's cases: the
//! overview lists the loops; a scheduled run appears live; run-now streams its output;
//! a failing loop turns red in its strip and the counters; a diamond workflow's steps
//! change colour live; a request without the token is refused. Its screenshots go to
//! this test's output dir (paths printed).
//!
//! Without node or chromium the test is skipped with a message — except under
//! `CI=true`, where that is a failure (`.ci/run` installs both).

use crate::util::World;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The browser: `$LOOPS_TEST_CHROMIUM`, else `chromium` on the PATH.
fn chromium() -> Option<PathBuf> {
    std::env::var_os("LOOPS_TEST_CHROMIUM")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| on_path("chromium"))
}

/// Skips (or, under CI, fails) for a missing tool.
fn missing(what: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "the dashboard's browser test needs {what}; .ci/run installs it (CI=true: not skipped)"
    );
    eprintln!("dashboard browser test skipped: {what} not found (apt-get install chromium nodejs npm; CI=true makes this a failure)");
}

/// tests/browser/node_modules with the pinned playwright-core (`npm ci` when absent).
fn playwright(npm: &Path) -> bool {
    let dir = repo().join("tests/browser");
    let installed = dir.join("node_modules/playwright-core/package.json");
    if installed.is_file() {
        return true;
    }
    let status = Command::new(npm)
        .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .status();
    matches!(status, Ok(s) if s.success()) && installed.is_file()
}

#[test]
fn the_dashboard_in_a_real_browser() {
    let (Some(node), Some(npm)) = (on_path("node"), on_path("npm")) else {
        return missing("node and npm");
    };
    let Some(browser) = chromium() else {
        return missing("chromium");
    };
    if !playwright(&npm) {
        return missing("playwright-core (npm ci in tests/browser failed)");
    }
    let w = World::new();
    let _daemon = w.daemon_ready(&[]);
    let api = w.serve(&[]);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    let _ = std::fs::remove_dir_all(&out);
    let log = w.root.path().join("browser.log");
    let mut child = Command::new(node)
        .arg(repo().join("tests/browser/dashboard.mjs"))
        .current_dir(repo().join("tests/browser"))
        .env("LOOPS_URL", &api.url)
        .env("LOOPS_TOKEN", &api.token)
        .env("LOOPS_OUT", &out)
        .env("CHROMIUM", &browser)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let stdout = std::fs::read_to_string(&log).unwrap_or_default();
    // The screenshots' paths, for the CI log.
    for line in stdout.lines() {
        eprintln!("dashboard: {line}");
    }
    let status =
        status.unwrap_or_else(|| panic!("the browser test ran over 300 s:\n{stdout}\n{stderr}"));
    assert!(
        status.success(),
        "the browser test failed ({status}):\n{stdout}\n{stderr}"
    );
    for case in [
        "a request without the token is refused",
        "the overview lists the loops",
        "a run started by the schedule appears live without reload",
        "a failing loop shows red in its strip and the counters",
        "run-now from the page streams its output on the run page",
        "the workflow page shows a diamond DAG whose steps change colour live",
    ] {
        assert!(
            stdout.contains(&format!("ok: {case}")),
            "not passed: {case}\n{stdout}"
        );
    }
    for name in [
        "overview",
        "loop",
        "run",
        "workflow-run",
        "runners",
        "login",
    ] {
        assert!(
            out.join(format!("{name}.png")).is_file(),
            "no screenshot {name}"
        );
    }
}
