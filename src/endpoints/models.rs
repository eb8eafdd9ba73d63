//! `GET /v1/models` and `GET /v1/models/{id}` (and Google's
//! `GET /v1beta/models[/{id}]`): the models the calling key may use —
//! priced, routed to a provider and on the key's allow-list — in the
//! caller's API shape. Google's lists only the models a Gemini API
//! provider serves.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{json_response, Body};
use crate::config::KeyConfig;
use crate::error::{GatewayError, Shape};
use crate::gateway::Gateway;
use crate::prices::ModelPrice;
use crate::provider::ProviderKind;

/// `GET /v1/models`.
pub fn list(
    gateway: &Gateway,
    presented: Option<&str>,
    shape: Shape,
) -> Result<Response<Body>, GatewayError> {
    let key = gateway.directory.authenticate_key(presented)?;
    let data: Vec<Value> = gateway
        .config
        .prices
        .models()
        .filter_map(|(model, _)| available(gateway, &key, model, shape))
        .map(|(model, provider, price)| entry(shape, model, provider, price))
        .collect();
    let body = match shape {
        // Bedrock's model list is its control plane's, not served here.
        Shape::OpenAi | Shape::Bedrock => json!({"object": "list", "data": data}),
        Shape::Google => json!({"models": data}),
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
    presented: Option<&str>,
    shape: Shape,
    id: &str,
) -> Result<Response<Body>, GatewayError> {
    let key = gateway.directory.authenticate_key(presented)?;
    // Google's clients may name a model with its resource prefix.
    let id = match shape {
        Shape::Google => id.strip_prefix("models/").unwrap_or(id),
        _ => id,
    };
    let (model, provider, price) =
        available(gateway, &key, id, shape).ok_or_else(|| GatewayError::UnknownModel {
            model: id.to_owned(),
        })?;
    Ok(json_response(
        StatusCode::OK,
        &entry(shape, model, provider, price),
    ))
}

/// The model, its provider's name and its price, if `key` may use
/// `model` in the caller's shape.
fn available<'g>(
    gateway: &'g Gateway,
    key: &KeyConfig,
    model: &'g str,
    shape: Shape,
) -> Option<(&'g str, &'g str, &'g ModelPrice)> {
    if !key.allows_model(model) {
        return None;
    }
    let price = gateway.config.prices.get(model)?;
    let provider = match shape {
        Shape::Google => gateway
            .config
            .provider_of_kind(ProviderKind::Gemini, model)?,
        _ => gateway.config.provider_for(model)?,
    };
    Some((model, provider.name.as_str(), price))
}

/// One model in the caller's shape.
fn entry(shape: Shape, model: &str, provider: &str, price: &ModelPrice) -> Value {
    match shape {
        Shape::Google => json!({
            "name": format!("models/{model}"),
            "displayName": model,
            "description": format!("{model}, served through provider {provider}"),
            "inputTokenLimit": price.context_window,
            "outputTokenLimit": price.max_output_tokens,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
            "thinking": price.reasoning,
        }),
        Shape::OpenAi | Shape::Bedrock => {
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
