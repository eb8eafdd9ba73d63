//! The targets at the end of the report: each with its measured value,
//! PASS or MISS, and what the two pass-throughs measured on the same
//! scale, so a miss can be read against what any proxy costs here. The
//! targets are set against P; the ratios to N stand beside them without
//! a verdict.

use std::fmt::Write as _;

use crate::figures::*;
use crate::run::Outcome;
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
    for (label, floor) in [("G", G_THROUGHPUT), ("G0", G0_THROUGHPUT)] {
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
        line(
            format!("{label} throughput, ratio to N (no target)"),
            ratio_text(throughput_ratio(m, label, "N")),
            None,
            Scale::none(),
        );
    }
    let gs_ratio = throughput_ratio(m, "GS", "G0");
    line(
        format!("GS throughput >= {GS_THROUGHPUT_VS_G0:.2} x G0"),
        ratio_text(gs_ratio),
        gs_ratio.map(|r| r >= GS_THROUGHPUT_VS_G0),
        Scale::none(),
    );
    let added_at_c1 = |label: &str| added_text(added(m, label, 0.99, single_latency));
    for label in ["G0", "G", "GS"] {
        let add = added(m, label, 0.99, single_latency);
        line(
            format!("{label} added p99 at concurrency 1 <= 250 µs"),
            added_text(add),
            add.map(|ns| ns <= ADDED_P99_NS),
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
        line(
            format!("{label} RSS per open stream <= 32 KiB"),
            rss_text(label),
            rss.map(|kib| kib <= RSS_PER_STREAM_KIB),
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
