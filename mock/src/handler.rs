//! One request, from its bytes to a response: read the body (bounded),
//! record it, wait the configured latency, check the key (or the Vertex
//! access token, or the Bedrock key or signature), parse the JSON, let the
//! route's provider module answer, and turn that answer into a JSON
//! response, an event stream, an error in the provider's shape, or a closed
//! connection. Token grants (`POST /token`) are the auth server's traffic,
//! not calls: they are counted by the token endpoint, not recorded, and
//! never delayed.

use std::error::Error as StdError;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use super::azure::{self, AzureRoute};
use super::bedrock::{self, BedrockRoute};
use super::gemini::{GeminiRoute, ModelMethod, Surface};
use super::openai::Host;
use super::reply::{Directives, Tally};
use super::sigv4::SignedRequest;
use super::stream::{self, EventStream, MockBody};
use super::token::TokenEndpoint;
use super::vertex::{self, VertexTarget};
use super::{anthropic, embeddings, gemini, openai, responses, token};
use super::{MockOptions, MockStats, Received};

/// Largest request body the mock reads.
const MAX_BODY_BYTES: usize = 32 << 20;

/// Bodies above this size are parsed and tokenized on the blocking pool so
/// a huge prompt does not stall the connections sharing its worker.
const INLINE_BODY_BYTES: usize = 256 << 10;

/// What every connection shares.
pub(crate) struct Shared {
    pub opts: MockOptions,
    pub stats: Arc<MockStats>,
    pub tokens: Arc<TokenEndpoint>,
}

/// The endpoints the mock serves.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Route {
    Chat,
    Completions,
    Responses,
    Embeddings,
    Messages,
    CountTokens,
    Models,
    Gemini(GeminiRoute),
    /// A Gemini model under Vertex's `publishers/google`.
    VertexGemini(VertexTarget, ModelMethod),
    /// Claude under Vertex's `publishers/anthropic`; `true` for
    /// `streamRawPredict`.
    VertexClaude(VertexTarget, bool),
    /// Azure OpenAI's deployment, dated Responses and v1 routes.
    Azure(AzureRoute),
    /// Amazon Bedrock Runtime's model routes.
    Bedrock(BedrockRoute),
    Token,
}

impl Route {
    fn of(method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) -> Option<Self> {
        let has_key = gemini::api_key(headers, query).is_some();
        if let Some(route) = GeminiRoute::of(method, path, query, has_key) {
            return Some(Self::Gemini(route));
        }
        if let Some(target) = VertexTarget::parse(path) {
            if *method != Method::POST {
                return None;
            }
            return match (target.publisher.as_str(), target.method.as_str()) {
                ("google", verb) => {
                    let method = ModelMethod::of(verb, query)?;
                    Some(Self::VertexGemini(target, method))
                }
                ("anthropic", "rawPredict") => Some(Self::VertexClaude(target, false)),
                ("anthropic", "streamRawPredict") => Some(Self::VertexClaude(target, true)),
                _ => None,
            };
        }
        if let Some(route) = AzureRoute::parse(path) {
            return (*method == Method::POST).then_some(Self::Azure(route));
        }
        if let Some(route) = BedrockRoute::parse(path) {
            return (*method == Method::POST).then_some(Self::Bedrock(route));
        }
        let route = match path {
            "/token" => Self::Token,
            "/v1/chat/completions" => Self::Chat,
            "/v1/completions" => Self::Completions,
            "/v1/responses" => Self::Responses,
            "/v1/embeddings" => Self::Embeddings,
            "/v1/messages" => Self::Messages,
            "/v1/messages/count_tokens" => Self::CountTokens,
            "/v1/models" => Self::Models,
            _ => return None,
        };
        let expected = if route == Self::Models {
            Method::GET
        } else {
            Method::POST
        };
        (*method == expected).then_some(route)
    }
}

/// Whose wire format a response uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provider {
    OpenAi,
    Anthropic,
    /// The Gemini API and Vertex AI.
    Google,
    /// Azure OpenAI: OpenAI's bodies, Azure's errors and headers.
    Azure,
    /// Amazon Bedrock Runtime: `{"message"}` errors named by
    /// `x-amzn-ErrorType`.
    Bedrock,
    /// The OAuth2 token endpoint.
    OAuth,
}

impl Provider {
    /// The route's shape; a path no route serves gets Google's when it
    /// looks like a Google API's, Azure's under `/openai/`, Bedrock's under
    /// `/model/`, else OpenAI's.
    fn of(route: Option<&Route>, path: &str, headers: &HeaderMap) -> Self {
        match route {
            Some(Route::Messages | Route::CountTokens | Route::VertexClaude(..)) => Self::Anthropic,
            Some(Route::Models) if headers.contains_key("anthropic-version") => Self::Anthropic,
            Some(Route::Gemini(_) | Route::VertexGemini(..)) => Self::Google,
            Some(Route::Token) => Self::OAuth,
            Some(Route::Azure(_)) => Self::Azure,
            Some(Route::Bedrock(_)) => Self::Bedrock,
            None if path.starts_with("/openai/") => Self::Azure,
            None if path.starts_with("/model/") => Self::Bedrock,
            None if ["/v1beta/", "/v1beta1/", "/v1/projects/"]
                .iter()
                .any(|prefix| path.starts_with(prefix)) =>
            {
                Self::Google
            }
            _ => Self::OpenAi,
        }
    }
}

/// Why a request got no response at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Hangup {
    #[error("connection closed without a response by the mock:cut directive")]
    Cut,
    #[error("request body not received")]
    Body(#[source] Box<dyn StdError + Send + Sync>),
}

/// A refusal, rendered in the provider's error shape.
#[derive(Clone, Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<&'static str>,
    /// OpenAI's `code`; when `None` the status decides it. Google's
    /// `ErrorInfo` reason, OAuth's `error`.
    pub code: Option<&'static str>,
    /// The shape to answer in when not the route's: Vertex refuses a token
    /// in Google's shape on the Claude routes too.
    pub shape: Option<Provider>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
            code: None,
            shape: None,
        }
    }

    /// 400 for a missing or malformed field.
    pub(crate) fn invalid(message: impl Into<String>, param: &'static str) -> Self {
        Self {
            param: Some(param),
            ..Self::new(StatusCode::BAD_REQUEST, message)
        }
    }

    /// The error a `mock:status=CODE` directive asked for.
    pub(crate) fn directed(status: StatusCode) -> Self {
        let message = match status.as_u16() {
            401 => "Incorrect API key provided.",
            403 => "You are not allowed to use this resource.",
            404 => "The model does not exist or you do not have access to it.",
            429 => "Rate limit reached for requests. Please try again later.",
            500 => "The server had an error while processing your request.",
            502..=504 => "The server is temporarily unavailable. Please try again later.",
            529 => "Overloaded",
            _ => "The request was rejected.",
        };
        Self::new(
            status,
            format!("{message} (mock:status={})", status.as_u16()),
        )
    }

    pub(crate) fn with_code(self, code: &'static str) -> Self {
        Self {
            code: Some(code),
            ..self
        }
    }
}

/// A provider module's answer to a well-formed request.
pub(crate) enum Answer {
    Json {
        body: Value,
        tally: Tally,
    },
    Stream(EventStream),
    /// A stream that is one JSON array written an element at a time
    /// (Gemini's `streamGenerateContent` without `alt=sse`).
    JsonStream(EventStream),
    /// An AWS event stream of binary frames (Bedrock's streams).
    AwsEventStream(EventStream),
    /// Another answer, with these response headers added.
    WithHeaders(Box<Answer>, HeaderMap),
    /// Close the connection without a response, billing `tally`.
    Hangup {
        tally: Tally,
    },
}

/// The answers directives give instead of a reply: an error status, or for
/// a non-stream `mock:cut` no response at all. A cut stream is cut later,
/// while it streams.
pub(crate) fn directed_answer(
    directives: &Directives,
    stream: bool,
    tally: Tally,
) -> Option<Result<Answer, ApiError>> {
    directed_answer_as(ApiError::directed, directives, stream, tally)
}

/// [`directed_answer`] with the error worded by `error`, for a provider
/// whose messages and codes differ from the shared ones.
pub(crate) fn directed_answer_as(
    error: fn(StatusCode) -> ApiError,
    directives: &Directives,
    stream: bool,
    tally: Tally,
) -> Option<Result<Answer, ApiError>> {
    if let Some(status) = directives.status {
        return Some(Err(error(status)));
    }
    if directives.cut.is_some() && !stream {
        return Some(Ok(Answer::Hangup {
            tally: tally.with_output(0),
        }));
    }
    None
}

/// A provider-style id: the prefix and 32 hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::now_v7().simple())
}

/// Seconds since the Unix epoch, as providers stamp `created`.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// The service of every connection.
pub(crate) async fn handle(
    request: Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<MockBody>, Hangup> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let authority = parts.uri.authority().map(|authority| authority.as_str());
    let query = parts.uri.query();
    let route = Route::of(&parts.method, path, query, &parts.headers);
    let provider = Provider::of(route.as_ref(), path, &parts.headers);
    let call = route != Some(Route::Token);
    if call {
        shared.stats.count_request();
    }
    let bytes = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Request body exceeds the {MAX_BODY_BYTES} byte limit."),
        )),
        Err(error) => return Err(Hangup::Body(error)),
    };
    if call {
        shared.stats.record(Received {
            path: path.to_owned(),
            query: query.map(str::to_owned),
            headers: parts.headers.clone(),
            body: bytes.clone().unwrap_or_default(),
        });
        if !shared.opts.latency.is_zero() {
            tokio::time::sleep(shared.opts.latency).await;
        }
    }
    let answer = match (route, bytes) {
        (None, _) if provider == Provider::Azure => {
            Err(ApiError::new(StatusCode::NOT_FOUND, "Resource not found"))
        }
        (None, _) if provider == Provider::Bedrock => Err(bedrock::unknown_operation()),
        (None, _) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("Invalid URL ({} {path})", parts.method),
        )
        .with_code("unknown_url")),
        (Some(_), Err(too_large)) => Err(too_large),
        (Some(route), Ok(bytes)) => {
            let request = RequestParts {
                method: parts.method.clone(),
                path: path.to_owned(),
                query: query.map(str::to_owned),
                authority: authority.map(str::to_owned),
                headers: parts.headers.clone(),
            };
            authorized_answer(route, request, bytes, shared.clone()).await
        }
    };
    respond_with(answer, provider, &shared)
}

/// The response to an answer, or the hangup.
fn respond_with(
    answer: Result<Answer, ApiError>,
    provider: Provider,
    shared: &Shared,
) -> Result<Response<MockBody>, Hangup> {
    match answer {
        Ok(Answer::Json { body, tally }) => {
            shared.stats.bill(tally.usage());
            Ok(json_response(provider, StatusCode::OK, &body))
        }
        Ok(Answer::Stream(events)) => {
            let body = stream::spawn(events, shared.stats.clone());
            Ok(respond(provider, StatusCode::OK, "text/event-stream", body))
        }
        Ok(Answer::JsonStream(events)) => {
            let body = stream::spawn(events, shared.stats.clone());
            Ok(respond(provider, StatusCode::OK, json_type(provider), body))
        }
        Ok(Answer::AwsEventStream(events)) => {
            let body = stream::spawn(events, shared.stats.clone());
            Ok(respond(
                provider,
                StatusCode::OK,
                bedrock::EVENT_STREAM,
                body,
            ))
        }
        Ok(Answer::WithHeaders(answer, added)) => {
            let mut response = respond_with(Ok(*answer), provider, shared)?;
            response.headers_mut().extend(added);
            Ok(response)
        }
        Ok(Answer::Hangup { tally }) => {
            shared.stats.bill(tally.usage());
            Err(Hangup::Cut)
        }
        Err(error) => {
            let shape = error.shape.unwrap_or(provider);
            let body = match shape {
                Provider::OpenAi => openai::error_body(&error),
                Provider::Anthropic => anthropic::error_body(&error),
                Provider::Google => gemini::error_body(&error),
                Provider::Azure => azure::error_body(&error),
                Provider::Bedrock => bedrock::error_body(&error),
                Provider::OAuth => token::error_body(&error),
            };
            let mut response = json_response(shape, error.status, &body);
            if shape == Provider::Bedrock {
                if let Ok(name) = HeaderValue::from_str(&bedrock::error_type(&error)) {
                    response.headers_mut().insert("x-amzn-errortype", name);
                }
            }
            if shape == Provider::Azure && error.status == StatusCode::TOO_MANY_REQUESTS {
                response.headers_mut().insert(
                    RETRY_AFTER,
                    HeaderValue::from_static(azure::RETRY_AFTER_SECONDS),
                );
            }
            Ok(response)
        }
    }
}

/// What a route's answer reads of the request besides its body.
struct RequestParts {
    method: Method,
    /// The path as received, percent-encoded.
    path: String,
    query: Option<String>,
    /// The request URI's authority, which HTTP/2 sends instead of `Host`.
    authority: Option<String>,
    headers: HeaderMap,
}

/// Checks the key when the mock expects one, where each provider's SDK
/// sends it; a Gemini API call always needs a key, a Vertex call an
/// access token the mock's `/token` issued, and a Bedrock call a key or a
/// signature when the mock expects either.
fn authorize(
    route: &Route,
    request: &RequestParts,
    body: &[u8],
    shared: &Shared,
) -> Result<(), ApiError> {
    let expected = shared.opts.expect_key.as_deref();
    match route {
        Route::Token => return Ok(()),
        Route::Bedrock(_) => {
            let signed = SignedRequest {
                method: request.method.as_str(),
                path: &request.path,
                query: request.query.as_deref(),
                authority: request.authority.as_deref(),
                headers: &request.headers,
                body,
            };
            return bedrock::authorize(&signed, &shared.opts);
        }
        Route::Azure(_) => return azure::authorize(&request.headers, expected),
        Route::Gemini(_) => {
            return gemini::authorize(&request.headers, request.query.as_deref(), expected)
        }
        Route::VertexGemini(..) | Route::VertexClaude(..) => {
            return vertex::authorize(&request.headers, &shared.tokens).map_err(|error| ApiError {
                shape: Some(Provider::Google),
                ..error
            })
        }
        _ => {}
    }
    let Some(expected) = expected else {
        return Ok(());
    };
    let headers = &request.headers;
    let header = |name| {
        headers
            .get(name)
            .and_then(|value: &HeaderValue| value.to_str().ok())
    };
    let bearer = header(AUTHORIZATION.as_str()).and_then(|value| value.strip_prefix("Bearer "));
    let api_key = header("x-api-key");
    // Anthropic's API takes `x-api-key` or a bearer token, and its current
    // Python SDK sends the key as a bearer token.
    let anthropic = matches!(route, Route::Messages | Route::CountTokens);
    let (presented, missing) = match route {
        Route::Messages | Route::CountTokens => {
            (api_key.or(bearer), "x-api-key header is required")
        }
        Route::Models => (bearer.or(api_key), "You didn't provide an API key."),
        _ => (
            bearer,
            "You didn't provide an API key. You need to provide your API key in an \
             Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        ),
    };
    match presented {
        Some(key) if key == expected => Ok(()),
        Some(_) if anthropic => Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid x-api-key")),
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Incorrect API key provided.",
        )),
        None => Err(ApiError::new(StatusCode::UNAUTHORIZED, missing)),
    }
}

/// Checks the key, then answers; a large body is answered on the blocking
/// pool.
async fn authorized_answer(
    route: Route,
    request: RequestParts,
    bytes: Bytes,
    shared: Arc<Shared>,
) -> Result<Answer, ApiError> {
    authorize(&route, &request, &bytes, &shared)?;
    if bytes.len() <= INLINE_BODY_BYTES {
        return answer(&route, &request, &bytes, &shared);
    }
    tokio::task::spawn_blocking(move || answer(&route, &request, &bytes, &shared))
        .await
        .unwrap_or_else(|join| {
            tracing::error!(error = %join, "mock: answering a large request failed");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The server had an error while processing your request.",
            ))
        })
}

/// Parses the body and lets the route's provider module answer.
fn answer(
    route: &Route,
    request: &RequestParts,
    bytes: &[u8],
    shared: &Shared,
) -> Result<Answer, ApiError> {
    let opts = &shared.opts;
    let parsed = || parse_object(bytes);
    let listed = |body| {
        Ok(Answer::Json {
            body,
            tally: Tally::default(),
        })
    };
    match route {
        Route::Models => listed(match Provider::of(Some(route), "", &request.headers) {
            Provider::Anthropic => anthropic::models(),
            _ => openai::models(),
        }),
        Route::Chat => openai::chat(&parsed()?, opts, &Host::OpenAi),
        Route::Completions => openai::completions(&parsed()?, opts, &Host::OpenAi),
        Route::Embeddings => embeddings::embeddings(&parsed()?, &Host::OpenAi),
        Route::Responses => responses::create(&parsed()?, opts, &Host::OpenAi),
        Route::Messages => anthropic::messages(&parsed()?, opts),
        Route::CountTokens => anthropic::count_tokens(&parsed()?),
        Route::Gemini(GeminiRoute::ListModels) => listed(gemini::models()),
        Route::Gemini(GeminiRoute::GetModel { version, model }) => {
            listed(gemini::model(version, model)?)
        }
        Route::Gemini(GeminiRoute::Model { model, method }) => {
            model_call(Surface::GeminiApi, model, *method, &parsed()?, opts)
        }
        Route::VertexGemini(target, method) => {
            model_call(Surface::Vertex, &target.model, *method, &parsed()?, opts)
        }
        Route::VertexClaude(target, stream) => {
            vertex::raw_predict(target, &parsed()?, *stream, opts)
        }
        Route::Azure(route) => azure::answer(route, request.query.as_deref(), bytes, opts),
        Route::Bedrock(route) => bedrock::answer(route, bytes, opts),
        Route::Token => listed(shared.tokens.grant(bytes)?),
    }
}

/// A Gemini model's `generateContent`, `streamGenerateContent` or
/// `countTokens`, on either API.
fn model_call(
    surface: Surface,
    model: &str,
    method: ModelMethod,
    body: &Value,
    opts: &MockOptions,
) -> Result<Answer, ApiError> {
    match method {
        ModelMethod::Generate => gemini::generate(surface, model, body, None, opts),
        ModelMethod::Stream(framing) => gemini::generate(surface, model, body, Some(framing), opts),
        ModelMethod::CountTokens => gemini::count_tokens(body),
    }
}

pub(crate) fn parse_object(bytes: &[u8]) -> Result<Value, ApiError> {
    let body: Value = serde_json::from_slice(bytes).map_err(|error| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("We could not parse the JSON body of your request: {error}"),
        )
    })?;
    if body.is_object() {
        Ok(body)
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "The request body must be a JSON object.",
        ))
    }
}

/// The JSON content type each provider sends.
fn json_type(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi | Provider::Anthropic | Provider::Azure | Provider::Bedrock => {
            "application/json"
        }
        Provider::Google => "application/json; charset=UTF-8",
        Provider::OAuth => "application/json; charset=utf-8",
    }
}

fn json_response(provider: Provider, status: StatusCode, body: &Value) -> Response<MockBody> {
    respond(
        provider,
        status,
        json_type(provider),
        stream::full(body.to_string()),
    )
}

fn respond(
    provider: Provider,
    status: StatusCode,
    content_type: &'static str,
    body: MockBody,
) -> Response<MockBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if content_type == "text/event-stream" {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    let request_ids: &[&str] = match provider {
        Provider::OpenAi => &["x-request-id"],
        Provider::Anthropic => &["request-id"],
        // Azure's API Management front end adds its own id to the model's;
        // both are UUIDs.
        Provider::Azure => &["x-request-id", "apim-request-id"],
        Provider::Bedrock => &["x-amzn-requestid"],
        Provider::Google | Provider::OAuth => &[],
    };
    for name in request_ids {
        let id = match provider {
            Provider::Azure | Provider::Bedrock => uuid::Uuid::new_v4().to_string(),
            _ => new_id("req_"),
        };
        if let Ok(id) = HeaderValue::from_str(&id) {
            headers.insert(*name, id);
        }
    }
    response
}
