//! The bedrock family: Amazon Bedrock Runtime, serving Claude.
//!
//! Routes: `POST /model/{modelId}/converse` and `/converse-stream`
//! (Bedrock's Converse API, read by `request`), `/model/{modelId}/invoke`
//! and `/invoke-with-response-stream` (Anthropic's Messages inside, by the
//! anthropic family's rules); the streams come in AWS event-stream frames
//! (`stream`). The model id comes percent-encoded in
//! the path (`us.anthropic.claude-…-v1:0` as `…-v1%3A0`, an inference
//! profile's ARN with its `/` as `%2F`). The client's gateway key comes as
//! a bearer token, what the AWS SDKs send with `AWS_BEARER_TOKEN_BEDROCK`.
//!
//! A call is priced and capped as the model its id names, without the
//! inference profile's geography (`us.`, `eu.`, `global.`, …) or an ARN's
//! prefix, so one model has one name in every cap and report however its
//! clients reach it. Upstream, a call goes to the id the client named,
//! signed with SigV4 for the provider's region (`sign`) or with the
//! provider's Bedrock API key as a bearer token. Errors are in Bedrock's
//! shape: `{"message"}`, the error's name in `x-amzn-ErrorType`.

pub mod request;
mod sign;
pub(super) mod stream;
mod usage;

use std::borrow::Cow;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::Request;

pub(crate) use usage::body_usage;

use super::anthropic;
use super::{Action, Credential, Route};
use crate::api::{Api, Call};
use crate::config::Provider;
use crate::error::GatewayError;
use crate::prices::bedrock_model;
use crate::provider::ProviderKind;
use crate::upstream::Payload;

/// The routes of the family, for messages.
pub(super) const ROUTES: &str = "/model/{modelId}/converse, /converse-stream, /invoke or \
     /invoke-with-response-stream";

/// The family's route for a `POST` to `path`.
pub(super) fn route(path: &str) -> Option<Route> {
    let rest = path.strip_prefix("/model/")?;
    let (id, operation) = rest.split_once('/')?;
    let (api, stream, label) = match operation {
        "converse" => (Api::Converse, false, "/model/{modelId}/converse"),
        "converse-stream" => (Api::Converse, true, "/model/{modelId}/converse-stream"),
        "invoke" => (Api::Messages, false, "/model/{modelId}/invoke"),
        "invoke-with-response-stream" => (
            Api::Messages,
            true,
            "/model/{modelId}/invoke-with-response-stream",
        ),
        _ => return None,
    };
    let id = percent_encoding::percent_decode_str(id)
        .decode_utf8()
        .ok()?;
    if id.is_empty() {
        return None;
    }
    Some(Route {
        family: ProviderKind::Bedrock,
        api,
        action: Action::Call,
        model: Some(id.into_owned()),
        stream: Some(stream),
        sse: false,
        version: String::new(),
        label,
    })
}

/// The gateway key: a bearer token.
pub(super) fn gateway_key(headers: &HeaderMap) -> Option<Cow<'_, str>> {
    crate::directory::presented_key(headers).map(Cow::Borrowed)
}

/// The call of a Bedrock route: Converse by its own rules, `invoke` by
/// Anthropic's (its model in the path).
pub(super) fn parse(route: &Route, body: Bytes) -> Result<Call, GatewayError> {
    let id = route.model.as_deref().unwrap_or_default();
    let mut call = match route.api {
        Api::Converse => request::parse(id, route.stream.unwrap_or(false), body)?,
        _ => anthropic::request::parse(body, Some(id), route.stream)?,
    };
    let model = bedrock_model(id);
    if model != id {
        call.served_as = Some(id.to_owned());
        call.model = model.to_owned();
    }
    Ok(call)
}

/// The provider's request: the id the client named, percent-encoded, under
/// the provider's base URL, signed with SigV4, or with its Bedrock API key.
pub(super) fn upstream_request(
    provider: &Provider,
    credential: &Credential,
    route: &Route,
    served_as: &str,
    headers: &HeaderMap,
    body: Payload,
) -> Result<Request<Payload>, http::Error> {
    // The operation, the last segment of the client's path.
    let operation = route.label.rsplit('/').next().unwrap_or_default();
    let path = format!(
        "/model/{}/{operation}",
        percent_encoding::utf8_percent_encode(served_as, sign::PATH_SEGMENT)
    );
    // Signed whole: the signature covers the body's hash.
    let body = body.to_bytes();
    let mut request =
        crate::upstream::request_to(&provider.base_url, &path, headers, body.clone().into())?;
    let accept = match route.stream {
        Some(true) => "application/vnd.amazon.eventstream",
        _ => "application/json",
    };
    request
        .headers_mut()
        .insert(header::ACCEPT, HeaderValue::from_static(accept));
    match credential {
        Credential::Aws(keys) => {
            let region = provider.aws.as_ref().map_or("", |aws| aws.region.as_str());
            sign::sign(&mut request, keys, region, &body);
        }
        // A Bedrock API key.
        key => {
            let mut value = HeaderValue::try_from(format!("Bearer {}", key.secret()))?;
            value.set_sensitive(true);
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
    }
    Ok(request)
}

/// Whether an answer is an AWS event stream.
pub(super) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/vnd.amazon.eventstream"))
}

#[cfg(test)]
mod tests;
