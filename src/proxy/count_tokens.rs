//! Counting tokens, which the providers do not bill: Anthropic's
//! `POST /v1/messages/count_tokens` and Google's `:countTokens`. The call
//! is checked like a proxied one — the gateway key, a bounded body of
//! unambiguous JSON, the model on the key's allow-list and routed to a
//! provider of the route's family — then forwarded with the provider's
//! credential, and the provider's answer is passed back unchanged.
//! Nothing is reserved, charged or written to the ledger.

use std::sync::Arc;

use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::time::timeout;

use super::admit::read_body;
use crate::api::parse_unambiguous;
use crate::body::{close_connection, drain, full, Body};
use crate::error::GatewayError;
use crate::family::{self, Route};
use crate::gateway::Gateway;
use crate::upstream;

/// The largest answer read back: a count is a few bytes.
const MAX_ANSWER_BYTES: usize = 1 << 20;

pub async fn handle(
    gateway: &Arc<Gateway>,
    route: Route,
    request: Request<Incoming>,
) -> Response<Body> {
    let (parts, mut body) = request.into_parts();
    match count(gateway, &route, &parts, &mut body).await {
        Ok(response) => response,
        Err(error) => {
            tracing::info!(status = error.status().as_u16(), %error, "count_tokens refused");
            let mut response = error.into_response(route.shape(), "");
            if !drain(&mut body).await {
                close_connection(&mut response);
            }
            response
        }
    }
}

async fn count(
    gateway: &Gateway,
    route: &Route,
    parts: &http::request::Parts,
    body: &mut Incoming,
) -> Result<Response<Body>, GatewayError> {
    let headers = &parts.headers;
    let presented = family::gateway_key(route.family, headers, &parts.uri);
    let key = gateway.directory.authenticate_key(presented.as_deref())?;
    let body = read_body(headers, body, gateway.config.server.max_request_bytes).await?;
    let model = match &route.model {
        Some(model) => {
            object_of(&body)?;
            model.clone()
        }
        None => model_of(&body)?,
    };
    if !key.allows_model(&model) {
        return Err(GatewayError::ModelNotAllowed {
            model,
            key: key.id.clone(),
        });
    }
    let provider = family::provider_for(&gateway.config.providers, route, &model, None)?;
    let credential = gateway.credentials.of(provider).await?;
    // Counting tokens is free: nothing is charged either way.
    let unreachable = || GatewayError::UpstreamUnreachable {
        provider: provider.name.clone(),
        charged: None,
    };
    let upstream = family::upstream_request(
        provider,
        &credential,
        route,
        &model,
        headers,
        body.into(),
    )
    .map_err(|error| {
        tracing::error!(provider = %provider.name, %error, "could not build the provider request");
        unreachable()
    })?;
    let limit = gateway.config.server.upstream_timeout;
    let timed_out = || GatewayError::UpstreamTimeout {
        provider: provider.name.clone(),
        secs: limit.as_secs(),
        charged: None,
    };
    let exchange = async {
        let response = gateway.client.request(upstream).await.map_err(|error| {
            tracing::warn!(provider = %provider.name, %error, "provider unreachable");
            unreachable()
        })?;
        let (mut head, body) = response.into_parts();
        let bytes = Limited::new(body, MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|error| {
                tracing::warn!(provider = %provider.name, %error, "provider answer cut");
                unreachable()
            })?
            .to_bytes();
        upstream::strip_response_headers(&mut head.headers);
        Ok(Response::from_parts(head, full(bytes)))
    };
    timeout(limit, exchange).await.map_err(|_| timed_out())?
}

fn bad(message: String, param: Option<&'static str>) -> GatewayError {
    GatewayError::BadRequest {
        message,
        param,
        code: None,
    }
}

/// The body as a JSON object that names no key twice, as for a proxied
/// call.
fn object_of(body: &[u8]) -> Result<serde_json::Map<String, Value>, GatewayError> {
    let value = parse_unambiguous(body)
        .map_err(|e| bad(format!("the request body is not valid JSON: {e}"), None))?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(bad(
            "the request body must be a JSON object".to_owned(),
            None,
        )),
    }
}

/// The request's model, for a route that does not name it in its path.
fn model_of(body: &[u8]) -> Result<String, GatewayError> {
    match object_of(body)?.get("model") {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        Some(_) => Err(bad(
            "`model` must be a non-empty string".to_owned(),
            Some("model"),
        )),
        None => Err(bad("`model` is required".to_owned(), Some("model"))),
    }
}
