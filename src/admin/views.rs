//! What the admin API shows of a key or an org: its settings (its model
//! groups, rate limits and customer template as written), where it comes
//! from, and its budget now (what `GET /v1/budget` shows for it, its model
//! groups' money included).

use serde_json::{json, Value};

use crate::budget::{Scope, ScopeKind};
use crate::config::Limits;
use crate::directory::{KeyEntry, OrgEntry};
use crate::endpoints::budget::budget_json;
use crate::gateway::Gateway;
use crate::money::{format_usd, Threshold};

/// A key, as the admin API shows it (docs/admin.md).
pub async fn key(gateway: &Gateway, entry: &KeyEntry) -> Value {
    let config = &entry.config;
    let scope = Scope {
        kind: ScopeKind::Key,
        id: config.id.clone(),
        cap: config.cap,
        period: config.period,
    };
    let budget = budget(gateway, &scope, &config.limits).await;
    let models = config.models.as_ref().map(|patterns| {
        patterns
            .iter()
            .map(|p| p.as_str().to_owned())
            .collect::<Vec<_>>()
    });
    let (created_at, metadata, on_insufficient, alert_at) = match &entry.api {
        Some(stored) => (
            Some(stored.doc.created_at.clone()),
            Value::Object(stored.doc.metadata.clone()),
            stored.doc.on_insufficient.clone(),
            stored.doc.alert_at.clone(),
        ),
        None => (
            None,
            json!({}),
            config.on_insufficient.as_str().to_owned(),
            thresholds(&config.alert_at),
        ),
    };
    // The customer template: money as written for an API key (the config
    // file's is shown from its µUSD), the period as written, or, for a
    // config key, the one its cap counts in.
    let template = &config.customer;
    let (customer_cap_usd, customer_period) = match &entry.api {
        Some(stored) => (
            stored.doc.customer_cap_usd.clone(),
            stored.doc.customer_period.clone(),
        ),
        None => (
            template.cap.map(format_usd),
            template.cap.map(|_| template.period.as_str().to_owned()),
        ),
    };
    json!({
        "id": config.id,
        "org": config.org,
        "cap_usd_micros": config.cap,
        "period": config.period.as_str(),
        "models": models,
        "disabled": entry.disabled,
        "expires_at": entry.expires_at.map(crate::directory::format_time),
        "created_at": created_at,
        "source": entry.source().as_str(),
        "metadata": metadata,
        "on_insufficient": on_insufficient,
        "alert_at": alert_at,
        "model_caps": model_caps(&config.limits),
        "rpm": config.limits.rpm,
        "tpm": config.limits.tpm,
        "customer_cap_usd": customer_cap_usd,
        "customer_cap_usd_micros": template.cap,
        "customer_period": customer_period,
        "customer_rpm": template.rpm,
        "customer_tpm": template.tpm,
        "customer_from": template.from.as_str(),
        "customer_required": template.required,
        "budget": budget,
    })
}

/// An org, as the admin API shows it (docs/admin.md).
pub async fn org(gateway: &Gateway, entry: &OrgEntry) -> Value {
    let config = &entry.config;
    let scope = Scope {
        kind: ScopeKind::Org,
        id: config.id.clone(),
        cap: config.cap,
        period: config.period,
    };
    json!({
        "id": config.id,
        "cap_usd_micros": config.cap,
        "period": config.period.as_str(),
        "created_at": entry.api.as_ref().map(|stored| stored.doc.created_at.clone()),
        "source": entry.source().as_str(),
        "alert_at": thresholds(&config.alert_at),
        "model_caps": model_caps(&config.limits),
        "rpm": config.limits.rpm,
        "tpm": config.limits.tpm,
        "budget": budget(gateway, &scope, &config.limits).await,
    })
}

/// Thresholds as written.
fn thresholds(alert_at: &[Threshold]) -> Vec<String> {
    alert_at.iter().map(|t| t.as_str().to_owned()).collect()
}

/// Model groups as written, each with its cap in µUSD too; every field is
/// present (`null` when not set).
fn model_caps(limits: &Limits) -> Value {
    limits
        .model_caps
        .iter()
        .map(|group| {
            json!({
                "name": group.spec.name,
                "models": group.spec.models,
                "cap_usd": group.spec.cap_usd,
                "cap_usd_micros": group.cap,
                "period": group.spec.period,
                "rpm": group.spec.rpm,
                "tpm": group.spec.tpm,
            })
        })
        .collect()
}

/// The scope's budget now, its model groups' included, or `null` while the
/// store cannot say: a list of keys stays readable when the counters are
/// not.
async fn budget(gateway: &Gateway, scope: &Scope, limits: &Limits) -> Value {
    budget_json(gateway, scope, limits)
        .await
        .unwrap_or(Value::Null)
}
