//! The contract every budget store passes: the budget protocol of DESIGN.md
//! written once against [`BudgetStore`] and run against each backend
//! through a [`Fixture`] that controls the store's clock.
//!
//! After every case the books must balance: per scope and period,
//! `counter == Σ ledger actual + Σ open reservations`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use uuid::Uuid;

use super::memory::{Clock, ManualClock, Reconciliation};
use super::{
    BudgetStore, Denial, LedgerEntry, LedgerStatus, MemoryStore, Period, ReserveOutcome,
    ReserveRequest, Scope, ScopeKind, ScopeState, SettleOutcome, Settlement, StoreError,
};
use crate::money::UsdMicros;
use crate::usage::Usage;

/// The settle epsilon every fixture gives its store.
const EPSILON: UsdMicros = 100;

/// Long enough never to expire within a case, unless the case says so.
const TTL_SECS: u64 = 60;

/// A backend under test, with control over the store's time.
///
/// Cases use whole-second TTLs and advance by a few seconds, so a fixture on
/// a real clock can advance by sleeping; only the rollover case advances to
/// the next UTC midnight, which needs a store clock the fixture can shift.
/// A fixture's store holds only its own case's data: the ledger and the
/// reconciliation are compared as a whole.
trait Fixture {
    fn store(&self) -> BudgetStore;
    /// The store's clock.
    async fn now(&self) -> DateTime<Utc>;
    async fn advance(&self, by: Duration);
    async fn sweep_expired(&self) -> usize;
    async fn ledger(&self) -> Vec<LedgerEntry>;
    async fn open_reservations(&self) -> (usize, UsdMicros);
    async fn reconcile(&self) -> Vec<Reconciliation>;
}

// === The memory fixture ===

struct MemoryFixture {
    store: MemoryStore,
    clock: Arc<ManualClock>,
}

fn memory_fixture() -> MemoryFixture {
    let start = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    MemoryFixture {
        store: MemoryStore::with_clock(EPSILON, clock.clone()),
        clock,
    }
}

impl Fixture for MemoryFixture {
    fn store(&self) -> BudgetStore {
        BudgetStore::Memory(self.store.clone())
    }

    async fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    async fn sweep_expired(&self) -> usize {
        self.store.sweep_expired()
    }

    async fn ledger(&self) -> Vec<LedgerEntry> {
        self.store.ledger()
    }

    async fn open_reservations(&self) -> (usize, UsdMicros) {
        self.store.open_reservations()
    }

    async fn reconcile(&self) -> Vec<Reconciliation> {
        self.store.reconcile()
    }
}

/// Runs every case against one backend, each on a fresh fixture, and checks
/// the books after it.
macro_rules! contract_tests {
    ($backend:ident, $fixture:expr) => {
        contract_tests!(@cases $backend, $fixture;
            reserve_up_to_the_cap_exactly,
            one_micro_over_the_remaining_is_denied,
            settle_below_at_and_above_the_reservation,
            overrun_is_charged_past_the_cap,
            estimated_usage_is_marked_estimated,
            reserve_retry_charges_once,
            settle_retry_changes_nothing,
            denied_retry_returns_the_same_denial,
            ownership_mismatch_changes_nothing,
            unknown_reservation_is_rejected,
            expiry_releases_headroom_then_settle_is_late,
            settle_after_the_deadline_is_late,
            sweep_expires_only_due_reservations,
            rollover_gives_fresh_headroom_and_settles_into_the_old_period,
            tighter_of_key_and_org_denies,
            concurrent_reserves_never_exceed_the_cap,
            concurrent_reserve_and_settle_keep_the_books,
        );
    };
    (@cases $backend:ident, $fixture:expr; $($case:ident),* $(,)?) => {
        mod $backend {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = $fixture;
                    super::$case(&fixture).await;
                    assert_books_balance(&fixture).await;
                }
            )*
        }
    };
}

contract_tests!(memory, memory_fixture());

// === Helpers ===

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::now_v7().simple())
}

fn scope(kind: ScopeKind, cap: UsdMicros, period: Period) -> Scope {
    Scope {
        kind,
        id: unique(kind.as_str()),
        cap,
        period,
    }
}

fn request(key: &Scope, org: Option<&Scope>, amount: UsdMicros, ttl_secs: u64) -> ReserveRequest {
    ReserveRequest {
        exec_id: Uuid::now_v7().to_string(),
        key: key.clone(),
        org: org.cloned(),
        amount,
        ttl: Duration::from_secs(ttl_secs),
    }
}

fn settlement(req: &ReserveRequest, actual: UsdMicros) -> Settlement {
    Settlement {
        exec_id: req.exec_id.clone(),
        key: req.key.id.clone(),
        org: req.org.as_ref().map(|org| org.id.clone()),
        model: "gpt-4o-mini".to_owned(),
        usage: Usage {
            input: 1_000,
            cached_input: 0,
            cache_write: 0,
            output: 200,
        },
        actual,
        estimated: false,
    }
}

async fn reserve(store: &BudgetStore, req: &ReserveRequest) -> ReserveOutcome {
    store.reserve(req).await.unwrap()
}

async fn settle(store: &BudgetStore, req: &ReserveRequest, actual: UsdMicros) -> SettleOutcome {
    store.settle(&settlement(req, actual)).await.unwrap()
}

async fn state(store: &BudgetStore, scope: &Scope) -> ScopeState {
    store.scope_state(scope).await.unwrap()
}

/// `(spent, reserved)` in the scope's current period.
async fn counters(store: &BudgetStore, scope: &Scope) -> (UsdMicros, UsdMicros) {
    let state = state(store, scope).await;
    (state.spent, state.reserved)
}

fn applied(status: LedgerStatus, reserved: u64, actual: u64, key_remaining: u64) -> SettleOutcome {
    SettleOutcome {
        status,
        reserved,
        actual,
        applied: true,
        key_remaining,
    }
}

fn statuses(ledger: &[LedgerEntry]) -> Vec<(LedgerStatus, UsdMicros)> {
    ledger.iter().map(|e| (e.status, e.actual)).collect()
}

/// Checks `counter == Σ ledger + Σ open` for every scope and period, and
/// that the reconciliation accounts for the whole ledger and every open
/// reservation, scope by scope.
async fn assert_books_balance(fixture: &impl Fixture) {
    let rows = fixture.reconcile().await;
    for row in &rows {
        assert_eq!(row.drift(), 0, "books do not balance: {row:?}");
    }

    let mut from_rows: BTreeMap<(ScopeKind, String), UsdMicros> = BTreeMap::new();
    for row in &rows {
        *from_rows.entry((row.kind, row.id.clone())).or_default() += row.ledger;
    }
    let mut from_ledger: BTreeMap<(ScopeKind, String), UsdMicros> = BTreeMap::new();
    for entry in fixture.ledger().await {
        *from_ledger
            .entry((ScopeKind::Key, entry.key.clone()))
            .or_default() += entry.actual;
        if let Some(org) = entry.org {
            *from_ledger.entry((ScopeKind::Org, org)).or_default() += entry.actual;
        }
    }
    from_rows.retain(|_, sum| *sum > 0);
    from_ledger.retain(|_, sum| *sum > 0);
    assert_eq!(from_rows, from_ledger, "ledger sums per scope");

    // Every reservation holds exactly one key's headroom.
    let (_, open) = fixture.open_reservations().await;
    let open_in_rows: UsdMicros = rows
        .iter()
        .filter(|row| row.kind == ScopeKind::Key)
        .map(|row| row.open)
        .sum();
    assert_eq!(open_in_rows, open, "open reservations");
}

// === Cases ===

async fn reserve_up_to_the_cap_exactly(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);

    assert_eq!(
        reserve(&store, &request(&key, None, 600, TTL_SECS)).await,
        ReserveOutcome::Reserved
    );
    // Exactly what remains still fits.
    assert_eq!(
        reserve(&store, &request(&key, None, 400, TTL_SECS)).await,
        ReserveOutcome::Reserved
    );

    let now = f.now().await;
    let denied = reserve(&store, &request(&key, None, 1, TTL_SECS)).await;
    assert_eq!(
        denied,
        ReserveOutcome::Denied(Denial {
            kind: ScopeKind::Key,
            id: key.id.clone(),
            period: Period::Day,
            cap: 1_000,
            remaining: 0,
            resets_at: Period::Day.resets_at(now),
        })
    );
    let state = state(&store, &key).await;
    assert_eq!((state.spent, state.reserved), (0, 1_000));
    assert_eq!(state.period_id, Period::Day.id_at(now));
    assert_eq!(state.resets_at, Period::Day.resets_at(now));
}

async fn one_micro_over_the_remaining_is_denied(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Total);
    assert_eq!(
        reserve(&store, &request(&key, None, 300, TTL_SECS)).await,
        ReserveOutcome::Reserved
    );

    match reserve(&store, &request(&key, None, 701, TTL_SECS)).await {
        ReserveOutcome::Denied(denial) => {
            assert_eq!(denial.remaining, 700);
            assert_eq!(denial.resets_at, None, "total never resets");
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(
        counters(&store, &key).await,
        (0, 300),
        "a denial charges nothing"
    );
    assert_eq!(
        reserve(&store, &request(&key, None, 700, TTL_SECS)).await,
        ReserveOutcome::Reserved
    );
}

async fn settle_below_at_and_above_the_reservation(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let mut remaining = 10_000;
    for (actual, status) in [
        (400, LedgerStatus::Ok),
        (1_000, LedgerStatus::Ok),
        (1_000 + EPSILON, LedgerStatus::Ok),
        (1_000 + EPSILON + 1, LedgerStatus::Overrun),
    ] {
        let req = request(&key, None, 1_000, TTL_SECS);
        assert_eq!(reserve(&store, &req).await, ReserveOutcome::Reserved);
        remaining -= actual;
        assert_eq!(
            settle(&store, &req, actual).await,
            applied(status, 1_000, actual, remaining),
            "actual {actual}"
        );
    }
    assert_eq!(counters(&store, &key).await, (10_000 - remaining, 0));
    assert_eq!(
        statuses(&f.ledger().await),
        [
            (LedgerStatus::Ok, 400),
            (LedgerStatus::Ok, 1_000),
            (LedgerStatus::Ok, 1_000 + EPSILON),
            (LedgerStatus::Overrun, 1_000 + EPSILON + 1),
        ]
    );
}

async fn overrun_is_charged_past_the_cap(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, None, 1_000, TTL_SECS);
    assert_eq!(reserve(&store, &req).await, ReserveOutcome::Reserved);
    assert_eq!(
        settle(&store, &req, 1_500).await,
        applied(LedgerStatus::Overrun, 1_000, 1_500, 0)
    );
    // The money was spent: the counter goes past the cap and stays there.
    assert_eq!(counters(&store, &key).await, (1_500, 0));
    match reserve(&store, &request(&key, None, 1, TTL_SECS)).await {
        ReserveOutcome::Denied(denial) => assert_eq!(denial.remaining, 0),
        other => panic!("expected a denial, got {other:?}"),
    }
}

async fn estimated_usage_is_marked_estimated(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let req = request(&key, None, 1_000, TTL_SECS);
    assert_eq!(reserve(&store, &req).await, ReserveOutcome::Reserved);
    let estimated = Settlement {
        estimated: true,
        ..settlement(&req, 1_200)
    };
    let outcome = store.settle(&estimated).await.unwrap();
    assert_eq!(
        outcome,
        applied(LedgerStatus::Estimated, 1_000, 1_200, 8_800)
    );
    assert_eq!(counters(&store, &key).await, (1_200, 0));
}

async fn reserve_retry_charges_once(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, None, 700, TTL_SECS);
    assert_eq!(reserve(&store, &req).await, ReserveOutcome::Reserved);
    assert_eq!(reserve(&store, &req).await, ReserveOutcome::Reserved);
    assert_eq!(counters(&store, &key).await, (0, 700));

    settle(&store, &req, 500).await;
    // A retry that arrives after the settle still gets the first answer.
    assert_eq!(reserve(&store, &req).await, ReserveOutcome::Reserved);
    assert_eq!(counters(&store, &key).await, (500, 0));
    assert_eq!(f.open_reservations().await, (0, 0));
}

async fn settle_retry_changes_nothing(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let req = request(&key, None, 1_000, TTL_SECS);
    reserve(&store, &req).await;
    let first = settle(&store, &req, 600).await;
    assert_eq!(first, applied(LedgerStatus::Ok, 1_000, 600, 9_400));

    let retried = SettleOutcome {
        applied: false,
        ..first.clone()
    };
    assert_eq!(settle(&store, &req, 600).await, retried);
    // A retry carrying another amount still returns the first result.
    assert_eq!(settle(&store, &req, 900).await, retried);
    assert_eq!(counters(&store, &key).await, (600, 0));
    assert_eq!(f.ledger().await.len(), 1);
}

async fn denied_retry_returns_the_same_denial(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let first = request(&key, None, 800, TTL_SECS);
    let second = request(&key, None, 300, TTL_SECS);
    assert_eq!(reserve(&store, &first).await, ReserveOutcome::Reserved);
    let denial = reserve(&store, &second).await;
    assert!(matches!(&denial, ReserveOutcome::Denied(d) if d.remaining == 200));

    // Headroom comes back, but the retry is the same request: same answer.
    settle(&store, &first, 0).await;
    assert_eq!(reserve(&store, &second).await, denial);
    assert_eq!(counters(&store, &key).await, (0, 0));
    assert!(matches!(
        store.settle(&settlement(&second, 300)).await,
        Err(StoreError::UnknownReservation(_))
    ));
}

async fn ownership_mismatch_changes_nothing(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 10_000, Period::Month);
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, Some(&org), 500, TTL_SECS);
    reserve(&store, &req).await;

    let genuine = settlement(&req, 400);
    let forgeries = [
        Settlement {
            key: unique("key"),
            ..genuine.clone()
        },
        Settlement {
            org: Some(unique("org")),
            ..genuine.clone()
        },
        Settlement {
            org: None,
            ..genuine.clone()
        },
    ];
    for forged in &forgeries {
        let result = store.settle(forged).await;
        assert!(
            matches!(&result, Err(StoreError::OwnershipMismatch { exec_id }) if *exec_id == req.exec_id),
            "{forged:?}: {result:?}"
        );
    }
    assert_eq!(counters(&store, &key).await, (0, 500));
    assert_eq!(counters(&store, &org).await, (0, 500));
    assert!(f.ledger().await.is_empty());

    // A key without an org cannot be settled as if it had one.
    let solo = request(&key, None, 100, TTL_SECS);
    reserve(&store, &solo).await;
    let with_org = Settlement {
        org: Some(org.id.clone()),
        ..settlement(&solo, 100)
    };
    assert!(matches!(
        store.settle(&with_org).await,
        Err(StoreError::OwnershipMismatch { .. })
    ));

    assert_eq!(
        store.settle(&genuine).await.unwrap(),
        applied(LedgerStatus::Ok, 500, 400, 500)
    );
    // A forged retry of a settled reservation is still rejected.
    assert!(matches!(
        store.settle(&forgeries[0]).await,
        Err(StoreError::OwnershipMismatch { .. })
    ));
    assert_eq!(counters(&store, &key).await, (400, 100));
}

async fn unknown_reservation_is_rejected(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let never_reserved = request(&key, None, 100, TTL_SECS);
    let result = store.settle(&settlement(&never_reserved, 100)).await;
    assert!(
        matches!(&result, Err(StoreError::UnknownReservation(id)) if *id == never_reserved.exec_id),
        "{result:?}"
    );
    assert_eq!(counters(&store, &key).await, (0, 0));
}

async fn expiry_releases_headroom_then_settle_is_late(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let crashed = request(&key, None, 1_000, 2);
    assert_eq!(reserve(&store, &crashed).await, ReserveOutcome::Reserved);
    f.advance(Duration::from_secs(3)).await;

    // The next reserve expires the crashed call's reservation first.
    let next = request(&key, None, 1_000, TTL_SECS);
    assert_eq!(reserve(&store, &next).await, ReserveOutcome::Reserved);
    let ledger = f.ledger().await;
    assert_eq!(ledger.len(), 1);
    let expired = &ledger[0];
    assert_eq!(expired.exec_id, crashed.exec_id);
    assert_eq!(expired.key, key.id);
    assert_eq!(expired.status, LedgerStatus::Expired);
    assert_eq!((expired.reserved, expired.actual), (1_000, 0));
    assert_eq!(expired.usage, Usage::default());
    assert_eq!(expired.model, "");
    assert_eq!(counters(&store, &key).await, (0, 1_000));

    // The call did cost money after all: charged in full, as late.
    let late = settle(&store, &crashed, 700).await;
    assert_eq!(late, applied(LedgerStatus::Late, 1_000, 700, 0));
    assert_eq!(
        settle(&store, &crashed, 700).await,
        SettleOutcome {
            applied: false,
            ..late
        }
    );
    assert_eq!(counters(&store, &key).await, (700, 1_000));
    assert_eq!(
        statuses(&f.ledger().await),
        [(LedgerStatus::Expired, 0), (LedgerStatus::Late, 700)]
    );
}

async fn settle_after_the_deadline_is_late(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, None, 400, 2);
    reserve(&store, &req).await;
    f.advance(Duration::from_secs(3)).await;

    // No sweep ran: the settle itself finds the reservation expired.
    assert_eq!(
        settle(&store, &req, 400).await,
        applied(LedgerStatus::Late, 400, 400, 600)
    );
    assert_eq!(counters(&store, &key).await, (400, 0));
    assert_eq!(
        statuses(&f.ledger().await),
        [(LedgerStatus::Expired, 0), (LedgerStatus::Late, 400)]
    );
}

async fn sweep_expires_only_due_reservations(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    for _ in 0..3 {
        reserve(&store, &request(&key, None, 100, 2)).await;
    }
    let lasting = request(&key, None, 100, TTL_SECS);
    reserve(&store, &lasting).await;
    assert_eq!(f.open_reservations().await, (4, 400));

    f.advance(Duration::from_secs(3)).await;
    assert_eq!(f.sweep_expired().await, 3);
    assert_eq!(f.sweep_expired().await, 0);
    assert_eq!(f.open_reservations().await, (1, 100));
    assert_eq!(counters(&store, &key).await, (0, 100));
    let ledger = f.ledger().await;
    assert_eq!(ledger.len(), 3);
    assert!(ledger.iter().all(|e| e.status == LedgerStatus::Expired));
    assert_eq!(settle(&store, &lasting, 100).await.status, LedgerStatus::Ok);
}

async fn rollover_gives_fresh_headroom_and_settles_into_the_old_period(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let before = f.now().await;
    let midnight = Period::Day.resets_at(before).unwrap();
    let to_midnight = u64::try_from((midnight - before).num_seconds()).unwrap() + 1;

    let old = request(&key, None, 800, to_midnight + 3_600);
    assert_eq!(reserve(&store, &old).await, ReserveOutcome::Reserved);
    f.advance(Duration::from_secs(to_midnight)).await;

    let today = state(&store, &key).await;
    assert_eq!(today.period_id, Period::Day.id_at(midnight));
    assert_ne!(today.period_id, Period::Day.id_at(before));
    assert_eq!((today.spent, today.reserved), (0, 0));
    assert_eq!(today.resets_at, Some(midnight + TimeDelta::days(1)));
    assert_eq!(
        reserve(&store, &request(&key, None, 1_000, TTL_SECS)).await,
        ReserveOutcome::Reserved
    );

    // Yesterday's reservation settles into yesterday's counter.
    assert_eq!(
        settle(&store, &old, 500).await,
        applied(LedgerStatus::Ok, 800, 500, 500)
    );
    assert_eq!(counters(&store, &key).await, (0, 1_000));
    let yesterday = f
        .reconcile()
        .await
        .into_iter()
        .find(|row| row.id == key.id && row.period_id == Period::Day.id_at(before))
        .unwrap();
    assert_eq!(
        (yesterday.counter, yesterday.ledger, yesterday.open),
        (500, 500, 0)
    );
}

async fn tighter_of_key_and_org_denies(f: &impl Fixture) {
    let store = f.store();
    let now = f.now().await;
    let org = scope(ScopeKind::Org, 1_500, Period::Month);
    let alice = scope(ScopeKind::Key, 1_000, Period::Day);
    let bob = scope(ScopeKind::Key, 1_000, Period::Day);

    let first = request(&alice, Some(&org), 900, TTL_SECS);
    assert_eq!(reserve(&store, &first).await, ReserveOutcome::Reserved);

    // Bob's own cap allows 700; the org's remaining 600 does not.
    assert_eq!(
        reserve(&store, &request(&bob, Some(&org), 700, TTL_SECS)).await,
        ReserveOutcome::Denied(Denial {
            kind: ScopeKind::Org,
            id: org.id.clone(),
            period: Period::Month,
            cap: 1_500,
            remaining: 600,
            resets_at: Period::Month.resets_at(now),
        })
    );
    assert_eq!(counters(&store, &bob).await, (0, 0));

    // Both would deny: the key is named, and neither is charged.
    match reserve(&store, &request(&alice, Some(&org), 700, TTL_SECS)).await {
        ReserveOutcome::Denied(denial) => {
            assert_eq!(
                (denial.kind, &denial.id, denial.remaining),
                (ScopeKind::Key, &alice.id, 100)
            );
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(counters(&store, &alice).await, (0, 900));
    assert_eq!(counters(&store, &org).await, (0, 900));

    let last = request(&bob, Some(&org), 600, TTL_SECS);
    assert_eq!(reserve(&store, &last).await, ReserveOutcome::Reserved);
    assert_eq!(counters(&store, &org).await, (0, 1_500));

    settle(&store, &first, 850).await;
    settle(&store, &last, 600).await;
    assert_eq!(counters(&store, &org).await, (1_450, 0));
    assert_eq!(counters(&store, &alice).await, (850, 0));
    assert_eq!(counters(&store, &bob).await, (600, 0));
}

async fn concurrent_reserves_never_exceed_the_cap(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 10_000, Period::Day);
    let key = scope(ScopeKind::Key, 100, Period::Day);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            let req = request(&key, Some(&org), 7, TTL_SECS);
            tokio::spawn(async move { store.reserve(&req).await.unwrap() })
        })
        .collect();
    let mut reserved = 0;
    for task in tasks {
        if task.await.unwrap() == ReserveOutcome::Reserved {
            reserved += 1;
        }
    }
    assert_eq!(reserved, 100 / 7);
    assert_eq!(counters(&store, &key).await, (0, 98));
    assert_eq!(counters(&store, &org).await, (0, 98));
}

async fn concurrent_reserve_and_settle_keep_the_books(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 250, Period::Day);
    let keys: Vec<Scope> = (0..3)
        .map(|_| scope(ScopeKind::Key, 100, Period::Day))
        .collect();
    let tasks: Vec<_> = (0..60u64)
        .map(|i| {
            let store = store.clone();
            let req = request(&keys[(i % 3) as usize], Some(&org), 10, TTL_SECS);
            tokio::spawn(async move {
                if store.reserve(&req).await.unwrap() == ReserveOutcome::Reserved {
                    // Never above the reservation, so headroom only grows.
                    let outcome = store.settle(&settlement(&req, i % 11)).await.unwrap();
                    assert!(outcome.applied);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let (org_spent, org_reserved) = counters(&store, &org).await;
    assert_eq!(org_reserved, 0);
    assert!(org_spent <= 250, "org spent {org_spent}");
    let mut keys_spent = 0;
    for key in &keys {
        let (spent, reserved) = counters(&store, key).await;
        assert!(spent <= 100 && reserved == 0, "{key:?}: {spent} {reserved}");
        keys_spent += spent;
    }
    assert_eq!(keys_spent, org_spent);
    assert_eq!(f.open_reservations().await, (0, 0));
}
