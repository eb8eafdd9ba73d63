//! The figures of the report, computed from what a run measured, and how
//! they are written: medians over rounds, ratios, added latencies, memory
//! per stream, CPU per call.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::drive::{histogram, Sample};
use crate::procs::TICKS_PER_SEC;
use crate::run::{CpuUse, Measured};
use crate::streams::StreamRun;
use crate::subjects::describe;

pub fn ran(m: &[Measured]) -> impl Iterator<Item = &Measured> {
    m.iter().filter(|x| x.skipped.is_none())
}

pub fn name(measured: &Measured) -> String {
    format!("{:<3}{}", measured.label, describe(measured.label))
}

pub fn find<'a>(m: &'a [Measured], label: &str) -> Option<&'a Measured> {
    m.iter().find(|x| x.label == label && x.skipped.is_none())
}

pub fn merged(samples: &[Sample]) -> Sample {
    let mut total = Sample::empty();
    for sample in samples {
        total.merge(sample);
    }
    total
}

pub fn merged_ttft(measured: &Measured) -> Histogram<u64> {
    let mut total = histogram();
    for run in &measured.streams {
        let _ = total.add(&run.ttft);
    }
    total
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Median over rounds of `label`'s closed-loop rps over `base`'s.
pub fn throughput_ratio(m: &[Measured], label: &str, base: &str) -> Option<f64> {
    let (this, base) = (find(m, label)?, find(m, base)?);
    median_ratio(&this.closed, &base.closed, Sample::rps)
}

/// Median over rounds of `label`'s stream events/s over D's.
pub fn event_ratio(m: &[Measured], label: &str) -> Option<f64> {
    let (this, base) = (find(m, label)?, find(m, "D")?);
    median_ratio(&this.streams, &base.streams, StreamRun::events_per_sec)
}

/// The median, over the rounds both ran, of `value` in `this` over `base`.
fn median_ratio<T>(this: &[T], base: &[T], value: impl Fn(&T) -> f64) -> Option<f64> {
    let ratios: Vec<f64> = this
        .iter()
        .zip(base)
        .map(|(a, b)| value(a) / value(b).max(1e-9))
        .collect();
    (!ratios.is_empty()).then(|| median(ratios))
}

/// `label`'s latency quantile minus D's, in ns.
pub fn added(
    m: &[Measured],
    label: &str,
    quantile: f64,
    histogram: impl Fn(&Measured) -> Option<&Histogram<u64>>,
) -> Option<i64> {
    let this = histogram(find(m, label)?)?;
    let base = histogram(find(m, "D")?)?;
    Some(signed(this.value_at_quantile(quantile)) - signed(base.value_at_quantile(quantile)))
}

pub fn added_ttft_p99(m: &[Measured], label: &str) -> Option<i64> {
    let this = find(m, label)?;
    let base = find(m, "D")?;
    if this.streams.is_empty() || base.streams.is_empty() {
        return None;
    }
    Some(
        signed(merged_ttft(this).value_at_quantile(0.99))
            - signed(merged_ttft(base).value_at_quantile(0.99)),
    )
}

pub fn signed(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

/// The worst round's memory growth per stream open at the peak, KiB.
pub fn rss_per_stream(measured: &Measured) -> Option<f64> {
    measured
        .streams
        .iter()
        .zip(&measured.rss_before_kib)
        .filter_map(|(run, before)| {
            let growth = run.peak_rss_kib?.saturating_sub((*before)?);
            Some(growth as f64 / run.peak_open.max(1) as f64)
        })
        .reduce(f64::max)
}

/// µs of CPU per call of the proxy over `cpu`'s calls; `None` without calls.
pub fn proxy_cpu_per_call(cpu: &CpuUse) -> Option<f64> {
    (cpu.calls > 0).then(|| cpu.ticks.proxy as f64 * 1e6 / TICKS_PER_SEC as f64 / cpu.calls as f64)
}

pub fn per_call_cpu(ticks: u64, calls: u64) -> String {
    let micros = ticks as f64 * 1e6 / TICKS_PER_SEC as f64 / calls.max(1) as f64;
    format!("{micros:.0} µs")
}

/// µs of CPU (as Redis reports its own) per call.
pub fn per_call_usec(usec: u64, calls: u64) -> String {
    format!("{:.0} µs", usec as f64 / calls.max(1) as f64)
}

/// CPU ticks over a wall time, as a share of one core.
pub fn core_share(ticks: u64, over: Duration) -> String {
    let busy = ticks as f64 / TICKS_PER_SEC as f64;
    format!("{:.0}%", busy * 100.0 / over.as_secs_f64().max(1e-9))
}

// === formatting ===

pub fn latency(histogram: &Histogram<u64>, quantile: f64) -> String {
    if histogram.is_empty() {
        return "—".to_owned();
    }
    ns_text(histogram.value_at_quantile(quantile))
}

pub fn ns_text(ns: u64) -> String {
    match ns {
        0..=999_999 => format!("{} µs", ns / 1_000),
        1_000_000..=999_999_999 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

pub fn added_text(ns: Option<i64>) -> String {
    match ns {
        None => "—".to_owned(),
        Some(ns) if ns < 0 => format!("-{}", ns_text(ns.unsigned_abs())),
        Some(ns) => format!("+{}", ns_text(ns.unsigned_abs())),
    }
}

pub fn ratio_text(ratio: Option<f64>) -> String {
    ratio.map_or("—".to_owned(), |r| format!("{r:.2}"))
}

/// Decimal megabytes, the unit of the idle-memory target.
pub fn kib_text(kib: u64) -> String {
    format!("{:.1} MB", kib as f64 * 1024.0 / 1e6)
}

pub fn settled_text(measured: &Measured) -> String {
    let streams: usize = measured.streams.iter().map(|s| s.streams).sum();
    let completed: usize = measured.streams.iter().map(|s| s.completed).sum();
    if streams == 0 {
        return "—".to_owned();
    }
    format!("{:.1}%", completed as f64 * 100.0 / streams as f64)
}

pub fn single_latency(measured: &Measured) -> Option<&Histogram<u64>> {
    measured.single.as_ref().map(|s| &s.latency)
}

pub fn open_latency(measured: &Measured) -> Option<&Histogram<u64>> {
    measured.open.as_ref().map(|s| &s.latency)
}
