//! Amazon Bedrock Runtime, for Claude: the model routes
//! (`/model/{modelId}/converse`, `converse-stream`, `invoke`,
//! `invoke-with-response-stream`, `count-tokens`, the id decoded once the
//! path is split), a Bedrock API key or a SigV4 signature (checked by
//! `sigv4`), Bedrock's error shape, the Converse API, and InvokeModel,
//! which `anthropic` answers as Messages calls on its Bedrock wire.
//!
//! A Converse request is read as the Messages request it stands for
//! (`text` blocks as text, `toolUse` and `toolResult` as `tool_use` and
//! `tool_result`, a `cachePoint` as the `cache_control` of the block before
//! it, `toolSpec`s as custom tools), so its prompt is counted, its
//! directives read and its tool called exactly as on `/v1/messages`.

use std::time::{Duration, Instant};

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{json, Value};

use super::anthropic::{self, Wire};
use super::azure::percent_decode;
use super::function::FunctionCall;
use super::handler::{directed_answer_as, new_id, parse_object, Answer, ApiError};
use super::reply::{asks_for_hour_cache, text, word, Reply, Tally};
use super::sigv4::{self, SignedRequest};
use super::stream::{aws_event, Event, EventStream, Events};
use super::MockOptions;

/// The content type of Bedrock's streams.
pub(crate) const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// The `anthropic_version` InvokeModel wants for Claude.
pub(crate) const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// What follows an exception's name in `x-amzn-ErrorType`.
const ERROR_NAMESPACE: &str = "http://internal.amazon.com/coral/com.amazon.bedrock/";

/// The namespace of the exceptions AWS's front end raises before Bedrock
/// sees a call (authentication, unknown operations).
const SERVICE_NAMESPACE: &str = "http://internal.amazon.com/coral/com.amazon.coral.service/";

const SERVICE_EXCEPTIONS: [&str; 5] = [
    "InvalidSignatureException",
    "IncompleteSignatureException",
    "MissingAuthenticationTokenException",
    "UnrecognizedClientException",
    "UnknownOperationException",
];

/// The operations on a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Converse,
    ConverseStream,
    Invoke,
    InvokeStream,
    CountTokens,
}

/// Where a Bedrock call was sent: `/model/{modelId}/{operation}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BedrockRoute {
    /// The model id, inference profile id or ARN, percent-decoded.
    pub model: String,
    pub operation: Operation,
}

impl BedrockRoute {
    /// Reads a Bedrock model path; `None` for any other. The path is split
    /// before the id is decoded, so an ARN's encoded `/` (`%2F`) stays in
    /// the id.
    pub(crate) fn parse(path: &str) -> Option<Self> {
        let (raw, operation) = path.strip_prefix("/model/")?.split_once('/')?;
        let operation = match operation {
            "converse" => Operation::Converse,
            "converse-stream" => Operation::ConverseStream,
            "invoke" => Operation::Invoke,
            "invoke-with-response-stream" => Operation::InvokeStream,
            "count-tokens" => Operation::CountTokens,
            _ => return None,
        };
        let model = percent_decode(raw).filter(|model| !model.is_empty())?;
        Some(Self { model, operation })
    }
}

/// The clock of a call: now, less the configured latency the mock waited
/// before answering.
pub(crate) fn started(opts: &MockOptions) -> Instant {
    let now = Instant::now();
    now.checked_sub(opts.latency).unwrap_or(now)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Checks the caller when the mock expects one: a bearer token (a Bedrock
/// API key) must be [`MockOptions::expect_key`], a SigV4 signature must
/// verify with [`MockOptions::aws_credentials`]. Either is accepted where
/// configured; with neither configured, anything is.
pub(crate) fn authorize(request: &SignedRequest<'_>, opts: &MockOptions) -> Result<(), ApiError> {
    let expected_key = opts.expect_key.as_deref();
    let credentials = opts.aws_credentials.as_ref();
    if expected_key.is_none() && credentials.is_none() {
        return Ok(());
    }
    let Some(authorization) = request.headers.get(AUTHORIZATION) else {
        return Err(
            ApiError::new(StatusCode::FORBIDDEN, "Missing Authentication Token")
                .with_code("MissingAuthenticationTokenException"),
        );
    };
    let authorization = authorization.to_str().unwrap_or_default();
    if let Some(key) = authorization.strip_prefix("Bearer ") {
        return match expected_key {
            Some(expected) if key == expected => Ok(()),
            _ => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "Authentication failed: Please make sure your API Key is valid.",
            )
            .with_code("AccessDeniedException")),
        };
    }
    if !authorization.starts_with(sigv4::ALGORITHM) {
        return Err(sigv4::incomplete());
    }
    match credentials {
        Some((access_key_id, secret)) => sigv4::verify(request, access_key_id, secret),
        None => Err(sigv4::unrecognized_client()),
    }
}

/// Answers a Bedrock call.
pub(crate) fn answer(
    route: &BedrockRoute,
    bytes: &[u8],
    opts: &MockOptions,
) -> Result<Answer, ApiError> {
    let body = parse_object(bytes)?;
    match route.operation {
        Operation::Converse => converse(&body, false, opts),
        Operation::ConverseStream => converse(&body, true, opts),
        Operation::Invoke => invoke(&route.model, &body, false, opts),
        Operation::InvokeStream => invoke(&route.model, &body, true, opts),
        Operation::CountTokens => count_tokens(&body),
    }
}

/// A 400 `ValidationException`.
pub(crate) fn validation(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message).with_code("ValidationException")
}

/// AWS's message for a member that must be present.
fn required(member: &str) -> ApiError {
    validation(format!(
        "1 validation error detected: Value null at '{member}' failed to satisfy constraint: \
         Member must not be null"
    ))
}

/// The exception Bedrock raises with a status.
fn exception(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "UnrecognizedClientException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        500..=599 => "InternalServerException",
        _ => "ValidationException",
    }
}

/// The error a `mock:status=CODE` directive asks for, worded as Bedrock's.
pub(crate) fn directed_error(status: StatusCode) -> ApiError {
    let message = match status.as_u16() {
        400 => "Malformed input request, please reformat your input and try again.",
        401 => "The security token included in the request is invalid.",
        403 => "You don't have access to the model with the specified model ID.",
        404 => "Could not resolve the foundation model from the provided model identifier.",
        408 => "Model has timed out in processing the request. Try your request again.",
        424 => "The model returned an error. Try your request again.",
        429 => "Too many requests, please wait before trying again.",
        503 => "Bedrock is unable to process your request.",
        500..=599 => {
            "The system encountered an unexpected error during processing. Try your request again."
        }
        _ => "The request was rejected.",
    };
    ApiError::new(
        status,
        format!("{message} (mock:status={})", status.as_u16()),
    )
    .with_code(exception(status))
}

/// Bedrock's error body, `{"message": …}`.
pub(crate) fn error_body(error: &ApiError) -> Value {
    json!({"message": error.message})
}

/// The `x-amzn-ErrorType` of an error: the exception's name (the error's
/// own, else the status's) and its namespace.
pub(crate) fn error_type(error: &ApiError) -> String {
    let name = error.code.unwrap_or_else(|| exception(error.status));
    let namespace = if SERVICE_EXCEPTIONS.contains(&name) {
        SERVICE_NAMESPACE
    } else {
        ERROR_NAMESPACE
    };
    format!("{name}:{namespace}")
}

/// A path under `/model/` that names no operation the mock serves.
pub(crate) fn unknown_operation() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "Unknown operation").with_code("UnknownOperationException")
}

/// Converse content blocks as Anthropic's: text, tool uses and results,
/// reasoning; a `cachePoint` marks the block before it as Anthropic's
/// `cache_control` does; images, documents and the rest keep only their
/// kind (they carry no text to count).
fn blocks(content: Option<&Value>) -> Value {
    let mut out: Vec<Value> = Vec::new();
    for block in content.and_then(Value::as_array).into_iter().flatten() {
        if let Some(point) = block.get("cachePoint") {
            if let Some(Value::Object(last)) = out.last_mut() {
                let mut control = json!({"type": "ephemeral"});
                if let Some(ttl) = point.get("ttl") {
                    control["ttl"] = ttl.clone();
                }
                last.insert("cache_control".to_owned(), control);
            }
            continue;
        }
        out.push(block_of(block));
    }
    Value::Array(out)
}

fn block_of(block: &Value) -> Value {
    if let Some(text) = block.get("text") {
        return json!({"type": "text", "text": text});
    }
    if let Some(used) = block.get("toolUse") {
        return json!({"type": "tool_use", "id": used.get("toolUseId"),
            "name": used.get("name"), "input": used.get("input")});
    }
    if let Some(result) = block.get("toolResult") {
        let content: Vec<Value> = result
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|part| match part.get("json") {
                Some(json) => json!({"type": "text", "text": json.to_string()}),
                None => block_of(part),
            })
            .collect();
        return json!({"type": "tool_result", "tool_use_id": result.get("toolUseId"),
            "content": content});
    }
    if let Some(reasoning) = block.get("reasoningContent") {
        return json!({"type": "thinking",
            "thinking": reasoning.pointer("/reasoningText/text"),
            "signature": reasoning.pointer("/reasoningText/signature")});
    }
    let kind = block
        .as_object()
        .and_then(|fields| fields.keys().next())
        .cloned()
        .unwrap_or_default();
    json!({"type": kind})
}

/// The Messages request a Converse request (or a CountTokens `converse`
/// input) stands for: `system`, `messages`, and the `toolSpec`s as custom
/// `tools` with `toolChoice` as `tool_choice`.
fn messages_request(body: &Value) -> Result<Value, ApiError> {
    let messages: Vec<Value> = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| required("messages"))?
        .iter()
        .map(|message| json!({"role": message.get("role"), "content": blocks(message.get("content"))}))
        .collect();
    let mut request = json!({"messages": messages});
    if let Some(system) = body.get("system") {
        request["system"] = blocks(Some(system));
    }
    if let Some(config) = body.get("toolConfig") {
        let tools: Vec<Value> = config
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|tool| {
                let spec = tool.get("toolSpec")?;
                Some(
                    json!({"name": spec.get("name")?, "description": spec.get("description"),
                    "input_schema": spec.pointer("/inputSchema/json")}),
                )
            })
            .collect();
        request["tools"] = Value::Array(tools);
        let choice = config.get("toolChoice");
        if let Some(name) = choice.and_then(|choice| choice.pointer("/tool/name")) {
            request["tool_choice"] = json!({"type": "tool", "name": name});
        } else if choice.and_then(|choice| choice.get("any")).is_some() {
            request["tool_choice"] = json!({"type": "any"});
        }
    }
    Ok(request)
}

fn request_messages(request: &Value) -> &[Value] {
    request
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Converse's `usage`: `inputTokens` without the cache reads and writes,
/// which are apart; `totalTokens` counts them all with the output.
fn usage(tally: &Tally) -> Value {
    let mut usage = json!({
        "inputTokens": tally.uncached(),
        "outputTokens": tally.output,
        "totalTokens": tally.prompt.saturating_add(tally.output),
        "cacheReadInputTokens": tally.cached,
        "cacheWriteInputTokens": tally.cache_write,
    });
    if tally.cache_write > 0 {
        let ttl = if tally.hour_cache { "1h" } else { "5m" };
        usage["cacheDetails"] = json!([{"ttl": ttl, "inputTokens": tally.cache_write}]);
    }
    usage
}

/// `converse` and `converse-stream`.
fn converse(body: &Value, stream: bool, opts: &MockOptions) -> Result<Answer, ApiError> {
    let started = started(opts);
    let limit = match body.pointer("/inferenceConfig/maxTokens") {
        None | Some(Value::Null) => None,
        Some(value) => Some(value.as_u64().filter(|limit| *limit >= 1).ok_or_else(|| {
            validation(format!(
                "1 validation error detected: Value '{value}' at 'inferenceConfig.maxTokens' \
                 failed to satisfy constraint: Member must have value greater than or equal to 1"
            ))
        })?),
    };
    let request = messages_request(body)?;
    let messages = request_messages(&request);
    let directives = anthropic::user_directives(messages);
    let reply = opts.reply(&directives, limit);
    let call = FunctionCall::for_messages(&request, messages).map(|call| FunctionCall {
        call_id: new_id("tooluse_"),
        ..call
    });
    let output = call.as_ref().map_or(reply.tokens, FunctionCall::tokens);
    let mut tally = Tally::new(
        anthropic::prompt_tokens(request.get("system"), messages),
        &directives,
        output,
    );
    tally.hour_cache = asks_for_hour_cache(&request);
    if let Some(answer) = directed_answer_as(directed_error, &directives, stream, tally) {
        return answer;
    }
    let turn = Turn {
        reply,
        tally,
        call,
        started,
    };
    if stream {
        return Ok(Answer::AwsEventStream(EventStream {
            events: turn.events(),
            tally,
            cut: directives.cut,
            pace: opts.pace(&directives),
        }));
    }
    Ok(Answer::Json {
        body: turn.body(),
        tally,
    })
}

/// One Converse answer.
struct Turn {
    reply: Reply,
    tally: Tally,
    /// The tool called in place of the text.
    call: Option<FunctionCall>,
    started: Instant,
}

impl Turn {
    fn stop_reason(&self) -> &'static str {
        if self.call.is_some() {
            "tool_use"
        } else if self.reply.capped {
            "max_tokens"
        } else {
            "end_turn"
        }
    }

    fn metrics(&self) -> Value {
        json!({"latencyMs": millis(self.started.elapsed())})
    }

    fn body(&self) -> Value {
        let content = match &self.call {
            Some(call) => json!({"toolUse": {"toolUseId": call.call_id, "name": call.name,
                "input": call.input()}}),
            None => json!({"text": text(self.reply.tokens)}),
        };
        json!({
            "output": {"message": {"role": "assistant", "content": [content]}},
            "stopReason": self.stop_reason(),
            "usage": usage(&self.tally),
            "metrics": self.metrics(),
        })
    }

    /// messageStart; for a tool call contentBlockStart; one
    /// contentBlockDelta per token (text, or a piece of the tool's input
    /// JSON); contentBlockStop, messageStop and metadata with the usage.
    fn events(self) -> Events {
        let mut opening = vec![aws_event("messageStart", &json!({"role": "assistant"}))];
        let deltas: Vec<Value> = match &self.call {
            Some(call) => {
                opening.push(aws_event(
                    "contentBlockStart",
                    &json!({"contentBlockIndex": 0,
                        "start": {"toolUse": {"toolUseId": call.call_id, "name": call.name}}}),
                ));
                call.pieces
                    .iter()
                    .map(|piece| json!({"toolUse": {"input": piece}}))
                    .collect()
            }
            None => (0..self.reply.tokens)
                .map(|position| json!({"text": word(position)}))
                .collect(),
        };
        Box::new(
            opening
                .into_iter()
                .map(Event::Frame)
                .chain(deltas.into_iter().map(|delta| {
                    Event::Token(aws_event(
                        "contentBlockDelta",
                        &json!({"contentBlockIndex": 0, "delta": delta}),
                    ))
                }))
                .chain(std::iter::once(Event::Generated))
                .chain(
                    std::iter::once_with(move || {
                        [
                            aws_event("contentBlockStop", &json!({"contentBlockIndex": 0})),
                            aws_event("messageStop", &json!({"stopReason": self.stop_reason()})),
                            aws_event(
                                "metadata",
                                &json!({"usage": usage(&self.tally), "metrics": self.metrics()}),
                            ),
                        ]
                    })
                    .flatten()
                    .map(Event::Frame),
                ),
        )
    }
}

/// `invoke` and `invoke-with-response-stream`: an Anthropic Messages body
/// with `anthropic_version` and neither `model` nor `stream`, answered as
/// `/v1/messages` answers it for the path's model; the JSON answer's
/// counts also in headers, the stream in `chunk` frames.
fn invoke(model: &str, body: &Value, stream: bool, opts: &MockOptions) -> Result<Answer, ApiError> {
    let started = started(opts);
    let mut request = body.clone();
    let Some(fields) = request.as_object_mut() else {
        return Err(validation("The request body must be a JSON object."));
    };
    match fields.remove("anthropic_version") {
        Some(Value::String(version)) if version == ANTHROPIC_VERSION => {}
        Some(other) => {
            return Err(validation(format!(
                "Malformed input request: #/anthropic_version: {other} is not a valid \
                 anthropic_version (use {ANTHROPIC_VERSION}), please reformat your input and \
                 try again."
            )))
        }
        None => {
            return Err(validation(
                "Malformed input request: #: required key [anthropic_version] not found, please \
                 reformat your input and try again.",
            ))
        }
    }
    for extraneous in ["model", "stream"] {
        if fields.contains_key(extraneous) {
            return Err(validation(format!(
                "Malformed input request: #: extraneous key [{extraneous}] is not permitted, \
                 please reformat your input and try again."
            )));
        }
    }
    fields.insert("model".to_owned(), model.into());
    if stream {
        fields.insert("stream".to_owned(), true.into());
    }
    let answer = anthropic::messages_on(&request, opts, Wire::Bedrock)?;
    let mut headers = HeaderMap::new();
    match &answer {
        Answer::Json { tally, .. } => {
            let counts = [
                ("x-amzn-bedrock-input-token-count", tally.uncached()),
                ("x-amzn-bedrock-output-token-count", tally.output),
                (
                    "x-amzn-bedrock-invocation-latency",
                    millis(started.elapsed()),
                ),
            ];
            for (name, count) in counts {
                headers.insert(name, HeaderValue::from(count));
            }
        }
        Answer::AwsEventStream(_) => {
            headers.insert(
                "x-amzn-bedrock-content-type",
                HeaderValue::from_static("application/json"),
            );
        }
        _ => return Ok(answer),
    }
    Ok(Answer::WithHeaders(Box::new(answer), headers))
}

/// One Anthropic stream event (its JSON) as `invoke-with-response-stream`
/// sends it: base64 in a `chunk` frame's `bytes`.
pub(crate) fn chunk(event: &Value) -> bytes::Bytes {
    let encoded = aws_smithy_types::base64::encode(event.to_string());
    aws_event("chunk", &json!({"bytes": encoded}))
}

/// `amazon-bedrock-invocationMetrics`, in the last event of an
/// `invoke-with-response-stream`: the input (without cache reads and
/// writes, which come apart when there are any) and output tokens, the
/// time the call took and the time to its first event.
pub(crate) fn invocation_metrics(tally: &Tally, started: Instant, first_byte: Duration) -> Value {
    let mut metrics = json!({
        "inputTokenCount": tally.uncached(),
        "outputTokenCount": tally.output,
        "invocationLatency": millis(started.elapsed()),
        "firstByteLatency": millis(first_byte),
    });
    if tally.cached > 0 {
        metrics["cacheReadInputTokenCount"] = tally.cached.into();
    }
    if tally.cache_write > 0 {
        metrics["cacheWriteInputTokenCount"] = tally.cache_write.into();
    }
    metrics
}

/// `count-tokens`: `{"input": {"converse": {…}}}` or `{"input":
/// {"invokeModel": {"body": "<base64 of an InvokeModel body>"}}}` →
/// `{"inputTokens": N}`, counted as those calls count their input; billed
/// nothing.
fn count_tokens(body: &Value) -> Result<Answer, ApiError> {
    let input = body.get("input").ok_or_else(|| required("input"))?;
    let tokens = if let Some(converse) = input.get("converse") {
        let request = messages_request(converse)?;
        anthropic::prompt_tokens(request.get("system"), request_messages(&request))
    } else if let Some(invoke) = input.get("invokeModel") {
        let encoded = invoke
            .get("body")
            .and_then(Value::as_str)
            .ok_or_else(|| required("input.invokeModel.body"))?;
        let decoded = aws_smithy_types::base64::decode(encoded)
            .map_err(|_| validation("input.invokeModel.body is not valid base64."))?;
        let request = parse_object(&decoded).map_err(|error| validation(error.message))?;
        let messages = request
            .get("messages")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                validation(
                    "Malformed input request: #: required key [messages] not found, please \
                     reformat your input and try again.",
                )
            })?;
        anthropic::prompt_tokens(request.get("system"), messages)
    } else {
        return Err(validation(
            "1 validation error detected: Value at 'input' failed to satisfy constraint: \
             Member must have one of converse or invokeModel",
        ));
    };
    Ok(Answer::Json {
        body: json!({"inputTokens": tokens}),
        tally: Tally::default(),
    })
}
