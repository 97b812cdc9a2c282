//! aicopilot, an opencode-shaped CLI: the same `run --format json [--pure] [--dir DIR]
//! [--model M] [--agent A]` argv and the same JSONL events.

use loops_core::AgentTarget;

use super::{opencode, Report};

pub(super) fn args(t: &AgentTarget) -> Vec<String> {
    // No resume: `--session continue` is refused for aicopilot (unchecked CLI).
    opencode::args(t, None)
}

pub(super) fn parse(stdout: &str) -> Report {
    opencode::parse(stdout)
}
