//! No statement of this crate binds a bare `LIMIT ?N` (see the crate docs): SQLite
//! re-prepares such a statement on every new binding, which cost the daemon 8.8 % of
//! its CPU in the due loops' query. Two checks: the behaviour itself, on this build's
//! SQLite, and the crate's source, so a new query cannot bring it back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

/// How many times `sql` was compiled again over three executions with new values.
fn reprepares(conn: &rusqlite::Connection, sql: &str) -> u64 {
    let mut stmt = conn.prepare(sql).unwrap();
    for i in 0..3i64 {
        let mut rows = stmt.query(rusqlite::params![i, 10 + i]).unwrap();
        while rows.next().unwrap().is_some() {}
    }
    u64::try_from(stmt.get_status(rusqlite::StatementStatus::RePrepare)).unwrap()
}

#[test]
fn a_bare_limit_parameter_recompiles_and_a_unary_plus_does_not() {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t (a INTEGER); CREATE INDEX t_a ON t (a);")
        .unwrap();
    // If SQLite stops doing this, the rule below may go; until then it holds.
    assert_eq!(
        reprepares(&conn, "SELECT a FROM t WHERE a <= ?1 ORDER BY a LIMIT ?2"),
        3
    );
    assert_eq!(
        reprepares(&conn, "SELECT a FROM t WHERE a <= ?1 ORDER BY a LIMIT +?2"),
        0
    );
}

#[test]
fn no_statement_binds_a_bare_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut bare = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            let squeezed: String = line.split_whitespace().collect::<Vec<_>>().join(" ");
            if squeezed.contains("LIMIT ?") {
                bare.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(bare.is_empty(), "write LIMIT +?N:\n{}", bare.join("\n"));
}
