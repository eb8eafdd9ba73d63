//! What the admin API shows of a key or an org: its settings, where it
//! comes from, and its budget now (what `GET /v1/budget` shows for it).

use serde_json::{json, Value};

use crate::budget::{Scope, ScopeKind};
use crate::directory::{KeyEntry, OrgEntry};
use crate::endpoints::budget::scope_json;
use crate::gateway::Gateway;
use crate::money::Threshold;

/// A key, as the admin API shows it (docs/admin.md).
pub async fn key(gateway: &Gateway, entry: &KeyEntry) -> Value {
    let config = &entry.config;
    let scope = Scope {
        kind: ScopeKind::Key,
        id: config.id.clone(),
        cap: config.cap,
        period: config.period,
    };
    let budget = budget(gateway, &scope).await;
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
        "budget": budget(gateway, &scope).await,
    })
}

/// Thresholds as written.
fn thresholds(alert_at: &[Threshold]) -> Vec<String> {
    alert_at.iter().map(|t| t.as_str().to_owned()).collect()
}

/// The scope's budget now, or `null` while the store cannot say: a list
/// of keys stays readable when the counters are not.
async fn budget(gateway: &Gateway, scope: &Scope) -> Value {
    scope_json(gateway, scope).await.unwrap_or(Value::Null)
}
