//! The processes a run starts — upstreams, gateways, the pass-through
//! proxies — and what is read off them: the address each one bound, its
//! resident memory and its CPU time.
//!
//! Every process is owned by a [`Proc`] that kills and reaps it when
//! dropped, so a run that ends, fails or panics leaves nothing behind.
//! A server that forks workers (nginx) runs under a wrapper that stops it
//! when its stdin closes (`load/nginx.rs`); its CPU and memory are the sum
//! over the wrapper's descendants of that name ([`ProcessTree`]), and it
//! is stopped by closing that stdin, so that it takes its workers along.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::BenchError;

/// How long a process may take to bind its port.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Lines of a process's log kept for the error report if it fails.
const LOG_LINES: usize = 40;

/// What a process logs once it is bound, followed by the address.
const LISTENING: &str = "listening on ";

/// How long a wrapped server has to stop its workers and exit after its
/// stdin closes, before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Log markers of a line worth reporting: tracing's levels and nginx's.
const WARNING_MARKS: [&str; 7] = [
    " WARN ", " ERROR ", "[warn]", "[error]", "[crit]", "[alert]", "[emerg]",
];

/// A child process serving on 127.0.0.1.
pub struct Proc {
    pub addr: SocketAddr,
    child: Child,
    tree: ProcessTree,
    log: Arc<Mutex<VecDeque<String>>>,
}

/// The processes whose CPU and memory are read for one [`Proc`]: the
/// process itself, or the descendants of a wrapper that bear a name.
#[derive(Clone, Copy, Debug)]
pub struct ProcessTree {
    pub root: u32,
    /// `Some(name)`: the root is a wrapper; count its descendants whose
    /// command is `name` (nginx's master and worker), not the root.
    pub descendants_named: Option<&'static str>,
}

impl Proc {
    /// Starts `command` and waits until it logs `listening on ADDR` on
    /// stderr. Its stdin stays open for its whole life: a process that
    /// watches it (the pass-through proxy, the instant upstream) ends when
    /// the benchmark does, even if the benchmark is killed before it can
    /// clean up.
    pub fn start(name: &str, command: Command) -> Result<Proc, BenchError> {
        let (mut proc, address) = Proc::spawn(name, command, None)?;
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

    /// Starts `command`, a wrapper around a server that serves HTTP on
    /// `addr` without saying so (nginx) and whose processes are named
    /// `server`, and waits until a request to it is answered by the
    /// upstream behind it: any status but a gateway error. The wrapper
    /// must stop the server when its stdin closes.
    pub fn start_wrapped(
        name: &str,
        command: Command,
        server: &'static str,
        addr: SocketAddr,
    ) -> Result<Proc, BenchError> {
        let (mut proc, _) = Proc::spawn(name, command, Some(server))?;
        proc.addr = addr;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let answer = answers(addr);
            if matches!(answer, Some(status) if status != 502 && status != 504) {
                return Ok(proc);
            }
            if let Ok(Some(exit)) = proc.child.try_wait() {
                return Err(BenchError::NotStarted {
                    name: name.to_owned(),
                    log: format!("exited ({exit})\n{}", proc.log_tail()),
                });
            }
            if Instant::now() >= deadline {
                return Err(BenchError::NotStarted {
                    name: name.to_owned(),
                    log: format!(
                        "no answer on {addr} within {START_TIMEOUT:?} (last status: {})\n{}",
                        answer.map_or("none".to_owned(), |status| status.to_string()),
                        proc.log_tail()
                    ),
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Spawns `command` and drains its stderr; the receiver gets the
    /// address of its `listening on` line, if it logs one.
    fn spawn(
        name: &str,
        mut command: Command,
        descendants_named: Option<&'static str>,
    ) -> Result<(Proc, Receiver<SocketAddr>), BenchError> {
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
        let tree = ProcessTree {
            root: child.id(),
            descendants_named,
        };
        let proc = Proc {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            child,
            tree,
            log,
        };
        Ok((proc, address))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What to read the process's CPU and memory from.
    pub fn tree(&self) -> ProcessTree {
        self.tree
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
            .filter(|line| WARNING_MARKS.iter().any(|mark| line.contains(mark)))
            .cloned()
            .collect()
    }

    pub fn cpu_ticks(&self) -> Option<u64> {
        self.tree.cpu_ticks()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A wrapper stops its server, workers and all, when its stdin
        // closes; killed outright, it would leave them running.
        if self.tree.descendants_named.is_some() {
            drop(self.child.stdin.take());
            let deadline = Instant::now() + STOP_GRACE;
            while Instant::now() < deadline {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProcessTree {
    /// The processes counted: the root, or its descendants of the name.
    pub fn pids(self) -> Vec<u32> {
        match self.descendants_named {
            None => vec![self.root],
            Some(name) => descendants(self.root, name),
        }
    }

    /// User + system CPU ticks summed over the processes counted; `None`
    /// when there are none left.
    pub fn cpu_ticks(self) -> Option<u64> {
        let ticks: Vec<u64> = self
            .pids()
            .into_iter()
            .filter_map(|pid| cpu_ticks(&format!("/proc/{pid}/stat")))
            .collect();
        (!ticks.is_empty()).then(|| ticks.iter().sum())
    }

    /// Resident memory summed over the processes counted, KiB.
    pub fn rss_kib(self) -> Option<u64> {
        rss_kib_sum(&self.pids())
    }
}

/// Resident memory of `pids` together, KiB; `None` when the first is gone.
pub fn rss_kib_sum(pids: &[u32]) -> Option<u64> {
    let (first, rest) = pids.split_first()?;
    Some(rss_kib(*first)? + rest.iter().copied().filter_map(rss_kib).sum::<u64>())
}

/// The descendants of `root` whose command (`comm`) is `name`, from one
/// pass over /proc/PID/stat: field 2 is the command, field 4 the parent.
fn descendants(root: u32, name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let table: Vec<(u32, u32, String)> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, after_name) = stat.rsplit_once(')')?;
            let (_, comm) = head.split_once('(')?;
            let parent = after_name.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, parent, comm.to_owned()))
        })
        .collect();
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (pid, _, comm) in table.iter().filter(|(_, ppid, _)| *ppid == parent) {
            parents.push(*pid);
            if comm == name {
                found.push(*pid);
            }
        }
    }
    found
}

/// The status of the answer to `GET /` on `addr`, if an HTTP answer
/// came; the connection closes after it.
fn answers(addr: SocketAddr) -> Option<u16> {
    let timeout = Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream
        .write_all(
            format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .ok()?;
    let mut head = [0_u8; 12];
    stream.read_exact(&mut head).ok()?;
    let line = std::str::from_utf8(&head).ok()?;
    line.strip_prefix("HTTP/1.")?.get(2..5)?.parse().ok()
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
