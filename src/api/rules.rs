//! Request rules beyond each field's type: work the gateway could not
//! settle, and options providers
//! bill at rates the price table does not hold, which would charge a call
//! less than it costs (hosted tools the model's entry does not price among
//! them). Options billed at other rates (the priority tier, the hour-long
//! cache, the long context) are read into [`PricedOptions`] and refused
//! only for a model whose entry lacks their prices; a tier left to the
//! project's default is no such option, and never refused. Values are
//! normalised before they are checked, so a variant of a refused option
//! is refused too.

use http::HeaderMap;
use serde_json::{Map, Value};

use super::{bad, Api, Call};
use crate::error::GatewayError;
use crate::prices::{ModelPrice, PricedOptions, TierRequest};

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

/// Refuses an option billed at rates the model's price entry does not
/// hold, naming the option and the missing price fields.
pub fn check_priced_options(call: &Call, price: &ModelPrice) -> Result<(), GatewayError> {
    match call.options.unpriced(price) {
        None => Ok(()),
        Some(unpriced) => Err(GatewayError::BadRequest {
            message: format!(
                "{} is billed at rates this gateway has no price for on model `{}` ({} in \
                 its price table); remove the option, or ask the operator to price it",
                unpriced.option, call.model, unpriced.field,
            ),
            param: unpriced.param,
            code: Some("option_not_priced"),
        }),
    }
}

/// The rules a body must pass whatever its provider, and the priced
/// options it asks for.
pub(super) fn check_body(
    api: Api,
    body: &Map<String, Value>,
) -> Result<PricedOptions, GatewayError> {
    check_background(api, body)?;
    let tier = check_service_tier(api, body)?;
    let hour_cache = match api {
        Api::Messages => match cache_lifetimes(body) {
            CacheLifetimes::Default => false,
            CacheLifetimes::Hour => true,
            CacheLifetimes::Other => {
                return Err(bad(
                    "a cache_control ttl other than \"5m\" or \"1h\" is billed at a \
                     cache-write rate this gateway does not price; use \"5m\" or \"1h\"",
                    None,
                ))
            }
        },
        _ => false,
    };
    Ok(PricedOptions {
        tier,
        hour_cache,
        long_context: false,
    })
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

/// The tier the call names, in any spelling, so that no variant is billed
/// at priority rates while reserved at standard ones: `"priority"` asks
/// for OpenAI's priority tier; none, or `"auto"`, leaves it to the
/// project's default, which may be priority; the other tiers allowed are
/// billed at the standard rates (flex costs less); any other may be
/// billed more.
fn check_service_tier(api: Api, body: &Map<String, Value>) -> Result<TierRequest, GatewayError> {
    let tier = match body.get("service_tier") {
        None | Some(Value::Null) => return Ok(TierRequest::Open),
        Some(Value::String(tier)) => tier.trim().to_ascii_lowercase(),
        Some(_) => return Err(bad("`service_tier` must be a string", Some("service_tier"))),
    };
    match tier.as_str() {
        "auto" => Ok(TierRequest::Open),
        "default" | "flex" | "standard_only" => Ok(TierRequest::Standard),
        "priority" if api != Api::Messages => Ok(TierRequest::Priority),
        _ => Err(bad(
            &format!(
                "service_tier {tier:?} is billed at rates this gateway does not price; \
                 use \"auto\", \"default\", \"flex\" or, where priced, \"priority\""
            ),
            Some("service_tier"),
        )),
    }
}

/// Whether the request asks for Anthropic's long context (the
/// `context-1m` beta), billed at the long context rates; refused later for
/// a model whose entry lacks them. The header must be a plain list of beta
/// names, so that no spelling of it slips through.
pub fn check_headers(api: Api, headers: &HeaderMap) -> Result<bool, GatewayError> {
    if api != Api::Messages {
        return Ok(false);
    }
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
        long_context |= names
            .split(',')
            .any(|name| name.trim().to_ascii_lowercase().starts_with("context-1m"));
    }
    Ok(long_context)
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
    fn any_spelling_of_a_tier_is_read_and_other_tiers_are_refused() {
        let options = |api: Api, tier: &str| check_body(api, &body(json!({"service_tier": tier})));
        for tier in ["priority", "Priority", " priority", "PRIORITY "] {
            for api in [Api::ChatCompletions, Api::Responses, Api::Completions] {
                assert_eq!(
                    options(api, tier).unwrap().tier,
                    TierRequest::Priority,
                    "{tier}"
                );
            }
            assert!(options(Api::Messages, tier).is_err(), "{tier}");
        }
        for tier in ["scale", "turbo"] {
            assert!(options(Api::ChatCompletions, tier).is_err(), "{tier}");
        }
        for tier in ["default", "flex", "Default", " FLEX", "standard_only"] {
            assert_eq!(
                options(Api::ChatCompletions, tier).unwrap(),
                PricedOptions::STANDARD,
                "{tier}"
            );
        }
        // Left to the project's default tier, which may be priority.
        for tier in ["auto", "Auto", " AUTO "] {
            for api in [Api::ChatCompletions, Api::Responses, Api::Messages] {
                assert_eq!(
                    options(api, tier).unwrap().tier,
                    TierRequest::Open,
                    "{tier}"
                );
            }
        }
        for unnamed in [json!({}), json!({"service_tier": null})] {
            let options = check_body(Api::ChatCompletions, &body(unnamed)).unwrap();
            assert_eq!(options, PricedOptions::default());
            assert_eq!(options.tier, TierRequest::Open);
        }
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
            let options = check_body(Api::Messages, &body(value.clone())).unwrap();
            assert!(options.hour_cache, "{value}");
        }
        let refused = [
            json!({"tools": [{"cache_control": {"ttl": 3600}}]}),
            json!({"tools": [{"cache_control": {"ttl": "1h"}}, {"cache_control": {"ttl": "2h"}}]}),
        ];
        for value in refused {
            assert!(
                check_body(Api::Messages, &body(value.clone())).is_err(),
                "{value}"
            );
        }
        let default = json!({"cache_control": {"type": "ephemeral"}, "system": [{"cache_control": {"ttl": "5m"}}]});
        assert!(
            !check_body(Api::Messages, &body(default))
                .unwrap()
                .hour_cache
        );
    }

    #[test]
    fn an_unpriced_option_is_refused_naming_its_price_field() {
        let table = crate::prices::PriceTable::from_toml_str(
            r#"
            [models."plain"]
            input_per_mtok = "1"
            output_per_mtok = "1"
            "#,
        )
        .unwrap();
        let price = table.get("plain").unwrap();
        let body = json!({
            "model": "plain",
            "messages": [{"role": "user", "content": "hi"}],
            "service_tier": "priority",
        });
        let call = Call::parse(Api::ChatCompletions, bytes::Bytes::from(body.to_string())).unwrap();
        let Err(GatewayError::BadRequest {
            message,
            param,
            code,
        }) = check_priced_options(&call, price)
        else {
            panic!("not a bad request")
        };
        assert!(
            message.contains("priority") && message.contains("priority_input_per_mtok"),
            "{message}"
        );
        assert_eq!(
            (param, code),
            (Some("service_tier"), Some("option_not_priced"))
        );
        // A tier left open, or a standard one named, is no option to price.
        for tier in [
            None,
            Some(Value::Null),
            Some(json!("auto")),
            Some(json!("default")),
        ] {
            let mut body = body.clone();
            match tier {
                Some(tier) => body["service_tier"] = tier,
                None => body = json!({"model": "plain", "messages": body["messages"]}),
            }
            let call =
                Call::parse(Api::ChatCompletions, bytes::Bytes::from(body.to_string())).unwrap();
            check_priced_options(&call, price).unwrap();
        }
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
