//! The server's connections: the accept loop, a cap on how many are open, and how
//! long one may stay open before it has proven itself. Someone who can reach the port
//! but has no token must not be able to keep the owner waiting by opening connections
//! and sending nothing, or half a request (issue #19: 1,100 half-open connections hit
//! the soft open-files limit of 1,024 and the owner's requests timed out).
//!
//! - A connection is *proven* once a request on it carried the token or a dashboard
//!   session ([`ConnMark::prove`], called by the request guard). One that is not
//!   proven [`Limits::unproven_lifetime`] after it was accepted is closed, whatever
//!   it is doing: sending its head byte by byte, a body, or waiting between requests.
//!   A 401 closes its connection too (`Connection: close`, set by the guard).
//! - At most [`Limits::max`] connections are open. A new one beyond that evicts the
//!   oldest unproven connection; when every open connection is proven (the owner's
//!   own), the new one is closed at once.
//! - The soft open-files limit is raised to the hard one at start
//!   ([`raise_open_files_limit`]) and the cap kept below it, so accepting never fails
//!   for want of descriptors while the store and run-now's children need some.

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// How many connections may be open, and how long an unproven one lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max: usize,
    pub unproven_lifetime: Duration,
}

/// Descriptors kept free below the open-files limit for the store, spool files and
/// the pipes of the runs this server starts.
const RESERVED_FDS: u64 = 64;

/// The cap on open connections: `configured`, but below the soft open-files limit.
pub(crate) fn cap(configured: usize) -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    let room = usize::try_from(soft.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
    configured.min(room).max(1)
}

/// Raises the soft open-files limit to the hard one (a default soft limit of 1,024
/// is what a flood of connections runs into first); the soft limit now in force.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(std::io::Error::from)?;
        return Ok(hard);
    }
    Ok(soft)
}

/// One open connection as the accept loop keeps it.
#[derive(Debug)]
struct Conn {
    proven: AtomicBool,
    evict: tokio::sync::Notify,
}

/// The connection a request came on (an extension of every request), so that the
/// guard can mark it proven.
#[derive(Debug, Clone)]
pub(crate) struct ConnMark(Arc<Conn>);

impl ConnMark {
    /// The connection carried the token (or a session): it may stay open.
    pub fn prove(&self) {
        self.0.proven.store(true, Ordering::Relaxed);
    }
}

/// The open connections, oldest first (ids only grow).
#[derive(Default)]
struct Open {
    next: u64,
    conns: BTreeMap<u64, Arc<Conn>>,
}

impl Open {
    /// Room for a new connection: evicts the oldest unproven one when full; `None`
    /// when full of proven ones.
    fn admit(&mut self, max: usize) -> Option<(u64, Arc<Conn>)> {
        if self.conns.len() >= max {
            let victim = self
                .conns
                .iter()
                .find(|(_, c)| !c.proven.load(Ordering::Relaxed))
                .map(|(id, _)| *id)?;
            if let Some(c) = self.conns.remove(&victim) {
                c.evict.notify_one();
            }
        }
        let id = self.next;
        self.next += 1;
        let conn = Arc::new(Conn {
            proven: AtomicBool::new(false),
            evict: tokio::sync::Notify::new(),
        });
        self.conns.insert(id, Arc::clone(&conn));
        Some((id, conn))
    }
}

type Shared = Arc<Mutex<Open>>;

fn lock(open: &Shared) -> std::sync::MutexGuard<'_, Open> {
    open.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Accepts and serves connections until `shutdown` resolves; then stops accepting,
/// lets every connection finish its request in flight (graceful), and returns once
/// they are all closed.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let open: Shared = Arc::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut failing = false;
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    failing = false;
                    stream
                }
                Err(e) => {
                    // Out of descriptors or memory, or a connection reset before it
                    // was accepted: say so once, and let the table drain a little.
                    if !failing {
                        tracing::warn!(error = %e, "cannot accept a connection");
                    }
                    failing = true;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let Some((id, conn)) = lock(&open).admit(limits.max) else {
            // Every slot is a proven connection of the owner's: this one waits for
            // none of them.
            drop(stream);
            continue;
        };
        tasks.spawn(serve_one(
            stream,
            router.clone(),
            id,
            conn,
            Arc::clone(&open),
            limits,
            stop_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
}

async fn serve_one(
    stream: TcpStream,
    router: Router,
    id: u64,
    conn: Arc<Conn>,
    open: Shared,
    limits: Limits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + limits.unproven_lifetime;
    let mark = ConnMark(Arc::clone(&conn));
    let service = tower::ServiceExt::map_request(router, move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(mark.clone());
        req.map(axum::body::Body::new)
    });
    // No header-read timeout of hyper's: an unproven connection has the deadline
    // below, and a proven one (the owner's) may idle between requests.
    let http = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::pin!(http);
    let mut checked = false;
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = http.as_mut() => break,
            () = conn.evict.notified() => break,
            () = tokio::time::sleep_until(deadline), if !checked => {
                if !conn.proven.load(Ordering::Relaxed) {
                    break;
                }
                checked = true;
            }
            _ = stop.changed(), if !stopping => {
                http.as_mut().graceful_shutdown();
                stopping = true;
            }
        }
    }
    lock(&open).conns.remove(&id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_evicts_the_oldest_unproven_connection() {
        let mut open = Open::default();
        let (a, ca) = open.admit(3).unwrap_or_else(|| panic!("room"));
        let (_, cb) = open.admit(3).unwrap_or_else(|| panic!("room"));
        let (_, _cc) = open.admit(3).unwrap_or_else(|| panic!("room"));
        ca.proven.store(true, Ordering::Relaxed);
        assert!(
            open.admit(3).is_some(),
            "the oldest unproven one (b) makes room"
        );
        assert!(!open.conns.values().any(|c| Arc::ptr_eq(c, &cb)));
        assert!(open.conns.contains_key(&a), "a proven connection stays");
        for c in open.conns.values() {
            c.proven.store(true, Ordering::Relaxed);
        }
        assert!(open.admit(3).is_none(), "full of proven connections");
        assert_eq!(open.conns.len(), 3);
    }

    #[test]
    fn the_cap_stays_below_the_open_files_limit() {
        assert!(cap(usize::MAX) < usize::MAX);
        assert_eq!(cap(10), 10);
        assert_eq!(cap(0), 1);
    }
}
