//! The OpenAPI document is generated from the code and checked in
//! (`crates/loops-http/openapi.json`): an API change must show as a diff of that file.
//! `LOOPS_UPDATE_OPENAPI=1 cargo test -p loops-http --test openapi` rewrites it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn the_checked_in_document_is_the_generated_one() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let generated = loops_http::openapi_json();
    if std::env::var_os("LOOPS_UPDATE_OPENAPI").is_some_and(|v| v == "1") {
        std::fs::write(&golden, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(
        checked_in == generated,
        "crates/loops-http/openapi.json differs from the document the code generates; \
         review the change and run `LOOPS_UPDATE_OPENAPI=1 cargo test -p loops-http --test openapi`"
    );
}

#[test]
fn the_document_is_openapi_3_1_with_every_route_behind_the_bearer_token() {
    let doc: serde_json::Value = serde_json::from_str(&loops_http::openapi_json()).unwrap();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["security"][0]["bearer"], serde_json::json!([]));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/v1/loops",
        "/v1/loops/{key}",
        "/v1/loops/{key}/run-now",
        "/v1/runs/{id}/output",
        "/v1/workflows/validate",
        "/v1/workflow-runs/{id}/cancel",
        "/v1/events",
        "/v1/daemon",
        "/v1/health",
        "/v1/usage",
        "/v1/openapi.json",
    ] {
        assert!(paths.contains_key(p), "{p} missing");
    }
    // The domain's records are schemas of their own, with their JSON field names (a
    // loop's: its own, and those of the parts flattened into it, as `allOf`).
    let schemas = &doc["components"]["schemas"];
    let mut loop_schema = serde_json::Map::new();
    for part in schemas["Loop"]["allOf"].as_array().unwrap() {
        let part = match part["$ref"].as_str() {
            Some(r) => &schemas[r.trim_start_matches("#/components/schemas/")],
            None => part,
        };
        loop_schema.extend(part["properties"].as_object().unwrap().clone());
    }
    for field in ["nextRunAt", "retryBackoff", "maxFailures", "failureStreak"] {
        assert!(loop_schema.contains_key(field), "{field}: {loop_schema:?}");
    }
    assert!(!loop_schema.contains_key("next_run_at"));
    let interval = serde_json::to_string(&doc["components"]["schemas"]["Schedule"]).unwrap();
    assert!(interval.contains("everyMs"), "{interval}");
}
