//! Reading a tag's books: its ledger stream, its open reservations (counted,
//! or listed for the admin API), and the reconciliation of its counters
//! against both (`tollgate reconcile`).
//!
//! Reconciliation must not report drift that is only a race with live
//! traffic, so it reads one consistent cut: `snapshot.lua` returns the
//! counters, the open reservations and the newest ledger id at one instant;
//! the ledger is then paged up to that id. Only a ledger trim in between
//! could spoil the cut, and trims bump the `folds` counter, so the read
//! starts again when it changed.

use std::collections::BTreeMap;

use chrono::DateTime;
use serde::Deserialize;

use super::connection::{CallPolicy, Connection, Request};
use super::scripts::{ledger_status, store_time, Scripts, TagKeys};
use crate::budget::{
    reconciled, run_id_of, LedgerEntry, OpenHold, Reconciliation, ScopeKind, StoreError,
};
use crate::money::{UsdMicros, UsdMicrosDelta};
use crate::usage::Usage;

/// Ledger entries read per round trip.
const LEDGER_PAGE: usize = 1_000;
/// Consistent cuts tried before reconciliation gives up on a tag whose
/// ledger keeps being trimmed under it.
const RECONCILE_ATTEMPTS: usize = 5;
/// The spend hash field counting ledger trims.
const FOLDS_FIELD: &str = "folds";

/// The fields of a reservation record (`lua/common.lua`) that reading the
/// books needs.
#[derive(Default, Deserialize)]
pub(super) struct Record {
    pub s: String,
    #[serde(default)]
    pub a: Option<String>,
    #[serde(default)]
    pub k: Option<String>,
    #[serde(default)]
    pub kp: Option<String>,
    #[serde(default)]
    pub o: Option<String>,
    #[serde(default)]
    pub op: Option<String>,
    /// The run's scope id, `<key>/<run>`.
    #[serde(default)]
    pub r: Option<String>,
    /// Deadline (ms).
    #[serde(default)]
    pub d: Option<String>,
    /// TTL (ms): the deadline less this is when it was reserved.
    #[serde(default)]
    pub ttl: Option<String>,
    /// The call's model; absent when none was given, and in records
    /// written before the field existed.
    #[serde(default)]
    pub m: Option<String>,
}

impl Record {
    /// A record as the scripts store it: JSON, or a settled record's
    /// `settled|k|o|a|st|act|rem|by` (`encode_settled` in `lua/common.lua`).
    pub fn parse(raw: &str) -> Result<Record, StoreError> {
        let unreadable =
            |why: String| StoreError::Unavailable(format!("unreadable reservation record: {why}"));
        if raw.starts_with('{') {
            return serde_json::from_str(raw).map_err(|error| unreadable(error.to_string()));
        }
        let fields: Vec<&str> = raw.split('|').collect();
        let [s @ "settled", k, o, a, ..] = fields[..] else {
            return Err(unreadable(format!(
                "{raw:?} is neither JSON nor a settled record"
            )));
        };
        let text = |value: &str| Some(value.to_owned());
        Ok(Record {
            s: s.to_owned(),
            a: text(a),
            k: text(k),
            o: (!o.is_empty()).then(|| o.to_owned()),
            ..Record::default()
        })
    }

    fn is_open(&self) -> bool {
        self.s == "open"
    }

    fn amount(&self) -> UsdMicros {
        self.a.as_deref().and_then(|a| a.parse().ok()).unwrap_or(0)
    }

    /// An open reservation as the admin API lists it; reserved at its
    /// deadline less its TTL.
    fn hold(self, exec_id: String) -> Result<OpenHold, StoreError> {
        let ms = |value: &Option<String>| -> Result<i64, StoreError> {
            value
                .as_deref()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    StoreError::Unavailable(format!(
                        "reservation record {exec_id} lacks its deadline or TTL"
                    ))
                })
        };
        let deadline = ms(&self.d)?;
        let started = deadline.saturating_sub(ms(&self.ttl)?);
        let run = self.r.as_deref().map(|r| run_id_of(r).to_owned());
        Ok(OpenHold {
            amount: self.amount(),
            key: self.k.unwrap_or_default(),
            org: self.o,
            run,
            model: self.m.unwrap_or_default(),
            started_at: store_time(started)?,
            deadline: store_time(deadline)?,
            exec_id,
        })
    }
}

/// A ledger entry with the period ids it charged.
pub(super) struct LedgerLine {
    pub entry: LedgerEntry,
    pub key_period: String,
    pub org_period: Option<String>,
}

fn unreadable_entry(id: &str) -> StoreError {
    StoreError::Unavailable(format!("unreadable ledger entry {id}"))
}

fn parse_entry(id: &str, fields: Vec<String>) -> Result<LedgerLine, StoreError> {
    let mut map = BTreeMap::new();
    let mut pairs = fields.into_iter();
    while let (Some(name), Some(value)) = (pairs.next(), pairs.next()) {
        map.insert(name, value);
    }
    let text = |name: &str| map.get(name).cloned().ok_or_else(|| unreadable_entry(id));
    let number = |name: &str| -> Result<u64, StoreError> {
        text(name)?.parse().map_err(|_| unreadable_entry(id))
    };
    let at_ms: i64 = text("at")?.parse().map_err(|_| unreadable_entry(id))?;
    let entry = LedgerEntry {
        exec_id: text("exec")?,
        key: text("key")?,
        org: map.get("org").cloned(),
        run: map.get("run").cloned(),
        customer: map.get("cust").cloned(),
        model: text("model")?,
        usage: Usage {
            input: number("in")?,
            cached_input: number("cin")?,
            cache_write: number("cw")?,
            output: number("out")?,
            // The Redis ledger keeps token counts only; hosted tool fees
            // are in the entry's actual cost.
            ..Usage::default()
        },
        reserved: number("res")?,
        actual: text("act")?.parse().map_err(|_| unreadable_entry(id))?,
        status: ledger_status(&text("st")?).ok_or_else(|| unreadable_entry(id))?,
        at: store_time(at_ms).unwrap_or(DateTime::UNIX_EPOCH),
        note: map.get("note").cloned(),
    };
    Ok(LedgerLine {
        entry,
        key_period: text("kp")?,
        org_period: map.get("op").cloned(),
    })
}

/// The tag's ledger, oldest first, up to and including entry `until`
/// (everything when `None`).
pub(super) async fn read_ledger(
    connection: &Connection,
    policy: CallPolicy,
    keys: &TagKeys,
    until: Option<&str>,
) -> Result<Vec<LedgerLine>, StoreError> {
    let end = until.unwrap_or("+");
    let mut start = "-".to_owned();
    let mut lines = Vec::new();
    loop {
        let mut xrange = ::redis::cmd("XRANGE");
        xrange
            .arg(keys.ledger())
            .arg(&start)
            .arg(end)
            .arg("COUNT")
            .arg(LEDGER_PAGE);
        let page: Vec<(String, Vec<String>)> = connection
            .call(policy, "read the ledger", Request::Command(&xrange))
            .await?;
        let full = page.len() == LEDGER_PAGE;
        for (id, fields) in page {
            lines.push(parse_entry(&id, fields)?);
            start = format!("({id}");
        }
        if !full {
            return Ok(lines);
        }
    }
}

/// How many reservations are open under the tag and the sum of their
/// amounts.
pub(super) async fn open_reservations(
    connection: &Connection,
    policy: CallPolicy,
    keys: &TagKeys,
) -> Result<(usize, UsdMicros), StoreError> {
    let open = open_records(connection, policy, keys).await?;
    let sum = open.iter().fold(0, |sum: UsdMicros, (_, record)| {
        sum.saturating_add(record.amount())
    });
    Ok((open.len(), sum))
}

/// Every reservation open under the tag, in no particular order.
pub(super) async fn open_holds(
    connection: &Connection,
    policy: CallPolicy,
    keys: &TagKeys,
) -> Result<Vec<OpenHold>, StoreError> {
    open_records(connection, policy, keys)
        .await?
        .into_iter()
        .map(|(exec_id, record)| record.hold(exec_id))
        .collect()
}

/// The exec ids and records of the reservations open under the tag.
async fn open_records(
    connection: &Connection,
    policy: CallPolicy,
    keys: &TagKeys,
) -> Result<Vec<(String, Record)>, StoreError> {
    let mut zrange = ::redis::cmd("ZRANGE");
    zrange.arg(keys.pending()).arg(0).arg(-1);
    let exec_ids: Vec<String> = connection
        .call(policy, "list open reservations", Request::Command(&zrange))
        .await?;
    let mut open = Vec::new();
    for chunk in exec_ids.chunks(LEDGER_PAGE) {
        let mut hmget = ::redis::cmd("HMGET");
        hmget.arg(keys.res()).arg(chunk);
        let records: Vec<Option<String>> = connection
            .call(policy, "read open reservations", Request::Command(&hmget))
            .await?;
        for (exec_id, raw) in chunk.iter().zip(records) {
            let Some(raw) = raw else { continue };
            let record = Record::parse(&raw)?;
            // Settled or expired between the two reads: no longer open.
            if record.is_open() {
                open.push((exec_id.clone(), record));
            }
        }
    }
    Ok(open)
}

/// Every scope and period under the tag, from one consistent cut.
pub(super) async fn reconcile(
    connection: &Connection,
    scripts: &Scripts,
    policy: CallPolicy,
    keys: &TagKeys,
) -> Result<Vec<Reconciliation>, StoreError> {
    for _ in 0..RECONCILE_ATTEMPTS {
        let mut snapshot = scripts.snapshot.prepare_invoke();
        for key in keys.all() {
            snapshot.key(key);
        }
        let (spend, open, last_id): (Vec<String>, Vec<String>, String) = connection
            .call(policy, "snapshot the books", Request::Script(&snapshot))
            .await?;
        let spend = pairs(spend);
        let ledger = if last_id.is_empty() {
            Vec::new()
        } else {
            read_ledger(connection, policy, keys, Some(&last_id)).await?
        };
        let mut hget = ::redis::cmd("HGET");
        hget.arg(keys.spend()).arg(FOLDS_FIELD);
        let folds_now: Option<String> = connection
            .call(policy, "check for ledger trims", Request::Command(&hget))
            .await?;
        if folds_now.as_deref() == spend.get(FOLDS_FIELD).map(String::as_str) {
            return rows(&spend, &pairs(open), &ledger);
        }
    }
    Err(StoreError::Unavailable(format!(
        "{} was trimmed during every attempt to reconcile it",
        keys.ledger()
    )))
}

fn pairs(flat: Vec<String>) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut items = flat.into_iter();
    while let (Some(name), Some(value)) = (items.next(), items.next()) {
        map.insert(name, value);
    }
    map
}

/// Which part of a scope and period's books a spend hash field holds.
enum Part {
    Committed,
    Reserved,
    Folded,
}

/// Reads `<kind>:<id>:<counter period>[:r|:f]`; `None` for other fields
/// (`folds`, a run's `:cap`). Ids may contain `:`; period ids never do (a
/// rate limit's counter period is `<period id>/<meter>`).
fn parse_field(name: &str) -> Option<(ScopeKind, &str, &str, Part)> {
    let (kind, rest) = name.split_once(':')?;
    let kind = ScopeKind::parse(kind)?;
    let (head, last) = rest.rsplit_once(':')?;
    let (scope, part) = match last {
        "cap" => return None,
        "r" => (head.rsplit_once(':')?, Part::Reserved),
        "f" => (head.rsplit_once(':')?, Part::Folded),
        _ => ((head, last), Part::Committed),
    };
    Some((kind, scope.0, scope.1, part))
}

type RowKey = (ScopeKind, String, String);

fn row<'a>(
    rows: &'a mut BTreeMap<RowKey, Reconciliation>,
    kind: ScopeKind,
    id: &str,
    period_id: &str,
) -> &'a mut Reconciliation {
    rows.entry((kind, id.to_owned(), period_id.to_owned()))
        .or_insert_with(|| Reconciliation {
            kind,
            id: id.to_owned(),
            period_id: period_id.to_owned(),
            counter: 0,
            folded: 0,
            ledger: 0,
            open: 0,
        })
}

fn parse_delta(name: &str, value: &str) -> Result<UsdMicrosDelta, StoreError> {
    value
        .parse()
        .map_err(|_| StoreError::Unavailable(format!("unreadable counter {name} = {value:?}")))
}

fn parse_counter(name: &str, value: &str) -> Result<UsdMicros, StoreError> {
    // A counter may be negative only if the books are already broken;
    // reading it as zero keeps that visible as drift.
    Ok(UsdMicros::try_from(parse_delta(name, value)?).unwrap_or(0))
}

fn rows(
    spend: &BTreeMap<String, String>,
    open: &BTreeMap<String, String>,
    ledger: &[LedgerLine],
) -> Result<Vec<Reconciliation>, StoreError> {
    let mut rows = BTreeMap::new();
    for (name, value) in spend {
        let Some((kind, id, period_id, part)) = parse_field(name) else {
            continue;
        };
        let row = row(&mut rows, kind, id, period_id);
        match part {
            Part::Committed => row.counter = parse_counter(name, value)?,
            Part::Folded => row.folded = parse_delta(name, value)?,
            // The reserved part is already inside the counter.
            Part::Reserved => {}
        }
    }
    for line in ledger {
        let actual = line.entry.actual;
        let key = row(&mut rows, ScopeKind::Key, &line.entry.key, &line.key_period);
        key.ledger = key.ledger.saturating_add(actual);
        if let (Some(org), Some(period_id)) = (&line.entry.org, &line.org_period) {
            let org = row(&mut rows, ScopeKind::Org, org, period_id);
            org.ledger = org.ledger.saturating_add(actual);
        }
    }
    for raw in open.values() {
        let record = Record::parse(raw)?;
        if !record.is_open() {
            continue;
        }
        let amount = record.amount();
        if let (Some(key), Some(period_id)) = (&record.k, &record.kp) {
            let key = row(&mut rows, ScopeKind::Key, key, period_id);
            key.open = key.open.saturating_add(amount);
        }
        if let (Some(org), Some(period_id)) = (&record.o, &record.op) {
            let org = row(&mut rows, ScopeKind::Org, org, period_id);
            org.open = org.open.saturating_add(amount);
        }
    }
    // Only the money of keys and orgs is in the books `reconcile` proves:
    // a run's, a model group's and a rate limit's counters are caps
    // inside them.
    rows.retain(|(kind, _, period_id), _| reconciled(*kind, period_id));
    Ok(rows.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spend_fields_name_scope_period_and_part() {
        let parsed =
            |name| parse_field(name).map(|(kind, id, pid, part)| (kind, id, pid, part as u8));
        assert_eq!(
            parsed("key:alice:2026-11-29"),
            Some((ScopeKind::Key, "alice", "2026-11-29", Part::Committed as u8))
        );
        assert_eq!(
            parsed("org:acme:2026-11:r"),
            Some((ScopeKind::Org, "acme", "2026-11", Part::Reserved as u8))
        );
        assert_eq!(
            parsed("key:a:b:total:f"),
            Some((ScopeKind::Key, "a:b", "total", Part::Folded as u8))
        );
        assert_eq!(
            parsed("key:alice:2026-12-07T1849/requests:r"),
            Some((
                ScopeKind::Key,
                "alice",
                "2026-12-07T1849/requests",
                Part::Reserved as u8
            ))
        );
        assert_eq!(
            parsed("model:org:acme/opus:2026-12"),
            Some((
                ScopeKind::Model,
                "org:acme/opus",
                "2026-12",
                Part::Committed as u8
            ))
        );
        assert_eq!(parsed("folds"), None);
        assert_eq!(parsed("key:alice"), None);
    }
}
