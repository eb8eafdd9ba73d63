//! Response bodies and the event streams (server-sent events, and AWS
//! event-stream frames for Bedrock): a stream is a lazy
//! sequence of events fed into a channel body by its own task, one frame
//! per event, so the client sees each event as it is generated. The task
//! paces content tokens, cuts the connection on `mock:cut` and bills the
//! usage a provider would bill for what was generated.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use aws_smithy_types::str_bytes::StrBytes;
use bytes::Bytes;
use http_body::Frame;
use http_body_util::{Either, Full};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::reply::Tally;
use super::MockStats;

/// Every response body of the mock: a whole JSON document, or an event
/// stream written as it is generated.
pub(crate) type MockBody = Either<Full<Bytes>, EventBody>;

/// The error a cut stream ends with, so the server drops the connection
/// (HTTP/1.1) or resets the stream (HTTP/2) instead of ending it cleanly.
#[derive(Debug, thiserror::Error)]
#[error("stream cut by the mock:cut directive")]
pub(crate) struct StreamCut;

/// An event stream's body: the frames its generating task sends, ending
/// with an error when the stream is cut.
pub(crate) struct EventBody {
    frames: mpsc::Receiver<Result<Bytes, StreamCut>>,
    /// The cut was received and the body has yielded once so the server
    /// flushes the frames before it: the cut comes next.
    cut_next: bool,
}

impl http_body::Body for EventBody {
    type Data = Bytes;
    type Error = StreamCut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamCut>>> {
        let body = self.get_mut();
        if body.cut_next {
            return Poll::Ready(Some(Err(StreamCut)));
        }
        match body.frames.poll_recv(cx) {
            Poll::Ready(Some(Err(StreamCut))) => {
                // hyper drops whatever it still buffers when a body fails;
                // a pending poll makes it write the buffered frames first.
                body.cut_next = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            other => other.map(|next| next.map(|frame| frame.map(Frame::data))),
        }
    }
}

/// Frames buffered ahead of a slow client before generation waits.
const STREAM_BUFFER: usize = 16;

/// Time the connection gets to write the last frames before a cut: over
/// HTTP/2 a reset discards the frames it has not written yet.
const CUT_GRACE: Duration = Duration::from_millis(5);

/// One step of an event stream.
pub(crate) enum Event {
    /// An event that carries no content token.
    Frame(Bytes),
    /// An event that carries one output token: paced, and counted by
    /// `mock:cut`.
    Token(Bytes),
    /// An event that carries several output tokens at once (a Gemini chunk
    /// holds one token of every candidate): paced once, and counted by
    /// `mock:cut` as that many tokens.
    Tokens(Bytes, u64),
    /// Generation is over: the usage is billed here, before the events
    /// that end the stream and report it. A cut stream stops here at the
    /// latest.
    Generated,
}

/// The events of one stream, generated as they are sent.
pub(crate) type Events = Box<dyn Iterator<Item = Event> + Send>;

/// A planned event stream.
pub(crate) struct EventStream {
    pub events: Events,
    /// What the whole stream bills once generated.
    pub tally: Tally,
    /// Drop the connection after this many content tokens.
    pub cut: Option<u64>,
    /// Time between content tokens.
    pub pace: Duration,
}

/// An SSE event with only a data line, as OpenAI's chat streams send.
pub(crate) fn data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// An SSE event with only a data line, ended as Google's streams end
/// theirs (`\r\n\r\n`).
pub(crate) fn crlf_data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\r\n\r\n"))
}

/// An SSE event with a name, as Anthropic and the Responses API send.
pub(crate) fn named(name: &str, value: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
}

/// The padding Bedrock adds to each event's payload as `"p"`, of a length
/// that varies with the payload (clients ignore it).
const PADDING: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// One frame of an AWS event stream (`application/vnd.amazon.eventstream`,
/// Amazon Bedrock's streams): an `event` message named `event_type` whose
/// payload is `payload`'s JSON with the `"p"` padding added, framed with
/// its length prelude and both CRCs.
pub(crate) fn aws_event(event_type: &str, payload: &Value) -> Bytes {
    let mut payload = payload.clone();
    let length = 1 + payload.to_string().len() % PADDING.len();
    if let Value::Object(fields) = &mut payload {
        fields.insert("p".to_owned(), PADDING[..length.min(PADDING.len())].into());
    }
    let header = |name: &'static str, value: String| {
        Header::new(name, HeaderValue::String(StrBytes::from(value)))
    };
    let message = Message::new(payload.to_string())
        .add_header(header(":event-type", event_type.to_owned()))
        .add_header(header(":content-type", "application/json".to_owned()))
        .add_header(header(":message-type", "event".to_owned()));
    let mut frame = Vec::new();
    // Writing fails only for headers or payloads too long for a frame
    // (255-byte names, 16 MiB messages), which these never are.
    if let Err(error) = write_message_to(&message, &mut frame) {
        tracing::error!(%error, event_type, "mock: event-stream frame not written");
    }
    Bytes::from(frame)
}

/// A whole body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> MockBody {
    Either::Left(Full::new(bytes.into()))
}

/// Starts generating `stream` into a new body.
pub(crate) fn spawn(stream: EventStream, stats: Arc<MockStats>) -> MockBody {
    let (sender, frames) = mpsc::channel(STREAM_BUFFER);
    tokio::spawn(generate(stream, sender, stats));
    Either::Right(EventBody {
        frames,
        cut_next: false,
    })
}

/// Bills a stream exactly once: the whole tally when generation ends, or
/// the input and the tokens sent so far when the stream stops early (cut,
/// or the client went away), as a provider bills an interrupted call.
struct Billing {
    stats: Arc<MockStats>,
    tally: Tally,
    tokens_sent: u64,
    billed: bool,
}

impl Billing {
    fn bill(&mut self, tally: Tally) {
        if !self.billed {
            self.billed = true;
            self.stats.bill(tally.usage());
        }
    }

    fn bill_generated(&mut self) {
        self.bill(self.tally);
    }

    fn bill_sent(&mut self) {
        self.bill(self.tally.with_output(self.tokens_sent));
    }
}

impl Drop for Billing {
    fn drop(&mut self) {
        self.bill_sent();
    }
}

/// Sends the stream's events as they are generated: paces the tokens,
/// bills when generation ends and, on `mock:cut`, ends with the cut once
/// the frames before it are written.
async fn generate(
    stream: EventStream,
    sender: mpsc::Sender<Result<Bytes, StreamCut>>,
    stats: Arc<MockStats>,
) {
    let EventStream {
        events,
        tally,
        cut,
        pace,
    } = stream;
    let mut billing = Billing {
        stats,
        tally,
        tokens_sent: 0,
        billed: false,
    };
    let mut due = Instant::now();
    for event in events {
        let (frame, tokens) = match event {
            Event::Frame(frame) => (frame, 0),
            Event::Token(frame) => (frame, 1),
            Event::Tokens(frame, tokens) => (frame, tokens),
            Event::Generated => {
                if cut.is_some() {
                    break;
                }
                billing.bill_generated();
                continue;
            }
        };
        if tokens > 0 {
            // The cut falls between events: an event is sent whole or not
            // at all, once fewer than N tokens are out.
            if cut.is_some_and(|cut| billing.tokens_sent >= cut) {
                break;
            }
            if !pace.is_zero() {
                tokio::time::sleep_until(due).await;
                due += pace;
            }
            billing.tokens_sent = billing.tokens_sent.saturating_add(tokens);
        }
        if sender.send(Ok(frame)).await.is_err() {
            return;
        }
    }
    if cut.is_some() {
        billing.bill_sent();
        // Every frame before the cut reaches the client: wait until the
        // server has taken them all (the whole buffer is free again).
        if sender.reserve_many(STREAM_BUFFER).await.is_err() {
            return;
        }
        tokio::time::sleep(CUT_GRACE).await;
        // Ignored: a client already gone needs no cut.
        let _ = sender.send(Err(StreamCut)).await;
    }
}
