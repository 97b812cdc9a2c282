//! The portable bundle `loops export` writes and `loops import` reads, and the plan of
//! an import (what would be created, renamed, skipped or conflict). Pure: the caller
//! reads the file and says what the store already holds.
//!
//! A bundle is one JSON document:
//!
//! ```json
//! {"format": "loops-bundle", "version": 2, "exportedAt": "2026-12-01T09:00:00.000Z",
//!  "includesSecrets": false,
//!  "loops": [{"name": "backup", "schedule": {…}, "target": {…, "env": {"API_KEY": null}}, …}],
//!  "workflows": [{"name": "release", "steps": […]}],
//!  "redacted": [{"loop": "backup", "field": "target.env.API_KEY"}]}
//! ```
//!
//! A loop entry is the loop's JSON (as `loops --json show` prints it) without what
//! belongs to one store rather than to the definition ([`STATE_FIELDS`]: its id,
//! creation and update times, a pending retry, the jittered due instant), so every
//! field a later version adds to loops travels without code of its own. A workflow
//! entry is its spec. Secrets — env values of targets and steps, and notification
//! URLs (webhook URLs carry their tokens) — are `null` unless exported with
//! `--include-secrets`, and listed in `redacted` so an import can say what must be
//! filled in. Prompts are part of a definition and are always included. A loop's
//! runner labels travel as its `runsOn` (left out when it has none, as in
//! `loops show`), so a loop without them exports as it did before they existed.
//!
//! Version 2 (issue #19) changed one word: a loop's `notify.on: "always"` means every
//! finished slot; what version 1 called `always` (failure and recovery) is `changes`.
//! A version-1 bundle still reads, its `always` read as `changes`, so an imported loop
//! notifies as it did where it was exported.

use crate::workflow::WorkflowSpec;
use crate::{Instant, Loop, NewLoop, Run, Target};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

/// The `format` of every bundle.
pub const FORMAT: &str = "loops-bundle";
/// The bundle version this build writes (and the newest it reads).
pub const VERSION: u64 = 2;
/// The oldest bundle version this build reads.
pub const OLDEST_VERSION: u64 = 1;
/// The largest bundle file read (a bundle of 1,000 agent loops with long prompts fits).
pub const MAX_BUNDLE_BYTES: usize = 64 << 20;
/// Loop fields that are its state on one store, not part of its definition.
pub const STATE_FIELDS: &[&str] = &[
    "id",
    "createdAt",
    "updatedAt",
    "retryScheduledFor",
    "dueAt",
    "failureStreak",
    "statusReason",
    "heldSlot",
    "heldAttempts",
    "heldUntil",
    "heldReason",
    "runCount",
];

/// Why a bundle cannot be read. Messages are one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BundleError {
    #[error("not a loops bundle: {0}")]
    NotABundle(String),
    #[error(
        "unsupported bundle version {found} (this loops reads versions {OLDEST_VERSION} to {VERSION})"
    )]
    UnsupportedVersion { found: String },
    #[error("invalid bundle: {0}")]
    Invalid(String),
}

/// A secret left out of a bundle: which loop or workflow, and the field's path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Redaction {
    #[serde(default, rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    pub field: String,
}

impl fmt::Display for Redaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.loop_name, &self.workflow) {
            (Some(l), _) => write!(f, "loop {l:?}: {}", self.field),
            (None, Some(w)) => write!(f, "workflow {w:?}: {}", self.field),
            (None, None) => f.write_str(&self.field),
        }
    }
}

/// A bundle as [`export`] writes it (fields in this order).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bundle {
    /// Always [`FORMAT`].
    pub format: &'static str,
    /// Always [`VERSION`].
    pub version: u64,
    #[serde(with = "crate::timefmt")]
    pub exported_at: Instant,
    pub includes_secrets: bool,
    /// Loop entries: a loop's JSON without [`STATE_FIELDS`].
    pub loops: Vec<Value>,
    /// Workflow specs.
    pub workflows: Vec<Value>,
    /// The secrets left out.
    pub redacted: Vec<Redaction>,
}

/// The bundle of `loops` and `workflows` at `now`; with `include_secrets` false, env
/// values and notification URLs are `null` and listed in `redacted`.
pub fn export(
    loops: &[Loop],
    workflows: &[WorkflowSpec],
    include_secrets: bool,
    now: Instant,
) -> Result<Bundle, BundleError> {
    let encode = |what: &str, e: serde_json::Error| BundleError::Invalid(format!("{what}: {e}"));
    let mut redacted = Vec::new();
    let mut loop_entries = Vec::with_capacity(loops.len());
    for lp in loops {
        let mut value = serde_json::to_value(lp).map_err(|e| encode(&lp.name, e))?;
        if let Some(map) = value.as_object_mut() {
            for field in STATE_FIELDS {
                map.remove(*field);
            }
            if !include_secrets {
                for field in redact_loop(map) {
                    redacted.push(Redaction {
                        loop_name: Some(lp.name.clone()),
                        workflow: None,
                        field,
                    });
                }
            }
        }
        loop_entries.push(value);
    }
    let mut workflow_entries = Vec::with_capacity(workflows.len());
    for spec in workflows {
        let mut value = serde_json::to_value(spec).map_err(|e| encode(&spec.name, e))?;
        if !include_secrets {
            for field in redact_spec(&mut value) {
                redacted.push(Redaction {
                    loop_name: None,
                    workflow: Some(spec.name.clone()),
                    field,
                });
            }
        }
        workflow_entries.push(value);
    }
    Ok(Bundle {
        format: FORMAT,
        version: VERSION,
        exported_at: now,
        includes_secrets: include_secrets,
        loops: loop_entries,
        workflows: workflow_entries,
        redacted,
    })
}

/// Nulls a loop entry's secrets; returns their fields.
fn redact_loop(map: &mut Map<String, Value>) -> Vec<String> {
    let mut fields = Vec::new();
    // Env values, and a workflow loop's param values, which are redacted as they are.
    for part in ["env", "params"] {
        if let Some(values) = target_object(map.get_mut("target"), part) {
            null_values(values, &format!("target.{part}"), &mut fields);
        }
    }
    if let Some(url) = map.get_mut("notify").and_then(|n| n.get_mut("url")) {
        if !url.is_null() {
            *url = Value::Null;
            fields.push("notify.url".to_owned());
        }
    }
    fields
}

/// Nulls the env values of a spec's steps; returns their fields.
fn redact_spec(spec: &mut Value) -> Vec<String> {
    each_step_env(spec, null_values)
}

/// `edit` (nulling or removing values) over the env of each of a spec's steps; returns
/// the fields it touched. Redacting a spec and stripping its nulls share it.
fn each_step_env(
    spec: &mut Value,
    edit: fn(&mut Map<String, Value>, &str, &mut Vec<String>),
) -> Vec<String> {
    let mut fields = Vec::new();
    for (id, env) in step_envs(spec) {
        edit(env, &format!("steps.{id}.target.env"), &mut fields);
    }
    fields
}

/// Takes a loop entry's `null` secrets out (they cannot be a definition's values) and
/// returns their fields: env values, and a notification URL (notifications left with
/// neither URL nor command go).
fn strip_loop_nulls(map: &mut Map<String, Value>) -> Vec<String> {
    let mut fields = Vec::new();
    for part in ["env", "params"] {
        if let Some(values) = target_object(map.get_mut("target"), part) {
            remove_nulls(values, &format!("target.{part}"), &mut fields);
        }
    }
    let notify_gone = match map.get_mut("notify").and_then(Value::as_object_mut) {
        Some(notify) => {
            if notify.get("url").is_some_and(Value::is_null) {
                notify.remove("url");
                fields.push("notify.url".to_owned());
            }
            // A null command is an absent one (commands are not redacted), so a
            // notification left without a channel goes whichever way it was written.
            if notify.get("cmd").is_some_and(Value::is_null) {
                notify.remove("cmd");
            }
            !notify.contains_key("url") && !notify.contains_key("cmd")
        }
        None => false,
    };
    if notify_gone {
        map.remove("notify");
    }
    fields
}

fn strip_spec_nulls(spec: &mut Value) -> Vec<String> {
    each_step_env(spec, remove_nulls)
}

/// A target's `part` object (`env`, `params`), when the target has one.
fn target_object<'a>(
    target: Option<&'a mut Value>,
    part: &str,
) -> Option<&'a mut Map<String, Value>> {
    target
        .and_then(|t| t.get_mut(part))
        .and_then(Value::as_object_mut)
}

/// Each step of a workflow spec that has a target env: its id (`?` without one) and
/// the env.
fn step_envs(spec: &mut Value) -> Vec<(String, &mut Map<String, Value>)> {
    let Some(steps) = spec.get_mut("steps").and_then(Value::as_array_mut) else {
        return Vec::new();
    };
    steps
        .iter_mut()
        .filter_map(|step| {
            let id = step
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            Some((id, target_object(step.get_mut("target"), "env")?))
        })
        .collect()
}

/// Nulls every value of `values`, naming each `{prefix}.{key}` in `fields`.
fn null_values(values: &mut Map<String, Value>, prefix: &str, fields: &mut Vec<String>) {
    for (key, value) in values.iter_mut() {
        *value = Value::Null;
        fields.push(format!("{prefix}.{key}"));
    }
}

/// Takes `values`' nulls out, naming each `{prefix}.{key}` in `fields`.
fn remove_nulls(values: &mut Map<String, Value>, prefix: &str, fields: &mut Vec<String>) {
    values.retain(|key, value| {
        let keep = !value.is_null();
        if !keep {
            fields.push(format!("{prefix}.{key}"));
        }
        keep
    });
}

/// A loop to import: its definition (id and instants are placeholders), the secrets
/// its bundle left out, and (from OpenLoops) its run history.
#[derive(Debug, Clone, PartialEq)]
pub struct IncomingLoop {
    pub definition: Loop,
    /// Fields whose values the bundle left out (`target.env.API_KEY`).
    pub redacted: Vec<String>,
    /// Finished runs, oldest first.
    pub history: Vec<Run>,
}

/// A workflow spec to import.
#[derive(Debug, Clone, PartialEq)]
pub struct IncomingWorkflow {
    pub spec: WorkflowSpec,
    pub redacted: Vec<String>,
}

/// What an import brings: from a bundle ([`parse`]) or another scheduler's store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Incoming {
    pub exported_at: Option<Instant>,
    pub loops: Vec<IncomingLoop>,
    pub workflows: Vec<IncomingWorkflow>,
    /// What could not be carried over, one line each (e.g. an OpenLoops field).
    pub notes: Vec<String>,
    /// Leave out (and note) entries that fail validation instead of refusing the
    /// import: for another scheduler's store, whose rows cannot be edited first.
    pub lenient: bool,
}

/// Reads a bundle: its format and version first (anything else is refused before the
/// rest is looked at), then every loop and workflow, whose unknown fields are errors
/// naming the entry.
pub fn parse(text: &str) -> Result<Incoming, BundleError> {
    let doc: Value = serde_json::from_str(text)
        .map_err(|e| BundleError::NotABundle(format!("not JSON ({e})")))?;
    let Some(map) = doc.as_object() else {
        return Err(BundleError::NotABundle("not a JSON object".into()));
    };
    match map.get("format") {
        Some(Value::String(f)) if f == FORMAT => {}
        Some(other) => {
            return Err(BundleError::NotABundle(format!(
                "\"format\" is {other}, not \"{FORMAT}\""
            )))
        }
        None => {
            return Err(BundleError::NotABundle(format!(
                "no \"format\": \"{FORMAT}\" field"
            )))
        }
    }
    let version = match map.get("version") {
        Some(v)
            if v.as_u64()
                .is_some_and(|n| (OLDEST_VERSION..=VERSION).contains(&n)) =>
        {
            v.as_u64().unwrap_or(VERSION)
        }
        Some(v) => {
            return Err(BundleError::UnsupportedVersion {
                found: v.to_string(),
            })
        }
        None => return Err(BundleError::Invalid("no \"version\" field".into())),
    };
    let known = [
        "format",
        "version",
        "exportedAt",
        "includesSecrets",
        "loops",
        "workflows",
        "redacted",
    ];
    if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(BundleError::Invalid(format!("unknown field {k:?}")));
    }
    let exported_at = match map.get("exportedAt") {
        Some(Value::String(t)) => Some(
            crate::timefmt::parse_instant(t)
                .map_err(|e| BundleError::Invalid(format!("exportedAt {t:?}: {e}")))?,
        ),
        Some(Value::Null) | None => None,
        Some(other) => return Err(BundleError::Invalid(format!("exportedAt is {other}"))),
    };
    let array = |key: &str| -> Result<Vec<Value>, BundleError> {
        match map.get(key) {
            Some(Value::Array(items)) => Ok(items.clone()),
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(_) => Err(BundleError::Invalid(format!("{key:?} is not an array"))),
        }
    };
    let mut incoming = Incoming {
        exported_at,
        ..Incoming::default()
    };
    let mut names = HashSet::new();
    for (i, mut entry) in array("loops")?.into_iter().enumerate() {
        let label = entry
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("loops[{i}]"), |n| format!("loops[{i}] ({n:?})"));
        let Some(map) = entry.as_object_mut() else {
            return Err(BundleError::Invalid(format!("{label} is not an object")));
        };
        if let Some(field) = STATE_FIELDS.iter().find(|f| map.contains_key(**f)) {
            return Err(BundleError::Invalid(format!(
                "{label}: {field:?} is a store's own state, not part of a bundle"
            )));
        }
        if version < 2 {
            always_was_changes(map);
        }
        // What a bundle writes as objects must be objects: serde would also take a
        // struct from an array, past the null stripping, which reads objects only.
        for field in ["schedule", "target", "notify"] {
            if map
                .get(field)
                .is_some_and(|v| !(v.is_object() || (field == "notify" && v.is_null())))
            {
                return Err(BundleError::Invalid(format!(
                    "{label}: {field} is not an object"
                )));
            }
        }
        let redacted = strip_loop_nulls(map);
        let definition = loop_definition(map, &label)?;
        if !names.insert(definition.name.clone()) {
            return Err(BundleError::Invalid(format!(
                "two loops are named {:?}",
                definition.name
            )));
        }
        incoming.loops.push(IncomingLoop {
            definition,
            redacted,
            history: Vec::new(),
        });
    }
    let mut names = HashSet::new();
    for (i, mut entry) in array("workflows")?.into_iter().enumerate() {
        let redacted = strip_spec_nulls(&mut entry);
        let spec: WorkflowSpec = serde_path_to_error::deserialize(entry).map_err(|e| {
            BundleError::Invalid(format!("workflows[{i}].{}: {}", e.path(), e.inner()))
        })?;
        if !names.insert(spec.name.clone()) {
            return Err(BundleError::Invalid(format!(
                "two workflows are named {:?}",
                spec.name
            )));
        }
        incoming.workflows.push(IncomingWorkflow { spec, redacted });
    }
    Ok(incoming)
}

/// A version-1 loop entry's `notify.on: "always"` (failure and recovery then) in
/// today's word, `changes`.
fn always_was_changes(map: &mut Map<String, Value>) {
    if let Some(on) = map
        .get_mut("notify")
        .and_then(Value::as_object_mut)
        .and_then(|n| n.get_mut("on"))
    {
        if on == "always" {
            *on = Value::String(crate::NotifyOn::Changes.as_str().to_owned());
        }
    }
}

/// A loop entry (without state fields) as a [`Loop`]: placeholders for its id and
/// instants, then serde — refusing fields a loop does not have.
fn loop_definition(map: &Map<String, Value>, label: &str) -> Result<Loop, BundleError> {
    let mut full = map.clone();
    let placeholder = Value::String(crate::format_instant(&chrono::DateTime::UNIX_EPOCH));
    full.insert("id".into(), Value::String(String::new()));
    full.insert("createdAt".into(), placeholder.clone());
    full.insert("updatedAt".into(), placeholder);
    let definition: Loop = serde_path_to_error::deserialize(Value::Object(full))
        .map_err(|e| BundleError::Invalid(format!("{label}: {}: {}", e.path(), e.inner())))?;
    // Loops take unknown top-level fields silently; a bundle must not lose one.
    let back = serde_json::to_value(&definition)
        .map_err(|e| BundleError::Invalid(format!("{label}: {e}")))?;
    if let Some(back) = back.as_object() {
        if let Some(unknown) = map.keys().find(|k| !back.contains_key(*k)) {
            // A field serde skips when empty (`description: null`) is not unknown.
            if !map.get(unknown).is_some_and(Value::is_null) {
                return Err(BundleError::Invalid(format!(
                    "{label}: unknown field {unknown:?}"
                )));
            }
        }
    }
    Ok(definition)
}

/// The definition part of a loop, as a store creates it.
pub fn new_loop(lp: &Loop) -> NewLoop {
    crate::LoopDefinition::from(lp).into_new_loop(lp.labels.clone(), lp.next_run_at)
}

/// What to do when a loop or workflow of an import has the name of one already here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    /// Import nothing (the default): the preview names every conflict.
    Fail,
    /// Leave the one here alone and do not import that one.
    Skip,
    /// Import it under the first free name `NAME-2`, `NAME-3`, …
    Rename,
}

impl FromStr for OnConflict {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let choices = [
            ("fail", OnConflict::Fail),
            ("skip", OnConflict::Skip),
            ("rename", OnConflict::Rename),
        ];
        crate::validate::one_of("--on-conflict", s, &choices)
    }
}

/// What the import does with one loop or workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    /// Created under another name (`as`).
    Rename,
    /// Not imported (`--on-conflict skip`).
    Skip,
    /// A workflow with this name and the same spec is already here: it is used.
    Unchanged,
    /// Has the name of one already here (`--on-conflict fail`): the import is refused.
    Conflict,
    /// Does not pass validation: the import is refused.
    Invalid,
}

impl Action {
    /// The printed (and JSON) form.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Rename => "rename",
            Action::Skip => "skip",
            Action::Unchanged => "unchanged",
            Action::Conflict => "conflict",
            Action::Invalid => "invalid",
        }
    }
}

/// One line of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Planned {
    /// The name in the bundle.
    pub name: String,
    pub action: Action,
    /// The name it gets here, when renamed.
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Planned {
    /// The name it is (or would be) stored under.
    pub fn stored_name(&self) -> &str {
        self.as_name.as_deref().unwrap_or(&self.name)
    }
    /// Whether the import writes it.
    pub fn writes(&self) -> bool {
        matches!(self.action, Action::Create | Action::Rename)
    }
}

/// What the store holds already, as far as a plan needs it.
#[derive(Debug, Clone, Default)]
pub struct Existing {
    /// Names of every loop.
    pub loop_names: HashSet<String>,
    /// Active workflow specs by name.
    pub workflows: HashMap<String, WorkflowSpec>,
}

/// The plan of an import: for each workflow and loop (in the bundle's order) what
/// happens to it, the loops and specs as they would be stored (names and workflow
/// targets rewritten for renames), and the secrets still to fill in.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub workflows: Vec<(Planned, IncomingWorkflow)>,
    pub loops: Vec<(Planned, IncomingLoop)>,
}

impl Plan {
    /// Every conflict and invalid entry, one line each.
    pub fn problems(&self) -> Vec<String> {
        let line = |kind: &str, p: &Planned| match p.action {
            Action::Conflict | Action::Invalid => Some(format!(
                "{kind} {:?}: {}",
                p.name,
                p.reason.as_deref().unwrap_or("conflict")
            )),
            _ => None,
        };
        self.workflows
            .iter()
            .filter_map(|(p, _)| line("workflow", p))
            .chain(self.loops.iter().filter_map(|(p, _)| line("loop", p)))
            .collect()
    }

    /// The secrets of imported entries the bundle left out.
    pub fn needs_value(&self) -> Vec<Redaction> {
        let mut out: Vec<Redaction> = self
            .workflows
            .iter()
            .filter(|(p, _)| p.writes())
            .flat_map(|(p, w)| {
                w.redacted.iter().map(|f| Redaction {
                    loop_name: None,
                    workflow: Some(p.stored_name().to_owned()),
                    field: f.clone(),
                })
            })
            .collect();
        out.extend(
            self.loops
                .iter()
                .filter(|(p, _)| p.writes())
                .flat_map(|(p, l)| {
                    l.redacted.iter().map(|f| Redaction {
                        loop_name: Some(p.stored_name().to_owned()),
                        workflow: None,
                        field: f.clone(),
                    })
                }),
        );
        out
    }
}

/// Plans importing `incoming` into a store holding `existing`, by `on_conflict`.
/// Nothing is validated here beyond names (the caller validates each loop as
/// `create` does and marks it [`Action::Invalid`]).
pub fn plan(incoming: Incoming, existing: &Existing, on_conflict: OnConflict) -> Plan {
    let mut taken_workflows: BTreeSet<String> = existing.workflows.keys().cloned().collect();
    taken_workflows.extend(incoming.workflows.iter().map(|w| w.spec.name.clone()));
    let mut renamed_workflows: HashMap<String, String> = HashMap::new();
    let mut workflows = Vec::with_capacity(incoming.workflows.len());
    for mut w in incoming.workflows {
        let name = w.spec.name.clone();
        let planned = match existing.workflows.get(&name) {
            None => planned(&name, Action::Create, None, None),
            Some(here) if same_spec(here, &w.spec) => planned(
                &name,
                Action::Unchanged,
                None,
                Some("the same spec is already here".into()),
            ),
            Some(_) => match on_conflict {
                OnConflict::Fail => planned(
                    &name,
                    Action::Conflict,
                    None,
                    Some("an active workflow with this name and another spec exists".into()),
                ),
                OnConflict::Skip => planned(
                    &name,
                    Action::Skip,
                    None,
                    Some("an active workflow with this name exists; its loops use that one".into()),
                ),
                OnConflict::Rename => {
                    let new = free_name(&name, &taken_workflows);
                    taken_workflows.insert(new.clone());
                    renamed_workflows.insert(name.clone(), new.clone());
                    w.spec.name = new.clone();
                    planned(
                        &name,
                        Action::Rename,
                        Some(new),
                        Some("an active workflow with this name exists".into()),
                    )
                }
            },
        };
        workflows.push((planned, w));
    }
    let mut taken_loops: BTreeSet<String> = existing.loop_names.iter().cloned().collect();
    taken_loops.extend(incoming.loops.iter().map(|l| l.definition.name.clone()));
    let mut loops = Vec::with_capacity(incoming.loops.len());
    for mut l in incoming.loops {
        let name = l.definition.name.clone();
        if let Target::Workflow(t) = &mut l.definition.target {
            if let Some(new) = renamed_workflows.get(&t.workflow) {
                t.workflow = new.clone();
            }
        }
        let planned = if !existing.loop_names.contains(&name) {
            planned(&name, Action::Create, None, None)
        } else {
            let reason = Some("a loop with this name exists".to_owned());
            match on_conflict {
                OnConflict::Fail => planned(&name, Action::Conflict, None, reason),
                OnConflict::Skip => planned(&name, Action::Skip, None, reason),
                OnConflict::Rename => {
                    let new = free_name(&name, &taken_loops);
                    taken_loops.insert(new.clone());
                    l.definition.name = new.clone();
                    planned(&name, Action::Rename, Some(new), reason)
                }
            }
        };
        loops.push((planned, l));
    }
    Plan { workflows, loops }
}

fn planned(name: &str, action: Action, as_name: Option<String>, reason: Option<String>) -> Planned {
    Planned {
        name: name.to_owned(),
        action,
        as_name,
        reason,
    }
}

/// Specs compare without their version (the store numbers versions itself).
fn same_spec(a: &WorkflowSpec, b: &WorkflowSpec) -> bool {
    WorkflowSpec {
        version: 1,
        ..a.clone()
    } == WorkflowSpec {
        version: 1,
        ..b.clone()
    }
}

/// `NAME-2`, `NAME-3`, … : the first not in `taken`.
fn free_name(name: &str, taken: &BTreeSet<String>) -> String {
    (2..)
        .map(|n| format!("{name}-{n}"))
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_else(|| format!("{name}-imported"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn stored_loop(name: &str, target: Value) -> Loop {
        serde_json::from_value(json!({
            "id": "aaaaaaaaaaaa", "name": name, "status": "active",
            "schedule": {"type": "interval", "everyMs": 60000, "anchor": "fixed_rate"},
            "target": target,
            "nextRunAt": "2026-03-10T13:00:00.000Z", "retryScheduledFor": null,
            "catchUp": "latest", "catchUpLimit": 10, "overlap": "skip", "maxAttempts": 2,
            "retryDelayMs": 60000, "leaseMs": 1800000, "expiresAt": null, "jitterMs": 5000,
            "labels": ["ops"], "notify": {"url": "https://hooks.example/T0KEN", "on": "failure"},
            "createdAt": "2026-02-28T12:00:00.000Z", "updatedAt": "2026-03-10T12:00:00.000Z",
        }))
        .unwrap()
    }

    fn spec(name: &str, cmd: &str) -> WorkflowSpec {
        crate::workflow::parse_spec(
            &json!({"name": name, "steps": [{"id": "a", "target": {"type": "command", "command": cmd, "env": {"TOKEN": "s3cret"}}}]})
                .to_string(),
        )
        .unwrap()
    }

    fn now() -> Instant {
        "2026-03-10T12:30:00Z".parse().unwrap()
    }

    /// Found by the `bundle_import` fuzz target: `"notify": []` read as a notification
    /// with neither command nor URL (serde takes a struct from a JSON array, field by
    /// field), which the null stripping, reading objects only, did not drop — so export
    /// → import changed the loop. A bundle writes `schedule`, `target` and `notify` as
    /// objects; anything else there is refused, naming the field.
    #[test]
    fn fuzz_bundle_import_a_notify_that_is_not_an_object_is_refused() {
        for (field, value) in [
            ("notify", json!([])),
            ("notify", json!(["echo failed"])),
            ("notify", json!("echo failed")),
            ("target", json!(["command", "true"])),
            ("schedule", json!(["interval", 60000])),
        ] {
            let mut entry = serde_json::to_value(stored_loop(
                "a",
                json!({"type": "command", "command": "true"}),
            ))
            .unwrap();
            let map = entry.as_object_mut().unwrap();
            for state in STATE_FIELDS {
                map.remove(*state);
            }
            map.insert(field.into(), value.clone());
            let text = json!({"format": FORMAT, "version": VERSION, "loops": [entry]}).to_string();
            match parse(&text) {
                Err(BundleError::Invalid(message)) => assert_eq!(
                    message,
                    format!("loops[0] (\"a\"): {field} is not an object"),
                    "{field}: {value}"
                ),
                other => panic!("{field}: {value} gave {other:?}"),
            }
        }
        // null stays what it was: no notification.
        let mut entry = serde_json::to_value(stored_loop(
            "a",
            json!({"type": "command", "command": "true"}),
        ))
        .unwrap();
        let map = entry.as_object_mut().unwrap();
        for state in STATE_FIELDS {
            map.remove(*state);
        }
        map.insert("notify".into(), Value::Null);
        let text = json!({"format": FORMAT, "version": VERSION, "loops": [entry]}).to_string();
        assert_eq!(parse(&text).unwrap().loops[0].definition.notify, None);
    }

    /// Found by the `bundle_import` fuzz target: a `notify` whose `cmd` is null and
    /// that has no URL was kept as a notification to nowhere, while the same without
    /// the null (what export writes of it) was dropped — so export → import changed
    /// the loop. A null `cmd` is an absent one (only URLs are redacted secrets).
    #[test]
    fn fuzz_bundle_import_a_notify_with_a_null_cmd_round_trips() {
        for notify in [
            json!({"cmd": null, "on": "failure"}),
            json!({"cmd": null, "url": null, "on": "always"}),
            json!({"on": "failure"}),
        ] {
            let mut entry = serde_json::to_value(stored_loop(
                "a",
                json!({"type": "command", "command": "true"}),
            ))
            .unwrap();
            let map = entry.as_object_mut().unwrap();
            for field in STATE_FIELDS {
                map.remove(*field);
            }
            map.insert("notify".into(), notify.clone());
            let text = json!({"format": FORMAT, "version": VERSION, "loops": [entry]}).to_string();
            let first = parse(&text).unwrap();
            let lp = &first.loops[0].definition;
            assert_eq!(lp.notify, None, "{notify}");
            let written =
                serde_json::to_string(&export(std::slice::from_ref(lp), &[], true, now()).unwrap())
                    .unwrap();
            assert_eq!(
                parse(&written).unwrap().loops[0].definition,
                *lp,
                "{notify}"
            );
        }
    }

    /// Found by the `bundle_import` fuzz target: an instant finer than a millisecond
    /// (`nextRunAt: …326000004Z`) was kept as read, while every stored and written
    /// instant has millisecond precision, so export → import changed the loop.
    #[test]
    fn fuzz_bundle_import_sub_millisecond_instants_round_trip() {
        let mut entry = serde_json::to_value(stored_loop(
            "a",
            json!({"type": "command", "command": "true"}),
        ))
        .unwrap();
        let map = entry.as_object_mut().unwrap();
        for field in STATE_FIELDS {
            map.remove(*field);
        }
        map.insert("nextRunAt".into(), json!("2026-12-02T05:18:02.326000004Z"));
        map.insert(
            "expiresAt".into(),
            json!("2027-01-01T00:00:00.999999+01:00"),
        );
        let text = json!({"format": FORMAT, "version": VERSION, "loops": [entry]}).to_string();
        let first = parse(&text).unwrap();
        let lp = &first.loops[0].definition;
        assert_eq!(
            crate::format_instant(&lp.next_run_at.unwrap()),
            "2026-12-02T05:18:02.326Z"
        );
        assert_eq!(
            lp.next_run_at.unwrap().timestamp_subsec_nanos(),
            326_000_000
        );
        assert_eq!(lp.expires_at.unwrap().timestamp_subsec_nanos(), 999_000_000);
        let written =
            serde_json::to_string(&export(std::slice::from_ref(lp), &[], true, now()).unwrap())
                .unwrap();
        assert_eq!(parse(&written).unwrap().loops[0].definition, *lp);
    }

    #[test]
    fn export_leaves_state_and_secrets_out_and_names_them() {
        let lp = stored_loop(
            "backup",
            json!({"type": "command", "command": "restic backup", "shell": true, "env": {"API_KEY": "k", "B": "v"}}),
        );
        let doc = export(
            std::slice::from_ref(&lp),
            &[spec("release", "make")],
            false,
            now(),
        )
        .unwrap();
        let doc = serde_json::to_value(doc).unwrap();
        assert_eq!(doc["format"], "loops-bundle");
        assert_eq!(doc["version"], 2);
        assert_eq!(doc["exportedAt"], "2026-03-10T12:30:00.000Z");
        let entry = &doc["loops"][0];
        for field in STATE_FIELDS {
            assert!(entry.get(*field).is_none(), "{field} exported");
        }
        assert_eq!(entry["nextRunAt"], "2026-03-10T13:00:00.000Z");
        assert_eq!(entry["labels"], json!(["ops"]));
        assert_eq!(entry["jitterMs"], 5000);
        assert_eq!(entry["target"]["env"], json!({"API_KEY": null, "B": null}));
        assert_eq!(entry["notify"], json!({"url": null, "on": "failure"}));
        assert_eq!(
            doc["workflows"][0]["steps"][0]["target"]["env"]["TOKEN"],
            Value::Null
        );
        let redacted: Vec<String> =
            serde_json::from_value::<Vec<Redaction>>(doc["redacted"].clone())
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(
            redacted,
            [
                "loop \"backup\": target.env.API_KEY",
                "loop \"backup\": target.env.B",
                "loop \"backup\": notify.url",
                "workflow \"release\": steps.a.target.env.TOKEN",
            ]
        );
        // With secrets: everything, nothing listed.
        let doc = export(&[lp], &[], true, now()).unwrap();
        let doc = serde_json::to_value(doc).unwrap();
        assert_eq!(doc["loops"][0]["target"]["env"]["API_KEY"], "k");
        assert_eq!(doc["includesSecrets"], true);
        assert_eq!(doc["redacted"], json!([]));
    }

    #[test]
    fn agent_operations_travel_and_the_engines_state_stays() {
        let mut lp = stored_loop("agent", json!({"type": "command", "command": "true"}));
        lp.ops.retry_backoff = crate::RetryBackoff::Exponential;
        lp.ops.max_failures = Some(3);
        lp.ops.until_cmd = Some("test -e marker".into());
        lp.ops.until_output = Some("ALL TESTS PASS".into());
        lp.ops.max_runs = Some(5);
        lp.state.failure_streak = 2;
        lp.state.status_reason = Some("circuit breaker: …".into());
        lp.state.run_count = 4;
        let doc = serde_json::to_value(export(&[lp.clone()], &[], false, now()).unwrap()).unwrap();
        let entry = &doc["loops"][0];
        assert_eq!(entry["retryBackoff"], "exponential", "{entry}");
        assert_eq!(entry["maxFailures"], 3);
        assert_eq!(entry["untilCmd"], "test -e marker");
        assert_eq!(entry["untilOutput"], "ALL TESTS PASS");
        assert_eq!(entry["maxRuns"], 5);
        assert!(entry.get("failureStreak").is_none(), "{entry}");
        assert!(entry.get("statusReason").is_none(), "{entry}");
        assert!(entry.get("runCount").is_none(), "{entry}");
        let back = parse(&doc.to_string()).unwrap();
        assert_eq!(back.loops[0].definition.ops, lp.ops);
        assert!(back.loops[0].definition.state.is_fresh());
        // A bundle carrying the engine's state is refused.
        let mut bad = doc.clone();
        bad["loops"][0]["failureStreak"] = json!(2);
        let err = parse(&bad.to_string()).unwrap_err().to_string();
        assert!(
            err.contains("\"failureStreak\" is a store's own state"),
            "{err}"
        );
    }

    #[test]
    fn a_bundle_round_trips_its_definitions() {
        let lp = stored_loop(
            "backup",
            json!({"type": "command", "command": "restic backup", "shell": true, "env": {"API_KEY": "k"}}),
        );
        let doc = export(
            std::slice::from_ref(&lp),
            &[spec("release", "make")],
            true,
            now(),
        )
        .unwrap();
        let doc = serde_json::to_value(doc).unwrap();
        let back = parse(&doc.to_string()).unwrap();
        assert_eq!(back.exported_at, Some(now()));
        let got = &back.loops[0].definition;
        assert_eq!(new_loop(got), new_loop(&lp));
        assert_eq!(got.status, lp.status);
        assert!(back.loops[0].redacted.is_empty());
        assert_eq!(back.workflows[0].spec, spec("release", "make"));
        // Redacted: the values are out, and named.
        let doc = export(&[lp], &[spec("release", "make")], false, now()).unwrap();
        let doc = serde_json::to_value(doc).unwrap();
        let back = parse(&doc.to_string()).unwrap();
        assert_eq!(back.loops[0].redacted, ["target.env.API_KEY", "notify.url"]);
        assert!(back.loops[0].definition.notify.is_none());
        match &back.loops[0].definition.target {
            Target::Command(c) => assert!(c.env.is_empty()),
            other => panic!("{other:?}"),
        }
        assert_eq!(back.workflows[0].redacted, ["steps.a.target.env.TOKEN"]);
    }

    #[test]
    fn runner_labels_travel_only_when_a_loop_has_them() {
        let plain = stored_loop("plain", json!({"type": "command", "command": "true"}));
        let mut gpu = stored_loop("gpu", json!({"type": "command", "command": "true"}));
        gpu.runs_on = vec!["gpu".into()];
        let doc = export(&[plain.clone(), gpu], &[], true, now()).unwrap();
        let doc = serde_json::to_value(doc).unwrap();
        // A loop without runner labels exports as before: no `runsOn` key at all.
        assert!(doc["loops"][0].get("runsOn").is_none(), "{doc}");
        assert_eq!(doc["loops"][1]["runsOn"], json!(["gpu"]));
        let back = parse(&doc.to_string()).unwrap();
        assert!(back.loops[0].definition.runs_on.is_empty());
        assert_eq!(back.loops[1].definition.runs_on, ["gpu"]);
        assert_eq!(new_loop(&back.loops[1].definition).policy.runs_on, ["gpu"]);
        // A version-1 bundle written before `runsOn` existed still reads.
        let mut old = serde_json::to_value(export(&[plain], &[], true, now()).unwrap()).unwrap();
        old["loops"][0].as_object_mut().unwrap().remove("runsOn");
        old["version"] = json!(1);
        let back = parse(&old.to_string()).unwrap();
        assert!(back.loops[0].definition.runs_on.is_empty());
    }

    /// Version 1's `notify.on: "always"` was failure + recovery: it reads as `changes`;
    /// version 2's `always` (every finished slot) stays.
    #[test]
    fn a_version_1_always_reads_as_changes() {
        let mut lp = stored_loop("n", json!({"type": "command", "command": "true"}));
        lp.notify = Some(crate::Notify {
            cmd: Some("true".into()),
            url: None,
            on: crate::NotifyOn::Always,
        });
        let mut doc = serde_json::to_value(export(&[lp], &[], true, now()).unwrap()).unwrap();
        assert_eq!(doc["version"], 2);
        assert_eq!(doc["loops"][0]["notify"]["on"], "always");
        let on = |doc: &Value| {
            parse(&doc.to_string()).unwrap().loops[0]
                .definition
                .notify
                .as_ref()
                .unwrap()
                .on
        };
        assert_eq!(on(&doc), crate::NotifyOn::Always);
        doc["version"] = json!(1);
        assert_eq!(on(&doc), crate::NotifyOn::Changes);
        for other in ["failure", "recovery"] {
            doc["loops"][0]["notify"]["on"] = json!(other);
            assert_eq!(on(&doc).as_str(), other);
        }
    }

    #[test]
    fn bad_bundles_are_refused_with_one_line() {
        let cases = [
            ("[1]", "not a loops bundle: not a JSON object"),
            ("{", "not a loops bundle: not JSON"),
            (r#"{"version": 1}"#, "not a loops bundle: no \"format\""),
            (
                r#"{"format": "openloops", "version": 1}"#,
                "not a loops bundle: \"format\" is \"openloops\"",
            ),
            (
                r#"{"format": "loops-bundle", "version": 3, "loops": "anything"}"#,
                "unsupported bundle version 3 (this loops reads versions 1 to 2)",
            ),
            (
                r#"{"format": "loops-bundle", "version": "1"}"#,
                "unsupported bundle version \"1\"",
            ),
            (
                r#"{"format": "loops-bundle", "version": 1, "extra": 1}"#,
                "invalid bundle: unknown field \"extra\"",
            ),
            (
                r#"{"format": "loops-bundle", "version": 1, "loops": [{"name": "a", "id": "x"}]}"#,
                "invalid bundle: loops[0] (\"a\"): \"id\" is a store's own state",
            ),
            (
                r#"{"format": "loops-bundle", "version": 1, "loops": [{"name": "a"}]}"#,
                "invalid bundle: loops[0] (\"a\"): ",
            ),
            (
                r#"{"format": "loops-bundle", "version": 1, "workflows": [{"name": "w", "steps": [{"id": "a", "targt": {}}]}]}"#,
                "invalid bundle: workflows[0].steps[0]",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        // An unknown loop field, and two loops of one name.
        let lp = stored_loop("a", json!({"type": "command", "command": "true"}));
        let doc = export(&[lp.clone(), lp], &[], true, now()).unwrap();
        let mut doc = serde_json::to_value(doc).unwrap();
        let err = parse(&doc.to_string()).unwrap_err().to_string();
        assert_eq!(err, "invalid bundle: two loops are named \"a\"");
        doc["loops"].as_array_mut().unwrap().pop();
        doc["loops"][0]["colour"] = json!("red");
        let err = parse(&doc.to_string()).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid bundle: loops[0] (\"a\"): unknown field \"colour\""
        );
    }

    #[test]
    fn plans_by_conflict_policy() {
        let incoming = || {
            let doc = export(
                &[
                    stored_loop("a", json!({"type": "command", "command": "true"})),
                    stored_loop("b", json!({"type": "workflow", "workflow": "release"})),
                    stored_loop("c", json!({"type": "workflow", "workflow": "same"})),
                ],
                &[spec("release", "make"), spec("same", "true")],
                true,
                now(),
            )
            .unwrap();
            parse(&serde_json::to_string(&doc).unwrap()).unwrap()
        };
        let existing = Existing {
            loop_names: ["a".to_owned(), "a-2".to_owned()].into(),
            workflows: [
                ("release".to_owned(), spec("release", "make install")),
                (
                    "same".to_owned(),
                    WorkflowSpec {
                        version: 3,
                        ..spec("same", "true")
                    },
                ),
            ]
            .into(),
        };
        let actions = |p: &Plan| -> Vec<(String, Action, Option<String>)> {
            p.workflows
                .iter()
                .map(|(p, _)| p)
                .chain(p.loops.iter().map(|(p, _)| p))
                .map(|p| (p.name.clone(), p.action, p.as_name.clone()))
                .collect()
        };
        let fail = plan(incoming(), &existing, OnConflict::Fail);
        use Action::*;
        assert_eq!(
            actions(&fail),
            [
                ("release".into(), Conflict, None),
                ("same".into(), Unchanged, None),
                ("a".into(), Conflict, None),
                ("b".into(), Create, None),
                ("c".into(), Create, None),
            ]
        );
        assert_eq!(
            fail.problems(),
            [
                "workflow \"release\": an active workflow with this name and another spec exists",
                "loop \"a\": a loop with this name exists",
            ]
        );
        let skip = plan(incoming(), &existing, OnConflict::Skip);
        assert_eq!(actions(&skip)[0].1, Skip);
        assert_eq!(actions(&skip)[2].1, Skip);
        assert!(skip.problems().is_empty());
        let rename = plan(incoming(), &existing, OnConflict::Rename);
        assert_eq!(
            actions(&rename),
            [
                ("release".into(), Rename, Some("release-2".into())),
                ("same".into(), Unchanged, None),
                ("a".into(), Rename, Some("a-3".into())),
                ("b".into(), Create, None),
                ("c".into(), Create, None),
            ]
        );
        // The renamed workflow's loop follows it; the renamed loop is stored renamed.
        let b = &rename.loops[1].1.definition;
        assert!(matches!(&b.target, Target::Workflow(w) if w.workflow == "release-2"));
        assert_eq!(rename.loops[0].1.definition.name, "a-3");
        assert_eq!(rename.workflows[0].1.spec.name, "release-2");
        assert!("merge"
            .parse::<OnConflict>()
            .unwrap_err()
            .contains("fail, skip, rename"));
    }
}
