//! The in-process budget store: the booking rules (`budget::books`) over
//! maps behind one mutex. For tests and benchmarks: its books live and
//! die with the process (the gateway says so when it starts on it).
//!
//! Every operation takes the lock once and reads the time inside it, so
//! operations are atomic across all scopes and ordered by the store's clock,
//! as `redis.call('TIME')` orders the scripts. Expiry is lazy (a bounded
//! sweep at the start of every `reserve`) plus the gateway's periodic sweep
//! through [`BudgetStore::sweep`](super::BudgetStore::sweep).
//!
//! This file is the handle: locking and the clock; `state` holds the books
//! the rules read and change, `aggregates` the spend per day, key and
//! model, `alerts` the queue of spending alerts.

mod aggregates;
mod alerts;
mod state;
#[cfg(test)]
pub(crate) mod testing;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::aggregates::first_kept_day;
use super::alerts::{AlertEvent, QueuedAlert};
use super::books::{
    self,
    record::{from_millis, millis},
};
use super::caps;
use super::records::{AuditEntry, RecordBook, RecordSet, RecordWrite, WriteOutcome};
use super::{
    reconciled, AdjustOutcome, Adjustment, AlertQueue, Books, ClaimedReserve, CustomerSeen,
    LedgerEntry, OpenHold, Reconciliation, Records, Reports, ReserveOutcome, ReserveRequest, Rules,
    RunState, Scope, ScopeKind, ScopeState, SettleOutcome, Settlement, SpendQuery, SpendRow,
    StoreError, Upkeep,
};
use crate::money::UsdMicros;
use state::{sure, CounterKey, State};

/// How many due reservations one `reserve` expires (and closed records it
/// forgets) before its own work: enough to keep up with crashed calls, few
/// enough that no caller pays for a long backlog; the periodic sweep takes
/// the rest.
const LAZY_SWEEP_LIMIT: usize = 64;

/// How many reservations, records or ledger entries the periodic sweep
/// handles per hold of the lock: about a hundred microseconds of work.
const SWEEP_BATCH: usize = 256;

// === impl MemoryStore ===

/// A handle to the in-process store; clones share the same state.
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

struct Shared {
    /// A `std` mutex rather than tokio's: every critical section is short,
    /// synchronous and never held across an `.await`, so an async mutex
    /// would only add cost. Holding it for a whole operation is what makes
    /// a reservation all or nothing across the key and its org.
    state: Mutex<State>,
    /// The admin API's keys and orgs, apart from the books: a change to
    /// them never waits for a call's reserve, nor a reserve for them.
    records: Mutex<RecordBook>,
    /// Spending alerts waiting for delivery, apart from the books too.
    alerts: Mutex<alerts::Queue>,
    rules: Rules,
    /// A clock the test moves by hand, so expiry and period rollover run
    /// without waiting; `None` reads the wall clock, as production does.
    #[cfg(test)]
    clock: Option<Arc<testing::ManualClock>>,
}

impl MemoryStore {
    /// A store on the wall clock, keeping its books by `rules`.
    pub fn new(rules: Rules) -> Self {
        MemoryStore {
            shared: Arc::new(Shared::new(rules)),
        }
    }

    /// Reserves `req.amount` against the key and its org, all or nothing;
    /// a retry with the same `exec_id` gets the first answer.
    pub fn reserve(&self, req: &ReserveRequest) -> ReserveOutcome {
        self.after_lazy_sweep(|state, rules, now| sure(books::reserve(state, rules, req, now)))
    }

    /// Reserves like [`MemoryStore::reserve`], unless an open reservation
    /// under another exec id holds `claim`: then the request is a duplicate
    /// of one still in flight, and nothing is charged.
    pub fn reserve_claimed(&self, req: &ReserveRequest, claim: &str) -> ClaimedReserve {
        self.after_lazy_sweep(|state, rules, now| {
            sure(books::reserve_claimed(state, rules, req, claim, now))
        })
    }

    /// Runs a reserve under the lock, after the bounded lazy sweep.
    fn after_lazy_sweep<T>(
        &self,
        reserve: impl FnOnce(&mut State, &Rules, DateTime<Utc>) -> T,
    ) -> T {
        let rules = &self.shared.rules;
        let (outcome, expired) = {
            let mut state = self.shared.lock();
            let now = self.shared.now();
            let expired = sure(books::expire_due(&mut *state, rules, now, LAZY_SWEEP_LIMIT));
            state.forget_due(millis(now), LAZY_SWEEP_LIMIT);
            (reserve(&mut state, rules, now), expired)
        };
        self.log_expired(expired);
        outcome
    }

    /// Settles a reservation with its actual cost, exactly once.
    pub fn settle(&self, settlement: &Settlement) -> Result<SettleOutcome, StoreError> {
        // An overrun or a late settle is logged by the caller, which knows
        // the call's model (`settle::log_outcome`), not here as well.
        let mut state = self.shared.lock();
        let now = self.shared.now();
        sure(books::settle(
            &mut *state,
            &self.shared.rules,
            settlement,
            now,
        ))
    }

    /// Applies an operator's refund or credit, once per exec id.
    pub fn adjust(&self, adjustment: &Adjustment) -> Result<AdjustOutcome, StoreError> {
        let mut state = self.shared.lock();
        let now = self.shared.now();
        sure(books::adjust(
            &mut *state,
            &self.shared.rules,
            adjustment,
            now,
        ))
    }

    /// Up to `limit` open reservations, oldest first.
    pub fn open_holds(&self, limit: usize) -> Vec<OpenHold> {
        self.shared.lock().open_holds(limit)
    }

    /// The scope's counters in the period current on the store's clock.
    pub fn scope_state(&self, scope: &Scope) -> ScopeState {
        let mut state = self.shared.lock();
        let now = self.shared.now();
        sure(books::scope_state(&mut *state, scope, now))
    }

    /// A run's cap and counters, if the run is remembered.
    pub fn run_state(&self, id: &str) -> Option<RunState> {
        sure(books::run_state(&mut *self.shared.lock(), id))
    }

    /// Expires every reservation past its deadline, forgets closed records
    /// past their retention, folds ledger entries older than the ledger
    /// retention and drops aggregate rows older than theirs; returns how
    /// many expired.
    ///
    /// Under load a second's backlog is thousands of records and entries:
    /// the work is done [`SWEEP_BATCH`] at a time, the lock released
    /// between batches, so calls wait for one batch at most, never for the
    /// whole backlog.
    pub fn sweep_expired(&self) -> usize {
        let rules = &self.shared.rules;
        let mut expired = 0;
        loop {
            let mut state = self.shared.lock();
            let now = self.shared.now();
            let batch = sure(books::expire_due(&mut *state, rules, now, SWEEP_BATCH));
            let forgotten = state.forget_due(millis(now), SWEEP_BATCH);
            let cutoff = now
                .checked_sub_signed(to_delta(rules.ledger_retention))
                .unwrap_or(DateTime::<Utc>::MIN_UTC);
            let folded = state.fold_before(cutoff, SWEEP_BATCH);
            drop(state);
            expired += batch;
            if batch < SWEEP_BATCH && forgotten < SWEEP_BATCH && folded < SWEEP_BATCH {
                break;
            }
        }
        {
            let mut state = self.shared.lock();
            let now = self.shared.now();
            state.forget_adjustments(millis(now));
            sure(books::forget_idle_runs(&mut *state, rules, now));
            sure(books::forget_idle_customers(&mut *state, rules, now));
            state.forget_windows(&caps::forget_windows_before(now));
            let first_kept = first_kept_day(now, rules.aggregate_retention_days);
            state.aggregates.drop_before(&first_kept);
        }
        self.log_expired(expired);
        expired
    }

    fn log_expired(&self, expired: usize) {
        if expired > 0 {
            super::log_expired(None, expired, self.shared.rules.on_expiry);
        }
    }

    /// The spend aggregate rows `query` wants, by day, key and model.
    pub fn spend(&self, query: &SpendQuery) -> Vec<SpendRow> {
        self.shared.lock().aggregates.spend(query)
    }

    /// Every ledger entry not yet folded, oldest first.
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        let state = self.shared.lock();
        state.ledger.iter().map(|line| line.entry.clone()).collect()
    }

    /// How many reservations are open and the sum of their amounts.
    pub fn open_reservations(&self) -> (usize, UsdMicros) {
        let state = self.shared.lock();
        state.open().fold((0, 0), |(count, sum), (_, reservation)| {
            (count + 1, sum.saturating_add(reservation.amount))
        })
    }

    /// The committed counter (`spent + reserved`) of one scope and period.
    pub fn counter(&self, kind: ScopeKind, id: &str, period_id: &str) -> UsdMicros {
        let state = self.shared.lock();
        state
            .counters
            .get(&CounterKey::new(kind, id, period_id))
            .map_or(0, books::Counter::committed)
    }

    /// Every scope and period with its counter, folded sum, ledger sum and
    /// open sum, sorted by scope and period.
    pub fn reconcile(&self) -> Vec<Reconciliation> {
        let state = self.shared.lock();
        let mut rows: HashMap<CounterKey, Reconciliation> = HashMap::new();
        for (key, counter) in &state.counters {
            row(&mut rows, key).counter = counter.committed();
        }
        for (key, folded) in &state.folded {
            row(&mut rows, key).folded = *folded;
        }
        for line in &state.ledger {
            for key in &line.charged_to {
                let row = row(&mut rows, key);
                row.ledger = row.ledger.saturating_add(line.entry.actual);
            }
        }
        for (_, reservation) in state.open() {
            for charge in reservation.charges() {
                let key = CounterKey::new(charge.kind, &charge.id, &charge.period_id);
                let row = row(&mut rows, &key);
                row.open = row.open.saturating_add(reservation.amount);
            }
        }
        rows.retain(|key, _| reconciled(key.kind, &key.period_id));
        let mut rows: Vec<Reconciliation> = rows.into_values().collect();
        rows.sort_by(|a, b| (a.kind, &a.id, &a.period_id).cmp(&(b.kind, &b.id, &b.period_id)));
        rows
    }
}

fn row<'a>(
    rows: &'a mut HashMap<CounterKey, Reconciliation>,
    key: &CounterKey,
) -> &'a mut Reconciliation {
    rows.entry(key.clone()).or_insert_with(|| Reconciliation {
        kind: key.kind,
        id: key.id.clone(),
        period_id: key.period_id.clone(),
        counter: 0,
        folded: 0,
        ledger: 0,
        open: 0,
    })
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("rules", &self.shared.rules)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn new(rules: Rules) -> Self {
        Shared {
            state: Mutex::new(State::default()),
            records: Mutex::new(RecordBook::default()),
            alerts: Mutex::new(alerts::Queue::default()),
            rules,
            #[cfg(test)]
            clock: None,
        }
    }

    /// The store's clock: every deadline and period id comes from it, never
    /// from the caller's.
    fn now(&self) -> DateTime<Utc> {
        #[cfg(test)]
        if let Some(clock) = &self.clock {
            return clock.now();
        }
        Utc::now()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a panic elsewhere while it was held; every
        // step here uses non-panicking arithmetic, so the state is still
        // usable, and refusing all later calls would turn one bug into an
        // outage.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn records(&self) -> MutexGuard<'_, RecordBook> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn alerts(&self) -> MutexGuard<'_, alerts::Queue> {
        self.alerts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn to_delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}

fn later(now: DateTime<Utc>, by: TimeDelta) -> DateTime<Utc> {
    now.checked_add_signed(by)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests;

// === the interface ===

/// The store's answers come at once; each is the sync method of the same
/// name.
impl Books for MemoryStore {
    async fn reserve(&self, request: &ReserveRequest) -> Result<ReserveOutcome, StoreError> {
        Ok(MemoryStore::reserve(self, request))
    }

    async fn reserve_claimed(
        &self,
        request: &ReserveRequest,
        claim: &str,
    ) -> Result<ClaimedReserve, StoreError> {
        Ok(MemoryStore::reserve_claimed(self, request, claim))
    }

    async fn settle(&self, settlement: &Settlement) -> Result<SettleOutcome, StoreError> {
        MemoryStore::settle(self, settlement)
    }

    async fn adjust(&self, adjustment: &Adjustment) -> Result<AdjustOutcome, StoreError> {
        MemoryStore::adjust(self, adjustment)
    }

    async fn scope_state(&self, scope: &Scope) -> Result<ScopeState, StoreError> {
        Ok(MemoryStore::scope_state(self, scope))
    }

    async fn run_state(&self, id: &str) -> Result<Option<RunState>, StoreError> {
        Ok(MemoryStore::run_state(self, id))
    }

    async fn customers(
        &self,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<CustomerSeen>, StoreError> {
        let customers = self.shared.lock().customers_of(key, after, limit);
        Ok(customers
            .into_iter()
            .map(|(id, last_call)| CustomerSeen {
                id,
                last_call: from_millis(last_call),
            })
            .collect())
    }

    async fn open_holds(&self, limit: usize) -> Result<Vec<OpenHold>, StoreError> {
        Ok(MemoryStore::open_holds(self, limit))
    }
}

impl Records for MemoryStore {
    async fn records_version(&self) -> Result<u64, StoreError> {
        Ok(self.shared.records().version())
    }

    async fn records(&self) -> Result<RecordSet, StoreError> {
        Ok(self.shared.records().all())
    }

    async fn write_record(&self, write: &RecordWrite) -> Result<WriteOutcome, StoreError> {
        Ok(self.shared.records().write(write))
    }

    async fn audit(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.shared.records().audit(before, limit))
    }
}

impl AlertQueue for MemoryStore {
    async fn queue_alert(&self, event: &AlertEvent) -> Result<bool, StoreError> {
        Ok(MemoryStore::queue_alert(self, event))
    }

    async fn due_alerts(
        &self,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<QueuedAlert>, StoreError> {
        Ok(MemoryStore::due_alerts(self, limit, lease))
    }

    async fn alert_delivered(&self, id: &str) -> Result<(), StoreError> {
        MemoryStore::alert_delivered(self, id);
        Ok(())
    }

    async fn alert_failed(&self, id: &str, retry_after: Duration) -> Result<(), StoreError> {
        MemoryStore::alert_failed(self, id, retry_after);
        Ok(())
    }
}

impl Reports for MemoryStore {
    async fn spend(&self, query: &SpendQuery) -> Result<Vec<SpendRow>, StoreError> {
        Ok(MemoryStore::spend(self, query))
    }

    async fn open_reservations(&self) -> Result<(usize, UsdMicros), StoreError> {
        Ok(MemoryStore::open_reservations(self))
    }

    async fn reconcile(&self) -> Result<Vec<Reconciliation>, StoreError> {
        Ok(MemoryStore::reconcile(self))
    }
}

impl Upkeep for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn sweep(&self) -> Result<usize, StoreError> {
        Ok(self.sweep_expired())
    }
}
