//! The gemini family: Google's Gemini API (`generativelanguage.googleapis.com`).
//!
//! Routes, under `/v1beta/` and `/v1/`: `POST models/{model}:generateContent`,
//! `:streamGenerateContent` (server-sent events with `?alt=sse`, else one
//! JSON array sent piece by piece, `frames`) and `:countTokens`
//! (forwarded uncharged); the gateway answers `GET models[/{model}]`
//! itself. The client's gateway key comes in `x-goog-api-key` (or
//! `?key=`, which is never logged or forwarded); the provider's key goes
//! in `x-goog-api-key`. The request rules are `request`'s; the usage is
//! `usageMetadata` (`usage`), the last one of a stream counting
//! (`stream`). Vertex AI's Gemini models follow the same rules.

pub mod frames;
pub mod request;
pub(super) mod stream;
pub mod usage;

use std::borrow::Cow;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Request, Uri};

use super::{Action, Credential, Route};
use crate::api::{Api, Call};
use crate::config::Provider;
use crate::error::GatewayError;
use crate::hosted::HostedTool;
use crate::provider::ProviderKind;
use crate::upstream::Payload;
use crate::usage::Reported;

/// The routes of the family, for messages.
pub(super) const ROUTES: &str = "/v1beta/models/{model}:generateContent or :streamGenerateContent";

/// The API versions whose paths the family serves.
const VERSIONS: [&str; 2] = ["v1beta", "v1"];

/// The family's route for a `POST` to `path`.
pub(super) fn route(path: &str, query: Option<&str>) -> Option<Route> {
    let rest = path.strip_prefix('/')?;
    let (version, rest) = rest.split_once('/')?;
    if !VERSIONS.contains(&version) {
        return None;
    }
    let target = rest.strip_prefix("models/")?;
    let (model, method) = model_and_method(target)?;
    let (action, stream, label) = method_route(method, false)?;
    Some(Route {
        family: ProviderKind::Gemini,
        api: Api::GenerateContent,
        action,
        model: Some(model.to_owned()),
        stream,
        sse: asks_for_sse(query),
        version: version.to_owned(),
        label,
    })
}

/// `{model}:{method}` of a path, the model a plain name.
pub(crate) fn model_and_method(target: &str) -> Option<(&str, &str)> {
    let (model, method) = target.rsplit_once(':')?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@');
    (!model.is_empty() && model.chars().all(plain)).then_some((model, method))
}

/// What a Google model method asks for, and its metrics label (the
/// Gemini API's, or Vertex AI's when `vertex`).
pub(crate) fn method_route(
    method: &str,
    vertex: bool,
) -> Option<(Action, Option<bool>, &'static str)> {
    Some(match (method, vertex) {
        ("generateContent", false) => (
            Action::Call,
            Some(false),
            "/{v}/models/{model}:generateContent",
        ),
        ("streamGenerateContent", false) => (
            Action::Call,
            Some(true),
            "/{v}/models/{model}:streamGenerateContent",
        ),
        ("countTokens", false) => (
            Action::CountTokens,
            None,
            "/{v}/models/{model}:countTokens",
        ),
        ("generateContent", true) => (
            Action::Call,
            Some(false),
            "/{v}/projects/{p}/locations/{l}/publishers/google/models/{model}:generateContent",
        ),
        ("streamGenerateContent", true) => (
            Action::Call,
            Some(true),
            "/{v}/projects/{p}/locations/{l}/publishers/google/models/{model}:streamGenerateContent",
        ),
        ("countTokens", true) => (
            Action::CountTokens,
            None,
            "/{v}/projects/{p}/locations/{l}/publishers/google/models/{model}:countTokens",
        ),
        _ => return None,
    })
}

/// Whether the query asks for server-sent events (`alt=sse`).
pub(crate) fn asks_for_sse(query: Option<&str>) -> bool {
    query.is_some_and(|query| {
        form_urlencoded::parse(query.as_bytes())
            .any(|(name, value)| name == "alt" && value == "sse")
    })
}

/// The gateway key: `x-goog-api-key`, else `?key=`, else the usual
/// headers.
pub(super) fn gateway_key<'r>(headers: &'r HeaderMap, uri: &'r Uri) -> Option<Cow<'r, str>> {
    if let Some(key) = headers
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|key| !key.is_empty())
    {
        return Some(Cow::Borrowed(key));
    }
    if let Some(query) = uri.query() {
        if let Some((_, key)) = form_urlencoded::parse(query.as_bytes()).find(|(n, _)| n == "key") {
            return Some(Cow::Owned(key.into_owned()));
        }
    }
    crate::directory::presented_key(headers).map(Cow::Borrowed)
}

/// The call of a `generateContent` route.
pub(super) fn parse(route: &Route, body: Bytes) -> Result<Call, GatewayError> {
    let model = route.model.as_deref().unwrap_or_default();
    request::parse(model, route.stream.unwrap_or(false), body)
}

/// The provider's request: the client's path (its version, model and
/// method) and query without `key`, the provider's key in
/// `x-goog-api-key`.
pub(super) fn upstream_request(
    provider: &Provider,
    credential: &Credential,
    route: &Route,
    model: &str,
    headers: &HeaderMap,
    body: Payload,
) -> Result<Request<Payload>, http::Error> {
    let path = format!(
        "/{}/models/{model}:{}{}",
        route.version,
        method_name(route),
        stream_query(route)
    );
    let mut request = crate::upstream::request_to(&provider.base_url, &path, headers, body)?;
    let secret = credential.secret();
    let mut value = HeaderValue::try_from(secret)?;
    value.set_sensitive(true);
    request
        .headers_mut()
        .insert(HeaderName::from_static("x-goog-api-key"), value);
    Ok(request)
}

/// The Google method a route calls.
pub(crate) fn method_name(route: &Route) -> &'static str {
    match (route.action, route.stream) {
        (Action::CountTokens, _) => "countTokens",
        (Action::Call, Some(true)) => "streamGenerateContent",
        (Action::Call, _) => "generateContent",
    }
}

/// The query of the provider's request: `?alt=sse` for a stream asked for
/// as server-sent events; nothing else of the client's query moves the
/// answer.
pub(crate) fn stream_query(route: &Route) -> &'static str {
    if route.stream == Some(true) && route.sse {
        "?alt=sse"
    } else {
        ""
    }
}

/// The usage of a plain response body, with Grounding with Google Search
/// as its billed uses: one per search query, at least one for a grounded
/// answer (a model billed per grounded request is charged one by its
/// bound, whatever is reported).
pub(super) fn body_usage(body: &[u8]) -> Option<Reported> {
    let (reported, grounding) = usage::body_usage(body)?;
    Some(reported.map(|usage| with_grounding(usage, grounding)))
}

/// `usage` with the uses of Google Search that `grounding` shows.
pub(crate) fn with_grounding(
    mut usage: crate::usage::Usage,
    grounding: usage::Grounding,
) -> crate::usage::Usage {
    let uses = grounding.queries.max(u64::from(grounding.grounded));
    if uses > 0 {
        usage.tool_calls.set(HostedTool::GoogleSearch, uses);
    }
    usage
}
