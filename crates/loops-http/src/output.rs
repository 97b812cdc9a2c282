//! `GET /v1/runs/{id}/output?follow=true`: a run's output as it is written, as
//! Server-Sent Events, from its spool files while it runs and its row once it ended
//! ([`loops_runtime::live::OutputFollow`], polled every
//! [`loops_runtime::live::OUTPUT_POLL`]).

use crate::events::{sse_frame, sse_response};
use crate::State;
use axum::body::Bytes;
use axum::response::Response;
use loops_core::Run;
use loops_runtime::live::{OutputPiece, Stream, OUTPUT_POLL};
use std::convert::Infallible;
use tokio::sync::mpsc;

/// The stream: `output` (`{"text"}`), `gap` (`{"bytes"}`), then one `end` (the run as
/// recorded, its output redacted).
pub(crate) fn follow(state: &State, run: Run, stream: Stream) -> Response {
    let (tx, out) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let mut follow = state.client.follow_output(&run, stream);
    let mut stop = state.hub_stop();
    tokio::spawn(async move {
        if tx
            .send(Ok(Bytes::from_static(b": loops output\n\n")))
            .await
            .is_err()
        {
            return;
        }
        let mut tick = tokio::time::interval(OUTPUT_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = tx.closed() => return,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                    continue;
                }
            }
            let polled = tokio::task::spawn_blocking(move || {
                let step = follow.poll();
                (follow, step)
            })
            .await;
            let Ok((back, step)) = polled else {
                return;
            };
            follow = back;
            let step = match step {
                Ok(step) => step,
                Err(e) => {
                    let data = serde_json::json!({ "error": e.to_string() }).to_string();
                    let _ = tx.send(Ok(sse_frame("error", &data))).await;
                    return;
                }
            };
            for piece in step.pieces {
                let frame = match piece {
                    OutputPiece::Bytes(b) => sse_frame(
                        "output",
                        &serde_json::json!({ "text": String::from_utf8_lossy(&b) }).to_string(),
                    ),
                    OutputPiece::Gap(n) => {
                        sse_frame("gap", &serde_json::json!({ "bytes": n }).to_string())
                    }
                };
                if tx.send(Ok(frame)).await.is_err() {
                    return;
                }
            }
            if let Some(mut ended) = step.ended {
                loops_core::redact::redact_run(&mut ended);
                let data = serde_json::to_string(&ended).unwrap_or_else(|_| "{}".to_owned());
                let _ = tx.send(Ok(sse_frame("end", &data))).await;
                return;
            }
        }
    });
    sse_response(out)
}
