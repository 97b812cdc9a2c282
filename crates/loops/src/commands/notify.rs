//! `notify set|show|clear|test`: the store-wide default notifications, used by loops
//! without `--notify-*` settings of their own (README, "Notifications").

use super::{runtime, Context};
use crate::cli::flags::NotifyFlags;
use crate::exit::Exit;
use crate::output::{self, outln, print_json};
use crate::Failure;
use clap::{Args, Subcommand};
use loops_core::{Notify, NotifyChannel, NotifyOn};
use loops_runtime::definition::parse_enum;

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Set the default (replacing any earlier one as a whole).
    Set(NotifyFlags),
    /// Show the default.
    Show(NotifyShowArgs),
    /// Remove the default.
    Clear,
    /// Send a test notification now, through every channel of the default — or, with
    /// --loop, of the settings that apply to that loop; exit 1 when one fails.
    Test(NotifyTestArgs),
}

#[derive(Debug, Args)]
pub struct NotifyShowArgs {
    /// Show a webhook URL in full (its path is redacted otherwise).
    #[arg(long)]
    pub show_output: bool,
}

#[derive(Debug, Args)]
pub struct NotifyTestArgs {
    /// Test the settings that apply to this loop (its own, else the default), with its
    /// newest run in the payload.
    #[arg(long = "loop", value_name = "LOOP")]
    pub r#loop: Option<String>,
}

pub fn run(ctx: &Context, cmd: NotifyCommand) -> Result<Exit, Failure> {
    match cmd {
        NotifyCommand::Set(args) => set(ctx, args),
        NotifyCommand::Show(args) => show(ctx, args),
        NotifyCommand::Clear => clear(ctx),
        NotifyCommand::Test(args) => test(ctx, args),
    }
}

fn set(ctx: &Context, args: NotifyFlags) -> Result<Exit, Failure> {
    let on = args
        .notify_on
        .as_deref()
        .map(|v| parse_enum::<NotifyOn>("--notify-on", v))
        .transpose()
        .map_err(Failure::usage)?;
    if args.notify_cmd.is_none() && args.notify_url.is_none() {
        return Err(Failure::usage(
            "notify set needs --notify-cmd or --notify-url (`loops notify clear` removes the default)",
        ));
    }
    let settings = Notify {
        cmd: args.notify_cmd,
        url: args.notify_url,
        on: on.unwrap_or(NotifyOn::DEFAULT),
    };
    let stored = ctx.client()?.set_notify_default(settings)?;
    print_settings(ctx, Some(stored), false)
}

fn show(ctx: &Context, args: NotifyShowArgs) -> Result<Exit, Failure> {
    let settings = ctx.reader()?.notify_default()?;
    print_settings(ctx, settings, args.show_output)
}

fn clear(ctx: &Context) -> Result<Exit, Failure> {
    let old = ctx.client()?.clear_notify_default()?;
    if ctx.json {
        print_json(&serde_json::json!({ "cleared": old.is_some() }))?;
    } else if old.is_some() {
        outln!("default notifications cleared")?;
    } else {
        outln!("no default notifications were set")?;
    }
    Ok(Exit::Success)
}

fn print_settings(ctx: &Context, settings: Option<Notify>, reveal: bool) -> Result<Exit, Failure> {
    let settings = settings.map(|mut n| {
        if !reveal {
            if let Some(url) = n.url.as_mut() {
                *url = output::redact_url(url);
            }
        }
        n
    });
    if ctx.json {
        print_json(&settings)?;
        return Ok(Exit::Success);
    }
    match settings {
        Some(n) => outln!("default notifications: {}", describe(&n))?,
        None => {
            outln!("no default notifications (loops without --notify-cmd/--notify-url send none)")?
        }
    }
    Ok(Exit::Success)
}

/// `on failure: command "notify-send …", POST https://hooks.example.com/[redacted …]`.
pub fn describe(n: &Notify) -> String {
    let to: Vec<String> = loops_core::notify::channels(n)
        .into_iter()
        .map(|(channel, target)| channel_text(channel, target))
        .collect();
    format!("on {}: {}", n.on, to.join(", "))
}

/// `command "…"` or `POST URL`.
pub fn channel_text(channel: NotifyChannel, target: &str) -> String {
    match channel {
        NotifyChannel::Cmd => format!("command {target:?}"),
        NotifyChannel::Url => format!("POST {target}"),
    }
}

fn test(ctx: &Context, args: NotifyTestArgs) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    let tested = runtime()?.block_on(client.test_notify(args.r#loop.as_deref()))?;
    let failed = tested.deliveries.iter().any(|d| !d.delivered);
    let mut shown = tested.clone();
    for d in &mut shown.deliveries {
        if d.channel == NotifyChannel::Url {
            d.target = output::redact_url(&d.target);
        }
    }
    if let Some(url) = shown.settings.url.as_mut() {
        *url = output::redact_url(url);
    }
    if ctx.json {
        print_json(&shown)?;
    } else {
        let source = match tested.source {
            loops_runtime::SettingsSource::Loop => "the loop's own settings",
            loops_runtime::SettingsSource::Default => "the default settings",
        };
        outln!("test notification ({source}):")?;
        for d in &shown.deliveries {
            let tries = if d.attempts == 1 {
                "1 try".to_owned()
            } else {
                format!("{} tries", d.attempts)
            };
            match &d.error {
                None => outln!(
                    "  {}: delivered ({tries})",
                    channel_text(d.channel, &d.target)
                )?,
                Some(e) => outln!(
                    "  {}: failed after {tries}: {e}",
                    channel_text(d.channel, &d.target)
                )?,
            }
        }
    }
    Ok(if failed { Exit::Failed } else { Exit::Success })
}

/// How many of a loop's newest runs `show` looks through for its last notifications.
const SHOW_RUNS: usize = 20;

/// `show`'s lines about the loop's last notification per channel, e.g.
/// `failure of run 3fa… to POST https://hooks…: failed after 4 tries: HTTP 500`.
pub fn last_deliveries(
    client: &loops_runtime::Client,
    lp: &loops_core::Loop,
    reveal: bool,
) -> Vec<String> {
    let Ok(runs) = client.runs(Some(lp.id.as_str()), Some(SHOW_RUNS)) else {
        return Vec::new();
    };
    let ids: Vec<_> = runs.iter().map(|r| r.id.clone()).collect();
    let Ok(deliveries) = client.deliveries_of_runs(&ids) else {
        return Vec::new();
    };
    // Newest run first; within a run, oldest first: the last of a channel's rows in the
    // first run that has one is its newest.
    let mut newest: Vec<loops_core::Delivery> = Vec::new();
    for mut d in deliveries {
        output::redact_delivery(&mut d, reveal);
        match newest.iter_mut().find(|n| n.channel == d.channel) {
            Some(n) if n.run_id == d.run_id => *n = d,
            Some(_) => {}
            None => newest.push(d),
        }
    }
    newest
        .into_iter()
        .map(|d| {
            let tries = if d.attempts == 1 {
                "1 try".to_owned()
            } else {
                format!("{} tries", d.attempts)
            };
            let state = match d.status {
                loops_core::DeliveryStatus::Delivered => format!("delivered ({tries})"),
                loops_core::DeliveryStatus::Pending => match &d.last_error {
                    Some(e) => format!("pending after {tries}: {e}"),
                    None => "pending".to_owned(),
                },
                loops_core::DeliveryStatus::Failed => format!(
                    "failed after {tries}: {}",
                    d.last_error.as_deref().unwrap_or("unknown error")
                ),
            };
            format!(
                "{} of run {} to {}: {state}",
                d.event,
                d.run_id,
                channel_text(d.channel, &d.target)
            )
        })
        .collect()
}
