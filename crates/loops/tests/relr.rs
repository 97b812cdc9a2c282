//! The `loops` binary is linked with packed relative relocations (`DT_RELR`) wherever
//! this host's glibc can load them (`build.rs`; BENCHMARKS.md §35), and still starts.

// The ELF64 little-endian binaries of Linux with glibc, where `build.rs` may pack them.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    target_endian = "little",
    target_pointer_width = "64"
))]
// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// `DT_RELR`: the dynamic tag of a packed relative relocation table.
const DT_RELR: u64 = 36;
/// `PT_DYNAMIC`: the program header of the dynamic section.
const PT_DYNAMIC: u32 = 2;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The tags of an ELF64 little-endian file's dynamic section.
fn dynamic_tags(elf: &[u8]) -> Vec<u64> {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "not ELF64 little-endian");
    let (phoff, phentsize, phnum) = (
        u64_at(elf, 0x20) as usize,
        u16_at(elf, 0x36) as usize,
        u16_at(elf, 0x38) as usize,
    );
    let dynamic = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&ph| u32_at(elf, ph) == PT_DYNAMIC)
        .expect("a dynamically linked binary has PT_DYNAMIC");
    let (offset, size) = (
        u64_at(elf, dynamic + 0x08) as usize,
        u64_at(elf, dynamic + 0x20) as usize,
    );
    (offset..offset + size)
        .step_by(16)
        .map(|entry| u64_at(elf, entry))
        .take_while(|&tag| tag != 0)
        .collect()
}

/// This host's glibc version from `getconf GNU_LIBC_VERSION` (`glibc 2.36`).
fn glibc() -> Option<(u32, u32)> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let (major, minor) = text.trim().strip_prefix("glibc ")?.split_once('.')?;
    Some((major.parse().ok()?, minor.split('.').next()?.parse().ok()?))
}

#[test]
fn binary_packs_relative_relocations_where_glibc_loads_them() {
    let bin = env!("CARGO_BIN_EXE_loops");
    let tags = dynamic_tags(&std::fs::read(bin).unwrap());
    let expected = glibc().is_some_and(|v| v >= (2, 36));
    assert_eq!(
        tags.contains(&DT_RELR),
        expected,
        "DT_RELR in {bin}: glibc {:?}",
        glibc()
    );
    // The loader applies the table: the binary runs.
    let out = Command::new(bin).arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("loops "));
}
