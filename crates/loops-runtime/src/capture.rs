//! Bounded capture of a child's stdout and stderr.
//!
//! A run may print far more than we are willing to store (a runaway agent, `yes`), so
//! each stream keeps only its last `max` bytes in a [`TailBuffer`] and counts what it
//! dropped. The pipes are always drained: a child that floods its output never blocks
//! on a full pipe, and memory stays at `max` bytes per stream plus one read chunk.
//!
//! [`PipeCapture`] reads both pipes of one child. Its [`PipeCapture::read_some`] is
//! cancel-safe, so the executor can poll it inside `select!` next to the child's exit,
//! a timeout and a cancellation, and simply stop calling it when it gives up on pipes
//! that a stray grandchild keeps open. With a spool, the tails are also copied to files
//! while the child runs, so a runner that dies does not take the output with it.

use std::collections::VecDeque;
use std::future::pending;
use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::spool::{write_atomic, SpoolFiles, SPILL_EVERY};

/// Bytes asked from a pipe per read. A Linux pipe holds 64 KiB, so a flooding child
/// is drained in a few large reads; the buffer is allocated once per stream.
const READ_CHUNK: usize = 16 * 1024;

/// The last `max` bytes written to a stream, plus how many bytes before them were dropped.
#[derive(Debug, Clone, Default)]
pub struct TailBuffer {
    buf: VecDeque<u8>,
    max: usize,
    dropped: u64,
}

impl TailBuffer {
    /// An empty buffer that will keep at most `max` bytes. Nothing is allocated until
    /// data arrives, so trivial runs stay cheap.
    pub fn new(max: usize) -> Self {
        Self {
            buf: VecDeque::new(),
            max,
            dropped: 0,
        }
    }

    /// Appends `data`, dropping the oldest bytes beyond the limit.
    pub fn push(&mut self, data: &[u8]) {
        if data.len() >= self.max {
            // The chunk alone fills the buffer: everything older goes, and so does the
            // head of the chunk.
            let skip = data.len() - self.max;
            self.dropped += (self.buf.len() + skip) as u64;
            self.buf.clear();
            self.buf.extend(&data[skip..]);
            return;
        }
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.max);
        if overflow > 0 {
            self.buf.drain(..overflow);
            self.dropped += overflow as u64;
        }
        self.buf.extend(data);
    }

    /// Bytes currently kept (at most `max`).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Bytes dropped from the front so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The kept tail as text, invalid UTF-8 replaced by U+FFFD. When bytes were
    /// dropped, the text starts with `[truncated N bytes]\n`. If the cut fell inside a
    /// multi-byte character, its leftover continuation bytes are dropped too (and
    /// counted in N), so the text never opens with a replacement character.
    pub fn into_string(mut self) -> String {
        let bytes = self.buf.make_contiguous();
        if self.dropped == 0 {
            return String::from_utf8_lossy(bytes).into_owned();
        }
        // A UTF-8 character has at most 3 continuation bytes (0b10xx_xxxx).
        let orphans = bytes
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count();
        let dropped = self.dropped + orphans as u64;
        let text = String::from_utf8_lossy(&bytes[orphans..]);
        format!("[truncated {dropped} bytes]\n{text}")
    }
}

/// `read_some`'s event for "the pending spill is due" (0 and 1 are the streams).
const SPILL: usize = 2;

/// Reads a child's stdout and stderr into two [`TailBuffer`]s, optionally spilling the
/// tails to spool files while the child runs ([`crate::spool`]).
#[derive(Debug)]
pub struct PipeCapture<O, E> {
    stdout: Option<O>,
    stderr: Option<E>,
    out: TailBuffer,
    err: TailBuffer,
    out_chunk: Vec<u8>,
    err_chunk: Vec<u8>,
    spool: Option<SpoolFiles>,
    /// New output not yet spilled, per stream.
    dirty: [bool; 2],
    /// When the pending spill is due (set by the first unspilled output).
    spill_at: Option<tokio::time::Instant>,
    /// A spill failed (disk full, say); said once per run, then retried quietly.
    spill_failed: bool,
}

impl<O, E> PipeCapture<O, E>
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    /// Captures the given pipes (a missing pipe counts as already closed), keeping at
    /// most `max` bytes of each.
    pub fn new(stdout: Option<O>, stderr: Option<E>, max: usize) -> Self {
        let chunk = |open: bool| Vec::with_capacity(if open { READ_CHUNK } else { 0 });
        Self {
            out_chunk: chunk(stdout.is_some()),
            err_chunk: chunk(stderr.is_some()),
            stdout,
            stderr,
            out: TailBuffer::new(max),
            err: TailBuffer::new(max),
            spool: None,
            dirty: [false; 2],
            spill_at: None,
            spill_failed: false,
        }
    }

    /// Spills the captured tails to `spool` while the child runs (see
    /// [`Self::spill_when_due`]).
    pub fn with_spool(mut self, spool: Option<SpoolFiles>) -> Self {
        self.spool = spool;
        self
    }

    /// Whether output awaits a spill.
    pub fn spill_pending(&self) -> bool {
        self.spill_at.is_some()
    }

    /// Waits until the pending spill is due, then writes the changed tails to the spool
    /// files. Never resolves while nothing is pending. Cancel-safe: nothing happens
    /// before the wait ends, and the write itself does not await.
    pub async fn spill_when_due(&mut self) {
        let Some(at) = self.spill_at else {
            return pending().await;
        };
        tokio::time::sleep_until(at).await;
        self.spill();
    }

    fn spill(&mut self) {
        self.spill_at = None;
        let Some(spool) = &self.spool else { return };
        let streams = [(&self.out, &spool.stdout), (&self.err, &spool.stderr)];
        for (i, (tail, path)) in streams.into_iter().enumerate() {
            if !std::mem::take(&mut self.dirty[i]) {
                continue;
            }
            if let Err(e) = write_atomic(path, &tail.clone().into_string()) {
                if !std::mem::replace(&mut self.spill_failed, true) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot spool run output; it is kept in memory");
                }
                // Try again with the next output.
                self.dirty[i] = true;
            }
        }
    }

    fn note_output(&mut self, stream: usize) {
        if self.spool.is_some() {
            self.dirty[stream] = true;
            self.spill_at
                .get_or_insert_with(|| tokio::time::Instant::now() + SPILL_EVERY);
        }
    }

    /// Bytes read from both pipes so far (kept or dropped): grows with every output.
    pub fn received(&self) -> u64 {
        let stream = |t: &TailBuffer| t.len() as u64 + t.dropped();
        stream(&self.out) + stream(&self.err)
    }

    /// Whether at least one pipe has not reached end of file yet.
    pub fn is_open(&self) -> bool {
        self.stdout.is_some() || self.stderr.is_some()
    }

    /// Waits until one open pipe yields data, end of file or an error, and records it
    /// (or until a pending spill is due, and spills). Returns at once when both pipes
    /// are closed.
    ///
    /// Cancel-safe: dropping the future loses no bytes already read from a pipe, so it
    /// can sit in a `select!` loop.
    pub async fn read_some(&mut self) {
        let Self {
            stdout,
            stderr,
            out,
            err,
            out_chunk,
            err_chunk,
            ..
        } = self;
        let spill_at = self.spill_at;
        let spill_due = async move {
            match spill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => pending().await,
            }
        };
        let event = tokio::select! {
            res = read_chunk(stdout.as_mut(), out_chunk), if stdout.is_some() => {
                record(res, stdout, out, out_chunk, "stdout").then_some(0)
            }
            res = read_chunk(stderr.as_mut(), err_chunk), if stderr.is_some() => {
                record(res, stderr, err, err_chunk, "stderr").then_some(1)
            }
            () = spill_due => Some(SPILL),
            else => None,
        };
        match event {
            Some(SPILL) => self.spill(),
            Some(stream) => self.note_output(stream),
            None => {}
        }
    }

    /// Reads until both pipes are closed. Bound it with a timeout: a grandchild that
    /// escaped the process group can hold a pipe open forever.
    pub async fn drain(&mut self) {
        while self.is_open() {
            self.read_some().await;
        }
    }

    /// Stops reading (closing our ends of the pipes) and returns stdout and stderr.
    pub fn finish(self) -> (TailBuffer, TailBuffer) {
        (self.out, self.err)
    }
}

/// One read into `chunk`'s spare capacity; never resolves for a closed pipe.
async fn read_chunk<R: AsyncRead + Unpin>(
    reader: Option<&mut R>,
    chunk: &mut Vec<u8>,
) -> io::Result<usize> {
    match reader {
        // `read_buf` fills the spare capacity without zeroing it first.
        Some(reader) => reader.read_buf(chunk).await,
        None => pending().await,
    }
}

/// Records one read; true when it added output.
fn record<R>(
    res: io::Result<usize>,
    pipe: &mut Option<R>,
    tail: &mut TailBuffer,
    chunk: &mut Vec<u8>,
    name: &str,
) -> bool {
    match res {
        Ok(0) => *pipe = None,
        Ok(_) => {
            tail.push(chunk);
            // Keeps the capacity, so the next read gets a full chunk again.
            chunk.clear();
            return true;
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
        Err(e) => {
            // A broken pipe cannot recover; keep what we have rather than fail the run.
            tracing::debug!(stream = name, error = %e, "stopped reading child output");
            *pipe = None;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tail(max: usize, chunks: &[&[u8]]) -> TailBuffer {
        let mut buf = TailBuffer::new(max);
        for chunk in chunks {
            buf.push(chunk);
        }
        buf
    }

    #[test]
    fn keeps_everything_under_the_limit() {
        let buf = tail(10, &[b"abc", b"def"]);
        assert_eq!(buf.dropped(), 0);
        assert_eq!(buf.into_string(), "abcdef");
    }

    #[test]
    fn keeps_the_tail_and_counts_dropped_bytes() {
        let buf = tail(4, &[b"abc", b"def", b"gh"]);
        assert_eq!(buf.dropped(), 4);
        assert_eq!(buf.len(), 4);
        assert_eq!(buf.into_string(), "[truncated 4 bytes]\nefgh");
    }

    #[test]
    fn a_chunk_larger_than_the_limit_replaces_everything() {
        let buf = tail(3, &[b"ab", b"0123456789"]);
        assert_eq!(buf.into_string(), "[truncated 9 bytes]\n789");
    }

    #[test]
    fn zero_limit_keeps_nothing() {
        let buf = tail(0, &[b"ab", b"cd"]);
        assert_eq!(buf.into_string(), "[truncated 4 bytes]\n");
    }

    #[test]
    fn a_character_cut_at_the_start_is_dropped_and_counted() {
        // "ééé!" is C3 A9 C3 A9 C3 A9 21; the last 4 bytes are A9 C3 A9 21, and the
        // orphan A9 is dropped as well (3 + 1 bytes).
        let buf = tail(4, &["ééé!".as_bytes()]);
        assert_eq!(buf.into_string(), "[truncated 4 bytes]\né!");
    }

    #[test]
    fn invalid_utf8_inside_is_replaced_not_fatal() {
        let buf = tail(16, &[b"a\xffb"]);
        assert_eq!(buf.into_string(), "a\u{FFFD}b");
    }

    #[tokio::test(start_paused = true)]
    async fn spills_tails_after_output_then_waits_for_more() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = SpoolFiles {
            stdout: dir.path().join("o"),
            stderr: dir.path().join("e"),
        };
        let out: &[u8] = b"0123456789";
        let mut capture =
            PipeCapture::new(Some(out), None::<&[u8]>, 4).with_spool(Some(files.clone()));
        assert!(!capture.spill_pending());
        capture.drain().await;
        assert!(capture.spill_pending());
        assert!(!files.stdout.exists(), "no spill before it is due");
        capture.spill_when_due().await;
        assert!(!capture.spill_pending());
        assert_eq!(
            std::fs::read_to_string(&files.stdout).expect("spooled"),
            "[truncated 6 bytes]\n6789"
        );
        assert!(!files.stderr.exists(), "an untouched stream is not written");
        let nothing = tokio::time::timeout(Duration::from_secs(5), capture.spill_when_due());
        assert!(nothing.await.is_err(), "nothing pending: never resolves");
    }

    #[tokio::test]
    async fn drains_both_pipes_to_eof() {
        let out: &[u8] = b"out-data";
        let err: &[u8] = b"err-data-longer";
        let mut capture = PipeCapture::new(Some(out), Some(err), 8);
        capture.drain().await;
        assert!(!capture.is_open());
        let (out, err) = capture.finish();
        assert_eq!(out.into_string(), "out-data");
        assert_eq!(err.into_string(), "[truncated 7 bytes]\na-longer");
    }
}
