//! What the control plane asks of the SQLite books: an operator's
//! adjustment (a refund or a credit), and the list of open holds. The same
//! rules as the memory store's (`memory/control.rs`), as statements run
//! inside the writer's open transaction; an adjustment checks everything
//! it may refuse before it writes anything.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension};

use super::books::{book_in, from_millis, limit_arg, millis, Rules};
use super::writer::Db;
use crate::budget::{
    run_id_of, AdjustOutcome, Adjustment, AppliedAdjustment, LedgerEntry, LedgerStatus, OpenHold,
    StoreError,
};
use crate::money::MAX_USD_MICROS;
use crate::usage::Usage;

type Sql<T> = rusqlite::Result<T>;

/// Moves `spent` of the key and its org in their current periods by the
/// adjustment's amount and books it, all or nothing; a known exec id gets
/// its first outcome.
pub(super) fn adjust(
    db: &mut Db<'_>,
    rules: Rules,
    adjustment: &Adjustment,
    now: DateTime<Utc>,
) -> Sql<Result<AdjustOutcome, StoreError>> {
    if !adjustment.amount_in_range() {
        return Ok(Err(adjustment.out_of_range()));
    }
    let org_id = adjustment.org.as_ref().map(|org| org.id.as_str());
    let conn = db.conn();
    if let Some(first) = applied(conn, &adjustment.exec_id)? {
        return Ok(first.retried(adjustment));
    }
    let key_period_id = adjustment.key.period.id_at(now);
    let org_period_id = adjustment.org.as_ref().map(|org| org.period.id_at(now));
    let periods = std::iter::once(key_period_id.as_str()).chain(org_period_id.as_deref());
    // A refund a scope's `spent` cannot absorb, the key's first, or a
    // credit that would take a counter to 2^53, changes nothing.
    let mut key_spent = None;
    for (scope, period_id) in adjustment.scopes().zip(periods.clone()) {
        let (spent, reserved) = db.counter(scope.kind, &scope.id, period_id)?;
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
        db.move_counter(scope.kind, &scope.id, period_id, adjustment.amount, 0)?;
    }
    book_in(
        conn,
        &key_period_id,
        org_period_id.as_deref(),
        &LedgerEntry {
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
    )?;
    let key_spent = key_spent.unwrap_or_default();
    conn.prepare_cached(
        "INSERT INTO adjustments (exec_id, key_id, org_id, key_period_id, org_period_id,
             key_spent_usd_micros, forget_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(rusqlite::params![
        adjustment.exec_id,
        adjustment.key.id,
        org_id,
        key_period_id,
        org_period_id,
        key_spent,
        millis(now).saturating_add(rules.closed_ms),
    ])?;
    Ok(Ok(AdjustOutcome::Applied {
        key_period_id,
        org_period_id,
        key_spent,
        applied: true,
    }))
}

fn applied(conn: &Connection, exec_id: &str) -> Sql<Option<AppliedAdjustment>> {
    conn.prepare_cached(
        "SELECT key_id, org_id, key_period_id, org_period_id, key_spent_usd_micros
           FROM adjustments WHERE exec_id = ?1",
    )?
    .query_row([exec_id], |row| {
        Ok(AppliedAdjustment {
            key: row.get(0)?,
            org: row.get(1)?,
            key_period_id: row.get(2)?,
            org_period_id: row.get(3)?,
            key_spent: row.get(4)?,
        })
    })
    .optional()
}

/// Forgets the adjustments applied longer ago than the retry horizon.
pub(super) fn forget_adjustments(conn: &Connection, now: DateTime<Utc>) -> Sql<usize> {
    conn.prepare_cached("DELETE FROM adjustments WHERE forget_at <= ?1")?
        .execute([millis(now)])
}

/// Up to `limit` open reservations, oldest first (then by exec id).
///
/// Not a cached statement: an admin read now and then must not push the
/// calls' statements out of the connection's cache.
pub(super) fn open_holds(conn: &Connection, limit: usize) -> Sql<Vec<OpenHold>> {
    conn.prepare(
        "SELECT exec_id, key_id, org_id, amount_usd_micros, started_at, deadline, model, run_id
           FROM reservations WHERE state = 'open'
          ORDER BY started_at, exec_id LIMIT ?1",
    )?
    .query_map([limit_arg(limit)], |row| {
        Ok(OpenHold {
            exec_id: row.get(0)?,
            key: row.get(1)?,
            org: row.get(2)?,
            run: row
                .get::<_, Option<String>>(7)?
                .map(|id| run_id_of(&id).to_owned()),
            model: row.get::<_, Option<String>>(6)?.unwrap_or_default(),
            amount: row.get(3)?,
            started_at: from_millis(row.get(4)?),
            deadline: from_millis(row.get(5)?),
        })
    })?
    .collect()
}
