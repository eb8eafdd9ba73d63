//! The memory store's books: counters, reservation records, idempotency
//! claims, runs, adjustments and the ledger, in maps, with the rules
//! (`budget::books`) deciding over them through [`BookState`]. Every method
//! here runs under the store's lock, with the store's time passed in.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;

use super::aggregates::Aggregates;
use crate::budget::books::{moved, BookState, Charge, Counter, Deadlines, Record, RecordState};
use crate::budget::caps;
use crate::budget::{AppliedAdjustment, LedgerEntry, OpenHold, ScopeKind, SettleOutcome};
use crate::money::{UsdMicros, UsdMicrosDelta};

#[derive(Default)]
pub(super) struct State {
    /// Looked up by [`CounterRef`], so a call's counters are found without
    /// building a key of owned strings for each.
    pub(super) counters: hashbrown::HashMap<CounterKey, Counter>,
    /// Every reservation's record, by exec id: open ones, and closed ones
    /// for as long as a retry can come. It holds a retry horizon of calls
    /// (hundreds of thousands under load), so it grows without ever moving
    /// them all at once: a table that doubles in one insert would stall
    /// every call behind the lock while it rehashes.
    pub(super) records: griddle::HashMap<String, Kept>,
    pub(super) deadlines: Deadlines,
    /// Closed records by the time they may be forgotten: kept that long so
    /// retries still get the first answer, then dropped to bound memory.
    pub(super) retention: BTreeSet<(i64, String)>,
    /// Boxed, so when the queue outgrows its buffer under load it moves a
    /// pointer per entry rather than the entries.
    pub(super) ledger: VecDeque<Box<LedgerLine>>,
    /// Σ actual of the ledger entries trimmed from `ledger`, per counter, so
    /// `counter == folded + Σ ledger + Σ open` still holds after a trim.
    pub(super) folded: HashMap<CounterKey, UsdMicrosDelta>,
    /// Idempotency claim → the exec id of the reservation made under it,
    /// until that reservation closes.
    pub(super) claims: HashMap<String, String>,
    /// Operators' adjustments applied within the retry horizon, so a retry
    /// gets the first outcome.
    pub(super) adjustments: HashMap<String, AppliedAdjustment>,
    /// The adjustments by the time each may be forgotten.
    pub(super) adjustments_retention: BTreeSet<(i64, String)>,
    /// Spend per day, key and model, moved with every ledger entry.
    pub(super) aggregates: Aggregates,
    /// The runs remembered, by run scope id (`<key>/<run>`).
    pub(super) runs: HashMap<String, Run>,
    /// Each key's customers, by key then customer id, with their last
    /// call (Unix ms).
    pub(super) customers: BTreeMap<String, BTreeMap<String, i64>>,
}

/// What is remembered of an agent's run besides its counter.
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    /// Fixed by the run's first call; `None`: not capped.
    cap: Option<UsdMicros>,
    /// Its last reserve or settle (Unix ms), from which it is remembered
    /// the run TTL.
    last_used: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct CounterKey {
    pub(super) kind: ScopeKind,
    pub(super) id: String,
    pub(super) period_id: String,
}

impl CounterKey {
    pub(super) fn new(kind: ScopeKind, id: &str, period_id: &str) -> Self {
        CounterKey {
            kind,
            id: id.to_owned(),
            period_id: period_id.to_owned(),
        }
    }
}

/// A [`CounterKey`] borrowed: it hashes as the key does (a `String`
/// hashes as its `str`), so a lookup needs no allocation.
#[derive(Hash)]
pub(super) struct CounterRef<'a> {
    pub(super) kind: ScopeKind,
    pub(super) id: &'a str,
    pub(super) period_id: &'a str,
}

impl hashbrown::Equivalent<CounterKey> for CounterRef<'_> {
    fn equivalent(&self, key: &CounterKey) -> bool {
        self.kind == key.kind && self.id == key.id && self.period_id == key.period_id
    }
}

/// A record as the memory store keeps it.
pub(super) enum Kept {
    /// Open, denied or expired: all of it, boxed so that the settled
    /// records a retry horizon holds are not each the size of one.
    Whole(Box<Record>),
    /// Settled: what a retry reads, and no more (most records are these).
    Settled(SettledCall),
}

/// A settled call as its retries read it: whose it is (a settle from
/// another key or org is refused) and the first answer.
pub(super) struct SettledCall {
    key: Box<str>,
    org: Option<Box<str>>,
    outcome: SettleOutcome,
    forget_at: i64,
}

impl Kept {
    fn of(record: Record) -> Kept {
        match (&record.state, record.forget_at) {
            (RecordState::Settled(outcome), Some(forget_at)) => Kept::Settled(SettledCall {
                key: record.key.id.as_str().into(),
                org: record.org.as_ref().map(|org| org.id.as_str().into()),
                outcome: outcome.clone(),
                forget_at,
            }),
            _ => Kept::Whole(Box::new(record)),
        }
    }

    /// The record as the rules read it; a settled one with only what its
    /// retries read (see [`BookState::record`]).
    fn record(&self) -> Record {
        match self {
            Kept::Whole(record) => (**record).clone(),
            Kept::Settled(call) => {
                let charge = |kind, id: &str| Charge::usd(kind, id.to_owned(), String::new(), 0);
                Record {
                    state: RecordState::Settled(call.outcome.clone()),
                    amount: call.outcome.reserved,
                    key: charge(ScopeKind::Key, &call.key),
                    org: call.org.as_deref().map(|org| charge(ScopeKind::Org, org)),
                    run: None,
                    caps: Vec::new(),
                    tokens: 0,
                    customer: None,
                    started_at: 0,
                    deadline: 0,
                    ttl_ms: 0,
                    forget_at: Some(call.forget_at),
                    claim: None,
                    model: String::new(),
                }
            }
        }
    }

    /// The reservation, while it is open.
    pub(super) fn open(&self) -> Option<&Record> {
        match self {
            Kept::Whole(record) if record.is_open() => Some(record),
            _ => None,
        }
    }

    fn forget_at(&self) -> Option<i64> {
        match self {
            Kept::Whole(record) => record.forget_at,
            Kept::Settled(call) => Some(call.forget_at),
        }
    }
}

/// A ledger entry with the counters its `actual` went into.
pub(super) struct LedgerLine {
    pub(super) entry: LedgerEntry,
    pub(super) charged_to: Vec<CounterKey>,
}

impl State {
    /// Drops up to `limit` closed records whose retention has passed;
    /// returns how many.
    pub(super) fn forget_due(&mut self, now: i64, limit: usize) -> usize {
        let mut forgotten = 0;
        while forgotten < limit {
            match self.retention.first() {
                Some((forget_at, _)) if *forget_at <= now => {}
                _ => break,
            }
            if let Some((_, exec_id)) = self.retention.pop_first() {
                self.records.remove(&exec_id);
            }
            forgotten += 1;
        }
        forgotten
    }

    /// Forgets the adjustments applied longer ago than the retry horizon.
    pub(super) fn forget_adjustments(&mut self, now: i64) {
        while self
            .adjustments_retention
            .first()
            .is_some_and(|(forget_at, _)| *forget_at <= now)
        {
            if let Some((_, exec_id)) = self.adjustments_retention.pop_first() {
                self.adjustments.remove(&exec_id);
            }
        }
    }

    /// Moves up to `limit` of the ledger entries booked before `cutoff`
    /// into the folded sums of the counters they charged; returns how many.
    pub(super) fn fold_before(
        &mut self,
        cutoff: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> usize {
        let mut folded = 0;
        while folded < limit
            && self
                .ledger
                .front()
                .is_some_and(|line| line.entry.at < cutoff)
        {
            folded += 1;
            let Some(line) = self.ledger.pop_front() else {
                break;
            };
            for key in line.charged_to {
                let sum = self.folded.entry(key).or_default();
                *sum = sum.saturating_add(line.entry.actual);
            }
        }
        folded
    }

    /// The open reservations with their exec ids, by deadline: the ones in
    /// `deadlines`, rather than a walk over every closed record.
    pub(super) fn open(&self) -> impl Iterator<Item = (&str, &Record)> {
        self.deadlines.exec_ids().filter_map(|exec_id| {
            let record = self.records.get(exec_id)?.open()?;
            Some((exec_id, record))
        })
    }

    /// Up to `limit` open reservations, oldest first (then by exec id).
    pub(super) fn open_holds(&self, limit: usize) -> Vec<OpenHold> {
        let mut holds: Vec<OpenHold> = self.open().map(|(id, r)| r.hold(id)).collect();
        holds.sort_by(|a, b| (a.started_at, &a.exec_id).cmp(&(b.started_at, &b.exec_id)));
        holds.truncate(limit);
        holds
    }

    /// Up to `limit` of `key`'s customers with an id after `after`.
    pub(super) fn customers_of(
        &self,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<(String, i64)> {
        let Some(customers) = self.customers.get(key) else {
            return Vec::new();
        };
        let from = match after {
            Some(after) => std::ops::Bound::Excluded(after.to_owned()),
            None => std::ops::Bound::Unbounded,
        };
        customers
            .range((from, std::ops::Bound::Unbounded))
            .take(limit)
            .map(|(id, last)| (id.clone(), *last))
            .collect()
    }

    /// Forgets the rate limits' counters of minutes before `cutoff` that
    /// hold nothing open.
    pub(super) fn forget_windows(&mut self, cutoff: &str) {
        self.counters.retain(|key, counter| {
            counter.reserved > 0 || !caps::is_window_before(&key.period_id, cutoff)
        });
    }
}

// === impl BookState for State ===

impl BookState for State {
    /// The maps are all there is: reading them cannot fail.
    type Error = Infallible;

    fn record(&mut self, exec_id: &str) -> Result<Option<Record>, Infallible> {
        Ok(self.records.get(exec_id).map(Kept::record))
    }

    fn claimed_until(&self, claim: &str) -> Option<i64> {
        let holder = self.claims.get(claim)?;
        Some(self.records.get(holder)?.open()?.deadline)
    }

    fn counter(
        &mut self,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
    ) -> Result<Counter, Infallible> {
        Ok(self
            .counters
            .get(&CounterRef {
                kind,
                id,
                period_id,
            })
            .copied()
            .unwrap_or_default())
    }

    fn run_cap(&mut self, id: &str) -> Result<Option<Option<UsdMicros>>, Infallible> {
        Ok(self.runs.get(id).map(|run| run.cap))
    }

    fn runs_idle_since(&mut self, cutoff: i64) -> Result<Vec<String>, Infallible> {
        Ok(self
            .runs
            .iter()
            .filter(|(_, run)| run.last_used <= cutoff)
            .map(|(id, _)| id.clone())
            .collect())
    }

    fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    fn adjustment(&mut self, exec_id: &str) -> Result<Option<AppliedAdjustment>, Infallible> {
        Ok(self.adjustments.get(exec_id).cloned())
    }

    fn put(&mut self, exec_id: &str, record: Record) {
        let deadline = record.is_open().then_some(record.deadline);
        let forget_at = record.forget_at;
        if let Some(old) = self.records.insert(exec_id.to_owned(), Kept::of(record)) {
            if let Some(open) = old.open() {
                self.deadlines.remove(open.deadline, exec_id);
            }
            if let Some(old_forget_at) = old.forget_at() {
                self.retention.remove(&(old_forget_at, exec_id.to_owned()));
            }
        }
        if let Some(deadline) = deadline {
            self.deadlines.insert(deadline, exec_id);
        }
        if let Some(forget_at) = forget_at {
            self.retention.insert((forget_at, exec_id.to_owned()));
        }
    }

    fn move_counter(
        &mut self,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
        spent: UsdMicrosDelta,
        reserved: UsdMicrosDelta,
    ) -> Result<(), Infallible> {
        let found = CounterRef {
            kind,
            id,
            period_id,
        };
        let counter = match self.counters.get_mut(&found) {
            Some(counter) => counter,
            None => self
                .counters
                .entry(CounterKey::new(kind, id, period_id))
                .or_default(),
        };
        counter.spent = moved(counter.spent, spent);
        counter.reserved = moved(counter.reserved, reserved);
        Ok(())
    }

    fn book(&mut self, entry: LedgerEntry, key_period: &str, org_period: Option<&str>) {
        self.aggregates.add(&entry);
        let key = CounterKey::new(ScopeKind::Key, &entry.key, key_period);
        let org = entry
            .org
            .as_deref()
            .zip(org_period)
            .map(|(org, period)| CounterKey::new(ScopeKind::Org, org, period));
        self.ledger.push_back(Box::new(LedgerLine {
            entry,
            charged_to: std::iter::once(key).chain(org).collect(),
        }));
    }

    fn take_claim(&mut self, claim: &str, exec_id: &str) {
        self.claims.insert(claim.to_owned(), exec_id.to_owned());
    }

    fn release_claim(&mut self, claim: &str, exec_id: &str) {
        if self
            .claims
            .get(claim)
            .is_some_and(|holder| holder == exec_id)
        {
            self.claims.remove(claim);
        }
    }

    fn touch_run(&mut self, id: &str, cap: Option<UsdMicros>, at: i64) -> Result<(), Infallible> {
        match self.runs.get_mut(id) {
            Some(run) => run.last_used = run.last_used.max(at),
            None => {
                self.runs.insert(id.to_owned(), Run { cap, last_used: at });
            }
        }
        Ok(())
    }

    fn forget_run(&mut self, id: &str) {
        let key = CounterKey::new(ScopeKind::Run, id, "total");
        self.counters.remove(&key);
        self.folded.remove(&key);
        self.runs.remove(id);
    }

    fn touch_customer(&mut self, key: &str, customer: &str, at: i64) -> Result<(), Infallible> {
        // A customer seen before costs no allocation.
        if let Some(last) = self
            .customers
            .get_mut(key)
            .and_then(|customers| customers.get_mut(customer))
        {
            *last = (*last).max(at);
            return Ok(());
        }
        self.customers
            .entry(key.to_owned())
            .or_default()
            .insert(customer.to_owned(), at);
        Ok(())
    }

    fn customers_idle_since(&mut self, cutoff: i64) -> Result<Vec<(String, String)>, Infallible> {
        Ok(self
            .customers
            .iter()
            .flat_map(|(key, customers)| {
                customers
                    .iter()
                    .filter(|(_, last)| **last <= cutoff)
                    .map(move |(customer, _)| (key.clone(), customer.clone()))
            })
            .collect())
    }

    fn forget_customer(&mut self, key: &str, customer: &str) {
        if let Some(customers) = self.customers.get_mut(key) {
            customers.remove(customer);
            if customers.is_empty() {
                self.customers.remove(key);
            }
        }
        let id = caps::customer_scope_id(key, customer);
        self.counters
            .retain(|counter, _| counter.kind != ScopeKind::Customer || counter.id != id);
    }

    fn adjusted(&mut self, exec_id: &str, applied: AppliedAdjustment, forget_at: i64) {
        self.adjustments_retention
            .insert((forget_at, exec_id.to_owned()));
        self.adjustments.insert(exec_id.to_owned(), applied);
    }
}

/// What a rule returns on books that cannot fail to read.
pub(super) fn sure<T>(result: Result<T, Infallible>) -> T {
    match result {
        Ok(value) => value,
        Err(never) => match never {},
    }
}
