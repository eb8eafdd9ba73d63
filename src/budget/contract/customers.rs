//! The contract cases of customers (docs/design.md, "Caps"): a key's
//! customer is a scope inside the key, capped by the key's template in the
//! same atomic step; the store remembers each key's customers with their
//! last call, forgets one idle for the customer TTL with its counters, and
//! every ledger entry and spend row of its calls carries it.

use super::*;
use crate::budget::caps::customer_scope_id;
use crate::budget::{Cap, Meter, SpendQuery, DEFAULT_CUSTOMER_TTL};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// A call of `key`'s customer `customer`, held against its template's
/// money cap.
fn for_customer(key: &Scope, customer: &str, cap: UsdMicros, amount: UsdMicros) -> ReserveRequest {
    ReserveRequest {
        caps: vec![Cap {
            kind: ScopeKind::Customer,
            id: customer_scope_id(&key.id, customer),
            meter: Meter::Usd,
            period: Period::Total,
            limit: cap,
        }],
        customer: Some(customer.to_owned()),
        ..request(key, None, amount, TTL_SECS)
    }
}

fn customer_scope(key: &Scope, customer: &str, cap: UsdMicros) -> Scope {
    Scope {
        kind: ScopeKind::Customer,
        id: customer_scope_id(&key.id, customer),
        cap,
        period: Period::Total,
    }
}

async fn customer_ids(store: &BudgetStore, key: &Scope, after: Option<&str>) -> Vec<String> {
    store
        .customers(&key.id, after, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|seen| seen.id)
        .collect()
}

pub(super) async fn a_customer_is_capped_inside_its_key(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 100_000, Period::Day);
    let first = for_customer(&key, "c1@example.com", 3_000, 2_000);
    assert!(reserve(&store, &first).await.is_reserved());
    let now = f.now().await;
    // The customer has 1,000 left: denied naming it; another customer of
    // the key has its own whole cap.
    let over = for_customer(&key, "c1@example.com", 3_000, 2_000);
    match reserve(&store, &over).await {
        ReserveOutcome::Denied(denial) => assert_eq!(
            (denial.kind, denial.id.as_str(), denial.remaining),
            (
                ScopeKind::Customer,
                customer_scope_id(&key.id, "c1@example.com").as_str(),
                1_000
            )
        ),
        other => panic!("expected the customer to deny, got {other:?}"),
    }
    let other = for_customer(&key, "c2", 3_000, 3_000);
    assert!(reserve(&store, &other).await.is_reserved());
    settle(&store, &first, 1_500).await;
    settle(&store, &other, 3_000).await;
    let c1 = customer_scope(&key, "c1@example.com", 3_000);
    assert_eq!(counters(&store, &c1).await, (1_500, 0));
    assert_eq!(counters(&store, &key).await, (4_500, 0));

    // Remembered, by id, with its last call.
    let seen = store.customers(&key.id, None, 100).await.unwrap();
    let ids: Vec<&str> = seen.iter().map(|seen| seen.id.as_str()).collect();
    assert_eq!(ids, ["c1@example.com", "c2"]);
    assert!(seen
        .iter()
        .all(|seen| seen.last_call.timestamp() == now.timestamp()));
    // The ledger and the spend rows carry it.
    let ledger = f.ledger().await;
    let by_customer: Vec<(Option<&str>, i64)> = ledger
        .iter()
        .map(|entry| (entry.customer.as_deref(), entry.actual))
        .collect();
    assert_eq!(
        by_customer,
        [(Some("c1@example.com"), 1_500), (Some("c2"), 3_000)]
    );
    let day = now.date_naive();
    let rows = store
        .spend(&SpendQuery {
            from: day,
            to: day,
            key: Some(key.id.clone()),
            org: None,
        })
        .await
        .unwrap();
    let rows: Vec<(&str, i64)> = rows
        .iter()
        .map(|row| (row.customer.as_str(), row.cost_usd_micros))
        .collect();
    assert_eq!(rows, [("c1@example.com", 1_500), ("c2", 3_000)]);
}

pub(super) async fn customers_are_listed_by_id_a_page_at_a_time(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 100_000, Period::Day);
    let other_key = scope(ScopeKind::Key, 100_000, Period::Day);
    for customer in ["b", "c", "a"] {
        let req = for_customer(&key, customer, 1_000, 10);
        assert!(reserve(&store, &req).await.is_reserved());
        settle(&store, &req, 10).await;
    }
    let theirs = for_customer(&other_key, "z", 1_000, 10);
    assert!(reserve(&store, &theirs).await.is_reserved());
    settle(&store, &theirs, 10).await;
    let page = store.customers(&key.id, None, 2).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|seen| seen.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(customer_ids(&store, &key, Some("b")).await, ["c"]);
    assert_eq!(customer_ids(&store, &other_key, None).await, ["z"]);
    // A call naming no customer adds none.
    let plain = request(&key, None, 10, TTL_SECS);
    assert!(reserve(&store, &plain).await.is_reserved());
    settle(&store, &plain, 10).await;
    assert_eq!(customer_ids(&store, &key, None).await, ["a", "b", "c"]);
}

pub(super) async fn an_idle_customer_is_forgotten_with_its_counters(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000_000, Period::Total);
    let idle = for_customer(&key, "idle", 5_000, 2_000);
    assert!(reserve(&store, &idle).await.is_reserved());
    settle(&store, &idle, 2_000).await;
    // Past the TTL less a day the busy customer calls again; the idle one
    // is forgotten at the TTL.
    f.advance(DEFAULT_CUSTOMER_TTL - DAY).await;
    let busy = for_customer(&key, "busy", 5_000, 100);
    assert!(reserve(&store, &busy).await.is_reserved());
    settle(&store, &busy, 100).await;
    f.advance(2 * DAY).await;
    f.sweep_expired().await;
    assert_eq!(customer_ids(&store, &key, None).await, ["busy"]);
    // Its counters went with it: called again, it starts from nothing,
    // with its whole cap.
    let back = for_customer(&key, "idle", 5_000, 5_000);
    assert!(reserve(&store, &back).await.is_reserved());
    settle(&store, &back, 0).await;
    assert_eq!(customer_ids(&store, &key, None).await, ["busy", "idle"]);
    // The key's own books keep every call.
    assert_eq!(counters(&store, &key).await, (2_100, 0));
}
