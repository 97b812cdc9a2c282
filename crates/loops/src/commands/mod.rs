//! One module per verb, holding its flags (`…Args`, clap derive) and its code; [`run`]
//! dispatches in one line per command. Each verb is a thin layer over the library
//! [`Client`]: typed flags in, one client call, output and an [`Exit`] code out; none
//! reaches past the client to the store.

pub(crate) mod backup;
pub(crate) mod budget;
pub(crate) mod completions;
pub(crate) mod create;
pub(crate) mod daemon;
pub(crate) mod doctor;
pub(crate) mod edit;
pub(crate) mod export;
pub(crate) mod health;
pub(crate) mod holds;
pub(crate) mod import;
pub(crate) mod lifecycle;
pub(crate) mod list;
pub(crate) mod logs;
pub(crate) mod mcp;
pub(crate) mod notify;
pub(crate) mod prune;
pub(crate) mod run_now;
pub(crate) mod runners;
pub(crate) mod runs;
pub(crate) mod runs_follow;
pub(crate) mod serve;
pub(crate) mod store;
pub(crate) mod supervise;
pub(crate) mod tick;
pub(crate) mod top;
pub(crate) mod usage;
pub(crate) mod workflows;

use crate::cli::{Cli, Command};
use crate::exit::Exit;
use crate::Failure;
use loops_runtime::client::Client;
use std::path::PathBuf;

/// Global options every command sees.
pub struct Context {
    pub json: bool,
    data_dir: Option<PathBuf>,
    /// `--store` / `$LOOPS_STORE`: a PostgreSQL URL, else the SQLite file.
    store: Option<String>,
}

impl Context {
    /// The data dir: `--data-dir` / `$LOOPS_DATA_DIR`, else the platform default.
    pub fn data_dir(&self) -> Result<PathBuf, Failure> {
        match &self.data_dir {
            Some(dir) => Ok(dir.clone()),
            None => loops_store::data_dir().map_err(Failure::from),
        }
    }

    /// Opens the store for a command that writes (creating the data dir and the
    /// database on first use, migrating an older one).
    pub fn client(&self) -> Result<Client, Failure> {
        Ok(Client::open_store(&self.data_dir()?, self.store_url())?)
    }

    /// `--store` / `$LOOPS_STORE` when it names another store than the SQLite file.
    pub fn store_url(&self) -> Option<&str> {
        self.store
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "sqlite")
    }

    /// Opens the store for a command that only reads (see
    /// [`Client::open_for_reading`]: read-only when the database exists and is
    /// current, else created or migrated first).
    pub fn reader(&self) -> Result<Client, Failure> {
        Ok(Client::open_for_reading(
            &self.data_dir()?,
            self.store_url(),
        )?)
    }
}

/// Structured logs of a long-running command (`daemon run`, `serve`, `supervise`) on
/// stderr, at the level `$LOOPS_LOG` sets (else `default`: `info`, `warn` for `mcp`
/// whose stderr a client shows), without colours (they end up in log files).
pub fn log_to_stderr(default: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LOOPS_LOG")
                .unwrap_or_else(|_| default.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// A current-thread runtime for commands that execute runs in-process.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))
}

/// A two-worker runtime for the long-running servers (`daemon run`, `serve`, `mcp`).
pub fn server_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))
}

/// The most of stdin `--store -` reads: a URL or connection string, one line.
const MAX_STORE_BYTES: u64 = 64 * 1024;

/// `--store -`: the store's URL is the first line of stdin (how `daemon start` hands
/// it to the daemon without an environment its children could inherit, or argv that
/// `ps` shows).
fn store_from_stdin() -> Result<String, Failure> {
    use std::io::Read as _;
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_STORE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| Failure::usage(format!("--store -: cannot read stdin: {e}")))?;
    if text.len() as u64 > MAX_STORE_BYTES {
        return Err(Failure::usage(format!(
            "--store -: stdin holds more than {MAX_STORE_BYTES} bytes; give the URL on one line"
        )));
    }
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() || line == "-" {
        return Err(Failure::usage(
            "--store -: stdin gave no store URL (one line, e.g. postgres://user:pass@host/db)",
        ));
    }
    Ok(line.to_owned())
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<Exit, Failure> {
    let store = match cli.store.map(crate::cli::StoreArg::into_inner) {
        Some(s) if s.trim() == "-" => Some(store_from_stdin()?),
        other => other,
    };
    let ctx = Context {
        json: cli.json,
        data_dir: cli.data_dir.filter(|d| !d.as_os_str().is_empty()),
        store,
    };
    match cli.command {
        Command::Create(args) => create::run(&ctx, args),
        Command::List(args) => list::list(&ctx, args),
        Command::Show(args) => list::show(&ctx, args),
        Command::Runs(args) => runs::run(&ctx, args),
        Command::Pause(args) => lifecycle::pause(&ctx, args),
        Command::Resume(args) => lifecycle::resume(&ctx, args),
        Command::Stop(args) => lifecycle::stop(&ctx, args),
        Command::Remove(args) => lifecycle::remove(&ctx, args),
        Command::RunNow(args) => run_now::run(&ctx, args),
        Command::Tick(args) => tick::run(&ctx, args),
        Command::Doctor => doctor::run(&ctx),
        Command::Health(args) => health::run(&ctx, args),
        Command::Top(args) => top::run(&ctx, args),
        Command::Usage(args) => usage::run(&ctx, args),
        Command::Export(args) => export::run(&ctx, args),
        Command::Import(args) => import::run(&ctx, args),
        Command::Prune(args) => prune::run(&ctx, args),
        Command::Daemon(cmd) => daemon::run(&ctx, cmd),
        Command::Workflows(cmd) => workflows::run(&ctx, cmd),
        Command::Mcp(args) => mcp::run(&ctx, args),
        Command::Completions(args) => completions::run(args),
        Command::Edit(args) => edit::edit(&ctx, args),
        Command::Rename(args) => edit::rename(&ctx, args),
        Command::Archive(args) => edit::archive(&ctx, args),
        Command::Unarchive(args) => edit::unarchive(&ctx, args),
        Command::Notify(cmd) => notify::run(&ctx, cmd),
        Command::Logs(args) => logs::run(&ctx, args),
        Command::Runners => runners::run(&ctx),
        Command::Holds(args) => holds::run(&ctx, args),
        Command::Budget(command) => budget::run(&ctx, command),
        Command::Serve(args) => serve::run(&ctx, args),
        Command::Store(cmd) => store::run(&ctx, cmd),
        Command::Backup(args) => backup::backup(&ctx, args),
        Command::Restore(args) => backup::restore(&ctx, args),
        Command::Supervise(args) => supervise::run(args),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// The commands are a thin layer over the library [`Client`]: they never reach
    /// past it to the store or its SQLite backend (#10 item 6).
    #[test]
    fn commands_go_through_the_client() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
        let mut found = Vec::new();
        let mut files = Vec::new();
        let mut dirs = vec![dir];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for needle in [
                    ".store()",
                    "SqliteStore",
                    "Engine::new(",
                    "dyn Store",
                    "Store>",
                ] {
                    if code.contains(needle) && !code.contains("\"") {
                        found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "use a Client method instead:\n{}",
            found.join("\n")
        );
    }
}
