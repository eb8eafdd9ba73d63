//! How the scripts' replies are read, each as its script's header states.

use chrono::{DateTime, Utc};

use crate::budget::{
    AdjustOutcome, Denial, LedgerStatus, Level, Meter, Period, ScopeKind, SettleOutcome, StoreError,
};
use crate::money::UsdMicros;

/// What `reserve.lua` answered.
pub(crate) enum ReserveReply {
    Reserved {
        expired: usize,
        amount: UsdMicros,
        levels: Vec<Level>,
    },
    /// The run's first call fixed another cap (`None`: none).
    RunCapConflict {
        expired: usize,
        cap: Option<UsdMicros>,
    },
    Denied {
        expired: usize,
        denial: Denial,
    },
    /// An open reservation under another exec id holds the claim.
    Duplicate {
        expired: usize,
    },
    /// The tag's books carry no epoch mark, or this other one; nothing
    /// was done.
    Epoch {
        mark: Option<String>,
    },
}

/// What `settle.lua` answered.
pub(crate) enum SettleReply {
    /// No record of the exec id under the settlement's tag.
    Absent,
    /// The exec id was denied: nothing to settle.
    Denied,
    Mismatch,
    /// The settle would take this counter field to 2^53 or more; nothing
    /// was written.
    OutOfRange(String),
    Settled {
        outcome: SettleOutcome,
        /// This settle found the reservation past its deadline and expired
        /// it first.
        expired_now: bool,
    },
}

/// What `adjust.lua` answered.
pub(crate) enum AdjustReply {
    /// Applied now, or before (a retry), or refused.
    Done(AdjustOutcome),
    /// The exec id was applied to another key or org.
    Mismatch,
    /// The credit would take this counter field to 2^53 or more; nothing
    /// was written.
    OutOfRange(String),
    /// As [`ReserveReply::Epoch`]: nothing was done.
    Epoch { mark: Option<String> },
}

/// How many entries `drain.lua` folded.
pub(crate) fn drain_reply(reply: &[String]) -> Result<usize, StoreError> {
    number(reply, 0, "drain.lua")
}

/// What `sweep.lua` did.
pub(crate) struct SweepReply {
    pub expired: usize,
    /// Ledger entries folded past the ledger buffer, sink or no sink.
    pub folded: usize,
    pub more: bool,
    /// Customers forgotten (no call for the customer TTL).
    pub customers: usize,
    /// Spend fields the pass over the spend hash deleted: rate limits'
    /// ended minutes, forgotten customers' entries and counters.
    pub cleared: usize,
}

/// A reply that breaks the script's contract: the scripts and this file
/// disagree, which no retry mends.
fn bad_reply(script: &str, reply: &[String]) -> StoreError {
    StoreError::Unavailable(format!("unexpected reply from {script}: {reply:?}"))
}

fn field<'a>(reply: &'a [String], index: usize, script: &str) -> Result<&'a str, StoreError> {
    reply
        .get(index)
        .map(String::as_str)
        .ok_or_else(|| bad_reply(script, reply))
}

fn number<T: std::str::FromStr>(
    reply: &[String],
    index: usize,
    script: &str,
) -> Result<T, StoreError> {
    field(reply, index, script)?
        .parse()
        .map_err(|_| bad_reply(script, reply))
}

/// A store time in ms since the epoch.
pub(crate) fn store_time(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Unavailable(format!("store time {ms} ms is out of range")))
}

pub(crate) fn reserve_reply(reply: &[String]) -> Result<ReserveReply, StoreError> {
    const SCRIPT: &str = "reserve.lua";
    match field(reply, 0, SCRIPT)? {
        "epoch_unknown" => return Ok(ReserveReply::Epoch { mark: None }),
        "epoch_mismatch" => {
            let mark = field(reply, 1, SCRIPT)?.to_owned();
            return Ok(ReserveReply::Epoch { mark: Some(mark) });
        }
        _ => {}
    }
    let expired = number(reply, 1, SCRIPT)?;
    match field(reply, 0, SCRIPT)? {
        "reserved" => {
            let mut levels = Vec::with_capacity((reply.len() - 3) / 4);
            // Kind, meter, period id and committed counter of each counter
            // charged, after the amount (none in the answer to a retry).
            for at in (3..reply.len()).step_by(4) {
                levels.push(Level {
                    kind: ScopeKind::parse(field(reply, at, SCRIPT)?)
                        .ok_or_else(|| bad_reply(SCRIPT, reply))?,
                    meter: Meter::parse(field(reply, at + 1, SCRIPT)?)
                        .ok_or_else(|| bad_reply(SCRIPT, reply))?,
                    period_id: field(reply, at + 2, SCRIPT)?.to_owned(),
                    committed: number(reply, at + 3, SCRIPT)?,
                });
            }
            Ok(ReserveReply::Reserved {
                expired,
                amount: number(reply, 2, SCRIPT)?,
                levels,
            })
        }
        "run_cap_conflict" => Ok(ReserveReply::RunCapConflict {
            expired,
            cap: field(reply, 2, SCRIPT)?.parse().ok(),
        }),
        "duplicate" => Ok(ReserveReply::Duplicate { expired }),
        "denied" => {
            let kind = ScopeKind::parse(field(reply, 2, SCRIPT)?)
                .ok_or_else(|| bad_reply(SCRIPT, reply))?;
            let meter =
                Meter::parse(field(reply, 4, SCRIPT)?).ok_or_else(|| bad_reply(SCRIPT, reply))?;
            let period: Period = field(reply, 5, SCRIPT)?
                .parse()
                .map_err(|_| bad_reply(SCRIPT, reply))?;
            let at = store_time(number(reply, 8, SCRIPT)?)?;
            let denial = Denial {
                kind,
                id: field(reply, 3, SCRIPT)?.to_owned(),
                meter,
                period,
                cap: number(reply, 6, SCRIPT)?,
                remaining: number(reply, 7, SCRIPT)?,
                resets_at: period.resets_at(at),
            };
            Ok(ReserveReply::Denied { expired, denial })
        }
        _ => Err(bad_reply(SCRIPT, reply)),
    }
}

pub(crate) fn settle_reply(reply: &[String]) -> Result<SettleReply, StoreError> {
    const SCRIPT: &str = "settle.lua";
    match field(reply, 0, SCRIPT)? {
        "absent" => Ok(SettleReply::Absent),
        "denied" => Ok(SettleReply::Denied),
        "mismatch" => Ok(SettleReply::Mismatch),
        "out_of_range" => Ok(SettleReply::OutOfRange(field(reply, 1, SCRIPT)?.to_owned())),
        "settled" => {
            let status =
                ledger_status(field(reply, 1, SCRIPT)?).ok_or_else(|| bad_reply(SCRIPT, reply))?;
            let outcome = SettleOutcome {
                status,
                reserved: number(reply, 2, SCRIPT)?,
                actual: number(reply, 3, SCRIPT)?,
                key_remaining: number(reply, 4, SCRIPT)?,
                applied: field(reply, 5, SCRIPT)? == "1",
            };
            let expired_now = field(reply, 6, SCRIPT)? == "1";
            Ok(SettleReply::Settled {
                outcome,
                expired_now,
            })
        }
        _ => Err(bad_reply(SCRIPT, reply)),
    }
}

pub(crate) fn adjust_reply(reply: &[String]) -> Result<AdjustReply, StoreError> {
    const SCRIPT: &str = "adjust.lua";
    match field(reply, 0, SCRIPT)? {
        "epoch_unknown" => Ok(AdjustReply::Epoch { mark: None }),
        "epoch_mismatch" => Ok(AdjustReply::Epoch {
            mark: Some(field(reply, 1, SCRIPT)?.to_owned()),
        }),
        "mismatch" => Ok(AdjustReply::Mismatch),
        "out_of_range" => Ok(AdjustReply::OutOfRange(field(reply, 1, SCRIPT)?.to_owned())),
        "refused" => {
            let kind = match field(reply, 1, SCRIPT)? {
                "key" => ScopeKind::Key,
                "org" => ScopeKind::Org,
                _ => return Err(bad_reply(SCRIPT, reply)),
            };
            Ok(AdjustReply::Done(AdjustOutcome::Refused {
                kind,
                id: field(reply, 2, SCRIPT)?.to_owned(),
                spent: number(reply, 3, SCRIPT)?,
            }))
        }
        "applied" => Ok(AdjustReply::Done(AdjustOutcome::Applied {
            key_period_id: field(reply, 1, SCRIPT)?.to_owned(),
            org_period_id: Some(field(reply, 2, SCRIPT)?)
                .filter(|period| !period.is_empty())
                .map(str::to_owned),
            key_spent: number(reply, 3, SCRIPT)?,
            applied: field(reply, 4, SCRIPT)? == "1",
        })),
        _ => Err(bad_reply(SCRIPT, reply)),
    }
}

/// `(now, period id, committed, reserved)` from `state.lua`.
pub(crate) fn state_reply(
    reply: &[String],
) -> Result<(DateTime<Utc>, String, UsdMicros, UsdMicros), StoreError> {
    const SCRIPT: &str = "state.lua";
    Ok((
        store_time(number(reply, 0, SCRIPT)?)?,
        field(reply, 1, SCRIPT)?.to_owned(),
        number(reply, 2, SCRIPT)?,
        number(reply, 3, SCRIPT)?,
    ))
}

pub(crate) fn sweep_reply(reply: &[String]) -> Result<SweepReply, StoreError> {
    const SCRIPT: &str = "sweep.lua";
    Ok(SweepReply {
        expired: number(reply, 0, SCRIPT)?,
        folded: number(reply, 2, SCRIPT)?,
        more: field(reply, 3, SCRIPT)? == "1",
        customers: number(reply, 5, SCRIPT)?,
        cleared: number(reply, 6, SCRIPT)?,
    })
}

pub(crate) fn ledger_status(text: &str) -> Option<LedgerStatus> {
    [
        LedgerStatus::Ok,
        LedgerStatus::Overrun,
        LedgerStatus::Estimated,
        LedgerStatus::Late,
        LedgerStatus::Expired,
        LedgerStatus::Adjustment,
    ]
    .into_iter()
    .find(|status| status.as_str() == text)
}
