//! `GET /admin/v1/customers?key=ID`: the customers (the agent's own end
//! users) a key's calls have named, as the store remembers them (forgotten
//! after `store.customer_ttl_days` without a call), by id, each with its
//! last call and its money under the key's customer template.

use http::Response;
use serde_json::json;

use super::fields::bad_id;
use super::{ok, AdminError, Call};
use crate::body::Body;
use crate::budget::records::RecordKind;
use crate::budget::{Books, StoreError};
use crate::directory::format_time;
use crate::endpoints::budget::customer_budget_json;
use crate::proxy::customer::valid_customer_id;

/// `GET /admin/v1/customers?key=ID[&limit=N][&after=CUSTOMER]` →
/// `{"customers": [{"id", "last_call", "budget"}], "next"}`; `budget` is
/// what `GET /v1/budget` shows for the customer, `null` when the key's
/// template has no money cap.
pub async fn list(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let limit = call.limit()?;
    let key_id = match call.query.get("key") {
        None => {
            return Err(AdminError::bad(
                "key is required: the id of the key whose customers to list (?key=ID)",
                Some("key"),
            ))
        }
        Some(id) if !super::fields::valid_id(id) => return Err(bad_id("key")),
        Some(id) => id,
    };
    let after = call.query.get("after").map(String::as_str);
    if let Some(after) = after {
        if !valid_customer_id(after) {
            return Err(AdminError::bad(
                format!(
                    "after is a customer id, the `next` of the page before: 1 to 128 of A-Z, \
                     a-z, 0-9, `.`, `_`, `:`, `@` and `-`, not {after:?}"
                ),
                Some("after"),
            ));
        }
    }
    let snapshot = call.gateway.directory.snapshot();
    let entry = snapshot
        .keys
        .get(key_id)
        .ok_or_else(|| AdminError::no_such(RecordKind::Key, key_id))?;
    let key = &entry.config;
    // One more than the page: whether another follows.
    let mut seen = call
        .gateway
        .store
        .customers(key_id, after, limit + 1)
        .await
        .map_err(AdminError::store)?;
    let next = if seen.len() > limit {
        seen.truncate(limit);
        seen.last().map(|customer| customer.id.clone())
    } else {
        None
    };
    // Read one after another, as a page of keys is: a page costs what it
    // shows.
    let mut customers = Vec::with_capacity(seen.len());
    for customer in seen {
        let budget = customer_budget_json(call.gateway, key, &customer.id)
            .await
            .map_err(|_| {
                AdminError::store(StoreError::Unavailable(format!(
                    "could not read the counters of customer `{}` of key `{key_id}`",
                    customer.id
                )))
            })?;
        customers.push(json!({
            "id": customer.id,
            "last_call": format_time(customer.last_call),
            "budget": budget,
        }));
    }
    Ok(ok(&json!({"customers": customers, "next": next})))
}
