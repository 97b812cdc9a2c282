//! The API's bearer token: 32 random bytes from the OS as 64 hex characters, in
//! `http.token` in the data dir (mode 0600, written once, on the first start), compared
//! in constant time.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// File name of the token inside the data dir.
pub const TOKEN_FILE: &str = "http.token";

/// Why the token could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    #[error("cannot read the API token {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the API token {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the API token {path} is not 64 hex characters; delete it and start again for a new one"
    )]
    Malformed { path: String },
    #[error("the API token {path} can be read by other users (mode {mode:o}); `chmod 600` it")]
    Exposed { path: String, mode: u32 },
}

/// The token (its text never appears in `Debug` output).
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token([redacted])")
    }
}

impl Token {
    /// Whether `candidate` is the token, in time independent of where they differ.
    pub fn matches(&self, candidate: &str) -> bool {
        bool::from(self.0.as_bytes().ct_eq(candidate.as_bytes()))
    }

    /// The token's text (to print it for the user who asked for it).
    pub fn reveal(&self) -> &str {
        &self.0
    }
}

/// Where the token of `data_dir` is kept.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(TOKEN_FILE)
}

/// Reads the token of `data_dir`, creating it (mode 0600, never replacing a file
/// another process created meanwhile) when there is none.
pub fn load_or_create(data_dir: &Path) -> Result<Token, TokenError> {
    let file = path(data_dir);
    let shown = file.display().to_string();
    match read(&file) {
        Ok(token) => return Ok(token),
        Err(TokenError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut bytes);
    let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(&file) {
        Ok(mut f) => {
            f.write_all(format!("{text}\n").as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|source| TokenError::Write {
                    path: shown.clone(),
                    source,
                })?;
            Ok(Token(text))
        }
        // Another server created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(&file),
        Err(source) => Err(TokenError::Write {
            path: shown,
            source,
        }),
    }
}

/// The most a token file may hold: 64 hex characters and a newline, with room to spare.
const MAX_TOKEN_FILE_BYTES: usize = 1024;

fn read(file: &Path) -> Result<Token, TokenError> {
    use std::os::unix::fs::PermissionsExt;
    let shown = file.display().to_string();
    let meta = std::fs::metadata(file).map_err(|source| TokenError::Read {
        path: shown.clone(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenError::Exposed { path: shown, mode });
    }
    // A regular file of a few bytes (`loops_store::user_file`): a FIFO or a device in
    // its place neither hangs nor floods the server.
    let bytes = match loops_store::user_file::read_bounded(file, MAX_TOKEN_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(loops_store::user_file::UserFileError::Io(source)) => {
            return Err(TokenError::Read {
                path: shown.clone(),
                source,
            })
        }
        Err(_) => return Err(TokenError::Malformed { path: shown }),
    };
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(TokenError::Malformed { path: shown });
    }
    Ok(Token(text.to_owned()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn created_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = load_or_create(dir.path()).unwrap();
        assert_eq!(a.reveal(), b.reveal());
        assert_eq!(a.reveal().len(), 64);
        assert!(a.matches(b.reveal()));
        assert!(!a.matches(&b.reveal()[..63]));
        assert!(!a.matches(""));
        assert_eq!(format!("{a:?}"), "Token([redacted])");
    }

    #[test]
    fn an_exposed_or_malformed_token_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create(dir.path()).unwrap();
        let file = path(dir.path());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create(dir.path()).unwrap_err().to_string();
        assert!(err.contains("can be read by other users"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&file, "short\n").unwrap();
        let err = load_or_create(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not 64 hex characters"), "{err}");
    }
}
