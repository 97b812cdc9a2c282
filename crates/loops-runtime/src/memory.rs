//! Handing the heap's free pages back to the system after a front end built a large
//! report.

/// A document at least this large came from a report big enough to be worth handing
/// its memory back for (`health` over 100,000 loops is ≈ 45 MB of compact JSON; over
/// 1,000 loops, 0.4 MB).
const LARGE_DOCUMENT: usize = 4 << 20;

/// Called once the report a document of `len` bytes was encoded from is dropped: a
/// large one's memory is handed back ([`release_free_memory`]); a small one's costs
/// nothing.
pub fn after_document(len: usize) {
    if len >= LARGE_DOCUMENT {
        release_free_memory();
    }
}

/// Returns the pages the allocator holds free to the system. glibc keeps memory a
/// thread freed in that thread's arena: a server that once built a large report (a
/// blocking thread of `loops serve` judging 100,000 loops) kept ≈ 100 MB after the
/// answer (BENCHMARKS.md §36). A no-op where the allocator is not glibc's.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: `malloc_trim` takes no pointer and touches no caller's memory: it only
    // returns whole free pages of glibc's own arenas, each under that arena's lock, so
    // it is sound from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
