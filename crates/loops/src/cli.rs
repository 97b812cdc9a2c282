//! Command-line definition (clap derive). Doc comments here are the help text.
//! Parsing only: turning flags into validated domain requests happens in `commands`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

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
    /// Re-activate a paused or stopped loop.
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
    /// Delete old finished runs.
    Prune(PruneArgs),
    /// Run and control the background daemon.
    #[command(subcommand)]
    Daemon(DaemonCommand),
    /// Define, run and inspect workflows (DAGs of steps).
    #[command(subcommand)]
    Workflows(WorkflowsCommand),
    /// Print shell completions.
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct RunNowArgs {
    /// Loop name, id, or unambiguous id prefix.
    pub r#loop: String,
    /// Print the run's stdout and stderr.
    #[arg(long)]
    pub show_output: bool,
    /// Start the run even while another run of the loop is in flight (by default a
    /// loop with overlap `skip` refuses a second concurrent run).
    #[arg(long)]
    pub allow_overlap: bool,
}

#[derive(Debug, Args)]
pub struct TickArgs {
    /// Most runs executing at once.
    #[arg(long, value_name = "N", default_value_t = loops_runtime::engine::DEFAULT_MAX_CONCURRENT)]
    pub max_concurrent: usize,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Delete finished runs older than DURATION.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub older_than: Option<String>,
    /// Keep the newest N runs of every loop.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
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
    /// Stop the daemon (SIGTERM), wait for it, and report.
    Stop(DaemonStopArgs),
    /// Show pid, uptime, lease, running runs and the next due loop.
    Status,
    /// Print the daemon log.
    Logs(DaemonLogsArgs),
    /// Install a systemd user unit (Linux) or LaunchAgent (macOS).
    Install(DaemonInstallArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DaemonRunArgs {
    /// Most runs executing at once.
    #[arg(long, value_name = "N", default_value_t = loops_runtime::engine::DEFAULT_MAX_CONCURRENT)]
    pub max_concurrent: usize,
    /// Daemon lease TTL; a stalled daemon loses the store after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub lease_ttl: String,
    /// Time running children get to finish at shutdown before being terminated.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub shutdown_grace: String,
    /// Time between SIGTERM and SIGKILL when a run is stopped.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub kill_grace: String,
    /// Retention: keep at most N finished runs per loop (0 = no limit).
    #[arg(long, value_name = "N", default_value_t = loops_runtime::daemon::DEFAULT_KEEP_RUNS)]
    pub keep_runs: usize,
    /// Retention: delete finished runs older than DURATION ("0" = no age limit).
    #[arg(long, value_name = "DURATION", default_value = "30d")]
    pub keep_for: String,
    /// How often retention runs.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub prune_every: String,
    /// Longest sleep between scheduling passes, in milliseconds (OpenLoops 0.3's tick
    /// interval, accepted for compatibility). The daemon is event-driven: it wakes when
    /// a slot comes due or a command changes a loop, so the value only caps the
    /// longest sleep between scheduling passes (default: 60000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub interval_ms: Option<u64>,
}

#[derive(Debug, Args)]
pub struct DaemonStopArgs {
    /// How long to wait for the daemon to exit.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub timeout: String,
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
#[command(group(clap::ArgGroup::new("schedule").required(true).multiple(false)))]
pub struct CommonCreate {
    /// Unique loop name. Names that look like an id (12 lowercase hex characters) or
    /// like a prefix of an existing loop's id are refused: loops are resolved by exact
    /// id first, then exact name, then unambiguous id prefix.
    pub name: String,

    /// One run at an instant: RFC 3339, local "YYYY-MM-DD HH:MM", or +DURATION.
    #[arg(
        long,
        group = "schedule",
        value_name = "TIME",
        allow_hyphen_values = true
    )]
    pub at: Option<String>,
    /// Run every DURATION (500ms, 30s, 15m, 1.5h, 2d).
    #[arg(
        long,
        group = "schedule",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub every: Option<String>,
    /// Five-field cron expression ("*/15 * * * *", "0 9 * * MON-FRI").
    #[arg(long, group = "schedule", value_name = "EXPR")]
    pub cron: Option<String>,
    /// First run MIN_INTERVAL after creation, then MIN_INTERVAL after each run
    /// finishes (default 1m), no backfill.
    #[arg(long, group = "schedule", value_name = "MIN_INTERVAL", num_args = 0..=1, default_missing_value = "1m")]
    pub dynamic: Option<String>,
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
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub retry_delay: Option<String>,
    /// Lease of a running row before it is presumed dead (default 30m).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub lease: Option<String>,
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
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub timeout: Option<String>,
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
}

#[derive(Debug, Args)]
pub struct CreateCommandArgs {
    #[command(flatten)]
    pub common: CommonCreate,
    /// The command line (run by /bin/sh unless --no-shell); with ARGS at most 64 KiB.
    #[arg(long, value_name = "COMMAND")]
    pub cmd: String,
    /// Execute the command directly; arguments go after `--`.
    #[arg(long)]
    pub no_shell: bool,
    /// Arguments for --no-shell commands.
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
}

#[derive(Debug, Args)]
pub struct CreateWorkflowArgs {
    #[command(flatten)]
    pub common: CommonCreate,
    /// Name of the stored workflow to run (an active workflow of that name must exist).
    #[arg(long, value_name = "WORKFLOW")]
    pub workflow: String,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only loops with this status (active, paused, stopped, expired).
    #[arg(long)]
    pub status: Option<String>,
    /// Reveal prompts and env values in the output.
    #[arg(long)]
    pub show_output: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Loop id, name, or unambiguous id prefix (tried in that order).
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
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// Loop name, id, or unambiguous id prefix.
    pub r#loop: String,
    /// Stop the loop's runs in flight first (SIGTERM to their process groups, SIGKILL
    /// after the kill grace), then remove it.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct LoopArg {
    /// Loop id, name, or unambiguous id prefix (tried in that order).
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
    /// Workflow id, active name, or unambiguous id prefix (tried in that order).
    pub workflow: String,
}

#[derive(Debug, Args)]
pub struct WorkflowRunArgs {
    /// Workflow id, active name, or unambiguous id prefix (tried in that order).
    pub workflow: String,
    /// Print every step's stdout and stderr.
    #[arg(long)]
    pub show_output: bool,
    /// Stop the whole run after DURATION (omit for no limit).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
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
    /// Workflow run id, or unambiguous id prefix.
    pub run: String,
    /// Include step output.
    #[arg(long)]
    pub show_output: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowEventsArgs {
    /// Workflow run id, or unambiguous id prefix.
    pub run: String,
    /// Only the last N events.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct WorkflowReasonArgs {
    /// Workflow run id, or unambiguous id prefix.
    pub run: String,
    /// Recorded with the event.
    #[arg(long)]
    pub reason: Option<String>,
}
