//! The keys and orgs made through the admin API, as the store keeps them:
//! one JSON document per key or org, each with a revision, a store-wide
//! version that every change moves on, and an audit trail of the changes.
//!
//! The store knows nothing of what a document says: the control plane
//! (the directory and the admin API) reads and writes them. What the
//! store promises is the one thing that needs its atomicity: a write
//! applies only if the document is still at the revision the writer read
//! (or still absent, for a new id), and bumps the version and appends the
//! audit entry in the same step. Two admins changing one key at once
//! cannot lose either change, and every gateway sees a change by polling
//! the version, one cheap read, instead of reading every document.
//!
//! A deleted key or org stays as a document saying so, so its id stays
//! taken and its history readable.

use std::fmt;

/// What a document describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    Key,
    Org,
}

impl RecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Key => "key",
            RecordKind::Org => "org",
        }
    }

    pub fn parse(text: &str) -> Option<RecordKind> {
        match text {
            "key" => Some(RecordKind::Key),
            "org" => Some(RecordKind::Org),
            _ => None,
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One document as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    pub kind: RecordKind,
    pub id: String,
    /// 1 for a new document, one more on every write.
    pub revision: u64,
    /// The document, JSON.
    pub body: String,
}

/// Every document, and the version they were read at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordSet {
    /// 0 for a store never written to; one more on every write.
    pub version: u64,
    pub records: Vec<StoredRecord>,
}

/// A write of one document, applied only if the document is as the
/// writer last saw it.
#[derive(Clone, Debug)]
pub struct RecordWrite {
    pub kind: RecordKind,
    pub id: String,
    /// `None`: the id must be free (never used, not even by a deleted
    /// document); `Some(n)`: the document must be at revision `n`.
    pub expect: Option<u64>,
    pub body: String,
    /// The audit entry for this change, JSON; the store adds its sequence
    /// number (the version the write moved the store to).
    pub audit: String,
}

/// What a write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Applied: the document's new revision and the store's new version.
    Written { revision: u64, version: u64 },
    /// Not applied: the document is not as expected. `current` is its
    /// revision now (`None`: it does not exist).
    Conflict { current: Option<u64> },
}

/// One audit entry: the version its change moved the store to, and the
/// entry as the writer gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub seq: u64,
    pub body: String,
}

/// The documents held in process: the memory store's, and the reference
/// the other stores' behaviour is tested against.
#[derive(Debug, Default)]
pub struct RecordBook {
    version: u64,
    records: std::collections::BTreeMap<(RecordKind, String), (u64, String)>,
    audit: Vec<AuditEntry>,
}

impl RecordBook {
    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn all(&self) -> RecordSet {
        RecordSet {
            version: self.version,
            records: self
                .records
                .iter()
                .map(|((kind, id), (revision, body))| StoredRecord {
                    kind: *kind,
                    id: id.clone(),
                    revision: *revision,
                    body: body.clone(),
                })
                .collect(),
        }
    }

    pub fn write(&mut self, write: &RecordWrite) -> WriteOutcome {
        let slot = (write.kind, write.id.clone());
        let current = self.records.get(&slot).map(|(revision, _)| *revision);
        if current != write.expect {
            return WriteOutcome::Conflict { current };
        }
        let revision = current.map_or(1, |revision| revision + 1);
        self.version += 1;
        self.records.insert(slot, (revision, write.body.clone()));
        self.audit.push(AuditEntry {
            seq: self.version,
            body: write.audit.clone(),
        });
        WriteOutcome::Written {
            revision,
            version: self.version,
        }
    }

    /// Up to `limit` audit entries, newest first, older than `before`.
    pub fn audit(&self, before: Option<u64>, limit: usize) -> Vec<AuditEntry> {
        self.audit
            .iter()
            .rev()
            .filter(|entry| before.is_none_or(|before| entry.seq < before))
            .take(limit)
            .cloned()
            .collect()
    }
}
