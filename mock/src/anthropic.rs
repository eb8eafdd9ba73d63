//! Anthropic's Messages API (`POST /v1/messages`), its token counting, its
//! model list and its error shape, as the official SDK parses them. Uses of
//! a server tool (`web_search_*`, `web_fetch_*`; `mock:tool_calls=N`, at
//! most the tool's `max_uses`) are `server_tool_use` and result blocks
//! before the text, counted in `usage.server_tool_use`; a stream reports
//! the input read before them in `message_start` and the whole input in
//! `message_delta`, which repeats every input count cumulatively, as the
//! API does. A call of a custom tool (see `function`) is a `tool_use`
//! block in place of the text, ending with `stop_reason: "tool_use"`.
//! The same answers serve Bedrock's InvokeModel routes ([`Wire::Bedrock`]:
//! `chunk` frames, Bedrock's errors and invocation metrics).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use super::bedrock;
use super::function::{is_tool_result, FunctionCall};
use super::handler::{directed_answer_as, new_id, Answer, ApiError};
use super::reply::{content_text, content_texts, text, u64_field, word, Directives, Reply, Tally};
use super::stream::{named, Event, EventStream, Events};
use super::MockOptions;

/// What `GET /v1/models` lists for Anthropic clients.
const MODELS: [(&str, &str); 3] = [
    ("claude-sonnet-4-5", "Claude Sonnet 4.5"),
    ("claude-haiku-4-5", "Claude Haiku 4.5"),
    ("claude-opus-4-1", "Claude Opus 4.1"),
];

/// Who serves a Messages call, which decides how its stream is written and
/// how its errors are worded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// Anthropic's API (and Vertex's `rawPredict`): server-sent events.
    Anthropic,
    /// Amazon Bedrock's `invoke` and `invoke-with-response-stream`: ids
    /// `msg_bdrk_…`; each stream event's JSON in an event-stream `chunk`
    /// frame, no `ping`, and the invocation metrics in `message_stop`.
    Bedrock,
}

/// `POST /v1/messages`.
pub(crate) fn messages(body: &Value, opts: &MockOptions) -> Result<Answer, ApiError> {
    messages_on(body, opts, Wire::Anthropic)
}

/// A Messages call answered as `wire` answers it.
pub(crate) fn messages_on(
    body: &Value,
    opts: &MockOptions,
    wire: Wire,
) -> Result<Answer, ApiError> {
    let started = bedrock::started(opts);
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
    let directives = user_directives(messages);
    let reply = opts.reply(&directives, Some(max_tokens));
    let call = FunctionCall::for_messages(body, messages);
    let tool = ServerTool::first_of(body);
    let uses = tool.as_ref().map_or(0, |tool| {
        directives.tool_calls.unwrap_or(0).min(tool.max_uses)
    });
    let output = call.as_ref().map_or(reply.tokens, FunctionCall::tokens);
    let mut tally = Tally::new(
        prompt_tokens(body.get("system"), messages),
        &directives,
        output,
    )
    .with_tool_calls(uses);
    tally.hour_cache = super::reply::asks_for_hour_cache(body);
    let tool_blocks = tool.map(|tool| tool.blocks(uses)).unwrap_or_default();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let directed = match wire {
        Wire::Anthropic => ApiError::directed,
        Wire::Bedrock => bedrock::directed_error,
    };
    if let Some(answer) = directed_answer_as(directed, &directives, stream, tally) {
        return answer;
    }
    let message = Arc::new(Message {
        id: new_id(match wire {
            Wire::Anthropic => "msg_",
            Wire::Bedrock => "msg_bdrk_",
        }),
        wire,
        started,
        first_byte: OnceLock::new(),
        model,
        reply,
        tally,
        tool,
        tool_blocks,
        call,
    });
    if stream {
        let events = EventStream {
            events: message.events(),
            tally,
            cut: directives.cut,
            pace: opts.pace(&directives),
        };
        return Ok(match wire {
            Wire::Anthropic => Answer::Stream(events),
            Wire::Bedrock => Answer::AwsEventStream(events),
        });
    }
    let mut body = message.object(message.stop_reason(), tally.output, true);
    let mut content: Vec<Value> = message
        .tool_blocks
        .iter()
        .flat_map(|(used, result)| [used.clone(), result.clone()])
        .collect();
    content.push(match &message.call {
        Some(call) => tool_use(call, call.input()),
        None => json!({"type": "text", "text": text(reply.tokens)}),
    });
    body["content"] = Value::Array(content);
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
pub(crate) fn prompt_tokens(system: Option<&Value>, messages: &[Value]) -> u64 {
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

/// The directives of the last `user` message that carries no tool result:
/// the prompt the conversation is about, also once a tool's result is sent
/// back.
pub(crate) fn user_directives(messages: &[Value]) -> Directives {
    messages
        .iter()
        .rev()
        .filter(|message| !is_tool_result(message))
        .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|message| message.get("content"))
        .map(|content| Directives::parse(&content_text(content)))
        .unwrap_or_default()
}

/// A `tool_use` block calling a custom tool with `input`.
fn tool_use(call: &FunctionCall, input: Value) -> Value {
    json!({"type": "tool_use", "id": call.call_id, "name": call.name, "input": input})
}

/// A server tool the request declares: Anthropic runs it and bills each
/// use.
#[derive(Clone, Copy, Debug)]
struct ServerTool {
    /// `web_search` or `web_fetch`.
    name: &'static str,
    max_uses: u64,
}

impl ServerTool {
    /// The first server tool of the request's `tools`.
    fn first_of(body: &Value) -> Option<ServerTool> {
        body.get("tools")?.as_array()?.iter().find_map(|tool| {
            let kind = tool.get("type")?.as_str()?;
            let name = if kind.starts_with("web_search_") {
                "web_search"
            } else if kind.starts_with("web_fetch_") {
                "web_fetch"
            } else {
                return None;
            };
            let max_uses = u64_field(tool, "max_uses").unwrap_or(u64::MAX);
            Some(ServerTool { name, max_uses })
        })
    }

    /// `usage.server_tool_use` with `uses` uses.
    fn usage(self, uses: u64) -> Value {
        json!({format!("{}_requests", self.name): uses})
    }

    /// A `server_tool_use` block and its result block for each use.
    fn blocks(self, uses: u64) -> Vec<(Value, Value)> {
        (0..uses)
            .map(|use_index| {
                let id = new_id("srvtoolu_");
                let url = format!("https://example.com/mock/{use_index}");
                let (input, content) = match self.name {
                    "web_search" => (
                        json!({"query": format!("mock query {use_index}")}),
                        json!([{"type": "web_search_result", "url": url,
                            "title": format!("Mock result {use_index}"),
                            "encrypted_content": "bW9jayByZXN1bHQ=", "page_age": null}]),
                    ),
                    _ => (
                        json!({"url": url}),
                        json!({"type": "web_fetch_result", "url": url,
                            "content": {"type": "document", "source": {"type": "text",
                                "media_type": "text/plain", "data": "mock page"}},
                            "retrieved_at": "2025-09-10T00:00:00Z"}),
                    ),
                };
                (
                    json!({"type": "server_tool_use", "id": id, "name": self.name, "input": input}),
                    json!({"type": format!("{}_tool_result", self.name), "tool_use_id": id,
                        "content": content}),
                )
            })
            .collect()
    }
}

/// One message being answered.
struct Message {
    id: String,
    wire: Wire,
    /// When the call came in (the configured latency before it included),
    /// for Bedrock's invocation metrics.
    started: Instant,
    /// How long the first event took, once generated.
    first_byte: OnceLock<Duration>,
    model: String,
    reply: Reply,
    tally: Tally,
    tool: Option<ServerTool>,
    /// Each server tool use and its result, before the text.
    tool_blocks: Vec<(Value, Value)>,
    /// The custom tool called in place of the text.
    call: Option<FunctionCall>,
}

impl Message {
    fn stop_reason(&self) -> &'static str {
        if self.call.is_some() {
            "tool_use"
        } else if self.reply.capped {
            "max_tokens"
        } else {
            "end_turn"
        }
    }

    /// The message object without content, with `output_tokens` reported:
    /// the usage once the tools ran (`tools_done`), or as it stood before.
    fn object(&self, stop_reason: impl Into<Value>, output_tokens: u64, tools_done: bool) -> Value {
        let (input, uses) = if tools_done {
            (self.tally.uncached(), self.tally.tool_calls)
        } else {
            (self.tally.uncached_before_tools(), 0)
        };
        let mut object = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": stop_reason.into(),
            "stop_sequence": null,
            "usage": {
                "input_tokens": input,
                "cache_creation_input_tokens": self.tally.cache_write,
                "cache_read_input_tokens": self.tally.cached,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": self.tally.cache_write - self.tally.usage().cache_write_1h,
                    "ephemeral_1h_input_tokens": self.tally.usage().cache_write_1h,
                },
                "output_tokens": output_tokens,
                "service_tier": "standard",
            },
        });
        if let Some(tool) = self.tool {
            object["usage"]["server_tool_use"] = tool.usage(uses);
        }
        object
    }

    /// The usage `message_delta` reports: every count cumulative, the
    /// whole input (the tools' results included) repeated with the output,
    /// and the server tool's uses when one was declared.
    fn delta_usage(&self) -> Value {
        let mut usage = json!({
            "input_tokens": self.tally.uncached(),
            "cache_creation_input_tokens": self.tally.cache_write,
            "cache_read_input_tokens": self.tally.cached,
            "output_tokens": self.tally.output,
        });
        if let Some(tool) = self.tool {
            usage["server_tool_use"] = tool.usage(self.tally.tool_calls);
        }
        usage
    }

    /// The streamed content after the server tools: the text block, or the
    /// `tool_use` block of the custom tool call, one token per delta.
    fn content_pieces(&self) -> (Value, Vec<Value>) {
        match &self.call {
            Some(call) => (
                tool_use(call, json!({})),
                call.pieces
                    .iter()
                    .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
                    .collect(),
            ),
            None => (
                json!({"type": "text", "text": ""}),
                (0..self.reply.tokens)
                    .map(|position| json!({"type": "text_delta", "text": word(position)}))
                    .collect(),
            ),
        }
    }

    /// The events of the server tool blocks: each use's input streamed as
    /// JSON, each result whole.
    fn tool_frames(&self) -> Vec<Bytes> {
        let event = |kind, fields| self.event(kind, fields);
        let mut frames = Vec::new();
        for (index, (used, result)) in (0u64..).step_by(2).zip(&self.tool_blocks) {
            let mut opening = used.clone();
            opening["input"] = json!({});
            frames.extend([
                event(
                    "content_block_start",
                    json!({"index": index, "content_block": opening}),
                ),
                event(
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "input_json_delta",
                        "partial_json": used["input"].to_string()}}),
                ),
                event("content_block_stop", json!({"index": index})),
                event(
                    "content_block_start",
                    json!({"index": index + 1, "content_block": result}),
                ),
                event("content_block_stop", json!({"index": index + 1})),
            ]);
        }
        frames
    }

    /// The text block's index, after the tool blocks.
    fn text_index(&self) -> u64 {
        2 * self.tool_blocks.len() as u64
    }

    /// message_start, content_block_start, ping, one text (or tool input)
    /// delta per token, content_block_stop, message_delta with the totals,
    /// message_stop.
    fn events(self: &Arc<Self>) -> Events {
        let opening = self.clone();
        let closing = self.clone();
        let text_index = self.text_index();
        let (block, deltas) = self.content_pieces();
        let delta = self.clone();
        Box::new(
            std::iter::once_with(move || {
                let mut frames = vec![opening.event(
                    "message_start",
                    json!({"message": opening.object(Value::Null, 1, false)}),
                )];
                let _ = opening.first_byte.set(opening.started.elapsed());
                frames.extend(opening.tool_frames());
                frames.push(opening.event(
                    "content_block_start",
                    json!({"index": text_index, "content_block": block}),
                ));
                if opening.wire == Wire::Anthropic {
                    frames.push(opening.event("ping", json!({})));
                }
                frames
            })
            .flatten()
            .map(Event::Frame)
            .chain(deltas.into_iter().map(move |piece| {
                Event::Token(delta.event(
                    "content_block_delta",
                    json!({"index": text_index, "delta": piece}),
                ))
            }))
            .chain(std::iter::once(Event::Generated))
            .chain(
                std::iter::once_with(move || {
                    let mut stop = json!({});
                    if closing.wire == Wire::Bedrock {
                        let first_byte = closing.first_byte.get().copied().unwrap_or_default();
                        stop["amazon-bedrock-invocationMetrics"] = bedrock::invocation_metrics(
                            &closing.tally,
                            closing.started,
                            first_byte,
                        );
                    }
                    [
                        closing.event("content_block_stop", json!({"index": text_index})),
                        closing.event(
                            "message_delta",
                            json!({
                                "delta": {
                                    "stop_reason": closing.stop_reason(),
                                    "stop_sequence": null,
                                },
                                "usage": closing.delta_usage(),
                            }),
                        ),
                        closing.event("message_stop", stop),
                    ]
                })
                .flatten()
                .map(Event::Frame),
            ),
        )
    }

    /// An Anthropic event, its data carrying its type: named by it on
    /// Anthropic's wire, a Bedrock `chunk` frame on Bedrock's.
    fn event(&self, kind: &str, mut fields: Value) -> Bytes {
        fields["type"] = json!(kind);
        match self.wire {
            Wire::Anthropic => named(kind, &fields),
            Wire::Bedrock => bedrock::chunk(&fields),
        }
    }
}
