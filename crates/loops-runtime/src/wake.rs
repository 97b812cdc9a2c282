//! The wake channel: a Unix datagram socket in the data dir. CLI commands that change
//! what is due (create, resume, run-now…) send one byte so an idle daemon re-plans at
//! once instead of sleeping until its old deadline. Best effort: without a daemon the
//! send fails silently.

use std::path::{Path, PathBuf};

/// Socket file name inside the data dir.
pub const SOCKET_FILE: &str = "daemon.sock";

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
