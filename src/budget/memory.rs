//! The in-process budget store: counters, reservation records and the ledger
//! behind one mutex, with the same semantics as the Redis store (DESIGN.md,
//! "Budget protocol"). It is the default when no Redis URL is set; its state
//! lives and dies with the process.
//!
//! Every operation takes the lock once and reads the time inside it, so
//! operations are atomic across all scopes and ordered by the store's clock,
//! as `redis.call('TIME')` orders the scripts. Expiry is lazy (a bounded
//! sweep at the start of every `reserve`) plus an optional periodic sweep
//! task, like the purge task of mini-redis's `Db`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::MissedTickBehavior;

use super::{
    Denial, LedgerEntry, LedgerStatus, Reconciliation, ReserveOutcome, ReserveRequest, Scope,
    ScopeKind, ScopeState, SettleOutcome, Settlement, StoreError, SweeperGuard,
    DEFAULT_LEDGER_RETENTION,
};
use crate::money::UsdMicros;
use crate::usage::Usage;

/// How many due reservations one `reserve` expires (and closed records it
/// forgets) before its own work: enough to keep up with crashed calls, few
/// enough that no caller pays for a long backlog; the sweep task takes the
/// rest.
const LAZY_SWEEP_LIMIT: usize = 64;

/// A zero interval would make the sweep task spin.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(1);

// === Clocks ===

/// Where the store reads the time: every deadline and period id comes from
/// the store's clock, never the caller's.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to, so expiry and period rollover can
/// be exercised without waiting.
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward, stopping at the end of chrono's calendar.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now = later(*now, to_delta(by));
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

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
    clock: Arc<dyn Clock>,
    /// How far above its reservation a settle may land before it counts as
    /// an overrun, absorbing rounding between the estimate and the bill.
    settle_epsilon: UsdMicros,
}

impl MemoryStore {
    /// A store on the system clock, without a sweep task, keeping ledger
    /// entries for [`DEFAULT_LEDGER_RETENTION`].
    pub fn new(settle_epsilon: UsdMicros) -> Self {
        MemoryStore::with_clock(settle_epsilon, Arc::new(SystemClock))
    }

    pub fn with_clock(settle_epsilon: UsdMicros, clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    ledger_retention: to_delta(DEFAULT_LEDGER_RETENTION),
                    ..State::default()
                }),
                clock,
                settle_epsilon,
            }),
        }
    }

    /// How long a ledger entry stays in [`MemoryStore::ledger`] before the
    /// sweep folds it into its counters' folded sums.
    pub fn with_ledger_retention(self, retention: Duration) -> Self {
        self.shared.lock().ledger_retention = to_delta(retention);
        self
    }

    /// Starts a task on the current Tokio runtime that expires due
    /// reservations (and folds old ledger entries) every `every`, so
    /// headroom comes back even when no reserve arrives. It holds the store
    /// weakly: it ends when the guard drops or when the last handle to the
    /// store does.
    ///
    /// Must be called from within a Tokio runtime.
    pub fn spawn_sweeper(&self, every: Duration) -> SweeperGuard {
        let shared = Arc::downgrade(&self.shared);
        let task = tokio::spawn(sweep_periodically(shared, every.max(MIN_SWEEP_INTERVAL)));
        SweeperGuard::new(task.abort_handle())
    }

    /// Reserves `req.amount` against the key and its org, all or nothing;
    /// a retry with the same `exec_id` gets the first answer.
    pub fn reserve(&self, req: &ReserveRequest) -> ReserveOutcome {
        let (outcome, expired) = {
            let mut state = self.shared.lock();
            let now = self.shared.clock.now();
            let expired = state.expire_due(now, LAZY_SWEEP_LIMIT);
            state.forget_due(now, LAZY_SWEEP_LIMIT);
            (state.reserve(req, now), expired)
        };
        log_expired(expired);
        outcome
    }

    /// Settles a reservation with its actual cost, exactly once.
    pub fn settle(&self, settlement: &Settlement) -> Result<SettleOutcome, StoreError> {
        let outcome = {
            let mut state = self.shared.lock();
            let now = self.shared.clock.now();
            state.settle(settlement, now, self.shared.settle_epsilon)
        }?;
        let outside_reservation =
            matches!(outcome.status, LedgerStatus::Overrun | LedgerStatus::Late);
        if outcome.applied && outside_reservation {
            tracing::warn!(
                exec_id = %settlement.exec_id,
                key = %settlement.key,
                status = outcome.status.as_str(),
                reserved = outcome.reserved,
                actual = outcome.actual,
                "settled outside its reservation"
            );
        }
        Ok(outcome)
    }

    /// The scope's counters in the period current on the store's clock.
    pub fn scope_state(&self, scope: &Scope) -> ScopeState {
        let state = self.shared.lock();
        let now = self.shared.clock.now();
        let period_id = scope.period.id_at(now);
        let counter = state
            .counters
            .get(&CounterKey::new(scope.kind, &scope.id, &period_id))
            .copied()
            .unwrap_or_default();
        ScopeState {
            period_id,
            spent: counter.spent,
            reserved: counter.reserved,
            resets_at: scope.period.resets_at(now),
        }
    }

    /// Expires every reservation past its deadline, forgets closed records
    /// past their retention and folds ledger entries older than the ledger
    /// retention; returns how many expired.
    pub fn sweep_expired(&self) -> usize {
        let expired = self.shared.sweep_expired();
        log_expired(expired);
        expired
    }

    /// Every ledger entry not yet folded, oldest first.
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        let state = self.shared.lock();
        state.ledger.iter().map(|line| line.entry.clone()).collect()
    }

    /// How many reservations are open and the sum of their amounts.
    pub fn open_reservations(&self) -> (usize, UsdMicros) {
        let state = self.shared.lock();
        state.open().fold((0, 0), |(count, sum), reservation| {
            (count + 1, sum.saturating_add(reservation.amount))
        })
    }

    /// The committed counter (`spent + reserved`) of one scope and period.
    pub fn counter(&self, kind: ScopeKind, id: &str, period_id: &str) -> UsdMicros {
        let state = self.shared.lock();
        state
            .counters
            .get(&CounterKey::new(kind, id, period_id))
            .map_or(0, Counter::committed)
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
        for reservation in state.open() {
            for key in reservation.counter_keys() {
                let row = row(&mut rows, &key);
                row.open = row.open.saturating_add(reservation.amount);
            }
        }
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
            .field("settle_epsilon", &self.shared.settle_epsilon)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a panic elsewhere while it was held; every
        // step here uses non-panicking arithmetic, so the state is still
        // usable, and refusing all later calls would turn one bug into an
        // outage.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sweep_expired(&self) -> usize {
        let mut state = self.lock();
        let now = self.clock.now();
        let expired = state.expire_due(now, usize::MAX);
        state.forget_due(now, usize::MAX);
        let cutoff = now
            .checked_sub_signed(state.ledger_retention)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        state.fold_before(cutoff);
        expired
    }
}

async fn sweep_periodically(shared: Weak<Shared>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(shared) = shared.upgrade() else {
            break;
        };
        log_expired(shared.sweep_expired());
    }
}

fn log_expired(expired: usize) {
    if expired > 0 {
        tracing::warn!(
            expired,
            "released reservations never settled by their deadline"
        );
    }
}

// === impl State ===

#[derive(Default)]
struct State {
    counters: HashMap<CounterKey, Counter>,
    records: HashMap<String, Record>,
    /// Open reservations by deadline, so expiry touches only the due ones.
    deadlines: BTreeSet<(DateTime<Utc>, String)>,
    /// Closed records by the time they may be forgotten: kept that long so
    /// retries still get the first answer, then dropped to bound memory.
    retention: BTreeSet<(DateTime<Utc>, String)>,
    ledger: VecDeque<LedgerLine>,
    /// Σ actual of the ledger entries trimmed from `ledger`, per counter, so
    /// `counter == folded + Σ ledger + Σ open` still holds after a trim.
    folded: HashMap<CounterKey, UsdMicros>,
    /// How long an entry stays in `ledger` before it is folded.
    ledger_retention: TimeDelta,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CounterKey {
    kind: ScopeKind,
    id: String,
    period_id: String,
}

impl CounterKey {
    fn new(kind: ScopeKind, id: &str, period_id: &str) -> Self {
        CounterKey {
            kind,
            id: id.to_owned(),
            period_id: period_id.to_owned(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Counter {
    /// Σ actual of settled calls.
    spent: UsdMicros,
    /// Σ amounts of open reservations.
    reserved: UsdMicros,
}

impl Counter {
    fn committed(&self) -> UsdMicros {
        self.spent.saturating_add(self.reserved)
    }
}

struct Record {
    /// Set once the record is closed; its entry in `State::retention`.
    forget_at: Option<DateTime<Utc>>,
    state: RecordState,
}

enum RecordState {
    /// Remembered so a retried reserve gets the same denial.
    Denied(Denial),
    Open(Reservation),
    Expired(Reservation),
    Settled(Reservation, SettleOutcome),
}

#[derive(Clone)]
struct Reservation {
    amount: UsdMicros,
    key: Charge,
    org: Option<Charge>,
    deadline: DateTime<Utc>,
    ttl: TimeDelta,
}

/// A scope with the period id current when the reservation was made: the
/// settle lands in that period even after a rollover.
#[derive(Clone)]
struct Charge {
    id: String,
    period_id: String,
    /// The cap at reserve time, so a settle can report what is left without
    /// being told the scope again.
    cap: UsdMicros,
}

/// A ledger entry with the counters its `actual` went into.
struct LedgerLine {
    entry: LedgerEntry,
    charged_to: Vec<CounterKey>,
}

impl Reservation {
    /// The counters the reservation holds headroom in, the key's first.
    fn counter_keys(&self) -> impl Iterator<Item = CounterKey> + '_ {
        let key = CounterKey::new(ScopeKind::Key, &self.key.id, &self.key.period_id);
        let org = self
            .org
            .as_ref()
            .map(|org| CounterKey::new(ScopeKind::Org, &org.id, &org.period_id));
        std::iter::once(key).chain(org)
    }

    /// The ledger entry of a call that cost nothing.
    fn ledger_entry(&self, exec_id: &str, status: LedgerStatus, at: DateTime<Utc>) -> LedgerEntry {
        LedgerEntry {
            exec_id: exec_id.to_owned(),
            key: self.key.id.clone(),
            org: self.org.as_ref().map(|org| org.id.clone()),
            model: String::new(),
            usage: Usage::default(),
            reserved: self.amount,
            actual: 0,
            status,
            at,
        }
    }

    fn is_owned_by(&self, settlement: &Settlement) -> bool {
        self.key.id == settlement.key
            && self.org.as_ref().map(|org| org.id.as_str()) == settlement.org.as_deref()
    }
}

impl State {
    fn reserve(&mut self, req: &ReserveRequest, now: DateTime<Utc>) -> ReserveOutcome {
        if let Some(record) = self.records.get(&req.exec_id) {
            return match &record.state {
                RecordState::Denied(denial) => ReserveOutcome::Denied(denial.clone()),
                _ => ReserveOutcome::Reserved,
            };
        }
        let ttl = to_delta(req.ttl);
        // The key is checked first, so when both would deny, the key is named.
        let denial = std::iter::once(&req.key)
            .chain(req.org.as_ref())
            .find_map(|scope| self.check(scope, req.amount, now));
        if let Some(denial) = denial {
            self.close(&req.exec_id, RecordState::Denied(denial.clone()), ttl, now);
            return ReserveOutcome::Denied(denial);
        }
        let charge = |scope: &Scope| Charge {
            id: scope.id.clone(),
            period_id: scope.period.id_at(now),
            cap: scope.cap,
        };
        let reservation = Reservation {
            amount: req.amount,
            key: charge(&req.key),
            org: req.org.as_ref().map(charge),
            deadline: later(now, ttl),
            ttl,
        };
        for key in reservation.counter_keys() {
            let counter = self.counters.entry(key).or_default();
            counter.reserved = counter.reserved.saturating_add(req.amount);
        }
        self.deadlines
            .insert((reservation.deadline, req.exec_id.clone()));
        self.records.insert(
            req.exec_id.clone(),
            Record {
                forget_at: None,
                state: RecordState::Open(reservation),
            },
        );
        ReserveOutcome::Reserved
    }

    /// The denial if `amount` does not fit under the scope's cap now.
    fn check(&self, scope: &Scope, amount: UsdMicros, now: DateTime<Utc>) -> Option<Denial> {
        let period_id = scope.period.id_at(now);
        let committed = self
            .counters
            .get(&CounterKey::new(scope.kind, &scope.id, &period_id))
            .map_or(0, Counter::committed);
        let fits = committed
            .checked_add(amount)
            .is_some_and(|total| total <= scope.cap);
        (!fits).then(|| Denial {
            kind: scope.kind,
            id: scope.id.clone(),
            period: scope.period,
            cap: scope.cap,
            remaining: scope.cap.saturating_sub(committed),
            resets_at: scope.period.resets_at(now),
        })
    }

    fn settle(
        &mut self,
        settlement: &Settlement,
        now: DateTime<Utc>,
        epsilon: UsdMicros,
    ) -> Result<SettleOutcome, StoreError> {
        let exec_id = &settlement.exec_id;
        let unknown = || StoreError::UnknownReservation(exec_id.clone());
        let record = self.records.get(exec_id).ok_or_else(unknown)?;
        let reservation = match &record.state {
            RecordState::Denied(_) => return Err(unknown()),
            RecordState::Open(r) | RecordState::Expired(r) | RecordState::Settled(r, _) => r,
        };
        if !reservation.is_owned_by(settlement) {
            return Err(StoreError::OwnershipMismatch {
                exec_id: exec_id.clone(),
            });
        }
        if let RecordState::Settled(_, first) = &record.state {
            return Ok(SettleOutcome {
                applied: false,
                ..first.clone()
            });
        }
        let reservation = reservation.clone();
        let mut late = matches!(record.state, RecordState::Expired(_));
        if !late && reservation.deadline <= now {
            self.expire(exec_id, &reservation, now);
            late = true;
        }

        let status = if late {
            LedgerStatus::Late
        } else if settlement.estimated {
            LedgerStatus::Estimated
        } else if settlement.actual > reservation.amount.saturating_add(epsilon) {
            LedgerStatus::Overrun
        } else {
            LedgerStatus::Ok
        };
        // On time, the reservation becomes the actual cost; late, its amount
        // was already released at expiry and the cost is charged in full.
        for key in reservation.counter_keys() {
            let counter = self.counters.entry(key).or_default();
            if !late {
                counter.reserved = counter.reserved.saturating_sub(reservation.amount);
            }
            counter.spent = counter.spent.saturating_add(settlement.actual);
        }
        if !late {
            self.deadlines
                .remove(&(reservation.deadline, exec_id.clone()));
        }
        self.book(
            &reservation,
            LedgerEntry {
                model: settlement.model.clone(),
                usage: settlement.usage,
                actual: settlement.actual,
                ..reservation.ledger_entry(exec_id, status, now)
            },
        );
        let key_spent = reservation
            .counter_keys()
            .next()
            .and_then(|key| self.counters.get(&key))
            .map_or(0, Counter::committed);
        let outcome = SettleOutcome {
            status,
            reserved: reservation.amount,
            actual: settlement.actual,
            applied: true,
            key_remaining: reservation.key.cap.saturating_sub(key_spent),
        };
        let ttl = reservation.ttl;
        self.close(
            exec_id,
            RecordState::Settled(reservation, outcome.clone()),
            ttl,
            now,
        );
        Ok(outcome)
    }

    /// Expires up to `limit` open reservations whose deadline has come,
    /// oldest first; returns how many.
    fn expire_due(&mut self, now: DateTime<Utc>, limit: usize) -> usize {
        let mut expired = 0;
        while expired < limit {
            match self.deadlines.first() {
                Some((deadline, _)) if *deadline <= now => {}
                _ => break,
            }
            let Some((_, exec_id)) = self.deadlines.pop_first() else {
                break;
            };
            let reservation = match self.records.get(&exec_id).map(|r| &r.state) {
                Some(RecordState::Open(reservation)) => reservation.clone(),
                _ => continue,
            };
            self.expire(&exec_id, &reservation, now);
            expired += 1;
        }
        expired
    }

    /// Releases an open reservation's amount and books it as expired.
    fn expire(&mut self, exec_id: &str, reservation: &Reservation, now: DateTime<Utc>) {
        for key in reservation.counter_keys() {
            let counter = self.counters.entry(key).or_default();
            counter.reserved = counter.reserved.saturating_sub(reservation.amount);
        }
        self.deadlines
            .remove(&(reservation.deadline, exec_id.to_owned()));
        self.book(
            reservation,
            reservation.ledger_entry(exec_id, LedgerStatus::Expired, now),
        );
        self.close(
            exec_id,
            RecordState::Expired(reservation.clone()),
            reservation.ttl,
            now,
        );
    }

    /// Drops up to `limit` closed records whose retention has passed.
    fn forget_due(&mut self, now: DateTime<Utc>, limit: usize) {
        for _ in 0..limit {
            match self.retention.first() {
                Some((forget_at, _)) if *forget_at <= now => {}
                _ => break,
            }
            if let Some((_, exec_id)) = self.retention.pop_first() {
                self.records.remove(&exec_id);
            }
        }
    }

    /// Stores a record's closed state and keeps it for `ttl` from now.
    fn close(&mut self, exec_id: &str, state: RecordState, ttl: TimeDelta, now: DateTime<Utc>) {
        let forget_at = later(now, ttl);
        let previous = self.records.insert(
            exec_id.to_owned(),
            Record {
                forget_at: Some(forget_at),
                state,
            },
        );
        if let Some(previous_forget_at) = previous.and_then(|record| record.forget_at) {
            self.retention
                .remove(&(previous_forget_at, exec_id.to_owned()));
        }
        self.retention.insert((forget_at, exec_id.to_owned()));
    }

    fn book(&mut self, reservation: &Reservation, entry: LedgerEntry) {
        self.ledger.push_back(LedgerLine {
            entry,
            charged_to: reservation.counter_keys().collect(),
        });
    }

    /// Moves the ledger entries booked before `cutoff` into the folded sums
    /// of the counters they charged.
    fn fold_before(&mut self, cutoff: DateTime<Utc>) {
        while self
            .ledger
            .front()
            .is_some_and(|line| line.entry.at < cutoff)
        {
            let Some(line) = self.ledger.pop_front() else {
                break;
            };
            for key in line.charged_to {
                let folded = self.folded.entry(key).or_default();
                *folded = folded.saturating_add(line.entry.actual);
            }
        }
    }

    fn open(&self) -> impl Iterator<Item = &Reservation> {
        self.records
            .values()
            .filter_map(|record| match &record.state {
                RecordState::Open(reservation) => Some(reservation),
                _ => None,
            })
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
