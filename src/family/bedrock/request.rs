//! A Converse request as the gateway must read it before sending it:
//! `messages`, its output limit (`inferenceConfig.maxTokens`, set when
//! absent), Claude's thinking budget
//! (`additionalModelRequestFields.thinking.budget_tokens`, inside the
//! limit as on Anthropic's API), its cache points (an hour-long one is
//! priced as Anthropic's hour-long cache), and the options Bedrock bills
//! at rates the price table does not hold: guardrails (billed per text
//! unit), the latency-optimized tier, and service tiers other than the
//! standard one. Every one of those is refused, as is a tool Bedrock runs
//! itself (`systemTool`).

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Map, Value};

use super::super::anthropic;
use crate::api::{bad, check_messages, json_object, positive_int, Api, Call, HostedTools};
use crate::error::GatewayError;
use crate::prices::{PricedOptions, TierRequest};

/// Where Converse keeps its output limit.
const LIMIT_AT: (&str, &str) = ("inferenceConfig", "maxTokens");

/// Parses and checks a Converse body for `model` (named in the path);
/// `stream` on `converse-stream`.
pub fn parse(model: &str, stream: bool, bytes: Bytes) -> Result<Call, GatewayError> {
    let body = json_object(&bytes)?;
    if body.contains_key("modelId") || body.contains_key("model") {
        return Err(bad(
            &format!("the model is named in the path (`{model}`): remove it from the body"),
            Some("modelId"),
        ));
    }
    check_messages(&body)?;
    let limit = match body.get(LIMIT_AT.0) {
        None | Some(Value::Null) => None,
        Some(Value::Object(config)) => positive_int(config, LIMIT_AT.1)?,
        Some(_) => {
            return Err(bad(
                "`inferenceConfig` must be an object",
                Some("inferenceConfig"),
            ))
        }
    };
    refuse_unpriced(&body)?;
    check_tools(&body)?;
    let options = PricedOptions {
        tier: service_tier(&body)?,
        hour_cache: hour_cache(&body),
        // Claude's betas pass through `additionalModelRequestFields`.
        long_context: anthropic::request::body_betas_long_context(
            body.get("additionalModelRequestFields")
                .and_then(|fields| fields.get("anthropic_beta")),
        )?,
    };
    Ok(Call {
        api: Api::Converse,
        model: model.to_owned(),
        stream,
        output_limit: limit.unwrap_or(0),
        limit_given: limit.is_some(),
        default_limit: None,
        thinking_budget: thinking_budget(&body)?.unwrap_or(0),
        thinking_beside_limit: false,
        thinking_unbudgeted: false,
        limit_at: Some((LIMIT_AT.0.to_owned(), LIMIT_AT.1.to_owned())),
        choices: 1,
        tools: HostedTools::default(),
        options,
        hide_usage_chunk: false,
        served_as: None,
        body,
        original: bytes,
        touched: Vec::new(),
    })
}

/// Options billed at rates the price table does not hold.
fn refuse_unpriced(body: &Map<String, Value>) -> Result<(), GatewayError> {
    let unpriced = |message: &str, param| GatewayError::BadRequest {
        message: message.to_owned(),
        param: Some(param),
        code: Some("option_not_priced"),
    };
    if body
        .get("guardrailConfig")
        .is_some_and(|config| !config.is_null())
    {
        return Err(unpriced(
            "guardrails are billed per text unit, which this gateway does not price; remove \
             `guardrailConfig`",
            "guardrailConfig",
        ));
    }
    let latency = body
        .get("performanceConfig")
        .and_then(|config| config.get("latency"));
    match latency {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(latency)) if latency == "standard" => Ok(()),
        Some(_) => Err(unpriced(
            "latency-optimized inference is billed at rates this gateway does not price; use \
             `performanceConfig.latency` \"standard\" or remove it",
            "performanceConfig",
        )),
    }
}

/// Bedrock's service tier: standard unless the request names another.
fn service_tier(body: &Map<String, Value>) -> Result<TierRequest, GatewayError> {
    let tier = match body.get("serviceTier") {
        None | Some(Value::Null) => return Ok(TierRequest::Standard),
        Some(tier) => tier.get("type"),
    };
    match tier.and_then(Value::as_str) {
        None | Some("default") => Ok(TierRequest::Standard),
        // Flex costs less than the standard tier.
        Some("flex") => Ok(TierRequest::Standard),
        Some("priority") => Ok(TierRequest::Priority),
        Some(other) => Err(GatewayError::BadRequest {
            message: format!(
                "serviceTier {other:?} is billed at rates this gateway does not price; use \
                 \"default\" or \"flex\""
            ),
            param: Some("serviceTier"),
            code: Some("option_not_priced"),
        }),
    }
}

/// Tools Bedrock runs itself are billed outside tokens; the client's own
/// (`toolSpec`) and cache points are tokens only.
fn check_tools(body: &Map<String, Value>) -> Result<(), GatewayError> {
    let tools = match body
        .get("toolConfig")
        .and_then(|config| config.get("tools"))
    {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(tools)) => tools,
        Some(_) => {
            return Err(bad(
                "`toolConfig.tools` must be an array",
                Some("toolConfig"),
            ))
        }
    };
    for tool in tools {
        let Some(kind) = tool.as_object().and_then(|entry| entry.keys().next()) else {
            return Err(bad("every tool must be an object", Some("toolConfig")));
        };
        if !matches!(kind.as_str(), "toolSpec" | "cachePoint") {
            return Err(GatewayError::BadRequest {
                message: format!(
                    "the tool `{kind}` is run and billed by Bedrock in ways this gateway cannot \
                     bound before the call; remove it"
                ),
                param: Some("toolConfig"),
                code: Some("tool_not_supported"),
            });
        }
    }
    Ok(())
}

/// Claude's thinking budget, passed in `additionalModelRequestFields`.
fn thinking_budget(body: &Map<String, Value>) -> Result<Option<u64>, GatewayError> {
    let thinking = body
        .get("additionalModelRequestFields")
        .and_then(|fields| fields.get("thinking"));
    match thinking.and_then(|thinking| thinking.get("budget_tokens")) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(bad(
                "`additionalModelRequestFields.thinking.budget_tokens` must be a positive integer",
                Some("additionalModelRequestFields"),
            )),
        },
    }
}

/// Whether any cache point asks for the hour-long cache.
fn hour_cache(body: &Map<String, Value>) -> bool {
    fn any(value: &Value) -> bool {
        match value {
            Value::Array(items) => items.iter().any(any),
            Value::Object(map) => map.iter().any(|(key, value)| {
                (key == "cachePoint" && value.get("ttl").and_then(Value::as_str) == Some("1h"))
                    || any(value)
            }),
            _ => false,
        }
    }
    body.values().any(any)
}

/// The headers of an `invoke` call that move its price: a guardrail, the
/// latency-optimized tier or another service tier, each refused as in a
/// Converse body.
pub(crate) fn check_invoke_headers(headers: &HeaderMap) -> Result<(), GatewayError> {
    let refused = |name: &str, why: &str| GatewayError::BadRequest {
        message: format!("{name} {why}; remove the header"),
        param: None,
        code: Some("option_not_priced"),
    };
    if headers.contains_key("x-amzn-bedrock-guardrailidentifier") {
        return Err(refused(
            "X-Amzn-Bedrock-GuardrailIdentifier",
            "adds guardrails, billed per text unit, which this gateway does not price",
        ));
    }
    let value = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if value("x-amzn-bedrock-performanceconfig-latency").is_some_and(|v| v != "standard") {
        return Err(refused(
            "X-Amzn-Bedrock-PerformanceConfig-Latency",
            "asks for latency-optimized inference, billed at rates this gateway does not price",
        ));
    }
    if value("x-amzn-bedrock-service-tier").is_some_and(|v| !matches!(v, "default" | "flex")) {
        return Err(refused(
            "X-Amzn-Bedrock-Service-Tier",
            "asks for a tier billed at rates this gateway does not price",
        ));
    }
    Ok(())
}
