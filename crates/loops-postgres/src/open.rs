//! Opening and migrations: the URL, the embedded migrations applied under an advisory
//! lock (runners starting at once migrate once), and the checks that the database is a
//! loops store this build can use.

use crate::error::{Error, Result};
use crate::session::Db;
use loops_store::{CorruptKind, StoreError};
use tokio_postgres::GenericClient;

/// One embedded schema migration. Applied migrations are never edited: add a file.
pub(crate) struct Migration {
    pub(crate) version: i64,
    pub(crate) name: &'static str,
    pub(crate) sql: &'static str,
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "runners",
        sql: include_str!("../migrations/0002_runners.sql"),
    },
    Migration {
        version: 3,
        name: "reports_events",
        sql: include_str!("../migrations/0003_reports_events.sql"),
    },
    Migration {
        version: 4,
        name: "runs_on",
        sql: include_str!("../migrations/0004_runs_on.sql"),
    },
    Migration {
        version: 5,
        name: "run_requests",
        sql: include_str!("../migrations/0005_run_requests.sql"),
    },
    // Issue #20's files carry the numbers reserved for it (0009…0013); their versions
    // stay contiguous until the merge renumbers them.
    Migration {
        version: 6,
        name: "failure_classes",
        sql: include_str!("../migrations/0009_failure_classes.sql"),
    },
    Migration {
        version: 7,
        name: "backoff_breaker",
        sql: include_str!("../migrations/0010_backoff_breaker.sql"),
    },
];

/// The newest schema version this build knows (the last entry of the migrations).
pub const SCHEMA_VERSION: i64 = 7;

/// The advisory lock every migrating opener holds for its transaction ("loop").
const MIGRATION_LOCK: i64 = 0x6C6F_6F70;

/// Tables of ours: a database holding one of them without `schema_migrations` is not a
/// loops store (or one too damaged to use), and is left alone.
const OUR_TABLES: &[&str] = &[
    "loops",
    "runs",
    "meta",
    "daemon_lease",
    "workflows",
    "workflow_runs",
    "notification_deliveries",
];

/// Applies every pending migration in one transaction under [`MIGRATION_LOCK`]: a
/// second opener waits for the first and then finds nothing to do. Returns how many
/// migrations this call applied.
pub(crate) async fn migrate<C: GenericClient + Sync>(
    db: &Db<'_, C>,
    display: &str,
) -> Result<usize> {
    db.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let has_migrations = db
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await?;
    if !crate::codec::get::<bool>(&has_migrations, 0, "exists")? {
        let tables: Vec<&str> = OUR_TABLES.to_vec();
        let found = db
            .query(
                "SELECT tablename::text FROM pg_tables \
                 WHERE schemaname = current_schema() AND tablename = ANY($1::text[])",
                &[&tables],
            )
            .await?;
        if let Some(row) = found.first() {
            let table: String = crate::codec::get(row, 0, "tablename")?;
            return Err(StoreError::Corrupt {
                path: display.to_owned(),
                kind: CorruptKind::NotAStore,
                source: format!(
                    "the database has a table {table:?} but no loops schema_migrations table"
                )
                .into(),
            }
            .into());
        }
        db.batch(
            "CREATE TABLE schema_migrations (
                 version    BIGINT PRIMARY KEY,
                 name       TEXT NOT NULL,
                 applied_at TEXT NOT NULL
             )",
        )
        .await?;
    }
    let current = current_version(db).await?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: display.to_owned(),
            found: current,
            known: SCHEMA_VERSION,
        }
        .into());
    }
    let mut applied = 0;
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        db.batch(m.sql).await.map_err(|e| match e {
            Error::Pg(pg) => Error::Store(StoreError::backend(
                loops_store::BackendErrorKind::Other,
                format!(
                    "migration {} ({}) failed: {}",
                    m.version,
                    m.name,
                    crate::error::from_pg(pg)
                ),
            )),
            other => other,
        })?;
        db.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            &[
                &m.version,
                &m.name,
                &loops_core::format_instant(&chrono::Utc::now()),
            ],
        )
        .await?;
        applied += 1;
    }
    Ok(applied)
}

pub(crate) async fn current_version<C: GenericClient + Sync>(db: &Db<'_, C>) -> Result<i64> {
    let row = db
        .query_one(
            "SELECT COALESCE(MAX(version), 0)::bigint FROM schema_migrations",
            &[],
        )
        .await?;
    crate::codec::get(&row, 0, "version")
}

/// Whether `store` names a PostgreSQL database (`postgres://…` / `postgresql://…`).
pub fn is_postgres_url(store: &str) -> bool {
    let lower = store.trim_start().to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `url` with its password replaced by `***`, for messages and `doctor`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => userinfo.to_owned(),
    };
    let tail = redact_query_password(tail);
    format!("{scheme}://{user}@{host}{tail}")
}

fn redact_query_password(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_owned(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised_and_redacted() {
        assert!(is_postgres_url("postgres://h/db"));
        assert!(is_postgres_url("PostgreSQL://h/db"));
        assert!(!is_postgres_url("/var/lib/loops"));
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db?sslmode=disable&password=x"),
            "postgres://u:***@h:5432/db?sslmode=disable&password=***"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn schema_version_is_the_last_migration() {
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
        for pair in MIGRATIONS.windows(2) {
            assert!(pair[0].version < pair[1].version);
        }
    }
}
