//! The contract every budget store passes: the budget protocol of docs/design.md
//! written once against [`BudgetStore`] and run against each backend
//! through a [`Fixture`] that controls the store's clock.
//!
//! After every case the books must balance: per scope and period,
//! `counter == folded + Σ ledger actual + Σ open reservations` (adjustment
//! entries included).
//!
//! The admin API's keys and orgs (`records`) are part of the contract too:
//! every store must write, read and audit them as `RecordBook` does, and
//! keep the queue of spending alerts (`alerts`) alike.
//!
//! Backends: the memory store, the SQLite store on a file of its own,
//! a `redis-server` and a 3-primary Redis Cluster this test process starts
//! on free ports (`redis::testing`).
//! Each runs every case on a store that charges an expired reservation its
//! amount (the default), and the cases about expiry again on one that
//! releases it (`on_expiry = "release"`).

mod aggregates;
mod alerts;
mod caps;
mod cases;
mod claims;
mod control;
mod customers;
mod expiry;
mod records;
mod redis_fixture;
mod runs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

use super::memory::testing::ManualClock;
use super::{
    BudgetStore, ClaimedReserve, Denial, LedgerEntry, LedgerStatus, MemoryStore, Meter, OnExpiry,
    Period, Reconciliation, ReserveOutcome, ReserveRequest, Rules, Scope, ScopeKind, ScopeState,
    SettleOutcome, Settlement, SqliteStore, StoreError, DEFAULT_CLOSED_RECORD, DEFAULT_RUN_TTL,
};
use crate::budget::Books;
use crate::budget::Reports;
use crate::budget::Upkeep;
use crate::money::{delta, UsdMicros, UsdMicrosDelta, MAX_USD_MICROS};
use crate::usage::Usage;
use aggregates::*;
use alerts::*;
use caps::*;
use cases::*;
use claims::*;
use control::*;
use customers::*;
use expiry::*;
use records::*;
use redis_fixture::{cluster_fixture, redis_fixture};
use runs::*;

/// The settle epsilon every fixture gives its store.
const EPSILON: UsdMicros = 100;

/// The rules every store in the suite keeps.
fn rules(on_expiry: OnExpiry) -> Rules {
    Rules {
        settle_epsilon: EPSILON,
        on_expiry,
        ..Rules::default()
    }
}

/// Long enough never to expire within a case, unless the case says so.
const TTL_SECS: u64 = 60;

/// A backend under test, with control over the store's time.
///
/// Cases use whole-second TTLs and advance by a few seconds, so a fixture on
/// a real clock can advance by sleeping; only the rollover and retention
/// cases advance by hours or days, which needs a store clock the fixture can
/// shift.
/// A fixture's store holds only its own case's data: the ledger and the
/// reconciliation are compared as a whole.
trait Fixture {
    fn store(&self) -> BudgetStore;
    /// What the store charges a reservation never settled by its deadline.
    fn on_expiry(&self) -> OnExpiry;
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
    on_expiry: OnExpiry,
}

fn memory_fixture(on_expiry: OnExpiry) -> MemoryFixture {
    let start = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    MemoryFixture {
        store: MemoryStore::with_clock(rules(on_expiry), clock.clone()),
        clock,
        on_expiry,
    }
}

impl Fixture for MemoryFixture {
    fn store(&self) -> BudgetStore {
        BudgetStore::Memory(self.store.clone())
    }

    fn on_expiry(&self) -> OnExpiry {
        self.on_expiry
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

// === The SQLite fixture ===

struct SqliteFixture {
    store: SqliteStore,
    clock: Arc<ManualClock>,
    on_expiry: OnExpiry,
    /// Holds the store's file; removed when the case ends.
    _dir: tempfile::TempDir,
}

fn sqlite_fixture(on_expiry: OnExpiry) -> SqliteFixture {
    let start = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.db");
    SqliteFixture {
        store: SqliteStore::with_clock(&path, rules(on_expiry), clock.clone()),
        clock,
        on_expiry,
        _dir: dir,
    }
}

impl Fixture for SqliteFixture {
    fn store(&self) -> BudgetStore {
        BudgetStore::Sqlite(self.store.clone())
    }

    fn on_expiry(&self) -> OnExpiry {
        self.on_expiry
    }

    async fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    async fn sweep_expired(&self) -> usize {
        self.store.sweep().await.unwrap()
    }

    async fn ledger(&self) -> Vec<LedgerEntry> {
        self.store.ledger().await
    }

    async fn open_reservations(&self) -> (usize, UsdMicros) {
        self.store.open_reservations().await.unwrap()
    }

    async fn reconcile(&self) -> Vec<Reconciliation> {
        self.store.reconcile().await.unwrap()
    }
}

/// Runs every case against one backend, each on a fresh fixture, and checks
/// the books after it: every case on a store that charges expired
/// reservations, and the cases about expiry again on one that releases
/// them (in `release`). `$fixture` builds the fixture for `$on_expiry`.
macro_rules! contract_tests {
    ($backend:ident, |$on_expiry:ident| $fixture:expr) => {
        mod $backend {
            use super::*;
            contract_tests!(@cases OnExpiry::Charge, |$on_expiry| $fixture;
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
            expiry_charges_the_hold_then_a_late_settle_corrects_it,
            a_late_settle_gives_back_only_what_a_refund_left,
            settle_after_the_deadline_is_late,
            sweep_expires_only_due_reservations,
            expired_record_outlives_every_settle_retry,
            rollover_gives_fresh_headroom_and_settles_into_the_old_period,
            tighter_of_key_and_org_denies,
            concurrent_reserves_never_exceed_the_cap,
            concurrent_reserve_and_settle_keep_the_books,
            old_ledger_entries_fold_into_their_counters,
            only_entries_past_the_retention_fold,
            settles_past_2_to_the_53_are_refused_alike,
            closed_records_are_kept_for_the_retry_horizon_only,
            claimed_request_in_flight_refuses_its_duplicate,
            claimed_reserve_retry_gets_the_first_answer,
            settled_claim_is_reserved_and_charged_again,
            expired_claim_is_reserved_again,
            denied_claim_is_evaluated_afresh,
            a_new_record_is_revision_1_and_its_id_stays_taken,
            a_stale_write_conflicts_and_changes_nothing,
            a_key_and_an_org_of_one_id_are_separate_records,
            records_lists_every_document_at_its_version,
            audit_pages_newest_first,
            concurrent_writes_of_one_revision_apply_once,
            writes_match_the_reference_book,
            a_refund_moves_key_and_org_down_and_balances,
            a_credit_is_charged_even_past_the_cap,
            a_refund_larger_than_spent_is_refused_naming_the_scope,
            adjust_retry_changes_nothing_and_returns_the_first_outcome,
            adjustments_past_2_to_the_53_are_refused_alike,
            adjustments_are_remembered_for_the_retry_horizon_only,
            open_holds_lists_open_reservations_oldest_first,
            a_reservation_without_a_model_expires_with_none,
            spend_rows_add_up_every_ledger_entry,
            spend_rows_past_their_retention_are_swept,
            an_adjustment_is_spend_without_a_call,
            a_run_is_capped_inside_its_key,
            a_run_without_a_cap_is_tracked_not_capped,
            the_first_call_fixes_the_run_cap,
            a_range_reserve_holds_the_most_that_fits,
            concurrent_reserves_never_exceed_the_run_cap,
            an_idle_run_is_forgotten_after_its_ttl,
            a_late_settle_after_its_run_is_forgotten_still_gives_back,
            spend_rows_carry_the_run,
            an_alert_is_queued_once_and_delivered_once,
            a_leased_alert_is_due_again_when_its_lease_runs_out,
            concurrent_queues_of_one_alert_queue_it_once,
            a_model_group_caps_its_models_inside_the_key,
            a_range_reserve_holds_what_the_tightest_group_allows,
            an_rpm_limit_admits_exactly_its_requests_per_minute,
            a_tpm_limit_holds_the_bound_and_settles_the_usage,
            money_is_named_before_a_rate_limit,
            an_expiry_charges_every_cap_it_held,
            a_retried_reserve_with_caps_holds_once,
            concurrent_reserves_never_pass_a_rate_limit,
            a_customer_is_capped_inside_its_key,
            customers_are_listed_by_id_a_page_at_a_time,
            an_idle_customer_is_forgotten_with_its_counters,
            );
            mod release {
                use super::*;
                contract_tests!(@cases OnExpiry::Release, |$on_expiry| $fixture;
                    expiry_releases_the_hold_then_a_late_settle_charges_in_full,
                    settle_after_the_deadline_is_late_under_release,
                    sweep_expires_only_due_reservations,
                    expired_record_outlives_every_settle_retry,
                    expired_claim_is_reserved_again,
                    spend_rows_add_up_every_ledger_entry,
                    an_expiry_charges_every_cap_it_held,
                );
            }
        }
    };
    (@cases $policy:expr, |$on_expiry:ident| $fixture:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let $on_expiry = $policy;
                let fixture = $fixture;
                assert_eq!(fixture.on_expiry(), $policy);
                crate::budget::contract::$case(&fixture).await;
                assert_books_balance(&fixture).await;
            }
        )*
    };
}

contract_tests!(memory, |on_expiry| memory_fixture(on_expiry));
contract_tests!(sqlite, |on_expiry| sqlite_fixture(on_expiry));
contract_tests!(redis, |on_expiry| redis_fixture(on_expiry).await);
contract_tests!(redis_cluster, |on_expiry| cluster_fixture(on_expiry).await);

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
        model: "gpt-4o-mini".to_owned(),
        amount,
        min_amount: amount,
        run: None,
        caps: Vec::new(),
        tokens: 0,
        customer: None,
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
            ..Usage::default()
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

/// What expiring a reservation of `amount` charges on the fixture's store.
fn expiry_charge(f: &impl Fixture, amount: UsdMicros) -> UsdMicros {
    match f.on_expiry() {
        OnExpiry::Charge => amount,
        OnExpiry::Release => 0,
    }
}

fn statuses(ledger: &[LedgerEntry]) -> Vec<(LedgerStatus, UsdMicrosDelta)> {
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

    let mut from_rows: BTreeMap<(ScopeKind, String), UsdMicrosDelta> = BTreeMap::new();
    for row in &rows {
        *from_rows.entry((row.kind, row.id.clone())).or_default() += row.ledger;
    }
    let mut from_ledger: BTreeMap<(ScopeKind, String), UsdMicrosDelta> = BTreeMap::new();
    for entry in fixture.ledger().await {
        *from_ledger
            .entry((ScopeKind::Key, entry.key.clone()))
            .or_default() += entry.actual;
        if let Some(org) = entry.org {
            *from_ledger.entry((ScopeKind::Org, org)).or_default() += entry.actual;
        }
    }
    from_rows.retain(|_, sum| *sum != 0);
    from_ledger.retain(|_, sum| *sum != 0);
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
