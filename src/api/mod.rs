//! The provider API shapes the gateway proxies, and what it must know of a
//! request before forwarding it: the model, whether it streams, how many
//! choices it asks for, its output limit and its hosted tools' limits —
//! which the gateway sets when the client did not, so the reserved upper
//! bound holds at the provider.
//!
//! Each request is checked field by field: a bad value is a 400 naming the
//! field, before anything is reserved or forwarded.

mod json;
mod rules;
mod tools;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::{GatewayError, Shape};
use crate::prices::PricedOptions;
use crate::provider::OUTPUT_LIMIT_FIELDS;

pub(crate) use json::parse_unambiguous;
pub use rules::{check_headers, check_hosted_tools, check_priced_options};
pub use tools::{DeclaredTool, HostedTools, DEFAULT_MAX_TOOL_CALLS, DEFAULT_MAX_USES};

/// A proxied route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    ChatCompletions,
    Completions,
    Responses,
    Embeddings,
    Messages,
    /// Gemini's `generateContent` (and `streamGenerateContent`), on the
    /// Gemini API and on Vertex AI: the model and whether it streams are
    /// in the path, the output limit in `generationConfig`.
    GenerateContent,
}

/// The OpenAI API's default output limit of the legacy completions route:
/// setting it explicitly bounds the call without changing its behaviour.
const COMPLETIONS_DEFAULT_MAX_TOKENS: u64 = 16;

/// Largest `n` (or `best_of`) accepted, as OpenAI does.
const MAX_CHOICES: u64 = 128;

impl Api {
    pub fn from_path(path: &str) -> Option<Api> {
        Some(match path {
            "/v1/chat/completions" => Api::ChatCompletions,
            "/v1/completions" => Api::Completions,
            "/v1/responses" => Api::Responses,
            "/v1/embeddings" => Api::Embeddings,
            "/v1/messages" => Api::Messages,
            _ => return None,
        })
    }

    pub fn path(self) -> &'static str {
        match self {
            Api::ChatCompletions => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
            Api::Responses => "/v1/responses",
            Api::Embeddings => "/v1/embeddings",
            Api::Messages => "/v1/messages",
            Api::GenerateContent => "generateContent",
        }
    }

    pub fn shape(self) -> Shape {
        match self {
            Api::Messages => Shape::Anthropic,
            Api::GenerateContent => Shape::Google,
            _ => Shape::OpenAi,
        }
    }

    /// The body fields that limit output tokens, the API's own first: the
    /// one the gateway sets unless the provider reads another.
    pub fn output_limit_fields(self) -> &'static [&'static str] {
        match self {
            Api::ChatCompletions => &["max_completion_tokens", "max_tokens"],
            Api::Completions | Api::Messages => &["max_tokens"],
            Api::Responses => &["max_output_tokens"],
            // Inside `generationConfig` (see `Call::limit_at`).
            Api::GenerateContent => &["maxOutputTokens"],
            Api::Embeddings => &[],
        }
    }
}

/// A checked request, ready to be estimated and forwarded.
#[derive(Debug)]
pub struct Call {
    pub api: Api,
    pub model: String,
    pub stream: bool,
    /// Output tokens one choice may produce (0 for embeddings): the
    /// client's limit once parsed, the forwarded one once bounded
    /// ([`Call::bound_output`]).
    pub output_limit: u64,
    /// Whether the client set the output limit.
    pub(crate) limit_given: bool,
    /// Thinking tokens one choice may spend (Anthropic's
    /// `thinking.budget_tokens`, Gemini's `thinkingBudget`): thinking is
    /// output, and a provider may honour a budget above the output limit.
    pub(crate) thinking_budget: u64,
    /// The thinking budget comes on top of the output limit (Gemini)
    /// rather than inside it (Anthropic, where `max_tokens` must exceed
    /// it).
    pub(crate) thinking_beside_limit: bool,
    /// The call leaves its thinking to the model (Gemini's dynamic
    /// thinking): its budget is the model's most, set once the model's
    /// price is known.
    pub(crate) thinking_unbudgeted: bool,
    /// Where a nested output limit lives: the object and field names, as
    /// the client spelled them (Gemini's `generationConfig` /
    /// `generation_config` and `maxOutputTokens` / `max_output_tokens`);
    /// `None`: the API's top-level fields.
    pub(crate) limit_at: Option<(String, String)>,
    /// Choices generated (`n`, or `best_of` for legacy completions).
    pub choices: u64,
    /// The hosted tools it declares, each with the most uses the forwarded
    /// body allows ([`Call::bound_tool_uses`] sets the limits it lacks).
    pub tools: HostedTools,
    /// The options it asks for that are billed at other rates; the long
    /// context is asked for in a header, and set once headers are read.
    pub options: PricedOptions,
    /// The client did not ask for stream usage; the gateway asked for it
    /// upstream and hides the usage-only chunk from the client.
    pub hide_usage_chunk: bool,
    /// The parsed body; the estimate walks it.
    pub body: Map<String, Value>,
    /// The bytes to forward: the client's own, unless the gateway changed
    /// the body.
    pub(crate) original: Bytes,
    pub(crate) changed: bool,
}

impl Call {
    /// Parses and checks a request body. Its output limit is bounded once
    /// the provider is known ([`Call::bound_output`]).
    pub fn parse(api: Api, bytes: Bytes) -> Result<Call, GatewayError> {
        Call::parse_routed(api, bytes, None, None)
    }

    /// [`Call::parse`] for a route that names the model, or whether the
    /// call streams, in its path (Claude on Vertex AI): a body that says
    /// otherwise is refused.
    pub fn parse_routed(
        api: Api,
        bytes: Bytes,
        path_model: Option<&str>,
        path_stream: Option<bool>,
    ) -> Result<Call, GatewayError> {
        let body = json_object(&bytes)?;
        let model = match (body.get("model"), path_model) {
            (Some(Value::String(m)), None) if !m.is_empty() => m.clone(),
            (Some(_), None) => {
                return Err(bad("`model` must be a non-empty string", Some("model")))
            }
            (None, None) => return Err(bad("`model` is required", Some("model"))),
            (None, Some(model)) => model.to_owned(),
            (Some(Value::String(m)), Some(model)) if m == model => model.to_owned(),
            (Some(_), Some(model)) => {
                return Err(bad(
                    &format!(
                        "the model is named in the path (`{model}`): remove `model` from the body"
                    ),
                    Some("model"),
                ))
            }
        };
        let stream = match (body.get("stream"), path_stream) {
            (None | Some(Value::Null), None) => false,
            (Some(Value::Bool(b)), None) => *b,
            (None | Some(Value::Null), Some(stream)) => stream,
            (Some(Value::Bool(b)), Some(stream)) if *b == stream => stream,
            (Some(Value::Bool(_)), Some(stream)) => {
                return Err(bad(
                    &format!(
                        "`stream` disagrees with the route, which {}: remove it or call the \
                         other route",
                        if stream { "streams" } else { "does not stream" }
                    ),
                    Some("stream"),
                ))
            }
            (Some(_), _) => return Err(bad("`stream` must be true or false", Some("stream"))),
        };
        if stream && api == Api::Embeddings {
            return Err(bad(
                "embeddings do not stream: remove `stream`",
                Some("stream"),
            ));
        }
        check_input(api, &body)?;
        let options = rules::check_body(api, &body)?;
        let tools = HostedTools::of(api, &body)?;
        let choices = choices(api, &body)?;
        let client_limit = client_output_limit(api, &body)?;
        let thinking_budget = match api {
            Api::Messages => thinking_budget(&body)?.unwrap_or(0),
            _ => 0,
        };
        let mut call = Call {
            api,
            model,
            stream,
            output_limit: client_limit.unwrap_or(0),
            limit_given: client_limit.is_some(),
            thinking_budget,
            thinking_beside_limit: false,
            thinking_unbudgeted: false,
            limit_at: None,
            choices,
            tools,
            options,
            hide_usage_chunk: false,
            body,
            original: bytes,
            changed: false,
        };
        if stream && matches!(api, Api::ChatCompletions | Api::Completions) {
            call.ask_for_stream_usage()?;
        }
        call.bound_tool_uses();
        Ok(call)
    }

    /// The most output tokens one choice can be billed for.
    pub fn output_bound(&self) -> u64 {
        self.output_bound_at(self.output_limit)
    }

    /// The output bound the call would have with `limit` as its limit.
    pub fn output_bound_at(&self, limit: u64) -> u64 {
        if self.thinking_beside_limit {
            limit.saturating_add(self.thinking_budget)
        } else {
            limit.max(self.thinking_budget)
        }
    }

    /// Whether the client set the output limit.
    pub fn limit_given(&self) -> bool {
        self.limit_given
    }

    /// Whether the call sets a thinking budget its output limit must stay
    /// above (Anthropic): such a call's limit is never lowered.
    pub fn has_thinking_budget(&self) -> bool {
        self.thinking_budget > 0 && !self.thinking_beside_limit
    }

    /// The body to forward.
    pub fn forward_body(&self) -> Bytes {
        if self.changed {
            // Serialising a parsed JSON map cannot fail.
            Bytes::from(serde_json::to_vec(&self.body).unwrap_or_default())
        } else {
            self.original.clone()
        }
    }

    /// Makes the forwarded body carry the output limit exactly where the
    /// provider reads it, so the provider cannot bill past the bound: in
    /// each of `provider_fields` that this API has (its own field when
    /// none is named), and in no other limit field of the API. A client
    /// that set no limit gets `default` (the model's maximum).
    pub fn bound_output(&mut self, default: u64, provider_fields: &[String]) {
        // Embeddings produce no output tokens.
        let Some(targets) = self.limit_targets(provider_fields) else {
            return;
        };
        if !self.limit_given {
            self.output_limit = if self.api == Api::Completions {
                COMPLETIONS_DEFAULT_MAX_TOKENS
            } else {
                default
            };
        }
        self.write_output_limit(&targets);
    }

    /// Sends the call with `limit` as its output limit (per choice), where
    /// [`Call::bound_output`] puts it: the gateway lowered it to fit what
    /// remains of the budget.
    pub fn fit_output(&mut self, limit: u64, provider_fields: &[String]) {
        if let Some(targets) = self.limit_targets(provider_fields) {
            self.output_limit = limit;
            self.write_output_limit(&targets);
        }
    }

    /// The limit fields of this API that the provider reads (its own field
    /// when it names none); `None` for an API without output.
    fn limit_targets(&self, provider_fields: &[String]) -> Option<Vec<&'static str>> {
        let fields = self.api.output_limit_fields();
        let named: Vec<&'static str> = fields
            .iter()
            .copied()
            .filter(|field| provider_fields.iter().any(|named| named == field))
            .collect();
        match (named.is_empty(), fields.first()) {
            (false, _) => Some(named),
            (true, Some(own)) => Some(vec![*own]),
            (true, None) => None,
        }
    }

    /// Writes the output limit into `targets` and removes it from the API's
    /// other limit fields.
    fn write_output_limit(&mut self, targets: &[&'static str]) {
        let limit = Value::from(self.output_limit);
        if let Some((object, field)) = &self.limit_at {
            let entry = self
                .body
                .entry(object.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if entry.is_null() {
                *entry = Value::Object(Map::new());
            }
            if let Value::Object(config) = entry {
                if config.get(field) != Some(&limit) {
                    config.insert(field.clone(), limit);
                    self.changed = true;
                }
            }
            return;
        }
        let fields = self.api.output_limit_fields();
        for field in fields {
            let wanted = targets.contains(field);
            let present = self.body.get(*field);
            if wanted && present != Some(&limit) {
                self.body.insert((*field).to_owned(), limit.clone());
                self.changed = true;
            } else if !wanted && present.is_some() {
                self.body.remove(*field);
                self.changed = true;
            }
        }
    }

    /// Makes an OpenAI stream report its usage: without it a stream's cost
    /// could only be guessed.
    fn ask_for_stream_usage(&mut self) -> Result<(), GatewayError> {
        let options = self
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
                self.hide_usage_chunk = true;
                self.changed = true;
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
}

/// A request body: one JSON object that names no key twice.
pub(crate) fn json_object(bytes: &[u8]) -> Result<Map<String, Value>, GatewayError> {
    match json::parse_unambiguous(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(bad("the request body must be a JSON object", None)),
        Err(e) => Err(bad(
            &format!("the request body is not valid JSON: {e}"),
            None,
        )),
    }
}

pub(crate) fn bad(message: &str, param: Option<&'static str>) -> GatewayError {
    GatewayError::BadRequest {
        message: message.to_owned(),
        param,
        code: None,
    }
}

/// A field that must be a positive integer when present.
fn positive_int(
    body: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<u64>, GatewayError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(bad(
                &format!("`{field}` must be a positive integer"),
                Some(field),
            )),
        },
    }
}

/// The output limit the client set, if any. Two limit fields that
/// disagree are refused: a provider may read either, so the call's bound
/// would depend on which one it reads. Anthropic requires `max_tokens`.
fn client_output_limit(api: Api, body: &Map<String, Value>) -> Result<Option<u64>, GatewayError> {
    // Another API's limit field: a provider might honour it, or refuse it.
    let own = api.output_limit_fields();
    if let Some(foreign) = OUTPUT_LIMIT_FIELDS
        .iter()
        .find(|field| !own.contains(field) && body.get(**field).is_some_and(|v| !v.is_null()))
    {
        let hint = match own.first() {
            Some(field) => format!("limit the output with `{field}`"),
            None => "remove it".to_owned(),
        };
        return Err(bad(
            &format!(
                "`{foreign}` is not an output limit of {}: {hint}",
                api.path()
            ),
            Some(foreign),
        ));
    }
    let mut limit: Option<(&str, u64)> = None;
    for field in api.output_limit_fields() {
        let Some(value) = positive_int(body, field)? else {
            continue;
        };
        match limit {
            Some((first, other)) if other != value => {
                return Err(bad(
                    &format!(
                        "`{first}` ({other}) and `{field}` ({value}) disagree: \
                         set one output limit"
                    ),
                    Some(field),
                ))
            }
            _ => limit = Some((field, value)),
        }
    }
    if api == Api::Messages && limit.is_none() {
        return Err(bad("`max_tokens` is required", Some("max_tokens")));
    }
    Ok(limit.map(|(_, value)| value))
}

/// `thinking.budget_tokens` of an Anthropic request, when thinking is on.
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

/// The input each API requires.
fn check_input(api: Api, body: &Map<String, Value>) -> Result<(), GatewayError> {
    match api {
        Api::ChatCompletions | Api::Messages => match body.get("messages") {
            Some(Value::Array(items)) if !items.is_empty() => {
                if items.iter().all(Value::is_object) {
                    Ok(())
                } else {
                    Err(bad(
                        "every item of `messages` must be an object",
                        Some("messages"),
                    ))
                }
            }
            Some(_) => Err(bad(
                "`messages` must be a non-empty array",
                Some("messages"),
            )),
            None => Err(bad("`messages` is required", Some("messages"))),
        },
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
        // Checked by its family (the gemini family's `request` module).
        Api::GenerateContent => Ok(()),
    }
}

#[cfg(test)]
mod tests;
