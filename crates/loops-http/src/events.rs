//! `GET /v1/events`: the store's event log as Server-Sent Events, resumable.
//!
//! One poller per server reads the events committed since its last look (every
//! [`crate::ServeConfig::events_poll`]; one primary-key probe when there are none) and
//! broadcasts them to every stream. A stream first sends what the log holds after the
//! client's `Last-Event-ID` (or `after`), then what the poller broadcasts, skipping
//! what it already sent; a stream that falls behind the broadcast reads the log again
//! from where it was, so it never skips an event. Each SSE event's `id` is the event's
//! number, its `event` the kind, its `data` the event as JSON.

use crate::error::{ApiError, ErrorBody};
use crate::request::Params;
use crate::State;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, Request};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use loops_core::event::{Event, EventKind};
use loops_runtime::definition::parse_enum;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::{broadcast, mpsc, watch};

/// Events one read of the log returns at most.
const PAGE: usize = 500;
/// Events the broadcast keeps for slow streams before they must read the log again.
const BROADCAST_CAPACITY: usize = 4_096;
/// Buffered chunks per stream.
const STREAM_BUFFER: usize = 64;
/// A comment line this often keeps idle connections (and proxies) open.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// An event with its SSE frame, rendered once for every stream.
pub(crate) struct Framed {
    seq: u64,
    kind: EventKind,
    loop_id: Option<String>,
    frame: Bytes,
}

impl Framed {
    fn of(e: &Event) -> Self {
        let data = serde_json::to_string(e).unwrap_or_else(|_| "{}".to_owned());
        // `data` is one line: JSON escapes every newline inside strings.
        let frame = format!("id: {}\nevent: {}\ndata: {data}\n\n", e.seq, e.body.kind);
        Self {
            seq: e.seq,
            kind: e.body.kind,
            loop_id: e.body.loop_id.as_ref().map(|l| l.as_str().to_owned()),
            frame: Bytes::from(frame),
        }
    }
}

/// The poller's broadcast of new events.
pub(crate) struct Hub {
    tx: broadcast::Sender<Arc<Framed>>,
    /// The number of the newest event broadcast (or, before the first poll, the log's
    /// newest at start).
    latest: AtomicU64,
    stop: OnceLock<watch::Receiver<bool>>,
}

impl Hub {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Self {
            tx,
            latest: AtomicU64::new(0),
            stop: OnceLock::new(),
        }
    }

    /// The server's stop signal: streams end when it turns true.
    pub fn set_stop(&self, stop: watch::Receiver<bool>) {
        let _ = self.stop.set(stop);
    }

    pub(crate) fn stopped(&self) -> watch::Receiver<bool> {
        match self.stop.get() {
            Some(rx) => rx.clone(),
            None => watch::channel(false).1,
        }
    }
}

/// Polls the log and broadcasts what is new, until aborted.
pub(crate) fn spawn_poller(state: State) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = state.client.clone();
        let mut cursor =
            match tokio::task::spawn_blocking(move || client.store().event_bounds()).await {
                Ok(Ok(b)) => b.latest,
                _ => 0,
            };
        state.hub.latest.store(cursor, Ordering::Release);
        let mut failing = false;
        let mut tick = tokio::time::interval(state.cfg.events_poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let client = state.client.clone();
            let after = cursor;
            let read =
                tokio::task::spawn_blocking(move || client.store().events_after(after, PAGE)).await;
            match read {
                Ok(Ok(events)) => {
                    if failing {
                        tracing::info!("reading the event log works again");
                        failing = false;
                    }
                    let full = events.len() == PAGE;
                    for e in events {
                        cursor = cursor.max(e.seq);
                        // No receiver is fine: nobody is listening.
                        let _ = state.hub.tx.send(Arc::new(Framed::of(&e)));
                    }
                    state.hub.latest.store(cursor, Ordering::Release);
                    if full {
                        tick.reset_immediately();
                    }
                }
                Ok(Err(e)) => {
                    if !failing {
                        tracing::warn!(error = %e, "cannot read the event log; retrying");
                        failing = true;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the event poll's task failed"),
            }
        }
    })
}

/// Which events a stream wants.
struct Filter {
    loop_id: Option<String>,
    kinds: Vec<EventKind>,
}

impl Filter {
    fn wants(&self, e: &Framed) -> bool {
        self.loop_id
            .as_deref()
            .is_none_or(|id| e.loop_id.as_deref() == Some(id))
            && (self.kinds.is_empty() || self.kinds.contains(&e.kind))
    }
}

/// The event log as Server-Sent Events: `loop.created`, `loop.changed`,
/// `loop.removed`, `run.started`, `run.finished`, `workflow.event` (each SSE `data` an
/// [`Event`]). Resumes after `Last-Event-ID` (or `after`); without either, starts with
/// the next event. When events asked for were pruned meanwhile, a `reset` event comes
/// first (`data`: `{"after", "oldest", "latest"}`): reload what you show.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (sent by EventSource on reconnect)."),
        ("after" = Option<u64>, Query, description = "Resume after this event number (0: everything kept)."),
        ("loop" = Option<String>, Query, description = "Only events about this loop (its exact id)."),
        ("kind" = Option<Vec<EventKind>>, Query, explode = true, description = "Only events of these kinds."),
    ),
    responses(
        (status = 200, description = "text/event-stream; each event's data is an Event.", body = Event, content_type = "text/event-stream"),
        (status = 400, description = "A bad parameter.", body = ErrorBody),
        (status = 401, description = "No or a wrong token.", body = ErrorBody),
    ))]
pub(crate) async fn stream(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
    req: Request,
) -> Result<Response, ApiError> {
    let p = Params::parse(q.as_deref(), &["after", "loop", "kind"])?;
    let header = req
        .headers()
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::invalid("invalid Last-Event-ID: expected an event number"))
        })
        .transpose()?;
    let query = p
        .get("after")
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                ApiError::invalid(format!("invalid after {v:?}: expected an event number"))
            })
        })
        .transpose()?;
    let kinds = p
        .all("kind")
        .iter()
        .map(|k| parse_enum::<EventKind>("kind", k).map_err(ApiError::invalid))
        .collect::<Result<Vec<_>, _>>()?;
    let filter = Filter {
        loop_id: p.get("loop").map(str::to_owned),
        kinds,
    };
    // "Now" first, then subscribe, then read the log from "now" (or the client's
    // number): whatever was broadcast before the subscription is read from the log,
    // and what the broadcast repeats is skipped by number.
    let now = state.hub.latest.load(Ordering::Acquire);
    let rx = state.hub.tx.subscribe();
    let start = header.or(query);
    let (tx, out) = mpsc::channel::<Result<Bytes, Infallible>>(STREAM_BUFFER);
    let stop = state.hub.stopped();
    tokio::spawn(pump(Arc::clone(&state), start, now, filter, rx, tx, stop));
    Ok(sse_response(out))
}

/// A `text/event-stream` response whose body is what `out` yields.
pub(crate) fn sse_response(out: mpsc::Receiver<Result<Bytes, Infallible>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(out)),
    )
        .into_response()
}

/// One SSE frame.
pub(crate) fn sse_frame(event: &str, data: &str) -> Bytes {
    let mut text = String::with_capacity(data.len() + event.len() + 16);
    text.push_str("event: ");
    text.push_str(event);
    text.push('\n');
    for line in data.split('\n') {
        text.push_str("data: ");
        text.push_str(line);
        text.push('\n');
    }
    text.push('\n');
    Bytes::from(text)
}

/// Feeds one stream until the client goes away or the server stops. Frames that are
/// ready together go out as one chunk.
async fn pump(
    state: State,
    start: Option<u64>,
    now: u64,
    filter: Filter,
    mut rx: broadcast::Receiver<Arc<Framed>>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    mut stop: watch::Receiver<bool>,
) {
    // A comment first: the response's headers go out now, not with the first event.
    if tx
        .send(Ok(Bytes::from_static(b": loops events\n\n")))
        .await
        .is_err()
    {
        return;
    }
    let mut sent = match start {
        None => now,
        Some(after) => {
            let client = state.client.clone();
            let bounds = tokio::task::spawn_blocking(move || client.store().event_bounds()).await;
            let Ok(Ok(bounds)) = bounds else {
                return;
            };
            let lost = after > bounds.latest
                || bounds
                    .oldest
                    .is_some_and(|oldest| oldest > after.saturating_add(1))
                || (bounds.oldest.is_none() && after < bounds.latest);
            if lost {
                let data = serde_json::json!({
                    "after": after, "oldest": bounds.oldest, "latest": bounds.latest,
                });
                if tx
                    .send(Ok(sse_frame("reset", &data.to_string())))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            after.min(bounds.latest)
        }
    };
    // The backlog (and, after a lag, the part of the log the broadcast dropped).
    let mut catch_up = true;
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.tick().await;
    loop {
        if catch_up {
            catch_up = false;
            loop {
                let client = state.client.clone();
                let after = sent;
                let page =
                    tokio::task::spawn_blocking(move || client.store().events_after(after, PAGE))
                        .await;
                let Ok(Ok(page)) = page else {
                    return;
                };
                let full = page.len() == PAGE;
                let mut chunk = Vec::new();
                for e in &page {
                    sent = e.seq;
                    let framed = Framed::of(e);
                    if filter.wants(&framed) {
                        chunk.extend_from_slice(&framed.frame);
                    }
                }
                if !chunk.is_empty() && tx.send(Ok(Bytes::from(chunk))).await.is_err() {
                    return;
                }
                if !full {
                    break;
                }
            }
        }
        tokio::select! {
            got = rx.recv() => {
                let mut chunk: Option<Vec<u8>> = None;
                let mut next = Some(got);
                while let Some(got) = next.take() {
                    match got {
                        Ok(e) => {
                            if e.seq > sent {
                                sent = e.seq;
                                if filter.wants(&e) {
                                    chunk.get_or_insert_with(Vec::new).extend_from_slice(&e.frame);
                                }
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => catch_up = true,
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                    // More already waiting: into the same chunk.
                    match rx.try_recv() {
                        Ok(e) => next = Some(Ok(e)),
                        Err(broadcast::error::TryRecvError::Lagged(n)) => {
                            next = Some(Err(broadcast::error::RecvError::Lagged(n)))
                        }
                        Err(_) => {}
                    }
                }
                if let Some(chunk) = chunk {
                    if tx.send(Ok(Bytes::from(chunk))).await.is_err() {
                        return;
                    }
                    keep_alive.reset();
                }
            }
            _ = keep_alive.tick() => {
                if tx.send(Ok(Bytes::from_static(b": keep-alive\n\n"))).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}
