//! What the control plane asks of the memory store's books: an operator's
//! adjustment (a refund or a credit), and the list of open holds. Like
//! every operation here, each runs under the store's lock with the store's
//! time passed in.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use super::later;
use super::state::{CounterKey, LedgerLine, State};
use crate::budget::{
    AdjustOutcome, Adjustment, AppliedAdjustment, LedgerEntry, LedgerStatus, OpenHold, StoreError,
};
use crate::money::MAX_USD_MICROS;
use crate::usage::Usage;

/// The adjustments applied within the retry horizon, so a retry gets the
/// first outcome; forgotten by the periodic sweep after that, as closed
/// reservation records are.
#[derive(Default)]
pub(super) struct Adjustments {
    applied: HashMap<String, AppliedAdjustment>,
    /// By the time each may be forgotten.
    retention: BTreeSet<(DateTime<Utc>, String)>,
}

impl State {
    /// Moves `spent` of the key and its org in their current periods by
    /// the adjustment's amount and books it, all or nothing; a known exec
    /// id gets its first outcome.
    pub(super) fn adjust(
        &mut self,
        adjustment: &Adjustment,
        now: DateTime<Utc>,
    ) -> Result<AdjustOutcome, StoreError> {
        if !adjustment.amount_in_range() {
            return Err(adjustment.out_of_range());
        }
        if let Some(first) = self.adjustments.applied.get(&adjustment.exec_id) {
            return first.retried(adjustment);
        }
        let key_period_id = adjustment.key.period.id_at(now);
        let org_period_id = adjustment.org.as_ref().map(|org| org.period.id_at(now));
        let charged_to: Vec<CounterKey> = adjustment
            .scopes()
            .zip(std::iter::once(&key_period_id).chain(&org_period_id))
            .map(|(scope, period_id)| CounterKey::new(scope.kind, &scope.id, period_id))
            .collect();
        // Everything that can refuse is checked before anything moves: a
        // refund a scope's `spent` cannot absorb, the key's first; a credit
        // that would take a counter to 2^53.
        let mut after = Vec::with_capacity(charged_to.len());
        for (scope, key) in adjustment.scopes().zip(&charged_to) {
            let counter = self.counters.get(key).copied().unwrap_or_default();
            let Some(spent) = counter.spent.checked_add_signed(adjustment.amount) else {
                return Ok(AdjustOutcome::Refused {
                    kind: scope.kind,
                    id: scope.id.clone(),
                    spent: counter.spent,
                });
            };
            if spent.saturating_add(counter.reserved) > MAX_USD_MICROS {
                return Err(adjustment.out_of_range());
            }
            after.push(spent);
        }
        for (key, spent) in charged_to.iter().zip(&after) {
            self.counters.entry(key.clone()).or_default().spent = *spent;
        }
        let applied = AppliedAdjustment {
            key: adjustment.key.id.clone(),
            org: adjustment.org.as_ref().map(|org| org.id.clone()),
            key_period_id,
            org_period_id,
            key_spent: after.first().copied().unwrap_or_default(),
        };
        let outcome = applied.outcome(true);
        let entry = LedgerEntry {
            exec_id: adjustment.exec_id.clone(),
            key: adjustment.key.id.clone(),
            org: adjustment.org.as_ref().map(|org| org.id.clone()),
            run: None,
            model: String::new(),
            usage: Usage::default(),
            reserved: 0,
            actual: adjustment.amount,
            status: LedgerStatus::Adjustment,
            at: now,
            note: Some(adjustment.note.clone()),
        };
        // In the spend reports too, as money moved by hand (no call).
        self.aggregates.add(&entry);
        self.ledger
            .push_back(Box::new(LedgerLine { entry, charged_to }));
        let forget_at = later(now, self.closed_record);
        self.adjustments
            .retention
            .insert((forget_at, adjustment.exec_id.clone()));
        self.adjustments
            .applied
            .insert(adjustment.exec_id.clone(), applied);
        Ok(outcome)
    }

    /// Forgets the adjustments applied longer ago than the retry horizon.
    pub(super) fn forget_adjustments(&mut self, now: DateTime<Utc>) {
        let adjustments = &mut self.adjustments;
        while adjustments
            .retention
            .first()
            .is_some_and(|(forget_at, _)| *forget_at <= now)
        {
            if let Some((_, exec_id)) = adjustments.retention.pop_first() {
                adjustments.applied.remove(&exec_id);
            }
        }
    }

    /// Up to `limit` open reservations, oldest first (then by exec id).
    pub(super) fn open_holds(&self, limit: usize) -> Vec<OpenHold> {
        let mut holds: Vec<OpenHold> = self.open_with_ids().map(|(id, r)| r.hold(id)).collect();
        holds.sort_by(|a, b| (a.started_at, &a.exec_id).cmp(&(b.started_at, &b.exec_id)));
        holds.truncate(limit);
        holds
    }
}
