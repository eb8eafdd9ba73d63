//! OpenAI's Responses API (`POST /v1/responses`): the response object and
//! its typed event stream, with the fields the official SDK's stream
//! helpers rely on (`sequence_number`, `item_id`, `output_index`,
//! `content_index`, the full response in the terminal event). Uses of a
//! hosted tool (`mock:tool_calls=N`) are output items before the message
//! (`web_search_call`, `file_search_call`, …), at most `max_tool_calls`.
//! A call of a function tool (see `function`) is a `function_call` item in
//! place of the message. Azure OpenAI answers the same ([`Host::Azure`]),
//! naming its deployment's model.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::function::FunctionCall;
use super::handler::{new_id, unix_now, Answer, ApiError};
use super::openai::{flag, Host};
use super::reply::{
    content_texts, count_tokens, last_user_directives, text, u64_field, word, Directives, Reply,
    Tally,
};
use super::stream::{named, Event, EventStream};
use super::MockOptions;

/// Events of a stream before its first `response.output_text.delta`, not
/// counting two for each hosted tool call.
const EVENTS_BEFORE_TEXT: u64 = 4;

/// `POST /v1/responses`.
pub(crate) fn create(body: &Value, opts: &MockOptions, host: &Host) -> Result<Answer, ApiError> {
    let model = host.model(body)?;
    let input = match body.get("input") {
        None | Some(Value::Null) => Input::None,
        Some(Value::String(text)) => Input::Text(text),
        Some(Value::Array(items)) => Input::Items(items),
        Some(_) => {
            return Err(ApiError::invalid(
                "Invalid type for 'input': expected a string or an array of input items.",
                "input",
            ))
        }
    };
    let instructions = body.get("instructions").and_then(Value::as_str);
    let directives = match input {
        Input::None => Directives::default(),
        Input::Text(text) => Directives::parse(text),
        Input::Items(items) => last_user_directives(items),
    };
    let reply = opts.reply(&directives, u64_field(body, "max_output_tokens"));
    let tool_items = tool_items(body, &directives);
    let call = FunctionCall::for_responses(body);
    let output = call.as_ref().map_or(reply.tokens, FunctionCall::tokens);
    let tally = Tally::new(prompt_tokens(instructions, &input), &directives, output)
        .with_tool_calls(tool_items.len() as u64);
    let stream = flag(body, "stream");
    if let Some(answer) = host.directed_answer(&directives, stream, tally) {
        return answer;
    }
    let response = Arc::new(Responder {
        base: {
            let mut base = base_object(body, model);
            let tier = super::reply::served_tier(body, &host.tier_directives(&directives));
            base.insert("service_tier".into(), tier.into());
            base
        },
        item_id: new_id(if call.is_some() { "fc_" } else { "msg_" }),
        reply,
        tally,
        tool_items,
        call,
    });
    if stream {
        return Ok(Answer::Stream(EventStream {
            events: response.events(),
            tally,
            cut: directives.cut,
            pace: opts.pace(&directives),
        }));
    }
    Ok(Answer::Json {
        body: response.finished(&text(reply.tokens)),
        tally,
    })
}

/// The output items of the hosted tool calls made before the reply: the
/// request's first hosted tool, `mock:tool_calls` times, at most
/// `max_tool_calls`.
fn tool_items(body: &Value, directives: &Directives) -> Vec<Value> {
    let Some(kind) = body
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| tools.iter().find_map(hosted_call_item))
    else {
        return Vec::new();
    };
    let limit = u64_field(body, "max_tool_calls").unwrap_or(u64::MAX);
    let calls = directives.tool_calls.unwrap_or(0).min(limit);
    (0..calls)
        .map(|call| {
            let mut item = json!({"type": kind, "id": new_id("tc_"), "status": "completed"});
            if kind == "web_search_call" {
                item["action"] = json!({"type": "search", "query": format!("mock query {call}")});
            }
            item
        })
        .collect()
}

/// The output item type recording a use of `tool`, if it is a hosted tool.
fn hosted_call_item(tool: &Value) -> Option<&'static str> {
    let kind = tool.get("type")?.as_str()?;
    Some(match kind {
        _ if kind.starts_with("web_search") => "web_search_call",
        "file_search" => "file_search_call",
        "code_interpreter" => "code_interpreter_call",
        "image_generation" => "image_generation_call",
        "mcp" => "mcp_call",
        _ => return None,
    })
}

/// The `input` field's forms.
enum Input<'a> {
    None,
    Text(&'a str),
    Items(&'a [Value]),
}

/// `instructions` as a `system` message and every input item as a message:
/// its role, content texts, tool `output` and call `arguments`, 3 tokens of
/// framing each, plus 3 priming the reply.
fn prompt_tokens(instructions: Option<&str>, input: &Input<'_>) -> u64 {
    let mut texts = Vec::new();
    let mut framing = 3;
    if let Some(instructions) = instructions {
        framing += 3;
        texts.extend(["system", instructions]);
    }
    match input {
        Input::None => {}
        Input::Text(text) => {
            framing += 3;
            texts.extend(["user", text]);
        }
        Input::Items(items) => {
            for item in *items {
                framing += 3;
                for field in ["role", "output", "arguments"] {
                    if let Some(Value::String(text)) = item.get(field) {
                        texts.push(text);
                    }
                }
                if let Some(content) = item.get("content") {
                    content_texts(content, &mut texts);
                }
            }
        }
    }
    framing + texts.into_iter().map(count_tokens).sum::<u64>()
}

/// The response object's fields that do not change while it is generated,
/// echoing the request's settings as OpenAI does.
fn base_object(body: &Value, model: String) -> Map<String, Value> {
    let echo = |name: &str, default: Value| {
        body.get(name)
            .filter(|value| !value.is_null())
            .cloned()
            .unwrap_or(default)
    };
    let object = json!({
        "id": new_id("resp_"),
        "object": "response",
        "created_at": unix_now(),
        "background": false,
        "error": null,
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "max_tool_calls": echo("max_tool_calls", Value::Null),
        "model": model,
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "previous_response_id": echo("previous_response_id", Value::Null),
        "reasoning": {"effort": null, "summary": null},
        "service_tier": "default",
        "store": echo("store", json!(true)),
        "temperature": echo("temperature", json!(1.0)),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "top_logprobs": 0,
        "top_p": echo("top_p", json!(1.0)),
        "truncation": "disabled",
        "user": null,
        "metadata": echo("metadata", json!({})),
    });
    match object {
        Value::Object(fields) => fields,
        _ => Map::new(),
    }
}

/// Builds the response object and the events of one response.
struct Responder {
    base: Map<String, Value>,
    item_id: String,
    reply: Reply,
    tally: Tally,
    /// Hosted tool calls, completed, in output order before the message.
    tool_items: Vec<Value>,
    /// The function tool called in place of the message; `item_id` is its
    /// item's id.
    call: Option<FunctionCall>,
}

impl Responder {
    /// The response object in `status`, with its `output` and `usage`.
    fn object(&self, status: &str, output: Vec<Value>, usage: Value) -> Value {
        let mut object = self.base.clone();
        let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        object.insert("status".into(), json!(status));
        object.insert("incomplete_details".into(), json!(incomplete));
        object.insert("output".into(), Value::Array(output));
        object.insert("usage".into(), usage);
        Value::Object(object)
    }

    /// `completed`, or `incomplete` when the output limit cut the reply.
    fn final_status(&self) -> &'static str {
        if self.reply.capped && self.call.is_none() {
            "incomplete"
        } else {
            "completed"
        }
    }

    fn message(&self, status: &str, content: Vec<Value>) -> Value {
        json!({
            "id": self.item_id,
            "type": "message",
            "status": status,
            "content": content,
            "role": "assistant",
        })
    }

    fn usage(&self) -> Value {
        json!({
            "input_tokens": self.tally.prompt,
            "input_tokens_details": {"cached_tokens": self.tally.cached},
            "output_tokens": self.tally.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.tally.prompt + self.tally.output,
        })
    }

    /// The `function_call` item, with the arguments generated so far.
    fn call_item(&self, call: &FunctionCall, status: &str, arguments: &str) -> Value {
        json!({
            "id": self.item_id,
            "type": "function_call",
            "status": status,
            "arguments": arguments,
            "call_id": call.call_id,
            "name": call.name,
        })
    }

    /// The last output item once generated: the message, or the call.
    fn final_item(&self, text: &str) -> Value {
        let status = self.final_status();
        match &self.call {
            Some(call) => self.call_item(call, status, &call.arguments),
            None => self.message(status, vec![output_text(text)]),
        }
    }

    /// The whole response once generated.
    fn finished(&self, text: &str) -> Value {
        let mut output = self.tool_items.clone();
        output.push(self.final_item(text));
        self.object(self.final_status(), output, self.usage())
    }

    /// The message's place in `output`, after the tool calls.
    fn message_index(&self) -> u64 {
        self.tool_items.len() as u64
    }

    fn events_before_text(&self) -> u64 {
        // A call has no content part to open.
        let part = u64::from(self.call.is_some());
        EVENTS_BEFORE_TEXT - part + 2 * self.message_index()
    }

    /// The streamed deltas: one per token of the text, or of the call's
    /// arguments.
    fn deltas(&self) -> Vec<(&'static str, Value)> {
        match &self.call {
            Some(call) => call
                .pieces
                .iter()
                .map(|piece| {
                    (
                        "response.function_call_arguments.delta",
                        json!({"delta": piece}),
                    )
                })
                .collect(),
            None => (0..self.reply.tokens)
                .map(|position| {
                    (
                        "response.output_text.delta",
                        json!({"delta": word(position), "logprobs": []}),
                    )
                })
                .collect(),
        }
    }

    /// The stream: created, in_progress, the item and part opening, one
    /// text delta per token, then the closing events and the terminal
    /// `response.completed` (or `response.incomplete`) with the usage.
    fn events(self: &Arc<Self>) -> super::stream::Events {
        let (opening, deltas, closing) = (self.clone(), self.clone(), self.clone());
        let before_text = self.events_before_text();
        Box::new(
            std::iter::once_with(move || opening.opening_frames())
                .flatten()
                .map(Event::Frame)
                .chain(
                    (before_text..)
                        .zip(self.deltas())
                        .map(move |(sequence, (kind, fields))| {
                            Event::Token(deltas.item_event(kind, sequence, fields))
                        }),
                )
                .chain(std::iter::once(Event::Generated))
                .chain(
                    std::iter::once_with(move || closing.closing_frames())
                        .flatten()
                        .map(Event::Frame),
                ),
        )
    }

    fn opening_frames(&self) -> Vec<Bytes> {
        let in_progress = self.object("in_progress", Vec::new(), Value::Null);
        let mut frames = vec![
            event(
                "response.created",
                0,
                json!({"response": in_progress.clone()}),
            ),
            event("response.in_progress", 1, json!({"response": in_progress})),
        ];
        for (index, item) in (0u64..).zip(&self.tool_items) {
            let mut searching = item.clone();
            searching["status"] = json!("in_progress");
            frames.push(event(
                "response.output_item.added",
                2 + 2 * index,
                json!({"output_index": index, "item": searching}),
            ));
            frames.push(event(
                "response.output_item.done",
                3 + 2 * index,
                json!({"output_index": index, "item": item}),
            ));
        }
        let next = 2 + 2 * self.message_index();
        if let Some(call) = &self.call {
            frames.push(event(
                "response.output_item.added",
                next,
                json!({"output_index": self.message_index(), "item": self.call_item(call, "in_progress", "")}),
            ));
            return frames;
        }
        frames.push(event(
            "response.output_item.added",
            next,
            json!({"output_index": self.message_index(), "item": self.message("in_progress", Vec::new())}),
        ));
        frames.push(self.item_event(
            "response.content_part.added",
            next + 1,
            json!({"part": output_text("")}),
        ));
        frames
    }

    fn closing_frames(&self) -> Vec<Bytes> {
        let text = text(self.reply.tokens);
        let first = self.events_before_text() + self.deltas().len() as u64;
        let status = self.final_status();
        let terminal = format!("response.{status}");
        if let Some(call) = &self.call {
            return vec![
                self.item_event(
                    "response.function_call_arguments.done",
                    first,
                    json!({"arguments": call.arguments, "name": call.name}),
                ),
                event(
                    "response.output_item.done",
                    first + 1,
                    json!({"output_index": self.message_index(), "item": self.final_item(&text)}),
                ),
                event(
                    &terminal,
                    first + 2,
                    json!({"response": self.finished(&text)}),
                ),
            ];
        }
        vec![
            self.item_event(
                "response.output_text.done",
                first,
                json!({"text": text, "logprobs": []}),
            ),
            self.item_event(
                "response.content_part.done",
                first + 1,
                json!({"part": output_text(&text)}),
            ),
            event(
                "response.output_item.done",
                first + 2,
                json!({"output_index": self.message_index(), "item": self.message(status, vec![output_text(&text)])}),
            ),
            event(
                &terminal,
                first + 3,
                json!({"response": self.finished(&text)}),
            ),
        ]
    }

    /// An event about the message's one text part, or about the call.
    fn item_event(&self, kind: &str, sequence: u64, mut fields: Value) -> Bytes {
        fields["item_id"] = json!(self.item_id);
        fields["output_index"] = json!(self.message_index());
        if self.call.is_none() {
            fields["content_index"] = json!(0);
        }
        event(kind, sequence, fields)
    }
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

/// A Responses event: named by its type, which it repeats with its
/// position in the stream.
fn event(kind: &str, sequence: u64, mut fields: Value) -> Bytes {
    fields["type"] = json!(kind);
    fields["sequence_number"] = json!(sequence);
    named(kind, &fields)
}
