//! Workflow specs as files and as documents: reading a spec file (`workflows
//! validate|create`, the MCP tool `workflow_validate`), and the JSON a stored
//! workflow is shown as (`workflows list|show --json`, the MCP workflow tools).
//! Messages are one line and name the file.

use crate::input::{absolute_path, read_text};
use loops_core::limits::{MAX_PROMPT_BYTES, MAX_SPEC_BYTES};
use loops_core::workflow::{parse_spec, validate, StepTarget, Workflow, WorkflowSpec};
use loops_core::Target;
use std::path::Path;

/// Reads, parses and validates the spec file `file` (at most [`MAX_SPEC_BYTES`]);
/// `name` overrides the spec's name, and `preflight` also checks that every step's
/// target can start here. Paths in it are relative to the file's directory (`~/` is
/// `$HOME`) and stored absolute; each `promptFile` is read and stored as text.
pub fn load_spec_file(
    file: &Path,
    name: Option<&str>,
    preflight: bool,
) -> Result<WorkflowSpec, String> {
    let text = read_text(file, MAX_SPEC_BYTES, "workflow spec")?;
    let base = file.parent().unwrap_or(Path::new("."));
    load_spec_text(&text, &file.display().to_string(), base, name, preflight)
}

/// [`load_spec_file`] for a spec given as text: `label` stands for the file in
/// messages and `base` is the directory its relative paths are relative to.
pub fn load_spec_text(
    text: &str,
    label: &str,
    base: &Path,
    name: Option<&str>,
    preflight: bool,
) -> Result<WorkflowSpec, String> {
    let mut spec = parse_spec(text).map_err(|e| format!("{label}: {e}"))?;
    if let Some(name) = name {
        spec.name = name.to_owned();
    }
    resolve_spec(&mut spec, label, base)?;
    validate(&spec).map_err(|e| format!("{label}: {e}"))?;
    if preflight {
        let problems = preflight_spec(&spec);
        if !problems.is_empty() {
            return Err(format!("preflight failed: {}", problems.join("; ")));
        }
    }
    Ok(spec)
}

/// Paths in a spec are relative to `base`, the spec's directory (`~/` is `$HOME`), and
/// stored absolute: a step's `cwd`, and each `promptFile`, which is read (at most
/// [`MAX_PROMPT_BYTES`]) and stored as text with its absolute source path.
fn resolve_spec(spec: &mut WorkflowSpec, file: &str, base: &Path) -> Result<(), String> {
    for step in &mut spec.steps {
        let label = format!("step {:?}", step.id);
        let (cwd, prompt_file) = match &mut step.target {
            StepTarget::Command(c) => (&mut c.cwd, None),
            StepTarget::Agent(a) => (&mut a.cwd, Some((&mut a.prompt_file, &mut a.prompt))),
        };
        if let Some(dir) = cwd.as_mut().filter(|d| !d.trim().is_empty()) {
            *dir = absolute_path(dir, Some(base), &format!("{label}: cwd"))
                .map_err(|e| format!("{file}: {e}"))?;
        }
        if let Some((Some(path), prompt)) = prompt_file {
            let abs = absolute_path(path, Some(base), &format!("{label}: promptFile"))
                .map_err(|e| format!("{file}: {e}"))?;
            let what = format!("{label}: promptFile");
            *prompt = read_text(Path::new(&abs), MAX_PROMPT_BYTES, &what)?;
            *path = abs;
        }
    }
    Ok(())
}

/// Problems that would stop a step's target from starting here, each naming its step.
fn preflight_spec(spec: &WorkflowSpec) -> Vec<String> {
    let mut problems = Vec::new();
    for step in &spec.steps {
        let target = match &step.target {
            StepTarget::Command(c) => Target::Command(c.clone()),
            StepTarget::Agent(a) => Target::Agent(a.clone()),
        };
        for p in crate::preflight::check_target(&target) {
            problems.push(format!("step {:?}: {p}", step.id));
        }
    }
    problems
}

/// A stored workflow as JSON in OpenLoops 0.3's shape: the record's fields with the
/// spec's at top level; prompts and env values redacted.
pub fn workflow_json(record: &Workflow) -> serde_json::Value {
    let mut shown = record.clone();
    loops_core::redact::redact_spec(&mut shown.spec);
    let mut value = serde_json::to_value(&shown).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        if let Some(serde_json::Value::Object(spec)) = obj.remove("spec") {
            for (k, v) in spec {
                if k != "name" && k != "version" {
                    obj.insert(k, v);
                }
            }
        }
    }
    value
}

/// What `workflows validate --json` (and MCP's `workflow_validate`) print for a valid
/// spec: its name, its number of steps and the params it declares (left out when none).
pub fn validated_json(spec: &WorkflowSpec) -> serde_json::Value {
    let mut doc =
        serde_json::json!({ "valid": true, "name": spec.name, "steps": spec.steps.len() });
    if !spec.params.is_empty() {
        doc["params"] = serde_json::json!(spec.params);
    }
    doc
}
