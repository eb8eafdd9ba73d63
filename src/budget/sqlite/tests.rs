//! What only the SQLite store has to prove: its books outlive the process,
//! one gateway owns a file, the schema is versioned (an older file is
//! upgraded in place, keeping its books), and a file or disk in trouble is
//! refused or fails closed, never read as an empty store. The protocol
//! itself is the contract suite's (`budget/contract.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use rusqlite::Connection;

use super::desk::Desk;
use super::journal::Journal;
use super::schema::{self, lock_path, SCHEMA_VERSION};
use crate::budget::books;
use std::sync::mpsc::Sender;

use super::writer::{self, Db, Msg, Writer};
use super::{Clock, SqliteOpenError, SqliteStore};
use crate::budget::memory::testing::ManualClock;
use crate::budget::records::{RecordKind, RecordWrite, WriteOutcome};
use crate::budget::Books;
use crate::budget::Records;
use crate::budget::Reports;
use crate::budget::Upkeep;
use crate::budget::{
    LedgerStatus, Period, ReserveOutcome, ReserveRequest, Rules, Scope, ScopeKind, Settlement,
    SpendQuery, SpendRow, StoreError,
};
use crate::usage::Usage;

fn open(path: &Path) -> Result<SqliteStore, SqliteOpenError> {
    SqliteStore::open(path, rules())
}

/// The rules every store here keeps: a settle epsilon of 100 µUSD.
fn rules() -> Rules {
    Rules {
        settle_epsilon: 100,
        ..Rules::default()
    }
}

fn key(cap: u64) -> Scope {
    Scope {
        kind: ScopeKind::Key,
        id: "alice".to_owned(),
        cap,
        period: Period::Day,
    }
}

fn request(exec_id: &str, amount: u64) -> ReserveRequest {
    ReserveRequest {
        exec_id: exec_id.to_owned(),
        key: key(10_000),
        org: None,
        model: "gpt-4o-mini".to_owned(),
        amount,
        min_amount: amount,
        run: None,
        ttl: Duration::from_secs(60),
    }
}

fn settlement(exec_id: &str, actual: u64) -> Settlement {
    Settlement {
        exec_id: exec_id.to_owned(),
        key: "alice".to_owned(),
        org: None,
        model: "gpt-4o-mini".to_owned(),
        usage: Usage {
            input: 10,
            output: 5,
            ..Usage::default()
        },
        actual,
        estimated: false,
    }
}

fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("tollgate.db")
}

/// Waits for the writer thread of a dropped store to let go of the file.
async fn reopen(path: &Path) -> SqliteStore {
    for _ in 0..100 {
        match open(path) {
            Ok(store) => return store,
            Err(SqliteOpenError::Locked { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(error) => panic!("reopening {}: {error}", path.display()),
        }
    }
    panic!("{} stayed locked", path.display());
}

#[tokio::test]
async fn the_books_survive_closing_and_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    assert!(store
        .reserve(&request("a", 4_000))
        .await
        .unwrap()
        .is_reserved());
    store.settle(&settlement("a", 3_000)).await.unwrap();
    assert!(store
        .reserve(&request("b", 2_000))
        .await
        .unwrap()
        .is_reserved());
    drop(store);

    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!((state.spent, state.reserved), (3_000, 2_000));
    // The open hold is still there and settles as usual.
    let outcome = store.settle(&settlement("b", 1_500)).await.unwrap();
    assert_eq!(outcome.status, LedgerStatus::Ok);
    // A retry of the first settle still gets its first answer.
    let retry = store.settle(&settlement("a", 3_000)).await.unwrap();
    assert!(!retry.applied);
    // And the cap holds across the restart: 4,500 spent, 5,500 left.
    match store.reserve(&request("c", 6_000)).await.unwrap() {
        ReserveOutcome::Denied(denial) => assert_eq!(denial.remaining, 5_500),
        other => panic!("expected a denial, got {other:?}"),
    }
    let rows = store.reconcile().await.unwrap();
    assert!(rows.iter().all(|row| row.drift() == 0), "{rows:?}");
}

/// A crash leaves the calls answered since the last posting in the
/// journal only: the next open posts them, and the books are whole.
#[tokio::test]
async fn calls_answered_before_a_crash_are_posted_from_the_journal_when_the_file_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.reserve(&request("a", 4_000)).await.unwrap();
    store.settle(&settlement("a", 3_000)).await.unwrap();
    store.flush().await.unwrap();
    // Answered, then the process dies before the writer posts them.
    store.set_posting(false);
    store.reserve(&request("b", 2_000)).await.unwrap();
    store.settle(&settlement("b", 1_500)).await.unwrap();
    store.reserve(&request("c", 500)).await.unwrap();
    store.crash();
    let journal: u64 = super::journal::paths(&path)
        .iter()
        .map(|part| std::fs::metadata(part).map_or(0, |meta| meta.len()))
        .sum();
    assert!(journal > 0, "the journal holds nothing");
    let ledger_rows = |path: &Path| -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM ledger", [], |row| row.get(0))
            .unwrap()
    };
    assert_eq!(ledger_rows(&path), 1, "posted after all");

    // A reader beside no gateway counts the journal in, and changes nothing.
    let reader = SqliteStore::open_reader(&path).unwrap();
    let rows = reader.reconcile().await.unwrap();
    assert_eq!(
        (rows[0].counter, rows[0].ledger, rows[0].open),
        (5_000, 4_500, 500)
    );
    drop(reader);
    assert_eq!(ledger_rows(&path), 1);

    let store = reopen(&path).await;
    assert_eq!(ledger_rows(&path), 2, "not posted at open");
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!((state.spent, state.reserved), (4_500, 500));
    assert!(!store.settle(&settlement("b", 1_500)).await.unwrap().applied);
    assert_eq!(
        store.settle(&settlement("c", 400)).await.unwrap().status,
        LedgerStatus::Ok
    );
    let rows = store.reconcile().await.unwrap();
    assert!(rows.iter().all(|row| row.drift() == 0), "{rows:?}");
    // The journal was emptied once posted.
    drop(store);
    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!((state.spent, state.reserved), (4_900, 0));
}

/// A journal record a crash cut short was never answered: it is left
/// out, and the whole records before it are posted.
#[tokio::test]
async fn a_journal_record_cut_short_by_a_crash_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.set_posting(false);
    store.reserve(&request("a", 1_000)).await.unwrap();
    store.reserve(&request("b", 2_000)).await.unwrap();
    store.crash();
    let active = super::journal::paths(&path)
        .into_iter()
        .find(|part| std::fs::metadata(part).is_ok_and(|meta| meta.len() > 0))
        .expect("no journal file holds the calls");
    let len = std::fs::metadata(&active).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .unwrap()
        .set_len(len - 5)
        .unwrap();

    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, 1_000);
    let rows = store.reconcile().await.unwrap();
    assert!(rows.iter().all(|row| row.drift() == 0), "{rows:?}");
}

/// The file follows the calls a moment behind, with nobody asking.
#[tokio::test]
async fn the_file_has_each_call_a_moment_after_it_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.reserve(&request("a", 1_000)).await.unwrap();
    store.settle(&settlement("a", 640)).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let mut in_ledger = 0;
    for _ in 0..100 {
        in_ledger = conn
            .query_row("SELECT COUNT(*) FROM ledger", [], |row| row.get(0))
            .unwrap();
        if in_ledger == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(in_ledger, 1, "the settle never reached the file");
}

#[tokio::test]
async fn a_hold_left_by_a_dead_process_expires_at_its_deadline_and_is_charged() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let start = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let store = SqliteStore::with_clock(&path, rules(), clock.clone());
    store.reserve(&request("held", 2_500)).await.unwrap();
    drop(store);

    let store = SqliteStore::with_clock(&path, rules(), clock.clone());
    clock.advance(Duration::from_secs(30));
    assert_eq!(store.sweep().await.unwrap(), 0, "not yet due");
    clock.advance(Duration::from_secs(31));
    assert_eq!(store.sweep().await.unwrap(), 1);
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!((state.spent, state.reserved), (2_500, 0));
    let ledger = store.ledger().await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, LedgerStatus::Expired);
}

#[tokio::test]
async fn a_second_gateway_on_the_same_file_is_refused_naming_the_file_and_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let _owner = open(&path).unwrap();
    let error = open(&path).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, SqliteOpenError::Locked { .. }), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("pid {}", std::process::id())),
        "{message}"
    );
    assert!(lock_path(&path).exists());
}

#[tokio::test]
async fn a_reader_sees_the_books_while_the_owner_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let owner = open(&path).unwrap();
    owner.reserve(&request("a", 1_000)).await.unwrap();
    owner.settle(&settlement("a", 700)).await.unwrap();
    owner.reserve(&request("b", 300)).await.unwrap();

    let reader = SqliteStore::open_reader(&path).unwrap();
    let rows = reader.reconcile().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].counter, rows[0].ledger, rows[0].open),
        (1_000, 700, 300)
    );
    // The owner keeps writing while the reader is open.
    owner.settle(&settlement("b", 300)).await.unwrap();
    let rows = reader.reconcile().await.unwrap();
    assert_eq!(
        (rows[0].counter, rows[0].ledger, rows[0].open),
        (1_000, 1_000, 0)
    );
}

#[tokio::test]
async fn a_reader_never_creates_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let error = SqliteStore::open_reader(&path).unwrap_err();
    assert!(error.to_string().contains("no such file"), "{error}");
    assert!(!path.exists());
}

#[tokio::test]
async fn a_file_from_a_newer_binary_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    drop(open(&path).unwrap());
    let newer = SCHEMA_VERSION + 1;
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE meta SET value = ?1 WHERE name = 'schema_version'",
            [newer.to_string()],
        )
        .unwrap();
    }
    let error = match open(&path) {
        Err(SqliteOpenError::Locked { .. }) => reopen_error(&path).await,
        other => other.unwrap_err(),
    };
    let message = error.to_string();
    assert!(
        matches!(error, SqliteOpenError::Newer { found, .. } if found == newer),
        "{message}"
    );
    assert!(message.contains("newer tollgate"), "{message}");
    let conn = Connection::open(&path).unwrap();
    let version: String = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(version, newer.to_string());
}

/// The error opening `path` gives once the previous owner has let go.
async fn reopen_error(path: &Path) -> SqliteOpenError {
    for _ in 0..100 {
        match open(path) {
            Err(SqliteOpenError::Locked { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(error) => return error,
            Ok(_) => panic!("{} opened", path.display()),
        }
    }
    panic!("{} stayed locked", path.display());
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_not_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let garbage = b"these are not the books you are looking for".repeat(200);
    std::fs::write(&path, &garbage).unwrap();
    let error = open(&path).unwrap_err();
    assert!(matches!(error, SqliteOpenError::Foreign { .. }), "{error}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        garbage,
        "the file was changed"
    );
}

#[tokio::test]
async fn a_database_of_something_else_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY);")
        .unwrap();
    let error = open(&path).unwrap_err();
    assert!(
        error.to_string().contains("not a tollgate store"),
        "{error}"
    );
}

#[tokio::test]
async fn damaged_pages_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    {
        let store = open(&path).unwrap();
        for i in 0..300 {
            let id = format!("call-{i:04}-{}", "x".repeat(40));
            store.reserve(&request(&id, 10)).await.unwrap();
        }
    }
    // Let the writer finish, checkpoint the WAL into the file, then
    // scribble over the middle of it.
    let _ = reopen(&path).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    {
        let conn = Connection::open(&path).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 8 * 4096, "file too small: {}", bytes.len());
    for byte in &mut bytes[2 * 4096 + 100..6 * 4096] {
        *byte = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let error = reopen_error(&path).await;
    assert!(
        matches!(
            error,
            SqliteOpenError::Corrupt { .. } | SqliteOpenError::Foreign { .. }
        ),
        "{error}"
    );
}

#[tokio::test]
async fn a_missing_or_unwritable_directory_is_a_clear_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("tollgate.db");
    let error = open(&missing).unwrap_err().to_string();
    assert!(error.contains("no-such-dir"), "{error}");
    assert!(error.contains("does not exist"), "{error}");

    // A path through a regular file.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let through = file.join("tollgate.db");
    let error = open(&through).unwrap_err().to_string();
    assert!(error.contains(&through.display().to_string()), "{error}");

    // A directory where the file should be.
    let error = open(dir.path()).unwrap_err().to_string();
    assert!(error.contains(&dir.path().display().to_string()), "{error}");

    // A directory the process may not write to. Root may write anywhere,
    // so this half only runs as another user.
    let locked = dir.path().join("read-only");
    std::fs::create_dir(&locked).unwrap();
    let mut permissions = std::fs::metadata(&locked).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o555);
    std::fs::set_permissions(&locked, permissions).unwrap();
    if std::fs::write(locked.join("probe"), b"").is_err() {
        let path = locked.join("tollgate.db");
        let error = open(&path).unwrap_err().to_string();
        assert!(error.contains(&path.display().to_string()), "{error}");
    }
}

/// A file that refuses its postings (full, as a size limit makes it):
/// calls are answered from the journal while it holds them, then reserves
/// fail closed, changing nothing; once the file takes its postings again,
/// the store serves again by itself and the file holds every answered
/// call.
#[tokio::test]
async fn a_full_file_keeps_calls_in_the_journal_then_fails_closed_and_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.reserve(&request("first", 10)).await.unwrap();
    store.flush().await.unwrap();
    let pages: u32 = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA page_count", [], |row| row.get(0))
        .unwrap();
    store.limit_pages(Some(pages)).await.unwrap();
    store.set_max_backlog(20);

    let mut reserved = 10;
    let mut failed = None;
    for i in 0..5_000 {
        let id = format!("call-{i:05}-{}", "y".repeat(60));
        match store.reserve(&request(&id, 1)).await {
            Ok(ReserveOutcome::Reserved { .. }) => reserved += 1,
            Ok(other) => panic!("unexpected {other:?}"),
            Err(error) => {
                failed = Some((id, error));
                break;
            }
        }
        // The file takes none of them; the writer keeps trying.
        store.flush().await.unwrap();
    }
    let (refused_id, error) = failed.expect("the page limit was never reached");
    assert!(matches!(error, StoreError::Unavailable(_)), "{error}");
    assert!(error.to_string().contains("full"), "{error}");
    assert!(reserved > 10, "no call was kept in the journal");

    // Nothing of the refused call was kept; a settle is still taken.
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, reserved);
    store.settle(&settlement("first", 4)).await.unwrap();

    // Space returns: the same call goes through, with no restart, and
    // the file has every call answered.
    store.limit_pages(None).await.unwrap();
    store.flush().await.unwrap();
    assert!(store
        .reserve(&request(&refused_id, 1))
        .await
        .unwrap()
        .is_reserved());
    store.flush().await.unwrap();
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!((state.spent, state.reserved), (4, reserved - 10 + 1));
    let in_file: (u64, u64) = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT spent_usd_micros, reserved_usd_micros FROM counters WHERE scope_kind = 'key'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(in_file, (state.spent, state.reserved));
    let rows = store.reconcile().await.unwrap();
    assert!(rows.iter().all(|row| row.drift() == 0), "{rows:?}");
}

#[tokio::test]
async fn the_ledger_is_a_table_an_operator_can_query() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.reserve(&request("a", 1_000)).await.unwrap();
    store.settle(&settlement("a", 640)).await.unwrap();
    // Posted a moment after it was answered.
    store.flush().await.unwrap();

    let conn = Connection::open(&path).unwrap();
    let row: (String, String, i64, i64, i64, String, String) = conn
        .query_row(
            "SELECT exec_id, key, input_tokens, output_tokens, actual_usd_micros, status, at
               FROM ledger",
            [],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(&row.0, "a");
    assert_eq!(&row.1, "alice");
    assert_eq!((row.2, row.3, row.4), (10, 5, 640));
    assert_eq!(&row.5, "ok");
    assert!(row.6.ends_with('Z') && row.6.contains('T'), "{}", row.6);
    // The README's query: spend per key today, from the aggregates, which
    // the ledger agrees with.
    let spent: i64 = conn
        .query_row(
            "SELECT SUM(cost_usd_micros) FROM aggregates WHERE day = date('now') GROUP BY key",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(spent, 640);
    let in_ledger: i64 = conn
        .query_row(
            "SELECT SUM(actual_usd_micros) FROM ledger
              WHERE at >= strftime('%Y-%m-%dT00:00:00', 'now') GROUP BY key",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(in_ledger, 640);
}

#[tokio::test]
async fn the_log_is_copied_into_the_database_file_off_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    for i in 0..200 {
        let id = format!("call-{i}");
        store.reserve(&request(&id, 10)).await.unwrap();
        store.settle(&settlement(&id, 7)).await.unwrap();
    }
    // Read the database file alone, ignoring the log: the ledger reaches
    // it without anyone but the checkpoint thread copying it there.
    let copied = rows_copied(&path, "ledger", 200).await;
    assert_eq!(copied, 200, "the log was not checkpointed");
}

/// The rows of `table` in the database file alone, ignoring its log.
fn rows_in_file(path: &Path, table: &str) -> i64 {
    Connection::open_with_flags(
        format!("file:{}?immutable=1", path.display()),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap()
    .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
        row.get(0)
    })
    .unwrap_or(0)
}

/// The rows of `table` in the database file once `rows` have been copied
/// there, or after ten seconds.
async fn rows_copied(path: &Path, table: &str, rows: i64) -> i64 {
    let mut copied = 0;
    for _ in 0..200 {
        copied = rows_in_file(path, table);
        if copied == rows {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    copied
}

/// The checkpoint thread copies the log when the writer asks, without
/// waiting for its next turn.
#[tokio::test]
async fn the_log_is_copied_as_soon_as_the_writer_asks() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let (conn, _lock) = schema::open_owner(&path).unwrap();
    let (ask, requests) = std::sync::mpsc::sync_channel(1);
    super::checkpoint::spawn(path.clone(), requests, Duration::from_secs(3600));
    conn.execute_batch("CREATE TABLE filler (n INTEGER)")
        .unwrap();
    for n in 0..100 {
        conn.execute("INSERT INTO filler VALUES (?1)", [n]).unwrap();
    }
    assert_eq!(
        rows_in_file(&path, "filler"),
        0,
        "copied before anyone asked"
    );
    ask.send(()).unwrap();
    let copied = rows_copied(&path, "filler", 100).await;
    assert_eq!(copied, 100, "the log was not copied when asked");
}

/// A new file, its owner's connection and lock, and a table to fill its
/// log with.
fn file_to_fill(dir: &tempfile::TempDir) -> (PathBuf, Connection, schema::OwnerLock) {
    let path = db(dir);
    let (conn, lock) = schema::open_owner(&path).unwrap();
    conn.execute_batch("CREATE TABLE filler (n INTEGER, pad BLOB)")
        .unwrap();
    (path, conn, lock)
}

/// The writer asks for a copy each time the log has grown by a few
/// megabytes.
#[test]
fn a_copy_is_asked_for_each_time_the_log_grows_by_a_step() {
    use super::checkpoint::{LogLength, COPY_EVERY_BYTES};

    let dir = tempfile::tempdir().unwrap();
    let (path, mut conn, _lock) = file_to_fill(&dir);
    let mut log = LogLength::watch(&mut conn, "test", u64::MAX).unwrap();
    let (ask, requests) = std::sync::mpsc::sync_channel(1);
    let mut log_file = path.clone().into_os_string();
    log_file.push("-wal");
    let mut asked = 0;
    // Some 5 KiB a commit, 20 MiB or more in all; the log never starts
    // again, so its file's size is its length.
    for n in 0..4_000 {
        conn.execute("INSERT INTO filler VALUES (?1, zeroblob(3500))", [n])
            .unwrap();
        log.ask_for_copy(&ask);
        if requests.try_recv().is_ok() {
            asked += 1;
        }
    }
    let grown = std::fs::metadata(&log_file).unwrap().len() / COPY_EVERY_BYTES;
    assert!(grown >= 4, "the log grew {grown} times the step");
    assert!(
        (grown - 1..=grown + 1).contains(&asked),
        "the log grew {grown} times the step: asked {asked} times"
    );
}

/// The log starts again each time it has grown past its limit, and only
/// then: its file keeps its length when it starts again, so the file's
/// size would call for a restart after every commit from the first one on.
#[test]
fn the_log_starts_again_past_its_limit_and_only_then() {
    use super::checkpoint::LogLength;

    let dir = tempfile::tempdir().unwrap();
    let (path, mut conn, _lock) = file_to_fill(&dir);
    let limit = 128 * 1024;
    let mut log = LogLength::watch(&mut conn, "test", limit).unwrap();
    let mut restarts = 0;
    for n in 0..400 {
        // About 8 KiB a commit (two pages): some 16 commits fill the
        // limit.
        conn.execute("INSERT INTO filler VALUES (?1, zeroblob(3500))", [n])
            .unwrap();
        if log.restart_if_long(&conn, "test") {
            restarts += 1;
        }
    }
    let mut log_file = path.clone().into_os_string();
    log_file.push("-wal");
    let file_bytes = std::fs::metadata(&log_file).unwrap().len();
    assert!(
        file_bytes > limit,
        "the log's file stays long: {file_bytes}"
    );
    assert!(
        (10..=40).contains(&restarts),
        "400 commits of 8 KiB past a 128 KiB limit: {restarts} restarts"
    );
}

/// A writer of its own on `conn`, with no desk, and the queue to it.
fn writer_on(conn: Connection) -> (Sender<Msg>, std::thread::JoinHandle<()>) {
    let (queue, jobs) = std::sync::mpsc::channel();
    let writer = Writer {
        conn,
        clock: Clock::Wall,
        behavior: rusqlite::TransactionBehavior::Immediate,
        label: "test".to_owned(),
        desk: None,
        checkpoints: None,
    };
    (queue, std::thread::spawn(move || writer.run(&jobs)))
}

/// Runs `op` in its own transaction on the writer of `queue` and waits for
/// its answer.
fn on_writer<T: Send + 'static>(
    queue: &Sender<Msg>,
    op: impl FnOnce(&mut Db<'_>, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    writer::call(queue, op)
        .unwrap()
        .blocking_recv()
        .expect("a call was dropped unanswered")
}

/// The writer keeps the counters in memory and writes each one its
/// changes moved when the transaction commits; a transaction that fails
/// forgets them, so what it moved is neither seen nor written.
#[test]
fn the_counters_a_failed_transaction_moved_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let (conn, _lock) = schema::open_owner(&path).unwrap();
    let (queue, thread) = writer_on(conn);
    let in_file = || -> (u64, u64) {
        Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT spent_usd_micros, reserved_usd_micros FROM counters
                  WHERE scope_kind = 'key' AND scope_id = 'k' AND period_id = 'total'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap()
    };
    on_writer(&queue, |db, _| {
        db.move_counter(ScopeKind::Key, "k", "total", 5, 3)?;
        db.move_counter(ScopeKind::Key, "k", "total", 2, -1)?;
        Ok(Ok(()))
    })
    .unwrap();
    assert_eq!(in_file(), (7, 2));

    let failed = on_writer(&queue, |db, _| {
        db.move_counter(ScopeKind::Key, "k", "total", 100, 100)?;
        db.conn()
            .execute("INSERT INTO no_such_table VALUES (1)", [])?;
        Ok(Ok(()))
    });
    assert!(
        matches!(failed, Err(StoreError::Unavailable(_))),
        "{failed:?}"
    );
    let seen = on_writer(&queue, |db, _| {
        Ok(Ok(db.counter(ScopeKind::Key, "k", "total")?))
    });
    assert_eq!(seen.unwrap(), (7, 2));
    assert_eq!(in_file(), (7, 2));

    // Never below zero, as the statements moved them.
    on_writer(&queue, |db, _| {
        db.move_counter(ScopeKind::Key, "k", "total", -50, 1)?;
        Ok(Ok(()))
    })
    .unwrap();
    assert_eq!(in_file(), (0, 3));
    queue.send(Msg::Stop).unwrap();
    thread.join().unwrap();
}

/// Jobs queued from many threads at once: each is run exactly once, in
/// one of the writer's transactions, and every one is answered.
#[test]
fn jobs_queued_from_many_threads_are_each_run_once_and_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (conn, _lock) = schema::open_owner(&db(&dir)).unwrap();
    conn.execute_batch("CREATE TABLE hits (thread INTEGER, n INTEGER)")
        .unwrap();
    let (queue, thread) = writer_on(conn);
    const THREADS: i64 = 8;
    const CALLS: i64 = 400;
    let callers: Vec<_> = (0..THREADS)
        .map(|caller| {
            let queue = queue.clone();
            std::thread::spawn(move || {
                let answers: Vec<_> = (0..CALLS)
                    .map(|n| {
                        writer::call(&queue, move |db, _| {
                            db.conn()
                                .execute("INSERT INTO hits VALUES (?1, ?2)", [caller, n])?;
                            Ok(Ok(n))
                        })
                        .unwrap()
                    })
                    .collect();
                for (n, answer) in answers.into_iter().enumerate() {
                    let got = answer
                        .blocking_recv()
                        .expect("a call was dropped unanswered");
                    assert_eq!(got.unwrap(), n as i64);
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().unwrap();
    }
    let counted = on_writer(&queue, |db, _| {
        let conn = db.conn();
        let distinct: i64 = conn.query_row(
            "SELECT COUNT(*) FROM (SELECT DISTINCT thread, n FROM hits)",
            [],
            |row| row.get(0),
        )?;
        let all: i64 = conn.query_row("SELECT COUNT(*) FROM hits", [], |row| row.get(0))?;
        Ok(Ok((distinct, all)))
    })
    .unwrap();
    assert_eq!(counted, (THREADS * CALLS, THREADS * CALLS));
    queue.send(Msg::Stop).unwrap();
    thread.join().unwrap();
}

#[tokio::test]
async fn a_new_file_has_4_kib_pages_and_an_older_file_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let page_size = |path: &Path| -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .unwrap()
    };
    let path = db(&dir);
    drop(open(&path).unwrap());
    assert_eq!(page_size(&path), 4096);

    // A file made with 1 KiB pages, as earlier versions did, keeps them.
    let older = dir.path().join("older.db");
    {
        let conn = Connection::open(&older).unwrap();
        conn.execute_batch("PRAGMA page_size = 1024; VACUUM;")
            .unwrap();
    }
    drop(open(&older).unwrap());
    assert_eq!(page_size(&older), 1024);
    let store = reopen(&older).await;
    store.reserve(&request("after", 10)).await.unwrap();
}

/// Decides on a desk over the file at `path`, with today's rules, and
/// posts what was decided through `conn`: books as a binary of the file's
/// version wrote them.
fn write_books(path: &Path, conn: &Connection, decide: impl FnOnce(&mut Desk)) {
    let journal = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(&journal.path().join("old.db")).unwrap();
    let (wake, _woken) = std::sync::mpsc::channel();
    let mut desk = Desk::load(
        Connection::open(path).unwrap(),
        journal,
        0,
        wake,
        "old".to_owned(),
    )
    .unwrap();
    decide(&mut desk);
    desk.commit().unwrap();
    let batch = desk.take_batch().unwrap();
    Db::new(conn).post(&batch).unwrap();
}

fn record_write(id: &str, expect: Option<u64>, body: &str) -> RecordWrite {
    RecordWrite {
        kind: RecordKind::Key,
        id: id.to_owned(),
        expect,
        body: body.to_owned(),
        audit: format!(r#"{{"wrote":{body}}}"#),
    }
}

/// Each table and index of the file with its statement, by name.
fn layout(path: &Path) -> Vec<(String, String)> {
    Connection::open(path)
        .unwrap()
        .prepare("SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY name")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn a_version_1_file_is_upgraded_in_place_and_keeps_its_books() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let start = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let rules = rules();
    // Books written by a binary of version 1: one call settled, one open.
    // That binary kept no spend aggregates: what today's rules add to them
    // goes to a temporary table, gone with this connection.
    {
        let conn = Connection::open(&path).unwrap();
        schema::create_version_1(&conn).unwrap();
        // Today's statements write an adjustment's note and a reservation's
        // model too: the columns are there only while they run.
        conn.execute_batch(
            "ALTER TABLE ledger ADD COLUMN note TEXT;
             ALTER TABLE reservations ADD COLUMN model TEXT;
             ALTER TABLE ledger ADD COLUMN run TEXT;
             ALTER TABLE reservations ADD COLUMN run_id TEXT;",
        )
        .unwrap();
        conn.execute_batch(
            "CREATE TEMP TABLE aggregates (day, key, org, model, calls, input_tokens,
                 cached_input_tokens, cache_write_tokens, output_tokens, cost_usd_micros, run,
                 PRIMARY KEY (day, key, run, model))",
        )
        .unwrap();
        write_books(&path, &conn, |desk| {
            books::reserve(desk, &rules, &request("a", 4_000), start).unwrap();
            books::settle(desk, &rules, &settlement("a", 3_000), start)
                .unwrap()
                .unwrap();
            books::reserve(desk, &rules, &request("b", 2_000), start).unwrap();
        });
        conn.execute_batch(
            "ALTER TABLE ledger DROP COLUMN note;
             ALTER TABLE reservations DROP COLUMN model;
             ALTER TABLE ledger DROP COLUMN run;
             ALTER TABLE reservations DROP COLUMN run_id;",
        )
        .unwrap();
    }
    // A reader leaves the upgrade to the gateway.
    let error = SqliteStore::open_reader(&path).unwrap_err();
    assert!(
        matches!(error, SqliteOpenError::Older { found: 1, .. }),
        "{error}"
    );

    let store = SqliteStore::with_clock(&path, rules, clock);
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!((state.spent, state.reserved), (3_000, 2_000));
    let outcome = store.settle(&settlement("b", 1_500)).await.unwrap();
    assert_eq!(outcome.status, LedgerStatus::Ok);
    assert!(!store.settle(&settlement("a", 3_000)).await.unwrap().applied);
    assert_eq!(store.ledger().await.len(), 2);
    let rows = store.reconcile().await.unwrap();
    assert!(rows.iter().all(|row| row.drift() == 0), "{rows:?}");

    // The upgrade gave the ledger entries it found their aggregate row,
    // which the settle after it added to.
    let day = start.date_naive();
    let query = SpendQuery {
        from: day,
        to: day,
        key: None,
        org: None,
    };
    assert_eq!(
        store.spend(&query).await.unwrap(),
        [SpendRow {
            day: "2026-11-29".to_owned(),
            key: "alice".to_owned(),
            org: None,
            run: String::new(),
            model: "gpt-4o-mini".to_owned(),
            calls: 2,
            input_tokens: 20,
            cached_input_tokens: 0,
            cache_write_tokens: 0,
            output_tokens: 10,
            cost_usd_micros: 4_500,
        }]
    );

    // It keeps records from now on, from version 0.
    assert_eq!(store.records_version().await.unwrap(), 0);
    assert_eq!(
        store
            .write_record(&record_write("k", None, "{}"))
            .await
            .unwrap(),
        WriteOutcome::Written {
            revision: 1,
            version: 1
        }
    );
    let reader = SqliteStore::open_reader(&path).unwrap();
    assert_eq!(reader.records_version().await.unwrap(), 1);
    drop(reader);
    drop(store);

    // Upgraded, it is laid out as a new file is, with no index on the
    // ledger's time for every settle to add to.
    let fresh = dir.path().join("fresh.db");
    drop(open(&fresh).unwrap());
    assert_eq!(layout(&path), layout(&fresh));
    assert!(
        layout(&path)
            .iter()
            .all(|(name, _)| name != "ledger_by_time"),
        "{:?}",
        layout(&path)
    );
    let version: String = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION.to_string());
}

/// A version 4 file's reservations kept no model: upgraded, they are
/// listed and expire with none (''), while new ones keep theirs.
#[tokio::test]
async fn a_version_4_file_is_upgraded_and_its_reservations_name_no_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let start = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let rules = rules();
    // A call open in a file written by a binary of version 4. Today's
    // reserve writes the model too: the column is there only while it runs.
    {
        let conn = Connection::open(&path).unwrap();
        schema::create_version(&conn, 4).unwrap();
        conn.execute_batch(
            "ALTER TABLE reservations ADD COLUMN model TEXT;
             ALTER TABLE reservations ADD COLUMN run_id TEXT;",
        )
        .unwrap();
        write_books(&path, &conn, |desk| {
            books::reserve(desk, &rules, &request("old", 1_000), start).unwrap();
        });
        conn.execute_batch(
            "ALTER TABLE reservations DROP COLUMN model;
             ALTER TABLE reservations DROP COLUMN run_id;",
        )
        .unwrap();
    }
    let error = SqliteStore::open_reader(&path).unwrap_err();
    assert!(
        matches!(error, SqliteOpenError::Older { found: 4, .. }),
        "{error}"
    );

    let store = SqliteStore::with_clock(&path, rules, clock.clone());
    clock.advance(Duration::from_secs(1));
    store.reserve(&request("new", 2_000)).await.unwrap();
    let holds: Vec<(String, String)> = store
        .open_holds(10)
        .await
        .unwrap()
        .into_iter()
        .map(|hold| (hold.exec_id, hold.model))
        .collect();
    assert_eq!(
        holds,
        [
            ("old".to_owned(), String::new()),
            ("new".to_owned(), "gpt-4o-mini".to_owned())
        ]
    );

    // Both expire: each entry and aggregate row names what its record kept.
    clock.advance(Duration::from_secs(61));
    assert_eq!(store.sweep().await.unwrap(), 2);
    let expired: Vec<(String, LedgerStatus, String)> = store
        .ledger()
        .await
        .into_iter()
        .map(|entry| (entry.exec_id, entry.status, entry.model))
        .collect();
    assert_eq!(
        expired,
        [
            ("old".to_owned(), LedgerStatus::Expired, String::new()),
            (
                "new".to_owned(),
                LedgerStatus::Expired,
                "gpt-4o-mini".to_owned()
            )
        ]
    );
    let day = start.date_naive();
    let query = SpendQuery {
        from: day,
        to: day,
        key: None,
        org: None,
    };
    let rows: Vec<(String, u64, i64)> = store
        .spend(&query)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.model, row.calls, row.cost_usd_micros))
        .collect();
    assert_eq!(
        rows,
        [
            (String::new(), 1, 1_000),
            ("gpt-4o-mini".to_owned(), 1, 2_000)
        ]
    );
    drop(store);

    let fresh = dir.path().join("fresh.db");
    drop(open(&fresh).unwrap());
    assert_eq!(layout(&path), layout(&fresh));
}

#[tokio::test]
async fn the_records_survive_closing_and_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store
        .write_record(&record_write("k", None, r#"{"v":1}"#))
        .await
        .unwrap();
    store
        .write_record(&record_write("k", Some(1), r#"{"v":2}"#))
        .await
        .unwrap();
    let records = store.records().await.unwrap();
    let audit = store.audit(None, 10).await.unwrap();
    drop(store);

    let store = reopen(&path).await;
    assert_eq!(store.records().await.unwrap(), records);
    assert_eq!(store.audit(None, 10).await.unwrap(), audit);
    assert_eq!(records.version, 2);
    assert_eq!(
        store
            .write_record(&record_write("k", Some(1), "{}"))
            .await
            .unwrap(),
        WriteOutcome::Conflict { current: Some(2) }
    );
    // An operator can read the trail, with when each write was made.
    let at: String = Connection::open(&path)
        .unwrap()
        .query_row("SELECT at FROM audit WHERE seq = 2", [], |row| row.get(0))
        .unwrap();
    assert!(at.ends_with('Z'), "{at}");
}
