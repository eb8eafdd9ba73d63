//! The booking rules, written once: reserve over a range, settle (with
//! overruns and late settles), expiry, adjustments, idempotency claims and
//! runs, as synchronous functions over [`BookState`], the little a store must
//! offer them. The memory store is these rules over its maps; the SQLite
//! store is these rules over its desk, which journals what they change
//! and posts it to the file. (The Redis store keeps the same rules in its
//! Lua scripts, `lua/`, where they run inside Redis; the contract suite
//! holds all three to one behaviour.)
//!
//! Each function runs while its caller holds the store's one lock, with
//! the store's time passed in, so an operation is atomic across every
//! scope it touches. Every check that can refuse an operation comes
//! before its first change, so a refusal changes nothing.
//!
//! `reserve` holds the bound and remembers a run, `settle` replaces a
//! hold (or an expiry's charge) by the actual cost and books the ledger
//! entry, `adjust` moves what an operator says, and `record` is a call's
//! reservation as they read and write it.

mod adjust;
pub(crate) mod record;
mod reserve;
mod settle;

pub(crate) use adjust::adjust;
pub(crate) use record::{Charge, Record, RecordState};
pub(crate) use reserve::{
    forget_idle_customers, forget_idle_runs, reserve, reserve_claimed, run_state, scope_state,
};
pub(crate) use settle::{expire_due, settle};

use std::collections::BTreeSet;

use super::{AppliedAdjustment, LedgerEntry, ScopeKind};
use crate::money::{UsdMicros, UsdMicrosDelta};

/// A scope's counter in one period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counter {
    /// Σ actual of settled calls, expiries and adjustments.
    pub spent: UsdMicros,
    /// Σ amounts of open reservations.
    pub reserved: UsdMicros,
}

impl Counter {
    /// `spent + reserved`: what the cap is checked against.
    pub(crate) fn committed(&self) -> UsdMicros {
        self.spent.saturating_add(self.reserved)
    }
}

/// The open reservations by deadline (Unix ms), so expiry touches only
/// the due ones, never the closed records around them.
#[derive(Debug, Default)]
pub(crate) struct Deadlines(BTreeSet<(i64, String)>);

impl Deadlines {
    /// `exec_id` is open until `deadline`.
    pub(crate) fn insert(&mut self, deadline: i64, exec_id: &str) {
        self.0.insert((deadline, exec_id.to_owned()));
    }

    /// `exec_id`, open until `deadline`, is not open any more.
    pub(crate) fn remove(&mut self, deadline: i64, exec_id: &str) {
        self.0.remove(&(deadline, exec_id.to_owned()));
    }

    /// Up to `limit` exec ids whose deadline is at or before `now`, oldest
    /// first.
    pub(crate) fn due(&self, now: i64, limit: usize) -> Vec<String> {
        self.0
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .take(limit)
            .map(|(_, exec_id)| exec_id.clone())
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The exec ids, by deadline.
    pub(crate) fn exec_ids(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(_, exec_id)| exec_id.as_str())
    }
}

/// `MAX(value + by, 0)`: a counter moved by a signed amount never goes
/// below zero, and saturates rather than wraps.
pub(crate) fn moved(value: UsdMicros, by: UsdMicrosDelta) -> UsdMicros {
    let after = i128::from(value) + i128::from(by);
    UsdMicros::try_from(after.max(0)).unwrap_or(UsdMicros::MAX)
}

/// The books as the rules read and change them: what a store keeps, not
/// how. A read may fail (the SQLite store reads what it let go of from its
/// file); a change is made at once and is the store's to make durable or
/// take back when the operation ends.
pub(crate) trait BookState {
    /// Why the books could not be read.
    type Error;

    // === reads ===

    /// The record of `exec_id`, if the books have one. A closed record may
    /// come back with no more than what its retries read: its state, its
    /// amount, and its key's and org's ids.
    fn record(&mut self, exec_id: &str) -> Result<Option<Record>, Self::Error>;

    /// The deadline of the open reservation holding `claim`, if any.
    fn claimed_until(&self, claim: &str) -> Option<i64>;

    fn counter(
        &mut self,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
    ) -> Result<Counter, Self::Error>;

    /// The cap a run's first call fixed (`Some(None)`: not capped), or
    /// `None` for a run the books do not know.
    fn run_cap(&mut self, id: &str) -> Result<Option<Option<UsdMicros>>, Self::Error>;

    /// The runs whose last call came at or before `cutoff`.
    fn runs_idle_since(&mut self, cutoff: i64) -> Result<Vec<String>, Self::Error>;

    /// The open reservations, by deadline.
    fn deadlines(&self) -> &Deadlines;

    /// The first answer of an adjustment already applied, if any.
    fn adjustment(&mut self, exec_id: &str) -> Result<Option<AppliedAdjustment>, Self::Error>;

    // === changes ===

    /// The record of `exec_id` is now `record`.
    fn put(&mut self, exec_id: &str, record: Record);

    /// Moves one counter by signed amounts, never below zero.
    fn move_counter(
        &mut self,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
        spent: UsdMicrosDelta,
        reserved: UsdMicrosDelta,
    ) -> Result<(), Self::Error>;

    /// Books a ledger entry, which charged the key in `key_period` and its
    /// org in `org_period` (and adds it to its day's spend aggregate).
    fn book(&mut self, entry: LedgerEntry, key_period: &str, org_period: Option<&str>);

    /// `exec_id`, just opened, holds `claim`.
    fn take_claim(&mut self, claim: &str, exec_id: &str);

    /// `exec_id`, closing, lets go of `claim`, unless a later reservation
    /// holds it now.
    fn release_claim(&mut self, claim: &str, exec_id: &str);

    /// A call of run `id` at `at`; the first one fixes its cap.
    fn touch_run(&mut self, id: &str, cap: Option<UsdMicros>, at: i64) -> Result<(), Self::Error>;

    /// Forgets run `id` and its counter.
    fn forget_run(&mut self, id: &str);

    /// A call of `key`'s customer `customer` at `at`.
    fn touch_customer(&mut self, key: &str, customer: &str, at: i64) -> Result<(), Self::Error>;

    /// The customers, as `(key, customer)`, whose last call came at or
    /// before `cutoff`.
    fn customers_idle_since(&mut self, cutoff: i64) -> Result<Vec<(String, String)>, Self::Error>;

    /// Forgets `key`'s customer `customer`: that it was seen, and every
    /// counter of its scope.
    fn forget_customer(&mut self, key: &str, customer: &str);

    /// An adjustment applied, remembered for its retries until `forget_at`.
    fn adjusted(&mut self, exec_id: &str, applied: AppliedAdjustment, forget_at: i64);
}
