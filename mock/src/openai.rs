//! OpenAI's chat completions (calling function tools too), legacy
//! completions and model list, and its error shape, as the official SDKs
//! parse them. The Responses API lives in `responses`, embeddings in
//! `embeddings`. Azure OpenAI serves the same routes ([`Host::Azure`]):
//! `azure` routes its calls here and words its annotations and errors.

use bytes::Bytes;
use serde_json::{json, Value};

use super::azure;
use super::function::FunctionCall;
use super::handler::{directed_answer, directed_answer_as, new_id, unix_now, Answer, ApiError};
use super::reply::{count_tokens, last_user_directives, u64_field, word, Directives, Reply, Tally};
use super::stream::{data, Event, EventStream, Events};
use super::MockOptions;

/// Stands in for the backend configuration OpenAI fingerprints.
const SYSTEM_FINGERPRINT: &str = "fp_7d3a1c0b5e";

/// The most choices OpenAI accepts in one request.
const MAX_CHOICES: u64 = 128;

/// What `GET /v1/models` lists.
const MODELS: [&str; 7] = [
    "gpt-4o-mini",
    "gpt-4o",
    "gpt-4.1",
    "gpt-4.1-mini",
    "o4-mini",
    "text-embedding-3-small",
    "text-embedding-3-large",
];

/// Who serves an OpenAI-shaped request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Host {
    /// OpenAI: the body's `model` is required and echoed.
    OpenAi,
    /// Azure OpenAI, through a deployment of `model`: answers name that
    /// model whatever the body says, chat and completions carry Azure's
    /// content filter annotations, chat reports no `service_tier`, no
    /// project default tier applies, and directed errors are worded as
    /// Azure's.
    Azure { model: String },
}

impl Host {
    /// The model an answer names.
    pub(crate) fn model(&self, body: &Value) -> Result<String, ApiError> {
        match self {
            Self::OpenAi => model(body),
            Self::Azure { model } => Ok(model.clone()),
        }
    }

    pub(crate) fn is_azure(&self) -> bool {
        matches!(self, Self::Azure { .. })
    }

    /// [`directed_answer`], with the error worded as this host's.
    pub(crate) fn directed_answer(
        &self,
        directives: &Directives,
        stream: bool,
        tally: Tally,
    ) -> Option<Result<Answer, ApiError>> {
        match self {
            Self::OpenAi => directed_answer(directives, stream, tally),
            Self::Azure { .. } => {
                directed_answer_as(azure::directed_error, directives, stream, tally)
            }
        }
    }

    /// The directives that decide the tier: Azure has no project default
    /// tier, so `mock:project_priority` does nothing there.
    pub(crate) fn tier_directives(&self, directives: &Directives) -> Directives {
        match self {
            Self::OpenAi => *directives,
            Self::Azure { .. } => Directives {
                project_priority: None,
                ..*directives
            },
        }
    }
}

/// `POST /v1/chat/completions`.
pub(crate) fn chat(body: &Value, opts: &MockOptions, host: &Host) -> Result<Answer, ApiError> {
    let model = host.model(body)?;
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("Missing required parameter: 'messages'.", "messages"))?;
    let choices = choices(body)?;
    let limit = match &opts.chat_limit_field {
        Some(field) => u64_field(body, field),
        None => lower(
            u64_field(body, "max_completion_tokens"),
            u64_field(body, "max_tokens"),
        ),
    };
    let directives = last_user_directives(messages);
    let reply = opts.reply(&directives, limit);
    let call = FunctionCall::for_chat(body, messages);
    let output = call.as_ref().map_or(reply.tokens, FunctionCall::tokens);
    let tally = Tally::new(
        chat_prompt_tokens(messages),
        &directives,
        output.saturating_mul(choices),
    );
    let stream = flag(body, "stream");
    if let Some(answer) = host.directed_answer(&directives, stream, tally) {
        return answer;
    }
    let chunks = Chunks {
        id: new_id("chatcmpl-"),
        object: "chat.completion.chunk",
        created: unix_now(),
        model,
        include_usage: stream && include_usage(body),
        service_tier: (!host.is_azure()).then(|| super::reply::served_tier(body, &directives)),
        prompt_filters: host.is_azure().then(|| azure::prompt_filter_results(1)),
    };
    if let Some(call) = call {
        return Ok(tool_call_answer(
            chunks,
            stream,
            choices,
            call,
            tally,
            &directives,
            opts,
        ));
    }
    if stream {
        return Ok(stream_answer(
            chunks,
            CHAT_SHAPE,
            choices,
            reply,
            tally,
            &directives,
            opts,
        ));
    }
    let text = super::reply::text(reply.tokens);
    let body = chunks.body(json!({
        "id": chunks.id,
        "object": "chat.completion",
        "created": chunks.created,
        "model": chunks.model,
        "choices": (0..choices).map(|index| json!({
            "index": index,
            "message": {"role": "assistant", "content": text, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": finish_reason(reply),
        })).collect::<Vec<_>>(),
        "usage": chat_usage(&tally),
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }));
    Ok(Answer::Json { body, tally })
}

/// `POST /v1/completions`, the legacy text completions.
pub(crate) fn completions(
    body: &Value,
    opts: &MockOptions,
    host: &Host,
) -> Result<Answer, ApiError> {
    let model = host.model(body)?;
    let prompts = body
        .get("prompt")
        .and_then(inputs)
        .ok_or_else(|| ApiError::invalid("Missing required parameter: 'prompt'.", "prompt"))?;
    let choices = choices(body)?.saturating_mul(prompts.len() as u64);
    let directives = last_text_directives(&prompts);
    let reply = opts.reply(&directives, u64_field(body, "max_tokens"));
    let prompt_tokens = prompts.iter().map(Input::tokens).sum();
    let tally = Tally::new(
        prompt_tokens,
        &directives,
        reply.tokens.saturating_mul(choices),
    );
    let stream = flag(body, "stream");
    if let Some(answer) = host.directed_answer(&directives, stream, tally) {
        return answer;
    }
    let chunks = Chunks {
        id: new_id("cmpl-"),
        object: "text_completion",
        created: unix_now(),
        model,
        include_usage: stream && include_usage(body),
        service_tier: None,
        prompt_filters: host
            .is_azure()
            .then(|| azure::prompt_filter_results(prompts.len() as u64)),
    };
    if stream {
        return Ok(stream_answer(
            chunks,
            COMPLETION_SHAPE,
            choices,
            reply,
            tally,
            &directives,
            opts,
        ));
    }
    let text = super::reply::text(reply.tokens);
    let body = chunks.body(json!({
        "id": chunks.id,
        "object": "text_completion",
        "created": chunks.created,
        "model": chunks.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": (0..choices).map(|index| json!({
            "text": text,
            "index": index,
            "logprobs": null,
            "finish_reason": finish_reason(reply),
        })).collect::<Vec<_>>(),
        "usage": completion_usage(&tally),
    }));
    Ok(Answer::Json { body, tally })
}

/// `GET /v1/models`.
pub(crate) fn models() -> Value {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "object": "model",
                "created": 1_715_367_049,
                "owned_by": "system",
            })
        })
        .collect();
    json!({"object": "list", "data": data})
}

/// OpenAI's error body; the type and code follow the status as OpenAI's do.
pub(crate) fn error_body(error: &ApiError) -> Value {
    let (kind, code) = match error.status.as_u16() {
        401 => ("invalid_request_error", Some("invalid_api_key")),
        429 => ("requests", Some("rate_limit_exceeded")),
        500..=599 => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    json!({"error": {
        "message": error.message,
        "type": kind,
        "param": error.param,
        "code": error.code.or(code),
    }})
}

/// The `model` field, which every OpenAI route requires.
pub(crate) fn model(body: &Value) -> Result<String, ApiError> {
    body.get("model")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::invalid("you must provide a model parameter", "model"))
}

/// A boolean field, false when absent.
pub(crate) fn flag(body: &Value, name: &str) -> bool {
    body.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// The smaller of two optional limits.
fn lower(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn include_usage(body: &Value) -> bool {
    body.pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The `n` field, 1 when absent.
fn choices(body: &Value) -> Result<u64, ApiError> {
    match body.get("n") {
        None | Some(Value::Null) => Ok(1),
        Some(n) => n
            .as_u64()
            .filter(|n| (1..=MAX_CHOICES).contains(n))
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("Invalid 'n': expected an integer from 1 to {MAX_CHOICES}."),
                    "n",
                )
            }),
    }
}

fn finish_reason(reply: Reply) -> &'static str {
    if reply.capped {
        "length"
    } else {
        "stop"
    }
}

/// Role names and content texts, plus OpenAI's framing of 3 tokens per
/// message and 3 priming the reply.
fn chat_prompt_tokens(messages: &[Value]) -> u64 {
    let mut texts = Vec::new();
    let mut framing = 3;
    for message in messages {
        framing += 3;
        if let Some(Value::String(role)) = message.get("role") {
            texts.push(role.as_str());
        }
        if let Some(content) = message.get("content") {
            super::reply::content_texts(content, &mut texts);
        }
    }
    framing + texts.into_iter().map(count_tokens).sum::<u64>()
}

fn completion_usage(tally: &Tally) -> Value {
    json!({
        "prompt_tokens": tally.prompt,
        "completion_tokens": tally.output,
        "total_tokens": tally.prompt + tally.output,
    })
}

fn chat_usage(tally: &Tally) -> Value {
    json!({
        "prompt_tokens": tally.prompt,
        "completion_tokens": tally.output,
        "total_tokens": tally.prompt + tally.output,
        "prompt_tokens_details": {"cached_tokens": tally.cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    })
}

/// One prompt or embedding input.
pub(crate) enum Input<'a> {
    Text(&'a str),
    Tokens(&'a [Value]),
}

impl Input<'_> {
    pub(crate) fn tokens(&self) -> u64 {
        match self {
            Input::Text(text) => count_tokens(text),
            Input::Tokens(tokens) => tokens.len() as u64,
        }
    }
}

/// A string, an array of strings, an array of token ids, or an array of
/// token-id arrays; `None` for anything else or an empty array.
pub(crate) fn inputs(value: &Value) -> Option<Vec<Input<'_>>> {
    let token_ids = |items: &[Value]| items.iter().all(Value::is_u64);
    match value {
        Value::String(text) => Some(vec![Input::Text(text)]),
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) if token_ids(items) => Some(vec![Input::Tokens(items)]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Some(Input::Text(text)),
                Value::Array(ids) if token_ids(ids) => Some(Input::Tokens(ids)),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// The directives of the last text input.
pub(crate) fn last_text_directives(inputs: &[Input<'_>]) -> Directives {
    inputs
        .iter()
        .rev()
        .find_map(|input| match input {
            Input::Text(text) => Some(Directives::parse(text)),
            Input::Tokens(_) => None,
        })
        .unwrap_or_default()
}

/// The fields every chunk of a chat or completions stream repeats.
struct Chunks {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    /// The client asked for usage: every chunk carries `"usage": null`
    /// until the usage-only chunk, as OpenAI sends them.
    include_usage: bool,
    /// The tier every chat chunk names.
    service_tier: Option<&'static str>,
    /// Azure's `prompt_filter_results`, streamed in a chunk of their own
    /// before any other; with them every choice carries its
    /// `content_filter_results`.
    prompt_filters: Option<Value>,
}

impl Chunks {
    /// A whole (non-stream) answer: `fields` with the tier and Azure's
    /// annotations added.
    fn body(&self, mut fields: Value) -> Value {
        if let Some(tier) = self.service_tier {
            fields["service_tier"] = tier.into();
        }
        if let Some(filters) = &self.prompt_filters {
            fields["prompt_filter_results"] = filters.clone();
            if let Some(choices) = fields["choices"].as_array_mut() {
                for choice in choices {
                    choice["content_filter_results"] = azure::content_filter_results();
                }
            }
        }
        fields
    }

    /// Azure's first chunk, which annotates the prompt and nothing else.
    fn prompt_filter_chunk(&self) -> Option<Event> {
        let filters = self.prompt_filters.as_ref()?;
        Some(Event::Frame(data(&json!({
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": filters,
        }))))
    }

    /// A streamed choice as this host sends it: on Azure a chunk carrying
    /// content has its `content_filter_results`, any other an empty
    /// object, as Azure's do.
    fn choice(&self, mut choice: Value, content: bool) -> Value {
        if self.prompt_filters.is_some() {
            choice["content_filter_results"] = if content {
                azure::content_filter_results()
            } else {
                json!({})
            };
        }
        choice
    }

    fn frame(&self, choices: Vec<Value>, usage: Option<Value>) -> Bytes {
        let mut chunk = json!({
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
        });
        if let Some(tier) = self.service_tier {
            chunk["service_tier"] = tier.into();
        }
        if self.include_usage {
            chunk["usage"] = usage.unwrap_or(Value::Null);
        }
        data(&chunk)
    }
}

/// How one choice looks in each kind of chunk, and the usage object.
#[derive(Clone, Copy)]
struct ChunkShape {
    /// The chunk before the first token (chat's role announcement).
    opening: Option<fn(u64) -> Value>,
    token: fn(u64, &str) -> Value,
    finish: fn(u64, &str) -> Value,
    usage: fn(&Tally) -> Value,
}

const CHAT_SHAPE: ChunkShape = ChunkShape {
    opening: Some(|index| {
        json!({
            "index": index,
            "delta": {"role": "assistant", "content": "", "refusal": null},
            "logprobs": null,
            "finish_reason": null,
        })
    }),
    token: |index, token| {
        json!({
            "index": index,
            "delta": {"content": token},
            "logprobs": null,
            "finish_reason": null,
        })
    },
    finish: |index, reason| {
        json!({
            "index": index,
            "delta": {},
            "logprobs": null,
            "finish_reason": reason,
        })
    },
    usage: chat_usage,
};

const COMPLETION_SHAPE: ChunkShape = ChunkShape {
    opening: None,
    token: |index, token| {
        json!({
            "text": token,
            "index": index,
            "logprobs": null,
            "finish_reason": null,
        })
    },
    finish: |index, reason| {
        json!({
            "text": "",
            "index": index,
            "logprobs": null,
            "finish_reason": reason,
        })
    },
    usage: completion_usage,
};

/// The event stream of chat and legacy completions: opening chunks, one
/// chunk per token and choice, a finishing chunk per choice, the usage-only
/// chunk when asked for, then `[DONE]`.
fn stream_answer(
    chunks: Chunks,
    shape: ChunkShape,
    choices: u64,
    reply: Reply,
    tally: Tally,
    directives: &Directives,
    opts: &MockOptions,
) -> Answer {
    let chunks = std::sync::Arc::new(chunks);
    let reason = finish_reason(reply);
    let usage = (shape.usage)(&tally);
    let (opening, tokens, finish, ending) =
        (chunks.clone(), chunks.clone(), chunks.clone(), chunks);
    let events: Events = Box::new(
        opening
            .prompt_filter_chunk()
            .into_iter()
            .chain(shape.opening.into_iter().flat_map(move |opening_choice| {
                let chunks = opening.clone();
                (0..choices).map(move |index| {
                    let choice = chunks.choice(opening_choice(index), false);
                    Event::Frame(chunks.frame(vec![choice], None))
                })
            }))
            .chain((0..reply.tokens).flat_map(move |position| {
                let chunks = tokens.clone();
                (0..choices).map(move |index| {
                    let choice = chunks.choice((shape.token)(index, word(position)), true);
                    Event::Token(chunks.frame(vec![choice], None))
                })
            }))
            .chain(std::iter::once(Event::Generated))
            .chain((0..choices).map(move |index| {
                let choice = finish.choice((shape.finish)(index, reason), false);
                Event::Frame(finish.frame(vec![choice], None))
            }))
            .chain(
                ending
                    .include_usage
                    .then(|| Event::Frame(ending.frame(Vec::new(), Some(usage)))),
            )
            .chain(std::iter::once(Event::Frame(Bytes::from_static(
                b"data: [DONE]\n\n",
            )))),
    );
    Answer::Stream(EventStream {
        events,
        tally,
        cut: directives.cut,
        pace: opts.pace(directives),
    })
}

/// A chat answer calling a function tool: the message carries the call in
/// `tool_calls` and ends with `tool_calls`; streamed, the first chunk of
/// each choice names the call and the next carry its arguments, one token
/// each.
fn tool_call_answer(
    chunks: Chunks,
    stream: bool,
    choices: u64,
    call: FunctionCall,
    tally: Tally,
    directives: &Directives,
    opts: &MockOptions,
) -> Answer {
    let named = json!([{"index": 0, "id": call.call_id, "type": "function",
        "function": {"name": call.name, "arguments": call.arguments}}]);
    if !stream {
        let body = chunks.body(json!({
            "id": chunks.id,
            "object": "chat.completion",
            "created": chunks.created,
            "model": chunks.model,
            "choices": (0..choices).map(|index| json!({
                "index": index,
                "message": {"role": "assistant", "content": null, "tool_calls": named,
                    "refusal": null, "annotations": []},
                "logprobs": null,
                "finish_reason": "tool_calls",
            })).collect::<Vec<_>>(),
            "usage": chat_usage(&tally),
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }));
        return Answer::Json { body, tally };
    }
    let mut opening_call = named;
    opening_call[0]["function"]["arguments"] = json!("");
    // `content`: the chunk carries a piece of the arguments.
    let choice = |index: u64, delta: Value, reason: Value, content: bool| {
        chunks.choice(
            json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": reason}),
            content,
        )
    };
    let mut frames: Vec<Event> = chunks.prompt_filter_chunk().into_iter().collect();
    for index in 0..choices {
        let delta = json!({"role": "assistant", "content": null, "tool_calls": opening_call,
            "refusal": null});
        frames.push(Event::Frame(
            chunks.frame(vec![choice(index, delta, Value::Null, false)], None),
        ));
    }
    for piece in &call.pieces {
        for index in 0..choices {
            let delta = json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]});
            frames.push(Event::Token(
                chunks.frame(vec![choice(index, delta, Value::Null, true)], None),
            ));
        }
    }
    frames.push(Event::Generated);
    for index in 0..choices {
        let finish = choice(index, json!({}), json!("tool_calls"), false);
        frames.push(Event::Frame(chunks.frame(vec![finish], None)));
    }
    if chunks.include_usage {
        frames.push(Event::Frame(
            chunks.frame(Vec::new(), Some(chat_usage(&tally))),
        ));
    }
    frames.push(Event::Frame(Bytes::from_static(b"data: [DONE]\n\n")));
    Answer::Stream(EventStream {
        events: Box::new(frames.into_iter()),
        tally,
        cut: directives.cut,
        pace: opts.pace(directives),
    })
}
