//! The anthropic family: Anthropic's Messages API — `POST /v1/messages`
//! and `/v1/messages/count_tokens` (forwarded uncharged), the gateway key
//! in `x-api-key` (or as a bearer token), the provider's in `x-api-key`
//! with an `anthropic-version`. Its request rules are in `request`; its
//! usage is read by `usage`, its stream by `stream`. Vertex AI's Claude
//! models speak the same bodies and events.

pub mod request;
pub(super) mod stream;
mod usage;

pub use request::DEFAULT_MAX_USES;
pub(crate) use usage::body_usage;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Request;

use super::{Action, Credential, Route};
use crate::api::Api;
use crate::config::Provider;
use crate::provider::ProviderKind;
use crate::upstream::Payload;

/// Anthropic's API version when the client sends none.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Anthropic's token counting route, which the provider does not bill.
pub const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";

/// The routes of the family, for messages.
pub(super) const ROUTES: &str = "/v1/messages";

/// The family's route for a `POST` to `path`.
pub(super) fn route(path: &str) -> Option<Route> {
    let (action, label) = match path {
        "/v1/messages" => (Action::Call, "/v1/messages"),
        COUNT_TOKENS_PATH => (Action::CountTokens, COUNT_TOKENS_PATH),
        _ => return None,
    };
    Some(Route {
        family: ProviderKind::Anthropic,
        api: Api::Messages,
        action,
        model: None,
        stream: None,
        sse: true,
        version: String::new(),
        label,
    })
}

/// The provider's request: the route's own path, the key in `x-api-key`,
/// and an API version when the client named none.
pub(super) fn upstream_request(
    provider: &Provider,
    credential: &Credential,
    route: &Route,
    headers: &HeaderMap,
    body: Payload,
) -> Result<Request<Payload>, http::Error> {
    let path = match route.action {
        Action::Call => route.api.path(),
        Action::CountTokens => COUNT_TOKENS_PATH,
    };
    let mut request = crate::upstream::request_to(&provider.base_url, path, headers, body)?;
    let secret = credential.secret();
    let mut value = HeaderValue::try_from(secret)?;
    value.set_sensitive(true);
    let headers = request.headers_mut();
    headers.insert(HeaderName::from_static("x-api-key"), value);
    headers
        .entry(HeaderName::from_static("anthropic-version"))
        .or_insert(HeaderValue::from_static(ANTHROPIC_VERSION));
    Ok(request)
}
