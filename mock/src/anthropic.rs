//! Anthropic's Messages API (`POST /v1/messages`), its token counting, its
//! model list and its error shape, as the official SDK parses them.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::handler::{directed_answer, new_id, Answer, ApiError};
use super::reply::{content_texts, last_user_directives, text, word, Reply, Tally};
use super::stream::{named, Event, EventStream, Events};
use super::MockOptions;

/// What `GET /v1/models` lists for Anthropic clients.
const MODELS: [(&str, &str); 3] = [
    ("claude-sonnet-4-5", "Claude Sonnet 4.5"),
    ("claude-haiku-4-5", "Claude Haiku 4.5"),
    ("claude-opus-4-1", "Claude Opus 4.1"),
];

/// `POST /v1/messages`.
pub(crate) fn messages(body: &Value, opts: &MockOptions) -> Result<Answer, ApiError> {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("model: Field required", "model"))?
        .to_owned();
    let max_tokens = match body.get("max_tokens") {
        None => {
            return Err(ApiError::invalid(
                "max_tokens: Field required",
                "max_tokens",
            ))
        }
        Some(value) => value.as_u64().filter(|limit| *limit >= 1).ok_or_else(|| {
            ApiError::invalid(
                "max_tokens: Input should be an integer greater than or equal to 1",
                "max_tokens",
            )
        })?,
    };
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("messages: Field required", "messages"))?;
    let directives = last_user_directives(messages);
    let reply = opts.reply(&directives, Some(max_tokens));
    let tally = Tally::new(
        prompt_tokens(body.get("system"), messages),
        &directives,
        reply.tokens,
    );
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(answer) = directed_answer(&directives, stream, tally) {
        return answer;
    }
    let message = Arc::new(Message {
        id: new_id("msg_"),
        model,
        reply,
        tally,
    });
    if stream {
        return Ok(Answer::Stream(EventStream {
            events: message.events(),
            tally,
            cut: directives.cut,
            pace: opts.pace(&directives),
        }));
    }
    let mut body = message.object(stop_reason(reply), tally.output);
    body["content"] = json!([{"type": "text", "text": text(reply.tokens)}]);
    Ok(Answer::Json { body, tally })
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens, counted as
/// [`messages`] counts its input; billed nothing.
pub(crate) fn count_tokens(body: &Value) -> Result<Answer, ApiError> {
    body.get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("model: Field required", "model"))?;
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("messages: Field required", "messages"))?;
    Ok(Answer::Json {
        body: json!({"input_tokens": prompt_tokens(body.get("system"), messages)}),
        tally: Tally::default(),
    })
}

/// `GET /v1/models` in Anthropic's shape.
pub(crate) fn models() -> Value {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|(id, name)| {
            json!({
                "type": "model",
                "id": id,
                "display_name": name,
                "created_at": "2025-09-29T00:00:00Z",
            })
        })
        .collect();
    json!({
        "data": data,
        "has_more": false,
        "first_id": MODELS.first().map(|(id, _)| *id),
        "last_id": MODELS.last().map(|(id, _)| *id),
    })
}

/// Anthropic's error body; the type follows the status as Anthropic's do.
pub(crate) fn error_body(error: &ApiError) -> Value {
    let kind = match error.status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": error.message}})
}

/// ceil(bytes of the system and message texts / 4) plus 3 per message:
/// Anthropic publishes no tokenizer, so this stands in for its count.
fn prompt_tokens(system: Option<&Value>, messages: &[Value]) -> u64 {
    let mut texts = Vec::new();
    if let Some(system) = system {
        content_texts(system, &mut texts);
    }
    for message in messages {
        if let Some(content) = message.get("content") {
            content_texts(content, &mut texts);
        }
    }
    let bytes: u64 = texts.iter().map(|text| text.len() as u64).sum();
    bytes.div_ceil(4) + 3 * messages.len() as u64
}

fn stop_reason(reply: Reply) -> &'static str {
    if reply.capped {
        "max_tokens"
    } else {
        "end_turn"
    }
}

/// One message being answered.
struct Message {
    id: String,
    model: String,
    reply: Reply,
    tally: Tally,
}

impl Message {
    /// The message object without content, with `output_tokens` reported.
    fn object(&self, stop_reason: impl Into<Value>, output_tokens: u64) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": stop_reason.into(),
            "stop_sequence": null,
            "usage": {
                "input_tokens": self.tally.uncached(),
                "cache_creation_input_tokens": self.tally.cache_write,
                "cache_read_input_tokens": self.tally.cached,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": self.tally.cache_write,
                    "ephemeral_1h_input_tokens": 0,
                },
                "output_tokens": output_tokens,
                "service_tier": "standard",
            },
        })
    }

    /// message_start, content_block_start, ping, one text delta per token,
    /// content_block_stop, message_delta with the output total, message_stop.
    fn events(self: &Arc<Self>) -> Events {
        let opening = self.clone();
        let closing = self.clone();
        Box::new(
            std::iter::once_with(move || {
                [
                    event(
                        "message_start",
                        json!({"message": opening.object(Value::Null, 1)}),
                    ),
                    event(
                        "content_block_start",
                        json!({"index": 0, "content_block": {"type": "text", "text": ""}}),
                    ),
                    event("ping", json!({})),
                ]
            })
            .flatten()
            .map(Event::Frame)
            .chain((0..self.reply.tokens).map(|position| {
                Event::Token(event(
                    "content_block_delta",
                    json!({"index": 0, "delta": {"type": "text_delta", "text": word(position)}}),
                ))
            }))
            .chain(std::iter::once(Event::Generated))
            .chain(
                std::iter::once_with(move || {
                    [
                        event("content_block_stop", json!({"index": 0})),
                        event(
                            "message_delta",
                            json!({
                                "delta": {
                                    "stop_reason": stop_reason(closing.reply),
                                    "stop_sequence": null,
                                },
                                "usage": {"output_tokens": closing.tally.output},
                            }),
                        ),
                        event("message_stop", json!({})),
                    ]
                })
                .flatten()
                .map(Event::Frame),
            ),
        )
    }
}

/// An Anthropic event: named by its type, which its data repeats.
fn event(kind: &str, mut fields: Value) -> Bytes {
    fields["type"] = json!(kind);
    named(kind, &fields)
}
