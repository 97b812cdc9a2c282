//! Backups of the SQLite store (issue #23): the online copy, restoring one over the
//! store, the copy a migration makes first, and pruning `backups/`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{Anchor, CommandTarget, Instant, NewLoop, Policy, Schedule, Target};
use loops_sqlite::backup::{self, BackupKind};
use loops_sqlite::{BackupError, SqliteStore, SCHEMA_VERSION};
use loops_store::{Store, DB_FILE};
use std::path::{Path, PathBuf};
use tempfile::TempDir;

fn t(offset_ms: i64) -> Instant {
    chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + offset_ms).unwrap()
}

fn new_loop(name: &str) -> NewLoop {
    NewLoop {
        name: name.to_owned(),
        description: None,
        schedule: Schedule::Interval {
            every_ms: 60_000,
            anchor: Anchor::FixedRate,
        },
        target: Target::Command(CommandTarget {
            command: "true".to_owned(),
            args: vec![],
            cwd: None,
            shell: true,
            env: Default::default(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        labels: Vec::new(),
        notify: None,
        next_run_at: Some(t(0)),
    }
}

fn names(store: &SqliteStore) -> Vec<String> {
    let mut names: Vec<String> = store
        .loop_rows(None)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().name)
        .collect();
    names.sort();
    names
}

fn backups(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = match std::fs::read_dir(dir.join(backup::BACKUPS_DIR)) {
        Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    found.sort();
    found
}

#[test]
fn a_backup_is_a_private_checked_copy_and_is_not_overwritten_without_asking() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();
    store.create_loop(new_loop("a"), t(0)).unwrap();
    store.create_loop(new_loop("b"), t(0)).unwrap();
    let target = dir.path().join("copy.db");
    let info = store.backup_to(&target, false).unwrap();
    assert_eq!(info.counts.loops, 2);
    assert_eq!(info.schema_version, SCHEMA_VERSION);
    assert_eq!(info.bytes, std::fs::metadata(&target).unwrap().len());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A self-contained file: no WAL beside it, and it opens as a store.
    assert!(!dir.path().join("copy.db-wal").exists());
    assert_eq!(
        names(&SqliteStore::open_read_only(&target).unwrap()),
        ["a", "b"]
    );

    store.create_loop(new_loop("c"), t(0)).unwrap();
    let err = store.backup_to(&target, false).unwrap_err();
    assert!(matches!(err, BackupError::Exists(_)), "{err}");
    assert!(err.to_string().contains("exists"), "{err}");
    let info = store.backup_to(&target, true).unwrap();
    assert_eq!(info.counts.loops, 3);
    // No temp file left beside it.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn restore_swaps_in_the_backup_and_keeps_the_store_as_it_was() {
    let dir = TempDir::new().unwrap();
    let db = dir.path().join(DB_FILE);
    let target = dir.path().join("snapshot.db");
    {
        let store = SqliteStore::open(&db).unwrap();
        store.create_loop(new_loop("before"), t(0)).unwrap();
        store.backup_to(&target, false).unwrap();
        store.create_loop(new_loop("after"), t(0)).unwrap();
    }
    let restored = backup::restore(&db, &target, chrono::Utc::now()).unwrap();
    assert_eq!(restored.store.counts.loops, 1);
    let kept = restored.kept.expect("the store held loops, so it is kept");
    assert!(kept
        .path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("loops-before-restore-"));
    assert_eq!(kept.counts.loops, 2);
    for side in ["-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(side);
        assert!(!Path::new(&p).exists(), "{side} left beside the store");
    }
    let store = SqliteStore::open(&db).unwrap();
    assert_eq!(names(&store), ["before"]);
    assert_eq!(store.quick_check().unwrap(), ["ok"]);
    // The kept copy restores the store as it was.
    drop(store);
    backup::restore(&db, &kept.path, chrono::Utc::now()).unwrap();
    assert_eq!(names(&SqliteStore::open(&db).unwrap()), ["after", "before"]);
}

#[test]
fn restore_is_refused_while_another_connection_has_the_store_open() {
    let dir = TempDir::new().unwrap();
    let db = dir.path().join(DB_FILE);
    let target = dir.path().join("snapshot.db");
    let store = SqliteStore::open(&db).unwrap();
    store.create_loop(new_loop("a"), t(0)).unwrap();
    store.backup_to(&target, false).unwrap();
    store.create_loop(new_loop("b"), t(0)).unwrap();
    let err = backup::restore(&db, &target, chrono::Utc::now()).unwrap_err();
    assert!(matches!(err, BackupError::InUse(_)), "{err}");
    assert!(err.to_string().contains("in use"), "{err}");
    // Nothing changed: the store, still open, still writable, holds both; no backup.
    store.create_loop(new_loop("c"), t(0)).unwrap();
    assert_eq!(names(&store), ["a", "b", "c"]);
    assert!(backups(dir.path()).is_empty());
}

#[test]
fn restore_refuses_a_damaged_foreign_or_newer_file_and_changes_nothing() {
    let dir = TempDir::new().unwrap();
    let db = dir.path().join(DB_FILE);
    {
        let store = SqliteStore::open(&db).unwrap();
        store.create_loop(new_loop("a"), t(0)).unwrap();
    }
    let before = std::fs::read(&db).unwrap();
    let check = |file: &Path, needle: &str| {
        let err = backup::restore(&db, file, chrono::Utc::now()).unwrap_err();
        assert!(matches!(err, BackupError::BadFile { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(needle), "{text}");
        assert!(!text.contains('\n'), "one line: {text}");
        assert_eq!(std::fs::read(&db).unwrap(), before, "the store changed");
        assert!(backups(dir.path()).is_empty());
    };

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all, just some text").unwrap();
    check(&text, "not a loops store");

    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    check(&other, "not a loops store");

    let newer = dir.path().join("newer.db");
    SqliteStore::open(&db)
        .unwrap()
        .backup_to(&newer, false)
        .unwrap();
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, 'future', 'x')",
            [SCHEMA_VERSION + 1],
        )
        .unwrap();
    check(&newer, "newer loops");

    // A loops backup with a page of its runs table overwritten.
    let damaged = dir.path().join("damaged.db");
    {
        let store = SqliteStore::open(&db).unwrap();
        for i in 0..200 {
            store.create_loop(new_loop(&format!("l{i}")), t(0)).unwrap();
        }
        store.backup_to(&damaged, false).unwrap();
    }
    let before_damage = std::fs::read(&db).unwrap();
    let mut bytes = std::fs::read(&damaged).unwrap();
    let page = 4096;
    for b in &mut bytes[page * 3..page * 4] {
        *b = 0x5A;
    }
    std::fs::write(&damaged, &bytes).unwrap();
    let err = backup::restore(&db, &damaged, chrono::Utc::now()).unwrap_err();
    assert!(matches!(err, BackupError::BadFile { .. }), "{err}");
    assert_eq!(std::fs::read(&db).unwrap(), before_damage);

    let err = backup::restore(&db, &db, chrono::Utc::now()).unwrap_err();
    assert!(err.to_string().contains("the store itself"), "{err}");
}

/// Puts the store at `db` back to schema `SCHEMA_VERSION - 1` (undoing migration 21), so the next open migrates it.
fn make_older(db: &Path) {
    assert_eq!(
        SCHEMA_VERSION, 21,
        "revert the newest migration here instead"
    );
    rusqlite::Connection::open(db)
        .unwrap()
        .execute_batch(
            "DROP TRIGGER run_counts_insert;
             DROP TRIGGER run_counts_update;
             DROP TRIGGER run_counts_delete;
             DROP TABLE run_counts;
             DELETE FROM schema_migrations WHERE version = 21;",
        )
        .unwrap();
}

#[test]
fn a_migration_backs_the_store_up_first_and_keeps_the_newest_three() {
    let dir = TempDir::new().unwrap();
    let db = dir.path().join(DB_FILE);
    // A new, empty store migrates without a backup: there is nothing to keep.
    drop(SqliteStore::open(&db).unwrap());
    make_older(&db);
    drop(SqliteStore::open(&db).unwrap());
    assert!(backups(dir.path()).is_empty());

    SqliteStore::open(&db)
        .unwrap()
        .create_loop(new_loop("kept"), t(0))
        .unwrap();
    make_older(&db);
    let store = SqliteStore::open(&db).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    drop(store);
    let made = backups(dir.path());
    assert_eq!(made.len(), 1, "{made:?}");
    let name = made[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("loops-{}-", SCHEMA_VERSION - 1)),
        "{name}"
    );
    assert_eq!(
        BackupKind::of_file_name(&name).map(|k| k.0),
        Some(BackupKind::Migration)
    );
    // The backup is the store as it was: at the old version, with its loop.
    let (_conn, _claim, info) = backup::check_file(&made[0]).unwrap();
    assert_eq!(info.schema_version, SCHEMA_VERSION - 1);
    assert_eq!(info.counts.loops, 1);

    // Other backups are not a migration's to prune.
    let manual = dir
        .path()
        .join(backup::BACKUPS_DIR)
        .join(BackupKind::Manual.file_name(0, chrono::Utc::now()));
    SqliteStore::open(&db)
        .unwrap()
        .backup_to(&manual, false)
        .unwrap();
    for _ in 0..4 {
        make_older(&db);
        drop(SqliteStore::open(&db).unwrap());
    }
    let all = backups(dir.path());
    let migrations: Vec<_> = all
        .iter()
        .filter(|p| {
            BackupKind::of_file_name(&p.file_name().unwrap().to_string_lossy())
                .is_some_and(|k| k.0 == BackupKind::Migration)
        })
        .collect();
    assert_eq!(migrations.len(), 3, "{all:?}");
    assert!(!all.contains(&made[0]), "the oldest went first: {all:?}");
    assert!(all.contains(&manual), "{all:?}");

    // `prune --keep-backups 1`: the newest of each kind.
    let removed =
        backup::prune_backups(&dir.path().join(backup::BACKUPS_DIR), None, 1, false).unwrap();
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert_eq!(backups(dir.path()).len(), 2);
}
