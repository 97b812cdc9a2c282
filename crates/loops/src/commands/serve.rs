//! `serve`: the HTTP API (`loops_http`) on this store until SIGTERM / SIGINT. Its own
//! process, beside the daemon: it reads the store's event log, which every writer (the
//! daemon, the CLI, this server) appends to in the transaction of each change, so it
//! needs no link to the daemon and the daemon's scheduling never waits on a client.

use super::Context;
use crate::exit::Exit;
use crate::output::{outln, print_json};
use crate::Failure;
use clap::Args;
use loops_http::{ServeConfig, Server};
use std::io::Write as _;
use std::time::Duration;

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

pub fn run(ctx: &Context, args: ServeArgs) -> Result<Exit, Failure> {
    let dir = ctx.data_dir()?;
    let client = ctx.client()?;
    if args.print_token {
        let token =
            loops_http::token::load_or_create(&dir).map_err(|e| Failure::failed(e.to_string()))?;
        outln!("{}", token.reveal())?;
        return Ok(Exit::Success);
    }
    super::log_to_stderr("info");
    // Each connection is a descriptor: a default soft limit of 1,024 is what a flood
    // of strangers' connections would exhaust first.
    if let Err(e) = loops_http::raise_open_files_limit() {
        tracing::warn!(error = %e, "cannot raise the open-files limit");
    }
    let cfg = ServeConfig {
        addr: args.addr,
        allow_remote: args.allow_remote,
        cors_origins: args.cors_origins,
        events_poll: Duration::from_millis(args.events_poll_ms),
        max_connections: args.max_connections,
        ..ServeConfig::default()
    };
    let rt = crate::commands::server_runtime()?;
    let result = rt.block_on(async {
        let server = Server::bind(client, cfg).await.map_err(|e| {
            let usage = matches!(e, loops_http::ServeError::NotLoopback(_));
            if usage {
                Failure::usage(e.to_string())
            } else {
                Failure::failed(e.to_string())
            }
        })?;
        let addr = server
            .local_addr()
            .map_err(|e| Failure::failed(format!("cannot read the bound address: {e}")))?;
        if !addr.ip().is_loopback() {
            let _ = writeln!(
                std::io::stderr(),
                "warning: serving on {addr}, which other hosts can reach; anyone with the token can read every output and run commands as you"
            );
        }
        let url = format!("http://{addr}");
        let token_file = server.token_path();
        if ctx.json {
            print_json(&serde_json::json!({ "url": url, "tokenFile": token_file }))?;
        } else {
            outln!(
                "serving the loops API and the dashboard on {url} (token: {}; `loops serve --print-token` prints it)",
                token_file.display()
            )?;
        }
        // The handlers are installed now, before the daemon takes the store: a SIGTERM
        // that came before the shutdown future was first polled would otherwise end the
        // process by the default action, its lease, pid file and socket left behind.
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        let shutdown = async move {
            match handlers {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => std::future::pending::<()>().await,
            }
        };
        server
            .run(shutdown)
            .await
            .map_err(|e| Failure::failed(e.to_string()))
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    result.map(|()| Exit::Success)
}
