//! `loops supervise DIR` (hidden): a run supervisor, started by the daemon with its
//! connection on stdin ([`loops_runtime::supervisor`]). It leaves the daemon's session
//! first, so neither a terminal's Ctrl-C nor the daemon's own end reaches it.

use crate::exit::Exit;
use crate::Failure;
use clap::Args;
use std::os::fd::AsFd;

#[derive(Debug, Args)]
pub struct SuperviseArgs {
    /// The supervise dir (`<data dir>/supervise`).
    pub dir: std::path::PathBuf,
}

pub fn run(args: SuperviseArgs) -> Result<Exit, Failure> {
    // Its own session and process group: signals meant for the daemon's group or its
    // terminal stay there. Fails only for a group leader, which a spawned child is not.
    if let Err(e) = nix::unistd::setsid() {
        tracing::debug!(error = %e, "setsid failed");
    }
    super::log_to_stderr("info");
    let first = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::os::unix::net::UnixStream::from)
        .and_then(|s| s.set_nonblocking(true).map(|()| s))
        .map_err(|e| Failure::failed(format!("supervise: no daemon connection on stdin: {e}")))?;
    // Every child is spawned from this one thread: the parent-death signal holds.
    loops_runtime::executor::children_die_with_this_process();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))?;
    let served = rt.block_on(async {
        let first = tokio::net::UnixStream::from_std(first)?;
        loops_runtime::supervisor::serve(
            &args.dir,
            env!("CARGO_PKG_VERSION").to_owned(),
            Some(first),
        )
        .await
    });
    // Tasks left (a stuck pipe reader) must not hold the exit up.
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    served
        .map(|()| Exit::Success)
        .map_err(|e| Failure::failed(format!("supervisor: {e}")))
}
