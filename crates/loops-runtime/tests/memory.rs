//! `memory::release_free_memory` hands a thread arena's free pages back to the system
//! (a test binary of its own: the process's RSS is what it measures).

#![cfg(all(target_os = "linux", target_env = "gnu"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// This process's anonymous memory, in kB.
fn rss_anon_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn freed_pages_of_a_threads_arena_go_back_to_the_system() {
    std::thread::spawn(|| {
        // 64 MiB in 1 KiB pieces on this thread's arena, every 64th kept: the rest is
        // freed, but none of it at the arena's top, so glibc keeps it.
        let mut pieces: Vec<Vec<u8>> = (0..65_536).map(|i| vec![i as u8; 1024]).collect();
        let kept: Vec<Vec<u8>> = pieces.iter_mut().step_by(64).map(std::mem::take).collect();
        drop(pieces);
        let before = rss_anon_kb();
        loops_runtime::memory::after_document(1 << 20);
        let small = rss_anon_kb();
        loops_runtime::memory::after_document(64 << 20);
        let after = rss_anon_kb();
        assert!(
            before.saturating_sub(small) < 16 * 1024,
            "a small document hands nothing back: {before} → {small} kB"
        );
        assert!(
            small.saturating_sub(after) > 32 * 1024,
            "a large one hands the freed pages back: {small} → {after} kB"
        );
        assert_eq!(kept.len(), 1024);
    })
    .join()
    .unwrap();
}
