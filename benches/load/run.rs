//! One benchmark run, start to end: start the processes, warm them up,
//! alternate the configurations round by round in every mode, check that
//! the gateways settled every call, and gather what the report prints.
//!
//! The configurations:
//!
//! - **D**: the client straight to the mock provider;
//! - **P**: through the bare pass-through proxy;
//! - **G0**: through the gateway on the memory store;
//! - **G**: through the gateway on Redis.
//!
//! Every mode runs D P G0 G in turn, then again, for several rounds, so a
//! burst of other work on this shared machine lands on all of them alike.
//! The instant calls and the streams use separate processes: the streaming
//! gateways start fresh, so their idle memory and their growth per stream
//! are their own and not what the instant phase left behind.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::books::{self, SettleCheck};
use crate::calls::Calls;
use crate::client::Target;
use crate::drive::{self, Sample};
use crate::error::BenchError;
use crate::procs::{self, Proc};
use crate::redis_stats::{Counters, RedisProbe};
use crate::setup::{self, GatewayKey, RunFiles, Store, STREAM_MODEL};
use crate::streams::{self, StreamRun};
use crate::Settings;

/// Reply length of the instant mock, in tokens.
const INSTANT_REPLY_TOKENS: u64 = 12;
/// How long a freshly started gateway sits before its idle memory is read.
const SETTLE_IN: Duration = Duration::from_millis(300);

/// The configurations, in the order each round runs them.
pub const LABELS: [&str; 4] = ["D", "P", "G0", "G"];

pub fn describe(label: &str) -> &'static str {
    match label {
        "D" => "direct to the mock",
        "P" => "bare pass-through",
        "G0" => "gateway, memory store",
        _ => "gateway, Redis store",
    }
}

/// What one configuration measured over the whole run.
pub struct Measured {
    pub label: &'static str,
    /// Why the configuration did not run, if it did not.
    pub skipped: Option<String>,
    /// Closed loop at full concurrency, one sample per round.
    pub closed: Vec<Sample>,
    /// Closed loop with one connection, all rounds merged.
    pub single: Option<Sample>,
    /// Open loop at the fixed rate, all rounds merged.
    pub open: Option<Sample>,
    pub streams: Vec<StreamRun>,
    /// CPU ticks of the proxy, the mock and this client over the closed-loop
    /// phases, and the calls they answered.
    pub cpu: CpuUse,
    /// Resident memory of a freshly started streaming proxy, KiB.
    pub idle_rss_kib: Option<u64>,
    /// Resident memory before each streaming round, KiB.
    pub rss_before_kib: Vec<Option<u64>>,
    /// The gateways' books after the instant calls and after the streams.
    pub settlement: Vec<SettleCheck>,
    /// Warnings the proxy logged.
    pub warnings: Vec<String>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    pub proxy: u64,
    pub mock: u64,
    pub client: u64,
    pub calls: u64,
}

/// Redis's own counters over the gateway's phases.
#[derive(Clone, Copy, Debug, Default)]
pub struct RedisUse {
    /// Over every G phase of instant calls.
    pub all: Counters,
    pub calls: u64,
    /// Over the G closed-loop phases only (concurrent, so pipelined).
    pub closed: Counters,
}

pub struct Outcome {
    pub measured: Vec<Measured>,
    pub redis: Option<RedisUse>,
    pub redis_keys_deleted: usize,
    pub load_before: String,
    pub load_after: String,
    pub elapsed: Duration,
}

/// One configuration while it runs.
struct Subject {
    label: &'static str,
    target: Target,
    proxy: Option<Proc>,
    key: Option<GatewayKey>,
    /// Σ of the charges of its calls so far (gateways).
    charged: u64,
    calls: u64,
}

impl Subject {
    fn proxy_ticks(&self) -> u64 {
        self.proxy.as_ref().and_then(Proc::cpu_ticks).unwrap_or(0)
    }
}

pub fn run(settings: &Settings, runtime: &Runtime) -> Result<Outcome, BenchError> {
    let started = Instant::now();
    let load_before = load_average();
    let files = RunFiles::new()?;
    let mut probe = match RedisProbe::connect(&settings.redis_url) {
        Ok(probe) => Some(probe),
        Err(error) => {
            eprintln!(
                "G will not run: Redis at {} does not answer: {error}",
                settings.redis_url
            );
            None
        }
    };
    let redis_down = probe
        .is_none()
        .then(|| format!("Redis at {} does not answer", settings.redis_url));

    let mock = Proc::start(
        "mock (instant)",
        setup::mock_command(INSTANT_REPLY_TOKENS, None),
    )?;
    let stream_mock = Proc::start(
        "mock (streaming)",
        setup::mock_command(settings.stream_tokens, Some(settings.tokens_per_sec)),
    )?;
    let mut measured: Vec<Measured> = LABELS.iter().map(|label| Measured::new(label)).collect();

    // === Instant calls ===
    let mut subjects = start_subjects(
        &files,
        "instant",
        mock.addr,
        mock.addr,
        stream_mock.addr,
        &settings.redis_url,
        &redis_down,
        &mut measured,
    )?;
    let body = Arc::new(Calls::instant()?);
    eprintln!("warming up");
    for subject in &mut subjects {
        let sample = runtime.block_on(drive::closed_loop(
            &subject.target,
            &body,
            4,
            settings.warm_up,
        ))?;
        fail_on_errors(subject.label, "warm-up", &sample)?;
        subject.charged += sample.charged;
        subject.calls += sample.ok;
    }
    let mut redis_use = RedisUse::default();
    for round in 1..=settings.rounds {
        eprintln!("round {round}/{}: instant calls", settings.rounds);
        for subject in &mut subjects {
            let results = result_of(&mut measured, subject.label);
            let before = Ticks::read(subject, &mock);
            let redis_before = redis_counters(&mut probe, subject)?;
            let sample = runtime.block_on(drive::closed_loop(
                &subject.target,
                &body,
                settings.connections,
                settings.seconds,
            ))?;
            let used = Ticks::read(subject, &mock).since(before);
            if let (Some(before), Some(after)) =
                (redis_before, redis_counters(&mut probe, subject)?)
            {
                redis_use.closed = redis_use.closed.plus(after.since(before));
                redis_use.all = redis_use.all.plus(after.since(before));
                redis_use.calls += sample.ok;
            }
            results.cpu = results.cpu.plus(used, sample.ok);
            account(subject, &sample, "closed loop")?;
            results.closed.push(sample);

            let redis_before = redis_counters(&mut probe, subject)?;
            let single = runtime.block_on(drive::closed_loop(
                &subject.target,
                &body,
                1,
                settings.seconds,
            ))?;
            if let (Some(before), Some(after)) =
                (redis_before, redis_counters(&mut probe, subject)?)
            {
                redis_use.all = redis_use.all.plus(after.since(before));
                redis_use.calls += single.ok;
            }
            account(subject, &single, "concurrency 1")?;
            merge_into(&mut results.single, single);

            let redis_before = redis_counters(&mut probe, subject)?;
            let open = runtime.block_on(drive::open_loop(
                &subject.target,
                &body,
                settings.rate,
                settings.seconds,
                settings.max_in_flight,
            ))?;
            if let (Some(before), Some(after)) =
                (redis_before, redis_counters(&mut probe, subject)?)
            {
                redis_use.all = redis_use.all.plus(after.since(before));
                redis_use.calls += open.ok;
            }
            account(subject, &open, "open loop")?;
            merge_into(&mut results.open, open);
        }
    }
    for subject in &subjects {
        if let Some(check) = runtime.block_on(settlement(subject, "instant calls"))? {
            result_of(&mut measured, subject.label)
                .settlement
                .push(check);
        }
        collect_warnings(&mut measured, subject);
    }
    drop(subjects);

    // === Streams ===
    let mut subjects = start_subjects(
        &files,
        "streams",
        stream_mock.addr,
        mock.addr,
        stream_mock.addr,
        &settings.redis_url,
        &redis_down,
        &mut measured,
    )?;
    std::thread::sleep(SETTLE_IN);
    for subject in &subjects {
        result_of(&mut measured, subject.label).idle_rss_kib =
            subject.proxy.as_ref().and_then(Proc::rss_kib);
    }
    let stream_body = Arc::new(Calls::streamed(settings.stream_tokens)?);
    let price = RunFiles::price(STREAM_MODEL)?;
    // The whole ramp, the longest stream and a margin.
    let stream_secs = settings.stream_tokens as f64 / f64::from(settings.tokens_per_sec.max(1));
    let ramp_secs = settings.streams as f64 / f64::from(settings.stream_rate.max(1));
    let limit = Duration::from_secs_f64(ramp_secs + stream_secs * 3.0 + 30.0);
    for round in 1..=settings.rounds {
        eprintln!(
            "round {round}/{}: {} streams",
            settings.rounds, settings.streams
        );
        for subject in &mut subjects {
            let results = result_of(&mut measured, subject.label);
            let watch = subject.proxy.as_ref().map(Proc::pid);
            results.rss_before_kib.push(watch.and_then(procs::rss_kib));
            let run = runtime.block_on(streams::run(
                &subject.target,
                &stream_body,
                settings.streams,
                settings.stream_rate,
                &price,
                watch,
                limit,
            ))?;
            subject.charged = subject.charged.saturating_add(run.cost);
            subject.calls += run.completed as u64;
            results.streams.push(run);
        }
    }
    for subject in &subjects {
        if let Some(check) = runtime.block_on(settlement(subject, "streams"))? {
            result_of(&mut measured, subject.label)
                .settlement
                .push(check);
        }
        collect_warnings(&mut measured, subject);
    }
    drop(subjects);

    let redis_keys_deleted = match probe.as_mut() {
        Some(probe) => probe.delete_keys_with(&files.run_id)?,
        None => 0,
    };
    Ok(Outcome {
        redis: measured
            .iter()
            .any(|m| m.label == "G" && m.skipped.is_none())
            .then_some(redis_use),
        measured,
        redis_keys_deleted,
        load_before,
        load_after: load_average(),
        elapsed: started.elapsed(),
    })
}

impl Measured {
    fn new(label: &'static str) -> Measured {
        Measured {
            label,
            skipped: None,
            closed: Vec::new(),
            single: None,
            open: None,
            streams: Vec::new(),
            cpu: CpuUse::default(),
            idle_rss_kib: None,
            rss_before_kib: Vec::new(),
            settlement: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

impl CpuUse {
    fn plus(self, ticks: Ticks, calls: u64) -> CpuUse {
        CpuUse {
            proxy: self.proxy + ticks.proxy,
            mock: self.mock + ticks.mock,
            client: self.client + ticks.client,
            calls: self.calls + calls,
        }
    }
}

/// CPU ticks of the three processes a call crosses.
#[derive(Clone, Copy, Debug, Default)]
struct Ticks {
    proxy: u64,
    mock: u64,
    client: u64,
}

impl Ticks {
    fn read(subject: &Subject, mock: &Proc) -> Ticks {
        Ticks {
            proxy: subject.proxy_ticks(),
            mock: mock.cpu_ticks().unwrap_or(0),
            client: procs::own_cpu_ticks().unwrap_or(0),
        }
    }

    fn since(self, before: Ticks) -> Ticks {
        Ticks {
            proxy: self.proxy.saturating_sub(before.proxy),
            mock: self.mock.saturating_sub(before.mock),
            client: self.client.saturating_sub(before.client),
        }
    }
}

fn result_of<'a>(measured: &'a mut [Measured], label: &str) -> &'a mut Measured {
    match measured.iter_mut().find(|m| m.label == label) {
        Some(m) => m,
        None => unreachable!("every label has its results"),
    }
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

/// Counts a phase's calls and charges toward the settlement check; a phase
/// with failed calls stops the run (its figures would mean nothing).
fn account(subject: &mut Subject, sample: &Sample, phase: &str) -> Result<(), BenchError> {
    subject.charged = subject.charged.saturating_add(sample.charged);
    subject.calls += sample.ok;
    fail_on_errors(subject.label, phase, sample)
}

fn fail_on_errors(label: &str, phase: &str, sample: &Sample) -> Result<(), BenchError> {
    match (&sample.first_error, sample.errors) {
        (_, 0) => Ok(()),
        (error, errors) => Err(BenchError::Invalid(format!(
            "{label} {phase}: {errors} of {} calls failed; first: {}",
            sample.ok + errors,
            error.as_deref().unwrap_or("?")
        ))),
    }
}

fn redis_counters(
    probe: &mut Option<RedisProbe>,
    subject: &Subject,
) -> Result<Option<Counters>, BenchError> {
    match probe {
        Some(probe) if subject.label == "G" => Ok(Some(probe.counters()?)),
        _ => Ok(None),
    }
}

/// Starts P, G0 and G for one phase; D needs no process. A gateway that
/// cannot start on Redis is reported as skipped, with its reason.
#[allow(clippy::too_many_arguments)]
fn start_subjects(
    files: &RunFiles,
    phase: &str,
    upstream: SocketAddr,
    instant: SocketAddr,
    streaming: SocketAddr,
    redis_url: &str,
    redis_down: &Option<String>,
    measured: &mut [Measured],
) -> Result<Vec<Subject>, BenchError> {
    let mut subjects = Vec::with_capacity(LABELS.len());
    // D and P need a key only to send the same headers as the gateways.
    let direct_key = format!("tg-bench-{}-direct", files.run_id);
    subjects.push(Subject {
        label: "D",
        target: Target::new("D", upstream, &direct_key)?,
        proxy: None,
        key: None,
        charged: 0,
        calls: 0,
    });
    let passthrough = Proc::start("pass-through (P)", setup::passthrough_command(upstream)?)?;
    subjects.push(Subject {
        label: "P",
        target: Target::new("P", passthrough.addr, &direct_key)?,
        proxy: Some(passthrough),
        key: None,
        charged: 0,
        calls: 0,
    });
    let gateways = [
        ("G0", Store::Memory),
        (
            "G",
            Store::Redis {
                url: redis_url.to_owned(),
            },
        ),
    ];
    for (label, store) in gateways {
        let name = format!("{}-{phase}", label.to_lowercase());
        if let (Store::Redis { .. }, Some(reason)) = (&store, redis_down) {
            result_of(measured, label).skipped = Some(reason.clone());
            continue;
        }
        let (config, key) = files.gateway_config(&name, &store, instant, streaming)?;
        match Proc::start(&format!("gateway {label}"), setup::gateway_command(&config)) {
            Ok(gateway) => subjects.push(Subject {
                label,
                target: Target::new(label, gateway.addr, &key.raw)?,
                proxy: Some(gateway),
                key: Some(key),
                charged: 0,
                calls: 0,
            }),
            // The gateway on Redis is optional: a build without the Redis
            // store refuses the config, and the report says so.
            Err(BenchError::NotStarted { log, .. }) if label == "G" => {
                let reason = log
                    .lines()
                    .rev()
                    .find(|line| line.contains("ERROR"))
                    .unwrap_or(log.as_str())
                    .to_owned();
                eprintln!("G did not start: {reason}");
                result_of(measured, label).skipped = Some(reason);
            }
            Err(error) => return Err(error),
        }
    }
    Ok(subjects)
}

fn collect_warnings(measured: &mut [Measured], subject: &Subject) {
    if let Some(proxy) = &subject.proxy {
        result_of(measured, subject.label)
            .warnings
            .extend(proxy.warnings());
    }
}

/// A gateway's books after a phase; `None` for D and P.
async fn settlement(
    subject: &Subject,
    phase: &'static str,
) -> Result<Option<SettleCheck>, BenchError> {
    if subject.key.is_none() {
        return Ok(None);
    }
    books::check(&subject.target, phase, subject.calls, subject.charged)
        .await
        .map(Some)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| {
            let fields: Vec<&str> = text.split_whitespace().take(3).collect();
            (fields.len() == 3).then(|| fields.join(" "))
        })
        .unwrap_or_else(|| "?".to_owned())
}
