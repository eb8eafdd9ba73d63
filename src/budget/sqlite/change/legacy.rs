//! Journal format 1, as binaries wrote it before a reservation kept its
//! other caps: read back into today's changes, so a journal an earlier
//! binary left (a crash before its records were posted) is still replayed.
//! Postcard writes fields in order with no names, so format 1's rows and
//! ledger entries are their own types; every other change reads as it
//! did.

use serde::Deserialize;

use super::{Adjusted, Change, Entry, Row};
use crate::budget::{LedgerStatus, ScopeKind};
use crate::money::{UsdMicros, UsdMicrosDelta};

/// The first byte of a format 1 record.
pub(super) const FORMAT: u8 = 1;

/// A format 1 record's changes as today's.
pub(super) fn decode(changes: &[u8]) -> Result<Vec<Change>, String> {
    let changes: Vec<ChangeV1> = postcard::from_bytes(changes).map_err(|e| e.to_string())?;
    Ok(changes.into_iter().map(Change::from).collect())
}

/// [`Change`] in format 1: the same variants in the same order.
#[derive(Deserialize)]
enum ChangeV1 {
    Put(RowV1),
    Move {
        kind: ScopeKind,
        id: String,
        period: String,
        spent: UsdMicrosDelta,
        reserved: UsdMicrosDelta,
    },
    Book(EntryV1),
    Claim {
        claim: String,
        exec_id: String,
    },
    Release {
        claim: String,
        exec_id: String,
    },
    Run {
        id: String,
        cap: Option<UsdMicros>,
        at: i64,
    },
    ForgetRun {
        id: String,
    },
    Adjusted(Adjusted),
}

/// [`Row`] in format 1: without the caps, the token bound, a denial's
/// meter and the customer (none of which a format 1 reservation had).
#[derive(Deserialize)]
struct RowV1 {
    exec_id: String,
    state: String,
    key_id: String,
    key_period_id: String,
    key_cap: UsdMicros,
    org_id: Option<String>,
    org_period_id: Option<String>,
    org_cap: Option<UsdMicros>,
    amount: UsdMicros,
    claim: Option<String>,
    started_at: i64,
    deadline: i64,
    ttl_ms: i64,
    forget_at: Option<i64>,
    expiry_charged: Option<UsdMicros>,
    settled_status: Option<String>,
    settled_actual: Option<UsdMicros>,
    settled_key_remaining: Option<UsdMicros>,
    denied_scope_kind: Option<String>,
    denied_scope_id: Option<String>,
    denied_period: Option<String>,
    denied_cap: Option<UsdMicros>,
    denied_remaining: Option<UsdMicros>,
    denied_resets_at: Option<i64>,
    model: Option<String>,
    run_id: Option<String>,
}

/// [`Entry`] in format 1: without the customer.
#[derive(Deserialize)]
struct EntryV1 {
    exec_id: String,
    key: String,
    org: Option<String>,
    run: Option<String>,
    model: String,
    input: u64,
    cached_input: u64,
    cache_write: u64,
    output: u64,
    tool_calls: Option<String>,
    reserved: UsdMicros,
    actual: UsdMicrosDelta,
    status: LedgerStatus,
    at: i64,
    note: Option<String>,
    key_period: String,
    org_period: Option<String>,
}

impl From<EntryV1> for Entry {
    fn from(entry: EntryV1) -> Entry {
        Entry {
            exec_id: entry.exec_id,
            key: entry.key,
            org: entry.org,
            run: entry.run,
            model: entry.model,
            input: entry.input,
            cached_input: entry.cached_input,
            cache_write: entry.cache_write,
            output: entry.output,
            tool_calls: entry.tool_calls,
            reserved: entry.reserved,
            actual: entry.actual,
            status: entry.status,
            at: entry.at,
            note: entry.note,
            key_period: entry.key_period,
            org_period: entry.org_period,
            customer: None,
        }
    }
}

impl From<ChangeV1> for Change {
    fn from(change: ChangeV1) -> Change {
        match change {
            ChangeV1::Put(row) => Change::Put(Box::new(row.into())),
            ChangeV1::Move {
                kind,
                id,
                period,
                spent,
                reserved,
            } => Change::Move {
                kind,
                id,
                period,
                spent,
                reserved,
            },
            ChangeV1::Book(entry) => Change::Book(entry.into()),
            ChangeV1::Claim { claim, exec_id } => Change::Claim { claim, exec_id },
            ChangeV1::Release { claim, exec_id } => Change::Release { claim, exec_id },
            ChangeV1::Run { id, cap, at } => Change::Run { id, cap, at },
            ChangeV1::ForgetRun { id } => Change::ForgetRun { id },
            ChangeV1::Adjusted(adjusted) => Change::Adjusted(adjusted),
        }
    }
}

impl From<RowV1> for Row {
    fn from(row: RowV1) -> Row {
        Row {
            exec_id: row.exec_id,
            state: row.state,
            key_id: row.key_id,
            key_period_id: row.key_period_id,
            key_cap: row.key_cap,
            org_id: row.org_id,
            org_period_id: row.org_period_id,
            org_cap: row.org_cap,
            amount: row.amount,
            claim: row.claim,
            started_at: row.started_at,
            deadline: row.deadline,
            ttl_ms: row.ttl_ms,
            forget_at: row.forget_at,
            expiry_charged: row.expiry_charged,
            settled_status: row.settled_status,
            settled_actual: row.settled_actual,
            settled_key_remaining: row.settled_key_remaining,
            denied_scope_kind: row.denied_scope_kind,
            denied_scope_id: row.denied_scope_id,
            denied_period: row.denied_period,
            denied_cap: row.denied_cap,
            denied_remaining: row.denied_remaining,
            denied_resets_at: row.denied_resets_at,
            model: row.model,
            run_id: row.run_id,
            caps: None,
            tokens: None,
            denied_meter: None,
            customer: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Format 1's bytes, as an earlier binary wrote them, read back as
    /// today's changes.
    #[test]
    fn a_format_1_record_reads_as_todays_changes() {
        let row = Row {
            exec_id: "e1".into(),
            state: "open".into(),
            key_id: "alice".into(),
            key_period_id: "2026-12-07".into(),
            key_cap: 5,
            amount: 3,
            model: Some("gpt-4o-mini".into()),
            ..Row::default()
        };
        // Format 1's row is today's less its last four fields: postcard
        // writes each in order, so dropping them from today's encoding
        // (four `None`s, one byte each) is format 1's.
        let mut bytes = postcard::to_allocvec(&vec![
            Change::Put(Box::new(row.clone())),
            Change::Move {
                kind: ScopeKind::Key,
                id: "alice".into(),
                period: "2026-12-07".into(),
                spent: 0,
                reserved: 3,
            },
        ])
        .unwrap();
        let put_end = 1 + 1 + postcard::to_allocvec(&row).unwrap().len();
        bytes.drain(put_end - 4..put_end);
        let changes = decode(&bytes).unwrap();
        assert_eq!(changes[0], Change::Put(Box::new(row)));
        assert!(matches!(&changes[1], Change::Move { reserved: 3, .. }));
    }
}
