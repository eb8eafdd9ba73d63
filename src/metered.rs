//! The [`MeteredBody`]: a provider's SSE response streamed through to the
//! client while its usage is read.
//!
//! It forwards each complete event as it arrives, drops the usage chunk the
//! client did not ask for, and holds the terminal event back until the
//! settlement has been recorded, so a client never sees the end of a call
//! that is not paid. However the stream ends — terminal event, cut, timeout,
//! client gone — its [`SettleTicket`] settles exactly once.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::body::BoxError;
use crate::estimate::ToolBound;
use crate::family::{Frames, StreamKind, StreamMeter};
use crate::settle::{Read, SettleTicket, Settling};
use crate::usage::EventAction;

// === impl MeteredBody ===

pin_project! {
    /// A provider's event stream on its way to the client.
    pub struct MeteredBody {
        // Taken when the client leaves, to read the rest of the stream.
        upstream: Option<Incoming>,
        #[pin]
        deadline: Sleep,
        splitter: Frames,
        meter: StreamMeter,
        // How the hosted tool uses the stream reports are billed.
        tools: ToolBound,
        ticket: SettleTicket,
        // Events cleared to send.
        ready: VecDeque<Bytes>,
        // The terminal event, sent once the settlement is recorded.
        held: Option<Bytes>,
        settling: Option<Settling>,
        // The provider's stream is over (ended, failed or timed out).
        upstream_done: bool,
        // Why the stream was cut, reported to the client after settling.
        failure: Option<BoxError>,
        timeout: Duration,
    }

    impl PinnedDrop for MeteredBody {
        fn drop(this: Pin<&mut Self>) {
            // The client is gone. (A settlement already in flight finishes
            // by itself when dropped.)
            let this = this.project();
            let upstream = this.upstream.take().filter(|_| !*this.upstream_done);
            let (Some(upstream), true) = (upstream, this.ticket.is_armed()) else {
                drop(settle_cut(this.ticket, this.meter));
                return;
            };
            // The provider may still be generating, and billing: read on,
            // unrelayed, and settle on what the rest of the stream says.
            let ticket = std::mem::replace(this.ticket, SettleTicket::spent());
            let limit = if ticket.output_hidden() {
                this.deadline.deadline()
            } else {
                Instant::now() + VISIBLE_DRAIN
            };
            let reading = read_rest(
                upstream,
                std::mem::take(this.splitter),
                this.meter.clone(),
                *this.tools,
                limit,
            );
            ticket.settle_after(reading);
        }
    }
}

impl MeteredBody {
    /// `timeout`: the stream is cut (and settled as seen) if it is still
    /// running then, so no call outlives its reservation.
    pub fn new(
        upstream: Incoming,
        kind: StreamKind,
        tools: ToolBound,
        ticket: SettleTicket,
        timeout: Duration,
    ) -> MeteredBody {
        MeteredBody {
            upstream: Some(upstream),
            deadline: tokio::time::sleep(timeout),
            splitter: kind.frames(),
            meter: StreamMeter::new(kind),
            tools,
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

/// How long the rest of an all-visible stream is read once its client has
/// gone: what the provider already sent is counted, then the stream is
/// closed so generation stops.
const VISIBLE_DRAIN: Duration = Duration::from_millis(250);

/// Reads a stream whose client has gone, until it ends or `limit`: the
/// usage it reports, or what was seen of it.
async fn read_rest(
    mut upstream: Incoming,
    mut splitter: Frames,
    mut meter: StreamMeter,
    tools: ToolBound,
    limit: Instant,
) -> Read {
    let reading = async {
        while let Some(Ok(frame)) = upstream.frame().await {
            if let Ok(data) = frame.into_data() {
                splitter.push(&data);
                while let Some(event) = splitter.next_event() {
                    meter.observe(&event);
                }
            }
        }
        meter.observe(&splitter.take_rest());
    };
    let _ = tokio::time::timeout_at(limit, reading).await;
    match meter.reported_usage() {
        Some(reported) => Read::Reported(reported.map(|usage| tools.reported(usage))),
        None => Read::Seen(meter.partial_usage()),
    }
}

/// Settles with the provider's usage if the stream carried it (its hosted
/// tool uses billed as `tools` says), else with what was seen.
fn settle_final(
    ticket: &mut SettleTicket,
    meter: &StreamMeter,
    tools: &ToolBound,
) -> Option<Settling> {
    match meter.reported_usage() {
        Some(reported) => ticket.settle_reported(reported.map(|usage| tools.reported(usage))),
        None => ticket.settle_seen(meter.partial_usage()),
    }
}

/// Settles a stream cut before its end with what was seen; if the
/// provider had already reported a count no call can have, nothing it
/// reported can be believed, and the call is charged its bound.
fn settle_cut(ticket: &mut SettleTicket, meter: &StreamMeter) -> Option<Settling> {
    match meter.absurd_usage() {
        Some(absurd) => ticket.settle_reported(Err(absurd.clone())),
        None => ticket.settle_seen(meter.partial_usage()),
    }
}

/// Keeps `event` back until `settling` is done; sends it at once if there is
/// nothing to wait for (the ticket was already spent).
fn hold_until_settled(
    settling: &mut Option<Settling>,
    held: &mut Option<Bytes>,
    ready: &mut VecDeque<Bytes>,
    future: Option<Settling>,
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
                if Pin::new(settling).poll(cx).is_pending() {
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
                        let settling = settle_final(this.ticket, this.meter, this.tools);
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
                *this.settling = settle_cut(this.ticket, this.meter);
                continue;
            }
            let Some(upstream) = this.upstream.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(upstream).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.splitter.push(&data);
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    *this.upstream_done = true;
                    *this.failure = Some(Box::new(error));
                    *this.settling = settle_cut(this.ticket, this.meter);
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
                    let settling = settle_final(this.ticket, this.meter, this.tools);
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
