//! Cursor's standalone CLI, whose executable is `agent` (not `cursor-agent`).
//!
//! argv: `-p [--model M] [--agent A]`; the prompt is read from stdin.
//!
//! Output: plain text by default (the answer itself, used as the summary by
//! [`super::interpret`]); when the user's CLI config makes it print JSON, the result
//! object has claude's shape (`type: "result"`, `is_error`, `result`) and is read the
//! same way.

use loops_core::AgentTarget;

use super::{claude, Report};

pub(super) fn args(t: &AgentTarget) -> Vec<String> {
    let mut args = vec!["-p".to_owned()];
    args.extend(super::model_and_agent(t));
    args
}

pub(super) fn parse(stdout: &str) -> Report {
    match claude::result_object(stdout) {
        Some(v) if v.get("result").is_some() || v.get("is_error").is_some() => {
            claude::parse_result(&v)
        }
        // Text output: nothing structured to read.
        _ => Report::default(),
    }
}
