//! A backend's schema as every backend versions it: its embedded migrations, numbered
//! from 1 and recorded in `schema_migrations`, and the refusal of a database a newer
//! build migrated.

use crate::StoreError;

/// One embedded schema migration. Applied migrations are never edited: add a file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Refuses a database at schema version `found` when a newer build than this one
/// (whose newest is `known`) migrated it: [`StoreError::TooNew`], naming `path`.
pub fn refuse_newer(path: &str, found: i64, known: i64) -> Result<(), StoreError> {
    if found > known {
        return Err(StoreError::TooNew {
            path: path.to_owned(),
            found,
            known,
        });
    }
    Ok(())
}
