//! Command-line definition (clap derive). Doc comments here are the help text.
//!
//! Flags are parsed into typed values once, here: durations by [`duration`],
//! [`timeout`] and [`Span`], `--max-concurrent` as a [`NonZeroUsize`], and every
//! default is the runtime's own constant rather than a second copy of it. A value our
//! parsers refuse is reported as one line, `error: --flag: why` (see
//! [`value_error`]). Turning flags into validated domain requests (schedules, targets,
//! paths) happens in `commands`.

use clap::{Args, Parser, Subcommand};
use loops_core::caps::Caps;
use loops_core::duration::DurationError;
use loops_core::Duration;
use loops_runtime::client::DEFAULT_RUNNER_WAIT;
use loops_runtime::daemon::{
    DEFAULT_KEEP_FOR, DEFAULT_KEEP_RUNS, DEFAULT_LEASE_TTL, DEFAULT_PRUNE_EVERY,
    DEFAULT_SHUTDOWN_GRACE,
};
use loops_runtime::definition;
use loops_runtime::engine::DEFAULT_MAX_CONCURRENT;
use loops_runtime::executor::DEFAULT_KILL_GRACE;
use loops_runtime::notify::DEFAULT_NOTIFY_TIMEOUT;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration as StdDuration;

/// How long `daemon stop` waits for the daemon to exit, unless `--timeout` says.
pub const DEFAULT_STOP_TIMEOUT: StdDuration = StdDuration::from_secs(30);

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

#[derive(Debug, Args)]
pub struct HoldsArgs {
    #[command(subcommand)]
    pub command: Option<HoldsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum HoldsCommand {
    /// Release the holds of PROVIDER (on ACCOUNT, else on every account of it): its
    /// loops are due again at once. For when you know the limit was lifted.
    Clear(HoldsClearArgs),
}

#[derive(Debug, Args)]
pub struct HoldsClearArgs {
    /// The agent CLI (claude, codex, …).
    pub provider: String,
    /// The account profile (`default` for agents without --account).
    pub account: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// Set the budget of KEY (`provider=NAME[,account=PROFILE]`; without an account,
    /// every account of the provider): the limits given replace the key's.
    Set(BudgetSetArgs),
    /// The store-wide budgets, each against its spend in its current window.
    List,
    /// Remove the budget of exactly KEY (its loops are no longer held by it).
    Clear(BudgetClearArgs),
}

#[derive(Debug, Args)]
pub struct BudgetSetArgs {
    /// `provider=claude` or `provider=claude,account=work`.
    pub key: String,
    /// Tokens (input + output) per UTC day or week: `N/day` or `N/week`.
    #[arg(long, value_name = "N/WINDOW")]
    pub tokens: Option<String>,
    /// US dollars (the reported cost) per UTC day or week: `X/day` or `X/week`.
    #[arg(long, value_name = "X/WINDOW")]
    pub usd: Option<String>,
}

#[derive(Debug, Args)]
pub struct BudgetClearArgs {
    /// `provider=claude` or `provider=claude,account=work`.
    pub key: String,
}

#[derive(Debug, Args)]
pub struct SuperviseArgs {
    /// The supervise dir (`<data dir>/supervise`).
    pub dir: std::path::PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy everything (loops, workflow specs, runs, workflow runs, notification
    /// deliveries, events) from the data dir's SQLite store into a PostgreSQL
    /// database — or, with --store postgres://… and --to sqlite:PATH, from PostgreSQL
    /// into a SQLite file — keeping ids and history; refuses a target that holds data
    /// unless --force.
    Copy(StoreCopyArgs),
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where to write the copy (default: <data dir>/backups/loops-manual-<UTC time>.db).
    pub file: Option<std::path::PathBuf>,
    /// Replace FILE if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup to restore (a file `loops backup` wrote, or a kept one in
    /// <data dir>/backups).
    pub file: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct StoreCopyArgs {
    /// The target database: a postgres:// URL (LOOPS_STORE does not name it), or
    /// sqlite:PATH for a SQLite file (from a PostgreSQL --store).
    #[arg(long, value_name = "URL")]
    pub to: StoreArg,
    /// Replace what the target holds (refused while a runner is live there).
    #[arg(long)]
    pub force: bool,
    /// Only read the source and print the counts; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (IP:PORT; port 0 picks a free one).
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:7077")]
    pub addr: std::net::SocketAddr,
    /// Allow listening on an address other hosts can reach (anyone with the token can
    /// then read every output and start any command as you).
    #[arg(long)]
    pub allow_remote: bool,
    /// Allow browser pages of this origin to call the API (CORS); repeatable. None by
    /// default: no CORS headers at all.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Print the API token (creating it when there is none) and exit.
    #[arg(long)]
    pub print_token: bool,
    /// How often the event log is polled for new events, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000), hide = true)]
    pub events_poll_ms: u64,
    /// Most connections open at once (kept below the open-files limit); beyond it a
    /// new connection closes the oldest one that has not shown the token.
    #[arg(long, value_name = "N", default_value_t = loops_http::DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: usize,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Allow the tools that run, pause, resume, stop, remove or reschedule what is
    /// defined, and run or cancel workflows (without it they are listed but refuse).
    #[arg(long, env = "LOOPS_MCP_ALLOW_MUTATIONS", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_mutations: bool,
    /// Also allow defining or changing what runs: commands (argv or shell), agents,
    /// a target's env, cwd or account, notification commands. This is code execution
    /// as you. Includes --allow-mutations.
    #[arg(long, env = "LOOPS_MCP_ALLOW_CODE", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_code: bool,
    /// Removed: refused with what to use instead (--allow-code).
    #[arg(long, env = "LOOPS_MCP_ALLOW_SHELL", value_parser = clap::builder::FalseyValueParser::new(), hide = true)]
    pub allow_shell: bool,
    /// Allow showOutput to reveal prompts, env values and run output, and notifyUrl
    /// to send runs to a webhook (without it they stay redacted, as in the CLI
    /// without --show-output).
    #[arg(long, env = "LOOPS_MCP_ALLOW_SECRETS", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_secrets: bool,
}

#[derive(Debug, Args)]
pub struct RunNowArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// Print the run's stdout and stderr.
    #[arg(long)]
    pub show_output: bool,
    /// With the output, every byte as captured: to a terminal, a run's output
    /// otherwise passes only its colours (other control characters shown escaped).
    #[arg(long, requires = "show_output")]
    pub raw: bool,
    /// Start the run even while another run of the loop is in flight (by default a
    /// loop with overlap `skip` refuses a second concurrent run).
    #[arg(long)]
    pub allow_overlap: bool,
    /// Ask a live runner of the store (PostgreSQL) to run it, instead of running it in
    /// this process; waits for the run to end, as without.
    #[arg(long)]
    pub on_runner: bool,
    /// With --on-runner: how long a runner may take to start it before the request is
    /// withdrawn.
    #[arg(long, value_name = "DURATION", default_value_t = Span(DEFAULT_RUNNER_WAIT), requires = "on_runner")]
    pub runner_wait: Span,
}

#[derive(Debug, Args)]
pub struct TickArgs {
    /// Most runs executing at once (at least 1).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT)]
    pub max_concurrent: NonZeroUsize,
}

#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Only loops with this label (repeatable: loops with all of them).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Start with this filter: words that must all match (part of the name,
    /// label:NAME, status:WORD).
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// Order of the loops: name, next, health or status.
    #[arg(long, value_name = "KEY")]
    pub sort: Option<String>,
    /// Show what failed runs quoted from their output in their error lines.
    #[arg(long)]
    pub show_output: bool,
    /// Print one snapshot and exit (with --json, the view's model as JSON); needs no
    /// terminal.
    #[arg(long)]
    pub once: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Only loops with this label (repeatable: loops with all of them); the workflow
    /// specs exported are then the ones those loops run.
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Include env values and notification URLs; without it they are left out (null)
    /// and named in the bundle's "redacted" list.
    #[arg(long)]
    pub include_secrets: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).multiple(false)))]
pub struct ImportArgs {
    /// A bundle written by `loops export` (`-` reads stdin).
    #[arg(group = "source", value_name = "BUNDLE")]
    pub bundle: Option<PathBuf>,
    /// An OpenLoops 0.3 database (its loops.db), opened read-only.
    #[arg(long, group = "source", value_name = "PATH")]
    pub from_openloops: Option<PathBuf>,
    /// Write the import, all of it in one transaction or nothing; without it only
    /// the preview is printed.
    #[arg(long)]
    pub apply: bool,
    /// Also bring over the finished runs of the imported loops (OpenLoops only).
    #[arg(long, requires = "from_openloops")]
    pub with_history: bool,
    /// A loop or workflow named like one here: fail (default: refuse the import),
    /// skip (keep the one here), rename (import it as NAME-2, NAME-3, ...).
    #[arg(long, value_name = "POLICY", default_value = "fail")]
    pub on_conflict: String,
    /// Import loops and steps whose secrets the bundle left out without those
    /// variables (otherwise such an import is refused until they are filled in).
    #[arg(long)]
    pub drop_redacted: bool,
    /// Import loops that require runner labels (`--on`, JSON `runsOn`) without them:
    /// a SQLite store has no runners, so such an import is refused there otherwise.
    #[arg(long)]
    pub drop_runner_labels: bool,
    /// Import every loop paused (e.g. while the old machine still runs them).
    #[arg(long)]
    pub paused: bool,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Runs that finished in the last DURATION.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = duration)]
    pub since: Duration,
    /// Group by loop, provider or day (UTC).
    #[arg(long, value_name = "GROUP", default_value = "loop")]
    pub by: String,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Delete finished runs older than DURATION.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub older_than: Option<Duration>,
    /// Keep the newest N runs of every loop.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Delete all but the newest N backups of each kind (manual, before-restore,
    /// before-migration) in <data dir>/backups; alone, prunes only backups.
    #[arg(long, value_name = "N")]
    pub keep_backups: Option<usize>,
    /// Only count what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Run the daemon in the foreground (logs to stderr).
    Run(DaemonRunArgs),
    /// Start the daemon in the background (pid file and log in the data dir).
    Start(DaemonRunArgs),
    /// Stop the daemon (SIGTERM), wait for it, and report. Runs in flight go on under
    /// their supervisors until the next daemon re-attaches (or their deadline passes),
    /// unless --terminate-runs.
    Stop(DaemonStopArgs),
    /// Replace the running daemon (a new binary, new flags) without interrupting its
    /// runs: the new daemon re-attaches to them. Takes the flags of `daemon run`; those
    /// given replace the running daemon's, the others are kept.
    Restart(DaemonRestartArgs),
    /// Show pid, uptime, lease, running runs and the next due loop.
    Status,
    /// Print the daemon log.
    Logs(DaemonLogsArgs),
    /// Install a systemd user unit (Linux) or LaunchAgent (macOS).
    Install(DaemonInstallArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DaemonRunArgs {
    /// Most runs executing at once (at least 1).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT)]
    pub max_concurrent: NonZeroUsize,
    /// Daemon lease TTL; a stalled daemon loses the store after this long.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value_t = Span(DEFAULT_LEASE_TTL))]
    pub lease_ttl: Span,
    /// Time running children get to finish at shutdown before being terminated.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value_t = Span(DEFAULT_SHUTDOWN_GRACE))]
    pub shutdown_grace: Span,
    /// Time between SIGTERM and SIGKILL when a run is stopped.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value_t = Span(DEFAULT_KILL_GRACE))]
    pub kill_grace: Span,
    /// Retention: keep at most N finished runs per loop (0 = no limit).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_KEEP_RUNS)]
    pub keep_runs: usize,
    /// Retention: delete finished runs older than DURATION ("0" = no age limit).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value_t = KeepFor(Some(DEFAULT_KEEP_FOR)))]
    pub keep_for: KeepFor,
    /// How often retention runs.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value_t = Span(DEFAULT_PRUNE_EVERY))]
    pub prune_every: Span,
    /// Longest sleep between scheduling passes, in milliseconds (OpenLoops 0.3's tick
    /// interval, accepted for compatibility). The daemon is event-driven: it wakes when
    /// a slot comes due or a command changes a loop, so the value only caps the
    /// longest sleep between scheduling passes (default: 60000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub interval_ms: Option<u64>,
    /// Limit of one notification: a --notify-cmd hook's run (then SIGTERM to its
    /// group), one HTTP try of a --notify-url webhook.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value_t = Span(DEFAULT_NOTIFY_TIMEOUT))]
    pub notify_timeout: Span,
    /// A label this daemon advertises as a runner of a PostgreSQL store (repeatable),
    /// e.g. `gpu` or `claude-auth`; shown by `loops runners`.
    #[arg(long = "runner-label", value_name = "LABEL")]
    pub runner_labels: Vec<String>,
    /// Most runs at once per provider, account profile or kind of loop, within
    /// --max-concurrent: KEY=VALUE:N items, comma-separated or repeated (a later one
    /// replaces an earlier one on its key), e.g. `provider=claude:2,account=work:1,
    /// kind=agent:4`; keys provider=<provider>, account=<profile>,
    /// kind=agent|command|workflow. A loop over a cap waits, still due, for a run on its
    /// key to end; on PostgreSQL the caps count every runner's runs.
    #[arg(long = "max-concurrent-per", value_name = "KEY=VALUE:N", value_parser = parse_caps)]
    pub max_concurrent_per: Vec<Caps>,
}

impl DaemonRunArgs {
    /// The caps of every `--max-concurrent-per`, the later replacing the earlier.
    pub fn caps(&self) -> Caps {
        let mut caps = Caps::new();
        for more in &self.max_concurrent_per {
            caps.merge(more);
        }
        caps
    }
}

fn parse_caps(text: &str) -> Result<Caps, String> {
    Caps::parse(text)
}

#[derive(Debug, Args)]
pub struct DaemonStopArgs {
    /// How long to wait for the daemon to exit.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value_t = Span(DEFAULT_STOP_TIMEOUT))]
    pub timeout: Span,
    /// Terminate the runs in flight (after --shutdown-grace) and record them, instead
    /// of leaving them to their supervisors.
    #[arg(long)]
    pub terminate_runs: bool,
}

#[derive(Debug, Args)]
pub struct DaemonRestartArgs {
    /// How long to wait for the running daemon to exit.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value_t = Span(DEFAULT_STOP_TIMEOUT))]
    pub timeout: Span,
    /// Flags of `daemon run` (e.g. `--max-concurrent 8`) replacing the running
    /// daemon's; a --runner-label replaces all of its labels.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "DAEMON RUN FLAGS"
    )]
    pub flags: Vec<String>,
}

/// `daemon run`'s flags on their own, to parse a recorded or given set of them.
#[derive(Debug, clap::Parser)]
#[command(name = "daemon run", args_override_self = true, no_binary_name = true)]
pub struct DaemonRunFlags {
    #[command(flatten)]
    pub args: DaemonRunArgs,
}

#[derive(Debug, Args)]
pub struct DaemonLogsArgs {
    /// Number of lines from the end.
    #[arg(short = 'n', long, default_value_t = 50)]
    pub lines: usize,
    /// Keep printing new lines.
    #[arg(short, long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct DaemonInstallArgs {
    /// Also enable and start the service (runs the printed commands).
    #[arg(long)]
    pub enable: bool,
}

#[derive(Debug, Subcommand)]
// Parsed once per process: the agent's flags being the most is not worth a box.
#[allow(clippy::large_enum_variant)]
pub enum CreateCommand {
    /// A loop that runs a shell command (or an executable with --no-shell).
    Command(CreateCommandArgs),
    /// A loop that runs a headless AI coding agent with a prompt.
    Agent(CreateAgentArgs),
    /// A loop that runs a stored workflow.
    Workflow(CreateWorkflowArgs),
}

/// Flags shared by every `create` subcommand.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("schedule").args(SCHEDULE_FLAGS).required(true).multiple(false)))]
pub struct CommonCreate {
    /// Unique loop name. Names that look like an id (12 lowercase hex characters) or
    /// like a prefix of an existing loop's id are refused: loops are resolved by exact
    /// id first, then exact name, then unambiguous id prefix.
    pub name: String,
    #[command(flatten)]
    pub def: DefinitionArgs,
}

/// The schedule flags: one of them on `create`, at most one on `edit`.
const SCHEDULE_FLAGS: [&str; 4] = ["at", "every", "cron", "dynamic"];

/// The flags of a loop's definition that every target type has, shared by `create`
/// and `edit` (on `edit`, a flag that is not given leaves its part as it is).
#[derive(Debug, Args)]
pub struct DefinitionArgs {
    /// One run at an instant: RFC 3339, local "YYYY-MM-DD HH:MM", or +DURATION.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub at: Option<String>,
    /// Run every DURATION (500ms, 30s, 15m, 1.5h, 2d).
    #[arg(
        long,
        value_name = "DURATION",
        allow_hyphen_values = true,
        value_parser = duration
    )]
    pub every: Option<Duration>,
    /// Five-field cron expression ("*/15 * * * *", "0 9 * * MON-FRI").
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// First run MIN_INTERVAL after creation, then MIN_INTERVAL after each run
    /// finishes (default 1m), no backfill.
    #[arg(long, value_name = "MIN_INTERVAL", num_args = 0..=1, default_missing_value = "1m", value_parser = duration)]
    pub dynamic: Option<Duration>,
    /// IANA time zone for --cron (default: this host's zone); stored canonical
    /// (europe/berlin → Europe/Berlin). Only with --cron.
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// Interval anchoring: fixed_rate (default) or fixed_delay. Only with --every.
    #[arg(long, value_name = "ANCHOR")]
    pub anchor: Option<String>,

    /// Missed slots after downtime: latest (default), all, none.
    #[arg(long, value_name = "POLICY")]
    pub catch_up: Option<String>,
    /// Most missed slots replayed with --catch-up all (default 10).
    #[arg(long, value_name = "N")]
    pub catch_up_limit: Option<u32>,
    /// While a run is active: skip (default, records a skipped run) or allow.
    #[arg(long, value_name = "POLICY")]
    pub overlap: Option<String>,
    /// Attempts per slot, including the first (default 1).
    #[arg(long, value_name = "N")]
    pub attempts: Option<u32>,
    /// Delay before retrying a failed slot (default 1m).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub retry_delay: Option<Duration>,
    /// How retries back off: fixed (default: --retry-delay each time) or exponential
    /// (doubling per attempt, full jitter, capped at --retry-delay-max). Rate limits and
    /// overloads wait 4× longer; auth and context-length failures are not retried.
    #[arg(long, value_name = "KIND")]
    pub retry_backoff: Option<String>,
    /// Longest delay before a retry (default 6h).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub retry_delay_max: Option<Duration>,
    /// Park the loop (paused, with the reason, one notification) after N consecutive
    /// failed slots; `resume` starts a fresh streak.
    #[arg(long, value_name = "N")]
    pub max_failures: Option<u32>,
    /// Stop condition: after each successful run, run CMD by /bin/sh in the loop's cwd
    /// with its env (bounded by its timeout, else 10m); exit 0 ends the loop (status
    /// done, with the reason, one notification).
    #[arg(long, value_name = "CMD")]
    pub until_cmd: Option<String>,
    /// Stop condition: the loop ends when a successful run's summary (agents) or
    /// stdout (commands, workflows) matches REGEX (Rust regex syntax).
    #[arg(long, value_name = "REGEX", allow_hyphen_values = true)]
    pub until_output: Option<String>,
    /// Stop condition: the loop ends once N of its slots have ended, whatever their
    /// outcome (`resume` starts a fresh count).
    #[arg(long, value_name = "N")]
    pub max_runs: Option<u32>,
    /// (agent loops) Budget: tokens (input + output) the loop's runs may use per UTC
    /// day or week (`200000/day`); once spent the loop is held until the window resets.
    #[arg(long, value_name = "N/WINDOW")]
    pub budget_tokens: Option<String>,
    /// (agent loops) Budget: US dollars (the reported cost) per UTC day or week
    /// (`5/week`; runs without a cost count 0).
    #[arg(long, value_name = "X/WINDOW")]
    pub budget_usd: Option<String>,
    /// Lease of a running row before it is presumed dead (default 30m).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub lease: Option<Duration>,
    /// Stop scheduling after this instant (status becomes expired).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub expires_at: Option<String>,
    /// Free-text description (at most 4 KiB).
    #[arg(short = 'd', long = "description", value_name = "TEXT")]
    pub description: Option<String>,

    /// Working directory of the run; stored absolute (relative to the current
    /// directory, a leading ~/ is $HOME).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Kill the run after DURATION (omit for no limit).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = timeout)]
    pub timeout: Option<Duration>,
    /// Terminate the run (recorded timed_out, "no output for DURATION") once it printed
    /// nothing on stdout or stderr for DURATION (command and agent loops).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = timeout)]
    pub idle_timeout: Option<Duration>,
    /// Extra environment variable (repeatable, each key once; values at most 64 KiB).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// OpenAccounts profile to run under.
    #[arg(long, value_name = "PROFILE")]
    pub account: Option<String>,
    /// Tool whose credentials the account provides (default from the provider).
    #[arg(long, value_name = "TOOL", requires = "account")]
    pub account_tool: Option<String>,
    /// Check that the target can start (executable on PATH, accounts) before saving.
    #[arg(long)]
    pub preflight: bool,
    /// A label (repeatable): lowercase letters, digits, '.', '_', '-' (≤ 64 bytes).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Run only on a runner advertising this label (`daemon run --runner-label`;
    /// repeatable: a runner with all of them; PostgreSQL stores).
    #[arg(long = "on", value_name = "LABEL")]
    pub runs_on: Vec<String>,
    /// Start each slot a stable pseudo-random delay in [0, DURATION) after its time
    /// (shorter than the loop's period).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub jitter: Option<Duration>,
    /// Run this command (by /bin/sh) with the run as JSON on stdin when a slot ends as
    /// --notify-on says (by default: when it failed).
    #[arg(long, value_name = "CMD")]
    pub notify_cmd: Option<String>,
    /// POST the run as JSON to this http(s) URL when a slot ends as --notify-on says.
    #[arg(long, value_name = "URL")]
    pub notify_url: Option<String>,
    /// When notifications fire: failure (default: a slot failed on its last attempt),
    /// recovery (the first success after one), changes (both) or always (every
    /// finished slot).
    #[arg(long, value_name = "WHEN")]
    pub notify_on: Option<String>,
}

#[derive(Debug, Args)]
pub struct CreateCommandArgs {
    #[command(flatten)]
    pub common: CommonCreate,
    /// The command line (run by /bin/sh unless --no-shell); with ARGS at most 64 KiB.
    #[arg(long, value_name = "COMMAND")]
    pub cmd: String,
    /// Execute the command directly; arguments go after `--` (given arguments, it is
    /// executed directly anyway).
    #[arg(long)]
    pub no_shell: bool,
    /// Arguments: the command is then executed directly, not by /bin/sh.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CreateAgentArgs {
    #[command(flatten)]
    pub common: CommonCreate,
    /// claude, cursor, codewith, aicopilot, opencode or codex.
    #[arg(long, value_name = "PROVIDER")]
    pub provider: String,
    /// The prompt, written to the agent's stdin (at most 1 MiB).
    #[arg(
        long,
        value_name = "TEXT",
        conflicts_with = "prompt_file",
        required_unless_present = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// Read the prompt from a file (at most 1 MiB; stored as text, with its absolute
    /// path).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    #[command(flatten)]
    pub options: AgentOptions,
}

/// Agent flags shared by `create agent` and `edit`.
#[derive(Debug, Args)]
pub struct AgentOptions {
    /// Model name passed to the provider.
    #[arg(long)]
    pub model: Option<String>,
    /// Provider agent/persona name.
    #[arg(long)]
    pub agent: Option<String>,
    /// codewith auth profile.
    #[arg(long, value_name = "PROFILE")]
    pub auth_profile: Option<String>,
    /// safe (default: ignore user config) or none.
    #[arg(long, value_name = "MODE")]
    pub config_isolation: Option<String>,
    /// Provider config override KEY=VALUE (repeatable, each key once; codex and
    /// codewith, passed as `-c KEY=VALUE`, VALUE parsed as TOML), e.g.
    /// model_provider=mock.
    #[arg(long = "config-override", value_name = "KEY=VALUE")]
    pub config_overrides: Vec<String>,
    /// fresh (default: each run starts a new conversation) or continue (each run
    /// resumes the conversation the previous run reported; claude, codex, opencode).
    #[arg(long, value_name = "MODE")]
    pub session: Option<String>,
    /// Account profiles to run under, comma-separated (instead of --account): each run
    /// takes the least-loaded one no usage limit holds and no cap stops, in pool order
    /// on a tie; a usage limit holds that account only.
    #[arg(
        long,
        value_name = "PROFILES",
        value_delimiter = ',',
        conflicts_with = "account"
    )]
    pub account_pool: Vec<String>,
    /// claude's permission mode: acceptEdits, auto, bypassPermissions, manual,
    /// dontAsk or plan.
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// codex's sandbox: read-only, workspace-write (the default) or
    /// danger-full-access.
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,
    /// Reasoning effort: claude low, medium, high, xhigh, max; codex low, medium,
    /// high, xhigh, max, ultra (as -c model_reasoning_effort).
    #[arg(long, value_name = "LEVEL")]
    pub effort: Option<String>,
    /// opencode's model variant (provider-specific reasoning effort, e.g. high).
    #[arg(long, value_name = "NAME")]
    pub variant: Option<String>,
    /// Another directory the agent may use (repeatable; claude, codex).
    #[arg(long = "add-dir", value_name = "DIR")]
    pub add_dirs: Vec<String>,
    /// claude: stop after this many turns.
    #[arg(long, value_name = "N")]
    pub max_turns: Option<u32>,
    /// claude: a tool rule the agent may use without asking (repeatable), e.g.
    /// 'Bash(git:*)'.
    #[arg(long = "allow-tool", value_name = "RULE")]
    pub allow_tools: Vec<String>,
    /// claude: a tool rule the agent is denied (repeatable), e.g. WebFetch.
    #[arg(long = "deny-tool", value_name = "RULE")]
    pub deny_tools: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CreateWorkflowArgs {
    #[command(flatten)]
    pub common: CommonCreate,
    /// Name of the stored workflow to run (an active workflow of that name must exist).
    #[arg(long, value_name = "WORKFLOW")]
    pub workflow: String,
    /// A value for one of the workflow's params, for every run of this loop
    /// (repeatable; checked against the spec).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only loops with this status (active, paused, stopped, expired, done, archived).
    #[arg(long, conflicts_with = "all")]
    pub status: Option<String>,
    /// Include archived loops.
    #[arg(long)]
    pub all: bool,
    /// Only loops with this label (repeatable: loops with all of them).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Reveal prompts and env values in the output.
    #[arg(long)]
    pub show_output: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// Reveal the prompt and env values.
    #[arg(long)]
    pub show_output: bool,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this loop.
    pub r#loop: Option<String>,
    /// At most N runs (default 20; 0 = all).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Include stdout and stderr.
    #[arg(long)]
    pub show_output: bool,
    /// With the output, every byte as captured: to a terminal, a run's output
    /// otherwise passes only its colours (other control characters shown escaped).
    #[arg(long, requires = "show_output")]
    pub raw: bool,
    /// Only runs with this status (repeatable: any of them): running, succeeded,
    /// failed, timed_out, abandoned, skipped.
    #[arg(long = "status", value_name = "STATUS")]
    pub statuses: Vec<String>,
    /// Only runs started at or after this: a duration ago (1d, 2h) or an instant
    /// (RFC 3339, local "YYYY-MM-DD HH:MM").
    #[arg(long, value_name = "DURATION|TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only runs started before this: a duration ago or an instant, as --since.
    #[arg(long, value_name = "DURATION|TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Only runs of loops with this label (repeatable: loops with all of them).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Keep printing runs as they start and end, until interrupted (polls the store
    /// four times a second; with --json, one JSON object per line). Takes a loop but
    /// not the other filters.
    #[arg(long, conflicts_with_all = ["statuses", "since", "until", "labels", "limit"])]
    pub follow: bool,
}

/// `loops edit`: the loop, then any flag of `create` (a flag not given leaves its
/// part as it is), and the flags that take things away. Removals and clears apply
/// first, then the flags that set values.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("schedule").args(SCHEDULE_FLAGS).multiple(false)))]
pub struct EditArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    #[command(flatten)]
    pub def: DefinitionArgs,
    /// Remove a label (repeatable; a label the loop does not have is ignored).
    #[arg(long = "unlabel", value_name = "NAME")]
    pub unlabels: Vec<String>,
    /// Remove an environment variable (repeatable).
    #[arg(long = "unset-env", value_name = "KEY")]
    pub unset_env: Vec<String>,
    /// Clear a setting (repeatable): description, cwd, timeout, env, account, args,
    /// model, agent, auth-profile, config-overrides, expires-at, jitter, labels,
    /// notify (all notification settings), notify-cmd, notify-url, max-failures,
    /// idle-timeout, until-cmd, until-output, max-runs, session (back to fresh),
    /// budget-tokens, budget-usd, account-pool, permission-mode, sandbox, effort,
    /// variant, add-dirs, max-turns, allow-tools, deny-tools.
    #[arg(long = "clear", value_name = "FIELD", value_enum)]
    pub clear: Vec<ClearField>,

    /// (command loops) The command line.
    #[arg(long, value_name = "COMMAND")]
    pub cmd: Option<String>,
    /// (command loops) Execute the command directly; arguments go after `--`.
    #[arg(long, conflicts_with = "shell")]
    pub no_shell: bool,
    /// (command loops) Run the command by /bin/sh again.
    #[arg(long)]
    pub shell: bool,
    /// (command loops) Arguments for --no-shell commands (replacing the stored ones).
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,

    /// (agent loops) claude, cursor, codewith, aicopilot, opencode or codex.
    #[arg(long, value_name = "PROVIDER")]
    pub provider: Option<String>,
    /// (agent loops) The prompt, written to the agent's stdin (at most 1 MiB).
    #[arg(long, value_name = "TEXT", conflicts_with = "prompt_file")]
    pub prompt: Option<String>,
    /// (agent loops) Read the prompt from a file (at most 1 MiB).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    #[command(flatten)]
    pub agent: AgentOptions,

    /// (workflow loops) Name of the stored workflow to run (an active workflow).
    #[arg(long, value_name = "WORKFLOW")]
    pub workflow: Option<String>,
    /// (workflow loops) Set a value for one of the workflow's params (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// (workflow loops) Remove a param's value: the spec's default applies (repeatable).
    #[arg(long = "unset-param", value_name = "NAME")]
    pub unset_params: Vec<String>,
}

/// What `edit --clear` can clear (the runtime's [`definition::ClearField`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClearField {
    Description,
    Cwd,
    Timeout,
    Env,
    Account,
    Args,
    Model,
    Agent,
    AuthProfile,
    ConfigOverrides,
    ExpiresAt,
    Jitter,
    Labels,
    On,
    Notify,
    NotifyCmd,
    NotifyUrl,
    MaxFailures,
    IdleTimeout,
    UntilCmd,
    UntilOutput,
    MaxRuns,
    Session,
    BudgetTokens,
    BudgetUsd,
    AccountPool,
    PermissionMode,
    Sandbox,
    Effort,
    Variant,
    AddDirs,
    MaxTurns,
    AllowTools,
    DenyTools,
}

#[derive(Debug, Args)]
pub struct RenameArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// The new name (the rules of `create`: unique, not shaped like an id).
    pub new_name: String,
}

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// Also free the name for a new loop: the archived loop is renamed NAME~ID.
    #[arg(long)]
    pub free_name: bool,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// Stop the loop's runs in flight first (SIGTERM to their process groups, SIGKILL
    /// after the kill grace), then remove it.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct LoopArg {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh or fish.
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    /// Check a workflow spec file (at most 1 MiB) without storing it.
    Validate(WorkflowFileArgs),
    /// Store a workflow spec from a JSON file (at most 1 MiB).
    Create(WorkflowCreateArgs),
    /// List active workflows (--all or --status archived for archived versions).
    List(WorkflowListArgs),
    /// Show one workflow spec.
    Show(WorkflowArg),
    /// Run a workflow now, in this process; exits non-zero unless it succeeds.
    Run(WorkflowRunArgs),
    /// List workflow runs, newest first.
    Runs(WorkflowRunsArgs),
    /// Show a workflow run: its DAG with each step's state, and its events.
    Inspect(WorkflowRunArg),
    /// Print a workflow run's event log.
    Events(WorkflowEventsArgs),
    /// Stop a running workflow run (from any process).
    Cancel(WorkflowReasonArgs),
    /// Reset steps whose processes are gone to pending, for the next attempt.
    Recover(WorkflowReasonArgs),
    /// Archive a workflow (loops naming it stop finding it).
    Archive(WorkflowArg),
}

#[derive(Debug, Args)]
pub struct WorkflowFileArgs {
    /// Path of the JSON spec.
    pub file: PathBuf,
    /// Override the spec's name.
    #[arg(long)]
    pub name: Option<String>,
    /// Also check that every step's target can start here.
    #[arg(long)]
    pub preflight: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowCreateArgs {
    #[command(flatten)]
    pub file: WorkflowFileArgs,
    /// Archive the active spec of the same name and store this one as a new version.
    #[arg(long)]
    pub replace: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowListArgs {
    /// Only workflows with this status (active, archived; default active).
    #[arg(long, conflicts_with = "all")]
    pub status: Option<String>,
    /// Include archived versions.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowArg {
    /// The workflow: its exact id, else an active workflow's exact name, else an
    /// unambiguous id prefix.
    pub workflow: String,
}

#[derive(Debug, Args)]
pub struct WorkflowRunArgs {
    /// The workflow: its exact id, else an active workflow's exact name, else an
    /// unambiguous id prefix.
    pub workflow: String,
    /// Print every step's stdout and stderr.
    #[arg(long)]
    pub show_output: bool,
    /// With the output, every byte as captured: to a terminal, a run's output
    /// otherwise passes only its colours (other control characters shown escaped).
    #[arg(long, requires = "show_output")]
    pub raw: bool,
    /// Stop the whole run after DURATION (omit for no limit).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = timeout)]
    pub timeout: Option<Duration>,
    /// A value for one of the workflow's params (repeatable; checked against the spec:
    /// an unknown name or a missing required param is refused).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
}

#[derive(Debug, Args)]
pub struct WorkflowRunsArgs {
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// At most N runs (default 20; 0 = all).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct WorkflowRunArg {
    /// The workflow run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Include step output.
    #[arg(long)]
    pub show_output: bool,
    /// With the output, every byte as captured: to a terminal, a run's output
    /// otherwise passes only its colours (other control characters shown escaped).
    #[arg(long, requires = "show_output")]
    pub raw: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowEventsArgs {
    /// The workflow run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Only the last N events.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct WorkflowReasonArgs {
    /// The workflow run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Recorded with the event.
    #[arg(long)]
    pub reason: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Set the default (replacing any earlier one as a whole).
    Set(NotifySetArgs),
    /// Show the default.
    Show(NotifyShowArgs),
    /// Remove the default.
    Clear,
    /// Send a test notification now, through every channel of the default — or, with
    /// --loop, of the settings that apply to that loop; exit 1 when one fails.
    Test(NotifyTestArgs),
}

#[derive(Debug, Args)]
pub struct NotifySetArgs {
    /// Run this command (by /bin/sh) with the run as JSON on stdin.
    #[arg(long, value_name = "CMD")]
    pub notify_cmd: Option<String>,
    /// POST the run as JSON to this http(s) URL.
    #[arg(long, value_name = "URL")]
    pub notify_url: Option<String>,
    /// When notifications fire: failure (default: a slot failed on its last attempt),
    /// recovery (the first success after one), changes (both) or always (every
    /// finished slot).
    #[arg(long, value_name = "WHEN")]
    pub notify_on: Option<String>,
}

#[derive(Debug, Args)]
pub struct NotifyShowArgs {
    /// Show a webhook URL in full (its path is redacted otherwise).
    #[arg(long)]
    pub show_output: bool,
}

#[derive(Debug, Args)]
pub struct NotifyTestArgs {
    /// Test the settings that apply to this loop (its own, else the default), with its
    /// newest run in the payload.
    #[arg(long = "loop", value_name = "LOOP")]
    pub r#loop: Option<String>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Keep printing output as it is written until the run ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Print stderr instead of stdout.
    #[arg(long)]
    pub stderr: bool,
    /// Every byte as captured: to a terminal, the output otherwise passes only its
    /// colours (other control characters shown escaped); to a pipe it is exact anyway.
    #[arg(long)]
    pub raw: bool,
}

/// The clap flags as the runtime's plain flags (`loops_runtime::definition`), which
/// the MCP tools fill from their parameters too.
impl DefinitionArgs {
    pub fn flags(&self) -> definition::DefinitionFlags {
        definition::DefinitionFlags {
            at: self.at.clone(),
            every: self.every,
            cron: self.cron.clone(),
            dynamic: self.dynamic,
            tz: self.tz.clone(),
            anchor: self.anchor.clone(),
            catch_up: self.catch_up.clone(),
            catch_up_limit: self.catch_up_limit,
            overlap: self.overlap.clone(),
            attempts: self.attempts,
            retry_delay: self.retry_delay,
            lease: self.lease,
            expires_at: self.expires_at.clone(),
            description: self.description.clone(),
            cwd: self.cwd.clone(),
            timeout: self.timeout,
            idle_timeout: self.idle_timeout,
            env: self.env.clone(),
            account: self.account.clone(),
            account_tool: self.account_tool.clone(),
            preflight: self.preflight,
            labels: self.labels.clone(),
            runs_on: self.runs_on.clone(),
            jitter: self.jitter,
            notify_cmd: self.notify_cmd.clone(),
            notify_url: self.notify_url.clone(),
            notify_on: self.notify_on.clone(),
            retry_backoff: self.retry_backoff.clone(),
            retry_delay_max: self.retry_delay_max,
            max_failures: self.max_failures,
            until_cmd: self.until_cmd.clone(),
            until_output: self.until_output.clone(),
            max_runs: self.max_runs,
            budget_tokens: self.budget_tokens.clone(),
            budget_usd: self.budget_usd.clone(),
        }
    }
}

impl AgentOptions {
    pub fn flags(&self) -> definition::AgentOptions {
        definition::AgentOptions {
            model: self.model.clone(),
            agent: self.agent.clone(),
            auth_profile: self.auth_profile.clone(),
            config_isolation: self.config_isolation.clone(),
            config_overrides: self.config_overrides.clone(),
            session: self.session.clone(),
            account_pool: self.account_pool.clone(),
            permission_mode: self.permission_mode.clone(),
            sandbox: self.sandbox.clone(),
            effort: self.effort.clone(),
            variant: self.variant.clone(),
            add_dirs: self.add_dirs.clone(),
            max_turns: self.max_turns,
            allow_tools: self.allow_tools.clone(),
            deny_tools: self.deny_tools.clone(),
        }
    }
}

impl From<ClearField> for definition::ClearField {
    fn from(field: ClearField) -> Self {
        use definition::ClearField as F;
        use loops_core::provider_options::ProviderOption as P;
        match field {
            ClearField::Description => F::Description,
            ClearField::Cwd => F::Cwd,
            ClearField::Timeout => F::Timeout,
            ClearField::Env => F::Env,
            ClearField::Account => F::Account,
            ClearField::Args => F::Args,
            ClearField::Model => F::Model,
            ClearField::Agent => F::Agent,
            ClearField::AuthProfile => F::AuthProfile,
            ClearField::ConfigOverrides => F::ConfigOverrides,
            ClearField::ExpiresAt => F::ExpiresAt,
            ClearField::Jitter => F::Jitter,
            ClearField::Labels => F::Labels,
            ClearField::On => F::On,
            ClearField::Notify => F::Notify,
            ClearField::NotifyCmd => F::NotifyCmd,
            ClearField::NotifyUrl => F::NotifyUrl,
            ClearField::MaxFailures => F::MaxFailures,
            ClearField::IdleTimeout => F::IdleTimeout,
            ClearField::UntilCmd => F::UntilCmd,
            ClearField::UntilOutput => F::UntilOutput,
            ClearField::MaxRuns => F::MaxRuns,
            ClearField::Session => F::Session,
            ClearField::BudgetTokens => F::BudgetTokens,
            ClearField::BudgetUsd => F::BudgetUsd,
            ClearField::AccountPool => F::AccountPool,
            ClearField::PermissionMode => F::Provider(P::PermissionMode),
            ClearField::Sandbox => F::Provider(P::Sandbox),
            ClearField::Effort => F::Provider(P::Effort),
            ClearField::Variant => F::Provider(P::Variant),
            ClearField::AddDirs => F::Provider(P::AddDir),
            ClearField::MaxTurns => F::Provider(P::MaxTurns),
            ClearField::AllowTools => F::Provider(P::AllowTool),
            ClearField::DenyTools => F::Provider(P::DenyTool),
        }
    }
}

impl EditArgs {
    pub fn flags(&self) -> definition::EditFlags {
        definition::EditFlags {
            def: self.def.flags(),
            unlabels: self.unlabels.clone(),
            unset_env: self.unset_env.clone(),
            clear: self.clear.iter().map(|f| (*f).into()).collect(),
            cmd: self.cmd.clone(),
            no_shell: self.no_shell,
            shell: self.shell,
            args: self.args.clone(),
            provider: self.provider.clone(),
            prompt: self.prompt.clone(),
            prompt_file: self.prompt_file.clone(),
            agent: self.agent.flags(),
            workflow: self.workflow.clone(),
            params: self.params.clone(),
            unset_params: self.unset_params.clone(),
        }
    }
}
