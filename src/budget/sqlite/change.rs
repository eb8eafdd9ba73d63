//! One change to the books, as the journal keeps it and as posting writes
//! it into the file's tables. A call's decision (`books`, on the `desk`)
//! is a list of these: nothing here decides, it only records what was
//! decided, so posting it once is all the file needs to agree with the
//! answers given.
//!
//! The journal keeps a decision as a format byte ([`FORMAT`]) and the list
//! in `postcard`, a compact binary serde format: field by field in
//! declaration order, integers as varints. It is a tenth of the
//! instructions JSON took to write and read back, and a third of the
//! bytes. A change to these types is a new format, which a binary must
//! still read when it opens a journal an earlier one left.

mod legacy;

use hashbrown::HashMap;

use rusqlite::{CachedStatement, Connection, Statement};
use serde::{Deserialize, Serialize};

use super::record::{from_millis, millis};
use super::upkeep::rfc3339;
use super::writer::Db;
use crate::budget::aggregates::{calls_of, day_of};
use crate::budget::caps::customer_scope_id;
use crate::budget::{LedgerEntry, LedgerStatus, ScopeKind, SpendRow};
use crate::hosted::ToolCalls;
use crate::money::{UsdMicros, UsdMicrosDelta};

type Sql<T> = rusqlite::Result<T>;

/// The journal format of [`encode`]: the first byte of every record.
/// Format 1, written before reservations kept their other caps, is still
/// read ([`legacy`]).
const FORMAT: u8 = 2;

/// A decision as the journal keeps it, written into `record` (whose room
/// is kept from call to call).
pub(super) fn encode(changes: &[Change], record: &mut Vec<u8>) -> Result<(), String> {
    record.clear();
    record.push(FORMAT);
    *record = postcard::to_extend(changes, std::mem::take(record)).map_err(|e| e.to_string())?;
    Ok(())
}

/// A decision read back from the journal.
pub(super) fn decode(bytes: &[u8]) -> Result<Vec<Change>, String> {
    match bytes.split_first() {
        Some((&FORMAT, changes)) => postcard::from_bytes(changes).map_err(|e| e.to_string()),
        Some((&legacy::FORMAT, changes)) => legacy::decode(changes),
        Some((format, _)) => Err(format!(
            "journal format {format}, which this binary does not read (it reads {} and {FORMAT})",
            legacy::FORMAT
        )),
        None => Err("an empty journal record".to_owned()),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Change {
    /// A call's `reservations` row as it now stands: open, denied,
    /// settled or expired (boxed: the other changes are a tenth its size;
    /// postcard writes a box as what it holds).
    Put(Box<Row>),
    /// One counter moved by signed amounts, never below zero.
    Move {
        kind: ScopeKind,
        id: String,
        period: String,
        spent: UsdMicrosDelta,
        reserved: UsdMicrosDelta,
    },
    /// A ledger entry, added to its day's spend aggregate.
    Book(Entry),
    /// An open reservation took an idempotency claim.
    Claim { claim: String, exec_id: String },
    /// A reservation that closed let go of its claim (unless a later one
    /// holds it now).
    Release { claim: String, exec_id: String },
    /// A run's reserve or settle; the first one fixes its cap.
    Run {
        id: String,
        cap: Option<UsdMicros>,
        at: i64,
    },
    /// An idle run forgotten, with its counter.
    ForgetRun { id: String },
    /// An operator's adjustment, remembered for its retries.
    Adjusted(Adjusted),
    /// A call of a key's customer; remembered with its last call.
    Customer {
        key: String,
        customer: String,
        at: i64,
    },
    /// An idle customer forgotten, with its counters.
    ForgetCustomer { key: String, customer: String },
}

/// A `reservations` row, column for column (`schema`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Row {
    pub exec_id: String,
    /// `open` | `settled` | `expired` | `denied`.
    pub state: String,
    pub key_id: String,
    pub key_period_id: String,
    pub key_cap: UsdMicros,
    pub org_id: Option<String>,
    pub org_period_id: Option<String>,
    pub org_cap: Option<UsdMicros>,
    pub amount: UsdMicros,
    pub claim: Option<String>,
    pub started_at: i64,
    pub deadline: i64,
    pub ttl_ms: i64,
    pub forget_at: Option<i64>,
    pub expiry_charged: Option<UsdMicros>,
    pub settled_status: Option<String>,
    pub settled_actual: Option<UsdMicros>,
    pub settled_key_remaining: Option<UsdMicros>,
    pub denied_scope_kind: Option<String>,
    pub denied_scope_id: Option<String>,
    pub denied_period: Option<String>,
    pub denied_cap: Option<UsdMicros>,
    pub denied_remaining: Option<UsdMicros>,
    pub denied_resets_at: Option<i64>,
    pub model: Option<String>,
    pub run_id: Option<String>,
    /// The other caps it holds, one `kind meter period_id cap id` a line.
    pub caps: Option<String>,
    pub tokens: Option<u64>,
    pub denied_meter: Option<String>,
    /// The customer id the call named.
    pub customer: Option<String>,
}

/// The columns of a [`Row`], in its order.
pub(super) const ROW_COLUMNS: &str = "exec_id, state, key_id, key_period_id, key_cap_usd_micros, \
     org_id, org_period_id, org_cap_usd_micros, amount_usd_micros, claim, started_at, deadline, \
     ttl_ms, forget_at, expiry_charged_usd_micros, settled_status, settled_actual_usd_micros, \
     settled_key_remaining_usd_micros, denied_scope_kind, denied_scope_id, denied_period, \
     denied_cap_usd_micros, denied_remaining_usd_micros, denied_resets_at, model, run_id, caps, \
     tokens, denied_meter, customer";

impl Row {
    /// The row read with [`ROW_COLUMNS`].
    pub(super) fn from_sql(row: &rusqlite::Row<'_>) -> Sql<Row> {
        Ok(Row {
            exec_id: row.get(0)?,
            state: row.get(1)?,
            key_id: row.get(2)?,
            key_period_id: row.get(3)?,
            key_cap: row.get(4)?,
            org_id: row.get(5)?,
            org_period_id: row.get(6)?,
            org_cap: row.get(7)?,
            amount: row.get(8)?,
            claim: row.get(9)?,
            started_at: row.get(10)?,
            deadline: row.get(11)?,
            ttl_ms: row.get(12)?,
            forget_at: row.get(13)?,
            expiry_charged: row.get(14)?,
            settled_status: row.get(15)?,
            settled_actual: row.get(16)?,
            settled_key_remaining: row.get(17)?,
            denied_scope_kind: row.get(18)?,
            denied_scope_id: row.get(19)?,
            denied_period: row.get(20)?,
            denied_cap: row.get(21)?,
            denied_remaining: row.get(22)?,
            denied_resets_at: row.get(23)?,
            model: row.get(24)?,
            run_id: row.get(25)?,
            caps: row.get(26)?,
            tokens: row.get(27)?,
            denied_meter: row.get(28)?,
            customer: row.get(29)?,
        })
    }

    /// Writes the row with `put`, a statement of [`PUT`].
    fn put(&self, put: &mut Statement<'_>) -> Sql<()> {
        put.execute(rusqlite::params![
            self.exec_id,
            self.state,
            self.key_id,
            self.key_period_id,
            self.key_cap,
            self.org_id,
            self.org_period_id,
            self.org_cap,
            self.amount,
            self.claim,
            self.started_at,
            self.deadline,
            self.ttl_ms,
            self.forget_at,
            self.expiry_charged,
            self.settled_status,
            self.settled_actual,
            self.settled_key_remaining,
            self.denied_scope_kind,
            self.denied_scope_id,
            self.denied_period,
            self.denied_cap,
            self.denied_remaining,
            self.denied_resets_at,
            self.model,
            self.run_id,
            self.caps,
            self.tokens,
            self.denied_meter,
            self.customer,
        ])?;
        Ok(())
    }
}

/// A row is inserted, or updated in place where one exists: cheaper than
/// `INSERT OR REPLACE`, which deletes the row and its index entries first.
/// Only what closing a record changes is updated.
const PUT: &str = "INSERT INTO reservations (exec_id, state, key_id, key_period_id, \
     key_cap_usd_micros, org_id, org_period_id, org_cap_usd_micros, amount_usd_micros, claim, \
     started_at, deadline, ttl_ms, forget_at, expiry_charged_usd_micros, settled_status, \
     settled_actual_usd_micros, settled_key_remaining_usd_micros, denied_scope_kind, \
     denied_scope_id, denied_period, denied_cap_usd_micros, denied_remaining_usd_micros, \
     denied_resets_at, model, run_id, caps, tokens, denied_meter, customer)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
     ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)
     ON CONFLICT (exec_id) DO UPDATE SET state = excluded.state, forget_at = excluded.forget_at, \
     expiry_charged_usd_micros = excluded.expiry_charged_usd_micros, \
     settled_status = excluded.settled_status, \
     settled_actual_usd_micros = excluded.settled_actual_usd_micros, \
     settled_key_remaining_usd_micros = excluded.settled_key_remaining_usd_micros";

/// Adds an [`Entry`] to the ledger.
const BOOK: &str = "INSERT INTO ledger (exec_id, key, org, model, input_tokens, \
     cached_input_tokens, cache_write_tokens, output_tokens, tool_calls, reserved_usd_micros, \
     actual_usd_micros, status, at, key_period_id, org_period_id, note, run, customer)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)";

/// A `ledger` row, with the periods it charged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Entry {
    pub exec_id: String,
    pub key: String,
    pub org: Option<String>,
    /// The run id the client named, without its key.
    pub run: Option<String>,
    pub model: String,
    pub input: u64,
    pub cached_input: u64,
    pub cache_write: u64,
    pub output: u64,
    /// `{"web_search": 2}`, as the ledger keeps it.
    pub tool_calls: Option<String>,
    pub reserved: UsdMicros,
    pub actual: UsdMicrosDelta,
    pub status: LedgerStatus,
    /// Unix milliseconds.
    pub at: i64,
    pub note: Option<String>,
    pub key_period: String,
    pub org_period: Option<String>,
    /// The customer id the call named.
    pub customer: Option<String>,
}

impl Entry {
    /// The row of `entry`, which charged the key in `key_period` and its
    /// org in `org_period`.
    pub(super) fn of(entry: LedgerEntry, key_period: &str, org_period: Option<&str>) -> Entry {
        Entry {
            tool_calls: tool_calls_json(&entry.usage.tool_calls),
            exec_id: entry.exec_id,
            key: entry.key,
            org: entry.org,
            run: entry.run,
            model: entry.model,
            input: entry.usage.input,
            cached_input: entry.usage.cached_input,
            cache_write: entry.usage.cache_write,
            output: entry.usage.output,
            reserved: entry.reserved,
            actual: entry.actual,
            status: entry.status,
            at: millis(entry.at),
            note: entry.note,
            key_period: key_period.to_owned(),
            org_period: org_period.map(str::to_owned),
            customer: entry.customer,
        }
    }

    /// Adds the entry to the ledger with `book`, a statement of [`BOOK`].
    fn book(&self, book: &mut Statement<'_>) -> Sql<()> {
        book.execute(rusqlite::params![
            self.exec_id,
            self.key,
            self.org,
            self.model,
            self.input,
            self.cached_input,
            self.cache_write,
            self.output,
            self.tool_calls,
            self.reserved,
            self.actual,
            self.status.as_str(),
            rfc3339(from_millis(self.at)),
            self.key_period,
            self.org_period,
            self.note,
            self.run,
            self.customer,
        ])?;
        Ok(())
    }

    /// What the entry adds to its spend aggregate row.
    fn spend(&self) -> SpendRow {
        SpendRow {
            day: day_of(from_millis(self.at)),
            key: self.key.clone(),
            org: self.org.clone(),
            run: self.run.clone().unwrap_or_default(),
            customer: self.customer.clone().unwrap_or_default(),
            model: self.model.clone(),
            calls: calls_of(self.status),
            input_tokens: self.input,
            cached_input_tokens: self.cached_input,
            cache_write_tokens: self.cache_write,
            output_tokens: self.output,
            cost_usd_micros: self.actual,
        }
    }
}

/// `{"web_search": 2}`, or `None` for a call that used no hosted tool.
fn tool_calls_json(calls: &ToolCalls) -> Option<String> {
    if calls.is_empty() {
        return None;
    }
    let map: serde_json::Map<String, serde_json::Value> = calls
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|(tool, count)| (tool.name().to_owned(), count.into()))
        .collect();
    Some(serde_json::Value::Object(map).to_string())
}

/// An `adjustments` row: an operator's adjustment as its retries read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Adjusted {
    pub exec_id: String,
    pub key_id: String,
    pub org_id: Option<String>,
    pub key_period_id: String,
    pub org_period_id: Option<String>,
    pub key_spent: UsdMicros,
    pub forget_at: i64,
}

/// Writes the changes of one batch into the file, in the open
/// transaction, in their order. A row put more than once is written as it
/// last stood (a call reserved and settled between two postings is one
/// insert), and the batch's ledger entries are added to their spend
/// aggregates one row at a time.
pub(super) fn post<'a>(
    db: &mut Db<'_>,
    changes: impl Iterator<Item = &'a Change> + Clone,
) -> Sql<()> {
    let mut last_put: HashMap<&str, usize> = HashMap::new();
    for (at, change) in changes.clone().enumerate() {
        if let Change::Put(row) = change {
            last_put.insert(&row.exec_id, at);
        }
    }
    let mut spend: HashMap<(String, String, String, String, String), SpendRow> = HashMap::new();
    // Each prepared once for the whole batch: finding a cached statement
    // hashes its text.
    let conn = db.conn();
    let (mut put, mut book) = (None, None);
    for (at, change) in changes.enumerate() {
        match change {
            Change::Put(row) => {
                if last_put.get(row.exec_id.as_str()) == Some(&at) {
                    row.put(prepared(&mut put, conn, PUT)?)?;
                }
            }
            Change::Move {
                kind,
                id,
                period,
                spent,
                reserved,
            } => db.move_counter(*kind, id, period, *spent, *reserved)?,
            Change::Book(entry) => {
                entry.book(prepared(&mut book, conn, BOOK)?)?;
                let row = entry.spend();
                let key = (
                    row.day.clone(),
                    row.key.clone(),
                    row.run.clone(),
                    row.customer.clone(),
                    row.model.clone(),
                );
                match spend.get_mut(&key) {
                    Some(sum) => sum.merge(&row),
                    None => {
                        spend.insert(key, row);
                    }
                }
            }
            Change::Claim { claim, exec_id } => {
                db.conn()
                    .prepare_cached(
                        "INSERT OR REPLACE INTO claims (claim, exec_id) VALUES (?1, ?2)",
                    )?
                    .execute((claim, exec_id))?;
            }
            Change::Release { claim, exec_id } => {
                db.conn()
                    .prepare_cached("DELETE FROM claims WHERE claim = ?1 AND exec_id = ?2")?
                    .execute((claim, exec_id))?;
            }
            Change::Run { id, cap, at } => {
                db.conn()
                    .prepare_cached(
                        "INSERT INTO runs (id, cap_usd_micros, last_used) VALUES (?1, ?2, ?3)
                         ON CONFLICT (id) DO UPDATE SET last_used = MAX(last_used, excluded.last_used)",
                    )?
                    .execute((id, cap, at))?;
            }
            Change::ForgetRun { id } => {
                db.conn()
                    .prepare_cached("DELETE FROM runs WHERE id = ?1")?
                    .execute([id])?;
                db.forget_counter(ScopeKind::Run, id, "total")?;
            }
            Change::Customer { key, customer, at } => {
                db.conn()
                    .prepare_cached(
                        "INSERT INTO customers (key, customer, last_call) VALUES (?1, ?2, ?3)
                         ON CONFLICT (key, customer) DO UPDATE
                         SET last_call = MAX(last_call, excluded.last_call)",
                    )?
                    .execute((key, customer, at))?;
            }
            Change::ForgetCustomer { key, customer } => {
                db.conn()
                    .prepare_cached("DELETE FROM customers WHERE key = ?1 AND customer = ?2")?
                    .execute((key, customer))?;
                db.forget_scope(ScopeKind::Customer, &customer_scope_id(key, customer))?;
            }
            Change::Adjusted(adjusted) => {
                db.conn()
                    .prepare_cached(
                        "INSERT INTO adjustments (exec_id, key_id, org_id, key_period_id,
                             org_period_id, key_spent_usd_micros, forget_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )?
                    .execute(rusqlite::params![
                        adjusted.exec_id,
                        adjusted.key_id,
                        adjusted.org_id,
                        adjusted.key_period_id,
                        adjusted.org_period_id,
                        adjusted.key_spent,
                        adjusted.forget_at,
                    ])?;
            }
        }
    }
    let mut rows: Vec<SpendRow> = spend.into_values().collect();
    // The primary key's order: neighbouring rows, neighbouring pages.
    rows.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    for row in &rows {
        super::aggregates::add(db.conn(), row)?;
    }
    Ok(())
}

/// The statement of `sql` in `slot`, prepared on first use.
fn prepared<'s, 'c>(
    slot: &'s mut Option<CachedStatement<'c>>,
    conn: &'c Connection,
    sql: &str,
) -> Sql<&'s mut CachedStatement<'c>> {
    match slot {
        Some(statement) => Ok(statement),
        None => Ok(slot.insert(conn.prepare_cached(sql)?)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Every kind of change reads back from the journal as it was written;
    /// a record of another format is refused, not misread.
    #[test]
    fn a_decision_reads_back_from_its_record_and_no_other_format_does() {
        let changes = vec![
            Change::Put(Box::new(Row {
                exec_id: "call-1".to_owned(),
                state: "open".to_owned(),
                key_id: "alice".to_owned(),
                key_period_id: "2026-12-02".to_owned(),
                key_cap: 9_000,
                org_id: Some("acme".to_owned()),
                amount: 1_200,
                started_at: 1_000,
                deadline: 61_000,
                ttl_ms: 60_000,
                model: Some("gpt-4o-mini".to_owned()),
                ..Row::default()
            })),
            Change::Move {
                kind: ScopeKind::Org,
                id: "acme".to_owned(),
                period: "2026-12".to_owned(),
                spent: -4,
                reserved: 1_200,
            },
            Change::Book(Entry {
                exec_id: "call-1".to_owned(),
                key: "alice".to_owned(),
                org: None,
                customer: Some("c1@example.com".to_owned()),
                run: Some("r1".to_owned()),
                model: "gpt-4o-mini".to_owned(),
                input: 10,
                cached_input: 2,
                cache_write: 0,
                output: 5,
                tool_calls: Some(r#"{"web_search":1}"#.to_owned()),
                reserved: 1_200,
                actual: -300,
                status: LedgerStatus::Late,
                at: 2_000,
                note: None,
                key_period: "2026-12-02".to_owned(),
                org_period: None,
            }),
            Change::Claim {
                claim: "idem".to_owned(),
                exec_id: "call-1".to_owned(),
            },
            Change::Release {
                claim: "idem".to_owned(),
                exec_id: "call-1".to_owned(),
            },
            Change::Run {
                id: "alice/r1".to_owned(),
                cap: None,
                at: 3_000,
            },
            Change::ForgetRun {
                id: "alice/r1".to_owned(),
            },
            Change::Adjusted(Adjusted {
                exec_id: "adj-1".to_owned(),
                key_id: "alice".to_owned(),
                org_id: None,
                key_period_id: "2026-12-02".to_owned(),
                org_period_id: None,
                key_spent: 77,
                forget_at: 4_000,
            }),
        ];
        let mut bytes = Vec::new();
        encode(&changes, &mut bytes).unwrap();
        assert_eq!(decode(&bytes).unwrap(), changes);
        let mut other = bytes.clone();
        other[0] = FORMAT + 1;
        assert!(decode(&other).unwrap_err().contains("journal format"));
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
