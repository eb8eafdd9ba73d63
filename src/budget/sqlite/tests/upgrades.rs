//! The schema is versioned: a file of an older version is upgraded in
//! place and keeps its books and records.

use super::*;

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
    let journal = Journal::create(&journal.path().join("old.db"), [0; 16]).unwrap();
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
             ALTER TABLE ledger ADD COLUMN customer TEXT;
             ALTER TABLE reservations ADD COLUMN run_id TEXT;
             ALTER TABLE reservations ADD COLUMN caps TEXT;
             ALTER TABLE reservations ADD COLUMN tokens INTEGER;
             ALTER TABLE reservations ADD COLUMN denied_meter TEXT;
             ALTER TABLE reservations ADD COLUMN customer TEXT;",
        )
        .unwrap();
        conn.execute_batch(
            "CREATE TEMP TABLE aggregates (day, key, org, model, calls, input_tokens,
                 cached_input_tokens, cache_write_tokens, output_tokens, cost_usd_micros, run,
                 customer, PRIMARY KEY (day, key, run, customer, model))",
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
             ALTER TABLE ledger DROP COLUMN customer;
             ALTER TABLE reservations DROP COLUMN run_id;
             ALTER TABLE reservations DROP COLUMN caps;
             ALTER TABLE reservations DROP COLUMN tokens;
             ALTER TABLE reservations DROP COLUMN denied_meter;
             ALTER TABLE reservations DROP COLUMN customer;",
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
            customer: String::new(),
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
             ALTER TABLE reservations ADD COLUMN run_id TEXT;
             ALTER TABLE reservations ADD COLUMN caps TEXT;
             ALTER TABLE reservations ADD COLUMN tokens INTEGER;
             ALTER TABLE reservations ADD COLUMN denied_meter TEXT;
             ALTER TABLE reservations ADD COLUMN customer TEXT;",
        )
        .unwrap();
        write_books(&path, &conn, |desk| {
            books::reserve(desk, &rules, &request("old", 1_000), start).unwrap();
        });
        conn.execute_batch(
            "ALTER TABLE reservations DROP COLUMN model;
             ALTER TABLE reservations DROP COLUMN run_id;
             ALTER TABLE reservations DROP COLUMN caps;
             ALTER TABLE reservations DROP COLUMN tokens;
             ALTER TABLE reservations DROP COLUMN denied_meter;
             ALTER TABLE reservations DROP COLUMN customer;",
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
