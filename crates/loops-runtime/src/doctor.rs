//! `doctor`: the installation, the data dir and its permissions, the database, the
//! daemon, every active loop's target and the provider CLIs, each an ok / warn / fail
//! check. The CLI's `doctor` and the MCP tool `loops_doctor` both print this report.

use crate::client::{Client, ClientError};
use crate::daemon_view::{stalled_text, DaemonState};
use loops_core::{LoopStatus, RunStatus};
use loops_store::{StoreError, DB_FILE};
use serde::Serialize;
use std::path::Path;

/// One check: what was checked, `ok` / `warn` / `fail`, and what was found.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: String,
    pub status: &'static str,
    pub detail: String,
}

/// Every check `doctor` made; `ok` is false when any failed. Serializes as the JSON
/// of `doctor --json`: `{ok, checks: [{check, status, detail}]}`.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub ok: bool,
    pub checks: Vec<Check>,
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

/// Checks the data dir `dir` and the store in it (opening it read-write, else
/// read-only; a dir that fails the ownership rule is not looked into) or the database
/// `store` names (`--store`, as for [`Client::open_store`]), the daemon, every active
/// loop, and which provider CLIs are installed.
pub fn doctor(dir: &Path, store: Option<&str>) -> DoctorReport {
    let mut checks = Vec::new();
    let dir = dir.to_path_buf();
    // Only a dir that passes the ownership rule is looked into further: a database
    // another user could have written is not opened.
    let trusted = match loops_store::secure_data_dir(&dir) {
        Ok(tightened) => {
            let tightened = if tightened.is_empty() {
                String::new()
            } else {
                format!("; tightened {}", tightened.join(", "))
            };
            let probe = dir.join(format!(".doctor-{}", std::process::id()));
            match std::fs::write(&probe, b"ok") {
                Ok(()) => {
                    let _ = std::fs::remove_file(&probe);
                    check(
                        &mut checks,
                        "data dir",
                        "ok",
                        format!("{} is writable{tightened}", dir.display()),
                    );
                }
                Err(e) => check(
                    &mut checks,
                    "data dir",
                    "fail",
                    format!("{} is not writable: {e}{tightened}", dir.display()),
                ),
            }
            true
        }
        Err(e) => {
            check(&mut checks, "data dir", "fail", e.to_string());
            false
        }
    };
    permission_checks(&dir, &mut checks);
    let db_path = dir.join(DB_FILE);
    let client = if !trusted {
        None
    } else if crate::client::store_names_a_server(store) {
        open_server_store(&dir, store, &mut checks)
    } else {
        open_store(&dir, &db_path, &mut checks)
    };
    if let Some(client) = &client {
        match client.daemon_view() {
            Ok(view) => {
                match (view.state, &view.holder) {
                    (DaemonState::Running, Some(h)) => check(
                        &mut checks,
                        "daemon",
                        "ok",
                        format!("running (pid {} on {})", h.pid, h.host),
                    ),
                    (DaemonState::Stalled, Some(h)) => check(
                        &mut checks,
                        "daemon",
                        "fail",
                        format!(
                            "stalled ({}); stop it with `loops daemon stop`",
                            stalled_text(h, chrono::Utc::now())
                        ),
                    ),
                    _ => check(
                        &mut checks,
                        "daemon",
                        "warn",
                        "not running; start it with `loops daemon start`",
                    ),
                }
                if let Some(stale) = &view.stale_pid_file {
                    check(&mut checks, "pid file", "warn", stale.describe());
                }
            }
            Err(e) => check(&mut checks, "daemon", "fail", e.to_string()),
        }
        loop_checks(client, &mut checks);
    }
    provider_checks(&mut checks);
    let failed = checks.iter().any(|c| c.status == "fail");
    DoctorReport {
        ok: !failed,
        checks,
    }
}

/// A store on a database server (`--store postgres://…`): reachable, migrated, and
/// which server it is; records the "database" check.
fn open_server_store(dir: &Path, store: Option<&str>, checks: &mut Vec<Check>) -> Option<Client> {
    let client = match Client::open_store(dir, store) {
        Ok(client) => client,
        Err(e) => {
            check(checks, "database", "fail", e.to_string());
            return None;
        }
    };
    let backend = client.backend();
    match client.postgres_info() {
        Ok(Some((server, schema))) => check(
            checks,
            "database",
            "ok",
            format!(
                "{} {} (PostgreSQL {server}, schema {schema})",
                backend.kind(),
                backend.location()
            ),
        ),
        Ok(None) => check(
            checks,
            "database",
            "ok",
            format!("{} {}", backend.kind(), backend.location()),
        ),
        Err(e) => check(checks, "database", "fail", e.to_string()),
    }
    Some(client)
}

/// Opens the database read-write, else (when it is not writable) read-only, so the
/// rest of the report can still be made; records the "database" check.
fn open_store(
    dir: &std::path::Path,
    db_path: &std::path::Path,
    checks: &mut Vec<Check>,
) -> Option<Client> {
    let (client, read_only) = match Client::open(dir) {
        Ok(client) => (client, false),
        Err(ClientError::Store(StoreError::ReadOnly { .. })) => match Client::open_read_only(dir) {
            Ok(client) => (client, true),
            Err(e) => {
                check(checks, "database", "fail", e.to_string());
                return None;
            }
        },
        Err(e) => {
            check(checks, "database", "fail", e.to_string());
            return None;
        }
    };
    match client.integrity_check().map(Option::unwrap_or_default) {
        Ok(problems) if problems.is_empty() || problems == ["ok"] => {
            if read_only {
                check(
                    checks,
                    "database",
                    "fail",
                    format!(
                        "{} passes integrity check but is read-only: read commands work, \
                         writes and the daemon fail",
                        db_path.display()
                    ),
                )
            } else {
                check(
                    checks,
                    "database",
                    "ok",
                    format!("sqlite {} passes integrity check", db_path.display()),
                )
            }
        }
        Ok(problems) => check(checks, "database", "fail", problems.join("; ")),
        Err(e) => check(checks, "database", "fail", e.to_string()),
    }
    Some(client)
}

/// Owner and mode of the data dir and each of its files: all the user's own, none
/// open to group or others.
fn permission_checks(dir: &std::path::Path, checks: &mut Vec<Check>) {
    let reports = loops_store::inspect_data_dir(dir);
    let Some(first) = reports.first() else {
        return;
    };
    let name = |r: &loops_store::PermissionReport| {
        if r.path == dir {
            "data dir".to_owned()
        } else {
            r.path.file_name().map_or_else(
                || r.path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        }
    };
    let problems: Vec<String> = reports
        .iter()
        .filter_map(|r| {
            r.problem
                .as_ref()
                .map(|p| format!("{} {p}", r.path.display()))
        })
        .collect();
    if problems.is_empty() {
        let modes: Vec<String> = reports
            .iter()
            .map(|r| format!("{} {:04o}", name(r), r.mode))
            .collect();
        check(
            checks,
            "permissions",
            "ok",
            format!("all owned by uid {}; {}", first.uid, modes.join(", ")),
        );
    } else {
        check(checks, "permissions", "fail", problems.join("; "));
    }
}

/// A loop whose schedule no longer computes (the daemon parks it), or whose next slot
/// lies further ahead than its schedule allows (the clock was set back after the loop
/// was advanced; a daemon re-plans it at its next start or clock jump).
fn schedule_check(lp: &loops_core::Loop, now: loops_core::Instant, checks: &mut Vec<Check>) {
    match loops_core::schedule::replan_after_clock_jump(lp, now) {
        Ok(None) => {}
        Ok(Some(bound)) => check(
            checks,
            format!("schedule {}", lp.name),
            "warn",
            format!(
                "next run {} is further ahead than its schedule allows (latest {}); was the clock set back? a daemon re-plans it when it starts",
                lp.next_run_at.map(|t| loops_core::format_instant(&t)).unwrap_or_default(),
                loops_core::format_instant(&bound)
            ),
        ),
        Err(e) => check(
            checks,
            format!("schedule {}", lp.name),
            "fail",
            format!("its schedule cannot be computed: {e} (a daemon parks it)"),
        ),
    }
}

/// Paused loops the engine parked because they could no longer be scheduled.
fn parked_checks(client: &Client, checks: &mut Vec<Check>) {
    let Ok(paused) = client.loop_rows(Some(LoopStatus::Paused)) else {
        return;
    };
    for row in paused {
        let lp = match row {
            Ok(lp) => lp,
            Err(bad) => {
                check(
                    checks,
                    format!("loop {}", bad.name),
                    "fail",
                    bad.into_error().to_string(),
                );
                continue;
            }
        };
        let last = client.last_run(&lp.id).ok().flatten();
        if let Some(error) = last
            .and_then(|r| r.error)
            .filter(|e| loops_core::transitions::Parked::from_error(e).is_some())
        {
            check(checks, format!("loop {}", lp.name), "warn", error);
        }
    }
}

fn loop_checks(client: &Client, checks: &mut Vec<Check>) {
    parked_checks(client, checks);
    let rows = match client.loop_rows(Some(LoopStatus::Active)) {
        Ok(rows) => rows,
        Err(e) => return check(checks, "loops", "fail", e.to_string()),
    };
    let mut loops = Vec::with_capacity(rows.len());
    for row in rows {
        match row {
            Ok(lp) => loops.push(lp),
            Err(bad) => check(
                checks,
                format!("loop {}", bad.name),
                "fail",
                bad.into_error().to_string(),
            ),
        }
    }
    let mut failing = Vec::new();
    let now = chrono::Utc::now();
    // The live runners, for the loops that require runner labels.
    let live: Vec<loops_store::RunnerInfo> = if loops.iter().any(|l| !l.runs_on.is_empty()) {
        client
            .runners()
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.live && !r.released)
            .collect()
    } else {
        Vec::new()
    };
    for lp in &loops {
        schedule_check(lp, now, checks);
        runner_label_check(lp, &live, checks);
        let problems = client.check_target(&lp.target);
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
        let last = client.last_run(&lp.id).ok().flatten();
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

/// A loop that requires runner labels (`--on`) no live runner advertises (all of
/// them): it waits, unclaimed, until one registers.
fn runner_label_check(
    lp: &loops_core::Loop,
    live: &[loops_store::RunnerInfo],
    checks: &mut Vec<Check>,
) {
    if lp.runs_on.is_empty() {
        return;
    }
    let able: Vec<&str> = live
        .iter()
        .filter(|r| lp.runs_on.iter().all(|l| r.labels.contains(l)))
        .map(|r| r.host.as_str())
        .collect();
    let wanted = lp.runs_on.join(", ");
    let labels: Vec<&[String]> = live.iter().map(|r| r.labels.as_slice()).collect();
    if let Some(why) = loops_core::health::runner_wait(&lp.runs_on, &labels) {
        check(
            checks,
            format!("runners {}", lp.name),
            "warn",
            format!(
                "{why}: its slots wait until one does \
                 (`loops daemon start --runner-label …` on a host that can run it)"
            ),
        );
    } else {
        check(
            checks,
            format!("runners {}", lp.name),
            "ok",
            format!(
                "{} live runner(s) with {wanted} (on {})",
                able.len(),
                able.join(", ")
            ),
        );
    }
}

/// Lists each agent CLI found on the effective PATH with its version.
fn provider_checks(checks: &mut Vec<Check>) {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let env = crate::env::build_env(
        crate::env::inherited(),
        home.as_deref(),
        &Default::default(),
        &[],
    );
    let found = crate::providers::detect_providers(&env);
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
