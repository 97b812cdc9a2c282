//! End-to-end tests: the real `loops` binary against a temp data dir, with real child
//! processes. One integration-test binary; modules group the verbs.

// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

mod agent_ops;
mod agents;
mod backup;
mod bad_input;
mod daemon;
mod dashboard;
mod http;
mod loops_cli;
mod mcp;
mod mock_model;
mod operability_define;
mod operability_edit;
mod operability_notify;
mod operability_output;
mod operability_report;
mod portable;
mod provider_options;
mod several_hosts;
mod several_hosts_netns;
mod supervised;
mod top;
mod trust_daemon;
mod trust_engine;
mod trust_http;
mod trust_input;
mod trust_mcp;
mod trust_secrets;
mod trust_terminal;
mod workflow_params;
mod workflows;
