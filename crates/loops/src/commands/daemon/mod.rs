//! `daemon run|start|stop|status|logs|install`.

pub(crate) mod args;
mod install;

use super::Context;
use crate::exit::Exit;
use crate::output::{self, outln, print_json};
use crate::Failure;
use args::{
    DaemonCommand, DaemonInstallArgs, DaemonLogsArgs, DaemonRestartArgs, DaemonRunArgs,
    DaemonStopArgs,
};
use loops_runtime::daemon::{DaemonConfig, LOG_FILE};
use loops_runtime::daemon_view::{stalled_text, DaemonState, StalePidFile};
use loops_runtime::process::is_same_process_alive;
use loops_runtime::Client;
use loops_store::{DATA_DIR_ENV, DB_FILE};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration as StdDuration, Instant as StdInstant};

pub fn run(ctx: &Context, cmd: DaemonCommand) -> Result<Exit, Failure> {
    match cmd {
        DaemonCommand::Run(args) => foreground(ctx, args),
        DaemonCommand::Start(args) => start(ctx, args),
        DaemonCommand::Stop(args) => stop(ctx, args),
        DaemonCommand::Restart(args) => restart(ctx, args),
        DaemonCommand::Status => status(ctx),
        DaemonCommand::Logs(args) => logs(ctx, args),
        DaemonCommand::Install(args) => install::install(ctx, args),
    }
}

/// The daemon's settings from its flags (already typed and checked by clap).
fn config(dir: &Path, args: &DaemonRunArgs) -> DaemonConfig {
    let mut cfg = DaemonConfig::new(dir);
    cfg.max_concurrent = args.max_concurrent;
    cfg.lease_ttl = args.lease_ttl.0;
    cfg.shutdown_grace = args.shutdown_grace.0;
    cfg.kill_grace = args.kill_grace.0;
    cfg.keep_runs = (args.keep_runs > 0).then_some(args.keep_runs);
    cfg.keep_for = args.keep_for.0;
    cfg.prune_every = args.prune_every.0;
    cfg.max_sleep = args.interval_ms.map(StdDuration::from_millis);
    cfg.notify_timeout = args.notify_timeout.0;
    cfg.runner_labels = args.runner_labels.clone();
    cfg.caps = args.caps();
    cfg.supervisor_program = loops_runtime::supervisor::program().map(Path::to_path_buf);
    cfg
}

fn foreground(ctx: &Context, args: DaemonRunArgs) -> Result<Exit, Failure> {
    let dir = ctx.data_dir()?;
    let client = ctx.client()?;
    refuse_corrupt(&client, &dir.join(DB_FILE))?;
    let cfg = config(&dir, &args);
    client.check_daemon_config(&cfg)?;
    crate::commands::log_to_stderr("info");
    let rt = crate::commands::server_runtime()?;
    let result = rt.block_on(async {
        // The handlers are installed now, before the daemon takes the store: a SIGTERM
        // that came before the shutdown future was first polled would otherwise end the
        // process by the default action, its lease, pid file and socket left behind.
        use loops_runtime::daemon::Stop;
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::user_defined1()),
        );
        // SIGTERM and Ctrl-C leave the runs to their supervisors (the next daemon
        // re-attaches); SIGUSR1 (`daemon stop --terminate-runs`) ends them first.
        let shutdown = async move {
            match handlers {
                (Ok(mut term), Ok(mut int), Ok(mut usr1)) => {
                    tokio::select! {
                        _ = term.recv() => Stop::Detach,
                        _ = int.recv() => Stop::Detach,
                        _ = usr1.recv() => Stop::TerminateRuns,
                    }
                }
                _ => std::future::pending::<Stop>().await,
            }
        };
        record_args(&dir, &args);
        client.run_daemon(cfg, shutdown).await
    });
    rt.shutdown_timeout(StdDuration::from_secs(1));
    result.map(|()| Exit::Success).map_err(Failure::from)
}

/// `PRAGMA quick_check` before the daemon takes the store: a damaged page would
/// otherwise surface only when some pass happens to touch it.
fn refuse_corrupt(client: &Client, db: &Path) -> Result<(), Failure> {
    let problems = client.quick_check()?.unwrap_or_default();
    if problems.is_empty() || problems == ["ok"] {
        return Ok(());
    }
    let mut first: Vec<String> = problems
        .iter()
        .take(3)
        .map(|p| p.replace(['\n', '\r'], " "))
        .collect();
    if problems.len() > 3 {
        first.push(format!("{} more", problems.len() - 3));
    }
    Err(Failure::store(format!(
        "{} is corrupt (quick_check: {}); the daemon will not run on it: restore it from a \
         backup, or move it away to start with an empty store",
        db.display(),
        first.join("; ")
    )))
}

fn start(ctx: &Context, args: DaemonRunArgs) -> Result<Exit, Failure> {
    let client = ctx.client()?;
    let dir = client.data_dir().to_path_buf();
    client.check_daemon_config(&config(&dir, &args))?;
    let view = client.daemon_view()?;
    match (view.state, &view.holder) {
        (DaemonState::Running, Some(h)) => {
            return Err(Failure::failed(format!(
                "a daemon is already running for this store: pid {} on host {}",
                h.pid, h.host
            )))
        }
        (DaemonState::Stalled, Some(h)) => {
            return Err(Failure::failed(format!(
                "this store's daemon is stalled ({}); stop it with `loops daemon stop`",
                stalled_text(h, output::now())
            )))
        }
        _ => {}
    }
    if let Some(stale) = &view.stale_pid_file {
        stale.remove();
    }
    // A daemon still serving a store that was deleted under it re-checks its database
    // file when woken, and exits.
    loops_runtime::wake::poke(&dir);
    let log_path = dir.join(LOG_FILE);
    let log = private_append(&log_path)
        .map_err(|e| Failure::failed(format!("cannot open {}: {e}", log_path.display())))?;
    let log_len = log.metadata().map(|m| m.len()).unwrap_or(0);
    let err_log = log
        .try_clone()
        .map_err(|e| Failure::failed(format!("cannot open {}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find own executable: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("--data-dir").arg(&dir);
    // The store's URL may carry a password: not in argv (`ps` shows it) nor in the
    // daemon's environment (its children would inherit it): on its stdin.
    let store = ctx.store_url();
    if store.is_some() {
        cmd.args(["--store", "-"]);
    }
    cmd.env_remove(loops_runtime::client::STORE_ENV)
        .args(["daemon", "run"])
        .args(run_argv(&args))
        .stdin(if store.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(log)
        .stderr(err_log);
    // Its own process group: a Ctrl-C in the starting terminal must not reach it.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::failed(format!("cannot start the daemon: {e}")))?;
    if let (Some(store), Some(mut stdin)) = (store, child.stdin.take()) {
        // One line, then EOF (the pipe closes when `stdin` drops). A daemon that died
        // at once is reported below, from its log.
        let _ = writeln!(stdin, "{store}");
    }
    let pid = child.id();
    let deadline = StdInstant::now() + StdDuration::from_secs(10);
    loop {
        // Ready once it holds the store — SQLite's daemon lease, or its own runner
        // lease on a store with runners (PostgreSQL has no daemon lease row) — as
        // `daemon status` judges it, and has written its pid file and bound its wake
        // socket (both come after the lease): whoever reads either right after `start`
        // returned must find this daemon there.
        let holds = client.daemon_view().is_ok_and(|v| {
            v.state == DaemonState::Running && v.holder.is_some_and(|h| h.pid == pid)
        });
        if holds
            && loops_runtime::daemon::read_pid_file(&dir) == Some(pid)
            && loops_runtime::wake::socket_path(&dir).exists()
        {
            break;
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
            let what = if client.store_has_runners() {
                "register as a runner"
            } else {
                "take the store lease"
            };
            return Err(Failure::failed(format!(
                "daemon (pid {pid}) did not {what} within 10s; see {}",
                log_path.display()
            )));
        }
        std::thread::sleep(StdDuration::from_millis(20));
    }
    if ctx.json {
        print_json(&serde_json::json!({ "started": true, "pid": pid, "log": log_path }))?;
    } else {
        outln!("daemon started (pid {pid}); log: {}", log_path.display())?;
    }
    Ok(Exit::Success)
}

/// `daemon run`'s flags for `args`, each printed in the form it parses back from.
fn run_argv(args: &DaemonRunArgs) -> Vec<String> {
    let mut argv: Vec<String> = [
        ("--max-concurrent", args.max_concurrent.to_string()),
        ("--lease-ttl", args.lease_ttl.to_string()),
        ("--shutdown-grace", args.shutdown_grace.to_string()),
        ("--kill-grace", args.kill_grace.to_string()),
        ("--keep-runs", args.keep_runs.to_string()),
        ("--keep-for", args.keep_for.to_string()),
        ("--prune-every", args.prune_every.to_string()),
        ("--notify-timeout", args.notify_timeout.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect();
    if let Some(ms) = args.interval_ms {
        argv.extend(["--interval-ms".to_owned(), ms.to_string()]);
    }
    for label in &args.runner_labels {
        argv.extend(["--runner-label".to_owned(), label.clone()]);
    }
    let caps = args.caps();
    if !caps.is_empty() {
        argv.extend(["--max-concurrent-per".to_owned(), caps.to_flag()]);
    }
    argv
}

/// Where a running daemon records its flags, for `daemon restart`.
const ARGS_FILE: &str = "daemon.args";

/// Records the flags of the daemon starting now (JSON, 0600); failing only costs
/// `restart` its memory of them.
fn record_args(dir: &Path, args: &DaemonRunArgs) {
    let text = serde_json::to_string(&run_argv(args)).unwrap_or_default();
    let path = dir.join(ARGS_FILE);
    let written = private_truncate(&path).and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot record the daemon's flags");
    }
}

/// The flags the running daemon recorded, if readable (at most 64 KiB).
fn recorded_args(dir: &Path) -> Vec<String> {
    let Ok(file) = std::fs::File::open(dir.join(ARGS_FILE)) else {
        return Vec::new();
    };
    let mut text = String::new();
    let _ = file.take(64 * 1024).read_to_string(&mut text);
    serde_json::from_str(&text).unwrap_or_default()
}

/// Opens `path` for writing from empty, creating it 0600.
fn private_truncate(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// `daemon restart`: the running daemon leaves its runs to their supervisors and
/// exits; a new one (this binary, the recorded flags with the given ones on top)
/// starts and re-attaches to them.
fn restart(ctx: &Context, args: DaemonRestartArgs) -> Result<Exit, Failure> {
    use clap::Parser as _;
    let dir = ctx.data_dir()?;
    let mut argv = recorded_args(&dir);
    if args
        .flags
        .iter()
        .any(|f| f == "--runner-label" || f.starts_with("--runner-label="))
    {
        // Labels accumulate when repeated: the given ones replace the recorded ones.
        argv = drop_flag(argv, "--runner-label");
    }
    argv.extend(args.flags.iter().cloned());
    let flags = args::DaemonRunFlags::try_parse_from(&argv).map_err(|e| {
        Failure::usage(
            e.render()
                .to_string()
                .trim()
                .lines()
                .next()
                .unwrap_or("bad daemon flags")
                .to_owned(),
        )
    })?;
    // Checked before the running daemon is stopped: bad settings change nothing.
    let client = ctx.client()?;
    client.check_daemon_config(&config(&dir, &flags.args))?;
    if let Some(old) = stop_daemon(ctx, args.timeout.0, false, false)? {
        if !ctx.json {
            outln!("daemon stopped (pid {old}); its runs go on under their supervisors")?;
        }
    }
    start(ctx, flags.args)
}

/// `argv` without `flag` and its value.
fn drop_flag(argv: Vec<String>, flag: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut skip = false;
    for arg in argv {
        if std::mem::take(&mut skip) {
            continue;
        }
        if arg == flag {
            skip = true;
        } else if !arg.starts_with(&format!("{flag}=")) {
            out.push(arg);
        }
    }
    out
}

/// Opens `path` for appending, creating it 0600 (the log holds run errors and paths).
fn private_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// What was appended to `path` since `offset`: at most its last [`LOG_CHUNK`] bytes.
fn read_from(path: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let start = offset.max(len.saturating_sub(LOG_CHUNK as u64));
        let _ = f.seek(SeekFrom::Start(start));
        let _ = f.take(LOG_CHUNK as u64).read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn stop(ctx: &Context, args: DaemonStopArgs) -> Result<Exit, Failure> {
    stop_daemon(ctx, args.timeout.0, args.terminate_runs, true)?;
    Ok(Exit::Success)
}

/// Stops this store's local daemon and reports it: SIGTERM (its runs go on under their
/// supervisors) or, with `terminate_runs`, SIGUSR1 (its runs are terminated and
/// recorded first); said on stdout when `report`. The pid it stopped, `None` when none
/// was running.
fn stop_daemon(
    ctx: &Context,
    timeout: StdDuration,
    terminate_runs: bool,
    report: bool,
) -> Result<Option<u32>, Failure> {
    let client = ctx.reader()?;
    let view = client.daemon_view()?;
    if let Some(stale) = &view.stale_pid_file {
        stale.remove();
    }
    let Some(h) = view.holder else {
        if report && ctx.json {
            print_json(&serde_json::json!({ "stopped": false, "running": false }))?;
        } else if report {
            outln!("no daemon is running")?;
        }
        return Ok(None);
    };
    if !h.local {
        return Err(Failure::failed(format!(
            "the daemon runs on host {} (pid {}); stop it there",
            h.host, h.pid
        )));
    }
    let begun = StdInstant::now();
    let pid =
        nix::unistd::Pid::from_raw(i32::try_from(h.pid).map_err(|_| Failure::failed("bad pid"))?);
    let (signal, name) = if terminate_runs {
        (nix::sys::signal::Signal::SIGUSR1, "SIGUSR1")
    } else {
        (nix::sys::signal::Signal::SIGTERM, "SIGTERM")
    };
    // The lease proved pid, start time and host; check again right before signalling.
    if is_same_process_alive(h.pid, h.pid_start_time) {
        nix::sys::signal::kill(pid, signal)
            .map_err(|e| Failure::failed(format!("cannot signal daemon pid {}: {e}", h.pid)))?;
        if view.state == DaemonState::Stalled {
            // A stopped process keeps the signal pending until it continues.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        }
    }
    while is_same_process_alive(h.pid, h.pid_start_time) {
        if begun.elapsed() > timeout {
            return Err(Failure::failed(format!(
                "daemon (pid {}) still running {}s after {name}",
                h.pid,
                timeout.as_secs()
            )));
        }
        std::thread::sleep(StdDuration::from_millis(20));
    }
    let took = begun.elapsed();
    if !report {
        return Ok(Some(h.pid));
    }
    if ctx.json {
        print_json(
            &serde_json::json!({ "stopped": true, "pid": h.pid, "waitedMs": took.as_millis() as u64, "runsTerminated": terminate_runs }),
        )?;
    } else {
        outln!(
            "daemon stopped (pid {}) after {}",
            h.pid,
            output::elapsed_text(took.as_millis() as u64)
        )?;
    }
    Ok(Some(h.pid))
}

fn status(ctx: &Context) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    let now = output::now();
    let status = client.daemon_status()?;
    let view = &status.view;
    let removed = view
        .stale_pid_file
        .as_ref()
        .is_some_and(StalePidFile::remove);
    // A stalled daemon holds the store without scheduling: not a healthy state.
    let code = if view.state == DaemonState::Stalled {
        Exit::Failed
    } else {
        Exit::Success
    };
    let holder = view.holder.as_ref();
    if ctx.json {
        print_json(&status.to_json(now))?;
        return Ok(code);
    }
    match (view.state, holder) {
        (DaemonState::Running, Some(h)) => {
            outln!("daemon: running (pid {} on {})", h.pid, h.host)?;
            outln!(
                "uptime: {}",
                output::relative(h.since, now).trim_end_matches(" ago")
            )?;
            outln!("lease: held, expires {}", output::relative(h.expires, now))?;
        }
        (DaemonState::Stalled, Some(h)) => {
            outln!("daemon: stalled ({})", stalled_text(h, now))?;
        }
        _ => match &view.stale_pid_file {
            Some(stale) => outln!(
                "daemon: not running ({}{})",
                stale.describe(),
                if removed { "; removed" } else { "" }
            )?,
            None => outln!("daemon: not running")?,
        },
    }
    outln!(
        "store: {} {}",
        client.backend().kind(),
        client.backend().location()
    )?;
    outln!("running runs: {}", status.running.len())?;
    for run in &status.running {
        outln!(
            "  {} {} attempt {} since {}",
            run.id,
            run.loop_name,
            run.attempt,
            output::when(run.started_at, now)
        )?;
    }
    match &status.next_due {
        Some(l) => outln!("next due: {} {}", l.name, output::when(l.next_run_at, now))?,
        None => outln!("next due: none")?,
    }
    match &status.caps[..] {
        [] => {}
        [(_, caps)] => outln!("caps: {caps}")?,
        all => {
            for (runner, caps) in all {
                outln!("caps: {caps} (runner {runner})")?;
            }
        }
    }
    Ok(code)
}

/// Bytes read at a time from the daemon log, backwards while looking for the last
/// lines and forwards while following: the log may be large, memory stays bounded.
const LOG_CHUNK: usize = 64 * 1024;

fn logs(ctx: &Context, args: DaemonLogsArgs) -> Result<Exit, Failure> {
    let dir = ctx.data_dir()?;
    let path = dir.join(LOG_FILE);
    let mut out = std::io::stdout().lock();
    let mut offset = 0;
    let mut identity = None;
    match std::fs::File::open(&path) {
        Ok(mut file) => {
            let start = start_of_last_lines(&mut file, args.lines)
                .map_err(|e| Failure::failed(format!("cannot read {}: {e}", path.display())))?;
            let end = file.metadata().map(|m| m.len()).unwrap_or(0);
            let ends_in_newline = copy_range(&mut file, start, end, &mut out)?;
            if !args.follow && !ends_in_newline && end > start {
                writeln!(out).map_err(Failure::stdout)?;
            }
            offset = end;
            identity = file_identity(&file);
        }
        Err(_) if !args.follow => {
            let _ = writeln!(std::io::stderr(), "no log yet at {}", path.display());
        }
        Err(_) => {}
    }
    out.flush().map_err(Failure::stdout)?;
    if !args.follow {
        return Ok(Exit::Success);
    }
    loop {
        std::thread::sleep(StdDuration::from_millis(200));
        let Ok(mut file) = std::fs::File::open(&path) else {
            continue;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let now = file_identity(&file);
        if now != identity || len < offset {
            // Replaced (rotated) or truncated: the new contents from their start.
            identity = now;
            offset = 0;
        }
        if len > offset {
            copy_range(&mut file, offset, len, &mut out)?;
            out.flush().map_err(Failure::stdout)?;
            offset = len;
        }
    }
}

/// Device and inode of an open file: a log replaced under its name is a new file.
fn file_identity(file: &std::fs::File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// Where the last `lines` lines of `file` start: read backwards from its end, one
/// [`LOG_CHUNK`] at a time, until enough newlines are found (a final newline ends the
/// last line rather than starting another).
fn start_of_last_lines(file: &mut std::fs::File, lines: usize) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    if lines == 0 {
        return Ok(len);
    }
    let mut buf = vec![0u8; LOG_CHUNK];
    let mut end = len;
    let mut seen = 0;
    let mut last_byte = true;
    while end > 0 {
        let begin = end.saturating_sub(LOG_CHUNK as u64);
        let chunk = &mut buf[..usize::try_from(end - begin).unwrap_or(LOG_CHUNK)];
        file.seek(SeekFrom::Start(begin))?;
        file.read_exact(chunk)?;
        for (i, b) in chunk.iter().enumerate().rev() {
            let at_end = std::mem::take(&mut last_byte);
            if *b != b'\n' || at_end {
                continue;
            }
            seen += 1;
            if seen == lines {
                return Ok(begin + i as u64 + 1);
            }
        }
        end = begin;
    }
    Ok(0)
}

/// Copies bytes `start..end` of `file` to `out` one [`LOG_CHUNK`] at a time; whether
/// they end in a newline.
fn copy_range(
    file: &mut std::fs::File,
    start: u64,
    end: u64,
    out: &mut impl Write,
) -> Result<bool, Failure> {
    let read_error = |e: std::io::Error| Failure::failed(format!("cannot read the log: {e}"));
    file.seek(SeekFrom::Start(start)).map_err(read_error)?;
    let mut buf = vec![0u8; LOG_CHUNK];
    let mut left = end.saturating_sub(start);
    let mut last = None;
    while left > 0 {
        let want = usize::try_from(left).map_or(LOG_CHUNK, |l| l.min(LOG_CHUNK));
        let n = file.read(&mut buf[..want]).map_err(read_error)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(Failure::stdout)?;
        last = buf[..n].last().copied();
        left -= n as u64;
    }
    Ok(last == Some(b'\n'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tail(text: &[u8], lines: usize) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, text).unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        let start = start_of_last_lines(&mut file, lines).unwrap();
        let mut out = Vec::new();
        copy_range(&mut file, start, text.len() as u64, &mut out).unwrap();
        out
    }

    #[test]
    fn the_last_lines_are_found_from_the_end() {
        assert_eq!(tail(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(tail(b"a\nb\nc\n", 9), b"a\nb\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", 0), b"");
        assert_eq!(tail(b"", 3), b"");
        assert_eq!(tail(b"\n\n\n", 2), b"\n\n");
        // Lines longer than a chunk, and a newline right at a chunk boundary.
        let long = vec![b'x'; LOG_CHUNK + 10];
        let mut text = long.clone();
        text.push(b'\n');
        text.extend_from_slice(&long);
        text.push(b'\n');
        let mut last = long.clone();
        last.push(b'\n');
        assert_eq!(tail(&text, 1), last);
        assert_eq!(tail(&text, 2), text);
        let mut edge = vec![b'y'; LOG_CHUNK - 1];
        edge.extend_from_slice(b"\nz\n");
        assert_eq!(tail(&edge, 1), b"z\n");
    }
}
