//! `GET /v1/budget`: the calling key's scopes in their current periods —
//! cap, spent, reserved, remaining and when the period resets — and, when
//! the request names an agent run (`x-tollgate-run`), that run's.

use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{json_response, Body};
use crate::budget::Books;
use crate::budget::{RunScope, RunState, Scope};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::metrics::StoreOp;
use crate::proxy::run_scope;

pub async fn show(gateway: &Gateway, headers: &HeaderMap) -> Result<Response<Body>, GatewayError> {
    let key = gateway.directory.authenticate(headers)?;
    let run = run_scope(headers, &key.id)?;
    let (key_scope, org_scope) = gateway.directory.scopes(&key);
    let key_json = scope_json(gateway, &key_scope).await?;
    let org_json = match &org_scope {
        Some(scope) => scope_json(gateway, scope).await?,
        None => Value::Null,
    };
    let mut body = json!({"key": key_json, "org": org_json});
    if let Some(run) = run {
        body["run"] = run_json(gateway, &run).await?;
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// The run as the store remembers it; a run not called yet shows the cap
/// the request names and nothing spent. `cap_usd_micros` and
/// `remaining_usd_micros` are `null` for a run without a cap.
async fn run_json(gateway: &Gateway, run: &RunScope) -> Result<Value, GatewayError> {
    let state = gateway
        .metrics
        .time(StoreOp::State, gateway.store.run_state(&run.id));
    let state = state.await.map_err(|error| {
        tracing::error!(%error, "budget store error");
        GatewayError::StoreUnavailable
    })?;
    let state = state.unwrap_or(RunState {
        cap: run.cap,
        spent: 0,
        reserved: 0,
    });
    let committed = state.spent.saturating_add(state.reserved);
    Ok(json!({
        "id": run.run_id(),
        "period": "total",
        "period_id": "total",
        "cap_usd_micros": state.cap,
        "spent_usd_micros": state.spent,
        "reserved_usd_micros": state.reserved,
        "remaining_usd_micros": state.cap.map(|cap| cap.saturating_sub(committed)),
        "resets_at": Value::Null,
    }))
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
