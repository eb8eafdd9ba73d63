//! What the control plane asks of the SQLite books: an operator's
//! adjustment (a refund or a credit), decided on the desk with the same
//! rules as the memory store's (`memory/control.rs`), checking everything
//! it may refuse before it changes anything; and forgetting adjustments
//! past their retry horizon, in the file.

use chrono::{DateTime, Utc};
use rusqlite::Connection;

use super::books::Rules;
use super::change::{Adjusted, Entry};
use super::desk::Desk;
use super::record::millis;
use crate::budget::{
    AdjustOutcome, Adjustment, AppliedAdjustment, LedgerEntry, LedgerStatus, StoreError,
};
use crate::money::MAX_USD_MICROS;
use crate::usage::Usage;

type Sql<T> = rusqlite::Result<T>;

/// Moves `spent` of the key and its org in their current periods by the
/// adjustment's amount and books it, all or nothing; a known exec id gets
/// its first outcome.
pub(super) fn adjust(
    desk: &mut Desk,
    rules: Rules,
    adjustment: &Adjustment,
    now: DateTime<Utc>,
) -> Sql<Result<AdjustOutcome, StoreError>> {
    if !adjustment.amount_in_range() {
        return Ok(Err(adjustment.out_of_range()));
    }
    let org_id = adjustment.org.as_ref().map(|org| org.id.as_str());
    if let Some(first) = desk.adjustment(&adjustment.exec_id)? {
        return Ok(first.retried(adjustment));
    }
    let key_period_id = adjustment.key.period.id_at(now);
    let org_period_id = adjustment.org.as_ref().map(|org| org.period.id_at(now));
    let periods = std::iter::once(key_period_id.as_str()).chain(org_period_id.as_deref());
    // A refund a scope's `spent` cannot absorb, the key's first, or a
    // credit that would take a counter to 2^53, changes nothing.
    let mut key_spent = None;
    for (scope, period_id) in adjustment.scopes().zip(periods.clone()) {
        let (spent, reserved) = desk.counter(scope.kind, &scope.id, period_id)?;
        let Some(after) = spent.checked_add_signed(adjustment.amount) else {
            return Ok(Ok(AdjustOutcome::Refused {
                kind: scope.kind,
                id: scope.id.clone(),
                spent,
            }));
        };
        if after.saturating_add(reserved) > MAX_USD_MICROS {
            return Ok(Err(adjustment.out_of_range()));
        }
        key_spent.get_or_insert(after);
    }
    for (scope, period_id) in adjustment.scopes().zip(periods) {
        desk.move_counter(scope.kind, &scope.id, period_id, adjustment.amount, 0)?;
    }
    desk.book(Entry::of(
        LedgerEntry {
            exec_id: adjustment.exec_id.clone(),
            key: adjustment.key.id.clone(),
            org: org_id.map(str::to_owned),
            run: None,
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
    ));
    let key_spent = key_spent.unwrap_or_default();
    let applied = AppliedAdjustment {
        key: adjustment.key.id.clone(),
        org: org_id.map(str::to_owned),
        key_period_id: key_period_id.clone(),
        org_period_id: org_period_id.clone(),
        key_spent,
    };
    desk.adjusted(
        Adjusted {
            exec_id: adjustment.exec_id.clone(),
            key_id: applied.key.clone(),
            org_id: applied.org.clone(),
            key_period_id: key_period_id.clone(),
            org_period_id: org_period_id.clone(),
            key_spent,
            forget_at: millis(now).saturating_add(rules.closed_ms),
        },
        applied,
    );
    Ok(Ok(AdjustOutcome::Applied {
        key_period_id,
        org_period_id,
        key_spent,
        applied: true,
    }))
}

/// Forgets the adjustments applied longer ago than the retry horizon.
pub(super) fn forget_adjustments(conn: &Connection, now: DateTime<Utc>) -> Sql<usize> {
    conn.prepare_cached("DELETE FROM adjustments WHERE forget_at <= ?1")?
        .execute([millis(now)])
}
