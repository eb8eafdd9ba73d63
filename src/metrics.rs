//! The gateway's Prometheus metrics, served at `GET /metrics` in the
//! OpenMetrics text format (which Prometheus scrapes as it is).
//!
//! When "my agent stopped making calls", an operator looks first at the
//! open reservations, then at the reserve outcomes and the store errors:
//!
//! | metric | labels | counts |
//! |--------|--------|--------|
//! | `tollgate_open_reservations` | | reservations held now, read from the store at scrape time |
//! | `tollgate_open_reservations_usd_micros` | | the µUSD they hold |
//! | `tollgate_store_failed_closed` | | 1 while the Redis store refuses every call because its epoch vanished (Redis restarted without its data) or its layout is newer than this binary's, else 0 |
//! | `tollgate_reserve_total` | `outcome` = `allowed`, `denied`, `error`; `scope` = `key`, `org` (the denying one) or `""` | reserve calls |
//! | `tollgate_settlements_total` | `status` = `ok`, `overrun`, `estimated`, `late` | settlements applied by this gateway |
//! | `tollgate_charged_usd_micros_total` | | Σ actual cost of those settlements |
//! | `tollgate_input_overruns_total` | | settled calls whose reported input passed the input bound reserved for them (a tokenizer denser than the price entry's `input_bytes_per_token` assumed, say) |
//! | `tollgate_input_overrun_tokens_total` | | Σ input tokens those calls reported beyond their bound |
//! | `tollgate_token_count_cache_hits_total` | | texts of 256 bytes or more (message contents, tool schemas) whose input token count came from the count cache: the same text counted before, as a conversation resent every turn is |
//! | `tollgate_token_count_cache_misses_total` | | such texts counted afresh (and then kept) |
//! | `tollgate_absurd_usage_total` | | calls whose provider reported usage no call can have (a count negative, fractional or 2^53 or more; a cost of 2^53 µUSD or more), charged their upper bound instead |
//! | `tollgate_expired_reservations_total` | | reservations this gateway's periodic sweep expired unsettled (charged their amount, or released under `on_expiry = "release"`) |
//! | `tollgate_store_call_duration_seconds` | `op` | store call latency, retries included |
//! | `tollgate_store_errors_total` | `op` | store calls that failed (unreachable, timed out, or a script refused its arguments) |
//! | `tollgate_requests_total` | `route`, `status` | HTTP responses by route and status |
//! | `tollgate_ledger_drained_total` | | Redis ledger entries this gateway wrote to its ledger sink for the first time |
//! | `tollgate_ledger_sink_errors_total` | | failed attempts to open or write the ledger sink (each leaves the entries in Redis) |
//! | `tollgate_ledger_undrained_age_seconds` | | age of the oldest entry this gateway's drain saw waiting in a Redis ledger stream; only on a gateway with a ledger sink |
//! | `tollgate_alerts_queued_total` | `scope` = `key`, `org`, `run`; `type` = `threshold`, `exhausted` | spending alerts this gateway queued first (each crossing is queued once per store, whichever gateway sees it first) |
//! | `tollgate_alert_deliveries_total` | `result` = `delivered`, `failed` | webhook attempts by this gateway |
//!
//! `op` is one of `reserve`, `settle`, `state`, `ping`, `sweep`,
//! `open_reservations`, `drain` (the ledger drain's Redis calls). A settle that answers "unknown reservation",
//! "ownership mismatch" or "out of range" (2^53) is the store's answer
//! about that call, not a store failure, and is not counted as a store
//! error; a script refusing its arguments (the gateway and the scripts
//! disagree) is.
//!
//! Reservations are expired in two places: the periodic sweep, whose count
//! the gateway sees, and the bounded sweep inside each `reserve`, whose
//! count stays inside the store. The expired counter is therefore a lower
//! bound; the ledger's `expired` entries are the full record. With several
//! gateways on one Redis, each counts what its own sweep expired. A settle
//! that arrives after its reservation expired is counted as `late`, and
//! what it charges (`charged_usd_micros`) is its actual cost.
//!
//! Every label has a small fixed set of values (no key or org ids). The
//! reserve, settlement and store series are created up front and held as
//! handles, so counting one is an atomic add; a latency observation takes
//! its histogram's short lock (one histogram per store operation); a
//! response takes the request family's read lock, and its write lock the
//! first time a route answers with a new status.
//!
//! `/metrics` asks for no key, like `/healthz`. It names no key or org, but
//! it tells how busy the gateway is and how much it spends: keep it off the
//! public internet (block the path at the proxy in front of the gateway, or
//! let only the scraper reach the listener).

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use http::StatusCode;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::budget::Reports;
use crate::budget::{
    BudgetStore, LedgerStatus, Meter, ReserveOutcome, ScopeKind, SettleOutcome, StoreError,
};
use crate::money::UsdMicros;

/// The `Content-Type` of a scrape.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Store call latency buckets, in seconds: from a local Redis round trip
/// (100 µs) to a call that spent its retries (2.5 s).
const LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// A kind of budget store call, the `op` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    Reserve,
    Settle,
    /// Reading a scope's counters (`/v1/budget`).
    State,
    /// The readiness check (`/readyz`).
    Ping,
    /// The periodic sweep of expired reservations: one observation per
    /// sweep of every tag.
    Sweep,
    /// Counting the open reservations for a scrape, over every tag.
    OpenReservations,
    /// The ledger drain reading a page of a tag's stream, or folding one
    /// its sink committed.
    Drain,
}

impl StoreOp {
    const ALL: [StoreOp; 7] = [
        StoreOp::Reserve,
        StoreOp::Settle,
        StoreOp::State,
        StoreOp::Ping,
        StoreOp::Sweep,
        StoreOp::OpenReservations,
        StoreOp::Drain,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::Reserve => "reserve",
            StoreOp::Settle => "settle",
            StoreOp::State => "state",
            StoreOp::Ping => "ping",
            StoreOp::Sweep => "sweep",
            StoreOp::OpenReservations => "open_reservations",
            StoreOp::Drain => "drain",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReserveLabels {
    outcome: &'static str,
    scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SettlementLabels {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlertLabels {
    scope: &'static str,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    status: u16,
}

/// The gateway's counters, shared by every request.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    allowed: Counter,
    denied_by_key: Counter,
    denied_by_org: Counter,
    denied_by_run: Counter,
    denied_by_model: Counter,
    denied_by_customer: Counter,
    /// A call over a rate limit (`rpm`, `tpm`).
    rate_limited: Counter,
    /// A call naming another run cap than its run's first call.
    run_cap_conflicts: Counter,
    reserve_failed: Counter,
    settled_ok: Counter,
    settled_overrun: Counter,
    settled_estimated: Counter,
    settled_late: Counter,
    expired: Counter,
    charged: Counter,
    absurd_usage: Counter,
    input_overruns: Counter,
    input_overrun_tokens: Counter,
    /// Indexed by [`StoreOp::index`].
    store_latency: [Histogram; 7],
    store_errors: [Counter; 7],
    ledger_drained: Counter,
    ledger_sink_errors: Counter,
    /// Seconds; -1 on a gateway that does not drain, which then leaves
    /// the gauge out of its scrapes.
    ledger_undrained_age: AtomicI64,
    /// Statuses are only known as responses go out; a new (route, status)
    /// pair takes the family's lock once, later ones only read it.
    requests: Family<RequestLabels, Counter>,
    alerts_queued: Family<AlertLabels, Counter>,
    alerts_delivered: Counter,
    alerts_failed: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tollgate");

        let reserve = Family::<ReserveLabels, Counter>::default();
        registry.register(
            "reserve",
            "Reserve calls by outcome; a denial names the scope that denied it",
            reserve.clone(),
        );
        let reserved =
            |outcome, scope| reserve.get_or_create_owned(&ReserveLabels { outcome, scope });

        let settlements = Family::<SettlementLabels, Counter>::default();
        registry.register(
            "settlements",
            "Settlements applied by this gateway, by ledger status",
            settlements.clone(),
        );
        let settled = |status: LedgerStatus| {
            settlements.get_or_create_owned(&SettlementLabels {
                status: status.as_str(),
            })
        };

        let charged = Counter::default();
        registry.register(
            "charged_usd_micros",
            "Sum of the actual cost of the settlements applied by this gateway, in micro-USD",
            charged.clone(),
        );
        let expired = Counter::default();
        registry.register(
            "expired_reservations",
            "Reservations expired unsettled at their deadline by this gateway's periodic \
             sweep (those expired inside a reserve are not counted; the ledger has all)",
            expired.clone(),
        );

        let absurd_usage = Counter::default();
        registry.register(
            "absurd_usage",
            "Calls whose provider reported usage no call can have (negative, fractional, or \
             2^53 or more), charged their upper bound instead",
            absurd_usage.clone(),
        );

        let input_overruns = Counter::default();
        registry.register(
            "input_overruns",
            "Settled calls whose reported input passed the input bound reserved for them",
            input_overruns.clone(),
        );
        let (cache_hits, cache_misses) = crate::tokenizer::cache::CountCache::global().counters();
        registry.register(
            "token_count_cache_hits",
            "Texts whose token count came from the count cache: counted once already",
            cache_hits,
        );
        registry.register(
            "token_count_cache_misses",
            "Texts long enough for the count cache that were counted afresh",
            cache_misses,
        );
        let input_overrun_tokens = Counter::default();
        registry.register(
            "input_overrun_tokens",
            "Input tokens settled calls reported beyond their input bound",
            input_overrun_tokens.clone(),
        );

        let latency =
            Family::<StoreLabels, Histogram, fn() -> Histogram>::new_with_constructor(|| {
                Histogram::new(LATENCY_BUCKETS)
            });
        registry.register_with_unit(
            "store_call_duration",
            "Budget store call latency, retries included",
            Unit::Seconds,
            latency.clone(),
        );
        let errors = Family::<StoreLabels, Counter>::default();
        registry.register(
            "store_errors",
            "Budget store calls that failed: store unreachable, timed out, or a script refused \
             its arguments",
            errors.clone(),
        );
        let by_op = |op: StoreOp| StoreLabels { op: op.as_str() };

        let ledger_drained = Counter::default();
        registry.register(
            "ledger_drained",
            "Redis ledger entries this gateway wrote to its ledger sink for the first time",
            ledger_drained.clone(),
        );
        let ledger_sink_errors = Counter::default();
        registry.register(
            "ledger_sink_errors",
            "Failed attempts to open or write the ledger sink; the entries stay in Redis \
             (at most store.ledger_buffer_hours)",
            ledger_sink_errors.clone(),
        );

        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "HTTP responses by route and status",
            requests.clone(),
        );

        let alerts_queued = Family::<AlertLabels, Counter>::default();
        registry.register(
            "alerts_queued",
            "Spending alerts queued by this gateway (first to see the crossing), by scope kind \
             and type",
            alerts_queued.clone(),
        );
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "alert_deliveries",
            "Spending alert webhook attempts by this gateway, by result",
            deliveries.clone(),
        );
        let delivery = |result| deliveries.get_or_create_owned(&DeliveryLabels { result });

        Metrics {
            alerts_queued,
            alerts_delivered: delivery("delivered"),
            alerts_failed: delivery("failed"),
            allowed: reserved("allowed", ""),
            denied_by_key: reserved("denied", ScopeKind::Key.as_str()),
            denied_by_org: reserved("denied", ScopeKind::Org.as_str()),
            denied_by_run: reserved("denied", ScopeKind::Run.as_str()),
            denied_by_model: reserved("denied", ScopeKind::Model.as_str()),
            denied_by_customer: reserved("denied", ScopeKind::Customer.as_str()),
            rate_limited: reserved("rate_limited", ""),
            run_cap_conflicts: reserved("run_cap_conflict", ScopeKind::Run.as_str()),
            reserve_failed: reserved("error", ""),
            settled_ok: settled(LedgerStatus::Ok),
            settled_overrun: settled(LedgerStatus::Overrun),
            settled_estimated: settled(LedgerStatus::Estimated),
            settled_late: settled(LedgerStatus::Late),
            expired,
            charged,
            absurd_usage,
            input_overruns,
            input_overrun_tokens,
            store_latency: StoreOp::ALL.map(|op| latency.get_or_create_owned(&by_op(op))),
            store_errors: StoreOp::ALL.map(|op| errors.get_or_create_owned(&by_op(op))),
            requests,
            ledger_drained,
            ledger_sink_errors,
            ledger_undrained_age: AtomicI64::new(-1),
            registry,
        }
    }

    /// Counts ledger entries the sink took for the first time.
    pub fn count_drained(&self, entries: usize) {
        self.ledger_drained
            .inc_by(u64::try_from(entries).unwrap_or(u64::MAX));
    }

    /// Counts one failed attempt to open or write the ledger sink.
    pub fn count_sink_error(&self) {
        self.ledger_sink_errors.inc();
    }

    /// The age of the oldest ledger entry the drain saw waiting for its
    /// sink, in seconds (0 when it is all drained).
    pub fn set_undrained_age(&self, seconds: u64) {
        self.ledger_undrained_age.store(
            i64::try_from(seconds).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Runs one store call, recording its latency and whether the store
    /// failed.
    pub async fn time<T>(
        &self,
        op: StoreOp,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = call.await;
        self.store_latency[op.index()].observe(started.elapsed().as_secs_f64());
        if let Err(StoreError::Unavailable(_) | StoreError::Timeout | StoreError::Refused(_)) =
            &result
        {
            self.store_errors[op.index()].inc();
        }
        result
    }

    /// Counts a reserve's answer; an error is a store that did not answer.
    pub fn count_reserve(&self, outcome: &Result<ReserveOutcome, StoreError>) {
        let counter = match outcome {
            Ok(ReserveOutcome::Reserved { .. }) => &self.allowed,
            Ok(ReserveOutcome::Denied(denial)) if denial.meter != Meter::Usd => &self.rate_limited,
            Ok(ReserveOutcome::Denied(denial)) => match denial.kind {
                ScopeKind::Key => &self.denied_by_key,
                ScopeKind::Org => &self.denied_by_org,
                ScopeKind::Run => &self.denied_by_run,
                ScopeKind::Model => &self.denied_by_model,
                ScopeKind::Customer => &self.denied_by_customer,
            },
            Ok(ReserveOutcome::RunCapConflict { .. }) => &self.run_cap_conflicts,
            Err(_) => &self.reserve_failed,
        };
        counter.inc();
    }

    /// Counts a settlement this gateway applied, and what it charged. A
    /// retry that found its settlement already applied counts nothing.
    pub fn count_settlement(&self, outcome: &SettleOutcome) {
        if !outcome.applied {
            return;
        }
        let counter = match outcome.status {
            LedgerStatus::Ok => &self.settled_ok,
            LedgerStatus::Overrun => &self.settled_overrun,
            LedgerStatus::Estimated => &self.settled_estimated,
            LedgerStatus::Late => &self.settled_late,
            // A settle never expires a reservation; were a store to say so,
            // the reservation expired unsettled.
            LedgerStatus::Expired => &self.expired,
            // An adjustment is an operator's entry, never a settle's answer:
            // nothing was settled, nor charged by a call.
            LedgerStatus::Adjustment => return,
        };
        counter.inc();
        self.charged.inc_by(outcome.actual);
    }

    /// Counts reservations expired by a sweep this gateway ran.
    pub fn count_expired(&self, expired: usize) {
        self.expired
            .inc_by(u64::try_from(expired).unwrap_or(u64::MAX));
    }

    /// Counts a call charged its upper bound because its reported usage
    /// was absurd.
    pub fn count_absurd_usage(&self) {
        self.absurd_usage.inc();
    }

    /// Counts a settled call whose reported input passed its input bound
    /// by `tokens`.
    pub fn count_input_overrun(&self, tokens: u64) {
        self.input_overruns.inc();
        self.input_overrun_tokens.inc_by(tokens);
    }

    /// Counts a spending alert this gateway queued (`kind`: `threshold`
    /// or `exhausted`).
    pub fn count_alert_queued(&self, scope: ScopeKind, kind: &'static str) {
        self.alerts_queued
            .get_or_create(&AlertLabels {
                scope: scope.as_str(),
                r#type: kind,
            })
            .inc();
    }

    /// Counts one webhook attempt.
    pub fn count_alert_delivery(&self, delivered: bool) {
        if delivered {
            self.alerts_delivered.inc();
        } else {
            self.alerts_failed.inc();
        }
    }

    /// Counts one response; `route` is one of the gateway's fixed paths.
    pub fn count_request(&self, route: &'static str, status: StatusCode) {
        self.requests
            .get_or_create(&RequestLabels {
                route,
                status: status.as_u16(),
            })
            .inc();
    }

    /// The scrape's text: every counter, and the open reservations read
    /// from the store now. If the store cannot say, those two gauges are
    /// left out (and the failure counted), and the scrape still answers.
    pub async fn scrape(&self, store: &BudgetStore) -> Result<String, fmt::Error> {
        let open = self
            .time(StoreOp::OpenReservations, store.open_reservations())
            .await;
        let open = match open {
            Ok(open) => Some(open),
            Err(error) => {
                tracing::warn!(%error, "metrics: could not count the open reservations");
                None
            }
        };
        let failed_closed = match store {
            BudgetStore::Redis(redis) => redis.failed_closed(),
            BudgetStore::Memory(_) | BudgetStore::Sqlite(_) => false,
        };
        self.encode_with(open, failed_closed)
    }

    /// The text of a scrape, given the open reservations' count and µUSD.
    pub fn encode(&self, open: Option<(usize, UsdMicros)>) -> Result<String, fmt::Error> {
        self.encode_with(open, false)
    }

    /// The text of a scrape, given the open reservations' count and µUSD,
    /// and whether the store fails closed.
    fn encode_with(
        &self,
        open: Option<(usize, UsdMicros)>,
        failed_closed: bool,
    ) -> Result<String, fmt::Error> {
        let mut text = String::new();
        encode_registry(&mut text, &self.registry)?;
        let mut now = Registry::with_prefix("tollgate");
        now.register(
            "store_failed_closed",
            "1 while the budget store refuses every call: its epoch vanished (Redis \
             restarted without its data) or its layout is newer than this binary's",
            gauge(i64::from(failed_closed)),
        );
        let undrained_age = self.ledger_undrained_age.load(Ordering::Relaxed);
        if undrained_age >= 0 {
            now.register_with_unit(
                "ledger_undrained_age",
                "Age of the oldest entry this gateway's drain saw waiting in a Redis ledger \
                 stream for the ledger sink; 0 when all is drained",
                Unit::Seconds,
                gauge(undrained_age),
            );
        }
        if let Some((count, amount)) = open {
            now.register(
                "open_reservations",
                "Reservations held now, not yet settled or expired",
                gauge(count),
            );
            now.register(
                "open_reservations_usd_micros",
                "Micro-USD held by the open reservations",
                gauge(amount),
            );
        }
        encode_registry(&mut text, &now)?;
        encode_eof(&mut text)?;
        Ok(text)
    }
}

/// A gauge read once, by the scrape it was made for.
fn gauge(value: impl TryInto<i64>) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(value.try_into().unwrap_or(i64::MAX));
    gauge
}

#[cfg(test)]
mod tests;
