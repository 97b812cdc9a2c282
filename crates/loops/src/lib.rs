//! `loops` as a library: the same client the `loops` CLI uses, to define, inspect and
//! run loops and workflows from another Rust program.
//!
//! ```no_run
//! use loops::{Client, LoopDefinition};
//! use loops::core::{CommandTarget, Policy, Schedule, Target};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::open(std::path::Path::new("/tmp/loops-data"))?;
//! let created = client.create(
//!     LoopDefinition {
//!         name: "heartbeat".into(),
//!         description: None,
//!         schedule: Schedule::Interval { every_ms: 60_000, anchor: loops::core::Anchor::FixedRate },
//!         target: Target::Command(CommandTarget {
//!             command: "date".into(), args: vec![], cwd: None, shell: true,
//!             env: Default::default(), timeout: None, idle_timeout: None, account: None,
//!         }),
//!         policy: Policy::default(),
//!         labels: Vec::new(),
//!         notify: None,
//!     },
//!     chrono::Utc::now(),
//! )?;
//! for run in client.runs(Some(&created.name), Some(10))? {
//!     println!("{} {}", run.scheduled_for, run.status);
//! }
//! # Ok(()) }
//! ```

pub use loops_core as core;
pub use loops_postgres as postgres;
pub use loops_runtime::client::{Client, ClientError, LoopDefinition};
pub use loops_runtime::{daemon, engine, workflow};
pub use loops_sqlite as sqlite;
pub use loops_store as store;

/// How the CLI reads `--at` and `--expires-at` (the runtime's, shared with the MCP
/// tools and the HTTP API; re-exported here so `fuzz/` can drive it).
pub use loops_runtime::timeparse;
