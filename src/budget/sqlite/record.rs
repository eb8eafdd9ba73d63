//! A call's reservation record (`budget::books::Record`) as the file keeps
//! it: one `reservations` row ([`Row`]), from reserve until it is
//! forgotten, a retry horizon after it closed.

use rusqlite::{Connection, OptionalExtension};

use super::change::{Row, ROW_COLUMNS};
pub(super) use crate::budget::books::record::{from_millis, millis};
use crate::budget::books::{Charge, Record, RecordState};
use crate::budget::{Denial, LedgerStatus, Meter, ScopeKind, SettleOutcome};
use crate::money::MAX_USD_MICROS;
use crate::period::Period;

type Sql<T> = rusqlite::Result<T>;

impl Record {
    /// The record of `exec_id` in the file, if it has one.
    pub(super) fn load(conn: &Connection, exec_id: &str) -> Sql<Option<Record>> {
        let row = conn
            .prepare_cached(&format!(
                "SELECT {ROW_COLUMNS} FROM reservations WHERE exec_id = ?1"
            ))?
            .query_row([exec_id], Row::from_sql)
            .optional()?;
        row.as_ref().map(Record::from_row).transpose()
    }

    pub(super) fn from_row(row: &Row) -> Sql<Record> {
        let state = match row.state.as_str() {
            "open" => RecordState::Open,
            "expired" => RecordState::Expired(row.expiry_charged.unwrap_or(0)),
            "settled" => RecordState::Settled(SettleOutcome {
                status: status_from(row.settled_status.as_deref().unwrap_or_default())?,
                reserved: row.amount,
                actual: row.settled_actual.unwrap_or(0),
                applied: true,
                key_remaining: row.settled_key_remaining.unwrap_or(0),
            }),
            "denied" => RecordState::Denied(Denial {
                kind: kind_from(row.denied_scope_kind.as_deref().unwrap_or_default())?,
                id: row.denied_scope_id.clone().unwrap_or_default(),
                meter: match &row.denied_meter {
                    Some(meter) => meter_from(meter)?,
                    None => Meter::Usd,
                },
                period: row
                    .denied_period
                    .as_deref()
                    .unwrap_or_default()
                    .parse::<Period>()
                    .map_err(|e| invalid(e.to_string()))?,
                cap: row.denied_cap.unwrap_or(0),
                remaining: row.denied_remaining.unwrap_or(0),
                resets_at: row.denied_resets_at.map(from_millis),
            }),
            other => return Err(invalid(format!("reservation state {other:?}"))),
        };
        let org = match (&row.org_id, &row.org_period_id) {
            (Some(id), Some(period_id)) => Some(Charge::usd(
                ScopeKind::Org,
                id.clone(),
                period_id.clone(),
                row.org_cap.unwrap_or(0),
            )),
            _ => None,
        };
        Ok(Record {
            state,
            amount: row.amount,
            key: Charge::usd(
                ScopeKind::Key,
                row.key_id.clone(),
                row.key_period_id.clone(),
                row.key_cap,
            ),
            org,
            // A run's cap is read where it is checked, at reserve.
            run: row.run_id.as_ref().map(|id| {
                Charge::usd(
                    ScopeKind::Run,
                    id.clone(),
                    "total".to_owned(),
                    MAX_USD_MICROS,
                )
            }),
            caps: match &row.caps {
                Some(caps) => caps_from(caps)?,
                None => Vec::new(),
            },
            tokens: row.tokens.unwrap_or(0),
            customer: row.customer.clone(),
            started_at: row.started_at,
            deadline: row.deadline,
            ttl_ms: row.ttl_ms,
            forget_at: row.forget_at,
            claim: row.claim.clone(),
            model: row.model.clone().unwrap_or_default(),
        })
    }

    /// The record as the row of `exec_id`.
    pub(super) fn row(&self, exec_id: &str) -> Row {
        let mut row = Row {
            exec_id: exec_id.to_owned(),
            key_id: self.key.id.clone(),
            key_period_id: self.key.period_id.clone(),
            key_cap: self.key.cap,
            org_id: self.org.as_ref().map(|org| org.id.clone()),
            org_period_id: self.org.as_ref().map(|org| org.period_id.clone()),
            org_cap: self.org.as_ref().map(|org| org.cap),
            amount: self.amount,
            claim: self.claim.clone(),
            started_at: self.started_at,
            deadline: self.deadline,
            ttl_ms: self.ttl_ms,
            forget_at: self.forget_at,
            // A row that predates the column keeps naming no model.
            model: (!self.model.is_empty()).then(|| self.model.clone()),
            run_id: self.run.as_ref().map(|run| run.id.clone()),
            caps: (!self.caps.is_empty()).then(|| caps_text(&self.caps)),
            tokens: (self.tokens > 0).then_some(self.tokens),
            customer: self.customer.clone(),
            ..Row::default()
        };
        row.state = match &self.state {
            RecordState::Open => "open",
            RecordState::Expired(charged) => {
                row.expiry_charged = Some(*charged);
                "expired"
            }
            RecordState::Settled(outcome) => {
                row.settled_status = Some(outcome.status.as_str().to_owned());
                row.settled_actual = Some(outcome.actual);
                row.settled_key_remaining = Some(outcome.key_remaining);
                "settled"
            }
            RecordState::Denied(denial) => {
                row.denied_scope_kind = Some(denial.kind.as_str().to_owned());
                row.denied_scope_id = Some(denial.id.clone());
                row.denied_period = Some(denial.period.as_str().to_owned());
                row.denied_cap = Some(denial.cap);
                row.denied_remaining = Some(denial.remaining);
                row.denied_resets_at = denial.resets_at.map(millis);
                row.denied_meter = (denial.meter != Meter::Usd).then(|| denial.meter.to_string());
                "denied"
            }
        }
        .to_owned();
        row
    }
}

/// A record's other caps as its row keeps them: one `kind meter
/// period_id cap id` a line (ids hold no whitespace).
fn caps_text(caps: &[Charge]) -> String {
    let lines: Vec<String> = caps
        .iter()
        .map(|c| format!("{} {} {} {} {}", c.kind, c.meter, c.period_id, c.cap, c.id))
        .collect();
    lines.join("\n")
}

/// The caps of [`caps_text`], read back.
fn caps_from(text: &str) -> Sql<Vec<Charge>> {
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(5, ' ');
            let mut next = || parts.next().ok_or_else(|| invalid(format!("cap {line:?}")));
            let kind = kind_from(next()?)?;
            let meter = meter_from(next()?)?;
            let period_id = next()?.to_owned();
            let cap = next()?
                .parse()
                .map_err(|_| invalid(format!("cap {line:?}")))?;
            Ok(Charge {
                kind,
                id: next()?.to_owned(),
                meter,
                period_id,
                cap,
            })
        })
        .collect()
}

fn meter_from(text: &str) -> Sql<Meter> {
    Meter::parse(text).ok_or_else(|| invalid(format!("meter {text:?}")))
}

pub(super) fn status_from(text: &str) -> Sql<LedgerStatus> {
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

pub(super) fn kind_from(text: &str) -> Sql<ScopeKind> {
    ScopeKind::parse(text).ok_or_else(|| invalid(format!("scope kind {text:?}")))
}

/// A value in the file this binary does not understand.
pub(super) fn invalid(what: String) -> rusqlite::Error {
    rusqlite::Error::InvalidColumnType(0, what, rusqlite::types::Type::Text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn charge(kind: ScopeKind, id: &str) -> Charge {
        Charge::usd(kind, id.to_owned(), "2026-12-02".to_owned(), 9_000)
    }

    fn record(state: RecordState) -> Record {
        Record {
            state,
            amount: 1_200,
            key: charge(ScopeKind::Key, "alice"),
            org: Some(charge(ScopeKind::Org, "acme")),
            run: Some(Charge::usd(
                ScopeKind::Run,
                "alice/r1".to_owned(),
                "total".to_owned(),
                MAX_USD_MICROS,
            )),
            caps: vec![
                Charge {
                    meter: Meter::Usd,
                    ..charge(ScopeKind::Model, "key:alice/opus")
                },
                Charge {
                    kind: ScopeKind::Key,
                    id: "alice".to_owned(),
                    meter: Meter::Tokens,
                    period_id: "2026-12-02T1849".to_owned(),
                    cap: 200_000,
                },
            ],
            tokens: 4_000,
            customer: Some("c1@example.com".to_owned()),
            started_at: 1_000,
            deadline: 61_000,
            ttl_ms: 60_000,
            forget_at: Some(181_000),
            claim: Some("idem".to_owned()),
            model: "gpt-4o-mini".to_owned(),
        }
    }

    /// Every state reads back from its row as it was written.
    #[test]
    fn a_record_and_its_row_carry_the_same_facts() {
        let states = [
            RecordState::Open,
            RecordState::Expired(1_200),
            RecordState::Settled(SettleOutcome {
                status: LedgerStatus::Overrun,
                reserved: 1_200,
                actual: 1_500,
                applied: true,
                key_remaining: 7_000,
            }),
            RecordState::Denied(Denial {
                kind: ScopeKind::Org,
                id: "acme".to_owned(),
                meter: Meter::Usd,
                period: Period::Day,
                cap: 9_000,
                remaining: 3,
                resets_at: Some(from_millis(86_400_000)),
            }),
            RecordState::Denied(Denial {
                kind: ScopeKind::Model,
                id: "org:acme/opus".to_owned(),
                meter: Meter::Requests,
                period: Period::Minute,
                cap: 60,
                remaining: 0,
                resets_at: Some(from_millis(60_000)),
            }),
        ];
        for state in states {
            let written = record(state);
            let row = written.row("call-1");
            let read = Record::from_row(&row).unwrap();
            assert_eq!(read.row("call-1"), row, "{written:?}");
            assert_eq!(read.caps.len(), 2);
            assert_eq!(read.caps[1].meter, Meter::Tokens);
        }
    }
}
