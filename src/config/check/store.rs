//! Checking `[store]`: which budget store and where it keeps its books,
//! how long a reservation, a run, a closed record and the ledger are kept,
//! and what a call does when the store fails.

use std::time::Duration;

use super::super::raw::RawStore;
use super::super::{ConfigError, OnExpiry, OnStoreError, ServerConfig, StoreBackend, StoreConfig};
use super::Checker;

const DEFAULT_RESERVATION_TTL_SECS: u64 = 900;
const DEFAULT_SETTLE_EPSILON_USD: &str = "0.0001";
const DEFAULT_SQLITE_PATH: &str = "tollgate.db";
const DEFAULT_LEDGER_RETENTION_DAYS: u64 = 30;
/// Ten years: beyond that a retention is a typo.
const MAX_LEDGER_RETENTION_DAYS: u64 = 3650;
/// Spend reports a year back and a bit, to compare a month with the same
/// month a year before.
const DEFAULT_AGGREGATE_RETENTION_DAYS: u64 = 400;
/// Ten years, as for the ledger.
const MAX_AGGREGATE_RETENTION_DAYS: u64 = 3650;
/// As long as a retry of a call can still arrive.
const DEFAULT_CLOSED_RECORD_SECS: u64 = 120;
/// A day: no retry of a call comes later than that.
const MAX_CLOSED_RECORD_SECS: u64 = 24 * 3600;
/// A run is forgotten a day after its last call.
const DEFAULT_RUN_TTL_HOURS: u64 = 24;
/// A year.
const MAX_RUN_TTL_HOURS: u64 = 366 * 24;
const DEFAULT_CUSTOMER_TTL_DAYS: u64 = 400;
/// Ten years: a customer remembered longer is remembered for ever.
const MAX_CUSTOMER_TTL_DAYS: u64 = 3_660;
/// How long Redis keeps ledger entries no sink took (issue: a day of calls
/// is what an operator sizes Redis for).
const DEFAULT_LEDGER_BUFFER_HOURS: u64 = 24;
/// A week: longer only piles up Redis memory a sink should hold.
const MAX_LEDGER_BUFFER_HOURS: u64 = 7 * 24;

impl Checker<'_> {
    pub(super) fn store(
        &self,
        raw: &RawStore,
        server: &ServerConfig,
    ) -> Result<StoreConfig, ConfigError> {
        let backend = match raw.backend.as_deref().unwrap_or("sqlite") {
            "memory" => StoreBackend::Memory,
            "sqlite" => {
                let file = raw.sqlite_path.as_deref().unwrap_or(DEFAULT_SQLITE_PATH);
                if file.trim().is_empty() {
                    return Err(self.invalid("store.sqlite_path", "must not be empty"));
                }
                StoreBackend::Sqlite {
                    path: self.beside_config(file),
                }
            }
            "redis" => self.redis(raw)?,
            other => {
                return Err(self.invalid(
                    "store.backend",
                    format!("{other:?} is not \"sqlite\", \"redis\" or \"memory\""),
                ))
            }
        };
        let ttl_secs = raw
            .reservation_ttl_secs
            .unwrap_or(DEFAULT_RESERVATION_TTL_SECS);
        let timeout_secs = server.upstream_timeout.as_secs();
        if ttl_secs <= timeout_secs {
            return Err(self.invalid(
                "store.reservation_ttl_secs",
                format!(
                    "{ttl_secs} must exceed server.upstream_timeout_secs ({timeout_secs}), \
                     or a reservation could expire while its call is still running"
                ),
            ));
        }
        let default_epsilon = toml::Value::String(DEFAULT_SETTLE_EPSILON_USD.to_owned());
        let epsilon = raw.settle_epsilon_usd.as_ref().unwrap_or(&default_epsilon);
        let on_store_error = match raw.on_store_error.as_deref().unwrap_or("reject") {
            "reject" => OnStoreError::Reject,
            "allow" => OnStoreError::Allow,
            other => {
                return Err(self.invalid(
                    "store.on_store_error",
                    format!("{other:?} is not \"reject\" or \"allow\""),
                ))
            }
        };
        let retention_days = raw
            .ledger_retention_days
            .unwrap_or(DEFAULT_LEDGER_RETENTION_DAYS);
        if !(1..=MAX_LEDGER_RETENTION_DAYS).contains(&retention_days) {
            return Err(self.invalid(
                "store.ledger_retention_days",
                format!("{retention_days} must be between 1 and {MAX_LEDGER_RETENTION_DAYS}"),
            ));
        }
        let aggregate_retention_days = raw
            .aggregate_retention_days
            .unwrap_or(DEFAULT_AGGREGATE_RETENTION_DAYS);
        let aggregate_retention_days = u32::try_from(aggregate_retention_days)
            .ok()
            .filter(|days| (1..=MAX_AGGREGATE_RETENTION_DAYS).contains(&u64::from(*days)))
            .ok_or_else(|| {
                self.invalid(
                    "store.aggregate_retention_days",
                    format!(
                        "{aggregate_retention_days} must be between 1 and \
                         {MAX_AGGREGATE_RETENTION_DAYS}"
                    ),
                )
            })?;
        let closed_record_secs = raw.closed_record_secs.unwrap_or(DEFAULT_CLOSED_RECORD_SECS);
        if !(1..=MAX_CLOSED_RECORD_SECS).contains(&closed_record_secs) {
            return Err(self.invalid(
                "store.closed_record_secs",
                format!("{closed_record_secs} must be between 1 and {MAX_CLOSED_RECORD_SECS}"),
            ));
        }
        let run_ttl_hours = raw.run_ttl_hours.unwrap_or(DEFAULT_RUN_TTL_HOURS);
        if !(1..=MAX_RUN_TTL_HOURS).contains(&run_ttl_hours) || run_ttl_hours * 3600 < ttl_secs {
            return Err(self.invalid(
                "store.run_ttl_hours",
                format!(
                    "{run_ttl_hours} must be between 1 and {MAX_RUN_TTL_HOURS}, and at least \
                     store.reservation_ttl_secs ({ttl_secs} s), so a run is never forgotten \
                     while a call of it is open"
                ),
            ));
        }
        let customer_ttl_days = raw.customer_ttl_days.unwrap_or(DEFAULT_CUSTOMER_TTL_DAYS);
        if !(1..=MAX_CUSTOMER_TTL_DAYS).contains(&customer_ttl_days)
            || customer_ttl_days * 24 * 3600 < ttl_secs
        {
            return Err(self.invalid(
                "store.customer_ttl_days",
                format!(
                    "{customer_ttl_days} must be between 1 and {MAX_CUSTOMER_TTL_DAYS}, and at                      least store.reservation_ttl_secs ({ttl_secs} s)"
                ),
            ));
        }
        let on_expiry = match raw.on_expiry.as_deref() {
            None | Some("charge") => OnExpiry::Charge,
            Some("release") => OnExpiry::Release,
            Some(other) => {
                return Err(self.invalid(
                    "store.on_expiry",
                    format!("{other:?} is not \"charge\" or \"release\""),
                ))
            }
        };
        let ledger_buffer_hours = raw
            .ledger_buffer_hours
            .unwrap_or(DEFAULT_LEDGER_BUFFER_HOURS);
        if !(1..=MAX_LEDGER_BUFFER_HOURS).contains(&ledger_buffer_hours) {
            return Err(self.invalid(
                "store.ledger_buffer_hours",
                format!("{ledger_buffer_hours} must be between 1 and {MAX_LEDGER_BUFFER_HOURS}"),
            ));
        }
        let ledger_sink = match (&raw.ledger_sink_path, &backend) {
            (None, _) => None,
            (Some(file), _) if file.trim().is_empty() => {
                return Err(self.invalid("store.ledger_sink_path", "must not be empty"))
            }
            (Some(file), StoreBackend::Redis { .. }) => Some(self.beside_config(file)),
            (Some(_), _) => {
                return Err(self.invalid(
                    "store.ledger_sink_path",
                    "only the redis store drains its ledger to a sink (the sqlite store's \
                     ledger is its own file's `ledger` table): remove it, or use backend = \"redis\"",
                ))
            }
        };
        Ok(StoreConfig {
            backend,
            reservation_ttl: Duration::from_secs(ttl_secs),
            settle_epsilon: self.usd("store.settle_epsilon_usd", epsilon)?,
            on_store_error,
            ledger_retention: Duration::from_secs(retention_days * 24 * 3600),
            aggregate_retention_days,
            closed_record: Duration::from_secs(closed_record_secs),
            on_expiry,
            run_ttl: Duration::from_secs(run_ttl_hours * 3600),
            customer_ttl: Duration::from_secs(customer_ttl_days * 24 * 3600),
            ledger_sink,
            ledger_buffer: Duration::from_secs(ledger_buffer_hours * 3600),
        })
    }
}
