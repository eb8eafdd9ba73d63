//! The targets at the end of the report: each with its measured value,
//! PASS or MISS, and what the two pass-throughs measured on the same
//! scale, so a miss can be read against what any proxy costs here.
//! Throughput is set against P, and G0's against N as well; GC's CPU per
//! call and throughput against G0's, run beside it; GD's throughput and
//! closed-loop p99 against G's (`--drain`).

use std::fmt::Write as _;

use crate::figures::*;
use crate::run::{CpuUse, Measured, Outcome};
use crate::{Mode, Settings};

/// The targets (benchmark figures, not test assertions).
const G_THROUGHPUT: f64 = 0.60;
const G0_THROUGHPUT: f64 = 0.90;
const G0_THROUGHPUT_VS_N: f64 = 0.75;
/// GS against G0, the same gateway on the memory store, in the same run.
const GS_THROUGHPUT_VS_G0: f64 = 0.85;
const GS_ADDED_P99_OVER_G0_NS: i64 = 100_000;
/// Added p99 at concurrency 1, over D.
const G0_ADDED_P99_NS: i64 = 150_000;
const G_ADDED_P99_NS: i64 = 400_000;
/// G0's closed-loop p99 against P's: a stall shows here.
const G0_CLOSED_P99_VS_P: f64 = 2.0;
const ADDED_TTFT_P99_NS: i64 = 500_000;
/// What an open stream may cost over one through P.
const RSS_PER_STREAM_OVER_P_KIB: f64 = 4.0;
/// 20 MB, in KiB.
const IDLE_RSS_KIB: u64 = 20_000_000 / 1024;
const EVALSHA_PER_CALL: f64 = 2.0;
/// GD, G with its ledger drained into a sink, against G in the same
/// rounds: throughput kept, and the closed loop's p99.
const GD_THROUGHPUT_VS_G: f64 = 0.90;
const GD_CLOSED_P99_VS_G: f64 = 1.5;
/// GC's proxy CPU per call over G0's: a model group, a customer and both
/// rate limits on the key, in the same run.
const GC_ADDED_CPU_US: f64 = 10.0;

/// What P and N measured of the same figure, for scale.
struct Scale {
    p: String,
    n: String,
}

impl Scale {
    fn none() -> Scale {
        Scale {
            p: String::new(),
            n: String::new(),
        }
    }

    fn of(figure: impl Fn(&str) -> String) -> Scale {
        Scale {
            p: figure("P"),
            n: figure("N"),
        }
    }
}

pub fn write(out: &mut String, settings: &Settings, outcome: &Outcome) {
    let m = &outcome.measured;
    let _ = writeln!(
        out,
        "\nTargets{:>62} {:>14} {:>14}",
        "measured", "P, for scale", "N, for scale"
    );
    let mut line = |what: String, value: String, pass: Option<bool>, scale: Scale| {
        let verdict = match pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a ",
        };
        let _ = writeln!(
            out,
            "  {what:<46} {value:>16}  {verdict} {:>14} {:>14}",
            scale.p, scale.n
        );
    };
    for (label, floor) in [("G0", G0_THROUGHPUT), ("G", G_THROUGHPUT)] {
        let ratio = throughput_ratio(m, label, "P");
        line(
            format!("{label} throughput >= {floor:.2} x P"),
            ratio_text(ratio),
            ratio.map(|r| r >= floor),
            Scale {
                p: String::new(),
                n: ratio_text(throughput_ratio(m, "N", "P")),
            },
        );
    }
    let g0_vs_n = throughput_ratio(m, "G0", "N");
    line(
        format!("G0 throughput >= {G0_THROUGHPUT_VS_N:.2} x N"),
        ratio_text(g0_vs_n),
        g0_vs_n.map(|r| r >= G0_THROUGHPUT_VS_N),
        Scale::none(),
    );
    line(
        "G throughput, ratio to N (no target)".to_owned(),
        ratio_text(throughput_ratio(m, "G", "N")),
        None,
        Scale::none(),
    );
    let closed_p99 = |label: &str| {
        find(m, label)
            .filter(|x| !x.closed.is_empty())
            .map(|x| merged(&x.closed).latency.value_at_quantile(0.99))
    };
    let p99_text = |label: &str| closed_p99(label).map_or("—".to_owned(), ns_text);
    let g0_tail = closed_p99("G0")
        .zip(closed_p99("P"))
        .map(|(g0, p)| g0 as f64 / p.max(1) as f64);
    line(
        format!(
            "G0 closed-loop p99 <= {G0_CLOSED_P99_VS_P:.0} x P's ({} conns)",
            settings.connections
        ),
        g0_tail.map_or("—".to_owned(), |r| format!("{r:.2} x")),
        g0_tail.map(|r| r <= G0_CLOSED_P99_VS_P),
        Scale::of(p99_text),
    );
    let gs_ratio = throughput_ratio(m, "GS", "G0");
    line(
        format!("GS throughput >= {GS_THROUGHPUT_VS_G0:.2} x G0"),
        ratio_text(gs_ratio),
        gs_ratio.map(|r| r >= GS_THROUGHPUT_VS_G0),
        Scale::none(),
    );
    // Only when `--drain` ran GD: the default report is unchanged.
    if find(m, "GD").is_some_and(|gd| !gd.closed.is_empty()) {
        let gd_ratio = throughput_ratio(m, "GD", "G");
        line(
            format!("GD throughput >= {GD_THROUGHPUT_VS_G:.2} x G (closed)"),
            ratio_text(gd_ratio),
            gd_ratio.map(|r| r >= GD_THROUGHPUT_VS_G),
            Scale::none(),
        );
        let gd_tail = closed_p99("GD")
            .zip(closed_p99("G"))
            .map(|(gd, g)| gd as f64 / g.max(1) as f64);
        line(
            format!(
                "GD closed-loop p99 <= {GD_CLOSED_P99_VS_G:.1} x G's ({} conns)",
                settings.connections
            ),
            gd_tail.map_or("—".to_owned(), |r| format!("{r:.2} x")),
            gd_tail.map(|r| r <= GD_CLOSED_P99_VS_G),
            Scale::none(),
        );
    }
    let cpu_of = |label: &str, mode: Mode| find(m, label).and_then(|x| mode_cpu(x, mode));
    for (mode, loop_name) in [
        (Mode::Closed, "closed"),
        (Mode::Single, "c=1"),
        (Mode::Open, "open"),
    ] {
        let (Some(gc), Some(g0)) = (cpu_of("GC", mode), cpu_of("G0", mode)) else {
            continue;
        };
        let add = gc - g0;
        line(
            format!("GC vs G0: added CPU per call <= {GC_ADDED_CPU_US:.0} µs ({loop_name})"),
            format!("{add:+.1} µs"),
            Some(add <= GC_ADDED_CPU_US),
            Scale::none(),
        );
    }
    line(
        "GC throughput, ratio to G0 (no target)".to_owned(),
        ratio_text(throughput_ratio(m, "GC", "G0")),
        None,
        Scale::none(),
    );
    let added_at_c1 = |label: &str| added_text(added(m, label, 0.99, single_latency));
    for (label, limit) in [("G0", G0_ADDED_P99_NS), ("G", G_ADDED_P99_NS)] {
        let add = added(m, label, 0.99, single_latency);
        line(
            format!("{label} added p99 at concurrency 1 <= {} µs", limit / 1_000),
            added_text(add),
            add.map(|ns| ns <= limit),
            Scale::of(added_at_c1),
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
        Scale::of(added_at_c1),
    );
    let rss_text = |label: &str| {
        find(m, label)
            .and_then(rss_per_stream)
            .map_or("—".to_owned(), |kib| format!("{kib:.1} KiB"))
    };
    let idle_text = |label: &str| {
        find(m, label)
            .and_then(|x| x.idle_rss_kib)
            .map_or("—".to_owned(), kib_text)
    };
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
            Scale::none(),
        );
        let add = added_ttft_p99(m, label);
        line(
            format!("{label} added TTFT p99 <= 0.5 ms"),
            added_text(add),
            add.map(|ns| ns <= ADDED_TTFT_P99_NS),
            Scale::of(|base| added_text(added_ttft_p99(m, base))),
        );
        let rss = measured.and_then(rss_per_stream);
        let p_rss = find(m, "P").and_then(rss_per_stream);
        line(
            format!("{label} RSS per open stream <= P's + 4 KiB"),
            rss_text(label),
            rss.zip(p_rss)
                .map(|(kib, p)| kib <= p + RSS_PER_STREAM_OVER_P_KIB),
            Scale::of(rss_text),
        );
        let idle = measured.and_then(|x| x.idle_rss_kib);
        line(
            format!("{label} idle RSS <= 20 MB"),
            idle_text(label),
            idle.map(|kib| kib <= IDLE_RSS_KIB),
            Scale::of(idle_text),
        );
    }
    let evalsha = outcome
        .redis
        .map(|r| r.all.evalsha as f64 / r.calls.max(1) as f64);
    line(
        "G EVALSHA per call = 2 (reserve, settle)".to_owned(),
        evalsha.map_or("—".to_owned(), |v| format!("{v:.3}")),
        evalsha.map(|v| (v - EVALSHA_PER_CALL).abs() < 0.005),
        Scale::none(),
    );
}

/// `measured`'s proxy CPU per call in `mode`, µs.
fn mode_cpu(measured: &Measured, mode: Mode) -> Option<f64> {
    let cpu: &CpuUse = match mode {
        Mode::Closed => &measured.closed_cpu,
        Mode::Single => &measured.single_cpu,
        Mode::Open | Mode::Streams => &measured.open_cpu,
    };
    proxy_cpu_per_call(cpu)
}
