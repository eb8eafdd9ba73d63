//! The audit trail: one entry per admin change — when, what was done to
//! which key or org, and its settings before and after — written in the
//! same atomic step as the change, and `GET /admin/v1/audit` to read it.
//! A key's secret is never in it, not even as its digest.

use chrono::Utc;
use http::Response;
use serde_json::{json, Value};

use super::{ok, AdminError, Call};
use crate::body::Body;
use crate::budget::records::RecordKind;
use crate::budget::Records;

/// The entry for one change; `old` and `new` are the documents before and
/// after (`None` before a creation, after nothing else).
pub fn entry(
    action: &str,
    kind: RecordKind,
    id: &str,
    old: Option<Value>,
    new: Option<Value>,
) -> Value {
    json!({
        "at": crate::directory::format_time(Utc::now()),
        "action": action,
        "kind": kind.as_str(),
        "id": id,
        "old": old.map(without_secret),
        "new": new.map(without_secret),
    })
}

fn without_secret(mut doc: Value) -> Value {
    if let Some(map) = doc.as_object_mut() {
        map.remove("key_sha256");
    }
    doc
}

/// `GET /admin/v1/audit[?limit=N][&before=SEQ]`: newest first.
pub async fn list(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let limit = call.limit()?;
    let before = match call.query.get("before") {
        None => None,
        Some(text) => Some(text.parse::<u64>().map_err(|_| {
            AdminError::bad(
                format!("before must be an entry's seq, not {text:?}"),
                Some("before"),
            )
        })?),
    };
    let entries = call
        .gateway
        .store
        .audit(before, limit + 1)
        .await
        .map_err(AdminError::store)?;
    let more = entries.len() > limit;
    let entries: Vec<Value> = entries
        .into_iter()
        .take(limit)
        .map(|entry| {
            let mut value: Value = serde_json::from_str(&entry.body).unwrap_or(Value::Null);
            if let Some(map) = value.as_object_mut() {
                map.insert("seq".to_owned(), entry.seq.into());
            }
            value
        })
        .collect();
    let next = if more {
        entries.last().and_then(|entry| entry["seq"].as_u64())
    } else {
        None
    };
    Ok(ok(&json!({"entries": entries, "next": next})))
}
