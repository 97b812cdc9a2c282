//! Size limits on everything a loop definition takes from outside: prompt text and
//! files, workflow spec files, command lines, descriptions, environment values. One
//! place, so every front end (CLI, HTTP, MCP) enforces the same bounds with the same
//! messages, and a reader can stop after `limit + 1` bytes instead of trusting the
//! source to end.
//!
//! Validation ([`crate::validate`], [`crate::workflow::validate`]) checks the values;
//! front ends that read files bound the read with the same constants.

/// Rows a run listing (`runs`, `workflows runs`) shows when no limit is given.
pub const DEFAULT_RUNS_LISTED: usize = 20;

/// The row limit of a run listing from the limit asked for: 0 for none, none given
/// for [`DEFAULT_RUNS_LISTED`]. The one rule of every front end's listings.
pub fn runs_listed(limit: Option<usize>) -> Option<usize> {
    match limit {
        Some(0) => None,
        Some(n) => Some(n),
        None => Some(DEFAULT_RUNS_LISTED),
    }
}

/// A prompt (`--prompt`, `--prompt-file`, a step's `prompt`/`promptFile`): 1 MiB.
pub const MAX_PROMPT_BYTES: usize = 1 << 20;

/// A workflow spec file (JSON, before prompt files are read): 1 MiB.
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// All prompts of one workflow together (each is also bounded by
/// [`MAX_PROMPT_BYTES`]): 4 MiB, so a stored spec stays small enough to load on
/// every listing.
pub const MAX_WORKFLOW_PROMPTS_BYTES: usize = 4 << 20;

/// A target's command plus all its arguments (`--cmd` and the words after `--`), and
/// separately its provider config overrides: 64 KiB.
pub const MAX_COMMAND_BYTES: usize = 64 << 10;

/// One environment variable's value: 64 KiB (Linux refuses a single argv or env
/// string above 128 KiB).
pub const MAX_ENV_VALUE_BYTES: usize = 64 << 10;

/// All of a target's environment variables, names and values: 256 KiB.
pub const MAX_ENV_BYTES: usize = 256 << 10;

/// A description (of a loop, a workflow or a step): 4 KiB.
pub const MAX_DESCRIPTION_BYTES: usize = 4 << 10;

/// Any other short text field (model, agent, profile names, working directory, step
/// ids and names, workflow names): 4 KiB.
pub const MAX_FIELD_BYTES: usize = 4 << 10;

/// A byte count as the limits are written: `1 MiB`, `64 KiB`, `300 bytes`.
pub fn size_text(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// `Err` with "`what` is larger than LIMIT" when `len` exceeds `limit` (`what` is
/// worded as a singular noun: "prompt", "command line").
pub fn check(what: &str, len: usize, limit: usize) -> Result<(), String> {
    if len > limit {
        Err(format!("{what} is larger than {}", size_text(limit)))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_written() {
        assert_eq!(size_text(MAX_PROMPT_BYTES), "1 MiB");
        assert_eq!(size_text(MAX_COMMAND_BYTES), "64 KiB");
        assert_eq!(size_text(MAX_DESCRIPTION_BYTES), "4 KiB");
        assert_eq!(size_text(300), "300 bytes");
    }

    #[test]
    fn check_allows_the_limit_and_refuses_one_more() {
        assert!(check("prompt", MAX_PROMPT_BYTES, MAX_PROMPT_BYTES).is_ok());
        assert_eq!(
            check("prompt", MAX_PROMPT_BYTES + 1, MAX_PROMPT_BYTES),
            Err("prompt is larger than 1 MiB".to_owned())
        );
    }
}
