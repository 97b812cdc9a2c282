//! Delivering notifications (README, "Notifications"). The store queues them: the
//! transaction that finalizes a run inserts one `pending` delivery per channel when
//! the domain says so (`loops_core::notify::decide`). This module delivers pending
//! rows, off the engine's hot path:
//!
//! - a **command hook** runs through the executor (`/bin/sh -c CMD`, its own process
//!   group, [`DeliveryPolicy::hook_timeout`], bounded output) with the payload JSON on
//!   stdin and `LOOPS_*` variables in its environment; it is tried once;
//! - a **webhook** gets the same JSON by HTTP POST (ureq on a blocking thread), each try
//!   bounded by [`DeliveryPolicy::webhook_timeout`], retried with capped exponential
//!   back-off on connection errors, timeouts and 5xx answers — never on 4xx or 3xx
//!   (redirects are not followed) — up to [`DeliveryPolicy::webhook_tries`] tries.
//!
//! Every try is recorded on the row (attempts, last error) and its end sets it
//! `delivered` or `failed`. A row is claimed by one runner at a time
//! ([`loops_store::Store::claim_delivery`]): the daemon's [`Notifier`] delivers what its
//! engine queued at once and sweeps the store for the rest every [`SWEEP_EVERY`]
//! (rows left by a `tick`, a `run-now` or a daemon that died, taken over once their
//! claimer's process is gone or the claim expired), at most
//! [`DeliveryPolicy::max_concurrent`] at a time. `tick` and `run-now` deliver their own
//! before exiting ([`deliver_now`], bounded by [`CLI_DELIVERY_BOUND`]).
//!
//! A slow or broken hook never delays scheduling: deliveries are tasks of their own,
//! each bounded in time, and the store calls they make run on blocking threads.

use crate::backoff::Backoff;
use crate::engine::parse_runner_id;
use crate::env::build_env;
use crate::executor::{execute, ExecStatus, Invocation};
use crate::process::{hostname, is_same_process_alive};
use crate::targets::ExecSettings;
use loops_core::notify::{first_line, tail, PAYLOAD_OUTPUT_BYTES, PAYLOAD_VERSION};
use loops_core::{
    format_instant, Delivery, DeliveryStatus, Instant, Loop, NotifyChannel, NotifyEvent, Run,
};
use loops_store::{Store, StoreError};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// How long the daemon's notifier waits between sweeps of the store for pending
/// deliveries it was not told about (its own engine's are delivered at once).
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// How long `tick` and `run-now` wait for their own deliveries before exiting; what is
/// left is taken over by the daemon once this process is gone.
pub const CLI_DELIVERY_BOUND: Duration = Duration::from_secs(30);
/// Most pending rows looked at in one sweep.
const SWEEP_BATCH: usize = 64;
/// Bytes kept of a command hook's stdout and stderr (only its error is recorded).
const HOOK_OUTPUT_BYTES: usize = 16 * 1024;
/// Bytes of a webhook's answer quoted in an error.
const ANSWER_BYTES: u64 = 200;

/// How deliveries are made: bounds, tries and back-off.
#[derive(Debug, Clone)]
pub struct DeliveryPolicy {
    /// Limit of one command hook (SIGTERM to its group, then SIGKILL after the kill
    /// grace).
    pub hook_timeout: Duration,
    /// Limit of one HTTP try (connect, send, answer).
    pub webhook_timeout: Duration,
    /// Tries of a webhook, the first included.
    pub webhook_tries: u32,
    /// Back-off before the second try, doubling up to `retry_cap`.
    pub retry_first: Duration,
    pub retry_cap: Duration,
    /// Deliveries in flight at once (per runner).
    pub max_concurrent: usize,
    /// How long a claim holds before another runner may take it over (longer than the
    /// longest delivery: every try timing out plus the back-off between them; a runner
    /// on the same host whose process is gone is taken over at once).
    pub claim_for: Duration,
}

/// Default limit of one command hook and of one HTTP try (`daemon run
/// --notify-timeout`).
pub const DEFAULT_NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

impl DeliveryPolicy {
    /// The default policy with `timeout` for a hook's run and each HTTP try.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            hook_timeout: timeout,
            webhook_timeout: timeout,
            ..Self::default()
        }
    }
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        Self {
            hook_timeout: DEFAULT_NOTIFY_TIMEOUT,
            webhook_timeout: DEFAULT_NOTIFY_TIMEOUT,
            webhook_tries: 4,
            retry_first: Duration::from_secs(1),
            retry_cap: Duration::from_secs(8),
            max_concurrent: 8,
            claim_for: Duration::from_secs(300),
        }
    }
}

/// Deliveries queued by an engine's finalizations, handed to whoever delivers them
/// (the daemon's [`Notifier`], or `tick` / `run-now` before they exit).
#[derive(Default)]
pub struct DeliveryQueue {
    items: Mutex<Vec<Delivery>>,
    wake: tokio::sync::Notify,
}

impl DeliveryQueue {
    /// Adds deliveries and wakes the deliverer.
    pub fn push(&self, deliveries: Vec<Delivery>) {
        if deliveries.is_empty() {
            return;
        }
        lock(&self.items).extend(deliveries);
        self.wake.notify_one();
    }

    /// Takes everything queued so far.
    pub fn take(&self) -> Vec<Delivery> {
        std::mem::take(&mut *lock(&self.items))
    }

    /// Resolves once something is queued (immediately if something was queued since
    /// the last wait).
    pub async fn queued(&self) {
        self.wake.notified().await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The document a hook gets on stdin and a webhook in its body.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Payload {
    /// [`PAYLOAD_VERSION`].
    pub version: u32,
    pub event: NotifyEvent,
    /// The delivery's id (the same on every try: receivers can drop duplicates).
    pub delivery_id: Option<String>,
    #[serde(rename = "loop")]
    pub lp: Option<PayloadLoop>,
    /// The run as `runs --json --show-output` prints it, but with stdout and stderr
    /// cut to their last [`PAYLOAD_OUTPUT_BYTES`] (`[truncated N bytes]` marker).
    pub run: Option<Run>,
    #[serde(with = "loops_core::timefmt")]
    pub sent_at: Instant,
}

/// The loop a notification is about.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PayloadLoop {
    pub id: String,
    pub name: String,
    pub labels: Vec<String>,
}

impl Payload {
    /// The payload about `run` of `lp` (both optional: `notify test` may have neither).
    pub fn new(
        event: NotifyEvent,
        delivery_id: Option<String>,
        lp: Option<&Loop>,
        run: Option<&Run>,
        now: Instant,
    ) -> Self {
        let run = run.map(|r| {
            let mut r = r.clone();
            for text in [&mut r.stdout, &mut r.stderr].into_iter().flatten() {
                *text = tail(text, PAYLOAD_OUTPUT_BYTES);
            }
            r
        });
        Self {
            version: PAYLOAD_VERSION,
            event,
            delivery_id,
            lp: lp.map(|l| PayloadLoop {
                id: l.id.to_string(),
                name: l.name.clone(),
                labels: l.labels.clone(),
            }),
            run,
            sent_at: now,
        }
    }

    /// The `LOOPS_*` variables a command hook gets.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![("LOOPS_EVENT", self.event.to_string())];
        if let Some(id) = &self.delivery_id {
            vars.push(("LOOPS_DELIVERY_ID", id.clone()));
        }
        if let Some(lp) = &self.lp {
            vars.push(("LOOPS_LOOP_ID", lp.id.clone()));
            vars.push(("LOOPS_LOOP_NAME", lp.name.clone()));
        }
        if let Some(run) = &self.run {
            vars.extend([
                ("LOOPS_LOOP_ID", run.loop_id.to_string()),
                ("LOOPS_LOOP_NAME", run.loop_name.clone()),
                ("LOOPS_RUN_ID", run.id.to_string()),
                ("LOOPS_RUN_STATUS", run.status.to_string()),
                ("LOOPS_SCHEDULED_FOR", format_instant(&run.scheduled_for)),
                ("LOOPS_ATTEMPT", run.attempt.to_string()),
                (
                    "LOOPS_EXIT_CODE",
                    run.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                ),
                (
                    "LOOPS_RUN_ERROR",
                    run.error
                        .as_deref()
                        .map(|e| tail(&e.replace('\0', ""), PAYLOAD_OUTPUT_BYTES))
                        .unwrap_or_default(),
                ),
            ]);
        }
        vars
    }
}

/// How one try ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TryOutcome {
    Delivered,
    /// Worth another try (connection refused, timeout, 5xx).
    Retry(TryError),
    /// Not worth another (4xx, 3xx, a bad URL, a hook that failed).
    Fail(TryError),
}

/// Why a try failed: our words, recorded as the delivery's `lastError` and logged, and
/// what the hook (its stderr's first line) or the receiver (its answer's) said about
/// it. That is never recorded nor logged — it may echo the payload, which carries the
/// run's output — only `notify test` prints it to whoever ran it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TryError {
    pub error: String,
    pub said: Option<String>,
}

impl TryError {
    fn new(error: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            said: None,
        }
    }

    /// The error and what the other side said, for `notify test`.
    pub fn with_said(&self) -> String {
        match &self.said {
            Some(said) => format!("{}: {said}", self.error),
            None => self.error.clone(),
        }
    }
}

/// Makes deliveries: one per call of [`Deliverer::deliver`], claimed, tried and recorded.
pub struct Deliverer {
    store: Arc<dyn Store>,
    runner_id: String,
    policy: DeliveryPolicy,
    exec: ExecSettings,
    http: ureq::Agent,
    host: String,
}

impl Deliverer {
    pub fn new(
        store: Arc<dyn Store>,
        runner_id: String,
        policy: DeliveryPolicy,
        exec: ExecSettings,
    ) -> Self {
        let http = ureq::Agent::config_builder()
            .timeout_global(Some(policy.webhook_timeout))
            .max_redirects(0)
            .http_status_as_error(false)
            .user_agent(concat!("loops/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Self {
            store,
            runner_id,
            policy,
            exec,
            http,
            host: hostname(),
        }
    }

    pub fn policy(&self) -> &DeliveryPolicy {
        &self.policy
    }

    /// Whether this runner may take `d` over: unclaimed, its claim expired, or its
    /// claimer is a process on this host that is gone. Our own claims are in flight.
    fn may_claim(&self, d: &Delivery, now: Instant) -> bool {
        let Some(claimer) = d.claimed_by.as_deref() else {
            return true;
        };
        if claimer == self.runner_id {
            return false;
        }
        if d.claim_expires_at.is_none_or(|t| t <= now) {
            return true;
        }
        match parse_runner_id(claimer) {
            Some((host, pid, start)) => host == self.host && !is_same_process_alive(pid, start),
            None => false,
        }
    }

    /// Claims `d` (as last seen) for this runner; `None` when someone else has it.
    async fn claim(&self, d: &Delivery) -> Option<Delivery> {
        let now = chrono::Utc::now();
        if !self.may_claim(d, now) {
            return None;
        }
        let until = now + chrono::TimeDelta::from_std(self.policy.claim_for).ok()?;
        let (id, from, runner) = (d.id.clone(), d.claimed_by.clone(), self.runner_id.clone());
        self.delivery_call(d, "claim", move |s| {
            s.claim_delivery(&id, from.as_deref(), &runner, until, now)
        })
        .await
    }

    /// A store call about `d` that answers the delivery as it now is (`None`: not this
    /// runner's); a failure is logged ("cannot {what} a notification delivery") and is
    /// `None` too. Claiming and recording share it.
    async fn delivery_call(
        &self,
        d: &Delivery,
        what: &str,
        call: impl FnOnce(&dyn Store) -> Result<Option<Delivery>, StoreError> + Send + 'static,
    ) -> Option<Delivery> {
        match blocking(&self.store, call).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(delivery = %d.id, error = %e, "cannot {what} a notification delivery");
                None
            }
        }
    }

    /// Claims and makes one delivery; returns the row as recorded at its end (`None`:
    /// not ours to make, or it could not be recorded).
    pub async fn deliver(&self, seen: &Delivery) -> Option<Delivery> {
        let d = self.claim(seen).await?;
        let (run_id, loop_id) = (d.run_id.clone(), d.loop_id.clone());
        let found = blocking(&self.store, move |s| {
            Ok((s.get_run(&run_id)?, s.get_loop(&loop_id)?))
        })
        .await;
        let (run, lp) = match found {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(delivery = %d.id, error = %e, "cannot read the run of a notification");
                return None;
            }
        };
        let Some(run) = run else {
            return self
                .record(
                    &d,
                    DeliveryStatus::Failed,
                    d.attempts,
                    Some("the run no longer exists"),
                )
                .await;
        };
        let payload = Payload::new(
            d.event,
            Some(d.id.clone()),
            lp.as_ref(),
            Some(&run),
            chrono::Utc::now(),
        );
        let end = match d.channel {
            NotifyChannel::Cmd => {
                let outcome = self.hook(&d.target, &payload).await;
                let attempts = d.attempts.saturating_add(1);
                match outcome {
                    TryOutcome::Delivered => {
                        self.record(&d, DeliveryStatus::Delivered, attempts, None)
                            .await
                    }
                    TryOutcome::Retry(e) | TryOutcome::Fail(e) => {
                        self.record(&d, DeliveryStatus::Failed, attempts, Some(&e.error))
                            .await
                    }
                }
            }
            NotifyChannel::Url => self.webhook_with_retries(&d, &payload).await,
        };
        if let Some(done) = &end {
            log_end(done, &run);
        }
        end
    }

    async fn record(
        &self,
        d: &Delivery,
        status: DeliveryStatus,
        attempts: u32,
        error: Option<&str>,
    ) -> Option<Delivery> {
        let attempt = loops_store::DeliveryTry {
            id: d.id.clone(),
            runner_id: self.runner_id.clone(),
            status,
            attempts,
            last_error: error.map(str::to_owned),
        };
        self.delivery_call(d, "record", move |s| {
            s.record_delivery(&attempt, chrono::Utc::now())
        })
        .await
    }

    async fn webhook_with_retries(&self, d: &Delivery, payload: &Payload) -> Option<Delivery> {
        let body = match serde_json::to_vec(payload) {
            Ok(body) => body,
            Err(e) => {
                let e = format!("cannot encode the payload: {e}");
                return self
                    .record(d, DeliveryStatus::Failed, d.attempts, Some(&e))
                    .await;
            }
        };
        let tries = self.policy.webhook_tries.max(1);
        let mut backoff = Backoff::new(self.policy.retry_first, self.policy.retry_cap);
        let mut attempts = d.attempts;
        let mut last = d.clone();
        loop {
            if attempts >= tries {
                let e = last
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "no tries left".to_owned());
                return self
                    .record(d, DeliveryStatus::Failed, attempts, Some(&e))
                    .await;
            }
            attempts += 1;
            match self.post(&d.target, d, body.clone()).await {
                TryOutcome::Delivered => {
                    return self
                        .record(d, DeliveryStatus::Delivered, attempts, None)
                        .await
                }
                TryOutcome::Fail(e) => {
                    return self
                        .record(d, DeliveryStatus::Failed, attempts, Some(&e.error))
                        .await
                }
                TryOutcome::Retry(e) if attempts >= tries => {
                    return self
                        .record(d, DeliveryStatus::Failed, attempts, Some(&e.error))
                        .await
                }
                TryOutcome::Retry(e) => {
                    last = self
                        .record(d, DeliveryStatus::Pending, attempts, Some(&e.error))
                        .await?;
                    tokio::time::sleep(backoff.fail()).await;
                }
            }
        }
    }

    /// One HTTP try, on a blocking thread.
    async fn post(&self, url: &str, d: &Delivery, body: Vec<u8>) -> TryOutcome {
        let (agent, url) = (self.http.clone(), url.to_owned());
        let (id, event) = (d.id.clone(), d.event.to_string());
        tokio::task::spawn_blocking(move || post_once(&agent, &url, &id, &event, &body))
            .await
            .unwrap_or_else(|e| {
                TryOutcome::Fail(TryError::new(format!("the HTTP try panicked: {e}")))
            })
    }

    /// Runs a command hook once.
    pub async fn hook(&self, cmd: &str, payload: &Payload) -> TryOutcome {
        let stdin = match serde_json::to_vec(payload) {
            Ok(body) => body,
            Err(e) => {
                return TryOutcome::Fail(TryError::new(format!("cannot encode the payload: {e}")))
            }
        };
        let mut inv = Invocation::shell(cmd);
        inv.env = build_env(
            crate::env::inherited(),
            self.exec.home.as_deref(),
            &Default::default(),
            &payload.env(),
        );
        inv.stdin = Some(stdin);
        inv.timeout = Some(self.policy.hook_timeout);
        inv.kill_grace = self.exec.kill_grace;
        inv.max_output_bytes = HOOK_OUTPUT_BYTES;
        let result = execute(inv, |_, _| {}, std::future::pending()).await;
        match result.status {
            ExecStatus::Succeeded => TryOutcome::Delivered,
            _ => TryOutcome::Fail(TryError {
                error: result.error.unwrap_or_else(|| "failed".to_owned()),
                said: first_line(&result.stderr, 200),
            }),
        }
    }

    /// Sends `payload` to `url` now (`notify test`): tries and back-off as for a
    /// queued webhook, nothing recorded. Returns the tries made and how the last ended.
    pub async fn post_unrecorded(&self, url: &str, payload: &Payload) -> (u32, TryOutcome) {
        let body = match serde_json::to_vec(payload) {
            Ok(body) => body,
            Err(e) => {
                return (
                    0,
                    TryOutcome::Fail(TryError::new(format!("cannot encode the payload: {e}"))),
                )
            }
        };
        let tries = self.policy.webhook_tries.max(1);
        let mut backoff = Backoff::new(self.policy.retry_first, self.policy.retry_cap);
        let event = payload.event.to_string();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (agent, url, body, event) = (
                self.http.clone(),
                url.to_owned(),
                body.clone(),
                event.clone(),
            );
            let outcome =
                tokio::task::spawn_blocking(move || post_once(&agent, &url, "test", &event, &body))
                    .await
                    .unwrap_or_else(|e| {
                        TryOutcome::Fail(TryError::new(format!("the HTTP try panicked: {e}")))
                    });
            match outcome {
                TryOutcome::Retry(_) if attempt < tries => {
                    tokio::time::sleep(backoff.fail()).await;
                }
                other => return (attempt, other),
            }
        }
    }
}

/// One POST of `body` to `url`, classified.
fn post_once(agent: &ureq::Agent, url: &str, id: &str, event: &str, body: &[u8]) -> TryOutcome {
    let sent = agent
        .post(url)
        .header("Content-Type", "application/json")
        .header("X-Loops-Event", event)
        .header("X-Loops-Delivery", id)
        .send(body);
    match sent {
        Ok(mut answer) => {
            let status = answer.status().as_u16();
            if (200..300).contains(&status) {
                return TryOutcome::Delivered;
            }
            let text = answer
                .body_mut()
                .with_config()
                .limit(ANSWER_BYTES)
                .read_to_string()
                .ok()
                .and_then(|t| first_line(&t, ANSWER_BYTES as usize));
            let error = |error: String| TryError { error, said: text };
            match status {
                500..=599 => TryOutcome::Retry(error(format!("HTTP {status}"))),
                300..=399 => {
                    TryOutcome::Fail(error(format!("HTTP {status} (redirects are not followed)")))
                }
                _ => TryOutcome::Fail(error(format!("HTTP {status}"))),
            }
        }
        Err(e) => {
            let retry = matches!(
                e,
                ureq::Error::Timeout(_)
                    | ureq::Error::ConnectionFailed
                    | ureq::Error::HostNotFound
                    | ureq::Error::Io(_)
                    | ureq::Error::BodyStalled
            );
            let error = TryError::new(format!("POST failed: {e}"));
            if retry {
                TryOutcome::Retry(error)
            } else {
                TryOutcome::Fail(error)
            }
        }
    }
}

fn log_end(d: &Delivery, run: &Run) {
    match d.status {
        DeliveryStatus::Delivered => tracing::info!(
            target: "loops::notify",
            "{} notification of run {} of {} delivered to {} (try {})",
            d.event, run.id, run.loop_name, d.channel, d.attempts
        ),
        _ => tracing::warn!(
            target: "loops::notify",
            "{} notification of run {} of {} to {} failed after {} tries: {}",
            d.event,
            run.id,
            run.loop_name,
            d.channel,
            d.attempts,
            d.last_error.as_deref().unwrap_or("unknown error")
        ),
    }
}

/// Runs a store call on a blocking thread (the store blocks while the database works).
async fn blocking<T: Send + 'static>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .unwrap_or_else(|e| {
            Err(StoreError::InvalidArgument(format!(
                "store call panicked: {e}"
            )))
        })
}

/// Delivers `deliveries` here and now (`tick`, `run-now`), at most
/// [`DeliveryPolicy::max_concurrent`] at once, waiting at most `bound` for all of them.
/// Returns the rows as recorded by the deliveries that ended in time; the rest stay
/// pending under this runner's claim, which the daemon takes over once this process
/// is gone.
pub async fn deliver_now(
    deliverer: Arc<Deliverer>,
    deliveries: Vec<Delivery>,
    bound: Duration,
) -> Vec<Delivery> {
    let permits = Arc::new(Semaphore::new(deliverer.policy.max_concurrent.max(1)));
    let mut tasks = JoinSet::new();
    for d in deliveries {
        let (deliverer, permits) = (Arc::clone(&deliverer), Arc::clone(&permits));
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.ok()?;
            deliverer.deliver(&d).await
        });
    }
    let mut done = Vec::new();
    let collect = async {
        while let Some(joined) = tasks.join_next().await {
            if let Ok(Some(d)) = joined {
                done.push(d);
            }
        }
    };
    if tokio::time::timeout(bound, collect).await.is_err() {
        tracing::warn!("notifications still being delivered; leaving them to the daemon");
    }
    done
}

/// The daemon's notifier: delivers what the engine queues as it is queued, and sweeps
/// the store every [`SWEEP_EVERY`] for pending rows it may take over.
pub struct Notifier {
    deliverer: Arc<Deliverer>,
    queue: Arc<DeliveryQueue>,
}

impl Notifier {
    pub fn new(deliverer: Deliverer, queue: Arc<DeliveryQueue>) -> Self {
        Self {
            deliverer: Arc::new(deliverer),
            queue,
        }
    }

    /// Runs until `stop` resolves; then gives deliveries in flight up to `grace` and
    /// abandons the rest (their rows stay pending, claimed by this process, and the
    /// next daemon takes them over).
    pub async fn run(self, stop: impl std::future::Future<Output = ()>, grace: Duration) {
        let permits = Arc::new(Semaphore::new(self.deliverer.policy.max_concurrent.max(1)));
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut stop = std::pin::pin!(stop);
        // Rows handed to a task and not finished yet, so a sweep does not start them twice.
        let started: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
        let mut next_sweep = tokio::time::Instant::now();
        loop {
            let mut todo = self.queue.take();
            if tokio::time::Instant::now() >= next_sweep {
                next_sweep = tokio::time::Instant::now() + SWEEP_EVERY;
                match blocking(&self.deliverer.store, |s| s.pending_deliveries(SWEEP_BATCH)).await {
                    Ok(pending) => todo.extend(pending),
                    Err(e) => tracing::warn!(error = %e, "cannot look for pending notifications"),
                }
            }
            for d in todo {
                if !lock(&started).insert(d.id.clone()) {
                    continue;
                }
                let (deliverer, permits, started) = (
                    Arc::clone(&self.deliverer),
                    Arc::clone(&permits),
                    Arc::clone(&started),
                );
                tasks.spawn(async move {
                    if let Ok(_permit) = permits.acquire_owned().await {
                        deliverer.deliver(&d).await;
                    }
                    lock(&started).remove(&d.id);
                });
            }
            tokio::select! {
                _ = self.queue.queued() => {}
                _ = tokio::time::sleep_until(next_sweep) => {}
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                _ = &mut stop => break,
            }
        }
        let drain = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, drain).await.is_err() {
            tracing::info!(
                "notifications still being delivered at shutdown; the next daemon resumes them"
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use loops_core::{LoopId, RunId, RunSource, RunStatus};

    fn run() -> Run {
        let t = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
        Run {
            id: RunId::new("aaaaaaaaaaaa"),
            loop_id: LoopId::new("bbbbbbbbbbbb"),
            loop_name: "nightly".into(),
            source: RunSource::RetrySlot,
            due_at: Some(t),
            started_at: Some(t),
            finished_at: Some(t),
            exit_code: Some(3),
            duration_ms: Some(12),
            stdout: Some("x".repeat(10_000)),
            stderr: Some("boom\n".into()),
            error: Some("exited with status 3".into()),
            pid: Some(1),
            ..Run::history(t, 3, RunStatus::Failed, t)
        }
    }

    #[test]
    fn the_payload_carries_the_run_with_bounded_tails_and_the_env_names_it() {
        let r = run();
        let p = Payload::new(
            NotifyEvent::Failure,
            Some("d1".into()),
            None,
            Some(&r),
            r.created_at,
        );
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["event"], "failure");
        assert_eq!(json["deliveryId"], "d1");
        assert_eq!(json["run"]["status"], "failed");
        assert_eq!(json["run"]["stderr"], "boom\n");
        let out = json["run"]["stdout"].as_str().unwrap();
        assert!(
            out.starts_with("[truncated 5904 bytes]\n"),
            "{}",
            &out[..30]
        );
        assert!(out.len() < PAYLOAD_OUTPUT_BYTES + 40);
        let env = p.env();
        let get = |k: &str| {
            env.iter()
                .rev()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("LOOPS_EVENT"), Some("failure"));
        assert_eq!(get("LOOPS_RUN_ID"), Some("aaaaaaaaaaaa"));
        assert_eq!(get("LOOPS_LOOP_NAME"), Some("nightly"));
        assert_eq!(get("LOOPS_RUN_STATUS"), Some("failed"));
        assert_eq!(get("LOOPS_EXIT_CODE"), Some("3"));
        assert_eq!(get("LOOPS_ATTEMPT"), Some("3"));
        assert_eq!(get("LOOPS_RUN_ERROR"), Some("exited with status 3"));
        assert_eq!(get("LOOPS_SCHEDULED_FOR"), Some("2023-11-14T22:13:20.000Z"));
    }

    #[test]
    fn https_goes_through_tls() {
        // A plain-HTTP listener on loopback: the TLS handshake must fail, proving the
        // https path is TLS (rustls) and never falls back to plain text.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
            }
        });
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .http_status_as_error(false)
            .build()
            .into();
        let outcome = post_once(
            &agent,
            &format!("https://127.0.0.1:{port}/"),
            "t",
            "test",
            b"{}",
        );
        assert!(
            matches!(&outcome, TryOutcome::Fail(e) | TryOutcome::Retry(e) if !e.error.is_empty()),
            "{outcome:?}"
        );
        assert_ne!(outcome, TryOutcome::Delivered);
    }
}
