//! The printed report: one table per mode with the five configurations
//! side by side, the Redis figures, the growth of the SQLite file, and
//! every target with its measured value and PASS or MISS.
//!
//! Throughput and stream rates are the median over rounds, and each ratio
//! is the median of the per-round ratios, so a round slowed by other work
//! on the machine counts once. Latencies merge every round's histogram.

use std::fmt::Write as _;

use crate::drive::Sample;
use crate::figures::*;
use crate::run::{Measured, Outcome};
use crate::subjects::{describe, LABELS};
use crate::Settings;

/// The targets (benchmark figures, not test assertions).
const G_THROUGHPUT: f64 = 0.70;
const G0_THROUGHPUT: f64 = 0.90;
/// GS against G0, the same gateway on the memory store, in the same run.
const GS_THROUGHPUT_VS_G0: f64 = 0.85;
const GS_ADDED_P99_OVER_G0_NS: i64 = 100_000;
const ADDED_P99_NS: i64 = 250_000;
const ADDED_TTFT_P99_NS: i64 = 500_000;
const RSS_PER_STREAM_KIB: f64 = 32.0;
/// 20 MB, in KiB.
const IDLE_RSS_KIB: u64 = 20_000_000 / 1024;
const EVALSHA_PER_CALL: f64 = 2.0;

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
        LABELS.join(" "),
        outcome.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "machine: {} cores; load average {} before, {} after (other work shares these cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        outcome.load_before,
        outcome.load_after
    );
    if settings.api_keys > 0 {
        let _ = writeln!(
            out,
            "keys: the gateways' instant calls go out with {} keys made through the admin API, in turn",
            settings.api_keys
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
    targets(&mut out, settings, outcome);
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
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>8} {:>11} {:>10} {:>11}",
        "config", "rps", "p50", "p99", "p99.9", "vs P", "proxy CPU", "mock CPU", "client CPU"
    );
    for measured in ran(m) {
        let merged = merged(&measured.closed);
        if measured.closed.is_empty() {
            continue;
        }
        let cpu = |ticks: u64| per_call_cpu(ticks, measured.closed_calls);
        let _ = writeln!(
            out,
            "{:<26} {:>9.0} {:>9} {:>9} {:>9} {:>8} {:>11} {:>10} {:>11}",
            name(measured),
            median(measured.closed.iter().map(Sample::rps).collect()),
            latency(&merged.latency, 0.50),
            latency(&merged.latency, 0.99),
            latency(&merged.latency, 0.999),
            ratio_text(throughput_ratio(m, measured.label, "P")),
            if measured.label == "D" {
                "—".to_owned()
            } else {
                cpu(measured.closed_cpu.proxy)
            },
            cpu(measured.closed_cpu.mock),
            cpu(measured.closed_cpu.client),
        );
    }
    let _ = writeln!(
        out,
        "(CPU: µs of CPU time per call, all threads of the process)"
    );
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
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11}",
        "config", "rps", "p50", "p99", "p99.9", "added p50", "added p99"
    );
    for measured in ran(m) {
        let Some(single) = &measured.single else {
            continue;
        };
        let _ = writeln!(
            out,
            "{:<26} {:>9.0} {:>9} {:>9} {:>9} {:>11} {:>11}",
            name(measured),
            single.rps(),
            latency(&single.latency, 0.50),
            latency(&single.latency, 0.99),
            latency(&single.latency, 0.999),
            added_text(added(m, measured.label, 0.50, single_latency)),
            added_text(added(m, measured.label, 0.99, single_latency)),
        );
    }
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
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "config", "rps", "p50", "p99", "p99.9", "added p99"
    );
    for measured in ran(m) {
        let Some(open) = &measured.open else { continue };
        let _ = writeln!(
            out,
            "{:<26} {:>9.0} {:>9} {:>9} {:>9} {:>11}",
            name(measured),
            open.rps(),
            latency(&open.latency, 0.50),
            latency(&open.latency, 0.99),
            latency(&open.latency, 0.999),
            added_text(added(m, measured.label, 0.99, open_latency)),
        );
    }
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
        "{:<26} {:>8} {:>9} {:>9} {:>10} {:>9} {:>6} {:>9} {:>11} {:>10} {:>10}",
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
        "proxy CPU"
    );
    for measured in ran(m) {
        if measured.streams.is_empty() {
            continue;
        }
        let ttft = merged_ttft(measured);
        let _ = writeln!(
            out,
            "{:<26} {:>8} {:>9} {:>9} {:>10} {:>9.0} {:>6} {:>9} {:>11} {:>10} {:>10}",
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
        );
    }
    let _ = writeln!(
        out,
        "(settled: streams that ended with [DONE] after their usage; RSS/stream: growth of the proxy's\n resident memory from before a round to its peak, per stream open at the peak, worst round;\n proxy CPU: share of one core over the rounds)"
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
            let _ = writeln!(
                out,
                "  {:<3} {:<14} {:>8} calls  spent {:>12} µUSD (expected {:>12})  reserved {:>6}  {}",
                measured.label,
                check.phase,
                check.calls,
                check.spent,
                check.expected_spent,
                check.reserved,
                if check.holds() { "ok" } else { "MISMATCH" }
            );
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

fn targets(out: &mut String, settings: &Settings, outcome: &Outcome) {
    let m = &outcome.measured;
    let _ = writeln!(out, "\nTargets{:>62} {:>14}", "measured", "P, for scale");
    let mut line = |what: String, value: String, pass: Option<bool>, reference: String| {
        let verdict = match pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a ",
        };
        let _ = writeln!(out, "  {what:<46} {value:>16}  {verdict} {reference:>14}");
    };
    for (label, floor) in [("G", G_THROUGHPUT), ("G0", G0_THROUGHPUT)] {
        let ratio = throughput_ratio(m, label, "P");
        line(
            format!("{label} throughput >= {floor:.2} x P"),
            ratio_text(ratio),
            ratio.map(|r| r >= floor),
            String::new(),
        );
    }
    let gs_ratio = throughput_ratio(m, "GS", "G0");
    line(
        format!("GS throughput >= {GS_THROUGHPUT_VS_G0:.2} x G0"),
        ratio_text(gs_ratio),
        gs_ratio.map(|r| r >= GS_THROUGHPUT_VS_G0),
        String::new(),
    );
    for label in ["G0", "G", "GS"] {
        let add = added(m, label, 0.99, single_latency);
        line(
            format!("{label} added p99 at concurrency 1 <= 250 µs"),
            added_text(add),
            add.map(|ns| ns <= ADDED_P99_NS),
            added_text(added(m, "P", 0.99, single_latency)),
        );
    }
    let g0_add = added(m, "G0", 0.99, single_latency);
    let gs_add = added(m, "GS", 0.99, single_latency);
    line(
        format!(
            "GS added p99 at c=1 <= G0's {} + 100 µs",
            added_text(g0_add)
        ),
        added_text(gs_add),
        gs_add
            .zip(g0_add)
            .map(|(gs, g0)| gs <= g0 + GS_ADDED_P99_OVER_G0_NS),
        added_text(added(m, "P", 0.99, single_latency)),
    );
    let p = find(m, "P");
    for label in ["G0", "G", "GS"] {
        let measured = find(m, label);
        // Judged only when the streams mode ran.
        let settled = measured.filter(|x| !x.streams.is_empty()).map(|x| {
            x.streams.iter().all(|s| s.completed == s.streams)
                && x.settlement.iter().all(|c| c.holds())
        });
        line(
            format!(
                "{label} {} concurrent streams all settled",
                settings.streams
            ),
            measured.map_or("—".to_owned(), settled_text),
            settled,
            String::new(),
        );
        let add = added_ttft_p99(m, label);
        line(
            format!("{label} added TTFT p99 <= 0.5 ms"),
            added_text(add),
            add.map(|ns| ns <= ADDED_TTFT_P99_NS),
            added_text(added_ttft_p99(m, "P")),
        );
        let rss = measured.and_then(rss_per_stream);
        line(
            format!("{label} RSS per open stream <= 32 KiB"),
            rss.map_or("—".to_owned(), |kib| format!("{kib:.1} KiB")),
            rss.map(|kib| kib <= RSS_PER_STREAM_KIB),
            p.and_then(rss_per_stream)
                .map_or("—".to_owned(), |kib| format!("{kib:.1} KiB")),
        );
        let idle = measured.and_then(|x| x.idle_rss_kib);
        line(
            format!("{label} idle RSS <= 20 MB"),
            idle.map_or("—".to_owned(), kib_text),
            idle.map(|kib| kib <= IDLE_RSS_KIB),
            p.and_then(|x| x.idle_rss_kib)
                .map_or("—".to_owned(), kib_text),
        );
    }
    let evalsha = outcome
        .redis
        .map(|r| r.all.evalsha as f64 / r.calls.max(1) as f64);
    line(
        "G EVALSHA per call = 2 (reserve, settle)".to_owned(),
        evalsha.map_or("—".to_owned(), |v| format!("{v:.3}")),
        evalsha.map(|v| (v - EVALSHA_PER_CALL).abs() < 0.005),
        String::new(),
    );
}
