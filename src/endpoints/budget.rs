//! `GET /v1/budget`: the calling key's scopes in their current periods —
//! cap, spent, reserved, remaining and when the period resets — each with
//! its model groups' money (`model_caps`); when the request names an agent
//! run (`x-tollgate-run`), that run's; and when it names a customer
//! (`x-tollgate-customer`), that customer's under the key's template.

use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{json_response, Body};
use crate::budget::caps::{customer_scope_id, model_scope_id};
use crate::budget::Books;
use crate::budget::{RunScope, RunState, Scope, ScopeKind, ScopeState};
use crate::config::{KeyConfig, Limits};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::metrics::StoreOp;
use crate::proxy::customer::header_customer;
use crate::proxy::run_scope;

pub async fn show(gateway: &Gateway, headers: &HeaderMap) -> Result<Response<Body>, GatewayError> {
    let key = gateway.directory.authenticate(headers)?;
    let run = run_scope(headers, &key.id)?;
    let customer = header_customer(headers)?;
    let (key_scope, _) = gateway.directory.scopes(&key);
    let key_json = budget_json(gateway, &key_scope, &key.limits).await?;
    // The org's cap and its groups from one snapshot.
    let snapshot = gateway.directory.snapshot();
    let org = key.org.as_deref().and_then(|id| snapshot.orgs.get(id));
    let org_json = match (snapshot.org_scope(&key), org) {
        (Some(scope), Some(org)) => budget_json(gateway, &scope, &org.config.limits).await?,
        _ => Value::Null,
    };
    let mut body = json!({"key": key_json, "org": org_json});
    if let Some(run) = run {
        body["run"] = run_json(gateway, &run).await?;
    }
    if let Some(customer) = customer {
        let mut shown = json!({"id": customer});
        let budget = customer_budget_json(gateway, &key, &customer).await?;
        for field in BUDGET_FIELDS {
            shown[field] = budget.get(field).cloned().unwrap_or(Value::Null);
        }
        body["customer"] = shown;
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// The fields of a scope's money, as [`scope_json`] shows them after `id`.
const BUDGET_FIELDS: [&str; 7] = [
    "period",
    "period_id",
    "cap_usd_micros",
    "spent_usd_micros",
    "reserved_usd_micros",
    "remaining_usd_micros",
    "resets_at",
];

/// The money of `key`'s customer `customer` now, under the key's customer
/// template: `period`, `period_id`, `cap_usd_micros`, `spent_usd_micros`,
/// `reserved_usd_micros`, `remaining_usd_micros`, `resets_at`; `null` when
/// the template has no money cap (then no counter keeps the customer's
/// spend: see the ledger and `group_by=customer`).
pub async fn customer_budget_json(
    gateway: &Gateway,
    key: &KeyConfig,
    customer: &str,
) -> Result<Value, GatewayError> {
    let Some(cap) = key.customer.cap else {
        return Ok(Value::Null);
    };
    let scope = Scope {
        kind: ScopeKind::Customer,
        id: customer_scope_id(&key.id, customer),
        cap,
        period: key.customer.period,
    };
    let mut budget = scope_json(gateway, &scope).await?;
    if let Value::Object(fields) = &mut budget {
        fields.remove("id");
    }
    Ok(budget)
}

/// A key's or an org's budget: its own scope ([`scope_json`]) and, under
/// `model_caps`, each of its model groups with a money cap
/// ([`model_caps_json`]). What `GET /v1/budget` shows under `key` and
/// `org`, and the admin API under a KEY's or an ORG's `budget`.
pub async fn budget_json(
    gateway: &Gateway,
    scope: &Scope,
    limits: &Limits,
) -> Result<Value, GatewayError> {
    let mut budget = scope_json(gateway, scope).await?;
    budget["model_caps"] = model_caps_json(gateway, scope.kind, &scope.id, limits).await?;
    Ok(budget)
}

/// The money state of each model group of the key or org `owner_id` that
/// has a money cap, in the order written: `name`, `models`, `period`,
/// `period_id`, `cap_usd_micros`, `spent_usd_micros`,
/// `reserved_usd_micros`, `remaining_usd_micros`, `resets_at`. A group
/// with rate limits only has no money to show.
pub async fn model_caps_json(
    gateway: &Gateway,
    owner: ScopeKind,
    owner_id: &str,
    limits: &Limits,
) -> Result<Value, GatewayError> {
    let mut groups = Vec::new();
    for group in &limits.model_caps {
        let Some(cap) = group.cap else { continue };
        let scope = Scope {
            kind: ScopeKind::Model,
            id: model_scope_id(owner, owner_id, &group.name),
            cap,
            period: group.period,
        };
        let state = read_state(gateway, &scope).await?;
        let mut shown = state_json(&scope, &state);
        let models: Vec<&str> = group.models.iter().map(|p| p.as_str()).collect();
        if let Value::Object(fields) = &mut shown {
            fields.remove("id");
            fields.insert("name".to_owned(), json!(group.name));
            fields.insert("models".to_owned(), json!(models));
        }
        groups.push(shown);
    }
    Ok(Value::Array(groups))
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

/// One scope's money now: `id`, `period`, `period_id`, `cap_usd_micros`,
/// `spent_usd_micros`, `reserved_usd_micros`, `remaining_usd_micros`,
/// `resets_at`.
pub async fn scope_json(gateway: &Gateway, scope: &Scope) -> Result<Value, GatewayError> {
    let state = read_state(gateway, scope).await?;
    Ok(state_json(scope, &state))
}

async fn read_state(gateway: &Gateway, scope: &Scope) -> Result<ScopeState, GatewayError> {
    let state = gateway
        .metrics
        .time(StoreOp::State, gateway.store.scope_state(scope));
    state.await.map_err(|error| {
        tracing::error!(%error, "budget store error");
        GatewayError::StoreUnavailable
    })
}

fn state_json(scope: &Scope, state: &ScopeState) -> Value {
    let remaining = scope
        .cap
        .saturating_sub(state.spent.saturating_add(state.reserved));
    json!({
        "id": scope.id,
        "period": scope.period.as_str(),
        "period_id": state.period_id,
        "cap_usd_micros": scope.cap,
        "spent_usd_micros": state.spent,
        "reserved_usd_micros": state.reserved,
        "remaining_usd_micros": remaining,
        "resets_at": state.resets_at.map(|at| at.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
    })
}
