//! The admin API's keys and orgs on Redis (see `budget::records`): three
//! keys under one hash tag of their own, so one script reads or writes
//! them all on a Redis Cluster too (`lua/record_write.lua` states the
//! layout):
//!
//! | key                           | type   | holds |
//! |-------------------------------|--------|-------|
//! | `tg:{tollgate:admin}:version` | string | the version, one more on every write |
//! | `tg:{tollgate:admin}:records` | hash   | `<kind>:<id>` → `<revision> <version> <call id> <body>` |
//! | `tg:{tollgate:admin}:audit`   | stream | one entry per write, id `<seq>-0`, field `body` |
//!
//! The tag cannot be a budget tag: those are org ids (no `:`) or
//! `key:<id>`.
//!
//! Gateways poll the version every few hundred milliseconds, so reading it
//! is one `GET`. A Redis restarted without its data must not read as a
//! store with no keys and orgs, and writes must not start a new version
//! history in it: every call here checks the store epoch (`meta`) first;
//! a read that finds no version at all, and every write, read `tg:meta`
//! afresh instead of trusting the epoch seen last, so they fail closed
//! from the moment the data is gone, not from the next sweep. (On a Redis
//! Cluster that holds only while `tg:meta`'s shard loses its data with
//! this tag's, as for the budget tags: see `meta`.)
//!
//! A write carries a call id, the same for each attempt of the call: an
//! attempt that timed out after it applied leaves that id on the document,
//! and the retry answers `Written` instead of a conflict with itself.

use ::redis::{FromRedisValue, Script};

use super::connection::Request;
use super::RedisStore;
use crate::budget::records::{
    AuditEntry, RecordKind, RecordSet, RecordWrite, StoredRecord, WriteOutcome,
};
use crate::budget::{Records, StoreError};

/// The hash tag the documents live under.
pub(super) const RECORDS_TAG: &str = "tollgate:admin";

/// The three keys of the documents' tag, in the order the scripts take
/// them.
pub(super) struct RecordKeys([String; 3]);

impl RecordKeys {
    pub fn new(tag: &str) -> Self {
        RecordKeys(["version", "records", "audit"].map(|name| format!("tg:{{{tag}}}:{name}")))
    }

    fn version(&self) -> &str {
        &self.0[0]
    }

    fn records(&self) -> &str {
        &self.0[1]
    }

    fn audit(&self) -> &str {
        &self.0[2]
    }

    /// The spending alerts' queue keys (`alerts`), under the same tag:
    /// the queue is global, like the documents.
    pub fn alerts(&self) -> [String; 3] {
        let base = self.version().strip_suffix(":version").unwrap_or_default();
        ["alerts", "alerts:due", "alerts:done"].map(|name| format!("{base}:{name}"))
    }
}

impl Records for RedisStore {
    /// The version the documents are at: one `GET`.
    async fn records_version(&self) -> Result<u64, StoreError> {
        self.epoch().await?;
        let mut get = ::redis::cmd("GET");
        get.arg(self.inner.records.version());
        let version: Option<u64> = self
            .inner
            .connection
            .call(
                self.inner.policy,
                "read the records version",
                Request::Command(&get),
            )
            .await?;
        match version {
            Some(version) => Ok(version),
            None => self.never_written().await,
        }
    }

    /// Every document, sorted by kind and id, and the version, read in one
    /// `records.lua` call.
    async fn records(&self) -> Result<RecordSet, StoreError> {
        self.epoch().await?;
        let keys = &self.inner.records;
        let (version, fields): (u64, Vec<String>) = self
            .run_records(
                &self.inner.scripts.records,
                "read the records",
                &[keys.version(), keys.records()],
                &[],
            )
            .await?;
        if version == 0 {
            self.never_written().await?;
        }
        let mut records = fields
            .chunks_exact(2)
            .map(|pair| parse_record(&pair[0], &pair[1]))
            .collect::<Result<Vec<_>, _>>()?;
        records.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
        Ok(RecordSet { version, records })
    }

    /// Writes one document if it is at the revision the writer expects,
    /// with its audit entry, in one `record_write.lua` call.
    async fn write_record(&self, write: &RecordWrite) -> Result<WriteOutcome, StoreError> {
        self.refresh_epoch(self.inner.policy).await?;
        let keys = &self.inner.records;
        let field = format!("{}:{}", write.kind, write.id);
        let expect = write.expect.map(|n| n.to_string()).unwrap_or_default();
        let call_id = uuid::Uuid::now_v7().simple().to_string();
        let reply: Vec<String> = self
            .run_records(
                &self.inner.scripts.record_write,
                "write a record",
                &[keys.version(), keys.records(), keys.audit()],
                &[&field, &expect, &write.body, &write.audit, &call_id],
            )
            .await?;
        write_reply(&reply)
    }

    /// Up to `limit` audit entries, newest first, older than `before`: one
    /// `XREVRANGE`.
    async fn audit(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.epoch().await?;
        // No entry is numbered below 1.
        if limit == 0 || before.is_some_and(|before| before <= 1) {
            return Ok(Vec::new());
        }
        let end = before.map_or("+".to_owned(), |before| format!("({before}-0"));
        let mut xrevrange = ::redis::cmd("XREVRANGE");
        xrevrange
            .arg(self.inner.records.audit())
            .arg(end)
            .arg("-")
            .arg("COUNT")
            .arg(limit);
        let page: Vec<(String, Vec<String>)> = self
            .inner
            .connection
            .call(
                self.inner.policy,
                "read the audit trail",
                Request::Command(&xrevrange),
            )
            .await?;
        if page.is_empty() && before.is_none() {
            self.never_written().await?;
        }
        page.into_iter()
            .map(|(id, fields)| parse_audit(&id, fields))
            .collect()
    }
}

impl RedisStore {
    /// The answer for a store that holds no version: 0 if `tg:meta` still
    /// holds the epoch this store serves under, else why it is closed.
    async fn never_written(&self) -> Result<u64, StoreError> {
        self.refresh_epoch(self.inner.policy).await?;
        Ok(0)
    }

    /// Runs one of the documents' scripts: their own keys, and no clock
    /// offset in a test build (they never read the time).
    async fn run_records<T: FromRedisValue>(
        &self,
        script: &Script,
        what: &'static str,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T, StoreError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        self.inner
            .connection
            .call(self.inner.policy, what, Request::Script(&invocation))
            .await
    }

    /// Keeps this store's documents under `tag` instead of
    /// [`RECORDS_TAG`], so tests sharing one Redis each have their own.
    /// Only before the store is cloned.
    #[cfg(test)]
    pub(crate) fn with_records_tag(mut self, tag: &str) -> Self {
        std::sync::Arc::get_mut(&mut self.inner)
            .expect("the records tag is set before the store is shared")
            .records = RecordKeys::new(tag);
        self
    }
}

fn unreadable(what: String) -> StoreError {
    StoreError::Unavailable(format!("unreadable admin record: {what}"))
}

/// One document from its `records` hash field and value.
fn parse_record(field: &str, value: &str) -> Result<StoredRecord, StoreError> {
    let (kind, id) = field
        .split_once(':')
        .and_then(|(kind, id)| Some((RecordKind::parse(kind)?, id)))
        .ok_or_else(|| unreadable(format!("field {field:?}")))?;
    let mut parts = value.splitn(4, ' ');
    let revision = parts.next().and_then(|revision| revision.parse().ok());
    // The version and call id of the write that made it are the script's.
    let body = parts.nth(2);
    match (revision, body) {
        (Some(revision), Some(body)) => Ok(StoredRecord {
            kind,
            id: id.to_owned(),
            revision,
            body: body.to_owned(),
        }),
        _ => Err(unreadable(format!("the value of {field:?}"))),
    }
}

/// One audit entry from its stream id (`<seq>-0`) and fields.
fn parse_audit(id: &str, fields: Vec<String>) -> Result<AuditEntry, StoreError> {
    let seq = id
        .strip_suffix("-0")
        .and_then(|seq| seq.parse().ok())
        .ok_or_else(|| unreadable(format!("audit entry id {id:?}")))?;
    let mut pairs = fields.into_iter();
    while let (Some(name), Some(value)) = (pairs.next(), pairs.next()) {
        if name == "body" {
            return Ok(AuditEntry { seq, body: value });
        }
    }
    Err(unreadable(format!("audit entry {id} has no body")))
}

/// What `record_write.lua` answered.
fn write_reply(reply: &[String]) -> Result<WriteOutcome, StoreError> {
    let bad =
        || StoreError::Unavailable(format!("unexpected reply from record_write.lua: {reply:?}"));
    let number = |index: usize| -> Result<u64, StoreError> {
        reply
            .get(index)
            .and_then(|text| text.parse().ok())
            .ok_or_else(bad)
    };
    match reply.first().map(String::as_str) {
        Some("written") => Ok(WriteOutcome::Written {
            revision: number(1)?,
            version: number(2)?,
        }),
        Some("conflict") => match reply.get(1).map(String::as_str) {
            Some("") => Ok(WriteOutcome::Conflict { current: None }),
            Some(_) => Ok(WriteOutcome::Conflict {
                current: Some(number(1)?),
            }),
            None => Err(bad()),
        },
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_read_back_whole_whatever_its_body_holds() {
        let record = parse_record("key:k:1", "3 17 0a9f {\"a\": \"x y\"}").unwrap();
        assert_eq!(
            record,
            StoredRecord {
                kind: RecordKind::Key,
                id: "k:1".to_owned(),
                revision: 3,
                body: "{\"a\": \"x y\"}".to_owned(),
            }
        );
        assert_eq!(parse_record("org:", "1 1 ab ").unwrap().body, "");
        assert!(parse_record("team:x", "1 1 ab {}").is_err());
        assert!(parse_record("key:x", "1 1 ab").is_err());
    }
}
