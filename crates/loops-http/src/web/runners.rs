//! `/runners`: who runs the loops. With PostgreSQL (#9) several runners share a store,
//! each with its host, labels, capacity, load and heartbeat; the library offers no
//! runner listing yet, so this page shows the one local daemon of a SQLite store (its
//! `daemon status`) and says where PostgreSQL runners will appear. [`runners`] is the
//! one place to wire `Client::runners()` in once it exists.

use super::{error_page, render, viewer, words, Base};
use crate::error::ApiError;
use crate::request::Params;
use crate::State;
use askama::Template;
use axum::extract::RawQuery;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
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

/// The runners of the store: today the daemon holding the SQLite store's lease.
pub(crate) fn runners(c: &Client, now: Instant) -> Result<Vec<Runner>, ApiError> {
    let status = c.daemon_status()?;
    let load = status.running.len();
    let view = status.view;
    Ok(match view.holder {
        Some(h) => vec![Runner {
            name: format!("daemon pid {}", h.pid),
            host: h.host.clone(),
            state: view.state.as_str().to_owned(),
            labels: Vec::new(),
            capacity: "--max-concurrent of the daemon".to_owned(),
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

pub(crate) async fn page(
    axum::extract::State(state): axum::extract::State<State>,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    let viewer = match viewer(&state, &headers, &super::here(&uri)) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let csrf = viewer.csrf.clone();
    let built = async {
        Params::parse(q.as_deref(), &[])?;
        crate::api::blocking(&state, move |c| {
            Ok(RunnersPage {
                base: Base {
                    title: "Runners".to_owned(),
                    nav: "runners",
                    csrf,
                },
                runners: runners(c, chrono::Utc::now())?,
                backend_note: "This store is SQLite: one daemon runs its loops. With the PostgreSQL backend, every runner sharing the store appears here with its host, labels, capacity, load and heartbeat age.",
            })
        })
        .await
    }
    .await;
    match built {
        Ok(page) => render(&page),
        Err(e) => error_page(e, viewer.csrf),
    }
}
