//! An operator's adjustment, a refund or a credit: it moves `spent` of the
//! key and its org in their current periods and books an `adjustment`
//! entry, all or nothing, once per exec id.

use chrono::{DateTime, Utc};

use super::record::millis;
use super::BookState;
use crate::budget::{
    AdjustOutcome, Adjustment, AppliedAdjustment, LedgerEntry, LedgerStatus, Rules, StoreError,
};
use crate::money::MAX_USD_MICROS;
use crate::usage::Usage;

/// Applies `adjustment`, checking everything that may refuse it before
/// anything moves; a known exec id gets its first outcome.
pub(crate) fn adjust<B: BookState>(
    books: &mut B,
    rules: &Rules,
    adjustment: &Adjustment,
    now: DateTime<Utc>,
) -> Result<Result<AdjustOutcome, StoreError>, B::Error> {
    if !adjustment.amount_in_range() {
        return Ok(Err(adjustment.out_of_range()));
    }
    if let Some(first) = books.adjustment(&adjustment.exec_id)? {
        return Ok(first.retried(adjustment));
    }
    let key_period_id = adjustment.key.period.id_at(now);
    let org_period_id = adjustment.org.as_ref().map(|org| org.period.id_at(now));
    let periods = std::iter::once(key_period_id.as_str()).chain(org_period_id.as_deref());
    // A refund a scope's `spent` cannot absorb, the key's first, or a
    // credit that would take a counter to 2^53, changes nothing.
    let mut key_spent = None;
    for (scope, period_id) in adjustment.scopes().zip(periods.clone()) {
        let counter = books.counter(scope.kind, &scope.id, period_id)?;
        let Some(after) = counter.spent.checked_add_signed(adjustment.amount) else {
            return Ok(Ok(AdjustOutcome::Refused {
                kind: scope.kind,
                id: scope.id.clone(),
                spent: counter.spent,
            }));
        };
        if after.saturating_add(counter.reserved) > MAX_USD_MICROS {
            return Ok(Err(adjustment.out_of_range()));
        }
        key_spent.get_or_insert(after);
    }
    for (scope, period_id) in adjustment.scopes().zip(periods) {
        books.move_counter(scope.kind, &scope.id, period_id, adjustment.amount, 0)?;
    }
    let org_id = adjustment.org.as_ref().map(|org| org.id.clone());
    // In the spend reports too, as money moved by hand (no call).
    books.book(
        LedgerEntry {
            exec_id: adjustment.exec_id.clone(),
            key: adjustment.key.id.clone(),
            org: org_id.clone(),
            run: None,
            customer: None,
            model: String::new(),
            usage: Usage::default(),
            reserved: 0,
            actual: adjustment.amount,
            status: LedgerStatus::Adjustment,
            at: now,
            note: Some(adjustment.note.clone()),
        },
        &key_period_id,
        org_period_id.as_deref(),
    );
    let applied = AppliedAdjustment {
        key: adjustment.key.id.clone(),
        org: org_id,
        key_period_id,
        org_period_id,
        key_spent: key_spent.unwrap_or_default(),
    };
    let outcome = applied.outcome(true);
    books.adjusted(
        &adjustment.exec_id,
        applied,
        millis(now).saturating_add(rules.closed_ms()),
    );
    Ok(Ok(outcome))
}
