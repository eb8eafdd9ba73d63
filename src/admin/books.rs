//! The admin routes over the books: `POST /admin/v1/adjustments` (a refund
//! or a charge by hand, booked as a ledger entry in the same atomic step
//! as the counters it moves) and `GET /admin/v1/reservations` (the calls
//! holding money right now).

use chrono::Utc;
use http::Response;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::fields::{required, Fields};
use super::{created, ok, page, AdminError, Call};
use crate::body::Body;
use crate::budget::records::RecordKind;
use crate::budget::Books;
use crate::budget::{AdjustOutcome, Adjustment};
use crate::directory::format_time;
use crate::money::{delta, parse_usd};

/// The most open holds a listing reads; they are bounded by the calls in
/// flight, so this is far above any real count.
const MAX_HOLDS: usize = 100_000;

/// The longest note kept with an adjustment.
const MAX_NOTE_BYTES: usize = 1000;

/// `POST /admin/v1/adjustments` `{"key", "amount_usd", "note"}` → 201, the
/// ledger entry. A negative amount refunds; a positive one charges. An
/// `Idempotency-Key` header makes a retried request apply once.
pub async fn adjust(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let mut fields = Fields::new(call.json()?);
    let key_id = required(fields.id("key")?, "key")?;
    let amount = required(fields.signed_usd("amount_usd")?, "amount_usd")?;
    let note = required(fields.text("note", MAX_NOTE_BYTES)?, "note")?;
    fields.finish("key, amount_usd, note")?;
    if amount == 0 {
        return Err(AdminError::bad(
            "amount_usd must not be zero",
            Some("amount_usd"),
        ));
    }
    let snapshot = call.gateway.directory.snapshot();
    let key = snapshot
        .keys
        .get(&key_id)
        .ok_or_else(|| AdminError::no_such(RecordKind::Key, &key_id))?;
    let (key_scope, org_scope) = call.gateway.directory.scopes(&key.config);
    let exec_id = match call.idempotency_key {
        // The same request retried names the same adjustment.
        Some(claim) => format!(
            "adj-{}",
            &hex::encode(Sha256::digest(format!("{key_id}\n{claim}")))[..32]
        ),
        None => uuid::Uuid::now_v7().to_string(),
    };
    let adjustment = Adjustment {
        exec_id: exec_id.clone(),
        key: key_scope,
        org: org_scope,
        amount,
        note: note.clone(),
    };
    let outcome = call
        .gateway
        .store
        .adjust(&adjustment)
        .await
        .map_err(AdminError::store)?;
    match outcome {
        AdjustOutcome::Applied {
            key_period_id,
            org_period_id,
            key_spent,
            applied,
        } => {
            if applied {
                tracing::info!(target: "tollgate::audit", key = %key_id, amount_usd_micros = amount, note, exec_id, "adjustment");
            }
            Ok(created(&json!({
                "exec_id": exec_id,
                "status": "adjustment",
                "key": key_id,
                "org": adjustment.org.as_ref().map(|org| org.id.clone()),
                "amount_usd_micros": amount,
                "note": note,
                "key_period_id": key_period_id,
                "org_period_id": org_period_id,
                "key_spent_usd_micros": key_spent,
                "at": format_time(Utc::now()),
            })))
        }
        AdjustOutcome::Refused { kind, id, spent } => Err(AdminError {
            code: "refund_exceeds_spent",
            ..AdminError::bad(
                format!(
                    "the refund is larger than what {kind} `{id}` has spent in its current \
                     period ({spent} µUSD): nothing was changed"
                ),
                Some("amount_usd"),
            )
        }),
    }
}

/// `GET /admin/v1/reservations[?limit=N][&after=EXEC_ID]`: open holds,
/// oldest first.
pub async fn reservations(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let limit = call.limit()?;
    let holds = call
        .gateway
        .store
        .open_holds(MAX_HOLDS)
        .await
        .map_err(AdminError::store)?;
    let after = call.query.get("after");
    // Oldest first, so paging goes by position after the named hold.
    let start = after
        .and_then(|after| holds.iter().position(|hold| &hold.exec_id == after))
        .map_or(0, |at| at + 1);
    let rest = holds[start..].iter().map(|hold| {
        let value: Value = json!({
            "exec_id": hold.exec_id,
            "key": hold.key,
            "org": hold.org,
            "run": null,
            // A hold recorded by a version that kept no model names none.
            "model": (!hold.model.is_empty()).then_some(&hold.model),
            "amount_usd_micros": hold.amount,
            "started_at": format_time(hold.started_at),
            "deadline": format_time(hold.deadline),
        });
        (hold.exec_id.clone(), value)
    });
    let (shown, next) = page(rest, None, limit);
    let held: i128 = holds.iter().map(|hold| i128::from(hold.amount)).sum();
    Ok(ok(&json!({
        "reservations": shown,
        "next": next,
        "open": holds.len(),
        "held_usd_micros": u64::try_from(held).unwrap_or(u64::MAX),
    })))
}

/// A signed decimal USD string, in µUSD.
pub fn parse_signed_usd(text: &str) -> Result<i64, String> {
    let (negative, digits) = match text.trim().strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.trim().strip_prefix('+').unwrap_or(text.trim())),
    };
    let micros = delta(parse_usd(digits).map_err(|error| error.to_string())?);
    Ok(if negative { -micros } else { micros })
}
