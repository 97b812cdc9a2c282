//! Preflight: can a target start here and now? Used by `create --preflight`,
//! workflow validation and `doctor` (which also looks a workflow target's workflow up,
//! [`check_loop_target`]). Returns problems as user-facing sentences; an
//! empty list means ready.
//!
//! Checks, in order: the definition is valid (required fields, provider rules), the
//! account's environment resolves (`accounts env` runs, the profile directory exists),
//! the executable resolves on the *effective* PATH (the one the child would get,
//! including user bin dirs and whatever the account profile sets), and the working
//! directory exists.

use crate::accounts;
use crate::env::{build_env, resolve_executable_in};
use crate::providers::account_tool;
use loops_core::workflow::{StepTarget, Workflow};
use loops_core::Target;
use loops_store::StoreError;
use std::path::Path;

/// Problems that would stop a stored loop's target from starting: [`check_target`],
/// and for a workflow target, that `active_workflow` finds the workflow it names and
/// that every step's target passes [`check_target`] (each problem prefixed with its
/// step, `step "build": Executable not found in PATH: cargo`). Used by `doctor` and
/// `create --preflight`.
pub fn check_loop_target(
    target: &Target,
    active_workflow: impl FnOnce(&str) -> Result<Option<Workflow>, StoreError>,
) -> Vec<String> {
    let mut problems = check_target(target);
    let Target::Workflow(w) = target else {
        return problems;
    };
    let workflow = match active_workflow(&w.workflow) {
        Ok(Some(workflow)) => workflow,
        Ok(None) => {
            problems.push(format!("no active workflow named {:?}", w.workflow));
            return problems;
        }
        Err(e) => {
            problems.push(format!("cannot load workflow {:?}: {e}", w.workflow));
            return problems;
        }
    };
    for step in &workflow.spec.steps {
        let target = match &step.target {
            StepTarget::Command(c) => Target::Command(c.clone()),
            StepTarget::Agent(a) => Target::Agent(a.clone()),
        };
        for p in check_target(&target) {
            problems.push(format!("step {:?}: {p}", step.id));
        }
    }
    problems
}

/// Problems that would stop `target` from starting.
pub fn check_target(target: &Target) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(e) = loops_core::validate::target(target, &format!("{} target", target.kind())) {
        problems.push(e.0);
    }
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let (program, cwd, env, account, tool_hint) = match target {
        Target::Command(c) => {
            // A shell command's first word is what must resolve (builtins aside).
            let program = if c.shell {
                c.command.split_whitespace().next().unwrap_or("").to_owned()
            } else {
                c.command.clone()
            };
            (program, c.cwd.clone(), &c.env, c.account.as_ref(), None)
        }
        Target::Agent(a) => (
            a.provider.executable().to_owned(),
            a.cwd.clone(),
            &a.env,
            a.account.as_ref(),
            Some(account_tool(a.provider)),
        ),
        Target::Workflow(_) => return problems,
    };
    let inherited = crate::env::inherited();
    let base = match account {
        Some(account) => match accounts::resolve(account, tool_hint, &inherited) {
            Ok(resolved) => resolved.apply(inherited),
            Err(message) => {
                problems.push(message);
                inherited
            }
        },
        None => inherited,
    };
    let env = build_env(base, home.as_deref(), env, &[]);
    let shell_syntax = program.contains(['=', '$', '(', '{', '`', ';', '|', '&', '<', '>']);
    if !program.is_empty()
        && !shell_syntax
        && !is_shell_builtin(&program)
        && resolve_executable_in(&program, &env, cwd.as_deref().map(Path::new)).is_none()
    {
        problems.push(format!("Executable not found in PATH: {program}"));
    }
    if let Some(dir) = cwd {
        if !Path::new(&dir).is_dir() {
            problems.push(format!("working directory {dir} does not exist"));
        }
    }
    problems
}

fn is_shell_builtin(word: &str) -> bool {
    matches!(
        word,
        "cd" | "echo"
            | "exit"
            | "export"
            | "true"
            | "false"
            | "test"
            | "["
            | "."
            | "exec"
            | "set"
            | "printf"
            | "read"
            | "sleep"
            | "if"
            | "for"
            | "while"
    )
}
