//! The vertex family: Google Cloud's Vertex AI.
//!
//! Routes, under `/v1/` and `/v1beta1/`:
//! `projects/{p}/locations/{l}/publishers/google/models/{m}:generateContent`,
//! `:streamGenerateContent` and `:countTokens`, by the gemini family's
//! rules; `.../publishers/anthropic/models/{m}:rawPredict` and
//! `:streamRawPredict`, Anthropic Messages with the model in the path and
//! `anthropic_version` in the body, by the anthropic family's. The
//! client's gateway key comes as `Authorization: Bearer`; the provider's
//! `project` and `location` replace the client's, and the call signs in
//! with an access token from the provider's service account (`token`).

pub mod token;

use std::borrow::Cow;

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::Request;

use super::{anthropic, gemini};
use super::{Action, Credential, Route};
use crate::api::{Api, Call};
use crate::config::Provider;
use crate::error::GatewayError;
use crate::provider::ProviderKind;
use crate::upstream::Payload;

/// The routes of the family, for messages.
pub(super) const ROUTES: &str = "/v1/projects/{project}/locations/{location}/publishers/\
     {google|anthropic}/models/{model}:generateContent|streamGenerateContent|rawPredict|\
     streamRawPredict";

/// The API versions whose paths the family serves.
const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// The family's route for a `POST` to `path`.
pub(super) fn route(path: &str, query: Option<&str>) -> Option<Route> {
    let mut segments = path.strip_prefix('/')?.splitn(9, '/');
    let version = segments.next()?;
    if !VERSIONS.contains(&version) {
        return None;
    }
    let fixed = ["projects", "", "locations", "", "publishers"];
    for name in fixed {
        let segment = segments.next()?;
        if (!name.is_empty() && segment != name) || segment.is_empty() {
            return None;
        }
    }
    let publisher = segments.next()?;
    if segments.next()? != "models" {
        return None;
    }
    let (model, method) = gemini::model_and_method(segments.next()?)?;
    let (api, action, stream, label) = match publisher {
        "google" => {
            let (action, stream, label) = gemini::method_route(method, true)?;
            (Api::GenerateContent, action, stream, label)
        }
        "anthropic" => match method {
            "rawPredict" => (
                Api::Messages,
                Action::Call,
                Some(false),
                "/{v}/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict",
            ),
            "streamRawPredict" => (
                Api::Messages,
                Action::Call,
                Some(true),
                "/{v}/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:streamRawPredict",
            ),
            _ => return None,
        },
        _ => return None,
    };
    Some(Route {
        family: ProviderKind::Vertex,
        api,
        action,
        model: Some(model.to_owned()),
        stream,
        sse: api == Api::Messages || gemini::asks_for_sse(query),
        version: version.to_owned(),
        label,
    })
}

/// The gateway key: a bearer token, as Google's clients send their
/// access token, else `x-goog-api-key` (Vertex AI's express mode).
pub(super) fn gateway_key(headers: &HeaderMap) -> Option<Cow<'_, str>> {
    crate::directory::presented_key(headers)
        .or_else(|| {
            headers
                .get("x-goog-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|key| !key.is_empty())
        })
        .map(Cow::Borrowed)
}

/// The call of a Vertex AI route: Gemini's rules for Google's models,
/// Anthropic's for Claude (its model and streaming in the path).
pub(super) fn parse(route: &Route, body: Bytes) -> Result<Call, GatewayError> {
    let model = route.model.as_deref().unwrap_or_default();
    match route.api {
        Api::Messages => anthropic::request::parse(body, Some(model), route.stream),
        _ => gemini::request::parse(model, route.stream.unwrap_or(false), body),
    }
}

/// The provider's request: the provider's project and location in the
/// client's path, the service account's access token as the bearer.
pub(super) fn upstream_request(
    provider: &Provider,
    credential: &Credential,
    route: &Route,
    model: &str,
    headers: &HeaderMap,
    body: Payload,
) -> Result<Request<Payload>, http::Error> {
    let (project, location) = provider
        .vertex
        .as_ref()
        .map_or(("", ""), |v| (v.project.as_str(), v.location.as_str()));
    let (publisher, method, query) = match route.api {
        Api::Messages if route.stream == Some(true) => ("anthropic", "streamRawPredict", ""),
        Api::Messages => ("anthropic", "rawPredict", ""),
        _ => (
            "google",
            gemini::method_name(route),
            gemini::stream_query(route),
        ),
    };
    let path = format!(
        "/{}/projects/{project}/locations/{location}/publishers/{publisher}/models/\
         {model}:{method}{query}",
        route.version
    );
    let mut request = crate::upstream::request_to(&provider.base_url, &path, headers, body)?;
    let value = match credential {
        Credential::Token(token) => token.authorization().clone(),
        other => {
            let mut value = http::HeaderValue::try_from(format!("Bearer {}", other.secret()))?;
            value.set_sensitive(true);
            value
        }
    };
    request.headers_mut().insert(header::AUTHORIZATION, value);
    Ok(request)
}
