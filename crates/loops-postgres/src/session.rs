//! The store's own runtime thread and its connection: every [`crate::PgStore`] call is
//! a job sent to that thread, which runs it on its connection and hands the answer
//! back over a channel. The caller's thread only waits on that channel — it never
//! enters a runtime — so the synchronous `Store` trait is safe to call from anywhere,
//! including the daemon's own tokio worker threads.
//!
//! The connection is opened on the first job and again after it broke (the server
//! restarted, the network went away): a job that meets a dead connection fails with a
//! transient I/O error, and the next one reconnects. A job that takes longer than
//! [`CALL_TIMEOUT`] is dropped and its connection closed (the server rolls back what it
//! had begun), so a cut-off network never hangs a caller for long.

use crate::codec::{new_id, ID_ATTEMPTS};
use crate::error::{io, Error, Result, StoreResult};
use crate::events::EventRows;
use loops_core::Instant;
use loops_store::{Fence, StoreError};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, GenericClient, NoTls, Row, SimpleQueryMessage, Statement};

/// A future borrowing the session, run on the store's thread (never sent anywhere).
pub(crate) type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// One call of the store, run on its thread.
pub(crate) type Job = Box<dyn for<'s> FnOnce(&'s mut Session) -> LocalBoxFuture<'s, ()> + Send>;

/// Longest one call may take (connecting included) before it fails as an I/O error.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Prepared statements kept per connection; the cache is cleared past this.
const STATEMENT_CACHE: usize = 512;

/// Messages this process sent to a PostgreSQL server and waited for: statements,
/// preparations, `BEGIN` and `COMMIT` (see [`round_trips`]).
static ROUND_TRIPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Round trips to the server made by every store of this process so far (each
/// statement, preparation, `BEGIN` and `COMMIT` waits for its answer): what the
/// benchmarks report per run.
pub fn round_trips() -> u64 {
    ROUND_TRIPS.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn count_round_trip() {
    ROUND_TRIPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// `n` statements (each counted) were sent to the server together and their answers
/// awaited at once: one round trip, not `n`.
pub(crate) fn sent_together(n: u64) {
    ROUND_TRIPS.fetch_sub(n.saturating_sub(1), std::sync::atomic::Ordering::Relaxed);
}

/// Two statements that do not depend on one another, sent to the server together and
/// answered together: one round trip for both. In no set order (a statement that
/// prepares first is sent later): statements that must run in order go through
/// [`Db::query_all`]. Each sends one statement.
pub(crate) async fn together<A, B>(
    a: impl Future<Output = A>,
    b: impl Future<Output = B>,
) -> (A, B) {
    let both = tokio::join!(a, b);
    sent_together(2);
    both
}

/// A request [`send_now`] sent: answered at once, or its answer still to await.
pub(crate) enum Sent<F: Future> {
    Answered(F::Output),
    Awaiting(F),
}

impl<F: Future + Unpin> Sent<F> {
    pub(crate) async fn answer(self) -> F::Output {
        match self {
            Sent::Answered(out) => out,
            Sent::Awaiting(request) => request.await,
        }
    }
}

/// Polls `request` once, which sends it: tokio-postgres writes a request to the
/// connection on its first poll, in the order requests are made. What follows is sent
/// after it, and its answer is read later ([`Sent::answer`]): one round trip for both.
pub(crate) async fn send_now<F: Future + Unpin>(mut request: F) -> Sent<F> {
    match std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut request).poll(cx))).await {
        Poll::Ready(out) => Sent::Answered(out),
        Poll::Pending => Sent::Awaiting(request),
    }
}

/// A statement [`Db::send_all`] sent, its rows to come.
pub(crate) type Request<'s> =
    Pin<Box<dyn Future<Output = std::result::Result<Vec<Row>, tokio_postgres::Error>> + Send + 's>>;

/// The rows of each of `sent`, in order; the first that failed is the error.
async fn answers(sent: Vec<Sent<Request<'_>>>) -> Result<Vec<Vec<Row>>> {
    let mut rows = Vec::with_capacity(sent.len());
    let mut failed = None;
    for request in sent {
        match request.answer().await {
            Ok(answer) => rows.push(answer),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(rows),
    }
}

/// A transaction's `BEGIN` and fence check: one message ([`crate::lease::opening_sql`]).
pub(crate) struct Opening {
    sql: String,
    token: Option<i64>,
    /// The epoch [`Session::begin`] told the caller before the answer, if it did.
    epoch: Option<Option<i64>>,
}

/// Where a transaction's opening stands.
enum OpeningState {
    /// To go ahead of the transaction's first statement.
    Unsent(Opening),
    /// Sent, its answer still to read.
    Sent,
    /// `BEGIN` done and the fence, if any, live.
    Passed,
    /// The fence was lost (`lost`), or the opening failed: the transaction may not
    /// commit.
    Refused { lost: bool },
}

/// A transaction's opening, as its statements see it.
#[derive(Clone, Copy)]
struct Opened<'a> {
    state: &'a RefCell<OpeningState>,
    fence_passed: &'a Cell<Option<(i64, Option<i64>)>>,
}

/// The answer to an [`Opening`] that [`open`] sent.
type OpeningAnswer = (
    Opening,
    std::result::Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>,
);

/// Sends `opening` (on its first poll) and reads its answer.
fn open<C: GenericClient>(c: &C, opening: Opening) -> LocalBoxFuture<'_, OpeningAnswer> {
    Box::pin(async move {
        let answer = c.client().simple_query(&opening.sql).await;
        (opening, answer)
    })
}

/// The connection of one store (opened lazily, reopened after it broke) and its
/// prepared statements.
pub(crate) struct Session {
    config: Config,
    client: Option<Client>,
    cache: StmtCache,
    /// A transaction was begun on the connection and not yet committed or rolled back.
    in_transaction: Cell<bool>,
    /// The last fence a transaction on this connection saw pass, and the epoch it gave
    /// ([`Session::begin`]).
    fence_passed: Cell<Option<(i64, Option<i64>)>>,
}

/// Prepared statements by SQL text, for the connection they were prepared on.
#[derive(Default)]
pub(crate) struct StmtCache(RefCell<HashMap<String, Statement>>);

impl Session {
    pub(crate) fn new(config: Config) -> Self {
        Self {
            config,
            client: None,
            cache: StmtCache::default(),
            in_transaction: Cell::new(false),
            fence_passed: Cell::new(None),
        }
    }

    /// The open connection, opening one when there is none or it closed.
    pub(crate) async fn client(&mut self) -> Result<&mut Client> {
        // A transaction a call left open (its rollback failed; a call dropped mid-way
        // times out, which disconnects) must not take the next call's statements.
        if self.in_transaction.get() {
            self.disconnect();
        }
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            self.cache.0.borrow_mut().clear();
            let (client, connection) = self.config.connect(NoTls).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "PostgreSQL connection closed");
                }
            });
            self.client = Some(client);
        }
        match self.client.as_mut() {
            Some(client) => Ok(client),
            None => Err(io("no PostgreSQL connection").into()),
        }
    }

    /// Reads on the connection (each statement its own snapshot).
    pub(crate) async fn reader(&mut self) -> Result<Db<'_, Client>> {
        self.client().await?;
        match &self.client {
            Some(client) => Ok(Db::new(client, &self.cache)),
            None => Err(io("no PostgreSQL connection").into()),
        }
    }

    /// A transaction (READ COMMITTED) on the connection, and the answer of its `fence`
    /// check (the runner's epoch, `None` for none or the daemon lease's) made inside it.
    ///
    /// `BEGIN` and the fence's check are one message ([`crate::lease::opening_sql`]),
    /// and the check is the transaction's first statement. Where the answer is already
    /// known — no fence, or a fence this connection saw pass, since a token is a
    /// runner's epoch or the daemon lease's for good (both come from one counter) and
    /// only whether it is still live is left to learn — the message is not sent here:
    /// it goes ahead of the transaction's first statements, in their round trip, and
    /// its answer is read before theirs ([`Db`]). A fence found lost then fails that
    /// statement and the transaction, which never commits ([`Tx::commit`]). Otherwise
    /// it is sent and answered here, one round trip.
    ///
    /// The caller ends the transaction with [`Tx::commit`] or [`Tx::rollback`] (the
    /// fence's error included).
    pub(crate) async fn begin(
        &mut self,
        fence: Option<&(Fence, Instant)>,
    ) -> Result<(Tx<'_>, Result<Option<i64>>)> {
        self.client().await?;
        let Some(client) = self.client.as_ref() else {
            return Err(io("no PostgreSQL connection").into());
        };
        let token = fence.map(|(f, _)| loops_store::codec::sat_i64(f.token));
        let known = match token {
            None => Some(None),
            Some(token) => self
                .fence_passed
                .get()
                .and_then(|(passed, epoch)| (passed == token).then_some(epoch)),
        };
        let opening = Opening {
            sql: crate::lease::opening_sql(token),
            token,
            epoch: known,
        };
        let tx = Tx {
            client,
            cache: &self.cache,
            open: &self.in_transaction,
            fence_passed: &self.fence_passed,
            opening: RefCell::new(OpeningState::Unsent(opening)),
            events: RefCell::default(),
            wake: Cell::new(false),
        };
        self.in_transaction.set(true);
        let fenced = match known {
            Some(epoch) => Ok(epoch),
            None => tx.open_now().await,
        };
        Ok((tx, fenced))
    }

    /// Drops the connection (after a call timed out mid-way).
    pub(crate) fn disconnect(&mut self) {
        self.client = None;
        self.fence_passed.set(None);
        self.cache.0.borrow_mut().clear();
        self.in_transaction.set(false);
    }

    /// Whether the connection broke during the last call.
    pub(crate) fn broken(&self) -> bool {
        self.client.as_ref().is_some_and(Client::is_closed)
    }
}

/// A transaction [`Session::begin`] opened on the session's connection.
pub(crate) struct Tx<'a> {
    client: &'a Client,
    cache: &'a StmtCache,
    open: &'a Cell<bool>,
    fence_passed: &'a Cell<Option<(i64, Option<i64>)>>,
    /// Its `BEGIN` and fence check, sent or still to send.
    opening: RefCell<OpeningState>,
    events: RefCell<EventRows>,
    /// A write asked to wake the other runners ([`crate::wakeups::notify`]).
    wake: Cell<bool>,
}

impl Tx<'_> {
    /// Statements in the transaction.
    pub(crate) fn db(&self) -> Db<'_, Client> {
        Db {
            c: self.client,
            cache: self.cache,
            opening: Some(Opened {
                state: &self.opening,
                fence_passed: self.fence_passed,
            }),
            events: Some(&self.events),
            wake: Some(&self.wake),
        }
    }

    /// Sends the opening still to send, alone, and reads its answer: one round trip.
    async fn open_now(&self) -> Result<Option<i64>> {
        let db = self.db();
        let Some(opening) = db.unsent_opening() else {
            return Ok(None);
        };
        count_round_trip();
        let answer = open(self.client, opening).await;
        db.opened(answer)
    }

    /// Writes the events the transaction appended, queues its wake-up, and commits: the
    /// statements and the `COMMIT` go to the server together, one round trip, so the
    /// event log's lock (taken by the insert) is held for no round trip of ours. A
    /// statement that fails aborts the transaction, which its `COMMIT` then rolls back.
    pub(crate) async fn commit(self) -> Result<()> {
        // No statement took the opening with it: it goes now, and the fence is known to
        // have passed before the `COMMIT` is sent.
        if let Err(e) = self.open_now().await {
            self.rollback().await;
            return Err(e);
        }
        // The opening failed under a statement whose error the caller set aside, or a
        // statement that took it was dropped before its answer.
        let refused = match *self.opening.borrow() {
            OpeningState::Passed => None,
            OpeningState::Refused { lost: true } => Some(StoreError::LeaseLost),
            _ => Some(io("the transaction's BEGIN or fence check did not succeed")),
        };
        if let Some(refused) = refused {
            self.rollback().await;
            return Err(refused.into());
        }
        let rows = self.events.take();
        let params = rows.params();
        let channel: [&(dyn ToSql + Sync); 1] = [&crate::wakeups::CHANNEL];
        let mut statements: Vec<(&str, &Params<'_>)> = Vec::with_capacity(2);
        if !rows.is_empty() {
            statements.push((crate::events::INSERT_EVENTS, &params));
        }
        if self.wake.get() {
            statements.push((crate::wakeups::NOTIFY, &channel));
        }
        let db = Db::new(self.client, self.cache);
        let prepared = match db.prepare_all(&statements).await {
            Ok(prepared) => prepared,
            Err(e) => {
                self.rollback().await;
                return Err(e);
            }
        };
        // The statements are sent first, in order; the `COMMIT` after them, in the same
        // round trip.
        let mut sent = db.send_all(&prepared, &statements).await;
        match sent.pop() {
            // It failed before it was sent (its parameters did not encode).
            Some(Sent::Answered(Err(e))) => {
                self.rollback().await;
                return Err(e.into());
            }
            Some(last) => sent.push(last),
            None => {}
        }
        if sent.is_empty() {
            count_round_trip();
        }
        let (answered, committed) =
            tokio::join!(answers(sent), self.client.batch_execute("COMMIT"));
        committed?;
        self.open.set(false);
        answered.map(|_| ())
    }

    /// Rolls back; a connection that cannot do that is dropped before the next call.
    pub(crate) async fn rollback(self) {
        if let OpeningState::Unsent(_) = *self.opening.borrow() {
            // Nothing was sent: there is no transaction to end.
            self.open.set(false);
            return;
        }
        count_round_trip();
        if self.client.batch_execute("ROLLBACK").await.is_ok() {
            self.open.set(false);
        }
    }
}

/// What a [`Db`] runs its statements on: a connection or a transaction.
pub(crate) trait Conn: GenericClient + Sync {}

impl<C: GenericClient + Sync> Conn for C {}

/// Statements on a connection or transaction, prepared once per connection.
pub(crate) struct Db<'a, C> {
    pub(crate) c: &'a C,
    cache: &'a StmtCache,
    /// In a [`Tx`]: its opening, which the first statement sent takes with it.
    opening: Option<Opened<'a>>,
    /// Where a transaction keeps the events it appends until its `COMMIT`.
    events: Option<&'a RefCell<EventRows>>,
    /// Where a transaction notes that its `COMMIT` is to wake the other runners.
    wake: Option<&'a Cell<bool>>,
}

/// Statement parameters.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

impl<'a, C: GenericClient + Sync> Db<'a, C> {
    pub(crate) fn new(c: &'a C, cache: &'a StmtCache) -> Self {
        Self {
            c,
            cache,
            opening: None,
            events: None,
            wake: None,
        }
    }

    /// The events appended so far in this transaction, to be written with its `COMMIT`
    /// (`None` outside a [`Tx`]: they are written at once).
    pub(crate) fn deferred_events(&self) -> Option<&'a RefCell<EventRows>> {
        self.events
    }

    /// Where this transaction notes a wake-up to send with its `COMMIT` (`None` outside
    /// a [`Tx`]: it is sent at once).
    pub(crate) fn deferred_wake(&self) -> Option<&'a Cell<bool>> {
        self.wake
    }

    /// The transaction's opening if no statement took it yet (it is then marked sent).
    fn unsent_opening(&self) -> Option<Opening> {
        let opened = self.opening?;
        let mut state = opened.state.borrow_mut();
        match std::mem::replace(&mut *state, OpeningState::Sent) {
            OpeningState::Unsent(opening) => Some(opening),
            other => {
                *state = other;
                None
            }
        }
    }

    /// Reads the opening's answer: the epoch, or why the transaction may not go on.
    fn opened(&self, (opening, answer): OpeningAnswer) -> Result<Option<i64>> {
        let epoch = answer
            .map_err(Error::from)
            .and_then(|answer| crate::lease::opened(opening.token, &answer))
            .and_then(|epoch| match opening.epoch {
                Some(told) if told != epoch => Err(Error::decode(
                    "the fence check answered another kind of lease than it had before",
                )),
                _ => Ok(epoch),
            });
        if let Some(opened) = self.opening {
            match &epoch {
                Ok(epoch) => {
                    opened.state.replace(OpeningState::Passed);
                    if let Some(token) = opening.token {
                        opened.fence_passed.set(Some((token, *epoch)));
                    }
                }
                Err(e) => {
                    let lost = matches!(e, Error::Store(StoreError::LeaseLost));
                    opened.state.replace(OpeningState::Refused { lost });
                }
            }
        }
        epoch
    }

    /// Sends `request` (not polled yet), after the transaction's opening when that is
    /// still to send: both in one round trip, the opening's answer read first, so a
    /// fence found lost is this statement's error.
    async fn after_opening<F: Future + Unpin>(&self, request: F) -> Result<F::Output> {
        let Some(opening) = self.unsent_opening() else {
            return Ok(request.await);
        };
        let opening = send_now(open(self.c, opening)).await;
        let request = send_now(request).await;
        let epoch = self.opened(opening.answer().await);
        let out = request.answer().await;
        epoch.map(|_| out)
    }

    /// `sql` prepared on the connection (once; the cache keeps it).
    pub(crate) async fn prepare(&self, sql: &str) -> Result<Statement> {
        if let Some(st) = self.cache.0.borrow().get(sql) {
            return Ok(st.clone());
        }
        count_round_trip();
        let st = self.c.prepare(sql).await?;
        let mut cache = self.cache.0.borrow_mut();
        if cache.len() >= STATEMENT_CACHE {
            cache.clear();
        }
        cache.insert(sql.to_owned(), st.clone());
        Ok(st)
    }

    pub(crate) async fn query(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>> {
        let st = self.prepare(sql).await?;
        count_round_trip();
        Ok(self.after_opening(self.c.query(&st, params)).await??)
    }

    /// Each statement's rows, in order: every statement is prepared first, then all
    /// are sent at once and run in the order given — one round trip, where each may
    /// depend on what the ones before it wrote or locked. The first statement that
    /// fails is the error.
    pub(crate) async fn query_all(
        &self,
        statements: &[(&str, &Params<'_>)],
    ) -> Result<Vec<Vec<Row>>> {
        let prepared = self.prepare_all(statements).await?;
        let opening = match self.unsent_opening() {
            Some(opening) => Some(send_now(open(self.c, opening)).await),
            None => None,
        };
        let sent = self.send_all(&prepared, statements).await;
        if let Some(opening) = opening {
            if sent.is_empty() {
                count_round_trip();
            }
            self.opened(opening.answer().await)?;
        }
        answers(sent).await
    }

    /// `statements` prepared (each once; the cache keeps them), for [`Db::send_all`].
    async fn prepare_all(&self, statements: &[(&str, &Params<'_>)]) -> Result<Vec<Statement>> {
        let mut prepared = Vec::with_capacity(statements.len());
        for (sql, _) in statements {
            prepared.push(self.prepare(sql).await?);
        }
        Ok(prepared)
    }

    /// Sends `prepared` (from [`Db::prepare_all`]) with `statements`' parameters, in
    /// order, without waiting for an answer: one round trip. One that failed before it
    /// was sent (its parameters did not encode) ends the list: what depends on it is
    /// not sent either.
    async fn send_all<'s>(
        &'s self,
        prepared: &'s [Statement],
        statements: &'s [(&str, &Params<'_>)],
    ) -> Vec<Sent<Request<'s>>> {
        let mut sent = Vec::with_capacity(statements.len());
        for (st, (_, params)) in prepared.iter().zip(statements) {
            let request = send_now(self.c.query(st, params)).await;
            let unsent = matches!(request, Sent::Answered(Err(_)));
            sent.push(request);
            if unsent {
                break;
            }
        }
        if !sent.is_empty() {
            count_round_trip();
        }
        sent
    }

    /// [`Db::query_all`] of a fixed number of statements.
    pub(crate) async fn query_each<const N: usize>(
        &self,
        statements: [(&str, &Params<'_>); N],
    ) -> Result<[Vec<Row>; N]> {
        self.query_all(&statements)
            .await?
            .try_into()
            .map_err(|_| Error::decode("a statement's answer went missing"))
    }

    pub(crate) async fn query_opt(&self, sql: &str, params: &Params<'_>) -> Result<Option<Row>> {
        let st = self.prepare(sql).await?;
        count_round_trip();
        Ok(self.after_opening(self.c.query_opt(&st, params)).await??)
    }

    /// The row `sql` returns, if any, decoded by `decode`.
    pub(crate) async fn query_opt_as<T>(
        &self,
        sql: &str,
        params: &Params<'_>,
        decode: fn(&Row) -> Result<T>,
    ) -> Result<Option<T>> {
        self.query_opt(sql, params)
            .await?
            .as_ref()
            .map(decode)
            .transpose()
    }

    /// Every row `sql` returns, decoded by `decode`.
    pub(crate) async fn query_as<T>(
        &self,
        sql: &str,
        params: &Params<'_>,
        decode: fn(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.query(sql, params).await?.iter().map(decode).collect()
    }

    /// Runs `sql` — an insert of a new row whose `$1` is its id, then `params`, ending in
    /// `ON CONFLICT (id) DO NOTHING RETURNING …` — with fresh ids until one is free: the
    /// id-collision retry every such insert needs, once. `what` names the row.
    pub(crate) async fn insert_with_new_id(
        &self,
        sql: &str,
        params: &Params<'_>,
        what: &str,
    ) -> Result<Row> {
        for _ in 0..ID_ATTEMPTS {
            let id = new_id();
            let mut with_id: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(params.len() + 1);
            with_id.push(&id);
            with_id.extend_from_slice(params);
            if let Some(row) = self.query_opt(sql, &with_id).await? {
                return Ok(row);
            }
        }
        Err(Error::ids_exhausted(what))
    }

    pub(crate) async fn query_one(&self, sql: &str, params: &Params<'_>) -> Result<Row> {
        let st = self.prepare(sql).await?;
        count_round_trip();
        Ok(self.after_opening(self.c.query_one(&st, params)).await??)
    }

    pub(crate) async fn execute(&self, sql: &str, params: &Params<'_>) -> Result<u64> {
        let st = self.prepare(sql).await?;
        count_round_trip();
        Ok(self.after_opening(self.c.execute(&st, params)).await??)
    }

    /// Statements without parameters or results (DDL, `SAVEPOINT`).
    pub(crate) async fn batch(&self, sql: &str) -> Result<()> {
        count_round_trip();
        Ok(self.after_opening(self.c.batch_execute(sql)).await??)
    }
}

/// Starts the thread that runs `config`'s store's jobs; it ends when every sender is
/// dropped.
pub(crate) fn spawn(
    config: Config,
    name: String,
) -> StoreResult<tokio::sync::mpsc::UnboundedSender<Job>> {
    let (jobs, mut queue) = tokio::sync::mpsc::unbounded_channel::<Job>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| io(format!("cannot start the PostgreSQL runtime: {e}")))?;
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            rt.block_on(async move {
                let mut session = Session::new(config);
                while let Some(job) = queue.recv().await {
                    let call = job(&mut session);
                    if tokio::time::timeout(CALL_TIMEOUT, call).await.is_err() {
                        // The caller got its error (the answer channel closed); what the
                        // call had begun rolls back with the connection.
                        session.disconnect();
                    } else if session.broken() {
                        session.disconnect();
                    }
                }
            });
        })
        .map_err(|e| io(format!("cannot start the PostgreSQL thread: {e}")))?;
    Ok(jobs)
}

/// Sends `job` to the store's thread and waits for its answer.
pub(crate) fn call<T: Send + 'static>(
    jobs: &tokio::sync::mpsc::UnboundedSender<Job>,
    job: impl for<'s> FnOnce(&'s mut Session) -> LocalBoxFuture<'s, Result<T>> + Send + 'static,
) -> StoreResult<T> {
    let (done, answer) = std::sync::mpsc::sync_channel::<Result<T>>(1);
    let boxed: Job = Box::new(move |s: &mut Session| {
        Box::pin(async move {
            let out = job(s).await;
            let _ = done.send(out);
        })
    });
    jobs.send(boxed)
        .map_err(|_| io("the PostgreSQL store's thread has stopped"))?;
    match answer.recv() {
        Ok(out) => out.map_err(Error::into),
        Err(_) => Err(io(format!(
            "PostgreSQL call did not finish within {} s (connection closed)",
            CALL_TIMEOUT.as_secs()
        ))),
    }
}

/// Held by each of this crate's unit tests that talk to a server: the round-trip
/// counter is the process's, and a test that counts must be alone.
#[cfg(test)]
static SERVER_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A unit test's server: a new database (`url`) and a runtime to reach it with, the
/// test alone with it ([`SERVER_TESTS`]).
#[cfg(test)]
pub(crate) struct TestServer {
    _alone: std::sync::MutexGuard<'static, ()>,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) url: String,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
impl TestServer {
    /// `None` without a server (a failure under `CI=true`: `PgCluster::shared`).
    pub(crate) fn new() -> Option<Self> {
        let alone = SERVER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let cluster = loops_testkit::PgCluster::shared()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Some(Self {
            _alone: alone,
            rt,
            url: cluster.database(),
        })
    }

    /// A plain connection with `config`'s settings (the URL's, without one), served
    /// while the test runs its calls on [`TestServer::rt`].
    pub(crate) fn client(&self, config: Option<&Config>) -> tokio_postgres::Client {
        let config = config.cloned().unwrap_or_else(|| self.url.parse().unwrap());
        let (client, connection) = self
            .rt
            .block_on(config.connect(tokio_postgres::NoTls))
            .unwrap();
        self.rt.spawn(connection);
        client
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// `query_all` sends its statements in the order given even when a later one is
    /// prepared already and an earlier one is not (tokio's `join!` takes turns, and a
    /// statement that prepares first is sent later: the recorder's batch once had its
    /// finalizations run before its pid records that way).
    #[test]
    fn statements_sent_together_run_in_the_order_given() {
        let Some(server) = TestServer::new() else {
            return;
        };
        let (rt, config) = (&server.rt, server.url.parse::<Config>().unwrap());
        rt.block_on(async {
            let mut session = Session::new(config);
            let db = session.reader().await.unwrap();
            db.batch("CREATE TEMP TABLE written (n int)").await.unwrap();
            let count = "SELECT count(*)::bigint FROM written";
            // The read is prepared already; the insert is not.
            db.query(count, &[]).await.unwrap();
            let before = round_trips();
            let [inserted, counted] = db
                .query_each([
                    ("INSERT INTO written VALUES (1) RETURNING n", &[]),
                    (count, &[]),
                ])
                .await
                .unwrap();
            assert_eq!(inserted.len(), 1);
            assert_eq!(
                counted[0].get::<_, i64>(0),
                1,
                "the read ran after the insert"
            );
            // Then both are prepared: one round trip for the two.
            let before_warm = round_trips();
            assert_eq!(
                before_warm - before,
                2,
                "a preparation, then the two together"
            );
            db.query_each([
                ("INSERT INTO written VALUES (1) RETURNING n", &[]),
                (count, &[]),
            ])
            .await
            .unwrap();
            assert_eq!(round_trips() - before_warm, 1);

            // A statement whose parameters cannot be encoded is not sent, nor is
            // anything after it.
            let wrong: i64 = 1;
            let failed = db
                .query_each([
                    ("SELECT $1::int4", &[&wrong]),
                    ("INSERT INTO written VALUES (7) RETURNING n", &[]),
                ])
                .await;
            assert!(failed.is_err());
            let sevens = db
                .query("SELECT count(*)::bigint FROM written WHERE n = 7", &[])
                .await
                .unwrap();
            assert_eq!(
                sevens[0].get::<_, i64>(0),
                0,
                "the insert after it was sent"
            );
        });
    }

    /// A fence this connection saw pass goes with the transaction's first statement;
    /// once its lease is gone, the transaction cannot commit even when the caller sets
    /// that statement's error aside, and what it wrote is rolled back.
    #[test]
    fn a_transaction_whose_fence_was_lost_never_commits() {
        let Some(server) = TestServer::new() else {
            return;
        };
        let (rt, config) = (&server.rt, server.url.parse::<Config>().unwrap());
        rt.block_on(async {
            let mut session = Session::new(config);
            let db = session.reader().await.unwrap();
            db.batch(
                "CREATE TABLE runners (epoch bigint, released_at bigint, expires_at bigint); \
                 CREATE TABLE daemon_lease (id int, token bigint); \
                 CREATE TABLE written (n int); \
                 INSERT INTO runners VALUES (5, NULL, 9223372036854775807)",
            )
            .await
            .unwrap();
            let fence = (Fence { token: 5 }, chrono::Utc::now());
            let write = "INSERT INTO written VALUES (1)";

            // Unknown: checked on its own, then known.
            let (tx, fenced) = session.begin(Some(&fence)).await.unwrap();
            assert_eq!(fenced.unwrap(), Some(5));
            tx.db().execute(write, &[]).await.unwrap();
            tx.commit().await.unwrap();
            // Known: one round trip for the opening and the insert.
            let (tx, fenced) = session.begin(Some(&fence)).await.unwrap();
            assert_eq!(fenced.unwrap(), Some(5));
            let before = round_trips();
            tx.db().execute(write, &[]).await.unwrap();
            assert_eq!(round_trips() - before, 1);
            tx.commit().await.unwrap();
            // Known, with nothing sent before the commit: the opening goes first.
            let (tx, _) = session.begin(Some(&fence)).await.unwrap();
            tx.commit().await.unwrap();

            let count = "SELECT count(*)::bigint FROM written";
            let db = session.reader().await.unwrap();
            db.execute("UPDATE runners SET released_at = 1", &[])
                .await
                .unwrap();
            let (tx, fenced) = session.begin(Some(&fence)).await.unwrap();
            assert_eq!(fenced.unwrap(), Some(5), "told from what it knew");
            let refused = tx.db().execute(write, &[]).await;
            assert!(
                matches!(refused, Err(Error::Store(StoreError::LeaseLost))),
                "{refused:?}"
            );
            // Set aside: the commit still refuses.
            let committed = tx.commit().await;
            assert!(
                matches!(committed, Err(Error::Store(StoreError::LeaseLost))),
                "{committed:?}"
            );
            let db = session.reader().await.unwrap();
            let rows = db.query(count, &[]).await.unwrap();
            assert_eq!(rows[0].get::<_, i64>(0), 2, "the third insert rolled back");

            // A rollback before anything was sent sends nothing.
            let (tx, _) = session.begin(None).await.unwrap();
            let before = round_trips();
            tx.rollback().await;
            assert_eq!(round_trips(), before);
            let db = session.reader().await.unwrap();
            assert_eq!(db.query(count, &[]).await.unwrap().len(), 1);
        });
    }
}
