//! Tests of the metrics: every series exported up front, each counted by
//! what it counts, and a scrape reading the open reservations.

use super::*;
use crate::budget::{Denial, MemoryStore, Period, Rules};

fn denial(kind: ScopeKind) -> ReserveOutcome {
    ReserveOutcome::Denied(Denial {
        kind,
        id: "alice".to_owned(),
        meter: crate::budget::Meter::Usd,
        period: Period::Day,
        cap: 10,
        remaining: 0,
        resets_at: None,
    })
}

fn settled(status: LedgerStatus, actual: UsdMicros, applied: bool) -> SettleOutcome {
    SettleOutcome {
        status,
        reserved: 1_000,
        actual,
        applied,
        key_remaining: 0,
    }
}

/// The value of the sample line starting with `series`.
fn sample(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_owned)
}

#[test]
fn every_fixed_series_is_exported_at_zero_before_any_call() {
    let text = Metrics::new().encode(None).unwrap();
    for series in [
        r#"tollgate_reserve_total{outcome="allowed",scope=""}"#,
        r#"tollgate_reserve_total{outcome="denied",scope="key"}"#,
        r#"tollgate_reserve_total{outcome="denied",scope="org"}"#,
        r#"tollgate_reserve_total{outcome="error",scope=""}"#,
        r#"tollgate_settlements_total{status="ok"}"#,
        r#"tollgate_settlements_total{status="overrun"}"#,
        r#"tollgate_settlements_total{status="estimated"}"#,
        r#"tollgate_settlements_total{status="late"}"#,
        "tollgate_expired_reservations_total",
        "tollgate_charged_usd_micros_total",
        "tollgate_absurd_usage_total",
        r#"tollgate_store_errors_total{op="reserve"}"#,
        r#"tollgate_store_errors_total{op="open_reservations"}"#,
        r#"tollgate_store_call_duration_seconds_count{op="settle"}"#,
    ] {
        assert_eq!(
            sample(&text, series).as_deref(),
            Some("0"),
            "{series}\n{text}"
        );
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(!text.contains("tollgate_open_reservations"), "{text}");
}

#[test]
fn reserve_outcomes_are_counted_by_outcome_and_denying_scope() {
    let metrics = Metrics::new();
    let reserved = || ReserveOutcome::Reserved {
        amount: 1,
        levels: Vec::new(),
    };
    metrics.count_reserve(&Ok(reserved()));
    metrics.count_reserve(&Ok(reserved()));
    metrics.count_reserve(&Ok(denial(ScopeKind::Org)));
    metrics.count_reserve(&Err(StoreError::Timeout));
    let text = metrics.encode(None).unwrap();
    let count = |series: &str| sample(&text, series);
    assert_eq!(
        count(r#"tollgate_reserve_total{outcome="allowed",scope=""}"#).as_deref(),
        Some("2")
    );
    assert_eq!(
        count(r#"tollgate_reserve_total{outcome="denied",scope="org"}"#).as_deref(),
        Some("1")
    );
    assert_eq!(
        count(r#"tollgate_reserve_total{outcome="denied",scope="key"}"#).as_deref(),
        Some("0")
    );
    assert_eq!(
        count(r#"tollgate_reserve_total{outcome="error",scope=""}"#).as_deref(),
        Some("1")
    );
}

#[test]
fn applied_settlements_count_by_status_and_sum_what_they_charged() {
    let metrics = Metrics::new();
    metrics.count_settlement(&settled(LedgerStatus::Ok, 1_200, true));
    metrics.count_settlement(&settled(LedgerStatus::Overrun, 5_000, true));
    metrics.count_settlement(&settled(LedgerStatus::Late, 300, true));
    // A retry of an applied settle changes nothing.
    metrics.count_settlement(&settled(LedgerStatus::Ok, 1_200, false));
    metrics.count_expired(2);
    let text = metrics.encode(None).unwrap();
    let count = |series: &str| sample(&text, series);
    assert_eq!(
        count(r#"tollgate_settlements_total{status="ok"}"#).as_deref(),
        Some("1")
    );
    assert_eq!(
        count(r#"tollgate_settlements_total{status="overrun"}"#).as_deref(),
        Some("1")
    );
    assert_eq!(
        count(r#"tollgate_settlements_total{status="late"}"#).as_deref(),
        Some("1")
    );
    assert_eq!(
        count("tollgate_charged_usd_micros_total").as_deref(),
        Some("6500")
    );
    assert_eq!(
        count("tollgate_expired_reservations_total").as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn store_calls_are_timed_and_failures_counted_but_refusals_not() {
    let metrics = Metrics::new();
    let ok: Result<(), StoreError> = metrics.time(StoreOp::Ping, async { Ok(()) }).await;
    assert!(ok.is_ok());
    let down = metrics
        .time(StoreOp::Reserve, async {
            Err::<(), _>(StoreError::Unavailable("connection refused".to_owned()))
        })
        .await;
    assert!(down.is_err());
    let refused = metrics
        .time(StoreOp::Settle, async {
            Err::<(), _>(StoreError::UnknownReservation("x".to_owned()))
        })
        .await;
    assert!(refused.is_err());
    let out_of_range = metrics
        .time(StoreOp::Settle, async {
            Err::<(), _>(StoreError::OutOfRange {
                exec_id: "x".to_owned(),
            })
        })
        .await;
    assert!(out_of_range.is_err());
    let script_refusal = metrics
        .time(StoreOp::State, async {
            Err::<(), _>(StoreError::Refused("bad argument".to_owned()))
        })
        .await;
    assert!(script_refusal.is_err());
    let text = metrics.encode(None).unwrap();
    let count = |series: &str| sample(&text, series);
    assert_eq!(
        count(r#"tollgate_store_errors_total{op="reserve"}"#).as_deref(),
        Some("1")
    );
    assert_eq!(
        count(r#"tollgate_store_errors_total{op="settle"}"#).as_deref(),
        Some("0")
    );
    assert_eq!(
        count(r#"tollgate_store_errors_total{op="state"}"#).as_deref(),
        Some("1")
    );
    for (op, calls) in [("ping", "1"), ("reserve", "1"), ("settle", "2")] {
        let series = format!(r#"tollgate_store_call_duration_seconds_count{{op="{op}"}}"#);
        assert_eq!(count(&series).as_deref(), Some(calls), "{text}");
    }
    assert!(
        text.contains(r#"tollgate_store_call_duration_seconds_bucket{le="0.0001",op="ping"}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"tollgate_store_call_duration_seconds_bucket{le="2.5",op="ping"}"#),
        "{text}"
    );
}

#[test]
fn requests_are_counted_by_route_and_status() {
    let metrics = Metrics::new();
    metrics.count_request("/v1/chat/completions", StatusCode::OK);
    metrics.count_request("/v1/chat/completions", StatusCode::OK);
    metrics.count_request("/v1/messages", StatusCode::PAYMENT_REQUIRED);
    let text = metrics.encode(None).unwrap();
    assert_eq!(
        sample(
            &text,
            r#"tollgate_requests_total{route="/v1/chat/completions",status="200"}"#
        )
        .as_deref(),
        Some("2")
    );
    assert_eq!(
        sample(
            &text,
            r#"tollgate_requests_total{route="/v1/messages",status="402"}"#
        )
        .as_deref(),
        Some("1")
    );
}

#[tokio::test]
async fn a_scrape_reads_the_open_reservations_from_the_store() {
    let store = MemoryStore::new(Rules::default());
    let metrics = Metrics::new();
    let text = metrics.scrape(&BudgetStore::Memory(store)).await.unwrap();
    assert_eq!(
        sample(&text, "tollgate_open_reservations").as_deref(),
        Some("0")
    );
    assert_eq!(
        sample(&text, "tollgate_open_reservations_usd_micros").as_deref(),
        Some("0")
    );
    assert!(
        text.contains("# TYPE tollgate_open_reservations gauge"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    let text = metrics.encode(Some((3, 4_500))).unwrap();
    assert_eq!(
        sample(&text, "tollgate_open_reservations").as_deref(),
        Some("3")
    );
    assert_eq!(
        sample(&text, "tollgate_open_reservations_usd_micros").as_deref(),
        Some("4500")
    );
    assert_eq!(text.matches("# EOF").count(), 1, "{text}");
}

#[test]
fn the_ledger_drain_is_counted_and_its_age_shown_only_where_it_runs() {
    let metrics = Metrics::new();
    let text = metrics.encode(None).unwrap();
    assert_eq!(
        sample(&text, "tollgate_ledger_drained_total").as_deref(),
        Some("0")
    );
    assert_eq!(
        sample(&text, "tollgate_ledger_sink_errors_total").as_deref(),
        Some("0")
    );
    assert_eq!(
        sample(&text, r#"tollgate_store_errors_total{op="drain"}"#).as_deref(),
        Some("0")
    );
    // A gateway that does not drain has no age to show.
    assert!(!text.contains("tollgate_ledger_undrained_age"), "{text}");
    metrics.count_drained(1_000);
    metrics.count_drained(7);
    metrics.count_sink_error();
    metrics.set_undrained_age(42);
    let text = metrics.encode(None).unwrap();
    assert_eq!(
        sample(&text, "tollgate_ledger_drained_total").as_deref(),
        Some("1007")
    );
    assert_eq!(
        sample(&text, "tollgate_ledger_sink_errors_total").as_deref(),
        Some("1")
    );
    assert_eq!(
        sample(&text, "tollgate_ledger_undrained_age_seconds").as_deref(),
        Some("42")
    );
}
