//! The wake channel: a Unix datagram socket in the data dir. CLI commands that change
//! what is due (create, resume, run-now…) send one byte so an idle daemon re-plans at
//! once instead of sleeping until its old deadline. Best effort: without a daemon the
//! send fails silently.
//!
//! What the daemon accepts: any datagram, read into a fixed buffer of [`MAX_WAKE_BYTES`]
//! (longer ones are truncated by the kernel) and then ignored — its only effect is an
//! early scheduling pass, which the daemon would run at its next deadline anyway. The
//! socket is created owner-only (0600) inside the owner-only data dir, so other users
//! cannot even connect to it.

use std::path::{Path, PathBuf};

/// Socket file name inside the data dir.
pub const SOCKET_FILE: &str = "daemon.sock";

/// The most of a wake datagram the daemon reads; the contents are never interpreted.
pub const MAX_WAKE_BYTES: usize = 64;

/// Path of the wake socket for `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_FILE)
}

/// Pokes the daemon of `data_dir`, if one listens. Never blocks, never fails.
pub fn poke(data_dir: &Path) {
    let path = socket_path(data_dir);
    if !path.exists() {
        return;
    }
    if let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() {
        let _ = sock.set_nonblocking(true);
        let _ = sock.send_to(b"w", &path);
    }
}

/// The daemon's end of the wake channel. Dropping it removes the socket file, but only
/// while the path still names this socket: a daemon that took over the store (after
/// this one's database was deleted, say) has bound its own there.
#[derive(Debug)]
pub struct WakeListener {
    socket: tokio::net::UnixDatagram,
    path: PathBuf,
    identity: Option<(u64, u64)>,
}

impl WakeListener {
    /// Binds the wake socket of `data_dir` (replacing a leftover one) with mode 0600.
    /// Needs a tokio runtime.
    pub fn bind(data_dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let path = socket_path(data_dir);
        let _ = std::fs::remove_file(&path);
        let socket = tokio::net::UnixDatagram::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Self {
            socket,
            identity: file_identity(&path),
            path,
        })
    }

    /// The bound socket; read it into a buffer of [`MAX_WAKE_BYTES`].
    pub fn socket(&self) -> &tokio::net::UnixDatagram {
        &self.socket
    }

    /// The socket file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WakeListener {
    fn drop(&mut self) {
        if self.identity.is_some() && file_identity(&self.path) == self.identity {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `(device, inode)` of `path`, following symlinks; `None` when it cannot be read.
pub(crate) fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_data_dir_files_are_listed_as_private() {
        for name in [
            SOCKET_FILE,
            crate::daemon::PID_FILE,
            crate::daemon::LOG_FILE,
        ] {
            assert!(loops_store::PRIVATE_FILES.contains(&name), "{name}");
        }
    }

    #[tokio::test]
    async fn listener_is_owner_only_and_removes_only_its_own_socket() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = WakeListener::bind(dir.path()).unwrap();
        let mode = std::fs::metadata(first.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A successor binds its own socket at the same path; the first one's drop
        // must leave it alone.
        let second = WakeListener::bind(dir.path()).unwrap();
        drop(first);
        assert!(second.path().exists());
        poke(dir.path());
        let mut buf = [0u8; MAX_WAKE_BYTES];
        let n = second.socket().recv(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"w");
        drop(second);
        assert!(!socket_path(dir.path()).exists());
    }
}
