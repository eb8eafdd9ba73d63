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

mod damage;
mod log;
mod refusals;
mod upgrades;

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
        caps: Vec::new(),
        tokens: 0,
        customer: None,
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

/// A flushed store (a gateway that stopped cleanly) has copied its log
/// into the file: nothing is left in its `-wal`, and the file alone holds
/// the books.
#[tokio::test]
async fn a_flush_leaves_the_log_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    for id in ["a", "b", "c"] {
        store.reserve(&request(id, 4_000)).await.unwrap();
        store.settle(&settlement(id, 3_000)).await.unwrap();
    }
    let wal = path.with_extension("db-wal");
    assert!(
        std::fs::metadata(&wal).unwrap().len() > 0,
        "the calls are in the log"
    );
    store.flush().await.unwrap();
    assert_eq!(std::fs::metadata(&wal).map_or(0, |meta| meta.len()), 0);
    // The file alone, copied away from its log, holds every call.
    let copy = dir.path().join("copy.db");
    std::fs::copy(&path, &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let settled: i64 = conn
        .query_row("SELECT count(*) FROM ledger", [], |row| row.get(0))
        .unwrap();
    assert_eq!(settled, 3);
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
async fn the_sweep_forgets_a_rate_limits_past_minutes_and_keeps_the_money() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let start = Utc.with_ymd_and_hms(2026, 12, 7, 18, 0, 10).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let store = SqliteStore::with_clock(&path, rules(), clock.clone());
    let rpm = crate::budget::Cap {
        kind: ScopeKind::Key,
        id: "alice".to_owned(),
        meter: crate::budget::Meter::Requests,
        period: Period::Minute,
        limit: 10,
    };
    // Calls at 18:00, 18:01 and 18:03; the sweep then runs at 18:03.
    for (exec_id, minutes_later) in [("a", 0), ("b", 1), ("c", 2)] {
        clock.advance(Duration::from_secs(60) * minutes_later);
        let req = ReserveRequest {
            caps: vec![rpm.clone()],
            ..request(exec_id, 100)
        };
        store.reserve(&req).await.unwrap();
        store.settle(&settlement(exec_id, 100)).await.unwrap();
    }
    store.sweep().await.unwrap();
    store.flush().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let windows: Vec<String> = conn
        .prepare("SELECT period_id FROM counters WHERE period_id LIKE '%/requests' ORDER BY 1")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // At 18:03, the minutes before 18:01 are gone; 18:01 and 18:03 stay.
    assert_eq!(
        windows,
        ["2026-12-07T1801/requests", "2026-12-07T1803/requests"]
    );
    let spent: u64 = conn
        .query_row(
            "SELECT spent_usd_micros FROM counters WHERE period_id = '2026-12-07'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(spent, 300);
}
