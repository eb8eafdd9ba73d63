//! The config file as written: serde structs that mirror the TOML and
//! reject unknown fields. Nothing here is checked; `super::check`
//! turns a [`RawConfig`] into a [`super::Config`] or names the bad field.
//!
//! Optional settings stay `Option`s so their defaults live in one place,
//! next to the checks. Money stays a [`toml::Value`] so a float gets a
//! message saying how to write it, not a bare type error.

use super::limits::ModelCapSpec;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub prices: RawPrices,
    #[serde(default)]
    pub providers: Vec<RawProvider>,
    #[serde(default)]
    pub orgs: Vec<RawOrg>,
    #[serde(default)]
    pub keys: Vec<RawKey>,
    #[serde(default)]
    pub alerts: RawAlerts,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    pub webhook_url: Option<String>,
    pub secret_env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub listen: Option<String>,
    pub max_request_bytes: Option<u64>,
    pub upstream_timeout_secs: Option<u64>,
    pub admin_key_env: Option<String>,
    pub admin_key_sha256: Option<String>,
    pub admin_listen: Option<String>,
    pub header_read_timeout_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
    pub max_connections: Option<u64>,
    pub min_clamped_output_tokens: Option<u64>,
    pub log_format: Option<String>,
    pub access_log: Option<bool>,
    pub cors_allowed_origins: Option<Vec<String>>,
    pub admin_timeout_secs: Option<u64>,
    pub token_count_cache_mb: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub backend: Option<String>,
    pub sqlite_path: Option<String>,
    pub redis_url: Option<String>,
    pub redis_tls_ca_file: Option<String>,
    pub redis_tls_cert_file: Option<String>,
    pub redis_tls_key_file: Option<String>,
    pub reservation_ttl_secs: Option<u64>,
    pub settle_epsilon_usd: Option<toml::Value>,
    pub on_store_error: Option<String>,
    pub ledger_retention_days: Option<u64>,
    pub aggregate_retention_days: Option<u64>,
    pub closed_record_secs: Option<u64>,
    pub on_expiry: Option<String>,
    pub run_ttl_hours: Option<u64>,
    pub customer_ttl_days: Option<u64>,
    pub ledger_sink_path: Option<String>,
    pub ledger_buffer_hours: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrices {
    pub file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub name: String,
    pub kind: String,
    pub base_url: String,
    /// Every kind but `vertex`, which signs in with `credentials_file`.
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default)]
    pub output_limit_fields: Vec<String>,
    /// `vertex`: the Google Cloud project and location calls go to.
    pub project: Option<String>,
    pub location: Option<String>,
    /// `vertex`: the service account's JSON key file.
    pub credentials_file: Option<String>,
    /// `azure`: each deployment and the priced model it runs.
    pub deployments: Option<std::collections::BTreeMap<String, String>>,
    /// `openai` and `azure`: the tier a request that names none is served
    /// at, `"default"` or `"priority"`.
    pub service_tier_default: Option<String>,
    /// `bedrock`: the AWS region calls are signed for, and the variables
    /// holding the credentials that sign them.
    pub region: Option<String>,
    /// Also spelled `access_key_env` and `secret_key_env`, as the design
    /// names them.
    #[serde(alias = "access_key_env")]
    pub access_key_id_env: Option<String>,
    #[serde(alias = "secret_key_env")]
    pub secret_access_key_env: Option<String>,
    pub session_token_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOrg {
    pub id: String,
    pub cap_usd: toml::Value,
    pub period: String,
    pub alert_at: Option<Vec<String>>,
    #[serde(default)]
    pub model_caps: Vec<ModelCapSpec>,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    pub id: String,
    pub org: Option<String>,
    pub key_sha256: Option<String>,
    pub key_env: Option<String>,
    pub cap_usd: toml::Value,
    pub period: String,
    pub models: Option<Vec<String>>,
    pub on_insufficient: Option<String>,
    pub alert_at: Option<Vec<String>>,
    #[serde(default)]
    pub model_caps: Vec<ModelCapSpec>,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub customer_cap_usd: Option<String>,
    pub customer_period: Option<String>,
    pub customer_rpm: Option<u64>,
    pub customer_tpm: Option<u64>,
    pub customer_from: Option<String>,
    pub customer_required: Option<bool>,
}
