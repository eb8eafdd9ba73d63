//! The openai family: OpenAI's API and every OpenAI-compatible one —
//! `POST /v1/chat/completions`, `/v1/completions`, `/v1/responses` and
//! `/v1/embeddings`, the gateway key as a bearer token (or `x-api-key`),
//! the provider's key as a bearer token. Its request rules are in
//! `request`; its usage is read by `usage` and `tool_items`, its streams
//! by `stream`.

pub mod request;
pub(super) mod stream;
mod tool_items;
mod usage;

pub use request::DEFAULT_MAX_TOOL_CALLS;
pub(crate) use usage::body_usage;

use http::header::{self, HeaderMap, HeaderValue};
use http::Request;

use super::{Action, Credential, Route};
use crate::api::Api;
use crate::config::Provider;
use crate::provider::ProviderKind;
use crate::upstream::Payload;

/// The routes of the family, for messages.
pub(super) const ROUTES: &str =
    "/v1/chat/completions, /v1/responses, /v1/completions or /v1/embeddings";

/// The family's route for a `POST` to `path`.
pub(super) fn route(path: &str) -> Option<Route> {
    let api = match path {
        "/v1/chat/completions" => Api::ChatCompletions,
        "/v1/completions" => Api::Completions,
        "/v1/responses" => Api::Responses,
        "/v1/embeddings" => Api::Embeddings,
        _ => return None,
    };
    Some(Route {
        family: ProviderKind::OpenAi,
        api,
        action: Action::Call,
        model: None,
        stream: None,
        sse: true,
        version: String::new(),
        label: api.path(),
    })
}

/// The provider's request: the API's own path, the key as a bearer token.
pub(super) fn upstream_request(
    provider: &Provider,
    credential: &Credential,
    route: &Route,
    headers: &HeaderMap,
    body: Payload,
) -> Result<Request<Payload>, http::Error> {
    let mut request =
        crate::upstream::request_to(&provider.base_url, route.api.path(), headers, body)?;
    let secret = credential.secret();
    let mut value = HeaderValue::try_from(format!("Bearer {secret}"))?;
    value.set_sensitive(true);
    request.headers_mut().insert(header::AUTHORIZATION, value);
    Ok(request)
}
