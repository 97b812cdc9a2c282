//! Turns a loop's target and a claimed run into an [`ExecSpec`]: executable, argv,
//! stdin and the environment (DESIGN §3), built in one place.

use crate::engine::EngineConfig;
use crate::env::build_env;
use crate::executor::ExecSpec;
use crate::providers::agent_args;
use loops_core::{format_instant, Loop, Run, Target};
use std::path::PathBuf;
use std::time::Duration;

/// A target that cannot be turned into a process; the message becomes the run's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

/// The `LOOPS_*` metadata of a run.
pub fn run_metadata(lp: &Loop, run: &Run) -> Vec<(&'static str, String)> {
    vec![
        ("LOOPS_LOOP_ID", lp.id.to_string()),
        ("LOOPS_LOOP_NAME", lp.name.clone()),
        ("LOOPS_RUN_ID", run.id.to_string()),
        ("LOOPS_SCHEDULED_FOR", format_instant(&run.scheduled_for)),
        ("LOOPS_ATTEMPT", run.attempt.to_string()),
    ]
}

/// The process to start for `run` of `lp`.
pub fn exec_spec(lp: &Loop, run: &Run, cfg: &EngineConfig) -> Result<ExecSpec, SpecError> {
    let metadata = run_metadata(lp, run);
    let home = cfg.home.as_deref();
    let (mut spec, timeout_ms) = match &lp.target {
        Target::Command(c) => {
            let mut spec = if c.shell {
                ExecSpec::shell(c.command.clone())
            } else {
                ExecSpec::direct(c.command.clone(), Vec::<String>::new())
            };
            // With a shell, args are appended as single-quoted words.
            spec.args = c.args.clone();
            spec.cwd = c.cwd.as_ref().map(PathBuf::from);
            spec.env = build_env(std::env::vars(), home, &c.env, &metadata);
            (spec, c.timeout_ms)
        }
        Target::Agent(a) => {
            if a.account.is_some() {
                return Err(SpecError(
                    "agent accounts are not supported by this build yet".into(),
                ));
            }
            let mut spec = ExecSpec::direct(a.provider.executable(), agent_args(a));
            spec.cwd = a.cwd.as_ref().map(PathBuf::from);
            spec.env = build_env(std::env::vars(), home, &a.env, &metadata);
            spec.stdin = Some(a.prompt.clone().into_bytes());
            (spec, a.timeout_ms)
        }
        Target::Workflow(w) => {
            return Err(SpecError(format!(
                "workflow {:?}: workflow targets are not supported by this build yet",
                w.workflow
            )))
        }
    };
    spec.timeout = timeout_ms.map(Duration::from_millis);
    spec.kill_grace = cfg.kill_grace;
    spec.max_output_bytes = cfg.max_output_bytes;
    Ok(spec)
}
