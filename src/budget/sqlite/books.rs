//! The budget protocol over the SQLite tables: the same rules as the memory
//! store's (`memory/state.rs`), as statements. Every function runs inside
//! the writer's open transaction, with the store's time passed in, and
//! checks everything it may refuse before it writes anything, so a refused
//! call changes nothing even though it shares its transaction with others.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, TimeDelta, TimeZone, Utc};
use rusqlite::{Connection, OptionalExtension, Row};

use super::writer::Db;

use crate::budget::{
    run_id_of, ClaimedReserve, Denial, LedgerEntry, LedgerStatus, Level, OnExpiry, Reconciliation,
    ReserveOutcome, ReserveRequest, RunScope, RunState, Scope, ScopeKind, ScopeState,
    SettleOutcome, Settlement, StoreError,
};
use crate::hosted::ToolCalls;
use crate::money::{delta, UsdMicros, MAX_USD_MICROS};
use crate::period::Period;
use crate::usage::Usage;

type Sql<T> = rusqlite::Result<T>;

/// The store's settings the rules read.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rules {
    /// How far above its reservation a settle may land before it counts as
    /// an overrun.
    pub epsilon: UsdMicros,
    pub on_expiry: OnExpiry,
    /// How long a settled or denied record is kept for retries, in
    /// milliseconds (an expired one is kept its TTL, for late settles).
    pub closed_ms: i64,
    /// How long a run is kept after its last call, in milliseconds.
    pub run_ttl_ms: i64,
}

/// One reservation row, as the rules need it.
struct Record {
    state: RecordState,
    amount: UsdMicros,
    key: Charge,
    org: Option<Charge>,
    run: Option<Charge>,
    deadline: i64,
    ttl_ms: i64,
    claim: Option<String>,
    /// The model the call was for; empty for a row written before the
    /// column existed.
    model: String,
}

enum RecordState {
    Denied(Denial),
    Open,
    /// With what its expiry charged.
    Expired(UsdMicros),
    Settled(SettleOutcome),
}

/// A scope charged by a reservation, in the period current at reserve time.
struct Charge {
    kind: ScopeKind,
    id: String,
    period_id: String,
    cap: UsdMicros,
}

/// The columns [`Record::from_row`] reads, in its order.
macro_rules! record_columns {
    () => {
        "state, amount_usd_micros, key_id, key_period_id, key_cap_usd_micros, \
         org_id, org_period_id, org_cap_usd_micros, deadline, ttl_ms, claim, \
         expiry_charged_usd_micros, settled_status, settled_actual_usd_micros, \
         settled_key_remaining_usd_micros, denied_scope_kind, denied_scope_id, denied_period, \
         denied_cap_usd_micros, denied_remaining_usd_micros, denied_resets_at, model, run_id"
    };
}

const LOAD_RECORD: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM reservations WHERE exec_id = ?1"
);

impl Record {
    fn load(conn: &Connection, exec_id: &str) -> Sql<Option<Record>> {
        conn.prepare_cached(LOAD_RECORD)?
            .query_row([exec_id], Record::from_row)
            .optional()
    }

    fn from_row(row: &Row<'_>) -> Sql<Record> {
        let state: String = row.get(0)?;
        let state = match state.as_str() {
            "open" => RecordState::Open,
            "expired" => RecordState::Expired(row.get(11)?),
            "settled" => RecordState::Settled(SettleOutcome {
                status: status_from(&row.get::<_, String>(12)?)?,
                reserved: row.get(1)?,
                actual: row.get(13)?,
                applied: true,
                key_remaining: row.get(14)?,
            }),
            "denied" => RecordState::Denied(Denial {
                kind: kind_from(&row.get::<_, String>(15)?)?,
                id: row.get(16)?,
                period: row
                    .get::<_, String>(17)?
                    .parse::<Period>()
                    .map_err(|e| invalid(e.to_string()))?,
                cap: row.get(18)?,
                remaining: row.get(19)?,
                resets_at: row.get::<_, Option<i64>>(20)?.map(from_millis),
            }),
            other => return Err(invalid(format!("reservation state {other:?}"))),
        };
        let org = match row.get::<_, Option<String>>(5)? {
            Some(id) => Some(Charge {
                kind: ScopeKind::Org,
                id,
                period_id: row.get(6)?,
                cap: row.get(7)?,
            }),
            None => None,
        };
        Ok(Record {
            state,
            amount: row.get(1)?,
            key: Charge {
                kind: ScopeKind::Key,
                id: row.get(2)?,
                period_id: row.get(3)?,
                cap: row.get(4)?,
            },
            org,
            run: row.get::<_, Option<String>>(22)?.map(|id| Charge {
                kind: ScopeKind::Run,
                id,
                period_id: "total".to_owned(),
                // A run's cap is read where it is checked, at reserve.
                cap: MAX_USD_MICROS,
            }),
            deadline: row.get(8)?,
            ttl_ms: row.get(9)?,
            claim: row.get(10)?,
            model: row.get::<_, Option<String>>(21)?.unwrap_or_default(),
        })
    }

    fn charges(&self) -> impl Iterator<Item = &Charge> {
        std::iter::once(&self.key)
            .chain(self.org.as_ref())
            .chain(self.run.as_ref())
    }

    /// The run id the client named, without its key.
    fn run_id(&self) -> Option<String> {
        self.run.as_ref().map(|run| run_id_of(&run.id).to_owned())
    }

    fn is_owned_by(&self, settlement: &Settlement) -> bool {
        self.key.id == settlement.key
            && self.org.as_ref().map(|org| org.id.as_str()) == settlement.org.as_deref()
    }
}

/// Whether a reserve of `exec_id` under `claim` repeats a request still in
/// flight: the claim is held by another exec id whose reservation is open
/// and not past its deadline. The gateway's own retry (a known exec id) is
/// never a duplicate.
fn is_duplicate(conn: &Connection, exec_id: &str, claim: &str, now: i64) -> Sql<bool> {
    if known(conn, exec_id)? {
        return Ok(false);
    }
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM claims AS c JOIN reservations AS r ON r.exec_id = c.exec_id
          WHERE c.claim = ?1 AND r.state = 'open' AND r.deadline > ?2)",
    )?
    .query_row((claim, now), |row| row.get(0))
}

fn known(conn: &Connection, exec_id: &str) -> Sql<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM reservations WHERE exec_id = ?1)")?
        .query_row([exec_id], |row| row.get(0))
}

/// Reserves `req.amount` against the key and its org, all or nothing (the
/// first answer for a known exec id); under a `claim`, a duplicate of a
/// request in flight is refused and a new reservation takes the claim.
pub(super) fn reserve(
    db: &mut Db<'_>,
    rules: Rules,
    req: &ReserveRequest,
    claim: Option<&str>,
    now: DateTime<Utc>,
) -> Sql<ClaimedReserve> {
    let conn = db.conn();
    let now_ms = millis(now);
    if let Some(claim) = claim {
        if is_duplicate(conn, &req.exec_id, claim, now_ms)? {
            return Ok(ClaimedReserve::Duplicate);
        }
    }
    if let Some(record) = Record::load(conn, &req.exec_id)? {
        return Ok(ClaimedReserve::Ran(match record.state {
            RecordState::Denied(denial) => ReserveOutcome::Denied(denial),
            _ => ReserveOutcome::Reserved {
                amount: record.amount,
                levels: Vec::new(),
            },
        }));
    }
    let run = match &req.run {
        Some(run) => match run_scope(conn, run)? {
            Ok(scope) => Some(scope),
            Err(cap) => return Ok(ClaimedReserve::Ran(ReserveOutcome::RunCapConflict { cap })),
        },
        None => None,
    };
    let ttl_ms = i64::try_from(req.ttl.as_millis()).unwrap_or(i64::MAX);
    let key_period = req.key.period.id_at(now);
    let org_period = req.org.as_ref().map(|org| org.period.id_at(now));
    let mut scopes = vec![(&req.key, key_period.as_str())];
    if let (Some(org), Some(period)) = (&req.org, &org_period) {
        scopes.push((org, period));
    }
    if let Some(run) = &run {
        scopes.push((run, "total"));
    }
    let before = scopes
        .iter()
        .map(|(scope, period_id)| committed(db, scope.kind, &scope.id, period_id))
        .collect::<Sql<Vec<_>>>()?;
    // Not even the least amount fits: the key is checked first, so when
    // several would deny, the key is named, then the org.
    let denial = scopes
        .iter()
        .zip(&before)
        .find_map(|((scope, _), committed)| check(scope, *committed, req.min_amount, now));
    // Every scope has room for the least: hold the most they all allow.
    let amount = scopes
        .iter()
        .zip(&before)
        .fold(req.amount, |amount, ((scope, _), committed)| {
            amount.min(scope.cap.saturating_sub(*committed))
        });
    let org = req.org.as_ref();
    conn.prepare_cached(
        "INSERT INTO reservations (exec_id, state, key_id, key_period_id, key_cap_usd_micros,
             org_id, org_period_id, org_cap_usd_micros, amount_usd_micros, claim, started_at,
             deadline, ttl_ms, forget_at, denied_scope_kind, denied_scope_id, denied_period,
             denied_cap_usd_micros, denied_remaining_usd_micros, denied_resets_at, model, run_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
             ?18, ?19, ?20, ?21, ?22)",
    )?
    .execute(rusqlite::params![
        req.exec_id,
        if denial.is_some() { "denied" } else { "open" },
        req.key.id,
        key_period,
        req.key.cap,
        org.map(|org| &org.id),
        org_period,
        org.map(|org| org.cap),
        amount,
        if denial.is_some() { None } else { claim },
        now_ms,
        now_ms.saturating_add(ttl_ms),
        ttl_ms,
        // A denial is closed at once, remembered for retries.
        denial
            .as_ref()
            .map(|_| now_ms.saturating_add(rules.closed_ms)),
        denial.as_ref().map(|d| d.kind.as_str()),
        denial.as_ref().map(|d| &d.id),
        denial.as_ref().map(|d| d.period.as_str()),
        denial.as_ref().map(|d| d.cap),
        denial.as_ref().map(|d| d.remaining),
        denial.as_ref().and_then(|d| d.resets_at).map(millis),
        req.model,
        run.as_ref().map(|run| &run.id),
    ])?;
    if let Some(denial) = denial {
        return Ok(ClaimedReserve::Ran(ReserveOutcome::Denied(denial)));
    }
    let mut levels = Vec::with_capacity(scopes.len());
    for ((scope, period_id), committed) in scopes.iter().zip(before) {
        db.move_counter(scope.kind, &scope.id, period_id, 0, delta(amount))?;
        levels.push(Level {
            kind: scope.kind,
            period_id: (*period_id).to_owned(),
            committed: committed.saturating_add(amount),
        });
    }
    if let Some(run) = &req.run {
        touch_run(conn, &run.id, run.cap, now_ms)?;
    }
    if let Some(claim) = claim {
        conn.prepare_cached("INSERT OR REPLACE INTO claims (claim, exec_id) VALUES (?1, ?2)")?
            .execute((claim, &req.exec_id))?;
    }
    Ok(ClaimedReserve::Ran(ReserveOutcome::Reserved {
        amount,
        levels,
    }))
}

/// The run as a scope with the cap its first call fixed, or, when this
/// call names another cap, `Err` with the fixed one.
fn run_scope(conn: &Connection, run: &RunScope) -> Sql<Result<Scope, Option<UsdMicros>>> {
    let known: Option<Option<UsdMicros>> = conn
        .prepare_cached("SELECT cap_usd_micros FROM runs WHERE id = ?1")?
        .query_row([&run.id], |row| row.get(0))
        .optional()?;
    let cap = match known {
        Some(fixed) if run.cap.is_some() && run.cap != fixed => return Ok(Err(fixed)),
        Some(fixed) => fixed,
        None => run.cap,
    };
    Ok(Ok(Scope {
        kind: ScopeKind::Run,
        id: run.id.clone(),
        cap: cap.unwrap_or(MAX_USD_MICROS),
        period: Period::Total,
    }))
}

/// Remembers a run's call: the first one fixes its cap.
fn touch_run(conn: &Connection, id: &str, cap: Option<UsdMicros>, now_ms: i64) -> Sql<()> {
    conn.prepare_cached(
        "INSERT INTO runs (id, cap_usd_micros, last_used) VALUES (?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET last_used = MAX(last_used, excluded.last_used)",
    )?
    .execute((id, cap, now_ms))?;
    Ok(())
}

/// Forgets the runs without a call for the run TTL and with nothing
/// reserved: their counters and what is remembered of them.
pub(super) fn forget_idle_runs(conn: &Connection, rules: Rules, now: DateTime<Utc>) -> Sql<()> {
    let cutoff = millis(now).saturating_sub(rules.run_ttl_ms);
    conn.prepare_cached(
        "DELETE FROM runs WHERE last_used <= ?1 AND NOT EXISTS (
             SELECT 1 FROM counters WHERE scope_kind = 'run' AND scope_id = runs.id
                AND reserved_usd_micros > 0)",
    )?
    .execute([cutoff])?;
    conn.prepare_cached(
        "DELETE FROM counters WHERE scope_kind = 'run'
            AND scope_id NOT IN (SELECT id FROM runs)",
    )?
    .execute([])?;
    Ok(())
}

/// A run's cap and counters, if it is remembered.
pub(super) fn run_state(db: &mut Db<'_>, id: &str) -> Sql<Option<RunState>> {
    let cap: Option<Option<UsdMicros>> = db
        .conn()
        .prepare_cached("SELECT cap_usd_micros FROM runs WHERE id = ?1")?
        .query_row([id], |row| row.get(0))
        .optional()?;
    let Some(cap) = cap else {
        return Ok(None);
    };
    let (spent, reserved) = db.counter(ScopeKind::Run, id, "total")?;
    Ok(Some(RunState {
        cap,
        spent,
        reserved,
    }))
}

/// The denial if `amount` does not fit under the scope's cap, with
/// `committed` already held in its period.
fn check(
    scope: &Scope,
    committed: UsdMicros,
    amount: UsdMicros,
    now: DateTime<Utc>,
) -> Option<Denial> {
    let fits = committed
        .checked_add(amount)
        .is_some_and(|total| total <= scope.cap);
    (!fits).then(|| Denial {
        kind: scope.kind,
        id: scope.id.clone(),
        period: scope.period,
        cap: scope.cap,
        remaining: scope.cap.saturating_sub(committed),
        resets_at: scope.period.resets_at(now),
    })
}

/// `spent + reserved` of one scope and period.
fn committed(db: &mut Db<'_>, kind: ScopeKind, id: &str, period_id: &str) -> Sql<UsdMicros> {
    let (spent, reserved) = db.counter(kind, id, period_id)?;
    Ok(spent.saturating_add(reserved))
}

/// Settles a reservation with its actual cost, exactly once.
pub(super) fn settle(
    db: &mut Db<'_>,
    rules: Rules,
    settlement: &Settlement,
    now: DateTime<Utc>,
) -> Sql<Result<SettleOutcome, StoreError>> {
    let exec_id = &settlement.exec_id;
    let out_of_range = || StoreError::OutOfRange {
        exec_id: exec_id.clone(),
    };
    if settlement.actual > MAX_USD_MICROS {
        return Ok(Err(out_of_range()));
    }
    let unknown = || StoreError::UnknownReservation(exec_id.clone());
    let conn = db.conn();
    let Some(record) = Record::load(conn, exec_id)? else {
        return Ok(Err(unknown()));
    };
    let already_expired = match &record.state {
        RecordState::Denied(_) => return Ok(Err(unknown())),
        _ if !record.is_owned_by(settlement) => {
            return Ok(Err(StoreError::OwnershipMismatch {
                exec_id: exec_id.clone(),
            }))
        }
        RecordState::Settled(first) => {
            return Ok(Ok(SettleOutcome {
                applied: false,
                ..first.clone()
            }))
        }
        RecordState::Expired(charged) => Some(*charged),
        RecordState::Open => None,
    };
    // What the counters hold of this call (its amount while open, what
    // expiry charged once expired) is replaced by the actual cost, unless a
    // counter would then reach 2^53: checked before anything changes.
    let held = already_expired.unwrap_or(record.amount);
    for charge in record.charges() {
        let committed = committed(db, charge.kind, &charge.id, &charge.period_id)?;
        let after = i128::from(committed) - i128::from(held) + i128::from(settlement.actual);
        if after > i128::from(MAX_USD_MICROS) {
            return Ok(Err(out_of_range()));
        }
    }
    let now_ms = millis(now);
    let expiry_charge = match already_expired {
        None if record.deadline <= now_ms => Some(expire(db, rules, exec_id, &record, now)?),
        charged => charged,
    };
    let status = if expiry_charge.is_some() {
        LedgerStatus::Late
    } else if settlement.estimated {
        LedgerStatus::Estimated
    } else if settlement.actual > record.amount.saturating_add(rules.epsilon) {
        LedgerStatus::Overrun
    } else {
        LedgerStatus::Ok
    };
    // On time, the reservation becomes the actual cost. Late, expiry already
    // moved its amount out of `reserved` and charged what it charged: the
    // actual cost replaces that charge.
    let actual = delta(settlement.actual);
    let (spent, reserved) = match expiry_charge {
        None => (actual, -delta(record.amount)),
        Some(charged) => (actual - delta(charged), 0),
    };
    for charge in record.charges() {
        db.move_counter(charge.kind, &charge.id, &charge.period_id, spent, reserved)?;
    }
    book(
        conn,
        &record,
        &LedgerEntry {
            exec_id: exec_id.clone(),
            key: record.key.id.clone(),
            org: record.org.as_ref().map(|org| org.id.clone()),
            run: record.run_id(),
            model: settlement.model.clone(),
            usage: settlement.usage,
            reserved: record.amount,
            actual: actual - delta(expiry_charge.unwrap_or(0)),
            status,
            at: now,
            note: None,
        },
    )?;
    let key_committed = committed(db, ScopeKind::Key, &record.key.id, &record.key.period_id)?;
    let outcome = SettleOutcome {
        status,
        reserved: record.amount,
        actual: settlement.actual,
        applied: true,
        key_remaining: record.key.cap.saturating_sub(key_committed),
    };
    conn.prepare_cached(
        "UPDATE reservations SET state = 'settled', forget_at = ?2, settled_status = ?3,
             settled_actual_usd_micros = ?4, settled_key_remaining_usd_micros = ?5
         WHERE exec_id = ?1",
    )?
    .execute((
        exec_id,
        now_ms.saturating_add(rules.closed_ms),
        status.as_str(),
        outcome.actual,
        outcome.key_remaining,
    ))?;
    release_claim(conn, exec_id, &record)?;
    if let Some(run) = &record.run {
        touch_run(conn, &run.id, None, now_ms)?;
    }
    Ok(Ok(outcome))
}

/// Expires up to `limit` open reservations whose deadline has come, oldest
/// first; returns how many.
pub(super) fn expire_due(
    db: &mut Db<'_>,
    rules: Rules,
    now: DateTime<Utc>,
    limit: usize,
) -> Sql<usize> {
    let conn = db.conn();
    let due: Vec<String> = conn
        .prepare_cached(&expire_due_sql(limit))?
        .query_map([millis(now)], |row| row.get(0))?
        .collect::<Sql<_>>()?;
    let mut expired = 0;
    for exec_id in &due {
        if let Some(record) = Record::load(conn, exec_id)? {
            expire(db, rules, exec_id, &record, now)?;
            expired += 1;
        }
    }
    Ok(expired)
}

/// Closes an open reservation as expired: its amount leaves `reserved` and
/// what `on_expiry` charges goes to `spent`, booked as an `expired` entry.
/// The record is kept one more TTL, so every settle that can still come
/// finds it (`late`). Returns what it charged.
fn expire(
    db: &mut Db<'_>,
    rules: Rules,
    exec_id: &str,
    record: &Record,
    now: DateTime<Utc>,
) -> Sql<UsdMicros> {
    let charged = match rules.on_expiry {
        OnExpiry::Charge => record.amount,
        OnExpiry::Release => 0,
    };
    for charge in record.charges() {
        db.move_counter(
            charge.kind,
            &charge.id,
            &charge.period_id,
            delta(charged),
            -delta(record.amount),
        )?;
    }
    let conn = db.conn();
    book(
        conn,
        record,
        &LedgerEntry {
            exec_id: exec_id.to_owned(),
            key: record.key.id.clone(),
            org: record.org.as_ref().map(|org| org.id.clone()),
            run: record.run_id(),
            model: record.model.clone(),
            usage: Usage::default(),
            reserved: record.amount,
            actual: delta(charged),
            status: LedgerStatus::Expired,
            at: now,
            note: None,
        },
    )?;
    conn.prepare_cached(
        "UPDATE reservations SET state = 'expired', forget_at = ?2, expiry_charged_usd_micros = ?3
          WHERE exec_id = ?1",
    )?
    .execute((exec_id, millis(now).saturating_add(record.ttl_ms), charged))?;
    release_claim(conn, exec_id, record)?;
    Ok(charged)
}

/// Releases the claim a closing reservation held, unless a later
/// reservation took it over.
fn release_claim(conn: &Connection, exec_id: &str, record: &Record) -> Sql<()> {
    if let Some(claim) = &record.claim {
        conn.prepare_cached("DELETE FROM claims WHERE claim = ?1 AND exec_id = ?2")?
            .execute((claim, exec_id))?;
    }
    Ok(())
}

/// Drops up to `limit` closed records whose retention has passed.
///
/// Read first, then deleted one by one: a `DELETE … WHERE exec_id IN
/// (SELECT … LIMIT n)` builds and frees a temporary table for its list on
/// every run, which cost each reserve's lazy sweep more than the rest of
/// the reserve even when nothing was due. Read a page at a time, so the
/// sweep's unbounded pass holds few ids at once.
pub(super) fn forget_due(conn: &Connection, now: DateTime<Utc>, limit: usize) -> Sql<usize> {
    let page = limit.min(FORGET_PAGE);
    let mut forgotten = 0;
    while forgotten < limit {
        let due: Vec<String> = conn
            .prepare_cached(&forget_due_sql(page))?
            .query_map([millis(now)], |row| row.get(0))?
            .collect::<Sql<_>>()?;
        let mut forget = conn.prepare_cached("DELETE FROM reservations WHERE exec_id = ?1")?;
        for exec_id in &due {
            forget.execute([exec_id])?;
        }
        forgotten += due.len();
        if due.len() < page {
            break;
        }
    }
    Ok(forgotten)
}

/// How many closed records [`forget_due`] reads at once.
const FORGET_PAGE: usize = 1024;

// The sweeps' row limits are written into their statements, not bound:
// SQLite folds a `LIMIT ?` parameter's value into the statement's plan and
// so compiles the statement again each time the parameter is bound, which
// made the two statements of every reserve's lazy sweep cost more than the
// rest of the reserve. Written in, each limit is one cached statement.

pub(super) fn expire_due_sql(limit: usize) -> String {
    format!(
        "SELECT exec_id FROM reservations WHERE state = 'open' AND deadline <= ?1
          ORDER BY deadline LIMIT {}",
        limit_arg(limit)
    )
}

pub(super) fn forget_due_sql(limit: usize) -> String {
    format!(
        "SELECT exec_id FROM reservations WHERE forget_at <= ?1 LIMIT {}",
        limit_arg(limit)
    )
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

/// Appends one ledger entry, with the periods it charged, and adds it to
/// its day's spend aggregate.
fn book(conn: &Connection, record: &Record, entry: &LedgerEntry) -> Sql<()> {
    book_in(
        conn,
        &record.key.period_id,
        record.org.as_ref().map(|org| org.period_id.as_str()),
        entry,
    )
}

/// Appends one ledger entry, charged to the key in `key_period` and to
/// its org in `org_period`.
pub(super) fn book_in(
    conn: &Connection,
    key_period: &str,
    org_period: Option<&str>,
    entry: &LedgerEntry,
) -> Sql<()> {
    conn.prepare_cached(
        "INSERT INTO ledger (exec_id, key, org, model, input_tokens, cached_input_tokens,
             cache_write_tokens, output_tokens, tool_calls, reserved_usd_micros,
             actual_usd_micros, status, at, key_period_id, org_period_id, note, run)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    )?
    .execute(rusqlite::params![
        entry.exec_id,
        entry.key,
        entry.org,
        entry.model,
        entry.usage.input,
        entry.usage.cached_input,
        entry.usage.cache_write,
        entry.usage.output,
        tool_calls_json(&entry.usage.tool_calls),
        entry.reserved,
        entry.actual,
        entry.status.as_str(),
        rfc3339(entry.at),
        key_period,
        org_period,
        entry.note,
        entry.run,
    ])?;
    super::aggregates::add(conn, entry)
}

/// The scope's counters in the period current at `now`.
pub(super) fn scope_state(db: &mut Db<'_>, scope: &Scope, now: DateTime<Utc>) -> Sql<ScopeState> {
    let period_id = scope.period.id_at(now);
    let (spent, reserved) = db.counter(scope.kind, &scope.id, &period_id)?;
    Ok(ScopeState {
        period_id,
        spent,
        reserved,
        resets_at: scope.period.resets_at(now),
    })
}

/// How many reservations are open and the sum of their amounts.
pub(super) fn open_reservations(conn: &Connection) -> Sql<(usize, UsdMicros)> {
    conn.prepare_cached(
        "SELECT COUNT(*), COALESCE(SUM(amount_usd_micros), 0) FROM reservations
          WHERE state = 'open'",
    )?
    .query_row([], |row| {
        let count: i64 = row.get(0)?;
        Ok((usize::try_from(count).unwrap_or(0), row.get(1)?))
    })
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
    // A run's counter is a cap inside its key, forgotten with the run;
    // every call of it is in its key's (and org's) books.
    rows.0.retain(|(kind, _, _), _| *kind != ScopeKind::Run);
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
                run
           FROM ledger ORDER BY seq",
    )?;
    let entries = statement.query_map([], |row| {
        let at: String = row.get(12)?;
        Ok(LedgerEntry {
            exec_id: row.get(0)?,
            key: row.get(1)?,
            org: row.get(2)?,
            run: row.get(14)?,
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

/// `{"web_search": 2}`, or `NULL` for a call that used no hosted tool.
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

fn status_from(text: &str) -> Sql<LedgerStatus> {
    Ok(match text {
        "ok" => LedgerStatus::Ok,
        "overrun" => LedgerStatus::Overrun,
        "estimated" => LedgerStatus::Estimated,
        "late" => LedgerStatus::Late,
        "expired" => LedgerStatus::Expired,
        "adjustment" => LedgerStatus::Adjustment,
        other => return Err(invalid(format!("ledger status {other:?}"))),
    })
}

fn kind_from(text: &str) -> Sql<ScopeKind> {
    ScopeKind::parse(text).ok_or_else(|| invalid(format!("scope kind {text:?}")))
}

/// A value in the file this binary does not understand.
fn invalid(what: String) -> rusqlite::Error {
    rusqlite::Error::InvalidColumnType(0, what, rusqlite::types::Type::Text)
}

pub(super) fn limit_arg(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

pub(super) fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

pub(super) fn from_millis(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The ledger's time format: sorts as text in time order, and reads as a
/// time to a person and to SQLite's date functions.
fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `now - retention`, or the start of time.
pub(super) fn before(now: DateTime<Utc>, retention: TimeDelta) -> DateTime<Utc> {
    now.checked_sub_signed(retention)
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}
