//! Bundle import: `loops_core::bundle::parse` (what `loops import FILE` reads: UTF-8
//! JSON), then `bundle::plan` under each conflict policy.
//!
//! Checks: nothing panics or hangs; a parsed bundle's loops and specs have unique names;
//! exported again (`bundle::export`, secrets included) they parse back to the same
//! definitions and specs (`loops export | loops import` relies on it); planned against
//! a store that already holds every one of their names, `fail` marks each a conflict,
//! `skip` skips each, and `rename` gives each a name of its own that no other entry and
//! nothing in the store has, and points renamed workflows' loops at the new names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loops_core::bundle::{export, parse, plan, Action, Existing, OnConflict};
use loops_core::workflow::WorkflowSpec;
use loops_core::{Loop, Target};
use std::collections::{HashMap, HashSet};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(incoming) = parse(text) else {
        return;
    };
    let loops: Vec<Loop> = incoming
        .loops
        .iter()
        .map(|l| l.definition.clone())
        .collect();
    let specs: Vec<WorkflowSpec> = incoming.workflows.iter().map(|w| w.spec.clone()).collect();
    let loop_names: HashSet<String> = loops.iter().map(|l| l.name.clone()).collect();
    assert_eq!(loop_names.len(), loops.len(), "two loops of one name");
    let spec_names: HashSet<String> = specs.iter().map(|s| s.name.clone()).collect();
    assert_eq!(spec_names.len(), specs.len(), "two specs of one name");

    let now = chrono::DateTime::UNIX_EPOCH;
    let bundle = export(&loops, &specs, true, now).expect("a parsed bundle exports");
    let written = serde_json::to_string(&bundle).expect("encode");
    let again = parse(&written).unwrap_or_else(|e| panic!("re-import failed: {e}\n{written}"));
    let back: Vec<Loop> = again.loops.iter().map(|l| l.definition.clone()).collect();
    assert_eq!(back, loops, "loops changed in a round trip:\n{written}");
    let back: Vec<WorkflowSpec> = again.workflows.iter().map(|w| w.spec.clone()).collect();
    assert_eq!(back, specs, "specs changed in a round trip:\n{written}");

    // A store holding every name already, each spec there with another description.
    let existing = Existing {
        loop_names: loop_names.clone(),
        workflows: specs
            .iter()
            .map(|s| {
                let mut other = s.clone();
                other.description = Some(format!("{:?} here", s.description));
                (s.name.clone(), other)
            })
            .collect(),
    };
    let failed = plan(incoming.clone(), &existing, OnConflict::Fail);
    assert!(failed
        .loops
        .iter()
        .all(|(p, _)| p.action == Action::Conflict));
    assert!(failed
        .workflows
        .iter()
        .all(|(p, _)| p.action == Action::Conflict));
    assert_eq!(
        failed.problems().len(),
        loops.len() + specs.len(),
        "a conflict each"
    );
    let skipped = plan(incoming.clone(), &existing, OnConflict::Skip);
    assert!(skipped.loops.iter().all(|(p, _)| p.action == Action::Skip));
    assert!(
        skipped.needs_value().is_empty(),
        "nothing skipped is written"
    );

    let renamed = plan(incoming, &existing, OnConflict::Rename);
    let mut taken: HashSet<String> = loop_names;
    for (p, l) in &renamed.loops {
        assert_eq!(p.action, Action::Rename);
        let new = p.as_name.as_deref().expect("a new name");
        assert_eq!(new, l.definition.name);
        assert!(taken.insert(new.to_owned()), "{new} given twice or taken");
    }
    let mut taken: HashSet<String> = spec_names;
    let mut spec_renames = HashMap::new();
    for (p, w) in &renamed.workflows {
        assert_eq!(p.action, Action::Rename);
        assert_eq!(p.as_name.as_deref(), Some(w.spec.name.as_str()));
        assert!(
            taken.insert(w.spec.name.clone()),
            "{} given twice",
            w.spec.name
        );
        spec_renames.insert(p.name.clone(), w.spec.name.clone());
    }
    for ((_, l), before) in renamed.loops.iter().zip(&loops) {
        if let (Target::Workflow(now), Target::Workflow(was)) =
            (&l.definition.target, &before.target)
        {
            let expected = spec_renames.get(&was.workflow).unwrap_or(&was.workflow);
            assert_eq!(&now.workflow, expected, "a loop of a renamed workflow");
        }
    }
});
