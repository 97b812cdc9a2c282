//! `loops daemon …`: the subcommands and their flags (the help text is their doc
//! comments); every default is the runtime's own constant.

use crate::cli::{KeepFor, Span};
use clap::{Args, Subcommand};
use loops_core::caps::Caps;
use loops_runtime::daemon::DEFAULT_KEEP_FOR;
use loops_runtime::daemon::DEFAULT_KEEP_RUNS;
use loops_runtime::daemon::DEFAULT_LEASE_TTL;
use loops_runtime::daemon::DEFAULT_PRUNE_EVERY;
use loops_runtime::daemon::DEFAULT_SHUTDOWN_GRACE;
use loops_runtime::engine::DEFAULT_MAX_CONCURRENT;
use loops_runtime::executor::DEFAULT_KILL_GRACE;
use loops_runtime::notify::DEFAULT_NOTIFY_TIMEOUT;
use std::num::NonZeroUsize;
use std::time::Duration as StdDuration;

/// How long `daemon stop` waits for the daemon to exit, unless `--timeout` says.
pub const DEFAULT_STOP_TIMEOUT: StdDuration = StdDuration::from_secs(30);

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
