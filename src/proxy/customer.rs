//! The customer a call is for (the agent's own end user): named by the
//! `x-tollgate-customer` header or, for a key with `customer_from =
//! "body"`, by the body's end-user field (OpenAI's `safety_identifier` or
//! `user`, Anthropic's `metadata.user_id`), else the header. A key with
//! `customer_required` refuses a call that names none.

use http::HeaderMap;
use serde_json::Value;

use crate::api::{Api, Call};
use crate::config::{CustomerFrom, KeyConfig};
use crate::error::GatewayError;

/// The header naming a call's customer.
pub const CUSTOMER_HEADER: &str = "x-tollgate-customer";
/// The longest customer id accepted.
const MAX_CUSTOMER_ID_BYTES: usize = 128;

/// The customer `call` names, checked, or `None`.
pub fn customer_of(
    key: &KeyConfig,
    headers: &HeaderMap,
    call: &Call,
) -> Result<Option<String>, GatewayError> {
    let from_body = match key.customer.from {
        CustomerFrom::Body => body_customer(call)?,
        CustomerFrom::Header => None,
    };
    let customer = match from_body {
        Some(customer) => Some(customer),
        None => header_customer(headers)?,
    };
    if customer.is_none() && key.customer.required {
        let also = match key.customer.from {
            CustomerFrom::Body => {
                " (or the body's end-user field: `safety_identifier` or `user`, \
                                  Anthropic's `metadata.user_id`)"
            }
            CustomerFrom::Header => "",
        };
        return Err(GatewayError::BadRequest {
            message: format!(
                "key `{}` requires every call to name its customer: send the \
                 {CUSTOMER_HEADER} header{also}, 1 to {MAX_CUSTOMER_ID_BYTES} characters of \
                 A-Z, a-z, 0-9, '.', '_', ':', '@' and '-'; this call was not sent and costs \
                 nothing",
                key.id
            ),
            param: None,
            code: Some("customer_required"),
        });
    }
    Ok(customer)
}

/// The customer the `x-tollgate-customer` header names, checked.
pub fn header_customer(headers: &HeaderMap) -> Result<Option<String>, GatewayError> {
    let mut values = headers.get_all(CUSTOMER_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(invalid(
            format!("send the {CUSTOMER_HEADER} header once"),
            None,
        ));
    }
    let text = value.to_str().map_err(|_| {
        invalid(
            format!("the {CUSTOMER_HEADER} header must be visible ASCII"),
            None,
        )
    })?;
    checked(text, CUSTOMER_HEADER, None).map(Some)
}

/// The body's end-user field, where the call's API has one.
fn body_customer(call: &Call) -> Result<Option<String>, GatewayError> {
    let (field, param, value) = match call.api {
        Api::ChatCompletions | Api::Completions | Api::Responses | Api::Embeddings => {
            match (call.body.get("safety_identifier"), call.body.get("user")) {
                (Some(value), _) => ("safety_identifier", "safety_identifier", value),
                (None, Some(value)) => ("user", "user", value),
                (None, None) => return Ok(None),
            }
        }
        Api::Messages => match call.body.get("metadata").and_then(|m| m.get("user_id")) {
            Some(value) => ("metadata.user_id", "metadata", value),
            None => return Ok(None),
        },
        Api::GenerateContent | Api::Converse => return Ok(None),
    };
    match value {
        Value::Null => Ok(None),
        Value::String(text) => checked(text, field, Some(param)).map(Some),
        _ => Err(invalid(
            format!("{field} must be a string naming the customer"),
            Some(param),
        )),
    }
}

/// Whether `id` may name a customer: 1 to 128 of `A-Z a-z 0-9 . _ : @ -`.
pub fn valid_customer_id(id: &str) -> bool {
    (1..=MAX_CUSTOMER_ID_BYTES).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
}

fn checked(text: &str, what: &str, param: Option<&'static str>) -> Result<String, GatewayError> {
    if !valid_customer_id(text) {
        return Err(invalid(
            format!(
                "{what} names the call's customer: 1 to {MAX_CUSTOMER_ID_BYTES} characters of \
                 A-Z, a-z, 0-9, '.', '_', ':', '@' and '-', not {text:?}"
            ),
            param,
        ));
    }
    Ok(text.to_owned())
}

fn invalid(message: String, param: Option<&'static str>) -> GatewayError {
    GatewayError::BadRequest {
        message,
        param,
        code: Some("invalid_customer"),
    }
}
