//! Google's OAuth2 token endpoint as Vertex AI callers use it, and the test
//! service account they sign their grants with.
//!
//! `POST /token` takes the JWT-bearer grant a service account makes
//! (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=JWT`,
//! form-encoded), checks the JWT as Google does (RS256 signature by the
//! fixture key, `kid` when present, `iss`, `aud`, `scope`, `iat`/`exp`) and
//! answers a fresh random access token. The Vertex routes accept only the
//! tokens issued here, and only until they expire.
//!
//! The key pair lives in `mock/fixtures/`: a test key, published with the
//! source, that protects nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::StatusCode;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{json, Value};

use super::handler::{unix_now, ApiError};
use super::lock;

/// The test service account's address: the `iss` a grant must carry.
pub const SERVICE_ACCOUNT_EMAIL: &str = "gateway@tollgate-test.iam.gserviceaccount.com";

/// The test service account's project.
pub const SERVICE_ACCOUNT_PROJECT: &str = "tollgate-test";

/// The scope a grant must ask for to call Vertex AI.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The test service account's private key (PKCS#8 PEM), as its JSON file
/// carries it.
pub const SERVICE_ACCOUNT_PRIVATE_KEY: &str =
    include_str!("../fixtures/vertex-service-account-key.pem");

/// The public half, which verifies grants.
const SERVICE_ACCOUNT_PUBLIC_KEY: &str =
    include_str!("../fixtures/vertex-service-account-key.pub.pem");

/// The key's id: a grant whose header names another `kid` was signed by
/// another key.
pub const SERVICE_ACCOUNT_KEY_ID: &str = "5e1f0c2b9a7d4e3f8b6a1c0d9e8f7a6b5c4d3e2f";

const SERVICE_ACCOUNT_CLIENT_ID: &str = "108126429573806511234";

const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The longest a grant may live (`exp - iat`), as Google allows.
const MAX_GRANT_SECS: u64 = 3600;

/// How far in the future a grant's `iat` may be: the signer's clock may
/// run a little ahead.
const CLOCK_SKEW_SECS: u64 = 60;

/// How long an access token lives unless a test says otherwise.
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

const SHORT_LIVED: &str = "Invalid JWT: Token must be a short-lived token (60 minutes) and in a \
    reasonable timeframe. Check your iat and exp values in the JWT claim.";

/// A complete Google service-account JSON for the test account, whose
/// grants go to `token_uri` (the mock's `/token`, e.g. from
/// [`crate::MockServer::token_url`]). The gateway and SDK tests write it to
/// a file.
pub fn service_account_json(token_uri: &str) -> String {
    let account = json!({
        "type": "service_account",
        "project_id": SERVICE_ACCOUNT_PROJECT,
        "private_key_id": SERVICE_ACCOUNT_KEY_ID,
        "private_key": SERVICE_ACCOUNT_PRIVATE_KEY,
        "client_email": SERVICE_ACCOUNT_EMAIL,
        "client_id": SERVICE_ACCOUNT_CLIENT_ID,
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/\
            gateway%40tollgate-test.iam.gserviceaccount.com",
        "universe_domain": "googleapis.com",
    });
    serde_json::to_string_pretty(&account).unwrap_or_else(|_| account.to_string())
}

/// The token endpoint of a running mock: what it issued, its knobs and
/// its counts.
#[derive(Debug)]
pub struct TokenEndpoint {
    // A std mutex: held only to read or change the map, never across an
    // await.
    state: Mutex<Issuer>,
    requests: AtomicU64,
    refused: AtomicU64,
}

#[derive(Debug)]
struct Issuer {
    lifetime: Duration,
    /// Token requests still to fail with 500.
    fail_next: u64,
    /// Every token issued and not yet pruned, with when it expires.
    tokens: HashMap<String, Instant>,
}

/// What a bearer token presented to a Vertex route is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenStatus {
    Valid,
    Expired,
    Unknown,
}

impl Default for TokenEndpoint {
    fn default() -> Self {
        Self {
            state: Mutex::new(Issuer {
                lifetime: DEFAULT_TOKEN_LIFETIME,
                fail_next: 0,
                tokens: HashMap::new(),
            }),
            requests: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }
}

impl TokenEndpoint {
    /// How long the tokens issued from now on live; `expires_in` reports
    /// it in whole seconds (so 0 for less than a second).
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        lock(&self.state).lifetime = lifetime;
    }

    /// Fails the next `count` token requests with 500, as a backend error.
    pub fn fail_next_requests(&self, count: u64) {
        lock(&self.state).fail_next = count;
    }

    /// Forgets every token issued: the Vertex routes refuse them from now
    /// on, as after a revocation.
    pub fn revoke_tokens(&self) {
        lock(&self.state).tokens.clear();
    }

    /// Token requests received.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Token requests that got no token: bad grants and the failures
    /// [`TokenEndpoint::fail_next_requests`] asked for.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// Whether `token` was issued here and has not expired.
    pub(crate) fn status(&self, token: &str) -> TokenStatus {
        match lock(&self.state).tokens.get(token) {
            Some(expiry) if *expiry > Instant::now() => TokenStatus::Valid,
            Some(_) => TokenStatus::Expired,
            None => TokenStatus::Unknown,
        }
    }

    /// `POST /token`: the form body of a grant, answered with a token or
    /// an OAuth error (its `error` in the [`ApiError`]'s code).
    pub(crate) fn grant(&self, form: &[u8]) -> Result<Value, ApiError> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let answer = self.try_grant(form);
        if answer.is_err() {
            self.refused.fetch_add(1, Ordering::SeqCst);
        }
        answer
    }

    fn try_grant(&self, form: &[u8]) -> Result<Value, ApiError> {
        {
            let mut state = lock(&self.state);
            if state.fail_next > 0 {
                state.fail_next -= 1;
                return Err(oauth_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_failure",
                    "Backend Error",
                ));
            }
        }
        let mut grant_type = None;
        let mut assertion = None;
        for (name, value) in form_urlencoded::parse(form) {
            match name.as_ref() {
                "grant_type" => grant_type = Some(value.into_owned()),
                "assertion" => assertion = Some(value.into_owned()),
                _ => {}
            }
        }
        match grant_type.as_deref() {
            Some(JWT_BEARER_GRANT) => {}
            Some(other) => {
                return Err(bad_request(
                    "unsupported_grant_type",
                    &format!("Invalid grant_type: {other}"),
                ))
            }
            None => {
                return Err(bad_request(
                    "invalid_request",
                    "Missing required parameter: grant_type",
                ))
            }
        }
        let assertion = assertion.ok_or_else(|| {
            bad_request("invalid_request", "Missing required parameter: assertion")
        })?;
        verify_grant(&assertion)?;
        Ok(self.issue())
    }

    /// A fresh random token, remembered until it expires.
    fn issue(&self) -> Value {
        let token = format!(
            "ya29.c.{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let now = Instant::now();
        let mut state = lock(&self.state);
        state.tokens.retain(|_, expiry| *expiry > now);
        let lifetime = state.lifetime;
        state.tokens.insert(token.clone(), now + lifetime);
        json!({
            "access_token": token,
            "expires_in": lifetime.as_secs(),
            "token_type": "Bearer",
        })
    }
}

/// Checks a grant's JWT as Google does; the error says why not.
fn verify_grant(assertion: &str) -> Result<(), ApiError> {
    let invalid = |message: &str| bad_request("invalid_grant", message);
    let header = jsonwebtoken::decode_header(assertion)
        .map_err(|error| invalid(&format!("Invalid JWT: {error}")))?;
    let other_key = header
        .kid
        .as_deref()
        .is_some_and(|kid| kid != SERVICE_ACCOUNT_KEY_ID);
    if header.alg != Algorithm::RS256 || other_key {
        return Err(invalid("Invalid JWT Signature."));
    }
    let key =
        DecodingKey::from_rsa_pem(SERVICE_ACCOUNT_PUBLIC_KEY.as_bytes()).map_err(|error| {
            tracing::error!(%error, "mock: the fixture public key does not parse");
            oauth_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_failure",
                "Backend Error",
            )
        })?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.leeway = 0;
    // The audience is checked below: it is the URL the mock was reached
    // at, which the validation cannot know.
    validation.validate_aud = false;
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    let claims: Value = jsonwebtoken::decode(assertion, &key, &validation)
        .map_err(|error| match error.kind() {
            ErrorKind::InvalidSignature => invalid("Invalid JWT Signature."),
            ErrorKind::ExpiredSignature => invalid(SHORT_LIVED),
            _ => invalid(&format!("Invalid JWT: {error}")),
        })?
        .claims;
    if claims.get("iss").and_then(Value::as_str) != Some(SERVICE_ACCOUNT_EMAIL) {
        return Err(invalid("Invalid grant: account not found"));
    }
    let audience = claims.get("aud").and_then(Value::as_str).unwrap_or("");
    if !audience.ends_with("/token") {
        return Err(invalid(
            "Invalid JWT: Failed audience check. The right audience is the token URL \
             (the service account's token_uri).",
        ));
    }
    let (Some(issued), Some(expires)) = (
        claims.get("iat").and_then(Value::as_u64),
        claims.get("exp").and_then(Value::as_u64),
    ) else {
        return Err(invalid(SHORT_LIVED));
    };
    let short_lived = expires > issued && expires - issued <= MAX_GRANT_SECS;
    if !short_lived || issued > unix_now() + CLOCK_SKEW_SECS {
        return Err(invalid(SHORT_LIVED));
    }
    let scopes = claims.get("scope").and_then(Value::as_str).unwrap_or("");
    if !scopes.split(' ').any(|scope| scope == CLOUD_PLATFORM_SCOPE) {
        return Err(bad_request(
            "invalid_scope",
            "Invalid OAuth scope or ID token audience provided.",
        ));
    }
    Ok(())
}

fn bad_request(error: &'static str, description: &str) -> ApiError {
    oauth_error(StatusCode::BAD_REQUEST, error, description)
}

fn oauth_error(status: StatusCode, error: &'static str, description: &str) -> ApiError {
    ApiError::new(status, description).with_code(error)
}

/// The OAuth error body: `{"error": CODE, "error_description": TEXT}`.
pub(crate) fn error_body(error: &ApiError) -> Value {
    json!({
        "error": error.code.unwrap_or("invalid_request"),
        "error_description": error.message,
    })
}
