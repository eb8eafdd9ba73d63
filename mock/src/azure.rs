//! Azure OpenAI: the deployment routes (`/openai/deployments/{d}/…`), the
//! dated Responses route (`/openai/responses`) and the v1 API
//! (`/openai/v1/…`); the key in `api-key` or a bearer token; `api-version`;
//! the deployments a resource has and the model each serves; Azure's
//! content filter annotations and error shape. The answers themselves are
//! OpenAI's, built by `openai`, `responses` and `embeddings` as
//! [`Host::Azure`] tells them.

use http::header::AUTHORIZATION;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

use super::handler::{parse_object, Answer, ApiError};
use super::openai::{self, Host};
use super::{embeddings, gemini, responses, MockOptions};

/// What a 429 asks the client to wait, in seconds.
pub(crate) const RETRY_AFTER_SECONDS: &str = "1";

/// Azure's refusal of a missing or wrong key, whichever header carried it.
const ACCESS_DENIED: &str = "Access denied due to invalid subscription key or wrong API \
    endpoint. Make sure to provide a valid key for an active subscription and use a correct \
    regional API endpoint for your resource.";

const DEPLOYMENT_NOT_FOUND: &str = "The API deployment for this resource does not exist. If \
    you created the deployment within the last 5 minutes, please wait a moment and try again.";

const API_VERSION_MISSING: &str =
    "The api-version query parameter (?api-version=) is required for all requests.";

const PROMPT_FILTERED: &str = "The response was filtered due to the prompt triggering Azure \
    OpenAI's content management policy. Please modify your prompt and retry. To learn more \
    about our content filtering policies please read our documentation: \
    https://go.microsoft.com/fwlink/?linkid=2198766";

/// The OpenAI operations Azure serves under each API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Chat,
    Completions,
    Embeddings,
    Responses,
}

impl Endpoint {
    fn of(path: &str) -> Option<Self> {
        Some(match path {
            "chat/completions" => Self::Chat,
            "completions" => Self::Completions,
            "embeddings" => Self::Embeddings,
            "responses" => Self::Responses,
            _ => return None,
        })
    }
}

/// Where an Azure call was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AzureRoute {
    /// The deployment the path names, percent-decoded; `None` where the
    /// body's `model` names it (`/openai/responses` and the v1 API).
    pub deployment: Option<String>,
    pub endpoint: Endpoint,
    /// The dated API, which requires `api-version`; the v1 API makes it
    /// optional.
    pub dated: bool,
}

impl AzureRoute {
    /// Reads an Azure path; `None` for any other. The path is split before
    /// the deployment is decoded, so an encoded `/` stays in the name.
    pub(crate) fn parse(path: &str) -> Option<Self> {
        let rest = path.strip_prefix("/openai/")?;
        if let Some(rest) = rest.strip_prefix("v1/") {
            return Some(Self {
                deployment: None,
                endpoint: Endpoint::of(rest)?,
                dated: false,
            });
        }
        if let Some(rest) = rest.strip_prefix("deployments/") {
            let (raw, rest) = rest.split_once('/')?;
            let deployment = percent_decode(raw).filter(|name| !name.is_empty())?;
            return Some(Self {
                deployment: Some(deployment),
                endpoint: Endpoint::of(rest)?,
                dated: true,
            });
        }
        (rest == "responses").then_some(Self {
            deployment: None,
            endpoint: Endpoint::Responses,
            dated: true,
        })
    }
}

/// Decodes `%XX` escapes; `None` for a broken escape or text that is not
/// UTF-8. A `+` is a plus in a path, not a space.
pub(crate) fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let digit = |at: usize| {
        bytes
            .get(at)
            .and_then(|byte| char::from(*byte).to_digit(16))
    };
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        if byte == b'%' {
            let value = digit(at + 1)? * 16 + digit(at + 2)?;
            decoded.push(u8::try_from(value).ok()?);
            at += 3;
        } else {
            decoded.push(byte);
            at += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// Checks the key when the mock expects one: `api-key`, else
/// `Authorization: Bearer`, as Azure takes either on every route (its own
/// SDKs send `api-key`, an OpenAI client pointed at `/openai/v1/` a bearer
/// token).
pub(crate) fn authorize(headers: &HeaderMap, expected: Option<&str>) -> Result<(), ApiError> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let bearer = header(AUTHORIZATION.as_str()).and_then(|value| value.strip_prefix("Bearer "));
    match header("api-key").or(bearer) {
        Some(key) if key == expected => Ok(()),
        _ => Err(ApiError::new(StatusCode::UNAUTHORIZED, ACCESS_DENIED)),
    }
}

/// Answers an Azure call: `api-version` where the API requires it, then
/// the deployment (from the path, else the body's `model`) and the model
/// it serves, then OpenAI's answer naming that model.
pub(crate) fn answer(
    route: &AzureRoute,
    query: Option<&str>,
    bytes: &[u8],
    opts: &MockOptions,
) -> Result<Answer, ApiError> {
    let api_version = gemini::query_param(query, "api-version").filter(|v| !v.is_empty());
    if route.dated && api_version.is_none() {
        return Err(ApiError::invalid(API_VERSION_MISSING, "api-version"));
    }
    // A deployment in the path is looked up before the body is read, as
    // Azure routes the call before a model sees it.
    let path_model = route
        .deployment
        .as_deref()
        .map(|deployment| served_model(deployment, opts))
        .transpose()?;
    let body = parse_object(bytes)?;
    let model = match path_model {
        Some(model) => model,
        None => served_model(&openai::model(&body)?, opts)?,
    };
    let host = Host::Azure { model };
    match route.endpoint {
        Endpoint::Chat => openai::chat(&body, opts, &host),
        Endpoint::Completions => openai::completions(&body, opts, &host),
        Endpoint::Embeddings => embeddings::embeddings(&body, &host),
        Endpoint::Responses => responses::create(&body, opts, &host),
    }
}

/// The base model a deployment serves; with no deployments configured,
/// any deployment serves a model of its own name.
fn served_model(deployment: &str, opts: &MockOptions) -> Result<String, ApiError> {
    if opts.azure_deployments.is_empty() {
        return Ok(deployment.to_owned());
    }
    opts.azure_deployments
        .iter()
        .find(|(name, _)| name == deployment)
        .map(|(_, model)| model.clone())
        .ok_or_else(deployment_not_found)
}

fn deployment_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, DEPLOYMENT_NOT_FOUND).with_code("DeploymentNotFound")
}

/// Azure's verdict on a harm category it found nothing of.
fn safe() -> Value {
    json!({"filtered": false, "severity": "safe"})
}

/// A check that detected nothing (jailbreak, protected material).
fn undetected() -> Value {
    json!({"filtered": false, "detected": false})
}

/// `prompt_filter_results`: one entry per prompt, nothing filtered.
pub(crate) fn prompt_filter_results(prompts: u64) -> Value {
    (0..prompts)
        .map(|index| {
            json!({
                "prompt_index": index,
                "content_filter_results": {
                    "hate": safe(),
                    "jailbreak": undetected(),
                    "self_harm": safe(),
                    "sexual": safe(),
                    "violence": safe(),
                },
            })
        })
        .collect()
}

/// A choice's `content_filter_results`, nothing filtered.
pub(crate) fn content_filter_results() -> Value {
    json!({
        "hate": safe(),
        "protected_material_code": undetected(),
        "protected_material_text": undetected(),
        "self_harm": safe(),
        "sexual": safe(),
        "violence": safe(),
    })
}

/// The error a `mock:status=CODE` directive asks for, worded as Azure's:
/// a 400 is the prompt filter's refusal, the likeliest 400 a well-formed
/// call gets from Azure.
pub(crate) fn directed_error(status: StatusCode) -> ApiError {
    let (message, code, param) = match status.as_u16() {
        400 => (PROMPT_FILTERED, Some("content_filter"), Some("prompt")),
        401 => (ACCESS_DENIED, None, None),
        404 => (DEPLOYMENT_NOT_FOUND, Some("DeploymentNotFound"), None),
        429 => (
            "Rate limit is exceeded. Try again in 1 seconds.",
            None,
            None,
        ),
        _ => return ApiError::directed(status),
    };
    ApiError {
        code,
        param,
        ..ApiError::new(
            status,
            format!("{message} (mock:status={})", status.as_u16()),
        )
    }
}

/// Azure's error body, `{"error": {"code", "message"}}`: the code is the
/// error's own, else `BadRequest` for a 400, `InternalServerError` for a
/// 500 and the status's digits otherwise. A prompt filter refusal carries
/// the filter's verdict in `innererror`, as Azure's does.
pub(crate) fn error_body(error: &ApiError) -> Value {
    let code = match (error.code, error.status.as_u16()) {
        (Some(code), _) => code.to_owned(),
        (None, 400) => "BadRequest".to_owned(),
        (None, 500) => "InternalServerError".to_owned(),
        (None, status) => status.to_string(),
    };
    let mut body = json!({"error": {"code": code, "message": error.message}});
    if let Some(param) = error.param {
        body["error"]["param"] = param.into();
    }
    if error.code == Some("content_filter") {
        let mut prompts = prompt_filter_results(1);
        let mut verdict = prompts[0]["content_filter_results"].take();
        verdict["violence"] = json!({"filtered": true, "severity": "medium"});
        body["error"]["type"] = Value::Null;
        body["error"]["status"] = error.status.as_u16().into();
        body["error"]["innererror"] = json!({
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": verdict,
        });
    }
    body
}
