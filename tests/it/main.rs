//! The gateway's integration tests, in one binary, one module per area:
//! the library is built and linked once for all of them. They start the
//! real server (in process or as the built `tollgate` binary) and a mock
//! provider on port 0 and speak HTTP.
//!
//! They run side by side in one process, so none of them changes what the
//! process shares for its own sake: no test sets an environment variable
//! or a signal handler, each Redis test keeps to hash tags of its own, and
//! the one process-wide setting, the open-files limit, is raised once for
//! every test (`limits`). Child processes get their own settings
//! (`prlimit`, `Command::env`).
//!
//! Support:
//!
//! - `common`: a gateway and a mock provider in this process, on a memory
//!   store.
//! - `redis_support`: gateway processes on a config written for the test,
//!   the Redis servers a test owns (`redis_support::servers`), and the
//!   Redis this process starts for the tests that share one.
//! - `limits`: the open-files limit every test of this process shares.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod limits;
mod redis_support;

mod absurd_usage;
mod admin_api;
mod admin_cli;
mod admin_console;
mod admin_stores;
mod agent_runs;
mod alerts;
mod alerts_restart;
mod bad_input;
mod concurrency;
mod connections;
mod early_ends;
mod estimate_bound;
mod hosted_tools;
mod http_layers;
mod idempotency;
mod metrics_reconcile;
mod model_routes;
mod module_loops;
mod open_files;
mod priced_tiers;
mod provider_reads_what_was_priced;
mod redis_cluster;
mod redis_crash;
mod redis_epoch;
mod redis_failures;
mod redis_gateways;
mod redis_ledger_drain;
mod redis_runs;
mod redis_tls;
mod routes;
mod sqlite_crash;
mod sqlite_disk_full;
