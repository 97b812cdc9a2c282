//! Preflight: can a target start here and now? Used by `create --preflight` and
//! `doctor`. Returns problems as user-facing sentences; an empty list means ready.

use crate::env::{build_env, resolve_executable_in};
use loops_core::Target;
use std::path::Path;

/// Problems that would stop `target` from starting.
pub fn check_target(target: &Target) -> Vec<String> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let (program, cwd, env) = match target {
        Target::Command(c) => {
            // A shell command's first word is what must resolve (builtins aside).
            let program = if c.shell {
                c.command.split_whitespace().next().unwrap_or("").to_owned()
            } else {
                c.command.clone()
            };
            (program, c.cwd.clone(), &c.env)
        }
        Target::Agent(a) => (a.provider.executable().to_owned(), a.cwd.clone(), &a.env),
        Target::Workflow(_) => return Vec::new(),
    };
    let mut problems = Vec::new();
    let env = build_env(std::env::vars(), home.as_deref(), env, &[]);
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
