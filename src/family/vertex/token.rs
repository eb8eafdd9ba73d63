//! The gateway's own credential to Vertex AI: an OAuth2 access token got
//! from a service account's JSON key file by the JWT bearer grant
//! (RFC 7523) at the file's `token_uri`, cached and refreshed before it
//! expires, one exchange at a time however many calls want a token.
//!
//! A token endpoint that fails is a [`TokenError`], which the proxy turns
//! into a 503 with nothing forwarded or charged; a failure is never cached,
//! so the next call tries again.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::upstream::{Payload, UpstreamClient};

/// The one scope Vertex AI accepts for its whole API.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The grant type of a signed JWT exchanged for an access token (RFC 7523).
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// How long the signed assertion is valid: Google's token endpoint accepts
/// no assertion that lives longer than an hour.
const ASSERTION_LIFETIME: Duration = Duration::from_secs(3600);

/// A cached token is replaced once it has this little time left. Vertex
/// checks the token when a request arrives, and a call may wait for a
/// budget reservation and a connection before it is sent: a token handed
/// out must outlive that with room to spare, clock skew between Google's
/// servers included. Refreshing this early also leaves the old token
/// usable while a failed refresh is retried (Google's own libraries
/// refresh a few minutes early for the same reasons).
const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// When a refresh fails, the token it was replacing is still handed out
/// while it has at least this long left: a request sent with it reaches
/// Vertex, which checks the token on arrival, well within this.
const STILL_USABLE: Duration = Duration::from_secs(60);

/// How long one exchange (connect, send, read the answer) may take before
/// it counts as the endpoint being unreachable: calls wait for it.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest token answer read; Google's is a few hundred bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// How much of a refusal's body an error carries, for the log.
const EXCERPT_CHARS: usize = 200;

/// What went wrong reading a service account or getting a token. Clone,
/// so that every call waiting on one exchange gets its outcome. No variant
/// carries the private key, the signed assertion or a token.
#[derive(Clone, Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{file}: cannot read the service account file: {source}")]
    Read {
        file: String,
        source: Arc<std::io::Error>,
    },
    /// Not JSON, or not a JSON object; the message carries line and column.
    #[error("{file}: not a service account JSON object: {message}")]
    Json { file: String, message: String },
    /// A field missing, of the wrong type or with a wrong value, the
    /// private key included.
    #[error("{file}: {field}: {message}")]
    Field {
        file: String,
        field: &'static str,
        message: String,
    },
    #[error("cannot sign the token request: {0}")]
    Sign(String),
    /// No answer: connection refused, TLS failure, a reset, or no answer
    /// within the exchange timeout.
    #[error("token endpoint {uri} unreachable: {message}")]
    Unreachable { uri: String, message: String },
    /// The endpoint refused the grant; the excerpt is the start of its
    /// body (Google's names the OAuth error, such as `invalid_grant`).
    #[error("token endpoint {uri} answered {status}: {excerpt}")]
    Status {
        uri: String,
        status: StatusCode,
        excerpt: String,
    },
    /// A success status without a usable `access_token` and `expires_in`.
    #[error("token endpoint {uri} answered without a usable token: {message}")]
    BadAnswer { uri: String, message: String },
}

// === impl ServiceAccount ===

/// A service account's identity and signing key, read from its JSON key
/// file; the key is checked once, here, so a bad one fails at start-up.
#[derive(Clone)]
pub struct ServiceAccount {
    client_email: String,
    private_key_id: String,
    token_uri: Uri,
    /// The assertion's `aud`: the file's `token_uri` as written, which
    /// Google compares exactly (a parsed URI may print differently).
    audience: String,
    signing_key: EncodingKey,
}

impl ServiceAccount {
    /// Reads the JSON key file at `path` (the `credentials_file`).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TokenError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            file: file.clone(),
            source: Arc::new(source),
        })?;
        Self::parse(&file, &text)
    }

    /// Reads a service account from the text of its JSON key file.
    pub fn from_json(json: &str) -> Result<Self, TokenError> {
        Self::parse("service account JSON", json)
    }

    /// The account's address: who the gateway is to Google, for the logs.
    pub fn client_email(&self) -> &str {
        &self.client_email
    }

    /// Where the account's tokens come from.
    pub fn token_uri(&self) -> &Uri {
        &self.token_uri
    }

    fn parse(file: &str, json: &str) -> Result<Self, TokenError> {
        // Read as a map rather than a struct: serde's messages for a wrong
        // value quote the value, and the key must never be quoted.
        let json_error = |message: String| TokenError::Json {
            file: file.to_owned(),
            message,
        };
        let fields = match serde_json::from_str(json) {
            Ok(Value::Object(fields)) => fields,
            Ok(_) => return Err(json_error("the file holds no JSON object".to_owned())),
            Err(error) => return Err(json_error(error.to_string())),
        };
        let field_error = |field, message: &str| TokenError::Field {
            file: file.to_owned(),
            field,
            message: message.to_owned(),
        };
        let kind = required(&fields, "type").map_err(|m| field_error("type", m))?;
        if kind != "service_account" {
            return Err(field_error(
                "type",
                "must be \"service_account\" (other credential files are not supported)",
            ));
        }
        let text = |field| {
            required(&fields, field)
                .map(str::to_owned)
                .map_err(|m| field_error(field, m))
        };
        let client_email = text("client_email")?;
        let private_key_id = text("private_key_id")?;
        let audience = text("token_uri")?;
        let token_uri = token_uri(&audience).map_err(|m| field_error("token_uri", m))?;
        let signing_key =
            signing_key(&text("private_key")?).map_err(|m| field_error("private_key", &m))?;
        Ok(ServiceAccount {
            client_email,
            private_key_id,
            token_uri,
            audience,
            signing_key,
        })
    }

    /// The signed JWT that asks for a token, issued at `now` (Unix seconds).
    fn assertion(&self, now: u64) -> Result<String, TokenError> {
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            iss: &'a str,
            scope: &'a str,
            aud: &'a str,
            iat: u64,
            exp: u64,
        }
        let claims = Claims {
            iss: &self.client_email,
            scope: SCOPE,
            aud: &self.audience,
            iat: now,
            exp: now + ASSERTION_LIFETIME.as_secs(),
        };
        let mut header = Header::new(Algorithm::RS256);
        // Names which of the account's keys signed, so Google need not try
        // each one it holds.
        header.kid = Some(self.private_key_id.clone());
        jsonwebtoken::encode(&header, &claims, &self.signing_key)
            .map_err(|error| TokenError::Sign(error.to_string()))
    }
}

impl fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.client_email)
            .field("private_key_id", &self.private_key_id)
            .field("token_uri", &self.token_uri)
            .field("private_key", &format_args!("*****"))
            .finish()
    }
}

/// The non-empty string `field` of a key file, or why not.
fn required<'a>(fields: &'a Map<String, Value>, field: &str) -> Result<&'a str, &'static str> {
    match fields.get(field) {
        None | Some(Value::Null) => Err("missing"),
        Some(Value::String(text)) if text.trim().is_empty() => Err("is empty"),
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err("must be a string"),
    }
}

fn token_uri(text: &str) -> Result<Uri, &'static str> {
    let uri: Uri = text.parse().map_err(|_| "not a URI")?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err("must be an http or https URI");
    }
    match uri.authority() {
        None => Err("must name a host"),
        // Credentials in the URI would be printed in every error naming it.
        Some(authority) if authority.as_str().contains('@') => Err("must not carry credentials"),
        Some(_) => Ok(uri),
    }
}

/// The RSA key of a PEM `private_key`, proved usable by signing once:
/// jsonwebtoken only unwraps the PEM, and ring rejects a bad or short key
/// only when it signs.
fn signing_key(pem: &str) -> Result<EncodingKey, String> {
    let key = EncodingKey::from_rsa_pem(pem.as_bytes())
        .map_err(|error| format!("not an RSA private key in PEM: {error}"))?;
    jsonwebtoken::crypto::sign(b"probe", &key, Algorithm::RS256)
        .map_err(|error| format!("cannot sign with this RSA key: {error}"))?;
    Ok(key)
}

// === impl AccessToken ===

/// A bearer token for Vertex AI calls; printed as `*****`.
#[derive(Clone)]
pub struct AccessToken {
    token: Arc<str>,
    /// `Bearer <token>`, checked once as a header value and marked
    /// sensitive, so HTTP/2 never indexes it.
    authorization: HeaderValue,
}

impl AccessToken {
    fn new(token: &str) -> Result<Self, &'static str> {
        let mut authorization =
            HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| "not a header value")?;
        authorization.set_sensitive(true);
        Ok(AccessToken {
            token: token.into(),
            authorization,
        })
    }

    /// The bearer token itself.
    pub fn expose(&self) -> &str {
        &self.token
    }

    /// The `Authorization` header value for an upstream call.
    pub fn authorization(&self) -> &HeaderValue {
        &self.authorization
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken(*****)")
    }
}

// === impl TokenSource ===

/// A service account's current access token, shared by every call to its
/// Vertex provider. Cheap to clone: clones share one cache.
#[derive(Clone, Debug)]
pub struct TokenSource {
    shared: Arc<Shared>,
}

struct Shared {
    account: ServiceAccount,
    client: UpstreamClient,
    /// A std mutex, not tokio's: it is held only to read or replace the
    /// state, never across an await.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    cached: Option<Fetched>,
    /// The exchange under way, if any: callers that find one wait for its
    /// outcome instead of starting their own.
    flight: Option<Flight>,
}

/// An exchange's outcome, `None` until it has one.
type Flight = watch::Receiver<Option<Result<AccessToken, TokenError>>>;

#[derive(Clone)]
struct Fetched {
    token: AccessToken,
    expires_at: Instant,
}

impl Fetched {
    fn has_left(&self, now: Instant, at_least: Duration) -> bool {
        self.expires_at.saturating_duration_since(now) > at_least
    }
}

impl TokenSource {
    pub fn new(account: ServiceAccount, client: UpstreamClient) -> Self {
        TokenSource {
            shared: Arc::new(Shared {
                account,
                client,
                state: Mutex::new(State::default()),
            }),
        }
    }

    pub fn account(&self) -> &ServiceAccount {
        &self.shared.account
    }

    /// A token with more than [`REFRESH_MARGIN`] left: the cached one, or a
    /// new one from the token endpoint; when the endpoint fails, the old
    /// one while it has more than [`STILL_USABLE`] left, else the error.
    /// Callers that come while an exchange runs share its outcome.
    pub async fn token(&self) -> Result<AccessToken, TokenError> {
        let mut flight = {
            let mut state = self.shared.lock();
            if let Some(cached) = &state.cached {
                if cached.has_left(Instant::now(), REFRESH_MARGIN) {
                    return Ok(cached.token.clone());
                }
            }
            match &state.flight {
                Some(flight) => flight.clone(),
                None => {
                    let (outcome, flight) = watch::channel(None);
                    state.flight = Some(flight.clone());
                    // Its own task, so that a call given up by its client
                    // does not abandon the exchange others wait on.
                    tokio::spawn(Arc::clone(&self.shared).refresh(outcome));
                    flight
                }
            }
        };
        if let Ok(outcome) = flight.wait_for(Option::is_some).await {
            if let Some(outcome) = outcome.as_ref() {
                return outcome.clone();
            }
        }
        // The exchange ended without an outcome: its runtime is shutting
        // down. Forget it, so that a later call starts another, and fail
        // this one rather than start one on a runtime that is going.
        let mut state = self.shared.lock();
        if state
            .flight
            .as_ref()
            .is_some_and(|current| current.same_channel(&flight))
        {
            state.flight = None;
        }
        Err(TokenError::Unreachable {
            uri: self.shared.account.audience.clone(),
            message: "the exchange was stopped before it had an answer".to_owned(),
        })
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change to the state is one assignment: a panic elsewhere
        // cannot leave it half-made.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one exchange, records its outcome and hands it to the callers
    /// waiting on `outcome`.
    async fn refresh(
        self: Arc<Self>,
        outcome: watch::Sender<Option<Result<AccessToken, TokenError>>>,
    ) {
        let result = exchange(&self.account, &self.client).await;
        if let Err(error) = &result {
            tracing::warn!(
                account = %self.account.client_email,
                %error,
                "cannot get a Vertex AI access token"
            );
        }
        let handed = {
            let mut state = self.lock();
            state.flight = None;
            match result {
                Ok(fetched) => {
                    state.cached = Some(fetched.clone());
                    Ok(fetched.token)
                }
                Err(error) => {
                    // Not cached: the next call tries again. Until then the
                    // old token serves while Vertex still takes it.
                    match &state.cached {
                        Some(old) if old.has_left(Instant::now(), STILL_USABLE) => {
                            Ok(old.token.clone())
                        }
                        _ => Err(error),
                    }
                }
            }
        };
        outcome.send_replace(Some(handed));
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

// === the exchange ===

/// One JWT bearer grant: sign an assertion, post it, read the token.
async fn exchange(
    account: &ServiceAccount,
    client: &UpstreamClient,
) -> Result<Fetched, TokenError> {
    let uri = account.audience.clone();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| TokenError::Sign("the system clock is before 1970".to_owned()))?
        .as_secs();
    let form = form_urlencoded::Serializer::new(String::new())
        .append_pair("grant_type", GRANT_TYPE)
        .append_pair("assertion", &account.assertion(now)?)
        .finish();
    let request = Request::builder()
        .method(Method::POST)
        .uri(account.token_uri.clone())
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        )
        .header(header::ACCEPT, HeaderValue::from_static("application/json"))
        .body(Payload::from(Bytes::from(form)))
        .map_err(|error| TokenError::Sign(error.to_string()))?;
    // The token's lifetime is counted from before it was asked for, so it
    // is never thought to last longer than it does.
    let asked_at = Instant::now();
    let (status, body) = tokio::time::timeout(EXCHANGE_TIMEOUT, post(client, request, &uri))
        .await
        .map_err(|_| TokenError::Unreachable {
            uri: uri.clone(),
            message: format!("no answer within {} s", EXCHANGE_TIMEOUT.as_secs()),
        })??;
    if !status.is_success() {
        return Err(TokenError::Status {
            uri,
            status,
            excerpt: excerpt(&body),
        });
    }
    let bad = |message: &str| TokenError::BadAnswer {
        uri: uri.clone(),
        message: message.to_owned(),
    };
    let Ok(Value::Object(answer)) = serde_json::from_slice(&body) else {
        return Err(bad("not a JSON object"));
    };
    let token = match answer.get("access_token") {
        Some(Value::String(token)) if !token.is_empty() => token,
        _ => return Err(bad("no access_token string")),
    };
    let expires_in = answer
        .get("expires_in")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("no expires_in count of seconds"))?;
    let expires_at = asked_at
        .checked_add(Duration::from_secs(expires_in))
        .ok_or_else(|| bad("expires_in out of range"))?;
    let token =
        AccessToken::new(token).map_err(|message| bad(&format!("access_token {message}")))?;
    Ok(Fetched { token, expires_at })
}

/// Sends the request and reads the status and (bounded) body.
async fn post(
    client: &UpstreamClient,
    request: Request<Payload>,
    uri: &str,
) -> Result<(StatusCode, Bytes), TokenError> {
    let unreachable = |error: &dyn std::error::Error| TokenError::Unreachable {
        uri: uri.to_owned(),
        message: error_chain(error),
    };
    let response = client
        .request(request)
        .await
        .map_err(|error| unreachable(&error))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|error| {
            if error.is::<LengthLimitError>() {
                TokenError::BadAnswer {
                    uri: uri.to_owned(),
                    message: format!("an answer over {MAX_ANSWER_BYTES} bytes"),
                }
            } else {
                unreachable(error.as_ref())
            }
        })?;
    Ok((status, body.to_bytes()))
}

/// An error and its causes, as one line: the client's own message alone
/// ("client error (Connect)") does not say what failed.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        line.push_str(": ");
        line.push_str(&next.to_string());
        cause = next.source();
    }
    line
}

/// The start of a refusal's body, on one line.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .chars()
        .take(EXCERPT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use jsonwebtoken::{DecodingKey, Validation};
    use serde_json::json;

    use super::*;

    /// A 2048-bit RSA key made for these tests alone (`openssl genpkey
    /// -algorithm RSA -pkeyopt rsa_keygen_bits:2048`), PKCS#8 as Google
    /// writes service account keys.
    const PRIVATE_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDCOFBApoSP+saV\n\
mV47ScwmVIzvOTcf8cJKWp5kNkz4IA6Asaqf7tYQ6KfdPaYk3bRCoZFH5t+RxEqI\n\
X7lOjM4/lt3wR+v1h1F48K0Kp/3WoQlZcmhDANCBeB7QyCKAHFpepHo6cYykdXwz\n\
WpDba2INDPdl5/T4Uf954JD1aWJ2BU4cpudo6tfRcxW7Cfn6FO31WHnWloT1O+IV\n\
KFAZkZMEdbKJetNpxdK4jUYh5w30bWGdBFBsd7M2ACtpbVLGOXmi/1Z93tkJUUk2\n\
Xdt4jafxsaR9AT++8WFSTBIh6xkvAOyjhdHv3d3vybUgsZRqnfq//+Okgq+6rcnz\n\
dta1MnGLAgMBAAECggEAHsg0F/sMWZGCdeVn5PeuTojqCWRFE2AKziQMpI9ipZTX\n\
F5iRFWYSMX3eVRdXRNKKpmDbGM1Ds+OreG/Le+KfMb7kkBemEzUOOZ/TnTPA7Ip7\n\
Y9zZH316jnqOT8LYjPtxazygTrD+fHZOaAk7mjsrwCvE7jbUQaMlXZi1AOBiBZhM\n\
fhMKOTkqOL+95h2fqISvwbaSRt7RfylrfrzBQLlV7fPXoAOVXPQpxzabDy3yubQ1\n\
Ff/l8MzHmF9s6jNZRTppTBXkeAv7YZSj59QuAklHoLsfVbdiMkYQGylWGv3ujPJS\n\
f5l45qWahbSt9jwILdQLcnBLDdX2jiiKaOw5fwKtCQKBgQD6l2B2D5zffQqJ4lYh\n\
clmJ7wMKxO5asbYFaW3zd5biU56lYs8T8u5axhwp2Xsu8602bUjuCGxQQh1+auy7\n\
OGx64XXz2z/ZfBspgSvwQaa9C9scFoMGFP9/6rsLKEcNoAouaAHa4MVE0MqBR+Ht\n\
DXCG4lMsUEJKBkvD/6wdUW/63wKBgQDGaXYNR2CRI2NUeFKyM64TMzTTwy5axJjZ\n\
F96K7l4yBuKx3XdwfA2+/iOqWU3Hy3edkHf6fWmMxgS0fu1YE2QWhv9NvJyY1klv\n\
OsAn7mLETTXWiGN2Lb8M+TbwV4RpJJ5gIp+hYsg5BJiI4N7f+s8f9VdnTLvqE4ob\n\
zVQEjgYK1QKBgDPmCAdLgnzSw8z8wEPbD+o+Qw4G7SqBZaZHSItE+E3VbaTpCuQh\n\
yvWn1AtizF1UAEqmZZVOz0fr+XnGIVNBA06LxUcE4Htldaap5vSyVBsRCocNroMi\n\
9CuE7MoJxHVw8MrdpYy0QobXCymtPoA+6VA2LW2fDauRFD36hKXpyNxXAoGBALSI\n\
GukkLAKDj4q5XI1WpqpDqmqQKqpePbEyncQN9dlRGI28NEQ+LAe/l9YVIceMI89T\n\
N0fNOu/i8T8GSpEcO7KfrMcfueD7AaBadaMfrfBtTHJicRWDtFVqoQl4qDs/HXfd\n\
qR+gEQyIWP4aldB4lmO+yYNtd4IZu01mu27VhzvtAoGAKxKR3rizzmDpQO4jVK5B\n\
7ncE5fW8MOX72zx+/Sr8/aBHS4eTOOhAxqdhlbMW29+qp3PNGJBgtfL7VuZFFSRt\n\
AbHeAarNTDXm/HCajqCTdj7VsWcKxjHY4ugwEnFqHUIFEn4R1oMdWW1rygXUkect\n\
d8NZ5EVLzELxmn8iYLAamxo=\n\
-----END PRIVATE KEY-----\n\
";

    /// Its public half, which the fake token endpoint verifies with.
    const PUBLIC_KEY: &str = "\
-----BEGIN PUBLIC KEY-----\n\
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwjhQQKaEj/rGlZleO0nM\n\
JlSM7zk3H/HCSlqeZDZM+CAOgLGqn+7WEOin3T2mJN20QqGRR+bfkcRKiF+5TozO\n\
P5bd8Efr9YdRePCtCqf91qEJWXJoQwDQgXge0MgigBxaXqR6OnGMpHV8M1qQ22ti\n\
DQz3Zef0+FH/eeCQ9WlidgVOHKbnaOrX0XMVuwn5+hTt9Vh51paE9TviFShQGZGT\n\
BHWyiXrTacXSuI1GIecN9G1hnQRQbHezNgAraW1Sxjl5ov9Wfd7ZCVFJNl3beI2n\n\
8bGkfQE/vvFhUkwSIesZLwDso4XR793d78m1ILGUap36v//jpIKvuq3J83bWtTJx\n\
iwIDAQAB\n\
-----END PUBLIC KEY-----\n\
";

    const KEY_ID: &str = "a1b2c3d4e5";
    const EMAIL: &str = "gateway@test-project.iam.gserviceaccount.com";

    /// A token endpoint on a real socket that checks each grant as Google
    /// does (signature, `kid`, `iss`, `aud`, scope, lifetime) and counts
    /// the requests that reach it.
    struct Endpoint {
        uri: String,
        requests: AtomicUsize,
        /// The next requests answered 503, one fewer each time.
        failures_left: AtomicUsize,
        expires_in: AtomicU64,
        /// Answer 200 with no token in it.
        broken: AtomicBool,
    }

    #[derive(serde::Deserialize)]
    struct Claims {
        scope: String,
        iat: u64,
        exp: u64,
    }

    impl Endpoint {
        async fn start(expires_in: u64) -> Arc<Endpoint> {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let endpoint = Arc::new(Endpoint {
                uri: format!("http://{}/token", listener.local_addr().unwrap()),
                requests: AtomicUsize::new(0),
                failures_left: AtomicUsize::new(0),
                expires_in: AtomicU64::new(expires_in),
                broken: AtomicBool::new(false),
            });
            let serving = Arc::clone(&endpoint);
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let endpoint = Arc::clone(&serving);
                    let service = service_fn(move |request| {
                        let endpoint = Arc::clone(&endpoint);
                        async move { Ok::<_, Infallible>(endpoint.answer(request).await) }
                    });
                    tokio::spawn(
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service),
                    );
                }
            });
            endpoint
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }

        async fn answer(
            &self,
            request: Request<Incoming>,
        ) -> http::Response<http_body_util::Full<Bytes>> {
            let n = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
            let form_type = request.headers()[header::CONTENT_TYPE].clone();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let form: std::collections::HashMap<String, String> =
                form_urlencoded::parse(&body).into_owned().collect();
            let refused = |status: u16, error: &str| {
                http::Response::builder()
                    .status(status)
                    .body(http_body_util::Full::new(Bytes::from(
                        json!({ "error": error }).to_string(),
                    )))
                    .unwrap()
            };
            if form_type != "application/x-www-form-urlencoded"
                || form.get("grant_type").map(String::as_str) != Some(GRANT_TYPE)
            {
                return refused(400, "unsupported_grant_type");
            }
            if !self.grant_is_valid(&form["assertion"]) {
                return refused(400, "invalid_grant");
            }
            let failing =
                self.failures_left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if failing.is_ok() {
                return refused(503, "backend_error");
            }
            let answer = if self.broken.load(Ordering::SeqCst) {
                json!({ "token_type": "Bearer" })
            } else {
                json!({
                    "access_token": format!("ya29.token-{n}"),
                    "expires_in": self.expires_in.load(Ordering::SeqCst),
                    "token_type": "Bearer",
                })
            };
            http::Response::new(http_body_util::Full::new(Bytes::from(answer.to_string())))
        }

        fn grant_is_valid(&self, assertion: &str) -> bool {
            let header = jsonwebtoken::decode_header(assertion).unwrap();
            let mut validation = Validation::new(Algorithm::RS256);
            validation.set_audience(&[&self.uri]);
            validation.set_issuer(&[EMAIL]);
            validation.set_required_spec_claims(&["exp", "iat", "iss", "aud"]);
            let key = DecodingKey::from_rsa_pem(PUBLIC_KEY.as_bytes()).unwrap();
            let Ok(claims) = jsonwebtoken::decode::<Claims>(assertion, &key, &validation) else {
                return false;
            };
            let claims = claims.claims;
            header.kid.as_deref() == Some(KEY_ID)
                && claims.scope == SCOPE
                && claims.exp - claims.iat == 3600
        }
    }

    fn key_file(token_uri: &str) -> Value {
        json!({
            "type": "service_account",
            "project_id": "test-project",
            "private_key_id": KEY_ID,
            "private_key": PRIVATE_KEY,
            "client_email": EMAIL,
            "client_id": "1234567890",
            "token_uri": token_uri,
        })
    }

    fn source(endpoint: &Endpoint) -> TokenSource {
        let account = ServiceAccount::from_json(&key_file(&endpoint.uri).to_string()).unwrap();
        TokenSource::new(account, crate::upstream::client().unwrap())
    }

    const LONG: u64 = REFRESH_MARGIN.as_secs() + 3000;
    const SHORT: u64 = REFRESH_MARGIN.as_secs() - 1;

    #[tokio::test]
    async fn a_token_is_fetched_once_and_reused() {
        let endpoint = Endpoint::start(LONG).await;
        let tokens = source(&endpoint);
        for _ in 0..5 {
            let token = tokens.token().await.unwrap();
            assert_eq!(token.expose(), "ya29.token-1");
            assert_eq!(token.authorization(), "Bearer ya29.token-1");
            assert!(token.authorization().is_sensitive());
        }
        assert_eq!(endpoint.requests(), 1);
    }

    #[tokio::test]
    async fn a_token_within_five_minutes_of_expiry_is_refreshed() {
        let endpoint = Endpoint::start(SHORT).await;
        let tokens = source(&endpoint);
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-1");
        // 299 s left is inside the margin: the next call asks again.
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-2");
        // A token with more than the margin left (310 s: a slow machine
        // has ten seconds between the calls) is kept.
        endpoint
            .expires_in
            .store(REFRESH_MARGIN.as_secs() + 10, Ordering::SeqCst);
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-3");
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-3");
        assert_eq!(endpoint.requests(), 3);
    }

    #[tokio::test]
    async fn a_refusal_is_an_error_and_the_next_call_tries_again() {
        let endpoint = Endpoint::start(LONG).await;
        endpoint.failures_left.store(1, Ordering::SeqCst);
        let tokens = source(&endpoint);
        match tokens.token().await {
            Err(TokenError::Status {
                status, excerpt, ..
            }) => {
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
                assert_eq!(excerpt, r#"{"error":"backend_error"}"#);
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-2");
        assert_eq!(endpoint.requests(), 2);
    }

    #[tokio::test]
    async fn an_answer_without_a_token_is_an_error() {
        let endpoint = Endpoint::start(LONG).await;
        endpoint.broken.store(true, Ordering::SeqCst);
        let tokens = source(&endpoint);
        let error = tokens.token().await.unwrap_err();
        assert!(
            matches!(&error, TokenError::BadAnswer { message, .. } if message.contains("access_token")),
            "{error}"
        );
        endpoint.broken.store(false, Ordering::SeqCst);
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-2");
    }

    #[tokio::test]
    async fn an_endpoint_that_is_not_there_is_unreachable() {
        // Bound, never listening: the connection is refused, and no other
        // socket takes the port while the test runs.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let uri = format!("http://{}/token", socket.local_addr().unwrap());
        let account = ServiceAccount::from_json(&key_file(&uri).to_string()).unwrap();
        let tokens = TokenSource::new(account, crate::upstream::client().unwrap());
        let error = tokens.token().await.unwrap_err();
        assert!(matches!(error, TokenError::Unreachable { .. }), "{error}");
        assert!(error.to_string().contains(&uri), "{error}");
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_handing_out_a_token_vertex_still_takes() {
        let endpoint = Endpoint::start(SHORT).await;
        let tokens = source(&endpoint);
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-1");
        endpoint.failures_left.store(1, Ordering::SeqCst);
        // The refresh fails; token-1 has 299 s left, so it still serves.
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-1");
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-3");
        assert_eq!(endpoint.requests(), 3);
    }

    /// On one thread every caller has joined before the exchange can make
    /// any progress, so the count of exchanges is exact.
    #[tokio::test(flavor = "current_thread")]
    async fn twenty_concurrent_callers_share_one_exchange() {
        let endpoint = Endpoint::start(LONG).await;
        let tokens = source(&endpoint);
        let calls = (0..20).map(|_| tokens.token());
        for token in futures_util::future::join_all(calls).await {
            assert_eq!(token.unwrap().expose(), "ya29.token-1");
        }
        assert_eq!(endpoint.requests(), 1);

        // A failure is shared the same way, and not kept.
        let endpoint = Endpoint::start(LONG).await;
        endpoint.failures_left.store(1, Ordering::SeqCst);
        let tokens = source(&endpoint);
        let calls = (0..20).map(|_| tokens.token());
        for token in futures_util::future::join_all(calls).await {
            assert!(matches!(token, Err(TokenError::Status { .. })));
        }
        assert_eq!(endpoint.requests(), 1);
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-2");
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_does_not_abandon_the_exchange() {
        let endpoint = Endpoint::start(LONG).await;
        let tokens = source(&endpoint);
        tokio::select! {
            biased;
            _ = tokens.token() => panic!("answered before any I/O"),
            () = std::future::ready(()) => {}
        }
        assert_eq!(tokens.token().await.unwrap().expose(), "ya29.token-1");
        assert_eq!(endpoint.requests(), 1);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: &[(&str, Value, &str)] = &[
            ("type", json!("authorized_user"), "service_account"),
            ("type", Value::Null, "missing"),
            ("client_email", json!(""), "empty"),
            ("client_email", Value::Null, "missing"),
            ("private_key_id", json!(7), "string"),
            ("token_uri", json!("ftp://oauth2.example/token"), "http"),
            ("token_uri", json!("/token"), "http"),
            (
                "token_uri",
                json!("https://user:pw@oauth2.example/token"),
                "credentials",
            ),
            ("private_key", json!("not a key"), "PEM"),
            (
                "private_key",
                json!(PRIVATE_KEY.replace("MII", "MIX")),
                "RSA",
            ),
        ];
        for (field, value, says) in cases {
            let mut file = key_file("https://oauth2.googleapis.com/token");
            file[*field] = value.clone();
            let error = ServiceAccount::from_json(&file.to_string()).unwrap_err();
            let text = error.to_string();
            assert!(
                matches!(&error, TokenError::Field { field: named, .. } if named == field),
                "{field}: {text}"
            );
            assert!(
                text.contains(field) && text.contains(says),
                "{field}: {text}"
            );
            assert!(!text.contains("MII"), "{text}");
        }
        for text in ["{", "[]", "\"a string\""] {
            let error = ServiceAccount::from_json(text).unwrap_err();
            assert!(matches!(error, TokenError::Json { .. }), "{error}");
        }
    }

    #[test]
    fn a_key_file_is_read_from_disk_and_its_errors_name_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vertex.json");
        std::fs::write(
            &path,
            key_file("https://oauth2.googleapis.com/token").to_string(),
        )
        .unwrap();
        let account = ServiceAccount::load(&path).unwrap();
        assert_eq!(account.client_email(), EMAIL);
        assert_eq!(account.token_uri(), "https://oauth2.googleapis.com/token");

        let mut file = key_file("https://oauth2.googleapis.com/token");
        file["private_key_id"] = Value::Null;
        std::fs::write(&path, file.to_string()).unwrap();
        let error = ServiceAccount::load(&path).unwrap_err().to_string();
        assert!(error.starts_with(&path.display().to_string()), "{error}");
        assert!(error.contains("private_key_id: missing"), "{error}");

        let missing = dir.path().join("absent.json");
        let error = ServiceAccount::load(&missing).unwrap_err();
        assert!(matches!(error, TokenError::Read { .. }), "{error}");
        assert!(error.to_string().contains("absent.json"), "{error}");
    }

    #[tokio::test]
    async fn debug_shows_no_secret() {
        let endpoint = Endpoint::start(LONG).await;
        let tokens = source(&endpoint);
        let token = tokens.token().await.unwrap();
        let key_line = PRIVATE_KEY.lines().nth(1).unwrap();
        for shown in [
            format!("{:?}", tokens.account()),
            format!("{tokens:?}"),
            format!("{token:?}"),
        ] {
            assert!(!shown.contains(key_line), "{shown}");
            assert!(!shown.contains("PRIVATE KEY"), "{shown}");
            assert!(!shown.contains("ya29"), "{shown}");
        }
        assert!(format!("{:?}", tokens.account()).contains(EMAIL));
    }
}
