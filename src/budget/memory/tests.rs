//! Tests of the memory store's own behaviour; the protocol itself is
//! covered by the contract suite in `budget::contract`.

use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::TimeZone;

use super::testing::ManualClock;
use super::*;
use crate::budget::{BudgetStore, LedgerStatus, Period};
use crate::money::MAX_USD_MICROS;
use crate::usage::Usage;

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

fn manual_store() -> (MemoryStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(start()));
    (
        MemoryStore::with_clock(Rules::default(), clock.clone()),
        clock,
    )
}

fn key(cap: UsdMicros) -> Scope {
    Scope {
        kind: ScopeKind::Key,
        id: "alice".to_owned(),
        cap,
        period: Period::Day,
    }
}

fn request(exec_id: &str, amount: UsdMicros, ttl_secs: u64) -> ReserveRequest {
    ReserveRequest {
        caps: Vec::new(),
        tokens: 0,
        customer: None,
        exec_id: exec_id.to_owned(),
        key: key(1_000_000),
        org: None,
        model: "gpt-4o-mini".to_owned(),
        amount,
        min_amount: amount,
        run: None,
        ttl: Duration::from_secs(ttl_secs),
    }
}

fn settlement(exec_id: &str, actual: UsdMicros) -> Settlement {
    Settlement {
        exec_id: exec_id.to_owned(),
        key: "alice".to_owned(),
        org: None,
        model: "gpt-4o-mini".to_owned(),
        usage: Usage::default(),
        actual,
        estimated: false,
    }
}

fn records(store: &MemoryStore) -> usize {
    store.shared.lock().records.len()
}

#[test]
fn lazy_sweep_in_reserve_is_bounded() {
    let (store, clock) = manual_store();
    for i in 0..100 {
        store.reserve(&request(&format!("crashed-{i}"), 1, 1));
    }
    clock.advance(Duration::from_secs(2));
    store.reserve(&request("next", 1, 60));
    assert_eq!(store.open_reservations(), (100 - LAZY_SWEEP_LIMIT + 1, 37));
    assert_eq!(store.sweep_expired(), 100 - LAZY_SWEEP_LIMIT);
    assert_eq!(store.open_reservations(), (1, 1));
    // Each expired reservation stays charged its amount.
    assert_eq!(store.counter(ScopeKind::Key, "alice", "2026-11-29"), 101);
}

#[test]
fn closed_records_are_forgotten_after_the_closed_record_time() {
    let clock = Arc::new(ManualClock::new(start()));
    let rules = Rules {
        closed_record: Duration::from_secs(5),
        ..Rules::default()
    };
    let store = MemoryStore::with_clock(rules, clock.clone());
    store.reserve(&request("settled", 100, 10));
    store.settle(&settlement("settled", 80)).unwrap();
    store.reserve(&request("expired", 100, 10));
    let denied = ReserveRequest {
        key: key(0),
        ..request("denied", 100, 10)
    };
    assert!(matches!(store.reserve(&denied), ReserveOutcome::Denied(_)));

    // Within the closed-record time a retry still finds the first answer.
    clock.advance(Duration::from_secs(4));
    assert!(!store.settle(&settlement("settled", 80)).unwrap().applied);
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.sweep_expired(), 0);
    // The settled and denied records are gone; the open one stays.
    assert_eq!(records(&store), 1);

    // Expired, it is kept a whole TTL for a late settle.
    clock.advance(Duration::from_secs(5));
    assert_eq!(store.sweep_expired(), 1);
    clock.advance(Duration::from_secs(9));
    store.sweep_expired();
    assert_eq!(records(&store), 1);
    clock.advance(Duration::from_secs(2));
    store.sweep_expired();
    assert_eq!(records(&store), 0);
    assert!(store.shared.lock().retention.is_empty());
    assert!(matches!(
        store.settle(&settlement("expired", 80)),
        Err(StoreError::UnknownReservation(_))
    ));
    // The ledger and counters outlive the records: the expired call stays
    // charged its amount.
    assert_eq!(store.ledger().len(), 2);
    assert_eq!(store.counter(ScopeKind::Key, "alice", "2026-11-29"), 180);
}

#[test]
fn claims_are_released_when_their_reservation_closes() {
    let (store, clock) = manual_store();
    let claims = |store: &MemoryStore| store.shared.lock().claims.len();
    store.reserve_claimed(&request("settled", 100, 10), "c1");
    store.reserve_claimed(&request("expired", 100, 10), "c2");
    let denied = ReserveRequest {
        key: key(0),
        ..request("denied", 100, 10)
    };
    store.reserve_claimed(&denied, "c3");
    assert_eq!(claims(&store), 2, "a denial takes no claim");

    store.settle(&settlement("settled", 80)).unwrap();
    assert_eq!(claims(&store), 1);
    clock.advance(Duration::from_secs(11));
    assert_eq!(store.sweep_expired(), 1);
    assert_eq!(claims(&store), 0);
}

#[test]
fn a_claim_taken_over_stays_with_its_new_holder() {
    let (store, clock) = manual_store();
    store.reserve_claimed(&request("crashed", 100, 10), "c");
    // Past its deadline but not yet swept (a reserve without the lazy
    // sweep before it): the claim passes on.
    clock.advance(Duration::from_secs(11));
    {
        let mut state = store.shared.lock();
        let now = store.shared.now();
        let next = books::reserve_claimed(
            &mut *state,
            &store.shared.rules,
            &request("next", 100, 60),
            "c",
            now,
        );
        assert!(matches!(
            state::sure(next),
            ClaimedReserve::Ran(ReserveOutcome::Reserved { .. })
        ));
    }
    assert_eq!(store.sweep_expired(), 1);
    assert_eq!(
        store.reserve_claimed(&request("third", 100, 60), "c"),
        ClaimedReserve::Duplicate
    );
}

#[test]
fn late_settle_restarts_the_retention() {
    let (store, clock) = manual_store();
    store.reserve(&request("slow", 100, 10));
    clock.advance(Duration::from_secs(15));
    assert_eq!(store.sweep_expired(), 1);
    clock.advance(Duration::from_secs(9));
    assert_eq!(
        store.settle(&settlement("slow", 90)).unwrap().status,
        LedgerStatus::Late
    );
    clock.advance(Duration::from_secs(9));
    store.sweep_expired();
    let retry = store.settle(&settlement("slow", 90)).unwrap();
    assert_eq!((retry.status, retry.applied), (LedgerStatus::Late, false));
    assert_eq!(store.shared.lock().retention.len(), 1);
}

#[test]
fn os_threads_never_reserve_past_the_cap() {
    let store = MemoryStore::new(Rules::default());
    let scope = Scope {
        period: Period::Total,
        ..key(1_000)
    };
    let reserved = AtomicUsize::new(0);
    std::thread::scope(|threads| {
        for t in 0..8 {
            let (store, scope, reserved) = (&store, &scope, &reserved);
            threads.spawn(move || {
                for i in 0..100 {
                    let req = ReserveRequest {
                        key: scope.clone(),
                        ..request(&format!("{t}-{i}"), 3, 60)
                    };
                    if store.reserve(&req).is_reserved() {
                        reserved.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(reserved.load(Ordering::Relaxed), 333);
    assert_eq!(store.scope_state(&scope).reserved, 999);
}

#[test]
fn extreme_amounts_never_panic() {
    let (store, _clock) = manual_store();
    // A cap past what any config allows takes an absurd reserve calmly.
    let beyond = ReserveRequest {
        key: key(u64::MAX),
        amount: u64::MAX,
        min_amount: u64::MAX,
        ttl: Duration::MAX,
        ..request("beyond", 0, 0)
    };
    assert!(store.reserve(&beyond).is_reserved());
    // At the largest cap a config allows, the most a call may ask for
    // holds the whole cap, and nothing more fits.
    let (store, _clock) = manual_store();
    let huge = ReserveRequest {
        key: key(MAX_USD_MICROS),
        amount: u64::MAX,
        min_amount: MAX_USD_MICROS,
        ttl: Duration::MAX,
        ..request("huge", 0, 0)
    };
    assert_eq!(store.reserve(&huge).held(), Some(MAX_USD_MICROS));
    let more = ReserveRequest {
        exec_id: "more".to_owned(),
        amount: 1,
        min_amount: 1,
        ..huge.clone()
    };
    match store.reserve(&more) {
        ReserveOutcome::Denied(denial) => assert_eq!(denial.remaining, 0),
        other => panic!("expected a denial, got {other:?}"),
    }
    assert!(matches!(
        store.settle(&settlement("huge", u64::MAX)),
        Err(StoreError::OutOfRange { exec_id }) if exec_id == "huge"
    ));
    assert_eq!(store.sweep_expired(), 0);
}

#[tokio::test]
async fn the_gateway_sweep_expires_without_a_reserve() {
    let (store, clock) = manual_store();
    store.reserve(&request("crashed", 100, 1));
    clock.advance(Duration::from_secs(2));
    let budget = BudgetStore::Memory(store.clone());
    assert_eq!(budget.sweep().await.unwrap(), 1);
    assert_eq!(store.open_reservations(), (0, 0));
    let state = store.scope_state(&key(1_000_000));
    assert_eq!((state.spent, state.reserved), (100, 0));
    let ledger = store.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, LedgerStatus::Expired);
    assert_eq!(budget.sweep().await.unwrap(), 0);
}
