//! Workflow parameters (issue #23 item 3): a spec declares its `params` (name, default,
//! required, description); its steps use `${params.NAME}` in a command, its args, a
//! prompt, env values and cwd. A run is given values (`workflows run --param K=V`, a
//! workflow loop's `params`), checked against the declarations in the spec's own words
//! ([`resolve`]), and records the values it used; the runner executes the spec with
//! them put in ([`substitute`]).
//!
//! A value goes in as one piece of text: an argument stays one argument, never split
//! again. Only a shell step's `command` is read by a shell, so there each value is put
//! in single-quoted. `$${params.NAME}` is the literal text `${params.NAME}`.

use crate::workflow::{Step, StepTarget, WorkflowError, WorkflowSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The values of a run's params, by name.
pub type ParamValues = BTreeMap<String, String>;

/// Most params one spec declares.
pub const MAX_PARAMS: usize = 64;

/// Longest value of one param (as long as an env value may be).
pub const MAX_VALUE_BYTES: usize = crate::limits::MAX_ENV_VALUE_BYTES;

/// One declared param of a spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Param {
    /// `[A-Za-z_][A-Za-z0-9_]*`, unique in the spec.
    pub name: String,
    /// The value when a run gives none (a param with neither a default nor `required`
    /// is the empty text then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// A run must give a value (and then there is no default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// What the value is for: quoted when a run leaves a required param out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Whether `name` may name a param.
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

/// Parses `K=V` (a `--param` flag's value).
pub fn parse_assignment(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("--param {text:?}: expected NAME=VALUE"))?;
    if !is_name(name) {
        return Err(format!(
            "--param {name:?}: a param name is letters, digits and _, not starting with a digit"
        ));
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// Parses repeated `--param NAME=VALUE` flags; a name given twice is refused.
pub fn parse_assignments(texts: &[String]) -> Result<ParamValues, String> {
    let mut values = ParamValues::new();
    for text in texts {
        let (name, value) = parse_assignment(text)?;
        if values.insert(name.clone(), value).is_some() {
            return Err(format!("--param {name} is given twice"));
        }
    }
    Ok(values)
}

/// The problems of a spec's declarations and of its steps' references, each in one
/// line (part of [`crate::workflow::validate`]).
pub fn problems(spec: &WorkflowSpec) -> Vec<String> {
    let mut out = Vec::new();
    if spec.params.len() > MAX_PARAMS {
        out.push(format!(
            "workflow declares {} params (at most {MAX_PARAMS})",
            spec.params.len()
        ));
    }
    for (i, p) in spec.params.iter().enumerate() {
        let label = format!("param {:?}", crate::workflow::truncated(&p.name));
        if !is_name(&p.name) {
            out.push(format!(
                "{label}: a name is letters, digits and _, not starting with a digit (at most 64)"
            ));
        }
        if spec.params[..i].iter().any(|q| q.name == p.name) {
            out.push(format!("{label} is declared twice"));
        }
        if p.required && p.default.is_some() {
            out.push(format!("{label}: required and default exclude each other"));
        }
        if let Some(default) = &p.default {
            if let Err(e) = check_value(&p.name, default) {
                out.push(format!("{label}: default: {e}"));
            }
        }
        if let Some(d) = &p.description {
            if let Err(e) = crate::limits::check(
                &format!("{label}: description"),
                d.len(),
                crate::limits::MAX_DESCRIPTION_BYTES,
            ) {
                out.push(e);
            }
        }
    }
    for step in &spec.steps {
        let label = format!("step {:?}", crate::workflow::truncated(step.id.as_str()));
        for (field, text) in templates(step) {
            match references(text) {
                Err(e) => out.push(format!("{label}: {field}: {e}")),
                Ok(names) => {
                    for name in names {
                        if !spec.params.iter().any(|p| p.name == name) {
                            out.push(format!("{label}: {field} uses undeclared param {name:?}"));
                        }
                    }
                }
            }
        }
    }
    out
}

/// A value given for `name` (a loop's `params`, before the spec is at hand): a param's
/// name, and a value [`resolve`] would take.
pub fn check_given(name: &str, value: &str) -> Result<(), String> {
    if !is_name(name) {
        return Err(format!(
            "param {:?}: a name is letters, digits and _, not starting with a digit (at most 64)",
            crate::workflow::truncated(name)
        ));
    }
    check_value(name, value)
}

/// A value is text without control characters other than tabs and newlines, at most
/// [`MAX_VALUE_BYTES`].
fn check_value(name: &str, value: &str) -> Result<(), String> {
    crate::limits::check(&format!("param {name:?}"), value.len(), MAX_VALUE_BYTES)?;
    if value
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(format!(
            "param {name:?}: the value holds a control character"
        ));
    }
    Ok(())
}

/// The values a run of `spec` uses, given `supplied`: a name the spec does not declare
/// or a required param left out is refused, naming the spec's params and quoting the
/// description; a param left out otherwise takes its default (or the empty text).
pub fn resolve(spec: &WorkflowSpec, supplied: &ParamValues) -> Result<ParamValues, WorkflowError> {
    let mut problems = Vec::new();
    for name in supplied.keys() {
        if !spec.params.iter().any(|p| &p.name == name) {
            let declared: Vec<&str> = spec.params.iter().map(|p| p.name.as_str()).collect();
            problems.push(if declared.is_empty() {
                format!("workflow {:?} has no params; got {name:?}", spec.name)
            } else {
                format!(
                    "workflow {:?} has no param {name:?} (its params: {})",
                    spec.name,
                    declared.join(", ")
                )
            });
        }
    }
    let mut values = ParamValues::new();
    for p in &spec.params {
        match supplied.get(&p.name) {
            Some(v) => {
                if let Err(e) = check_value(&p.name, v) {
                    problems.push(e);
                }
                values.insert(p.name.clone(), v.clone());
            }
            None if p.required => problems.push(match &p.description {
                Some(d) => format!(
                    "workflow {:?} needs param {:?}: {d} (--param {}=VALUE)",
                    spec.name, p.name, p.name
                ),
                None => format!(
                    "workflow {:?} needs param {:?} (--param {}=VALUE)",
                    spec.name, p.name, p.name
                ),
            }),
            None => {
                values.insert(p.name.clone(), p.default.clone().unwrap_or_default());
            }
        }
    }
    if problems.is_empty() {
        Ok(values)
    } else {
        Err(WorkflowError(problems.join("; ")))
    }
}

/// `spec` with each `${params.NAME}` of its steps' command, args, prompt, env values
/// and cwd replaced by the value in `values` (a shell step's command gets it
/// single-quoted), then validated as a spec is: a value that makes a step invalid (a
/// command with spaces and no shell, say) is refused here, before anything runs.
pub fn substitute(
    spec: &WorkflowSpec,
    values: &ParamValues,
) -> Result<WorkflowSpec, WorkflowError> {
    let mut out = spec.clone();
    let mut problems = Vec::new();
    for step in &mut out.steps {
        let label = format!("step {:?}", step.id.as_str());
        let mut put = |field: &str, text: &mut String, quote: bool| match fill(text, values, quote)
        {
            Ok(filled) => *text = filled,
            Err(e) => problems.push(format!("{label}: {field}: {e}")),
        };
        match &mut step.target {
            StepTarget::Command(c) => {
                let shell = c.shell;
                put("command", &mut c.command, shell);
                for arg in &mut c.args {
                    put("args", arg, false);
                }
                if let Some(cwd) = &mut c.cwd {
                    put("cwd", cwd, false);
                }
                for value in c.env.values_mut() {
                    put("env", value, false);
                }
            }
            StepTarget::Agent(a) => {
                put("prompt", &mut a.prompt, false);
                if let Some(cwd) = &mut a.cwd {
                    put("cwd", cwd, false);
                }
                for value in a.env.values_mut() {
                    put("env", value, false);
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(WorkflowError(problems.join("; ")));
    }
    crate::workflow::validate(&out).map_err(|e| {
        WorkflowError(format!(
            "with its params put in, workflow {:?} is not valid: {e}",
            spec.name
        ))
    })?;
    Ok(out)
}

/// The params of `spec` whose value defines what runs, not only what it works on: one
/// in the `command` of a step without a shell (it picks the program) or in a step's env
/// value (`PATH`, `LD_PRELOAD`, a tool's config). A shell step's command gets its
/// values quoted, one word each, so they cannot add commands there. (An MCP server
/// gives such a value only with `--allow-code`.)
pub fn defining_code(spec: &WorkflowSpec) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for step in &spec.steps {
        let mut texts: Vec<&str> = Vec::new();
        match &step.target {
            StepTarget::Command(c) => {
                if !c.shell {
                    texts.push(&c.command);
                }
                texts.extend(c.env.values().map(String::as_str));
            }
            StepTarget::Agent(a) => texts.extend(a.env.values().map(String::as_str)),
        }
        for text in texts {
            for name in references(text).unwrap_or_default() {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// The texts of `step` that may hold references, with their field names.
fn templates(step: &Step) -> Vec<(&'static str, &str)> {
    let mut out = Vec::new();
    match &step.target {
        StepTarget::Command(c) => {
            out.push(("command", c.command.as_str()));
            out.extend(c.args.iter().map(|a| ("args", a.as_str())));
            out.extend(c.cwd.iter().map(|d| ("cwd", d.as_str())));
            out.extend(c.env.values().map(|v| ("env", v.as_str())));
        }
        StepTarget::Agent(a) => {
            out.push(("prompt", a.prompt.as_str()));
            out.extend(a.cwd.iter().map(|d| ("cwd", d.as_str())));
            out.extend(a.env.values().map(|v| ("env", v.as_str())));
        }
    }
    out
}

/// One piece of a template: literal text or a param's name.
enum Piece<'a> {
    Text(&'a str),
    Param(&'a str),
}

const OPEN: &str = "${params.";

/// Splits `text` into literal pieces and references; `$${` is a literal `${`.
fn pieces(text: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        // `$${` escapes: the text up to and with one `$` of the two, then `{`.
        if at > 0 && rest.as_bytes()[at - 1] == b'$' {
            out.push(Piece::Text(&rest[..at - 1]));
            out.push(Piece::Text("${"));
            rest = &rest[at + 2..];
            continue;
        }
        out.push(Piece::Text(&rest[..at]));
        let tail = &rest[at..];
        if !tail.starts_with(OPEN) {
            // Some other `${…}` (a shell's own): literal.
            out.push(Piece::Text("${"));
            rest = &tail[2..];
            continue;
        }
        let body = &tail[OPEN.len()..];
        let end = body
            .find('}')
            .ok_or_else(|| format!("{OPEN}… is not closed with }}"))?;
        let name = &body[..end];
        if !is_name(name) {
            return Err(format!(
                "{OPEN}{}}} does not name a param",
                crate::workflow::truncated(name)
            ));
        }
        out.push(Piece::Param(name));
        rest = &body[end + 1..];
    }
    out.push(Piece::Text(rest));
    Ok(out)
}

/// The param names `text` refers to.
fn references(text: &str) -> Result<Vec<String>, String> {
    Ok(pieces(text)?
        .into_iter()
        .filter_map(|p| match p {
            Piece::Param(name) => Some(name.to_owned()),
            Piece::Text(_) => None,
        })
        .collect())
}

/// `text` with its references replaced by their values (single-quoted for a shell).
fn fill(text: &str, values: &ParamValues, quote: bool) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    for piece in pieces(text)? {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Param(name) => {
                let value = values
                    .get(name)
                    .ok_or_else(|| format!("no value for param {name:?}"))?;
                if quote {
                    out.push_str(&shell_quote(value));
                } else {
                    out.push_str(value);
                }
            }
        }
    }
    Ok(out)
}

/// `value` as one word for `/bin/sh`: single-quoted, each `'` written `'\''`.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::workflow::parse_spec;

    fn spec(json: serde_json::Value) -> WorkflowSpec {
        parse_spec(&json.to_string()).unwrap()
    }

    fn fixer() -> WorkflowSpec {
        spec(serde_json::json!({"name": "fixer",
        "params": [
            {"name": "branch", "required": true, "description": "the branch to fix"},
            {"name": "tests", "default": "cargo test"},
            {"name": "note"}
        ],
        "steps": [
            {"id": "checkout", "target": {"type": "command", "command": "git",
                "args": ["checkout", "${params.branch}"], "cwd": "/src/${params.branch}",
                "env": {"BRANCH": "${params.branch}"}}},
            {"id": "test", "dependsOn": ["checkout"], "target": {"type": "command",
                "shell": true, "command": "${params.tests} && echo ${params.branch} $${params.branch} ${HOME}"}},
            {"id": "fix", "dependsOn": ["test"], "target": {"type": "agent", "provider": "claude",
                "prompt": "Fix ${params.branch}. ${params.note}"}}
        ]}))
    }

    fn values(pairs: &[(&str, &str)]) -> ParamValues {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn values_are_checked_against_the_declarations_in_the_specs_words() {
        let s = fixer();
        assert!(crate::workflow::validate(&s).is_ok());
        let got = resolve(&s, &values(&[("branch", "main")])).unwrap();
        assert_eq!(
            got,
            values(&[("branch", "main"), ("note", ""), ("tests", "cargo test")])
        );
        let err = resolve(&s, &ParamValues::new()).unwrap_err().0;
        assert_eq!(
            err,
            "workflow \"fixer\" needs param \"branch\": the branch to fix (--param branch=VALUE)"
        );
        let err = resolve(&s, &values(&[("branch", "x"), ("brnach", "y")]))
            .unwrap_err()
            .0;
        assert_eq!(
            err,
            "workflow \"fixer\" has no param \"brnach\" (its params: branch, tests, note)"
        );
        let err = resolve(&s, &values(&[("branch", "a\u{1b}[2J")]))
            .unwrap_err()
            .0;
        assert!(err.contains("control character"), "{err}");
    }

    #[test]
    fn a_value_is_one_argument_and_quoted_only_for_a_shell() {
        let hostile = "x; rm -rf / 'it'$(id)";
        let s = substitute(
            &fixer(),
            &resolve(&fixer(), &values(&[("branch", hostile)])).unwrap(),
        )
        .unwrap();
        let StepTarget::Command(checkout) = &s.steps[0].target else {
            panic!()
        };
        assert_eq!(checkout.args, ["checkout", hostile]);
        assert_eq!(checkout.cwd.as_deref(), Some(&*format!("/src/{hostile}")));
        assert_eq!(checkout.env["BRANCH"], hostile);
        let StepTarget::Command(test) = &s.steps[1].target else {
            panic!()
        };
        assert_eq!(
            test.command,
            r#"'cargo test' && echo 'x; rm -rf / '\''it'\''$(id)' ${params.branch} ${HOME}"#
        );
        let StepTarget::Agent(fix) = &s.steps[2].target else {
            panic!()
        };
        assert_eq!(fix.prompt, format!("Fix {hostile}. "));
    }

    #[test]
    fn declarations_and_references_are_validated() {
        let bad = spec(serde_json::json!({"name": "w",
            "params": [
                {"name": "1x"}, {"name": "a", "required": true, "default": "d"}, {"name": "a"}
            ],
            "steps": [{"id": "s", "target": {"type": "command", "command": "echo",
                "args": ["${params.b}", "${params.", "${params.no-t}"]}}]}));
        let err = crate::workflow::validate(&bad).unwrap_err().0;
        for needle in [
            "param \"1x\": a name is letters",
            "param \"a\": required and default exclude each other",
            "param \"a\" is declared twice",
            "step \"s\": args uses undeclared param \"b\"",
            "step \"s\": args: ${params.… is not closed with }",
            "step \"s\": args: ${params.no-t} does not name a param",
        ] {
            assert!(err.contains(needle), "{needle:?} not in {err}");
        }
    }

    #[test]
    fn a_value_that_makes_a_step_invalid_is_refused_before_anything_runs() {
        let s = spec(serde_json::json!({"name": "w", "params": [{"name": "cmd"}],
            "steps": [{"id": "s", "target": {"type": "command", "command": "${params.cmd}"}}]}));
        let err = substitute(&s, &values(&[("cmd", "rm -rf /")]))
            .unwrap_err()
            .0;
        assert!(
            err.starts_with("with its params put in, workflow \"w\" is not valid: "),
            "{err}"
        );
        assert!(substitute(&s, &values(&[("cmd", "true")])).is_ok());
    }

    #[test]
    fn assignments_parse_name_then_value() {
        assert_eq!(
            parse_assignment("branch=feat=x").unwrap(),
            ("branch".to_owned(), "feat=x".to_owned())
        );
        assert!(parse_assignment("branch").is_err());
        assert!(parse_assignment("9=x").is_err());
    }
}
