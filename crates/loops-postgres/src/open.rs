//! Opening and migrations: the URL, the embedded migrations applied under an advisory
//! lock (runners starting at once migrate once), and the checks that the database is a
//! loops store this build can use.

use crate::error::{Error, Result};
use crate::session::{Conn, Db};
use loops_store::schema::{refuse_newer, Migration};
use loops_store::{CorruptKind, StoreError};

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
    Migration {
        version: 6,
        name: "error_output_notify_changes",
        sql: include_str!("../migrations/0006_error_output_notify_changes.sql"),
    },
    Migration {
        version: 7,
        name: "failure_classes",
        sql: include_str!("../migrations/0007_failure_classes.sql"),
    },
    Migration {
        version: 8,
        name: "backoff_breaker",
        sql: include_str!("../migrations/0008_backoff_breaker.sql"),
    },
    Migration {
        version: 9,
        name: "account_holds",
        sql: include_str!("../migrations/0009_account_holds.sql"),
    },
    Migration {
        version: 10,
        name: "sessions",
        sql: include_str!("../migrations/0010_sessions.sql"),
    },
    Migration {
        version: 11,
        name: "budgets",
        sql: include_str!("../migrations/0011_budgets.sql"),
    },
    Migration {
        version: 12,
        name: "caps",
        sql: include_str!("../migrations/0012_caps.sql"),
    },
    Migration {
        version: 13,
        name: "step provider",
        sql: include_str!("../migrations/0013_step_provider.sql"),
    },
    Migration {
        version: 14,
        name: "workflow run params",
        sql: include_str!("../migrations/0014_workflow_run_params.sql"),
    },
    Migration {
        version: 15,
        name: "running indexes",
        sql: include_str!("../migrations/0015_running_indexes.sql"),
    },
];

/// The newest schema version this build knows (the last entry of the migrations).
pub const SCHEMA_VERSION: i64 = 15;

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

/// Refuses a database without `schema_migrations` that holds one of our tables (it is
/// not a loops store, or a damaged one): checked alike before migrating and inspecting.
async fn refuse_foreign_tables(db: &Db<'_, impl Conn>, display: &str) -> Result<()> {
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
    Ok(())
}

/// Applies every pending migration in one transaction under [`MIGRATION_LOCK`]: a
/// second opener waits for the first and then finds nothing to do. Returns how many
/// migrations this call applied.
pub(crate) async fn migrate(db: &Db<'_, impl Conn>, display: &str) -> Result<usize> {
    db.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let has_migrations = db
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await?;
    if !crate::codec::get::<bool>(&has_migrations, 0, "exists")? {
        refuse_foreign_tables(db, display).await?;
        db.batch(
            "CREATE TABLE schema_migrations (
                 version    BIGINT PRIMARY KEY,
                 name       TEXT NOT NULL,
                 applied_at TEXT NOT NULL
             )",
        )
        .await?;
    }
    let current = known_version(db, display).await?;
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

/// What a database holds, read only ([`crate::PgStore::inspect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspection {
    /// The loops schema version it records; 0 when it has no loops schema yet (an empty
    /// database, or one holding only tables of others).
    pub schema_version: i64,
    /// It holds loops, specs, runs, workflow runs or events (what `store copy` refuses to
    /// write over without `--force`).
    pub holds_data: bool,
}

impl Inspection {
    /// How many migrations opening it would apply.
    pub fn migrations_pending(&self) -> usize {
        MIGRATIONS
            .iter()
            .filter(|m| m.version > self.schema_version)
            .count()
    }
}

/// [`migrate`]'s checks, without its writes: whether the database is a loops store this
/// build can use, at which version, and whether it holds data.
pub(crate) async fn inspect(db: &Db<'_, impl Conn>, display: &str) -> Result<Inspection> {
    let exists = |table: &'static str| async move {
        let row = db
            .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[&table])
            .await?;
        crate::codec::get::<bool>(&row, 0, "exists")
    };
    if !exists("schema_migrations").await? {
        refuse_foreign_tables(db, display).await?;
        return Ok(Inspection {
            schema_version: 0,
            holds_data: false,
        });
    }
    let schema_version = known_version(db, display).await?;
    // An older schema may lack some of the tables `holds_data` reads.
    let mut holds_data = false;
    for table in ["loops", "workflows", "runs", "workflow_runs", "events"] {
        if !holds_data && exists(table).await? {
            let row = db
                .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {table})"), &[])
                .await?;
            holds_data = crate::codec::get::<bool>(&row, 0, "exists")?;
        }
    }
    Ok(Inspection {
        schema_version,
        holds_data,
    })
}

pub(crate) async fn current_version(db: &Db<'_, impl Conn>) -> Result<i64> {
    let row = db
        .query_one(
            "SELECT COALESCE(MAX(version), 0)::bigint FROM schema_migrations",
            &[],
        )
        .await?;
    crate::codec::get(&row, 0, "version")
}

/// The schema version of the database, refused ([`StoreError::TooNew`]) when a newer
/// build wrote it: what migrating and inspecting both check first.
async fn known_version(db: &Db<'_, impl Conn>, display: &str) -> Result<i64> {
    let version = current_version(db).await?;
    refuse_newer(display, version, SCHEMA_VERSION)?;
    Ok(version)
}

/// Whether `store` names a PostgreSQL database (`postgres://…` / `postgresql://…`).
pub fn is_postgres_url(store: &str) -> bool {
    let lower = store.trim_start().to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised() {
        assert!(is_postgres_url("postgres://h/db"));
        assert!(is_postgres_url("PostgreSQL://h/db"));
        assert!(!is_postgres_url("/var/lib/loops"));
    }

    #[test]
    fn schema_version_is_the_last_migration() {
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
        for pair in MIGRATIONS.windows(2) {
            assert!(pair[0].version < pair[1].version);
        }
    }
}
