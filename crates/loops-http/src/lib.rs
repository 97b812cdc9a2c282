//! The HTTP API of `loops` (`loops serve`): REST under `/v1`, live events as
//! Server-Sent Events (`/v1/events`), a running run's output as a stream, and an
//! OpenAPI 3.1 document (`/v1/openapi.json`) generated from this code.
//!
//! A thin layer over the library [`Client`]: every request is one client call (on a
//! blocking thread: the store's calls block), every mutation is validated by the
//! client exactly as the CLI's, errors carry the client's one-line messages, and the
//! JSON bodies are the CLI's `--json` documents, redacted the same way unless the
//! caller asks (`showOutput=true`).
//!
//! Security: the server binds 127.0.0.1 unless told otherwise (a non-loopback address
//! needs [`ServeConfig::allow_remote`]); every request needs the bearer token kept in
//! the data dir (`http.token`, 0600, created on first start), compared in constant
//! time; request bodies are capped ([`ServeConfig::max_body_bytes`], 413 beyond);
//! malformed JSON is a 400 naming the problem; unknown routes are a JSON 404; no CORS
//! headers unless origins are configured. Connections are capped, and one that has
//! not shown the token within seconds is closed (`conn`), so strangers flooding
//! the port do not keep the owner waiting.
//!
//! The web dashboard ([`web`]) is served beside the API, outside `/v1`: pages that
//! read through the same client, a login form that exchanges the token for a session
//! cookie, and a small embedded script that keeps the pages live from `/v1/events`.
//!
//! Events come from the store's durable event log ([`loops_store::Store::events_after`]):
//! one poller per server reads what was committed since its last look (every
//! [`ServeConfig::events_poll`]) and hands it to every connected stream, so a commit by
//! any process — the daemon, the CLI, this server — reaches a client within one poll
//! interval plus the write to its socket.

mod api;
mod conn;
pub mod decode;
mod error;
mod events;
mod openapi;
mod output;
mod request;
pub mod token;
pub mod web;

pub use conn::raise_open_files_limit;
pub use error::ApiError;
pub use openapi::openapi_json;

use axum::Router;
use loops_runtime::Client;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How `loops serve` serves.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen (default `127.0.0.1:7077`).
    pub addr: SocketAddr,
    /// Whether a non-loopback `addr` may be bound.
    pub allow_remote: bool,
    /// Origins allowed to call the API from a browser (CORS); empty: no CORS headers.
    pub cors_origins: Vec<String>,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// How often the event poller looks for new events in the store.
    pub events_poll: Duration,
    /// Most connections open at once (kept below the open-files limit); a new one
    /// beyond it evicts the oldest that has not shown the token (`conn`).
    pub max_connections: usize,
    /// How long a connection may stay open without a request that carried the token
    /// or a session.
    pub unproven_lifetime: Duration,
}

/// The default port of `loops serve`.
pub const DEFAULT_PORT: u16 = 7077;
/// The default request body cap: a workflow spec or a prompt at their own limits, plus
/// room for the rest of the document.
pub const DEFAULT_MAX_BODY_BYTES: usize = loops_core::limits::MAX_SPEC_BYTES + (64 << 10);
/// The default poll interval of the event log (well inside the 100 ms delivery target).
pub const DEFAULT_EVENTS_POLL: Duration = Duration::from_millis(20);
/// The default cap on open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The default lifetime of a connection that has not shown the token.
pub const DEFAULT_UNPROVEN_LIFETIME: Duration = Duration::from_secs(5);

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            allow_remote: false,
            cors_origins: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            events_poll: DEFAULT_EVENTS_POLL,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            unproven_lifetime: DEFAULT_UNPROVEN_LIFETIME,
        }
    }
}

/// Why the server did not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error("refusing to listen on {0}, which is not a loopback address: pass --allow-remote to serve other hosts (the API can read every output and start any command)")]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Token(#[from] token::TokenError),
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Shared by every handler.
pub(crate) struct AppState {
    pub client: Client,
    pub token: token::Token,
    pub hub: events::Hub,
    pub cfg: ServeConfig,
    pub started: api::StartedRuns,
    pub sessions: web::session::Sessions,
}

pub(crate) type State = Arc<AppState>;

impl AppState {
    /// The server's stop signal (true once it is shutting down).
    pub(crate) fn hub_stop(&self) -> tokio::sync::watch::Receiver<bool> {
        self.hub.stopped()
    }
}

/// A bound server, not yet serving ([`Server::run`]).
pub struct Server {
    listener: tokio::net::TcpListener,
    state: State,
}

impl Server {
    /// Checks the address, loads (or creates) the token in the client's data dir and
    /// binds. Must be called inside a tokio runtime.
    pub async fn bind(client: Client, cfg: ServeConfig) -> Result<Self, ServeError> {
        if !cfg.addr.ip().is_loopback() && !cfg.allow_remote {
            return Err(ServeError::NotLoopback(cfg.addr));
        }
        let token = token::load_or_create(client.data_dir())?;
        let listener = tokio::net::TcpListener::bind(cfg.addr)
            .await
            .map_err(|source| ServeError::Bind {
                addr: cfg.addr,
                source,
            })?;
        let hub = events::Hub::new();
        let state = Arc::new(AppState {
            client,
            token,
            hub,
            cfg,
            started: api::StartedRuns::default(),
            sessions: web::session::Sessions::default(),
        });
        Ok(Self { listener, state })
    }

    /// The address actually bound (the port, when 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Where the token is kept.
    pub fn token_path(&self) -> std::path::PathBuf {
        token::path(self.state.client.data_dir())
    }

    /// Serves until `shutdown` resolves; then stops accepting, ends the event streams,
    /// and interrupts the runs this server started (they are recorded, not left
    /// running unsupervised).
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let poller = events::spawn_poller(Arc::clone(&self.state));
        let app = router(Arc::clone(&self.state));
        let state = Arc::clone(&self.state);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let graceful = async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        };
        state.hub.set_stop(stop_rx);
        let limits = conn::Limits {
            max: conn::cap(state.cfg.max_connections),
            unproven_lifetime: state.cfg.unproven_lifetime,
        };
        conn::serve(self.listener, app, limits, graceful).await;
        poller.abort();
        state.started.interrupt_all("the HTTP server stopped").await;
        Ok(())
    }
}

/// The router with every route (the API's and the dashboard's), the token check,
/// the body cap and CORS.
fn router(state: State) -> Router {
    api::routes(Arc::clone(&state))
        .merge(web::routes())
        .fallback(error::not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            request::guard,
        ))
        .with_state(state)
}
