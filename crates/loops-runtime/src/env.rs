//! The one place a child's environment is built, and executable lookup on its PATH.
//!
//! Precedence, lowest first (README, "Running loops" → "Execution"): the inherited
//! environment (without [`PRIVATE_VARS`], our own settings that may hold a secret),
//! `PATH`
//! extended with the usual per-user bin dirs (a daemon started by systemd or launchd
//! has a bare PATH, while `claude`, `bun`, `cargo` installs live under `~`), the
//! target's own `env`, then the `LOOPS_*` run metadata, which nothing can override.
//! Account profiles are applied by the caller to the inherited part before this step.
//!
//! Lookup mirrors `execvp`: a name containing `/` is a path, anything else is searched
//! on the child's PATH (not the daemon's), so preflight and the executor agree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nix::unistd::{access, AccessFlags};

/// The search path used when an environment has no `PATH` (what `execvp` assumes).
pub const DEFAULT_PATH: &str = "/usr/bin:/bin";

/// Per-user bin dirs appended to PATH, relative to the home directory.
pub const HOME_BIN_DIRS: [&str; 5] = [
    ".local/bin",
    ".bun/bin",
    ".cargo/bin",
    "go/bin",
    ".npm-global/bin",
];

/// System bin dirs often missing from a service manager's PATH.
pub const SYSTEM_BIN_DIRS: [&str; 2] = ["/usr/local/bin", "/opt/homebrew/bin"];

/// Our own settings that may hold a secret, read by `loops` from its environment and
/// never passed on to a process it starts — a run, a workflow step, a notification
/// hook, the accounts helper, a provider's `--version` probe: [`build_env`] and
/// [`inherited`] leave them out. (`LOOPS_STORE` may be a `postgres://` URL with a
/// password.) A target that needs one sets it in its own `env`, which is stored with
/// the loop and redacted like every env value.
pub const PRIVATE_VARS: [&str; 1] = [crate::client::STORE_ENV];

/// Whether `name` is one of [`PRIVATE_VARS`].
pub fn is_private(name: &str) -> bool {
    PRIVATE_VARS.contains(&name)
}

/// This process's environment as a child may inherit it: `std::env::vars()` without
/// [`PRIVATE_VARS`].
pub fn inherited() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(name, _)| !is_private(name))
        .collect()
}

/// Builds a child's full environment (to be applied after clearing the inherited one).
///
/// `base` is the inherited environment (usually [`inherited`]; [`PRIVATE_VARS`] in it
/// are dropped all the same), `home` the
/// directory the per-user bin dirs hang off (`None` skips them), `target_env` the
/// target's variables and `metadata` the `LOOPS_*` variables of this run
/// (e.g. `("LOOPS_LOOP_ID", id)`). Later layers override earlier ones; each name
/// appears once, at the position where it first appeared.
pub fn build_env(
    base: impl IntoIterator<Item = (String, String)>,
    home: Option<&Path>,
    target_env: &BTreeMap<String, String>,
    metadata: &[(&str, String)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for (name, value) in base {
        if !is_private(&name) {
            set(&mut env, name, value);
        }
    }
    let path = extend_path(get(&env, "PATH").unwrap_or(DEFAULT_PATH), home);
    set(&mut env, "PATH".to_owned(), path);
    for (name, value) in target_env {
        set(&mut env, name.clone(), value.clone());
    }
    for (name, value) in metadata {
        set(&mut env, (*name).to_owned(), value.clone());
    }
    env
}

/// `path` with each of [`HOME_BIN_DIRS`] (under `home`) and [`SYSTEM_BIN_DIRS`]
/// appended unless already present. Appending keeps the user's own order winning.
pub fn extend_path(path: &str, home: Option<&Path>) -> String {
    let home_dirs = home
        .and_then(Path::to_str) // a non-UTF-8 home cannot be put in a String PATH
        .map(|home| {
            let home = home.trim_end_matches('/');
            HOME_BIN_DIRS
                .iter()
                .map(|dir| format!("{home}/{dir}"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let candidates = home_dirs
        .iter()
        .map(String::as_str)
        .chain(SYSTEM_BIN_DIRS.iter().copied());

    let mut extended = path.to_owned();
    for dir in candidates {
        let present = extended
            .split(':')
            .any(|entry| entry.trim_end_matches('/') == dir);
        if !present {
            if !extended.is_empty() {
                extended.push(':');
            }
            extended.push_str(dir);
        }
    }
    extended
}

/// The value of `name` in `env` (the last one, like `getenv` after overrides).
pub fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// Finds `program` the way the child's `execvp` would, relative to the current dir.
/// See [`resolve_executable_in`].
pub fn resolve_executable(program: &str, env: &[(String, String)]) -> Option<PathBuf> {
    resolve_executable_in(program, env, None)
}

/// Finds `program` for a child that will run in `cwd` (`None`: the current dir).
///
/// A name containing `/` is a path: it resolves if it is an executable file (relative
/// paths against `cwd`). Any other name is looked up in each entry of the `PATH` in
/// `env` ([`DEFAULT_PATH`] if unset; an empty entry means the working dir, as in
/// POSIX). Returns `None` for an empty name or when nothing executable is found.
pub fn resolve_executable_in(
    program: &str,
    env: &[(String, String)],
    cwd: Option<&Path>,
) -> Option<PathBuf> {
    if program.is_empty() {
        return None;
    }
    let in_cwd = |path: &Path| match cwd {
        Some(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_path_buf(),
    };
    if program.contains('/') {
        let path = in_cwd(Path::new(program));
        return is_executable_file(&path).then_some(path);
    }
    get(env, "PATH")
        .unwrap_or(DEFAULT_PATH)
        .split(':')
        .map(|dir| in_cwd(Path::new(if dir.is_empty() { "." } else { dir })).join(program))
        .find(|candidate| is_executable_file(candidate))
}

/// A regular file (after symlinks) that we may execute. `access(X_OK)` also honours
/// ACLs and `noexec` mounts, which mode bits alone would miss.
fn is_executable_file(path: &Path) -> bool {
    path.metadata().is_ok_and(|meta| meta.is_file()) && access(path, AccessFlags::X_OK).is_ok()
}

/// Sets `name` in place if present (keeping its position), else appends it.
fn set(env: &mut Vec<(String, String)>, name: String, value: String) {
    match env.iter_mut().find(|(key, _)| *key == name) {
        Some(entry) => entry.1 = value,
        None => env.push((name, value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn layers_override_in_order() {
        let base = pairs(&[("A", "base"), ("B", "base"), ("PATH", "/bin")]);
        let target = BTreeMap::from([
            ("B".to_owned(), "target".to_owned()),
            ("C".to_owned(), "target".to_owned()),
            ("LOOPS_RUN_ID".to_owned(), "spoofed".to_owned()),
        ]);
        let env = build_env(base, None, &target, &[("LOOPS_RUN_ID", "r1".to_owned())]);
        assert_eq!(get(&env, "A"), Some("base"));
        assert_eq!(get(&env, "B"), Some("target"));
        assert_eq!(get(&env, "C"), Some("target"));
        assert_eq!(get(&env, "LOOPS_RUN_ID"), Some("r1"));
        assert_eq!(env.iter().filter(|(k, _)| k == "LOOPS_RUN_ID").count(), 1);
    }

    #[test]
    fn private_settings_are_not_inherited_but_a_target_may_set_them() {
        let base = pairs(&[
            ("LOOPS_STORE", "postgres://u:secret@h/db"),
            ("LOOPS_DATA_DIR", "/d"),
            ("PATH", "/bin"),
        ]);
        let env = build_env(base.clone(), None, &BTreeMap::new(), &[]);
        assert_eq!(get(&env, "LOOPS_STORE"), None);
        assert_eq!(get(&env, "LOOPS_DATA_DIR"), Some("/d"));
        let own = BTreeMap::from([("LOOPS_STORE".to_owned(), "postgres://h/db".to_owned())]);
        let env = build_env(base, None, &own, &[]);
        assert_eq!(get(&env, "LOOPS_STORE"), Some("postgres://h/db"));
        assert!(inherited().iter().all(|(k, _)| !is_private(k)));
    }

    #[test]
    fn path_gets_user_dirs_once() {
        let extended = extend_path(
            "/usr/bin:/home/u/.cargo/bin/:/usr/local/bin",
            Some(Path::new("/home/u/")),
        );
        assert_eq!(
            extended,
            "/usr/bin:/home/u/.cargo/bin/:/usr/local/bin:/home/u/.local/bin:/home/u/.bun/bin:\
             /home/u/go/bin:/home/u/.npm-global/bin:/opt/homebrew/bin"
        );
        assert_eq!(extend_path(&extended, Some(Path::new("/home/u"))), extended);
    }

    #[test]
    fn missing_path_starts_from_the_default() {
        let env = build_env(Vec::new(), None, &BTreeMap::new(), &[]);
        assert_eq!(
            get(&env, "PATH"),
            Some("/usr/bin:/bin:/usr/local/bin:/opt/homebrew/bin")
        );
    }

    #[test]
    fn resolves_on_the_given_path_only() {
        let env = pairs(&[("PATH", "/nonexistent:/bin:/usr/bin")]);
        let sh = resolve_executable("sh", &env).expect("sh on /bin or /usr/bin");
        assert!(sh.ends_with("sh") && sh.is_absolute(), "{sh:?}");
        assert_eq!(
            resolve_executable("sh", &pairs(&[("PATH", "/nonexistent")])),
            None
        );
        assert_eq!(resolve_executable("", &env), None);
        assert_eq!(resolve_executable("no-such-program-xyz", &env), None);
    }

    #[test]
    fn paths_with_a_slash_are_not_searched() {
        let env = pairs(&[("PATH", "/nonexistent")]);
        assert_eq!(
            resolve_executable("/bin/sh", &env),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(resolve_executable("/bin/definitely-missing", &env), None);
        // A directory is not an executable even though its x bit is set.
        assert_eq!(resolve_executable("/bin", &env), None);
        assert_eq!(
            resolve_executable_in("./sh", &env, Some(Path::new("/bin"))),
            Some(PathBuf::from("/bin/./sh"))
        );
    }
}
