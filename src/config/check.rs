//! Checking a raw config: defaults applied, every value parsed and
//! validated, every error naming the file and the field.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use glob::Pattern;

use super::raw::{RawAlerts, RawConfig, RawKey, RawOrg, RawProvider, RawServer, RawStore};
use super::{
    hash_key, AlertsConfig, Config, ConfigError, KeyConfig, OnExpiry, OnInsufficient, OnStoreError,
    OrgConfig, Provider, Secret, ServerConfig, StoreBackend, StoreConfig, Webhook,
};
use crate::money::{parse_usd, Threshold, UsdMicros};
use crate::period::Period;
use crate::prices::PriceTable;
use crate::provider::{ProviderKind, OUTPUT_LIMIT_FIELDS};

mod http_layers;
mod redis;

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
/// A run is forgotten a day after its last call.
const DEFAULT_RUN_TTL_HOURS: u64 = 24;
/// A year.
const MAX_RUN_TTL_HOURS: u64 = 366 * 24;
const DEFAULT_ADMIN_KEY_ENV: &str = "TOLLGATE_ADMIN_KEY";
const DEFAULT_RESERVATION_TTL_SECS: u64 = 900;
const DEFAULT_SETTLE_EPSILON_USD: &str = "0.0001";
const DEFAULT_PRICES_FILE: &str = "config/prices.toml";
const DEFAULT_LEDGER_RETENTION_DAYS: u64 = 30;
const DEFAULT_SQLITE_PATH: &str = "tollgate.db";
/// As long as a retry of a call can still arrive.
const DEFAULT_CLOSED_RECORD_SECS: u64 = 120;
/// A day: no retry of a call comes later than that.
const MAX_CLOSED_RECORD_SECS: u64 = 24 * 3600;
/// Ten years: beyond that a retention is a typo.
const MAX_LEDGER_RETENTION_DAYS: u64 = 3650;
/// How long Redis keeps ledger entries no sink took (issue: a day of calls
/// is what an operator sizes Redis for).
const DEFAULT_LEDGER_BUFFER_HOURS: u64 = 24;
/// A week: longer only piles up Redis memory a sink should hold.
const MAX_LEDGER_BUFFER_HOURS: u64 = 7 * 24;
/// Spend reports a year back and a bit, to compare a month with the same
/// month a year before.
const DEFAULT_AGGREGATE_RETENTION_DAYS: u64 = 400;
/// Ten years, as for the ledger.
const MAX_AGGREGATE_RETENTION_DAYS: u64 = 3650;

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
        })
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

    fn store(&self, raw: &RawStore, server: &ServerConfig) -> Result<StoreConfig, ConfigError> {
        let backend = match raw.backend.as_deref().unwrap_or("sqlite") {
            "memory" => StoreBackend::Memory,
            "sqlite" => {
                let file = raw.sqlite_path.as_deref().unwrap_or(DEFAULT_SQLITE_PATH);
                if file.trim().is_empty() {
                    return Err(self.invalid("store.sqlite_path", "must not be empty"));
                }
                StoreBackend::Sqlite {
                    path: self.beside_config(file),
                }
            }
            "redis" => self.redis(raw)?,
            other => {
                return Err(self.invalid(
                    "store.backend",
                    format!("{other:?} is not \"sqlite\", \"redis\" or \"memory\""),
                ))
            }
        };
        let ttl_secs = raw
            .reservation_ttl_secs
            .unwrap_or(DEFAULT_RESERVATION_TTL_SECS);
        let timeout_secs = server.upstream_timeout.as_secs();
        if ttl_secs <= timeout_secs {
            return Err(self.invalid(
                "store.reservation_ttl_secs",
                format!(
                    "{ttl_secs} must exceed server.upstream_timeout_secs ({timeout_secs}), \
                     or a reservation could expire while its call is still running"
                ),
            ));
        }
        let default_epsilon = toml::Value::String(DEFAULT_SETTLE_EPSILON_USD.to_owned());
        let epsilon = raw.settle_epsilon_usd.as_ref().unwrap_or(&default_epsilon);
        let on_store_error = match raw.on_store_error.as_deref().unwrap_or("reject") {
            "reject" => OnStoreError::Reject,
            "allow" => OnStoreError::Allow,
            other => {
                return Err(self.invalid(
                    "store.on_store_error",
                    format!("{other:?} is not \"reject\" or \"allow\""),
                ))
            }
        };
        let retention_days = raw
            .ledger_retention_days
            .unwrap_or(DEFAULT_LEDGER_RETENTION_DAYS);
        if !(1..=MAX_LEDGER_RETENTION_DAYS).contains(&retention_days) {
            return Err(self.invalid(
                "store.ledger_retention_days",
                format!("{retention_days} must be between 1 and {MAX_LEDGER_RETENTION_DAYS}"),
            ));
        }
        let aggregate_retention_days = raw
            .aggregate_retention_days
            .unwrap_or(DEFAULT_AGGREGATE_RETENTION_DAYS);
        let aggregate_retention_days = u32::try_from(aggregate_retention_days)
            .ok()
            .filter(|days| (1..=MAX_AGGREGATE_RETENTION_DAYS).contains(&u64::from(*days)))
            .ok_or_else(|| {
                self.invalid(
                    "store.aggregate_retention_days",
                    format!(
                        "{aggregate_retention_days} must be between 1 and \
                         {MAX_AGGREGATE_RETENTION_DAYS}"
                    ),
                )
            })?;
        let closed_record_secs = raw.closed_record_secs.unwrap_or(DEFAULT_CLOSED_RECORD_SECS);
        if !(1..=MAX_CLOSED_RECORD_SECS).contains(&closed_record_secs) {
            return Err(self.invalid(
                "store.closed_record_secs",
                format!("{closed_record_secs} must be between 1 and {MAX_CLOSED_RECORD_SECS}"),
            ));
        }
        let run_ttl_hours = raw.run_ttl_hours.unwrap_or(DEFAULT_RUN_TTL_HOURS);
        if !(1..=MAX_RUN_TTL_HOURS).contains(&run_ttl_hours) || run_ttl_hours * 3600 < ttl_secs {
            return Err(self.invalid(
                "store.run_ttl_hours",
                format!(
                    "{run_ttl_hours} must be between 1 and {MAX_RUN_TTL_HOURS}, and at least \
                     store.reservation_ttl_secs ({ttl_secs} s), so a run is never forgotten \
                     while a call of it is open"
                ),
            ));
        }
        let on_expiry = match raw.on_expiry.as_deref() {
            None | Some("charge") => OnExpiry::Charge,
            Some("release") => OnExpiry::Release,
            Some(other) => {
                return Err(self.invalid(
                    "store.on_expiry",
                    format!("{other:?} is not \"charge\" or \"release\""),
                ))
            }
        };
        let ledger_buffer_hours = raw
            .ledger_buffer_hours
            .unwrap_or(DEFAULT_LEDGER_BUFFER_HOURS);
        if !(1..=MAX_LEDGER_BUFFER_HOURS).contains(&ledger_buffer_hours) {
            return Err(self.invalid(
                "store.ledger_buffer_hours",
                format!("{ledger_buffer_hours} must be between 1 and {MAX_LEDGER_BUFFER_HOURS}"),
            ));
        }
        let ledger_sink = match (&raw.ledger_sink_path, &backend) {
            (None, _) => None,
            (Some(file), _) if file.trim().is_empty() => {
                return Err(self.invalid("store.ledger_sink_path", "must not be empty"))
            }
            (Some(file), StoreBackend::Redis { .. }) => Some(self.beside_config(file)),
            (Some(_), _) => {
                return Err(self.invalid(
                    "store.ledger_sink_path",
                    "only the redis store drains its ledger to a sink (the sqlite store's \
                     ledger is its own file's `ledger` table): remove it, or use backend = \"redis\"",
                ))
            }
        };
        Ok(StoreConfig {
            backend,
            reservation_ttl: Duration::from_secs(ttl_secs),
            settle_epsilon: self.usd("store.settle_epsilon_usd", epsilon)?,
            on_store_error,
            ledger_retention: Duration::from_secs(retention_days * 24 * 3600),
            aggregate_retention_days,
            closed_record: Duration::from_secs(closed_record_secs),
            on_expiry,
            run_ttl: Duration::from_secs(run_ttl_hours * 3600),
            ledger_sink,
            ledger_buffer: Duration::from_secs(ledger_buffer_hours * 3600),
        })
    }

    /// A relative path, resolved against the config file's directory.
    fn beside_config(&self, file: &str) -> PathBuf {
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

    fn providers(&self, raw: &[RawProvider]) -> Result<Vec<Provider>, ConfigError> {
        if raw.is_empty() {
            return Err(self.invalid(
                "providers",
                "no [[providers]] configured: no model could be served",
            ));
        }
        let mut names = HashSet::new();
        let mut providers = Vec::with_capacity(raw.len());
        for (i, raw) in raw.iter().enumerate() {
            let field = |name: &str| format!("providers[{i}].{name}");
            if raw.name.trim().is_empty() {
                return Err(self.invalid(field("name"), "must not be empty"));
            }
            if !names.insert(raw.name.as_str()) {
                return Err(self.invalid(
                    field("name"),
                    format!("{:?} is already used by another provider", raw.name),
                ));
            }
            let kind = match raw.kind.as_str() {
                "openai" => ProviderKind::OpenAi,
                "anthropic" => ProviderKind::Anthropic,
                other => {
                    return Err(self.invalid(
                        field("kind"),
                        format!("{other:?} is not \"openai\" or \"anthropic\""),
                    ))
                }
            };
            let base_url = base_url(&raw.base_url)
                .map_err(|message| self.invalid(field("base_url"), message))?;
            if raw.api_key_env.trim().is_empty() {
                return Err(self.invalid(field("api_key_env"), "must name an environment variable"));
            }
            if raw.models.is_empty() {
                return Err(self.invalid(
                    field("models"),
                    "needs at least one model pattern, like \"gpt-*\"",
                ));
            }
            for name in &raw.output_limit_fields {
                if !OUTPUT_LIMIT_FIELDS.contains(&name.as_str()) {
                    return Err(self.invalid(
                        field("output_limit_fields"),
                        format!(
                            "{name:?} is not an output-limit field: use \"max_tokens\", \
                             \"max_completion_tokens\" or \"max_output_tokens\""
                        ),
                    ));
                }
            }
            providers.push(Provider {
                name: raw.name.clone(),
                kind,
                base_url,
                api_key_env: raw.api_key_env.clone(),
                api_key: self.secret_var(&raw.api_key_env),
                models: self.patterns(&field("models"), &raw.models)?,
                output_limit_fields: raw.output_limit_fields.clone(),
            });
        }
        Ok(providers)
    }

    fn orgs(&self, raw: &[RawOrg]) -> Result<Vec<OrgConfig>, ConfigError> {
        let mut ids = HashSet::new();
        let mut orgs = Vec::with_capacity(raw.len());
        for (i, raw) in raw.iter().enumerate() {
            let field = |name: &str| format!("orgs[{i}].{name}");
            self.id(&field("id"), &raw.id)?;
            if !ids.insert(raw.id.as_str()) {
                return Err(self.invalid(
                    field("id"),
                    format!("{:?} is already used by another org", raw.id),
                ));
            }
            orgs.push(OrgConfig {
                id: raw.id.clone(),
                cap: self.usd(&field("cap_usd"), &raw.cap_usd)?,
                period: self.period(&field("period"), &raw.period)?,
                alert_at: self.alert_at(&field("alert_at"), raw.alert_at.as_deref())?,
            });
        }
        Ok(orgs)
    }

    fn keys(&self, raw: &[RawKey], orgs: &[OrgConfig]) -> Result<Vec<KeyConfig>, ConfigError> {
        let mut ids = HashSet::new();
        let mut hashes: HashMap<[u8; 32], &str> = HashMap::new();
        let mut keys = Vec::with_capacity(raw.len());
        for (i, raw) in raw.iter().enumerate() {
            let field = |name: &str| format!("keys[{i}].{name}");
            self.id(&field("id"), &raw.id)?;
            if !ids.insert(raw.id.as_str()) {
                return Err(self.invalid(
                    field("id"),
                    format!("{:?} is already used by another key", raw.id),
                ));
            }
            if let Some(org) = &raw.org {
                if !orgs.iter().any(|o| &o.id == org) {
                    return Err(self.invalid(
                        field("org"),
                        format!("{org:?} is not the id of any [[orgs]] entry"),
                    ));
                }
            }
            let (key_sha256, source_field) = self.key_hash(raw, &field)?;
            if let Some(other) = hashes.insert(key_sha256, &raw.id) {
                return Err(self.invalid(
                    source_field,
                    format!("the same key as key {other:?}; every key must be different"),
                ));
            }
            let models = match &raw.models {
                None => None,
                Some(list) if list.is_empty() => {
                    return Err(self.invalid(
                        field("models"),
                        "an empty list allows no model; remove the field to allow every model",
                    ))
                }
                Some(list) => Some(self.patterns(&field("models"), list)?),
            };
            keys.push(KeyConfig {
                id: raw.id.clone(),
                org: raw.org.clone(),
                key_sha256,
                cap: self.usd(&field("cap_usd"), &raw.cap_usd)?,
                period: self.period(&field("period"), &raw.period)?,
                models,
                on_insufficient: match raw.on_insufficient.as_deref() {
                    None => OnInsufficient::Refuse,
                    Some(text) => OnInsufficient::parse(text).ok_or_else(|| {
                        self.invalid(
                            field("on_insufficient"),
                            format!("{text:?} is not \"refuse\" or \"clamp\""),
                        )
                    })?,
                },
                alert_at: self.alert_at(&field("alert_at"), raw.alert_at.as_deref())?,
            });
        }
        Ok(keys)
    }

    fn alert_at(
        &self,
        field: &str,
        texts: Option<&[String]>,
    ) -> Result<Vec<Threshold>, ConfigError> {
        Threshold::parse_list(texts.unwrap_or_default())
            .map_err(|message| self.invalid(field, message))
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

    /// The key's hash, from exactly one of `key_sha256` or `key_env`, and
    /// the field it came from.
    fn key_hash(
        &self,
        raw: &RawKey,
        field: &dyn Fn(&str) -> String,
    ) -> Result<([u8; 32], String), ConfigError> {
        match (&raw.key_sha256, &raw.key_env) {
            (Some(hex_text), None) => {
                let mut hash = [0u8; 32];
                hex::decode_to_slice(hex_text.trim(), &mut hash).map_err(|_| {
                    self.invalid(
                        field("key_sha256"),
                        "must be 64 hex characters, the SHA-256 of the key \
                         (from `tollgate hash-key KEY`)",
                    )
                })?;
                Ok((hash, field("key_sha256")))
            }
            (None, Some(var)) => match self.var(var) {
                Some(raw_key) => Ok((hash_key(&raw_key), field("key_env"))),
                None => Err(self.invalid(
                    field("key_env"),
                    format!("environment variable {var} is unset or empty"),
                )),
            },
            (Some(_), Some(_)) => {
                Err(self.invalid(field("key_sha256"), "set key_sha256 or key_env, not both"))
            }
            (None, None) => Err(self.invalid(
                field("key_sha256"),
                "missing: set key_sha256 (from `tollgate hash-key KEY`) or key_env",
            )),
        }
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

/// Checks a provider base URL: http or https, a host, no credentials or
/// query; a trailing slash is dropped so paths append cleanly.
fn base_url(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    let scheme = match uri.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme,
        _ => return Err(format!("{text:?} must start with http:// or https://")),
    };
    let authority = match uri.authority() {
        Some(authority) if !authority.host().is_empty() => authority,
        _ => return Err(format!("{text:?} has no host")),
    };
    if authority.as_str().contains('@') {
        return Err("must not carry credentials; the key comes from api_key_env".to_owned());
    }
    if uri.query().is_some() {
        return Err(format!("{text:?} must not carry a query"));
    }
    let prefix = uri.path().trim_end_matches('/');
    let path = if prefix.is_empty() { "/" } else { prefix };
    http::Uri::builder()
        .scheme(scheme)
        .authority(authority.as_str())
        .path_and_query(path)
        .build()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))
}
