//! The budget protocol over the SQLite store's books: the same rules as the
//! memory store's (`memory/state.rs`), decided on the [`Desk`] with the
//! store's time passed in. Every function checks everything it may refuse
//! before it changes anything, so a refused call changes nothing; what it
//! changes goes into the desk's draft, which the caller commits to the
//! journal before answering.

use chrono::{DateTime, Utc};

use super::change::Entry;
use super::desk::Desk;
use super::record::{millis, Record, RecordState};
use crate::budget::{
    ClaimedReserve, Denial, LedgerEntry, LedgerStatus, Level, OnExpiry, ReserveOutcome,
    ReserveRequest, RunScope, RunState, Scope, ScopeKind, ScopeState, SettleOutcome, Settlement,
    StoreError,
};
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

/// Whether a reserve of `exec_id` under `claim` repeats a request still in
/// flight: the claim is held by another exec id whose reservation is open
/// and not past its deadline. The gateway's own retry (a known exec id) is
/// never a duplicate.
fn is_duplicate(desk: &mut Desk, exec_id: &str, claim: &str, now: i64) -> Sql<bool> {
    if desk.record(exec_id)?.is_some() {
        return Ok(false);
    }
    Ok(desk
        .claim_holder(claim)
        .is_some_and(|holder| holder.deadline > now))
}

/// Reserves `req.amount` against the key and its org, all or nothing (the
/// first answer for a known exec id); under a `claim`, a duplicate of a
/// request in flight is refused and a new reservation takes the claim.
pub(super) fn reserve(
    desk: &mut Desk,
    rules: Rules,
    req: &ReserveRequest,
    claim: Option<&str>,
    now: DateTime<Utc>,
) -> Sql<ClaimedReserve> {
    let now_ms = millis(now);
    if let Some(claim) = claim {
        if is_duplicate(desk, &req.exec_id, claim, now_ms)? {
            return Ok(ClaimedReserve::Duplicate);
        }
    }
    if let Some(record) = desk.record(&req.exec_id)? {
        return Ok(ClaimedReserve::Ran(match record.state {
            RecordState::Denied(denial) => ReserveOutcome::Denied(denial),
            _ => ReserveOutcome::Reserved {
                amount: record.amount,
                levels: Vec::new(),
            },
        }));
    }
    let run = match &req.run {
        Some(run) => match run_scope(desk, run)? {
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
        .map(|(scope, period_id)| committed(desk, scope.kind, &scope.id, period_id))
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
    let charge = |scope: &Scope, period_id: &str| super::record::Charge {
        kind: scope.kind,
        id: scope.id.clone(),
        period_id: period_id.to_owned(),
        cap: scope.cap,
    };
    let deadline = now_ms.saturating_add(ttl_ms);
    let record = Record {
        state: match &denial {
            Some(denial) => RecordState::Denied(denial.clone()),
            None => RecordState::Open,
        },
        amount,
        key: charge(&req.key, &key_period),
        org: req
            .org
            .as_ref()
            .zip(org_period.as_deref())
            .map(|(org, period)| charge(org, period)),
        run: run.as_ref().map(|run| super::record::Charge {
            kind: ScopeKind::Run,
            id: run.id.clone(),
            period_id: "total".to_owned(),
            cap: MAX_USD_MICROS,
        }),
        started_at: now_ms,
        deadline,
        ttl_ms,
        // A denial is closed at once, remembered for retries.
        forget_at: denial
            .as_ref()
            .map(|_| now_ms.saturating_add(rules.closed_ms)),
        claim: if denial.is_some() {
            None
        } else {
            claim.map(str::to_owned)
        },
        model: req.model.clone(),
    };
    desk.put(&req.exec_id, record);
    if let Some(denial) = denial {
        return Ok(ClaimedReserve::Ran(ReserveOutcome::Denied(denial)));
    }
    let mut levels = Vec::with_capacity(scopes.len());
    for ((scope, period_id), committed) in scopes.iter().zip(before) {
        desk.move_counter(scope.kind, &scope.id, period_id, 0, delta(amount))?;
        levels.push(Level {
            kind: scope.kind,
            period_id: (*period_id).to_owned(),
            committed: committed.saturating_add(amount),
        });
    }
    if let Some(run) = &req.run {
        desk.touch_run(&run.id, run.cap, now_ms)?;
    }
    if let Some(claim) = claim {
        desk.take_claim(claim, &req.exec_id);
    }
    Ok(ClaimedReserve::Ran(ReserveOutcome::Reserved {
        amount,
        levels,
    }))
}

/// The run as a scope with the cap its first call fixed, or, when this
/// call names another cap, `Err` with the fixed one.
fn run_scope(desk: &mut Desk, run: &RunScope) -> Sql<Result<Scope, Option<UsdMicros>>> {
    let cap = match desk.run_cap(&run.id)? {
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

/// Forgets the runs without a call for the run TTL and with nothing
/// reserved: their counters and what is remembered of them.
pub(super) fn forget_idle_runs(desk: &mut Desk, rules: Rules, now: DateTime<Utc>) -> Sql<usize> {
    let cutoff = millis(now).saturating_sub(rules.run_ttl_ms);
    let mut forgotten = 0;
    for id in desk.runs_idle_since(cutoff)? {
        let (_, reserved) = desk.counter(ScopeKind::Run, &id, "total")?;
        if reserved == 0 {
            desk.forget_run(&id);
            forgotten += 1;
        }
    }
    Ok(forgotten)
}

/// A run's cap and counters, if it is remembered.
pub(super) fn run_state(desk: &mut Desk, id: &str) -> Sql<Option<RunState>> {
    let Some(cap) = desk.run_cap(id)? else {
        return Ok(None);
    };
    let (spent, reserved) = desk.counter(ScopeKind::Run, id, "total")?;
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
fn committed(desk: &mut Desk, kind: ScopeKind, id: &str, period_id: &str) -> Sql<UsdMicros> {
    let (spent, reserved) = desk.counter(kind, id, period_id)?;
    Ok(spent.saturating_add(reserved))
}

/// Settles a reservation with its actual cost, exactly once.
pub(super) fn settle(
    desk: &mut Desk,
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
    let Some(mut record) = desk.record(exec_id)? else {
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
        let committed = committed(desk, charge.kind, &charge.id, &charge.period_id)?;
        let after = i128::from(committed) - i128::from(held) + i128::from(settlement.actual);
        if after > i128::from(MAX_USD_MICROS) {
            return Ok(Err(out_of_range()));
        }
    }
    let now_ms = millis(now);
    let expiry_charge = match already_expired {
        None if record.deadline <= now_ms => {
            let charged = expire(desk, rules, exec_id, &record, now)?;
            if let Some(expired) = desk.record(exec_id)? {
                record = expired;
            }
            Some(charged)
        }
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
        desk.move_counter(charge.kind, &charge.id, &charge.period_id, spent, reserved)?;
    }
    book(
        desk,
        &record,
        LedgerEntry {
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
    );
    let key_committed = committed(desk, ScopeKind::Key, &record.key.id, &record.key.period_id)?;
    let outcome = SettleOutcome {
        status,
        reserved: record.amount,
        actual: settlement.actual,
        applied: true,
        key_remaining: record.key.cap.saturating_sub(key_committed),
    };
    let run = record.run.as_ref().map(|run| run.id.clone());
    let claim = record.claim.clone();
    record.state = RecordState::Settled(outcome.clone());
    record.forget_at = Some(now_ms.saturating_add(rules.closed_ms));
    desk.put(exec_id, record);
    if let Some(claim) = claim {
        desk.release_claim(&claim, exec_id);
    }
    if let Some(run) = run {
        desk.touch_run(&run, None, now_ms)?;
    }
    Ok(Ok(outcome))
}

/// Expires up to `limit` open reservations whose deadline has come, oldest
/// first; returns how many.
pub(super) fn expire_due(
    desk: &mut Desk,
    rules: Rules,
    now: DateTime<Utc>,
    limit: usize,
) -> Sql<usize> {
    let mut expired = 0;
    for exec_id in desk.due(millis(now), limit) {
        if let Some(record) = desk.record(&exec_id)? {
            expire(desk, rules, &exec_id, &record, now)?;
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
    desk: &mut Desk,
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
        desk.move_counter(
            charge.kind,
            &charge.id,
            &charge.period_id,
            delta(charged),
            -delta(record.amount),
        )?;
    }
    book(
        desk,
        record,
        LedgerEntry {
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
    );
    let mut expired = record.clone();
    expired.state = RecordState::Expired(charged);
    expired.forget_at = Some(millis(now).saturating_add(record.ttl_ms));
    desk.put(exec_id, expired);
    if let Some(claim) = &record.claim {
        desk.release_claim(claim, exec_id);
    }
    Ok(charged)
}

/// Books one ledger entry, charged in the periods of `record`.
fn book(desk: &mut Desk, record: &Record, entry: LedgerEntry) {
    desk.book(Entry::of(
        entry,
        &record.key.period_id,
        record.org.as_ref().map(|org| org.period_id.as_str()),
    ));
}

/// The scope's counters in the period current at `now`.
pub(super) fn scope_state(desk: &mut Desk, scope: &Scope, now: DateTime<Utc>) -> Sql<ScopeState> {
    let period_id = scope.period.id_at(now);
    let (spent, reserved) = desk.counter(scope.kind, &scope.id, &period_id)?;
    Ok(ScopeState {
        period_id,
        spent,
        reserved,
        resets_at: scope.period.resets_at(now),
    })
}
