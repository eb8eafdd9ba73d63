//! `POST /v1/messages/count_tokens`: Anthropic's token counting, which the
//! provider does not bill. The call is checked like a proxied one — the
//! gateway key, a bounded body of unambiguous JSON, the model on the key's
//! allow-list and routed to an Anthropic provider — then forwarded with
//! the provider's credential, and the provider's answer is passed back
//! unchanged. Nothing is reserved, charged or written to the ledger.

use std::sync::Arc;

use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::time::timeout;

use super::admit::{provider_key, read_body};
use crate::api::{check_api_matches, parse_unambiguous, Api};
use crate::body::{close_connection, drain, full, Body};
use crate::error::{GatewayError, Shape};
use crate::gateway::Gateway;
use crate::upstream;

/// The provider's route.
pub const PATH: &str = "/v1/messages/count_tokens";

/// The largest answer read back: a count is a few bytes.
const MAX_ANSWER_BYTES: usize = 1 << 20;

pub async fn handle(gateway: &Arc<Gateway>, request: Request<Incoming>) -> Response<Body> {
    let (parts, mut body) = request.into_parts();
    match count(gateway, &parts.headers, &mut body).await {
        Ok(response) => response,
        Err(error) => {
            tracing::info!(status = error.status().as_u16(), %error, "count_tokens refused");
            let mut response = error.into_response(Shape::Anthropic, "");
            if !drain(&mut body).await {
                close_connection(&mut response);
            }
            response
        }
    }
}

async fn count(
    gateway: &Gateway,
    headers: &HeaderMap,
    body: &mut Incoming,
) -> Result<Response<Body>, GatewayError> {
    let key = gateway.directory.authenticate(headers)?;
    let body = read_body(headers, body, gateway.config.server.max_request_bytes).await?;
    let model = model_of(&body)?;
    if !key.allows_model(&model) {
        return Err(GatewayError::ModelNotAllowed {
            model,
            key: key.id.clone(),
        });
    }
    let provider =
        gateway
            .config
            .provider_for(&model)
            .ok_or_else(|| GatewayError::UnknownModel {
                model: model.clone(),
            })?;
    check_api_matches(Api::Messages, provider.kind, &model)?;
    let provider_key = provider_key(provider)?;
    // Counting tokens is free: nothing is charged either way.
    let unreachable = || GatewayError::UpstreamUnreachable {
        provider: provider.name.clone(),
        charged: None,
    };
    let upstream = upstream::request_to(provider, provider_key, PATH, headers, body)
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

/// The request's model: a non-empty string in a JSON object that names no
/// key twice, as for a proxied call.
fn model_of(body: &[u8]) -> Result<String, GatewayError> {
    let bad = |message: String, param| GatewayError::BadRequest {
        message,
        param,
        code: None,
    };
    let value = parse_unambiguous(body)
        .map_err(|e| bad(format!("the request body is not valid JSON: {e}"), None))?;
    let Value::Object(map) = value else {
        return Err(bad(
            "the request body must be a JSON object".to_owned(),
            None,
        ));
    };
    match map.get("model") {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        Some(_) => Err(bad(
            "`model` must be a non-empty string".to_owned(),
            Some("model"),
        )),
        None => Err(bad("`model` is required".to_owned(), Some("model"))),
    }
}
