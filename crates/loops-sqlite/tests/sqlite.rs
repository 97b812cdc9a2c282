//! SQLite-specific behaviour of the store: how the file is created, validated,
//! migrated and opened read-only, its indexes, and the daemon's background WAL
//! checkpoints. What every backend must do is the suite (`tests/suite.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{Anchor, CommandTarget, Instant, LoopStatus, NewLoop, Policy, Schedule, Target};
use loops_sqlite::{SqliteStore, SCHEMA_VERSION};
use loops_store::{LoopAdvance, Store, StoreError, WorkflowStore, DB_FILE};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use tempfile::TempDir;

const T0: i64 = 1_700_000_000_000;

fn t(offset_ms: i64) -> Instant {
    chrono::DateTime::from_timestamp_millis(T0 + offset_ms).unwrap()
}

fn new_loop(name: &str, next: Option<Instant>) -> NewLoop {
    NewLoop {
        name: name.to_owned(),
        description: Some(format!("{name} description")),
        schedule: Schedule::Interval {
            every_ms: 60_000,
            anchor: Anchor::FixedRate,
        },
        target: Target::Command(CommandTarget {
            command: "echo hi".to_owned(),
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
        next_run_at: next,
    }
}

#[test]
fn concurrent_opens_of_a_fresh_file_migrate_once() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let path = path.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let store = SqliteStore::open(&path).unwrap();
                store
                    .create_loop(new_loop(&format!("l{i}"), None), t(0))
                    .unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.list_loops(None).unwrap().len(), 8);
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
}

#[test]
fn background_maintenance_checkpoints_the_wal() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let store = SqliteStore::open(&path).unwrap();
    let db_len = || std::fs::metadata(&path).unwrap().len();
    let before = db_len();
    store.start_background_maintenance().unwrap();
    // Far fewer pages than SQLite's automatic checkpoint threshold: without the
    // background thread these would stay in the WAL.
    for i in 0..200 {
        store
            .create_loop(new_loop(&format!("loop-{i:03}"), Some(t(0))), t(0))
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while db_len() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL was not checkpointed into {} within 10 s",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A second start is a no-op, and the store keeps working.
    store.start_background_maintenance().unwrap();
    assert_eq!(store.list_loops(None).unwrap().len(), 200);
}

/// Bytes this thread has written (`/proc/thread-self/io`): a store's statements run
/// on the caller's thread, its checkpoints on a thread of their own.
fn thread_wchar() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Writes of one transaction whose one statement changes far more than 64 KiB of
/// pages: 2,000 loops expiring at once.
fn wchar_of_a_large_expiry(maintained: bool) -> u64 {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();
    if maintained {
        store.start_background_maintenance().unwrap();
    }
    for i in 0..2_000 {
        let mut nl = new_loop(&format!("expiring-{i:04}"), Some(t(60_000)));
        nl.policy.expires_at = Some(t(1_000));
        store.create_loop(nl, t(0)).unwrap();
    }
    let before = thread_wchar();
    assert_eq!(store.expire_loops(t(2_000), None).unwrap().len(), 2_000);
    thread_wchar() - before
}

/// The daemon's connection keeps statement journals in memory (`temp_store`): before,
/// a statement that changed more than 64 KiB of pages inside a transaction also
/// wrote them all to a temporary file, deleted right after (BENCHMARKS §34). The
/// CLI's connections keep the file.
#[test]
fn background_maintenance_keeps_statement_journals_in_memory() {
    let cli = wchar_of_a_large_expiry(false);
    let daemon = wchar_of_a_large_expiry(true);
    // The journal of 2,000 changed rows and their index entries is hundreds of KB;
    // the WAL frames both write are the same.
    assert!(
        daemon + 256 * 1024 < cli,
        "the daemon's connection wrote {daemon} bytes, the CLI's {cli}: the statement \
         journal still goes to a file"
    );
}

#[test]
fn background_checkpoints_rewind_the_wal_under_continuous_writes() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let wal = dir.path().join(format!("{DB_FILE}-wal"));
    let store = SqliteStore::open(&path).unwrap();
    store.start_background_maintenance().unwrap();
    let lp = store
        .create_loop(new_loop("busy", Some(t(0))), t(0))
        .unwrap();
    // The WAL header's checkpoint sequence number (bytes 12..16) changes each time
    // SQLite rewinds the WAL to its start.
    let sequence = || {
        let bytes = std::fs::read(&wal).unwrap_or_default();
        bytes
            .get(12..16)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    // Writes with no pause between them, as a busy daemon makes: the WAL must be
    // rewound again and again instead of growing for as long as the writes go on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (mut last, mut rewinds, mut writes) = (sequence(), 0, 0_u64);
    while rewinds < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL was rewound {rewinds} times in 60 s of writes ({writes} writes, {} bytes)",
            std::fs::metadata(&wal).map_or(0, |m| m.len())
        );
        for _ in 0..20 {
            let advance = LoopAdvance {
                status: LoopStatus::Active,
                next_run_at: Some(t(i64::try_from(writes).unwrap())),
                retry_scheduled_for: None,
            };
            store
                .update_loop_schedule(&lp.id, &advance, t(0), None)
                .unwrap();
            writes += 1;
        }
        let now = sequence();
        if now != last {
            rewinds += 1;
        }
        last = now;
    }
}

#[test]
fn corrupt_file_is_rejected_and_left_untouched() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let mut bytes = Vec::with_capacity(8192);
    let mut x: u32 = 0x1234_5678;
    for _ in 0..8192 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.push(x as u8);
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_no_sidecars(&path);

    // A valid header followed by garbage: SQLite itself rejects it, read-only.
    let mut bytes2 = b"SQLite format 3\0".to_vec();
    bytes2.extend_from_slice(&bytes[..4096]);
    std::fs::write(&path, &bytes2).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes2);
    assert_no_sidecars(&path);

    // Short text file.
    std::fs::write(&path, b"hello").unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"hello");
}

#[test]
fn foreign_sqlite_database_is_rejected_untouched() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('x');")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

fn assert_no_sidecars(path: &Path) {
    for suffix in ["-wal", "-shm", "-journal"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        assert!(!side.exists(), "{} was created", side.display());
    }
}

#[test]
fn migrations_are_recorded_and_newer_schemas_rejected() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        store.create_loop(new_loop("kept", None), t(0)).unwrap();
    }
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let (version, name, applied): (i64, String, String) = conn
            .query_row(
                "SELECT version, name, applied_at FROM schema_migrations ORDER BY version LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(version, 1);
        assert_eq!(name, "initial");
        assert!(applied.ends_with('Z'), "{applied}");
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
    // Reopening keeps data and does not re-run migrations.
    {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.list_loops(None).unwrap().len(), 1);
        assert_eq!(store.integrity_check().unwrap(), ["ok"]);
    }
    // A newer build's schema.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, 'future', 'x')",
            [SCHEMA_VERSION + 1],
        )
        .unwrap();
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    match &err {
        StoreError::TooNew { found, known, .. } => {
            assert_eq!(*found, SCHEMA_VERSION + 1);
            assert_eq!(*known, SCHEMA_VERSION);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[cfg(unix)]
#[test]
fn file_and_dir_modes() {
    use std::os::unix::fs::PermissionsExt;
    let root = TempDir::new().unwrap();
    let dir = root.path().join("nested").join("loops");
    loops_store::prepare_data_dir(&dir).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let path = dir.join(DB_FILE);
    let store = SqliteStore::open(&path).unwrap();
    store.create_loop(new_loop("a", None), t(0)).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // An existing directory open to its group is tightened (issue #9: another user
    // must never be able to plant a database in it).
    let own = root.path().join("own");
    std::fs::create_dir(&own).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o750)).unwrap();
    loops_store::prepare_data_dir(&own).unwrap();
    let mode = std::fs::metadata(&own).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    // A file in the way.
    let file = root.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = loops_store::prepare_data_dir(&file).unwrap_err();
    assert!(matches!(err, StoreError::DataDir { .. }), "{err:?}");
}

#[cfg(unix)]
#[test]
fn read_only_dir_gives_a_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let root = TempDir::new().unwrap();
    let dir = root.path().join("ro");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    // Root ignores directory permissions: nothing to test then.
    let probe = dir.join("probe");
    if std::fs::write(&probe, b"x").is_ok() {
        eprintln!(
            "note: running with privileges that ignore file modes (root?); read-only check skipped"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        return;
    }
    let path = dir.join(DB_FILE);
    let err = SqliteStore::open(&path).unwrap_err();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("read-only"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn list_loops_scales() {
    let store = SqliteStore::open_in_memory().unwrap();
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let file_store = SqliteStore::open(&path).unwrap();
    for s in [&store, &file_store] {
        for i in 0..10_000 {
            s.create_loop(new_loop(&format!("loop-{i:05}"), Some(t(i))), t(0))
                .unwrap();
        }
    }
    let started = std::time::Instant::now();
    let loops = file_store.list_loops(None).unwrap();
    let took = started.elapsed();
    assert_eq!(loops.len(), 10_000);
    assert_eq!(loops[0].name, "loop-00000");
    // Generous for unoptimized builds; a regression to per-row queries is far slower.
    assert!(
        took < std::time::Duration::from_secs(2),
        "list_loops took {took:?}"
    );
    assert_eq!(store.due_loops(t(9), 100).unwrap().len(), 10);
}

#[test]
fn hot_queries_use_indexes() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(|r| r.unwrap())
            .collect::<Vec<_>>();
        rows.join(" | ")
    };
    let p = plan("SELECT id FROM loops WHERE status = 'active' AND next_run_at <= 5 ORDER BY next_run_at LIMIT 10");
    assert!(p.contains("loops_due") && !p.contains("TEMP B-TREE"), "{p}");
    let p = plan("SELECT next_run_at FROM loops WHERE status = 'active' AND next_run_at IS NOT NULL ORDER BY next_run_at LIMIT 1");
    assert!(p.contains("loops_due") && !p.contains("TEMP B-TREE"), "{p}");
    let p = plan(
        "SELECT id FROM runs WHERE loop_id = 'x' ORDER BY created_at DESC, rowid DESC LIMIT 5",
    );
    assert!(
        p.contains("runs_loop_created") && !p.contains("TEMP B-TREE"),
        "{p}"
    );
    let p = plan("SELECT id FROM runs WHERE status = 'running' AND lease_expires_at <= 5 ORDER BY lease_expires_at");
    // Only running rows are visited: through the partial index, or (since migration 6)
    // the status range of `runs_status_created`.
    assert!(
        p.contains("runs_running_lease") || p.contains("runs_status_created (status=?)"),
        "{p}"
    );
    let p = plan("UPDATE loops INDEXED BY loops_expiry SET status = 'expired' WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at <= 5");
    assert!(p.contains("loops_expiry"), "{p}");
    let p = plan("SELECT f.scheduled_for FROM runs f WHERE f.loop_id = 'x' AND f.status IN ('failed', 'timed_out', 'abandoned') AND f.attempt < 3 ORDER BY f.scheduled_for LIMIT 1");
    assert!(p.contains("runs_failed_slot"), "{p}");
}

#[cfg(unix)]
#[test]
fn read_only_existing_database_gives_a_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let root = TempDir::new().unwrap();
    let dir = root.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join(DB_FILE);
    drop(SqliteStore::open(&path).unwrap());
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    set(&path, 0o400);
    if std::fs::OpenOptions::new().write(true).open(&path).is_ok() {
        eprintln!(
            "note: running with privileges that ignore file modes (root?); read-only check skipped"
        );
        return;
    }
    let before = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    eprintln!("read-only file: {err}");
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    assert!(err.to_string().contains("read-only"));
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // Writable file in a read-only directory (SQLite cannot create -wal/-shm).
    set(&path, 0o600);
    set(&dir, 0o500);
    let result = SqliteStore::open(&path);
    set(&dir, 0o700);
    let err = result.unwrap_err();
    eprintln!("read-only dir: {err}");
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    assert!(err.to_string().contains("read-only"));
}

/// The filtered listings (issue #11) run on indexes: each filter the statement the
/// store runs, planned by SQLite (`EXPLAIN QUERY PLAN`), searches an index instead of
/// scanning the run history or every loop.
#[test]
fn run_and_label_filters_use_indexes() {
    use loops_core::{LoopId, LoopStatus, RunStatus};
    use loops_store::{LoopFilter, RunFilter};
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();
    let runs = |f: RunFilter| -> String {
        let plan = store.runs_query_plan(&f).unwrap().join(" | ");
        eprintln!("{f:?}\n  {plan}");
        // A scan of the table itself (not of an index) reads the whole history.
        assert!(
            !plan.contains("SCAN runs |") && !plan.ends_with("SCAN runs"),
            "{plan}"
        );
        plan
    };
    let failed = || vec![RunStatus::Failed];
    let since = Some(t(0));
    let limit = Some(20);
    // `runs --status failed --since 1d`: one index range, already in order.
    let p = runs(RunFilter {
        statuses: failed(),
        since,
        limit,
        ..RunFilter::default()
    });
    assert!(
        p.contains("runs_status_created (status=? AND created_at>?)") && !p.contains("TEMP B-TREE"),
        "{p}"
    );
    // Several statuses: one range per status, then sorted.
    let p = runs(RunFilter {
        statuses: vec![RunStatus::Failed, RunStatus::TimedOut],
        since,
        until: Some(t(1)),
        limit,
        ..RunFilter::default()
    });
    assert!(
        p.contains("runs_status_created (status=? AND created_at>? AND created_at<?)"),
        "{p}"
    );
    // One loop and a status.
    let p = runs(RunFilter {
        loop_id: Some(LoopId::new("0123456789ab")),
        statuses: failed(),
        since,
        limit,
        ..RunFilter::default()
    });
    assert!(
        p.contains("runs_loop_status_created (loop_id=? AND status=? AND created_at>?)")
            && !p.contains("TEMP B-TREE"),
        "{p}"
    );
    // One loop and a window.
    let p = runs(RunFilter {
        loop_id: Some(LoopId::new("0123456789ab")),
        since,
        limit,
        ..RunFilter::default()
    });
    assert!(
        p.contains("runs_loop_created (loop_id=? AND created_at>?)") && !p.contains("TEMP B-TREE"),
        "{p}"
    );
    // A window alone.
    let p = runs(RunFilter {
        since,
        until: Some(t(1)),
        limit,
        ..RunFilter::default()
    });
    assert!(
        p.contains("runs_created (created_at>? AND created_at<?)"),
        "{p}"
    );
    // Labels: the labelled loops from the label index first, then each one's runs.
    for statuses in [vec![], failed()] {
        let p = runs(RunFilter {
            labels: vec!["ci".into(), "nightly".into()],
            statuses: statuses.clone(),
            since,
            limit,
            ..RunFilter::default()
        });
        let labels_at = p.find("loop_labels").unwrap_or(usize::MAX);
        let runs_at = p.find("SEARCH runs USING INDEX runs_loop").unwrap_or(0);
        assert!(labels_at < runs_at, "{p}");
        if !statuses.is_empty() {
            assert!(
                p.contains("runs_loop_status_created (loop_id=? AND status=?"),
                "{p}"
            );
        }
    }
    // Loops by labels: through the label index and the loops' primary key, not a scan
    // of every loop; archived ones left out by a term on the rows found.
    let p = store
        .loops_query_plan(&LoopFilter {
            labels: vec!["ci".into()],
            ..LoopFilter::default()
        })
        .unwrap()
        .join(" | ");
    eprintln!("loops by label\n  {p}");
    assert!(
        p.contains("SEARCH loop_labels USING PRIMARY KEY (label=?)"),
        "{p}"
    );
    assert!(
        p.contains("SEARCH loops USING INDEX sqlite_autoindex_loops_1 (id=?)"),
        "{p}"
    );
    assert!(!p.contains("SCAN loops"), "{p}");
    let p = store
        .loops_query_plan(&LoopFilter {
            status: Some(LoopStatus::Archived),
            labels: vec!["ci".into(), "nightly".into()],
            ..LoopFilter::default()
        })
        .unwrap()
        .join(" | ");
    assert!(
        p.contains("loop_labels") && !p.contains("SCAN loops"),
        "{p}"
    );
}

/// `loops health` and `loops usage` (issue #11) read through indexes: a loop's newest
/// rows from the covering `runs_loop_recent` (no table row read, no sort), its window
/// from the slot index, usage from the partial indexes of rows that carry it, the
/// dashboard's status counts from the status index.
#[test]
fn health_and_usage_queries_use_indexes() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();
    let plans: std::collections::HashMap<String, String> = store
        .report_query_plans()
        .unwrap()
        .into_iter()
        .map(|(name, plan)| (name, plan.join(" | ")))
        .collect();
    eprintln!("{plans:#?}");
    let plan = |name: &str| plans.get(name).unwrap_or_else(|| panic!("no {name}"));
    assert_eq!(
        plan("recent"),
        "SEARCH runs USING COVERING INDEX runs_loop_recent (loop_id=?)"
    );
    let window = plan("window");
    assert!(
        window.contains("runs_skipped_slot (loop_id=? AND scheduled_for>? AND scheduled_for<?)"),
        "{window}"
    );
    assert!(
        window.contains("COVERING INDEX sqlite_autoindex_runs_"),
        "{window}"
    );
    assert!(!window.contains("SCAN runs"), "{window}");
    assert!(
        plan("usage runs").contains("INDEX runs_usage (finished_at>?)"),
        "{}",
        plan("usage runs")
    );
    let steps = plan("usage steps");
    assert!(
        steps.contains("INDEX workflow_step_runs_usage (finished_at>?)"),
        "{steps}"
    );
    assert!(!steps.contains("SCAN"), "{steps}");
    // The dashboard's day of counts: a range of the status index per status, not a
    // scan of every run ever kept.
    // The hours wholly in the window from their per-hour counters (migration 21),
    // the hour it starts in from the index.
    let counts = plan("status counts");
    assert!(
        counts.contains(
            "COVERING INDEX runs_status_created (status=? AND created_at>? AND created_at<?)"
        ),
        "{counts}"
    );
    assert!(
        counts.contains("SEARCH run_counts USING PRIMARY KEY (hour>?)"),
        "{counts}"
    );
    // The only scan is of the subquery's rows (a few per hour of the window).
    assert!(
        !counts.contains("SCAN runs") && !counts.contains("SCAN run_counts"),
        "{counts}"
    );
    // Health over many loops with few runs each: every run of a batch of loops once,
    // backwards through one range of the covering index, no sort and no table row.
    assert_eq!(
        plan("scan"),
        "SEARCH runs USING COVERING INDEX runs_loop_recent (loop_id>? AND loop_id<?)"
    );
    // Whether to: the same range counted, up to a bound, in a covering index (the
    // narrowest one by loop).
    let count = plan("scan count");
    assert!(
        count.contains("SEARCH runs USING COVERING INDEX runs_loop_")
            && count.contains("(loop_id>? AND loop_id<?)"),
        "{count}"
    );
}

/// `run_facts` reads the runs per loop (index probes) or in one pass over them all,
/// by the store's size; both give the same facts, for every kind of history: none,
/// a few rows, more rows than asked for with or without a success among them, retried
/// slots, skipped rows, rows created in the same millisecond, a loop asked about twice
/// (on a grid and listed), and rows of a loop nobody asks about.
#[test]
fn run_facts_per_loop_and_in_one_pass_agree() {
    use loops_core::health::FactsQuery;
    use loops_core::{LoopId, Run, RunId, RunSource, RunStatus};
    use loops_sqlite::FactsRead;
    use loops_store::{ImportBatch, ImportLoop};
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();
    let m = 60_000;
    let statuses = [
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Skipped,
        RunStatus::TimedOut,
        RunStatus::Abandoned,
        RunStatus::Succeeded,
        RunStatus::Failed,
    ];
    // A small deterministic generator: the same histories on every run of the test.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut loops = Vec::new();
    for k in 0..40 {
        let rows = match k % 5 {
            0 => 0,
            1 => next(4),
            2 => 20 + next(40),
            _ => next(30),
        };
        let mut history = Vec::new();
        for slot in 0..rows as i64 {
            // Some slots retried, some failing only, the loop of k = 7 never succeeding.
            let attempts = 1 + (next(4) == 0) as u32;
            for attempt in 1..=attempts {
                let mut status = statuses[next(statuses.len() as u64) as usize];
                if k == 7 && status == RunStatus::Succeeded {
                    status = RunStatus::Failed;
                }
                // Every third loop records its rows in one millisecond per pair of slots.
                let at = if k % 3 == 0 {
                    t(slot / 2 * m)
                } else {
                    t(slot * m + i64::from(attempt))
                };
                history.push(Run {
                    account: None,
                    id: RunId::new(String::new()),
                    loop_id: LoopId::new(String::new()),
                    loop_name: String::new(),
                    scheduled_for: t(slot * m + (k % 2) * 7),
                    attempt,
                    status,
                    source: RunSource::Scheduled,
                    due_at: None,
                    started_at: (status != RunStatus::Skipped).then_some(at),
                    finished_at: Some(at),
                    exit_code: None,
                    duration_ms: Some(1),
                    stdout: None,
                    stderr: None,
                    error: status.is_failure().then(|| format!("error {k}/{slot}")),
                    error_output: None,
                    pid: None,
                    pid_start_time: None,
                    claimed_by: None,
                    lease_expires_at: None,
                    summary: None,
                    usage: None,
                    failure_class: None,
                    retry_at: None,
                    session_id: None,
                    session_note: None,
                    created_at: at,
                    updated_at: at,
                });
            }
        }
        loops.push(ImportLoop {
            new: new_loop(&format!("l{k:02}"), Some(t(100 * m))),
            state: LoopAdvance {
                status: LoopStatus::Active,
                next_run_at: Some(t(100 * m)),
                retry_scheduled_for: None,
            },
            history,
        });
    }
    let done = store
        .import(
            &ImportBatch {
                workflows: vec![],
                loops,
            },
            t(100 * m),
        )
        .unwrap();
    // Every loop but the last two (their rows pass by, asked about by nobody); the
    // first ones twice, listed and on a grid that misses the odd loops' slots.
    let asked = &done.loops[..done.loops.len() - 2];
    let mut queries = Vec::new();
    for (i, lp) in asked.iter().enumerate() {
        let query = |grid| FactsQuery {
            loop_id: lp.id.clone(),
            window: (t(5 * m), t(40 * m)),
            slot_window: (t(3 * m), t(35 * m)),
            grid,
        };
        queries.push(query(Some((t(0), m as u64))));
        if i < 10 {
            queries.push(query(None));
        }
    }
    for recent in [1, 3, 20] {
        let probed = store
            .run_facts_read(&queries, recent, FactsRead::PerLoop)
            .unwrap();
        let passed = store
            .run_facts_read(&queries, recent, FactsRead::Scan)
            .unwrap();
        assert_eq!(probed.len(), queries.len());
        for (i, (a, b)) in probed.iter().zip(&passed).enumerate() {
            assert_eq!(a, b, "query {i} with {recent} recent rows");
        }
        // The histories give the comparison something to compare.
        assert!(probed.iter().any(|f| f.failures_since_success > 0));
        assert!(probed.iter().any(|f| f.window_skipped > 0));
        assert!(probed.iter().any(|f| f.newest.is_none()));
        // Asked a batch at a time in id order (as `loops health` asks), the pass reads
        // only the batch's range of the index, with the same facts.
        let mut by_id: Vec<usize> = (0..queries.len()).collect();
        by_id.sort_by(|&a, &b| queries[a].loop_id.cmp(&queries[b].loop_id));
        for batch in by_id.chunks(7) {
            let asked: Vec<_> = batch.iter().map(|&i| queries[i].clone()).collect();
            let passed = store
                .run_facts_read(&asked, recent, FactsRead::Scan)
                .unwrap();
            for (&i, facts) in batch.iter().zip(&passed) {
                assert_eq!(
                    &probed[i], facts,
                    "query {i} in a batch, {recent} recent rows"
                );
            }
            // And as the store picks its way for a batch (the range counted).
            assert_eq!(store.run_facts(&asked, recent).unwrap(), passed);
        }
    }
}

/// Migration 12 (issue #19): rows recorded before kept an agent's output in `error`;
/// the migration moves it to `error_output` and rewrites the event logs' copies to our
/// words, leaving our own errors as they were; stored `notify.on: always` (failure +
/// recovery then) becomes `changes`.
#[test]
fn migration_12_moves_quoted_output_out_of_errors_and_the_event_logs_and_renames_always() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let lp = {
        let store = SqliteStore::open(&path).unwrap();
        store.create_loop(new_loop("a", None), t(0)).unwrap()
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        // The schema as it was before migration 12, holding rows recorded then.
        conn.execute_batch(
            "ALTER TABLE runs DROP COLUMN error_output;
             ALTER TABLE workflow_step_runs DROP COLUMN error_output;
             DELETE FROM schema_migrations WHERE version = 12;",
        )
        .unwrap();
        // Notification settings stored when `always` meant failure + recovery.
        conn.execute(
            "UPDATE loops SET notify_json = '{\"cmd\":\"true\",\"on\":\"always\"}' WHERE id = ?1",
            [lp.id.as_str()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('notify_default', '{\"url\":\"http://h/\",\"on\":\"always\"}')",
            [],
        )
        .unwrap();
        let run = |id: &str, slot: i64, status: &str, exit: Option<i64>, error: Option<&str>| {
            conn.execute(
                "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, source, \
                 exit_code, error, created_at, updated_at) \
                 VALUES (?1, ?2, 'a', ?3, 1, ?4, 'scheduled', ?5, ?6, ?3, ?3)",
                rusqlite::params![id, lp.id.as_str(), T0 + slot, status, exit, error],
            )
            .unwrap();
        };
        run(
            "r1",
            1,
            "failed",
            Some(1),
            Some("claude exited with status 1: token sk-LEAK1"),
        );
        run(
            "r2",
            2,
            "failed",
            Some(1),
            Some("API Error: sk-LEAK2 (claude exited with status 1)"),
        );
        run("r3", 3, "failed", Some(0), Some("quota for sk-LEAK3"));
        run("r4", 4, "failed", Some(3), Some("exited with status 3"));
        run("r5", 5, "timed_out", Some(143), Some("timed out after 5s"));
        run("r6", 6, "succeeded", Some(0), None);
        conn.execute_batch(&format!(
            "INSERT INTO workflows VALUES ('w1', 'w', 1, 'active', '{{}}', {T0}, {T0});
             INSERT INTO workflow_runs (id, workflow_id, workflow_name, status, attempt, \
               created_at, updated_at) VALUES ('wr1', 'w1', 'w', 'failed', 1, {T0}, {T0});
             INSERT INTO workflow_step_runs (id, workflow_run_id, step_id, sequence, status, \
               exit_code, error, created_at, updated_at) VALUES ('s1', 'wr1', 'a', 0, 'failed', \
               1, 'codex exited with status 1: sk-LEAK4', {T0}, {T0});
             INSERT INTO workflow_events VALUES ('e1', 'wr1', 1, 'step_failed', 'a', \
               '{{\"exitCode\":1,\"durationMs\":3,\"error\":\"codex exited with status 1: sk-LEAK4\"}}', {T0});
             INSERT INTO events (kind, loop_id, run_id, workflow_run_id, data_json, created_at) VALUES
               ('run.finished', NULL, 'r1', NULL,
                '{{\"run\":{{\"id\":\"r1\",\"status\":\"failed\",\"exitCode\":1,\"error\":\"claude exited with status 1: token sk-LEAK1\"}}}}', {T0}),
               ('run.finished', NULL, 'r3', NULL,
                '{{\"run\":{{\"id\":\"r3\",\"status\":\"failed\",\"exitCode\":0,\"error\":\"quota for sk-LEAK3\"}}}}', {T0}),
               ('run.finished', NULL, 'r4', NULL,
                '{{\"run\":{{\"id\":\"r4\",\"status\":\"failed\",\"exitCode\":3,\"error\":\"exited with status 3\"}}}}', {T0}),
               ('workflow.event', NULL, NULL, 'wr1',
                '{{\"eventType\":\"step_failed\",\"payload\":{{\"exitCode\":1,\"error\":\"codex exited with status 1: sk-LEAK4\"}}}}', {T0});"
        ))
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    // `always` was failure + recovery: it is `changes` now, so nothing notifies more.
    let changes = Some(loops_core::NotifyOn::Changes);
    let on = store
        .get_loop(&lp.id)
        .unwrap()
        .unwrap()
        .notify
        .map(|n| n.on);
    assert_eq!(on, changes);
    assert_eq!(store.notify_default().unwrap().map(|n| n.on), changes);
    let run = |id: &str| store.get_run(&loops_core::RunId::new(id)).unwrap().unwrap();
    for (id, error, quoted) in [
        (
            "r1",
            Some("exited with status 1"),
            Some("claude exited with status 1: token sk-LEAK1"),
        ),
        (
            "r2",
            Some("exited with status 1"),
            Some("API Error: sk-LEAK2 (claude exited with status 1)"),
        ),
        (
            "r3",
            Some("the agent reported an error"),
            Some("quota for sk-LEAK3"),
        ),
        ("r4", Some("exited with status 3"), None),
        ("r5", Some("timed out after 5s"), None),
        ("r6", None, None),
    ] {
        let r = run(id);
        assert_eq!(
            (r.error.as_deref(), r.error_output.as_deref()),
            (error, quoted),
            "{id}"
        );
    }
    let step = store.step_runs("wr1").unwrap().remove(0);
    assert_eq!(step.error.as_deref(), Some("exited with status 1"));
    assert_eq!(
        step.error_output.as_deref(),
        Some("codex exited with status 1: sk-LEAK4")
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    let logs: Vec<String> = conn
        .prepare("SELECT data_json FROM events UNION ALL SELECT payload_json FROM workflow_events")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        logs.len(),
        6,
        "the loop's creation and the five planted: {logs:?}"
    );
    for log in &logs {
        assert!(!log.contains("LEAK"), "{log}");
    }
    assert!(
        logs.iter()
            .any(|l| l.contains("\"error\":\"the agent reported an error\"")),
        "{logs:?}"
    );
    assert!(
        logs.iter()
            .any(|l| l.contains("\"error\":\"exited with status 3\"")),
        "{logs:?}"
    );
}

/// Migration 19 gives each agent step run its provider; step runs recorded before with
/// usage, or not finished, take it from their workflow's stored spec, and a spec that is not JSON leaves
/// its step runs without one rather than failing the migration.
#[test]
fn migration_19_backfills_the_provider_of_step_runs_with_usage() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let run_id = {
        let store = SqliteStore::open(&path).unwrap();
        let spec = loops_core::workflow::parse_spec(
            r#"{"name":"w","steps":[
                {"id":"c","target":{"type":"command","command":"true"}},
                {"id":"s","target":{"type":"agent","provider":"codex","prompt":"hi"}},
                {"id":"q","target":{"type":"agent","provider":"claude","prompt":"hi"}}]}"#,
        )
        .unwrap();
        let wf = store.create_workflow(&spec, false, t(0)).unwrap();
        let (run, _) = store
            .create_workflow_run(&wf, None, &Default::default(), t(1), None)
            .unwrap();
        for mut step in store.step_runs(run.id.as_str()).unwrap() {
            if step.step_id.as_str() == "q" {
                continue; // not finished: a run in flight across the upgrade
            }
            step.finished_at = Some(t(5));
            step.usage = Some(loops_core::Usage {
                input_tokens: Some(3),
                output_tokens: Some(4),
                cost_usd: None,
            });
            store.save_step_run(&step, &[], t(5), None).unwrap();
        }
        run.id
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        // The schema as it was before migration 19, and a hostile spec beside.
        conn.execute_batch(
            "DROP INDEX workflow_step_runs_provider_usage;
             ALTER TABLE workflow_step_runs DROP COLUMN provider;
             DELETE FROM schema_migrations WHERE version = 19;
             INSERT INTO workflows (id, name, version, status, spec_json, created_at, updated_at)
               VALUES ('bad', 'bad', 1, 'archived', 'not json', 1, 1);
             INSERT INTO workflow_runs (id, workflow_id, workflow_name, status, attempt,
               created_at, updated_at) VALUES ('wr-bad', 'bad', 'bad', 'failed', 1, 1, 1);
             INSERT INTO workflow_step_runs (id, workflow_run_id, step_id, sequence, status,
               attempts, created_at, updated_at, usage_json)
               VALUES ('s-bad', 'wr-bad', 'a', 0, 'failed', 1, 1, 1, '{}');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let providers: Vec<_> = store
        .step_runs(run_id.as_str())
        .unwrap()
        .into_iter()
        .map(|s| (s.step_id.as_str().to_owned(), s.provider))
        .collect();
    assert_eq!(
        providers,
        [
            ("c".to_owned(), None),
            ("s".to_owned(), Some(loops_core::Provider::Codex)),
            ("q".to_owned(), Some(loops_core::Provider::Claude)),
        ]
    );
    assert_eq!(store.step_runs("wr-bad").unwrap()[0].provider, None);
}

/// `run_counts` as it should be: the runs counted by the hour they were created in
/// (rounded down, also before 1970) and status, no row for what has no runs.
fn assert_run_counts_exact(conn: &rusqlite::Connection, when: &str) {
    let mut want = std::collections::BTreeMap::<(i64, String), i64>::new();
    let mut stmt = conn.prepare("SELECT created_at, status FROM runs").unwrap();
    let runs = stmt
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .unwrap();
    for run in runs {
        let (created, status) = run.unwrap();
        *want
            .entry((created.div_euclid(3_600_000), status))
            .or_default() += 1;
    }
    let got: std::collections::BTreeMap<(i64, String), i64> = conn
        .prepare("SELECT hour, status, n FROM run_counts")
        .unwrap()
        .query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, want, "{when}");
}

/// Migration 21 counts the runs already stored by hour and status (before 1970 too),
/// and from then on its triggers keep the counts exact — also through writes past the
/// store: a changed creation instant, a loop's runs deleted by the foreign key's
/// cascade. The dashboard's counts read from them equal a count of the runs.
#[test]
fn migration_21_backfills_run_counts_and_triggers_keep_them() {
    use loops_core::{RunOutcome, RunSource, RunStatus};
    use loops_store::{ClaimRequest, RunFilter, RunWrite};
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let h = 3_600_000;
    let (a, b) = {
        let store = SqliteStore::open(&path).unwrap();
        let a = store.create_loop(new_loop("a", None), t(0)).unwrap();
        let b = store.create_loop(new_loop("b", None), t(0)).unwrap();
        for k in 0..10 {
            let lp = if k % 2 == 0 { &a } else { &b };
            let run = store
                .claim_run(
                    &ClaimRequest {
                        loop_id: lp.id.clone(),
                        scheduled_for: t(k * h / 3),
                        runner_id: "test".into(),
                        source: RunSource::AdHoc,
                        now: t(k * h / 3),
                        require_no_running: false,
                    },
                    None,
                    None,
                )
                .unwrap()
                .unwrap();
            if k % 3 != 0 {
                let status = [RunStatus::Succeeded, RunStatus::Failed][(k % 2) as usize];
                let done = RunOutcome::new(status, t(k * h / 3 + 5));
                let write = RunWrite::Finished {
                    run: run.id,
                    outcome: done,
                };
                store
                    .record_run_writes(&[write], t(k * h / 3 + 5), None)
                    .unwrap()[0]
                    .as_ref()
                    .unwrap();
            }
        }
        (a, b)
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        assert_run_counts_exact(&conn, "kept by the triggers");
        // The schema as it was before migration 21, and runs written then: some
        // before 1970, one on an hour's first millisecond, one just before it.
        conn.execute_batch(
            "DROP TRIGGER run_counts_insert;
             DROP TRIGGER run_counts_update;
             DROP TRIGGER run_counts_delete;
             DROP TABLE run_counts;
             DELETE FROM schema_migrations WHERE version = 21;",
        )
        .unwrap();
        for (k, created) in [-1, -h, -h - 1, 0, 2 * h, 2 * h - 1].iter().enumerate() {
            conn.execute(
                "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, \
                 source, created_at, updated_at) \
                 VALUES (?1, ?2, 'a', ?3, 1, 'skipped', 'scheduled', ?3, ?3)",
                rusqlite::params![format!("old-{k}"), a.id.as_str(), created],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_run_counts_exact(&conn, "backfilled");
    let agree = |when: &str| {
        let runs = store.list_runs(&RunFilter::default()).unwrap();
        let sinces = [-2 * h, -h - 1, -h, -1, 0, 1, h / 2, 2 * h - 1, 2 * h];
        for since in sinces
            .iter()
            .map(|&ms| chrono::DateTime::from_timestamp_millis(ms).unwrap())
            .chain([t(-1), t(0), t(1), t(h), t(100 * h)])
        {
            let mut want = std::collections::BTreeMap::<&str, u64>::new();
            for run in runs.iter().filter(|r| r.created_at >= since) {
                *want.entry(run.status.as_str()).or_default() += 1;
            }
            let want: Vec<_> = want.into_iter().collect();
            let got: Vec<_> = store
                .run_status_counts(since)
                .unwrap()
                .into_iter()
                .map(|(s, n)| (s.as_str(), n))
                .collect();
            assert_eq!(got, want, "{when}: since {since}");
        }
    };
    agree("backfilled");
    // A creation instant moved to another hour, and back within its hour.
    conn.execute_batch(
        "UPDATE runs SET created_at = created_at + 7200000 WHERE id = 'old-0';
         UPDATE runs SET created_at = created_at - 1 WHERE id = 'old-3';",
    )
    .unwrap();
    assert_run_counts_exact(&conn, "created_at changed");
    agree("created_at changed");
    // A loop deleted with the foreign keys on: its runs go by the cascade.
    conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    conn.execute("DELETE FROM loops WHERE id = ?1", [b.id.as_str()])
        .unwrap();
    assert!(store
        .list_runs(&RunFilter {
            loop_id: Some(b.id.clone()),
            ..RunFilter::default()
        })
        .unwrap()
        .is_empty());
    assert_run_counts_exact(&conn, "cascade");
    agree("cascade");
    // Every run gone: nothing left counted.
    assert!(store.remove_loop(&a.id).unwrap());
    assert_run_counts_exact(&conn, "all removed");
    let left: i64 = conn
        .query_row("SELECT COUNT(*) FROM run_counts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
    assert!(store.run_status_counts(t(-100 * h)).unwrap().is_empty());
}

/// `prune --keep` reads its candidates outside any write and deletes them in bounded
/// transactions (so no other writer waits seconds for it): over several batches it
/// still keeps exactly each loop's newest N finished runs, never a running one, and
/// takes the deleted runs' events with them.
#[test]
fn prune_over_several_batches_keeps_each_loops_newest_runs() {
    use loops_core::{RunOutcome, RunSource, RunStatus};
    use loops_store::{
        BatchClaim, ClaimOutcome, ClaimRequest, OnRefusal, PrunePolicy, RunFilter, RunWrite,
    };
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();
    let loops: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| store.create_loop(new_loop(n, None), t(0)).unwrap())
        .collect();
    // 2,600 runs of each loop, in creation order; the newest of "a" still running.
    const EACH: i64 = 2_600;
    for lp in &loops {
        let claims: Vec<BatchClaim> = (0..EACH)
            .map(|k| BatchClaim {
                caps: Default::default(),
                request: ClaimRequest {
                    loop_id: lp.id.clone(),
                    scheduled_for: t(k * 1_000),
                    runner_id: "test".into(),
                    source: RunSource::AdHoc,
                    now: t(k * 1_000),
                    require_no_running: false,
                },
                advance: None,
                on_refusal: OnRefusal::Keep,
            })
            .collect();
        let writes: Vec<RunWrite> = store
            .claim_runs(&claims, None)
            .unwrap()
            .into_iter()
            .enumerate()
            .filter(|(k, _)| !(lp.name == "a" && *k as i64 == EACH - 1))
            .map(|(k, outcome)| {
                let ClaimOutcome::Claimed(run) = outcome else {
                    panic!("claim refused: {outcome:?}")
                };
                let done = t(k as i64 * 1_000 + 10);
                RunWrite::Finished {
                    run: run.id,
                    outcome: RunOutcome::new(RunStatus::Succeeded, done),
                }
            })
            .collect();
        for written in store
            .record_run_writes(&writes, t(EACH * 1_000), None)
            .unwrap()
        {
            written.unwrap();
        }
    }
    let runs_of = |name: &str| {
        let lp = loops.iter().find(|l| l.name == name).unwrap();
        store
            .list_runs(&RunFilter {
                loop_id: Some(lp.id.clone()),
                ..RunFilter::default()
            })
            .unwrap()
    };
    let newest_finished: Vec<_> = runs_of("b").into_iter().take(100).map(|r| r.id).collect();
    let run_events = || -> std::collections::HashSet<loops_core::RunId> {
        store
            .events_after(0, 1_000_000)
            .unwrap()
            .into_iter()
            .filter_map(|e| e.body.run_id)
            .collect()
    };
    assert_eq!(run_events().len(), 2 * EACH as usize);
    let policy = PrunePolicy {
        older_than: None,
        keep_per_loop: Some(100),
        keep_events: None,
    };
    // 2,499 + 2,500 candidates (the running run is never one): three batches.
    assert_eq!(store.prune_runs(&policy, true).unwrap(), 4_999);
    assert_eq!(store.prune_runs(&policy, false).unwrap(), 4_999);
    let a = runs_of("a");
    assert_eq!(a.len(), 101, "the running run and the 100 newest finished");
    assert_eq!(a[0].status, RunStatus::Running);
    assert!(a[1..].iter().all(|r| r.status == RunStatus::Succeeded));
    let b: Vec<_> = runs_of("b").into_iter().map(|r| r.id).collect();
    assert_eq!(b, newest_finished);
    // The deleted runs' events went with them; the kept runs' stayed.
    let kept: std::collections::HashSet<_> = a.iter().map(|r| r.id.clone()).chain(b).collect();
    assert_eq!(run_events(), kept);
    assert_eq!(store.prune_runs(&policy, false).unwrap(), 0);
}
