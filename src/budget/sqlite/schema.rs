//! The SQLite file: its tables, its schema version, and opening it — as the
//! one gateway that owns it (created or upgraded in place, locked against a
//! second gateway) or as a reader beside a running gateway (`tollgate
//! reconcile`).
//!
//! The tables are documented for operators (docs/stores.md, "The SQLite store"):
//! `ledger` may be queried read-only while the gateway runs.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

mod tables;

use tables::{CREATE, MIGRATIONS};

/// The schema this binary writes. A file with a lower version is upgraded
/// in place by [`tables::MIGRATIONS`]; a file with a higher one is refused.
pub(super) const SCHEMA_VERSION: u32 = 10;

/// Why the store's file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SqliteOpenError {
    #[error(
        "{path} is in use by another tollgate process ({holder}); \
         one gateway per file: stop it, or give this one another store.sqlite_path"
    )]
    Locked { path: PathBuf, holder: String },
    #[error("cannot open the store at {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error(
        "{path} was written by a newer tollgate (schema version {found}; this binary \
         reads up to {SCHEMA_VERSION}): run the newer binary, or restore a backup"
    )]
    Newer { path: PathBuf, found: u32 },
    #[error(
        "{path} has schema version {found}; start the gateway on it once to upgrade it \
         to version {SCHEMA_VERSION}"
    )]
    Older { path: PathBuf, found: u32 },
    #[error("{path} is not a tollgate store: {reason}")]
    Foreign { path: PathBuf, reason: String },
    #[error("{path} is damaged ({reason}); restore it from a backup")]
    Corrupt { path: PathBuf, reason: String },
    /// The journal beside the file cannot be trusted to hold every call
    /// the file lacks (`damage`): `problem` says why and what to do.
    #[error("the journal {journal} of {path} {problem}")]
    Journal {
        path: PathBuf,
        journal: PathBuf,
        problem: String,
    },
}

/// The exclusive lock on `<file>.lock` that makes one gateway the only
/// writer of a file; released when dropped (or when the process dies, as
/// the kernel drops the lock with the descriptor).
pub(super) struct OwnerLock {
    _file: File,
}

/// Opens `path` as its one owner: takes the lock, creates or upgrades the
/// schema, and checks the file is whole.
pub(super) fn open_owner(path: &Path) -> Result<(Connection, OwnerLock), SqliteOpenError> {
    let open_error = |reason: String| SqliteOpenError::Open {
        path: path.to_owned(),
        reason,
    };
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
            return Err(open_error(format!(
                "its directory {} does not exist",
                dir.display()
            )))
        }
        _ => {}
    }
    let lock = lock(path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn =
        Connection::open_with_flags(path, flags).map_err(|e| open_error(e.to_string()))?;
    configure(&conn).map_err(|e| classify(path, e))?;
    check_whole(path, &conn)?;
    create_or_upgrade(path, &mut conn)?;
    Ok((conn, lock))
}

/// Opens `path` to read beside the gateway that owns it: no lock, nothing
/// created, and a file of another schema version refused.
pub(super) fn open_reader(path: &Path) -> Result<Connection, SqliteOpenError> {
    let open_error = |reason: String| SqliteOpenError::Open {
        path: path.to_owned(),
        reason,
    };
    if !path.is_file() {
        return Err(open_error("no such file".to_owned()));
    }
    // Read-write without create: a reader may have to replay the WAL of a
    // gateway that was killed, which needs write access to the `-shm` file.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(e.to_string()))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| classify(path, e))?;
    match version(&conn).map_err(|e| classify(path, e))? {
        None => Err(SqliteOpenError::Foreign {
            path: path.to_owned(),
            reason: "it has no tollgate schema".to_owned(),
        }),
        Some(found) if found > SCHEMA_VERSION => Err(SqliteOpenError::Newer {
            path: path.to_owned(),
            found,
        }),
        Some(found) if found < SCHEMA_VERSION => Err(SqliteOpenError::Older {
            path: path.to_owned(),
            found,
        }),
        Some(_) => Ok(conn),
    }
}

/// Takes the owner lock, or names the process that holds it.
fn lock(path: &Path) -> Result<OwnerLock, SqliteOpenError> {
    let lock_path = lock_path(path);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|e| SqliteOpenError::Open {
            path: path.to_owned(),
            reason: format!("cannot create its lock file {}: {e}", lock_path.display()),
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            // The holder wrote its pid when it took the lock; an unreadable
            // file still refuses, it only names no one.
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "holder unknown".to_owned(),
                text => text.to_owned(),
            };
            return Err(SqliteOpenError::Locked {
                path: path.to_owned(),
                holder,
            });
        }
        Err(TryLockError::Error(e)) => {
            return Err(SqliteOpenError::Open {
                path: path.to_owned(),
                reason: format!("cannot lock {}: {e}", lock_path.display()),
            })
        }
    }
    let holder = format!("pid {}", std::process::id());
    let written = file
        .set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(holder.as_bytes()));
    if let Err(e) = written {
        tracing::warn!(file = %lock_path.display(), error = %e, "could not record this process in the lock file");
    }
    Ok(OwnerLock { _file: file })
}

/// The lock file beside the store: `tollgate.db` → `tollgate.db.lock`.
pub(super) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The page size of a new file. A posting commits the changes of many
/// calls at once and appends each page it changed to the log, each page in
/// two `pwrite` calls: measured in the load benchmark against 1 KiB pages,
/// 4 KiB ones cost the writer a quarter less per call. A file made with
/// another size keeps it.
const PAGE_BYTES: u32 = 4096;

/// The settings every owner connection runs with.
///
/// WAL with `synchronous = NORMAL`: a posting is written to the WAL file
/// when it commits, and the WAL is synced to the disk at each checkpoint,
/// not at each commit. Calls do not wait for either: each is in the
/// journal (`journal`) before it is answered. A power loss or kernel crash
/// can lose the calls of the last moments before it (never the file's
/// integrity); syncing every commit (`FULL`) would cost a disk flush per
/// posting.
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(5))?;
    // Set before the file has content, else ignored.
    conn.pragma_update(None, "page_size", PAGE_BYTES)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(journal_mode = %mode, "the store's file could not switch to WAL");
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Checkpoints run on their own thread (`checkpoint`), never inside a
    // call's commit; a log grown by a burst is cut back once copied.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// Refuses a file SQLite cannot read, or whose pages are damaged, rather
/// than serving from a store that has lost its books.
fn check_whole(path: &Path, conn: &Connection) -> Result<(), SqliteOpenError> {
    let verdict: String = conn
        .query_row("PRAGMA quick_check", [], |row| row.get(0))
        .map_err(|e| classify(path, e))?;
    if verdict == "ok" {
        Ok(())
    } else {
        Err(SqliteOpenError::Corrupt {
            path: path.to_owned(),
            reason: verdict,
        })
    }
}

/// Creates the schema on an empty file, upgrades an older one in place,
/// refuses a newer one or one that holds something else.
fn create_or_upgrade(path: &Path, conn: &mut Connection) -> Result<(), SqliteOpenError> {
    let fail = |e: rusqlite::Error| classify(path, e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail)?;
    let tables: i64 = tx
        .query_row(
            "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |row| row.get(0),
        )
        .map_err(fail)?;
    match version(&tx).map_err(fail)? {
        None if tables == 0 => {
            create(&tx).map_err(fail)?;
            tracing::info!(file = %path.display(), version = SCHEMA_VERSION, "created the store");
        }
        None => {
            return Err(SqliteOpenError::Foreign {
                path: path.to_owned(),
                reason: "it holds tables but no tollgate schema version".to_owned(),
            })
        }
        Some(found) if found > SCHEMA_VERSION => {
            return Err(SqliteOpenError::Newer {
                path: path.to_owned(),
                found,
            })
        }
        Some(found) => {
            migrate(&tx, found, MIGRATIONS).map_err(fail)?;
            if found < SCHEMA_VERSION {
                tracing::info!(file = %path.display(), from = found, to = SCHEMA_VERSION, "upgraded the store");
            }
        }
    }
    tx.commit().map_err(fail)
}

/// Lays out an empty file: version 1, then every migration.
fn create(conn: &Connection) -> rusqlite::Result<()> {
    create_version_1(conn)?;
    migrate(conn, 1, MIGRATIONS)
}

/// Version 1's tables and `meta` rows, as a binary of that version made
/// them.
pub(super) fn create_version_1(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(CREATE)?;
    conn.execute(
        "INSERT INTO meta (name, value) VALUES ('schema_version', '1'), ('created_at', ?1)",
        [chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)],
    )?;
    Ok(())
}

/// A file as a binary of `version` laid it out: version 1, then the
/// migrations up to `version`.
#[cfg(test)]
pub(super) fn create_version(conn: &Connection, version: u32) -> rusqlite::Result<()> {
    let steps = usize::try_from(version.saturating_sub(1)).unwrap_or(usize::MAX);
    create_version_1(conn)?;
    migrate(conn, 1, &MIGRATIONS[..steps.min(MIGRATIONS.len())])
}

/// Runs the steps from version `found` on, inside the caller's transaction,
/// and records the version reached.
fn migrate(conn: &Connection, found: u32, steps: &[&str]) -> rusqlite::Result<()> {
    let from = usize::try_from(found.saturating_sub(1)).unwrap_or(usize::MAX);
    let mut reached = found;
    for step in steps.iter().skip(from) {
        conn.execute_batch(step)?;
        reached += 1;
    }
    conn.execute(
        "UPDATE meta SET value = ?1 WHERE name = 'schema_version'",
        [reached.to_string()],
    )?;
    Ok(())
}

/// The file's schema version; `None` when it has no `meta` table.
fn version(conn: &Connection) -> rusqlite::Result<Option<u32>> {
    let has_meta: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta')",
        [],
        |row| row.get(0),
    )?;
    if !has_meta {
        return Ok(None);
    }
    let text: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    Ok(text.and_then(|text| text.parse().ok()))
}

/// The sequence number of the last journal record posted to the file.
pub(super) fn journal_seq(conn: &Connection) -> rusqlite::Result<u64> {
    let text: String = conn.query_row(
        "SELECT value FROM meta WHERE name = 'journal_seq'",
        [],
        |row| row.get(0),
    )?;
    text.parse().map_err(|_| {
        rusqlite::Error::InvalidColumnType(
            0,
            format!("journal_seq {text:?} is not a count"),
            rusqlite::types::Type::Text,
        )
    })
}

/// The id of the store in the file, which its journal files carry in
/// their header; `None` for a file no binary with journal headers opened.
pub(super) fn store_id(conn: &Connection) -> rusqlite::Result<Option<[u8; 16]>> {
    let text: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'store_id'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    Ok(text
        .and_then(|text| uuid::Uuid::try_parse(&text).ok())
        .map(|id| id.into_bytes()))
}

/// Gives the file a store id, once.
pub(super) fn new_store_id(conn: &Connection) -> rusqlite::Result<[u8; 16]> {
    let id = uuid::Uuid::now_v7();
    conn.execute(
        "INSERT OR REPLACE INTO meta (name, value) VALUES ('store_id', ?1)",
        [id.to_string()],
    )?;
    Ok(id.into_bytes())
}

/// The sequence number the store was flushed at when it last stopped
/// cleanly (every record of its journal posted), if its last run did.
pub(super) fn stopped_clean_at(conn: &Connection) -> rusqlite::Result<Option<u64>> {
    let text: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'stopped_clean_at'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    Ok(text.and_then(|text| text.parse().ok()))
}

/// Records that every journal record up to `seq` is posted and the store
/// stops (`Some`), or that a run has started (`None`).
pub(super) fn set_stopped_clean_at(conn: &Connection, seq: Option<u64>) -> rusqlite::Result<()> {
    match seq {
        Some(seq) => conn.execute(
            "INSERT OR REPLACE INTO meta (name, value) VALUES ('stopped_clean_at', ?1)",
            [seq.to_string()],
        )?,
        None => conn.execute("DELETE FROM meta WHERE name = 'stopped_clean_at'", [])?,
    };
    Ok(())
}

/// A connection for the desk's reads of a file its owner has opened: it
/// never writes, and never waits on the owner's writer (a reader of a
/// WAL file does not).
pub(super) fn open_desk_reader(path: &Path) -> Result<Connection, SqliteOpenError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| classify(path, e))?;
    conn.busy_timeout(Duration::from_secs(5))
        .and_then(|()| conn.pragma_update(None, "query_only", true))
        .map_err(|e| classify(path, e))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// Names what went wrong opening the file: damage, a file that is not a
/// database, or anything else SQLite reports.
pub(super) fn classify(path: &Path, error: rusqlite::Error) -> SqliteOpenError {
    use rusqlite::ErrorCode;
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt) => SqliteOpenError::Corrupt {
            path: path.to_owned(),
            reason: error.to_string(),
        },
        Some(ErrorCode::NotADatabase) => SqliteOpenError::Foreign {
            path: path.to_owned(),
            reason: error.to_string(),
        },
        _ => SqliteOpenError::Open {
            path: path.to_owned(),
            reason: error.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::tables::{TO_2, TO_3};
    use super::*;

    #[test]
    fn migrations_run_from_the_found_version_and_record_the_version_reached() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES ('schema_version', '2');",
        )
        .unwrap();
        let steps = [
            "CREATE TABLE from_one (x);",
            "CREATE TABLE from_two (x);",
            "CREATE TABLE from_three (x);",
        ];
        migrate(&conn, 2, &steps).unwrap();
        assert_eq!(version(&conn).unwrap(), Some(4));
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE name LIKE 'from_%' ORDER BY name")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(tables, ["from_three", "from_two"]);
    }

    #[test]
    fn every_version_after_the_first_has_its_migration() {
        assert_eq!(MIGRATIONS.len() + 1, SCHEMA_VERSION as usize);
    }

    #[test]
    fn the_adjustments_step_keeps_the_ledger_of_a_version_2_file() {
        let old = Connection::open_in_memory().unwrap();
        old.execute_batch(CREATE).unwrap();
        old.execute_batch(TO_2).unwrap();
        old.execute_batch(
            "INSERT INTO ledger (exec_id, key, model, input_tokens, cached_input_tokens,
                 cache_write_tokens, output_tokens, reserved_usd_micros, actual_usd_micros,
                 status, at, key_period_id)
             VALUES ('e1', 'alice', 'gpt-4o', 1, 0, 0, 2, 10, 7, 'ok',
                 '2026-11-29T12:00:00.000Z', '2026-11-29');",
        )
        .unwrap();
        old.execute_batch(TO_3).unwrap();
        let kept: (String, i64, Option<String>) = old
            .query_row(
                "SELECT exec_id, actual_usd_micros, note FROM ledger",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .unwrap();
        assert_eq!(kept, ("e1".to_owned(), 7, None));
        let adjustments: i64 = old
            .query_row("SELECT count(*) FROM adjustments", [], |row| row.get(0))
            .unwrap();
        assert_eq!(adjustments, 0);
    }

    #[test]
    fn lock_path_sits_beside_the_file() {
        assert_eq!(
            lock_path(Path::new("/var/lib/tollgate/tollgate.db")),
            PathBuf::from("/var/lib/tollgate/tollgate.db.lock")
        );
    }
}
