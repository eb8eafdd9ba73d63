//! OpenAI's Responses API (`POST /v1/responses`): the response object and
//! its typed event stream, with the fields the official SDK's stream
//! helpers rely on (`sequence_number`, `item_id`, `output_index`,
//! `content_index`, the full response in the terminal event).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::handler::{directed_answer, new_id, unix_now, Answer, ApiError};
use super::openai::{flag, model};
use super::reply::{
    content_texts, count_tokens, last_user_directives, text, u64_field, word, Directives, Reply,
    Tally,
};
use super::stream::{named, Event, EventStream};
use super::MockOptions;

/// Events of a stream before its first `response.output_text.delta`.
const EVENTS_BEFORE_TEXT: u64 = 4;

/// `POST /v1/responses`.
pub(crate) fn create(body: &Value, opts: &MockOptions) -> Result<Answer, ApiError> {
    let model = model(body)?;
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
    let tally = Tally::new(
        prompt_tokens(instructions, &input),
        &directives,
        reply.tokens,
    );
    let stream = flag(body, "stream");
    if let Some(answer) = directed_answer(&directives, stream, tally) {
        return answer;
    }
    let response = Arc::new(Responder {
        base: base_object(body, model),
        item_id: new_id("msg_"),
        reply,
        tally,
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
        "max_tool_calls": null,
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
        if self.reply.capped {
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

    /// The whole response once generated.
    fn finished(&self, text: &str) -> Value {
        let status = self.final_status();
        let message = self.message(status, vec![output_text(text)]);
        self.object(status, vec![message], self.usage())
    }

    /// The stream: created, in_progress, the item and part opening, one
    /// text delta per token, then the closing events and the terminal
    /// `response.completed` (or `response.incomplete`) with the usage.
    fn events(self: &Arc<Self>) -> super::stream::Events {
        let (opening, deltas, closing) = (self.clone(), self.clone(), self.clone());
        let tokens = self.reply.tokens;
        Box::new(
            std::iter::once_with(move || opening.opening_frames())
                .flatten()
                .map(Event::Frame)
                .chain((0..tokens).map(move |position| {
                    Event::Token(deltas.item_event(
                        "response.output_text.delta",
                        EVENTS_BEFORE_TEXT + position,
                        json!({"delta": word(position), "logprobs": []}),
                    ))
                }))
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
        vec![
            event(
                "response.created",
                0,
                json!({"response": in_progress.clone()}),
            ),
            event("response.in_progress", 1, json!({"response": in_progress})),
            event(
                "response.output_item.added",
                2,
                json!({"output_index": 0, "item": self.message("in_progress", Vec::new())}),
            ),
            self.item_event(
                "response.content_part.added",
                3,
                json!({"part": output_text("")}),
            ),
        ]
    }

    fn closing_frames(&self) -> Vec<Bytes> {
        let text = text(self.reply.tokens);
        let first = EVENTS_BEFORE_TEXT + self.reply.tokens;
        let status = self.final_status();
        let terminal = format!("response.{status}");
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
                json!({"output_index": 0, "item": self.message(status, vec![output_text(&text)])}),
            ),
            event(
                &terminal,
                first + 3,
                json!({"response": self.finished(&text)}),
            ),
        ]
    }

    /// An event about the message's one text part.
    fn item_event(&self, kind: &str, sequence: u64, mut fields: Value) -> Bytes {
        fields["item_id"] = json!(self.item_id);
        fields["output_index"] = json!(0);
        fields["content_index"] = json!(0);
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
