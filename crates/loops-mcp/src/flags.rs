//! Values given as text, read as the CLI reads its flags and refused with the CLI's
//! messages (`--every: invalid duration "0s": must be greater than zero`): the tools'
//! parameters are the CLI's flags, so their messages name the flag.

use loops_core::duration::DurationError;
use loops_core::Duration;

/// A duration flag (`500ms`, `30s`, `15m`, `1.5h`, `2d`): as the CLI's `duration`.
pub fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    Duration::parse(text).map_err(|e| format!("{flag}: {e}"))
}

/// A `--timeout`: a [`duration`], where zero is refused with the way to say "no
/// limit", as the CLI's `timeout`.
pub fn timeout(flag: &str, text: &str) -> Result<Duration, String> {
    Duration::parse(text).map_err(|e| match e {
        DurationError::NotPositive(_) => format!("{flag}: {e} (omit {flag} for no limit)"),
        e => format!("{flag}: {e}"),
    })
}

/// An optional [`duration`].
pub fn opt_duration(flag: &str, text: Option<&str>) -> Result<Option<Duration>, String> {
    text.map(|t| duration(flag, t)).transpose()
}

/// The longest a tool waits for a run it started (`waitTimeout`).
pub const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// How long a tool waits when `waitTimeout` is not given.
pub const DEFAULT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long to wait for a started run: `None` without `wait`, else `waitTimeout` or
/// [`DEFAULT_WAIT`]. A `waitTimeout` without `wait` is refused (it would do nothing).
pub fn wait(wait: bool, timeout: Option<&str>) -> Result<Option<std::time::Duration>, String> {
    match (wait, timeout) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err("waitTimeout needs wait: true".to_owned()),
        (true, text) => wait_timeout(text).map(Some),
    }
}

/// `waitTimeout`: a duration of at most [`MAX_WAIT`] (default [`DEFAULT_WAIT`]).
fn wait_timeout(text: Option<&str>) -> Result<std::time::Duration, String> {
    let Some(text) = text else {
        return Ok(DEFAULT_WAIT);
    };
    let wait = duration("waitTimeout", text)?.to_std();
    if wait > MAX_WAIT {
        return Err(format!(
            "waitTimeout: {text} is longer than the longest wait, 10m; poll loops_runs or workflow_run_inspect for longer runs"
        ));
    }
    Ok(wait)
}

/// A JSON object of `KEY: VALUE` as the CLI's repeated `KEY=VALUE` flag values; a key
/// holding `=` could not be told apart, so it is refused.
pub fn pairs(
    flag: &str,
    map: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    map.iter()
        .map(|(k, v)| {
            if k.contains('=') {
                Err(format!("invalid {flag} key {k:?}: it contains '='"))
            } else {
                Ok(format!("{k}={v}"))
            }
        })
        .collect()
}
