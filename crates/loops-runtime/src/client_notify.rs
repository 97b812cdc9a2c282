//! The [`Client`]'s notification calls (README, "Notifications"): the store-wide
//! default (`loops notify set|show|clear`), `loops notify test`, the delivery records
//! of runs, and the delivery of what `tick` and `run-now` queued.

use crate::client::{Client, ClientError, Result};
use crate::engine::{this_runner_id, Engine};
use crate::notify::{
    deliver_now, Deliverer, DeliveryPolicy, Payload, TryOutcome, CLI_DELIVERY_BOUND,
};
use crate::targets::ExecSettings;
use loops_core::validate;
use loops_core::{Delivery, Notify, NotifyChannel, NotifyEvent, RunId};
use std::sync::Arc;

/// How one channel of `notify test` went (nothing is recorded for a test).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TestDelivery {
    pub channel: NotifyChannel,
    /// The command or URL.
    pub target: String,
    pub delivered: bool,
    /// Tries made (a webhook retries like a real notification).
    pub attempts: u32,
    pub error: Option<String>,
}

/// Where the settings `notify test` used came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingsSource {
    /// The loop's own (`create --notify-*`).
    Loop,
    /// The store-wide default (`loops notify set`).
    Default,
}

/// What `notify test` did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotifyTest {
    pub source: SettingsSource,
    pub settings: Notify,
    pub deliveries: Vec<TestDelivery>,
}

impl Client {
    fn deliverer(&self) -> Deliverer {
        Deliverer::new(
            Arc::clone(self.store()),
            this_runner_id(),
            DeliveryPolicy::default(),
            ExecSettings::for_this_process(),
        )
    }

    /// Delivers what `engine`'s finalizations queued (`tick`, `run-now`), waiting at
    /// most [`CLI_DELIVERY_BOUND`]; what is left stays pending and the daemon takes
    /// it over once this process is gone.
    pub(crate) async fn deliver_queued(&self, engine: &Engine) {
        let queued = engine.deliveries().take();
        if queued.is_empty() {
            return;
        }
        deliver_now(Arc::new(self.deliverer()), queued, CLI_DELIVERY_BOUND).await;
    }

    /// The store-wide default notification settings, if set.
    pub fn notify_default(&self) -> Result<Option<Notify>> {
        Ok(self.store().notify_default()?)
    }

    /// Validates and stores the store-wide default (replacing any earlier one as a
    /// whole), used by every loop without settings of its own.
    pub fn set_notify_default(&self, notify: Notify) -> Result<Notify> {
        validate::notify(&notify, "notify set")?;
        self.store().set_notify_default(Some(&notify))?;
        Ok(notify)
    }

    /// Removes the store-wide default; returns the settings it removed.
    pub fn clear_notify_default(&self) -> Result<Option<Notify>> {
        let old = self.store().notify_default()?;
        self.store().set_notify_default(None)?;
        Ok(old)
    }

    /// The delivery records of `runs`, by run (in the order given), oldest first.
    pub fn deliveries_of_runs(&self, runs: &[RunId]) -> Result<Vec<Delivery>> {
        Ok(self.store().deliveries_of_runs(runs)?)
    }

    /// Sends a `test` notification now, through every channel of the settings that
    /// apply: the loop's own or else the default (`loop_key` given), or the default.
    /// The payload carries the loop and its newest run when there is one. Tries and
    /// bounds are those of real deliveries; nothing is recorded.
    pub async fn test_notify(&self, loop_key: Option<&str>) -> Result<NotifyTest> {
        let lp = loop_key.map(|k| self.get(k)).transpose()?;
        let default = self.store().notify_default()?;
        let own = lp.as_ref().and_then(|l| l.notify.clone());
        let (source, settings) = match (own, default) {
            (Some(own), _) => (SettingsSource::Loop, own),
            (None, Some(default)) => (SettingsSource::Default, default),
            (None, None) => {
                return Err(ClientError::Invalid(match &lp {
                    Some(l) => format!(
                        "loop {:?} has no notification settings and no default is set \
                         (`loops notify set --notify-cmd CMD` or `--notify-url URL`)",
                        l.name
                    ),
                    None => "no default notification settings (`loops notify set \
                             --notify-cmd CMD` or `--notify-url URL`)"
                        .to_owned(),
                }))
            }
        };
        let run = match &lp {
            Some(l) => self.last_run(&l.id)?,
            None => None,
        };
        let payload = Payload::new(
            NotifyEvent::Test,
            None,
            lp.as_ref(),
            run.as_ref(),
            chrono::Utc::now(),
        );
        let deliverer = self.deliverer();
        let mut deliveries = Vec::new();
        for (channel, target) in loops_core::notify::channels(&settings) {
            let (attempts, outcome) = match channel {
                NotifyChannel::Cmd => (1, deliverer.hook(target, &payload).await),
                NotifyChannel::Url => deliverer.post_unrecorded(target, &payload).await,
            };
            let error = match outcome {
                TryOutcome::Delivered => None,
                // The invoker sees what the hook or receiver said; nothing is recorded.
                TryOutcome::Retry(e) | TryOutcome::Fail(e) => Some(e.with_said()),
            };
            deliveries.push(TestDelivery {
                channel,
                target: target.to_owned(),
                delivered: error.is_none(),
                attempts,
                error,
            });
        }
        Ok(NotifyTest {
            source,
            settings,
            deliveries,
        })
    }
}

/// A run as `runs --json` prints it (and the MCP tool `loops_runs`): the run's fields
/// plus `notifications`, the deliveries of its notifications.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunWithNotifications {
    #[serde(flatten)]
    pub run: loops_core::Run,
    pub notifications: Vec<Delivery>,
}

/// Pairs each run with its deliveries (as [`Client::deliveries_of_runs`] lists them),
/// a webhook's path redacted unless `reveal`.
pub fn runs_with_notifications(
    runs: Vec<loops_core::Run>,
    deliveries: Vec<Delivery>,
    reveal: bool,
) -> Vec<RunWithNotifications> {
    let mut by_run: std::collections::HashMap<RunId, Vec<Delivery>> =
        std::collections::HashMap::new();
    for mut d in deliveries {
        loops_core::redact::redact_delivery(&mut d, reveal);
        by_run.entry(d.run_id.clone()).or_default().push(d);
    }
    runs.into_iter()
        .map(|run| RunWithNotifications {
            notifications: by_run.remove(&run.id).unwrap_or_default(),
            run,
        })
        .collect()
}
