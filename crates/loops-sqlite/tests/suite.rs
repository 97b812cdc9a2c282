//! The store's behaviour suite (`loops_store::suite`) on SQLite: each test on a fresh
//! database file in a temp dir, every store of a test a connection of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::LoopId;
use loops_sqlite::SqliteStore;
use loops_store::suite::TestDb;
use loops_store::{Store, DB_FILE};
use std::path::PathBuf;
use tempfile::TempDir;

struct SqliteDb {
    _dir: TempDir,
    path: PathBuf,
}

impl SqliteDb {
    fn new() -> Self {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join(DB_FILE);
        Self { _dir: dir, path }
    }
}

impl TestDb for SqliteDb {
    fn open(&self) -> Box<dyn Store> {
        Box::new(SqliteStore::open(&self.path).unwrap())
    }

    fn spoil_loop_row(&self, id: &LoopId) {
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        conn.execute(
            "UPDATE loops SET catch_up = 'sometimes' WHERE id = ?1",
            [id.as_str()],
        )
        .unwrap();
    }
}

loops_store::store_suite!(SqliteDb::new());
