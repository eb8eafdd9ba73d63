//! `GET /v1/budget`: the calling key's scopes in their current periods —
//! cap, spent, reserved, remaining and when the period resets.

use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{json_response, Body};
use crate::budget::Scope;
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::metrics::StoreOp;

pub async fn show(gateway: &Gateway, headers: &HeaderMap) -> Result<Response<Body>, GatewayError> {
    let key = gateway.directory.authenticate(headers)?;
    let (key_scope, org_scope) = gateway.directory.scopes(&key);
    let key_json = scope_json(gateway, &key_scope).await?;
    let org_json = match &org_scope {
        Some(scope) => scope_json(gateway, scope).await?,
        None => Value::Null,
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"key": key_json, "org": org_json}),
    ))
}

pub async fn scope_json(gateway: &Gateway, scope: &Scope) -> Result<Value, GatewayError> {
    let state = gateway
        .metrics
        .time(StoreOp::State, gateway.store.scope_state(scope));
    let state = state.await.map_err(|error| {
        tracing::error!(%error, "budget store error");
        GatewayError::StoreUnavailable
    })?;
    let remaining = scope
        .cap
        .saturating_sub(state.spent.saturating_add(state.reserved));
    Ok(json!({
        "id": scope.id,
        "period": scope.period.as_str(),
        "period_id": state.period_id,
        "cap_usd_micros": scope.cap,
        "spent_usd_micros": state.spent,
        "reserved_usd_micros": state.reserved,
        "remaining_usd_micros": remaining,
        "resets_at": state.resets_at.map(|at| at.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
    }))
}
