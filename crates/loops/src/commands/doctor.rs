//! `doctor`: ok / warn / fail per check; exits 1 when any check fails.

use super::Context;
use crate::output::{self, print_json, Table};
use crate::Failure;
use loops_core::{LoopStatus, RunStatus};
use loops_runtime::daemon::PID_FILE;
use loops_runtime::preflight::check_loop_target;
use loops_runtime::process::is_same_process_alive;
use loops_store::{SqliteStore, Store, DB_FILE};
use serde::Serialize;
use std::process::ExitCode;

#[derive(Serialize)]
struct Check {
    check: String,
    status: &'static str,
    detail: String,
}

fn check(
    list: &mut Vec<Check>,
    name: impl Into<String>,
    status: &'static str,
    detail: impl Into<String>,
) {
    list.push(Check {
        check: name.into(),
        status,
        detail: detail.into(),
    });
}

pub fn run(ctx: &Context) -> Result<ExitCode, Failure> {
    let mut checks = Vec::new();
    let dir = ctx.data_dir()?;
    match loops_store::prepare_data_dir(&dir) {
        Ok(()) => {
            let probe = dir.join(format!(".doctor-{}", std::process::id()));
            match std::fs::write(&probe, b"ok") {
                Ok(()) => {
                    let _ = std::fs::remove_file(&probe);
                    check(
                        &mut checks,
                        "data dir",
                        "ok",
                        format!("{} is writable", dir.display()),
                    );
                }
                Err(e) => check(
                    &mut checks,
                    "data dir",
                    "fail",
                    format!("{} is not writable: {e}", dir.display()),
                ),
            }
        }
        Err(e) => check(&mut checks, "data dir", "fail", e.to_string()),
    }
    let db_path = dir.join(DB_FILE);
    let store = match SqliteStore::open(&db_path) {
        Ok(store) => {
            match store.integrity_check() {
                Ok(problems) if problems.is_empty() || problems == ["ok"] => check(
                    &mut checks,
                    "database",
                    "ok",
                    format!("{} passes integrity check", db_path.display()),
                ),
                Ok(problems) => check(&mut checks, "database", "fail", problems.join("; ")),
                Err(e) => check(&mut checks, "database", "fail", e.to_string()),
            }
            Some(store)
        }
        Err(e) => {
            check(&mut checks, "database", "fail", e.to_string());
            None
        }
    };
    let pid_file = dir.join(PID_FILE);
    let pid = loops_runtime::daemon::read_pid_file(&dir);
    if let Some(store) = &store {
        match store.current_daemon_lease() {
            Ok(Some(lease))
                if is_same_process_alive(lease.holder.pid, lease.holder.pid_start_time) =>
            {
                check(
                    &mut checks,
                    "daemon",
                    "ok",
                    format!(
                        "running (pid {} on {})",
                        lease.holder.pid, lease.holder.host
                    ),
                )
            }
            Ok(_) => check(
                &mut checks,
                "daemon",
                "warn",
                "not running; start it with `loops daemon start`",
            ),
            Err(e) => check(&mut checks, "daemon", "fail", e.to_string()),
        }
    }
    match pid {
        Some(pid) if !is_same_process_alive(pid, None) => check(
            &mut checks,
            "pid file",
            "warn",
            format!(
                "stale pid file {} names pid {pid}, which is not running",
                pid_file.display()
            ),
        ),
        _ => {}
    }
    if let Some(store) = &store {
        loop_checks(store, &mut checks);
    }
    provider_checks(&mut checks);
    let failed = checks.iter().any(|c| c.status == "fail");
    if ctx.json {
        print_json(&serde_json::json!({ "ok": !failed, "checks": checks }))?;
    } else {
        let mut table = Table::new(vec!["CHECK", "STATUS", "DETAIL"]);
        for c in &checks {
            table.row(vec![
                c.check.as_str().into(),
                output::status_cell(c.status),
                c.detail.as_str().into(),
            ]);
        }
        table.print()?;
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn loop_checks(store: &SqliteStore, checks: &mut Vec<Check>) {
    let loops = match store.list_loops(Some(LoopStatus::Active)) {
        Ok(l) => l,
        Err(e) => return check(checks, "loops", "fail", e.to_string()),
    };
    let mut failing = Vec::new();
    for lp in &loops {
        let problems = check_loop_target(store, &lp.target);
        if problems.is_empty() {
            check(
                checks,
                format!("loop {}", lp.name),
                "ok",
                "target can start",
            );
        } else {
            check(
                checks,
                format!("loop {}", lp.name),
                "fail",
                problems.join("; "),
            );
        }
        let last = store
            .list_runs(&loops_store::RunFilter {
                loop_id: Some(lp.id.clone()),
                limit: Some(1),
            })
            .ok()
            .and_then(|mut r| r.pop());
        if let Some(run) = last.filter(|r| r.status.is_failure() || r.status == RunStatus::TimedOut)
        {
            failing.push(format!("{} ({})", lp.name, run.status));
        }
    }
    if loops.is_empty() {
        check(checks, "loops", "ok", "no active loops");
    }
    if failing.is_empty() {
        check(
            checks,
            "failed runs",
            "ok",
            "no active loop's last run failed",
        );
    } else {
        check(
            checks,
            "failed runs",
            "warn",
            format!("last run failed: {}", failing.join(", ")),
        );
    }
}

/// Lists each agent CLI found on the effective PATH with its version.
fn provider_checks(checks: &mut Vec<Check>) {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let env =
        loops_runtime::env::build_env(std::env::vars(), home.as_deref(), &Default::default(), &[]);
    let found = loops_runtime::providers::detect_providers(&env);
    for info in &found {
        check(
            checks,
            format!("provider {}", info.provider),
            "ok",
            format!(
                "{} ({})",
                info.path.display(),
                info.version.as_deref().unwrap_or("version unknown")
            ),
        );
    }
    let missing: Vec<&str> = loops_core::Provider::ALL
        .iter()
        .filter(|p| !found.iter().any(|f| f.provider == **p))
        .map(|p| p.as_str())
        .collect();
    if !missing.is_empty() {
        check(
            checks,
            "providers",
            "ok",
            format!(
                "not installed: {} (needed only by agent loops that use them)",
                missing.join(", ")
            ),
        );
    }
}
