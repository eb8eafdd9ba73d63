//! Anthropic's Messages stream: input counts in `message_start`,
//! cumulative counts in each `message_delta`, text in
//! `content_block_delta`, and `message_stop` at the end. Vertex AI's
//! `streamRawPredict` sends the same events.

use std::borrow::Cow;

use serde::Deserialize;

use super::usage::AnthropicUsage;
use crate::usage::text::{len, TextLen};
use crate::usage::{AbsurdUsage, EventAction, StreamSeen};

/// Reads one Anthropic Messages event.
pub(crate) fn messages(seen: &mut StreamSeen, name: Option<&str>, data: &[u8]) -> EventAction {
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
                        seen.usage = usage;
                        seen.input_reported = true;
                    }
                    Err(absurd) => seen.note_absurd(absurd),
                }
            }
        }
        Some("message_delta") => {
            if let Some(usage) = event.usage {
                if let Err(absurd) = merge_delta(seen, &usage) {
                    seen.note_absurd(absurd);
                }
            }
        }
        Some("content_block_delta") => {
            if let Some(delta) = event.delta {
                seen.count_text(delta.text_bytes());
            }
        }
        Some("message_stop") => return EventAction::Terminal,
        _ => {}
    }
    EventAction::Forward
}

/// `message_delta` counts are cumulative: each replaces the last, never
/// adds to it. Newer API versions repeat the input counts here too.
fn merge_delta(seen: &mut StreamSeen, delta: &AnthropicUsage) -> Result<(), AbsurdUsage> {
    if delta.output_tokens.is_some() {
        seen.usage.output = delta.output_tokens()?;
        seen.output_reported = true;
    }
    if delta.input_tokens.is_some() {
        seen.usage.input = delta.input_tokens()?;
    }
    if delta.cache_read_input_tokens.is_some() {
        seen.usage.cached_input = delta.cache_read_input_tokens()?;
    }
    if let Some(server) = &delta.server_tool_use {
        server.write(&mut seen.usage.tool_calls)?;
    }
    if delta.cache_creation_input_tokens.is_some() {
        seen.usage.cache_write = delta.cache_creation_input_tokens()?;
    }
    if delta.cache_creation.is_some() {
        seen.usage.cache_write_1h = delta.cache_write_1h()?;
    }
    Ok(())
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

impl AnthropicDelta {
    fn text_bytes(&self) -> u64 {
        [len(self.text), len(self.thinking), len(self.partial_json)]
            .into_iter()
            .fold(0, u64::saturating_add)
    }
}
