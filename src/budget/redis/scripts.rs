//! The Lua scripts of `lua/` and the Rust side of their contracts: which
//! keys they get, how their arguments are written and how their replies
//! are read. Each script's header states its KEYS, ARGV, replies and
//! invariants; the functions here follow those headers line by line.
//!
//! Every script but `snapshot.lua`, the store's own record (`meta.lua`,
//! `accept_epoch.lua`, `mark_epoch.lua`, the migrations; see `meta`) and
//! the admin API's documents (`record_write.lua`, `records.lua`; see
//! `records`) is `lua/common.lua` (the key layout, period ids, expiry and
//! booking) followed by the script's own body, so the helpers exist once
//! and every script stays one atomic call.
//!
//! Tests shift the store's clock: a test build puts `lua/test/clock.lua`
//! between the two, which takes a clock offset off the end of ARGV (see
//! `RedisStore::run`). Production scripts and their arguments have no
//! offset at all.

use std::time::Duration;

use ::redis::Script;
use chrono::{DateTime, Utc};

use crate::budget::{
    AdjustOutcome, Adjustment, Denial, LedgerStatus, Level, OnExpiry, Period, ReserveRequest,
    Scope, ScopeKind, SettleOutcome, Settlement, StoreError,
};
use crate::money::UsdMicros;

/// The deadline of a reservation must stay far below 2^53 ms (see
/// `MAX_TTL_MS` in `lua/common.lua`); a longer TTL is shortened to this
/// (some 35,000 years).
const MAX_TTL_MS: u64 = 1 << 50;

/// The scripts refuse any integer argument of 2^53 or more (Lua numbers
/// are doubles).
const MAX_SCRIPT_INTEGER: u64 = (1 << 53) - 1;

/// The seven keys of one hash tag, in the order every script takes them.
/// They share the tag `{T}`, so a cluster keeps them in one slot.
pub(super) struct TagKeys([String; 7]);

impl TagKeys {
    pub fn new(tag: &str) -> Self {
        TagKeys(
            ["spend", "res", "pending", "closed", "ledger", "agg", "done"]
                .map(|name| format!("tg:{{{tag}}}:{name}")),
        )
    }

    pub fn all(&self) -> &[String; 7] {
        &self.0
    }

    pub fn spend(&self) -> &str {
        &self.0[0]
    }

    pub fn res(&self) -> &str {
        &self.0[1]
    }

    pub fn pending(&self) -> &str {
        &self.0[2]
    }

    pub fn ledger(&self) -> &str {
        &self.0[4]
    }

    /// The spend aggregates (`aggregates`).
    pub fn agg(&self) -> &str {
        &self.0[5]
    }
}

/// The scripts, hashed once; [`Script`] calls them with EVALSHA and loads
/// them again when Redis answers NOSCRIPT (after `SCRIPT FLUSH`, a restart
/// or a failover to a node that never saw them).
pub(super) struct Scripts {
    pub reserve: Script,
    pub settle: Script,
    pub adjust: Script,
    pub sweep: Script,
    pub drain: Script,
    pub state: Script,
    pub snapshot: Script,
    pub meta: Script,
    pub accept_epoch: Script,
    pub mark_epoch: Script,
    pub migrate_layout_1: Script,
    pub migrate_layout_2: Script,
    pub record_write: Script,
    pub records: Script,
}

/// `lua/common.lua`, a newline and the script's body: the source Redis
/// knows the script (and its SHA) by.
#[cfg(not(test))]
macro_rules! with_common {
    ($file:literal) => {
        concat!(
            include_str!("../../../lua/common.lua"),
            "\n",
            include_str!(concat!("../../../lua/", $file))
        )
    };
}

/// In tests, `lua/test/clock.lua` sits between common.lua and the body, in
/// the same chunk, so it can rebind common.lua's `store_now` local.
#[cfg(test)]
macro_rules! with_common {
    ($file:literal) => {
        concat!(
            include_str!("../../../lua/common.lua"),
            "\n",
            include_str!("../../../lua/test/clock.lua"),
            "\n",
            include_str!(concat!("../../../lua/", $file))
        )
    };
}

/// [`with_common!`] with `lua/fold.lua` before the body: the scripts that
/// trim the ledger stream share its one way of folding entries out.
macro_rules! with_fold {
    ($file:literal) => {
        concat!(
            with_common!("fold.lua"),
            "\n",
            include_str!(concat!("../../../lua/", $file))
        )
    };
}

impl Scripts {
    pub fn new() -> Self {
        Scripts {
            reserve: Script::new(with_common!("reserve.lua")),
            settle: Script::new(with_common!("settle.lua")),
            adjust: Script::new(with_common!("adjust.lua")),
            sweep: Script::new(with_fold!("sweep.lua")),
            drain: Script::new(with_fold!("drain.lua")),
            state: Script::new(with_common!("state.lua")),
            snapshot: Script::new(include_str!("../../../lua/snapshot.lua")),
            meta: Script::new(include_str!("../../../lua/meta.lua")),
            accept_epoch: Script::new(include_str!("../../../lua/accept_epoch.lua")),
            mark_epoch: Script::new(include_str!("../../../lua/mark_epoch.lua")),
            migrate_layout_1: Script::new(include_str!("../../../lua/migrate_layout_1.lua")),
            migrate_layout_2: Script::new(include_str!("../../../lua/migrate_layout_2.lua")),
            record_write: Script::new(include_str!("../../../lua/record_write.lua")),
            records: Script::new(include_str!("../../../lua/records.lua")),
        }
    }
}

/// `common.lua` alone, so tests can call its functions directly.
#[cfg(test)]
pub(super) const COMMON: &str = include_str!("../../../lua/common.lua");

/// The test clock chunk alone (see `with_common!`), so a test can check it.
#[cfg(test)]
pub(super) const TEST_CLOCK: &str = include_str!("../../../lua/test/clock.lua");

// === Arguments ===

fn flag(on: bool) -> &'static str {
    if on {
        "1"
    } else {
        "0"
    }
}

/// ARGV of `reserve.lua`; `claim` is the request's idempotency claim,
/// `epoch` the store epoch the gateway serves under.
pub(super) fn reserve_args(
    req: &ReserveRequest,
    claim: Option<&str>,
    lazy_limit: usize,
    on_expiry: OnExpiry,
    epoch: &str,
    closed_record_ms: u64,
    run_ttl_ms: u64,
) -> Vec<String> {
    let ttl_ms = u64::try_from(req.ttl.as_millis()).map_or(MAX_TTL_MS, |ms| ms.min(MAX_TTL_MS));
    let (run, run_cap) = match &req.run {
        Some(run) => (run.id.clone(), run.cap.map(|cap| cap.to_string())),
        None => (String::new(), None),
    };
    let (has_org, org_id, org_period, org_cap) = match &req.org {
        Some(org) => (true, org.id.clone(), org.period.as_str(), org.cap),
        None => (false, String::new(), Period::Total.as_str(), 0),
    };
    vec![
        req.exec_id.clone(),
        req.amount.to_string(),
        ttl_ms.to_string(),
        req.key.id.clone(),
        req.key.period.as_str().to_owned(),
        req.key.cap.to_string(),
        flag(has_org).to_owned(),
        org_id,
        org_period.to_owned(),
        org_cap.to_string(),
        lazy_limit.to_string(),
        claim.unwrap_or_default().to_owned(),
        on_expiry.as_str().to_owned(),
        epoch.to_owned(),
        closed_record_ms.min(MAX_TTL_MS).to_string(),
        req.model.clone(),
        req.min_amount.min(req.amount).to_string(),
        run,
        run_cap.unwrap_or_default(),
        run_ttl_ms.min(MAX_TTL_MS).to_string(),
    ]
}

/// ARGV of `settle.lua`; `call_id` is the same for every attempt of one
/// call.
pub(super) fn settle_args(
    settlement: &Settlement,
    epsilon: UsdMicros,
    call_id: &str,
    on_expiry: OnExpiry,
    closed_record_ms: u64,
) -> Vec<String> {
    let usage = &settlement.usage;
    vec![
        settlement.exec_id.clone(),
        settlement.key.clone(),
        flag(settlement.org.is_some()).to_owned(),
        settlement.org.clone().unwrap_or_default(),
        settlement.model.clone(),
        usage.input.to_string(),
        usage.cached_input.to_string(),
        usage.cache_write.to_string(),
        usage.output.to_string(),
        settlement.actual.to_string(),
        flag(settlement.estimated).to_owned(),
        epsilon.to_string(),
        call_id.to_owned(),
        on_expiry.as_str().to_owned(),
        closed_record_ms.min(MAX_TTL_MS).to_string(),
    ]
}

/// ARGV of `adjust.lua`; `epoch` is the store epoch the gateway serves
/// under, `call_id` the same for every attempt of one call.
pub(super) fn adjust_args(
    adjustment: &Adjustment,
    epoch: &str,
    closed_record_ms: u64,
    call_id: &str,
) -> Vec<String> {
    let (has_org, org_id, org_period) = match &adjustment.org {
        Some(org) => (true, org.id.clone(), org.period.as_str()),
        None => (false, String::new(), Period::Total.as_str()),
    };
    vec![
        adjustment.exec_id.clone(),
        adjustment.key.id.clone(),
        adjustment.key.period.as_str().to_owned(),
        flag(has_org).to_owned(),
        org_id,
        org_period.to_owned(),
        adjustment.amount.to_string(),
        adjustment.note.clone(),
        epoch.to_owned(),
        closed_record_ms.min(MAX_TTL_MS).to_string(),
        call_id.to_owned(),
    ]
}

/// A duration in whole milliseconds, as the scripts take it.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// ARGV of `sweep.lua`; `aggregate_days` is how many days back spend
/// aggregate rows are kept.
pub(super) fn sweep_args(
    limit: usize,
    retention: Duration,
    on_expiry: OnExpiry,
    aggregate_days: u32,
) -> Vec<String> {
    let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    vec![
        limit.to_string(),
        // No retention needs that long.
        retention_ms.min(MAX_SCRIPT_INTEGER).to_string(),
        on_expiry.as_str().to_owned(),
        aggregate_days.to_string(),
    ]
}

/// ARGV of `drain.lua`: the id of the last entry the sink acknowledged,
/// and at most how many entries to fold.
pub(super) fn drain_args(through: &str, limit: usize) -> Vec<String> {
    vec![through.to_owned(), limit.to_string()]
}

/// How many entries `drain.lua` folded.
pub(super) fn drain_reply(reply: &[String]) -> Result<usize, StoreError> {
    number(reply, 0, "drain.lua")
}

/// ARGV of `state.lua`.
pub(super) fn state_args(scope: &Scope) -> Vec<String> {
    vec![
        scope.kind.as_str().to_owned(),
        scope.id.clone(),
        scope.period.as_str().to_owned(),
    ]
}

// === Replies ===

/// What `reserve.lua` answered.
pub(super) enum ReserveReply {
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
pub(super) enum SettleReply {
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
pub(super) enum AdjustReply {
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

/// What `sweep.lua` did.
pub(super) struct SweepReply {
    pub expired: usize,
    /// Ledger entries folded past the ledger buffer, sink or no sink.
    pub folded: usize,
    pub more: bool,
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
pub(super) fn store_time(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Unavailable(format!("store time {ms} ms is out of range")))
}

pub(super) fn reserve_reply(reply: &[String]) -> Result<ReserveReply, StoreError> {
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
            let mut levels = Vec::with_capacity(3);
            // Kind, period id and committed counter of each scope charged,
            // after the amount (none in the answer to a retry).
            for at in (3..reply.len()).step_by(3) {
                levels.push(Level {
                    kind: ScopeKind::parse(field(reply, at, SCRIPT)?)
                        .ok_or_else(|| bad_reply(SCRIPT, reply))?,
                    period_id: field(reply, at + 1, SCRIPT)?.to_owned(),
                    committed: number(reply, at + 2, SCRIPT)?,
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
            let period: Period = field(reply, 4, SCRIPT)?
                .parse()
                .map_err(|_| bad_reply(SCRIPT, reply))?;
            let at = store_time(number(reply, 7, SCRIPT)?)?;
            let denial = Denial {
                kind,
                id: field(reply, 3, SCRIPT)?.to_owned(),
                period,
                cap: number(reply, 5, SCRIPT)?,
                remaining: number(reply, 6, SCRIPT)?,
                resets_at: period.resets_at(at),
            };
            Ok(ReserveReply::Denied { expired, denial })
        }
        _ => Err(bad_reply(SCRIPT, reply)),
    }
}

pub(super) fn settle_reply(reply: &[String]) -> Result<SettleReply, StoreError> {
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

pub(super) fn adjust_reply(reply: &[String]) -> Result<AdjustReply, StoreError> {
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
pub(super) fn state_reply(
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

pub(super) fn sweep_reply(reply: &[String]) -> Result<SweepReply, StoreError> {
    const SCRIPT: &str = "sweep.lua";
    Ok(SweepReply {
        expired: number(reply, 0, SCRIPT)?,
        folded: number(reply, 2, SCRIPT)?,
        more: field(reply, 3, SCRIPT)? == "1",
    })
}

pub(super) fn ledger_status(text: &str) -> Option<LedgerStatus> {
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
