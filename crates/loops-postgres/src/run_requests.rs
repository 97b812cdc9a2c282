//! Run requests (`run-now --on-runner`): a row another process reads, answered by the
//! first runner that can take its loop. The claim a runner makes for a request and the
//! request's answer share one transaction, under the request row's lock, so a request
//! starts at most one run, and a withdrawn or expired one none.

use crate::claims;
use crate::codec::{db_now_ms, get, instant_from_ms, new_id, sat_i64, ById};
use crate::error::{Error, Result};
use crate::session::{Conn, Db};
use loops_core::{LoopId, Run, RunId, RunSource};
use loops_store::{
    BatchClaim, ClaimOutcome, ClaimRefused, ClaimRequest, LoopAdvance, OnRefusal, RunRequest,
    RunRequestAnswer,
};
use tokio_postgres::Row;

macro_rules! request_cols {
    () => {
        "id, loop_id, allow_overlap, requested_by, requested_at, expires_at, answered_by, \
         run_id, source, refused"
    };
}
const COLS: &str = request_cols!();

impl ById for RunRequest {
    const SELECT: &'static str = concat!(
        "SELECT ",
        request_cols!(),
        " FROM run_requests WHERE id = $1"
    );
    fn decode(row: &Row) -> Result<Self> {
        from_row(row)
    }
}

fn from_row(row: &Row) -> Result<RunRequest> {
    let answered_by: Option<String> = get(row, 6, "answered_by")?;
    let run_id: Option<String> = get(row, 7, "run_id")?;
    let source: Option<String> = get(row, 8, "source")?;
    let refused: Option<String> = get(row, 9, "refused")?;
    let answer = match (answered_by, run_id, refused) {
        (Some(runner_id), Some(run_id), _) => Some(RunRequestAnswer::Started {
            runner_id,
            run_id: RunId::new(run_id),
            source: source
                .as_deref()
                .unwrap_or("ad_hoc")
                .parse::<RunSource>()
                .map_err(|e| Error::decode(format!("column source: {e}")))?,
        }),
        (Some(runner_id), None, Some(reason)) => {
            Some(RunRequestAnswer::Refused { runner_id, reason })
        }
        _ => None,
    };
    Ok(RunRequest {
        id: get(row, 0, "id")?,
        loop_id: LoopId::new(get::<String>(row, 1, "loop_id")?),
        allow_overlap: get(row, 2, "allow_overlap")?,
        requested_by: get(row, 3, "requested_by")?,
        requested_at: instant_from_ms(get(row, 4, "requested_at")?, "requested_at")?,
        expires_at: instant_from_ms(get(row, 5, "expires_at")?, "expires_at")?,
        answer,
    })
}

/// Inserts a pending request and wakes the runners (both at commit).
pub(crate) async fn request(
    db: &Db<'_, impl Conn>,
    loop_id: &LoopId,
    allow_overlap: bool,
    requested_by: &str,
    wait_ms: u64,
) -> Result<String> {
    let id = new_id();
    db.execute(
        concat!(
            "INSERT INTO run_requests (id, loop_id, allow_overlap, requested_by, \
               requested_at, expires_at) VALUES ($1, $2, $3, $4, ",
            db_now_ms!(),
            ", ",
            db_now_ms!(),
            " + $5)"
        ),
        &[
            &id,
            &loop_id.as_str(),
            &allow_overlap,
            &requested_by,
            &sat_i64(wait_ms),
        ],
    )
    .await?;
    crate::wakeups::notify(db).await?;
    Ok(id)
}

pub(crate) async fn pending(
    db: &Db<'_, impl Conn>,
    labels: &[String],
    limit: usize,
) -> Result<Vec<RunRequest>> {
    let labels = serde_json::to_string(labels).map_err(|e| Error::decode(e.to_string()))?;
    let sql = format!(
        "SELECT {} FROM run_requests r LEFT JOIN loops l ON l.id = r.loop_id \
         WHERE r.answered_at IS NULL AND r.expires_at > {} \
           AND (l.id IS NULL OR l.runs_on_json::jsonb <@ ($1::text)::jsonb) \
         ORDER BY r.requested_at LIMIT $2",
        COLS.split(", ")
            .map(|c| format!("r.{c}"))
            .collect::<Vec<_>>()
            .join(", "),
        db_now_ms!()
    );
    db.query_as(&sql, &[&labels, &sat_i64(limit as u64)], from_row)
        .await
}

/// The claim for a request and its answer, inside the caller's (fenced) transaction.
pub(crate) async fn claim(
    db: &Db<'_, impl Conn>,
    request_id: &str,
    req: &ClaimRequest,
    advance: Option<&LoopAdvance>,
    epoch: Option<i64>,
) -> Result<Option<std::result::Result<Run, ClaimRefused>>> {
    let pending = db
        .query_opt(
            concat!(
                "SELECT 1 FROM run_requests WHERE id = $1 AND answered_at IS NULL \
                   AND expires_at > ",
                db_now_ms!(),
                " FOR UPDATE"
            ),
            &[&request_id],
        )
        .await?;
    if pending.is_none() {
        return Ok(None);
    }
    let claim = BatchClaim {
        request: req.clone(),
        advance: advance.cloned(),
        on_refusal: OnRefusal::Keep,
        caps: Default::default(),
    };
    let outcome = claims::claim_runs(db, std::slice::from_ref(&claim), epoch)
        .await?
        .pop();
    match outcome {
        Some(ClaimOutcome::Claimed(run)) => {
            db.execute(
                concat!(
                    "UPDATE run_requests SET answered_at = ",
                    db_now_ms!(),
                    ", answered_by = $2, run_id = $3, source = $4 WHERE id = $1"
                ),
                &[
                    &request_id,
                    &req.runner_id,
                    &run.id.as_str(),
                    &req.source.as_str(),
                ],
            )
            .await?;
            Ok(Some(Ok(*run)))
        }
        Some(ClaimOutcome::Refused(reason)) => Ok(Some(Err(reason))),
        other => Err(Error::decode(format!(
            "a claim that keeps its refusals was answered {other:?}"
        ))),
    }
}

pub(crate) async fn refuse(
    db: &Db<'_, impl Conn>,
    request_id: &str,
    runner_id: &str,
    reason: &str,
) -> Result<bool> {
    let n = db
        .execute(
            concat!(
                "UPDATE run_requests SET answered_at = ",
                db_now_ms!(),
                ", answered_by = $2, refused = $3 WHERE id = $1 AND answered_at IS NULL"
            ),
            &[&request_id, &runner_id, &reason],
        )
        .await?;
    Ok(n == 1)
}

pub(crate) async fn withdraw(
    db: &Db<'_, impl Conn>,
    request_id: &str,
) -> Result<Option<RunRequest>> {
    let sql = format!("DELETE FROM run_requests WHERE id = $1 RETURNING {COLS}");
    db.query_opt_as(&sql, &[&request_id], from_row).await
}

/// Deletes requests that expired over an hour ago (their requesters are gone).
pub(crate) async fn prune(db: &Db<'_, impl Conn>) -> Result<u64> {
    db.execute(
        concat!(
            "DELETE FROM run_requests WHERE expires_at < ",
            db_now_ms!(),
            " - 3600000"
        ),
        &[],
    )
    .await
}
