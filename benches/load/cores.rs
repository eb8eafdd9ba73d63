//! `--store-core`: the run on CPU 0, GS's store threads on CPU 1.
//!
//! On a machine of two cores the load generator, the upstream, the gateway
//! and the SQLite store's writer share both, and at concurrency 1 where
//! the scheduler puts each wake-up decides the tail more than any work
//! does: a call's next step lands behind a posting on one core while the
//! other idles. With the postings on a core of their own, GS's added
//! latency is what its calls themselves cost, as on a machine with cores
//! to spare. Every other configuration runs as before, all of it on CPU 0.

use rustix::process::Pid;
use rustix::thread::{sched_setaffinity, CpuSet};

use crate::error::BenchError;

/// The core the benchmark and every process it starts stay on.
const RUN_CORE: usize = 0;

/// The core GS's store threads are moved to.
const STORE_CORE: usize = 1;

/// The name `/proc` gives the store's writer (`tollgate-sqlite`) and its
/// checkpoint thread (`tollgate-sqlite-checkpoint`, cut to 15 bytes).
const STORE_THREADS: &str = "tollgate-sqlite";

/// Pins this thread, and so every thread and process it starts from now
/// on, to the run's core; `cores`: how many this process may use. Call it
/// before any other thread exists.
pub fn pin_run(cores: usize) -> Result<(), BenchError> {
    if cores <= STORE_CORE {
        return Err(BenchError::Invalid(format!(
            "--store-core needs two cores; this process may use {cores}"
        )));
    }
    pin(None, RUN_CORE)
}

/// Moves the store threads of the gateway `pid` to the store's core.
pub fn pin_store_threads(pid: u32) -> Result<(), BenchError> {
    let mut moved = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let name = entry?.file_name();
        let Some(tid) = name.to_str().and_then(|tid| tid.parse::<i32>().ok()) else {
            continue;
        };
        // A thread that ended meanwhile has no name to read.
        let comm =
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
        if comm.trim_end() == STORE_THREADS {
            pin(Pid::from_raw(tid), STORE_CORE)?;
            moved += 1;
        }
    }
    if moved == 0 {
        return Err(BenchError::Invalid(format!(
            "--store-core: gateway {pid} has no thread named {STORE_THREADS}"
        )));
    }
    Ok(())
}

fn pin(thread: Option<Pid>, core: usize) -> Result<(), BenchError> {
    let mut cores = CpuSet::new();
    cores.set(core);
    sched_setaffinity(thread, &cores)
        .map_err(|error| BenchError::Invalid(format!("cannot pin a thread to CPU {core}: {error}")))
}
