//! The admin API over HTTP: the admin key from the environment, one request
//! at a time on the project's pooled client, and everything that can go
//! wrong worded for the person at the terminal.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::Value;

use super::request::ApiRequest;
use super::ADMIN_KEY_ENV;
use crate::config::Secret;
use crate::upstream::{self, UpstreamClient};

/// How long one request may take, connecting included, before the command
/// gives up: every admin call is a small read or write.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Why an admin command failed; each one exits 1.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(
        "{ADMIN_KEY_ENV} is not set: export the gateway's admin key \
         (the variable `server.admin_key_env` names) to use `tollgate admin`"
    )]
    NoAdminKey,
    #[error("cannot reach the admin API at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("the admin API at {url} did not answer within {} s", ANSWER_TIMEOUT.as_secs())]
    Timeout { url: String },
    #[error("the admin API answered {0}")]
    Api(Box<ApiFailure>),
    #[error("the admin API at {url} sent an answer this client cannot read: {detail}")]
    BadAnswer { url: String, detail: String },
    #[error("cannot build the request (does {ADMIN_KEY_ENV} hold a line break?): {0}")]
    Request(#[source] http::Error),
    #[error("cannot start the HTTP client: {0}")]
    Client(#[source] std::io::Error),
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
}

/// An error the API answered: its status and the OpenAI-shaped body's
/// `message`, `code`, `type` and `param`.
#[derive(Debug)]
pub struct ApiFailure {
    /// `PATCH /admin/v1/keys/alice`.
    pub call: String,
    pub status: StatusCode,
    pub message: String,
    pub code: Option<String>,
    pub kind: Option<String>,
    pub param: Option<String>,
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to {}: {}", self.status, self.call, self.message)?;
        let mut details = Vec::new();
        match (&self.code, &self.kind) {
            (Some(code), _) => details.push(format!("code {code}")),
            (None, Some(kind)) => details.push(format!("type {kind}")),
            (None, None) => {}
        }
        if let Some(param) = &self.param {
            details.push(format!("param {param}"));
        }
        if !details.is_empty() {
            write!(f, " ({})", details.join(", "))?;
        }
        Ok(())
    }
}

/// The admin key, from [`ADMIN_KEY_ENV`].
pub(crate) fn admin_key_from_env() -> Result<Secret, AdminError> {
    match std::env::var(ADMIN_KEY_ENV) {
        Ok(key) if !key.trim().is_empty() => Ok(Secret::new(key.trim().to_owned())),
        _ => Err(AdminError::NoAdminKey),
    }
}

/// The admin API at one base URL.
pub(crate) struct AdminApi {
    base: http::Uri,
    admin_key: Secret,
    client: UpstreamClient,
}

/// What the API answered to one request.
#[derive(Debug)]
pub(crate) struct Answer {
    call: String,
    pub status: StatusCode,
    pub body: Bytes,
}

impl AdminApi {
    pub fn new(base: http::Uri, admin_key: Secret) -> Result<Self, AdminError> {
        Ok(AdminApi {
            base,
            admin_key,
            client: upstream::client().map_err(AdminError::Client)?,
        })
    }

    /// Sends `request` and reads the whole answer, whatever its status.
    pub async fn send(&self, request: &ApiRequest) -> Result<Answer, AdminError> {
        let http = request
            .to_http(&self.base, &self.admin_key)
            .map_err(AdminError::Request)?;
        let url = http.uri().to_string();
        let call = format!("{} {}", request.method, request.path_and_query());
        let exchange = async {
            let response = self
                .client
                .request(http)
                .await
                .map_err(|e| transport_error(&url, &e))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| transport_error(&url, &e))?
                .to_bytes();
            Ok(Answer { call, status, body })
        };
        match tokio::time::timeout(ANSWER_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(AdminError::Timeout { url }),
        }
    }

    /// The API answered something that is not what the contract says.
    pub fn bad_answer(&self, detail: impl Into<String>) -> AdminError {
        AdminError::BadAnswer {
            url: self.base.to_string(),
            detail: detail.into(),
        }
    }
}

impl Answer {
    /// The error this answer's status and body describe.
    pub fn into_error(self) -> AdminError {
        let body: Option<Value> = serde_json::from_slice(&self.body).ok();
        let error = body.as_ref().and_then(|body| body.get("error"));
        let field = |name: &str| {
            error
                .and_then(|error| error.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let message = field("message").unwrap_or_else(|| self.unshaped_message());
        AdminError::Api(Box::new(ApiFailure {
            call: self.call,
            status: self.status,
            message,
            code: field("code"),
            kind: field("type"),
            param: field("param"),
        }))
    }

    /// What to say when the body is not an admin API error: the body's
    /// start, or a hint when a gateway without an admin key hides the routes.
    fn unshaped_message(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let text = text.trim();
        let mut message = match text.char_indices().nth(200) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None if text.is_empty() => "(no error message)".to_owned(),
            None => text.to_owned(),
        };
        if self.status == StatusCode::NOT_FOUND {
            message.push_str(
                " (the admin routes answer 404 when the gateway has no admin key \
                 configured, and may listen on their own address: server.admin_listen)",
            );
        }
        message
    }
}

/// A transport failure, with every cause in its chain ("tcp connect error:
/// Connection refused").
fn transport_error(url: &str, error: &(dyn std::error::Error + 'static)) -> AdminError {
    let mut detail = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !detail.contains(&text) {
            detail.push_str(": ");
            detail.push_str(&text);
        }
        source = cause.source();
    }
    AdminError::Unreachable {
        url: url.to_owned(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            call: "PATCH /admin/v1/keys/alice".to_owned(),
            status: StatusCode::from_u16(status).unwrap(),
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn an_api_error_names_status_message_and_code() {
        let error = answer(
            409,
            r#"{"error":{"message":"alice comes from the config file: edit the file","type":"invalid_request_error","param":null,"code":"config_managed"}}"#,
        )
        .into_error();
        assert_eq!(
            error.to_string(),
            "the admin API answered 409 Conflict to PATCH /admin/v1/keys/alice: \
             alice comes from the config file: edit the file (code config_managed)"
        );
    }

    #[test]
    fn an_error_without_the_shape_shows_the_body() {
        let error = answer(502, "bad gateway").into_error().to_string();
        assert!(error.contains("502 Bad Gateway"), "{error}");
        assert!(error.ends_with(": bad gateway"), "{error}");
        let error = answer(404, "").into_error().to_string();
        assert!(error.contains("no admin key"), "{error}");
    }
}
