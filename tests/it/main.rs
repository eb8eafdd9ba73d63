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

use std::path::Path;

mod common;
mod limits;
mod redis_support;

mod absurd_usage;
mod admin_abuse;
mod admin_api;
mod admin_cli;
mod admin_console;
mod admin_customers;
mod admin_limits;
mod admin_stores;
mod agent_runs;
mod alerts;
mod alerts_restart;
mod azure;
mod bad_input;
mod bedrock;
mod caps;
mod concurrency;
mod connections;
mod conversation;
mod early_ends;
mod estimate_bound;
mod gemini;
mod hosted_tools;
mod http_layers;
mod idempotency;
mod input_bound;
mod metrics_reconcile;
mod model_routes;
mod module_loops;
mod open_files;
mod priced_tiers;
mod provider_reads_what_was_priced;
mod redis_caps;
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
mod sqlite_damage;
mod sqlite_disk_full;
mod vertex;

/// Every integration test is a module of this binary. Cargo builds no
/// other (`autotests = false`), and a file no `mod` names is not compiled:
/// either would leave tests out without a word.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let outside = modules_in(&tests);
    assert!(outside.is_empty(), "tests outside tests/it: {outside:?}");
    let main = include_str!("main.rs");
    let unnamed: Vec<String> = modules_in(&tests.join("it"))
        .into_iter()
        .filter(|name| name != "main" && !main.contains(&format!("\nmod {name};\n")))
        .collect();
    assert!(unnamed.is_empty(), "no `mod` in main.rs names {unnamed:?}");
}

/// The Rust modules in `dir`: its `.rs` files and its folders with a
/// `mod.rs`, by name.
fn modules_in(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let is_module = if path.is_dir() {
            path.join("mod.rs").exists()
        } else {
            path.extension().is_some_and(|ext| ext == "rs")
        };
        if is_module {
            let stem = path.file_stem().unwrap();
            names.push(stem.to_string_lossy().into_owned());
        }
    }
    names.sort();
    names
}
