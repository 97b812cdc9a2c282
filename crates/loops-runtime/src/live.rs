//! Live views of runs (README, "Watching runs"): a run's output as it is written
//! (`loops logs RUN [--follow]`) and runs as they start and end (`loops runs
//! --follow`). Both poll the store (and, for a running run, its spool files in the data
//! dir) with bounded reads; nothing here writes.
//!
//! A running run's spool file holds the tail of its output, rewritten whole at most
//! every [`crate::spool::SPILL_EVERY`]: once the output outgrew the bound it starts
//! with `[truncated N bytes]`. So the count of bytes written so far is N plus the
//! tail's length, and [`OutputFollow`] prints only the bytes past what it printed
//! before, whatever rewrites happened between two polls (bytes that scrolled out of
//! the tail in between are reported as a gap). When the run ends, the stored output
//! (the same tail, kept in the row) finishes the view. Exact for UTF-8 output; bytes
//! that are not UTF-8 were replaced when captured, which can shift the count a little.

use crate::client::{resolve, Client, RecordKind, Result, PREFIX_MATCHES};
use crate::spool::Spool;
use loops_core::notify::split_marker;
use loops_core::{Instant, LoopId, Run, RunId, RunStatus};
use loops_store::Store;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How often `loops logs --follow` looks for new output.
pub const OUTPUT_POLL: Duration = Duration::from_millis(100);
/// How often `loops runs --follow` looks for runs that started or ended.
pub const RUNS_POLL: Duration = Duration::from_millis(250);
/// Most new runs one poll of `runs --follow` reads (the rest come with the next).
const RUNS_PAGE: usize = 1_000;
/// How far back each poll of `runs --follow` looks again: a run's row carries its
/// claim instant, and a claim committed a moment after a later one would otherwise
/// be missed.
const RUNS_LOOK_BACK: chrono::TimeDelta = chrono::TimeDelta::milliseconds(500);

/// Which stream of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// New output of a run since the previous poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputPiece {
    /// Bytes written that are no longer kept (they scrolled out of the bounded tail
    /// before they could be shown).
    Gap(u64),
    /// Bytes as written.
    Bytes(Vec<u8>),
}

/// What one poll of [`OutputFollow`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputStep {
    pub pieces: Vec<OutputPiece>,
    /// The run as recorded, once it ended (its stored output is then fully shown).
    pub ended: Option<Run>,
}

/// Follows one stream of one run: each [`OutputFollow::poll`] returns what was
/// written since the previous one.
pub struct OutputFollow {
    store: Arc<dyn Store>,
    spool: Spool,
    run: RunId,
    stream: Stream,
    /// Bytes of the stream shown so far (counting gaps).
    shown: u64,
}

impl OutputFollow {
    /// The stream's new output: from the spool while the run runs, from its row once
    /// it ended.
    pub fn poll(&mut self) -> Result<OutputStep> {
        let run = self
            .store
            .get_run(&self.run)?
            .ok_or_else(|| crate::client::ClientError::RunNotFound(self.run.to_string()))?;
        if run.status == RunStatus::Running {
            let files = self.spool.for_run(&run.id);
            let path = match self.stream {
                Stream::Stdout => &files.stdout,
                Stream::Stderr => &files.stderr,
            };
            let text = read_spool(path);
            return Ok(OutputStep {
                pieces: self.advance(&text),
                ended: None,
            });
        }
        let text = match self.stream {
            Stream::Stdout => run.stdout.clone(),
            Stream::Stderr => run.stderr.clone(),
        }
        .unwrap_or_default();
        Ok(OutputStep {
            pieces: self.advance(&text),
            ended: Some(run),
        })
    }

    /// The part of `text` (a tail, maybe with its truncation marker) past what was
    /// shown.
    fn advance(&mut self, text: &str) -> Vec<OutputPiece> {
        let (dropped, body) = split_marker(text);
        let body = body.as_bytes();
        let total = dropped.saturating_add(body.len() as u64);
        if total <= self.shown {
            return Vec::new();
        }
        let new = total - self.shown;
        self.shown = total;
        let kept = body.len() as u64;
        if new <= kept {
            let start = body.len() - usize::try_from(new).unwrap_or(body.len());
            return vec![OutputPiece::Bytes(body[start..].to_vec())];
        }
        let mut pieces = vec![OutputPiece::Gap(new - kept)];
        if !body.is_empty() {
            pieces.push(OutputPiece::Bytes(body.to_vec()));
        }
        pieces
    }
}

/// A spool file's text, bounded like the row's (missing: nothing yet).
fn read_spool(path: &std::path::Path) -> String {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(path) else {
        return String::new();
    };
    let mut bytes = Vec::new();
    let limit = (crate::executor::DEFAULT_MAX_OUTPUT_BYTES as u64).saturating_mul(4);
    if file.take(limit).read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A run starting or ending, as `runs --follow` sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// Claimed and started (or found running when the watch began).
    Started(Run),
    /// Recorded with its end (skipped runs end without having started).
    Ended(Run),
}

/// Watches the runs of one loop or all: each [`RunWatch::poll`] returns the runs that
/// started or ended since the previous one, oldest first.
pub struct RunWatch {
    store: Arc<dyn Store>,
    loop_id: Option<LoopId>,
    /// Runs created at or after this instant are looked at (minus the look-back).
    cursor: Instant,
    /// Runs already reported as started, with their creation instant (for pruning).
    seen: HashMap<RunId, Instant>,
    /// Runs reported started and not yet ended.
    open: Vec<RunId>,
    first: bool,
}

impl RunWatch {
    /// The runs that started or ended since the previous poll (the first poll reports
    /// the runs running now as started).
    pub fn poll(&mut self) -> Result<Vec<RunEvent>> {
        let mut events = Vec::new();
        if std::mem::take(&mut self.first) {
            for run in self.store.running_runs(self.loop_id.as_ref())? {
                self.seen.insert(run.id.clone(), run.created_at);
                self.open.push(run.id.clone());
                events.push(RunEvent::Started(run));
            }
        }
        // Runs that were running at the last poll and have ended since.
        let mut still_open = Vec::with_capacity(self.open.len());
        for id in std::mem::take(&mut self.open) {
            match self.store.get_run(&id)? {
                Some(run) if run.status == RunStatus::Running => still_open.push(id),
                Some(run) => events.push(RunEvent::Ended(run)),
                None => {}
            }
        }
        self.open = still_open;
        // New runs, page by page.
        let mut since = self.cursor - RUNS_LOOK_BACK;
        loop {
            let page = self
                .store
                .runs_created_since(since, self.loop_id.as_ref(), RUNS_PAGE)?;
            let full = page.len() == RUNS_PAGE;
            let last = page.last().map(|r| r.created_at);
            for run in page {
                if self.seen.contains_key(&run.id) {
                    continue;
                }
                self.seen.insert(run.id.clone(), run.created_at);
                self.cursor = self.cursor.max(run.created_at);
                match run.status {
                    RunStatus::Running => {
                        self.open.push(run.id.clone());
                        events.push(RunEvent::Started(run));
                    }
                    RunStatus::Skipped => events.push(RunEvent::Ended(run)),
                    _ => {
                        events.push(RunEvent::Started(run.clone()));
                        events.push(RunEvent::Ended(run));
                    }
                }
            }
            match (full, last) {
                (true, Some(last)) => {
                    // More than a page: go on from the page's last instant (a page of
                    // one millisecond only would not move: step past it).
                    since = if last > since {
                        last
                    } else {
                        last + chrono::TimeDelta::milliseconds(1)
                    };
                }
                _ => break,
            }
        }
        let keep_from = self.cursor - RUNS_LOOK_BACK - RUNS_LOOK_BACK;
        let open: HashSet<&RunId> = self.open.iter().collect();
        self.seen
            .retain(|id, created| *created >= keep_from || open.contains(id));
        Ok(events)
    }
}

/// Live views.
impl Client {
    /// Resolves a run: an exact id wins, then an unambiguous id prefix.
    pub fn get_run(&self, key: &str) -> Result<Run> {
        let store = self.store().as_ref();
        resolve(
            RecordKind::Run,
            key,
            |id| store.get_run(&RunId::new(id)),
            None,
            |prefix, limit| store.runs_with_id_prefix(prefix, limit.min(PREFIX_MATCHES)),
            |r| format!("{} ({} attempt {})", r.id, r.loop_name, r.attempt),
        )
    }

    /// Follows one stream of `run` (see [`OutputFollow`]); the first poll returns
    /// everything kept so far.
    pub fn follow_output(&self, run: &Run, stream: Stream) -> OutputFollow {
        OutputFollow {
            store: Arc::clone(self.store()),
            spool: Spool::in_data_dir(self.data_dir()),
            run: run.id.clone(),
            stream,
            shown: 0,
        }
    }

    /// Watches the runs of one loop (by key) or of all, from now on (see [`RunWatch`]).
    pub fn watch_runs(&self, loop_key: Option<&str>) -> Result<RunWatch> {
        let loop_id = loop_key.map(|k| self.get(k)).transpose()?.map(|l| l.id);
        Ok(RunWatch {
            store: Arc::clone(self.store()),
            loop_id,
            cursor: chrono::Utc::now(),
            seen: HashMap::new(),
            open: Vec::new(),
            first: true,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn follow() -> OutputFollow {
        let store = loops_sqlite::SqliteStore::open_in_memory().unwrap();
        OutputFollow {
            store: Arc::new(store),
            spool: Spool::in_data_dir(std::path::Path::new("/nonexistent")),
            run: RunId::new("aaaaaaaaaaaa"),
            stream: Stream::Stdout,
            shown: 0,
        }
    }

    fn bytes(p: &[OutputPiece]) -> Vec<String> {
        p.iter()
            .map(|p| match p {
                OutputPiece::Gap(n) => format!("<gap {n}>"),
                OutputPiece::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            })
            .collect()
    }

    #[test]
    fn only_new_bytes_are_shown_across_rewrites_of_the_tail() {
        let mut f = follow();
        assert_eq!(bytes(&f.advance("")), Vec::<String>::new());
        assert_eq!(bytes(&f.advance("one\n")), vec!["one\n"]);
        assert_eq!(bytes(&f.advance("one\n")), Vec::<String>::new());
        assert_eq!(bytes(&f.advance("one\ntwo\n")), vec!["two\n"]);
        // The tail outgrew its bound: 8 bytes dropped, "two\nthree\n" kept; only
        // "three\n" is new.
        assert_eq!(
            bytes(&f.advance("[truncated 4 bytes]\ntwo\nthree\n")),
            vec!["three\n"]
        );
        // Much more was written between two polls than the tail keeps.
        assert_eq!(
            bytes(&f.advance("[truncated 100 bytes]\nlast\n")),
            vec!["<gap 86>", "last\n"]
        );
        assert_eq!(f.shown, 105);
        // The stored tail of the ended run repeats what was shown: nothing new.
        assert_eq!(
            bytes(&f.advance("[truncated 100 bytes]\nlast\n")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_first_look_at_a_truncated_tail_starts_with_the_gap() {
        let mut f = follow();
        assert_eq!(
            bytes(&f.advance("[truncated 7 bytes]\nabc")),
            vec!["<gap 7>", "abc"]
        );
    }
}
