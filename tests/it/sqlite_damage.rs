//! A damaged journal never loses an answered call silently, end to end:
//! a gateway whose journal went missing after a `kill -9` exits at
//! start-up naming the journal and what to do, and starts once the
//! operator has created it empty; after a clean stop the file alone
//! starts. The other cases (a torn, a corrupt or a foreign journal) are
//! the store's unit tests (`src/budget/sqlite/tests/damage.rs`).

use std::process::Command;
use std::time::Duration;

use crate::redis_support::*;

#[tokio::test]
async fn a_journal_missing_after_a_crash_stops_start_up_until_the_operator_gives_it_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("books.db");
    let journal = dir.path().join("books.db.journal-0");
    let provider = mock().await;
    let key = KeySpec::new("ida", None, "1.00", "day");
    let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
    config.sqlite_path = Some(db.clone());
    config.keys.push(key.clone());
    let mut first = GatewayProcess::start(&config).await;
    let body = chat("gpt-4o-mini", "hello mock:tokens=5", false, 50);
    let response = post_chat(&client(), &first.url, &key.raw, &body).await;
    assert_eq!(response.status(), 200);
    let spent = field(
        &budget(&first.url, &key.raw).await,
        "key",
        "spent_usd_micros",
    );
    // Posted to the file a moment after it was answered: what the
    // journal held beyond it is what giving the journal up costs, and
    // here that is nothing.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let posted = eventually(Duration::from_secs(5), || async {
        conn.query_row("SELECT COUNT(*) FROM ledger", [], |row| {
            row.get::<_, i64>(0)
        })
        .unwrap()
            == 1
    })
    .await;
    assert!(posted, "the call never reached the file");
    drop(conn);
    first.kill();
    std::fs::remove_file(&journal).unwrap();

    let config_path = dir.path().join("gateway.toml");
    std::fs::write(&config_path, config.toml()).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .env("TEST_PROVIDER_KEY", PROVIDER_KEY)
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .unwrap();
    assert!(!output.status.success(), "the gateway started");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains(&journal.display().to_string()), "{log}");
    assert!(log.contains("is missing"), "{log}");
    assert!(log.contains("touch"), "{log}");

    // The operator gives the journal's calls up: the file's books serve.
    std::fs::File::create(&journal).unwrap();
    let mut second = GatewayProcess::start(&config).await;
    let served = field(
        &budget(&second.url, &key.raw).await,
        "key",
        "spent_usd_micros",
    );
    assert_eq!(served, spent);

    // A clean stop leaves nothing in the journal: the file alone starts.
    assert!(second.terminate().success(), "{}", second.log());
    for part in ["books.db.journal-0", "books.db.journal-1"] {
        std::fs::remove_file(dir.path().join(part)).unwrap();
    }
    let third = GatewayProcess::start(&config).await;
    let served = field(
        &budget(&third.url, &key.raw).await,
        "key",
        "spent_usd_micros",
    );
    assert_eq!(served, spent);
}
