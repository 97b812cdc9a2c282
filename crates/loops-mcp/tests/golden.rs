//! The tools' schemas, as the server lists them, against the golden file
//! `tests/golden/tools.json`: a change to a tool's name, description, input schema or
//! annotations must show as a diff of that file. `UPDATE_GOLDEN=1` rewrites it. (The
//! end-to-end tests in `crates/loops/tests/e2e/mcp.rs` compare what the real `loops
//! mcp` binary lists over the wire with the same file.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn the_tool_list_is_the_golden_file() {
    let server = loops_mcp::LoopsMcp::new(loops_mcp::Options {
        data_dir: "/nonexistent/loops-data".into(),
        store: None,
        allow_mutations: false,
        allow_code: false,
        allow_secrets: false,
        base_dir: "/".into(),
    });
    let text = loops_mcp::tools_document(&server.tools());
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/tools.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(
        text == expected,
        "the tool schemas differ from {} (rerun with UPDATE_GOLDEN=1 to accept the change, and commit the diff); got:\n{text}",
        golden.display()
    );
}
