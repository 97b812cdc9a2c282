//! Reading an OpenLoops 0.3 database (`loops import --from-openloops`), read-only: its
//! `loops`, `workflow_specs` and (for history) `loop_runs` rows, each as column name →
//! JSON value, for [`loops_core::openloops::map`]. Nothing is written to the file; a
//! file that is not an OpenLoops database is refused with one line saying what it is.

use crate::open::{has_sqlite_header, uri_path};
use loops_core::openloops::{OpenLoopsTables, Row};
use loops_store::StoreError;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde_json::Value;
use std::path::Path;

/// Tables an OpenLoops 0.3 database has (its `migrate()`), and that this reads.
const REQUIRED_TABLES: &[&str] = &["loops", "loop_runs", "workflow_specs"];

/// Reads the tables of the OpenLoops database at `path`; `loop_runs` only
/// `with_history`.
pub fn read_openloops(path: &Path, with_history: bool) -> Result<OpenLoopsTables, StoreError> {
    let display = path.display().to_string();
    let refuse = |why: String| StoreError::InvalidArgument(format!("{display}: {why}"));
    let not_openloops = |why: &str| refuse(format!("not an OpenLoops database ({why})"));
    // Held while the connection below is open (`loops_store::open_files`).
    let _claim = match has_sqlite_header(path) {
        Ok((true, claim)) => claim,
        Ok((false, _)) => return Err(not_openloops("an empty file")),
        Err(StoreError::Corrupt { .. }) => return Err(not_openloops("not a SQLite database")),
        Err(StoreError::DataDir { .. }) if path.is_dir() => {
            return Err(refuse(format!(
                "a directory: name the OpenLoops database in it ({})",
                path.join("loops.db").display()
            )))
        }
        Err(StoreError::DataDir { source, .. }) => {
            return Err(refuse(format!("cannot read it: {source}")))
        }
        Err(StoreError::ReadOnly { source, .. }) => {
            return Err(refuse(format!("cannot read it: {source}")))
        }
        Err(e) => return Err(e),
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let backend = |e: rusqlite::Error| refuse(format!("cannot read it: {e}"));
    let probe = |conn: &Connection| {
        conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })
    };
    let conn = match Connection::open_with_flags(path, flags).and_then(|c| probe(&c).map(|_| c)) {
        Ok(conn) => conn,
        // A WAL database whose -shm cannot be created (read-only directory).
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::CannotOpen) => {
            let uri = format!("file:{}?immutable=1", uri_path(path));
            let conn = Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
                .map_err(backend)?;
            probe(&conn).map_err(backend)?;
            conn
        }
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::NotADatabase) => {
            return Err(not_openloops("not a SQLite database"))
        }
        Err(e) => return Err(backend(e)),
    };
    let application_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(backend)?;
    if application_id == crate::open::APPLICATION_ID {
        return Err(refuse(
            "a loops database, not an OpenLoops one: run `loops export` against it and import the bundle"
                .into(),
        ));
    }
    let mut missing = Vec::new();
    for table in REQUIRED_TABLES {
        let found: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
                [table],
                |r| r.get(0),
            )
            .map_err(backend)?;
        if !found {
            missing.push(*table);
        }
    }
    if !missing.is_empty() {
        return Err(not_openloops(&format!(
            "no {} table{}",
            missing.join(", "),
            if missing.len() == 1 { "" } else { "s" }
        )));
    }
    let loops = rows(&conn, "SELECT * FROM loops ORDER BY rowid").map_err(backend)?;
    let workflow_specs =
        rows(&conn, "SELECT * FROM workflow_specs ORDER BY rowid").map_err(backend)?;
    let loop_runs = if with_history {
        rows(&conn, "SELECT * FROM loop_runs ORDER BY rowid").map_err(backend)?
    } else {
        Vec::new()
    };
    let has_workflow_runs: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workflow_runs')",
            [],
            |r| r.get(0),
        )
        .map_err(backend)?;
    let workflow_runs = if with_history && has_workflow_runs {
        conn.query_row("SELECT COUNT(*) FROM workflow_runs", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(backend)?
        .try_into()
        .unwrap_or(0)
    } else {
        0
    };
    Ok(OpenLoopsTables {
        loops,
        workflow_specs,
        loop_runs,
        workflow_runs,
    })
}

/// Every row of `sql` as column name → value.
fn rows(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<Row>> {
    let mut stmt = conn.prepare(sql)?;
    let names: Vec<String> = stmt
        .column_names()
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    let mut out = Vec::new();
    let mut query = stmt.query([])?;
    while let Some(row) = query.next()? {
        let mut map = Row::new();
        for (i, name) in names.iter().enumerate() {
            let value = match row.get_ref(i)? {
                ValueRef::Null | ValueRef::Blob(_) => Value::Null,
                ValueRef::Integer(n) => Value::from(n),
                ValueRef::Real(x) => {
                    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
                }
                ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
            };
            map.insert(name.clone(), value);
        }
        out.push(map);
    }
    Ok(out)
}
