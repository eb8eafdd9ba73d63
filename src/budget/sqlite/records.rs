//! The admin API's keys and orgs over the SQLite tables: `records`, `audit`
//! and the `records_version` row of `meta` (see `schema`). The rules are
//! `RecordBook`'s; each function runs inside the writer's open transaction,
//! so a write's check, its document, the version and the audit entry are
//! committed together or not at all, and a read sees one instant.

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{Connection, OptionalExtension};

use crate::budget::records::{
    AuditEntry, RecordKind, RecordSet, RecordWrite, StoredRecord, WriteOutcome,
};

type Sql<T> = rusqlite::Result<T>;

/// The store's version: one more on every applied write.
pub(super) fn version(conn: &Connection) -> Sql<u64> {
    let text: String = conn
        .prepare_cached("SELECT value FROM meta WHERE name = 'records_version'")?
        .query_row([], |row| row.get(0))?;
    text.parse()
        .map_err(|_| invalid(format!("records_version {text:?} is not a count")))
}

/// Every document, sorted by kind and id, and the version.
pub(super) fn all(conn: &Connection) -> Sql<RecordSet> {
    let version = version(conn)?;
    let mut statement =
        conn.prepare_cached("SELECT kind, id, revision, body FROM records ORDER BY kind, id")?;
    let records = statement
        .query_map([], |row| {
            let kind: String = row.get(0)?;
            Ok(StoredRecord {
                kind: RecordKind::parse(&kind)
                    .ok_or_else(|| invalid(format!("record kind {kind:?}")))?,
                id: row.get(1)?,
                revision: row.get(2)?,
                body: row.get(3)?,
            })
        })?
        .collect::<Sql<Vec<_>>>()?;
    Ok(RecordSet { version, records })
}

/// Writes the document if it is at the revision the writer expects (absent
/// for `None`), with its audit entry; a conflict writes nothing.
pub(super) fn write(
    conn: &Connection,
    write: &RecordWrite,
    now: DateTime<Utc>,
) -> Sql<WriteOutcome> {
    let current: Option<u64> = conn
        .prepare_cached("SELECT revision FROM records WHERE kind = ?1 AND id = ?2")?
        .query_row((write.kind.as_str(), &write.id), |row| row.get(0))
        .optional()?;
    if current != write.expect {
        return Ok(WriteOutcome::Conflict { current });
    }
    let revision = current.map_or(1, |revision| revision + 1);
    let version = version(conn)? + 1;
    conn.prepare_cached(
        "INSERT INTO records (kind, id, revision, body) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (kind, id) DO UPDATE SET revision = ?3, body = ?4",
    )?
    .execute((write.kind.as_str(), &write.id, revision, &write.body))?;
    conn.prepare_cached("UPDATE meta SET value = ?1 WHERE name = 'records_version'")?
        .execute([version.to_string()])?;
    conn.prepare_cached("INSERT INTO audit (seq, at, body) VALUES (?1, ?2, ?3)")?
        .execute((
            version,
            now.to_rfc3339_opts(SecondsFormat::Millis, true),
            &write.audit,
        ))?;
    Ok(WriteOutcome::Written { revision, version })
}

/// Up to `limit` audit entries, newest first, numbered below `before`.
pub(super) fn audit(conn: &Connection, before: Option<u64>, limit: usize) -> Sql<Vec<AuditEntry>> {
    // Past i64::MAX every entry is older.
    let before = before.map_or(i64::MAX, |before| i64::try_from(before).unwrap_or(i64::MAX));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    conn.prepare_cached("SELECT seq, body FROM audit WHERE seq < ?1 ORDER BY seq DESC LIMIT ?2")?
        .query_map((before, limit), |row| {
            Ok(AuditEntry {
                seq: row.get(0)?,
                body: row.get(1)?,
            })
        })?
        .collect()
}

/// A value in the file this binary does not understand.
fn invalid(what: String) -> rusqlite::Error {
    rusqlite::Error::InvalidColumnType(0, what, rusqlite::types::Type::Text)
}
