//! `/v1/loops`: list (the CLI's `list` filters), show, create, edit (a JSON merge patch
//! over the definition), pause / resume / stop / archive / unarchive, run-now, remove.

use super::blocking;
use crate::error::{ApiError, ErrorBody};
use crate::request::{parse_json, read_body, JsonBody, Params};
use crate::State;
use axum::extract::{Path, RawQuery, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use loops_core::redact::{redact_loop, redact_run};
use loops_core::{
    Account, AgentTarget, Anchor, CatchUp, CommandTarget, Duration, Instant, Loop, LoopStatus,
    Notify, Overlap, Policy, RetryBackoff, Run, RunSource, Schedule, Target, WorkflowTarget,
};
use loops_runtime::client::LoopDefinition;
use loops_runtime::definition::parse_enum;
use loops_store::LoopFilter;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A loop's definition as a JSON document: what `POST /v1/loops` takes, and what a
/// `PATCH` is merged over. Only `name`, `schedule` and `target` are needed; what is
/// left out gets the CLI's defaults (the same values, from the same place), as each
/// field says.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopDefinitionBody {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub schedule: ScheduleBody,
    pub target: TargetBody,
    /// Default `latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up: Option<CatchUp>,
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_limit: Option<u32>,
    /// Default `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Default 60000 (1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay_ms: Option<u64>,
    /// Default 1800000 (30m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    #[serde(
        default,
        with = "loops_core::timefmt::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Instant>,
    /// Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    /// `fixed` (the default) or `exponential` (README, "Agent operations").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<RetryBackoff>,
    /// The longest delay before a retry (default 6 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay_max_ms: Option<u64>,
    /// Consecutive failed slots that park the loop (the circuit breaker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    /// Stop condition: a shell command run after each successful run in the loop's
    /// cwd; exit 0 ends the loop (status `done`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_cmd: Option<String>,
    /// Stop condition: a regex; a successful run whose summary (agents) or stdout
    /// (commands, workflows) matches it ends the loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_output: Option<String>,
    /// Stop condition: the loop ends once this many of its slots have ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    /// Budget (agent loops): tokens per UTC day or week (`"200000/day"`); once spent the
    /// loop is held until the window resets.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "loops_core::budget::serde_tokens"
    )]
    #[schema(value_type = Option<String>, example = "200000/day")]
    pub budget_tokens: Option<loops_core::budget::Budget>,
    /// Budget (agent loops): US dollars per UTC day or week (`"5/week"`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "loops_core::budget::serde_usd"
    )]
    #[schema(value_type = Option<String>, example = "5/week")]
    pub budget_usd: Option<loops_core::budget::Budget>,
    #[serde(default)]
    pub labels: Vec<String>,
    /// Runner labels a runner must have, all of them, to run the loop (`create --on`;
    /// PostgreSQL stores).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_on: Vec<String>,
    /// Where notifications go (`cmd`, `url`) and when (`on`, default `failure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
    /// Also check that the target could start here now (the CLI's `--preflight`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preflight: bool,
}

/// A schedule as a definition document gives it: a loop's, with the CLI's defaults
/// for what is left out.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ScheduleBody {
    /// One slot at an absolute instant.
    #[serde(rename_all = "camelCase")]
    Once {
        #[serde(with = "loops_core::timefmt")]
        #[schema(value_type = String, format = DateTime)]
        at: Instant,
    },
    /// A slot every `everyMs`.
    #[serde(rename_all = "camelCase")]
    Interval {
        every_ms: u64,
        /// Default `fixed_rate` (as `--every` without `--anchor`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        anchor: Option<Anchor>,
    },
    /// Five-field cron in an IANA zone.
    #[serde(rename_all = "camelCase")]
    Cron {
        expression: String,
        /// Default: the server's zone (`TZ` when it names one, else the system's), as
        /// `--cron` without `--tz`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
    /// `minIntervalMs` after the previous finish, no backfill.
    #[serde(rename_all = "camelCase")]
    Dynamic { min_interval_ms: u64 },
}

impl ScheduleBody {
    fn of(schedule: &Schedule) -> Self {
        match schedule.clone() {
            Schedule::Once { at } => Self::Once { at },
            Schedule::Interval { every_ms, anchor } => Self::Interval {
                every_ms,
                anchor: Some(anchor),
            },
            Schedule::Cron {
                expression,
                timezone,
            } => Self::Cron {
                expression,
                timezone: Some(timezone),
            },
            Schedule::Dynamic { min_interval_ms } => Self::Dynamic { min_interval_ms },
        }
    }

    fn into_schedule(self) -> Schedule {
        match self {
            Self::Once { at } => Schedule::Once { at },
            Self::Interval { every_ms, anchor } => Schedule::Interval {
                every_ms,
                anchor: anchor.unwrap_or(Anchor::DEFAULT),
            },
            Self::Cron {
                expression,
                timezone,
            } => Schedule::Cron {
                expression,
                timezone: timezone.unwrap_or_else(loops_runtime::definition::local_zone),
            },
            Self::Dynamic { min_interval_ms } => Schedule::Dynamic { min_interval_ms },
        }
    }
}

/// What a loop runs, as a definition document gives it (an agent's and a workflow's
/// fields are a loop's, with their defaults: `configIsolation` `safe`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
// As `loops_core::Target`: one per request, not worth a box.
#[allow(clippy::large_enum_variant)]
pub enum TargetBody {
    Command(CommandBody),
    Agent(AgentTarget),
    Workflow(WorkflowTarget),
}

/// A command target: a loop's, with the CLI's default for `shell`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandBody {
    pub command: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Whether `/bin/sh` runs `command`. Default: `true` for a command given as one
    /// string (no `args`), `false` for a program and its `args` — as `create command`
    /// with and without arguments after `--`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<bool>,
    #[serde(
        default,
        deserialize_with = "loops_core::unique_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub env: BTreeMap<String, String>,
    /// Kills the run after this long; no limit without it.
    #[serde(default, rename = "timeoutMs", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Ends the run when it prints nothing for this long; no limit without it.
    #[serde(
        default,
        rename = "idleTimeoutMs",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<Account>,
}

impl TargetBody {
    fn of(target: &Target) -> Self {
        match target.clone() {
            Target::Command(c) => Self::Command(CommandBody {
                command: c.command,
                args: c.args,
                cwd: c.cwd,
                shell: Some(c.shell),
                env: c.env,
                timeout: c.timeout,
                idle_timeout: c.idle_timeout,
                account: c.account,
            }),
            Target::Agent(a) => Self::Agent(a),
            Target::Workflow(w) => Self::Workflow(w),
        }
    }

    fn into_target(self) -> Target {
        match self {
            Self::Command(c) => Target::Command(CommandTarget {
                shell: c
                    .shell
                    .unwrap_or_else(|| CommandTarget::default_shell(&c.args)),
                command: c.command,
                args: c.args,
                cwd: c.cwd,
                env: c.env,
                timeout: c.timeout,
                idle_timeout: c.idle_timeout,
                account: c.account,
            }),
            Self::Agent(a) => Target::Agent(a),
            Self::Workflow(w) => Target::Workflow(w),
        }
    }
}

impl LoopDefinitionBody {
    fn of(def: &LoopDefinition) -> Self {
        let p = &def.policy;
        Self {
            name: def.name.clone(),
            description: def.description.clone(),
            schedule: ScheduleBody::of(&def.schedule),
            target: TargetBody::of(&def.target),
            catch_up: Some(p.catch_up),
            catch_up_limit: Some(p.catch_up_limit),
            overlap: Some(p.overlap),
            max_attempts: Some(p.max_attempts),
            retry_delay_ms: Some(p.retry_delay_ms),
            lease_ms: Some(p.lease_ms),
            expires_at: p.expires_at,
            jitter_ms: Some(p.jitter_ms),
            retry_backoff: Some(p.ops.retry_backoff),
            retry_delay_max_ms: Some(p.ops.retry_delay_max_ms),
            max_failures: p.ops.max_failures,
            until_cmd: p.ops.until_cmd.clone(),
            until_output: p.ops.until_output.clone(),
            max_runs: p.ops.max_runs,
            budget_tokens: p.ops.budget_tokens,
            budget_usd: p.ops.budget_usd,
            labels: def.labels.clone(),
            runs_on: p.runs_on.clone(),
            notify: def.notify.clone(),
            preflight: false,
        }
    }

    /// The definition, with the CLI's defaults for what is not given; the checks the
    /// CLI makes before the client's (a shell command takes no separate args).
    pub(crate) fn into_definition(self) -> Result<(LoopDefinition, bool), ApiError> {
        let target = self.target.into_target();
        if let Target::Command(c) = &target {
            if c.shell && !c.args.is_empty() {
                return Err(ApiError::invalid(
                    "target.args need target.shell false (with a shell, put them in target.command)",
                ));
            }
        }
        let d = Policy::default();
        let policy = Policy {
            catch_up: self.catch_up.unwrap_or(d.catch_up),
            catch_up_limit: self.catch_up_limit.unwrap_or(d.catch_up_limit),
            overlap: self.overlap.unwrap_or(d.overlap),
            max_attempts: self.max_attempts.unwrap_or(d.max_attempts),
            retry_delay_ms: self.retry_delay_ms.unwrap_or(d.retry_delay_ms),
            lease_ms: self.lease_ms.unwrap_or(d.lease_ms),
            expires_at: self.expires_at,
            jitter_ms: self.jitter_ms.unwrap_or(d.jitter_ms),
            runs_on: self.runs_on,
            ops: loops_core::LoopOps {
                retry_backoff: self.retry_backoff.unwrap_or(d.ops.retry_backoff),
                retry_delay_max_ms: self.retry_delay_max_ms.unwrap_or(d.ops.retry_delay_max_ms),
                max_failures: self.max_failures,
                until_cmd: self.until_cmd,
                until_output: self.until_output,
                max_runs: self.max_runs,
                budget_tokens: self.budget_tokens,
                budget_usd: self.budget_usd,
            },
        };
        Ok((
            LoopDefinition {
                name: self.name,
                description: self.description,
                schedule: self.schedule.into_schedule(),
                target,
                policy,
                labels: self.labels,
                notify: self.notify,
            },
            self.preflight,
        ))
    }
}

/// What `DELETE /v1/loops/{key}` answers (`loops remove --json`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Removed {
    pub removed: bool,
    pub id: String,
    pub name: String,
}

/// What run-now answers (`loops run-now --json`): the run's fields and `runNow`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the runtime's RunNowJson
pub struct RunNowDocument {
    #[serde(flatten)]
    pub run: Run,
    pub run_now: RunNowInfo,
}

/// Which slot a run-now run is.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct RunNowInfo {
    pub source: RunSource,
    /// Whether it was the loop's due (or retry) slot, which moves its schedule on.
    pub advances_loop: bool,
}

/// The shown form of a loop: secrets redacted unless `reveal`.
fn shown(mut lp: Loop, reveal: bool) -> Loop {
    if !reveal {
        redact_loop(&mut lp);
    }
    lp
}

fn now() -> Instant {
    chrono::Utc::now()
}

/// Every loop (but archived ones), by name.
#[utoipa::path(get, path = "/v1/loops", tag = "loops",
    params(
        ("status" = Option<LoopStatus>, Query, description = "Only loops of this status (`archived` lists archived ones)."),
        ("label" = Option<Vec<String>>, Query, explode = true, description = "Only loops carrying every one of these labels (repeat, or comma-separate)."),
        ("all" = Option<bool>, Query, description = "Archived loops too."),
        ("limit" = Option<usize>, Query, description = "At most this many (after `offset`)."),
        ("offset" = Option<usize>, Query, description = "Skip this many first."),
        ("showOutput" = Option<bool>, Query, description = "Prompts, env values and webhook URLs unredacted."),
    ),
    responses(
        (status = 200, description = "Loops by name (`loops list --json`).", body = Vec<Loop>),
        (status = 400, description = "A bad filter.", body = ErrorBody),
        (status = 401, description = "No or a wrong token.", body = ErrorBody),
    ))]
pub(crate) async fn list(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<Vec<Loop>>, ApiError> {
    let p = Params::parse(
        q.as_deref(),
        &["status", "label", "all", "limit", "offset", "showOutput"],
    )?;
    let status = p
        .get("status")
        .map(|s| parse_enum::<LoopStatus>("status", s).map_err(ApiError::invalid))
        .transpose()?;
    // Filtered, ordered and paged by the store: a page reads only its own rows.
    let filter = LoopFilter {
        status,
        include_archived: p.flag("all", false)?,
        labels: p.all("label"),
        offset: p.count("offset")?.unwrap_or(0),
        limit: p.count("limit")?,
        ..LoopFilter::default()
    };
    let reveal = p.flag("showOutput", false)?;
    let loops = blocking(&state, move |c| Ok(c.list_matching(&filter)?)).await?;
    Ok(Json(
        loops.into_iter().map(|lp| shown(lp, reveal)).collect(),
    ))
}

/// One loop, by id, name or unambiguous id prefix.
#[utoipa::path(get, path = "/v1/loops/{key}", tag = "loops",
    params(
        ("key" = String, Path, description = "The loop's id, name or an unambiguous id prefix."),
        ("showOutput" = Option<bool>, Query, description = "Prompts, env values and webhook URLs unredacted."),
    ),
    responses(
        (status = 200, description = "The loop (`loops show --json`).", body = Loop),
        (status = 404, description = "No such loop.", body = ErrorBody),
        (status = 409, description = "The prefix matches several loops.", body = ErrorBody),
    ))]
pub(crate) async fn show(
    axum::extract::State(state): axum::extract::State<State>,
    Path(key): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<Loop>, ApiError> {
    let p = Params::parse(q.as_deref(), &["showOutput"])?;
    let reveal = p.flag("showOutput", false)?;
    let lp = blocking(&state, move |c| Ok(c.get(&key)?)).await?;
    Ok(Json(shown(lp, reveal)))
}

/// Creates a loop, validated as `loops create` validates.
#[utoipa::path(post, path = "/v1/loops", tag = "loops",
    request_body = LoopDefinitionBody,
    responses(
        (status = 201, description = "The loop created (`loops create --json`).", body = Loop),
        (status = 400, description = "Invalid definition (the CLI's message).", body = ErrorBody),
        (status = 409, description = "The name is taken.", body = ErrorBody),
        (status = 413, description = "Body too large.", body = ErrorBody),
    ))]
pub(crate) async fn create(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody<LoopDefinitionBody>,
) -> Result<(StatusCode, Json<Loop>), ApiError> {
    Params::parse(q.as_deref(), &[])?;
    let (def, preflight) = body.into_definition()?;
    let lp = blocking(&state, move |c| {
        if preflight {
            check_preflight(c, &def.target)?;
        }
        Ok(c.create(def, now())?)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(shown(lp, false))))
}

fn check_preflight(c: &loops_runtime::Client, target: &Target) -> Result<(), ApiError> {
    match c.check_target(target).first() {
        Some(problem) => Err(ApiError::invalid(format!("preflight failed: {problem}"))),
        None => Ok(()),
    }
}

/// Edits a loop in place (`loops edit`): the body is a JSON merge patch (RFC 7386) over
/// the loop's definition document ([`LoopDefinitionBody`]): fields given replace, `null`
/// clears, objects (the target, the schedule) merge. Validated as `loops edit`.
#[utoipa::path(patch, path = "/v1/loops/{key}", tag = "loops",
    params(("key" = String, Path, description = "The loop's id, name or an unambiguous id prefix.")),
    request_body(content = Object, description = "A JSON merge patch over the loop's definition document (LoopDefinitionBody).", content_type = "application/json"),
    responses(
        (status = 200, description = "The loop as edited (`loops edit --json`).", body = Loop),
        (status = 400, description = "Invalid patch or definition.", body = ErrorBody),
        (status = 404, description = "No such loop.", body = ErrorBody),
        (status = 409, description = "The name is taken, or the loop kept changing.", body = ErrorBody),
    ))]
pub(crate) async fn edit(
    axum::extract::State(state): axum::extract::State<State>,
    Path(key): Path<String>,
    req: Request,
) -> Result<Json<Loop>, ApiError> {
    Params::parse(req.uri().query(), &[])?;
    let bytes = read_body(req, &state).await?;
    let patch: serde_json::Value = parse_json(&bytes)?;
    if !patch.is_object() {
        return Err(ApiError::invalid(
            "invalid JSON body: a merge patch is a JSON object",
        ));
    }
    let lp = blocking(&state, move |c| {
        let before = c.get(&key)?;
        let (def, preflight) = patched(&LoopDefinition::from(&before), &patch)?;
        if preflight {
            check_preflight(c, &def.target)?;
        }
        Ok(c.edit(before.id.as_str(), def, now())?)
    })
    .await?;
    Ok(Json(shown(lp, false)))
}

/// A merge patch over `current` (the patch already known to be an object): the
/// definition it makes, and whether it asks for a preflight.
pub(crate) fn patched(
    current: &LoopDefinition,
    patch: &serde_json::Value,
) -> Result<(LoopDefinition, bool), ApiError> {
    let mut doc = serde_json::to_value(LoopDefinitionBody::of(current))
        .map_err(|e| ApiError::failed(format!("cannot encode the loop: {e}")))?;
    merge_patch(&mut doc, patch);
    let body: LoopDefinitionBody = parse_json(doc.to_string().as_bytes())?;
    body.into_definition()
}

/// RFC 7386.
fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = serde_json::Value::Object(Default::default());
    }
    if let Some(obj) = target.as_object_mut() {
        for (k, v) in fields {
            if v.is_null() {
                obj.remove(k);
            } else {
                merge_patch(obj.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
    }
}

macro_rules! lifecycle {
    ($name:ident, $path:literal, $doc:literal, $call:expr) => {
        #[doc = $doc]
        #[utoipa::path(post, path = $path, tag = "loops",
            params(("key" = String, Path, description = "The loop's id, name or an unambiguous id prefix.")),
            responses(
                (status = 200, description = "The loop after the change (as the CLI's `--json`).", body = Loop),
                (status = 400, description = "Refused in its state (the CLI's message).", body = ErrorBody),
                (status = 404, description = "No such loop.", body = ErrorBody),
            ))]
        pub(crate) async fn $name(
            axum::extract::State(state): axum::extract::State<State>,
            Path(key): Path<String>,
            RawQuery(q): RawQuery,
        ) -> Result<Json<Loop>, ApiError> {
            Params::parse(q.as_deref(), &[])?;
            let call = $call;
            let lp = blocking(&state, move |c| Ok(call(c, &key)?)).await?;
            Ok(Json(shown(lp, false)))
        }
    };
}

lifecycle!(
    pause,
    "/v1/loops/{key}/pause",
    "Stops scheduling a loop until resumed (`loops pause`).",
    |c: &loops_runtime::Client, k: &str| c.pause(k, now())
);
lifecycle!(
    resume,
    "/v1/loops/{key}/resume",
    "Re-activates a loop (`loops resume`).",
    |c: &loops_runtime::Client, k: &str| c.resume(k, now())
);
lifecycle!(
    stop,
    "/v1/loops/{key}/stop",
    "Stops a loop until an explicit resume (`loops stop`).",
    |c: &loops_runtime::Client, k: &str| c.stop(k, now())
);
lifecycle!(
    unarchive,
    "/v1/loops/{key}/unarchive",
    "Brings an archived loop back, paused (`loops unarchive`).",
    |c: &loops_runtime::Client, k: &str| c.unarchive(k, now())
);

/// Archives a loop (`loops archive [--free-name]`).
#[utoipa::path(post, path = "/v1/loops/{key}/archive", tag = "loops",
    params(
        ("key" = String, Path, description = "The loop's id, name or an unambiguous id prefix."),
        ("freeName" = Option<bool>, Query, description = "Rename it NAME~ID so a new loop can take the name."),
    ),
    responses(
        (status = 200, description = "The loop archived (`loops archive --json`).", body = Loop),
        (status = 400, description = "Already archived.", body = ErrorBody),
        (status = 404, description = "No such loop.", body = ErrorBody),
    ))]
pub(crate) async fn archive(
    axum::extract::State(state): axum::extract::State<State>,
    Path(key): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<Loop>, ApiError> {
    let p = Params::parse(q.as_deref(), &["freeName"])?;
    let free = p.flag("freeName", false)?;
    let lp = blocking(&state, move |c| Ok(c.archive(&key, free, now())?)).await?;
    Ok(Json(shown(lp, false)))
}

/// Removes a loop and its history (`loops remove [--force]`).
#[utoipa::path(delete, path = "/v1/loops/{key}", tag = "loops",
    params(
        ("key" = String, Path, description = "The loop's id, name or an unambiguous id prefix."),
        ("force" = Option<bool>, Query, description = "Terminate its runs in flight first."),
    ),
    responses(
        (status = 200, description = "What was removed (`loops remove --json`).", body = Removed),
        (status = 404, description = "No such loop.", body = ErrorBody),
        (status = 409, description = "It has runs in flight (without force).", body = ErrorBody),
    ))]
pub(crate) async fn remove(
    axum::extract::State(state): axum::extract::State<State>,
    Path(key): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<Removed>, ApiError> {
    let p = Params::parse(q.as_deref(), &["force"])?;
    let force = p.flag("force", false)?;
    let r = blocking(&state, move |c| Ok(c.remove(&key, force)?)).await?;
    Ok(Json(Removed {
        removed: true,
        id: r.id.to_string(),
        name: r.name,
    }))
}

/// How long run-now with `wait=true` waits at most, and by default.
const WAIT_MAX_SECS: u64 = 3_600;
const WAIT_DEFAULT_SECS: u64 = 60;

/// Runs a loop now, in this server (`loops run-now`): its due slot when one is due,
/// else a one-off slot at now. Answers at once with the running run (202); with
/// `wait=true`, once it ended (200), or with it still running after `timeout`
/// seconds (202).
#[utoipa::path(post, path = "/v1/loops/{key}/run-now", tag = "loops",
    params(
        ("key" = String, Path, description = "The loop's id, name or an unambiguous id prefix."),
        ("allowOverlap" = Option<bool>, Query, description = "Run even while a run of it is in flight (overlap skip)."),
        ("wait" = Option<bool>, Query, description = "Answer once the run ended (bounded by timeout)."),
        ("timeout" = Option<u64>, Query, description = "Seconds to wait with wait=true (default 60, at most 3600)."),
        ("showOutput" = Option<bool>, Query, description = "The run's output unredacted."),
    ),
    responses(
        (status = 200, description = "The run, ended (`loops run-now --json`).", body = RunNowDocument),
        (status = 202, description = "The run, still running.", body = RunNowDocument),
        (status = 400, description = "Refused (archived, …).", body = ErrorBody),
        (status = 404, description = "No such loop.", body = ErrorBody),
        (status = 409, description = "A run is in flight (overlap skip).", body = ErrorBody),
    ))]
pub(crate) async fn run_now(
    axum::extract::State(state): axum::extract::State<State>,
    Path(key): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let p = Params::parse(
        q.as_deref(),
        &["allowOverlap", "wait", "timeout", "showOutput"],
    )?;
    let allow_overlap = p.flag("allowOverlap", false)?;
    let wait = p.flag("wait", false)?;
    let reveal = p.flag("showOutput", false)?;
    let timeout = p
        .count("timeout")?
        .map_or(WAIT_DEFAULT_SECS, |t| t as u64)
        .min(WAIT_MAX_SECS);
    let (run, source, done) = crate::api::runs::start_run_now(&state, key, allow_overlap).await?;
    let mut ended = None;
    if wait {
        if let Ok(Ok(outcome)) =
            tokio::time::timeout(std::time::Duration::from_secs(timeout), done).await
        {
            ended = Some(outcome);
        }
    }
    let (status, mut run) = match ended {
        Some(run) => (StatusCode::OK, run),
        None => (StatusCode::ACCEPTED, run),
    };
    if !reveal {
        redact_run(&mut run);
    }
    // The document `loops run-now --json` prints (the runtime's, shared).
    let doc = loops_runtime::client::RunNowJson::new(&run, source);
    Ok((status, Json(doc)).into_response())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{merge_patch, LoopDefinitionBody};
    use loops_core::{Anchor, ConfigIsolation, Policy, Schedule, Target};
    use loops_runtime::client::LoopDefinition;
    use serde_json::json;

    fn definition(body: serde_json::Value) -> LoopDefinition {
        let body: LoopDefinitionBody = serde_json::from_value(body).unwrap();
        body.into_definition().unwrap().0
    }

    #[test]
    fn a_minimal_definition_gets_the_clis_defaults() {
        let def = definition(json!({"name": "a",
            "schedule": {"type": "interval", "everyMs": 3_600_000},
            "target": {"type": "command", "command": "echo hi"}}));
        assert_eq!(
            def.schedule,
            Schedule::Interval {
                every_ms: 3_600_000,
                anchor: Anchor::DEFAULT
            }
        );
        let Target::Command(c) = &def.target else {
            panic!("{:?}", def.target)
        };
        assert!(c.shell, "one string runs by the shell");
        assert_eq!(def.policy, Policy::default());
        assert_eq!(def.notify, None);

        let def = definition(json!({"name": "b",
            "schedule": {"type": "cron", "expression": "0 9 * * *"},
            "target": {"type": "command", "command": "echo", "args": ["x"]}}));
        let Schedule::Cron { timezone, .. } = &def.schedule else {
            panic!("{:?}", def.schedule)
        };
        assert_eq!(*timezone, loops_runtime::definition::local_zone());
        let Target::Command(c) = &def.target else {
            panic!("{:?}", def.target)
        };
        assert!(!c.shell, "a program and its args run directly");

        let def = definition(json!({"name": "c",
            "schedule": {"type": "dynamic", "minIntervalMs": 60_000},
            "target": {"type": "agent", "provider": "claude", "prompt": "hi"}}));
        let Target::Agent(a) = &def.target else {
            panic!("{:?}", def.target)
        };
        assert_eq!(a.config_isolation, ConfigIsolation::DEFAULT);
    }

    #[test]
    fn what_is_given_is_kept_and_survives_the_round_trip() {
        let given = json!({"name": "a",
            "schedule": {"type": "interval", "everyMs": 60_000, "anchor": "fixed_delay"},
            "target": {"type": "command", "command": "true", "shell": false},
            "overlap": "allow", "maxAttempts": 3});
        let def = definition(given);
        assert_eq!(
            def.schedule,
            Schedule::Interval {
                every_ms: 60_000,
                anchor: Anchor::FixedDelay
            }
        );
        let Target::Command(c) = &def.target else {
            panic!("{:?}", def.target)
        };
        assert!(!c.shell);
        assert_eq!(def.policy.max_attempts, 3);
        // What a PATCH is merged over says every default, so a merge keeps them.
        let doc = serde_json::to_value(LoopDefinitionBody::of(&def)).unwrap();
        assert_eq!(doc["schedule"]["anchor"], "fixed_delay");
        assert_eq!(doc["target"]["shell"], false);
        assert_eq!(definition(doc).schedule, def.schedule);
    }

    #[test]
    fn a_patch_clearing_a_defaulted_field_gets_the_default_again() {
        let def = definition(json!({"name": "a",
            "schedule": {"type": "interval", "everyMs": 60_000, "anchor": "fixed_delay"},
            "target": {"type": "command", "command": "echo hi"}}));
        let mut doc = serde_json::to_value(LoopDefinitionBody::of(&def)).unwrap();
        merge_patch(
            &mut doc,
            &json!({"schedule": {"anchor": null},
                    "target": {"command": "echo", "args": ["x"], "shell": null}}),
        );
        let def = definition(doc);
        assert_eq!(
            def.schedule,
            Schedule::Interval {
                every_ms: 60_000,
                anchor: Anchor::DEFAULT
            }
        );
        let Target::Command(c) = &def.target else {
            panic!("{:?}", def.target)
        };
        assert!(!c.shell && c.args == ["x"], "{c:?}");
    }

    #[test]
    fn a_shell_with_args_is_refused_as_the_cli_refuses_it() {
        let body: LoopDefinitionBody = serde_json::from_value(json!({"name": "a",
            "schedule": {"type": "interval", "everyMs": 60_000},
            "target": {"type": "command", "command": "echo", "args": ["x"], "shell": true}}))
        .unwrap();
        assert!(body.into_definition().is_err());
    }

    #[test]
    fn a_merge_patch_replaces_clears_and_merges_objects() {
        let mut doc = json!({
            "name": "a", "description": "d", "labels": ["x"],
            "target": {"type": "command", "command": "true", "env": {"A": "1", "B": "2"}},
        });
        merge_patch(
            &mut doc,
            &json!({"description": null, "labels": ["y"], "target": {"command": "false", "env": {"A": null}}}),
        );
        assert_eq!(
            doc,
            json!({"name": "a", "labels": ["y"],
                   "target": {"type": "command", "command": "false", "env": {"B": "2"}}})
        );
    }
}
