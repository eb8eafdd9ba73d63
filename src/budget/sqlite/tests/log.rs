//! The ledger as an operator queries it, and the writer thread: the log
//! copied into the file off the writer, a failed transaction forgotten,
//! every job run once.

use super::*;

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
    // The query docs/stores.md gives: spend per key today, from the aggregates, which
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
    crate::budget::sqlite::checkpoint::spawn(path.clone(), requests, Duration::from_secs(3600));
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
    use crate::budget::sqlite::checkpoint::{LogLength, COPY_EVERY_BYTES};

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
    use crate::budget::sqlite::checkpoint::LogLength;

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
