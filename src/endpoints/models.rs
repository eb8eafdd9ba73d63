//! `GET /v1/models`: the models the calling key may use — priced, routed
//! to a provider and on the key's allow-list — in the caller's API shape.

use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{json_response, Body};
use crate::error::{GatewayError, Shape};
use crate::gateway::Gateway;

pub fn list(
    gateway: &Gateway,
    headers: &HeaderMap,
    shape: Shape,
) -> Result<Response<Body>, GatewayError> {
    let key = gateway.keys.authenticate(headers)?;
    let available = gateway
        .config
        .prices
        .models()
        .filter(|(model, _)| key.allows_model(model))
        .filter_map(|(model, _)| gateway.config.provider_for(model).map(|p| (model, p)));
    let body = match shape {
        Shape::OpenAi => {
            let data: Vec<Value> = available
                .map(|(model, provider)| json!({"id": model, "object": "model", "created": 0, "owned_by": provider.name}))
                .collect();
            json!({"object": "list", "data": data})
        }
        Shape::Anthropic => {
            let data: Vec<Value> = available
                .map(|(model, _)| {
                    json!({"type": "model", "id": model, "display_name": model, "created_at": "1970-01-01T00:00:00Z"})
                })
                .collect();
            let first = data.first().and_then(|m| m.get("id")).cloned();
            let last = data.last().and_then(|m| m.get("id")).cloned();
            json!({"data": data, "has_more": false, "first_id": first, "last_id": last})
        }
    };
    Ok(json_response(StatusCode::OK, &body))
}
