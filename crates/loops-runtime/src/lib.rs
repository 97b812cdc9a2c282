//! Runtime of `loops`: the process executor, target → process translation, the
//! scheduler engine, the daemon, and the library [`client::Client`] the CLI uses.
//!
//! Layering: this crate sits on `loops-core` (pure domain) and `loops-store`
//! (persistence). It spawns every run's process, workflow step, `accounts env`
//! lookup and provider `--version` probe — a daemon's runs through its supervisor
//! ([`supervisor`]: the `loops` binary as `loops supervise`, running the same
//! executor). The one other crate that spawns anything is the `loops` binary, for
//! daemon control only: `daemon start` starts the binary itself detached (`daemon
//! run`), and `daemon install --enable` runs the service manager's enable commands
//! (`systemctl --user`, `launchctl`). Core and store spawn nothing.
//!
//! Every front end goes through [`client::Client`]: it resolves keys, validates
//! definitions and runs loops in-process ([`client::Client::tick`],
//! [`client::Client::run_now`], [`client::Client::run_workflow`]); the engine's
//! run-lease renewal policy ([`engine::lease_renewal`]) and its defaults
//! ([`engine::DEFAULT_MAX_CONCURRENT`], the `daemon::DEFAULT_*` constants) are the
//! ones the CLI shows.

pub mod accounts;
pub mod backoff;
pub mod capture;
pub mod client;
pub mod client_notify;
pub mod clock;
pub mod daemon;
pub mod daemon_view;
pub mod definition;
pub mod doctor;
pub mod engine;
pub mod env;
pub mod executor;
pub mod input;
pub mod live;
pub mod memory;
pub mod notify;
pub mod preflight;
pub mod process;
pub mod providers;
mod recorder;
pub mod spool;
pub mod supervisor;
pub mod targets;
pub mod timeparse;
#[cfg(target_os = "linux")]
mod vfork;
pub mod wake;
pub mod workflow;
pub mod workflow_file;

pub use client::{Client, ClientError, LoopDefinition};
pub use client_notify::{NotifyTest, SettingsSource, TestDelivery};
