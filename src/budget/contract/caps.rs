//! The contract cases of caps beyond the key's, org's and run's money
//! (docs/design.md, "Caps"): a model group's money and the rate limits of
//! a key, an org or a group are held and settled in the same atomic step
//! as the key's cap, all or nothing, and a denial names the cap.
//!
//! A rate limit's counter is read through what a reserve is told: a call
//! too large for it is denied with the limit's remaining room.

use super::*;
use crate::budget::caps::{customer_scope_id, model_scope_id};
use crate::budget::{Cap, Level, Meter};

const MINUTE: Duration = Duration::from_secs(60);

/// The money cap of a model group of `owner`.
fn group(owner: &Scope, name: &str, cap: UsdMicros, period: Period) -> Cap {
    Cap {
        kind: ScopeKind::Model,
        id: model_scope_id(owner.kind, &owner.id, name),
        meter: Meter::Usd,
        period,
        limit: cap,
    }
}

/// A rate limit of a scope: `rpm` (requests) or `tpm` (tokens).
fn rate(kind: ScopeKind, id: &str, meter: Meter, limit: u64) -> Cap {
    Cap {
        kind,
        id: id.to_owned(),
        meter,
        period: Period::Minute,
        limit,
    }
}

/// A group's money cap as a scope, to read its state.
fn group_scope(cap: &Cap) -> Scope {
    Scope {
        kind: cap.kind,
        id: cap.id.clone(),
        cap: cap.limit,
        period: cap.period,
    }
}

fn with_caps(key: &Scope, amount: UsdMicros, tokens: u64, caps: &[Cap]) -> ReserveRequest {
    ReserveRequest {
        caps: caps.to_vec(),
        tokens,
        ..request(key, None, amount, TTL_SECS)
    }
}

fn denial(outcome: ReserveOutcome) -> Denial {
    match outcome {
        ReserveOutcome::Denied(denial) => denial,
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// A settlement whose usage counts `tokens` (input and output).
fn settlement_of(req: &ReserveRequest, actual: UsdMicros, tokens: u64) -> Settlement {
    Settlement {
        usage: Usage {
            input: tokens / 2,
            output: tokens - tokens / 2,
            ..Usage::default()
        },
        ..settlement(req, actual)
    }
}

/// What a `tokens` limit has left, read as the denial of a call one token
/// too large for the whole limit (which charges nothing).
async fn tokens_left(store: &BudgetStore, key: &Scope, cap: &Cap) -> u64 {
    let probe = with_caps(key, 0, cap.limit + 1, std::slice::from_ref(cap));
    let denied = denial(reserve(store, &probe).await);
    assert_eq!(
        (denied.kind, &denied.id, denied.meter),
        (cap.kind, &cap.id, cap.meter)
    );
    denied.remaining
}

/// How many more calls a `requests` limit admits in this minute, found by
/// making them (calls of nothing, left open).
async fn requests_left(store: &BudgetStore, key: &Scope, cap: &Cap) -> u64 {
    for admitted in 0..=cap.limit {
        let call = with_caps(key, 0, 0, std::slice::from_ref(cap));
        if let ReserveOutcome::Denied(denied) = reserve(store, &call).await {
            assert_eq!((denied.kind, denied.meter), (cap.kind, Meter::Requests));
            return admitted;
        }
    }
    panic!(
        "{} requests admitted past a limit of {}",
        cap.limit + 1,
        cap.limit
    )
}

pub(super) async fn a_model_group_caps_its_models_inside_the_key(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let opus = group(&key, "opus", 3_000, Period::Day);
    let first = with_caps(&key, 2_000, 0, std::slice::from_ref(&opus));
    let now = f.now().await;
    assert_eq!(
        reserve(&store, &first).await,
        ReserveOutcome::Reserved {
            amount: 2_000,
            levels: vec![
                Level {
                    kind: ScopeKind::Key,
                    meter: Meter::Usd,
                    period_id: Period::Day.id_at(now),
                    committed: 2_000,
                },
                Level {
                    kind: ScopeKind::Model,
                    meter: Meter::Usd,
                    period_id: Period::Day.id_at(now),
                    committed: 2_000,
                },
            ],
        }
    );
    // The group has 1,000 left: a call of its models is denied naming it,
    // and nothing is charged anywhere; its retry gets the same denial.
    let over = with_caps(&key, 2_000, 0, std::slice::from_ref(&opus));
    let denied = denial(reserve(&store, &over).await);
    assert_eq!(
        (
            denied.kind,
            &denied.id,
            denied.meter,
            denied.cap,
            denied.remaining
        ),
        (ScopeKind::Model, &opus.id, Meter::Usd, 3_000, 1_000)
    );
    assert_eq!(denied.resets_at, Period::Day.resets_at(now));
    assert_eq!(reserve(&store, &over).await, ReserveOutcome::Denied(denied));
    assert_eq!(counters(&store, &key).await, (0, 2_000));
    // A call of another model has the key's whole room.
    let other = request(&key, None, 8_000, TTL_SECS);
    assert!(reserve(&store, &other).await.is_reserved());

    // Settled, the group moves by the call's cost as the key does.
    settle(&store, &first, 1_500).await;
    assert_eq!(counters(&store, &group_scope(&opus)).await, (1_500, 0));
    assert_eq!(counters(&store, &key).await, (1_500, 8_000));
    settle(&store, &other, 8_000).await;
    assert_eq!(counters(&store, &group_scope(&opus)).await, (1_500, 0));
}

pub(super) async fn a_range_reserve_holds_what_the_tightest_group_allows(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 100_000, Period::Month);
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let key_group = group(&key, "opus", 6_000, Period::Day);
    let org_group = group(&org, "opus", 3_000, Period::Month);
    let req = ReserveRequest {
        org: Some(org.clone()),
        min_amount: 500,
        ..with_caps(&key, 5_000, 0, &[key_group.clone(), org_group.clone()])
    };
    assert_eq!(reserve(&store, &req).await.held(), Some(3_000));
    // The org's group has nothing left: not even the least fits.
    let next = ReserveRequest {
        exec_id: Uuid::now_v7().to_string(),
        ..req.clone()
    };
    let denied = denial(reserve(&store, &next).await);
    assert_eq!((denied.kind, &denied.id), (ScopeKind::Model, &org_group.id));
    settle(&store, &req, 2_000).await;
    assert_eq!(counters(&store, &group_scope(&key_group)).await, (2_000, 0));
    assert_eq!(counters(&store, &group_scope(&org_group)).await, (2_000, 0));
    assert_eq!(counters(&store, &org).await, (2_000, 0));
}

pub(super) async fn an_rpm_limit_admits_exactly_its_requests_per_minute(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000_000, Period::Day);
    let rpm = rate(ScopeKind::Key, &key.id, Meter::Requests, 3);
    let mut admitted = Vec::new();
    for _ in 0..3 {
        let req = with_caps(&key, 100, 0, std::slice::from_ref(&rpm));
        assert!(reserve(&store, &req).await.is_reserved());
        admitted.push(req);
    }
    let fourth = with_caps(&key, 100, 0, std::slice::from_ref(&rpm));
    let now = f.now().await;
    let denied = denial(reserve(&store, &fourth).await);
    assert_eq!(
        (
            denied.kind,
            &denied.id,
            denied.meter,
            denied.period,
            denied.cap,
            denied.remaining
        ),
        (
            ScopeKind::Key,
            &key.id,
            Meter::Requests,
            Period::Minute,
            3,
            0
        )
    );
    assert_eq!(denied.resets_at, Period::Minute.resets_at(now));
    // Nothing was charged for it; a settle keeps the request counted.
    assert_eq!(counters(&store, &key).await, (0, 300));
    settle(&store, &admitted[0], 50).await;
    let again = with_caps(&key, 100, 0, std::slice::from_ref(&rpm));
    assert_eq!(denial(reserve(&store, &again).await).meter, Meter::Requests);
    // The next minute admits three more.
    f.advance(MINUTE).await;
    for _ in 0..3 {
        let req = with_caps(&key, 100, 0, std::slice::from_ref(&rpm));
        assert!(reserve(&store, &req).await.is_reserved());
        admitted.push(req);
    }
    for req in &admitted[1..] {
        settle(&store, req, 100).await;
    }
}

pub(super) async fn a_tpm_limit_holds_the_bound_and_settles_the_usage(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 1_000_000, Period::Month);
    let key = scope(ScopeKind::Key, 1_000_000, Period::Day);
    let tpm = rate(ScopeKind::Org, &org.id, Meter::Tokens, 10_000);
    let first = ReserveRequest {
        org: Some(org.clone()),
        ..with_caps(&key, 100, 6_000, std::slice::from_ref(&tpm))
    };
    assert!(reserve(&store, &first).await.is_reserved());
    let second = ReserveRequest {
        exec_id: Uuid::now_v7().to_string(),
        ..first.clone()
    };
    let denied = denial(reserve(&store, &second).await);
    assert_eq!(
        (
            denied.kind,
            &denied.id,
            denied.meter,
            denied.cap,
            denied.remaining
        ),
        (ScopeKind::Org, &org.id, Meter::Tokens, 10_000, 4_000)
    );
    // Settled at its usage (1,200 tokens), the first gives back the rest
    // of its bound: the second fits now.
    store
        .settle(&settlement_of(&first, 80, 1_200))
        .await
        .unwrap();
    let third = ReserveRequest {
        exec_id: Uuid::now_v7().to_string(),
        ..first.clone()
    };
    assert!(reserve(&store, &third).await.is_reserved());
    store
        .settle(&settlement_of(&third, 80, 2_000))
        .await
        .unwrap();
    let probe_key = ReserveRequest {
        org: Some(org.clone()),
        ..with_caps(&key, 0, 0, &[])
    };
    let probe = ReserveRequest {
        tokens: 10_001,
        caps: vec![tpm.clone()],
        ..probe_key
    };
    let left = denial(reserve(&store, &probe).await);
    assert_eq!(
        (left.meter, left.remaining),
        (Meter::Tokens, 10_000 - 1_200 - 2_000)
    );
}

pub(super) async fn money_is_named_before_a_rate_limit(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let rpm = rate(ScopeKind::Key, &key.id, Meter::Requests, 1);
    let first = with_caps(&key, 1_000, 0, std::slice::from_ref(&rpm));
    assert!(reserve(&store, &first).await.is_reserved());
    // Both the cap and the rate limit are full: the cap, which no wait
    // mends, is the one named.
    let second = with_caps(&key, 1_000, 0, std::slice::from_ref(&rpm));
    let denied = denial(reserve(&store, &second).await);
    assert_eq!((denied.kind, denied.meter), (ScopeKind::Key, Meter::Usd));
    // Only the rate limit is full: it is named.
    let small = with_caps(&key, 0, 0, std::slice::from_ref(&rpm));
    let denied = denial(reserve(&store, &small).await);
    assert_eq!(
        (denied.kind, denied.meter),
        (ScopeKind::Key, Meter::Requests)
    );
    settle(&store, &first, 900).await;
}

pub(super) async fn an_expiry_charges_every_cap_it_held(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 100_000, Period::Day);
    let opus = group(&key, "opus", 50_000, Period::Day);
    let rpm = rate(ScopeKind::Model, &opus.id, Meter::Requests, 5);
    let tpm = rate(ScopeKind::Key, &key.id, Meter::Tokens, 10_000);
    // A customer's money cap too, as the gateway instantiates it.
    let customer = Cap {
        kind: ScopeKind::Customer,
        id: customer_scope_id(&key.id, "c1"),
        ..group(&key, "unused", 20_000, Period::Day)
    };
    let caps = [opus.clone(), rpm.clone(), tpm.clone(), customer.clone()];
    let req = ReserveRequest {
        ttl: Duration::from_secs(1),
        customer: Some("c1".to_owned()),
        ..with_caps(&key, 4_000, 3_000, &caps)
    };
    assert!(reserve(&store, &req).await.is_reserved());
    f.advance(Duration::from_secs(2)).await;
    assert_eq!(f.sweep_expired().await, 1);
    // Money as `on_expiry` says; the rate limits keep what the call held.
    let charged = expiry_charge(f, 4_000);
    assert_eq!(counters(&store, &group_scope(&opus)).await, (charged, 0));
    assert_eq!(
        counters(&store, &group_scope(&customer)).await,
        (charged, 0)
    );
    assert_eq!(counters(&store, &key).await, (charged, 0));
    assert_eq!(tokens_left(&store, &key, &tpm).await, 7_000);
    let expired = f.ledger().await;
    assert_eq!(expired[0].customer.as_deref(), Some("c1"), "{expired:?}");
    // The late settle replaces the charge with the cost and the usage.
    let late = store
        .settle(&settlement_of(&req, 2_500, 1_000))
        .await
        .unwrap();
    assert_eq!(late.status, LedgerStatus::Late);
    assert_eq!(counters(&store, &group_scope(&opus)).await, (2_500, 0));
    assert_eq!(counters(&store, &group_scope(&customer)).await, (2_500, 0));
    assert_eq!(counters(&store, &key).await, (2_500, 0));
    assert_eq!(tokens_left(&store, &key, &tpm).await, 9_000);
    assert_eq!(requests_left(&store, &key, &rpm).await, 4);
}

pub(super) async fn a_retried_reserve_with_caps_holds_once(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 100_000, Period::Day);
    let opus = group(&key, "opus", 50_000, Period::Day);
    let rpm = rate(ScopeKind::Key, &key.id, Meter::Requests, 2);
    let tpm = rate(ScopeKind::Key, &key.id, Meter::Tokens, 10_000);
    let req = with_caps(
        &key,
        4_000,
        3_000,
        &[opus.clone(), rpm.clone(), tpm.clone()],
    );
    assert!(reserve(&store, &req).await.is_reserved());
    assert_eq!(
        reserve(&store, &req).await,
        ReserveOutcome::Reserved {
            amount: 4_000,
            levels: Vec::new()
        }
    );
    assert_eq!(counters(&store, &group_scope(&opus)).await, (0, 4_000));
    assert_eq!(tokens_left(&store, &key, &tpm).await, 7_000);
    // Settled twice, moved once.
    let settled = store
        .settle(&settlement_of(&req, 3_000, 2_000))
        .await
        .unwrap();
    let again = store
        .settle(&settlement_of(&req, 3_000, 2_000))
        .await
        .unwrap();
    assert!(settled.applied && !again.applied);
    assert_eq!(counters(&store, &group_scope(&opus)).await, (3_000, 0));
    assert_eq!(tokens_left(&store, &key, &tpm).await, 8_000);
    assert_eq!(requests_left(&store, &key, &rpm).await, 1);
}

pub(super) async fn concurrent_reserves_never_pass_a_rate_limit(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000_000_000, Period::Day);
    let opus = group(&key, "opus", 10_000, Period::Day);
    let rpm = rate(ScopeKind::Key, &key.id, Meter::Requests, 7);
    let caps = [opus.clone(), rpm.clone()];
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let store = store.clone();
            let req = with_caps(&key, 1_000, 0, &caps);
            tokio::spawn(async move { (reserve(&store, &req).await, req) })
        })
        .collect();
    let mut admitted = Vec::new();
    for task in tasks {
        let (outcome, req) = task.await.unwrap();
        if outcome.is_reserved() {
            admitted.push(req);
        }
    }
    // Seven requests fit the minute and all fit the group's money.
    assert_eq!(admitted.len(), 7);
    assert_eq!(counters(&store, &group_scope(&opus)).await, (0, 7_000));
    for req in &admitted {
        settle(&store, req, 1_000).await;
    }
    assert_eq!(counters(&store, &group_scope(&opus)).await, (7_000, 0));
}
