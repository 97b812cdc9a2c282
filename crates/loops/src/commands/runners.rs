//! `runners`: the daemons sharing a PostgreSQL store (issue #12): host, labels,
//! capacity, running runs, heartbeat age and lease state, by the store's clock. On
//! SQLite `--json` lists the one daemon as its one runner (see
//! `Client::runners_json`).

use super::Context;
use crate::exit::Exit;
use crate::output::{self, outln, print_json, Table};
use crate::Failure;
use loops_runtime::daemon_view::lease_state;

pub fn run(ctx: &Context) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    if ctx.json {
        // On SQLite: its one daemon as its one runner, or an empty list.
        print_json(&client.runners_json()?)?;
        return Ok(Exit::Success);
    }
    if !client.store_has_runners() {
        outln!(
            "this store ({} {}) has one daemon, not runners: see `loops daemon status` \
             (runners need --store postgres://…)",
            client.backend().kind(),
            client.backend().location()
        )?;
        return Ok(Exit::Success);
    }
    let runners = client.runners()?;
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
            output::status_cell(lease_state(r)),
        ]);
    }
    table.print()?;
    Ok(Exit::Success)
}
