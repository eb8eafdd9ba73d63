//! Configuration: the TOML file, checked into a [`Config`] at load.
//!
//! The file is first read into raw serde structs (`raw`) that reject unknown
//! fields; `check` then turns them into typed values, applying defaults
//! and naming the file and the field in every error, so a bad config stops
//! the gateway at start-up with a message a person can act on.
//!
//! Secrets (provider keys, the admin key, the Redis URL, raw client keys)
//! come from the environment, read through one lookup function so tests can
//! pass a fake environment, and are wrapped in [`Secret`] so `Debug` and
//! logs never show them.

mod check;
pub mod limits;
mod raw;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use glob::Pattern;
use sha2::{Digest, Sha256};

use crate::money::{Threshold, UsdMicros};
use crate::period::Period;
use crate::prices::{PriceError, PriceTable};
use crate::provider::ProviderKind;
use check::Checker;
pub use limits::{CustomerFrom, CustomerSpec, CustomerTemplate, Limits, ModelCapSpec};
use raw::RawConfig;

/// The checked configuration of one gateway.
#[derive(Clone, Debug)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub prices: PriceTable,
    /// In file order: the first provider whose pattern matches a model wins.
    pub providers: Vec<Provider>,
    pub orgs: Vec<OrgConfig>,
    pub keys: Vec<KeyConfig>,
    pub alerts: AlertsConfig,
}

/// Where spending alerts go (`[alerts]`).
#[derive(Clone, Debug, Default)]
pub struct AlertsConfig {
    /// `None`: no webhook, so no alert is queued at all.
    pub webhook: Option<Webhook>,
}

/// The operator's receiver of spending alerts.
#[derive(Clone, Debug)]
pub struct Webhook {
    /// http or https.
    pub url: http::Uri,
    /// The HMAC-SHA256 key each body is signed with, from `secret_env`.
    pub secret: Secret,
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub max_request_bytes: usize,
    pub upstream_timeout: Duration,
    /// The SHA-256 of the admin key, from `admin_key_sha256` or the
    /// variable `admin_key_env` names; the admin API is off when `None`.
    pub admin_key: Option<[u8; 32]>,
    /// Where the admin routes listen instead of `listen`, if set.
    pub admin_listen: Option<SocketAddr>,
    /// How long a client may take to send a request's head: a client
    /// trickling its headers would otherwise hold a connection for ever.
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Open client connections beyond this are closed as soon as they are
    /// accepted, so that a flood of them cannot exhaust file descriptors
    /// and starve the calls (and `/healthz`) already being served.
    pub max_connections: usize,
    /// The least output limit the gateway fits a call to (when it sets
    /// the limit itself, or clamps a key's call under `on_insufficient =
    /// "clamp"`): below it, the call is refused instead.
    pub min_clamped_output_tokens: u64,
    /// How the whole process writes its log lines.
    pub log_format: LogFormat,
    /// Whether every call leaves an access log line (`tollgate::access`).
    /// Off by default: on the proxied path it costs more than the rest of
    /// the HTTP layers together (see docs/performance.md).
    pub access_log: bool,
    /// Which web pages' scripts may call the proxied routes; `None`: no
    /// CORS headers at all, so a browser keeps other origins out.
    pub cors_allowed_origins: Option<CorsOrigins>,
    /// How long an admin call may take before it is answered 503: a store
    /// that hangs must not hold the operator's console for ever.
    pub admin_timeout: Duration,
    /// How much memory (MiB) the remembered token counts may take; 0: none
    /// are kept, every text is counted each time.
    pub token_count_cache_mb: u64,
}

/// `server.log_format`: text for a person, or JSON lines for a collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Plain,
    Json,
}

/// `server.cors_allowed_origins`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorsOrigins {
    /// `["*"]`: any page.
    Any,
    /// These origins (`scheme://host[:port]`), exactly.
    List(Vec<http::HeaderValue>),
}

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub backend: StoreBackend,
    /// How long a reservation holds its amount before it is expired; longer
    /// than the upstream timeout so a live call is never expired.
    pub reservation_ttl: Duration,
    /// How far an actual cost may exceed its reservation before the
    /// settlement counts as an overrun.
    pub settle_epsilon: UsdMicros,
    pub on_store_error: OnStoreError,
    /// How long ledger entries are kept one by one; older ones are folded
    /// into per-scope sums, so reconciliation stays exact.
    pub ledger_retention: Duration,
    /// How many UTC days back the spend aggregates (per day, key and
    /// model) are kept; older rows are deleted by the sweep.
    pub aggregate_retention_days: u32,
    /// How long a settled or denied call's record is kept for retries.
    pub closed_record: Duration,
    pub on_expiry: OnExpiry,
    /// How long an agent's run is remembered after its last call.
    pub run_ttl: Duration,
    /// How long a key's customer is remembered after its last call
    /// (`store.customer_ttl_days`).
    pub customer_ttl: Duration,
    /// Redis only: the SQLite file this gateway drains the ledger stream
    /// into (relative paths resolved against the config file's
    /// directory); `None`: this gateway does not drain.
    pub ledger_sink: Option<PathBuf>,
    /// Redis only: how long a ledger entry waits in the stream for a sink
    /// before the sweep folds it without one.
    pub ledger_buffer: Duration,
}

#[derive(Clone, Debug)]
pub enum StoreBackend {
    Memory,
    /// The file, its relative path resolved against the config file's
    /// directory.
    Sqlite {
        path: PathBuf,
    },
    /// The URL may carry a password, hence a [`Secret`].
    Redis {
        url: Secret,
        /// Certificates for a `rediss://` URL; empty for `redis://`.
        tls: RedisTls,
    },
}

/// The certificates of TLS to Redis (`rediss://`), as PEM text read and
/// checked at load. Both unset: the server's certificate must chain to the
/// Mozilla roots compiled in (webpki-roots), and no client certificate is
/// offered.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The CA certificates the server's certificate must chain to, in place
    /// of the compiled-in roots: managed and self-hosted Redis servers
    /// often have a private CA.
    pub ca_pem: Option<String>,
    /// Offered to a server that asks for one (mutual TLS).
    pub client: Option<RedisClientCert>,
}

/// A client certificate and the key it certifies.
#[derive(Clone)]
pub struct RedisClientCert {
    /// The chain, the client's own certificate first.
    pub cert_pem: String,
    pub key_pem: Secret,
}

impl fmt::Debug for RedisTls {
    /// Says which certificates are set, not their text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("custom_ca", &self.ca_pem.is_some())
            .field("client_cert", &self.client.is_some())
            .finish()
    }
}

/// What a request gets when the budget store cannot answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnStoreError {
    /// Fail closed: 503, nothing forwarded.
    Reject,
    /// Forward unmetered; an explicit opt-in.
    Allow,
}

/// What a reservation costs when it is never settled by its deadline (its
/// gateway died mid-call, so nobody knows what the provider billed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnExpiry {
    /// Charged its reserved amount: the provider may have billed the whole
    /// call, and the cap is a promise (docs/design.md, "Never under-charge").
    #[default]
    Charge,
    /// Released, charged nothing: the old rule, for those who prefer to
    /// err the other way.
    Release,
}

impl OnExpiry {
    /// The config value, and what the Lua scripts receive.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpiry::Charge => "charge",
            OnExpiry::Release => "release",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Provider {
    pub name: String,
    pub kind: ProviderKind,
    /// Scheme, host and optional path prefix. The path is `/` or a prefix
    /// without a trailing slash (`/openai`), so request paths append to
    /// `base_url.path().trim_end_matches('/')`.
    pub base_url: http::Uri,
    /// Empty for `vertex`, which signs in with its service account.
    pub api_key_env: String,
    /// `None` when the variable is unset or empty: the gateway still starts
    /// and reports the provider as unusable.
    pub api_key: Option<Secret>,
    /// A `vertex` provider's project, location and service account.
    pub vertex: Option<VertexSettings>,
    pub models: Vec<Pattern>,
    /// The body field(s) the provider reads its output limit from, where
    /// the gateway puts the limit; empty: each API's own field.
    pub output_limit_fields: Vec<String>,
    /// An `azure` provider's deployments, each with the priced model it
    /// runs, sorted by deployment.
    pub deployments: Vec<(String, String)>,
    /// Whether a request that names no service tier may be served, and
    /// billed, at the priority tier: a provider whose project defaults to
    /// it (`service_tier_default = "priority"`, the default for OpenAI
    /// itself, `api.openai.com`). Elsewhere such a call is billed at the
    /// standard tier it was sent at.
    pub unnamed_tier_may_be_priority: bool,
    /// A `bedrock` provider's region and AWS credentials.
    pub aws: Option<AwsSettings>,
}

/// How a `bedrock` provider signs its calls: SigV4 for `region` with the
/// credentials in these variables, unless the provider has a Bedrock API
/// key (`api_key_env`), sent as a bearer token.
#[derive(Clone, Debug)]
pub struct AwsSettings {
    pub region: String,
    pub access_key_id_env: String,
    pub secret_access_key_env: String,
    pub session_token_env: String,
    /// `None` when either variable is unset or empty.
    pub keys: Option<AwsKeys>,
}

/// AWS credentials, read from the environment at start.
#[derive(Clone, Debug)]
pub struct AwsKeys {
    pub access_key_id: Secret,
    pub secret_access_key: Secret,
    /// A temporary credential's session token.
    pub session_token: Option<Secret>,
}

impl Provider {
    /// The priced model a deployment of this provider runs.
    pub fn deployment_model(&self, deployment: &str) -> Option<&str> {
        self.deployments
            .binary_search_by(|(name, _)| name.as_str().cmp(deployment))
            .ok()
            .map(|index| self.deployments[index].1.as_str())
    }
}

/// Where a `vertex` provider sends calls, and who it is to Google.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VertexSettings {
    /// Replaces the project a client names in its path.
    pub project: String,
    /// Replaces the location a client names in its path.
    pub location: String,
    /// The service account's JSON key file, resolved against the config
    /// file's directory; read when the gateway starts.
    pub credentials_file: PathBuf,
}

#[derive(Clone, Debug)]
pub struct OrgConfig {
    pub id: String,
    pub cap: UsdMicros,
    pub period: Period,
    /// Fractions of the cap whose crossing sends an alert, ascending.
    pub alert_at: Vec<Threshold>,
    /// Model groups and rate limits.
    pub limits: Limits,
}

#[derive(Clone, Debug)]
pub struct KeyConfig {
    pub id: String,
    /// Always names a configured org.
    pub org: Option<String>,
    /// SHA-256 of the raw key: the raw key is never kept.
    pub key_sha256: [u8; 32],
    pub cap: UsdMicros,
    pub period: Period,
    /// `None` allows every model.
    pub models: Option<Vec<Pattern>>,
    pub on_insufficient: OnInsufficient,
    /// Fractions of the cap whose crossing sends an alert, ascending.
    pub alert_at: Vec<Threshold>,
    /// Model groups and rate limits.
    pub limits: Limits,
    /// Each customer's caps.
    pub customer: CustomerTemplate,
}

/// What a call whose client-set output limit does not fit its budget gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnInsufficient {
    /// 402, saying what output limit would fit.
    #[default]
    Refuse,
    /// Sent with its output limit lowered to the most that fits (at least
    /// `server.min_clamped_output_tokens`), the response saying so in
    /// `x-tollgate-output-limit-clamped`.
    Clamp,
}

impl OnInsufficient {
    pub fn as_str(self) -> &'static str {
        match self {
            OnInsufficient::Refuse => "refuse",
            OnInsufficient::Clamp => "clamp",
        }
    }

    pub fn parse(text: &str) -> Option<OnInsufficient> {
        match text {
            "refuse" => Some(OnInsufficient::Refuse),
            "clamp" => Some(OnInsufficient::Clamp),
            _ => None,
        }
    }
}

impl KeyConfig {
    pub fn allows_model(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|patterns| patterns.iter().any(|p| p.matches(model)))
    }
}

/// A credential: usable through [`Secret::expose`], printed as `*****`.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

/// The SHA-256 of a raw gateway key, as stored in `key_sha256`.
pub fn hash_key(raw: &str) -> [u8; 32] {
    Sha256::digest(raw.as_bytes()).into()
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read the config file: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    /// TOML syntax, a wrong type or an unknown field; the message carries
    /// the line and column.
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {field}: {message}")]
    Invalid {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: prices.file: {source}")]
    Prices { file: String, source: PriceError },
}

impl Config {
    /// Loads and checks a config file, reading secrets from the process
    /// environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: path.display().to_string(),
            source,
        })?;
        Config::from_toml_str(&text, path)
    }

    /// Checks config text; `origin` is the file it came from, for messages
    /// and to find a relative prices file.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        Config::from_toml_str_with_env(text, origin, &|name| std::env::var(name).ok())
    }

    /// [`Config::from_toml_str`] with `env` in place of the process
    /// environment.
    pub fn from_toml_str_with_env(
        text: &str,
        origin: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let checker = Checker {
            file: origin.display().to_string(),
            origin,
            env,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            file: checker.file.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        checker.check(raw)
    }

    /// The provider serving `model`: the first whose patterns match.
    pub fn provider_for(&self, model: &str) -> Option<&Provider> {
        self.providers
            .iter()
            .find(|provider| provider.models.iter().any(|p| p.matches(model)))
    }

    /// The provider of `kind` serving `model`: the first of that kind
    /// whose patterns match.
    pub fn provider_of_kind(&self, kind: ProviderKind, model: &str) -> Option<&Provider> {
        self.providers.iter().find(|provider| {
            provider.kind == kind && provider.models.iter().any(|p| p.matches(model))
        })
    }
}
