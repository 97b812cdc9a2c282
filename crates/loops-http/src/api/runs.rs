//! `/v1/runs`: list (the CLI's `runs` filters), show, output (`loops logs`, and
//! `follow=true` as a stream while the run runs).

use super::blocking;
use crate::error::{ApiError, ErrorBody};
use crate::request::Params;
use crate::State;
use axum::extract::{Path, RawQuery};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use loops_core::redact::{redact_delivery, redact_run};
use loops_core::{Delivery, Run, RunSource, RunStatus};
use loops_runtime::client::RunQuery;
use loops_runtime::definition::parse_enum;
use serde::Serialize;

/// A run as `loops runs --json` prints it: the run's fields and its notifications'
/// deliveries.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunDocument {
    #[serde(flatten)]
    pub run: Run,
    pub notifications: Vec<Delivery>,
}

fn documents(runs: Vec<Run>, deliveries: Vec<Delivery>, reveal: bool) -> Vec<RunDocument> {
    let mut by_run: std::collections::HashMap<loops_core::RunId, Vec<Delivery>> =
        std::collections::HashMap::new();
    for mut d in deliveries {
        redact_delivery(&mut d, reveal);
        by_run.entry(d.run_id.clone()).or_default().push(d);
    }
    runs.into_iter()
        .map(|mut run| {
            if !reveal {
                redact_run(&mut run);
            }
            RunDocument {
                notifications: by_run.remove(&run.id).unwrap_or_default(),
                run,
            }
        })
        .collect()
}

/// Runs newest first.
#[utoipa::path(get, path = "/v1/runs", tag = "runs",
    params(
        ("loop" = Option<String>, Query, description = "Only runs of this loop (id, name or id prefix)."),
        ("status" = Option<Vec<loops_core::RunStatus>>, Query, explode = true, description = "Only runs with one of these statuses."),
        ("label" = Option<Vec<String>>, Query, explode = true, description = "Only runs of loops carrying every one of these labels."),
        ("since" = Option<String>, Query, description = "Created at or after: a duration ago (`1d`) or an instant."),
        ("until" = Option<String>, Query, description = "Created before: a duration ago or an instant."),
        ("limit" = Option<usize>, Query, description = "At most this many (default 20; 0 = all)."),
        ("showOutput" = Option<bool>, Query, description = "Output and webhook URLs unredacted."),
    ),
    responses(
        (status = 200, description = "Runs newest first (`loops runs --json`).", body = Vec<RunDocument>),
        (status = 400, description = "A bad filter.", body = ErrorBody),
        (status = 404, description = "No such loop.", body = ErrorBody),
    ))]
pub(crate) async fn list(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<Vec<RunDocument>>, ApiError> {
    let p = Params::parse(
        q.as_deref(),
        &[
            "loop",
            "status",
            "label",
            "since",
            "until",
            "limit",
            "showOutput",
        ],
    )?;
    let now = chrono::Utc::now();
    let statuses = p
        .all("status")
        .iter()
        .map(|s| parse_enum::<RunStatus>("status", s).map_err(ApiError::invalid))
        .collect::<Result<Vec<_>, _>>()?;
    let past = |key: &str| {
        p.get(key)
            .map(|t| loops_runtime::timeparse::parse_past(key, t, now).map_err(ApiError::invalid))
            .transpose()
    };
    let query = RunQuery {
        loop_key: p.get("loop").map(str::to_owned),
        labels: p.all("label"),
        statuses,
        since: past("since")?,
        until: past("until")?,
        limit: loops_core::limits::runs_listed(p.count("limit")?),
    };
    let reveal = p.flag("showOutput", false)?;
    let (runs, deliveries) = blocking(&state, move |c| {
        let runs = c.query_runs(&query)?;
        let ids: Vec<_> = runs.iter().map(|r| r.id.clone()).collect();
        let deliveries = c.deliveries_of_runs(&ids)?;
        Ok((runs, deliveries))
    })
    .await?;
    Ok(Json(documents(runs, deliveries, reveal)))
}

/// One run, by id or unambiguous id prefix.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs",
    params(
        ("id" = String, Path, description = "The run's id or an unambiguous prefix."),
        ("showOutput" = Option<bool>, Query, description = "Output and webhook URLs unredacted."),
    ),
    responses(
        (status = 200, description = "The run (an element of `loops runs --json`).", body = RunDocument),
        (status = 404, description = "No such run.", body = ErrorBody),
        (status = 409, description = "The prefix matches several runs.", body = ErrorBody),
    ))]
pub(crate) async fn show(
    axum::extract::State(state): axum::extract::State<State>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<RunDocument>, ApiError> {
    let p = Params::parse(q.as_deref(), &["showOutput"])?;
    let reveal = p.flag("showOutput", false)?;
    let (run, deliveries) = blocking(&state, move |c| {
        let run = c.get_run(&id)?;
        let deliveries = c.deliveries_of_runs(std::slice::from_ref(&run.id))?;
        Ok((run, deliveries))
    })
    .await?;
    let mut docs = documents(vec![run], deliveries, reveal);
    docs.pop()
        .map(Json)
        .ok_or_else(|| ApiError::failed("the run vanished"))
}

/// A run's output (`loops logs RUN [--stderr] [--follow]`): the stream as text; with
/// `follow=true`, an SSE stream of what it writes while it runs — `output` events
/// (`{"text": …}`), `gap` events (`{"bytes": N}`: scrolled out of the kept tail before
/// it could be sent) and one `end` event with the run as recorded (output redacted).
#[utoipa::path(get, path = "/v1/runs/{id}/output", tag = "runs",
    params(
        ("id" = String, Path, description = "The run's id or an unambiguous prefix."),
        ("stream" = Option<String>, Query, description = "`stdout` (default) or `stderr`."),
        ("follow" = Option<bool>, Query, description = "Stream new output as SSE until the run ends."),
    ),
    responses(
        (status = 200, description = "The stream's text; with follow, an SSE stream of `output`, `gap` and `end` events.", content(
            (String = "text/plain"),
            (Object = "text/event-stream"),
        )),
        (status = 400, description = "A bad parameter.", body = ErrorBody),
        (status = 404, description = "No such run.", body = ErrorBody),
    ))]
pub(crate) async fn output(
    axum::extract::State(state): axum::extract::State<State>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let p = Params::parse(q.as_deref(), &["stream", "follow"])?;
    let stream = match p.get("stream").unwrap_or("stdout") {
        "stdout" => loops_runtime::live::Stream::Stdout,
        "stderr" => loops_runtime::live::Stream::Stderr,
        other => {
            return Err(ApiError::invalid(format!(
                "invalid stream {other:?}: expected stdout or stderr"
            )))
        }
    };
    let follow = p.flag("follow", false)?;
    let run = blocking(&state, move |c| Ok(c.get_run(&id)?)).await?;
    if follow {
        return Ok(crate::output::follow(&state, run, stream));
    }
    let text = match stream {
        loops_runtime::live::Stream::Stdout => run.stdout.clone(),
        loops_runtime::live::Stream::Stderr => run.stderr.clone(),
    };
    // A running run's output is in its spool until it ends: read what is there.
    let text = match text {
        Some(t) => t,
        None => {
            let mut f = state.client.follow_output(&run, stream);
            let step = blocking(&state, move |_| Ok(f.poll()?)).await?;
            step.pieces
                .into_iter()
                .filter_map(|p| match p {
                    loops_runtime::live::OutputPiece::Bytes(b) => {
                        Some(String::from_utf8_lossy(&b).into_owned())
                    }
                    loops_runtime::live::OutputPiece::Gap(_) => None,
                })
                .collect()
        }
    };
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// Claims a run-now run of `key` in this server and starts it; answers with the run as
/// claimed, its source, and a receiver of the run as recorded once it ended. The run
/// is this server's until it ends: on shutdown it is interrupted and recorded.
pub(crate) async fn start_run_now(
    state: &State,
    key: String,
    allow_overlap: bool,
) -> Result<(Run, RunSource, tokio::sync::oneshot::Receiver<Run>), ApiError> {
    let started = blocking(state, move |c| {
        let lp = c.get(&key)?;
        // As `loops run-now` refuses it.
        if lp.status == loops_core::LoopStatus::Archived {
            return Err(ApiError::invalid(format!(
                "loop {:?} is archived; `loops unarchive {}` brings it back (paused)",
                lp.name, lp.id
            )));
        }
        Ok(c.start_run_now(lp.id.as_str(), allow_overlap)?)
    })
    .await?;
    let (run, source) = (started.run.clone(), started.source);
    let interrupter = started.interrupter();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        match started.finish().await {
            Ok(outcome) => {
                let _ = tx.send(outcome.run);
            }
            Err(e) => tracing::warn!(error = %e, "a run started over HTTP failed"),
        }
    });
    state
        .started
        .keep(task, move |reason| interrupter.interrupt(reason));
    Ok((run, source, rx))
}
