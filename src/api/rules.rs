//! Options providers bill at rates the price table does not hold, which
//! would charge a call less than it costs (hosted tools the model's entry
//! does not price among them). Options billed at other rates (the priority
//! tier, the hour-long cache, the long context) are read by each family
//! into [`PricedOptions`](crate::prices::PricedOptions) and refused here only for a model whose entry
//! lacks their prices; a tier left to the project's default is no such
//! option, and never refused. Values are normalised before they are
//! checked, so a variant of a refused option is refused too.

use serde_json::{Map, Value};

use super::{bad, Call};
use crate::error::GatewayError;
use crate::prices::{ModelPrice, TierRequest};

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

/// The tier the call names, in any spelling, so that no variant is billed
/// at priority rates while reserved at standard ones: `"priority"` asks
/// for OpenAI's priority tier; none, or `"auto"`, leaves it to the
/// project's default, which may be priority; the other tiers allowed are
/// billed at the standard rates (flex costs less); any other may be
/// billed more. `priority` is refused where the API has no priority tier
/// the gateway prices (Anthropic's).
pub(crate) fn service_tier(
    body: &Map<String, Value>,
    priority_priced: bool,
) -> Result<TierRequest, GatewayError> {
    let tier = match body.get("service_tier") {
        None | Some(Value::Null) => return Ok(TierRequest::Open),
        Some(Value::String(tier)) => tier.trim().to_ascii_lowercase(),
        Some(_) => return Err(bad("`service_tier` must be a string", Some("service_tier"))),
    };
    match tier.as_str() {
        "auto" => Ok(TierRequest::Open),
        "default" | "flex" | "standard_only" => Ok(TierRequest::Standard),
        "priority" if priority_priced => Ok(TierRequest::Priority),
        _ => Err(bad(
            &format!(
                "service_tier {tier:?} is billed at rates this gateway does not price; \
                 use \"auto\", \"default\", \"flex\" or, where priced, \"priority\""
            ),
            Some("service_tier"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Api;
    use serde_json::json;

    fn body(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn any_spelling_of_a_tier_is_read_and_other_tiers_are_refused() {
        let tier_of = |tier: &str, priority_priced: bool| {
            service_tier(&body(json!({"service_tier": tier})), priority_priced)
        };
        for tier in ["priority", "Priority", " priority", "PRIORITY "] {
            assert_eq!(
                tier_of(tier, true).unwrap(),
                TierRequest::Priority,
                "{tier}"
            );
            assert!(tier_of(tier, false).is_err(), "{tier}");
        }
        for tier in ["scale", "turbo"] {
            assert!(tier_of(tier, true).is_err(), "{tier}");
        }
        for tier in ["default", "flex", "Default", " FLEX", "standard_only"] {
            assert_eq!(
                tier_of(tier, true).unwrap(),
                TierRequest::Standard,
                "{tier}"
            );
        }
        // Left to the project's default tier, which may be priority.
        for tier in ["auto", "Auto", " AUTO "] {
            for priority_priced in [true, false] {
                assert_eq!(
                    tier_of(tier, priority_priced).unwrap(),
                    TierRequest::Open,
                    "{tier}"
                );
            }
        }
        for unnamed in [json!({}), json!({"service_tier": null})] {
            assert_eq!(
                service_tier(&body(unnamed), true).unwrap(),
                TierRequest::Open
            );
        }
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
        let call = crate::family::parse_own_route(
            Api::ChatCompletions,
            bytes::Bytes::from(body.to_string()),
        )
        .unwrap();
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
            let call = crate::family::parse_own_route(
                Api::ChatCompletions,
                bytes::Bytes::from(body.to_string()),
            )
            .unwrap();
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
            crate::family::parse_own_route(Api::Responses, bytes::Bytes::from(body.to_string()))
                .unwrap()
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
}
