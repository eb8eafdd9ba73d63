//! `/admin/v1/orgs`: orgs made, listed, changed and deleted at run time.
//! An org's cap binds every key in it; an org that still has keys cannot
//! be deleted.

use chrono::Utc;
use http::Response;
use serde_json::{json, Value};

use super::fields::{checked_limits, required, Fields};
use super::{change, created, matching, no_content, ok, page, views, AdminError, Call};
use crate::body::Body;
use crate::budget::records::RecordKind;
use crate::directory::documents::OrgDoc;
use crate::directory::{format_time, org_entry};

const KIND: RecordKind = RecordKind::Org;

const CREATE_FIELDS: &str = "id, cap_usd, period, alert_at, model_caps, rpm, tpm";
const UPDATE_FIELDS: &str = "cap_usd, period, alert_at, model_caps, rpm, tpm";

/// `GET /admin/v1/orgs[?prefix=TEXT][&limit=N][&after=ID]`: as the keys'
/// list, without `org`.
pub async fn list(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let limit = call.limit()?;
    let prefix = call.prefix()?;
    let snapshot = call.gateway.directory.snapshot();
    let entries = matching(&snapshot.orgs, prefix, call.query.get("after"));
    let (entries, next) = page(entries, None, limit);
    let mut orgs = Vec::with_capacity(entries.len());
    for entry in entries {
        orgs.push(views::org(call.gateway, entry).await);
    }
    Ok(ok(&json!({"orgs": orgs, "next": next})))
}

/// `GET /admin/v1/orgs/{id}`
pub async fn show(call: &Call<'_>, id: &str) -> Result<Response<Body>, AdminError> {
    let snapshot = call.gateway.directory.snapshot();
    let entry = snapshot
        .orgs
        .get(id)
        .ok_or_else(|| AdminError::no_such(KIND, id))?;
    Ok(ok(&views::org(call.gateway, entry).await))
}

/// `POST /admin/v1/orgs` → 201 ORG
pub async fn create(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let mut fields = Fields::new(call.json()?);
    let id = required(fields.id("id")?, "id")?;
    let cap = required(fields.usd("cap_usd")?, "cap_usd")?;
    let period = required(fields.period()?, "period")?;
    let alert_at = fields.alert_at()?.unwrap_or_default();
    let model_caps = fields.model_caps()?.unwrap_or_default();
    let rpm = fields.rate("rpm")?;
    let tpm = fields.rate("tpm")?;
    fields.finish(CREATE_FIELDS)?;
    checked_limits(&model_caps, rpm, tpm)?;
    let doc = OrgDoc {
        id: id.clone(),
        cap_usd_micros: cap,
        period: period.as_str().to_owned(),
        created_at: format_time(Utc::now()),
        alert_at,
        model_caps,
        rpm,
        tpm,
        deleted_at: None,
    };
    let revision = change::create(call, &id, &doc).await?;
    Ok(created(&shown(call, doc, revision).await?))
}

/// `PATCH /admin/v1/orgs/{id}` (`cap_usd`, `period`, `alert_at`,
/// `model_caps`, `rpm`, `tpm`)
pub async fn update(call: &Call<'_>, id: &str) -> Result<Response<Body>, AdminError> {
    let mut fields = Fields::new(call.json()?);
    if fields.has("id") {
        return Err(AdminError::bad("an org's id cannot change", Some("id")));
    }
    let cap = fields.usd("cap_usd")?;
    let period = fields.period()?;
    let (set_rpm, set_tpm) = (fields.has("rpm"), fields.has("tpm"));
    let alert_at = fields.alert_at()?;
    let model_caps = fields.model_caps()?;
    let rpm = fields.rate("rpm")?;
    let tpm = fields.rate("tpm")?;
    fields.finish(UPDATE_FIELDS)?;
    checked_limits(model_caps.as_deref().unwrap_or_default(), rpm, tpm)?;
    let (doc, revision) = change::change(call, id, "update", |doc: &mut OrgDoc| {
        if let Some(cap) = cap {
            doc.cap_usd_micros = cap;
        }
        if let Some(period) = period {
            doc.period = period.as_str().to_owned();
        }
        if let Some(value) = &alert_at {
            doc.alert_at.clone_from(value);
        }
        // The whole list is replaced; `null` or `[]` clears it.
        if let Some(value) = &model_caps {
            doc.model_caps.clone_from(value);
        }
        if set_rpm {
            doc.rpm = rpm;
        }
        if set_tpm {
            doc.tpm = tpm;
        }
    })
    .await?;
    Ok(ok(&shown(call, doc, revision).await?))
}

/// `DELETE /admin/v1/orgs/{id}` → 204, or 409 while keys are in it.
pub async fn delete(call: &Call<'_>, id: &str) -> Result<Response<Body>, AdminError> {
    let snapshot = call.gateway.directory.snapshot();
    let members = snapshot
        .keys
        .values()
        .filter(|key| key.config.org.as_deref() == Some(id))
        .count();
    if members > 0 && snapshot.orgs.contains_key(id) {
        return Err(AdminError::conflict(
            "org_has_keys",
            format!("org `{id}` still has {members} key(s): delete them first"),
        ));
    }
    let at = format_time(Utc::now());
    change::change(call, id, "delete", |doc: &mut OrgDoc| {
        doc.deleted_at = Some(at.clone())
    })
    .await?;
    Ok(no_content())
}

/// The org as this change wrote it: from the directory while it holds
/// that very revision, else from the document written. Not a later
/// revision: a change racing another was answered with the other's
/// values, as if its own had been lost.
async fn shown(call: &Call<'_>, doc: OrgDoc, revision: u64) -> Result<Value, AdminError> {
    let snapshot = call.gateway.directory.snapshot();
    let entry = match snapshot.orgs.get(&doc.id) {
        Some(entry) if entry.api.as_ref().is_some_and(|s| s.revision == revision) => entry.clone(),
        _ => org_entry(doc, revision).map_err(AdminError::internal)?,
    };
    Ok(views::org(call.gateway, &entry).await)
}
