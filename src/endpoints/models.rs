//! `GET /v1/models` and `GET /v1/models/{id}`: the models the calling key
//! may use — priced, routed to a provider and on the key's allow-list — in
//! the caller's API shape.

use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{json_response, Body};
use crate::config::KeyConfig;
use crate::error::{GatewayError, Shape};
use crate::gateway::Gateway;

/// `GET /v1/models`.
pub fn list(
    gateway: &Gateway,
    headers: &HeaderMap,
    shape: Shape,
) -> Result<Response<Body>, GatewayError> {
    let key = gateway.directory.authenticate(headers)?;
    let data: Vec<Value> = gateway
        .config
        .prices
        .models()
        .filter_map(|(model, _)| available(gateway, &key, model))
        .map(|(model, provider)| entry(shape, model, provider))
        .collect();
    let body = match shape {
        Shape::OpenAi => json!({"object": "list", "data": data}),
        Shape::Anthropic => {
            let first = data.first().and_then(|m| m.get("id")).cloned();
            let last = data.last().and_then(|m| m.get("id")).cloned();
            json!({"data": data, "has_more": false, "first_id": first, "last_id": last})
        }
    };
    Ok(json_response(StatusCode::OK, &body))
}

/// `GET /v1/models/{id}`: the one model, or 404 when the key may not use
/// it (unpriced, no provider, or not on its allow-list) — as a provider
/// answers for a model the account cannot see.
pub fn retrieve(
    gateway: &Gateway,
    headers: &HeaderMap,
    shape: Shape,
    id: &str,
) -> Result<Response<Body>, GatewayError> {
    let key = gateway.directory.authenticate(headers)?;
    let (model, provider) =
        available(gateway, &key, id).ok_or_else(|| GatewayError::UnknownModel {
            model: id.to_owned(),
        })?;
    Ok(json_response(
        StatusCode::OK,
        &entry(shape, model, provider),
    ))
}

/// The model and its provider's name, if `key` may use `model`.
fn available<'g>(
    gateway: &'g Gateway,
    key: &KeyConfig,
    model: &'g str,
) -> Option<(&'g str, &'g str)> {
    if !key.allows_model(model) {
        return None;
    }
    gateway.config.prices.get(model)?;
    let provider = gateway.config.provider_for(model)?;
    Some((model, provider.name.as_str()))
}

/// One model in the caller's shape.
fn entry(shape: Shape, model: &str, provider: &str) -> Value {
    match shape {
        Shape::OpenAi => {
            json!({"id": model, "object": "model", "created": 0, "owned_by": provider})
        }
        Shape::Anthropic => json!({
            "type": "model",
            "id": model,
            "display_name": model,
            "created_at": "1970-01-01T00:00:00Z",
        }),
    }
}
