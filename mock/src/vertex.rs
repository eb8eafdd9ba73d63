//! Vertex AI's model routes: the path that names project, location,
//! publisher and model, the bearer check against the tokens the mock's own
//! `/token` issued, and Claude's `rawPredict` / `streamRawPredict`
//! (Anthropic Messages with the model in the path and `anthropic_version`
//! in the body; `count-tokens:rawPredict` counts tokens). Gemini models under `publishers/google` are answered by
//! `gemini`, as on the Gemini API.

use http::header::AUTHORIZATION;
use http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::handler::{Answer, ApiError};
use super::token::{TokenEndpoint, TokenStatus};
use super::{anthropic, MockOptions};

/// Where a Vertex call was sent: the parts of
/// `/{version}/projects/{project}/locations/{location}/publishers/{publisher}/models/{model}:{method}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VertexTarget {
    /// `v1` or `v1beta1`.
    pub version: String,
    pub project: String,
    pub location: String,
    /// `google` or `anthropic`.
    pub publisher: String,
    pub model: String,
    /// `generateContent`, `streamGenerateContent`, `countTokens`,
    /// `rawPredict` or `streamRawPredict`.
    pub method: String,
}

impl VertexTarget {
    /// Reads a Vertex model path; `None` for any other path.
    pub(crate) fn parse(path: &str) -> Option<Self> {
        let rest = path.strip_prefix('/')?;
        let (version, rest) = rest.split_once('/')?;
        if !matches!(version, "v1" | "v1beta1") {
            return None;
        }
        let segments: Vec<&str> = rest.split('/').collect();
        let ["projects", project, "locations", location, "publishers", publisher, "models", call] =
            segments.as_slice()
        else {
            return None;
        };
        let (model, method) = call.split_once(':')?;
        let named = [project, location, publisher, model];
        if named.iter().any(|part| part.is_empty()) {
            return None;
        }
        Some(Self {
            version: version.to_owned(),
            project: (*project).to_owned(),
            location: (*location).to_owned(),
            publisher: (*publisher).to_owned(),
            model: model.to_owned(),
            method: method.to_owned(),
        })
    }
}

/// Checks `Authorization: Bearer` against the tokens `/token` issued, as
/// Google's front end does before any model sees the call; the refusal is
/// in Google's shape on every Vertex route.
pub(crate) fn authorize(headers: &HeaderMap, tokens: &TokenEndpoint) -> Result<(), ApiError> {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let (message, reason) = match bearer.map(|token| tokens.status(token)) {
        Some(TokenStatus::Valid) => return Ok(()),
        None => (
            "Request is missing required authentication credential. Expected OAuth 2 access \
             token, login cookie or other valid authentication credential. See \
             https://developers.google.com/identity/sign-in/web/devconsole-project.",
            "CREDENTIALS_MISSING",
        ),
        Some(TokenStatus::Expired) => (
            "Request had invalid authentication credentials. Expected OAuth 2 access token, \
             login cookie or other valid authentication credential. See \
             https://developers.google.com/identity/sign-in/web/devconsole-project.",
            "ACCESS_TOKEN_EXPIRED",
        ),
        Some(TokenStatus::Unknown) => (
            "Request had invalid authentication credentials. Expected OAuth 2 access token, \
             login cookie or other valid authentication credential. See \
             https://developers.google.com/identity/sign-in/web/devconsole-project.",
            "ACCESS_TOKEN_TYPE_UNSUPPORTED",
        ),
    };
    Err(ApiError::new(StatusCode::UNAUTHORIZED, message).with_code(reason))
}

/// The model path Vertex counts Claude tokens at
/// (`.../publishers/anthropic/models/count-tokens:rawPredict`), the body
/// naming the model.
const COUNT_TOKENS_MODEL: &str = "count-tokens";

/// `rawPredict` (`stream` false: streamed only if the body asks) and
/// `streamRawPredict` (`stream` true): an Anthropic Messages call whose
/// model is the path's, answered by `anthropic` in its own shapes; on the
/// `count-tokens` model, Anthropic's token count (billed nothing).
pub(crate) fn raw_predict(
    target: &VertexTarget,
    body: &Value,
    stream: bool,
    opts: &MockOptions,
) -> Result<Answer, ApiError> {
    let mut messages = body.clone();
    let Some(fields) = messages.as_object_mut() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "The request body must be a JSON object.",
        ));
    };
    match fields.remove("anthropic_version") {
        Some(Value::String(_)) => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "anthropic_version: Input should be a valid string",
                "anthropic_version",
            ))
        }
        None => {
            return Err(ApiError::invalid(
                "anthropic_version: Field required",
                "anthropic_version",
            ))
        }
    }
    if target.model == COUNT_TOKENS_MODEL && !stream {
        return anthropic::count_tokens(&messages);
    }
    fields.insert("model".to_owned(), Value::String(target.model.clone()));
    if stream {
        fields.insert("stream".to_owned(), Value::Bool(true));
    }
    anthropic::messages(&messages, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_path_names_every_part() {
        let target = VertexTarget::parse(
            "/v1/projects/p-1/locations/us-east5/publishers/anthropic/models/\
             claude-sonnet-4-5@20250929:streamRawPredict",
        )
        .unwrap();
        assert_eq!(
            target,
            VertexTarget {
                version: "v1".into(),
                project: "p-1".into(),
                location: "us-east5".into(),
                publisher: "anthropic".into(),
                model: "claude-sonnet-4-5@20250929".into(),
                method: "streamRawPredict".into(),
            }
        );
        for path in [
            "/v2/projects/p/locations/l/publishers/google/models/m:generateContent",
            "/v1/projects/p/locations/l/publishers/google/models/m",
            "/v1/projects/p/locations/l/publishers/google/models/m:x/y",
            "/v1/projects//locations/l/publishers/google/models/m:generateContent",
            "/v1beta/models/gemini-2.5-flash:generateContent",
        ] {
            assert_eq!(VertexTarget::parse(path), None, "{path}");
        }
    }
}
