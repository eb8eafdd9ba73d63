//! The API shapes the gateway proxies, and the [`Call`] every provider
//! family reads a request into: what the gateway must know of it before
//! forwarding it — the model, whether it streams, how many choices it asks
//! for, its output limit and its hosted tools' limits, which the gateway
//! sets when the client did not, so the reserved upper bound holds at the
//! provider.
//!
//! Each family's request rules (in the family modules) build the call,
//! field by field: a bad value is a 400 naming the field, before anything
//! is reserved or forwarded. This module holds what they share: the call
//! and its output limit, the one JSON reading of a body, the checks more
//! than one family makes, and the refusals of options and hosted tools the
//! model's price does not cover.

mod json;
mod rules;
mod splice;
mod tools;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::{GatewayError, Shape};
use crate::prices::PricedOptions;
use crate::provider::OUTPUT_LIMIT_FIELDS;
use crate::upstream::Payload;

pub(crate) use json::parse_unambiguous;
pub(crate) use rules::service_tier;
pub use rules::{check_hosted_tools, check_priced_options};
pub(crate) use tools::{count, refuse, tool_entries, unknown, ToolKind, NOT_SUPPORTED};
pub use tools::{DeclaredTool, HostedTools};

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
    /// Amazon Bedrock's Converse: the model in the path, the output limit
    /// in `inferenceConfig`.
    Converse,
}

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
            Api::Converse => "converse",
        }
    }

    pub fn shape(self) -> Shape {
        match self {
            Api::Messages => Shape::Anthropic,
            Api::GenerateContent => Shape::Google,
            Api::Converse => Shape::Bedrock,
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
            // Inside `generationConfig` and `inferenceConfig` (see
            // `Call::limit_at`).
            Api::GenerateContent => &["maxOutputTokens"],
            Api::Converse => &["maxTokens"],
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
    /// The limit the gateway sets when the client gives none, where that
    /// is not the model's most: the API's own default when setting it
    /// bounds the call without changing it (legacy completions' 16). Such
    /// a limit is never fitted to the budget.
    pub(crate) default_limit: Option<u64>,
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
    /// body allows (each family sets the limits it lacks).
    pub tools: HostedTools,
    /// The options it asks for that are billed at other rates; the long
    /// context is asked for in a header, and set once headers are read.
    pub options: PricedOptions,
    /// The client did not ask for stream usage; the gateway asked for it
    /// upstream and hides the usage-only chunk from the client.
    pub hide_usage_chunk: bool,
    /// The name the provider serves the model under, where it is not the
    /// priced model: an Azure deployment.
    pub(crate) served_as: Option<String>,
    /// The parsed body; the estimate walks it.
    pub body: Map<String, Value>,
    /// The client's bytes, forwarded as they are but for the top-level
    /// members the gateway changed.
    pub(crate) original: Bytes,
    /// The top-level members of `body` the gateway set, changed or
    /// removed ([`Call::touch`]).
    pub(crate) touched: Vec<String>,
}

impl Call {
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

    /// The name the provider serves the model under: an Azure
    /// deployment, the Bedrock id the client named, else the model.
    pub fn served_as(&self) -> &str {
        self.served_as.as_deref().unwrap_or(&self.model)
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

    /// The body to forward: the client's bytes, with the members the
    /// gateway touched spliced in.
    pub fn forward_body(&self) -> Payload {
        if self.touched.is_empty() {
            return Payload::from(self.original.clone());
        }
        match splice::splice(&self.original, &self.body, &self.touched) {
            Some(parts) => Payload::from_parts(parts),
            // Serialising a parsed JSON map cannot fail.
            None => Payload::from(serde_json::to_vec(&self.body).unwrap_or_default()),
        }
    }

    /// Records that the gateway set, changed or removed the top-level
    /// member `key` of the body: it is forwarded as the body has it now.
    pub(crate) fn touch(&mut self, key: &str) {
        if !self.touched.iter().any(|touched| touched == key) {
            self.touched.push(key.to_owned());
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
            self.output_limit = self.default_limit.unwrap_or(default);
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
            let changed = match entry {
                Value::Object(config) if config.get(field) != Some(&limit) => {
                    config.insert(field.clone(), limit);
                    true
                }
                _ => false,
            };
            if changed {
                let object = object.clone();
                self.touch(&object);
            }
            return;
        }
        let fields = self.api.output_limit_fields();
        for field in fields {
            let wanted = targets.contains(field);
            let present = self.body.get(*field);
            if wanted && present != Some(&limit) {
                self.body.insert((*field).to_owned(), limit.clone());
                self.touch(field);
            } else if !wanted && present.is_some() {
                self.body.remove(*field);
                self.touch(field);
            }
        }
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
pub(crate) fn positive_int(
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
/// would depend on which one it reads.
pub(crate) fn client_output_limit(
    api: Api,
    body: &Map<String, Value>,
) -> Result<Option<u64>, GatewayError> {
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
    Ok(limit.map(|(_, value)| value))
}

/// The model a body names (or the route's, when its path names it) and
/// whether the call streams (or the route says): a body that disagrees
/// with its route is refused.
pub(crate) fn model_and_stream(
    body: &Map<String, Value>,
    path_model: Option<&str>,
    path_stream: Option<bool>,
) -> Result<(String, bool), GatewayError> {
    Ok((model_of(body, path_model)?, stream_of(body, path_stream)?))
}

/// The model a body names, or the route's when its path names it.
pub(crate) fn model_of(
    body: &Map<String, Value>,
    path_model: Option<&str>,
) -> Result<String, GatewayError> {
    match (body.get("model"), path_model) {
        (Some(Value::String(m)), None) if !m.is_empty() => Ok(m.clone()),
        (Some(_), None) => Err(bad("`model` must be a non-empty string", Some("model"))),
        (None, None) => Err(bad("`model` is required", Some("model"))),
        (None, Some(model)) => Ok(model.to_owned()),
        (Some(Value::String(m)), Some(model)) if m == model => Ok(model.to_owned()),
        (Some(_), Some(model)) => Err(bad(
            &format!("the model is named in the path (`{model}`): remove `model` from the body"),
            Some("model"),
        )),
    }
}

/// Whether the call streams: the body's `stream`, or the route's when its
/// path says.
pub(crate) fn stream_of(
    body: &Map<String, Value>,
    path_stream: Option<bool>,
) -> Result<bool, GatewayError> {
    match (body.get("stream"), path_stream) {
        (None | Some(Value::Null), None) => Ok(false),
        (Some(Value::Bool(b)), None) => Ok(*b),
        (None | Some(Value::Null), Some(stream)) => Ok(stream),
        (Some(Value::Bool(b)), Some(stream)) if *b == stream => Ok(stream),
        (Some(Value::Bool(_)), Some(stream)) => Err(bad(
            &format!(
                "`stream` disagrees with the route, which {}: remove it or call the other route",
                if stream { "streams" } else { "does not stream" }
            ),
            Some("stream"),
        )),
        (Some(_), _) => Err(bad("`stream` must be true or false", Some("stream"))),
    }
}

/// `messages`, which Chat Completions and Anthropic's Messages require: a
/// non-empty array of objects.
pub(crate) fn check_messages(body: &Map<String, Value>) -> Result<(), GatewayError> {
    match body.get("messages") {
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
    }
}
