//! codewith, a codex-shaped CLI with named auth profiles.
//!
//! argv: codex's, with `--auth-profile P` among the top-level options before `exec`
//! (like `--ask-for-approval`, it is not accepted after `exec`). Output: codex's JSONL.

use loops_core::AgentTarget;

use super::{codex, Report};

pub(super) fn args(t: &AgentTarget) -> Vec<String> {
    let global: Vec<String> = t
        .auth_profile
        .iter()
        .flat_map(|profile| ["--auth-profile".to_owned(), profile.clone()])
        .collect();
    codex::codex_shaped(t, &global)
}

pub(super) fn parse(stdout: &str) -> Report {
    codex::parse(stdout)
}
