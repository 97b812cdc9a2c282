//! The routes under `/v1`, one module per resource; each handler is one client call
//! on a blocking thread, its answer the CLI's `--json` document.

pub(crate) mod holds;
pub(crate) mod loops;
pub(crate) mod runs;
pub(crate) mod status;
pub(crate) mod workflows;

use crate::error::ApiError;
use crate::State;
use axum::routing::{delete, get, post};
use axum::Router;
use loops_runtime::Client;
use std::sync::Mutex;

/// Every route.
pub(crate) fn routes(_state: State) -> Router<State> {
    Router::new()
        .route("/v1/loops", get(loops::list).post(loops::create))
        .route(
            "/v1/loops/{key}",
            get(loops::show).patch(loops::edit).delete(loops::remove),
        )
        .route("/v1/loops/{key}/pause", post(loops::pause))
        .route("/v1/loops/{key}/resume", post(loops::resume))
        .route("/v1/loops/{key}/stop", post(loops::stop))
        .route("/v1/loops/{key}/archive", post(loops::archive))
        .route("/v1/loops/{key}/unarchive", post(loops::unarchive))
        .route("/v1/loops/{key}/run-now", post(loops::run_now))
        .route("/v1/runs", get(runs::list))
        .route("/v1/runs/{id}", get(runs::show))
        .route("/v1/runs/{id}/output", get(runs::output))
        .route(
            "/v1/workflows",
            get(workflows::list).post(workflows::create),
        )
        .route("/v1/workflows/validate", post(workflows::validate))
        .route("/v1/workflows/{key}", get(workflows::show))
        .route("/v1/workflows/{key}/run", post(workflows::run))
        .route("/v1/workflows/{key}/runs", get(workflows::runs_of))
        .route("/v1/workflow-runs", get(workflows::runs))
        .route("/v1/workflow-runs/{id}", get(workflows::inspect))
        .route("/v1/workflow-runs/{id}/cancel", post(workflows::cancel))
        .route("/v1/daemon", get(status::daemon))
        .route("/v1/runners", get(status::runners))
        .route("/v1/health", get(status::health))
        .route("/v1/usage", get(status::usage))
        .route("/v1/holds", get(holds::list))
        .route("/v1/holds/{provider}", delete(holds::clear))
        .route("/v1/budgets", get(status::budgets))
        .route(
            "/v1/budgets/{key}",
            axum::routing::put(status::set_budget).delete(status::clear_budget),
        )
        .route("/v1/events", get(crate::events::stream))
        .route("/v1/openapi.json", get(crate::openapi::document))
}

/// Runs a client call on a blocking thread (the store's calls block).
pub(crate) async fn blocking<T: Send + 'static>(
    state: &State,
    f: impl FnOnce(&Client) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let client = state.client.clone();
    tokio::task::spawn_blocking(move || f(&client))
        .await
        .map_err(|e| ApiError::failed(format!("the request's task failed: {e}")))?
}

/// A JSON document encoded on the blocking thread that built it, straight from its
/// typed form: a report of 100,000 loops is never a `serde_json::Value` tree (several
/// times its encoded size, kept by the allocator after the answer; BENCHMARKS.md §36).
pub(crate) struct EncodedJson(Vec<u8>);

impl EncodedJson {
    /// `doc` encoded, or a 500 saying what failed.
    pub fn of<T: serde::Serialize + ?Sized>(doc: &T) -> Result<Self, ApiError> {
        serde_json::to_vec(doc)
            .map(EncodedJson)
            .map_err(|e| ApiError::failed(format!("cannot encode the report: {e}")))
    }

    /// The document, once the report it was encoded from is dropped: a large one hands
    /// the memory the report took back to the system.
    pub fn after_report(self) -> Self {
        loops_runtime::memory::after_document(self.0.len());
        self
    }
}

impl axum::response::IntoResponse for EncodedJson {
    fn into_response(self) -> axum::response::Response {
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.0,
        )
            .into_response()
    }
}

/// A run this server started and still supervises (run-now, a workflow run): on
/// shutdown it is interrupted and awaited, so it is recorded rather than left running.
struct Started {
    interrupt: Box<dyn Fn(&str) + Send + Sync>,
    task: tokio::task::JoinHandle<()>,
}

/// The runs this server started.
#[derive(Default)]
pub(crate) struct StartedRuns {
    runs: Mutex<Vec<Started>>,
}

impl StartedRuns {
    /// Keeps `task` (dropping those that already ended).
    pub fn keep(
        &self,
        task: tokio::task::JoinHandle<()>,
        interrupt: impl Fn(&str) + Send + Sync + 'static,
    ) {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        runs.retain(|r| !r.task.is_finished());
        runs.push(Started {
            interrupt: Box::new(interrupt),
            task,
        });
    }

    /// Interrupts every run still going and waits for each to be recorded.
    pub async fn interrupt_all(&self, reason: &str) {
        let runs: Vec<Started> = std::mem::take(
            &mut *self
                .runs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for r in &runs {
            if !r.task.is_finished() {
                (r.interrupt)(reason);
            }
        }
        for r in runs {
            let _ = r.task.await;
        }
    }
}
