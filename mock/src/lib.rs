//! tollgate-mock: a fake OpenAI (and Azure OpenAI), Anthropic (and Amazon
//! Bedrock's Claude) and Google (Gemini API, Vertex AI) provider for
//! tollgate's tests, demos and load runs (`tollgate mock-upstream` serves it). It speaks the providers' wire
//! formats closely enough for the official SDKs, answers deterministically,
//! reports usage that reflects the request, and records what it was sent.
//!
//! # Routes
//!
//! - `POST /v1/chat/completions`, `POST /v1/completions`,
//!   `POST /v1/responses`, `POST /v1/embeddings`: OpenAI, JSON or SSE
//!   (`stream: true`), errors as `{"error":{"message","type","param","code"}}`.
//! - Azure OpenAI, answered as those routes are (the same replies, usage,
//!   directives, streams, tool calls and bills):
//!   `POST /openai/deployments/{deployment}/chat/completions`, `/completions`,
//!   `/embeddings` and `/responses` (the deployment from the path, decoded
//!   once the path is split, so an encoded `/` (`%2F`) is part of the
//!   name; the body's `model` is ignored) and `POST /openai/responses` (the deployment is the
//!   body's `model`), which all want `?api-version=` (else 400); and the v1
//!   API, `POST /openai/v1/chat/completions`, `/completions`, `/embeddings`
//!   and `/responses`, where `api-version` is optional and the body's
//!   `model` names the deployment. The key goes in `api-key` or
//!   `Authorization: Bearer` (`api-key` first); with
//!   [`MockOptions::expect_key`] set, a missing or other key is 401 code
//!   `"401"`. [`MockOptions::azure_deployments`] lists the deployments and
//!   the base model each serves: answers name the base model, in the body
//!   and every chunk, as Azure's do, and a deployment not listed is 404
//!   `DeploymentNotFound`; with none listed, any deployment is served as a
//!   model of its own name. Chat and completions bodies carry
//!   `prompt_filter_results` (one per prompt, nothing filtered) and each
//!   choice `content_filter_results`; their streams open with a chunk
//!   holding only the prompt's annotations (`"id":""`, `"model":""`,
//!   `"object":""`, `"created":0`, `"choices":[]`), and each content
//!   chunk's choice carries its `content_filter_results` (other chunks an
//!   empty one). Chat reports no `service_tier`; Responses report
//!   `default` unless the request asks for priority, as Azure has no
//!   project default tier. Errors as `{"error":{"code","message"}}`,
//!   `code` `BadRequest` for a 400, `InternalServerError` for a 500, else
//!   the status's digits or a name (`DeploymentNotFound`); a 429 comes
//!   with `retry-after: 1`, and `mock:status=400` is the prompt filter's
//!   refusal (`code: "content_filter"`, the verdict in `innererror`).
//!   Every answer carries `x-request-id` and `apim-request-id`; a path
//!   under `/openai/` that no route serves is 404 `Resource not found`
//!   in Azure's shape.
//!   [`RecordedRequest::azure_deployment`] reads the path's deployment
//!   back.
//! - `POST /v1/messages`: Anthropic, JSON or SSE, `max_tokens` required,
//!   errors as `{"type":"error","error":{"type","message"}}`.
//! - `GET /v1/models`: a fixed model list, in Anthropic's shape when the
//!   request carries `anthropic-version`, Gemini's when it carries a Google
//!   API key, else OpenAI's.
//! - Gemini API, under `/v1beta` and `/v1` alike:
//!   `POST /v1beta/models/{model}:generateContent`,
//!   `:streamGenerateContent` (with `?alt=sse`: `data: {json}\r\n\r\n`
//!   events, `text/event-stream`; without: one JSON array
//!   `[{...}\n,\r\n{...}\n]`, `application/json`, written an element at a
//!   time), `:countTokens` (`{contents}` or `{generateContentRequest}` →
//!   `{"totalTokens": N}`, billed nothing), `GET /v1beta/models` and
//!   `GET /v1beta/models/{model}` (404 for a model not listed; any model
//!   name is answered on the other routes). The key goes in
//!   `x-goog-api-key` or `?key=`: without one 403 `PERMISSION_DENIED`;
//!   with [`MockOptions::expect_key`] set, another key is 400
//!   `INVALID_ARGUMENT` (reason `API_KEY_INVALID`). Errors as
//!   `{"error":{"code","message","status"}}`, `status` from the HTTP
//!   status (400 `INVALID_ARGUMENT`, 401 `UNAUTHENTICATED`, 403
//!   `PERMISSION_DENIED`, 404 `NOT_FOUND`, 409 `ABORTED`, 429
//!   `RESOURCE_EXHAUSTED`, 499 `CANCELLED`, 500 `INTERNAL`, 501
//!   `UNIMPLEMENTED`, 503 `UNAVAILABLE`, 504 `DEADLINE_EXCEEDED`, other
//!   5xx `UNKNOWN`, other 4xx `INVALID_ARGUMENT`); an unknown path under
//!   `/v1beta/`, `/v1beta1/` or `/v1/projects/` is 404 in this shape too.
//! - Vertex AI, under `/v1` and `/v1beta1`:
//!   `POST /v1/projects/{p}/locations/{l}/publishers/google/models/{m}:`
//!   `generateContent|streamGenerateContent|countTokens`, answered as on
//!   the Gemini API (the usage adds `trafficType: "ON_DEMAND"`), and
//!   `.../publishers/anthropic/models/{m}:rawPredict|streamRawPredict`:
//!   Anthropic Messages with the path's model, `anthropic_version`
//!   required in the body (else 400 in Anthropic's shape),
//!   `streamRawPredict` always streamed, errors in Anthropic's shape;
//!   `.../publishers/anthropic/models/count-tokens:rawPredict` (the model
//!   in the body) answers `{"input_tokens": N}`, billed nothing. Every
//!   Vertex route wants `Authorization: Bearer` with a token the mock's
//!   `/token` issued and that has not expired; anything else is 401
//!   `UNAUTHENTICATED` in Google's shape (reason `CREDENTIALS_MISSING`,
//!   `ACCESS_TOKEN_EXPIRED` or `ACCESS_TOKEN_TYPE_UNSUPPORTED`), on the
//!   Claude routes too, as Google's front end answers before the model.
//!   [`RecordedRequest::vertex_target`] reads project, location, publisher
//!   and model back.
//! - Amazon Bedrock Runtime, for Claude, under `/model/{modelId}/`: the
//!   model id (a model id, an inference profile id such as
//!   `us.anthropic.claude-sonnet-4-5-20250929-v1:0` or `global.…`, or an
//!   ARN; any id is served) is percent-decoded once the path is split, so
//!   an ARN's `%2F` stays in the id; [`RecordedRequest::bedrock_model`]
//!   reads it back.
//!   - `POST …/converse`: the Converse API. `messages` (content blocks
//!     `text`, `image`, `document`, `toolUse`, `toolResult`, `cachePoint`,
//!     `reasoningContent`, …), `system`, `inferenceConfig.maxTokens` (the
//!     output limit, at least 1, optional), `toolConfig` (`toolSpec` tools,
//!     `toolChoice`); `additionalModelRequestFields` is accepted and
//!     ignored. The answer is `{"output":{"message":{"role":"assistant",
//!     "content":[{"text"}]}},"stopReason","usage","metrics":{"latencyMs"}}`,
//!     `stopReason` `end_turn`, `max_tokens` or `tool_use`; `usage` has
//!     `inputTokens` (without the cache reads and writes, as Bedrock
//!     reports it), `outputTokens`, `totalTokens` (input, cache reads and
//!     writes, and output), `cacheReadInputTokens`, `cacheWriteInputTokens`
//!     and, with cache writes, `cacheDetails` (`ttl` `5m`, or `1h` when a
//!     `cachePoint` asks for it).
//!   - `POST …/converse-stream`: the same as an AWS event stream
//!     (`application/vnd.amazon.eventstream`; binary frames with their
//!     length prelude and both CRCs, headers `:event-type`,
//!     `:content-type: application/json`, `:message-type: event`, each
//!     written as it is generated): `messageStart`, one
//!     `contentBlockDelta` per token (`{"contentBlockIndex":0,
//!     "delta":{"text"}}`; a tool call opens with `contentBlockStart` and
//!     streams `delta.toolUse.input` pieces), `contentBlockStop`,
//!     `messageStop` (`stopReason`), `metadata` (`usage`, `metrics`).
//!     Every payload carries Bedrock's `"p"` padding.
//!   - `POST …/invoke`: an Anthropic Messages body with `anthropic_version:
//!     "bedrock-2023-05-31"` (else 400) and neither `model` nor `stream`
//!     (else 400), answered as `/v1/messages` answers it (the same reply,
//!     counts, tools and directives), its `model` the path's id, its id
//!     `msg_bdrk_…`, with `x-amzn-bedrock-input-token-count` (input
//!     without the cache reads and writes), `-output-token-count` and
//!     `-invocation-latency` headers.
//!   - `POST …/invoke-with-response-stream`: the events of a
//!     `/v1/messages` stream (without `ping`), each one's JSON base64 in
//!     the `{"bytes"}` of an event-stream `chunk` frame; `message_stop`
//!     carries `amazon-bedrock-invocationMetrics` (`inputTokenCount`,
//!     `outputTokenCount`, `invocationLatency`, `firstByteLatency`, and
//!     `cacheReadInputTokenCount` / `cacheWriteInputTokenCount` when not
//!     zero); `x-amzn-bedrock-content-type: application/json`.
//!   - `POST …/count-tokens`: `{"input":{"converse":{…}}}` or
//!     `{"input":{"invokeModel":{"body":"<base64>"}}}` → `{"inputTokens": N}`,
//!     counted as those calls count their input, billed nothing.
//!
//!   With [`MockOptions::expect_key`] set, a bearer token (a Bedrock API
//!   key) must be that key; with [`MockOptions::aws_credentials`] set, a
//!   SigV4-signed call (`Authorization: AWS4-HMAC-SHA256 …`, service
//!   `bedrock`) is signed again with them and its signature compared; with
//!   both set either is accepted, with neither anything is. Refusals are
//!   403: `MissingAuthenticationTokenException` (no `Authorization`),
//!   `AccessDeniedException` (another key), `UnrecognizedClientException`
//!   (another access key id, or a signed call when no credentials are
//!   configured), `IncompleteSignatureException`, and
//!   `InvalidSignatureException` (the signature differs, or `x-amz-date`
//!   is more than 15 minutes off). [`RecordedRequest::aws_access_key_id`],
//!   [`RecordedRequest::aws_region`] and
//!   [`RecordedRequest::aws_session_token`] read the signing back. Errors
//!   are `{"message": …}` with `x-amzn-ErrorType: <Exception>:<namespace>`
//!   (`http://internal.amazon.com/coral/com.amazon.bedrock/`, or
//!   `…/com.amazon.coral.service/` for the front end's authentication and
//!   unknown-operation refusals); the exception follows the status: 400
//!   `ValidationException`, 403 `AccessDeniedException`, 404
//!   `ResourceNotFoundException`, 408 `ModelTimeoutException`, 424
//!   `ModelErrorException`, 429 `ThrottlingException`, 503
//!   `ServiceUnavailableException`, other 5xx `InternalServerException`.
//!   A path under `/model/` no route serves is 404
//!   `UnknownOperationException`. Every answer carries `x-amzn-RequestId`.
//! - `POST /token`: Google's OAuth2 token endpoint for the JWT-bearer grant
//!   of a service account (see [`service_account_json`]). The JWT must be
//!   RS256-signed by the fixture key (`mock/fixtures/`, a test key), name
//!   its `kid` if any, have `iss` the account's email, an `aud` ending in
//!   `/token`, a `scope` containing [`CLOUD_PLATFORM_SCOPE`], `exp` in the
//!   future, `exp - iat` at most 3600 s and `iat` at most 60 s ahead. The
//!   answer is `{"access_token":"ya29.…","expires_in":N,"token_type":"Bearer"}`,
//!   a fresh random token each time; a bad grant is 400
//!   `{"error":"invalid_grant","error_description":…}` (`invalid_scope`
//!   for the scope, `unsupported_grant_type`, `invalid_request` for a
//!   missing field). [`MockServer::tokens`] sets the token lifetime, fails
//!   the next N requests with 500, revokes every token, and counts
//!   requests and refusals. Grants are not counted in
//!   [`MockStats::requests`] nor recorded as [`MockStats::last_request`],
//!   and the configured latency does not delay them.
//! - Anything else: 404 in OpenAI's shape.
//!
//! # Replies and usage
//!
//! A reply is `reply_tokens` words (" lorem ipsum dolor ..."), each word
//! exactly one output token, cut to the request's output limit
//! (`max_tokens`, `max_completion_tokens`, `max_output_tokens`), which ends
//! it with `length` / `max_tokens` / `incomplete` instead of `stop` /
//! `end_turn` / `completed`. With `n` choices every choice is the same
//! reply and the output tokens are their sum.
//!
//! Input tokens are counted with o200k_base on the OpenAI (and Azure)
//! routes: chat counts each message's role and content texts plus 3 per
//! message and 3 for the reply; responses counts `instructions` as a
//! `system` message and each input item's role, content texts, `output`
//! and `arguments` the same way (a string `input` is one `user` message);
//! completions and embeddings count each prompt or input string (token
//! arrays count their length). Each text is counted on its own and the
//! counts summed.
//! `/v1/messages` counts ceil(bytes of the system and message texts / 4)
//! plus 3 per message; Bedrock counts the same, a Converse request read as
//! the Messages request it stands for (`text` blocks and the texts and
//! JSON of `toolResult`s are counted, images, documents, tool inputs and
//! reasoning are not, as on `/v1/messages`).
//! A `/v1/messages` stream reports the input in `message_start` and repeats
//! every count, cumulative, in `message_delta`, as the API does.
//!
//! Gemini's `promptTokenCount` is, over `systemInstruction` and each of
//! `contents`, 3 per content plus ceil(bytes / 4) of each of its parts'
//! texts (a part's `text`; a `functionCall`'s name and `args` JSON; a
//! `functionResponse`'s name and `response` JSON), each rounded up on its
//! own. Request fields are read by JSON or proto name (`generationConfig`
//! or `generation_config`) and integers as numbers or strings, as Google
//! reads them.
//!
//! On Gemini, `generationConfig.maxOutputTokens` caps each candidate (cut:
//! `finishReason: "MAX_TOKENS"`, else `STOP`) and `candidateCount` (1 to 8;
//! 0 or absent is 1) gives that many equal candidates, their tokens summed
//! in `candidatesTokenCount`. `usageMetadata` has `promptTokenCount`,
//! `candidatesTokenCount`, `totalTokenCount` (prompt + candidates +
//! thoughts + tool-use prompt) and, when not zero, `cachedContentTokenCount`
//! (part of the prompt), `thoughtsTokenCount` and `toolUsePromptTokenCount`
//! (apart from the prompt); zero counts are left out, as proto3 JSON does.
//! A stream sends one chunk per token, one word of every candidate in each,
//! every chunk carrying the usage so far (`candidatesTokenCount` counts
//! what is out), then a closing chunk with an empty text part, every
//! candidate's `finishReason`, the grounding and the final usage; every
//! chunk names `modelVersion` (the path's model) and the same
//! `responseId`. A thought summary, when asked for, streams first in a
//! chunk of its own. The bill maps onto [`Usage`]: input is the prompt
//! less the cached tokens plus the tool-use prompt, cached input the
//! cached tokens, output the candidates plus the thoughts, and one tool
//! call per Google Search query.
//!
//! # Test directives
//!
//! Words of the form `mock:NAME=N` in the text of the last user message (the
//! last prompt or input string on completions and embeddings; on Gemini,
//! the last user content that is not a `functionResponse`) change the
//! answer:
//!
//! - `mock:tokens=N`: reply with N tokens per choice.
//! - `mock:status=CODE`: answer with that status (400..=599) and a realistic
//!   error body in the route's shape; OpenAI types: 429 `requests` with
//!   code `rate_limit_exceeded`, 5xx `server_error`, 401 code
//!   `invalid_api_key`, other 4xx `invalid_request_error`; Azure's codes
//!   as listed under "Routes" (401 and 404 worded as Azure's key and
//!   deployment refusals); Google's `status` as listed under "Routes";
//!   Anthropic types: 401 `authentication_error`, 403 `permission_error`,
//!   404 `not_found_error`, 413 `request_too_large`, 429
//!   `rate_limit_error`, 529 `overloaded_error`, other 5xx `api_error`,
//!   other 4xx `invalid_request_error`; Bedrock's exceptions as listed
//!   under "Routes", on the stream routes too (before the stream starts).
//! - `mock:cut=N`: a stream sends N content tokens, then the connection is
//!   dropped with no terminal event and no usage; a non-stream request gets
//!   its connection closed without a response. A Gemini chunk carries a
//!   token of every candidate and is sent whole: the stream stops before
//!   the first chunk that starts once N tokens are out.
//! - `mock:cached=N`: report N input tokens (at most all) as cache reads
//!   (Gemini: `cachedContentTokenCount`, part of `promptTokenCount`).
//! - `mock:cache_write=N`: report N input tokens as cache writes
//!   (`/v1/messages` and Bedrock only); when the request asks for a
//!   `cache_control` (Converse: `cachePoint`) ttl of `"1h"` they are all
//!   reported as hour-long (`cache_creation.ephemeral_1h_input_tokens`;
//!   Converse: `cacheDetails`).
//! - `mock:hidden=N`: N more output tokens (hidden reasoning), counted in
//!   the reported output and billed, also when a stream is cut, but never
//!   shown (Gemini has `mock:thoughts` instead).
//! - `mock:sleep_ms=N`: pause N ms between streamed tokens.
//! - `mock:downgrade=N`: serve a request for OpenAI's priority tier at the
//!   default one (the answer's `service_tier` says which; it is the
//!   request's `priority`, else `default`).
//! - `mock:project_priority=N`: answer as a project whose default tier is
//!   priority: a request that names no `service_tier`, or `"auto"`, is
//!   served at priority, and the answer's `service_tier` says
//!   `priority` (chat and Responses, streamed or not; legacy completions
//!   report no tier). A tier named otherwise is served as named;
//!   `mock:downgrade` still serves at `default`. Tiers are read with case
//!   and surrounding spaces ignored. No effect on the Azure routes.
//! - `mock:tool_calls=N`: use the request's first hosted tool N times
//!   before replying, at most as often as the request allows
//!   (`max_tool_calls` on `/v1/responses`, the tool's `max_uses` on
//!   `/v1/messages`); see "Hosted tools". On Gemini, with a `googleSearch`
//!   (or `google_search`, `googleSearchRetrieval`) tool declared, the
//!   candidates carry `groundingMetadata` with N `webSearchQueries`.
//! - `mock:thoughts=N` (Gemini): N thinking tokens, `thoughtsTokenCount`,
//!   at most `thinkingConfig.thinkingBudget` when that is 0 or more; billed
//!   as output, also when a stream is cut (they come first). With
//!   `thinkingConfig.includeThoughts` each candidate shows a thought part
//!   `{"text": …, "thought": true}` (N reply words) before its answer.
//! - `mock:tool_prompt=N` (Gemini): `toolUsePromptTokenCount` N, billed as
//!   input, not part of `promptTokenCount`.
//!
//! # Hosted tools
//!
//! On `/v1/responses` the hosted tools are `web_search*`, `file_search`,
//! `code_interpreter`, `image_generation` and `mcp`; each use is an output
//! item (`web_search_call`, `file_search_call`, …) before the message. On
//! `/v1/messages` they are Anthropic's `web_search_*` and `web_fetch_*`:
//! each use is a `server_tool_use` block and its result block before the
//! text, counted in `usage.server_tool_use` (`web_search_requests`,
//! `web_fetch_requests`); a stream reports the input read before the tools
//! in `message_start` and the whole input with the uses in
//! `message_delta`. Each use feeds back 1,000 input tokens
//! (`TOOL_RESULT_TOKENS`), billed at the full input price, and is counted
//! in [`Usage::tool_calls`].
//!
//! # Function tools
//!
//! When a request declares a tool the client runs itself (a chat or
//! Responses `function` tool, an Anthropic custom tool, a Gemini
//! `functionDeclarations` entry), `tool_choice` (Gemini:
//! `toolConfig.functionCallingConfig`, mode `NONE` or
//! `allowedFunctionNames`) allows it, and the conversation ends with the user's own message rather
//! than a tool result, the mock calls the tool instead of replying: a chat
//! message with `tool_calls` (`finish_reason: "tool_calls"`; streamed as
//! `delta.tool_calls` chunks), a Responses `function_call` output item
//! (streamed with `response.output_item.added` and
//! `response.function_call_arguments.delta` / `.done`), or an Anthropic
//! `tool_use` block (`stop_reason: "tool_use"`; streamed as
//! `input_json_delta`s; on Bedrock's `invoke` routes too), a Converse
//! `toolUse` block for a `toolSpec` (`stopReason: "tool_use"`, id
//! `tooluse_…`; streamed as `contentBlockStart` and `delta.toolUse.input`
//! pieces), or a Gemini `functionCall` part (`finishReason:
//! "STOP"`; streamed as one chunk that ends the stream). The tool is the one `tool_choice` names, else the
//! first; its arguments are made from its parameter schema; the call's
//! output tokens are the o200k_base tokens of the arguments, one per
//! streamed delta, whatever `mock:tokens` or the output limit say. Once
//! the client sends the tool's result back, the mock replies with text as
//! usual, under the directives of the user's prompt (on `/v1/messages`, the
//! last `user` message that carries no `tool_result`; on Gemini, the last
//! user content that is not a `functionResponse`).
//!
//! [`MockStats::billed`] sums the usage each answer reported; a stream bills
//! when its generation ends (also when the client did not ask for usage),
//! and a cut stream, a stream whose client went away, or a non-stream
//! request cut short bills its input plus the tokens sent, as a provider
//! bills an interrupted call.
//!
//! # Layout
//!
//! This file is the public API and the accept loop; `handler` reads,
//! checks and routes one request; `openai`, `embeddings`, `responses` and
//! `anthropic` build each provider's bodies and events; `azure` reads
//! Azure OpenAI's paths, key and deployments and lets the OpenAI modules
//! answer, with its annotations and errors; `bedrock` reads Bedrock's
//! paths, keys and errors, answers Converse and lets `anthropic` answer
//! InvokeModel, and `sigv4` verifies AWS signatures; `gemini` answers
//! Gemini models (reading requests with `gemini_request`, streaming with
//! `gemini_stream`); `vertex` reads Vertex paths, checks access tokens and
//! adapts Claude's routes to `anthropic`; `token` is the OAuth2 endpoint
//! and the test service account; `reply` decides the
//! reply and counts tokens; `function` decides when and how a function tool
//! is called; `stream` writes event streams; `usage` is what an answer
//! bills (`stream` also frames AWS event streams).
//!
//! The crate stands apart from the gateway, which it must not depend on:
//! the `tollgate` binary depends on it for `mock-upstream`, and tollgate's
//! integration tests spawn it in process; the gateway library knows nothing
//! of it.

mod anthropic;
mod azure;
mod bedrock;
mod embeddings;
mod function;
mod gemini;
mod gemini_request;
mod gemini_stream;
mod handler;
mod openai;
mod reply;
mod responses;
mod sigv4;
mod stream;
#[cfg(test)]
mod tests;
mod token;
mod usage;
mod vertex;

pub use token::{
    service_account_json, TokenEndpoint, CLOUD_PLATFORM_SCOPE, DEFAULT_TOKEN_LIFETIME,
    SERVICE_ACCOUNT_EMAIL, SERVICE_ACCOUNT_KEY_ID, SERVICE_ACCOUNT_PRIVATE_KEY,
    SERVICE_ACCOUNT_PROJECT,
};
pub use usage::Usage;
pub use vertex::VertexTarget;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

/// How long in-flight requests may finish after shutdown before their
/// connections are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Pause after a failed accept (such as too many open files) so the loop
/// does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How the mock behaves for every request.
#[derive(Clone, Debug)]
pub struct MockOptions {
    /// Delay before the response headers.
    pub latency: Duration,
    /// Pace of streamed tokens; `None` streams as fast as possible.
    pub tokens_per_sec: Option<u32>,
    /// When set, requests must carry this key (`Authorization: Bearer` on
    /// the OpenAI routes; `x-api-key`, or a bearer token as Anthropic's
    /// current SDK sends it, on `/v1/messages`; `api-key` or a bearer token
    /// on the Azure routes), else 401. On the Bedrock routes it is the
    /// Bedrock API key, sent as a bearer token (else 403); a request may
    /// instead be signed with [`MockOptions::aws_credentials`].
    pub expect_key: Option<String>,
    /// Reply length in tokens when no directive says otherwise.
    pub reply_tokens: u64,
    /// Read a chat completion's output limit from this field alone, as
    /// some OpenAI-compatible servers do (`max_tokens` or
    /// `max_completion_tokens`); `None` honours the lower of both, as
    /// OpenAI does.
    pub chat_limit_field: Option<String>,
    /// The Azure OpenAI resource's deployments: (deployment name, the
    /// base model it serves), e.g. `("prod-4o", "gpt-4o-2024-08-06")`.
    /// Answers name the base model, as Azure's do, and a deployment not
    /// listed is 404 `DeploymentNotFound`. Empty (the default): any
    /// deployment is served, answering as a model of its own name.
    pub azure_deployments: Vec<(String, String)>,
    /// The AWS access key id and secret access key Bedrock calls may be
    /// SigV4-signed with (service `bedrock`, any region): the mock signs
    /// each signed call again with them and refuses one whose signature
    /// differs (403 `InvalidSignatureException`), whose key is another
    /// (403 `UnrecognizedClientException`) or whose `x-amz-date` is more
    /// than 15 minutes off. `None`: a signed call is refused when
    /// [`MockOptions::expect_key`] is set, else accepted unchecked.
    pub aws_credentials: Option<(String, String)>,
}

impl Default for MockOptions {
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            tokens_per_sec: None,
            expect_key: None,
            reply_tokens: 12,
            chat_limit_field: None,
            azure_deployments: Vec::new(),
            aws_credentials: None,
        }
    }
}

/// One request as the mock received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub path: String,
    /// The query string as received (without `?`), if any.
    pub query: Option<String>,
    pub headers: http::HeaderMap,
    /// The parsed JSON body; `null` when the body was empty or not JSON.
    pub body: serde_json::Value,
}

impl RecordedRequest {
    /// The path and query as received, e.g.
    /// `/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse`.
    pub fn path_and_query(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.clone(),
        }
    }

    /// A query parameter, decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        gemini::query_param(self.query.as_deref(), name)
    }

    /// The Google API key the request carried: `x-goog-api-key`, else
    /// `?key=`.
    pub fn google_api_key(&self) -> Option<String> {
        gemini::api_key(&self.headers, self.query.as_deref())
    }

    /// Project, location, publisher, model and method of a Vertex AI
    /// call; `None` for any other path.
    pub fn vertex_target(&self) -> Option<VertexTarget> {
        VertexTarget::parse(&self.path)
    }

    /// The deployment an Azure OpenAI deployment path names
    /// (`/openai/deployments/{deployment}/…`), percent-decoded; `None` for
    /// any other path, the v1 API's and `/openai/responses` included
    /// (their deployment is the body's `model`).
    pub fn azure_deployment(&self) -> Option<String> {
        azure::AzureRoute::parse(&self.path).and_then(|route| route.deployment)
    }

    /// The model id a Bedrock path names (`/model/{modelId}/…`),
    /// percent-decoded, e.g. `us.anthropic.claude-sonnet-4-5-20250929-v1:0`
    /// or an ARN; `None` for any other path.
    pub fn bedrock_model(&self) -> Option<String> {
        bedrock::BedrockRoute::parse(&self.path).map(|route| route.model)
    }

    /// The access key id of a SigV4-signed request (its `Authorization`
    /// header's `Credential`); `None` when it is not signed.
    pub fn aws_access_key_id(&self) -> Option<String> {
        sigv4::Authorization::of(&self.headers).map(|signed| signed.access_key_id.to_owned())
    }

    /// The region a SigV4-signed request is scoped to.
    pub fn aws_region(&self) -> Option<String> {
        sigv4::Authorization::of(&self.headers).map(|signed| signed.region.to_owned())
    }

    /// The session token (`x-amz-security-token`) a request carried, as
    /// temporary AWS credentials send it.
    pub fn aws_session_token(&self) -> Option<String> {
        self.headers
            .get("x-amz-security-token")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    }
}

/// The raw form kept per request: parsing happens only when a test asks.
#[derive(Debug)]
struct Received {
    path: String,
    query: Option<String>,
    headers: http::HeaderMap,
    body: Bytes,
}

/// What the mock has seen and billed, for tests.
#[derive(Debug, Default)]
pub struct MockStats {
    requests: std::sync::atomic::AtomicU64,
    // std mutexes: held only to copy a value in or out, never across an await.
    last: Mutex<Option<Received>>,
    billed: Mutex<Usage>,
}

impl MockStats {
    /// Requests received, on any path but the token endpoint's (see
    /// [`TokenEndpoint::requests`]).
    pub fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The most recent request (token grants aside), with its body parsed.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        let last = lock(&self.last);
        last.as_ref().map(|received| RecordedRequest {
            path: received.path.clone(),
            query: received.query.clone(),
            headers: received.headers.clone(),
            body: serde_json::from_slice(&received.body).unwrap_or(serde_json::Value::Null),
        })
    }

    /// The sum of all usage the mock reported or would have billed.
    pub fn billed(&self) -> Usage {
        *lock(&self.billed)
    }

    fn count_request(&self) {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn record(&self, received: Received) {
        *lock(&self.last) = Some(received);
    }

    fn bill(&self, usage: Usage) {
        let mut billed = lock(&self.billed);
        *billed = billed.saturating_add(usage);
    }
}

/// Stats stay readable after a panicking test thread poisoned a lock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A mock running in this process; dropping it (or [`MockServer::shutdown`])
/// stops it.
#[derive(Debug)]
pub struct MockServer {
    pub addr: SocketAddr,
    pub stats: Arc<MockStats>,
    /// The OAuth2 token endpoint (`/token`): its knobs and counts.
    pub tokens: Arc<TokenEndpoint>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl MockServer {
    /// The base URL, e.g. `http://127.0.0.1:41234`; OpenAI clients add
    /// `/v1`, Azure OpenAI clients take it as the resource's endpoint.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The token endpoint's URL, the `token_uri` of
    /// [`service_account_json`].
    pub fn token_url(&self) -> String {
        format!("{}/token", self.url())
    }

    /// Stops accepting, lets in-flight requests finish and waits for that.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        self.stop.take();
        match self.task.take() {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        // Dropping the sender resolves the server's shutdown future.
        self.stop.take();
    }
}

/// Starts a mock on 127.0.0.1 on a free port.
pub async fn spawn(opts: MockOptions) -> std::io::Result<MockServer> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let stats = Arc::new(MockStats::default());
    let tokens = Arc::new(TokenEndpoint::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let shared = Arc::new(handler::Shared {
        opts,
        stats: stats.clone(),
        tokens: tokens.clone(),
    });
    let task = tokio::spawn(serve_shared(listener, shared, async move {
        let _ = stopped.await;
    }));
    Ok(MockServer {
        addr,
        stats,
        tokens,
        stop: Some(stop),
        task: Some(task),
    })
}

/// Serves the mock on `listener` until `shutdown` resolves, then lets
/// in-flight requests finish for a few seconds. Its token endpoint keeps
/// the default settings.
pub async fn serve(
    listener: TcpListener,
    opts: MockOptions,
    stats: Arc<MockStats>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let tokens = Arc::new(TokenEndpoint::default());
    let shared = Arc::new(handler::Shared {
        opts,
        stats,
        tokens,
    });
    serve_shared(listener, shared, shutdown).await
}

async fn serve_shared(
    listener: TcpListener,
    shared: Arc<handler::Shared>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    // Build the tokenizer off the runtime before the first request needs it.
    tokio::task::spawn_blocking(reply::tokenizer);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, "mock: accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                // SSE events are small writes that must not wait for Nagle.
                if let Err(error) = tcp.set_nodelay(true) {
                    tracing::debug!(%error, "mock: TCP_NODELAY not set");
                }
                let shared = shared.clone();
                let service = service_fn(move |request| handler::handle(request, shared.clone()));
                let connection = builder
                    .serve_connection(TokioIo::new(tcp), service)
                    .into_owned();
                let connection = graceful.watch(connection);
                connections.spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%peer, %error, "mock: connection ended with an error");
                    }
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("mock: dropping connections still busy after the grace period");
    }
    connections.shutdown().await;
    Ok(())
}
