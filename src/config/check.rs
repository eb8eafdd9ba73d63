//! Checking a raw config: defaults applied, every value parsed and
//! validated, every error naming the file and the field.
//!
//! [`Checker`] takes the file one section at a time: `[server]` and
//! `[alerts]` here, with the field checks every section shares; `[store]`
//! in `store` (its Redis settings in `redis`), `[[providers]]` in
//! `providers`, `[[orgs]]` and `[[keys]]` in `keys`, and what the HTTP
//! layers read in `http_layers`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use glob::Pattern;

use super::raw::{RawAlerts, RawConfig, RawServer};
use super::{hash_key, AlertsConfig, Config, ConfigError, Secret, ServerConfig, Webhook};
use crate::money::{parse_usd, UsdMicros};
use crate::period::Period;
use crate::prices::PriceTable;

mod http_layers;
mod keys;
mod providers;
mod redis;
mod store;

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
const DEFAULT_MAX_REQUEST_BYTES: u64 = 10 * 1024 * 1024;
const DEFAULT_UPSTREAM_TIMEOUT_SECS: u64 = 600;
/// Long enough for a slow mobile link, short enough that trickled headers
/// free their connection quickly.
const DEFAULT_HEADER_READ_TIMEOUT_SECS: u64 = 10;
/// Above the 60 s idle timeout of common load balancers, so that they,
/// not the gateway, close a pooled connection.
const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 75;
/// Well under the file descriptors a raised RLIMIT_NOFILE gives, leaving
/// room for provider and store connections.
const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;
/// The least output limit a call is fitted to: enough for a short answer
/// or a tool call.
const DEFAULT_MIN_CLAMPED_OUTPUT_TOKENS: u64 = 256;
/// The largest count cache a config may ask for (64 GiB).
const MAX_TOKEN_COUNT_CACHE_MB: u64 = 64 * 1024;
const DEFAULT_ADMIN_KEY_ENV: &str = "TOLLGATE_ADMIN_KEY";
const DEFAULT_PRICES_FILE: &str = "config/prices.toml";

/// Turns the raw file into a [`Config`], one section at a time.
pub(super) struct Checker<'a> {
    pub(super) file: String,
    pub(super) origin: &'a Path,
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
}

impl Checker<'_> {
    pub(super) fn check(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let server = self.server(&raw.server)?;
        let store = self.store(&raw.store, &server)?;
        let prices = self.prices(raw.prices.file.as_deref())?;
        let providers = self.providers(&raw.providers)?;
        let orgs = self.orgs(&raw.orgs)?;
        // Keys may all come from the admin API; without one, an empty
        // list is a config no client could ever call through.
        if raw.keys.is_empty() && server.admin_key.is_none() {
            return Err(self.invalid(
                "keys",
                "no [[keys]] configured and no admin key to make keys with: no client could \
                 call the gateway (hash a key with `tollgate hash-key KEY`, or set the admin \
                 key's variable, server.admin_key_env)",
            ));
        }
        let keys = self.keys(&raw.keys, &orgs)?;
        let alerts = self.alerts(&raw.alerts)?;
        Ok(Config {
            server,
            store,
            prices,
            providers,
            orgs,
            keys,
            alerts,
        })
    }

    fn server(&self, raw: &RawServer) -> Result<ServerConfig, ConfigError> {
        let listen_text = raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listen = listen_text.parse().map_err(|_| {
            self.invalid(
                "server.listen",
                format!("{listen_text:?} is not an address like \"127.0.0.1:8080\""),
            )
        })?;
        let max_request_bytes = raw.max_request_bytes.unwrap_or(DEFAULT_MAX_REQUEST_BYTES);
        let max_request_bytes = usize::try_from(max_request_bytes)
            .ok()
            .filter(|bytes| *bytes > 0)
            .ok_or_else(|| {
                self.invalid(
                    "server.max_request_bytes",
                    format!("{max_request_bytes} is not a byte count above 0"),
                )
            })?;
        let timeout_secs = raw
            .upstream_timeout_secs
            .unwrap_or(DEFAULT_UPSTREAM_TIMEOUT_SECS);
        if timeout_secs == 0 {
            return Err(self.invalid("server.upstream_timeout_secs", "must be above 0"));
        }
        let admin_key_env = raw
            .admin_key_env
            .as_deref()
            .unwrap_or(DEFAULT_ADMIN_KEY_ENV);
        let admin_listen = match raw.admin_listen.as_deref() {
            None => None,
            Some(text) => Some(text.parse().map_err(|_| {
                self.invalid(
                    "server.admin_listen",
                    format!("{text:?} is not an address like \"127.0.0.1:8081\""),
                )
            })?),
        };
        let header_read_timeout = self.positive(
            "server.header_read_timeout_secs",
            raw.header_read_timeout_secs,
            DEFAULT_HEADER_READ_TIMEOUT_SECS,
        )?;
        let idle_timeout = self.positive(
            "server.idle_timeout_secs",
            raw.idle_timeout_secs,
            DEFAULT_IDLE_TIMEOUT_SECS,
        )?;
        let max_connections = self.positive(
            "server.max_connections",
            raw.max_connections,
            DEFAULT_MAX_CONNECTIONS,
        )?;
        let max_connections = usize::try_from(max_connections)
            .map_err(|_| self.invalid("server.max_connections", "is too large"))?;
        let min_clamped_output_tokens = self.positive(
            "server.min_clamped_output_tokens",
            raw.min_clamped_output_tokens,
            DEFAULT_MIN_CLAMPED_OUTPUT_TOKENS,
        )?;
        Ok(ServerConfig {
            listen,
            max_request_bytes,
            upstream_timeout: Duration::from_secs(timeout_secs),
            admin_key: self.admin_key(raw, admin_key_env)?,
            admin_listen,
            header_read_timeout: Duration::from_secs(header_read_timeout),
            idle_timeout: Duration::from_secs(idle_timeout),
            max_connections,
            min_clamped_output_tokens,
            log_format: self.log_format(raw.log_format.as_deref())?,
            access_log: raw.access_log.unwrap_or(false),
            cors_allowed_origins: self.cors_origins(raw.cors_allowed_origins.as_deref())?,
            admin_timeout: Duration::from_secs(self.positive(
                "server.admin_timeout_secs",
                raw.admin_timeout_secs,
                http_layers::DEFAULT_ADMIN_TIMEOUT_SECS,
            )?),
            token_count_cache_mb: self.token_count_cache_mb(raw.token_count_cache_mb)?,
        })
    }

    /// `server.token_count_cache_mb`: 0 (off) up to 64 GiB.
    fn token_count_cache_mb(&self, raw: Option<u64>) -> Result<u64, ConfigError> {
        match raw {
            None => Ok(crate::tokenizer::cache::DEFAULT_CACHE_MB),
            Some(mb) if mb <= MAX_TOKEN_COUNT_CACHE_MB => Ok(mb),
            Some(_) => Err(self.invalid(
                "server.token_count_cache_mb",
                format!("must be at most {MAX_TOKEN_COUNT_CACHE_MB} (MiB; 0 turns the cache off)"),
            )),
        }
    }

    /// The admin key's digest: `admin_key_sha256` when set (the key itself
    /// then lives nowhere near the gateway), else the SHA-256 of the
    /// variable `admin_key_env` names.
    fn admin_key(&self, raw: &RawServer, env: &str) -> Result<Option<[u8; 32]>, ConfigError> {
        if let Some(hex_text) = &raw.admin_key_sha256 {
            let mut hash = [0u8; 32];
            hex::decode_to_slice(hex_text.trim(), &mut hash).map_err(|_| {
                self.invalid(
                    "server.admin_key_sha256",
                    "must be 64 hex characters, the SHA-256 of the admin key \
                     (from `tollgate hash-key KEY`)",
                )
            })?;
            return Ok(Some(hash));
        }
        Ok(self.var(env).map(|key| hash_key(&key)))
    }

    /// `value`, or `default` when unset; 0 is refused.
    fn positive(&self, field: &str, value: Option<u64>, default: u64) -> Result<u64, ConfigError> {
        match value.unwrap_or(default) {
            0 => Err(self.invalid(field, "must be above 0")),
            value => Ok(value),
        }
    }

    /// A relative path, resolved against the config file's directory.
    pub(super) fn beside_config(&self, file: &str) -> PathBuf {
        let path = Path::new(file);
        match self.origin.parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        }
    }

    fn prices(&self, file: Option<&str>) -> Result<PriceTable, ConfigError> {
        let path = self.prices_path(file.unwrap_or(DEFAULT_PRICES_FILE))?;
        PriceTable::load(&path).map_err(|source| ConfigError::Prices {
            file: self.file.clone(),
            source,
        })
    }

    /// A relative prices path is tried from the current directory first
    /// (the usual `tollgate serve` from the repository root), then next to
    /// the config file.
    fn prices_path(&self, file: &str) -> Result<PathBuf, ConfigError> {
        let path = Path::new(file);
        if path.is_absolute() || path.exists() {
            return Ok(path.to_path_buf());
        }
        let beside_config = self.origin.parent().map(|dir| dir.join(path));
        match beside_config {
            Some(candidate) if candidate.exists() => Ok(candidate),
            _ => Err(self.invalid(
                "prices.file",
                format!("{file:?} is neither in the current directory nor next to the config file"),
            )),
        }
    }

    /// `[alerts]`: a webhook needs its signing secret, read here so a
    /// missing one stops the gateway at start-up, not at the first alert.
    fn alerts(&self, raw: &RawAlerts) -> Result<AlertsConfig, ConfigError> {
        let Some(url) = &raw.webhook_url else {
            if raw.secret_env.is_some() {
                return Err(self.invalid(
                    "alerts.secret_env",
                    "set alerts.webhook_url too, or remove it: without a webhook no alert is sent",
                ));
            }
            return Ok(AlertsConfig::default());
        };
        let url =
            webhook_url(url).map_err(|message| self.invalid("alerts.webhook_url", message))?;
        let Some(env) = &raw.secret_env else {
            return Err(self.invalid(
                "alerts.secret_env",
                "required with alerts.webhook_url: the name of the environment variable \
                 holding the secret each alert is signed with",
            ));
        };
        let secret = self.secret_var(env).ok_or_else(|| {
            self.invalid(
                "alerts.secret_env",
                format!(
                    "the variable {env} is unset or empty: set it to the webhook's signing secret"
                ),
            )
        })?;
        Ok(AlertsConfig {
            webhook: Some(Webhook { url, secret }),
        })
    }

    // --- field checks ---

    /// Ids become parts of Redis keys and metric labels, hence the narrow
    /// alphabet.
    fn id(&self, field: &str, id: &str) -> Result<(), ConfigError> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if id.is_empty() || !id.chars().all(allowed) {
            return Err(self.invalid(
                field,
                format!("{id:?} is not an id: use only letters, digits, '.', '_' and '-'"),
            ));
        }
        Ok(())
    }

    fn usd(&self, field: &str, value: &toml::Value) -> Result<UsdMicros, ConfigError> {
        let text = match value {
            toml::Value::String(text) => text.clone(),
            toml::Value::Integer(n) => n.to_string(),
            other => {
                return Err(self.invalid(
                    field,
                    format!("{other} is not exact: write USD as a decimal string like \"25.00\""),
                ))
            }
        };
        parse_usd(&text).map_err(|e| self.invalid(field, e.to_string()))
    }

    /// `Period`'s own parse; its error lists the periods there are.
    fn period(&self, field: &str, text: &str) -> Result<Period, ConfigError> {
        text.parse::<Period>()
            .map_err(|e| self.invalid(field, e.to_string()))
    }

    fn patterns(&self, field: &str, texts: &[String]) -> Result<Vec<Pattern>, ConfigError> {
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let field = format!("{field}[{i}]");
                if text.is_empty() {
                    return Err(self.invalid(field, "an empty pattern matches no model"));
                }
                Pattern::new(text).map_err(|e| {
                    self.invalid(field, format!("{text:?} is not a glob pattern: {e}"))
                })
            })
            .collect()
    }

    /// An environment variable's value; empty counts as unset.
    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|value| !value.is_empty())
    }

    fn secret_var(&self, name: &str) -> Option<Secret> {
        self.var(name).map(Secret::new)
    }

    fn invalid(&self, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.clone(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Checks the webhook's URL: http or https, a host, no credentials.
fn webhook_url(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!("{text:?} must start with http:// or https://"));
    }
    match uri.authority() {
        Some(authority) if authority.as_str().contains('@') => {
            Err(format!("{text:?} must not carry credentials"))
        }
        Some(authority) if !authority.host().is_empty() => Ok(uri),
        _ => Err(format!("{text:?} has no host")),
    }
}
