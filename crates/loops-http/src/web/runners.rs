//! `/runners`: who runs the loops. On PostgreSQL every runner sharing the store, with
//! its host, labels, capacity, load and heartbeat age (`Client::runners`, what `loops
//! runners` prints); on SQLite the one local daemon (its `daemon status`).

use super::PageRequest;
use super::{words, Base};
use crate::error::ApiError;
use askama::Template;
use axum::response::Response;
use loops_core::Instant;
use loops_runtime::Client;

/// One runner, as the page shows it.
pub(crate) struct Runner {
    pub name: String,
    pub host: String,
    pub state: String,
    pub labels: Vec<String>,
    pub capacity: String,
    pub load: usize,
    pub heartbeat: String,
    pub since: String,
}

#[derive(Template)]
#[template(path = "runners.html")]
pub(crate) struct RunnersPage {
    pub base: Base,
    pub runners: Vec<Runner>,
    pub backend_note: &'static str,
}

/// The runner rows of a PostgreSQL store, newest registration first as the store lists
/// them; ages by the store's clock, as the lease rule judges them.
fn postgres_runners(c: &Client) -> Result<Vec<Runner>, ApiError> {
    let caps = c.concurrency_caps()?;
    Ok(c.runners()?
        .into_iter()
        .map(|r| {
            let state = if r.released {
                "released"
            } else if r.live {
                "live"
            } else {
                "expired"
            };
            Runner {
                name: format!("{} (epoch {})", r.runner_id, r.epoch),
                host: format!("{} pid {}", r.host, r.pid),
                state: state.to_owned(),
                labels: r.labels.clone(),
                capacity: with_caps(r.capacity.to_string(), &caps, &r.runner_id),
                load: r.running,
                heartbeat: format!(
                    "{}; lease expires {}",
                    words::relative(r.heartbeat_at, r.now),
                    words::relative(r.expires_at, r.now)
                ),
                since: format!(
                    "{} ({})",
                    words::instant(&r.started_at),
                    words::relative(r.started_at, r.now)
                ),
            }
        })
        .collect())
}

/// `capacity` with the runner's concurrency caps (`--max-concurrent-per`), if any.
fn with_caps(capacity: String, caps: &[(String, String)], runner_id: &str) -> String {
    match caps.iter().find(|(id, _)| id == runner_id) {
        Some((_, caps)) => format!("{capacity}; caps {caps}"),
        None => capacity,
    }
}

/// The runners of the store: PostgreSQL's runner rows, or the daemon holding the SQLite
/// store's lease.
pub(crate) fn runners(c: &Client, now: Instant) -> Result<Vec<Runner>, ApiError> {
    if matches!(c.backend(), loops_runtime::client::Backend::Postgres { .. }) {
        return postgres_runners(c);
    }
    let status = c.daemon_status()?;
    let load = status.running.len();
    let caps = status.caps.clone();
    let view = status.view;
    Ok(match view.holder {
        Some(h) => vec![Runner {
            name: format!("daemon pid {}", h.pid),
            host: h.host.clone(),
            state: view.state.as_str().to_owned(),
            labels: Vec::new(),
            capacity: match caps.first() {
                Some((_, caps)) => format!("--max-concurrent of the daemon; caps {caps}"),
                None => "--max-concurrent of the daemon".to_owned(),
            },
            load,
            heartbeat: format!("lease renewed; expires {}", words::relative(h.expires, now)),
            since: format!(
                "{} ({})",
                words::instant(&h.since),
                words::relative(h.since, now)
            ),
        }],
        None => vec![Runner {
            name: "no daemon".to_owned(),
            host: String::new(),
            state: view.state.as_str().to_owned(),
            labels: Vec::new(),
            capacity: String::new(),
            load,
            heartbeat: "—".to_owned(),
            since: "`loops daemon start` starts one".to_owned(),
        }],
    })
}

pub(crate) async fn page(request: PageRequest) -> Response {
    request.show(super::no_query, |c, (), csrf| {
            Ok(RunnersPage {
                base: Base {
                    title: "Runners".to_owned(),
                    nav: "runners",
                    csrf,
                },
                runners: runners(c, chrono::Utc::now())?,
                backend_note: if matches!(c.backend(), loops_runtime::client::Backend::Postgres { .. }) {
                    "This store is PostgreSQL: every runner that registered with it, live, expired or released. A loop that requires labels (create --on) runs only on a live runner that has them all."
                } else {
                    "This store is SQLite: one daemon runs its loops. With the PostgreSQL backend, every runner sharing the store appears here with its host, labels, capacity, load and heartbeat age."
                },
            })
    })
    .await
}
