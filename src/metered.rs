//! Settling exactly once: the [`SettleTicket`] a reserved call carries, and
//! the [`MeteredBody`] that streams a provider's SSE response through while
//! reading its usage.
//!
//! A ticket settles once, by whichever comes first: the call's end, an
//! error, or being dropped (client gone, handler cancelled, panic unwinding)
//! — then it settles what was seen as `estimated`. A metered body forwards
//! each complete event as it arrives, drops the usage chunk the client did
//! not ask for, and holds the terminal event back until the settlement has
//! been recorded, so a client never sees the end of a call that is not paid.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::budget::{BudgetStore, SettleOutcome, Settlement, StoreError};
use crate::estimate::Estimate;
use crate::metrics::{Metrics, StoreOp};
use crate::prices::ModelPrice;
use crate::server::{BoxError, Gateway};
use crate::sse::SseSplitter;
use crate::usage::{EventAction, StreamKind, StreamMeter, Usage};

type SettleFuture = Pin<Box<dyn Future<Output = Option<SettleOutcome>> + Send>>;

/// How long a settle keeps retrying a failing store. Retries reuse the
/// `exec_id`, so a retry of a settle that did land changes nothing.
const SETTLE_RETRY_FOR: Duration = Duration::from_secs(30);

// === impl SettleTicket ===

/// The right, and the duty, to settle one reservation.
pub struct SettleTicket {
    call: Option<ReservedCall>,
}

/// What a settlement needs to know of the reserved call.
struct ReservedCall {
    store: BudgetStore,
    metrics: Arc<Metrics>,
    exec_id: String,
    key: String,
    org: Option<String>,
    model: String,
    price: ModelPrice,
    estimate: Estimate,
}

impl SettleTicket {
    /// A ticket for a call reserved in `gateway`'s store.
    pub fn new(
        gateway: &Gateway,
        exec_id: String,
        key: String,
        org: Option<String>,
        model: String,
        price: ModelPrice,
        estimate: Estimate,
    ) -> SettleTicket {
        SettleTicket {
            call: Some(ReservedCall {
                store: gateway.store.clone(),
                metrics: gateway.metrics.clone(),
                exec_id,
                key,
                org,
                model,
                price,
                estimate,
            }),
        }
    }

    /// Settles with `usage`; `estimated` when the gateway counted it. Does
    /// nothing (and returns `None`) once the ticket is spent.
    pub fn settle(&mut self, usage: Usage, estimated: bool) -> Option<SettleFuture> {
        let call = self.call.take()?;
        Some(Box::pin(call.settle(usage, estimated)))
    }

    /// Settles a call that produced nothing billable (an upstream error).
    pub async fn settle_nothing(&mut self) -> Option<SettleOutcome> {
        self.settle(Usage::default(), false)?.await
    }

    /// Settles a call whose usage never came, with what the gateway saw.
    pub fn settle_seen(&mut self, seen: Usage) -> Option<SettleFuture> {
        let usage = self.call.as_ref()?.fallback(seen);
        self.settle(usage, true)
    }
}

impl Drop for SettleTicket {
    fn drop(&mut self) {
        if let Some(future) = self.settle_seen(Usage::default()) {
            finish_in_background(future);
        }
    }
}

impl ReservedCall {
    /// The usage charged when the provider's never came: the input it
    /// reported, or the estimated input, plus the output counted, which
    /// cannot exceed what the output limit let the provider produce.
    fn fallback(&self, seen: Usage) -> Usage {
        let input_seen = seen.input + seen.cached_input + seen.cache_write > 0;
        let mut usage = if input_seen {
            seen
        } else {
            self.estimate.fallback_usage(seen.output)
        };
        usage.output = usage.output.min(self.estimate.output_tokens);
        usage
    }

    async fn settle(self, usage: Usage, estimated: bool) -> Option<SettleOutcome> {
        let settlement = Settlement {
            actual: self.price.cost(&usage),
            exec_id: self.exec_id,
            key: self.key,
            org: self.org,
            model: self.model,
            usage,
            estimated,
        };
        let started = Instant::now();
        let mut backoff = Duration::from_millis(50);
        loop {
            let settled = self.store.settle(&settlement);
            match self.metrics.time(StoreOp::Settle, settled).await {
                Ok(outcome) => {
                    log_outcome(&settlement, &outcome);
                    self.metrics.count_settlement(&outcome);
                    return Some(outcome);
                }
                Err(error @ (StoreError::Unavailable(_) | StoreError::Timeout))
                    if started.elapsed() < SETTLE_RETRY_FOR =>
                {
                    tracing::warn!(exec_id = %settlement.exec_id, %error, "settle failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(error) => {
                    tracing::error!(
                        exec_id = %settlement.exec_id,
                        key = %settlement.key,
                        actual_usd_micros = settlement.actual,
                        %error,
                        "settle failed; the reservation stays open until it expires"
                    );
                    return None;
                }
            }
        }
    }
}

fn log_outcome(settlement: &Settlement, outcome: &SettleOutcome) {
    use crate::budget::LedgerStatus;
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

/// Drives a settlement that no request is waiting for any more. A store that
/// answers at once (the memory store) finishes here and now; otherwise the
/// settlement goes on in a task of its own.
fn finish_in_background(mut future: SettleFuture) {
    let mut cx = Context::from_waker(Waker::noop());
    if future.as_mut().poll(&mut cx).is_ready() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(future);
        }
        Err(_) => {
            tracing::error!("no runtime to finish a settlement on; the reservation will expire")
        }
    }
}

// === impl MeteredBody ===

pin_project! {
    /// A provider's event stream on its way to the client.
    pub struct MeteredBody {
        #[pin]
        upstream: Incoming,
        #[pin]
        deadline: Sleep,
        splitter: SseSplitter,
        meter: StreamMeter,
        ticket: SettleTicket,
        // Events cleared to send.
        ready: VecDeque<Bytes>,
        // The terminal event, sent once the settlement is recorded.
        held: Option<Bytes>,
        settling: Option<SettleFuture>,
        // The provider's stream is over (ended, failed or timed out).
        upstream_done: bool,
        // Why the stream was cut, reported to the client after settling.
        failure: Option<BoxError>,
        timeout: Duration,
    }

    impl PinnedDrop for MeteredBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(future) = this.settling.take() {
                finish_in_background(future);
            } else if let Some(future) = this.ticket.settle_seen(this.meter.partial_usage()) {
                finish_in_background(future);
            }
        }
    }
}

impl MeteredBody {
    /// `timeout`: the stream is cut (and settled as seen) if it is still
    /// running then, so no call outlives its reservation.
    pub fn new(
        upstream: Incoming,
        kind: StreamKind,
        ticket: SettleTicket,
        timeout: Duration,
    ) -> MeteredBody {
        MeteredBody {
            upstream,
            deadline: tokio::time::sleep(timeout),
            splitter: SseSplitter::new(),
            meter: StreamMeter::new(kind),
            ticket,
            ready: VecDeque::new(),
            held: None,
            settling: None,
            upstream_done: false,
            failure: None,
            timeout,
        }
    }
}

/// Settles with the provider's usage if the stream carried it, else with
/// what was seen.
fn settle_final(ticket: &mut SettleTicket, meter: &StreamMeter) -> Option<SettleFuture> {
    match meter.reported_usage() {
        Some(usage) => ticket.settle(usage, false),
        None => ticket.settle_seen(meter.partial_usage()),
    }
}

/// Keeps `event` back until `settling` is done; sends it at once if there is
/// nothing to wait for (the ticket was already spent).
fn hold_until_settled(
    settling: &mut Option<SettleFuture>,
    held: &mut Option<Bytes>,
    ready: &mut VecDeque<Bytes>,
    future: Option<SettleFuture>,
    event: Bytes,
) {
    match future {
        Some(future) => {
            *settling = Some(future);
            if !event.is_empty() {
                *held = Some(event);
            }
        }
        None if event.is_empty() => {}
        None => ready.push_back(event),
    }
}

/// The stream was still running at the gateway's upstream timeout.
#[derive(Debug, thiserror::Error)]
#[error("the provider's stream ran past the gateway's upstream timeout of {0:?}")]
struct StreamTimeout(Duration);

impl HttpBody for MeteredBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if let Some(settling) = this.settling.as_mut() {
                if settling.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                *this.settling = None;
                this.ready.extend(this.held.take());
            }
            // Events after the terminal one, if any, pass through as they are.
            while this.held.is_none() && this.settling.is_none() {
                let Some(event) = this.splitter.next_event() else {
                    break;
                };
                match this.meter.observe(&event) {
                    EventAction::Forward => this.ready.push_back(event),
                    EventAction::Drop => {}
                    EventAction::Terminal => {
                        let settling = settle_final(this.ticket, this.meter);
                        hold_until_settled(this.settling, this.held, this.ready, settling, event);
                    }
                }
            }
            if this.settling.is_some() && this.ready.is_empty() {
                continue;
            }
            if let Some(bytes) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if *this.upstream_done {
                return Poll::Ready(this.failure.take().map(Err));
            }
            if this.deadline.as_mut().poll(cx).is_ready() {
                *this.upstream_done = true;
                *this.failure = Some(Box::new(StreamTimeout(*this.timeout)));
                *this.settling = this.ticket.settle_seen(this.meter.partial_usage());
                continue;
            }
            match this.upstream.as_mut().poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.splitter.push(&data);
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    *this.upstream_done = true;
                    *this.failure = Some(Box::new(error));
                    *this.settling = this.ticket.settle_seen(this.meter.partial_usage());
                }
                Poll::Ready(None) => {
                    // The last event may lack its closing blank line (or
                    // end in a lone `\r` the splitter was waiting on): read
                    // it too, settle on what came, then pass it on.
                    *this.upstream_done = true;
                    let mut rest = this.splitter.take_rest();
                    if !rest.is_empty() && this.meter.observe(&rest) == EventAction::Drop {
                        rest = Bytes::new();
                    }
                    let settling = settle_final(this.ticket, this.meter);
                    hold_until_settled(this.settling, this.held, this.ready, settling, rest);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.upstream_done
            && self.ready.is_empty()
            && self.held.is_none()
            && self.settling.is_none()
            && self.failure.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
