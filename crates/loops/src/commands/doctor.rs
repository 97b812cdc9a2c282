//! `doctor`: ok / warn / fail per check (the runtime's [`loops_runtime::doctor`]);
//! exits 1 when any check fails.

use super::Context;
use crate::exit::Exit;
use crate::output::{self, print_json, Table};
use crate::Failure;

pub fn run(ctx: &Context) -> Result<Exit, Failure> {
    let report = loops_runtime::doctor::doctor(&ctx.data_dir()?, ctx.store_url());
    if ctx.json {
        print_json(&report)?;
    } else {
        let mut table = Table::new(vec!["CHECK", "STATUS", "DETAIL"]);
        for c in &report.checks {
            table.row(vec![
                c.check.as_str().into(),
                output::status_cell(c.status),
                c.detail.as_str().into(),
            ]);
        }
        table.print()?;
    }
    Ok(if report.ok {
        Exit::Success
    } else {
        Exit::Failed
    })
}
