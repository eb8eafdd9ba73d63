//! The keys and orgs a gateway enforces: those of the config file and
//! those made through the admin API, which live in the store.
//!
//! Every request reads one immutable [`Snapshot`], swapped whole when the
//! store's documents change, so authenticating a key costs no store round
//! trip and no lock. A gateway learns of a change made elsewhere by
//! polling the store's records version every [`POLL_EVERY`] (one cheap
//! read), and of its own changes at once: every gateway applies a change
//! within a second, and a call already admitted keeps the key and caps it
//! was admitted with.
//!
//! Keys are found by the SHA-256 of the presented secret. A hash map finds
//! the candidate; its digest is then compared in constant time. The map's
//! lookup compares digests of the presented secret, which an attacker
//! cannot steer towards a stored digest, so timing tells nothing about
//! the secrets.

mod caps;
pub mod documents;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use glob::Pattern;
use http::HeaderMap;
use subtle::ConstantTimeEq;

use crate::budget::records::{RecordKind, RecordSet, StoredRecord};
use crate::budget::Records;
use crate::budget::Upkeep;
use crate::budget::{BudgetStore, Cap, Scope, ScopeKind, StoreError};
use crate::config::{
    hash_key, Config, CustomerSpec, CustomerTemplate, KeyConfig, Limits, ModelCapSpec,
    OnInsufficient, OrgConfig,
};
use crate::error::GatewayError;
use crate::money::Threshold;
use crate::period::Period;
use documents::{KeyDoc, OrgDoc};

/// How often a gateway asks the store whether keys or orgs changed.
pub const POLL_EVERY: Duration = Duration::from_millis(250);

/// Where a key or org comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The config file: changed by editing it and restarting.
    Config,
    /// The admin API: kept in the store.
    Api,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Config => "config",
            Source::Api => "api",
        }
    }
}

/// A document made through the admin API, at the revision it was read.
#[derive(Clone, Debug)]
pub struct Stored<D> {
    pub doc: D,
    pub revision: u64,
}

/// One key as enforced.
#[derive(Clone, Debug)]
pub struct KeyEntry {
    pub config: Arc<KeyConfig>,
    pub disabled: bool,
    pub expires_at: Option<DateTime<Utc>>,
    /// `None` for a key of the config file.
    pub api: Option<Stored<KeyDoc>>,
}

impl KeyEntry {
    pub fn source(&self) -> Source {
        if self.api.is_some() {
            Source::Api
        } else {
            Source::Config
        }
    }

    /// Whether a call with this key is served at `now`.
    pub fn usable_at(&self, now: DateTime<Utc>) -> bool {
        !self.disabled && self.expires_at.is_none_or(|at| now < at)
    }
}

/// One org as enforced.
#[derive(Clone, Debug)]
pub struct OrgEntry {
    pub config: OrgConfig,
    /// `None` for an org of the config file.
    pub api: Option<Stored<OrgDoc>>,
}

impl OrgEntry {
    pub fn source(&self) -> Source {
        if self.api.is_some() {
            Source::Api
        } else {
            Source::Config
        }
    }
}

/// The keys and orgs at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The store's records version the API documents were read at; `None`
    /// until they have been read once (the config's keys work before).
    pub version: Option<u64>,
    pub keys: BTreeMap<String, KeyEntry>,
    pub orgs: BTreeMap<String, OrgEntry>,
    by_digest: HashMap<[u8; 32], String>,
}

impl Snapshot {
    /// The config's keys and orgs, with the API's documents from `records`
    /// over them. A document that cannot be enforced as written (a broken
    /// one, an id the config file has since taken, an org that no longer
    /// exists) is left out and logged: its key is refused rather than
    /// served without its caps.
    fn build(config: &Config, records: Option<&RecordSet>) -> Snapshot {
        let mut snapshot = Snapshot {
            version: records.map(|set| set.version),
            ..Snapshot::default()
        };
        for org in &config.orgs {
            snapshot.orgs.insert(
                org.id.clone(),
                OrgEntry {
                    config: org.clone(),
                    api: None,
                },
            );
        }
        let records = records.map_or(&[][..], |set| &set.records[..]);
        // Orgs first: a key is served only if its org exists.
        for record in records.iter().filter(|r| r.kind == RecordKind::Org) {
            snapshot.add_org(record);
        }
        for key in &config.keys {
            snapshot.insert_key(KeyEntry {
                config: Arc::new(key.clone()),
                disabled: false,
                expires_at: None,
                api: None,
            });
        }
        for record in records.iter().filter(|r| r.kind == RecordKind::Key) {
            snapshot.add_key(record);
        }
        snapshot
    }

    /// This snapshot with one document changed: the API's entry of its id
    /// replaced (or removed, for a deleted one). Only that document is
    /// read, so making thousands of keys one after the other costs a copy
    /// of the maps each, not a read of every document.
    fn with(&self, record: &StoredRecord, version: Option<u64>) -> Snapshot {
        let mut next = Snapshot {
            version,
            keys: self.keys.clone(),
            orgs: self.orgs.clone(),
            by_digest: self.by_digest.clone(),
        };
        match record.kind {
            RecordKind::Org => {
                if next.orgs.get(&record.id).is_some_and(|e| e.api.is_some()) {
                    next.orgs.remove(&record.id);
                }
                next.add_org(record);
            }
            RecordKind::Key => {
                if let Some(entry) = next.keys.get(&record.id).filter(|e| e.api.is_some()) {
                    let digest = entry.config.key_sha256;
                    next.by_digest.remove(&digest);
                    next.keys.remove(&record.id);
                }
                next.add_key(record);
            }
        }
        next
    }

    fn add_org(&mut self, record: &StoredRecord) {
        match serde_json::from_str::<OrgDoc>(&record.body) {
            Ok(doc) if doc.deleted_at.is_some() => {}
            Ok(doc) => match org_entry(doc, record.revision) {
                Ok(entry) if self.orgs.contains_key(&entry.config.id) => tracing::warn!(
                    org = %entry.config.id,
                    "the config file now has an org of this id: the API's is ignored"
                ),
                Ok(entry) => {
                    self.orgs.insert(entry.config.id.clone(), entry);
                }
                Err(reason) => {
                    tracing::error!(org = %record.id, reason, "ignoring an org document")
                }
            },
            Err(error) => tracing::error!(org = %record.id, %error, "ignoring an org document"),
        }
    }

    fn add_key(&mut self, record: &StoredRecord) {
        let doc = match serde_json::from_str::<KeyDoc>(&record.body) {
            Ok(doc) if doc.deleted_at.is_some() => return,
            Ok(doc) => doc,
            Err(error) => {
                tracing::error!(key = %record.id, %error, "ignoring a key document");
                return;
            }
        };
        let entry = match key_entry(doc, record.revision) {
            Ok(entry) => entry,
            Err(reason) => {
                tracing::error!(key = %record.id, reason, "ignoring a key document");
                return;
            }
        };
        let id = &entry.config.id;
        if self.keys.contains_key(id) {
            tracing::warn!(key = %id, "the config file now has a key of this id: the API's is ignored");
        } else if let Some(org) = entry
            .config
            .org
            .as_ref()
            .filter(|org| !self.orgs.contains_key(*org))
        {
            tracing::error!(key = %id, org = %org, "refusing a key whose org no longer exists");
        } else if self.by_digest.contains_key(&entry.config.key_sha256) {
            tracing::error!(key = %id, "refusing a key whose secret another key has");
        } else {
            self.insert_key(entry);
        }
    }

    fn insert_key(&mut self, entry: KeyEntry) {
        self.by_digest
            .insert(entry.config.key_sha256, entry.config.id.clone());
        self.keys.insert(entry.config.id.clone(), entry);
    }

    /// The org scope of a key, if it has an org.
    pub fn org_scope(&self, key: &KeyConfig) -> Option<Scope> {
        let org = self.orgs.get(key.org.as_deref()?)?;
        Some(Scope {
            kind: ScopeKind::Org,
            id: org.config.id.clone(),
            cap: org.config.cap,
            period: org.config.period,
        })
    }
}

/// The key a document describes, checked.
pub fn key_entry(doc: KeyDoc, revision: u64) -> Result<KeyEntry, String> {
    let mut key_sha256 = [0u8; 32];
    hex::decode_to_slice(&doc.key_sha256, &mut key_sha256)
        .map_err(|_| "its key_sha256 is not 64 hex characters".to_owned())?;
    let period: Period = doc
        .period
        .parse()
        .map_err(|_| format!("its period {:?} is unknown", doc.period))?;
    let models = doc
        .models
        .as_ref()
        .map(|models| models.iter().map(|m| Pattern::new(m)).collect())
        .transpose()
        .map_err(|error| format!("a model pattern is not a glob: {error}"))?;
    let expires_at = doc.expires_at.as_deref().map(parse_time).transpose()?;
    Ok(KeyEntry {
        config: Arc::new(KeyConfig {
            id: doc.id.clone(),
            org: doc.org.clone(),
            key_sha256,
            cap: doc.cap_usd_micros,
            period,
            models,
            // A document written by a version that knew only "refuse".
            on_insufficient: OnInsufficient::parse(&doc.on_insufficient).unwrap_or_default(),
            alert_at: Threshold::parse_list(&doc.alert_at)
                .map_err(|error| format!("its alert_at is not valid: {error}"))?,
            limits: limits_of(&doc.model_caps, doc.rpm, doc.tpm)?,
            customer: CustomerTemplate::check(CustomerSpec {
                cap_usd: doc.customer_cap_usd.as_deref(),
                period: doc.customer_period.as_deref(),
                rpm: doc.customer_rpm,
                tpm: doc.customer_tpm,
                from: doc.customer_from.as_deref(),
                required: Some(doc.customer_required),
            })
            .map_err(|error| format!("its {} is not valid: {}", error.field, error.message))?,
        }),
        disabled: doc.disabled,
        expires_at,
        api: Some(Stored { doc, revision }),
    })
}

pub fn org_entry(doc: OrgDoc, revision: u64) -> Result<OrgEntry, String> {
    let period: Period = doc
        .period
        .parse()
        .map_err(|_| format!("its period {:?} is unknown", doc.period))?;
    Ok(OrgEntry {
        config: OrgConfig {
            id: doc.id.clone(),
            cap: doc.cap_usd_micros,
            period,
            alert_at: Threshold::parse_list(&doc.alert_at)
                .map_err(|error| format!("its alert_at is not valid: {error}"))?,
            limits: limits_of(&doc.model_caps, doc.rpm, doc.tpm)?,
        },
        api: Some(Stored { doc, revision }),
    })
}

/// A document's model groups and rate limits, checked.
fn limits_of(
    model_caps: &[ModelCapSpec],
    rpm: Option<u64>,
    tpm: Option<u64>,
) -> Result<Limits, String> {
    Limits::check(model_caps, rpm, tpm)
        .map_err(|error| format!("its {} is not valid: {}", error.field, error.message))
}

/// An RFC 3339 time, as UTC.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|_| format!("{text:?} is not an RFC 3339 time such as \"2026-12-31T00:00:00Z\""))
}

/// A time as the API writes it: RFC 3339, UTC, whole seconds.
pub fn format_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The directory every request reads: the current [`Snapshot`], replaced
/// whole when the store's documents change.
pub struct Directory {
    current: ArcSwap<Snapshot>,
    config: Config,
    /// Held by an admin change from its store write to its [`apply`]
    /// (`Directory::apply`), so the changes made on this gateway reach its
    /// snapshot in the store's order. Applied out of order, an older
    /// revision replaced a newer one: of twenty racing cap changes, the
    /// key was left enforcing one that was not the last, a deleted key
    /// could come back, until the next poll.
    pub writing: tokio::sync::Mutex<()>,
}

impl Directory {
    /// The config's keys and orgs alone, until the store's documents are
    /// read ([`Directory::refresh`]).
    pub fn new(config: &Config) -> Directory {
        Directory {
            current: ArcSwap::from_pointee(Snapshot::build(config, None)),
            config: config.clone(),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The key a request presents (`Authorization: Bearer …` or
    /// `x-api-key`), if it is known and usable now. Before the store's keys
    /// have been read, a key that is not in the config may be one of them:
    /// it gets "store unavailable", not "invalid key", which would tell its
    /// holder it was revoked.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<KeyConfig>, GatewayError> {
        self.authenticate_key(presented_key(headers))
    }

    /// The key `presented` (where the caller's family sends it), if it is
    /// one of this gateway's and usable now.
    pub fn authenticate_key(
        &self,
        presented: Option<&str>,
    ) -> Result<Arc<KeyConfig>, GatewayError> {
        let presented = presented.ok_or(GatewayError::MissingKey)?;
        let digest = hash_key(presented);
        let snapshot = self.current.load();
        let entry = snapshot
            .by_digest
            .get(&digest)
            .and_then(|id| snapshot.keys.get(id))
            .filter(|entry| bool::from(entry.config.key_sha256.ct_eq(&digest)));
        match entry {
            Some(entry) if entry.usable_at(Utc::now()) => Ok(entry.config.clone()),
            Some(_) => Err(GatewayError::InvalidKey),
            None if snapshot.version.is_none() => Err(GatewayError::StoreUnavailable),
            None => Err(GatewayError::InvalidKey),
        }
    }

    /// The scopes a key spends from: itself and its org.
    pub fn scopes(&self, key: &KeyConfig) -> (Scope, Option<Scope>) {
        let key_scope = Scope {
            kind: ScopeKind::Key,
            id: key.id.clone(),
            cap: key.cap,
            period: key.period,
        };
        (key_scope, self.current.load().org_scope(key))
    }

    /// The other caps a call of `key` to `model` for `customer` is
    /// reserved against: the key's model groups that match and its rate
    /// limits, its org's, then the customer's.
    pub fn caps(&self, key: &KeyConfig, model: &str, customer: Option<&str>) -> Vec<Cap> {
        let mut caps = Vec::new();
        caps::caps_of(&key.limits, ScopeKind::Key, &key.id, model, &mut caps);
        let snapshot = self.current.load();
        if let Some(org) = key.org.as_deref().and_then(|org| snapshot.orgs.get(org)) {
            caps::caps_of(
                &org.config.limits,
                ScopeKind::Org,
                &org.config.id,
                model,
                &mut caps,
            );
        }
        if let Some(customer) = customer {
            caps::customer_caps(&key.customer, &key.id, customer, &mut caps);
        }
        caps
    }

    /// Reads the store's documents if they changed since the snapshot was
    /// built, and swaps in a new snapshot; returns whether it did.
    pub async fn refresh(&self, store: &BudgetStore) -> Result<bool, StoreError> {
        let version = store.records_version().await?;
        if self.current.load().version == Some(version) {
            return Ok(false);
        }
        self.reload(store).await?;
        Ok(true)
    }

    /// Applies one document this gateway has just written, which moved the
    /// store to `version`. When no other change came in between (the
    /// snapshot is at `version - 1`), the snapshot moves to `version`;
    /// otherwise it keeps its version, so the next poll reads everything.
    pub fn apply(&self, record: &StoredRecord, version: u64, store: &BudgetStore) {
        if record.kind == RecordKind::Key {
            if let Ok(doc) = serde_json::from_str::<KeyDoc>(&record.body) {
                store.track_key(&doc.id, doc.org.as_deref());
            }
        }
        self.current.rcu(|current| {
            // A snapshot already at `version` or later (a poll read every
            // document meanwhile) holds this write or what replaced it:
            // applying it again would put an older revision back, and for
            // good, since the next poll would find nothing new to read.
            if current.version.is_some_and(|at| at >= version) {
                return current.clone();
            }
            let next_version = if current.version == version.checked_sub(1) {
                Some(version)
            } else {
                current.version
            };
            Arc::new(current.with(record, next_version))
        });
    }

    /// Reads every document and swaps in a new snapshot, unless one from a
    /// later version got there first.
    pub async fn reload(&self, store: &BudgetStore) -> Result<(), StoreError> {
        let records = store.records().await?;
        // The sweep and `reconcile` must visit every tag a key made here
        // may have spent under, deleted keys too (their holds still expire).
        for record in records.records.iter().filter(|r| r.kind == RecordKind::Key) {
            if let Ok(doc) = serde_json::from_str::<KeyDoc>(&record.body) {
                store.track_key(&doc.id, doc.org.as_deref());
            }
        }
        let built = Arc::new(Snapshot::build(&self.config, Some(&records)));
        self.current.rcu(|current| {
            if current.version > built.version {
                current.clone()
            } else {
                built.clone()
            }
        });
        Ok(())
    }
}

/// The task keeping a directory up to date; stopped when dropped.
pub struct KeepingUp {
    task: tokio::task::AbortHandle,
}

impl KeepingUp {
    /// Starts [`keep_up`] on the current Tokio runtime.
    pub fn spawn(directory: Arc<Directory>, store: BudgetStore) -> KeepingUp {
        KeepingUp {
            task: tokio::spawn(keep_up(directory, store)).abort_handle(),
        }
    }
}

impl Drop for KeepingUp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Keeps `directory` up to date with the store, every [`POLL_EVERY`], until
/// the task is dropped.
async fn keep_up(directory: Arc<Directory>, store: BudgetStore) {
    let mut ticks = tokio::time::interval(POLL_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Logged when reading starts failing and when it recovers.
    let mut failing = false;
    loop {
        ticks.tick().await;
        match directory.refresh(&store).await {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("reading keys and orgs from the store works again");
            }
            Ok(_) => {}
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "cannot read keys and orgs from the store; serving the last ones read");
            }
            Err(_) => {}
        }
    }
}

/// The secret a request presents.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value.to_str().ok()?.trim();
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))?
            .trim();
        return (!token.is_empty()).then_some(token);
    }
    let value = headers.get("x-api-key")?.to_str().ok()?.trim();
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests;
