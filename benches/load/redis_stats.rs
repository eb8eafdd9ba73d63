//! What Redis itself says about the gateway's use of it: script calls and
//! the time Redis spent in them from `INFO commandstats`, socket reads from
//! `INFO stats` (more script calls than reads means they arrived
//! pipelined), the CPU time of the Redis process from `INFO cpu`, its
//! memory from `INFO memory`, the size of the run's own keys, and their
//! removal.
//!
//! `total_commands_processed` also counts the commands a script runs
//! inside Redis, so per-read figures use the EVALSHA calls, which are what
//! the gateway sends.
//!
//! The counters are server-wide: anything else using the same Redis during
//! a phase is counted too, which can only push the figures up.

use std::collections::HashMap;

use redis::Connection;

use crate::error::BenchError;

/// Keys inspected per SCAN step while cleaning up.
const SCAN_COUNT: usize = 1_000;
/// Upper bound on SCAN steps, so cleanup ends even on a huge keyspace.
const MAX_SCAN_STEPS: usize = 100_000;

pub struct RedisProbe {
    conn: Connection,
}

/// Server-wide counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub evalsha: u64,
    /// Time Redis spent running EVALSHA calls, µs.
    pub evalsha_usec: u64,
    pub eval: u64,
    /// Every command Redis ran, those inside scripts included.
    pub commands: u64,
    /// Socket reads.
    pub reads: u64,
    /// CPU time of the Redis server process (user + system, all its
    /// threads), µs.
    pub cpu_usec: u64,
}

impl Counters {
    /// `self - before`, per field.
    pub fn since(self, before: Counters) -> Counters {
        Counters {
            evalsha: self.evalsha.saturating_sub(before.evalsha),
            evalsha_usec: self.evalsha_usec.saturating_sub(before.evalsha_usec),
            eval: self.eval.saturating_sub(before.eval),
            commands: self.commands.saturating_sub(before.commands),
            reads: self.reads.saturating_sub(before.reads),
            cpu_usec: self.cpu_usec.saturating_sub(before.cpu_usec),
        }
    }

    pub fn plus(self, other: Counters) -> Counters {
        Counters {
            evalsha: self.evalsha + other.evalsha,
            evalsha_usec: self.evalsha_usec + other.evalsha_usec,
            eval: self.eval + other.eval,
            commands: self.commands + other.commands,
            reads: self.reads + other.reads,
            cpu_usec: self.cpu_usec + other.cpu_usec,
        }
    }
}

impl RedisProbe {
    pub fn connect(url: &str) -> Result<RedisProbe, BenchError> {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_connection_with_timeout(std::time::Duration::from_secs(2))?;
        redis::cmd("PING").query::<String>(&mut conn)?;
        Ok(RedisProbe { conn })
    }

    pub fn counters(&mut self) -> Result<Counters, BenchError> {
        let commandstats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn)?;
        let stats: String = redis::cmd("INFO").arg("stats").query(&mut self.conn)?;
        let cpu: String = redis::cmd("INFO").arg("cpu").query(&mut self.conn)?;
        let calls = |command: &str| command_stat(&commandstats, command, "calls").unwrap_or(0);
        let stats = info_fields(&stats);
        let field = |name: &str| stats.get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
        let cpu = info_fields(&cpu);
        // Seconds with a fractional part.
        let seconds = |name: &str| {
            cpu.get(name)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok(Counters {
            evalsha: calls("evalsha"),
            evalsha_usec: command_stat(&commandstats, "evalsha", "usec").unwrap_or(0),
            eval: calls("eval"),
            commands: field("total_commands_processed"),
            reads: field("total_reads_processed"),
            cpu_usec: ((seconds("used_cpu_user") + seconds("used_cpu_sys")) * 1e6) as u64,
        })
    }

    /// `used_memory` of `INFO memory`: the bytes Redis has allocated, for
    /// every client's data, not only this run's.
    pub fn used_memory(&mut self) -> Result<u64, BenchError> {
        let memory: String = redis::cmd("INFO").arg("memory").query(&mut self.conn)?;
        info_fields(&memory)
            .get("used_memory")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| BenchError::Invalid("INFO memory has no used_memory".to_owned()))
    }

    /// Every key whose name holds `marker` (the run id), with its type, its
    /// element count and Redis's estimate of its bytes (`MEMORY USAGE`,
    /// which samples a few elements of a big key rather than reading all).
    pub fn keys_with(&mut self, marker: &str) -> Result<Vec<KeySize>, BenchError> {
        let mut sizes = Vec::new();
        for name in self.names_with(marker)? {
            let kind: String = redis::cmd("TYPE").arg(&name).query(&mut self.conn)?;
            let count = match kind.as_str() {
                // Gone since the SCAN (an emptied set is deleted).
                "none" => continue,
                "hash" => "HLEN",
                "zset" => "ZCARD",
                "stream" => "XLEN",
                "set" => "SCARD",
                "list" => "LLEN",
                _ => "EXISTS",
            };
            let entries: u64 = redis::cmd(count).arg(&name).query(&mut self.conn)?;
            let bytes: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&name)
                .query(&mut self.conn)?;
            sizes.push(KeySize {
                name,
                kind,
                entries,
                bytes: bytes.unwrap_or(0),
            });
        }
        Ok(sizes)
    }

    /// Deletes every key whose name holds `marker` (the run id); returns
    /// how many. Keys of anyone else are never touched.
    pub fn delete_keys_with(&mut self, marker: &str) -> Result<usize, BenchError> {
        let names = self.names_with(marker)?;
        let mut deleted = 0;
        for batch in names.chunks(SCAN_COUNT) {
            deleted += redis::cmd("UNLINK")
                .arg(batch)
                .query::<usize>(&mut self.conn)?;
        }
        Ok(deleted)
    }

    /// The names of the keys that hold `marker`.
    fn names_with(&mut self, marker: &str) -> Result<Vec<String>, BenchError> {
        let pattern = format!("*{marker}*");
        let mut cursor: u64 = 0;
        let mut names = Vec::new();
        for _ in 0..MAX_SCAN_STEPS {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query(&mut self.conn)?;
            names.extend(keys);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        // SCAN may return a key more than once.
        names.sort_unstable();
        names.dedup();
        Ok(names)
    }
}

/// One of the run's keys, as Redis sizes it.
#[derive(Clone, Debug)]
pub struct KeySize {
    pub name: String,
    /// `hash`, `zset`, `stream`, …
    pub kind: String,
    /// Fields, members or entries.
    pub entries: u64,
    pub bytes: u64,
}

/// `key:value` lines of an INFO section.
fn info_fields(info: &str) -> HashMap<&str, &str> {
    info.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .collect()
}

/// `N` of `name=N` in `cmdstat_<command>:calls=N,usec=N,...`.
fn command_stat(commandstats: &str, command: &str, name: &str) -> Option<u64> {
    let fields = info_fields(commandstats);
    let stat = fields.get(format!("cmdstat_{command}").as_str())?;
    stat.split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)?
        .1
        .parse()
        .ok()
}

/// A run's Redis keys, deleted when the run ends and, should it fail or
/// panic first, when this is dropped.
pub struct RunKeys {
    probe: Option<RedisProbe>,
    run_id: String,
}

impl RunKeys {
    /// The keys marked with `run_id`, on the Redis `probe` reaches (none:
    /// the run used no Redis).
    pub fn new(probe: Option<RedisProbe>, run_id: &str) -> RunKeys {
        RunKeys {
            probe,
            run_id: run_id.to_owned(),
        }
    }

    /// Deletes the keys; returns how many there were.
    pub fn delete(&mut self) -> Result<usize, BenchError> {
        match self.probe.take() {
            Some(mut probe) => probe.delete_keys_with(&self.run_id),
            None => Ok(0),
        }
    }
}

impl Drop for RunKeys {
    fn drop(&mut self) {
        if let Err(error) = self.delete() {
            eprintln!("could not delete this run's Redis keys: {error}");
        }
    }
}
