//! Links the `loops` binary with packed relative relocations (`DT_RELR`) where the C
//! library can load them: the table the loader reads at every start shrinks from
//! 1.5 MB to 25 KB, and the daemon's RSS by ≈ 2 MB, idle and under load, with the
//! binary still position-independent (BENCHMARKS.md §35).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if relr_loadable() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// A native build on Linux with glibc 2.36 or newer. An older loader refuses a binary
/// that needs `GLIBC_ABI_DT_RELR` (what the linker records beside the table), so the
/// flag is left out there, and for a cross build, whose C library is not this host's.
/// A GNU ld older than 2.38 ignores the flag with a warning.
fn relr_loadable() -> bool {
    let var = |key: &str| std::env::var(key).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || var("TARGET") != var("HOST")
    {
        return false;
    }
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    glibc_at_least(&String::from_utf8_lossy(&out.stdout), (2, 36))
}

/// Whether `getconf GNU_LIBC_VERSION`'s answer (`glibc 2.36`) is `min` or newer.
fn glibc_at_least(answer: &str, min: (u32, u32)) -> bool {
    let Some(version) = answer.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= min,
        _ => false,
    }
}
