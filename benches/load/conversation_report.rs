//! The conversation mode's report: per loop, a table with a row per depth
//! and configuration — turns/s, latency, what it adds over D on the same
//! turns, and the CPU per turn of the proxy and the upstream — then the
//! gateways' books and the targets, each with PASS or MISS.
//!
//! Latencies merge every round's turns; CPU per turn is the processes'
//! user + system time over the rounds over the turns answered.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::conversation_run::{loop_name, ConversationPlan, ConversationRun, Loop, Turns};
use crate::figures::{added_text, latency, signed};
use crate::procs::TICKS_PER_SEC;
use crate::report::Report;
use crate::subjects::describe;
use crate::Mode;

/// The targets (benchmark figures, not test assertions), all on G0.
/// A 128k-token turn adds at most this many times what nginx adds.
const ADDED_P50_VS_N: f64 = 2.0;
/// Gateway CPU per turn, ms, by depth.
const CPU_MS: [(&str, f64); 2] = [("128k", 3.0), ("32k", 1.0)];

pub fn render(plan: &ConversationPlan, run: &ConversationRun) -> Report {
    let mut out = String::new();
    let depths: Vec<&str> = run.depths.iter().map(|d| d.depth.label).collect();
    // `write!` to a String cannot fail; results are ignored throughout.
    let _ = writeln!(
        out,
        "\ntollgate conversation benchmark: turns {} tokens deep, {} round(s), configurations alternating {}; {:.0} s in all",
        depths.join(", "),
        plan.rounds,
        run.ran.join(" "),
        run.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "machine: {} cores; load average {} before, {} after (other work shares these cores)",
        plan.cores, run.load_before, run.load_after
    );
    let _ = writeln!(
        out,
        "upstream: {}; every turn resends the whole conversation (gpt-4o-mini, counted with o200k_base)",
        plan.upstream.describe()
    );
    for (label, reason) in &run.skipped {
        let _ = writeln!(out, "{label} ({}) did not run: {reason}", describe(label));
    }
    for (index, mode) in [Mode::Single, Mode::Closed].into_iter().enumerate() {
        table(&mut out, run, index, mode);
    }
    let checks_hold = settlement(&mut out, run);
    if run.ran.contains(&"G") {
        let _ = writeln!(
            out,
            "  Redis keys of this run deleted afterwards: {}",
            run.redis_keys_deleted
        );
    }
    targets(&mut out, run);
    for (label, warnings) in &run.warnings {
        let _ = writeln!(
            out,
            "\n{label} logged {} warning(s); the first:",
            warnings.len()
        );
        for line in warnings.iter().take(3) {
            let _ = writeln!(out, "  {line}");
        }
    }
    Report {
        text: out,
        checks_hold,
    }
}

fn table(out: &mut String, run: &ConversationRun, index: usize, mode: Mode) {
    let Some(first) = run.depths.first().and_then(|d| d.loops.get(index)) else {
        return;
    };
    let _ = writeln!(
        out,
        "\nConversation turns, {}: the same turns sent to every configuration",
        loop_name(mode, first.agents)
    );
    let _ = writeln!(
        out,
        "{:<5} {:>8} {:>7} {:>6}  {:<26} {:>8} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "depth",
        "tokens",
        "body",
        "turns",
        "config",
        "turns/s",
        "p50",
        "p99",
        "added p50",
        "added p99",
        "proxy CPU",
        "upstr CPU"
    );
    for depth in &run.depths {
        let Some(turns) = depth.loops.get(index) else {
            continue;
        };
        for (row, measured) in turns.turns.iter().enumerate() {
            let (label, tokens, body, count) = if row == 0 {
                (
                    depth.depth.label.to_owned(),
                    thousands(turns.mean_tokens().round() as u64),
                    kb_text(turns.mean_bytes()),
                    turns.count.to_string(),
                )
            } else {
                Default::default()
            };
            let _ = writeln!(
                out,
                "{label:<5} {tokens:>8} {body:>7} {count:>6}  {:<26} {:>8.0} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}",
                format!("{:<3}{}", measured.label, describe(measured.label)),
                measured.sample.rps(),
                latency(&measured.sample.latency, 0.50),
                latency(&measured.sample.latency, 0.99),
                added_or_dash(turns, measured.label, 0.50),
                added_or_dash(turns, measured.label, 0.99),
                if measured.label == "D" {
                    "—".to_owned()
                } else {
                    cpu_text(cpu_ms(measured.cpu.ticks.proxy, measured))
                },
                cpu_text(cpu_ms(measured.cpu.ticks.upstream, measured)),
            );
        }
    }
    let _ = writeln!(
        out,
        "(tokens, body: a turn's mean prompt tokens and bytes; turns: over every round, each sent to every\n configuration; added: over D on the same turns; CPU: user + system time per turn, all threads of\n the process, nginx's master and worker together)"
    );
}

/// Prints each gateway's books after each depth; true when all balance.
fn settlement(out: &mut String, run: &ConversationRun) -> bool {
    let _ = writeln!(
        out,
        "\nSettlement (GET /v1/budget against the charges reported to the client, after each depth)"
    );
    let mut holds = true;
    for (label, check) in &run.settlement {
        holds &= check.holds();
        let _ = writeln!(out, "{}", check.line(label));
    }
    holds
}

fn targets(out: &mut String, run: &ConversationRun) {
    let _ = writeln!(out, "\nTargets{:>58} {:>22}", "measured", "N, for scale");
    let mut line = |what: String, value: String, pass: Option<bool>, scale: String| {
        let verdict = match pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a ",
        };
        let _ = writeln!(out, "  {what:<50} {value:>13}  {verdict} {scale:>22}");
    };
    let at = |depth: &str, index: usize| {
        run.depths
            .iter()
            .find(|d| d.depth.label == depth)
            .and_then(|d| d.loops.get(index))
    };
    let single = at("128k", 0);
    let g0 = single.and_then(|turns| added(turns, "G0", 0.50));
    let n = single.and_then(|turns| added(turns, "N", 0.50));
    line(
        format!("G0 128k turn: added p50 at c=1 <= {ADDED_P50_VS_N:.0} x N's"),
        added_text(g0),
        g0.zip(n)
            .map(|(g0, n)| g0 as f64 <= ADDED_P50_VS_N * n.max(0) as f64),
        added_text(n),
    );
    for (depth, limit) in CPU_MS {
        for (index, mode) in [(0, "c=1"), (1, "closed loop")] {
            let turns = at(depth, index);
            let cpu = |label: &str| {
                turns
                    .and_then(|turns| turns.of(label))
                    .and_then(|measured| cpu_ms(measured.cpu.ticks.proxy, measured))
            };
            let g0 = cpu("G0");
            line(
                format!("G0 {depth} turn: CPU per turn, {mode} <= {limit:.0} ms"),
                cpu_text(g0),
                g0.map(|ms| ms <= limit),
                cpu_text(cpu("N")),
            );
        }
    }
    for label in &run.ran {
        if *label == "D" {
            continue;
        }
        let answered = run.depths.iter().flat_map(|d| &d.loops).all(|turns| {
            turns
                .of(label)
                .is_some_and(|t| t.sample.errors == 0 && t.sample.ok == turns.count)
        });
        let books: Vec<bool> = run
            .settlement
            .iter()
            .filter(|(l, _)| l == label)
            .map(|(_, check)| check.holds())
            .collect();
        let (what, holds) = if books.is_empty() {
            (format!("{label} every turn answered"), answered)
        } else {
            (
                format!("{label} every turn answered and settled, books exact"),
                answered && books.iter().all(|&ok| ok),
            )
        };
        line(
            what,
            if holds { "yes" } else { "no" }.to_owned(),
            Some(holds),
            String::new(),
        );
    }
}

/// What `label` adds over D, or a dash in D's own row.
fn added_or_dash(turns: &Loop, label: &str, quantile: f64) -> String {
    if label == "D" {
        return "—".to_owned();
    }
    added_text(added(turns, label, quantile))
}

/// Decimal kilobytes.
fn kb_text(bytes: f64) -> String {
    if bytes < 10e3 {
        format!("{:.1} KB", bytes / 1e3)
    } else {
        format!("{:.0} KB", bytes / 1e3)
    }
}

/// `label`'s latency quantile minus D's on the same turns, ns.
fn added(turns: &Loop, label: &str, quantile: f64) -> Option<i64> {
    let at = |turns: &Turns| quantile_of(&turns.sample.latency, quantile);
    Some(at(turns.of(label)?)? - at(turns.of("D")?)?)
}

fn quantile_of(histogram: &Histogram<u64>, quantile: f64) -> Option<i64> {
    (!histogram.is_empty()).then(|| signed(histogram.value_at_quantile(quantile)))
}

/// CPU ticks per turn answered, in ms.
fn cpu_ms(ticks: u64, measured: &Turns) -> Option<f64> {
    (measured.cpu.calls > 0)
        .then(|| ticks as f64 * 1e3 / TICKS_PER_SEC as f64 / measured.cpu.calls as f64)
}

fn cpu_text(ms: Option<f64>) -> String {
    match ms {
        None => "—".to_owned(),
        Some(ms) if ms < 1.0 => format!("{:.0} µs", ms * 1e3),
        Some(ms) => format!("{ms:.2} ms"),
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut text = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}
