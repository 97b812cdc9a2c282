//! `daemon run|start|stop|status|logs|install`.

use super::Context;
use crate::cli::{DaemonCommand, DaemonInstallArgs, DaemonLogsArgs, DaemonRunArgs, DaemonStopArgs};
use crate::output::{self, print_json};
use crate::Failure;
use loops_core::{format_instant, Duration};
use loops_runtime::daemon::{self as d, DaemonConfig, LOG_FILE, PID_FILE};
use loops_runtime::process::{is_same_process_alive, process_start_time};
use loops_store::Store;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration as StdDuration, Instant as StdInstant};

pub fn run(ctx: &Context, cmd: DaemonCommand) -> Result<ExitCode, Failure> {
    match cmd {
        DaemonCommand::Run(args) => foreground(ctx, args),
        DaemonCommand::Start(args) => start(ctx, args),
        DaemonCommand::Stop(args) => stop(ctx, args),
        DaemonCommand::Status => status(ctx),
        DaemonCommand::Logs(args) => logs(ctx, args),
        DaemonCommand::Install(args) => install(ctx, args),
    }
}

fn std_duration(flag: &str, text: &str) -> Result<StdDuration, Failure> {
    Duration::parse(text)
        .map(|d| StdDuration::from_millis(d.as_millis()))
        .map_err(|e| Failure::usage(format!("{flag}: {e}")))
}

fn config(dir: &Path, args: &DaemonRunArgs) -> Result<DaemonConfig, Failure> {
    let mut cfg = DaemonConfig::new(dir);
    cfg.max_concurrent = args.max_concurrent.max(1);
    cfg.lease_ttl = std_duration("--lease-ttl", &args.lease_ttl)?;
    cfg.shutdown_grace = std_duration("--shutdown-grace", &args.shutdown_grace)?;
    cfg.kill_grace = std_duration("--kill-grace", &args.kill_grace)?;
    cfg.keep_runs = (args.keep_runs > 0).then_some(args.keep_runs);
    cfg.keep_for = match args.keep_for.as_str() {
        "0" | "none" => None,
        other => Some(std_duration("--keep-for", other)?),
    };
    cfg.prune_every = std_duration("--prune-every", &args.prune_every)?;
    Ok(cfg)
}

fn foreground(ctx: &Context, args: DaemonRunArgs) -> Result<ExitCode, Failure> {
    let client = ctx.client()?;
    let cfg = config(client.data_dir(), &args)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LOOPS_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))?;
    let store = std::sync::Arc::clone(client.store());
    let result = rt.block_on(async move {
        let shutdown = async {
            use tokio::signal::unix::{signal, SignalKind};
            match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => std::future::pending::<()>().await,
            }
        };
        d::run(store, cfg, shutdown).await
    });
    rt.shutdown_timeout(StdDuration::from_secs(1));
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(Failure::failed(e.to_string())),
    }
}

/// The live daemon of this store, from its lease (preferred) or the pid file.
struct Running {
    pid: u32,
    host: String,
    since: Option<loops_core::Instant>,
    expires: Option<loops_core::Instant>,
}

fn running_daemon(store: &dyn Store, dir: &Path) -> Option<Running> {
    let host = loops_runtime::process::hostname();
    if let Ok(Some(lease)) = store.current_daemon_lease() {
        let alive = lease.holder.host != host
            || is_same_process_alive(lease.holder.pid, lease.holder.pid_start_time);
        if alive && (lease.expires_at > output::now() || lease.holder.host == host) {
            return Some(Running {
                pid: lease.holder.pid,
                host: lease.holder.host,
                since: Some(lease.acquired_at),
                expires: Some(lease.expires_at),
            });
        }
    }
    let pid = d::read_pid_file(dir)?;
    is_same_process_alive(pid, None).then_some(Running {
        pid,
        host,
        since: None,
        expires: None,
    })
}

fn start(ctx: &Context, args: DaemonRunArgs) -> Result<ExitCode, Failure> {
    let client = ctx.client()?;
    let dir = client.data_dir().to_path_buf();
    config(&dir, &args)?;
    if let Some(r) = running_daemon(client.store().as_ref(), &dir) {
        return Err(Failure::failed(format!(
            "a daemon is already running for this store: pid {} on host {}",
            r.pid, r.host
        )));
    }
    let log_path = dir.join(LOG_FILE);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Failure::failed(format!("cannot open {}: {e}", log_path.display())))?;
    let log_len = log.metadata().map(|m| m.len()).unwrap_or(0);
    let err_log = log
        .try_clone()
        .map_err(|e| Failure::failed(format!("cannot open {}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find own executable: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("--data-dir")
        .arg(&dir)
        .args(["daemon", "run"])
        .args(["--max-concurrent", &args.max_concurrent.to_string()])
        .args([
            "--lease-ttl",
            &args.lease_ttl,
            "--shutdown-grace",
            &args.shutdown_grace,
        ])
        .args([
            "--kill-grace",
            &args.kill_grace,
            "--keep-runs",
            &args.keep_runs.to_string(),
        ])
        .args([
            "--keep-for",
            &args.keep_for,
            "--prune-every",
            &args.prune_every,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err_log);
    // Its own process group: a Ctrl-C in the starting terminal must not reach it.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::failed(format!("cannot start the daemon: {e}")))?;
    let pid = child.id();
    let deadline = StdInstant::now() + StdDuration::from_secs(10);
    loop {
        if let Ok(Some(lease)) = client.store().current_daemon_lease() {
            if lease.holder.pid == pid {
                break;
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            let tail = read_from(&log_path, log_len);
            let last = tail
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output");
            return Err(Failure::failed(format!(
                "daemon exited at start ({status}): {}",
                last.trim()
            )));
        }
        if StdInstant::now() > deadline {
            return Err(Failure::failed(format!(
                "daemon (pid {pid}) did not take the store lease within 10s; see {}",
                log_path.display()
            )));
        }
        std::thread::sleep(StdDuration::from_millis(20));
    }
    if ctx.json {
        print_json(&serde_json::json!({ "started": true, "pid": pid, "log": log_path }))?;
    } else {
        println!("daemon started (pid {pid}); log: {}", log_path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.seek(SeekFrom::Start(offset));
        let _ = f.read_to_string(&mut text);
    }
    text
}

fn stop(ctx: &Context, args: DaemonStopArgs) -> Result<ExitCode, Failure> {
    let timeout = std_duration("--timeout", &args.timeout)?;
    let client = ctx.client()?;
    let dir = client.data_dir().to_path_buf();
    let Some(r) = running_daemon(client.store().as_ref(), &dir) else {
        let stale = dir.join(PID_FILE);
        if stale.exists() {
            let _ = std::fs::remove_file(&stale);
        }
        if ctx.json {
            print_json(&serde_json::json!({ "stopped": false, "running": false }))?;
        } else {
            println!("no daemon is running");
        }
        return Ok(ExitCode::SUCCESS);
    };
    if r.host != loops_runtime::process::hostname() {
        return Err(Failure::failed(format!(
            "the daemon runs on host {} (pid {}); stop it there",
            r.host, r.pid
        )));
    }
    let start_time = process_start_time(r.pid);
    let begun = StdInstant::now();
    let pid =
        nix::unistd::Pid::from_raw(i32::try_from(r.pid).map_err(|_| Failure::failed("bad pid"))?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
        .map_err(|e| Failure::failed(format!("cannot signal daemon pid {}: {e}", r.pid)))?;
    while is_same_process_alive(r.pid, start_time) {
        if begun.elapsed() > timeout {
            return Err(Failure::failed(format!(
                "daemon (pid {}) still running {}s after SIGTERM",
                r.pid,
                timeout.as_secs()
            )));
        }
        std::thread::sleep(StdDuration::from_millis(20));
    }
    let took = begun.elapsed();
    if ctx.json {
        print_json(
            &serde_json::json!({ "stopped": true, "pid": r.pid, "waitedMs": took.as_millis() as u64 }),
        )?;
    } else {
        println!(
            "daemon stopped (pid {}) after {}",
            r.pid,
            output::elapsed_text(took.as_millis() as u64)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn status(ctx: &Context) -> Result<ExitCode, Failure> {
    let client = ctx.client()?;
    let dir = client.data_dir().to_path_buf();
    let store = client.store();
    let now = output::now();
    let daemon = running_daemon(store.as_ref(), &dir);
    let running = store
        .running_runs(None)
        .map_err(|e| Failure::failed(e.to_string()))?;
    let next_due = store
        .list_loops(Some(loops_core::LoopStatus::Active))
        .map_err(|e| Failure::failed(e.to_string()))?
        .into_iter()
        .filter(|l| l.next_run_at.is_some())
        .min_by_key(|l| l.next_run_at);
    let stale_pid = daemon.is_none() && dir.join(PID_FILE).exists();
    if ctx.json {
        print_json(&serde_json::json!({
            "running": daemon.is_some(),
            "pid": daemon.as_ref().map(|r| r.pid),
            "host": daemon.as_ref().map(|r| r.host.clone()),
            "since": daemon.as_ref().and_then(|r| r.since).map(|t| format_instant(&t)),
            "uptimeMs": daemon.as_ref().and_then(|r| r.since).map(|s| (now - s).num_milliseconds().max(0)),
            "leaseExpiresAt": daemon.as_ref().and_then(|r| r.expires).map(|t| format_instant(&t)),
            "runningRuns": running,
            "nextDue": next_due.as_ref().map(|l| serde_json::json!({"id": l.id, "name": l.name, "nextRunAt": l.next_run_at.map(|t| format_instant(&t))})),
            "stalePidFile": stale_pid,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    match &daemon {
        Some(r) => {
            println!("daemon: running (pid {} on {})", r.pid, r.host);
            if let Some(since) = r.since {
                println!(
                    "uptime: {}",
                    output::relative(since, now).trim_end_matches(" ago")
                );
            }
            if let Some(exp) = r.expires {
                println!("lease: held, expires {}", output::relative(exp, now));
            }
        }
        None if stale_pid => println!(
            "daemon: not running (stale pid file {})",
            dir.join(PID_FILE).display()
        ),
        None => println!("daemon: not running"),
    }
    println!("running runs: {}", running.len());
    for run in &running {
        println!(
            "  {} {} attempt {} since {}",
            run.id,
            run.loop_name,
            run.attempt,
            output::when(run.started_at, now)
        );
    }
    match next_due {
        Some(l) => println!("next due: {} {}", l.name, output::when(l.next_run_at, now)),
        None => println!("next due: none"),
    }
    Ok(ExitCode::SUCCESS)
}

fn logs(ctx: &Context, args: DaemonLogsArgs) -> Result<ExitCode, Failure> {
    let dir = ctx.data_dir()?;
    let path = dir.join(LOG_FILE);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = std::io::stdout().lock();
    for line in &lines[lines.len().saturating_sub(args.lines)..] {
        writeln!(out, "{line}").map_err(|e| Failure::failed(e.to_string()))?;
    }
    out.flush().map_err(|e| Failure::failed(e.to_string()))?;
    if !args.follow {
        if !path.exists() {
            eprintln!("no log yet at {}", path.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut offset = text.len() as u64;
    loop {
        std::thread::sleep(StdDuration::from_millis(200));
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len < offset {
            offset = 0; // rotated or truncated
        }
        if len > offset {
            let chunk = read_from(&path, offset);
            offset += chunk.len() as u64;
            write!(out, "{chunk}").map_err(|e| Failure::failed(e.to_string()))?;
            out.flush().map_err(|e| Failure::failed(e.to_string()))?;
        }
    }
}

fn install(ctx: &Context, args: DaemonInstallArgs) -> Result<ExitCode, Failure> {
    let dir = ctx.data_dir()?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find own executable: {e}")))?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .ok_or_else(|| Failure::failed("HOME is not set"))?;
    let (path, contents, commands) = if cfg!(target_os = "macos") {
        let path = home.join("Library/LaunchAgents/dev.loops.daemon.plist");
        let commands = vec![format!("launchctl load -w {}", path.display())];
        (path, launch_agent(&exe, &dir), commands)
    } else {
        let path = home.join(".config/systemd/user/loops.service");
        let commands = vec![
            "systemctl --user daemon-reload".to_owned(),
            "systemctl --user enable --now loops.service".to_owned(),
        ];
        (path, systemd_unit(&exe, &dir), commands)
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Failure::failed(format!("cannot create {}: {e}", parent.display())))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &contents)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| Failure::failed(format!("cannot write {}: {e}", path.display())))?;
    if args.enable {
        for command in &commands {
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg(command)
                .status();
            if !status.is_ok_and(|s| s.success()) {
                return Err(Failure::failed(format!("`{command}` failed")));
            }
        }
    }
    if ctx.json {
        print_json(
            &serde_json::json!({ "path": path, "commands": commands, "enabled": args.enable }),
        )?;
    } else {
        println!("wrote {}", path.display());
        if args.enable {
            println!("enabled and started");
        } else {
            println!("to enable and start it, run:");
            for command in &commands {
                println!("  {command}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn systemd_unit(exe: &Path, dir: &Path) -> String {
    format!(
        "[Unit]\nDescription=loops scheduler daemon\nDocumentation=man:loops(1)\n\n[Service]\nType=simple\nExecStart={} daemon run\nEnvironment=LOOPS_DATA_DIR={}\nRestart=on-failure\nRestartSec=5\nKillMode=mixed\nKillSignal=SIGTERM\nTimeoutStopSec=30\n\n[Install]\nWantedBy=default.target\n",
        exe.display(),
        dir.display()
    )
}

fn launch_agent(exe: &Path, dir: &Path) -> String {
    let log = dir.join(LOG_FILE);
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>dev.loops.daemon</string>
  <key>ProgramArguments</key>
  <array><string>{}</string><string>daemon</string><string>run</string></array>
  <key>EnvironmentVariables</key>
  <dict><key>LOOPS_DATA_DIR</key><string>{}</string></dict>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
  <key>StandardOutPath</key><string>{}</string>
  <key>StandardErrorPath</key><string>{}</string>
</dict>
</plist>
"#,
        exe.display(),
        dir.display(),
        log.display(),
        log.display()
    )
}
