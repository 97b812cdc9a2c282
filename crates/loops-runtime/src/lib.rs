//! Runtime of `loops`: the process executor, target → process translation, the
//! scheduler engine, the daemon, and the library [`client::Client`] the CLI uses.
//!
//! Layering: this crate sits on `loops-core` (pure domain) and `loops-store`
//! (persistence) and is the only one that spawns processes or owns an async runtime.

pub mod accounts;
pub mod backoff;
pub mod capture;
pub mod client;
pub mod clock;
pub mod daemon;
pub mod engine;
pub mod env;
pub mod executor;
pub mod input;
pub mod preflight;
pub mod process;
pub mod providers;
mod recorder;
pub mod spool;
pub mod targets;
pub mod wake;
pub mod workflow;

pub use client::{Client, ClientError, LoopDefinition};
