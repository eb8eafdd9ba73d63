//! Provider families: each API family the gateway speaks is one module
//! here, knowing its routes, where a client puts its gateway key, its
//! request rules, its usage reports (plain and streamed), its stream's
//! framing and the provider's authentication. The proxy path calls them
//! through the functions of this module, each of which only picks the
//! family; adding a family touches no other family.
//!
//! - [`openai`]: OpenAI and every OpenAI-compatible API;
//! - [`anthropic`]: Anthropic's Messages API;
//! - [`gemini`]: Google's Gemini API;
//! - [`vertex`]: Google Cloud's Vertex AI, serving Gemini (by the gemini
//!   rules) and Claude (by the anthropic rules);
//! - [`azure`]: Azure OpenAI, OpenAI's models served from deployments (by
//!   the openai rules);
//! - [`bedrock`]: Amazon Bedrock, serving Claude by Converse and by
//!   Anthropic's Messages inside `invoke`.
//!
//! Error bodies are rendered in each family's shape by `crate::error`.

pub mod anthropic;
pub mod azure;
pub mod bedrock;
mod credentials;
pub mod gemini;
pub mod openai;
mod stream;
pub mod vertex;

use std::borrow::Cow;

use bytes::Bytes;
use http::header::{HeaderMap, CONTENT_TYPE};
use http::{Request, Uri};

pub use credentials::{Credential, Credentials};
pub use stream::{Frames, StreamKind, StreamMeter};

use crate::api::{Api, Call};
use crate::config::Provider;
use crate::error::{GatewayError, Shape};
use crate::prices::ModelPrice;
use crate::provider::ProviderKind;
use crate::upstream::Payload;
use crate::usage::Reported;

/// What a proxied route asks of the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A call, reserved, forwarded and settled.
    Call,
    /// Counting tokens, which the provider does not bill: forwarded
    /// uncharged.
    CountTokens,
}

/// A proxied route, as its family reads the request's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The family whose door the request came by: only its providers can
    /// serve it.
    pub family: ProviderKind,
    pub api: Api,
    pub action: Action,
    /// The model, when the path names it (Gemini, Vertex AI), or the
    /// deployment (Azure).
    pub model: Option<String>,
    /// Whether the call streams, when the path says.
    pub stream: Option<bool>,
    /// A Gemini stream comes as server-sent events (`?alt=sse`), else as
    /// one JSON array.
    pub sse: bool,
    /// The API version of a Google path (`v1beta`, `v1`, `v1beta1`), or
    /// Azure's `api-version` (empty when the request gives none).
    pub(crate) version: String,
    /// The `route` label of the request metrics.
    pub label: &'static str,
}

impl Route {
    /// The shape errors are answered in: Bedrock's on every Bedrock
    /// route, Anthropic's body inside `invoke` included.
    pub fn shape(&self) -> Shape {
        match self.family {
            ProviderKind::Bedrock => Shape::Bedrock,
            _ => self.api.shape(),
        }
    }
}

/// The proxied route of a `POST` to `path`, if it is one.
pub fn route(path: &str, query: Option<&str>) -> Option<Route> {
    openai::route(path)
        .or_else(|| anthropic::route(path))
        .or_else(|| gemini::route(path, query))
        .or_else(|| vertex::route(path, query))
        .or_else(|| azure::route(path, query))
        .or_else(|| bedrock::route(path))
}

/// The gateway key a request presents, where its family's clients send
/// it.
pub fn gateway_key<'r>(
    family: ProviderKind,
    headers: &'r HeaderMap,
    uri: &'r Uri,
) -> Option<Cow<'r, str>> {
    match family {
        ProviderKind::Gemini => gemini::gateway_key(headers, uri),
        ProviderKind::Vertex => vertex::gateway_key(headers),
        ProviderKind::Azure => azure::gateway_key(headers),
        ProviderKind::Bedrock => bedrock::gateway_key(headers),
        ProviderKind::OpenAi | ProviderKind::Anthropic => {
            crate::directory::presented_key(headers).map(Cow::Borrowed)
        }
    }
}

/// Parses and checks a call's body by its route's rules.
pub fn parse(route: &Route, body: Bytes) -> Result<Call, GatewayError> {
    match route.family {
        ProviderKind::Gemini => gemini::parse(route, body),
        ProviderKind::Vertex => vertex::parse(route, body),
        ProviderKind::Azure => azure::parse(route, body),
        ProviderKind::Bedrock => bedrock::parse(route, body),
        ProviderKind::OpenAi | ProviderKind::Anthropic => parse_own_route(route.api, body),
    }
}

/// Names the model a call is priced and capped as, where its route names
/// something else (an Azure deployment).
pub fn price_as(
    providers: &[Provider],
    route: &Route,
    call: &mut Call,
) -> Result<(), GatewayError> {
    match route.family {
        ProviderKind::Azure => azure::price_deployment(providers, call),
        _ => Ok(()),
    }
}

/// A body of `api` as it is read on the API's own route (OpenAI's paths,
/// `/v1/messages`); `generateContent`, whose model is in its path, has
/// none.
pub fn parse_own_route(api: Api, body: Bytes) -> Result<Call, GatewayError> {
    match api {
        Api::Messages => anthropic::request::parse(body, None, None),
        Api::GenerateContent | Api::Converse => Err(GatewayError::BadRequest {
            message: "this API names its model in the path".to_owned(),
            param: None,
            code: None,
        }),
        _ => openai::request::parse(api, body),
    }
}

/// What the call's headers ask for that moves its price: Anthropic's long
/// context, asked for in `anthropic-beta`; on Bedrock's `invoke`, its
/// guardrail, latency and tier headers (refused).
pub fn read_priced_headers(
    route: &Route,
    call: &mut Call,
    headers: &HeaderMap,
) -> Result<(), GatewayError> {
    if route.family == ProviderKind::Bedrock {
        bedrock::request::check_invoke_headers(headers)?;
    }
    if call.api == Api::Messages {
        call.options.long_context |= anthropic::request::long_context(headers)?;
    }
    Ok(())
}

/// What the call's bound needs of its model's price once it is known.
pub fn bound_by_price(call: &mut Call, price: &ModelPrice) {
    if call.api == Api::GenerateContent {
        gemini::request::bound_thinking(call, price);
    }
}

/// The provider serving `model` on `route`: the first of the route's
/// family whose patterns match (on Azure, the first that maps the
/// deployment, `served_as`). A model only another family serves is refused
/// naming the routes that reach it.
pub fn provider_for<'c>(
    providers: &'c [Provider],
    route: &Route,
    model: &str,
    served_as: Option<&str>,
) -> Result<&'c Provider, GatewayError> {
    if let (ProviderKind::Azure, Some(deployment)) = (route.family, served_as) {
        return providers
            .iter()
            .find(|p| p.kind == ProviderKind::Azure && p.deployment_model(deployment).is_some())
            .ok_or_else(|| GatewayError::UnknownDeployment {
                deployment: deployment.to_owned(),
            });
    }
    let matching = |provider: &&Provider| provider.models.iter().any(|p| p.matches(model));
    if let Some(provider) = providers
        .iter()
        .filter(matching)
        .find(|provider| provider.kind == route.family)
    {
        return Ok(provider);
    }
    match providers.iter().find(matching) {
        Some(other) => Err(GatewayError::BadRequest {
            message: format!(
                "model `{model}` is not served on this route: call {}",
                routes_of(other.kind)
            ),
            param: Some("model"),
            code: None,
        }),
        None => Err(GatewayError::UnknownModel {
            model: model.to_owned(),
        }),
    }
}

/// The routes that reach a provider of `kind`, for messages.
fn routes_of(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi => openai::ROUTES,
        ProviderKind::Anthropic => anthropic::ROUTES,
        ProviderKind::Gemini => gemini::ROUTES,
        ProviderKind::Vertex => vertex::ROUTES,
        ProviderKind::Azure => azure::ROUTES,
        ProviderKind::Bedrock => bedrock::ROUTES,
    }
}

/// The provider's request for a call (or a token count) on `route`: the
/// provider's path and credential in place of the client's. `model` is the
/// name the provider serves it under (an Azure deployment's name).
pub fn upstream_request(
    provider: &Provider,
    credential: &Credential,
    route: &Route,
    model: &str,
    headers: &HeaderMap,
    body: Payload,
) -> Result<Request<Payload>, http::Error> {
    match provider.kind {
        ProviderKind::OpenAi => {
            openai::upstream_request(provider, credential, route, headers, body)
        }
        ProviderKind::Anthropic => {
            anthropic::upstream_request(provider, credential, route, headers, body)
        }
        ProviderKind::Gemini => {
            gemini::upstream_request(provider, credential, route, model, headers, body)
        }
        ProviderKind::Vertex => {
            vertex::upstream_request(provider, credential, route, model, headers, body)
        }
        ProviderKind::Azure => {
            azure::upstream_request(provider, credential, route, model, headers, body)
        }
        ProviderKind::Bedrock => {
            bedrock::upstream_request(provider, credential, route, model, headers, body)
        }
    }
}

/// The usage of a plain (non-streamed) response body of a call to `api`;
/// `None` when the body is not JSON or carries no usage.
pub fn body_usage(api: Api, body: &[u8]) -> Option<Reported> {
    match api {
        Api::ChatCompletions | Api::Completions | Api::Responses | Api::Embeddings => {
            openai::body_usage(api, body)
        }
        Api::Messages => anthropic::body_usage(body),
        Api::GenerateContent => gemini::body_usage(body),
        Api::Converse => bedrock::body_usage(body),
    }
}

/// How the stream of `call` on `route` is read; `None` for a call that
/// does not stream.
pub fn stream_kind(route: &Route, call: &Call) -> Option<StreamKind> {
    if !call.stream {
        return None;
    }
    if route.family == ProviderKind::Bedrock && call.api == Api::Messages {
        return Some(StreamKind::BedrockInvoke);
    }
    Some(match call.api {
        Api::Responses => StreamKind::OpenAiResponses,
        Api::Messages => StreamKind::AnthropicMessages,
        Api::GenerateContent => StreamKind::Gemini {
            sse: route.sse,
            candidates: call.choices,
        },
        Api::ChatCompletions | Api::Completions | Api::Embeddings => StreamKind::OpenAiChat {
            hide_usage_chunk: call.hide_usage_chunk,
        },
        Api::Converse => StreamKind::BedrockConverse,
    })
}

/// Whether a successful answer to a streamed call is the stream: an event
/// stream, or Gemini's JSON array (sent as `application/json`).
pub fn is_stream(route: &Route, headers: &HeaderMap) -> bool {
    let event_stream = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    event_stream
        || (route.api == Api::GenerateContent && !route.sse)
        || (route.family == ProviderKind::Bedrock && bedrock::is_event_stream(headers))
}

#[cfg(test)]
mod tests;
