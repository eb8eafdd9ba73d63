//! The soak: one gateway on one store under a steady open loop for a long
//! time, read at the end of every interval, to answer whether its memory
//! stays flat under sustained load.
//!
//! A call leaves a record behind for the retry horizon
//! (`store.closed_record_secs`), so memory rises for that long after the
//! load starts however well the gateway behaves; what must not happen is
//! growth after it. The verdicts (`soak_report.rs`) therefore compare the
//! intervals right after the horizon with the last ones.
//!
//! Each interval counts the calls that completed in it. The readings — the
//! gateway's RSS and CPU time, Redis's `used_memory` and the run's keys,
//! the SQLite file — are taken on a thread of their own, never on the load
//! generator's runtime, where a blocking Redis call would hold up the
//! completions being timed.
//!
//! Like the other modes it uses the run's own key, org and Redis keys, and
//! deletes exactly those afterwards, also after a failure or a panic.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use tokio::runtime::Runtime;

use crate::books::{self, SettleCheck};
use crate::calls::Calls;
use crate::drive::{self, Sample};
use crate::error::BenchError;
use crate::procs::{self, Proc};
use crate::redis_stats::{KeySize, RedisProbe, RunKeys};
use crate::run::{self, INSTANT_REPLY_TOKENS, WARM_UP_CONNECTIONS};
use crate::setup::{self, RunFiles, Store};
use crate::soak_report;
use crate::subjects::{self, Upstreams};

/// A soak shorter than this prints a line every [`SHORT_INTERVAL`] rather
/// than every minute, so that a short run still shows a trend.
const SHORT_SOAK: Duration = Duration::from_secs(180);
const SHORT_INTERVAL: Duration = Duration::from_secs(10);
const INTERVAL: Duration = Duration::from_secs(60);
/// Bounds of `--soak`: at least one short interval, at most a day.
const MIN_SOAK: Duration = SHORT_INTERVAL;
const MAX_SOAK: Duration = Duration::from_secs(24 * 3600);
/// Failed readings kept for the summary.
const READING_ERRORS_KEPT: usize = 3;

/// The store of the soaked gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SoakStore {
    Redis,
    Memory,
    Sqlite,
}

impl SoakStore {
    /// The label the other modes give the gateway on this store.
    pub fn label(self) -> &'static str {
        match self {
            SoakStore::Redis => "G",
            SoakStore::Memory => "G0",
            SoakStore::Sqlite => "GS",
        }
    }
}

/// What a soak is asked to do.
#[derive(Debug)]
pub struct SoakPlan {
    pub duration: Duration,
    /// Calls per second of the open loop.
    pub rate: u32,
    /// Soaked one after another, each with a fresh mock and gateway.
    pub stores: Vec<SoakStore>,
    /// Time between two printed lines.
    pub interval: Duration,
    pub max_in_flight: usize,
    pub warm_up: Duration,
    pub redis_url: String,
}

impl SoakPlan {
    pub fn new(
        duration: Duration,
        rate: u32,
        stores: Vec<SoakStore>,
        redis_url: String,
    ) -> Result<SoakPlan, BenchError> {
        if !(MIN_SOAK..=MAX_SOAK).contains(&duration) {
            return Err(BenchError::Invalid(
                "--soak must be between 10s and 24h".to_owned(),
            ));
        }
        if rate == 0 || rate > 100_000 {
            return Err(BenchError::Invalid(
                "--soak-rate must be in 1..=100000".to_owned(),
            ));
        }
        let mut unique = Vec::with_capacity(stores.len());
        for store in stores {
            if !unique.contains(&store) {
                unique.push(store);
            }
        }
        Ok(SoakPlan {
            duration,
            rate,
            stores: unique,
            interval: if duration < SHORT_SOAK {
                SHORT_INTERVAL
            } else {
                INTERVAL
            },
            max_in_flight: 512,
            warm_up: Duration::from_secs(1),
            redis_url,
        })
    }
}

/// `90s`, `20m`, `1h`: a whole number and its unit, which is required so
/// that `20` cannot be read as seconds by one person and minutes by another.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let unit = match text.chars().last() {
        Some('s') => 1,
        Some('m') => 60,
        Some('h') => 3600,
        _ => return Err(format!("`{text}`: give a unit, as in 90s, 20m or 1h")),
    };
    let number: u64 = text[..text.len() - 1]
        .parse()
        .map_err(|_| format!("`{text}`: a whole number and s, m or h, as in 90s or 20m"))?;
    Ok(Duration::from_secs(number.saturating_mul(unit)))
}

/// The gateway and its store at one moment.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    /// Since the load started.
    pub at: Duration,
    /// Calls answered since the load started.
    pub calls: u64,
    pub rss_kib: Option<u64>,
    /// The gateway's open file descriptors: its connections, whose buffers
    /// are part of its RSS.
    pub fds: Option<usize>,
    pub cpu_ticks: Option<u64>,
    /// Redis `used_memory`, bytes (Redis store; server-wide).
    pub redis_memory: Option<u64>,
    /// The run's Redis keys and the entries they hold (Redis store).
    pub redis_keys: Option<(usize, u64)>,
    /// The SQLite file and its log, bytes (SQLite store).
    pub file_bytes: Option<(u64, u64)>,
}

/// One interval: the calls that completed in it, and what was read at its
/// end.
pub struct Interval {
    pub start: Duration,
    /// Its `elapsed` is the interval's length.
    pub sample: Sample,
    pub reading: Reading,
    /// Gateway CPU time per call answered in the interval, in clock ticks
    /// and calls (see `figures::per_call_cpu`).
    pub cpu: Option<(u64, u64)>,
    /// Growth of Redis's `used_memory` per call answered over the last
    /// retry horizon (since the load started, before a horizon has passed):
    /// what the records of that many calls take.
    pub bytes_per_call: Option<f64>,
}

/// What one store's soak measured.
pub struct SoakRun {
    pub store: SoakStore,
    pub closed_record: Duration,
    /// Read after the warm-up, as the load starts.
    pub baseline: Reading,
    pub intervals: Vec<Interval>,
    pub books: SettleCheck,
    pub peak_rss_kib: Option<u64>,
    /// The run's Redis keys at the end, before they were deleted.
    pub redis_keys: Vec<KeySize>,
    pub redis_keys_deleted: usize,
    pub warnings: Vec<String>,
    pub reading_errors: Vec<String>,
    pub load_before: String,
    pub load_after: String,
}

/// Soaks each store of the plan in turn, printing every interval's line as
/// it ends and a summary after each store. `Ok(false)` when a soak's own
/// checks failed: a call failed, or the books do not balance.
pub fn run(plan: &SoakPlan, runtime: &Runtime) -> Result<bool, BenchError> {
    // A missing Redis is said before anything runs, not after the other
    // stores' soaks.
    if plan.stores.contains(&SoakStore::Redis) {
        RedisProbe::connect(&plan.redis_url).map_err(|error| {
            BenchError::Invalid(format!(
                "Redis at {} does not answer: {error}",
                plan.redis_url
            ))
        })?;
    }
    let mut holds = true;
    for &store in &plan.stores {
        let soak = soak(plan, store, runtime)?;
        let summary = soak_report::summary(plan, &soak);
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(summary.text.as_bytes())?;
        stdout.flush()?;
        holds &= summary.checks_hold;
    }
    Ok(holds)
}

/// One store's soak, from starting its processes to deleting its keys.
fn soak(plan: &SoakPlan, store: SoakStore, runtime: &Runtime) -> Result<SoakRun, BenchError> {
    let load_before = run::load_average();
    let files = RunFiles::new()?;
    let probe = match store {
        SoakStore::Redis => Some(RedisProbe::connect(&plan.redis_url)?),
        _ => None,
    };
    let mut run_keys = RunKeys::new(probe, &files.run_id);
    let mock = Proc::start(
        "mock (instant)",
        setup::mock_command(INSTANT_REPLY_TOKENS, None),
    )?;
    let upstreams = Upstreams {
        direct: mock.addr,
        instant: mock.addr,
        streaming: mock.addr,
    };
    let (config_store, file) = match store {
        SoakStore::Memory => (Store::Memory, None),
        // Drained into a sink, as production runs it: the ledger leaves
        // Redis within seconds, and the sink file's size is read like the
        // SQLite store's.
        SoakStore::Redis => {
            let sink = "g-soak-ledger.db".to_owned();
            (
                Store::Redis {
                    url: plan.redis_url.clone(),
                    sink: Some(sink.clone()),
                },
                Some(sink),
            )
        }
        SoakStore::Sqlite => {
            let file = "gs-soak.db".to_owned();
            (Store::Sqlite { file: file.clone() }, Some(file))
        }
    };
    let label = store.label();
    let mut subject = subjects::gateway(&files, label, "soak", &config_store, &upstreams, false)?;
    let config = subject
        .config
        .as_deref()
        .ok_or_else(|| BenchError::Invalid(format!("{label} has no config file")))?;
    let closed_record = setup::closed_record(config)?;
    let calls = Arc::new(Calls::instant()?);
    eprintln!("soak {label}: warming up");
    let warm = runtime.block_on(drive::closed_loop(
        &subject.target,
        &calls,
        WARM_UP_CONNECTIONS,
        plan.warm_up,
    ))?;
    run::account(&mut subject, &warm, "warm-up")?;

    let tally = Arc::new(Mutex::new(Sample::empty()));
    let mut sampler = Sampler {
        label,
        tally: tally.clone(),
        gateway_pid: subject.proxy_pid(),
        probe: match store {
            SoakStore::Redis => Some(RedisProbe::connect(&plan.redis_url)?),
            _ => None,
        },
        run_id: files.run_id.clone(),
        sqlite: file.map(|file| files.dir().join(file)),
        closed_record,
        started: Instant::now(),
        baseline: Reading::default(),
        last: Reading::default(),
        intervals: Vec::new(),
        errors: Vec::new(),
    };
    sampler.baseline = sampler.read(Duration::ZERO, 0);
    sampler.last = sampler.baseline.clone();
    print(&soak_report::header(store, plan, closed_record));
    sampler.started = Instant::now();
    let driven = thread::scope(|scope| {
        // Dropped when the load ends (or unwinds), which stops the sampler.
        let (stop, stopped) = mpsc::channel::<()>();
        let sampler = &mut sampler;
        let every =
            scope.spawn(move || sampler.every_interval(&stopped, plan.duration, plan.interval));
        let driven = runtime.block_on(drive::open_loop_into(
            &subject.target,
            &calls,
            plan.rate,
            plan.duration,
            plan.max_in_flight,
            &tally,
        ));
        drop(stop);
        every
            .join()
            .map_err(|_| BenchError::Invalid("the soak's sampler panicked".to_owned()))?;
        driven
    });
    driven?;
    // The last interval also takes the calls that completed after the
    // pacer's last start.
    sampler.close_interval();

    for interval in &sampler.intervals {
        subject.calls += interval.sample.ok;
        subject.charged = subject.charged.saturating_add(interval.sample.charged);
    }
    let books = runtime.block_on(books::check(
        &subject.target,
        "soak",
        subject.calls,
        subject.charged,
        false,
    ))?;
    let redis_keys = match sampler.probe.as_mut() {
        Some(probe) => probe.keys_with(&files.run_id)?,
        None => Vec::new(),
    };
    let redis_keys_deleted = run_keys.delete()?;
    Ok(SoakRun {
        store,
        closed_record,
        baseline: sampler.baseline,
        intervals: sampler.intervals,
        books,
        peak_rss_kib: subject.proxy_pid().and_then(procs::peak_rss_kib),
        redis_keys,
        redis_keys_deleted,
        warnings: subject.warnings(),
        reading_errors: sampler.errors,
        load_before,
        load_after: run::load_average(),
    })
}

fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Closes an interval at each of its ends: takes the calls completed in
/// it, reads the gateway and its store, and prints the line.
struct Sampler {
    label: &'static str,
    tally: Arc<Mutex<Sample>>,
    gateway_pid: Option<u32>,
    /// Its own connection: the readings run on the sampler's thread.
    probe: Option<RedisProbe>,
    run_id: String,
    sqlite: Option<PathBuf>,
    closed_record: Duration,
    started: Instant,
    baseline: Reading,
    last: Reading,
    intervals: Vec<Interval>,
    errors: Vec<String>,
}

impl Sampler {
    /// Closes every interval that ends before `duration`, until `stop`
    /// says the load is over; the last one is closed by the caller once
    /// the load has drained.
    fn every_interval(&mut self, stop: &Receiver<()>, duration: Duration, interval: Duration) {
        let mut end = interval;
        while end < duration {
            let wait = (self.started + end).saturating_duration_since(Instant::now());
            match stop.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => self.close_interval(),
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            end += interval;
        }
    }

    fn close_interval(&mut self) {
        let mut sample = drive::take(&self.tally);
        let reading = self.read(self.started.elapsed(), self.last.calls + sample.ok);
        let start = self.last.at;
        sample.elapsed = reading.at.saturating_sub(start);
        let cpu = reading
            .cpu_ticks
            .zip(self.last.cpu_ticks)
            .map(|(now, before)| (now.saturating_sub(before), sample.ok));
        let interval = Interval {
            start,
            bytes_per_call: self.bytes_per_call(&reading),
            sample,
            reading,
            cpu,
        };
        print(&soak_report::line(self.label, &interval));
        self.last = interval.reading.clone();
        self.intervals.push(interval);
    }

    fn read(&mut self, at: Duration, calls: u64) -> Reading {
        let mut reading = Reading {
            at,
            calls,
            rss_kib: self.gateway_pid.and_then(procs::rss_kib),
            fds: self.gateway_pid.and_then(procs::open_fds),
            cpu_ticks: self
                .gateway_pid
                .and_then(|pid| procs::cpu_ticks(&format!("/proc/{pid}/stat"))),
            ..Reading::default()
        };
        if let Some(path) = &self.sqlite {
            let size = |path: PathBuf| std::fs::metadata(path).map_or(0, |meta| meta.len());
            let mut wal = path.clone().into_os_string();
            wal.push("-wal");
            reading.file_bytes = Some((size(path.clone()), size(wal.into())));
        }
        if let Some(probe) = self.probe.as_mut() {
            // A failed reading leaves a gap in its column, not a failed soak.
            match probe.used_memory() {
                Ok(bytes) => reading.redis_memory = Some(bytes),
                Err(error) => keep_error(&mut self.errors, at, error),
            }
            match probe.keys_with(&self.run_id) {
                Ok(keys) => {
                    reading.redis_keys = Some((keys.len(), keys.iter().map(|k| k.entries).sum()))
                }
                Err(error) => keep_error(&mut self.errors, at, error),
            }
        }
        reading
    }

    /// Redis's growth per call over the retry horizon that ends at `now`:
    /// from the earlier reading nearest the horizon's start.
    fn bytes_per_call(&self, now: &Reading) -> Option<f64> {
        let from = now.at.saturating_sub(self.closed_record);
        let then = std::iter::once(&self.baseline)
            .chain(self.intervals.iter().map(|i| &i.reading))
            .min_by_key(|r| r.at.abs_diff(from))?;
        let grew = signed(now.redis_memory?) - signed(then.redis_memory?);
        let calls = now.calls.checked_sub(then.calls).filter(|&c| c > 0)?;
        Some(grew as f64 / calls as f64)
    }
}

fn keep_error(errors: &mut Vec<String>, at: Duration, error: BenchError) {
    if errors.len() < READING_ERRORS_KEPT {
        errors.push(format!("at {:.0} s: {error}", at.as_secs_f64()));
    }
}

fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}
