//! `--store-core`: the run on one core, GS's store threads on another.
//!
//! On a machine of two cores the load generator, the upstream, the gateway
//! and the SQLite store's writer share both, and at concurrency 1 where
//! the scheduler puts each wake-up decides the tail more than any work
//! does: a call's next step lands behind a posting on one core while the
//! other idles. With the postings on a core of their own, GS's added
//! latency is what its calls themselves cost, as on a machine with cores
//! to spare. Every other configuration runs as before, all of it on the
//! run's core.

use rustix::process::Pid;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::error::BenchError;

/// The name `/proc` gives the store's writer (`tollgate-sqlite`) and its
/// checkpoint thread (`tollgate-sqlite-checkpoint`, cut to 15 bytes).
const STORE_THREADS: &str = "tollgate-sqlite";

/// The two cores of a `--store-core` run: the first two this process may
/// use (a container or `taskset` may allow others than 0 and 1).
#[derive(Clone, Copy, Debug)]
pub struct Cores {
    /// Where the benchmark and every process it starts stay.
    pub run: usize,
    /// Where GS's store threads are moved.
    pub store: usize,
}

/// Pins this thread, and so every thread and process it starts from now
/// on, to the run's core. Call it before any other thread exists.
pub fn pin_run() -> Result<Cores, BenchError> {
    let allowed = sched_getaffinity(None).map_err(|error| {
        BenchError::Invalid(format!("cannot read this process's CPUs: {error}"))
    })?;
    let mut usable = (0..CpuSet::MAX_CPU).filter(|&cpu| allowed.is_set(cpu));
    let (Some(run), Some(store)) = (usable.next(), usable.next()) else {
        return Err(BenchError::Invalid(format!(
            "--store-core needs two cores; this process may use {}",
            allowed.count()
        )));
    };
    pin(None, run)?;
    Ok(Cores { run, store })
}

impl Cores {
    /// Moves the store threads of the gateway `pid` to the store's core.
    pub fn pin_store_threads(&self, pid: u32) -> Result<(), BenchError> {
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
                pin(Pid::from_raw(tid), self.store)?;
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
}

fn pin(thread: Option<Pid>, core: usize) -> Result<(), BenchError> {
    let mut cores = CpuSet::new();
    cores.set(core);
    sched_setaffinity(thread, &cores)
        .map_err(|error| BenchError::Invalid(format!("cannot pin a thread to CPU {core}: {error}")))
}
