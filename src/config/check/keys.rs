//! Checking `[[orgs]]` and `[[keys]]`: ids, caps and periods, the org a
//! key belongs to, the models it may call, and its hash, every key
//! different from every other.

use std::collections::{HashMap, HashSet};

use super::super::raw::{RawKey, RawOrg};
use super::super::{
    hash_key, ConfigError, CustomerSpec, CustomerTemplate, KeyConfig, Limits, OnInsufficient,
    OrgConfig,
};
use super::Checker;
use crate::money::Threshold;

impl Checker<'_> {
    pub(super) fn orgs(&self, raw: &[RawOrg]) -> Result<Vec<OrgConfig>, ConfigError> {
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
                limits: Limits::check(&raw.model_caps, raw.rpm, raw.tpm)
                    .map_err(|error| self.invalid(field(&error.field), error.message))?,
            });
        }
        Ok(orgs)
    }

    pub(super) fn keys(
        &self,
        raw: &[RawKey],
        orgs: &[OrgConfig],
    ) -> Result<Vec<KeyConfig>, ConfigError> {
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
                limits: Limits::check(&raw.model_caps, raw.rpm, raw.tpm)
                    .map_err(|error| self.invalid(field(&error.field), error.message))?,
                customer: CustomerTemplate::check(CustomerSpec {
                    cap_usd: raw.customer_cap_usd.as_deref(),
                    period: raw.customer_period.as_deref(),
                    rpm: raw.customer_rpm,
                    tpm: raw.customer_tpm,
                    from: raw.customer_from.as_deref(),
                    required: raw.customer_required,
                })
                .map_err(|error| self.invalid(field(&error.field), error.message))?,
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
}
