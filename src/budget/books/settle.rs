//! Settle and expire: a reservation's hold is replaced by the call's actual
//! cost, or, past its deadline unsettled, by what `on_expiry` charges; a
//! settle that comes after the expiry replaces that charge (`late`). Each
//! books one ledger entry.

use std::borrow::Cow;

use chrono::{DateTime, Utc};

use super::record::{millis, Record, RecordState};
use super::reserve::committed;
use super::BookState;
use crate::budget::caps::tokens_of;
use crate::budget::{
    LedgerEntry, LedgerStatus, Meter, OnExpiry, Rules, ScopeKind, SettleOutcome, Settlement,
    StoreError,
};
use crate::money::{delta, UsdMicros, MAX_USD_MICROS};
use crate::usage::Usage;

/// Settles a reservation with its actual cost, exactly once: a retry
/// changes nothing and gets the first answer.
pub(crate) fn settle<B: BookState>(
    books: &mut B,
    rules: &Rules,
    settlement: &Settlement,
    now: DateTime<Utc>,
) -> Result<Result<SettleOutcome, StoreError>, B::Error> {
    let exec_id = &settlement.exec_id;
    let out_of_range = || StoreError::OutOfRange {
        exec_id: exec_id.clone(),
    };
    // Refused before anything else, as the Redis store refuses it before
    // its script runs.
    if settlement.actual > MAX_USD_MICROS {
        return Ok(Err(out_of_range()));
    }
    let unknown = || StoreError::UnknownReservation(exec_id.clone());
    let Some(mut record) = books.record(exec_id)? else {
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
    // What the counters hold of this call (its amount while open, also
    // when it expires now: expiry's own move nets out; what expiry charged
    // once expired) is replaced by the actual cost, unless a counter would
    // then reach 2^53: checked before anything changes, as `settle.lua`
    // does.
    let held = already_expired.unwrap_or(record.amount);
    // A late settle below expiry's charge gives back no more than the key
    // and its org still hold in `spent`: an operator's refund (which moves
    // those two) may have given part of it back already, and `spent` never
    // goes below zero. They move by the same amount, the one the entry
    // books; the run moves by it too, down to zero if the run was
    // forgotten meanwhile (a run is a cap inside its key, not in the
    // books `reconcile` proves).
    let mut give_back =
        already_expired.map_or(0, |charged| charged.saturating_sub(settlement.actual));
    let tokens = tokens_of(&settlement.usage).min(MAX_USD_MICROS);
    // A rate limit's counter period, built once (money's is its period's).
    let counters: Vec<Option<String>> = record
        .all_charges()
        .map(|charge| match charge.counter_period() {
            Cow::Owned(built) => Some(built),
            Cow::Borrowed(_) => None,
        })
        .collect();
    for (charge, built) in record.all_charges().zip(&counters) {
        let counter_period = built.as_deref().unwrap_or(&charge.period_id);
        let counter = books.counter(charge.kind, &charge.id, counter_period)?;
        let (held, actual) = match charge.meter {
            Meter::Usd => (held, settlement.actual),
            meter => (record.held(charge), meter.held(settlement.actual, tokens)),
        };
        let after = i128::from(counter.committed()) - i128::from(held) + i128::from(actual);
        if after > i128::from(MAX_USD_MICROS) {
            return Ok(Err(out_of_range()));
        }
        if matches!(charge.kind, ScopeKind::Key | ScopeKind::Org) && charge.meter == Meter::Usd {
            give_back = give_back.min(counter.spent);
        }
    }
    let now_ms = millis(now);
    // What expiry charged, when the settle comes after it (or finds the
    // deadline passed and expires the reservation first, as the sweep
    // would have).
    let expiry_charge = match already_expired {
        None if record.deadline <= now_ms => {
            let charged = expire(books, exec_id, &record, rules.on_expiry, now)?;
            record.state = RecordState::Expired(charged);
            Some(charged)
        }
        charged => charged,
    };
    let status = if expiry_charge.is_some() {
        LedgerStatus::Late
    } else if settlement.estimated {
        LedgerStatus::Estimated
    } else if settlement.actual > record.amount.saturating_add(rules.settle_epsilon) {
        LedgerStatus::Overrun
    } else {
        LedgerStatus::Ok
    };
    // On time, the reservation becomes the actual cost. Late, expiry already
    // moved its amount out of `reserved` and charged what it charged: the
    // actual cost replaces that charge, giving back at most `give_back`.
    let actual = delta(settlement.actual);
    let (spent, reserved) = match (already_expired, expiry_charge) {
        (None, None) => (actual, -delta(record.amount)),
        (None, Some(charged)) => (actual - delta(charged), 0),
        (Some(charged), _) => ((actual - delta(charged)).max(-delta(give_back)), 0),
    };
    for (charge, built) in record.all_charges().zip(&counters) {
        let counter = built.as_deref().unwrap_or(&charge.period_id);
        let (spent, reserved) = match charge.meter {
            Meter::Usd => (spent, reserved),
            // A rate limit holds its call's requests and tokens until the
            // settle, and an expiry keeps them held: the call was sent.
            meter => {
                let held = delta(record.held(charge));
                let actual = delta(meter.held(settlement.actual, tokens));
                match already_expired.or(expiry_charge) {
                    None => (actual, -held),
                    Some(_) => (actual - held, 0),
                }
            }
        };
        books.move_counter(charge.kind, &charge.id, counter, spent, reserved)?;
    }
    book(
        books,
        &record,
        LedgerEntry {
            model: settlement.model.clone(),
            usage: settlement.usage,
            actual: if expiry_charge.is_some() {
                spent
            } else {
                actual
            },
            ..ledger_entry(exec_id, &record, status, now)
        },
    );
    let key_committed = committed(books, ScopeKind::Key, &record.key.id, &record.key.period_id)?;
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
    record.forget_at = Some(now_ms.saturating_add(rules.closed_ms()));
    books.put(exec_id, record);
    if let Some(claim) = claim {
        books.release_claim(&claim, exec_id);
    }
    // A run forgotten since the call's reserve stays forgotten: its next
    // call fixes its cap anew.
    if let Some(run) = run {
        if books.run_cap(&run)?.is_some() {
            books.touch_run(&run, None, now_ms)?;
        }
    }
    Ok(Ok(outcome))
}

/// Expires up to `limit` open reservations whose deadline has come, oldest
/// first; returns how many.
pub(crate) fn expire_due<B: BookState>(
    books: &mut B,
    rules: &Rules,
    now: DateTime<Utc>,
    limit: usize,
) -> Result<usize, B::Error> {
    let mut expired = 0;
    for exec_id in books.deadlines().due(millis(now), limit) {
        if let Some(record) = books.record(&exec_id)?.filter(Record::is_open) {
            expire(books, &exec_id, &record, rules.on_expiry, now)?;
            expired += 1;
        }
    }
    Ok(expired)
}

/// Closes an open reservation as expired: its amount leaves `reserved` and
/// what `on_expiry` charges (all of it, or nothing) goes to `spent`, booked
/// as an `expired` entry. Returns what it charged.
///
/// The record is kept one more TTL: the gateway retries a settle for two
/// TTLs from before its reserve, so every settle that can still come finds
/// the record and corrects the charge (`late`).
fn expire<B: BookState>(
    books: &mut B,
    exec_id: &str,
    record: &Record,
    on_expiry: OnExpiry,
    now: DateTime<Utc>,
) -> Result<UsdMicros, B::Error> {
    let charged = match on_expiry {
        OnExpiry::Charge => record.amount,
        OnExpiry::Release => 0,
    };
    for charge in record.all_charges() {
        // A rate limit keeps what the call held whatever `on_expiry`
        // says of money: the call was sent.
        let held = delta(record.held(charge));
        let charged = match charge.meter {
            Meter::Usd => delta(charged),
            _ => held,
        };
        books.move_counter(
            charge.kind,
            &charge.id,
            &charge.counter_period(),
            charged,
            -held,
        )?;
    }
    book(
        books,
        record,
        LedgerEntry {
            actual: delta(charged),
            ..ledger_entry(exec_id, record, LedgerStatus::Expired, now)
        },
    );
    let mut expired = record.clone();
    expired.state = RecordState::Expired(charged);
    expired.forget_at = Some(millis(now).saturating_add(record.ttl_ms));
    books.put(exec_id, expired);
    if let Some(claim) = &record.claim {
        books.release_claim(claim, exec_id);
    }
    Ok(charged)
}

/// The ledger entry of a call of `record` that cost nothing, against the
/// model it was reserved for, for the caller to fill in.
fn ledger_entry(
    exec_id: &str,
    record: &Record,
    status: LedgerStatus,
    at: DateTime<Utc>,
) -> LedgerEntry {
    LedgerEntry {
        exec_id: exec_id.to_owned(),
        key: record.key.id.clone(),
        org: record.org.as_ref().map(|org| org.id.clone()),
        run: record.run_id(),
        customer: record.customer.clone(),
        model: record.model.clone(),
        usage: Usage::default(),
        reserved: record.amount,
        actual: 0,
        status,
        at,
        note: None,
    }
}

/// Books one ledger entry, charged in the periods of `record`.
fn book<B: BookState>(books: &mut B, record: &Record, entry: LedgerEntry) {
    books.book(
        entry,
        &record.key.period_id,
        record.org.as_ref().map(|org| org.period_id.as_str()),
    );
}
