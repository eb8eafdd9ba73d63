//! An Anthropic Messages request as the gateway must read it before
//! sending it: `messages`, `max_tokens` (required, as Anthropic requires
//! it), the thinking budget (`thinking.budget_tokens`, inside
//! `max_tokens`), the service tier (Anthropic's priority tier is not
//! priced), the cache lifetimes its `cache_control`s ask for, the long
//! context its `anthropic-beta` header asks for, and its server tools
//! (`tools`).

mod tools;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Map, Value};

pub use tools::DEFAULT_MAX_USES;

use crate::api::{
    bad, check_messages, client_output_limit, json_object, model_and_stream, service_tier, Api,
    Call,
};
use crate::error::GatewayError;
use crate::prices::PricedOptions;

/// Parses and checks a Messages body; `path_model` and `path_stream` when
/// the route names the model, or whether it streams, in its path (Claude
/// on Vertex AI): a body that says otherwise is refused.
pub fn parse(
    bytes: Bytes,
    path_model: Option<&str>,
    path_stream: Option<bool>,
) -> Result<Call, GatewayError> {
    let body = json_object(&bytes)?;
    let (model, stream) = model_and_stream(&body, path_model, path_stream)?;
    check_messages(&body)?;
    let options = PricedOptions {
        tier: service_tier(&body, false)?,
        hour_cache: hour_cache(&body)?,
        // Vertex AI and Bedrock take the betas in the body; the header is
        // read once headers are (`long_context`).
        long_context: body_betas_long_context(body.get("anthropic_beta"))?,
    };
    let tools = tools::of(&body)?;
    let limit = client_output_limit(Api::Messages, &body)?
        .ok_or_else(|| bad("`max_tokens` is required", Some("max_tokens")))?;
    let mut call = Call {
        api: Api::Messages,
        model,
        stream,
        output_limit: limit,
        limit_given: true,
        default_limit: None,
        thinking_budget: thinking_budget(&body)?.unwrap_or(0),
        thinking_beside_limit: false,
        thinking_unbudgeted: false,
        limit_at: None,
        choices: 1,
        tools,
        options,
        hide_usage_chunk: false,
        served_as: None,
        body,
        original: bytes,
        touched: Vec::new(),
    };
    tools::bound_uses(&mut call);
    Ok(call)
}

/// `thinking.budget_tokens`, when thinking is on.
fn thinking_budget(body: &Map<String, Value>) -> Result<Option<u64>, GatewayError> {
    match body.get("thinking") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(thinking)) => match thinking.get("budget_tokens") {
            None | Some(Value::Null) => Ok(None),
            Some(value) => match value.as_u64() {
                Some(n) if n >= 1 => Ok(Some(n)),
                _ => Err(bad(
                    "`thinking.budget_tokens` must be a positive integer",
                    Some("thinking"),
                )),
            },
        },
        Some(_) => Err(bad("`thinking` must be an object", Some("thinking"))),
    }
}

/// Whether the request asks for Anthropic's long context (the
/// `context-1m` beta), billed at the long context rates; refused later for
/// a model whose entry lacks them. The header must be a plain list of beta
/// names, so that no spelling of it slips through.
pub fn long_context(headers: &HeaderMap) -> Result<bool, GatewayError> {
    let mut long_context = false;
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
        long_context |= names.split(',').any(asks_long_context);
    }
    Ok(long_context)
}

/// Whether the betas a body names (`anthropic_beta`, as Vertex AI and
/// Bedrock take them, a list of names) ask for the long context: billed at
/// its rates like the header's, and so read the same way.
pub fn body_betas_long_context(betas: Option<&Value>) -> Result<bool, GatewayError> {
    let refused = || {
        bad(
            "`anthropic_beta` must be a list of beta names",
            Some("anthropic_beta"),
        )
    };
    match betas {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Array(names)) => names.iter().try_fold(false, |asked, name| {
            let name = name.as_str().ok_or_else(refused)?;
            Ok(asked || asks_long_context(name))
        }),
        Some(_) => Err(refused()),
    }
}

/// One beta name, in any case or spacing, asks for the long context.
fn asks_long_context(name: &str) -> bool {
    name.trim().to_ascii_lowercase().starts_with("context-1m")
}

/// Whether any `cache_control` of the body asks for the hour-long cache;
/// a lifetime no price covers is refused.
fn hour_cache(body: &Map<String, Value>) -> Result<bool, GatewayError> {
    match cache_lifetimes(body) {
        CacheLifetimes::Default => Ok(false),
        CacheLifetimes::Hour => Ok(true),
        CacheLifetimes::Other => Err(bad(
            "a cache_control ttl other than \"5m\" or \"1h\" is billed at a cache-write rate \
             this gateway does not price; use \"5m\" or \"1h\"",
            None,
        )),
    }
}

/// The longest cache lifetime any `cache_control` of a body asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum CacheLifetimes {
    /// Anthropic's default 5 minutes, or no cache.
    Default,
    /// The 1-hour cache: writes at twice the input price instead of 1.25
    /// times.
    Hour,
    /// A lifetime no price covers.
    Other,
}

/// The cache lifetimes any `cache_control` in the body asks for, the top
/// level included: the dearest of them.
fn cache_lifetimes(body: &Map<String, Value>) -> CacheLifetimes {
    fn object(map: &Map<String, Value>) -> CacheLifetimes {
        map.iter()
            .map(|(key, value)| {
                let own = match key.as_str() {
                    "cache_control" => lifetime(value),
                    _ => CacheLifetimes::Default,
                };
                own.max(any(value))
            })
            .max()
            .unwrap_or(CacheLifetimes::Default)
    }
    fn any(value: &Value) -> CacheLifetimes {
        match value {
            Value::Array(items) => items
                .iter()
                .map(any)
                .max()
                .unwrap_or(CacheLifetimes::Default),
            Value::Object(map) => object(map),
            _ => CacheLifetimes::Default,
        }
    }
    fn lifetime(cache_control: &Value) -> CacheLifetimes {
        match cache_control.get("ttl") {
            None | Some(Value::Null) => CacheLifetimes::Default,
            Some(Value::String(ttl)) if ttl.trim().eq_ignore_ascii_case("5m") => {
                CacheLifetimes::Default
            }
            Some(Value::String(ttl)) if ttl.trim().eq_ignore_ascii_case("1h") => {
                CacheLifetimes::Hour
            }
            Some(_) => CacheLifetimes::Other,
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
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn an_hour_long_cache_is_found_at_any_depth() {
        let hour = [
            json!({"cache_control": {"type": "ephemeral", "ttl": "1h"}}),
            json!({"system": [{"type": "text", "text": "x", "cache_control": {"ttl": "1H"}}]}),
            json!({"messages": [{"content": [{"cache_control": {"ttl": " 1h"}}]}]}),
            json!({"system": [{"cache_control": {"ttl": "5m"}}], "tools": [{"cache_control": {"ttl": "1h"}}]}),
        ];
        for value in hour {
            assert!(hour_cache(&body(value.clone())).unwrap(), "{value}");
        }
        let refused = [
            json!({"tools": [{"cache_control": {"ttl": 3600}}]}),
            json!({"tools": [{"cache_control": {"ttl": "1h"}}, {"cache_control": {"ttl": "2h"}}]}),
        ];
        for value in refused {
            assert!(hour_cache(&body(value.clone())).is_err(), "{value}");
        }
        let default = json!({"cache_control": {"type": "ephemeral"}, "system": [{"cache_control": {"ttl": "5m"}}]});
        assert!(!hour_cache(&body(default)).unwrap());
    }

    #[test]
    fn betas_in_the_body_ask_for_the_long_context_as_the_header_does() {
        let asked = |value: Value| body_betas_long_context(Some(&value));
        assert!(asked(json!(["tools-2024", " Context-1M-2025-08-07"])).unwrap());
        assert!(!asked(json!(["prompt-caching-2024-07-31"])).unwrap());
        assert!(!body_betas_long_context(None).unwrap());
        assert!(asked(json!("context-1m-2025-08-07")).is_err());
        assert!(asked(json!([1])).is_err());
        // On a Messages body, as Vertex AI's and Bedrock's clients send it.
        let call = parse(
            Bytes::from(
                json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5,
                       "anthropic_beta": ["context-1m-2025-08-07"],
                       "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
            ),
            Some("m"),
            Some(false),
        )
        .unwrap();
        assert!(call.options.long_context);
    }

    #[test]
    fn beta_headers_are_normalised_before_they_are_checked() {
        let check = |value: &[u8]| {
            let mut headers = HeaderMap::new();
            headers.insert("anthropic-beta", HeaderValue::from_bytes(value).unwrap());
            long_context(&headers)
        };
        assert!(!check(b"prompt-caching-2024-07-31, token-efficient-tools-2025-02-19").unwrap());
        for long in [
            &b"context-1m-2025-08-07"[..],
            b"tools-2024, Context-1M-2025-08-07",
        ] {
            assert!(check(long).unwrap(), "{}", String::from_utf8_lossy(long));
        }
        for refused in [
            &b"context-1m-2025-08-07\xc3\xa9"[..],
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
