//! The store interface, grouped by concern, and [`BudgetStore`], the one
//! the gateway holds: an enum with a variant per backend, so the request
//! path calls plain methods and a backend is an addition, not a rewrite.
//!
//! - [`Books`]: the money path: reserve, settle, adjust, and the state of a
//!   scope, a run and the open holds.
//! - [`Records`]: the admin API's keys and orgs, and their audit trail.
//! - [`AlertQueue`]: spending alerts queued for delivery.
//! - [`Reports`]: spend aggregates and the books as `reconcile` reads them.
//! - [`Upkeep`]: reachability, the periodic sweep, and what a store must
//!   be told to find every key's books.
//!
//! Every store implements all five with the same signatures, and passes the
//! same contract suite (`budget::contract`). A Redis store reads under
//! every hash tag it knows (those of the keys it was told of and the ones
//! it has reserved under); the other stores have no tags.

use std::future::Future;
use std::time::Duration;

use super::alerts::{AlertEvent, QueuedAlert};
use super::records::{AuditEntry, RecordSet, RecordWrite, WriteOutcome};
use super::{
    AdjustOutcome, Adjustment, ClaimedReserve, CustomerSeen, MemoryStore, OpenHold, Reconciliation,
    RedisStore, ReserveOutcome, ReserveRequest, RunState, Scope, ScopeState, SettleOutcome,
    Settlement, SpendQuery, SpendRow, SqliteStore, StoreError,
};
use crate::money::UsdMicros;

/// The money path (see `budget::books` for the rules).
pub trait Books {
    /// Reserves the most of `[request.min_amount, request.amount]` that
    /// every scope allows, or says which scope denies it; a retry with the
    /// same exec id gets the first answer.
    fn reserve(
        &self,
        request: &ReserveRequest,
    ) -> impl Future<Output = Result<ReserveOutcome, StoreError>> + Send;

    /// Reserves like [`Books::reserve`], unless another reservation under
    /// `claim` is open: then the call is a duplicate of one still in
    /// flight, and nothing is charged. A reservation made here holds the
    /// claim until it is settled or expired.
    fn reserve_claimed(
        &self,
        request: &ReserveRequest,
        claim: &str,
    ) -> impl Future<Output = Result<ClaimedReserve, StoreError>> + Send;

    /// Settles a reservation with the actual cost, exactly once.
    fn settle(
        &self,
        settlement: &Settlement,
    ) -> impl Future<Output = Result<SettleOutcome, StoreError>> + Send;

    /// Settles a reservation that may never have been made (its reserve
    /// failed or was abandoned): like [`Books::settle`], but an unknown
    /// exec id may be reported as such without further lookups.
    fn settle_if_reserved(
        &self,
        settlement: &Settlement,
    ) -> impl Future<Output = Result<SettleOutcome, StoreError>> + Send {
        self.settle(settlement)
    }

    /// Applies an operator's refund or credit to the key and its org in
    /// their current periods, with an `adjustment` ledger entry, all or
    /// nothing; a retry with the same exec id changes nothing and gets the
    /// first outcome.
    fn adjust(
        &self,
        adjustment: &Adjustment,
    ) -> impl Future<Output = Result<AdjustOutcome, StoreError>> + Send;

    /// The scope's counters for its current period.
    fn scope_state(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<ScopeState, StoreError>> + Send;

    /// A run's cap and counters (`id` is `<key>/<run>`), `None` when the
    /// run is not remembered (never called, or forgotten).
    fn run_state(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<RunState>, StoreError>> + Send;

    /// Up to `limit` of `key`'s customers the store remembers, by id,
    /// those after `after` (a customer id) when given.
    fn customers(
        &self,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<CustomerSeen>, StoreError>> + Send;

    /// Up to `limit` reservations open now, oldest first (by when they
    /// were made, then exec id).
    fn open_holds(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<OpenHold>, StoreError>> + Send;
}

/// The admin API's keys and orgs (see `budget::records`).
pub trait Records {
    /// The version of the documents: one more on every change, so a
    /// gateway polls it to learn of changes made elsewhere.
    fn records_version(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Every key and org document, and the version they were read at.
    fn records(&self) -> impl Future<Output = Result<RecordSet, StoreError>> + Send;

    /// Writes one document if it is still as the writer saw it, with its
    /// audit entry, in one atomic step.
    fn write_record(
        &self,
        write: &RecordWrite,
    ) -> impl Future<Output = Result<WriteOutcome, StoreError>> + Send;

    /// Up to `limit` audit entries, newest first, older than `before`.
    fn audit(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send;
}

/// Spending alerts waiting for delivery (see `budget::alerts`).
pub trait AlertQueue {
    /// Queues an alert unless its id was ever queued; returns whether this
    /// call queued it.
    fn queue_alert(
        &self,
        event: &AlertEvent,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Up to `limit` alerts due for delivery now, each leased for `lease`:
    /// not handed out again before then, unless marked failed.
    fn due_alerts(
        &self,
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<QueuedAlert>, StoreError>> + Send;

    /// The webhook took the alert: it is never sent again.
    fn alert_delivered(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A delivery failed: the alert is due again `retry_after` from now.
    fn alert_failed(
        &self,
        id: &str,
        retry_after: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// What reports and `tollgate reconcile` read.
pub trait Reports {
    /// The spend aggregate rows `query` wants, sorted by day, key and model.
    fn spend(
        &self,
        query: &SpendQuery,
    ) -> impl Future<Output = Result<Vec<SpendRow>, StoreError>> + Send;

    /// How many reservations are open, and the sum of their amounts.
    fn open_reservations(
        &self,
    ) -> impl Future<Output = Result<(usize, UsdMicros), StoreError>> + Send;

    /// Every scope and period with its counter beside its folded, ledger
    /// and open sums, sorted by scope and period.
    fn reconcile(&self) -> impl Future<Output = Result<Vec<Reconciliation>, StoreError>> + Send;
}

/// Keeping a store in order.
pub trait Upkeep {
    /// Whether the store answers (for `/readyz`).
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Returns once every change answered before it is in the store's
    /// file: on SQLite, the journal posted (the other stores have nothing
    /// in between).
    fn flush(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::ready(Ok(()))
    }

    /// Expires due reservations, forgets old closed records, idle runs and
    /// applied adjustments, folds old ledger entries and drops spend
    /// aggregates past their retention; returns how many reservations
    /// expired. A Redis store visits a bounded share of its tags per call,
    /// in turn.
    fn sweep(&self) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Tells the store of a key (and its org), so its books are found and
    /// swept before its first reserve (Redis: the hash tag they live
    /// under; the other stores keep every key's books in one place).
    fn track_key(&self, _key: &str, _org: Option<&str>) {}
}

/// Which backend holds the books.
#[derive(Clone)]
pub enum BudgetStore {
    Memory(MemoryStore),
    Sqlite(SqliteStore),
    Redis(RedisStore),
}

impl BudgetStore {
    pub fn backend_name(&self) -> &'static str {
        match self {
            BudgetStore::Memory(_) => "memory",
            BudgetStore::Sqlite(_) => "sqlite",
            BudgetStore::Redis(_) => "redis",
        }
    }
}

/// Calls one method of the interface on whichever store this is.
macro_rules! dispatch {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            BudgetStore::Memory($store) => $call.await,
            BudgetStore::Sqlite($store) => $call.await,
            BudgetStore::Redis($store) => $call.await,
        }
    };
}

impl Books for BudgetStore {
    async fn reserve(&self, request: &ReserveRequest) -> Result<ReserveOutcome, StoreError> {
        dispatch!(self, s => Books::reserve(s, request))
    }

    async fn reserve_claimed(
        &self,
        request: &ReserveRequest,
        claim: &str,
    ) -> Result<ClaimedReserve, StoreError> {
        dispatch!(self, s => Books::reserve_claimed(s, request, claim))
    }

    async fn settle(&self, settlement: &Settlement) -> Result<SettleOutcome, StoreError> {
        dispatch!(self, s => Books::settle(s, settlement))
    }

    async fn settle_if_reserved(
        &self,
        settlement: &Settlement,
    ) -> Result<SettleOutcome, StoreError> {
        dispatch!(self, s => Books::settle_if_reserved(s, settlement))
    }

    async fn adjust(&self, adjustment: &Adjustment) -> Result<AdjustOutcome, StoreError> {
        dispatch!(self, s => Books::adjust(s, adjustment))
    }

    async fn scope_state(&self, scope: &Scope) -> Result<ScopeState, StoreError> {
        dispatch!(self, s => Books::scope_state(s, scope))
    }

    async fn run_state(&self, id: &str) -> Result<Option<RunState>, StoreError> {
        dispatch!(self, s => Books::run_state(s, id))
    }

    async fn customers(
        &self,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<CustomerSeen>, StoreError> {
        dispatch!(self, s => Books::customers(s, key, after, limit))
    }

    async fn open_holds(&self, limit: usize) -> Result<Vec<OpenHold>, StoreError> {
        dispatch!(self, s => Books::open_holds(s, limit))
    }
}

impl Records for BudgetStore {
    async fn records_version(&self) -> Result<u64, StoreError> {
        dispatch!(self, s => Records::records_version(s))
    }

    async fn records(&self) -> Result<RecordSet, StoreError> {
        dispatch!(self, s => Records::records(s))
    }

    async fn write_record(&self, write: &RecordWrite) -> Result<WriteOutcome, StoreError> {
        dispatch!(self, s => Records::write_record(s, write))
    }

    async fn audit(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        dispatch!(self, s => Records::audit(s, before, limit))
    }
}

impl AlertQueue for BudgetStore {
    async fn queue_alert(&self, event: &AlertEvent) -> Result<bool, StoreError> {
        dispatch!(self, s => AlertQueue::queue_alert(s, event))
    }

    async fn due_alerts(
        &self,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<QueuedAlert>, StoreError> {
        dispatch!(self, s => AlertQueue::due_alerts(s, limit, lease))
    }

    async fn alert_delivered(&self, id: &str) -> Result<(), StoreError> {
        dispatch!(self, s => AlertQueue::alert_delivered(s, id))
    }

    async fn alert_failed(&self, id: &str, retry_after: Duration) -> Result<(), StoreError> {
        dispatch!(self, s => AlertQueue::alert_failed(s, id, retry_after))
    }
}

impl Reports for BudgetStore {
    async fn spend(&self, query: &SpendQuery) -> Result<Vec<SpendRow>, StoreError> {
        dispatch!(self, s => Reports::spend(s, query))
    }

    async fn open_reservations(&self) -> Result<(usize, UsdMicros), StoreError> {
        dispatch!(self, s => Reports::open_reservations(s))
    }

    async fn reconcile(&self) -> Result<Vec<Reconciliation>, StoreError> {
        dispatch!(self, s => Reports::reconcile(s))
    }
}

impl Upkeep for BudgetStore {
    async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self, s => Upkeep::ping(s))
    }

    async fn flush(&self) -> Result<(), StoreError> {
        dispatch!(self, s => Upkeep::flush(s))
    }

    async fn sweep(&self) -> Result<usize, StoreError> {
        dispatch!(self, s => Upkeep::sweep(s))
    }

    fn track_key(&self, key: &str, org: Option<&str>) {
        if let BudgetStore::Redis(store) = self {
            store.track_key(key, org);
        }
    }
}
