//! Google's Gemini API (`/v1beta/models/...`, `/v1/models/...`) and the
//! Gemini models Vertex AI serves under `publishers/google`: their routes,
//! the API-key check, `generateContent` (its reply, function calls,
//! thoughts, grounding and `usageMetadata`), `countTokens`, the model list
//! and Google's error shape. The request is read by `gemini_request`, the
//! streamed form written by `gemini_stream`.

use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Map, Value};

use super::function::FunctionCall;
use super::gemini_request::{
    contents, declares_search, field, function_call, int_field, prompt_directives, prompt_tokens,
};
use super::handler::{directed_answer, new_id, Answer, ApiError};
use super::reply::{text, Reply, Tally};
use super::{gemini_stream, MockOptions};

/// The header Google's SDKs send the API key in.
pub(crate) const API_KEY_HEADER: &str = "x-goog-api-key";

/// The most candidates one request may ask for.
const MAX_CANDIDATES: u64 = 8;

/// What `GET /{version}/models` lists: name, display name, input and output
/// token limits, whether the model thinks.
const MODELS: [(&str, &str, u64, u64, bool); 4] = [
    ("gemini-2.5-pro", "Gemini 2.5 Pro", 1_048_576, 65_536, true),
    (
        "gemini-2.5-flash",
        "Gemini 2.5 Flash",
        1_048_576,
        65_536,
        true,
    ),
    (
        "gemini-2.5-flash-lite",
        "Gemini 2.5 Flash-Lite",
        1_048_576,
        65_536,
        true,
    ),
    (
        "gemini-2.0-flash",
        "Gemini 2.0 Flash",
        1_048_576,
        8_192,
        false,
    ),
];

/// Which Google API answers: Vertex adds `trafficType` to the usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Surface {
    GeminiApi,
    Vertex,
}

/// How a `streamGenerateContent` answer is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `?alt=sse`: `data: {json}\r\n\r\n` events.
    Sse,
    /// No `alt=sse`: one JSON array, `[{...}\n,\r\n{...}\n]`, written an
    /// element at a time.
    JsonArray,
}

/// What a model route is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModelMethod {
    Generate,
    Stream(Framing),
    CountTokens,
}

impl ModelMethod {
    /// The method a path's `:verb` names; the query says how to stream.
    pub(crate) fn of(verb: &str, query: Option<&str>) -> Option<Self> {
        match verb {
            "generateContent" => Some(Self::Generate),
            "streamGenerateContent" => Some(Self::Stream(
                if query_param(query, "alt").as_deref() == Some("sse") {
                    Framing::Sse
                } else {
                    Framing::JsonArray
                },
            )),
            "countTokens" => Some(Self::CountTokens),
            _ => None,
        }
    }
}

/// A Gemini API route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum GeminiRoute {
    ListModels,
    GetModel {
        version: &'static str,
        model: String,
    },
    Model {
        model: String,
        method: ModelMethod,
    },
}

impl GeminiRoute {
    /// Reads a Gemini API path. `GET /v1/models[/{model}]` is Gemini's only
    /// when the request carries a Google API key (`has_key`): without one
    /// it is an OpenAI client's.
    pub(crate) fn of(
        method: &Method,
        path: &str,
        query: Option<&str>,
        has_key: bool,
    ) -> Option<Self> {
        let (version, rest) = if let Some(rest) = path.strip_prefix("/v1beta/") {
            ("v1beta", rest)
        } else if let Some(rest) = path.strip_prefix("/v1/") {
            ("v1", rest)
        } else {
            return None;
        };
        let rest = rest.strip_prefix("models")?;
        if version == "v1" && !has_key && !rest.contains(':') {
            return None;
        }
        if rest.is_empty() {
            return (*method == Method::GET).then_some(Self::ListModels);
        }
        let name = rest.strip_prefix('/')?;
        if name.is_empty() || name.contains('/') {
            return None;
        }
        match name.split_once(':') {
            Some((model, verb)) if *method == Method::POST && !model.is_empty() => {
                Some(Self::Model {
                    model: model.to_owned(),
                    method: ModelMethod::of(verb, query)?,
                })
            }
            Some(_) => None,
            None => (*method == Method::GET).then(|| Self::GetModel {
                version,
                model: name.to_owned(),
            }),
        }
    }
}

/// The value of a query parameter, decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// The Google API key of a request: `x-goog-api-key`, else `?key=`.
pub(crate) fn api_key(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    headers
        .get(API_KEY_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(|| query_param(query, "key"))
        .filter(|key| !key.is_empty())
}

/// Every Gemini API call needs a key (403 without one, as Google answers);
/// when the mock expects one, another key is 400 `API_KEY_INVALID`.
pub(crate) fn authorize(
    headers: &HeaderMap,
    query: Option<&str>,
    expected: Option<&str>,
) -> Result<(), ApiError> {
    match (api_key(headers, query), expected) {
        (None, _) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Method doesn't allow unregistered callers (callers without established \
             identity). Please use API Key or other form of API consumer identity to call \
             this API.",
        )),
        (Some(key), Some(expected)) if key != expected => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "API key not valid. Please pass a valid API key.",
        )
        .with_code("API_KEY_INVALID")),
        (Some(_), _) => Ok(()),
    }
}

/// Google's error body; `status` follows the HTTP status, and an
/// [`ApiError`] code becomes the `reason` of an `ErrorInfo` detail.
pub(crate) fn error_body(error: &ApiError) -> Value {
    let status = match error.status.as_u16() {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        502 | 505..=599 => "UNKNOWN",
        _ => "INVALID_ARGUMENT",
    };
    let mut body = json!({"error": {
        "code": error.status.as_u16(),
        "message": error.message,
        "status": status,
    }});
    if let Some(reason) = error.code {
        body["error"]["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "googleapis.com",
        }]);
    }
    body
}

/// The error a `mock:status=CODE` directive asks for, worded as Google's.
fn directed_error(status: StatusCode) -> ApiError {
    let message = match status.as_u16() {
        400 => "Request contains an invalid argument.",
        401 => "Request had invalid authentication credentials.",
        403 => "The caller does not have permission.",
        404 => "Requested entity was not found.",
        429 => "Resource has been exhausted (e.g. check quota).",
        500 => "An internal error has occurred. Please retry.",
        503 => "The model is overloaded. Please try again later.",
        504 => "Deadline expired before operation could complete.",
        _ => "The request was rejected.",
    };
    ApiError::new(
        status,
        format!("{message} (mock:status={})", status.as_u16()),
    )
}

/// `GET /{version}/models`.
pub(crate) fn models() -> Value {
    json!({"models": MODELS.iter().map(model_entry).collect::<Vec<_>>()})
}

/// `GET /{version}/models/{model}`: a listed model, else 404.
pub(crate) fn model(version: &str, name: &str) -> Result<Value, ApiError> {
    MODELS
        .iter()
        .find(|(id, ..)| *id == name)
        .map(model_entry)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("models/{name} is not found for API version {version}."),
            )
        })
}

fn model_entry(&(id, display, input, output, thinking): &(&str, &str, u64, u64, bool)) -> Value {
    json!({
        "name": format!("models/{id}"),
        "version": "001",
        "displayName": display,
        "description": format!("{display}, as the mock serves it."),
        "inputTokenLimit": input,
        "outputTokenLimit": output,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "temperature": 1,
        "topP": 0.95,
        "topK": 64,
        "maxTemperature": 2,
        "thinking": thinking,
    })
}

/// `countTokens`: the prompt of `{contents}` or of
/// `{generateContentRequest: {...}}`, counted as [`generate`] counts it;
/// billed nothing.
pub(crate) fn count_tokens(body: &Value) -> Result<Answer, ApiError> {
    let request = field(body, "generateContentRequest").unwrap_or(body);
    let contents = contents(request)?;
    let total = prompt_tokens(field(request, "systemInstruction"), contents);
    Ok(Answer::Json {
        body: json!({
            "totalTokens": total,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}],
        }),
        tally: Tally::default(),
    })
}

/// `generateContent` (`stream` `None`) and `streamGenerateContent`.
pub(crate) fn generate(
    surface: Surface,
    model: &str,
    body: &Value,
    stream: Option<Framing>,
    opts: &MockOptions,
) -> Result<Answer, ApiError> {
    let contents = contents(body)?;
    let config = field(body, "generationConfig");
    let candidates = match config.map(|c| int_field(c, "candidateCount")).transpose()? {
        None | Some(None) | Some(Some(0)) => 1,
        Some(Some(count)) => u64::try_from(count)
            .ok()
            .filter(|count| *count <= MAX_CANDIDATES)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("candidateCount must be between 1 and {MAX_CANDIDATES}."),
                )
            })?,
    };
    let limit = match config
        .map(|c| int_field(c, "maxOutputTokens"))
        .transpose()?
        .flatten()
    {
        None => None,
        Some(limit) => Some(u64::try_from(limit).map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "maxOutputTokens must not be negative.",
            )
        })?),
    };
    let thinking = config.and_then(|c| field(c, "thinkingConfig"));
    let budget = thinking
        .map(|t| int_field(t, "thinkingBudget"))
        .transpose()?
        .flatten();
    let include_thoughts = thinking
        .and_then(|t| field(t, "includeThoughts"))
        .and_then(Value::as_bool)
        .unwrap_or(false);

    let directives = prompt_directives(contents);
    if let Some(status) = directives.status {
        return Err(directed_error(status));
    }
    let reply = opts.reply(&directives, limit);
    let call = function_call(body, contents);
    let thoughts = match budget.map(u64::try_from) {
        Some(Ok(budget)) => directives.thoughts.unwrap_or(0).min(budget),
        _ => directives.thoughts.unwrap_or(0),
    };
    let prompt = prompt_tokens(field(body, "systemInstruction"), contents);
    let generation = Generation {
        surface,
        model: model.to_owned(),
        response_id: new_id(""),
        candidates,
        per_candidate: call.as_ref().map_or(reply.tokens, FunctionCall::tokens),
        reply,
        call,
        include_thoughts,
        searches: if declares_search(body) {
            directives.tool_calls.unwrap_or(0)
        } else {
            0
        },
        prompt,
        cached: directives.cached.unwrap_or(0).min(prompt),
        thoughts,
        tool_prompt: directives.tool_prompt.unwrap_or(0),
    };
    let tally = generation.tally();
    if let Some(answer) = directed_answer(&directives, stream.is_some(), tally) {
        return answer;
    }
    match stream {
        Some(framing) => Ok(gemini_stream::answer(
            generation,
            framing,
            &directives,
            opts,
        )),
        None => {
            let parts = generation.answer_parts();
            let candidates = (0..candidates)
                .map(|index| generation.candidate(index, parts.clone(), true))
                .collect();
            Ok(Answer::Json {
                body: generation.response(candidates, generation.candidates_tokens()),
                tally,
            })
        }
    }
}

/// One answer being generated, and its counts.
pub(crate) struct Generation {
    surface: Surface,
    model: String,
    response_id: String,
    pub candidates: u64,
    /// Output tokens of one candidate (its reply or its function call).
    per_candidate: u64,
    pub reply: Reply,
    /// The function called in place of the reply.
    pub call: Option<FunctionCall>,
    /// `thinkingConfig.includeThoughts`: the reply shows a thought part.
    include_thoughts: bool,
    /// Google Search queries run (`groundingMetadata.webSearchQueries`).
    searches: u64,
    /// `promptTokenCount`, cached tokens included.
    prompt: u64,
    /// `cachedContentTokenCount`, part of `prompt`.
    cached: u64,
    /// `thoughtsTokenCount`, for the whole answer.
    pub thoughts: u64,
    /// `toolUsePromptTokenCount`, apart from `prompt`.
    tool_prompt: u64,
}

impl Generation {
    /// `candidatesTokenCount` of the whole answer.
    pub(crate) fn candidates_tokens(&self) -> u64 {
        self.per_candidate.saturating_mul(self.candidates)
    }

    /// What the answer bills: input is prompt − cached + tool-use prompt,
    /// output is candidates + thoughts (thoughts billed even when a stream
    /// stops early: they were generated first), one hosted-tool use per
    /// search query.
    pub(crate) fn tally(&self) -> Tally {
        Tally {
            prompt: self.prompt.saturating_add(self.tool_prompt),
            cached: self.cached,
            cache_write: 0,
            output: self.candidates_tokens().saturating_add(self.thoughts),
            hidden: self.thoughts,
            tool_calls: self.searches,
            hour_cache: false,
        }
    }

    pub(crate) fn finish_reason(&self) -> &'static str {
        if self.call.is_none() && self.reply.capped {
            "MAX_TOKENS"
        } else {
            "STOP"
        }
    }

    /// `usageMetadata` once `candidates_tokens` candidate tokens are out;
    /// zero counts are left out, as proto3 JSON leaves them.
    pub(crate) fn usage(&self, candidates_tokens: u64) -> Value {
        let mut usage = Map::new();
        usage.insert("promptTokenCount".into(), self.prompt.into());
        if candidates_tokens > 0 {
            usage.insert("candidatesTokenCount".into(), candidates_tokens.into());
        }
        let total = self
            .prompt
            .saturating_add(candidates_tokens)
            .saturating_add(self.thoughts)
            .saturating_add(self.tool_prompt);
        usage.insert("totalTokenCount".into(), total.into());
        usage.insert("promptTokensDetails".into(), by_modality(self.prompt));
        if self.cached > 0 {
            usage.insert("cachedContentTokenCount".into(), self.cached.into());
            usage.insert("cacheTokensDetails".into(), by_modality(self.cached));
        }
        if self.thoughts > 0 {
            usage.insert("thoughtsTokenCount".into(), self.thoughts.into());
        }
        if self.tool_prompt > 0 {
            usage.insert("toolUsePromptTokenCount".into(), self.tool_prompt.into());
            usage.insert(
                "toolUsePromptTokensDetails".into(),
                by_modality(self.tool_prompt),
            );
        }
        if self.surface == Surface::Vertex {
            usage.insert("trafficType".into(), "ON_DEMAND".into());
        }
        Value::Object(usage)
    }

    /// A response object (a whole answer or one streamed chunk).
    pub(crate) fn response(&self, candidates: Vec<Value>, candidates_tokens: u64) -> Value {
        json!({
            "candidates": candidates,
            "usageMetadata": self.usage(candidates_tokens),
            "modelVersion": self.model,
            "responseId": self.response_id,
        })
    }

    /// One candidate with `parts`; a `finished` one carries the finish
    /// reason and the grounding.
    pub(crate) fn candidate(&self, index: u64, parts: Vec<Value>, finished: bool) -> Value {
        let mut content = json!({"role": "model"});
        if !parts.is_empty() {
            content["parts"] = Value::Array(parts);
        }
        let mut candidate = json!({"content": content, "index": index});
        if finished {
            candidate["finishReason"] = self.finish_reason().into();
            if let Some(grounding) = self.grounding() {
                candidate["groundingMetadata"] = grounding;
            }
        }
        candidate
    }

    /// The thought summary shown when the request asks for thoughts.
    pub(crate) fn thought_part(&self) -> Option<Value> {
        (self.include_thoughts && self.thoughts > 0)
            .then(|| json!({"text": text(self.thoughts), "thought": true}))
    }

    /// The function call part.
    pub(crate) fn call_part(&self) -> Option<Value> {
        self.call
            .as_ref()
            .map(|call| json!({"functionCall": {"name": call.name, "args": call.input()}}))
    }

    /// Every part of one whole candidate.
    fn answer_parts(&self) -> Vec<Value> {
        let mut parts: Vec<Value> = self.thought_part().into_iter().collect();
        match self.call_part() {
            Some(call) => parts.push(call),
            None if self.reply.tokens > 0 => parts.push(json!({"text": text(self.reply.tokens)})),
            None => {}
        }
        parts
    }

    /// `groundingMetadata` when Google Search ran.
    fn grounding(&self) -> Option<Value> {
        (self.searches > 0).then(|| {
            let queries: Vec<String> = (0..self.searches)
                .map(|query| format!("mock query {query}"))
                .collect();
            let chunks: Vec<Value> = (0..self.searches)
                .map(|query| {
                    json!({"web": {"uri": format!("https://example.com/mock/{query}"),
                        "title": "example.com"}})
                })
                .collect();
            json!({
                "webSearchQueries": queries,
                "searchEntryPoint": {"renderedContent": "<div class=\"mock-search\">mock</div>"},
                "groundingChunks": chunks,
            })
        })
    }
}

fn by_modality(tokens: u64) -> Value {
    json!([{"modality": "TEXT", "tokenCount": tokens}])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_read_from_the_path_and_query() {
        let post = |path, query| GeminiRoute::of(&Method::POST, path, query, true);
        assert_eq!(
            post(
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                Some("alt=sse")
            ),
            Some(GeminiRoute::Model {
                model: "gemini-2.5-flash".into(),
                method: ModelMethod::Stream(Framing::Sse),
            })
        );
        assert_eq!(
            post("/v1/models/m:streamGenerateContent", None),
            Some(GeminiRoute::Model {
                model: "m".into(),
                method: ModelMethod::Stream(Framing::JsonArray),
            })
        );
        assert_eq!(post("/v1beta/models/m:embedContent", None), None);
        assert_eq!(post("/v1beta/models", None), None);
        let get = |path, key| GeminiRoute::of(&Method::GET, path, None, key);
        assert_eq!(get("/v1beta/models", false), Some(GeminiRoute::ListModels));
        assert_eq!(get("/v1/models", false), None, "an OpenAI client's");
        assert_eq!(get("/v1/models", true), Some(GeminiRoute::ListModels));
        assert_eq!(
            get("/v1beta/models/gemini-2.5-pro", false),
            Some(GeminiRoute::GetModel {
                version: "v1beta",
                model: "gemini-2.5-pro".into()
            })
        );
    }
}
