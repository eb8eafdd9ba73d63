//! One request, from its bytes to a response: read the body (bounded),
//! record it, wait the configured latency, check the key, parse the JSON,
//! let the route's provider module answer, and turn that answer into a
//! JSON response, an event stream, an error in the provider's shape, or a
//! closed connection.

use std::error::Error as StdError;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use super::reply::{Directives, Tally};
use super::stream::{self, EventStream, MockBody};
use super::{anthropic, embeddings, openai, responses, MockOptions, MockStats, Received};

/// Largest request body the mock reads.
const MAX_BODY_BYTES: usize = 32 << 20;

/// Bodies above this size are parsed and tokenized on the blocking pool so
/// a huge prompt does not stall the connections sharing its worker.
const INLINE_BODY_BYTES: usize = 256 << 10;

/// What every connection shares.
pub(crate) struct Shared {
    pub opts: MockOptions,
    pub stats: Arc<MockStats>,
}

/// The endpoints the mock serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Chat,
    Completions,
    Responses,
    Embeddings,
    Messages,
    CountTokens,
    Models,
}

impl Route {
    fn of(method: &Method, path: &str) -> Option<Self> {
        let route = match path {
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
enum Provider {
    OpenAi,
    Anthropic,
}

impl Provider {
    fn of(route: Option<Route>, headers: &HeaderMap) -> Self {
        match route {
            Some(Route::Messages | Route::CountTokens) => Self::Anthropic,
            Some(Route::Models) if headers.contains_key("anthropic-version") => Self::Anthropic,
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
    /// OpenAI's `code`; when `None` the status decides it.
    pub code: Option<&'static str>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
            code: None,
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

    fn with_code(self, code: &'static str) -> Self {
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
    if let Some(status) = directives.status {
        return Some(Err(ApiError::directed(status)));
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
    shared.stats.count_request();
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let route = Route::of(&parts.method, path);
    let provider = Provider::of(route, &parts.headers);
    let bytes = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Request body exceeds the {MAX_BODY_BYTES} byte limit."),
        )),
        Err(error) => return Err(Hangup::Body(error)),
    };
    shared.stats.record(Received {
        path: path.to_owned(),
        headers: parts.headers.clone(),
        body: bytes.clone().unwrap_or_default(),
    });
    if !shared.opts.latency.is_zero() {
        tokio::time::sleep(shared.opts.latency).await;
    }
    let answer = match (route, bytes) {
        (None, _) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("Invalid URL ({} {path})", parts.method),
        )
        .with_code("unknown_url")),
        (Some(_), Err(too_large)) => Err(too_large),
        (Some(route), Ok(bytes)) => {
            authorized_answer(route, &parts.headers, bytes, &shared.opts).await
        }
    };
    match answer {
        Ok(Answer::Json { body, tally }) => {
            shared.stats.bill(tally.usage());
            Ok(json_response(provider, StatusCode::OK, &body))
        }
        Ok(Answer::Stream(events)) => {
            let body = stream::spawn(events, shared.stats.clone());
            Ok(respond(provider, StatusCode::OK, "text/event-stream", body))
        }
        Ok(Answer::Hangup { tally }) => {
            shared.stats.bill(tally.usage());
            Err(Hangup::Cut)
        }
        Err(error) => {
            let body = match provider {
                Provider::OpenAi => openai::error_body(&error),
                Provider::Anthropic => anthropic::error_body(&error),
            };
            Ok(json_response(provider, error.status, &body))
        }
    }
}

/// Checks the key when the mock expects one, where each provider's SDK
/// sends it.
fn authorize(route: Route, headers: &HeaderMap, opts: &MockOptions) -> Result<(), ApiError> {
    let Some(expected) = opts.expect_key.as_deref() else {
        return Ok(());
    };
    let header = |name| {
        headers
            .get(name)
            .and_then(|value: &HeaderValue| value.to_str().ok())
    };
    let bearer = header(AUTHORIZATION.as_str()).and_then(|value| value.strip_prefix("Bearer "));
    let api_key = header("x-api-key");
    // Anthropic's API takes `x-api-key` or a bearer token, and its current
    // Python SDK sends the key as a bearer token.
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
        Some(_) if matches!(route, Route::Messages | Route::CountTokens) => {
            Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid x-api-key"))
        }
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
    headers: &HeaderMap,
    bytes: Bytes,
    opts: &MockOptions,
) -> Result<Answer, ApiError> {
    authorize(route, headers, opts)?;
    if bytes.len() <= INLINE_BODY_BYTES {
        return answer(route, headers, &bytes, opts);
    }
    let (headers, opts) = (headers.clone(), opts.clone());
    tokio::task::spawn_blocking(move || answer(route, &headers, &bytes, &opts))
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
    route: Route,
    headers: &HeaderMap,
    bytes: &[u8],
    opts: &MockOptions,
) -> Result<Answer, ApiError> {
    let parsed = || parse_object(bytes);
    match route {
        Route::Models => {
            let body = match Provider::of(Some(route), headers) {
                Provider::OpenAi => openai::models(),
                Provider::Anthropic => anthropic::models(),
            };
            Ok(Answer::Json {
                body,
                tally: Tally::default(),
            })
        }
        Route::Chat => openai::chat(&parsed()?, opts),
        Route::Completions => openai::completions(&parsed()?, opts),
        Route::Embeddings => embeddings::embeddings(&parsed()?),
        Route::Responses => responses::create(&parsed()?, opts),
        Route::Messages => anthropic::messages(&parsed()?, opts),
        Route::CountTokens => anthropic::count_tokens(&parsed()?),
    }
}

fn parse_object(bytes: &[u8]) -> Result<Value, ApiError> {
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

fn json_response(provider: Provider, status: StatusCode, body: &Value) -> Response<MockBody> {
    respond(
        provider,
        status,
        "application/json",
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
    let request_id_header = match provider {
        Provider::OpenAi => "x-request-id",
        Provider::Anthropic => "request-id",
    };
    if let Ok(id) = HeaderValue::from_str(&new_id("req_")) {
        headers.insert(request_id_header, id);
    }
    response
}
