//! The printed report: one table per mode with the configurations side by
//! side, the CPU each process spent per call, the Redis figures, the growth
//! of the SQLite file, and the targets (`load/targets.rs`).
//!
//! Throughput and stream rates are the median over rounds, and each ratio
//! is the median of the per-round ratios, so a round slowed by other work
//! on the machine counts once. Throughput is taken against both
//! pass-throughs, P and N. Latencies merge every round's histogram.

use std::fmt::Write as _;

use crate::drive::Sample;
use crate::figures::*;
use crate::run::{CpuUse, Measured, Outcome};
use crate::subjects::{self, describe, CAPPED, DRAINED};
use crate::{targets, Mode, Settings};

/// The report and whether the run's own checks held (no failed call, every
/// stream and call settled); the numeric targets do not decide this.
pub struct Report {
    pub text: String,
    pub checks_hold: bool,
}

pub fn render(settings: &Settings, outcome: &Outcome) -> Report {
    let mut out = String::new();
    let m = &outcome.measured;
    // `write!` to a String cannot fail; results are ignored throughout.
    let _ = writeln!(
        out,
        "\ntollgate load benchmark: {} round(s), configurations alternating {}; {:.0} s in all",
        settings.rounds,
        subjects::labels(settings.drain).join(" "),
        outcome.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "machine: {} cores; load average {} before, {} after (other work shares these cores)",
        settings.cores, outcome.load_before, outcome.load_after
    );
    if let Some(cores) = settings.store_core {
        let _ = writeln!(
            out,
            "cores: the run on CPU {}, GS's store threads on CPU {} (--store-core)",
            cores.run, cores.store
        );
    }
    if settings.modes.iter().any(|mode| *mode != Mode::Streams) {
        let _ = writeln!(
            out,
            "upstream: {} for the closed, concurrency-1 and open loops{}",
            settings.upstream.describe(),
            if settings.modes.contains(&Mode::Streams) {
                "; the paced tokenizing mock for the streams"
            } else {
                ""
            }
        );
    }
    if settings.api_keys > 0 {
        let _ = writeln!(
            out,
            "keys: the gateways' instant calls go out with {} keys made through the admin API, in turn",
            settings.api_keys
        );
    }
    if find(m, CAPPED)
        .is_some_and(|gc| gc.closed_cpu.calls + gc.single_cpu.calls + gc.open_cpu.calls > 0)
    {
        let _ = writeln!(
            out,
            "GC: G0 whose key also has a model group ({}*), a customer template and rpm/tpm, all far above\n the run's calls; each call names one of {} customers (x-tollgate-customer); instant calls only",
            crate::setup::INSTANT_MODEL,
            crate::setup::caps::CUSTOMERS
        );
    }
    if find(m, DRAINED).is_some_and(|gd| !gd.closed.is_empty() || gd.single.is_some()) {
        let _ = writeln!(
            out,
            "GD: G whose ledger the gateway drains into a sink file in the run's temp dir (--drain); instant calls only"
        );
    }
    for measured in m {
        if let Some(reason) = &measured.skipped {
            let _ = writeln!(
                out,
                "{} ({}) did not run: {reason}",
                measured.label,
                describe(measured.label)
            );
        }
    }

    throughput_table(&mut out, settings, m);
    single_table(&mut out, settings, m);
    open_table(&mut out, settings, m);
    stream_table(&mut out, settings, m);
    redis_section(&mut out, outcome);
    sqlite_section(&mut out, m);
    let checks_hold = settlement_section(&mut out, m);
    targets::write(&mut out, settings, outcome);
    for measured in m {
        if !measured.warnings.is_empty() {
            let _ = writeln!(
                out,
                "\n{} logged {} warning(s); the first:",
                measured.label,
                measured.warnings.len()
            );
            for line in measured.warnings.iter().take(3) {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    Report {
        text: out,
        checks_hold,
    }
}

// === tables ===

fn throughput_table(out: &mut String, settings: &Settings, m: &[Measured]) {
    if m.iter().all(|x| x.closed.is_empty()) {
        return;
    }
    let _ = writeln!(
        out,
        "\nMax throughput: closed loop, {} connections, {:.1} s per round",
        settings.connections,
        settings.seconds.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}  {CPU_HEADER}",
        "config", "rps", "p50", "p99", "p99.9", "vs P", "vs N"
    );
    for measured in ran(m) {
        let merged = merged(&measured.closed);
        if measured.closed.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "{:<26} {:>9.0} {:>9} {:>9} {:>9} {:>6} {:>6}  {}",
            name(measured),
            median(measured.closed.iter().map(Sample::rps).collect()),
            latency(&merged.latency, 0.50),
            latency(&merged.latency, 0.99),
            latency(&merged.latency, 0.999),
            ratio_text(throughput_ratio(m, measured.label, "P")),
            ratio_text(throughput_ratio(m, measured.label, "N")),
            cpu_columns(measured, &measured.closed_cpu),
        );
    }
    let _ = writeln!(out, "{CPU_NOTE}");
}

/// The CPU columns of the closed, concurrency-1 and open tables.
const CPU_HEADER: &str = "    proxy upstream     Redis    client";
const CPU_NOTE: &str = "(CPU: µs of CPU time per call, all threads of the process; N's proxy CPU is nginx's\n master and worker together; Redis: its own `INFO cpu`, server-wide, G only)";

fn cpu_columns(measured: &Measured, cpu: &CpuUse) -> String {
    let per_call = |ticks: u64| per_call_cpu(ticks, cpu.calls);
    format!(
        "{:>9} {:>8} {:>9} {:>9}",
        if measured.label == "D" {
            "—".to_owned()
        } else {
            per_call(cpu.ticks.proxy)
        },
        per_call(cpu.ticks.upstream),
        if measured.label == "G" {
            per_call_usec(cpu.ticks.redis_usec, cpu.calls)
        } else {
            "—".to_owned()
        },
        per_call(cpu.ticks.client),
    )
}

fn single_table(out: &mut String, settings: &Settings, m: &[Measured]) {
    if m.iter().all(|x| x.single.is_none()) {
        return;
    }
    let _ = writeln!(
        out,
        "\nLatency at concurrency 1: one connection, back to back, {:.1} s per round",
        settings.seconds.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11}  {CPU_HEADER}",
        "config", "rps", "p50", "p99", "p99.9", "added p50", "added p99"
    );
    for measured in ran(m) {
        let Some(single) = &measured.single else {
            continue;
        };
        let _ = writeln!(
            out,
            "{:<26} {:>9.0} {:>9} {:>9} {:>9} {:>11} {:>11}  {}",
            name(measured),
            single.rps(),
            latency(&single.latency, 0.50),
            latency(&single.latency, 0.99),
            latency(&single.latency, 0.999),
            added_text(added(m, measured.label, 0.50, single_latency)),
            added_text(added(m, measured.label, 0.99, single_latency)),
            cpu_columns(measured, &measured.single_cpu),
        );
    }
    let _ = writeln!(out, "(added: over D; CPU as above)");
}

fn open_table(out: &mut String, settings: &Settings, m: &[Measured]) {
    if m.iter().all(|x| x.open.is_none()) {
        return;
    }
    let lag = m
        .iter()
        .filter_map(|x| x.open.as_ref())
        .map(|open| open.pacer_lag.value_at_quantile(0.99))
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "\nOpen loop: {} calls/s for {:.1} s per round, latency from each call's intended start (pacer lag p99 {})",
        settings.rate,
        settings.seconds.as_secs_f64(),
        ns_text(lag)
    );
    let _ = writeln!(
        out,
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>11}  {CPU_HEADER}",
        "config", "rps", "p50", "p99", "p99.9", "added p99"
    );
    for measured in ran(m) {
        let Some(open) = &measured.open else { continue };
        let _ = writeln!(
            out,
            "{:<26} {:>9.0} {:>9} {:>9} {:>9} {:>11}  {}",
            name(measured),
            open.rps(),
            latency(&open.latency, 0.50),
            latency(&open.latency, 0.99),
            latency(&open.latency, 0.999),
            added_text(added(m, measured.label, 0.99, open_latency)),
            cpu_columns(measured, &measured.open_cpu),
        );
    }
    let _ = writeln!(out, "(added: over D; CPU as above)");
}

fn stream_table(out: &mut String, settings: &Settings, m: &[Measured]) {
    if m.iter().all(|x| x.streams.is_empty()) {
        return;
    }
    let _ = writeln!(
        out,
        "\nStreams: {} SSE streams started {}/s, {} tokens each at {} tokens/s",
        settings.streams, settings.stream_rate, settings.stream_tokens, settings.tokens_per_sec
    );
    let _ = writeln!(
        out,
        "{:<26} {:>8} {:>9} {:>9} {:>10} {:>9} {:>6} {:>9} {:>11} {:>10} {:>10} {:>9}",
        "config",
        "settled",
        "TTFT p50",
        "TTFT p99",
        "added p99",
        "events/s",
        "vs D",
        "peak open",
        "RSS/stream",
        "idle RSS",
        "proxy CPU",
        "mock CPU"
    );
    for measured in ran(m) {
        if measured.streams.is_empty() {
            continue;
        }
        let ttft = merged_ttft(measured);
        let _ = writeln!(
            out,
            "{:<26} {:>8} {:>9} {:>9} {:>10} {:>9.0} {:>6} {:>9} {:>11} {:>10} {:>10} {:>9}",
            name(measured),
            settled_text(measured),
            latency(&ttft, 0.50),
            latency(&ttft, 0.99),
            added_text(added_ttft_p99(m, measured.label)),
            median(
                measured
                    .streams
                    .iter()
                    .map(|s| s.events_per_sec())
                    .collect()
            ),
            ratio_text(event_ratio(m, measured.label)),
            measured
                .streams
                .iter()
                .map(|s| s.peak_open)
                .min()
                .unwrap_or(0),
            rss_per_stream(measured).map_or("—".to_owned(), |kib| format!("{kib:.1} KiB")),
            measured.idle_rss_kib.map_or("—".to_owned(), kib_text),
            if measured.label == "D" {
                "—".to_owned()
            } else {
                core_share(measured.stream_cpu.proxy, measured.stream_time)
            },
            core_share(measured.stream_cpu.upstream, measured.stream_time),
        );
    }
    let _ = writeln!(
        out,
        "(settled: streams that ended with [DONE] after their usage; RSS/stream: growth of the proxy's\n resident memory from before a round to its peak, per stream open at the peak, worst round;\n proxy and mock CPU: share of one core over the rounds)"
    );
}

fn redis_section(out: &mut String, outcome: &Outcome) {
    let Some(redis) = &outcome.redis else { return };
    let _ = writeln!(out, "\nRedis (server-wide counters over G's phases; anything else using this Redis adds to them)");
    let per_call = |n: u64| n as f64 / redis.calls.max(1) as f64;
    let _ = writeln!(
        out,
        "  EVALSHA per call: {:.3} ({} over {} calls); EVAL per call: {:.3}",
        per_call(redis.all.evalsha),
        redis.all.evalsha,
        redis.calls,
        per_call(redis.all.eval)
    );
    let _ = writeln!(
        out,
        "  Redis commands run per call, those inside the scripts included: {:.1}",
        per_call(redis.all.commands)
    );
    let _ = writeln!(
        out,
        "  time inside Redis per EVALSHA: {:.1} µs, so Redis alone caps G near {:.0} calls/s",
        redis.all.evalsha_usec as f64 / redis.all.evalsha.max(1) as f64,
        1e6 / (redis.all.evalsha_usec as f64 / redis.calls.max(1) as f64).max(1e-9),
    );
    if redis.closed_calls > 0 {
        let closed_per_call = |usec: u64| usec as f64 / redis.closed_calls as f64;
        let _ = writeln!(
            out,
            "  Redis CPU per call at full concurrency: {:.0} µs, {:.0} µs of it running the scripts",
            closed_per_call(redis.closed.cpu_usec),
            closed_per_call(redis.closed.evalsha_usec)
        );
    }
    let _ = writeln!(
        out,
        "  EVALSHA per socket read at full concurrency: {:.2} ({} calls, {} reads; above 1 means pipelined)",
        redis.closed.evalsha as f64 / redis.closed.reads.max(1) as f64,
        redis.closed.evalsha,
        redis.closed.reads
    );
    let _ = writeln!(
        out,
        "  keys of this run deleted afterwards: {}",
        outcome.redis_keys_deleted
    );
}

fn sqlite_section(out: &mut String, m: &[Measured]) {
    for measured in ran(m) {
        let Some(growth) = &measured.file_growth else {
            continue;
        };
        let Some(per_call) = growth.per_call() else {
            continue;
        };
        let _ = writeln!(
            out,
            "\nSQLite ({}'s file and its -wal, before and after each of its phases)",
            measured.label
        );
        let _ = writeln!(
            out,
            "  growth per call: {per_call:.0} bytes ({} over {} calls: database {:+}, log {:+})",
            bytes_text(growth.bytes()),
            growth.calls,
            growth.db_bytes,
            growth.wal_bytes,
        );
        let _ = writeln!(
            out,
            "  largest at a phase's end: database {}, log {} (the log is reused after each checkpoint)",
            bytes_text(signed_bytes(growth.peak_db_bytes)),
            bytes_text(signed_bytes(growth.peak_wal_bytes)),
        );
    }
}

fn signed_bytes(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

fn bytes_text(bytes: i64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// Prints the gateways' books; true when all balance and no stream failed.
fn settlement_section(out: &mut String, m: &[Measured]) -> bool {
    let mut holds = true;
    let _ = writeln!(
        out,
        "\nSettlement (GET /v1/budget against the charges reported to the client)"
    );
    for measured in ran(m) {
        for check in &measured.settlement {
            holds &= check.holds();
            let _ = writeln!(out, "{}", check.line(measured.label));
        }
        for check in &measured.sink {
            holds &= check.holds();
            let _ = writeln!(out, "{}", check.line(measured.label));
        }
        for run in &measured.streams {
            if run.completed != run.streams {
                holds = false;
                let _ = writeln!(
                    out,
                    "  {:<3} {} of {} streams did not complete; first error: {}",
                    measured.label,
                    run.streams - run.completed,
                    run.streams,
                    run.first_error.as_deref().unwrap_or("?")
                );
            }
        }
    }
    holds
}
