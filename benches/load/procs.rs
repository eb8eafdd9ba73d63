//! The processes a run starts — mock providers, gateways, the pass-through
//! proxy — and what is read off them: the address each one bound, its
//! resident memory and its CPU time.
//!
//! Every process is owned by a [`Proc`] that kills and reaps it when
//! dropped, so a run that ends, fails or panics leaves nothing behind.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use crate::error::BenchError;

/// How long a process may take to bind its port.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Lines of a process's log kept for the error report if it fails.
const LOG_LINES: usize = 40;

/// What a process logs once it is bound, followed by the address.
const LISTENING: &str = "listening on ";

/// A child process serving on 127.0.0.1.
pub struct Proc {
    pub addr: SocketAddr,
    child: Child,
    log: Arc<Mutex<VecDeque<String>>>,
}

impl Proc {
    /// Starts `command` and waits until it logs `listening on ADDR` on
    /// stderr. Its stdin stays open for its whole life: a process that
    /// watches it (the pass-through proxy) ends when the benchmark does,
    /// even if the benchmark is killed before it can clean up.
    pub fn start(name: &str, mut command: Command) -> Result<Proc, BenchError> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|source| BenchError::Spawn {
            name: name.to_owned(),
            source,
        })?;
        let log = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_LINES)));
        let (bound, address) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let log = log.clone();
            // Drains stderr for the process's whole life so its pipe never
            // fills and blocks it.
            thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = listening_addr(&line) {
                        let _ = bound.send(addr);
                    }
                    let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                    if log.len() == LOG_LINES {
                        log.pop_front();
                    }
                    log.push_back(line);
                }
            });
        }
        let mut proc = Proc {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            child,
            log,
        };
        match address.recv_timeout(START_TIMEOUT) {
            Ok(addr) => {
                proc.addr = addr;
                Ok(proc)
            }
            // stderr closed without the line: the process exited. In both
            // failures `proc` is dropped on return, which kills and reaps it.
            Err(RecvTimeoutError::Disconnected) => Err(BenchError::NotStarted {
                name: name.to_owned(),
                log: proc.log_tail(),
            }),
            Err(RecvTimeoutError::Timeout) => Err(BenchError::NotStarted {
                name: name.to_owned(),
                log: format!(
                    "no `listening on` line within {START_TIMEOUT:?}\n{}",
                    proc.log_tail()
                ),
            }),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the process logged.
    pub fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Lines logged at WARN or ERROR so far, for the report.
    pub fn warnings(&self) -> Vec<String> {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.iter()
            .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
            .cloned()
            .collect()
    }

    pub fn cpu_ticks(&self) -> Option<u64> {
        cpu_ticks(&format!("/proc/{}/stat", self.pid()))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ADDR` from a log line `... listening on ADDR ...`.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let (_, rest) = line.split_once(LISTENING)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// Resident set size of a process (`VmRSS` in /proc/PID/status), in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// The most the process has been resident since it started (`VmHWM`), KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// File descriptors the process holds open: mostly its connections, each
/// of which keeps buffers resident.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// A `kB` field of /proc/PID/status.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// User + system CPU time of a whole process (all threads), in clock ticks
/// (`utime` + `stime` of /proc/PID/stat).
pub fn cpu_ticks(stat_path: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    // The command name, field 2, is in parentheses and may hold spaces:
    // count fields from the last `)`.
    let (_, after_name) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of the whole line are the 12th and 13th after the
    // name (field 3, the state, is the first).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time of the benchmark process itself (the load generator).
pub fn own_cpu_ticks() -> Option<u64> {
    cpu_ticks("/proc/self/stat")
}

/// Clock ticks per second of `utime`/`stime` (`USER_HZ`), which Linux fixes
/// at 100 on every architecture it exports to user space.
pub const TICKS_PER_SEC: u64 = 100;
