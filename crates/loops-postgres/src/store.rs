//! [`PgStore`]'s own methods: opening (migrations) and inspecting a database, what
//! `doctor` and `store copy` ask of it, and the call every trait method goes through.

use super::*;

/// The settings every connection of ours starts with (the server's `options`), the
/// URL's own `options` after them, so that a setting the URL names wins over these:
///
/// - A client stopped or cut off mid-transaction must not hold row locks for long: the
///   server ends a transaction left idle this long. Ours send their statements back to
///   back, so seconds of idleness mean the client is stalled; meanwhile the other
///   runners' recovery of its rows waits on those locks.
/// - No JIT compilation. The server compiles a statement whose estimated cost passes
///   `jit_above_cost`, at each execution; the due loops' read passes it once `loops`
///   has statistics (its per-loop holds subqueries are costed high), and one pass spent
///   0.6 s compiling it (BENCHMARKS.md §32). A scheduler's statements are short.
///
/// With `read_only`, last, so that the URL cannot undo it: a server-side guarantee
/// that nothing is written through the connection.
fn session_options(url_options: Option<&str>, read_only: bool) -> String {
    let mut options = "-c idle_in_transaction_session_timeout=3000 -c jit=off".to_owned();
    if let Some(own) = url_options.filter(|o| !o.trim().is_empty()) {
        options.push(' ');
        options.push_str(own);
    }
    if read_only {
        options.push_str(" -c default_transaction_read_only=on");
    }
    options
}

impl PgStore {
    /// Connects to the database `url` names (`postgres://user:password@host:port/db`,
    /// or any libpq-style URL tokio-postgres accepts) and applies pending migrations.
    ///
    /// A database holding tables of ours without loops' `schema_migrations` yields
    /// [`StoreError::Corrupt`] (not a loops store) and is left untouched; one migrated
    /// by a newer build yields [`StoreError::TooNew`]. A server that cannot be reached
    /// yields a transient I/O error.
    pub fn open(url: &str) -> StoreResult<Self> {
        let mut store = Self::connect(url, false)?;
        let display = store.display.clone();
        let shown = display.clone();
        store.applied =
            write!(store, None, |db| open::migrate(db, &shown)).map_err(|e| match e {
                StoreError::Backend {
                    kind,
                    message,
                    source,
                } => StoreError::Backend {
                    kind,
                    message: format!("cannot open PostgreSQL store {display}: {message}"),
                    source,
                },
                other => other,
            })?;
        Ok(store)
    }

    /// What the database `url` names holds, read without writing anything — no
    /// migration, no table — on a session the server keeps read-only
    /// (`default_transaction_read_only`), for `loops store copy --dry-run`. The same
    /// refusals as [`PgStore::open`]: tables of ours without `schema_migrations`
    /// ([`StoreError::Corrupt`]), a schema of a newer build ([`StoreError::TooNew`]).
    pub fn inspect(url: &str) -> StoreResult<Inspection> {
        let store = Self::connect(url, true)?;
        let shown = store.display.clone();
        read!(store, |db| open::inspect(db, &shown))
    }

    /// A store on `url` with no migration applied (yet): the session settings every
    /// connection of ours gets, and, when `read_only`, a server-side guarantee that
    /// nothing is written through it.
    pub(crate) fn connect(url: &str, read_only: bool) -> StoreResult<Self> {
        let display = redact_url(url);
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            StoreError::InvalidArgument(format!("invalid PostgreSQL URL {display}: {e}"))
        })?;
        if config.get_application_name().is_none() {
            config.application_name("loops");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let options = session_options(config.get_options(), read_only);
        config.options(&options);
        // A cut-off network fails a call within seconds rather than minutes.
        config.keepalives_idle(std::time::Duration::from_secs(5));
        config.tcp_user_timeout(std::time::Duration::from_secs(10));
        Self::on_config(config, display)
    }

    /// A store on its own connection (a session thread of its own) to the database
    /// `config` names, with the settings [`PgStore::connect`] put there.
    pub(crate) fn on_config(config: tokio_postgres::Config, display: String) -> StoreResult<Self> {
        let jobs = session::spawn(config.clone(), "loops-postgres".to_owned())?;
        Ok(Self {
            jobs,
            config,
            display,
            applied: 0,
        })
    }

    /// The store's URL without its password.
    pub fn display_url(&self) -> &str {
        &self.display
    }

    /// How many migrations opening this store applied (0 when another opener, or an
    /// earlier one, had applied them).
    pub fn migrations_applied(&self) -> usize {
        self.applied
    }

    /// The schema version recorded in `schema_migrations`.
    pub fn schema_version(&self) -> StoreResult<i64> {
        read!(self, |db| open::current_version(db))
    }

    /// The server's version string (`SHOW server_version`), for `doctor`.
    pub fn server_version(&self) -> StoreResult<String> {
        read!(self, |db| async move {
            let row = db.query_one("SHOW server_version", &[]).await?;
            codec::get::<String>(&row, 0, "server_version")
        })
    }

    /// Whether the database holds loops, specs, runs, workflow runs or events (what
    /// `loops store copy` refuses to write over without `--force`).
    pub fn holds_data(&self) -> StoreResult<bool> {
        read!(self, |db| copy::holds_data(db))
    }

    /// Writes `set` (another store's whole contents) as it was, in one transaction;
    /// `force` replaces what the database held (see `loops store copy`).
    pub fn copy_in(&self, set: CopySet, force: bool) -> StoreResult<()> {
        write!(self, None, |db| async move {
            copy::copy_in(db, &set, force).await
        })
    }

    /// Transactions committed and rolled back in this database so far, by the server's
    /// statistics (for benchmarks: round trips per run).
    pub fn transactions(&self) -> StoreResult<i64> {
        read!(self, |db| async move {
            let row = db
                .query_one(
                    "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database \
                     WHERE datname = current_database()",
                    &[],
                )
                .await?;
            codec::get::<i64>(&row, 0, "xacts")
        })
    }

    pub(crate) fn call<T: Send + 'static>(
        &self,
        job: impl for<'s> FnOnce(
                &'s mut session::Session,
            ) -> session::LocalBoxFuture<'s, error::Result<T>>
            + Send
            + 'static,
    ) -> StoreResult<T> {
        session::call(&self.jobs, job)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::session::TestServer;

    /// Each setting `store`'s connections start with, as the server reports it.
    fn settings(server: &TestServer, store: &PgStore, names: &[&str]) -> Vec<String> {
        let client = server.client(Some(&store.config));
        names
            .iter()
            .map(|name| {
                let row = server
                    .rt
                    .block_on(client.query_one(&format!("SHOW {name}"), &[]));
                row.unwrap().get(0)
            })
            .collect()
    }

    /// Ours hold with the URL's own `options` beside them; the URL's win over the
    /// defaults, never over a read-only session.
    #[test]
    fn sessions_start_without_jit_with_the_urls_options_and_stay_read_only() {
        let Some(server) = TestServer::new() else {
            return;
        };
        let url = server.url.clone();
        let sep = if url.contains('?') { '&' } else { '?' };
        let names = [
            "jit",
            "idle_in_transaction_session_timeout",
            "lock_timeout",
            "default_transaction_read_only",
        ];
        let plain = PgStore::connect(&url, false).unwrap();
        assert_eq!(settings(&server, &plain, &names), ["off", "3s", "0", "off"]);
        let own = format!("{url}{sep}options=-c%20lock_timeout%3D7000%20-c%20jit%3Don");
        let with_own = PgStore::connect(&own, false).unwrap();
        assert_eq!(
            settings(&server, &with_own, &names),
            ["on", "3s", "7s", "off"]
        );
        let undo = format!("{url}{sep}options=-c%20default_transaction_read_only%3Doff");
        let read_only = PgStore::connect(&undo, true).unwrap();
        assert_eq!(settings(&server, &read_only, &names)[3], "on");
    }
}
