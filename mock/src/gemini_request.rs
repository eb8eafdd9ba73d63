//! What a Gemini request asks for, read as Google reads it: fields by
//! their JSON names (`generationConfig`) or their proto names
//! (`generation_config`), integers as numbers or strings, the `contents`
//! and their prompt count, the test directives, the function to call and
//! whether Google Search is declared.

use http::StatusCode;
use serde_json::Value;

use super::function::FunctionCall;
use super::handler::ApiError;
use super::reply::Directives;

/// A field by its JSON name, or by its proto name (`generation_config` for
/// `generationConfig`), which Google's parser accepts as well.
pub(crate) fn field<'a>(object: &'a Value, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| {
        let mut snake = String::with_capacity(name.len() + 4);
        for ch in name.chars() {
            if ch.is_ascii_uppercase() {
                snake.push('_');
                snake.push(ch.to_ascii_lowercase());
            } else {
                snake.push(ch);
            }
        }
        object.get(snake.as_str())
    })
}

/// An integer field, given as a number or a string as proto JSON allows;
/// anything else is 400.
pub(crate) fn int_field(object: &Value, name: &str) -> Result<Option<i64>, ApiError> {
    let value = match field(object, name) {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => value,
    };
    let parsed = match value {
        Value::Number(number) => number.as_i64().or_else(|| {
            number
                .as_f64()
                .filter(|float| float.fract() == 0.0 && float.abs() < 2e15)
                .map(|float| float as i64)
        }),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    };
    parsed.map(Some).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("Invalid value at '{name}' (TYPE_INT32), {value}"),
        )
    })
}

/// The request's `contents`: a non-empty array of contents with parts.
pub(crate) fn contents(body: &Value) -> Result<&[Value], ApiError> {
    let contents = field(body, "contents")
        .and_then(Value::as_array)
        .filter(|contents| !contents.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "* GenerateContentRequest.contents: contents is not specified",
            )
        })?;
    for (index, content) in contents.iter().enumerate() {
        if parts(content).is_empty() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "* GenerateContentRequest.contents[{index}].parts: contents.parts must \
                     not be empty."
                ),
            ));
        }
    }
    Ok(contents)
}

pub(crate) fn parts(content: &Value) -> &[Value] {
    field(content, "parts")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A content's role; Google takes a missing one as the user's.
pub(crate) fn role(content: &Value) -> &str {
    content
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("user")
}

pub(crate) fn is_function_response(content: &Value) -> bool {
    parts(content)
        .iter()
        .any(|part| field(part, "functionResponse").is_some())
}

/// ceil(bytes / 4) of each text, plus 3 per content (the system
/// instruction is one): Google publishes no tokenizer, so this stands in
/// for its count. A part's text is its `text`, a function call's name and
/// `args` JSON, or a function response's name and `response` JSON.
pub(crate) fn prompt_tokens(system: Option<&Value>, contents: &[Value]) -> u64 {
    system
        .into_iter()
        .chain(contents)
        .map(|content| {
            let texts: u64 = match content {
                Value::String(text) => quarter(text.len()),
                content => parts(content).iter().map(part_tokens).sum(),
            };
            texts + 3
        })
        .sum()
}

pub(crate) fn part_tokens(part: &Value) -> u64 {
    if let Some(Value::String(text)) = part.get("text") {
        return quarter(text.len());
    }
    let named = |call: &Value, payload: &str| {
        let name = call.get("name").and_then(Value::as_str).unwrap_or("");
        let payload = call.get(payload).map_or(0, |value| value.to_string().len());
        quarter(name.len() + payload)
    };
    if let Some(call) = field(part, "functionCall") {
        return named(call, "args");
    }
    if let Some(response) = field(part, "functionResponse") {
        return named(response, "response");
    }
    0
}

pub(crate) fn quarter(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// The directives of the last user content that is not a function
/// response: the prompt, also once a function's result comes back.
pub(crate) fn prompt_directives(contents: &[Value]) -> Directives {
    contents
        .iter()
        .rev()
        .find(|content| role(content) == "user" && !is_function_response(content))
        .map(|content| {
            let texts: Vec<&str> = parts(content)
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect();
            Directives::parse(&texts.join("\n"))
        })
        .unwrap_or_default()
}

/// The request's `tools`.
pub(crate) fn tools(body: &Value) -> impl Iterator<Item = &Value> {
    field(body, "tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Whether a Google Search tool is declared (`googleSearch`, or
/// `googleSearchRetrieval` of the older models).
pub(crate) fn declares_search(body: &Value) -> bool {
    tools(body).any(|tool| {
        field(tool, "googleSearch").is_some() || field(tool, "googleSearchRetrieval").is_some()
    })
}

/// The function to call: declared in `functionDeclarations`, allowed by
/// `toolConfig.functionCallingConfig` (not mode `NONE`; the first of
/// `allowedFunctionNames`), and the conversation ends with the user's own
/// content rather than a function response.
pub(crate) fn function_call(body: &Value, contents: &[Value]) -> Option<FunctionCall> {
    let last = contents.last()?;
    if role(last) != "user" || is_function_response(last) {
        return None;
    }
    let calling =
        field(body, "toolConfig").and_then(|config| field(config, "functionCallingConfig"));
    let mode = calling
        .and_then(|config| config.get("mode"))
        .and_then(Value::as_str);
    if mode.is_some_and(|mode| mode.eq_ignore_ascii_case("NONE")) {
        return None;
    }
    let allowed: Option<Vec<&str>> = calling
        .and_then(|config| field(config, "allowedFunctionNames"))
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect());
    tools(body)
        .filter_map(|tool| field(tool, "functionDeclarations").and_then(Value::as_array))
        .flatten()
        .filter_map(|declaration| {
            let name = declaration.get("name")?.as_str()?;
            let schema = field(declaration, "parametersJsonSchema")
                .or_else(|| declaration.get("parameters"));
            Some((name, schema))
        })
        .find(|(name, _)| {
            allowed
                .as_ref()
                .is_none_or(|allowed| allowed.contains(name))
        })
        .map(|(name, schema)| FunctionCall::new("call_", name, schema))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_read_by_json_or_proto_name_and_integers_as_strings() {
        let config = json!({"max_output_tokens": "7", "candidateCount": 2.0});
        assert_eq!(int_field(&config, "maxOutputTokens").unwrap(), Some(7));
        assert_eq!(int_field(&config, "candidateCount").unwrap(), Some(2));
        assert_eq!(int_field(&config, "topK").unwrap(), None);
        assert!(int_field(&json!({"topK": "x"}), "topK").is_err());
        assert!(int_field(&json!({"topK": 1.5}), "topK").is_err());
    }

    #[test]
    fn the_prompt_counts_each_text_and_three_per_content() {
        let system = json!({"parts": [{"text": "be brief"}]});
        let contents = [
            json!({"role": "user", "parts": [{"text": "hello"}, {"text": "x"}]}),
            json!({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}),
        ];
        // 8/4 + 3, then ceil(5/4) + ceil(1/4) + 3, then ceil(("f" + "{}")/4) + 3.
        assert_eq!(prompt_tokens(Some(&system), &contents), 5 + 6 + 4);
        assert_eq!(prompt_tokens(Some(&json!("abcd")), &contents[..1]), 4 + 6);
    }
}
