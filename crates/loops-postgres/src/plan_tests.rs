//! The plans PostgreSQL keeps for the daemon's set-based statements reach their rows by
//! key, however small the tables were when the plan was made. A prepared statement's
//! generic plan is made once and kept until an `ANALYZE` of its tables; on a new store
//! the tables are empty, and a plan that reads a whole table costs nothing then and
//! grows with every run recorded (BENCHMARKS.md §30).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::session::TestServer;
use crate::PgStore;
use tokio_postgres::SimpleQueryMessage;

/// Each statement of a claim batch and a recorder batch, and the daemon's others that
/// find rows by a list of keys.
const STATEMENTS: [(&str, &str); 15] = [
    ("claims: locks", crate::claim_set::LOCK_LOOPS),
    ("claims: loops not locked", crate::claim_set::EXISTING_LOOPS),
    ("claims: slot states", crate::claim_set::SLOT_STATES),
    ("claims: insert", crate::claim_set::INSERT_WINS),
    ("claims: advance", crate::claim_set::ADVANCE),
    ("recorder: the set's runs' locks", crate::runs::LOCK_RUNS),
    ("recorder: pid records", crate::finalize::UPDATE_PIDS),
    ("recorder: finalizations", crate::finalize::UPDATE_SET),
    (
        "recorder: the finished runs' loops",
        crate::finalize::LOCK_SET_LOOPS,
    ),
    ("recorder: one pid record", crate::finalize::UPDATE_PID),
    ("recorder: one finalization", crate::finalize::UPDATE_ONE),
    ("take-over", crate::runs::TAKE_OVER_RUN),
    ("run leases", crate::runs::RENEW_RUN_LEASES),
    ("events", crate::events::INSERT_EVENTS),
    ("events: loop briefs", crate::events::SELECT_BRIEFS),
];

/// The highest `$n` in `sql`.
fn params(sql: &str) -> usize {
    sql.split('$')
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .max()
        .unwrap_or(0)
}

/// Why `plan` (EXPLAIN's lines) is not keyed: a scan of `runs` or `loops` with no index
/// condition. A scan of an index of the running runs counts too: it visits, besides the
/// runs in flight, every run finished since the table's last vacuum (BENCHMARKS.md §32).
fn unkeyed(plan: &[String]) -> Option<String> {
    for (i, line) in plan.iter().enumerate() {
        let scan = line.trim_start().trim_start_matches("->  ");
        let on_table = [" on runs", " on loops"]
            .iter()
            .any(|t| scan.contains(&format!("{t} ")) || scan.contains(&format!("{t}  ")));
        if !on_table {
            continue;
        }
        if scan.starts_with("Tid Scan") {
            continue;
        }
        if scan.starts_with("Seq Scan") || scan.starts_with("Bitmap Heap Scan") {
            return Some(line.clone());
        }
        if scan.starts_with("Index Scan") || scan.starts_with("Index Only Scan") {
            // The node's own lines, up to the next node.
            let cond = plan[i + 1..]
                .iter()
                .take_while(|l| !l.contains("->"))
                .any(|l| l.contains("Index Cond"));
            if !cond {
                return Some(line.clone());
            }
        }
    }
    None
}

#[test]
fn generic_plans_on_a_new_store_reach_rows_by_key() {
    let Some(server) = TestServer::new() else {
        return;
    };
    // Migrates: the tables are new, empty and never analyzed, as on a new store.
    drop(PgStore::open(&server.url).unwrap());
    let client = server.client(None);
    server.rt.block_on(async {
        client
            .batch_execute("SET plan_cache_mode = force_generic_plan")
            .await
            .unwrap();
        let mut failures = Vec::new();
        for (i, (what, sql)) in STATEMENTS.iter().enumerate() {
            client
                .batch_execute(&format!("PREPARE s{i} AS {sql}"))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let nulls = vec!["NULL"; params(sql)].join(", ");
            let answer = client
                .simple_query(&format!("EXPLAIN EXECUTE s{i}({nulls})"))
                .await
                .unwrap();
            let plan: Vec<String> = answer
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                    _ => None,
                })
                .collect();
            if let Some(scan) = unkeyed(&plan) {
                failures.push(format!("{what}: {scan}\n{}", plan.join("\n")));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    });
}

/// Every index of the running runs keeps one entry a row. A run leaves such an index
/// when it finishes, its entry staying until a vacuum; a scan marks an entry it finds
/// dead and skips it from then on, except inside a deduplicated posting list that holds
/// a live row too, visited whole by every scan (BENCHMARKS.md §32).
#[test]
fn indexes_of_the_running_runs_are_not_deduplicated() {
    let Some(server) = TestServer::new() else {
        return;
    };
    drop(PgStore::open(&server.url).unwrap());
    let client = server.client(None);
    server.rt.block_on(async {
        let rows = client
            .query(
                "SELECT i.indexrelid::regclass::text, \
                        COALESCE(array_to_string(c.reloptions, ','), '') \
                 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                 WHERE i.indrelid = 'runs'::regclass \
                   AND pg_get_expr(i.indpred, i.indrelid) LIKE '%''running''%'",
                &[],
            )
            .await
            .unwrap();
        let indexes: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert!(indexes.len() >= 4, "{indexes:?}");
        let deduplicated: Vec<&(String, String)> = indexes
            .iter()
            .filter(|(_, options)| !options.contains("deduplicate_items=off"))
            .collect();
        assert!(deduplicated.is_empty(), "{deduplicated:?}");
    });
}
