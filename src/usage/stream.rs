//! Metering a streamed response: each complete SSE event is looked at once,
//! on its way to the client, for the usage the provider reports, the text it
//! carries, and whether it is the event that ends the stream.
//!
//! Text is only measured, never kept: the JSON strings that carry it are
//! read for their decoded byte length and dropped, and arrays of choices or
//! tool calls are folded as they are parsed, so metering an event allocates
//! nothing beyond serde_json's scratch space for escaped strings.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::shapes::{AnthropicUsage, OpenAiUsage, ResponseObject};
use super::{AbsurdUsage, Reported, ServiceTier, Usage};
use crate::sse;

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
    /// Anthropic Messages stream.
    AnthropicMessages,
}

/// What to do with an event after the meter has seen it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventAction {
    /// Pass it to the client.
    Forward,
    /// Keep it from the client: the usage chunk the gateway asked for.
    Drop,
    /// The event that ends the stream; the caller settles BEFORE forwarding
    /// it, so the client never sees the end of a call that is not paid for.
    Terminal,
}

/// Output tokens counted from text the client has seen: a conservative
/// count, ceil(bytes / 3).
///
/// The providers' tokenizers average about four bytes of English or code
/// per token, and about one token per three-byte character of CJK text.
/// Three bytes per token therefore overcounts usual text a little, which is
/// the side to err on: this count settles a stream that was cut before the
/// provider reported its usage, and undercounting would let such a stream
/// spend past the cap unbilled.
pub fn count_output_tokens(text_bytes: u64) -> u64 {
    text_bytes.div_ceil(3)
}

/// Watches the events of one streamed response.
#[derive(Clone, Debug)]
pub struct StreamMeter {
    kind: StreamKind,
    /// Latest counts the provider reported; fields not yet reported are 0.
    usage: Usage,
    /// Input counts were reported (Anthropic sends them first, in
    /// `message_start`).
    input_reported: bool,
    /// The final output count was reported.
    output_reported: bool,
    /// Decoded UTF-8 bytes of generated text seen, reasoning and tool-call
    /// arguments included.
    text_bytes: u64,
    /// The first count the provider reported that no call can have: its
    /// report is then not believed at all, however the stream ends.
    absurd: Option<AbsurdUsage>,
    /// The latest tier an OpenAI chunk reported (every chunk carries it).
    service_tier: Option<ServiceTier>,
}

impl StreamMeter {
    pub fn new(kind: StreamKind) -> Self {
        Self {
            kind,
            usage: Usage::default(),
            input_reported: false,
            output_reported: false,
            text_bytes: 0,
            absurd: None,
            service_tier: None,
        }
    }

    /// Looks at one complete raw event (as split by
    /// [`sse::SseSplitter`]) and says what to do with it. Events the meter
    /// does not know, or cannot parse, are forwarded untouched.
    pub fn observe(&mut self, raw_event: &[u8]) -> EventAction {
        let event = sse::parse_event(raw_event);
        match self.kind {
            StreamKind::OpenAiChat { hide_usage_chunk } => {
                self.observe_chat(&event.data, hide_usage_chunk)
            }
            StreamKind::OpenAiResponses => self.observe_responses(event.event, &event.data),
            StreamKind::AnthropicMessages => self.observe_anthropic(event.event, &event.data),
        }
    }

    /// Provider-reported usage if the stream carried it in full, else
    /// `None`; an absurd count anywhere in the stream's reports makes it
    /// that, complete or not.
    pub fn reported_usage(&self) -> Option<Reported> {
        if let Some(absurd) = &self.absurd {
            return Some(Err(absurd.clone()));
        }
        (self.input_reported && self.output_reported).then_some(Ok(self.with_tier(self.usage)))
    }

    /// `usage` with the tier the chunks reported, if it names none itself.
    fn with_tier(&self, usage: Usage) -> Usage {
        Usage {
            service_tier: usage.service_tier.or(self.service_tier),
            ..usage
        }
    }

    /// The first absurd count the provider reported, if any: a stream cut
    /// after one is charged its bound, not what was seen.
    pub fn absurd_usage(&self) -> Option<&AbsurdUsage> {
        self.absurd.as_ref()
    }

    /// Whether the provider reported the input counts, which
    /// [`StreamMeter::partial_usage`] then carries; otherwise its input
    /// fields are 0 and the caller substitutes its own estimate.
    pub fn input_reported(&self) -> bool {
        self.input_reported
    }

    /// What the meter saw, for a stream that was cut: the input counts
    /// reported so far (Anthropic's `message_start` reports them early) and,
    /// as output, the larger of the latest reported output count and the
    /// tokens counted from the text seen.
    pub fn partial_usage(&self) -> Usage {
        self.with_tier(Usage {
            output: self.usage.output.max(count_output_tokens(self.text_bytes)),
            ..self.usage
        })
    }

    /// Decoded UTF-8 bytes of generated text seen so far.
    pub fn output_text_bytes(&self) -> u64 {
        self.text_bytes
    }

    fn count_text(&mut self, bytes: u64) {
        self.text_bytes = self.text_bytes.saturating_add(bytes);
    }

    fn report(&mut self, usage: Reported) {
        match usage {
            Ok(usage) => {
                self.usage = usage;
                self.input_reported = true;
                self.output_reported = true;
            }
            Err(absurd) => self.note_absurd(absurd),
        }
    }

    fn note_absurd(&mut self, absurd: AbsurdUsage) {
        self.absurd.get_or_insert(absurd);
    }

    // === OpenAI chat and legacy completions ===

    fn observe_chat(&mut self, data: &[u8], hide_usage_chunk: bool) -> EventAction {
        let data = data.trim_ascii();
        if data == b"[DONE]" {
            return EventAction::Terminal;
        }
        // Every chunk but the last may carry text, so there is no cheaper
        // test than the parse itself; only non-objects are skipped.
        if !data.starts_with(b"{") {
            return EventAction::Forward;
        }
        let Ok(chunk) = serde_json::from_slice::<ChatChunk>(data) else {
            return EventAction::Forward;
        };
        let choices = chunk.choices.unwrap_or_default();
        self.count_text(choices.text_bytes);
        if let Some(tier) = ServiceTier::from_reported(chunk.service_tier.as_ref()) {
            self.service_tier = Some(tier);
        }
        match chunk.usage {
            Some(usage) => {
                self.report(usage.to_usage());
                if hide_usage_chunk && choices.items == 0 {
                    EventAction::Drop
                } else {
                    EventAction::Forward
                }
            }
            None => EventAction::Forward,
        }
    }

    // === OpenAI Responses ===

    fn observe_responses(&mut self, name: Option<&str>, data: &[u8]) -> EventAction {
        // The `event:` line names the event without a parse; most events
        // (item and part bookkeeping, the `.done` repeats of whole texts)
        // matter to nobody here.
        if name.is_some_and(|n| !is_responses_text_delta(n) && !is_responses_terminal(n)) {
            return EventAction::Forward;
        }
        let parsed = serde_json::from_slice::<ResponsesEvent<'_>>(data).ok();
        let Some(name) = name.or_else(|| parsed.as_ref()?.kind.as_deref()) else {
            return EventAction::Forward;
        };
        if is_responses_text_delta(name) {
            if let Some(delta) = parsed.as_ref().and_then(|p| p.delta) {
                self.count_text(delta.0);
            }
            EventAction::Forward
        } else if is_responses_terminal(name) {
            if let Some(usage) = parsed.and_then(|p| p.response?.into_usage()) {
                self.report(usage);
            }
            EventAction::Terminal
        } else {
            EventAction::Forward
        }
    }

    // === Anthropic Messages ===

    fn observe_anthropic(&mut self, name: Option<&str>, data: &[u8]) -> EventAction {
        match name {
            Some("message_stop") => return EventAction::Terminal,
            Some("message_start" | "message_delta" | "content_block_delta") | None => {}
            Some(_) => return EventAction::Forward,
        }
        let Ok(event) = serde_json::from_slice::<AnthropicEvent<'_>>(data) else {
            return EventAction::Forward;
        };
        match name.or(event.kind.as_deref()) {
            Some("message_start") => {
                if let Some(usage) = event.message.and_then(|m| m.usage) {
                    match usage.to_usage() {
                        Ok(usage) => {
                            self.usage = usage;
                            self.input_reported = true;
                        }
                        Err(absurd) => self.note_absurd(absurd),
                    }
                }
            }
            Some("message_delta") => {
                if let Some(usage) = event.usage {
                    if let Err(absurd) = self.merge_anthropic_delta(&usage) {
                        self.note_absurd(absurd);
                    }
                }
            }
            Some("content_block_delta") => {
                if let Some(delta) = event.delta {
                    self.count_text(delta.text_bytes());
                }
            }
            Some("message_stop") => return EventAction::Terminal,
            _ => {}
        }
        EventAction::Forward
    }

    /// `message_delta` counts are cumulative: each replaces the last, never
    /// adds to it. Newer API versions repeat the input counts here too.
    fn merge_anthropic_delta(&mut self, delta: &AnthropicUsage) -> Result<(), AbsurdUsage> {
        if delta.output_tokens.is_some() {
            self.usage.output = delta.output_tokens()?;
            self.output_reported = true;
        }
        if delta.input_tokens.is_some() {
            self.usage.input = delta.input_tokens()?;
        }
        if delta.cache_read_input_tokens.is_some() {
            self.usage.cached_input = delta.cache_read_input_tokens()?;
        }
        if let Some(server) = &delta.server_tool_use {
            server.write(&mut self.usage.tool_calls)?;
        }
        if delta.cache_creation_input_tokens.is_some() {
            self.usage.cache_write = delta.cache_creation_input_tokens()?;
        }
        if delta.cache_creation.is_some() {
            self.usage.cache_write_1h = delta.cache_write_1h()?;
        }
        Ok(())
    }
}

const RESPONSES_TEXT_DELTAS: [&str; 5] = [
    "response.output_text.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
    "response.function_call_arguments.delta",
    "response.refusal.delta",
];

const RESPONSES_TERMINALS: [&str; 3] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
];

fn is_responses_text_delta(name: &str) -> bool {
    RESPONSES_TEXT_DELTAS.contains(&name)
}

fn is_responses_terminal(name: &str) -> bool {
    RESPONSES_TERMINALS.contains(&name)
}

// === Wire shapes of stream events ===

/// One `chat.completion.chunk` or streamed `text_completion`.
#[derive(Deserialize)]
struct ChatChunk {
    choices: Option<Folded<Choice>>,
    usage: Option<OpenAiUsage>,
    service_tier: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    delta: Option<ChatDelta>,
    /// Legacy completions.
    text: Option<TextLen>,
}

#[derive(Deserialize)]
struct ChatDelta {
    content: Option<TextLen>,
    refusal: Option<TextLen>,
    reasoning_content: Option<TextLen>,
    /// The same text as `reasoning_content` under another name, sent by
    /// some OpenAI-compatible servers, at times next to it.
    reasoning: Option<TextLen>,
    tool_calls: Option<Folded<ToolCall>>,
    /// The deprecated single-function form of `tool_calls`.
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct ToolCall {
    function: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    arguments: Option<TextLen>,
}

/// A Responses event; `type` repeats the `event:` name.
#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    delta: Option<TextLen>,
    response: Option<ResponseObject>,
}

/// An Anthropic event; `type` repeats the `event:` name.
#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    /// `message_start`.
    message: Option<AnthropicMessage>,
    /// `message_delta`.
    usage: Option<AnthropicUsage>,
    /// `content_block_delta` (`message_delta` has one too, without text).
    delta: Option<AnthropicDelta>,
}

#[derive(Deserialize)]
struct AnthropicMessage {
    usage: Option<AnthropicUsage>,
}

/// `text_delta`, `thinking_delta` or `input_json_delta`; a
/// `signature_delta` is an opaque check on the thinking, not generated text.
#[derive(Deserialize)]
struct AnthropicDelta {
    text: Option<TextLen>,
    thinking: Option<TextLen>,
    partial_json: Option<TextLen>,
}

/// Generated text carried by a parsed piece of an event.
trait TextBytes {
    fn text_bytes(&self) -> u64;
}

fn len(text: Option<TextLen>) -> u64 {
    text.map_or(0, |t| t.0)
}

impl TextBytes for Choice {
    fn text_bytes(&self) -> u64 {
        let delta = self.delta.as_ref().map_or(0, TextBytes::text_bytes);
        delta.saturating_add(len(self.text))
    }
}

impl TextBytes for ChatDelta {
    fn text_bytes(&self) -> u64 {
        let tool_calls = self.tool_calls.as_ref().map_or(0, |t| t.text_bytes);
        let function_call = self.function_call.as_ref().map_or(0, TextBytes::text_bytes);
        [
            len(self.content),
            len(self.refusal),
            len(self.reasoning_content).max(len(self.reasoning)),
            tool_calls,
            function_call,
        ]
        .into_iter()
        .fold(0, u64::saturating_add)
    }
}

impl TextBytes for ToolCall {
    fn text_bytes(&self) -> u64 {
        self.function.as_ref().map_or(0, TextBytes::text_bytes)
    }
}

impl TextBytes for FunctionCall {
    fn text_bytes(&self) -> u64 {
        len(self.arguments)
    }
}

impl AnthropicDelta {
    fn text_bytes(&self) -> u64 {
        [len(self.text), len(self.thinking), len(self.partial_json)]
            .into_iter()
            .fold(0, u64::saturating_add)
    }
}

/// The decoded UTF-8 length of a JSON string, read without keeping the
/// string. Any other JSON value measures 0 instead of failing the parse, so
/// a provider's unusual content shape never costs the chunk's usage.
#[derive(Clone, Copy, Debug, Default)]
struct TextLen(u64);

impl<'de> Deserialize<'de> for TextLen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextLenVisitor)
    }
}

struct TextLenVisitor;

impl<'de> Visitor<'de> for TextLenVisitor {
    type Value = TextLen;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<TextLen, E> {
        Ok(TextLen(text.len() as u64))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_unit<E: de::Error>(self) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextLen, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(TextLen(0))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextLen, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(TextLen(0))
    }
}

/// A JSON array folded, as it is parsed, into its length and the text its
/// elements carry; the elements themselves are never collected.
struct Folded<T> {
    items: u64,
    text_bytes: u64,
    element: PhantomData<T>,
}

impl<T> Default for Folded<T> {
    fn default() -> Self {
        Self {
            items: 0,
            text_bytes: 0,
            element: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de> + TextBytes> Deserialize<'de> for Folded<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(FoldedVisitor(PhantomData))
    }
}

struct FoldedVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + TextBytes> Visitor<'de> for FoldedVisitor<T> {
    type Value = Folded<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Folded<T>, A::Error> {
        let mut folded = Folded::default();
        while let Some(element) = seq.next_element::<T>()? {
            folded.items += 1;
            folded.text_bytes = folded.text_bytes.saturating_add(element.text_bytes());
        }
        Ok(folded)
    }
}

#[cfg(test)]
mod tests;
