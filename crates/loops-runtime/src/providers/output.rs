//! Helpers shared by the output parsers: JSON lines, nested field access, usage sums
//! and picking a readable line out of stderr.

use loops_core::Usage;
use serde_json::Value;

/// Longest stderr excerpt quoted in a run's error.
const HINT_MAX_CHARS: usize = 300;

/// The capture keeps the tail of a flooded stream behind a `[truncated N bytes]` line;
/// parsers must not mistake that line for output.
pub(super) fn strip_truncation_marker(text: &str) -> &str {
    match text.strip_prefix("[truncated ") {
        Some(rest) => rest.split_once('\n').map_or("", |(_, tail)| tail),
        None => text,
    }
}

/// Every line of `text` that is a JSON object, in order. Other lines (banners,
/// warnings, a truncated first line) are skipped rather than failing the parse.
pub(super) fn json_lines(text: &str) -> impl Iterator<Item = Value> + '_ {
    strip_truncation_marker(text).lines().filter_map(|line| {
        let line = line.trim();
        if !line.starts_with('{') {
            return None;
        }
        serde_json::from_str::<Value>(line)
            .ok()
            .filter(Value::is_object)
    })
}

/// The value at `path` inside nested objects.
pub(super) fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(*key))
}

pub(super) fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path).and_then(Value::as_str)
}

pub(super) fn u64_at(value: &Value, path: &[&str]) -> Option<u64> {
    at(value, path).and_then(Value::as_u64)
}

/// Adds token counts and cost to a running total (a run may report several turns or
/// steps). `None` parts leave the total's part as it was.
pub(super) fn add_usage(
    total: &mut Option<Usage>,
    input: Option<u64>,
    output: Option<u64>,
    cost: Option<f64>,
) {
    if input.is_none() && output.is_none() && cost.is_none() {
        return;
    }
    let usage = total.get_or_insert_with(Usage::default);
    let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    usage.input_tokens = sum(usage.input_tokens, input);
    usage.output_tokens = sum(usage.output_tokens, output);
    usage.cost_usd = match (usage.cost_usd, cost) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    };
}

/// Sum of the fields that are present, `None` when none is.
pub(super) fn sum_present(parts: &[Option<u64>]) -> Option<u64> {
    parts.iter().flatten().copied().reduce(u64::saturating_add)
}

/// An API error often arrives as the raw response body (`{"error":{"message":…}}`)
/// inside the provider's message; the inner message is what a person needs.
pub(super) fn readable_error(message: &str) -> String {
    let inner = serde_json::from_str::<Value>(message.trim())
        .ok()
        .and_then(|v| {
            str_at(&v, &["error", "message"])
                .or_else(|| str_at(&v, &["message"]))
                .map(str::to_owned)
        });
    inner.unwrap_or_else(|| message.trim().to_owned())
}

/// The stderr line most likely to explain a failure: the last one that mentions an
/// error, else the last non-empty one; ANSI colours removed, length bounded.
pub(super) fn stderr_hint(stderr: &str) -> Option<String> {
    let lines: Vec<String> = strip_truncation_marker(stderr)
        .lines()
        .map(strip_ansi)
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    let pick = lines
        .iter()
        .rev()
        .find(|l| l.to_ascii_lowercase().contains("error"))
        .or_else(|| lines.last())?;
    Some(if pick.chars().count() > HINT_MAX_CHARS {
        let cut: String = pick.chars().take(HINT_MAX_CHARS).collect();
        format!("{cut}…")
    } else {
        pick.clone()
    })
}

/// Removes `ESC [ … letter` sequences (colours, cursor moves).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip the CSI introducer and parameters up to the final letter.
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_prefer_error_lines_and_drop_colours() {
        let stderr = "\u{1b}[91m\u{1b}[1mError: \u{1b}[0mYou must provide a message\nbye\n";
        assert_eq!(
            stderr_hint(stderr).as_deref(),
            Some("Error: You must provide a message")
        );
        assert_eq!(stderr_hint("a\n\nlast\n").as_deref(), Some("last"));
        assert_eq!(stderr_hint(" \n"), None);
    }

    #[test]
    fn readable_error_unwraps_api_bodies() {
        assert_eq!(
            readable_error(r#"{"type":"error","error":{"type":"x","message":"bad"}}"#),
            "bad"
        );
        assert_eq!(readable_error(" plain "), "plain");
    }

    #[test]
    fn json_lines_skip_noise_and_truncation() {
        let text = "[truncated 9 bytes]\n\"partial\":1}\nnot json\n{\"a\":1}\n[1]\n";
        let lines: Vec<Value> = json_lines(text).collect();
        assert_eq!(lines, vec![serde_json::json!({"a": 1})]);
    }
}
