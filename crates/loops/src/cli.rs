//! Command-line definition (clap derive). Doc comments are the help text.
//!
//! This file holds the top of the tree ([`Cli`], [`Command`]) and the value parsers
//! every command shares; each command's own flags live next to it
//! (`commands/<verb>.rs`, e.g. `commands::backup::BackupArgs`), and the flag groups
//! several commands share (a loop's definition, an agent's options) in [`flags`].
//! Flags are parsed into typed values once: durations by [`duration`], [`timeout`]
//! and [`Span`], counts as `NonZeroUsize`, and every default is the runtime's own
//! constant rather than a second copy of it. A value our parsers refuse is reported
//! as one line, `error: --flag: why` (see [`value_error`]). Turning flags into
//! validated domain requests (schedules, targets, paths) happens in `commands`.

pub mod flags;

use crate::commands::backup::{BackupArgs, RestoreArgs};
use crate::commands::budget::BudgetCommand;
use crate::commands::completions::CompletionsArgs;
use crate::commands::create::CreateCommand;
use crate::commands::daemon::args::DaemonCommand;
use crate::commands::edit::{ArchiveArgs, EditArgs, RenameArgs};
use crate::commands::export::ExportArgs;
use crate::commands::health::HealthArgs;
use crate::commands::holds::HoldsArgs;
use crate::commands::import::ImportArgs;
use crate::commands::lifecycle::RemoveArgs;
use crate::commands::list::{ListArgs, ShowArgs};
use crate::commands::logs::LogsArgs;
use crate::commands::mcp::McpArgs;
use crate::commands::notify::NotifyCommand;
use crate::commands::prune::PruneArgs;
use crate::commands::run_now::RunNowArgs;
use crate::commands::runs::RunsArgs;
use crate::commands::serve::ServeArgs;
use crate::commands::store::StoreCommand;
use crate::commands::supervise::SuperviseArgs;
use crate::commands::tick::TickArgs;
use crate::commands::top::TopArgs;
use crate::commands::usage::UsageArgs;
use crate::commands::workflows::WorkflowsCommand;
use clap::{Parser, Subcommand};
use flags::LoopArg;
use loops_core::duration::DurationError;
use loops_core::Duration;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration as StdDuration;

/// A flag value one of our parsers refused; the message quotes the value.
#[derive(Debug)]
pub struct BadValue(String);

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadValue {}

/// A duration flag: `500ms`, `30s`, `15m`, `1.5h`, `2d`; zero and garbage refused.
pub fn duration(text: &str) -> Result<Duration, BadValue> {
    Duration::parse(text).map_err(|e| BadValue(e.to_string()))
}

/// `--timeout`: a [`duration`], where zero is refused with the way to say "no limit".
pub fn timeout(text: &str) -> Result<Duration, BadValue> {
    Duration::parse(text).map_err(|e| match e {
        DurationError::NotPositive(_) => BadValue(format!("{e} (omit --timeout for no limit)")),
        e => BadValue(e.to_string()),
    })
}

/// A daemon setting given as a duration (a [`duration`] as a `std` one), printed in
/// the shortest exact form so a default reads as it is typed (`30s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub StdDuration);

impl std::str::FromStr for Span {
    type Err = BadValue;
    fn from_str(text: &str) -> Result<Self, BadValue> {
        duration(text).map(|d| Span(d.to_std()))
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX);
        match Duration::from_millis(ms) {
            Some(d) => write!(f, "{d}"),
            None => f.write_str("0"),
        }
    }
}

/// `--keep-for`: a [`Span`], or `0` / `none` for no age limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepFor(pub Option<StdDuration>);

impl std::str::FromStr for KeepFor {
    type Err = BadValue;
    fn from_str(text: &str) -> Result<Self, BadValue> {
        match text.trim() {
            "0" | "none" => Ok(KeepFor(None)),
            other => other.parse::<Span>().map(|s| KeepFor(Some(s.0))),
        }
    }
}

impl fmt::Display for KeepFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => Span(d).fmt(f),
            None => f.write_str("0"),
        }
    }
}

/// The one line for a flag value our parsers refused (`--every: invalid duration
/// "0s": must be greater than zero`), or `None` for clap's own errors, which clap
/// reports itself.
pub fn value_error(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != clap::error::ErrorKind::ValueValidation {
        return None;
    }
    let bad = std::error::Error::source(err)?.downcast_ref::<BadValue>()?;
    let flag = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.split_whitespace().next().unwrap_or(arg),
        _ => "value",
    };
    Some(format!("{flag}: {bad}"))
}

/// A store URL as given (`--store`, `store copy --to`): it may hold a password, so its
/// `Debug` shows it redacted.
#[derive(Clone)]
pub struct StoreArg(String);

impl StoreArg {
    pub fn into_inner(self) -> String {
        self.0
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for StoreArg {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Debug for StoreArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreArg")
            .field(&loops_runtime::client::redact_store(&self.0))
            .finish()
    }
}

/// Durable, local-first scheduler for shell commands and AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "loops", version, about, propagate_version = true)]
pub struct Cli {
    /// Print one JSON document instead of human output.
    #[arg(long, global = true)]
    pub json: bool,

    /// Data directory holding loops.db, daemon.pid and daemon.log.
    #[arg(long, global = true, env = "LOOPS_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Where loops, runs and workflows are stored: `sqlite` (the default, loops.db in
    /// the data dir) or a PostgreSQL URL (`postgres://user:pass@host/db`), which any
    /// number of daemons on any hosts share; `-` reads the URL from stdin's first line.
    /// The data dir keeps the host-local files. Never passed on to runs, hooks or
    /// helpers.
    #[arg(
        long,
        global = true,
        env = "LOOPS_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<StoreArg>,

    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process; boxing the big `create` variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Define a new loop.
    #[command(subcommand)]
    Create(CreateCommand),
    /// List loops.
    List(ListArgs),
    /// Show one loop.
    Show(ShowArgs),
    /// List runs, newest first.
    Runs(RunsArgs),
    /// Stop scheduling a loop until `resume` (its next slot is kept).
    Pause(LoopArg),
    /// Re-activate a paused, stopped or done loop (a done loop starts a fresh count).
    Resume(LoopArg),
    /// Stop a loop (it stays listed with its history).
    Stop(LoopArg),
    /// Delete a loop and its run history (refused while it runs, unless --force).
    Remove(RemoveArgs),
    /// Run a loop now: its due slot when one is due, else a one-off (ad-hoc) run.
    RunNow(RunNowArgs),
    /// One scheduler pass (for use from system cron); waits for the runs it starts.
    Tick(TickArgs),
    /// Check the installation, the store, the daemon and every active loop's target.
    Doctor,
    /// One line per active loop: last run, last success, failures, missed and skipped
    /// slots, and a verdict (ok, warn, fail); exits 1 when any loop fails.
    Health(HealthArgs),
    /// A live full-screen view: loops with status, next run, last runs and health,
    /// runs in flight, recent failures; keys to pause, resume, run now, archive, follow.
    Top(TopArgs),
    /// Tokens and cost reported by agent runs and agent workflow steps, with totals.
    Usage(UsageArgs),
    /// Print a bundle of loops and the workflow specs they use (JSON, to stdout).
    Export(ExportArgs),
    /// Preview (or with --apply, write) an import of a bundle or an OpenLoops database.
    Import(ImportArgs),
    /// Delete old finished runs.
    Prune(PruneArgs),
    /// Run and control the background daemon.
    #[command(subcommand)]
    Daemon(DaemonCommand),
    /// Define, run and inspect workflows (DAGs of steps).
    #[command(subcommand)]
    Workflows(WorkflowsCommand),
    /// Serve the Model Context Protocol on stdio, for coding agents: the loops
    /// operations as tools (read-only unless --allow-mutations).
    Mcp(McpArgs),
    /// Print shell completions.
    Completions(CompletionsArgs),
    /// Change a loop in place (any create flag); its id, run history and status stay.
    Edit(EditArgs),
    /// Give a loop a new name; its id and run history stay.
    Rename(RenameArgs),
    /// Put a loop away: never scheduled, hidden from `list`, its history kept.
    Archive(ArchiveArgs),
    /// Bring an archived loop back, paused (`resume` then schedules it again).
    Unarchive(LoopArg),
    /// Store-wide default notifications, for loops without --notify-* settings.
    #[command(subcommand)]
    Notify(NotifyCommand),
    /// Print a run's output: a running run's as it is written, a finished run's as
    /// stored.
    Logs(LogsArgs),
    /// The daemons sharing a PostgreSQL store: host, labels, capacity, running runs,
    /// heartbeat age, lease state.
    Runners,
    /// Accounts held by a usage limit (their agent loops wait until the hold ends);
    /// `holds clear PROVIDER [ACCOUNT]` releases one when the limit was lifted.
    Holds(HoldsArgs),
    /// Store-wide budgets per provider (and account): `budget set provider=claude
    /// --tokens 1000000/day`, `budget list`, `budget clear KEY`. A spent budget holds
    /// its loops until its UTC day or week resets.
    #[command(subcommand)]
    Budget(BudgetCommand),
    /// Serve the HTTP API (REST under /v1, live events, OpenAPI) and the web dashboard
    /// (at /) on 127.0.0.1; every request needs the bearer token in the data dir's
    /// http.token (the dashboard's login form exchanges it for a session cookie).
    Serve(ServeArgs),
    /// Move the store: `store copy --to postgres://…` copies the data dir's SQLite
    /// store into a PostgreSQL database.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Write a consistent copy of the SQLite store (safe while the daemon runs) to FILE,
    /// or to <data dir>/backups/loops-manual-<UTC time>.db.
    Backup(BackupArgs),
    /// Replace the SQLite store with a backup FILE (refused while a daemon or `loops
    /// serve` uses the store); the store as it was is kept in <data dir>/backups.
    Restore(RestoreArgs),
    /// A run supervisor (started by the daemon, never by hand): holds the processes of
    /// the daemon's runs in the supervise dir DIR, on stdin its daemon's connection.
    #[command(hide = true)]
    Supervise(SuperviseArgs),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use loops_runtime::daemon::{
        DEFAULT_KEEP_FOR, DEFAULT_KEEP_RUNS, DEFAULT_LEASE_TTL, DEFAULT_PRUNE_EVERY,
        DEFAULT_SHUTDOWN_GRACE,
    };
    use loops_runtime::engine::DEFAULT_MAX_CONCURRENT;
    use loops_runtime::executor::DEFAULT_KILL_GRACE;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("loops").chain(args.iter().copied()))
    }

    #[test]
    fn daemon_defaults_are_the_runtimes_constants() {
        let Command::Daemon(DaemonCommand::Run(args)) = parse(&["daemon", "run"]).unwrap().command
        else {
            panic!("not daemon run");
        };
        assert_eq!(args.max_concurrent, DEFAULT_MAX_CONCURRENT);
        assert_eq!(args.lease_ttl.0, DEFAULT_LEASE_TTL);
        assert_eq!(args.shutdown_grace.0, DEFAULT_SHUTDOWN_GRACE);
        assert_eq!(args.kill_grace.0, DEFAULT_KILL_GRACE);
        assert_eq!(args.keep_for.0, Some(DEFAULT_KEEP_FOR));
        assert_eq!(args.prune_every.0, DEFAULT_PRUNE_EVERY);
        assert_eq!(args.keep_runs, DEFAULT_KEEP_RUNS);
        // As the help text shows them.
        assert_eq!(
            [
                args.lease_ttl.to_string(),
                args.shutdown_grace.to_string(),
                args.kill_grace.to_string(),
                args.keep_for.to_string(),
                args.prune_every.to_string(),
            ],
            ["30s", "10s", "2s", "30d", "10m"]
        );
    }

    #[test]
    fn settings_print_as_they_parse() {
        for text in ["300ms", "1500ms", "90s", "1h", "2d"] {
            let span: Span = text.parse().unwrap();
            assert_eq!(span.to_string().parse::<Span>().unwrap(), span, "{text}");
        }
        assert_eq!("1.5s".parse::<Span>().unwrap().to_string(), "1500ms");
        for off in ["0", "none"] {
            let keep: KeepFor = off.parse().unwrap();
            assert_eq!(keep, KeepFor(None));
            assert_eq!(keep.to_string().parse::<KeepFor>().unwrap(), keep);
        }
        assert!("0s".parse::<Span>().is_err());
    }

    #[test]
    fn refused_values_are_one_line_naming_the_flag() {
        let cases = [
            (
                &["create", "command", "j", "--cmd", "true", "--every", "0s"][..],
                "--every: invalid duration \"0s\": must be greater than zero",
            ),
            (
                &["create", "command", "j", "--cmd", "true", "--every", "1m", "--timeout", "0"][..],
                "--timeout: invalid duration \"0\": must be greater than zero (omit --timeout for no limit)",
            ),
            (
                &["daemon", "run", "--lease-ttl", "-1s"][..],
                "--lease-ttl: invalid duration \"-1s\": must be greater than zero",
            ),
            (
                &["prune", "--older-than", "soon"][..],
                "--older-than: invalid duration \"soon\"",
            ),
        ];
        for (args, expected) in cases {
            let err = parse(args).unwrap_err();
            let line = value_error(&err).unwrap_or_else(|| panic!("{args:?}: {err}"));
            assert!(line.starts_with(expected), "{args:?}: {line}");
            assert!(!line.contains('\n'), "{line}");
        }
        // `--max-concurrent` is at least 1, refused by clap as any bad number is.
        let err = parse(&["tick", "--max-concurrent", "0"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert_eq!(value_error(&err), None);
        // clap's own errors are left to clap.
        assert_eq!(value_error(&parse(&["list", "--bogus"]).unwrap_err()), None);
    }
}

#[cfg(test)]
mod surface;
