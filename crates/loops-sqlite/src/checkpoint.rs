//! Background WAL maintenance for a long-lived, write-heavy owner (the daemon): the WAL
//! is copied into the database from a thread with its own connection, so commits do
//! not wait on checkpoint fsyncs or file truncations.

use crate::error::StoreResult;
use crate::SqliteStore;
use loops_store::StoreError;
use rusqlite::{Connection, OpenFlags};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

/// Size the daemon's WAL is cut back to when it rewinds (see
/// [`start_background_maintenance`]).
const DAEMON_WAL_LIMIT: i64 = 64 * 1_048_576;

/// How long the background checkpointer lets commits accumulate before it copies the
/// WAL into the database: at most one checkpoint per period while writes go on.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Handle to the background checkpoint thread: commits nudge it.
pub(crate) struct Checkpointer {
    nudge: mpsc::SyncSender<()>,
    /// A nudge is on its way and not yet acted on, so a busy writer sends one, not one
    /// per commit.
    pending: Arc<AtomicBool>,
}

impl SqliteStore {
    /// Tells the background checkpointer (if any) that the WAL grew.
    pub(crate) fn nudge_checkpointer(&self) {
        if let Some(cp) = self.checkpointer.get() {
            if !cp.pending.swap(true, Ordering::AcqRel) {
                // Full means a nudge is already queued; gone means the thread ended.
                let _ = cp.nudge.try_send(());
            }
        }
    }
}

/// Checkpoints the WAL from a thread with its own connection, `CHECKPOINT_EVERY`
/// after a commit of this store (no wake-ups while idle), and turns off the
/// automatic checkpoint of this connection.
/// An automatic checkpoint runs inside the commit that crosses 1,000 WAL pages and
/// fsyncs the WAL and the database there, stalling that commit (and every caller
/// waiting on this connection) for up to tens of milliseconds; a busy daemon crossed
/// it several times a second. The bulk of the copy and its fsyncs now happen on
/// another connection beside the writers; only the short tail, and the reset that
/// makes the WAL rewind (see `checkpoint_loop`), hold this connection.
pub(crate) fn start_background_maintenance(store: &SqliteStore) -> StoreResult<()> {
    let Some(path) = store.path.clone() else {
        return Ok(());
    };
    if store.checkpointer.get().is_some() {
        return Ok(());
    }
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(crate::error::from_sqlite)?;
    // Never wait on other processes: a busy round is retried after the next commit.
    conn.busy_timeout(Duration::ZERO)
        .map_err(crate::error::from_sqlite)?;
    let (nudge, nudges) = mpsc::sync_channel::<()>(1);
    let pending = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&pending);
    let store_conn = Arc::downgrade(&store.conn);
    // The thread's connection may outlive the store's by a round: it holds the file's
    // claim of its own until it is closed (`loops_store::open_files`).
    let claim = store
        .claim
        .as_ref()
        .map(loops_store::open_files::Claim::again);
    std::thread::Builder::new()
        .name("loops-checkpoint".into())
        .spawn(move || {
            checkpoint_loop(&conn, &store_conn, &nudges, &flag);
            drop(conn);
            drop(claim);
        })
        .map_err(|e| StoreError::DataDir {
            path: path.display().to_string(),
            source: e,
        })?;
    // Only now that checkpoints are taken care of.
    store.read(|conn| {
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        // The WAL now rewinds several times a second under load. Cutting it back to
        // 1 MiB at each rewind (the default set when opening) made every rewind free
        // and re-allocate its blocks, and those truncations stalled commits for up to
        // hundreds of milliseconds on ext4. The daemon's WAL keeps its working size
        // instead, capped here.
        conn.pragma_update(None, "journal_size_limit", DAEMON_WAL_LIMIT)?;
        // A statement of a transaction keeps the pages it changes in a statement
        // journal, which SQLite writes to a temporary file once it outgrows 64 KiB: a
        // busy daemon's claim and finalization batches did, tens of MB/s of writes to
        // files deleted right after (BENCHMARKS §34). In memory instead. The journal
        // holds the pages one statement changes; the daemon's largest are a batch
        // (bounded by its concurrency), a page of the clock re-plan (2,000 loops) and
        // the loops that expire at one instant. The CLI's connections keep the file:
        // one of theirs may delete millions of runs.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        Ok(())
    })?;
    // A concurrent second start loses here; its thread ends with its dropped handle.
    let _ = store.checkpointer.set(Checkpointer { nudge, pending });
    // Whatever is in the WAL already.
    store.nudge_checkpointer();
    Ok(())
}

/// Body of the checkpoint thread; returns when the store is dropped. An idle store
/// sends no nudge, so the thread sleeps in `recv` with no wake-ups at all.
///
/// Each round has two phases. The first (`PASSIVE`) copies the WAL into the database
/// and fsyncs both without holding the store's connection, so the store's writers go
/// on. But a checkpoint running beside writers does not make SQLite rewind the WAL:
/// measured in the daemon, the WAL grew by 13 MB/s at 200 runs/s although every
/// round completed. The second phase (`RESTART`) holds the store's connection, so this
/// process neither reads nor writes meanwhile, copies the few frames written during
/// the first, and resets the WAL so the next commit writes from its start. It never
/// waits on other processes (busy timeout 0): a CLI reading at that instant only
/// defers the rewind to the next round.
fn checkpoint_loop(
    ckpt: &Connection,
    store_conn: &Weak<Mutex<Connection>>,
    nudges: &mpsc::Receiver<()>,
    pending: &AtomicBool,
) {
    while nudges.recv().is_ok() {
        std::thread::sleep(CHECKPOINT_EVERY);
        // Cleared before checkpointing: a commit landing during it nudges again.
        pending.store(false, Ordering::Release);
        let t0 = std::time::Instant::now();
        let copied = checkpoint(ckpt, "PASSIVE");
        tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, complete = ?copied, "WAL checkpoint");
        if let Err(e) = copied {
            tracing::warn!(error = %e, "WAL checkpoint failed");
            continue;
        }
        let Some(store_conn) = store_conn.upgrade() else {
            return;
        };
        let t1 = std::time::Instant::now();
        let _store_idle = store_conn.lock().unwrap_or_else(PoisonError::into_inner);
        let t2 = std::time::Instant::now();
        let reset = checkpoint(ckpt, "RESTART");
        tracing::debug!(
            wait_ms = (t2 - t1).as_secs_f64() * 1e3,
            ms = t2.elapsed().as_secs_f64() * 1e3,
            complete = ?reset,
            "WAL reset"
        );
        if let Err(e) = reset {
            tracing::warn!(error = %e, "WAL checkpoint failed");
        }
    }
}

/// `PRAGMA wal_checkpoint(MODE)`: true when every frame of the WAL is now in the
/// database (for `RESTART`, also that the WAL was reset).
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<bool> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        let busy: i64 = r.get(0)?;
        let frames: i64 = r.get(1)?;
        let copied: i64 = r.get(2)?;
        Ok(busy == 0 && frames == copied)
    })
}
