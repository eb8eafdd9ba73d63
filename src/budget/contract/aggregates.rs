//! The contract's cases about spend aggregates: every ledger entry adds to
//! its day's row (day, key, model) in the same step, so the rows add up to
//! the ledger, filter by key, org and day, and are dropped by the sweep
//! once older than the aggregate retention.

use std::time::Duration;

use chrono::NaiveDate;

use super::*;
use crate::budget::Books;
use crate::budget::Reports;
use crate::budget::{
    AdjustOutcome, Adjustment, SpendQuery, SpendRow, DEFAULT_AGGREGATE_RETENTION_DAYS,
};

const OTHER_MODEL: &str = "claude-sonnet-4-5";

/// Settles of two models on two keys of one org and of a key without one,
/// an expiry and its late settle: the rows are exactly what those entries
/// add up to, and their cost is the ledger's.
pub(super) async fn spend_rows_add_up_every_ledger_entry(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 1_000_000, Period::Month);
    let alice = scope(ScopeKind::Key, 100_000, Period::Day);
    let bob = scope(ScopeKind::Key, 100_000, Period::Day);
    let solo = scope(ScopeKind::Key, 100_000, Period::Total);

    let first = request(&alice, Some(&org), 1_000, TTL_SECS);
    reserve(&store, &first).await;
    settle(&store, &first, 300).await;
    let second = request(&alice, Some(&org), 1_000, TTL_SECS);
    reserve(&store, &second).await;
    store
        .settle(&Settlement {
            model: OTHER_MODEL.to_owned(),
            usage: Usage {
                input: 50,
                cached_input: 10,
                cache_write: 5,
                output: 7,
                ..Usage::default()
            },
            ..settlement(&second, 400)
        })
        .await
        .unwrap();
    let third = request(&bob, Some(&org), 1_000, TTL_SECS);
    reserve(&store, &third).await;
    settle(&store, &third, 250).await;
    let alone = request(&solo, None, 1_000, TTL_SECS);
    reserve(&store, &alone).await;
    settle(&store, &alone, 90).await;

    // Bob's crashed call expires, then its settle comes late: the call is
    // counted once, at expiry, against the model it was reserved for; the
    // late settle corrects its cost in the same row.
    let crashed = ReserveRequest {
        model: OTHER_MODEL.to_owned(),
        ..request(&bob, Some(&org), 1_000, 2)
    };
    reserve(&store, &crashed).await;
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(f.sweep_expired().await, 1);
    let charged = expiry_charge(f, 1_000);
    let ledger = f.ledger().await;
    let expiry = ledger.last().unwrap();
    assert_eq!(
        (expiry.exec_id.as_str(), expiry.status, expiry.actual),
        (
            crashed.exec_id.as_str(),
            LedgerStatus::Expired,
            delta(charged)
        )
    );
    assert_eq!(
        expiry.model, OTHER_MODEL,
        "booked against the reserved model"
    );
    let late = store
        .settle(&Settlement {
            model: OTHER_MODEL.to_owned(),
            ..settlement(&crashed, 600)
        })
        .await
        .unwrap();
    assert_eq!(late.status, LedgerStatus::Late);

    let today = f.now().await.date_naive();
    let day = today.format("%Y-%m-%d").to_string();
    let row = |key: &Scope, org: Option<&Scope>, model: &str| SpendRow {
        day: day.clone(),
        key: key.id.clone(),
        org: org.map(|org| org.id.clone()),
        model: model.to_owned(),
        ..SpendRow::default()
    };
    let gpt = "gpt-4o-mini";
    let mut expected = vec![
        SpendRow {
            calls: 1,
            input_tokens: 1_000,
            output_tokens: 200,
            cost_usd_micros: 300,
            ..row(&alice, Some(&org), gpt)
        },
        SpendRow {
            calls: 1,
            input_tokens: 50,
            cached_input_tokens: 10,
            cache_write_tokens: 5,
            output_tokens: 7,
            cost_usd_micros: 400,
            ..row(&alice, Some(&org), OTHER_MODEL)
        },
        SpendRow {
            calls: 1,
            input_tokens: 1_000,
            output_tokens: 200,
            cost_usd_micros: 250,
            ..row(&bob, Some(&org), gpt)
        },
        SpendRow {
            calls: 1,
            input_tokens: 1_000,
            output_tokens: 200,
            // What expiry charged, then replaced by the actual cost.
            cost_usd_micros: 600,
            ..row(&bob, Some(&org), OTHER_MODEL)
        },
        SpendRow {
            calls: 1,
            input_tokens: 1_000,
            output_tokens: 200,
            cost_usd_micros: 90,
            ..row(&solo, None, gpt)
        },
    ];
    expected.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));

    let all = spend(f, today, today, None, None).await;
    assert_eq!(all, expected);
    let ledger_cost: UsdMicrosDelta = f.ledger().await.iter().map(|e| e.actual).sum();
    let rows_cost: i64 = all.iter().map(|r| r.cost_usd_micros).sum();
    assert_eq!(rows_cost, ledger_cost, "Σ row cost == Σ ledger actual");

    // Filters: by key, by org, by day range.
    let only = |wanted: &Scope| -> Vec<SpendRow> {
        expected
            .iter()
            .filter(|row| row.key == wanted.id)
            .cloned()
            .collect()
    };
    assert_eq!(
        spend(f, today, today, Some(&alice.id), None).await,
        only(&alice)
    );
    let in_org: Vec<SpendRow> = expected
        .iter()
        .filter(|row| row.org.as_deref() == Some(org.id.as_str()))
        .cloned()
        .collect();
    assert_eq!(in_org.len(), 4);
    assert_eq!(spend(f, today, today, None, Some(&org.id)).await, in_org);
    assert_eq!(
        spend(f, today, today, Some(&bob.id), Some(&org.id)).await,
        only(&bob)
    );
    assert_eq!(
        spend(f, today, today, Some(&solo.id), Some(&org.id)).await,
        []
    );
    let yesterday = today.pred_opt().unwrap();
    let tomorrow = today.succ_opt().unwrap();
    assert_eq!(spend(f, yesterday, tomorrow, None, None).await, expected);
    assert_eq!(spend(f, yesterday, yesterday, None, None).await, []);
    assert_eq!(spend(f, tomorrow, tomorrow, None, None).await, []);
}

/// Rows are kept the aggregate retention in whole days, then the sweep
/// drops them; later days stay, and the books still balance.
pub(super) async fn spend_rows_past_their_retention_are_swept(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 100_000, Period::Total);
    let old = request(&key, None, 1_000, TTL_SECS);
    reserve(&store, &old).await;
    settle(&store, &old, 100).await;
    let old_day = f.now().await.date_naive();

    // The retention's last day: still kept.
    let retention = u64::from(DEFAULT_AGGREGATE_RETENTION_DAYS);
    f.advance(Duration::from_secs(retention * 86_400)).await;
    let recent = request(&key, None, 1_000, TTL_SECS);
    reserve(&store, &recent).await;
    settle(&store, &recent, 200).await;
    let recent_day = f.now().await.date_naive();
    f.sweep_expired().await;
    let days = |rows: Vec<SpendRow>| -> Vec<(String, i64)> {
        rows.into_iter()
            .map(|row| (row.day, row.cost_usd_micros))
            .collect()
    };
    let id = |day: NaiveDate| day.format("%Y-%m-%d").to_string();
    assert_eq!(
        days(spend(f, old_day, recent_day, Some(&key.id), None).await),
        [(id(old_day), 100), (id(recent_day), 200)]
    );

    // A day later the first row is past the retention.
    f.advance(Duration::from_secs(86_400)).await;
    f.sweep_expired().await;
    assert_eq!(
        days(spend(f, old_day, recent_day, Some(&key.id), None).await),
        [(id(recent_day), 200)]
    );
}

async fn spend(
    f: &impl Fixture,
    from: NaiveDate,
    to: NaiveDate,
    key: Option<&str>,
    org: Option<&str>,
) -> Vec<SpendRow> {
    let store = f.store();
    let query = SpendQuery {
        from,
        to,
        key: key.map(str::to_owned),
        org: org.map(str::to_owned),
    };
    store.spend(&query).await.unwrap()
}

/// An adjustment is in the spend reports as money moved by hand: its cost
/// on the key's row of the day with no model, and no call.
pub(super) async fn an_adjustment_is_spend_without_a_call(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 1_000_000, Period::Month);
    let key = scope(ScopeKind::Key, 100_000, Period::Day);
    let call = request(&key, Some(&org), 1_000, TTL_SECS);
    reserve(&store, &call).await;
    settle(&store, &call, 500).await;
    let refund = Adjustment {
        exec_id: Uuid::now_v7().to_string(),
        key: key.clone(),
        org: Some(org.clone()),
        amount: -200,
        note: "refund".to_owned(),
    };
    assert!(matches!(
        store.adjust(&refund).await.unwrap(),
        AdjustOutcome::Applied { applied: true, .. }
    ));
    let today = f.now().await.date_naive();
    let query = SpendQuery {
        from: today,
        to: today,
        key: Some(key.id.clone()),
        org: None,
    };
    let rows = store.spend(&query).await.unwrap();
    let calls: u64 = rows.iter().map(|row| row.calls).sum();
    let cost: i64 = rows.iter().map(|row| row.cost_usd_micros).sum();
    assert_eq!((calls, cost), (1, 300), "{rows:?}");
    let by_hand = rows.iter().find(|row| row.model.is_empty()).unwrap();
    assert_eq!((by_hand.calls, by_hand.cost_usd_micros), (0, -200));
}
