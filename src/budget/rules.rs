//! The settings a store keeps its books by, one value handed to every
//! store the same way: how far a settle may pass its reservation, what an
//! expiry charges, and how long each kind of record is kept.

use std::time::Duration;

use crate::config::{OnExpiry, StoreConfig};
use crate::money::UsdMicros;

use super::aggregates::DEFAULT_AGGREGATE_RETENTION_DAYS;

/// How long a settled or denied call's record is kept once closed: as long
/// as a retry of that call can still arrive (the gateway retries a store
/// call for seconds), and no longer, so per-call state does not pile up.
/// An expired record is kept a whole reservation TTL instead, as long as a
/// late settle can still arrive.
pub const DEFAULT_CLOSED_RECORD: Duration = Duration::from_secs(120);

/// How long a ledger entry is kept before it is folded into its counters'
/// folded sums.
pub const DEFAULT_LEDGER_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long a run is remembered after its last call (`store.run_ttl_hours`).
pub const DEFAULT_RUN_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long a customer is remembered after its last call
/// (`store.customer_ttl_days`).
pub const DEFAULT_CUSTOMER_TTL: Duration = Duration::from_secs(400 * 24 * 3600);

/// The rules of one store's books.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// How far above its reservation a settle may land before it counts as
    /// an overrun, absorbing rounding between the estimate and the bill.
    pub settle_epsilon: UsdMicros,
    /// What a reservation never settled by its deadline is charged.
    pub on_expiry: OnExpiry,
    /// How long a settled or denied call's record is kept for retries.
    pub closed_record: Duration,
    /// How long a run is remembered after its last call.
    pub run_ttl: Duration,
    /// How long a key's customer is remembered after its last call, with
    /// its counters.
    pub customer_ttl: Duration,
    /// How long a ledger entry is kept one by one before it is folded into
    /// its counters' folded sums. On Redis this is the ledger buffer: how
    /// long an entry no sink took stays in the stream.
    pub ledger_retention: Duration,
    /// How many UTC days back the spend aggregates are kept.
    pub aggregate_retention_days: u32,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            settle_epsilon: 0,
            on_expiry: OnExpiry::Charge,
            closed_record: DEFAULT_CLOSED_RECORD,
            run_ttl: DEFAULT_RUN_TTL,
            customer_ttl: DEFAULT_CUSTOMER_TTL,
            ledger_retention: DEFAULT_LEDGER_RETENTION,
            aggregate_retention_days: DEFAULT_AGGREGATE_RETENTION_DAYS,
        }
    }
}

impl Rules {
    /// The rules a config's `[store]` section sets, for a SQLite store (a
    /// Redis store keeps its ledger for `ledger_buffer_hours` instead; the
    /// memory store for as long as a retry can come, see `budget::open`).
    pub fn of(store: &StoreConfig) -> Rules {
        Rules {
            settle_epsilon: store.settle_epsilon,
            on_expiry: store.on_expiry,
            closed_record: store.closed_record,
            run_ttl: store.run_ttl,
            customer_ttl: store.customer_ttl,
            ledger_retention: store.ledger_retention,
            aggregate_retention_days: store.aggregate_retention_days,
        }
    }

    /// How long a closed record is kept, in milliseconds.
    pub(crate) fn closed_ms(&self) -> i64 {
        millis(self.closed_record)
    }

    /// How long a customer is remembered, in milliseconds.
    pub(crate) fn customer_ttl_ms(&self) -> i64 {
        millis(self.customer_ttl)
    }

    /// How long a run is remembered, in milliseconds.
    pub(crate) fn run_ttl_ms(&self) -> i64 {
        millis(self.run_ttl)
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
