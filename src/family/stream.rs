//! Metering a streamed response: each complete event is looked at once,
//! on its way to the client, by its family's reader, for the usage the
//! provider reports, the text it carries, and whether it is the event
//! that ends the stream.
//!
//! Text is only measured, never kept (`crate::usage::text`), so metering
//! an event allocates nothing beyond serde_json's scratch space for
//! escaped strings.

use bytes::Bytes;

use super::bedrock::stream::EventStreamSplitter;
use super::gemini::frames::{element_json, JsonArraySplitter};
use super::gemini::stream::GeminiSeen;
use super::{anthropic, bedrock, gemini, openai};
use crate::sse::{self, SseSplitter};
use crate::usage::{AbsurdUsage, EventAction, Reported, StreamSeen, Usage};

/// The event format of a streamed response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// OpenAI chat/completions stream (also legacy completions).
    /// `hide_usage_chunk`: the gateway injected
    /// `stream_options.include_usage`, so the usage-only chunk (choices
    /// empty, usage present) must be dropped from what the client sees.
    OpenAiChat { hide_usage_chunk: bool },
    /// OpenAI Responses stream (`event: response.*`).
    OpenAiResponses,
    /// Anthropic Messages stream (also Vertex AI's `streamRawPredict`).
    AnthropicMessages,
    /// Gemini's `streamGenerateContent` of `candidates` candidates, as
    /// server-sent events (`sse`) or one JSON array.
    Gemini { sse: bool, candidates: u64 },
    /// Bedrock's `converse-stream`, in AWS event-stream frames.
    BedrockConverse,
    /// Bedrock's `invoke-with-response-stream`: Anthropic's events inside
    /// AWS event-stream frames.
    BedrockInvoke,
}

impl StreamKind {
    /// How the stream's bytes are cut into events.
    pub fn frames(self) -> Frames {
        match self {
            StreamKind::Gemini { sse: false, .. } => Frames::JsonArray(JsonArraySplitter::new()),
            StreamKind::BedrockConverse | StreamKind::BedrockInvoke => {
                Frames::EventStream(EventStreamSplitter::new())
            }
            _ => Frames::Sse(SseSplitter::new()),
        }
    }
}

/// Splits a stream's bytes into whole events, in one pass, handing each
/// out as the exact bytes that arrived.
#[derive(Debug)]
pub enum Frames {
    /// Server-sent events.
    Sse(SseSplitter),
    /// The elements of one JSON array (Gemini without `alt=sse`).
    JsonArray(JsonArraySplitter),
    /// AWS event-stream frames (Bedrock).
    EventStream(EventStreamSplitter),
}

impl Default for Frames {
    fn default() -> Self {
        Frames::Sse(SseSplitter::new())
    }
}

impl Frames {
    pub fn push(&mut self, bytes: &[u8]) {
        match self {
            Frames::Sse(splitter) => splitter.push(bytes),
            Frames::JsonArray(splitter) => splitter.push(bytes),
            Frames::EventStream(splitter) => splitter.push(bytes),
        }
    }

    /// The next complete event, if one has arrived.
    pub fn next_event(&mut self) -> Option<Bytes> {
        match self {
            Frames::Sse(splitter) => splitter.next_event(),
            Frames::JsonArray(splitter) => splitter.next_element(),
            Frames::EventStream(splitter) => splitter.next_frame(),
        }
    }

    /// Whatever is left once the stream has ended: a last event without
    /// its end, or nothing.
    pub fn take_rest(&mut self) -> Bytes {
        match self {
            Frames::Sse(splitter) => splitter.take_rest(),
            Frames::JsonArray(splitter) => splitter.take_rest(),
            Frames::EventStream(splitter) => splitter.take_rest(),
        }
    }
}

/// Watches the events of one streamed response.
#[derive(Clone, Debug)]
pub struct StreamMeter {
    kind: StreamKind,
    pub(crate) seen: StreamSeen,
    /// What a Gemini stream showed besides its usage.
    gemini: GeminiSeen,
}

impl StreamMeter {
    pub fn new(kind: StreamKind) -> Self {
        Self {
            kind,
            seen: StreamSeen::default(),
            gemini: GeminiSeen::default(),
        }
    }

    /// Looks at one complete raw event (as [`Frames`] cut it) and says
    /// what to do with it. Events the meter does not know, or cannot
    /// parse, are forwarded untouched.
    pub fn observe(&mut self, raw_event: &[u8]) -> EventAction {
        let seen = &mut self.seen;
        match self.kind {
            StreamKind::OpenAiChat { hide_usage_chunk } => {
                let event = sse::parse_event(raw_event);
                openai::stream::chat(seen, &event.data, hide_usage_chunk)
            }
            StreamKind::OpenAiResponses => {
                let event = sse::parse_event(raw_event);
                openai::stream::responses(seen, event.event, &event.data)
            }
            StreamKind::AnthropicMessages => {
                let event = sse::parse_event(raw_event);
                anthropic::stream::messages(seen, event.event, &event.data)
            }
            StreamKind::Gemini { sse, candidates } => {
                let gemini = &mut self.gemini;
                if sse {
                    let event = sse::parse_event(raw_event);
                    gemini::stream::chunk(seen, gemini, &event.data, candidates)
                } else {
                    gemini::stream::chunk(seen, gemini, element_json(raw_event), candidates)
                }
            }
            StreamKind::BedrockConverse => bedrock::stream::converse(seen, raw_event),
            StreamKind::BedrockInvoke => bedrock::stream::invoke(seen, raw_event),
        }
    }

    /// Provider-reported usage if the stream carried it in full.
    pub fn reported_usage(&self) -> Option<Reported> {
        self.seen.reported_usage()
    }

    /// The first absurd count the provider reported, if any.
    pub fn absurd_usage(&self) -> Option<&AbsurdUsage> {
        self.seen.absurd_usage()
    }

    /// What the stream showed, for one that was cut.
    pub fn partial_usage(&self) -> Usage {
        self.seen.partial_usage()
    }

    /// Decoded UTF-8 bytes of generated text seen so far.
    pub fn output_text_bytes(&self) -> u64 {
        self.seen.output_text_bytes()
    }
}

#[cfg(test)]
mod tests;
