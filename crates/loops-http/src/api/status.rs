//! `/v1/daemon`: whether the store's daemon runs (`loops daemon status`).

use super::{blocking, EncodedJson};
use crate::error::{ApiError, ErrorBody};
use crate::request::{JsonBody, Params};
use crate::State;
use axum::extract::RawQuery;
use axum::Json;
use loops_core::{LoopStatus, Run, RunStatus};
use serde::Serialize;

/// `loops daemon status --json`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the runtime's document
pub struct DaemonStatusDocument {
    /// `running`, `stalled` (holds the lease, does not schedule) or `stopped`.
    pub state: String,
    pub running: bool,
    pub pid: Option<u32>,
    pub host: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub since: Option<String>,
    pub uptime_ms: Option<i64>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub lease_expires_at: Option<String>,
    pub running_runs: Vec<Run>,
    pub next_due: Option<NextDue>,
    pub stale_pid_file: bool,
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// Where the data lives: the database file, or the URL without its password.
    pub store: String,
    /// The concurrency caps each runner recorded (`daemon run --max-concurrent-per`).
    pub caps: Vec<RunnerCaps>,
}

/// One runner's recorded concurrency caps in `loops daemon status --json`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the runtime's document
pub struct RunnerCaps {
    pub runner_id: String,
    /// As given to `--max-concurrent-per`.
    pub caps: String,
}

/// One runner in `loops runners --json`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the runtime's document
pub struct RunnerDocument {
    /// Its lease's epoch (on SQLite the daemon lease's fencing token).
    pub epoch: u64,
    /// `host/pid/start-time`, as its runs' `claimedBy`.
    pub runner_id: String,
    pub host: String,
    pub pid: u32,
    /// The labels it advertises (`daemon run --runner-label`).
    pub labels: Vec<String>,
    /// Runs it executes at once at most; null on SQLite (its lease does not record it).
    pub capacity: Option<usize>,
    /// Its running runs.
    pub running: usize,
    #[schema(value_type = String, format = DateTime)]
    pub started_at: String,
    #[schema(value_type = String, format = DateTime)]
    pub heartbeat_at: String,
    pub heartbeat_age_ms: i64,
    #[schema(value_type = String, format = DateTime)]
    pub lease_expires_at: String,
    /// `live`, `expired` or `released`.
    pub lease: String,
    /// Its concurrency caps (`daemon run --max-concurrent-per`), null without.
    pub caps: Option<String>,
}

/// The loop due soonest.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct NextDue {
    pub id: String,
    pub name: String,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_run_at: Option<String>,
}

/// The daemon's state, the runs in flight and the loop due next.
#[utoipa::path(get, path = "/v1/daemon", tag = "status",
    responses(
        (status = 200, description = "`loops daemon status --json`.", body = DaemonStatusDocument),
        (status = 401, description = "No or a wrong token.", body = ErrorBody),
    ))]
pub(crate) async fn daemon(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    Params::parse(q.as_deref(), &[])?;
    // The document `loops daemon status --json` prints (the runtime's, shared).
    let doc = blocking(&state, |c| {
        Ok(c.daemon_status()?.to_json(chrono::Utc::now()))
    })
    .await?;
    Ok(Json(doc))
}

/// Every runner sharing the store, live ones first (`loops runners --json`). On
/// PostgreSQL every daemon registered recently; on SQLite, which has one daemon, that
/// daemon as its one runner while it runs (or is stalled), else an empty list.
#[utoipa::path(get, path = "/v1/runners", tag = "status",
    responses(
        (status = 200, description = "`loops runners --json`.", body = Vec<RunnerDocument>),
        (status = 401, description = "No or a wrong token.", body = ErrorBody),
    ))]
pub(crate) async fn runners(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    Params::parse(q.as_deref(), &[])?;
    // The document `loops runners --json` prints (the runtime's, shared).
    let doc = blocking(&state, |c| Ok(c.runners_json()?)).await?;
    Ok(Json(doc))
}

/// `loops health --json`: the worst verdict, the counts, and each active (or parked)
/// loop's health.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[allow(dead_code)] // the schema of the document `health` serializes from the report
pub struct HealthDocument {
    /// `ok`, `warn` or `fail`: the worst of the loops'.
    pub verdict: String,
    #[schema(value_type = String, format = DateTime)]
    pub at: String,
    pub counts: HealthCounts,
    pub loops: Vec<LoopHealthDocument>,
}

/// How many loops got each verdict.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct HealthCounts {
    pub ok: usize,
    pub warn: usize,
    pub fail: usize,
}

/// One loop's health.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct LoopHealthDocument {
    pub loop_id: String,
    pub loop_name: String,
    pub status: Option<LoopStatus>,
    /// `ok`, `warn` or `fail`.
    pub verdict: String,
    /// Why, worst first.
    pub reasons: Vec<String>,
    pub last_status: Option<RunStatus>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_run_at: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_success_at: Option<String>,
    pub consecutive_failures: u64,
    /// The class of the newest run's failure, when it failed (left out otherwise).
    pub last_failure_class: Option<loops_core::failure::FailureClass>,
    pub success_rate: Option<f64>,
    pub rated_runs: u32,
    pub missed_slots: u64,
    pub skipped_slots: u64,
    pub parked: bool,
    /// Why no live runner can take the loop (PostgreSQL: it requires runner labels none
    /// advertises); null when one can.
    pub waiting_for_runner: Option<String>,
    /// The concurrency cap its due slot waits for ("waiting for a free claude slot
    /// (cap 2)"); left out when none (a loop waiting its turn is no missed slot).
    pub waiting_for_cap: Option<String>,
}

/// The health of every active (or parked) loop (`loops health [--label L]…`).
#[utoipa::path(get, path = "/v1/health", tag = "status",
    params(("label" = Option<Vec<String>>, Query, explode = true, description = "Only loops carrying every one of these labels.")),
    responses(
        (status = 200, description = "`loops health --json` (the verdict is in the body; the CLI's exit 1 for `fail` has no HTTP counterpart).", body = HealthDocument),
    ))]
pub(crate) async fn health(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<EncodedJson, ApiError> {
    let p = Params::parse(q.as_deref(), &["label"])?;
    let labels = p.all("label");
    blocking(&state, move |c| {
        for label in &labels {
            loops_core::validate::label(label).map_err(|e| ApiError::invalid(e.to_string()))?;
        }
        let report = c.health(chrono::Utc::now(), &labels)?;
        // The document `loops health --json` prints (the runtime's, shared).
        let doc = EncodedJson::of(&report.json())?;
        drop(report);
        Ok(doc.after_report())
    })
    .await
}

/// Tokens and cost of agent runs and agent steps (`loops usage [--since D] [--by G]`).
#[utoipa::path(get, path = "/v1/usage", tag = "status",
    params(
        ("since" = Option<String>, Query, description = "Runs that finished in the last DURATION (default 7d)."),
        ("by" = Option<String>, Query, description = "`loop` (default), `provider` or `day`."),
    ),
    responses((status = 200, description = "`loops usage --json`.", body = loops_core::usage::UsageReport)))]
pub(crate) async fn usage(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<EncodedJson, ApiError> {
    let p = Params::parse(q.as_deref(), &["since", "by"])?;
    let by: loops_core::usage::GroupBy = p
        .get("by")
        .unwrap_or("loop")
        .parse()
        .map_err(ApiError::invalid)?;
    let span = loops_core::Duration::parse(p.get("since").unwrap_or("7d"))
        .map_err(|e| ApiError::invalid(format!("invalid since: {e}")))?;
    blocking(&state, move |c| {
        let since = chrono::Utc::now() - span.to_chrono();
        let report = c.usage(since, by)?;
        let doc = EncodedJson::of(&report)?;
        drop(report);
        Ok(doc.after_report())
    })
    .await
}

/// Every budget against its spend in its current UTC day or week (`loops budget list
/// --json` with the loops' own budgets too, as `loops usage --json` lists them).
#[utoipa::path(get, path = "/v1/budgets", tag = "status",
    responses((status = 200, description = "Each budget and its spend.", body = Vec<loops_core::budget::BudgetStatus>)))]
pub(crate) async fn budgets(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<Vec<loops_core::budget::BudgetStatus>>, ApiError> {
    Params::parse(q.as_deref(), &[])?;
    let status = blocking(
        &state,
        move |c| Ok(c.all_budget_status(chrono::Utc::now())?),
    )
    .await?;
    Ok(Json(status))
}

/// The limits of a store-wide budget (`loops budget set KEY --tokens … --usd …`).
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetBody {
    /// Tokens per UTC day or week (`"1000000/day"`).
    #[serde(default)]
    pub tokens: Option<String>,
    /// US dollars per UTC day or week (`"20/week"`).
    #[serde(default)]
    pub usd: Option<String>,
}

/// Sets the store-wide budget of a provider (and account): the limits given replace
/// the key's (`loops budget set`).
#[utoipa::path(put, path = "/v1/budgets/{key}", tag = "status",
    params(("key" = String, Path, description = "`provider=claude` or `provider=claude,account=work`.")),
    request_body = BudgetBody,
    responses(
        (status = 200, description = "The budget as stored.", body = loops_core::budget::StoreBudget),
        (status = 400, description = "A bad key or limit.", body = ErrorBody),
    ))]
pub(crate) async fn set_budget(
    axum::extract::State(state): axum::extract::State<State>,
    axum::extract::Path(key): axum::extract::Path<String>,
    RawQuery(q): RawQuery,
    // Our body reader, as every route's: one JSON error for a missing or wrong
    // content type, a bad or oversized body (axum's `Json` answered in plain text).
    JsonBody(body): JsonBody<BudgetBody>,
) -> Result<Json<loops_core::budget::StoreBudget>, ApiError> {
    Params::parse(q.as_deref(), &[])?;
    let budget = blocking(&state, move |c| {
        Ok(c.set_budget(
            &key,
            body.tokens.as_deref(),
            body.usd.as_deref(),
            chrono::Utc::now(),
        )?)
    })
    .await?;
    Ok(Json(budget))
}

/// Removes the store-wide budget of exactly a key (`loops budget clear`).
#[utoipa::path(delete, path = "/v1/budgets/{key}", tag = "status",
    params(("key" = String, Path, description = "`provider=claude` or `provider=claude,account=work`.")),
    responses(
        (status = 200, description = "The budget removed.", body = loops_core::budget::StoreBudget),
        (status = 400, description = "A bad key, or no budget for it.", body = ErrorBody),
    ))]
pub(crate) async fn clear_budget(
    axum::extract::State(state): axum::extract::State<State>,
    axum::extract::Path(key): axum::extract::Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<loops_core::budget::StoreBudget>, ApiError> {
    Params::parse(q.as_deref(), &[])?;
    let cleared = blocking(&state, move |c| {
        Ok(c.clear_budget(&key, chrono::Utc::now())?)
    })
    .await?;
    Ok(Json(cleared))
}
