//! Reading what a user points a definition at: regular files only, read with a size
//! bound (at most `limit + 1` bytes), opened without blocking, so neither a FIFO nor
//! `/dev/zero` hangs anything (`loops_store::user_file`), and paths are made absolute once, at definition
//! time, so a run never depends on the directory its runner was started from.
//! The limits themselves live in [`loops_core::limits`].

use loops_core::limits;
use loops_store::user_file::{read_bounded, UserFileError};
use std::path::{Path, PathBuf};

/// Reads `path` as UTF-8 text of at most `limit` bytes: a regular file only, opened
/// without blocking ([`loops_store::user_file`]: a FIFO, a device or a directory is
/// refused at once, `/dev/zero` included). Messages are one line and start with `what`
/// and the path (`--prompt-file /x is larger than 1 MiB`, `cannot read --prompt-file
/// /x: not a regular file (a FIFO)`).
pub fn read_text(path: &Path, limit: usize, what: &str) -> Result<String, String> {
    let shown = path.display();
    let bytes = read_bounded(path, limit).map_err(|e| match e {
        UserFileError::TooLarge { .. } => {
            format!("{what} {shown} is larger than {}", limits::size_text(limit))
        }
        other => format!("cannot read {what} {shown}: {other}"),
    })?;
    String::from_utf8(bytes).map_err(|_| format!("{what} {shown} is not UTF-8 text"))
}

/// Makes a user-typed path absolute: a leading `~` or `~/` is the user's home
/// (`$HOME`), a relative path is taken relative to `base` (when given) and then to the
/// current directory. Symlinks are kept as typed; `what` names the field in messages.
pub fn absolute_path(typed: &str, base: Option<&Path>, what: &str) -> Result<String, String> {
    let expanded: PathBuf = match typed.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            let home = std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .ok_or_else(|| format!("{what} {typed:?} starts with ~ but HOME is not set"))?;
            let rest = rest.trim_start_matches('/');
            if rest.is_empty() {
                PathBuf::from(home)
            } else {
                PathBuf::from(home).join(rest)
            }
        }
        _ => PathBuf::from(typed),
    };
    let joined = match base {
        Some(base) if expanded.is_relative() => base.join(expanded),
        _ => expanded,
    };
    let absolute = std::path::absolute(&joined)
        .map_err(|e| format!("cannot make {what} {typed:?} absolute: {e}"))?;
    absolute
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{what} {} is not valid UTF-8", absolute.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn reads_up_to_the_limit_and_refuses_more() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.md");
        std::fs::write(&path, "x".repeat(10)).unwrap();
        assert_eq!(read_text(&path, 10, "--prompt-file").unwrap().len(), 10);
        let err = read_text(&path, 9, "--prompt-file").unwrap_err();
        assert_eq!(
            err,
            format!("--prompt-file {} is larger than 9 bytes", path.display())
        );
        let err = read_text(Path::new("/dev/zero"), 1 << 20, "--prompt-file").unwrap_err();
        assert_eq!(
            err,
            "cannot read --prompt-file /dev/zero: not a regular file (a character device)"
        );
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(read_text(&path, 10, "spec")
            .unwrap_err()
            .ends_with("is not UTF-8 text"));
    }

    #[test]
    fn paths_become_absolute() {
        let base = Path::new("/srv/specs");
        assert_eq!(
            absolute_path("build", Some(base), "cwd").unwrap(),
            "/srv/specs/build"
        );
        assert_eq!(absolute_path("/tmp", Some(base), "cwd").unwrap(), "/tmp");
        let home = std::env::var("HOME").unwrap();
        assert_eq!(
            absolute_path("~/src", Some(base), "cwd").unwrap(),
            format!("{}/src", home.trim_end_matches('/'))
        );
        // `~user` is not expanded (no user database lookups); it is just relative.
        assert_eq!(
            absolute_path("~bob", Some(base), "cwd").unwrap(),
            "/srv/specs/~bob"
        );
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            absolute_path("sub", None, "cwd").unwrap(),
            here.join("sub").to_str().unwrap()
        );
    }
}
