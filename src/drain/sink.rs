//! The ledger sink: a SQLite file of its own (`store.ledger_sink_path`)
//! that the drain writes the Redis ledger stream into, one committed
//! transaction per page, and that operators query with `sqlite3`.
//!
//! Its one table, `ledger`, has the columns of the SQLite store's `ledger`
//! table (docs/stores.md, "The ledger sink"), plus the run, the hash tag and the
//! stream id each entry came from. A row is unique on `(exec_id, status)`:
//! a call has at most one entry of each status (a settle; an expiry and
//! then a late settle; an adjustment), so a page written twice (the drain
//! is at least once) adds nothing the second time (`INSERT OR IGNORE`).
//!
//! Durability: WAL with `synchronous = FULL`, so a committed page is on
//! the disk before Redis trims it. A page holds up to a thousand entries,
//! so the flush costs a fraction of a millisecond per entry.
//!
//! Several gateways may share one sink file on one host (SQLite's locks
//! serialise their transactions; the unique key drops what both wrote).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::budget::redis::StreamEntry;

/// The version of the sink's schema this binary writes and reads.
/// Version 2 added the customer a call was for.
const SINK_VERSION: u32 = 2;

/// The `meta` row saying a file is a ledger sink, and of which version.
const VERSION_ROW: &str = "ledger_sink_version";

const CREATE: &str = "
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- One row per ledger entry drained from Redis: a settle, an expiry, a late
-- settle or an adjustment, as the SQLite store's `ledger` table has them.
CREATE TABLE ledger (
    seq                 INTEGER PRIMARY KEY,
    exec_id             TEXT    NOT NULL,
    key                 TEXT    NOT NULL,
    org                 TEXT,
    run                 TEXT,               -- the agent run, when the call named one
    customer            TEXT,               -- the customer, when the call named one
    model               TEXT    NOT NULL,   -- '' for an expiry without one, and adjustments
    input_tokens        INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    reserved_usd_micros INTEGER NOT NULL,
    actual_usd_micros   INTEGER NOT NULL,   -- what it moved the counters by (signed)
    status              TEXT    NOT NULL,   -- ok | overrun | estimated | late | expired | adjustment
    note                TEXT,               -- an adjustment's note
    at                  TEXT    NOT NULL,   -- RFC 3339 UTC, milliseconds (the store's clock)
    key_period_id       TEXT    NOT NULL,
    org_period_id       TEXT,
    tag                 TEXT    NOT NULL,   -- the Redis hash tag it was drained from
    stream_id           TEXT    NOT NULL,   -- its id in that tag's stream
    UNIQUE (exec_id, status)
);
CREATE INDEX ledger_by_time ON ledger (at);
CREATE INDEX ledger_by_key ON ledger (key, at);
";

/// Why the sink could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot open the ledger sink {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("{path} is not a tollgate ledger sink: {reason}")]
    Foreign { path: PathBuf, reason: String },
    #[error(
        "{path} is a ledger sink of a newer tollgate (version {found}; this binary writes \
         version {SINK_VERSION})"
    )]
    Newer { path: PathBuf, found: u32 },
    #[error("cannot write to the ledger sink {path}: {reason}")]
    Write { path: PathBuf, reason: String },
}

/// An open sink file.
pub struct LedgerSink {
    conn: Connection,
    path: PathBuf,
}

impl LedgerSink {
    /// Opens `path`, creating the file and its schema if absent; refuses a
    /// file that is something else (the SQLite store's own file, say).
    pub fn open(path: &Path) -> Result<LedgerSink, SinkError> {
        let open_error = |e: rusqlite::Error| SinkError::Open {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.is_dir() {
                return Err(SinkError::Open {
                    path: path.to_owned(),
                    reason: format!("its directory {} does not exist", dir.display()),
                });
            }
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(open_error)?;
        // Another gateway sharing the file may hold the write lock for a
        // page's commit.
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(open_error)?;
        let _: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(open_error)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_error)?;
        create_or_check(path, &mut conn)?;
        Ok(LedgerSink {
            conn,
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `entries` of `tag`'s stream in one transaction, each at most
    /// once; returns how many were new. When this returns `Ok` they are on
    /// the disk, and Redis may trim them.
    pub fn write(&mut self, tag: &str, entries: &[StreamEntry]) -> Result<usize, SinkError> {
        let write_error = |e: rusqlite::Error| SinkError::Write {
            path: self.path.clone(),
            reason: e.to_string(),
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(write_error)?;
        let mut added = 0;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO ledger (exec_id, key, org, run, model, input_tokens,
                         cached_input_tokens, cache_write_tokens, output_tokens,
                         reserved_usd_micros, actual_usd_micros, status, note, at,
                         key_period_id, org_period_id, tag, stream_id, customer)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                         ?15, ?16, ?17, ?18, ?19)",
                )
                .map_err(write_error)?;
            for entry in entries {
                added += insert
                    .execute(rusqlite::params![
                        entry.exec_id,
                        entry.key,
                        entry.org,
                        entry.run,
                        entry.model,
                        entry.input_tokens,
                        entry.cached_input_tokens,
                        entry.cache_write_tokens,
                        entry.output_tokens,
                        entry.reserved,
                        entry.actual,
                        entry.status,
                        entry.note,
                        rfc3339(entry.at_ms),
                        entry.key_period,
                        entry.org_period,
                        tag,
                        entry.id,
                        entry.customer,
                    ])
                    .map_err(write_error)?;
            }
        }
        tx.commit().map_err(write_error)?;
        Ok(added)
    }
}

/// `at` as the SQLite store writes it: RFC 3339 UTC with milliseconds.
fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or(chrono::DateTime::UNIX_EPOCH)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Lays out an empty file; checks that a file with tables is a sink this
/// binary can write.
fn create_or_check(path: &Path, conn: &mut Connection) -> Result<(), SinkError> {
    let open_error = |e: rusqlite::Error| SinkError::Open {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let foreign = |reason: &str| SinkError::Foreign {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(open_error)?;
    let tables: i64 = tx
        .query_row(
            "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |row| row.get(0),
        )
        .map_err(open_error)?;
    if tables == 0 {
        tx.execute_batch(CREATE).map_err(open_error)?;
        tx.execute(
            "INSERT INTO meta (name, value) VALUES (?1, ?2), ('created_at', ?3)",
            rusqlite::params![
                VERSION_ROW,
                SINK_VERSION.to_string(),
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ],
        )
        .map_err(open_error)?;
        tracing::info!(file = %path.display(), "created the ledger sink");
        return tx.commit().map_err(open_error);
    }
    let version: Option<String> = tx
        .query_row(
            "SELECT value FROM meta WHERE name = ?1",
            [VERSION_ROW],
            |row| row.get(0),
        )
        .optional()
        .map_err(|_| foreign("it holds tables but no ledger sink version"))?;
    let found: u32 = version
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| foreign("it holds tables but no ledger sink version"))?;
    if found > SINK_VERSION {
        return Err(SinkError::Newer {
            path: path.to_owned(),
            found,
        });
    }
    if found < SINK_VERSION {
        // Version 1 kept no customer: its rows name none.
        tx.execute_batch("ALTER TABLE ledger ADD COLUMN customer TEXT")
            .map_err(open_error)?;
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE name = ?2",
            rusqlite::params![SINK_VERSION.to_string(), VERSION_ROW],
        )
        .map_err(open_error)?;
        tracing::info!(file = %path.display(), from = found, to = SINK_VERSION, "upgraded the ledger sink");
        return tx.commit().map_err(open_error);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(exec_id: &str, status: &str, id: &str) -> StreamEntry {
        StreamEntry {
            id: id.to_owned(),
            exec_id: exec_id.to_owned(),
            key: "alice".to_owned(),
            org: Some("acme".to_owned()),
            run: None,
            customer: None,
            model: "gpt-4o-mini".to_owned(),
            input_tokens: 10,
            cached_input_tokens: 0,
            cache_write_tokens: 0,
            output_tokens: 5,
            reserved: 900,
            actual: 300,
            status: status.to_owned(),
            note: None,
            at_ms: 1_764_500_000_123,
            key_period: "2026-11-30".to_owned(),
            org_period: Some("2026-11".to_owned()),
        }
    }

    #[test]
    fn a_page_written_twice_is_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let mut sink = LedgerSink::open(&path).unwrap();
        let page = [
            entry("e1", "expired", "1-0"),
            entry("e1", "late", "2-0"),
            entry("e2", "ok", "3-0"),
        ];
        assert_eq!(sink.write("acme", &page).unwrap(), 3);
        assert_eq!(sink.write("acme", &page[1..]).unwrap(), 0);
        drop(sink);
        let mut again = LedgerSink::open(&path).unwrap();
        assert_eq!(again.write("acme", &page).unwrap(), 0);
        let (rows, at): (i64, String) = again
            .conn
            .query_row("SELECT COUNT(*), MIN(at) FROM ledger", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .unwrap();
        assert_eq!(rows, 3);
        assert_eq!(at, "2025-11-30T10:53:20.123Z");
    }

    #[test]
    fn a_file_that_is_not_a_sink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE ledger (seq INTEGER PRIMARY KEY);")
            .unwrap();
        let error = LedgerSink::open(&path).err().unwrap();
        assert!(matches!(error, SinkError::Foreign { .. }), "{error}");
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent").join("ledger.db");
        let error = LedgerSink::open(&path).err().unwrap();
        assert!(error.to_string().contains("does not exist"), "{error}");
    }
}
