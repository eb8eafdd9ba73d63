//! One benchmark run, start to end: start the processes, warm them up,
//! run every mode with the configurations alternating round by round,
//! check that the gateways settled every call, and gather what the report
//! prints.
//!
//! Within a round each mode runs D P N G0 GC G GD GS back to back, and the
//! rounds repeat that, so a burst of other work on this shared machine
//! lands on all configurations alike (GC, G0 with the caps, and GD, G with
//! its ledger drained into a sink when `--drain` asks for it, only among
//! the instant calls). The instant calls and the streams use
//! separate processes: the streaming gateways start fresh, so their idle
//! memory and their growth per stream are their own, not what the instant
//! phase left behind. Each phase starts its own upstream: the instant
//! calls the one `--upstream` names (the instant upstream by default), the
//! streams the paced mock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::api_keys;
use crate::books::{self, SettleCheck, SinkCheck};
use crate::calls::Calls;
use crate::drive::{self, Sample};
use crate::error::BenchError;
use crate::nginx::Nginx;
use crate::procs::Proc;
use crate::redis_stats::{Counters, RedisProbe};
use crate::setup::{self, RunFiles, STREAM_MODEL};
use crate::streams::{self, StreamRun};
use crate::subjects::{self, Subject, Ticks, Upstreams, DRAINED};
use crate::{Mode, Settings, Upstream};

/// Reply length of the instant calls' upstream, in tokens.
pub const INSTANT_REPLY_TOKENS: u64 = 12;
/// How long a freshly started gateway sits before its idle memory is read.
const SETTLE_IN: Duration = Duration::from_millis(300);
/// Connections of the warm-up loop.
pub const WARM_UP_CONNECTIONS: usize = 4;

/// What one configuration measured over the whole run.
pub struct Measured {
    pub label: &'static str,
    /// Why the configuration did not run, if it did not.
    pub skipped: Option<String>,
    /// Closed loop at full concurrency, one sample per round.
    pub closed: Vec<Sample>,
    /// CPU of every process over the closed loops.
    pub closed_cpu: CpuUse,
    /// Closed loop with one connection, all rounds merged.
    pub single: Option<Sample>,
    pub single_cpu: CpuUse,
    /// Open loop at the fixed rate, all rounds merged.
    pub open: Option<Sample>,
    pub open_cpu: CpuUse,
    /// One per round.
    pub streams: Vec<StreamRun>,
    /// CPU over the streaming rounds, and their wall time.
    pub stream_cpu: Ticks,
    pub stream_time: Duration,
    /// Resident memory of the freshly started streaming proxy, KiB.
    pub idle_rss_kib: Option<u64>,
    /// Resident memory before each streaming round, KiB.
    pub rss_before_kib: Vec<Option<u64>>,
    /// The gateways' books after the instant calls and after the streams.
    pub settlement: Vec<SettleCheck>,
    /// The drained gateway's ledger sink against its calls (GD).
    pub sink: Vec<SinkCheck>,
    /// Warnings the proxy logged.
    pub warnings: Vec<String>,
    /// How the store's file grew over the measured phases (GS).
    pub file_growth: Option<FileGrowth>,
}

/// CPU of the proxy, the upstream, the client and Redis over one mode's
/// phases, and the calls answered there.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    pub ticks: Ticks,
    pub calls: u64,
}

impl CpuUse {
    fn add(&mut self, ticks: Ticks, calls: u64) {
        self.ticks = self.ticks.plus(ticks);
        self.calls += calls;
    }
}

/// Growth of a SQLite store's file (database and write-ahead log) summed
/// over the phases a gateway served, and the calls answered in them.
#[derive(Clone, Copy, Debug, Default)]
pub struct FileGrowth {
    pub db_bytes: i64,
    pub wal_bytes: i64,
    pub calls: u64,
    /// The largest the files were at the end of a phase.
    pub peak_db_bytes: u64,
    pub peak_wal_bytes: u64,
}

impl FileGrowth {
    pub fn bytes(&self) -> i64 {
        self.db_bytes + self.wal_bytes
    }

    pub fn per_call(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.bytes() as f64 / self.calls as f64)
    }

    fn add(&mut self, before: (u64, u64), after: (u64, u64), calls: u64) {
        let grew = |a: u64, b: u64| signed(a) - signed(b);
        self.db_bytes += grew(after.0, before.0);
        self.wal_bytes += grew(after.1, before.1);
        self.calls += calls;
        self.peak_db_bytes = self.peak_db_bytes.max(after.0);
        self.peak_wal_bytes = self.peak_wal_bytes.max(after.1);
    }
}

/// Redis's own counters over the gateway's phases.
#[derive(Clone, Copy, Debug, Default)]
pub struct RedisUse {
    /// Over every G phase of instant calls.
    pub all: Counters,
    pub calls: u64,
    /// Over the G closed-loop phases only (concurrent, so pipelined).
    pub closed: Counters,
    pub closed_calls: u64,
}

pub struct Outcome {
    pub measured: Vec<Measured>,
    pub redis: Option<RedisUse>,
    pub redis_keys_deleted: usize,
    pub load_before: String,
    pub load_after: String,
    pub elapsed: Duration,
}

/// What every phase needs.
struct Bench<'a> {
    settings: &'a Settings,
    runtime: &'a Runtime,
    files: RunFiles,
    probe: Option<RedisProbe>,
    /// Why G cannot run, if it cannot.
    redis_down: Option<String>,
    /// nginx for N, or why N cannot run.
    nginx: Result<Nginx, String>,
    measured: Vec<Measured>,
    redis_use: RedisUse,
    /// The run's Redis keys are gone (or Redis was never reached).
    redis_clean: bool,
}

pub fn run(settings: &Settings, runtime: &Runtime) -> Result<Outcome, BenchError> {
    let started = Instant::now();
    let load_before = load_average();
    let probe = RedisProbe::connect(&settings.redis_url);
    let redis_down = probe
        .as_ref()
        .err()
        .map(|error| format!("Redis at {} does not answer: {error}", settings.redis_url));
    let mut bench = Bench {
        settings,
        runtime,
        files: RunFiles::new()?,
        probe: probe.ok(),
        redis_down,
        nginx: Nginx::find(settings.connections.max(settings.streams)),
        measured: subjects::labels(settings.drain)
            .into_iter()
            .map(Measured::new)
            .collect(),
        redis_use: RedisUse::default(),
        redis_clean: false,
    };
    let instant_modes: Vec<Mode> = settings
        .modes
        .iter()
        .copied()
        .filter(|mode| *mode != Mode::Streams)
        .collect();
    if !instant_modes.is_empty() {
        bench.instant_calls(&instant_modes)?;
    }
    if settings.modes.contains(&Mode::Streams) {
        bench.streams()?;
    }
    let redis_keys_deleted = bench.delete_redis_keys()?;
    let g_ran = bench
        .measured
        .iter()
        .any(|m| m.label == "G" && m.skipped.is_none());
    Ok(Outcome {
        redis: (g_ran && !instant_modes.is_empty()).then_some(bench.redis_use),
        measured: std::mem::take(&mut bench.measured),
        redis_keys_deleted,
        load_before,
        load_after: load_average(),
        elapsed: started.elapsed(),
    })
}

impl Bench<'_> {
    /// Deletes every Redis key named after this run; returns how many.
    fn delete_redis_keys(&mut self) -> Result<usize, BenchError> {
        let deleted = match self.probe.as_mut() {
            Some(probe) => probe.delete_keys_with(&self.files.run_id)?,
            None => 0,
        };
        self.redis_clean = true;
        Ok(deleted)
    }

    fn instant_calls(&mut self, modes: &[Mode]) -> Result<(), BenchError> {
        let (upstream, upstreams) = instant_upstream(self.settings.upstream)?;
        let api_keys = self.settings.api_keys;
        let mut subjects = self.start_subjects("instant", &upstreams, api_keys > 0)?;
        subjects::start_capped(
            &mut subjects,
            &self.files,
            "instant",
            &upstreams,
            api_keys > 0,
        )?;
        if self.settings.drain {
            let started = subjects::start_drained(
                &mut subjects,
                &self.files,
                "instant",
                &upstreams,
                &self.settings.redis_url,
                api_keys > 0,
            )?;
            if !started {
                let why = find_skipped(&self.measured, "G");
                result_of(&mut self.measured, DRAINED).skipped =
                    Some(format!("G did not run ({why})"));
            }
        }
        if api_keys > 0 {
            eprintln!("making {api_keys} keys on each gateway");
            for subject in &mut subjects {
                let Some(key) = &subject.key else { continue };
                // GC's keys carry the caps its config's key does.
                let caps = (subject.target.customers() > 0).then(setup::caps::json);
                let secrets = self.runtime.block_on(api_keys::make(
                    &subject.target,
                    &self.files.admin_key(),
                    &format!("{}-api", key.key_id),
                    api_keys,
                    caps.as_ref(),
                ))?;
                subject.target = subject.target.with_keys(&secrets)?;
                subject.api_keys = api_keys;
            }
        }
        let calls = Arc::new(Calls::instant()?);
        eprintln!("warming up");
        for subject in &mut subjects {
            let sample = self.runtime.block_on(drive::closed_loop(
                &subject.target,
                &calls,
                WARM_UP_CONNECTIONS,
                self.settings.warm_up,
            ))?;
            account(subject, &sample, "warm-up")?;
        }
        for round in 1..=self.settings.rounds {
            for &mode in modes {
                eprintln!(
                    "round {round}/{}: {}",
                    self.settings.rounds,
                    mode.describe()
                );
                for subject in &mut subjects {
                    self.instant_phase(mode, subject, &upstream, &calls)?;
                }
            }
        }
        self.close_books(&subjects, "instant calls")
    }

    /// One configuration in one mode for one round.
    fn instant_phase(
        &mut self,
        mode: Mode,
        subject: &mut Subject,
        upstream: &Proc,
        calls: &Arc<Calls>,
    ) -> Result<(), BenchError> {
        let settings = self.settings;
        let ticks_before = Ticks::read(subject, upstream);
        let redis_before = self.redis_counters(subject)?;
        let file_before = self.file_bytes(subject);
        let sample = self.runtime.block_on(async {
            match mode {
                Mode::Closed => {
                    drive::closed_loop(
                        &subject.target,
                        calls,
                        settings.connections,
                        settings.seconds,
                    )
                    .await
                }
                Mode::Single => {
                    drive::closed_loop(&subject.target, calls, 1, settings.seconds).await
                }
                Mode::Open | Mode::Streams => {
                    drive::open_loop(
                        &subject.target,
                        calls,
                        settings.rate,
                        settings.seconds,
                        settings.max_in_flight,
                    )
                    .await
                }
            }
        })?;
        let mut used = Ticks::read(subject, upstream).since(ticks_before);
        self.file_grew(subject, file_before, sample.ok);
        if let (Some(before), Some(after)) = (redis_before, self.redis_counters(subject)?) {
            let delta = after.since(before);
            used.redis_usec = delta.cpu_usec;
            self.redis_use.all = self.redis_use.all.plus(delta);
            self.redis_use.calls += sample.ok;
            if mode == Mode::Closed {
                self.redis_use.closed = self.redis_use.closed.plus(delta);
                self.redis_use.closed_calls += sample.ok;
            }
        }
        account(subject, &sample, mode.describe())?;
        eprintln!(
            "  {:<2} {:>7.0} calls/s  p99 {:>8.0} µs",
            subject.label,
            sample.rps(),
            sample.latency.value_at_quantile(0.99) as f64 / 1e3
        );
        let results = result_of(&mut self.measured, subject.label);
        match mode {
            Mode::Closed => {
                results.closed_cpu.add(used, sample.ok);
                results.closed.push(sample);
            }
            Mode::Single => {
                results.single_cpu.add(used, sample.ok);
                merge_into(&mut results.single, sample);
            }
            Mode::Open | Mode::Streams => {
                results.open_cpu.add(used, sample.ok);
                merge_into(&mut results.open, sample);
            }
        }
        Ok(())
    }

    fn streams(&mut self) -> Result<(), BenchError> {
        let settings = self.settings;
        let stream_mock = Proc::start(
            "mock (streaming)",
            setup::mock_command(settings.stream_tokens, Some(settings.tokens_per_sec)),
        )?;
        let upstreams = Upstreams {
            direct: stream_mock.addr,
            instant: stream_mock.addr,
            streaming: stream_mock.addr,
        };
        // The streams keep the config's key: their gateways start fresh,
        // and making the keys again would take longer than the phase.
        let mut subjects = self.start_subjects("streams", &upstreams, false)?;
        std::thread::sleep(SETTLE_IN);
        for subject in &subjects {
            result_of(&mut self.measured, subject.label).idle_rss_kib =
                subject.proxy_tree().and_then(|tree| tree.rss_kib());
        }
        let calls = Arc::new(Calls::streamed(settings.stream_tokens)?);
        let price = RunFiles::price(STREAM_MODEL)?;
        // The whole ramp, three times the longest stream, and a margin.
        let stream_secs = settings.stream_tokens as f64 / f64::from(settings.tokens_per_sec.max(1));
        let ramp_secs = settings.streams as f64 / f64::from(settings.stream_rate.max(1));
        let limit = Duration::from_secs_f64(ramp_secs + stream_secs * 3.0 + 30.0);
        for round in 1..=settings.rounds {
            eprintln!(
                "round {round}/{}: {} streams",
                settings.rounds, settings.streams
            );
            for subject in &mut subjects {
                let rss_before = subject.proxy_tree().and_then(|tree| tree.rss_kib());
                let ticks_before = Ticks::read(subject, &stream_mock);
                let file_before = self.file_bytes(subject);
                let run = self.runtime.block_on(streams::run(
                    &subject.target,
                    &calls,
                    settings.streams,
                    settings.stream_rate,
                    &price,
                    subject.proxy_tree(),
                    limit,
                ))?;
                let used = Ticks::read(subject, &stream_mock).since(ticks_before);
                self.file_grew(subject, file_before, run.completed as u64);
                subject.charged = subject.charged.saturating_add(run.cost);
                subject.calls += run.completed as u64;
                eprintln!(
                    "  {:<2} {} of {} settled  TTFT p99 {:>8.0} µs  {:>6.0} events/s",
                    subject.label,
                    run.completed,
                    run.streams,
                    run.ttft.value_at_quantile(0.99) as f64 / 1e3,
                    run.events_per_sec()
                );
                let results = result_of(&mut self.measured, subject.label);
                results.rss_before_kib.push(rss_before);
                results.stream_cpu = results.stream_cpu.plus(used);
                results.stream_time += run.elapsed;
                results.streams.push(run);
            }
        }
        self.close_books(&subjects, "streams")
    }

    fn start_subjects(
        &mut self,
        phase: &str,
        upstreams: &Upstreams,
        admin: bool,
    ) -> Result<Vec<Subject>, BenchError> {
        let (subjects, skipped) = subjects::start(
            &self.files,
            phase,
            upstreams,
            self.nginx.as_ref().map_err(String::as_str),
            &self.settings.redis_url,
            self.redis_down.as_deref(),
            admin,
        )?;
        if let Some(cores) = self.settings.store_core {
            for gs in subjects.iter().filter(|subject| subject.label == "GS") {
                if let Some(pid) = gs.proxy_pid() {
                    cores.pin_store_threads(pid)?;
                }
            }
        }
        for (label, reason) in skipped {
            result_of(&mut self.measured, label).skipped = Some(reason);
        }
        Ok(subjects)
    }

    /// Checks the gateways' books and keeps the proxies' warnings.
    fn close_books(&mut self, subjects: &[Subject], phase: &'static str) -> Result<(), BenchError> {
        for subject in subjects {
            if subject.key.is_some() {
                let check = self.runtime.block_on(books::check(
                    &subject.target,
                    phase,
                    subject.calls,
                    subject.charged,
                    subject.api_keys > 0,
                ))?;
                result_of(&mut self.measured, subject.label)
                    .settlement
                    .push(check);
            }
            if let Some(sink) = &subject.sink_file {
                let check = books::check_sink(&self.files.dir().join(sink), phase, subject.calls);
                result_of(&mut self.measured, subject.label)
                    .sink
                    .push(check);
            }
            result_of(&mut self.measured, subject.label)
                .warnings
                .extend(subject.warnings());
        }
        Ok(())
    }

    /// Bytes of the subject's store file and its log, if it has one.
    fn file_bytes(&self, subject: &Subject) -> Option<(u64, u64)> {
        let file = subject.store_file.as_deref()?;
        Some(self.files.sqlite_bytes(file))
    }

    /// Adds how the subject's store file grew since `before` over `calls`.
    fn file_grew(&mut self, subject: &Subject, before: Option<(u64, u64)>, calls: u64) {
        let (Some(before), Some(after)) = (before, self.file_bytes(subject)) else {
            return;
        };
        result_of(&mut self.measured, subject.label)
            .file_growth
            .get_or_insert_with(FileGrowth::default)
            .add(before, after, calls);
    }

    fn redis_counters(&mut self, subject: &Subject) -> Result<Option<Counters>, BenchError> {
        match self.probe.as_mut() {
            Some(probe) if subject.label == "G" => Ok(Some(probe.counters()?)),
            _ => Ok(None),
        }
    }
}

impl Drop for Bench<'_> {
    /// A run that failed or panicked half way still removes its Redis keys.
    fn drop(&mut self) {
        if !self.redis_clean {
            if let Err(error) = self.delete_redis_keys() {
                eprintln!("could not delete this run's Redis keys: {error}");
            }
        }
    }
}

impl Measured {
    fn new(label: &'static str) -> Measured {
        Measured {
            label,
            skipped: None,
            closed: Vec::new(),
            closed_cpu: CpuUse::default(),
            single: None,
            single_cpu: CpuUse::default(),
            open: None,
            open_cpu: CpuUse::default(),
            streams: Vec::new(),
            stream_cpu: Ticks::default(),
            stream_time: Duration::ZERO,
            idle_rss_kib: None,
            rss_before_kib: Vec::new(),
            settlement: Vec::new(),
            sink: Vec::new(),
            warnings: Vec::new(),
            file_growth: None,
        }
    }
}

fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

fn result_of<'a>(measured: &'a mut [Measured], label: &str) -> &'a mut Measured {
    match measured.iter_mut().find(|m| m.label == label) {
        Some(m) => m,
        None => unreachable!("every label has its results"),
    }
}

/// Why `label` did not run, as its results say.
fn find_skipped(measured: &[Measured], label: &str) -> String {
    measured
        .iter()
        .find(|m| m.label == label)
        .and_then(|m| m.skipped.clone())
        .unwrap_or_else(|| "not started".to_owned())
}

fn merge_into(slot: &mut Option<Sample>, sample: Sample) {
    match slot {
        Some(total) => {
            total.merge(&sample);
            total.elapsed += sample.elapsed;
        }
        None => *slot = Some(sample),
    }
}

/// Counts a phase's calls and charges toward the books check; a phase with
/// failed calls stops the run, since its figures would mean nothing.
pub fn account(subject: &mut Subject, sample: &Sample, phase: &str) -> Result<(), BenchError> {
    subject.charged = subject.charged.saturating_add(sample.charged);
    subject.calls += sample.ok;
    if sample.errors == 0 {
        return Ok(());
    }
    Err(BenchError::Invalid(format!(
        "{} {phase}: {} of {} calls failed; first: {}",
        subject.label,
        sample.errors,
        sample.ok + sample.errors,
        sample.first_error.as_deref().unwrap_or("?")
    )))
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg says them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| {
            let fields: Vec<&str> = text.split_whitespace().take(3).collect();
            (fields.len() == 3).then(|| fields.join(" "))
        })
        .unwrap_or_else(|| "?".to_owned())
}

/// The upstream of the instant calls, started, and every configuration
/// pointed at it: no stream is called beside them, so the gateways'
/// streaming provider is the same one. The upstream stops when the `Proc`
/// is dropped.
pub fn instant_upstream(upstream: Upstream) -> Result<(Proc, Upstreams), BenchError> {
    let upstream = match upstream {
        Upstream::Instant => Proc::start("instant upstream", setup::instant_command()?)?,
        Upstream::Mock => Proc::start(
            "mock (instant)",
            setup::mock_command(INSTANT_REPLY_TOKENS, None),
        )?,
    };
    let upstreams = Upstreams {
        direct: upstream.addr,
        instant: upstream.addr,
        streaming: upstream.addr,
    };
    Ok((upstream, upstreams))
}
