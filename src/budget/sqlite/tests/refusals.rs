//! A file or disk in trouble is refused, or fails closed and recovers,
//! never read as an empty store.

use super::*;

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
pub(super) async fn reopen_error(path: &Path) -> SqliteOpenError {
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
