//! What the writer does to the file besides posting: forgetting closed
//! records and adjustments past their retry horizon, folding ledger entries past the
//! ledger's retention into their counters, and reading the books back
//! whole for `tollgate reconcile`.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use rusqlite::Connection;

#[cfg(test)]
use super::record::{invalid, status_from};
use super::record::{kind_from, millis};
#[cfg(test)]
use crate::budget::LedgerEntry;
use crate::budget::{reconciled, Reconciliation, ScopeKind};
#[cfg(test)]
use crate::hosted::ToolCalls;
#[cfg(test)]
use crate::usage::Usage;

type Sql<T> = rusqlite::Result<T>;

/// Drops the closed records whose retention has passed; returns their
/// exec ids. Both statements walk the index on `forget_at`; the delete is
/// one statement, not one per row.
pub(super) fn forget_due(conn: &Connection, now: DateTime<Utc>) -> Sql<Vec<String>> {
    let due: Vec<String> = conn
        .prepare_cached("SELECT exec_id FROM reservations WHERE forget_at <= ?1")?
        .query_map([millis(now)], |row| row.get(0))?
        .collect::<Sql<_>>()?;
    if !due.is_empty() {
        conn.prepare_cached("DELETE FROM reservations WHERE forget_at <= ?1")?
            .execute([millis(now)])?;
    }
    Ok(due)
}

/// Forgets the adjustments applied longer ago than the retry horizon.
pub(super) fn forget_adjustments(conn: &Connection, now: DateTime<Utc>) -> Sql<usize> {
    conn.prepare_cached("DELETE FROM adjustments WHERE forget_at <= ?1")?
        .execute([millis(now)])
}

/// Moves the ledger entries booked before `cutoff` into the folded sums of
/// the counters they charged, and deletes them.
///
/// The one writer books entries in time order, so those before the cutoff
/// are the ones before the first entry at or after it, in `seq` order:
/// found by reading from the oldest, with no index on `at` for every
/// settle to add to. An entry booked after the clock stepped back waits
/// for the next fold past the entries before it.
pub(super) fn fold_before(conn: &Connection, cutoff: DateTime<Utc>) -> Sql<usize> {
    let end: i64 = conn
        .prepare_cached(
            "SELECT COALESCE(
                 (SELECT seq FROM ledger WHERE at >= ?1 ORDER BY seq LIMIT 1),
                 (SELECT MAX(seq) + 1 FROM ledger),
                 0)",
        )?
        .query_row([rfc3339(cutoff)], |row| row.get(0))?;
    for (kind, id, period) in [
        ("key", "key", "key_period_id"),
        ("org", "org", "org_period_id"),
    ] {
        conn.prepare_cached(&format!(
            "INSERT INTO counters (scope_kind, scope_id, period_id, folded_usd_micros)
             SELECT '{kind}', {id}, {period}, SUM(actual_usd_micros) FROM ledger
              WHERE seq < ?1 AND {id} IS NOT NULL GROUP BY {id}, {period}
             ON CONFLICT (scope_kind, scope_id, period_id) DO UPDATE SET
                 folded_usd_micros = folded_usd_micros + excluded.folded_usd_micros"
        ))?
        .execute([end])?;
    }
    conn.prepare_cached("DELETE FROM ledger WHERE seq < ?1")?
        .execute([end])
}

/// Forgets the rate limits' counters (`<minute>/<meter>`) of minutes before
/// `cutoff` (a minute id) that hold nothing open: nothing reads them once
/// their minute is over. The partial index on these counters' period ids
/// holds them in minute order (`<minute>/…` sorts after `<minute>` and
/// before the next minute), so the sweep reads only the past ones.
pub(super) fn forget_windows(conn: &Connection, cutoff: &str) -> Sql<usize> {
    conn.prepare_cached(
        "DELETE FROM counters INDEXED BY counters_rate_windows
          WHERE (period_id LIKE '%/requests' OR period_id LIKE '%/tokens')
            AND period_id < ?1
            AND reserved_usd_micros = 0",
    )?
    .execute([cutoff])
}

/// Every scope and period with its counter, folded sum, ledger sum and
/// open sum, sorted by scope and period.
pub(super) fn reconcile(conn: &Connection) -> Sql<Vec<Reconciliation>> {
    let mut rows = Rows::default();
    let mut counters = conn.prepare(
        "SELECT scope_kind, scope_id, period_id, spent_usd_micros + reserved_usd_micros,
                folded_usd_micros FROM counters",
    )?;
    let mut found = counters.query([])?;
    while let Some(found) = found.next()? {
        let r = rows.get(
            kind_from(&found.get::<_, String>(0)?)?,
            found.get(1)?,
            found.get(2)?,
        );
        r.counter = found.get(3)?;
        r.folded = found.get(4)?;
    }
    for (kind, id, period) in [
        (ScopeKind::Key, "key", "key_period_id"),
        (ScopeKind::Org, "org", "org_period_id"),
    ] {
        let mut ledger = conn.prepare(&format!(
            "SELECT {id}, {period}, SUM(actual_usd_micros) FROM ledger
              WHERE {id} IS NOT NULL GROUP BY {id}, {period}"
        ))?;
        let mut found = ledger.query([])?;
        while let Some(found) = found.next()? {
            rows.get(kind, found.get(0)?, found.get(1)?).ledger = found.get(2)?;
        }
    }
    for (kind, id, period) in [
        (ScopeKind::Key, "key_id", "key_period_id"),
        (ScopeKind::Org, "org_id", "org_period_id"),
    ] {
        let mut open = conn.prepare(&format!(
            "SELECT {id}, {period}, SUM(amount_usd_micros) FROM reservations
              WHERE state = 'open' AND {id} IS NOT NULL GROUP BY {id}, {period}"
        ))?;
        let mut found = open.query([])?;
        while let Some(found) = found.next()? {
            rows.get(kind, found.get(0)?, found.get(1)?).open = found.get(2)?;
        }
    }
    rows.0
        .retain(|(kind, _, period_id), _| reconciled(*kind, period_id));
    Ok(rows.0.into_values().collect())
}

/// Reconciliation rows by scope and period, in order.
#[derive(Default)]
struct Rows(BTreeMap<(ScopeKind, String, String), Reconciliation>);

impl Rows {
    fn get(&mut self, kind: ScopeKind, id: String, period_id: String) -> &mut Reconciliation {
        self.0
            .entry((kind, id.clone(), period_id.clone()))
            .or_insert_with(|| Reconciliation {
                kind,
                id,
                period_id,
                counter: 0,
                folded: 0,
                ledger: 0,
                open: 0,
            })
    }
}

/// Every ledger entry not yet folded, oldest first.
#[cfg(test)]
pub(super) fn ledger(conn: &Connection) -> Sql<Vec<LedgerEntry>> {
    let mut statement = conn.prepare(
        "SELECT exec_id, key, org, model, input_tokens, cached_input_tokens, cache_write_tokens,
                output_tokens, tool_calls, reserved_usd_micros, actual_usd_micros, status, at, note,
                run, customer
           FROM ledger ORDER BY seq",
    )?;
    let entries = statement.query_map([], |row| {
        let at: String = row.get(12)?;
        Ok(LedgerEntry {
            exec_id: row.get(0)?,
            key: row.get(1)?,
            org: row.get(2)?,
            run: row.get(14)?,
            customer: row.get(15)?,
            model: row.get(3)?,
            usage: Usage {
                input: row.get(4)?,
                cached_input: row.get(5)?,
                cache_write: row.get(6)?,
                output: row.get(7)?,
                tool_calls: tool_calls_from(row.get::<_, Option<String>>(8)?.as_deref())?,
                ..Usage::default()
            },
            reserved: row.get(9)?,
            actual: row.get(10)?,
            status: status_from(&row.get::<_, String>(11)?)?,
            at: DateTime::parse_from_rfc3339(&at)
                .map_err(|e| invalid(e.to_string()))?
                .with_timezone(&Utc),
            note: row.get(13)?,
        })
    })?;
    entries.collect()
}

#[cfg(test)]
fn tool_calls_from(text: Option<&str>) -> Sql<ToolCalls> {
    let mut calls = ToolCalls::NONE;
    let Some(text) = text else {
        return Ok(calls);
    };
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    for (name, count) in map {
        let tool =
            crate::hosted::HostedTool::from_name(&name).ok_or_else(|| invalid(name.clone()))?;
        calls.set(tool, count.as_u64().unwrap_or(0));
    }
    Ok(calls)
}

pub(super) fn limit_arg(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The ledger's time format: sorts as text in time order, and reads as a
/// time to a person and to SQLite's date functions.
pub(super) fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `now - retention`, or the start of time.
pub(super) fn before(now: DateTime<Utc>, retention: TimeDelta) -> DateTime<Utc> {
    now.checked_sub_signed(retention)
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}
