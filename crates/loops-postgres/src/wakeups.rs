//! Wake-ups across hosts: writes that change what is due `NOTIFY loops_wake` in their
//! own transaction (so a wake-up is only ever sent for a committed change), and
//! [`watch`] keeps a connection of its own `LISTEN`ing, calling back on every
//! notification. When that connection drops it reconnects with back-off and calls back
//! once more (something may have changed while it was away); meanwhile the caller's
//! own deadlines keep it going.

use crate::session::{Conn, Db};
use loops_store::{WakeFn, WakeGuard};
use std::time::Duration;
use tokio_postgres::{AsyncMessage, Config, NoTls};

/// The channel every runner listens on.
pub(crate) const CHANNEL: &str = "loops_wake";

const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_CAP: Duration = Duration::from_secs(5);

/// Queues a wake-up on [`CHANNEL`] (`$1`): PostgreSQL sends it when the transaction
/// commits.
pub(crate) const NOTIFY: &str = "SELECT pg_notify($1, '')";

/// Queues a wake-up, sent when the caller's transaction commits: inside a
/// [`crate::session::Tx`] its statement goes with the `COMMIT`, no round trip of its
/// own.
pub(crate) async fn notify(db: &Db<'_, impl Conn>) -> crate::error::Result<()> {
    match db.deferred_wake() {
        Some(wake) => wake.set(true),
        None => {
            db.execute(NOTIFY, &[&CHANNEL]).await?;
        }
    }
    Ok(())
}

/// Starts listening on a connection of its own; the returned guard stops it.
pub(crate) fn watch(config: Config, wake: WakeFn) -> std::io::Result<WakeGuard> {
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("loops-postgres-listen".to_owned())
        .spawn(move || {
            rt.block_on(async move {
                let mut delay = RETRY_FIRST;
                loop {
                    tokio::select! {
                        _ = &mut stopped => return,
                        outcome = listen(&config, &wake) => {
                            match outcome {
                                Ok(()) => delay = RETRY_FIRST,
                                Err(e) => tracing::debug!(error = %e, "wake-up connection failed"),
                            }
                        }
                    }
                    tokio::select! {
                        _ = &mut stopped => return,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(RETRY_CAP);
                }
            });
        })?;
    Ok(Box::new(stop))
}

/// One connection's life: `LISTEN`, then a call back per notification until it drops.
async fn listen(config: &Config, wake: &WakeFn) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let mut listening = std::pin::pin!(client.batch_execute("LISTEN loops_wake"));
    let mut listened = false;
    loop {
        tokio::select! {
            message = std::future::poll_fn(|cx| connection.poll_message(cx)) => match message {
                Some(Ok(AsyncMessage::Notification(_))) => wake(),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => {
                    tracing::info!("wake-up connection closed; reconnecting");
                    return Ok(());
                }
            },
            done = &mut listening, if !listened => {
                done?;
                listened = true;
                tracing::debug!("listening for wake-ups");
                // Whatever changed while no connection listened.
                wake();
            }
        }
    }
}
