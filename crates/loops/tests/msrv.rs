//! The declared minimum Rust version stays true: the README names the workspace's
//! `rust-version`, and no locked dependency declares a newer one. (`ci/check-msrv.sh`
//! checks every locked package through `cargo metadata`; this test reads the manifests
//! the local registry already holds, so it needs no network.)

// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

const DECLARED: &str = env!("CARGO_PKG_RUST_VERSION");

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("workspace root")
        .to_path_buf()
}

/// `1.88` / `1.85.0` as comparable numbers.
fn version(text: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = text
        .trim()
        .split('.')
        .map(|p| p.parse().unwrap_or_else(|_| panic!("bad version {text:?}")))
        .collect();
    parts.resize(3, 0);
    parts
}

#[test]
fn readme_names_the_declared_rust_version() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    let wanted = format!("Rust toolchain ({DECLARED}+)");
    assert!(
        readme.contains(&wanted),
        "README.md should say {wanted:?} (the workspace rust-version)"
    );
}

/// `(name, version)` of every registry package in Cargo.lock.
fn locked_registry_packages() -> Vec<(String, String)> {
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock")).expect("Cargo.lock");
    let mut out = Vec::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.trim().strip_prefix('='))
                    .map(|v| v.trim().trim_matches('"').to_owned())
            })
        };
        let is_registry = field("source ").is_some_and(|s| s.starts_with("registry+"));
        if let (true, Some(name), Some(version)) = (is_registry, field("name "), field("version "))
        {
            out.push((name, version));
        }
    }
    out
}

fn registry_src_dirs() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else {
        return Vec::new();
    };
    std::fs::read_dir(src)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

fn manifest_rust_version(manifest: &str) -> Option<String> {
    manifest.lines().find_map(|l| {
        l.strip_prefix("rust-version")
            .and_then(|r| r.trim().strip_prefix('='))
            .map(|v| v.trim().trim_matches('"').to_owned())
    })
}

#[test]
fn no_locked_dependency_needs_a_newer_rust() {
    let declared = version(DECLARED);
    let dirs = registry_src_dirs();
    let mut checked = 0;
    let mut newer = Vec::new();
    for (name, ver) in locked_registry_packages() {
        let manifest = dirs
            .iter()
            .map(|d| d.join(format!("{name}-{ver}")).join("Cargo.toml"))
            .find_map(|p| std::fs::read_to_string(p).ok());
        let Some(manifest) = manifest else { continue };
        checked += 1;
        if let Some(needed) = manifest_rust_version(&manifest) {
            if version(&needed) > declared {
                newer.push(format!("{name} {ver} needs {needed}"));
            }
        }
    }
    assert!(
        newer.is_empty(),
        "rust-version {DECLARED} is too old: {}",
        newer.join(", ")
    );
    eprintln!("checked {checked} locked dependencies against rust-version {DECLARED}");
}
