//! Request rules that depend on more than the body: which provider family
//! a route can reach, and the options providers bill at rates the price
//! table does not hold, which would charge a call less than it costs.

use http::HeaderMap;
use serde_json::{Map, Value};

use super::{bad, Api, Call};
use crate::error::GatewayError;
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

/// Refuses options the providers bill at rates the price table does not
/// hold: OpenAI's priority tier, Anthropic's 1-hour prompt cache and its
/// 1M-context beta.
pub fn check_priced_options(call: &Call, headers: &HeaderMap) -> Result<(), GatewayError> {
    if call.body.get("service_tier").and_then(Value::as_str) == Some("priority") {
        return Err(bad(
            "service_tier \"priority\" is billed at rates this gateway does not price; \
             use \"auto\", \"default\" or \"flex\"",
            Some("service_tier"),
        ));
    }
    if call.api != Api::Messages {
        return Ok(());
    }
    if has_hour_long_cache(&call.body) {
        return Err(bad(
            "cache_control ttl \"1h\" is billed at a cache-write rate this gateway \
             does not price; use the default 5-minute cache",
            None,
        ));
    }
    let long_context = headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("context-1m"));
    if long_context {
        return Err(bad(
            "the anthropic-beta context-1m option is billed at rates this gateway does \
             not price; remove it from the anthropic-beta header",
            None,
        ));
    }
    Ok(())
}

/// Whether any `cache_control` in the body asks for Anthropic's 1-hour
/// cache, whose writes cost twice the input price instead of 1.25 times.
fn has_hour_long_cache(body: &Map<String, Value>) -> bool {
    fn walk(value: &Value) -> bool {
        match value {
            Value::Array(items) => items.iter().any(walk),
            Value::Object(map) => map.iter().any(|(key, value)| {
                (key == "cache_control" && value.get("ttl").and_then(Value::as_str) == Some("1h"))
                    || walk(value)
            }),
            _ => false,
        }
    }
    body.values().any(walk)
}
