//! A `generateContent` request as the gateway must read it before sending
//! it: its output limit (`generationConfig.maxOutputTokens`, set when
//! absent), its choices (`candidateCount`), its thinking budget
//! (`thinkingConfig.thinkingBudget`; unset or dynamic: the model's
//! `max_thinking_tokens`), and its tools — function declarations run by
//! the client, Grounding with Google Search priced per use, every other
//! Google-run tool refused (Google bills them in ways the gateway cannot
//! bound).
//!
//! Google's JSON parser reads every field under its camelCase and its
//! snake_case name (`maxOutputTokens`, `max_output_tokens`), and the
//! Python SDK sends some of each: both are read, and a body naming one
//! field both ways is refused, since the gateway could not know which the
//! provider reads. Audio input is billed above the text rate on Gemini's
//! models and the price table holds text rates only: it is refused.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::api::{bad, json_object, Api, Call, DeclaredTool, HostedTools};
use crate::error::GatewayError;
use crate::hosted::HostedTool;
use crate::prices::{ModelPrice, PricedOptions, TierRequest};

/// The most candidates one request may ask for, as Google allows.
const MAX_CANDIDATES: u64 = 8;

/// Google Search queries reserved for a model billed per query: Google
/// sets no limit a request can name, so a call that searches more is
/// charged the rest as an overrun.
const SEARCH_QUERIES_RESERVED: u64 = 5;

/// Parses and checks a `generateContent` body for `model` (named in the
/// path); `stream` when the route streams.
pub fn parse(model: &str, stream: bool, bytes: Bytes) -> Result<Call, GatewayError> {
    let body = json_object(&bytes)?;
    match body.get("model") {
        None => {}
        Some(Value::String(named)) if named == model || named == &format!("models/{model}") => {}
        Some(_) => {
            return Err(bad(
                &format!(
                    "the model is named in the path (`{model}`): remove `model` from the body"
                ),
                Some("model"),
            ))
        }
    }
    let config = generation_config(&body)?;
    let (limit_at, output_limit) = match &config {
        Some((key, config)) => {
            let field = spelled(config, "maxOutputTokens", "max_output_tokens")?;
            let limit = match field {
                Some((_, value)) => Some(positive(value, "generationConfig.maxOutputTokens")?),
                None => None,
            };
            let field = field.map_or("maxOutputTokens", |(name, _)| name);
            (((*key).to_owned(), field.to_owned()), limit)
        }
        // Written where the client named it, if only as null: a body
        // naming the config under both spellings would read differently
        // to different parsers.
        None => {
            let named = spelled(&body, "generationConfig", "generation_config")?;
            let key = named.map_or("generationConfig", |(name, _)| name);
            ((key.to_owned(), "maxOutputTokens".to_owned()), None)
        }
    };
    let config = config.map(|(_, config)| config);
    let choices = match config
        .and_then(|c| spelled(c, "candidateCount", "candidate_count").transpose())
    {
        None => 1,
        Some(field) => {
            let (_, value) = field?;
            let count = positive(value, "generationConfig.candidateCount")?;
            if count > MAX_CANDIDATES {
                return Err(bad(
                    &format!("`generationConfig.candidateCount` must be at most {MAX_CANDIDATES}"),
                    Some("generationConfig"),
                ));
            }
            count
        }
    };
    let thinking = match config {
        Some(config) => thinking(config)?,
        None => Thinking::Dynamic,
    };
    check_contents(&body)?;
    check_audio(&body)?;
    let tools = tools(model, &body)?;
    let (thinking_budget, thinking_unbudgeted) = match thinking {
        Thinking::Budget(budget) => (budget, false),
        Thinking::Dynamic => (0, true),
    };
    Ok(Call {
        api: Api::GenerateContent,
        model: model.to_owned(),
        stream,
        output_limit: output_limit.unwrap_or(0),
        limit_given: output_limit.is_some(),
        default_limit: None,
        thinking_budget,
        thinking_beside_limit: true,
        thinking_unbudgeted,
        limit_at: Some(limit_at),
        choices,
        tools,
        // Gemini has no priority tier a request can be billed at.
        options: PricedOptions {
            tier: TierRequest::Standard,
            ..PricedOptions::default()
        },
        hide_usage_chunk: false,
        served_as: None,
        body,
        original: bytes,
        touched: Vec::new(),
    })
}

/// Once the model's price is known: a call that leaves its thinking to
/// the model may think as much as the model can.
pub fn bound_thinking(call: &mut Call, price: &ModelPrice) {
    if call.thinking_unbudgeted {
        call.thinking_budget = price
            .max_thinking_tokens
            .or(price.max_output_tokens.filter(|_| price.reasoning))
            .unwrap_or(0);
    }
}

/// How much a call may think.
enum Thinking {
    /// `thinkingBudget` ≥ 0: at most that many tokens (0: no thinking).
    Budget(u64),
    /// Unset, `-1`, or a `thinkingLevel`: as much as the model decides.
    Dynamic,
}

/// A JSON object and the name it came under.
type Named<'a> = (&'static str, &'a Map<String, Value>);

/// `generationConfig` under either spelling, with the name it came under;
/// `None` when absent or null.
fn generation_config(body: &Map<String, Value>) -> Result<Option<Named<'_>>, GatewayError> {
    match spelled(body, "generationConfig", "generation_config")? {
        None | Some((_, Value::Null)) => Ok(None),
        Some((name, Value::Object(config))) => Ok(Some((name, config))),
        Some(_) => Err(bad(
            "`generationConfig` must be an object",
            Some("generationConfig"),
        )),
    }
}

fn thinking(config: &Map<String, Value>) -> Result<Thinking, GatewayError> {
    let thinking = match spelled(config, "thinkingConfig", "thinking_config")? {
        None | Some((_, Value::Null)) => return Ok(Thinking::Dynamic),
        Some((_, Value::Object(thinking))) => thinking,
        Some(_) => {
            return Err(bad(
                "`generationConfig.thinkingConfig` must be an object",
                Some("generationConfig"),
            ))
        }
    };
    match spelled(thinking, "thinkingBudget", "thinking_budget")? {
        None | Some((_, Value::Null)) => Ok(Thinking::Dynamic),
        Some((_, value)) => match value.as_i64() {
            Some(-1) => Ok(Thinking::Dynamic),
            Some(budget) if budget >= 0 => Ok(Thinking::Budget(budget.unsigned_abs())),
            _ => Err(bad(
                "`generationConfig.thinkingConfig.thinkingBudget` must be -1 (dynamic), 0 (off) \
                 or a positive number of tokens",
                Some("generationConfig"),
            )),
        },
    }
}

/// The field `camel` of `object`, or its snake_case spelling, with the
/// name it came under; refused when both are there.
fn spelled<'a>(
    object: &'a Map<String, Value>,
    camel: &'static str,
    snake: &'static str,
) -> Result<Option<(&'static str, &'a Value)>, GatewayError> {
    match (object.get(camel), object.get(snake)) {
        (Some(_), Some(_)) => Err(GatewayError::BadRequest {
            message: format!(
                "`{camel}` and `{snake}` name the same field: send it once, under one name"
            ),
            param: Some(camel),
            code: None,
        }),
        (Some(value), None) => Ok(Some((camel, value))),
        (None, Some(value)) => Ok(Some((snake, value))),
        (None, None) => Ok(None),
    }
}

/// A positive whole number named `name` in messages.
fn positive(value: &Value, name: &str) -> Result<u64, GatewayError> {
    match value.as_u64() {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(bad(
            &format!("`{name}` must be a positive integer"),
            Some("generationConfig"),
        )),
    }
}

/// `contents`: a non-empty array of objects (the conversation).
fn check_contents(body: &Map<String, Value>) -> Result<(), GatewayError> {
    match body.get("contents") {
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_object) => {
            Ok(())
        }
        Some(_) => Err(bad(
            "`contents` must be a non-empty array of objects",
            Some("contents"),
        )),
        None => Err(bad("`contents` is required", Some("contents"))),
    }
}

/// Refuses audio parts anywhere in the request: Gemini bills audio input
/// above its text rate, which the price table does not hold.
fn check_audio(body: &Map<String, Value>) -> Result<(), GatewayError> {
    fn any_audio(value: &Value) -> bool {
        match value {
            Value::Array(items) => items.iter().any(any_audio),
            Value::Object(map) => map.iter().any(|(key, value)| {
                let media = matches!(key.as_str(), "mimeType" | "mime_type")
                    && value
                        .as_str()
                        .is_some_and(|mime| mime.trim().to_ascii_lowercase().starts_with("audio/"));
                media || any_audio(value)
            }),
            _ => false,
        }
    }
    let parts = ["contents", "systemInstruction", "system_instruction"];
    if parts.iter().filter_map(|key| body.get(*key)).any(any_audio) {
        return Err(GatewayError::BadRequest {
            message: "audio input is billed at a rate this gateway does not price for Gemini \
                      models; send text, images, video or documents instead"
                .to_owned(),
            param: Some("contents"),
            code: Some("option_not_priced"),
        });
    }
    Ok(())
}

/// The request's tools: function declarations (run by the client, billed
/// as tokens) and Grounding with Google Search; any other tool Google
/// runs is refused, naming it.
fn tools(model: &str, body: &Map<String, Value>) -> Result<HostedTools, GatewayError> {
    let tools = match body.get("tools") {
        None | Some(Value::Null) => return Ok(HostedTools::default()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(bad("`tools` must be an array", Some("tools"))),
    };
    let mut hosted = HostedTools::default();
    for (index, tool) in tools.iter().enumerate() {
        let Value::Object(tool) = tool else {
            return Err(bad(
                "each entry of `tools` must be an object",
                Some("tools"),
            ));
        };
        for name in tool.keys() {
            match name.as_str() {
                "functionDeclarations" | "function_declarations" => {}
                "googleSearch"
                | "google_search"
                | "googleSearchRetrieval"
                | "google_search_retrieval" => {
                    hosted.declared.push(google_search(model, name, index));
                }
                other => {
                    return Err(GatewayError::BadRequest {
                        message: format!(
                            "the tool `{other}` is run and billed by Google in a way this \
                             gateway cannot bound before the call; remove it (function \
                             declarations and googleSearch are supported)"
                        ),
                        param: Some("tools"),
                        code: Some("tool_not_supported"),
                    })
                }
            }
        }
    }
    Ok(hosted)
}

/// Grounding with Google Search, as the model is billed for it: Gemini
/// 1.x and 2.x per grounded request (one unit), newer models per search
/// query (reserved for [`SEARCH_QUERIES_RESERVED`]).
fn google_search(model: &str, name: &str, index: usize) -> DeclaredTool {
    let per_request = model.starts_with("gemini-1") || model.starts_with("gemini-2");
    DeclaredTool {
        tool: HostedTool::GoogleSearch,
        name: name.to_owned(),
        index: Some(index),
        max_uses: (!per_request).then_some(SEARCH_QUERIES_RESERVED),
        per_request: per_request.then_some(1),
        result_limit: None,
    }
}

#[cfg(test)]
mod tests;
