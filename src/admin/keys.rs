//! `/admin/v1/keys`: gateway keys made, listed, changed, rotated, disabled
//! and deleted at run time. A key's secret is shown once, when it is made
//! or rotated, and kept only as its SHA-256.

use chrono::Utc;
use http::Response;
use serde_json::{json, Value};

use super::fields::{required, Fields};
use super::{change, created, matching, no_content, ok, page, views, AdminError, Call};
use crate::body::Body;
use crate::budget::records::RecordKind;
use crate::config::hash_key;
use crate::directory::documents::KeyDoc;
use crate::directory::{format_time, key_entry};

const KIND: RecordKind = RecordKind::Key;

const CREATE_FIELDS: &str = "id, org, cap_usd, period, models, expires_at, metadata, \
                             on_insufficient, alert_at";
const UPDATE_FIELDS: &str = "cap_usd, period, models, disabled, expires_at, metadata, \
                             on_insufficient, alert_at";

/// `GET /admin/v1/keys[?org=ID][&prefix=TEXT][&limit=N][&after=ID]`: the
/// keys whose id starts with `prefix`, a page at a time; `next` pages on
/// within the same search.
pub async fn list(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let limit = call.limit()?;
    let prefix = call.prefix()?;
    let org = call.query.get("org");
    let snapshot = call.gateway.directory.snapshot();
    let entries = matching(&snapshot.keys, prefix, call.query.get("after"))
        .filter(|(_, entry)| org.is_none_or(|org| entry.config.org.as_ref() == Some(org)));
    let (entries, next) = page(entries, None, limit);
    let mut keys = Vec::with_capacity(entries.len());
    for entry in entries {
        keys.push(views::key(call.gateway, entry).await);
    }
    Ok(ok(&json!({"keys": keys, "next": next})))
}

/// `GET /admin/v1/keys/{id}`
pub async fn show(call: &Call<'_>, id: &str) -> Result<Response<Body>, AdminError> {
    let snapshot = call.gateway.directory.snapshot();
    let entry = snapshot
        .keys
        .get(id)
        .ok_or_else(|| AdminError::no_such(KIND, id))?;
    Ok(ok(&views::key(call.gateway, entry).await))
}

/// `POST /admin/v1/keys` → 201 `{"key", "secret"}`
pub async fn create(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let mut fields = Fields::new(call.json()?);
    let id = match fields.id("id")? {
        Some(id) => id,
        None => format!("key-{}", random_hex(8)?),
    };
    let org = fields.id("org")?;
    let cap = required(fields.usd("cap_usd")?, "cap_usd")?;
    let period = required(fields.period()?, "period")?;
    let models = fields.models()?;
    let expires_at = fields.time("expires_at")?;
    let metadata = fields.metadata()?.unwrap_or_default();
    let on_insufficient = fields
        .on_insufficient()?
        .unwrap_or_else(|| "refuse".to_owned());
    let alert_at = fields.alert_at()?.unwrap_or_default();
    fields.finish(CREATE_FIELDS)?;

    if let Some(org) = &org {
        if !call.gateway.directory.snapshot().orgs.contains_key(org) {
            return Err(AdminError::bad(
                format!("no org `{org}`: create it first"),
                Some("org"),
            ));
        }
    }
    let secret = format!("tg-{}", random_hex(32)?);
    let doc = KeyDoc {
        id: id.clone(),
        org,
        key_sha256: hex::encode(hash_key(&secret)),
        cap_usd_micros: cap,
        period: period.as_str().to_owned(),
        models,
        disabled: false,
        expires_at,
        created_at: format_time(Utc::now()),
        metadata,
        on_insufficient,
        alert_at,
        deleted_at: None,
    };
    let revision = change::create(call, &id, &doc).await?;
    let key = shown(call, doc, revision).await?;
    Ok(created(&json!({"key": key, "secret": secret})))
}

/// `PATCH /admin/v1/keys/{id}`
pub async fn update(call: &Call<'_>, id: &str) -> Result<Response<Body>, AdminError> {
    let mut fields = Fields::new(call.json()?);
    if fields.has("org") || fields.has("id") {
        return Err(AdminError::bad(
            "a key's id and org cannot change (its spend is kept under them): \
             make a new key instead",
            Some(if fields.has("org") { "org" } else { "id" }),
        ));
    }
    let clear_models = fields.has("models");
    let clear_expiry = fields.has("expires_at");
    let cap = fields.usd("cap_usd")?;
    let period = fields.period()?;
    let models = fields.models()?;
    let disabled = fields.bool("disabled")?;
    let expires_at = fields.time("expires_at")?;
    let metadata = fields.metadata()?;
    let on_insufficient = fields.on_insufficient()?;
    let alert_at = fields.alert_at()?;
    fields.finish(UPDATE_FIELDS)?;
    let (doc, revision) = change::change(call, id, "update", |doc: &mut KeyDoc| {
        if let Some(cap) = cap {
            doc.cap_usd_micros = cap;
        }
        if let Some(period) = period {
            doc.period = period.as_str().to_owned();
        }
        if clear_models {
            doc.models.clone_from(&models);
        }
        if let Some(disabled) = disabled {
            doc.disabled = disabled;
        }
        if clear_expiry {
            doc.expires_at.clone_from(&expires_at);
        }
        if let Some(metadata) = &metadata {
            doc.metadata.clone_from(metadata);
        }
        if let Some(value) = &on_insufficient {
            doc.on_insufficient.clone_from(value);
        }
        if let Some(value) = &alert_at {
            doc.alert_at.clone_from(value);
        }
    })
    .await?;
    Ok(ok(&shown(call, doc, revision).await?))
}

/// `POST /admin/v1/keys/{id}/rotate` → `{"key", "secret"}`: the old secret
/// stops working at once.
pub async fn rotate(call: &Call<'_>, id: &str) -> Result<Response<Body>, AdminError> {
    let secret = format!("tg-{}", random_hex(32)?);
    let digest = hex::encode(hash_key(&secret));
    let (doc, revision) = change::change(call, id, "rotate", |doc: &mut KeyDoc| {
        doc.key_sha256.clone_from(&digest)
    })
    .await?;
    let key = shown(call, doc, revision).await?;
    Ok(ok(&json!({"key": key, "secret": secret})))
}

/// `DELETE /admin/v1/keys/{id}` → 204: the key stops working at once; its
/// id stays taken and its spend stays in the books.
pub async fn delete(call: &Call<'_>, id: &str) -> Result<Response<Body>, AdminError> {
    let at = format_time(Utc::now());
    change::change(call, id, "delete", |doc: &mut KeyDoc| {
        doc.deleted_at = Some(at.clone())
    })
    .await?;
    Ok(no_content())
}

/// The key as this change wrote it: from the directory while it holds
/// that very revision, else from the document written. Not a later
/// revision: a change racing another was answered with the other's
/// values, as if its own had been lost.
async fn shown(call: &Call<'_>, doc: KeyDoc, revision: u64) -> Result<Value, AdminError> {
    let snapshot = call.gateway.directory.snapshot();
    let entry = match snapshot.keys.get(&doc.id) {
        Some(entry) if entry.api.as_ref().is_some_and(|s| s.revision == revision) => entry.clone(),
        _ => key_entry(doc, revision).map_err(AdminError::internal)?,
    };
    Ok(views::key(call.gateway, &entry).await)
}

/// `bytes` random bytes from the operating system, as hex.
pub fn random_hex(bytes: usize) -> Result<String, AdminError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf)
        .map_err(|error| AdminError::internal(format!("no randomness for a secret: {error}")))?;
    Ok(hex::encode(buf))
}
