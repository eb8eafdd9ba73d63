//! An OpenAI request as the gateway must read it before sending it: the
//! input each API requires, its choices (`n`, and `best_of` on legacy
//! completions, times each prompt), its output limit (set when absent), a
//! stream's usage (asked for when the client did not, and hidden from it),
//! its service tier, background mode (refused: a background response
//! outlives its request), and its hosted tools (`tools`).

mod tools;

use bytes::Bytes;
use serde_json::{Map, Value};

pub use tools::DEFAULT_MAX_TOOL_CALLS;

use crate::api::{
    bad, check_messages, client_output_limit, json_object, model_of, positive_int, service_tier,
    stream_of, Api, Call,
};
use crate::error::GatewayError;
use crate::prices::PricedOptions;

/// The OpenAI API's default output limit of the legacy completions route:
/// setting it explicitly bounds the call without changing its behaviour.
const COMPLETIONS_DEFAULT_MAX_TOKENS: u64 = 16;

/// Largest `n` (or `best_of`) accepted, as OpenAI does.
const MAX_CHOICES: u64 = 128;

/// Parses and checks a body of `api`, one of OpenAI's. Its output limit is
/// bounded once the provider is known ([`Call::bound_output`]).
pub fn parse(api: Api, bytes: Bytes) -> Result<Call, GatewayError> {
    parse_for(api, bytes, None)
}

/// [`parse`] for a route that names what serves the call in its path (an
/// Azure deployment): the body's `model`, if any, is not read, as the
/// provider does not read it.
pub fn parse_for(api: Api, bytes: Bytes, path_model: Option<&str>) -> Result<Call, GatewayError> {
    let body = json_object(&bytes)?;
    let model = match path_model {
        Some(model) => model.to_owned(),
        None => model_of(&body, None)?,
    };
    let stream = stream_of(&body, None)?;
    if stream && api == Api::Embeddings {
        return Err(bad(
            "embeddings do not stream: remove `stream`",
            Some("stream"),
        ));
    }
    check_input(api, &body)?;
    check_background(api, &body)?;
    let options = PricedOptions {
        tier: service_tier(&body, true)?,
        ..PricedOptions::default()
    };
    let tools = tools::of(api, &body)?;
    let choices = choices(api, &body)?;
    let client_limit = client_output_limit(api, &body)?;
    let mut call = Call {
        api,
        model,
        stream,
        output_limit: client_limit.unwrap_or(0),
        limit_given: client_limit.is_some(),
        default_limit: (api == Api::Completions).then_some(COMPLETIONS_DEFAULT_MAX_TOKENS),
        thinking_budget: 0,
        thinking_beside_limit: false,
        thinking_unbudgeted: false,
        limit_at: None,
        choices,
        tools,
        options,
        hide_usage_chunk: false,
        served_as: None,
        body,
        original: bytes,
        touched: Vec::new(),
    };
    if stream && matches!(api, Api::ChatCompletions | Api::Completions) {
        ask_for_stream_usage(&mut call)?;
    }
    tools::bound_uses(&mut call);
    Ok(call)
}

/// The input each API requires.
fn check_input(api: Api, body: &Map<String, Value>) -> Result<(), GatewayError> {
    match api {
        Api::ChatCompletions => check_messages(body),
        Api::Completions => match body.get("prompt") {
            Some(Value::String(_) | Value::Array(_)) => Ok(()),
            Some(_) => Err(bad("`prompt` must be a string or an array", Some("prompt"))),
            None => Err(bad("`prompt` is required", Some("prompt"))),
        },
        Api::Embeddings => match body.get("input") {
            Some(Value::String(s)) if !s.is_empty() => Ok(()),
            Some(Value::Array(items)) if !items.is_empty() => Ok(()),
            Some(_) => Err(bad(
                "`input` must be a non-empty string or array",
                Some("input"),
            )),
            None => Err(bad("`input` is required", Some("input"))),
        },
        Api::Responses => match body.get("input") {
            Some(Value::String(_) | Value::Array(_)) => Ok(()),
            Some(Value::Null) | None
                if body.contains_key("previous_response_id")
                    || body.contains_key("conversation")
                    || body.contains_key("prompt") =>
            {
                Ok(())
            }
            Some(_) => Err(bad("`input` must be a string or an array", Some("input"))),
            None => Err(bad("`input` is required", Some("input"))),
        },
        Api::Messages | Api::GenerateContent | Api::Converse => Ok(()),
    }
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

fn choices(api: Api, body: &Map<String, Value>) -> Result<u64, GatewayError> {
    let fields: &[&'static str] = match api {
        Api::ChatCompletions => &["n"],
        Api::Completions => &["n", "best_of"],
        _ => &[],
    };
    let mut choices = 1;
    for field in fields {
        if let Some(n) = positive_int(body, field)? {
            if n > MAX_CHOICES {
                return Err(bad(
                    &format!("`{field}` must be at most {MAX_CHOICES}"),
                    Some(field),
                ));
            }
            choices = choices.max(n);
        }
    }
    Ok(choices.saturating_mul(prompts(api, body)))
}

/// How many prompts one legacy completions request carries: each gets its
/// own `n` choices. An array of strings or of token arrays is several
/// prompts; a string, or one array of token ids, is one.
fn prompts(api: Api, body: &Map<String, Value>) -> u64 {
    match (api, body.get("prompt")) {
        (Api::Completions, Some(Value::Array(items)))
            if items.iter().any(|item| !item.is_number()) =>
        {
            items.len().max(1) as u64
        }
        _ => 1,
    }
}

/// Makes an OpenAI stream report its usage: without it a stream's cost
/// could only be guessed.
fn ask_for_stream_usage(call: &mut Call) -> Result<(), GatewayError> {
    let options = call
        .body
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Map::new()));
    if options.is_null() {
        *options = Value::Object(Map::new());
    }
    let Value::Object(options) = options else {
        return Err(bad(
            "`stream_options` must be an object",
            Some("stream_options"),
        ));
    };
    match options.get("include_usage") {
        Some(Value::Bool(true)) => {}
        None | Some(Value::Null) | Some(Value::Bool(false)) => {
            options.insert("include_usage".to_owned(), Value::Bool(true));
            call.hide_usage_chunk = true;
            call.touch("stream_options");
        }
        Some(_) => {
            return Err(bad(
                "`stream_options.include_usage` must be true or false",
                Some("stream_options"),
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn background_is_refused_with_its_code() {
        let error =
            check_background(Api::Responses, &body(json!({"background": true}))).unwrap_err();
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
            check_background(Api::Responses, &body(allowed)).unwrap();
        }
        assert!(check_background(Api::Responses, &body(json!({"background": "true"}))).is_err());
    }
}
