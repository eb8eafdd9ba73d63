//! What a soak prints: a header, one line per interval as it ends, and a
//! summary whose verdicts say PASS or MISS as the Targets table does.
//!
//! A memory trend compares the mean of the last two intervals with the
//! mean of the two that start once the retry horizon has passed, when the
//! records of the first calls begin to be forgotten as fast as new ones
//! come; it is flat within 10% or 5 MB. A soak too short to have both
//! pairs says n/a rather than reading a trend into the horizon's filling.

use std::fmt::Write as _;
use std::time::Duration;

use crate::drive::Sample;
use crate::figures::{kib_text, latency, ns_text, per_call_cpu};
use crate::soak::{Interval, Reading, SoakPlan, SoakRun, SoakStore};
use crate::subjects::describe;

/// A memory trend is flat when it moved by at most this share of where it
/// started, or by at most [`FLAT_BYTES`].
const FLAT_SHARE: f64 = 0.10;
/// 5 MB.
const FLAT_BYTES: f64 = 5e6;
/// Every interval's p99 within this factor of the first interval's.
const P99_FACTOR: f64 = 2.0;

pub fn header(store: SoakStore, plan: &SoakPlan, closed_record: Duration) -> String {
    let label = store.label();
    let mut out = String::new();
    // `write!` to a String cannot fail; results are ignored throughout.
    let _ = writeln!(
        out,
        "\nSoak: {label} ({}), {} calls/s for {}, a line every {}; retry horizon (store.closed_record_secs) {}",
        describe(label),
        plan.rate,
        span(plan.duration),
        span(plan.interval),
        span(closed_record),
    );
    let _ = writeln!(
        out,
        "(each line: the calls that completed in it, latency from their intended start; the gateway's RSS and open fds at its end, CPU per call)"
    );
    let _ = write!(
        out,
        "{:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>6} {:>9} {:>5} {:>9}",
        "elapsed", "calls", "calls/s", "p50", "p99", "max", "errors", "RSS", "fds", "CPU/call"
    );
    let _ = match store {
        SoakStore::Redis => writeln!(
            out,
            "   {:>10} {:>5} {:>9} {:>7}",
            "Redis mem", "keys", "entries", "B/call"
        ),
        SoakStore::Sqlite => writeln!(out, "   {:>19}", "file + log"),
        SoakStore::Memory => writeln!(out),
    };
    out
}

pub fn line(label: &str, interval: &Interval) -> String {
    let sample = &interval.sample;
    let reading = &interval.reading;
    let mut out = format!(
        "{:>7} {:>8} {:>8.0} {:>9} {:>9} {:>9} {:>6} {:>9} {:>5} {:>9}",
        clock(reading.at),
        sample.ok,
        sample.rps(),
        latency(&sample.latency, 0.50),
        latency(&sample.latency, 0.99),
        max_text(sample),
        sample.errors,
        reading.rss_kib.map_or("?".to_owned(), kib_text),
        reading.fds.map_or("?".to_owned(), |n| n.to_string()),
        interval
            .cpu
            .map_or("?".to_owned(), |(ticks, calls)| per_call_cpu(ticks, calls)),
    );
    match label {
        "G" => {
            let (keys, entries) = reading
                .redis_keys
                .map_or(("?".to_owned(), "?".to_owned()), |(k, e)| {
                    (k.to_string(), e.to_string())
                });
            let _ = write!(
                out,
                "   {:>10} {keys:>5} {entries:>9} {:>7}",
                reading
                    .redis_memory
                    .map_or("?".to_owned(), |b| mb(b as f64)),
                interval
                    .bytes_per_call
                    .map_or("—".to_owned(), |b| format!("{b:.0}")),
            );
        }
        "GS" => {
            let _ = write!(
                out,
                "   {:>19}",
                reading
                    .file_bytes
                    .map_or("?".to_owned(), |(db, wal)| format!(
                        "{:.2} + {:.2} MB",
                        db as f64 / 1e6,
                        wal as f64 / 1e6
                    ))
            );
        }
        _ => {}
    }
    out.push('\n');
    out
}

/// The summary and whether the soak's own checks held (no failed call, the
/// books balance); the trend verdicts are figures and do not decide this.
pub struct Summary {
    pub text: String,
    pub checks_hold: bool,
}

pub fn summary(plan: &SoakPlan, soak: &SoakRun) -> Summary {
    let label = soak.store.label();
    let mut out = String::new();
    let mut total = Sample::empty();
    for interval in &soak.intervals {
        total.merge(&interval.sample);
        total.elapsed += interval.sample.elapsed;
    }
    let _ = writeln!(
        out,
        "\nSoak summary, {label} ({}): {} calls in {:.0} s ({:.0}/s, asked {}/s), {} failed; load average {} before, {} after",
        describe(label),
        total.ok,
        total.elapsed.as_secs_f64(),
        total.rps(),
        plan.rate,
        total.errors,
        soak.load_before,
        soak.load_after,
    );
    let _ = writeln!(
        out,
        "  latency over the whole soak: p50 {}, p99 {}, p99.9 {}, max {}; pacer lag p99 {} (how late the client started calls)",
        latency(&total.latency, 0.50),
        latency(&total.latency, 0.99),
        latency(&total.latency, 0.999),
        max_text(&total),
        latency(&total.pacer_lag, 0.99),
    );
    if let Some(error) = &total.first_error {
        let _ = writeln!(out, "  first failed call: {error}");
    }
    let rss = trend(plan, soak, |r| r.rss_kib.map(|kib| kib as f64 * 1024.0));
    memory_line(
        &mut out,
        "gateway RSS",
        soak,
        &rss,
        |r| r.rss_kib.map(|kib| kib as f64 * 1024.0),
        soak.peak_rss_kib
            .map(|kib| format!("; peak (VmHWM) {}", kib_text(kib))),
    );
    let redis = (soak.store == SoakStore::Redis)
        .then(|| trend(plan, soak, |r| r.redis_memory.map(|b| b as f64)));
    if let Some(redis) = &redis {
        memory_line(
            &mut out,
            "Redis used_memory (server-wide)",
            soak,
            redis,
            |r| r.redis_memory.map(|b| b as f64),
            None,
        );
        redis_keys(&mut out, soak);
    }
    if let Some((db, wal)) = soak.intervals.last().and_then(|i| i.reading.file_bytes) {
        // Disk, not memory, so no verdict: the ledger keeps a row per call
        // for `store.ledger_retention_days`.
        let file = trend(plan, soak, |r| {
            r.file_bytes.map(|(db, wal)| (db + wal) as f64)
        });
        // On Redis, the file is the ledger sink the gateway drains into.
        let what = if soak.store == SoakStore::Redis {
            "ledger sink"
        } else {
            "SQLite"
        };
        let _ = writeln!(
            out,
            "  {what} at the end: file {}, log {}; file and log after the retry horizon: {}",
            mb(db as f64),
            mb(wal as f64),
            trend_text(&file),
        );
    }
    let books = &soak.books;
    let _ = writeln!(
        out,
        "  books: {} calls, spent {} µUSD (expected {}), reserved {}",
        books.calls, books.spent, books.expected_spent, books.reserved
    );
    for error in &soak.reading_errors {
        let _ = writeln!(out, "  a reading failed {error}");
    }

    let title = format!("Soak verdicts, {label}");
    let _ = writeln!(out, "\n{title:<55}{:>24}", "measured");
    let mut verdict = |what: String, value: String, pass: Option<bool>| {
        let verdict = match pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a",
        };
        let _ = writeln!(out, "  {what:<52} {value:>24}  {verdict}");
    };
    verdict(
        "gateway RSS flat after the retry horizon (10% or 5 MB)".to_owned(),
        trend_text(&rss),
        flat(&rss),
    );
    if let Some(redis) = &redis {
        verdict(
            "Redis used_memory flat after the horizon (10% or 5 MB)".to_owned(),
            trend_text(redis),
            flat(redis),
        );
    }
    let p99 = p99_drift(&soak.intervals);
    verdict(
        format!(
            "every interval's p99 <= 2 x the first's ({})",
            soak.intervals
                .first()
                .map_or("—".to_owned(), |i| latency(&i.sample.latency, 0.99))
        ),
        p99.map_or("—".to_owned(), |(ratio, at)| {
            format!("{ratio:.2} x at {}", clock(at))
        }),
        p99.map(|(ratio, _)| ratio <= P99_FACTOR),
    );
    verdict(
        "no failed calls".to_owned(),
        total.errors.to_string(),
        Some(total.errors == 0),
    );
    verdict(
        "books: spent == sum of charges, nothing reserved".to_owned(),
        if books.holds() { "ok" } else { "MISMATCH" }.to_owned(),
        Some(books.holds()),
    );
    if !soak.warnings.is_empty() {
        let _ = writeln!(
            out,
            "\n{label} logged {} warning(s); the first:",
            soak.warnings.len()
        );
        for line in soak.warnings.iter().take(3) {
            let _ = writeln!(out, "  {line}");
        }
    }
    Summary {
        text: out,
        checks_hold: total.errors == 0 && books.holds(),
    }
}

/// A memory figure after the retry horizon and at the end, in bytes.
struct Trend {
    /// Mean of the two intervals that start once the horizon has passed,
    /// and when the first of them starts.
    base: f64,
    base_from: Duration,
    /// Mean of the last two intervals, and when the first of them starts.
    last: f64,
    last_from: Duration,
    /// Growth per minute between the two pairs; `None` when they are the
    /// same intervals.
    per_minute: Option<f64>,
}

/// `None` (n/a) when the soak is shorter than the horizon and two
/// intervals, or a reading is missing.
fn trend(
    plan: &SoakPlan,
    soak: &SoakRun,
    value: impl Fn(&Reading) -> Option<f64>,
) -> Option<Trend> {
    if plan.duration < soak.closed_record + plan.interval * 2 {
        return None;
    }
    let intervals = &soak.intervals;
    // The first interval whose nominal start is at or past the horizon.
    let first = soak
        .closed_record
        .as_nanos()
        .div_ceil(plan.interval.as_nanos().max(1));
    let first = usize::try_from(first).ok()?;
    let last = intervals.len().checked_sub(2)?;
    if first > last {
        return None;
    }
    let pair = |at: usize| -> Option<(f64, Duration)> {
        let (a, b) = (&intervals[at].reading, &intervals[at + 1].reading);
        Some(((value(a)? + value(b)?) / 2.0, (a.at + b.at) / 2))
    };
    let (base, base_mid) = pair(first)?;
    let (end, end_mid) = pair(last)?;
    let minutes = end_mid.saturating_sub(base_mid).as_secs_f64() / 60.0;
    Some(Trend {
        base,
        base_from: intervals[first].start,
        last: end,
        last_from: intervals[last].start,
        per_minute: (first < last && minutes > 0.0).then(|| (end - base) / minutes),
    })
}

fn flat(trend: &Option<Trend>) -> Option<bool> {
    trend
        .as_ref()
        .map(|t| (t.last - t.base).abs() <= (t.base * FLAT_SHARE).max(FLAT_BYTES))
}

fn trend_text(trend: &Option<Trend>) -> String {
    let Some(t) = trend else {
        return "—".to_owned();
    };
    match t.per_minute {
        Some(per_minute) => format!(
            "{} ({:+.2}/min)",
            signed_mb(t.last - t.base),
            per_minute / 1e6
        ),
        None => signed_mb(t.last - t.base),
    }
}

/// One memory figure: after the warm-up, at the horizon's end, at the end.
fn memory_line(
    out: &mut String,
    what: &str,
    soak: &SoakRun,
    trend: &Option<Trend>,
    value: impl Fn(&Reading) -> Option<f64>,
    extra: Option<String>,
) {
    let mut text = format!(
        "  {what}: {} after the warm-up",
        value(&soak.baseline).map_or("?".to_owned(), mb)
    );
    match trend {
        Some(t) => {
            let _ = write!(
                text,
                ", {} over the two intervals from {}, {} over the last two from {} ({}",
                mb(t.base),
                clock(t.base_from),
                mb(t.last),
                clock(t.last_from),
                signed_mb(t.last - t.base),
            );
            if let Some(per_minute) = t.per_minute {
                let _ = write!(text, ", {}/min", signed_mb(per_minute));
            }
            text.push(')');
        }
        None => {
            // Too short for a verdict; the change over the run still says
            // something, labelled as what it is.
            let at_end = soak.intervals.last().and_then(|i| value(&i.reading));
            let _ = write!(
                text,
                ", {} at the end (the run is too short to pass the retry horizon and two intervals)",
                at_end.map_or("?".to_owned(), mb)
            );
        }
    }
    if let Some(extra) = extra {
        text.push_str(&extra);
    }
    let _ = writeln!(out, "{text}");
}

fn redis_keys(out: &mut String, soak: &SoakRun) {
    let _ = writeln!(
        out,
        "  Redis keys of this run at the end (MEMORY USAGE, sampled), deleted afterwards: {}",
        soak.redis_keys_deleted
    );
    for key in &soak.redis_keys {
        let _ = writeln!(
            out,
            "    {:<48} {:<6} {:>9} entries {:>10}",
            key.name,
            key.kind,
            key.entries,
            mb(key.bytes as f64)
        );
    }
}

/// The worst interval's p99 over the first interval's, and when that
/// interval ended.
fn p99_drift(intervals: &[Interval]) -> Option<(f64, Duration)> {
    let first = intervals.first()?.sample.latency.value_at_quantile(0.99);
    if first == 0 {
        return None;
    }
    intervals
        .iter()
        .map(|i| {
            let p99 = i.sample.latency.value_at_quantile(0.99);
            (p99 as f64 / first as f64, i.reading.at)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

fn max_text(sample: &Sample) -> String {
    if sample.latency.is_empty() {
        return "—".to_owned();
    }
    ns_text(sample.latency.max())
}

/// `m:ss`.
fn clock(at: Duration) -> String {
    let secs = at.as_secs_f64().round() as u64;
    format!("{}:{:02}", secs / 60, secs % 60)
}

/// A length of time as a person says it: `90 s`, `20 min`, `1 h 30 min`.
fn span(length: Duration) -> String {
    let secs = length.as_secs_f64().round() as u64;
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) => format!("{s} s"),
        (0, m, 0) if secs >= 180 => format!("{m} min"),
        (0, _, _) => format!("{secs} s"),
        (h, 0, 0) => format!("{h} h"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}

/// Decimal megabytes, as the other memory figures.
fn mb(bytes: f64) -> String {
    format!("{:.2} MB", bytes / 1e6)
}

fn signed_mb(bytes: f64) -> String {
    format!("{:+.2} MB", bytes / 1e6)
}
