//! `/admin/v1/keys`: gateway keys made, listed, changed, rotated, disabled
//! and deleted at run time. A key's secret is shown once, when it is made
//! or rotated, and kept only as its SHA-256.

use chrono::Utc;
use http::Response;
use serde_json::{json, Value};

use super::fields::{checked_customer, checked_limits, required, Fields};
use super::{change, created, matching, no_content, ok, page, views, AdminError, Call};
use crate::body::Body;
use crate::budget::records::RecordKind;
use crate::config::{hash_key, CustomerFrom, CustomerSpec};
use crate::directory::documents::KeyDoc;
use crate::directory::{format_time, key_entry};

const KIND: RecordKind = RecordKind::Key;

const CREATE_FIELDS: &str = "id, org, cap_usd, period, models, expires_at, metadata, \
                             on_insufficient, alert_at, model_caps, rpm, tpm, customer_cap_usd, \
                             customer_period, customer_rpm, customer_tpm, customer_from, \
                             customer_required";
const UPDATE_FIELDS: &str = "cap_usd, period, models, disabled, expires_at, metadata, \
                             on_insufficient, alert_at, model_caps, rpm, tpm, customer_cap_usd, \
                             customer_period, customer_rpm, customer_tpm, customer_from, \
                             customer_required";

/// A key's customer template as a body writes it (`customer_*`); on a
/// PATCH, `None` leaves a field as it was.
struct CustomerFields {
    cap_usd: Option<Option<String>>,
    period: Option<Option<String>>,
    rpm: Option<Option<u64>>,
    tpm: Option<Option<u64>>,
    from: Option<Option<String>>,
    required: Option<bool>,
}

impl CustomerFields {
    /// Takes the `customer_*` fields of a body, each held to its type; a
    /// field given as `null` is `Some(None)` (cleared).
    fn take(fields: &mut Fields) -> Result<CustomerFields, AdminError> {
        let given: Vec<bool> = [
            "customer_cap_usd",
            "customer_period",
            "customer_rpm",
            "customer_tpm",
            "customer_from",
            "customer_required",
        ]
        .iter()
        .map(|name| fields.has(name))
        .collect();
        let cap_usd = fields.usd_text("customer_cap_usd")?;
        let period = fields
            .period_named("customer_period")?
            .map(|period| period.as_str().to_owned());
        let rpm = fields.rate("customer_rpm")?;
        let tpm = fields.rate("customer_tpm")?;
        // Kept in the document only when it is not the default.
        let from = fields
            .customer_from()?
            .filter(|from| *from != CustomerFrom::Header)
            .map(|from| from.as_str().to_owned());
        let required = fields.bool("customer_required")?;
        Ok(CustomerFields {
            cap_usd: given[0].then_some(cap_usd),
            period: given[1].then_some(period),
            rpm: given[2].then_some(rpm),
            tpm: given[3].then_some(tpm),
            from: given[4].then_some(from),
            // `null` clears it: calls need not name a customer.
            required: given[5].then_some(required.unwrap_or(false)),
        })
    }

    /// Writes what was given into `doc`.
    fn apply(&self, doc: &mut KeyDoc) {
        if let Some(value) = &self.cap_usd {
            doc.customer_cap_usd.clone_from(value);
        }
        if let Some(value) = &self.period {
            doc.customer_period.clone_from(value);
        }
        if let Some(value) = self.rpm {
            doc.customer_rpm = value;
        }
        if let Some(value) = self.tpm {
            doc.customer_tpm = value;
        }
        if let Some(value) = &self.from {
            doc.customer_from.clone_from(value);
        }
        if let Some(value) = self.required {
            doc.customer_required = value;
        }
    }
}

/// The template a document's `customer_*` fields make, checked: 400 naming
/// the field that does not hold.
fn check_customer(doc: &KeyDoc) -> Result<(), AdminError> {
    checked_customer(CustomerSpec {
        cap_usd: doc.customer_cap_usd.as_deref(),
        period: doc.customer_period.as_deref(),
        rpm: doc.customer_rpm,
        tpm: doc.customer_tpm,
        from: doc.customer_from.as_deref(),
        required: Some(doc.customer_required),
    })
    .map(|_| ())
}

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
    let model_caps = fields.model_caps()?.unwrap_or_default();
    let rpm = fields.rate("rpm")?;
    let tpm = fields.rate("tpm")?;
    let customer = CustomerFields::take(&mut fields)?;
    fields.finish(CREATE_FIELDS)?;
    checked_limits(&model_caps, rpm, tpm)?;

    if let Some(org) = &org {
        if !call.gateway.directory.snapshot().orgs.contains_key(org) {
            return Err(AdminError::bad(
                format!("no org `{org}`: create it first"),
                Some("org"),
            ));
        }
    }
    let secret = format!("tg-{}", random_hex(32)?);
    let mut doc = KeyDoc {
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
        model_caps,
        rpm,
        tpm,
        customer_cap_usd: None,
        customer_period: None,
        customer_rpm: None,
        customer_tpm: None,
        customer_from: None,
        customer_required: false,
        deleted_at: None,
    };
    customer.apply(&mut doc);
    check_customer(&doc)?;
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
    let (set_rpm, set_tpm) = (fields.has("rpm"), fields.has("tpm"));
    let cap = fields.usd("cap_usd")?;
    let period = fields.period()?;
    let models = fields.models()?;
    let disabled = fields.bool("disabled")?;
    let expires_at = fields.time("expires_at")?;
    let metadata = fields.metadata()?;
    let on_insufficient = fields.on_insufficient()?;
    let alert_at = fields.alert_at()?;
    let model_caps = fields.model_caps()?;
    let rpm = fields.rate("rpm")?;
    let tpm = fields.rate("tpm")?;
    let customer = CustomerFields::take(&mut fields)?;
    fields.finish(UPDATE_FIELDS)?;
    checked_limits(model_caps.as_deref().unwrap_or_default(), rpm, tpm)?;
    let (doc, revision) = change::checked_change(call, id, "update", |doc: &mut KeyDoc| {
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
        // A customer field is checked with the others the key holds (a cap
        // needs a period, given now or before).
        customer.apply(doc);
        check_customer(doc)
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
