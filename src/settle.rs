//! Settling exactly once: the [`SettleTicket`] every metered call carries
//! from before its reservation to its end.
//!
//! A ticket settles once, by whichever comes first: the call's end, an
//! error, or being dropped (client gone, handler cancelled, panic
//! unwinding). What a dropped ticket charges depends on how far the call
//! got: nothing if it was never sent, the whole upper bound for a plain
//! call the provider may have finished, the input and the output seen for
//! a stream (the provider stops generating when its stream is closed).
//!
//! A settlement in flight is a [`Settling`] future; dropped before it is
//! done, it finishes in the background, tracked by [`BackgroundSettles`] so
//! a shutting-down gateway waits for it (the `background` module).
//!
//! Usage no call can have — a count that is negative, fractional or 2^53
//! or more, a cost of 2^53 µUSD or more, or one a store refuses as out of
//! range — is charged the call's upper bound at once, marked `estimated`,
//! logged and counted (`tollgate_absurd_usage_total`), never retried as if
//! the store were down.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::access::AccessRecord;
use crate::budget::Books;
use crate::budget::{BudgetStore, LedgerStatus, SettleOutcome, Settlement, StoreError};
use crate::config::KeyConfig;
use crate::estimate::Estimate;
use crate::metrics::{Metrics, StoreOp};
use crate::money::UsdMicros;
use crate::prices::ModelPrice;
use crate::usage::{Reported, Usage};

mod background;

pub use background::{BackgroundSettles, Settling, Unabandoned};

/// Longest wait between two attempts at a settle the store refuses.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(2);

/// Output tokens added to what was seen of a stream that ended without its
/// usage, for what the provider can have generated in flight: between the
/// last token the gateway read and the provider noticing its stream was
/// closed, about half a second at 250 tokens a second. Never above the
/// call's bound.
pub const IN_FLIGHT_MARGIN_TOKENS: u64 = 128;

// === impl Settler ===

/// What settling a call needs of the gateway: the store, the metrics, and
/// the settlements that finish in the background.
#[derive(Clone)]
pub struct Settler {
    store: BudgetStore,
    metrics: Arc<Metrics>,
    background: BackgroundSettles,
    /// How long a failing settle is retried: past the reservation's
    /// deadline a settle still lands (charged as `late`) as long as the
    /// store remembers the reservation, which is one more TTL.
    retry_for: Duration,
}

impl Settler {
    pub fn new(store: BudgetStore, metrics: Arc<Metrics>, reservation_ttl: Duration) -> Settler {
        Settler {
            store,
            metrics,
            background: BackgroundSettles::default(),
            retry_for: reservation_ttl * 2,
        }
    }

    /// A ticket for a call about to be reserved under `exec_id`. Created
    /// before the reserve, so a handler dropped while the reserve is in
    /// flight, or a reserve whose answer was lost, still releases whatever
    /// the reserve did.
    pub fn ticket(
        &self,
        exec_id: &str,
        key: &KeyConfig,
        model: &str,
        price: &ModelPrice,
        estimate: Estimate,
    ) -> SettleTicket {
        SettleTicket {
            call: Some(MeteredCall {
                store: self.store.clone(),
                metrics: self.metrics.clone(),
                background: self.background.clone(),
                exec_id: exec_id.to_owned(),
                key: key.id.clone(),
                org: key.org.clone(),
                model: model.to_owned(),
                price: price.clone(),
                estimate,
                stage: Stage::Reserving,
                retry_until: Instant::now() + self.retry_for,
                access: None,
            }),
        }
    }

    /// Work that settles a call and must not stop when its client leaves:
    /// the caller drives it, and if the caller is dropped before it ends,
    /// it goes on in the background, counted with the settlements shutdown
    /// waits for. (Driven inline, a call that runs to its end costs no task
    /// of its own.)
    pub fn unabandoned<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Unabandoned<T> {
        Unabandoned {
            work: Some(Box::pin(work)),
            background: self.background.clone(),
        }
    }

    /// Waits until no settlement runs in the background, or `limit`
    /// passes; returns how many are still running.
    pub async fn drained(&self, limit: Duration) -> usize {
        self.background.drained(limit).await
    }
}

// === impl SettleTicket ===

/// The right, and the duty, to settle one reservation.
pub struct SettleTicket {
    call: Option<MeteredCall>,
}

/// What a settlement charges.
enum Charge {
    /// Usage priced at the model's rates; `estimated` when the gateway
    /// counted it.
    Usage { usage: Usage, estimated: bool },
    /// The call's upper bound: the provider reported usage no call can
    /// have, shown in `reported` for the log.
    Bound { reported: String },
}

/// How far a call got, which decides what it is charged if its usage
/// never comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Reserving: the provider has seen nothing.
    Reserving,
    /// Sent to the provider. `hidden_output`: the model may bill output it
    /// does not stream (reasoning).
    Sent { stream: bool, hidden_output: bool },
}

/// What a settlement needs to know of the call.
struct MeteredCall {
    store: BudgetStore,
    metrics: Arc<Metrics>,
    background: BackgroundSettles,
    exec_id: String,
    key: String,
    org: Option<String>,
    model: String,
    price: ModelPrice,
    estimate: Estimate,
    stage: Stage,
    /// Until when a failing settle is retried: past the reservation's
    /// deadline a settle still lands (charged as `late`) as long as the
    /// store remembers the reservation, which is one more TTL.
    retry_until: Instant,
    /// The call's access log line, told the cost; held until the
    /// settlement ends, so the line waits for it.
    access: Option<AccessRecord>,
}

impl SettleTicket {
    /// A ticket with nothing to settle, to leave in a ticket's place.
    pub fn spent() -> SettleTicket {
        SettleTicket { call: None }
    }

    /// Nothing to settle: the reserve was denied or failed, or the call goes
    /// through unmetered.
    pub fn disarm(&mut self) {
        self.call = None;
    }

    /// The call was fitted to what remains: it is sent with a lower
    /// output limit, whose bound replaces the one it was admitted with.
    pub fn refit(&mut self, estimate: Estimate) {
        if let Some(call) = self.call.as_mut() {
            call.estimate = estimate;
        }
    }

    /// The call is on its way to the provider; `hidden_output` when its
    /// model may bill output it does not stream.
    pub fn sent(&mut self, stream: bool, hidden_output: bool) {
        if let Some(call) = self.call.as_mut() {
            call.stage = Stage::Sent {
                stream,
                hidden_output,
            };
        }
    }

    /// Tells `record` what the call is charged, once it is settled.
    pub fn report_to(&mut self, record: AccessRecord) {
        if let Some(call) = self.call.as_mut() {
            call.access = Some(record);
        }
    }

    /// Whether the call may have billed output it did not stream.
    pub fn output_hidden(&self) -> bool {
        matches!(
            self.call.as_ref().map(|call| call.stage),
            Some(Stage::Sent {
                hidden_output: true,
                ..
            })
        )
    }

    /// Whether the ticket still has to settle.
    pub fn is_armed(&self) -> bool {
        self.call.is_some()
    }

    /// Settles with what `reading` finds, however long it takes: it runs to
    /// its end in the background, counted with the settlements shutdown
    /// waits for, whether or not anyone waits for it. `Reported` usage is
    /// charged as it is; `Seen` usage as a call whose usage never came.
    pub fn settle_after(mut self, reading: impl Future<Output = Read> + Send + 'static) {
        let Some(call) = self.call.take() else {
            return;
        };
        let background = call.background.clone();
        background.finish(Box::pin(async move {
            let charge = match reading.await {
                Read::Reported(Ok(usage)) => Charge::Usage {
                    usage,
                    estimated: false,
                },
                Read::Reported(Err(absurd)) => Charge::Bound {
                    reported: absurd.to_string(),
                },
                Read::Seen(seen) => {
                    let (usage, estimated) = call.fallback(seen);
                    Charge::Usage { usage, estimated }
                }
            };
            call.settle(charge).await
        }));
    }

    /// Settles with `usage`; `estimated` when the gateway counted it. Does
    /// nothing (and returns `None`) once the ticket is spent.
    pub fn settle(&mut self, usage: Usage, estimated: bool) -> Option<Settling> {
        self.charge(Charge::Usage { usage, estimated })
    }

    /// Settles with the usage the provider reported; when a count in it is
    /// absurd, with the call's upper bound instead.
    pub fn settle_reported(&mut self, reported: Reported) -> Option<Settling> {
        match reported {
            Ok(usage) => self.settle(usage, false),
            Err(absurd) => self.charge(Charge::Bound {
                reported: absurd.to_string(),
            }),
        }
    }

    fn charge(&mut self, charge: Charge) -> Option<Settling> {
        let call = self.call.take()?;
        let background = call.background.clone();
        Some(Settling {
            future: Some(Box::pin(call.settle(charge))),
            background,
            patience: None,
        })
    }

    /// Settles a call that produced nothing billable (refused by the
    /// provider, or never sent).
    pub async fn settle_nothing(&mut self) -> Option<SettleOutcome> {
        self.settle(Usage::default(), false)?.await
    }

    /// Settles a call that failed before the gateway saw any of its
    /// response, by how far it got (see [`SettleTicket::settle_seen`]).
    pub async fn settle_unseen(&mut self) -> Option<SettleOutcome> {
        self.settle_seen(Usage::default())?.await
    }

    /// Settles a call whose usage never came, with what the gateway saw.
    pub fn settle_seen(&mut self, seen: Usage) -> Option<Settling> {
        let call = self.call.as_ref()?;
        let (usage, estimated) = call.fallback(seen);
        self.settle(usage, estimated)
    }
}

/// What a read of a call's response found.
pub enum Read {
    /// The usage the provider reported (absurd counts included).
    Reported(Reported),
    /// No usage: what the gateway saw of the response.
    Seen(Usage),
}

impl Drop for SettleTicket {
    fn drop(&mut self) {
        // A `Settling` dropped unfinished goes on by itself.
        drop(self.settle_seen(Usage::default()));
    }
}

impl MeteredCall {
    /// The usage charged when the provider's never came, at the tier the
    /// response reported, if it reported one before it ended (an OpenAI
    /// stream's chunks do): that is the tier the provider bills.
    fn fallback(&self, seen: Usage) -> (Usage, bool) {
        let (usage, estimated) = self.fallback_counts(seen);
        let usage = Usage {
            service_tier: seen.service_tier,
            ..usage
        };
        (usage, estimated)
    }

    /// The counts of [`MeteredCall::fallback`].
    fn fallback_counts(&self, seen: Usage) -> (Usage, bool) {
        let bound = || self.estimate.fallback_usage(self.estimate.output_tokens);
        match self.stage {
            Stage::Reserving => (Usage::default(), false),
            // The provider may have finished the whole call, or billed
            // output it never showed.
            Stage::Sent { stream: false, .. }
            | Stage::Sent {
                hidden_output: true,
                ..
            } => (bound(), true),
            // The input it reported, or the estimated input, plus the output
            // counted and what can have been generated in flight, never
            // more than the output limit allows.
            Stage::Sent { stream: true, .. } => {
                let input_seen = seen.input + seen.cached_input + seen.cache_write > 0;
                let mut usage = if input_seen {
                    // Hosted tools may have fed results in since.
                    self.estimate.tools.cut(seen)
                } else {
                    self.estimate.fallback_usage(seen.output)
                };
                usage.output = seen
                    .output
                    .saturating_add(IN_FLIGHT_MARGIN_TOKENS)
                    .min(self.estimate.output_tokens);
                (usage, true)
            }
        }
    }

    /// The settlement of `usage` at `actual`.
    fn settlement(&self, usage: Usage, actual: UsdMicros, estimated: bool) -> Settlement {
        Settlement {
            exec_id: self.exec_id.clone(),
            key: self.key.clone(),
            org: self.org.clone(),
            model: self.model.clone(),
            usage: usage.counts(),
            actual,
            estimated,
        }
    }

    /// The settlement of a call whose reported usage no store can take:
    /// its upper bound (what it reserved: the most the provider can bill),
    /// marked estimated. Logged with what was reported, and counted.
    fn bound(&self, reported: &str, why: &str) -> Settlement {
        let amount = self.estimate.amount;
        tracing::error!(
            exec_id = %self.exec_id,
            key = %self.key,
            model = %self.model,
            reported_usage = %reported,
            why,
            charged_usd_micros = amount,
            "the provider reported usage no call can have; charging the call's upper bound"
        );
        self.metrics.count_absurd_usage();
        let usage = self.estimate.fallback_usage(self.estimate.output_tokens);
        self.settlement(usage, amount, true)
    }

    async fn settle(self, charge: Charge) -> Option<SettleOutcome> {
        // Reported input beyond what was reserved for it: the input bound
        // was too tight (the gateway's own estimates never pass it).
        let input_excess = match &charge {
            Charge::Usage {
                usage,
                estimated: false,
            } => usage
                .total_input()
                .saturating_sub(self.estimate.input_tokens),
            _ => 0,
        };
        let (mut settlement, mut charging_bound) = match charge {
            Charge::Usage { usage, estimated } => {
                let usage = self.estimate.options.complete(usage);
                match self.price.checked_cost(&usage) {
                    Some(actual) => (self.settlement(usage, actual, estimated), false),
                    None => (
                        self.bound(&format!("{usage:?}"), "its cost reaches 2^53 µUSD"),
                        true,
                    ),
                }
            }
            Charge::Bound { reported } => (self.bound(&reported, "a count no call can have"), true),
        };
        let mut backoff = Duration::from_millis(50);
        loop {
            // A reserve whose outcome is unknown may never have landed:
            // finding nothing is then no error worth a search.
            let settled = async {
                if self.stage == Stage::Reserving {
                    self.store.settle_if_reserved(&settlement).await
                } else {
                    self.store.settle(&settlement).await
                }
            };
            match self.metrics.time(StoreOp::Settle, settled).await {
                Ok(outcome) => {
                    log_outcome(&settlement, &outcome);
                    if let Some(record) = &self.access {
                        record.charged(outcome.actual);
                    }
                    self.metrics.count_settlement(&outcome);
                    if outcome.applied && input_excess > 0 && !charging_bound {
                        self.metrics.count_input_overrun(input_excess);
                    }
                    return Some(outcome);
                }
                // Retried also for a call never sent (its reserve failed on
                // a store error, or its handler was dropped while it was in
                // flight), in the background: a reservation that landed
                // and is left to expire is charged its amount under
                // `on_expiry = "charge"`, which a call never sent must not
                // be.
                Err(error @ (StoreError::Unavailable(_) | StoreError::Timeout))
                    if Instant::now() < self.retry_until =>
                {
                    tracing::warn!(exec_id = %settlement.exec_id, %error, "settle failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                }
                // The reserve never landed (nothing to release), or the
                // store stayed down for two TTLs.
                Err(_) if self.stage == Stage::Reserving => return None,
                // The store refuses this usage, and would every time: the
                // call is charged its bound instead, at once.
                Err(error @ (StoreError::OutOfRange { .. } | StoreError::Refused(_)))
                    if !charging_bound =>
                {
                    let reported = format!("{:?}", settlement.usage);
                    settlement = self.bound(&reported, &error.to_string());
                    charging_bound = true;
                }
                Err(error) => {
                    tracing::error!(
                        exec_id = %settlement.exec_id,
                        key = %settlement.key,
                        actual_usd_micros = settlement.actual,
                        %error,
                        "settle failed for good; the call is not charged (its reservation \
                         expires at its deadline, charged as store.on_expiry says)"
                    );
                    return None;
                }
            }
        }
    }
}

fn log_outcome(settlement: &Settlement, outcome: &SettleOutcome) {
    match outcome.status {
        LedgerStatus::Overrun | LedgerStatus::Late => tracing::warn!(
            exec_id = %settlement.exec_id,
            key = %settlement.key,
            model = %settlement.model,
            reserved_usd_micros = outcome.reserved,
            actual_usd_micros = outcome.actual,
            status = outcome.status.as_str(),
            "call cost more than its reservation; charged in full"
        ),
        _ => tracing::debug!(
            exec_id = %settlement.exec_id,
            reserved_usd_micros = outcome.reserved,
            actual_usd_micros = outcome.actual,
            status = outcome.status.as_str(),
            "settled"
        ),
    }
}

#[cfg(test)]
mod tests;
