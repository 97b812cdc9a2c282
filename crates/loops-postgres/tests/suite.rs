//! The store's behaviour suite (`loops_store::suite`) on PostgreSQL: each test on a
//! fresh database of this test binary's throwaway cluster (`loops_testkit::PgCluster`),
//! every store of a test a connection (and runtime thread) of its own, as separate
//! processes or hosts would have. Without PostgreSQL installed each test skips (under
//! `CI=true` that is a failure).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::LoopId;
use loops_postgres::PgStore;
use loops_store::suite::TestDb;
use loops_store::Store;
use loops_testkit::PgCluster;

struct PgDb {
    cluster: &'static PgCluster,
    url: String,
}

impl PgDb {
    /// A fresh database, or `None` (the test skips) without PostgreSQL.
    fn new() -> Option<Self> {
        let cluster = PgCluster::shared()?;
        Some(Self {
            url: cluster.database(),
            cluster,
        })
    }

    fn name(&self) -> &str {
        self.url.rsplit('/').next().unwrap()
    }
}

impl TestDb for PgDb {
    fn open(&self) -> Box<dyn Store> {
        Box::new(PgStore::open(&self.url).unwrap())
    }

    fn spoil_loop_row(&self, id: &LoopId) {
        self.cluster.psql(
            self.name(),
            &format!(
                "UPDATE loops SET catch_up = 'sometimes' WHERE id = '{}'",
                id.as_str()
            ),
        );
    }
}

loops_store::store_suite!(match PgDb::new() {
    Some(db) => db,
    None => return,
});
