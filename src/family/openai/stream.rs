//! OpenAI's streams: chat and legacy completions chunks (`data: {…}`,
//! ended by `data: [DONE]`, usage in the `include_usage` chunk) and the
//! Responses API's named events (`response.completed` ends it with the
//! whole response and its usage).

use std::borrow::Cow;

use serde::Deserialize;

use super::usage::{OpenAiUsage, ResponseObject};
use crate::usage::text::{len, Folded, TextBytes, TextLen};
use crate::usage::{EventAction, StreamSeen};

/// Reads one OpenAI chat or legacy completions event.
pub(crate) fn chat(seen: &mut StreamSeen, data: &[u8], hide_usage_chunk: bool) -> EventAction {
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
    seen.count_text(choices.text_bytes);
    if let Some(tier) = super::usage::tier_of(chunk.service_tier.as_ref()) {
        seen.service_tier = Some(tier);
    }
    match chunk.usage {
        Some(usage) => {
            seen.report(usage.to_usage());
            if hide_usage_chunk && choices.items == 0 {
                EventAction::Drop
            } else {
                EventAction::Forward
            }
        }
        None => EventAction::Forward,
    }
}

/// Reads one Responses API event.
pub(crate) fn responses(seen: &mut StreamSeen, name: Option<&str>, data: &[u8]) -> EventAction {
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
            seen.count_text(delta.0);
        }
        EventAction::Forward
    } else if is_responses_terminal(name) {
        if let Some(usage) = parsed.and_then(|p| p.response?.into_usage()) {
            seen.report(usage);
        }
        EventAction::Terminal
    } else {
        EventAction::Forward
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
