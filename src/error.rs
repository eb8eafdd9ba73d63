//! What can go wrong with a call before it reaches the provider, and how each
//! error reaches the client: one status per variant, and a body in the
//! caller's API shape with a message a person can act on.
//!
//! Provider errors are not here: they pass through unchanged. Messages never
//! carry secrets or internal detail; the detail goes to the log.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use serde_json::json;

use crate::body::{full, Body};
use crate::budget::caps::model_scope_parts;
use crate::budget::{run_id_of, run_key_of, Denial, Meter, ScopeKind};
use crate::money::{format_usd, UsdMicros};
use crate::rate_headers::RateHeaders;

/// The error body shapes of the provider families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `{"error":{"message","type","param","code"}}`
    OpenAi,
    /// `{"type":"error","error":{"type","message"}}`
    Anthropic,
    /// Google's (the Gemini API, Vertex AI):
    /// `{"error":{"code","message","status"}}`.
    Google,
    /// Amazon Bedrock's: `{"message"}`, the error's name in the
    /// `x-amzn-ErrorType` header (where the AWS SDKs read it).
    Bedrock,
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("missing API key: send your gateway key as `Authorization: Bearer <key>` or `x-api-key: <key>`")]
    MissingKey,
    #[error("invalid API key: the key is not known to this gateway")]
    InvalidKey,
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<&'static str>,
        /// OpenAI's `code`, for a refusal a client may want to tell apart.
        code: Option<&'static str>,
    },
    #[error("request body is larger than this gateway's limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("model `{model}` is not allowed for key `{key}`")]
    ModelNotAllowed { model: String, key: String },
    #[error("model `{model}` is not available through this gateway: it has no configured price or provider. The operator can add its price to the price file (`tollgate prices import` writes entries from LiteLLM's price list) and a provider whose `models` match it")]
    UnknownModel { model: String },
    #[error("deployment `{deployment}` is not served by this gateway: no azure provider maps it to a priced model. The operator can add it to an azure provider's `deployments`, such as {{ \"{deployment}\" = \"gpt-4o-2024-08-06\" }}")]
    UnknownDeployment { deployment: String },
    #[error("{}", budget_message(.0))]
    BudgetExceeded(Box<BudgetRefusal>),
    /// A rate limit (`rpm`, `tpm`) has no room for the call in this
    /// minute: transient, unlike a cap. `tokens`: the call's token bound.
    #[error("{}", rate_limit_message(.denial, *.tokens))]
    RateLimited { denial: Box<Denial>, tokens: u64 },
    /// The call names a run cap other than the one its run's first call
    /// fixed (`fixed`: none when `None`).
    #[error("{}", run_cap_message(run, *fixed, *named))]
    RunCapConflict {
        run: String,
        fixed: Option<UsdMicros>,
        named: UsdMicros,
    },
    /// A request with the same `Idempotency-Key` (under the same gateway
    /// key) is still in flight.
    #[error("a request with this Idempotency-Key is still in progress; this one was not sent and costs nothing. Wait for the first to finish, or send a new Idempotency-Key for a new request")]
    IdempotencyConflict,
    #[error("provider `{provider}` has no API key: the gateway operator must set the environment variable {env}")]
    ProviderKeyMissing { provider: String, env: String },
    /// The provider's own credential could not be had (Vertex AI's token
    /// endpoint failed): nothing was sent or charged.
    #[error("provider `{provider}` could not be signed in to, so the call was not sent and costs nothing; retry shortly")]
    ProviderAuthFailed { provider: String },
    #[error("the budget store is unavailable, so the call was not sent; retry shortly")]
    StoreUnavailable,
    /// `charged`: what the call was charged when the request may have
    /// reached the provider before the connection broke (see "Never
    /// under-charge"); `None` when it cannot have.
    #[error("could not reach provider `{provider}`")]
    UpstreamUnreachable {
        provider: String,
        charged: Option<UsdMicros>,
    },
    /// `charged`: what the call was charged, the provider having had it.
    #[error("provider `{provider}` did not answer within {secs} s")]
    UpstreamTimeout {
        provider: String,
        secs: u64,
        charged: Option<UsdMicros>,
    },
    #[error("no route for {method} {path}")]
    NotFound { method: String, path: String },
}

/// A call that no budget it falls under can take: which one refused it,
/// what the call could cost, and what would fit.
#[derive(Debug)]
pub struct BudgetRefusal {
    pub denial: Denial,
    /// The call's upper bound, in µUSD.
    pub bound: UsdMicros,
    /// The largest output limit (per choice) with which the call would
    /// fit what remains; `None` when none would.
    pub fitting_output_limit: Option<u64>,
    /// The fields that set the call's output limit in its API, for the
    /// message to name.
    pub limit_fields: &'static [&'static str],
}

/// A scope as a message names it: ``key `alice` ``, ``run `r1` of key
/// `alice` ``, ``model cap `opus` of org `acme` ``.
pub fn scope_name(kind: ScopeKind, id: &str) -> String {
    match kind {
        ScopeKind::Key => format!("key `{id}`"),
        ScopeKind::Org => format!("org `{id}`"),
        ScopeKind::Run => format!("run `{}` of key `{}`", run_id_of(id), run_key_of(id)),
        // A customer's id is `<key>/<customer>`, as a run's.
        ScopeKind::Customer => format!("customer `{}` of key `{}`", run_id_of(id), run_key_of(id)),
        ScopeKind::Model => match model_scope_parts(id) {
            Some((owner, owner_id, group)) => {
                format!("model cap `{group}` of {}", scope_name(owner, owner_id))
            }
            None => format!("model cap `{id}`"),
        },
    }
}

fn rate_limit_message(denial: &Denial, tokens: u64) -> String {
    let scope = scope_name(denial.kind, &denial.id);
    let wait = match denial.resets_at {
        Some(at) => format!(
            "; the window resets at {}, retry then",
            at.format("%Y-%m-%dT%H:%M:%SZ")
        ),
        None => String::new(),
    };
    match denial.meter {
        Meter::Tokens => format!(
            "rate limit reached for {scope}: {} tokens per {}, {} remaining, less than this              call's bound of {tokens} tokens (input and output limit){wait}. A lower output              limit needs fewer",
            denial.cap, denial.period, denial.remaining
        ),
        _ => format!(
            "rate limit reached for {scope}: {} requests per {}{wait}",
            denial.cap, denial.period
        ),
    }
}

fn budget_message(refusal: &BudgetRefusal) -> String {
    let denial = &refusal.denial;
    let scope = scope_name(denial.kind, &denial.id);
    let fit = match refusal.fitting_output_limit {
        Some(limit) => format!(
            ". An output limit ({}) of {limit} tokens or fewer fits what remains",
            refusal.limit_fields.join(" or ")
        ),
        None => ". Not even a small output limit fits what remains".to_owned(),
    };
    let resets = match denial.resets_at {
        Some(at) => format!(". The budget resets at {}", at.format("%Y-%m-%dT%H:%M:%SZ")),
        None => ". It does not reset (period total)".to_owned(),
    };
    let per = match denial.period.as_str() {
        "total" => "in total".to_owned(),
        period => format!("per {period}"),
    };
    format!(
        "budget exceeded for {scope}: cap ${} {per}, ${} remaining, less than this call's upper-bound cost of ${}{fit}{resets}",
        format_usd(denial.cap),
        format_usd(denial.remaining),
        format_usd(refusal.bound),
    )
}

fn run_cap_message(run: &str, fixed: Option<UsdMicros>, named: UsdMicros) -> String {
    let fixed = match fixed {
        Some(cap) => format!("a cap of ${}", format_usd(cap)),
        None => "no cap".to_owned(),
    };
    format!(
        "run `{run}` was started with {fixed}, and this request names ${}: a run's first call \
         fixes its cap. Send the same x-tollgate-run-cap-usd (or none), or start another run; \
         this request was not sent and costs nothing",
        format_usd(named)
    )
}

impl GatewayError {
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::MissingKey | GatewayError::InvalidKey => StatusCode::UNAUTHORIZED,
            GatewayError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            GatewayError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::ModelNotAllowed { .. } => StatusCode::FORBIDDEN,
            GatewayError::UnknownModel { .. }
            | GatewayError::UnknownDeployment { .. }
            | GatewayError::NotFound { .. } => StatusCode::NOT_FOUND,
            GatewayError::BudgetExceeded(_) => StatusCode::PAYMENT_REQUIRED,
            GatewayError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::IdempotencyConflict | GatewayError::RunCapConflict { .. } => {
                StatusCode::CONFLICT
            }
            GatewayError::ProviderKeyMissing { .. }
            | GatewayError::ProviderAuthFailed { .. }
            | GatewayError::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::UpstreamUnreachable { .. } => StatusCode::BAD_GATEWAY,
            GatewayError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// OpenAI's `type` and `code` for this error.
    fn openai_kind(&self) -> (&'static str, Option<&'static str>) {
        match self {
            GatewayError::MissingKey => ("invalid_request_error", Some("missing_api_key")),
            GatewayError::InvalidKey => ("invalid_request_error", Some("invalid_api_key")),
            GatewayError::BadRequest { code, .. } => ("invalid_request_error", *code),
            GatewayError::BodyTooLarge { .. } => {
                ("invalid_request_error", Some("request_too_large"))
            }
            GatewayError::ModelNotAllowed { .. } => ("permission_error", Some("model_not_allowed")),
            GatewayError::UnknownModel { .. } => ("invalid_request_error", Some("model_not_found")),
            GatewayError::UnknownDeployment { .. } => {
                ("invalid_request_error", Some("DeploymentNotFound"))
            }
            GatewayError::BudgetExceeded(_) => ("insufficient_quota", Some("budget_exceeded")),
            GatewayError::RateLimited { .. } => ("rate_limit_exceeded", Some("rate_limited")),
            GatewayError::IdempotencyConflict => {
                ("invalid_request_error", Some("idempotency_conflict"))
            }
            GatewayError::RunCapConflict { .. } => {
                ("invalid_request_error", Some("run_cap_conflict"))
            }
            GatewayError::ProviderKeyMissing { .. } => {
                ("server_error", Some("provider_not_configured"))
            }
            GatewayError::ProviderAuthFailed { .. } => {
                ("server_error", Some("provider_auth_failed"))
            }
            GatewayError::StoreUnavailable => ("server_error", Some("budget_store_unavailable")),
            GatewayError::UpstreamUnreachable { .. } => {
                ("server_error", Some("upstream_unreachable"))
            }
            GatewayError::UpstreamTimeout { .. } => ("server_error", Some("upstream_timeout")),
            GatewayError::NotFound { .. } => ("invalid_request_error", Some("unknown_url")),
        }
    }

    /// Anthropic's error `type` for this error.
    fn anthropic_type(&self) -> &'static str {
        match self {
            GatewayError::MissingKey | GatewayError::InvalidKey => "authentication_error",
            GatewayError::BadRequest { .. }
            | GatewayError::IdempotencyConflict
            | GatewayError::RunCapConflict { .. } => "invalid_request_error",
            GatewayError::BodyTooLarge { .. } => "request_too_large",
            GatewayError::ModelNotAllowed { .. } => "permission_error",
            GatewayError::UnknownModel { .. }
            | GatewayError::UnknownDeployment { .. }
            | GatewayError::NotFound { .. } => "not_found_error",
            GatewayError::BudgetExceeded(_) => "billing_error",
            GatewayError::RateLimited { .. } => "rate_limit_error",
            GatewayError::UpstreamTimeout { .. } => "timeout_error",
            GatewayError::ProviderKeyMissing { .. }
            | GatewayError::ProviderAuthFailed { .. }
            | GatewayError::StoreUnavailable
            | GatewayError::UpstreamUnreachable { .. } => "api_error",
        }
    }

    /// Google's `status` for this error: its canonical code for the HTTP
    /// status. A budget refusal is `FAILED_PRECONDITION` (the account's
    /// state refuses the call, as Google says of billing), never the
    /// `RESOURCE_EXHAUSTED` that clients retry.
    fn google_status(&self) -> &'static str {
        match self {
            GatewayError::MissingKey | GatewayError::InvalidKey => "UNAUTHENTICATED",
            GatewayError::BadRequest { .. } | GatewayError::BodyTooLarge { .. } => {
                "INVALID_ARGUMENT"
            }
            GatewayError::ModelNotAllowed { .. } => "PERMISSION_DENIED",
            GatewayError::UnknownModel { .. }
            | GatewayError::UnknownDeployment { .. }
            | GatewayError::NotFound { .. } => "NOT_FOUND",
            GatewayError::BudgetExceeded(_) => "FAILED_PRECONDITION",
            // Transient, and retried by Google's clients after a wait.
            GatewayError::RateLimited { .. } => "RESOURCE_EXHAUSTED",
            GatewayError::IdempotencyConflict | GatewayError::RunCapConflict { .. } => "ABORTED",
            GatewayError::ProviderKeyMissing { .. }
            | GatewayError::ProviderAuthFailed { .. }
            | GatewayError::StoreUnavailable
            | GatewayError::UpstreamUnreachable { .. } => "UNAVAILABLE",
            GatewayError::UpstreamTimeout { .. } => "DEADLINE_EXCEEDED",
        }
    }

    /// The AWS error name of this error, for Bedrock's clients: what the
    /// SDKs raise, and whether they retry (a budget refusal is no
    /// throttling, which they would).
    fn aws_name(&self) -> &'static str {
        match self {
            GatewayError::MissingKey | GatewayError::InvalidKey => "UnrecognizedClientException",
            GatewayError::BadRequest { .. } | GatewayError::BodyTooLarge { .. } => {
                "ValidationException"
            }
            GatewayError::ModelNotAllowed { .. } => "AccessDeniedException",
            GatewayError::UnknownModel { .. }
            | GatewayError::UnknownDeployment { .. }
            | GatewayError::NotFound { .. } => "ResourceNotFoundException",
            GatewayError::BudgetExceeded(_) => "BudgetExceededException",
            GatewayError::RateLimited { .. } => "ThrottlingException",
            GatewayError::IdempotencyConflict | GatewayError::RunCapConflict { .. } => {
                "ConflictException"
            }
            GatewayError::ProviderKeyMissing { .. }
            | GatewayError::ProviderAuthFailed { .. }
            | GatewayError::StoreUnavailable
            | GatewayError::UpstreamUnreachable { .. } => "ServiceUnavailableException",
            GatewayError::UpstreamTimeout { .. } => "ModelTimeoutException",
        }
    }

    /// The body in the caller's API shape.
    pub fn body(&self, shape: Shape) -> Bytes {
        let message = self.to_string();
        let value = match shape {
            Shape::OpenAi => {
                let (kind, code) = self.openai_kind();
                let param = match self {
                    GatewayError::BadRequest { param, .. } => *param,
                    GatewayError::UnknownModel { .. }
                    | GatewayError::UnknownDeployment { .. }
                    | GatewayError::ModelNotAllowed { .. } => Some("model"),
                    _ => None,
                };
                json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
            }
            Shape::Anthropic => {
                json!({"type": "error", "error": {"type": self.anthropic_type(), "message": message}})
            }
            Shape::Google => json!({"error": {
                "code": self.status().as_u16(),
                "message": message,
                "status": self.google_status(),
            }}),
            Shape::Bedrock => json!({"message": message}),
        };
        Bytes::from(value.to_string())
    }

    pub fn into_response(self, shape: Shape, request_id: &str) -> Response<Body> {
        let mut response = Response::new(full(self.body(shape)));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(id) = HeaderValue::from_str(request_id) {
            if !request_id.is_empty() {
                headers.insert("x-tollgate-request-id", id);
            }
        }
        if shape == Shape::Bedrock {
            headers.insert(
                "x-amzn-errortype",
                HeaderValue::from_static(self.aws_name()),
            );
        }
        if let GatewayError::BudgetExceeded(refusal) = &self {
            let denial = &refusal.denial;
            // A cap is not a transient limit: tell SDKs not to retry, and
            // when the money comes back.
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
            if let Some(at) = denial.resets_at {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let secs = (at.timestamp() - now).max(1);
                headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
            }
        }
        // Transient: SDKs retry a 429 after `retry-after`, when the
        // window has rolled over.
        if let GatewayError::RateLimited { denial, .. } = &self {
            if let Some(at) = denial.resets_at {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let secs = (at.timestamp() - now).max(1);
                headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
            }
            RateHeaders::after_denial(denial, chrono::Utc::now()).insert(headers);
        }
        // The request may have reached the provider, so the call was
        // charged: the client learns what, as from an answered call.
        if let GatewayError::UpstreamUnreachable {
            charged: Some(cost),
            ..
        }
        | GatewayError::UpstreamTimeout {
            charged: Some(cost),
            ..
        } = self
        {
            headers.insert("x-tollgate-cost-usd-micros", HeaderValue::from(cost));
        }
        if matches!(self, GatewayError::MissingKey | GatewayError::InvalidKey) {
            headers.insert(
                http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}
