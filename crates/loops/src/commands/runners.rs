//! `runners`: the daemons sharing a PostgreSQL store (issue #12): host, labels,
//! capacity, running runs, heartbeat age and lease state, by the store's clock.

use super::Context;
use crate::exit::Exit;
use crate::output::{self, print_json, Table};
use crate::Failure;
use loops_core::format_instant;

pub fn run(ctx: &Context) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    if !client.store_has_runners() {
        return Err(Failure::usage(format!(
            "this store ({} {}) has one daemon, not runners; see `loops daemon status` \
             (runners need --store postgres://…)",
            client.backend().kind(),
            client.backend().location()
        )));
    }
    let runners = client.runners()?;
    let lease = |r: &loops_store::RunnerInfo| {
        if r.released {
            "released"
        } else if r.live {
            "live"
        } else {
            "expired"
        }
    };
    if ctx.json {
        let list: Vec<serde_json::Value> = runners
            .iter()
            .map(|r| {
                serde_json::json!({
                    "epoch": r.epoch,
                    "runnerId": r.runner_id,
                    "host": r.host,
                    "pid": r.pid,
                    "labels": r.labels,
                    "capacity": r.capacity,
                    "running": r.running,
                    "startedAt": format_instant(&r.started_at),
                    "heartbeatAt": format_instant(&r.heartbeat_at),
                    "heartbeatAgeMs": (r.now - r.heartbeat_at).num_milliseconds().max(0),
                    "leaseExpiresAt": format_instant(&r.expires_at),
                    "lease": lease(r),
                })
            })
            .collect();
        print_json(&list)?;
        return Ok(Exit::Success);
    }
    let mut table = Table::new(vec![
        "EPOCH",
        "HOST",
        "PID",
        "LABELS",
        "CAPACITY",
        "RUNNING",
        "HEARTBEAT",
        "LEASE",
    ]);
    for r in &runners {
        table.row(vec![
            r.epoch.to_string().into(),
            r.host.clone().into(),
            r.pid.to_string().into(),
            if r.labels.is_empty() {
                "-".to_owned().into()
            } else {
                r.labels.join(",").into()
            },
            r.capacity.to_string().into(),
            r.running.to_string().into(),
            output::relative(r.heartbeat_at, r.now).into(),
            output::status_cell(lease(r)),
        ]);
    }
    table.print()?;
    Ok(Exit::Success)
}
