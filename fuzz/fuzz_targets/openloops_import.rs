//! OpenLoops import: `loops_core::openloops::map` (what `loops import --from-openloops`
//! makes of an OpenLoops 0.3 database's rows). The input is the rows as JSON, the way
//! the SQLite reader hands them over — `{"loops": [{column: value, …}, …],
//! "workflow_specs": […], "loop_runs": […], "workflow_runs": N}`, each value what a
//! column can hold (integer, real, text, null) — after an optional first line naming
//! the host's zone (`zone=Europe/Berlin`).
//!
//! Checks: nothing panics or hangs; the import is lenient (another scheduler's rows
//! cannot be edited first); imported loop and spec names are unique; every loop
//! definition and spec survives a JSON round trip (they are stored as JSON); every
//! history run is finished, and a loop's runs are in creation order; and the result
//! exports as a bundle and plans under `--on-conflict rename` against a store holding
//! every name with fresh names (`loops export` after an import, a second import).
#![no_main]

use libfuzzer_sys::fuzz_target;
use loops_core::bundle::{export, plan, Existing, OnConflict};
use loops_core::openloops::{map, OpenLoopsTables, Row};
use loops_core::workflow::WorkflowSpec;
use loops_core::{Loop, RunStatus};
use serde_json::Value;
use std::collections::HashSet;

fn rows(doc: &Value, key: &str) -> Vec<Row> {
    doc.get(key)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_object)
                // SQLite columns hold scalars only.
                .map(|row| {
                    row.iter()
                        .filter(|(_, v)| !v.is_array() && !v.is_object() && !v.is_boolean())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (zone, json) = match text.strip_prefix("zone=") {
        Some(rest) => rest.split_once('\n').unwrap_or((rest, "")),
        None => ("UTC", text),
    };
    let Ok(doc) = serde_json::from_str::<Value>(json) else {
        return;
    };
    let tables = OpenLoopsTables {
        loops: rows(&doc, "loops"),
        workflow_specs: rows(&doc, "workflow_specs"),
        loop_runs: rows(&doc, "loop_runs"),
        workflow_runs: doc
            .get("workflow_runs")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    };
    let incoming = map(&tables, zone);
    assert!(incoming.lenient);
    let names: HashSet<String> = incoming
        .loops
        .iter()
        .map(|l| l.definition.name.clone())
        .collect();
    assert_eq!(names.len(), incoming.loops.len(), "two loops of one name");
    let spec_names: HashSet<&str> = incoming
        .workflows
        .iter()
        .map(|w| w.spec.name.as_str())
        .collect();
    assert_eq!(
        spec_names.len(),
        incoming.workflows.len(),
        "two specs of one name"
    );
    for l in &incoming.loops {
        let stored = serde_json::to_string(&l.definition).expect("encode loop");
        let back: Loop = serde_json::from_str(&stored)
            .unwrap_or_else(|e| panic!("a mapped loop does not read back: {e}\n{stored}"));
        assert_eq!(back, l.definition, "{stored}");
        for pair in l.history.windows(2) {
            let key = |r: &loops_core::Run| (r.created_at, r.scheduled_for, r.attempt);
            assert!(key(&pair[0]) <= key(&pair[1]), "history out of order");
        }
        for run in &l.history {
            assert_ne!(run.status, RunStatus::Running, "a running run imported");
        }
    }
    for w in &incoming.workflows {
        let stored = serde_json::to_string(&w.spec).expect("encode spec");
        let back: WorkflowSpec = serde_json::from_str(&stored)
            .unwrap_or_else(|e| panic!("a mapped spec does not read back: {e}\n{stored}"));
        assert_eq!(back, w.spec, "{stored}");
    }
    let loops: Vec<Loop> = incoming
        .loops
        .iter()
        .map(|l| l.definition.clone())
        .collect();
    let specs: Vec<WorkflowSpec> = incoming.workflows.iter().map(|w| w.spec.clone()).collect();
    export(&loops, &specs, false, chrono::DateTime::UNIX_EPOCH).expect("exports as a bundle");
    let existing = Existing {
        loop_names: names.clone(),
        workflows: Default::default(),
    };
    let renamed = plan(incoming, &existing, OnConflict::Rename);
    let fresh: HashSet<String> = renamed
        .loops
        .iter()
        .map(|(p, _)| p.stored_name().to_owned())
        .collect();
    assert_eq!(fresh.len(), renamed.loops.len());
    assert!(fresh.is_disjoint(&names));
});
