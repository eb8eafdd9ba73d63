//! Bedrock's streams: AWS event-stream frames, each a message of headers
//! (`:message-type`, `:event-type`) and a JSON payload, its prelude and
//! whole message guarded by CRC32 checksums. [`EventStreamSplitter`] cuts
//! the bytes into whole frames as they arrive, to be forwarded unchanged;
//! AWS's own codec (`aws-smithy-eventstream`) reads each one, both
//! checksums verified.
//!
//! - `converse-stream`: `messageStart`, `contentBlockDelta`s (text, tool
//!   input, reasoning), `contentBlockStop`, `messageStop`, then `metadata`
//!   with the usage — the frame held until the call is settled.
//! - `invoke-with-response-stream`: `chunk` frames, each carrying one of
//!   Anthropic's stream events base64-encoded in `{"bytes"}`, read as the
//!   anthropic family reads them; `message_stop` ends it.
//!
//! An exception frame (`:message-type: exception`) ends a stream without
//! usage: the call is settled as a cut stream.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};
use base64::Engine;
use bytes::{Bytes, BytesMut};
use serde::Deserialize;

use super::super::anthropic;
use super::usage::ConverseUsage;
use crate::usage::{EventAction, StreamSeen};

/// The largest frame read: Bedrock's are a few kilobytes; a length past
/// this is no frame of its, and what follows is forwarded unread.
const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The prelude: the frame's total length, its headers' length, and their
/// checksum.
const PRELUDE_BYTES: usize = 12;

/// Cuts an event stream's bytes into whole frames, in one pass.
#[derive(Debug, Default)]
pub struct EventStreamSplitter {
    buffer: BytesMut,
}

impl EventStreamSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame, as the bytes that arrived.
    pub fn next_frame(&mut self) -> Option<Bytes> {
        let length: [u8; 4] = self.buffer.get(..4)?.try_into().ok()?;
        let length = u32::from_be_bytes(length) as usize;
        if !(PRELUDE_BYTES + 4..=MAX_FRAME_BYTES).contains(&length) {
            // Not a frame: hand everything on as it is, unread.
            return (!self.buffer.is_empty()).then(|| self.buffer.split().freeze());
        }
        (self.buffer.len() >= length).then(|| self.buffer.split_to(length).freeze())
    }

    /// Whatever is left once the stream has ended.
    pub fn take_rest(&mut self) -> Bytes {
        self.buffer.split().freeze()
    }
}

/// One frame, decoded with both checksums verified; `None` for bytes that
/// are not a whole, intact frame.
fn decode(frame: &[u8]) -> Option<Message> {
    let mut bytes = frame;
    match MessageFrameDecoder::new().decode_frame(&mut bytes) {
        Ok(DecodedFrame::Complete(message)) => Some(message),
        _ => None,
    }
}

/// A string header of `message`.
fn header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    message
        .headers()
        .iter()
        .find(|header| header.name().as_str() == name)
        .and_then(|header| match header.value() {
            HeaderValue::String(value) => Some(value.as_str()),
            _ => None,
        })
}

/// The event a frame carries: its `:event-type` and payload; `None` for an
/// exception, an error or a frame that does not decode.
fn event(frame: &[u8]) -> Option<(String, Bytes)> {
    let message = decode(frame)?;
    if header(&message, ":message-type") != Some("event") {
        return None;
    }
    let kind = header(&message, ":event-type")?.to_owned();
    Some((kind, message.payload().clone()))
}

/// Reads one frame of a `converse-stream`.
pub(crate) fn converse(seen: &mut StreamSeen, frame: &[u8]) -> EventAction {
    #[derive(Deserialize)]
    struct Delta {
        delta: Option<Value>,
    }
    #[derive(Deserialize)]
    struct Metadata {
        usage: Option<ConverseUsage>,
    }
    use serde_json::Value;
    let Some((kind, payload)) = event(frame) else {
        return EventAction::Forward;
    };
    match kind.as_str() {
        "contentBlockDelta" => {
            if let Ok(Delta { delta: Some(delta) }) = serde_json::from_slice(&payload) {
                seen.count_text(generated_bytes(&delta));
            }
            EventAction::Forward
        }
        "metadata" => {
            if let Ok(Metadata { usage: Some(usage) }) = serde_json::from_slice(&payload) {
                seen.report(usage.to_usage());
            }
            EventAction::Terminal
        }
        _ => EventAction::Forward,
    }
}

/// The generated text of a delta: text, tool input, reasoning text.
fn generated_bytes(delta: &serde_json::Value) -> u64 {
    let text = |value: Option<&serde_json::Value>| {
        value
            .and_then(serde_json::Value::as_str)
            .map_or(0, |s| s.len() as u64)
    };
    text(delta.get("text"))
        + text(delta.get("toolUse").and_then(|tool| tool.get("input")))
        + text(
            delta
                .get("reasoningContent")
                .and_then(|reasoning| reasoning.get("text")),
        )
}

/// Reads one frame of an `invoke-with-response-stream`: an Anthropic event
/// inside.
pub(crate) fn invoke(seen: &mut StreamSeen, frame: &[u8]) -> EventAction {
    #[derive(Deserialize)]
    struct Chunk {
        bytes: String,
    }
    let Some((kind, payload)) = event(frame) else {
        return EventAction::Forward;
    };
    if kind != "chunk" {
        return EventAction::Forward;
    }
    let Ok(chunk) = serde_json::from_slice::<Chunk>(&payload) else {
        return EventAction::Forward;
    };
    let Ok(data) = base64::engine::general_purpose::STANDARD.decode(chunk.bytes) else {
        return EventAction::Forward;
    };
    anthropic::stream::messages(seen, event_type(&data), &data)
}

/// An Anthropic event's `type`: read where Anthropic writes it, first,
/// without parsing the event twice; else from the parsed event.
fn event_type(data: &[u8]) -> Option<&str> {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<&'a str>,
    }
    let first = data
        .strip_prefix(br#"{"type":""#)
        .and_then(|rest| rest.iter().position(|b| *b == b'"').map(|end| &rest[..end]))
        .filter(|name| name.iter().all(|b| b.is_ascii_lowercase() || *b == b'_'))
        .and_then(|name| std::str::from_utf8(name).ok());
    first.or_else(|| {
        serde_json::from_slice::<Kind<'_>>(data)
            .ok()
            .and_then(|event| event.kind)
    })
}

#[cfg(test)]
mod tests;
