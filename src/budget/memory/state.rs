//! The memory store's books: counters, reservation records, idempotency
//! claims and the ledger, and the protocol's rules over them. Every method
//! here runs under the store's lock, with the store's time passed in.

use std::collections::{BTreeSet, HashMap, VecDeque};

use chrono::{DateTime, TimeDelta, Utc};

use super::aggregates::Aggregates;
use super::control::Adjustments;
use super::{later, to_delta};
use crate::budget::{
    run_id_of, Denial, LedgerEntry, LedgerStatus, Level, OnExpiry, OpenHold, ReserveOutcome,
    ReserveRequest, RunScope, Scope, ScopeKind, SettleOutcome, Settlement, StoreError,
};
use crate::money::{delta, UsdMicros, UsdMicrosDelta, MAX_USD_MICROS};
use crate::period::Period;
use crate::usage::Usage;

#[derive(Default)]
pub(super) struct State {
    pub(super) counters: HashMap<CounterKey, Counter>,
    /// Every reservation's record, by exec id: open ones, and closed ones
    /// for as long as a retry can come. It holds a retry horizon of calls
    /// (hundreds of thousands under load), so it grows without ever moving
    /// them all at once: a table that doubles in one insert would stall
    /// every call behind the lock while it rehashes.
    pub(super) records: griddle::HashMap<String, Record>,
    /// Open reservations by deadline, so expiry touches only the due ones.
    pub(super) deadlines: BTreeSet<(DateTime<Utc>, String)>,
    /// Closed records by the time they may be forgotten: kept that long so
    /// retries still get the first answer, then dropped to bound memory.
    pub(super) retention: BTreeSet<(DateTime<Utc>, String)>,
    /// Boxed, so when the queue outgrows its buffer under load it moves a
    /// pointer per entry rather than the entries.
    pub(super) ledger: VecDeque<Box<LedgerLine>>,
    /// Σ actual of the ledger entries trimmed from `ledger`, per counter, so
    /// `counter == folded + Σ ledger + Σ open` still holds after a trim.
    pub(super) folded: HashMap<CounterKey, UsdMicrosDelta>,
    /// How long an entry stays in `ledger` before it is folded.
    pub(super) ledger_retention: TimeDelta,
    /// How long a settled or denied record is kept for retries (an expired
    /// one is kept its reservation's TTL, for late settles).
    pub(super) closed_record: TimeDelta,
    /// Idempotency claim → the exec id of the reservation made under it,
    /// until that reservation closes.
    pub(super) claims: HashMap<String, String>,
    /// What a reservation never settled by its deadline is charged.
    pub(super) on_expiry: OnExpiry,
    /// Operators' adjustments applied within the retry horizon.
    pub(super) adjustments: Adjustments,
    /// Spend per day, key and model, moved with every ledger entry.
    pub(super) aggregates: Aggregates,
    /// The runs remembered, by run scope id (`<key>/<run>`).
    pub(super) runs: HashMap<String, Run>,
    /// How long a run is remembered after its last call.
    pub(super) run_ttl: TimeDelta,
}

/// What is remembered of an agent's run besides its counter.
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    /// Fixed by the run's first call; `None`: not capped.
    pub(super) cap: Option<UsdMicros>,
    /// Its last reserve or settle, from which it is remembered `run_ttl`.
    pub(super) last_used: DateTime<Utc>,
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

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counter {
    /// Σ actual of settled calls.
    pub(super) spent: UsdMicros,
    /// Σ amounts of open reservations.
    pub(super) reserved: UsdMicros,
}

impl Counter {
    pub(super) fn committed(&self) -> UsdMicros {
        self.spent.saturating_add(self.reserved)
    }
}

pub(super) struct Record {
    /// Set once the record is closed; its entry in `State::retention`.
    forget_at: Option<DateTime<Utc>>,
    state: RecordState,
}

pub(super) enum RecordState {
    /// Remembered so a retried reserve gets the same denial.
    Denied(Denial),
    /// Boxed, as is an expired one, so that the settled records a retry
    /// horizon holds are not each the size of a reservation.
    Open(Box<Reservation>),
    /// Past its deadline unsettled, with what its expiry charged (its
    /// amount, or 0 under `on_expiry = "release"`), which a late settle
    /// corrects to the actual cost.
    Expired(Box<Reservation>, UsdMicros),
    Settled(SettledCall),
}

/// What a retry reads of a settled call, and no more: whose it is (a settle
/// from another key or org is refused) and the first answer, whose
/// `reserved` a retried reserve gets back. Most records are these, so they
/// drop the reservation's scopes, periods, model and claim.
pub(super) struct SettledCall {
    key: Box<str>,
    org: Option<Box<str>>,
    outcome: SettleOutcome,
}

impl SettledCall {
    fn new(reservation: &Reservation, outcome: SettleOutcome) -> Self {
        SettledCall {
            key: reservation.key.id.as_str().into(),
            org: reservation.org.as_ref().map(|org| org.id.as_str().into()),
            outcome,
        }
    }

    fn is_owned_by(&self, settlement: &Settlement) -> bool {
        *self.key == settlement.key && self.org.as_deref() == settlement.org.as_deref()
    }
}

#[derive(Clone)]
pub(super) struct Reservation {
    pub(super) amount: UsdMicros,
    key: Charge,
    org: Option<Charge>,
    run: Option<Charge>,
    /// The model the call was for, so an expiry with no settle still books
    /// its charge against it.
    model: String,
    deadline: DateTime<Utc>,
    ttl: TimeDelta,
    /// The idempotency claim this reservation holds while it is open.
    claim: Option<String>,
}

/// A scope with the period id current when the reservation was made: the
/// settle lands in that period even after a rollover.
#[derive(Clone)]
pub(super) struct Charge {
    id: String,
    period_id: String,
    /// The cap at reserve time, so a settle can report what is left without
    /// being told the scope again.
    cap: UsdMicros,
}

/// A ledger entry with the counters its `actual` went into.
pub(super) struct LedgerLine {
    pub(super) entry: LedgerEntry,
    pub(super) charged_to: Vec<CounterKey>,
}

impl Reservation {
    /// The counters the reservation holds headroom in, the key's first.
    pub(super) fn counter_keys(&self) -> impl Iterator<Item = CounterKey> + '_ {
        let key = CounterKey::new(ScopeKind::Key, &self.key.id, &self.key.period_id);
        let org = self
            .org
            .as_ref()
            .map(|org| CounterKey::new(ScopeKind::Org, &org.id, &org.period_id));
        let run = self
            .run
            .as_ref()
            .map(|run| CounterKey::new(ScopeKind::Run, &run.id, &run.period_id));
        std::iter::once(key).chain(org).chain(run)
    }

    /// The run id the client named, without its key.
    fn run_id(&self) -> Option<String> {
        self.run.as_ref().map(|run| run_id_of(&run.id).to_owned())
    }

    /// The ledger entry of a call that cost nothing, against the model it
    /// was reserved for, for the caller to fill in.
    fn ledger_entry(&self, exec_id: &str, status: LedgerStatus, at: DateTime<Utc>) -> LedgerEntry {
        LedgerEntry {
            exec_id: exec_id.to_owned(),
            key: self.key.id.clone(),
            org: self.org.as_ref().map(|org| org.id.clone()),
            run: self.run_id(),
            model: self.model.clone(),
            usage: Usage::default(),
            reserved: self.amount,
            actual: 0,
            status,
            at,
            note: None,
        }
    }

    /// The reservation as the admin API lists it.
    pub(super) fn hold(&self, exec_id: &str) -> OpenHold {
        OpenHold {
            exec_id: exec_id.to_owned(),
            key: self.key.id.clone(),
            org: self.org.as_ref().map(|org| org.id.clone()),
            run: self.run_id(),
            model: self.model.clone(),
            amount: self.amount,
            started_at: self
                .deadline
                .checked_sub_signed(self.ttl)
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
            deadline: self.deadline,
        }
    }

    fn is_owned_by(&self, settlement: &Settlement) -> bool {
        self.key.id == settlement.key
            && self.org.as_ref().map(|org| org.id.as_str()) == settlement.org.as_deref()
    }
}

impl State {
    /// Whether a reserve of `exec_id` under `claim` repeats a request still
    /// in flight: the claim is held by another exec id whose reservation is
    /// open and not past its deadline. A reserve of an exec id that has a
    /// record is the gateway's own retry, never a duplicate.
    pub(super) fn is_duplicate(&self, exec_id: &str, claim: &str, now: DateTime<Utc>) -> bool {
        if self.records.contains_key(exec_id) {
            return false;
        }
        self.claims
            .get(claim)
            .and_then(|holder| self.records.get(holder))
            .is_some_and(|record| matches!(&record.state, RecordState::Open(r) if r.deadline > now))
    }

    /// Reserves the most of `[req.min_amount, req.amount]` that fits (the
    /// first answer for a known exec id); a new reservation takes `claim`.
    pub(super) fn reserve(
        &mut self,
        req: &ReserveRequest,
        claim: Option<&str>,
        now: DateTime<Utc>,
    ) -> ReserveOutcome {
        if let Some(record) = self.records.get(&req.exec_id) {
            return match &record.state {
                RecordState::Denied(denial) => ReserveOutcome::Denied(denial.clone()),
                RecordState::Open(r) | RecordState::Expired(r, _) => ReserveOutcome::Reserved {
                    amount: r.amount,
                    levels: Vec::new(),
                },
                RecordState::Settled(call) => ReserveOutcome::Reserved {
                    amount: call.outcome.reserved,
                    levels: Vec::new(),
                },
            };
        }
        let run = match &req.run {
            Some(run) => match self.run_scope(run) {
                Ok(scope) => Some(scope),
                Err(cap) => return ReserveOutcome::RunCapConflict { cap },
            },
            None => None,
        };
        let ttl = to_delta(req.ttl);
        let scopes: Vec<&Scope> = std::iter::once(&req.key)
            .chain(req.org.as_ref())
            .chain(run.as_ref())
            .collect();
        // Not even the least amount fits: the key is checked first, so when
        // several would deny, the key is named, then the org.
        let denial = scopes
            .iter()
            .find_map(|scope| self.check(scope, req.min_amount, now));
        if let Some(denial) = denial {
            let keep = self.closed_record;
            let denied = RecordState::Denied(denial.clone());
            self.close(&req.exec_id, denied, None, keep, now);
            return ReserveOutcome::Denied(denial);
        }
        // Every scope has room for the least: hold the most they all allow.
        let amount = scopes.iter().fold(req.amount, |amount, scope| {
            amount.min(scope.cap.saturating_sub(self.committed(scope, now)))
        });
        let charge = |scope: &Scope| Charge {
            id: scope.id.clone(),
            period_id: scope.period.id_at(now),
            cap: scope.cap,
        };
        let reservation = Reservation {
            amount,
            key: charge(&req.key),
            org: req.org.as_ref().map(charge),
            run: run.as_ref().map(charge),
            model: req.model.clone(),
            deadline: later(now, ttl),
            ttl,
            claim: claim.map(str::to_owned),
        };
        if let Some(claim) = claim {
            self.claims.insert(claim.to_owned(), req.exec_id.clone());
        }
        let mut levels = Vec::with_capacity(3);
        for key in reservation.counter_keys() {
            let counter = self.counters.entry(key.clone()).or_default();
            counter.reserved = counter.reserved.saturating_add(amount);
            levels.push(Level {
                kind: key.kind,
                period_id: key.period_id,
                committed: counter.committed(),
            });
        }
        if let Some(run) = &req.run {
            self.touch_run(&run.id, run.cap, now);
        }
        self.deadlines
            .insert((reservation.deadline, req.exec_id.clone()));
        self.records.insert(
            req.exec_id.clone(),
            Record {
                forget_at: None,
                state: RecordState::Open(Box::new(reservation)),
            },
        );
        ReserveOutcome::Reserved { amount, levels }
    }

    /// The run as a scope with the cap its first call fixed, or, when this
    /// call names another cap, `Err` with the fixed one.
    fn run_scope(&self, run: &RunScope) -> Result<Scope, Option<UsdMicros>> {
        let cap = match self.runs.get(&run.id) {
            Some(known) if run.cap.is_some() && run.cap != known.cap => return Err(known.cap),
            Some(known) => known.cap,
            None => run.cap,
        };
        Ok(Scope {
            kind: ScopeKind::Run,
            id: run.id.clone(),
            cap: cap.unwrap_or(MAX_USD_MICROS),
            period: Period::Total,
        })
    }

    /// Remembers a run's call: the first one fixes its cap.
    pub(super) fn touch_run(&mut self, id: &str, cap: Option<UsdMicros>, now: DateTime<Utc>) {
        self.runs
            .entry(id.to_owned())
            .and_modify(|run| run.last_used = now)
            .or_insert(Run {
                cap,
                last_used: now,
            });
    }

    /// Forgets the runs without a call for the run TTL and with nothing
    /// reserved: their counters, folded sums and what is remembered.
    pub(super) fn forget_idle_runs(&mut self, now: DateTime<Utc>) {
        let ttl = self.run_ttl;
        let counters = &self.counters;
        let idle: Vec<String> = self
            .runs
            .iter()
            .filter(|(id, run)| {
                let key = CounterKey::new(ScopeKind::Run, id, "total");
                later(run.last_used, ttl) <= now
                    && counters
                        .get(&key)
                        .is_none_or(|counter| counter.reserved == 0)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            let key = CounterKey::new(ScopeKind::Run, &id, "total");
            self.counters.remove(&key);
            self.folded.remove(&key);
            self.runs.remove(&id);
        }
    }

    /// The scope's `spent + reserved` in its current period.
    fn committed(&self, scope: &Scope, now: DateTime<Utc>) -> UsdMicros {
        let period_id = scope.period.id_at(now);
        self.counters
            .get(&CounterKey::new(scope.kind, &scope.id, &period_id))
            .map_or(0, Counter::committed)
    }

    /// The denial if `amount` does not fit under the scope's cap now.
    fn check(&self, scope: &Scope, amount: UsdMicros, now: DateTime<Utc>) -> Option<Denial> {
        let fits = self
            .committed(scope, now)
            .checked_add(amount)
            .is_some_and(|total| total <= scope.cap);
        (!fits).then(|| self.deny(scope, now))
    }

    fn deny(&self, scope: &Scope, now: DateTime<Utc>) -> Denial {
        Denial {
            kind: scope.kind,
            id: scope.id.clone(),
            period: scope.period,
            cap: scope.cap,
            remaining: scope.cap.saturating_sub(self.committed(scope, now)),
            resets_at: scope.period.resets_at(now),
        }
    }

    pub(super) fn settle(
        &mut self,
        settlement: &Settlement,
        now: DateTime<Utc>,
        epsilon: UsdMicros,
    ) -> Result<SettleOutcome, StoreError> {
        let exec_id = &settlement.exec_id;
        let out_of_range = || StoreError::OutOfRange {
            exec_id: exec_id.clone(),
        };
        // Refused before anything else, as the Redis store refuses it
        // before its script runs.
        if settlement.actual > MAX_USD_MICROS {
            return Err(out_of_range());
        }
        let unknown = || StoreError::UnknownReservation(exec_id.clone());
        let record = self.records.get(exec_id).ok_or_else(unknown)?;
        let not_owned = || StoreError::OwnershipMismatch {
            exec_id: exec_id.clone(),
        };
        let (reservation, already_expired) = match &record.state {
            RecordState::Denied(_) => return Err(unknown()),
            RecordState::Settled(call) if !call.is_owned_by(settlement) => return Err(not_owned()),
            RecordState::Settled(call) => {
                return Ok(SettleOutcome {
                    applied: false,
                    ..call.outcome.clone()
                })
            }
            RecordState::Open(r) => (&**r, None),
            RecordState::Expired(r, charged) => (&**r, Some(*charged)),
        };
        if !reservation.is_owned_by(settlement) {
            return Err(not_owned());
        }
        let reservation = reservation.clone();
        // What the counters hold of this call: its amount while open (also
        // when it expires now: expiry's own move nets out), what expiry
        // charged once expired. The settle replaces that with the actual
        // cost, unless a counter would then reach 2^53, checked before
        // anything changes, as `settle.lua` does.
        let held = already_expired.unwrap_or(reservation.amount);
        if !self.fits(&reservation, held, settlement.actual) {
            return Err(out_of_range());
        }
        // What expiry charged, when the settle comes after it (or finds the
        // deadline passed and expires the reservation first, as the sweep
        // would have).
        let expiry_charge = match already_expired {
            None if reservation.deadline <= now => Some(self.expire(exec_id, &reservation, now)),
            charged => charged,
        };
        let late = expiry_charge.is_some();

        let status = if late {
            LedgerStatus::Late
        } else if settlement.estimated {
            LedgerStatus::Estimated
        } else if settlement.actual > reservation.amount.saturating_add(epsilon) {
            LedgerStatus::Overrun
        } else {
            LedgerStatus::Ok
        };
        // On time, the reservation becomes the actual cost. Late, expiry
        // already moved its amount out of `reserved` and charged what it
        // charged: the actual cost replaces that charge.
        for key in reservation.counter_keys() {
            let counter = self.counters.entry(key).or_default();
            match expiry_charge {
                None => counter.reserved = counter.reserved.saturating_sub(reservation.amount),
                Some(charged) => counter.spent = counter.spent.saturating_sub(charged),
            }
            counter.spent = counter.spent.saturating_add(settlement.actual);
        }
        if !late {
            self.deadlines
                .remove(&(reservation.deadline, exec_id.clone()));
        }
        if let Some(run) = &reservation.run {
            self.touch_run(&run.id, None, now);
        }
        self.book(
            &reservation,
            LedgerEntry {
                model: settlement.model.clone(),
                usage: settlement.usage,
                actual: delta(settlement.actual) - delta(expiry_charge.unwrap_or(0)),
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
        let keep = self.closed_record;
        let settled = RecordState::Settled(SettledCall::new(&reservation, outcome.clone()));
        self.close(exec_id, settled, reservation.claim.as_deref(), keep, now);
        Ok(outcome)
    }

    /// Whether every counter `reservation` charged stays below 2^53 when
    /// the `held` part of it is replaced by `actual`.
    fn fits(&self, reservation: &Reservation, held: UsdMicros, actual: UsdMicros) -> bool {
        reservation.counter_keys().all(|key| {
            let committed = self.counters.get(&key).map_or(0, Counter::committed);
            let after = i128::from(committed) - i128::from(held) + i128::from(actual);
            after <= i128::from(MAX_USD_MICROS)
        })
    }

    /// Expires up to `limit` open reservations whose deadline has come,
    /// oldest first; returns how many.
    pub(super) fn expire_due(&mut self, now: DateTime<Utc>, limit: usize) -> usize {
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
                Some(RecordState::Open(reservation)) => (**reservation).clone(),
                _ => continue,
            };
            self.expire(&exec_id, &reservation, now);
            expired += 1;
        }
        expired
    }

    /// Closes an open reservation as expired: its amount leaves `reserved`
    /// and what `on_expiry` charges (all of it, or nothing) goes to
    /// `spent`, booked as an `expired` entry. Returns what it charged.
    ///
    /// The record is kept one more TTL: the gateway retries a settle for
    /// two TTLs from before its reserve, so every settle that can still
    /// come finds the record and corrects the charge (`late`).
    fn expire(
        &mut self,
        exec_id: &str,
        reservation: &Reservation,
        now: DateTime<Utc>,
    ) -> UsdMicros {
        let charged = match self.on_expiry {
            OnExpiry::Charge => reservation.amount,
            OnExpiry::Release => 0,
        };
        for key in reservation.counter_keys() {
            let counter = self.counters.entry(key).or_default();
            counter.reserved = counter.reserved.saturating_sub(reservation.amount);
            counter.spent = counter.spent.saturating_add(charged);
        }
        self.deadlines
            .remove(&(reservation.deadline, exec_id.to_owned()));
        self.book(
            reservation,
            LedgerEntry {
                actual: delta(charged),
                ..reservation.ledger_entry(exec_id, LedgerStatus::Expired, now)
            },
        );
        self.close(
            exec_id,
            RecordState::Expired(Box::new(reservation.clone()), charged),
            reservation.claim.as_deref(),
            reservation.ttl,
            now,
        );
        charged
    }

    /// Drops up to `limit` closed records whose retention has passed;
    /// returns how many.
    pub(super) fn forget_due(&mut self, now: DateTime<Utc>, limit: usize) -> usize {
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

    /// Stores a record's closed state and keeps it for `keep` from now; the
    /// `claim` the reservation held is released, unless a later reservation
    /// took it over (this one was past its deadline by then).
    fn close(
        &mut self,
        exec_id: &str,
        state: RecordState,
        claim: Option<&str>,
        keep: TimeDelta,
        now: DateTime<Utc>,
    ) {
        if let Some(claim) = claim {
            if self
                .claims
                .get(claim)
                .is_some_and(|holder| holder == exec_id)
            {
                self.claims.remove(claim);
            }
        }
        let forget_at = later(now, keep);
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
        self.aggregates.add(&entry);
        self.ledger.push_back(Box::new(LedgerLine {
            entry,
            charged_to: reservation.counter_keys().collect(),
        }));
    }

    /// Moves up to `limit` of the ledger entries booked before `cutoff`
    /// into the folded sums of the counters they charged; returns how many.
    pub(super) fn fold_before(&mut self, cutoff: DateTime<Utc>, limit: usize) -> usize {
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
            // A run's counter is forgotten with the run, not reconciled.
            for key in line
                .charged_to
                .into_iter()
                .filter(|key| key.kind != ScopeKind::Run)
            {
                let sum = self.folded.entry(key).or_default();
                *sum = sum.saturating_add(line.entry.actual);
            }
        }
        folded
    }

    pub(super) fn open(&self) -> impl Iterator<Item = &Reservation> {
        self.open_with_ids().map(|(_, reservation)| reservation)
    }

    /// The open reservations with their exec ids, by deadline: the ones in
    /// `deadlines`, rather than a walk over every closed record.
    pub(super) fn open_with_ids(&self) -> impl Iterator<Item = (&str, &Reservation)> {
        self.deadlines.iter().filter_map(|(_, exec_id)| {
            match self.records.get(exec_id).map(|record| &record.state) {
                Some(RecordState::Open(reservation)) => Some((exec_id.as_str(), &**reservation)),
                _ => None,
            }
        })
    }
}
