//! Preflight: can a target start here and now? Used by `create --preflight`,
//! workflow validation and `doctor`. Returns problems as user-facing sentences; an
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
use loops_core::Target;
use std::path::Path;

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
    let inherited: Vec<(String, String)> = std::env::vars().collect();
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
