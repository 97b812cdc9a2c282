//! `import BUNDLE | --from-openloops PATH [--apply] [--with-history] [--on-conflict P]
//! [--drop-redacted] [--drop-runner-labels] [--paused]`: a preview of what would be
//! created, renamed, skipped or conflict — and with `--apply`, all of it in one
//! transaction or nothing (README, "Export and import", "Import from OpenLoops"). A
//! preview that `--apply` would refuse exits 1.

use super::Context;
use crate::exit::Exit;
use crate::output::{self, outln, print_json, Table};
use crate::Failure;
use clap::Args;
use loops_core::bundle::{Action, OnConflict, MAX_BUNDLE_BYTES};
use loops_runtime::client::{ImportOptions, ImportReport};
use loops_store::user_file::{read_bounded, UserFileError};
use std::io::Read as _;
use std::path::Path;
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).multiple(false)))]
pub struct ImportArgs {
    /// A bundle written by `loops export` (`-` reads stdin).
    #[arg(group = "source", value_name = "BUNDLE")]
    pub bundle: Option<PathBuf>,
    /// An OpenLoops 0.3 database (its loops.db), opened read-only.
    #[arg(long, group = "source", value_name = "PATH")]
    pub from_openloops: Option<PathBuf>,
    /// Write the import, all of it in one transaction or nothing; without it only
    /// the preview is printed.
    #[arg(long)]
    pub apply: bool,
    /// Also bring over the finished runs of the imported loops (OpenLoops only).
    #[arg(long, requires = "from_openloops")]
    pub with_history: bool,
    /// A loop or workflow named like one here: fail (default: refuse the import),
    /// skip (keep the one here), rename (import it as NAME-2, NAME-3, ...).
    #[arg(long, value_name = "POLICY", default_value = "fail")]
    pub on_conflict: String,
    /// Import loops and steps whose secrets the bundle left out without those
    /// variables (otherwise such an import is refused until they are filled in).
    #[arg(long)]
    pub drop_redacted: bool,
    /// Import loops that require runner labels (`--on`, JSON `runsOn`) without them:
    /// a SQLite store has no runners, so such an import is refused there otherwise.
    #[arg(long)]
    pub drop_runner_labels: bool,
    /// Import every loop paused (e.g. while the old machine still runs them).
    #[arg(long)]
    pub paused: bool,
}

pub fn run(ctx: &Context, args: ImportArgs) -> Result<Exit, Failure> {
    let on_conflict: OnConflict = args.on_conflict.parse().map_err(Failure::usage)?;
    let opts = ImportOptions {
        on_conflict,
        apply: args.apply,
        drop_redacted: args.drop_redacted,
        drop_runner_labels: args.drop_runner_labels,
        paused: args.paused,
    };
    let now = output::now();
    // The bundle is read (and refused, when it is not one) before the store is opened.
    let text = match &args.bundle {
        Some(path) => Some(read_bundle(path)?),
        None => None,
    };
    let client = if args.apply {
        ctx.client()?
    } else {
        ctx.reader()?
    };
    let report = match (&text, &args.from_openloops) {
        (Some(text), _) => client.import_bundle(text, opts, now)?,
        (None, Some(db)) => client.import_openloops(
            db,
            args.with_history,
            &loops_runtime::definition::local_zone(),
            opts,
            now,
        )?,
        (None, None) => {
            return Err(Failure::usage(
                "give a bundle file or --from-openloops PATH",
            ))
        }
    };
    let refusals = report.refusals(opts.drop_redacted);
    let exit = if report.applied || refusals.is_empty() {
        Exit::Success
    } else {
        Exit::Failed
    };
    if ctx.json {
        let mut doc = serde_json::to_value(&report)
            .map_err(|e| Failure::failed(format!("cannot encode JSON: {e}")))?;
        if let Some(map) = doc.as_object_mut() {
            map.insert("refusals".into(), refusals.clone().into());
        }
        print_json(&doc)?;
        return Ok(exit);
    }
    print_report(&report, &refusals)?;
    Ok(exit)
}

/// The bundle's text: from a regular file (never blocking on a FIFO or a device:
/// `loops_store::user_file`), or stdin for `-`; at most [`MAX_BUNDLE_BYTES`].
fn read_bundle(path: &Path) -> Result<String, Failure> {
    let shown = path.display();
    let too_large = || {
        Failure::usage(format!(
            "{shown}: larger than {} MiB, not a bundle this loops reads",
            MAX_BUNDLE_BYTES >> 20
        ))
    };
    let bytes = if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_BUNDLE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::usage(format!("cannot read {shown}: {e}")))?;
        bytes
    } else {
        read_bounded(path, MAX_BUNDLE_BYTES).map_err(|e| match e {
            UserFileError::TooLarge { .. } => too_large(),
            other => Failure::usage(format!(
                "cannot read {shown}: {other}{}",
                if matches!(&other, UserFileError::Io(io) if io.kind() == std::io::ErrorKind::InvalidInput)
                {
                    " (`-` reads a bundle from stdin)"
                } else {
                    ""
                }
            )),
        })?
    };
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes)
        .map_err(|_| Failure::usage(format!("{shown}: not UTF-8 text, not a loops bundle")))
}

fn print_report(report: &ImportReport, refusals: &[String]) -> Result<(), Failure> {
    let mut table = Table::new(vec![
        "KIND", "NAME", "ACTION", "AS", "STATUS", "NEXT RUN", "RUNS", "REASON",
    ]);
    let action = |a: Action| a.as_str();
    for w in &report.workflows {
        table.row(vec![
            "workflow".into(),
            w.name.as_str().into(),
            action(w.action).into(),
            w.as_name.clone().unwrap_or_else(|| "-".into()).into(),
            "-".into(),
            "-".into(),
            "-".into(),
            w.reason.clone().unwrap_or_default().into(),
        ]);
    }
    for l in &report.loops {
        let p = &l.planned;
        table.row(vec![
            "loop".into(),
            p.name.as_str().into(),
            action(p.action).into(),
            p.as_name.clone().unwrap_or_else(|| "-".into()).into(),
            l.status.as_str().into(),
            output::instant_text(l.next_run_at).into(),
            l.runs.to_string().into(),
            p.reason.clone().unwrap_or_default().into(),
        ]);
    }
    if report.workflows.is_empty() && report.loops.is_empty() {
        outln!("nothing to import")?;
    } else {
        table.print()?;
    }
    if !report.not_mapped.is_empty() {
        outln!("not mapped:")?;
        for line in &report.not_mapped {
            outln!("  {line}")?;
        }
    }
    if !report.needs_value.is_empty() {
        outln!("secrets left out of the bundle:")?;
        for r in &report.needs_value {
            outln!("  {r}")?;
        }
    }
    if !report.runner_labels.is_empty() {
        if report.runner_labels_dropped {
            outln!("runner labels dropped (--drop-runner-labels):")?;
        } else {
            outln!("runner labels this store has no runners for:")?;
        }
        for r in &report.runner_labels {
            outln!("  {r}")?;
        }
    }
    let writes = |a: Action| matches!(a, Action::Create | Action::Rename);
    let n_loops = report
        .loops
        .iter()
        .filter(|l| writes(l.planned.action))
        .count();
    let n_workflows = report.workflows.iter().filter(|w| writes(w.action)).count();
    if report.applied {
        outln!(
            "imported {n_loops} loop(s), {n_workflows} workflow(s), {} run(s)",
            report.runs
        )?;
    } else if refusals.is_empty() {
        outln!(
            "would import {n_loops} loop(s), {n_workflows} workflow(s), {} run(s); nothing written (--apply imports)",
            report.runs
        )?;
    } else {
        outln!("--apply would refuse this import (nothing written):")?;
        for r in refusals {
            outln!("  {r}")?;
        }
    }
    Ok(())
}
