//! Function tools: tools the client declares and runs itself (OpenAI's
//! `function` tools, Anthropic's custom tools, Gemini's
//! `functionDeclarations`, which `gemini` finds). When a request declares one,
//! its `tool_choice` allows it, and the conversation ends with the user's
//! own message (not a tool result), the mock calls the tool instead of
//! replying; once the client sends the result back, the mock replies with
//! text as usual.
//!
//! The call is to the tool `tool_choice` names, else the first one. Its
//! arguments are a JSON object made from the tool's parameter schema (each
//! property's `const`, first `enum` value, `default`, or a placeholder of
//! its type), so a client that validates them against the schema accepts
//! them. The call's output tokens are the o200k_base tokens of the
//! arguments text; a stream sends one token per delta. Neither
//! `mock:tokens` nor the request's output limit shortens a call.

use serde_json::{json, Map, Value};

use super::handler::new_id;
use super::reply::{tokenizer, u64_field};

/// How deep an argument schema is followed; deeper values are `null`.
const MAX_SCHEMA_DEPTH: usize = 8;

/// The placeholder for a string argument: one token, as every reply word.
const STRING_ARGUMENT: &str = "lorem";

/// A call of a function tool, the whole turn's answer.
#[derive(Clone, Debug)]
pub(crate) struct FunctionCall {
    /// The id the client echoes with the result (`call_…` or `toolu_…`).
    pub call_id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
    /// `arguments` cut into one o200k_base token per piece, as streamed.
    pub pieces: Vec<String>,
}

impl FunctionCall {
    /// A call of `name` with arguments made from its `parameters` schema.
    pub(crate) fn new(id_prefix: &str, name: &str, parameters: Option<&Value>) -> Self {
        let arguments = parameters
            .map(|schema| example(schema, 0))
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}))
            .to_string();
        Self {
            call_id: new_id(id_prefix),
            name: name.to_owned(),
            pieces: token_pieces(&arguments),
            arguments,
        }
    }

    /// Output tokens billed for the call.
    pub(crate) fn tokens(&self) -> u64 {
        self.pieces.len() as u64
    }

    /// The arguments as a JSON value (Anthropic's `input`).
    pub(crate) fn input(&self) -> Value {
        serde_json::from_str(&self.arguments).unwrap_or_else(|_| json!({}))
    }

    /// The call on `/v1/chat/completions`: `tools` of type `function`, and
    /// a last message from the `user`.
    pub(crate) fn for_chat(body: &Value, messages: &[Value]) -> Option<Self> {
        let last_is_user = messages
            .last()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            == Some("user");
        if !last_is_user {
            return None;
        }
        let tools = declared(body, |tool| {
            if tool.get("type").and_then(Value::as_str) != Some("function") {
                return None;
            }
            let function = tool.get("function")?;
            Some((function.get("name")?.as_str()?, function.get("parameters")))
        });
        fn named(choice: &Value) -> Option<&str> {
            choice.pointer("/function/name")?.as_str()
        }
        choose(body, &tools, named).map(|(name, schema)| Self::new("call_", name, schema))
    }

    /// The call on `/v1/responses`: `tools` of type `function`, and an
    /// `input` that is a string or ends with a `user` message.
    pub(crate) fn for_responses(body: &Value) -> Option<Self> {
        let last_is_user = match body.get("input") {
            Some(Value::String(_)) => true,
            Some(Value::Array(items)) => items.last().is_some_and(|item| {
                let kind = item
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("message");
                kind == "message" && item.get("role").and_then(Value::as_str) == Some("user")
            }),
            _ => false,
        };
        if !last_is_user {
            return None;
        }
        let tools = declared(body, |tool| {
            if tool.get("type").and_then(Value::as_str) != Some("function") {
                return None;
            }
            Some((tool.get("name")?.as_str()?, tool.get("parameters")))
        });
        fn named(choice: &Value) -> Option<&str> {
            choice.get("name")?.as_str()
        }
        choose(body, &tools, named).map(|(name, schema)| Self::new("call_", name, schema))
    }

    /// The call on `/v1/messages`: custom `tools` (no `type`, or
    /// `custom`), and a last `user` message that carries no `tool_result`.
    pub(crate) fn for_messages(body: &Value, messages: &[Value]) -> Option<Self> {
        let last = messages.last()?;
        if last.get("role").and_then(Value::as_str) != Some("user") || is_tool_result(last) {
            return None;
        }
        let tools = declared(body, |tool| {
            if !matches!(
                tool.get("type").and_then(Value::as_str),
                None | Some("custom")
            ) {
                return None;
            }
            Some((tool.get("name")?.as_str()?, tool.get("input_schema")))
        });
        fn named(choice: &Value) -> Option<&str> {
            if choice.get("type").and_then(Value::as_str) != Some("tool") {
                return None;
            }
            choice.get("name")?.as_str()
        }
        choose(body, &tools, named).map(|(name, schema)| Self::new("toolu_", name, schema))
    }
}

/// Whether an Anthropic `user` message carries a `tool_result` block.
pub(crate) fn is_tool_result(message: &Value) -> bool {
    message
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .any(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        })
}

/// A declared function tool: its name and parameter schema.
type Declared<'a> = (&'a str, Option<&'a Value>);

/// The request's function tools, as `read` finds them in `tools`.
fn declared<'a>(
    body: &'a Value,
    read: impl Fn(&'a Value) -> Option<Declared<'a>>,
) -> Vec<Declared<'a>> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(read).collect())
        .unwrap_or_default()
}

/// The tool to call: none when `tool_choice` is `none`, the one it names
/// (as `named` reads it), else the first.
fn choose<'a>(
    body: &'a Value,
    tools: &[Declared<'a>],
    named: fn(&Value) -> Option<&str>,
) -> Option<Declared<'a>> {
    let choice = body.get("tool_choice");
    let kind = choice.and_then(|c| c.as_str().or_else(|| c.get("type")?.as_str()));
    if kind == Some("none") {
        return None;
    }
    match choice.and_then(named) {
        Some(wanted) => tools.iter().find(|(name, _)| *name == wanted).copied(),
        None => tools.first().copied(),
    }
}

/// A value the JSON schema accepts: its `const`, first `enum` value or
/// `default`, the first `anyOf`/`oneOf` branch, or a placeholder of its
/// type (an object with every property).
fn example(schema: &Value, depth: usize) -> Value {
    if depth > MAX_SCHEMA_DEPTH {
        return Value::Null;
    }
    if let Some(value) = schema.get("const").or_else(|| schema.get("default")) {
        return value.clone();
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        if let Some(branch) = schema
            .get(combinator)
            .and_then(Value::as_array)
            .and_then(|b| b.first())
        {
            return example(branch, depth + 1);
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => Some(kind.as_str()),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| !k.eq_ignore_ascii_case("null")),
        _ => None,
    };
    let kind = kind.unwrap_or(if schema.get("properties").is_some() {
        "object"
    } else {
        "string"
    });
    // Gemini's schema names its types in capitals (`OBJECT`, `STRING`).
    match kind.to_ascii_lowercase().as_str() {
        "object" => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let object: Map<String, Value> = properties
                .into_iter()
                .flatten()
                .map(|(name, property)| (name.clone(), example(property, depth + 1)))
                .collect();
            Value::Object(object)
        }
        "array" => {
            let items = schema.get("items").cloned().unwrap_or(Value::Null);
            let count = u64_field(schema, "minItems").unwrap_or(0).min(16);
            Value::Array((0..count).map(|_| example(&items, depth + 1)).collect())
        }
        "integer" | "number" => json!(schema
            .get("minimum")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(1)),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!(STRING_ARGUMENT),
    }
}

/// `text` cut into its o200k_base tokens (into pieces of up to 4 bytes if
/// the tokenizer is unavailable).
fn token_pieces(text: &str) -> Vec<String> {
    if let Some(pieces) = tokenizer().and_then(|bpe| bpe.split_by_token_ordinary(text).ok()) {
        if pieces.concat() == text {
            return pieces;
        }
    }
    let mut pieces = Vec::new();
    let mut piece = String::new();
    for ch in text.chars() {
        if piece.len() + ch.len_utf8() > 4 {
            pieces.push(std::mem::take(&mut piece));
        }
        piece.push(ch);
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::count_tokens;

    #[test]
    fn arguments_follow_the_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 3},
                "exact": {"type": ["boolean", "null"]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "where": {"anyOf": [{"type": "object", "properties": {"lat": {"type": "number"}}}]},
            },
            "required": ["city"],
            "additionalProperties": false,
        });
        assert_eq!(
            example(&schema, 0),
            json!({"city": "lorem", "unit": "celsius", "days": 3, "exact": true,
                "tags": ["lorem"], "where": {"lat": 1}})
        );
    }

    #[test]
    fn gemini_schema_types_in_capitals_are_understood() {
        let schema = json!({"type": "OBJECT", "properties": {
            "city": {"type": "STRING"}, "days": {"type": "INTEGER"},
            "hot": {"type": "BOOLEAN", "nullable": true}}});
        assert_eq!(
            example(&schema, 0),
            json!({"city": "lorem", "days": 1, "hot": true})
        );
    }

    #[test]
    fn a_call_streams_one_token_per_piece() {
        let call = FunctionCall::new(
            "call_",
            "get_weather",
            Some(&json!({"type": "object", "properties": {"city": {"type": "string"}}})),
        );
        assert_eq!(call.arguments, r#"{"city":"lorem"}"#);
        assert_eq!(call.pieces.concat(), call.arguments);
        assert_eq!(call.tokens(), count_tokens(&call.arguments));
        assert_eq!(call.input(), json!({"city": "lorem"}));
        let bare = FunctionCall::new("toolu_", "now", None);
        assert_eq!(bare.arguments, "{}");
        assert!(bare.tokens() >= 1);
    }

    #[test]
    fn a_call_needs_a_tool_a_user_turn_and_a_choice_that_allows_it() {
        let tool = json!({"type": "function", "function": {"name": "a"}});
        let other = json!({"type": "function", "function": {"name": "b"}});
        let user = [json!({"role": "user", "content": "hi"})];
        let body = json!({"tools": [tool, other]});
        assert_eq!(FunctionCall::for_chat(&body, &user).unwrap().name, "a");
        let result = [
            json!({"role": "user", "content": "hi"}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "ok"}),
        ];
        assert!(FunctionCall::for_chat(&body, &result).is_none());
        assert!(FunctionCall::for_chat(&json!({}), &user).is_none());
        let none = json!({"tools": [tool], "tool_choice": "none"});
        assert!(FunctionCall::for_chat(&none, &user).is_none());
        let forced = json!({"tools": [tool, other],
            "tool_choice": {"type": "function", "function": {"name": "b"}}});
        assert_eq!(FunctionCall::for_chat(&forced, &user).unwrap().name, "b");

        let responses = json!({"tools": [{"type": "web_search"}, {"type": "function", "name": "f"}],
            "input": "hi"});
        assert_eq!(FunctionCall::for_responses(&responses).unwrap().name, "f");
        let answered = json!({"tools": [{"type": "function", "name": "f"}], "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
        ]});
        assert!(FunctionCall::for_responses(&answered).is_none());

        let anthropic = json!({"tools": [{"type": "web_search_20250305", "name": "web_search"},
            {"name": "get_weather", "input_schema": {"type": "object"}}]});
        let call = FunctionCall::for_messages(&anthropic, &user).unwrap();
        assert_eq!(call.name, "get_weather");
        assert!(call.call_id.starts_with("toolu_"));
        let with_result = [json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]})];
        assert!(FunctionCall::for_messages(&anthropic, &with_result).is_none());
        let none = json!({"tools": anthropic["tools"], "tool_choice": {"type": "none"}});
        assert!(FunctionCall::for_messages(&none, &user).is_none());
    }
}
