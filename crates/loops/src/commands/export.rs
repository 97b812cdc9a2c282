//! `export [--label L]… [--include-secrets]`: the bundle of loops and the workflow
//! specs they use, as JSON on stdout (README, "Export and import"). Secrets left out
//! are named on stderr, so a redirected bundle is never silently incomplete.

use super::Context;
use crate::exit::Exit;
use crate::output::{self, print_json};
use crate::Failure;
use clap::Args;
use std::io::Write as _;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Only loops with this label (repeatable: loops with all of them); the workflow
    /// specs exported are then the ones those loops run.
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Include env values and notification URLs; without it they are left out (null)
    /// and named in the bundle's "redacted" list.
    #[arg(long)]
    pub include_secrets: bool,
}

pub fn run(ctx: &Context, args: ExportArgs) -> Result<Exit, Failure> {
    let bundle = ctx
        .reader()?
        .export(&args.labels, args.include_secrets, output::now())?;
    print_json(&bundle)?;
    if !bundle.redacted.is_empty() {
        let named: Vec<String> = bundle.redacted.iter().map(ToString::to_string).collect();
        // A note, not an error: stdout holds the bundle.
        let _ = writeln!(
            std::io::stderr(),
            "note: {} secret(s) left out of the bundle ({}); --include-secrets includes them",
            named.len(),
            output::human(&named.join(", "))
        );
    }
    Ok(Exit::Success)
}
