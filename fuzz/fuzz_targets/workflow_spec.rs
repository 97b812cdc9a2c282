//! Workflow spec JSON: `parse_spec`, then `validate`, then for a valid spec the DAG
//! (`Dag::new`, `levels`, `readiness`).
//!
//! Checks: nothing panics or hangs; a parsed spec survives a JSON round trip (specs
//! are stored as JSON and parsed again); a spec whose dependencies form a cycle is
//! rejected; for a valid spec, every step sits on a deeper level than each of its
//! dependencies, and readiness agrees with the dependency states.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loops_core::workflow::{parse_spec, validate, Dag, Readiness, WorkflowSpec};
use loops_core::StepStatus;
use std::collections::HashMap;

fuzz_target!(|data: &[u8]| {
    let Ok(json) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = parse_spec(json) else {
        return;
    };
    let stored = serde_json::to_string(&spec).unwrap();
    assert_eq!(parse_spec(&stored).as_ref(), Ok(&spec), "{stored}");
    let valid = validate(&spec).is_ok();
    if has_cycle(&spec) {
        assert!(!valid, "a cycle passed validation: {json}");
    }
    if !valid {
        return;
    }
    let dag = Dag::new(&spec);
    assert_eq!(dag.len(), spec.steps.len());
    let levels = dag.levels();
    for step in 0..dag.len() {
        for &dep in dag.dependencies(step) {
            assert!(levels[step] > levels[dep], "levels {levels:?}");
        }
        if dag.dependencies(step).is_empty() {
            assert_eq!(levels[step], 0);
        }
    }
    let ids: Vec<&str> = spec.steps.iter().map(|s| s.id.as_str()).collect();
    // Every status for every step, rotated so neighbours differ.
    for shift in 0..StepStatus::ALL.len() {
        let states: Vec<StepStatus> = (0..dag.len())
            .map(|i| StepStatus::ALL[(i + shift) % StepStatus::ALL.len()])
            .collect();
        for step in 0..dag.len() {
            let deps = dag.dependencies(step);
            let satisfied = |d: usize| match states[d] {
                StepStatus::Succeeded => true,
                StepStatus::Failed | StepStatus::TimedOut => !dag.failure_stops_run(d),
                _ => false,
            };
            let unfinished =
                |d: usize| matches!(states[d], StepStatus::Pending | StepStatus::Running);
            match dag.readiness(step, &states, &ids) {
                Readiness::Ready => assert!(deps.iter().all(|&d| satisfied(d))),
                Readiness::Waiting => assert!(deps.iter().any(|&d| unfinished(d))),
                Readiness::Blocked(_) => {
                    assert!(deps.iter().any(|&d| !satisfied(d) && !unfinished(d)))
                }
            }
        }
    }
});

/// Whether the steps' known dependencies contain a cycle (Kahn's algorithm; written
/// independently of the code under test).
fn has_cycle(spec: &WorkflowSpec) -> bool {
    let index: HashMap<&str, usize> = spec
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let n = spec.steps.len();
    let mut indegree = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, step) in spec.steps.iter().enumerate() {
        for dep in &step.depends_on {
            if let Some(&d) = index.get(dep.as_str()) {
                indegree[i] += 1;
                dependents[d].push(i);
            }
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut done = 0;
    while let Some(i) = ready.pop() {
        done += 1;
        for &j in &dependents[i] {
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push(j);
            }
        }
    }
    done < n
}
