//! Request rules beyond each field's type: which provider family a route
//! can reach, work the gateway could not settle, and options providers
//! bill at rates the price table does not hold, which would charge a call
//! less than it costs (hosted tools the model's entry does not price among
//! them). Values are normalised before they are checked, so a variant of a
//! refused option is refused too.

use http::HeaderMap;
use serde_json::{Map, Value};

use super::{bad, Api, Call};
use crate::error::GatewayError;
use crate::prices::ModelPrice;
use crate::provider::ProviderKind;

/// An OpenAI-shaped route can only reach an OpenAI-compatible provider, and
/// `/v1/messages` only Anthropic.
pub fn check_api_matches(api: Api, kind: ProviderKind, model: &str) -> Result<(), GatewayError> {
    let (expected, hint) = match kind {
        ProviderKind::Anthropic => (Api::Messages == api, "/v1/messages"),
        ProviderKind::OpenAi => (
            Api::Messages != api,
            "/v1/chat/completions, /v1/responses, /v1/completions or /v1/embeddings",
        ),
    };
    if expected {
        Ok(())
    } else {
        Err(bad(
            &format!(
                "model `{model}` is not served on {}: call {hint}",
                api.path()
            ),
            Some("model"),
        ))
    }
}

/// Refuses a hosted tool the model's price entry does not price: the
/// provider would bill its uses while the gateway charged nothing for them.
pub fn check_hosted_tools(call: &Call, price: &ModelPrice) -> Result<(), GatewayError> {
    let unpriced = call
        .tools
        .declared
        .iter()
        .find(|declared| price.tool_call(declared.tool).is_none());
    match unpriced {
        None => Ok(()),
        Some(declared) => Err(GatewayError::BadRequest {
            message: format!(
                "the hosted tool `{}` is billed per use, and this gateway has no price for \
                 `{}` on model `{}` (tool_call_usd.{} in its price table); remove the tool, \
                 or ask the operator to price it",
                declared.name, declared.tool, call.model, declared.tool,
            ),
            param: Some(declared.param()),
            code: Some("tool_not_priced"),
        }),
    }
}

/// The rules a body must pass whatever its provider.
pub(super) fn check_body(api: Api, body: &Map<String, Value>) -> Result<(), GatewayError> {
    check_background(api, body)?;
    check_service_tier(body)?;
    if api == Api::Messages && asks_for_hour_long_cache(body) {
        return Err(bad(
            "cache_control ttl \"1h\" is billed at a cache-write rate this gateway \
             does not price; use the default 5-minute cache",
            None,
        ));
    }
    Ok(())
}

/// OpenAI's background mode runs a response after its connection closes,
/// and bills it, while the gateway would have settled the call already.
fn check_background(api: Api, body: &Map<String, Value>) -> Result<(), GatewayError> {
    match body.get("background") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(()),
        Some(_) if api == Api::Responses => Err(GatewayError::BadRequest {
            message: "background mode is not supported through this gateway: a background \
                      response outlives its request, so its cost could not be settled; \
                      remove `background`"
                .to_owned(),
            param: Some("background"),
            code: Some("background_not_supported"),
        }),
        Some(_) => Err(bad(
            "`background` is a Responses option; remove it",
            Some("background"),
        )),
    }
}

/// The service tiers billed at the standard rates (flex costs less). Any
/// other, in any spelling, may be billed more.
fn check_service_tier(body: &Map<String, Value>) -> Result<(), GatewayError> {
    let refused = match body.get("service_tier") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(tier)) => tier.trim().to_ascii_lowercase(),
        Some(_) => return Err(bad("`service_tier` must be a string", Some("service_tier"))),
    };
    if matches!(
        refused.as_str(),
        "auto" | "default" | "flex" | "standard_only"
    ) {
        return Ok(());
    }
    Err(bad(
        &format!(
            "service_tier {refused:?} is billed at rates this gateway does not price; \
             use \"auto\", \"default\" or \"flex\""
        ),
        Some("service_tier"),
    ))
}

/// Refuses Anthropic beta options billed at rates the price table does not
/// hold (the 1M-token context). The header must be a plain list of beta
/// names, so that no spelling of a refused one slips through.
pub fn check_headers(api: Api, headers: &HeaderMap) -> Result<(), GatewayError> {
    if api != Api::Messages {
        return Ok(());
    }
    for value in headers.get_all("anthropic-beta") {
        let names = value
            .to_str()
            .ok()
            .filter(|text| {
                text.split(',').map(str::trim).all(|name| {
                    name.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                })
            })
            .ok_or_else(|| {
                bad(
                    "the anthropic-beta header must be a comma-separated list of beta names \
                     (letters, digits, '-', '_' and '.')",
                    None,
                )
            })?;
        if names
            .split(',')
            .any(|name| name.trim().to_ascii_lowercase().starts_with("context-1m"))
        {
            return Err(bad(
                "the anthropic-beta context-1m option is billed at rates this gateway does \
                 not price; remove it from the anthropic-beta header",
                None,
            ));
        }
    }
    Ok(())
}

/// Whether any `cache_control` in the body, the top level included, asks
/// for a cache other than Anthropic's default 5 minutes: the 1-hour cache
/// writes at twice the input price instead of 1.25 times.
fn asks_for_hour_long_cache(body: &Map<String, Value>) -> bool {
    fn object(map: &Map<String, Value>) -> bool {
        map.iter()
            .any(|(key, value)| (key == "cache_control" && !is_default_cache(value)) || any(value))
    }
    fn any(value: &Value) -> bool {
        match value {
            Value::Array(items) => items.iter().any(any),
            Value::Object(map) => object(map),
            _ => false,
        }
    }
    fn is_default_cache(cache_control: &Value) -> bool {
        match cache_control.get("ttl") {
            None | Some(Value::Null) => true,
            Some(Value::String(ttl)) => ttl.trim().eq_ignore_ascii_case("5m"),
            Some(_) => false,
        }
    }
    object(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    fn body(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn background_is_refused_with_its_code() {
        let error = check_body(Api::Responses, &body(json!({"background": true}))).unwrap_err();
        assert!(matches!(
            error,
            GatewayError::BadRequest {
                code: Some("background_not_supported"),
                param: Some("background"),
                ..
            }
        ));
        for allowed in [
            json!({}),
            json!({"background": false}),
            json!({"background": null}),
        ] {
            check_body(Api::Responses, &body(allowed)).unwrap();
        }
        assert!(check_body(Api::Responses, &body(json!({"background": "true"}))).is_err());
    }

    #[test]
    fn any_spelling_of_an_unpriced_tier_is_refused() {
        for tier in ["priority", "Priority", " priority", "scale", "PRIORITY "] {
            let error = check_body(Api::ChatCompletions, &body(json!({"service_tier": tier})));
            assert!(error.is_err(), "{tier}");
        }
        for tier in ["auto", "default", "flex", "Default"] {
            check_body(Api::ChatCompletions, &body(json!({"service_tier": tier}))).unwrap();
        }
    }

    #[test]
    fn an_hour_long_cache_is_refused_at_any_depth() {
        let refused = [
            json!({"cache_control": {"type": "ephemeral", "ttl": "1h"}}),
            json!({"system": [{"type": "text", "text": "x", "cache_control": {"ttl": "1H"}}]}),
            json!({"messages": [{"content": [{"cache_control": {"ttl": " 1h"}}]}]}),
            json!({"tools": [{"cache_control": {"ttl": 3600}}]}),
        ];
        for value in refused {
            assert!(
                check_body(Api::Messages, &body(value.clone())).is_err(),
                "{value}"
            );
        }
        let allowed = json!({"cache_control": {"type": "ephemeral"}, "system": [{"cache_control": {"ttl": "5m"}}]});
        check_body(Api::Messages, &body(allowed)).unwrap();
    }

    #[test]
    fn an_unpriced_hosted_tool_is_refused_by_name() {
        let table = crate::prices::PriceTable::from_toml_str(
            r#"
            [models."searcher"]
            input_per_mtok = "1"
            output_per_mtok = "1"
            tool_call_usd = { web_search = "0.01" }
            "#,
        )
        .unwrap();
        let price = table.get("searcher").unwrap();
        let call = |tools: Value| {
            let body = json!({"model": "searcher", "input": "x", "tools": tools});
            Call::parse(Api::Responses, bytes::Bytes::from(body.to_string())).unwrap()
        };
        check_hosted_tools(&call(json!([{"type": "web_search"}])), price).unwrap();
        check_hosted_tools(&call(json!([{"type": "function", "name": "f"}])), price).unwrap();
        let error = check_hosted_tools(
            &call(json!([{"type": "web_search"}, {"type": "image_generation"}])),
            price,
        )
        .unwrap_err();
        let GatewayError::BadRequest {
            message,
            param,
            code,
        } = error
        else {
            panic!("not a bad request")
        };
        assert!(
            message.contains("`image_generation`") && message.contains("`searcher`"),
            "{message}"
        );
        assert_eq!((param, code), (Some("tools"), Some("tool_not_priced")));
    }

    #[test]
    fn beta_headers_are_normalised_before_they_are_checked() {
        let check = |value: &[u8]| {
            let mut headers = HeaderMap::new();
            headers.insert("anthropic-beta", HeaderValue::from_bytes(value).unwrap());
            check_headers(Api::Messages, &headers)
        };
        check(b"prompt-caching-2024-07-31, token-efficient-tools-2025-02-19").unwrap();
        for refused in [
            &b"context-1m-2025-08-07"[..],
            b"tools-2024, Context-1M-2025-08-07",
            b"context-1m-2025-08-07\xc3\xa9",
            b"context-1m-2025-08-07;x",
            b"a b",
        ] {
            assert!(
                check(refused).is_err(),
                "{}",
                String::from_utf8_lossy(refused)
            );
        }
    }
}
