//! The budget protocol: reserve an upper bound before a call, settle the
//! actual cost after it, exactly once, against every cap that applies.
//!
//! [`BudgetStore`] is one enum with a variant per backend, so the request
//! path calls plain async methods and each backend is an addition, not a
//! rewrite. Every backend implements the same semantics (see docs/design.md,
//! "Budget protocol") and passes the same contract tests:
//!
//! - `reserve` checks `spent + reserved + amount <= cap` for the key and its
//!   org and charges both, all or nothing; a retry with the same `exec_id`
//!   returns the first answer.
//! - `reserve_claimed` is `reserve` for a call the client named with an
//!   `Idempotency-Key`: while another reservation under the same claim is
//!   open (its request still in flight), the call is a duplicate and nothing
//!   is charged; once that one is settled or expired, the call is reserved
//!   (and so charged) as a call of its own.
//! - `settle` re-checks ownership, moves the counters by `actual - amount`,
//!   writes one ledger entry and marks the reservation settled; a retry
//!   changes nothing and returns the first result.
//! - A reservation past its deadline is expired: charged its amount (or,
//!   under `on_expiry = "release"`, nothing), with an `expired` ledger
//!   entry. A settle that arrives after that is `late`: it moves the
//!   counters by its actual cost less what expiry charged.
//! - Ledger entries older than the ledger retention are folded into their
//!   counters' folded sums, so `counter == folded + Σ ledger + Σ open`.
//!   On Redis the stream is only a buffer: entries are folded as soon as
//!   a durable sink has them (`RedisStore::fold_drained`), or once older
//!   than the ledger buffer when none took them.
//! - `adjust` is an operator's refund or credit: it moves the `spent` of
//!   the key and its org in their current periods and books an
//!   `adjustment` entry, all or nothing, once per exec id.
//! - `open_holds` lists the reservations open now, oldest first.
//! - Every ledger entry also adds to its day's spend aggregate (day, key,
//!   model) in the same atomic step (`aggregates`), so `spend` reports
//!   without the raw ledger; rows are kept the aggregate retention.
//!
//! - A spending alert (`alerts`) is queued once per event id and handed
//!   out, leased, until its delivery is marked: at least once, never
//!   twice at the same moment.
//!
//! On Redis, everything a key and its org share lives under one hash tag
//! ([`tag_for`]), so one script can charge both in one cluster slot.

pub mod aggregates;
pub mod alerts;
mod books;
pub mod caps;
#[cfg(test)]
mod contract;
pub mod memory;
mod open;
pub mod records;
pub mod redis;
mod rules;
#[cfg(test)]
mod simulation;
pub mod sqlite;
mod store;

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::AbortHandle;

pub use self::redis::{RedisStore, RedisUrlError};
pub use crate::config::OnExpiry;
pub use crate::period::Period;
pub use aggregates::{SpendQuery, SpendRow, DEFAULT_AGGREGATE_RETENTION_DAYS};
pub use caps::{Cap, Meter};
pub use memory::MemoryStore;
pub use open::{open, OpenError};
pub use rules::{
    Rules, DEFAULT_CLOSED_RECORD, DEFAULT_CUSTOMER_TTL, DEFAULT_LEDGER_RETENTION, DEFAULT_RUN_TTL,
};
pub use sqlite::{SqliteOpenError, SqliteStore};
pub use store::{AlertQueue, Books, BudgetStore, Records, Reports, Upkeep};

use crate::money::{UsdMicros, UsdMicrosDelta, MAX_USD_MICROS};
use crate::usage::Usage;

/// The Redis hash tag a key's budget data lives under: its org's id, or
/// `key:<key id>` for a key without an org. A key and its org share the tag,
/// so one script can charge both; config ids never contain `{` or `}`.
pub fn tag_for(org: Option<&str>, key: &str) -> String {
    match org {
        Some(org) => org.to_owned(),
        None => format!("key:{key}"),
    }
}

/// Whether `tollgate reconcile` proves a counter: the money of keys and
/// orgs, whose every call is in the ledger. A run's, a model group's and a
/// rate limit's counters are caps inside those books, kept for their
/// checks (a run is forgotten with its counter).
pub(crate) fn reconciled(kind: ScopeKind, counter_period: &str) -> bool {
    matches!(kind, ScopeKind::Key | ScopeKind::Org)
        && Meter::of_counter_period(counter_period).0 == Meter::Usd
}

/// Logs the reservations a sweep expired (under `tag`, on Redis), and what
/// they were charged.
fn log_expired(tag: Option<&str>, expired: usize, on_expiry: OnExpiry) {
    match on_expiry {
        OnExpiry::Charge => tracing::warn!(
            tag,
            expired,
            "expired reservations never settled by their deadline, charging their reserved amount"
        ),
        OnExpiry::Release => tracing::warn!(
            tag,
            expired,
            "released reservations never settled by their deadline"
        ),
    }
}

/// Stops a periodic sweep task when dropped.
pub struct SweeperGuard {
    task: AbortHandle,
}

impl SweeperGuard {
    pub(crate) fn new(task: AbortHandle) -> Self {
        SweeperGuard { task }
    }
}

impl Drop for SweeperGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One scope and period: its counter beside what the ledger and the open
/// reservations say it should hold (`tollgate reconcile`'s row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciliation {
    pub kind: ScopeKind,
    pub id: String,
    pub period_id: String,
    /// `spent + reserved`.
    pub counter: UsdMicros,
    /// Σ `actual` of the ledger entries charged to this period that have
    /// since been trimmed from the ledger (older than its retention).
    pub folded: UsdMicrosDelta,
    /// Σ `actual` of the ledger entries charged to this period. Entries
    /// may be negative (a late settle giving back part of an expiry's
    /// charge), so a part of the ledger may sum below zero.
    pub ledger: UsdMicrosDelta,
    /// Σ amounts of the reservations still open in this period.
    pub open: UsdMicros,
}

impl Reconciliation {
    /// `counter - (folded + ledger + open)`; zero when the books balance.
    pub fn drift(&self) -> i128 {
        i128::from(self.counter)
            - i128::from(self.folded)
            - i128::from(self.ledger)
            - i128::from(self.open)
    }
}

/// Whether a scope is a gateway key, an org, an agent's run inside a key,
/// or a model group inside a key or an org.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ScopeKind {
    Key,
    Org,
    Run,
    /// A model group (`model_caps`): id `key:<key>/<group>` or
    /// `org:<org>/<group>` ([`caps::model_scope_id`]).
    Model,
    /// One of a key's customers (the agent's end users), id
    /// `<key>/<customer>`, capped by the key's customer template.
    Customer,
}

impl ScopeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Key => "key",
            ScopeKind::Org => "org",
            ScopeKind::Run => "run",
            ScopeKind::Model => "model",
            ScopeKind::Customer => "customer",
        }
    }

    pub fn parse(text: &str) -> Option<ScopeKind> {
        match text {
            "key" => Some(ScopeKind::Key),
            "org" => Some(ScopeKind::Org),
            "run" => Some(ScopeKind::Run),
            "model" => Some(ScopeKind::Model),
            "customer" => Some(ScopeKind::Customer),
            _ => None,
        }
    }
}

impl fmt::Display for ScopeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A capped budget: a key or an org, with its cap per period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub kind: ScopeKind,
    pub id: String,
    pub cap: UsdMicros,
    pub period: Period,
}

/// One call's reservation.
#[derive(Clone, Debug)]
pub struct ReserveRequest {
    /// Minted by the gateway before reserving; the idempotency key of both
    /// reserve and settle.
    pub exec_id: String,
    pub key: Scope,
    pub org: Option<Scope>,
    /// The agent run the call belongs to (`x-tollgate-run`), a third scope
    /// inside the key.
    pub run: Option<RunScope>,
    /// Every other cap the call is held against: its model groups' money,
    /// and the rate limits of its key, org and groups.
    pub caps: Vec<Cap>,
    /// The most tokens (input and output) the call can use: what a
    /// `tokens` cap holds.
    pub tokens: u64,
    /// The customer the call is for (the id it named, without its key):
    /// remembered as one of the key's customers, and carried by its
    /// ledger entry.
    pub customer: Option<String>,
    /// The model the call is for (the one its settle will name), kept with
    /// the reservation so its holds and its expiry can name it.
    pub model: String,
    /// The least the call can be sent with: below it, the call is denied.
    pub min_amount: UsdMicros,
    /// The most the call may cost. The store holds the largest amount in
    /// `[min_amount, amount]` that every scope allows; a call with a fixed
    /// bound passes the same value twice.
    pub amount: UsdMicros,
    /// How long the reservation holds its headroom if it is never settled.
    pub ttl: Duration,
}

/// An agent's run: a scope inside its key, period `total`, whose cap the
/// first call that names the run fixes (none: the run is tracked, not
/// capped). It is forgotten `store.run_ttl_hours` after its last call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunScope {
    /// `<key id>/<run id>`: runs of different keys never share a scope,
    /// and a key id never contains `/`.
    pub id: String,
    /// The cap this call names (`x-tollgate-run-cap-usd`), if any.
    pub cap: Option<UsdMicros>,
}

impl RunScope {
    pub fn new(key: &str, run: &str, cap: Option<UsdMicros>) -> RunScope {
        RunScope {
            id: format!("{key}/{run}"),
            cap,
        }
    }

    /// The run id the client named, without its key.
    pub fn run_id(&self) -> &str {
        run_id_of(&self.id)
    }
}

/// The run id the client named, from a run's scope id `<key>/<run>`.
pub fn run_id_of(scope_id: &str) -> &str {
    scope_id.split_once('/').map_or(scope_id, |(_, run)| run)
}

/// The key a run's scope id `<key>/<run>` is inside.
pub fn run_key_of(scope_id: &str) -> &str {
    scope_id.split_once('/').map_or(scope_id, |(key, _)| key)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// `amount` is held against every scope (also the answer to a retry of
    /// a reserve that succeeded). `levels` are the scopes' `spent +
    /// reserved` right after it, key first, then org and run, for spending
    /// alerts; empty in the answer to a retry.
    Reserved {
        amount: UsdMicros,
        levels: Vec<Level>,
    },
    /// A scope would go over its cap; nothing was charged anywhere.
    Denied(Denial),
    /// The call names a run cap other than the one the run's first call
    /// fixed (`cap`, `None` when it fixed none); nothing was charged.
    RunCapConflict { cap: Option<UsdMicros> },
}

impl ReserveOutcome {
    pub fn is_reserved(&self) -> bool {
        matches!(self, ReserveOutcome::Reserved { .. })
    }

    /// What a reserve held, if it reserved.
    pub fn held(&self) -> Option<UsdMicros> {
        match self {
            ReserveOutcome::Reserved { amount, .. } => Some(*amount),
            _ => None,
        }
    }
}

/// A scope's `spent + reserved` in the period a reserve charged: in µUSD
/// for the key, org and run (the first levels, in that order), then in
/// its meter's unit for each of the request's other caps, in their order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Level {
    pub kind: ScopeKind,
    pub meter: Meter,
    pub period_id: String,
    pub committed: u64,
}

/// What a reserve under an idempotency claim answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimedReserve {
    /// No open reservation holds the claim, so the reserve ran as usual;
    /// when it reserved, the new reservation holds the claim.
    Ran(ReserveOutcome),
    /// An open reservation under another exec id holds the claim: the same
    /// request is still in flight. Nothing was charged or remembered, so a
    /// retry of this call asks again.
    Duplicate,
}

/// Which cap refused a reservation, and its state at that moment. Money
/// caps are checked before rate limits, so a call that no wait would let
/// through is never told to wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub kind: ScopeKind,
    pub id: String,
    pub meter: Meter,
    pub period: Period,
    /// In the meter's unit.
    pub cap: u64,
    /// `cap - spent - reserved`, never below zero.
    pub remaining: u64,
    /// When the period rolls over; `None` for `total`.
    pub resets_at: Option<DateTime<Utc>>,
}

/// The actual cost of a reserved call.
#[derive(Clone, Debug)]
pub struct Settlement {
    pub exec_id: String,
    /// Must match the reservation's key and org, or the settle is rejected.
    pub key: String,
    pub org: Option<String>,
    pub model: String,
    pub usage: Usage,
    pub actual: UsdMicros,
    /// The usage was counted by the gateway (stream cut, client gone), not
    /// reported by the provider.
    pub estimated: bool,
}

/// An operator's refund or credit (`POST /admin/v1/adjustments`).
#[derive(Clone, Debug)]
pub struct Adjustment {
    /// Minted by the caller (a UUIDv7) once per adjustment and kept across
    /// its retries: the idempotency key. A retry must name the same key
    /// and org; one naming another is refused (`OwnershipMismatch`) where
    /// the store can tell: everywhere but on Redis across orgs, whose
    /// records live under each org's own tag.
    pub exec_id: String,
    pub key: Scope,
    pub org: Option<Scope>,
    /// Added to `spent` of the key and the org in their current periods:
    /// negative to refund, positive to charge money the operator says was
    /// spent.
    pub amount: UsdMicrosDelta,
    /// Why, in the operator's words; kept with the ledger entry.
    pub note: String,
}

impl Adjustment {
    /// The key, then its org: the order a refusal names them in.
    pub(crate) fn scopes(&self) -> impl Iterator<Item = &Scope> {
        std::iter::once(&self.key).chain(self.org.as_ref())
    }

    /// Whether the amount, either way, stays below 2^53 µUSD; every store
    /// refuses it before anything else otherwise.
    pub(crate) fn amount_in_range(&self) -> bool {
        self.amount.unsigned_abs() <= MAX_USD_MICROS
    }

    pub(crate) fn out_of_range(&self) -> StoreError {
        StoreError::OutOfRange {
            exec_id: self.exec_id.clone(),
        }
    }
}

/// What the memory and SQLite stores remember of an applied adjustment
/// for its retries: whose it is, and its first outcome.
#[derive(Clone, Debug)]
pub(crate) struct AppliedAdjustment {
    pub key: String,
    pub org: Option<String>,
    pub key_period_id: String,
    pub org_period_id: Option<String>,
    pub key_spent: UsdMicros,
}

impl AppliedAdjustment {
    /// The answer to a retry of `adjustment`: its first outcome, or an
    /// ownership mismatch when the retry names another key or org.
    pub(crate) fn retried(&self, adjustment: &Adjustment) -> Result<AdjustOutcome, StoreError> {
        let org = adjustment.org.as_ref().map(|org| org.id.as_str());
        if self.key != adjustment.key.id || self.org.as_deref() != org {
            return Err(StoreError::OwnershipMismatch {
                exec_id: adjustment.exec_id.clone(),
            });
        }
        Ok(self.outcome(false))
    }

    pub(crate) fn outcome(&self, applied: bool) -> AdjustOutcome {
        AdjustOutcome::Applied {
            key_period_id: self.key_period_id.clone(),
            org_period_id: self.org_period_id.clone(),
            key_spent: self.key_spent,
            applied,
        }
    }
}

/// What an adjustment did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdjustOutcome {
    /// Booked, in these periods (also the answer to a retry, with
    /// `applied` false).
    Applied {
        key_period_id: String,
        org_period_id: Option<String>,
        /// The key's `spent` in `key_period_id` right after the
        /// adjustment.
        key_spent: UsdMicros,
        /// False when this call was a retry of one already applied.
        applied: bool,
    },
    /// A refund larger than what this scope has spent in its current
    /// period (the key is named when neither can take it): nothing was
    /// changed, and nothing remembered, so asking again is asking afresh.
    Refused {
        kind: ScopeKind,
        id: String,
        spent: UsdMicros,
    },
}

/// A reservation open now (`GET /admin/v1/reservations`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenHold {
    pub exec_id: String,
    pub key: String,
    pub org: Option<String>,
    /// The run id the client named (without its key), if any.
    pub run: Option<String>,
    /// The model the call is for; empty for a reservation recorded by a
    /// version that did not keep it.
    pub model: String,
    pub amount: UsdMicros,
    /// When it was reserved, on the store's clock.
    pub started_at: DateTime<Utc>,
    /// When it expires if never settled.
    pub deadline: DateTime<Utc>,
}

/// How a settled call, or an adjustment, is recorded in the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LedgerStatus {
    /// Settled at or below its reservation (plus epsilon).
    Ok,
    /// Cost more than its reservation: charged in full, counted as overrun.
    Overrun,
    /// Usage counted by the gateway because the provider's never came.
    Estimated,
    /// Arrived after the reservation expired: the actual cost replaces
    /// what expiry charged.
    Late,
    /// Never settled by its deadline: charged the reserved amount, or
    /// nothing under `on_expiry = "release"`.
    Expired,
    /// An operator's refund (negative) or credit, not a call.
    Adjustment,
}

impl LedgerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerStatus::Ok => "ok",
            LedgerStatus::Overrun => "overrun",
            LedgerStatus::Estimated => "estimated",
            LedgerStatus::Late => "late",
            LedgerStatus::Expired => "expired",
            LedgerStatus::Adjustment => "adjustment",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleOutcome {
    pub status: LedgerStatus,
    pub reserved: UsdMicros,
    pub actual: UsdMicros,
    /// False when this settle was a retry of one already applied.
    pub applied: bool,
    /// What the key scope has left after this settle, in the period the
    /// reservation was made in: `cap - spent - reserved`, never below zero.
    /// (The reservation record keeps the key's cap from reserve time, so the
    /// gateway's `x-tollgate-budget-remaining-usd-micros` header costs no
    /// extra store round trip.)
    pub key_remaining: UsdMicros,
}

/// One ledger line; `counter == Σ actual + Σ open reservations` per scope
/// and period. A call's entry, or an adjustment's (model empty, no usage,
/// nothing reserved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerEntry {
    pub exec_id: String,
    pub key: String,
    pub org: Option<String>,
    /// The run id the client named (without its key), if any.
    pub run: Option<String>,
    /// The customer the call was for, if it named one.
    pub customer: Option<String>,
    pub model: String,
    pub usage: Usage,
    pub reserved: UsdMicros,
    /// What this entry moved its counters by: the call's cost for a
    /// settle on time, what expiry charged for an `expired` entry, for
    /// a `late` one the call's cost less what its expiry charged (negative
    /// when the call cost less than that), and an adjustment's amount.
    pub actual: UsdMicrosDelta,
    pub status: LedgerStatus,
    pub at: DateTime<Utc>,
    /// An adjustment's note; `None` for a call's entry.
    pub note: Option<String>,
}

/// One of a key's customers as the store remembers it: its id, and when
/// it last made a call. A customer without a call for
/// `store.customer_ttl_days` is forgotten, with its counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomerSeen {
    pub id: String,
    pub last_call: DateTime<Utc>,
}

/// A scope's counters in its current period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeState {
    pub period_id: String,
    pub spent: UsdMicros,
    pub reserved: UsdMicros,
    pub resets_at: Option<DateTime<Utc>>,
}

/// An agent's run as remembered: its cap (`None`: not capped) and its
/// counters (period `total`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunState {
    pub cap: Option<UsdMicros>,
    pub spent: UsdMicros,
    pub reserved: UsdMicros,
}

/// Why a store call failed. Only `Unavailable` and `Timeout` are worth a
/// retry: the others are the store's answer to the call itself, the same
/// every time it is asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("budget store unavailable: {0}")]
    Unavailable(String),
    #[error("budget store timed out")]
    Timeout,
    #[error("no reservation {0} to settle")]
    UnknownReservation(String),
    /// The reservation to settle, or the adjustment retried, was made for
    /// another key or org.
    #[error("{exec_id} belongs to another key or org")]
    OwnershipMismatch { exec_id: String },
    /// The amount of a settle or an adjustment, or a counter it would
    /// move, reaches 2^53 µUSD, past which Redis's Lua numbers (doubles)
    /// are no longer exact. Every store refuses it the same way, before
    /// changing anything.
    #[error("{exec_id} would take an amount or a counter to 2^53 µUSD or more")]
    OutOfRange { exec_id: String },
    /// The store refused the call's arguments (a Lua script's own check):
    /// the gateway and the scripts disagree, which no retry mends.
    #[error("budget store refused the call: {0}")]
    Refused(String),
}
