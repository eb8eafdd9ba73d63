//! The documents the admin API keeps in the store for each key and org it
//! made: everything the gateway enforces plus what the operator attached,
//! as JSON. A key's secret is kept only as its SHA-256.

use serde::{Deserialize, Serialize};

use crate::config::ModelCapSpec;

/// A key made through the admin API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyDoc {
    pub id: String,
    pub org: Option<String>,
    /// The SHA-256 of the secret, hex.
    pub key_sha256: String,
    pub cap_usd_micros: u64,
    pub period: String,
    /// Glob patterns; `None` allows every model.
    pub models: Option<Vec<String>>,
    pub disabled: bool,
    /// RFC 3339; past it the key is refused.
    pub expires_at: Option<String>,
    pub created_at: String,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    pub on_insufficient: String,
    pub alert_at: Vec<String>,
    /// Absent from documents written before keys took model groups and
    /// rate limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_caps: Vec<ModelCapSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    /// The customer template (`customer_*`); absent from documents written
    /// before keys had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_cap_usd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_rpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_tpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_from: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub customer_required: bool,
    /// When it was deleted: it is refused and unlisted, and its id stays
    /// taken, but its books and history stay readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<String>,
}

/// An org made through the admin API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrgDoc {
    pub id: String,
    pub cap_usd_micros: u64,
    pub period: String,
    pub created_at: String,
    /// Absent from documents written before orgs took thresholds.
    #[serde(default)]
    pub alert_at: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_caps: Vec<ModelCapSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<String>,
}
