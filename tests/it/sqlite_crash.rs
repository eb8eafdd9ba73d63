//! The SQLite store keeps its books through a `kill -9`. A gateway on a
//! file is SIGKILLed in the middle of a burst (quick calls finishing, slow
//! streams mid-way) and started again on the same file:
//!
//! - it starts (the dead process's lock went with it);
//! - every call whose client got its answer is in the ledger, charged what
//!   its answer said;
//! - the slow streams' holds are still held, then expire at their deadline
//!   and are charged their reserved amount (the provider may have billed
//!   them);
//! - every call that reached the provider has its ledger entry, and
//!   `tollgate reconcile` exits 0 before and after the expiry.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

use crate::redis_support::*;

/// A reservation lives 10 s and a provider call at most 8 s (the TTL must
/// exceed the upstream timeout): the slow streams (20 s long) are killed
/// long before their gateway would cut and settle them, even on a busy
/// machine.
const TTL_SECS: u64 = 10;
const UPSTREAM_TIMEOUT_SECS: u64 = 8;
const SLOW_STREAMS: usize = 8;
const QUICK_WORKERS: usize = 6;

/// What the clients saw of the calls that were answered in full: exec id →
/// the cost the gateway reported (`None` for a stream, whose cost is in no
/// header).
type Answered = Arc<Mutex<HashMap<String, Option<u64>>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_mid_burst_restarts_on_its_file_with_every_answer_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("books.db");
    let provider = mock().await;
    let org = OrgSpec {
        id: unique("org"),
        cap: "100.00",
        period: "month",
    };
    let keys = [
        KeySpec::new("dana", Some(&org), "50.00", "day"),
        KeySpec::new("eli", None, "50.00", "day"),
    ];
    let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
    config.sqlite_path = Some(db.clone());
    config.reservation_ttl_secs = TTL_SECS;
    config.upstream_timeout_secs = UPSTREAM_TIMEOUT_SECS;
    config.orgs.push(org);
    config.keys.extend(keys.iter().cloned());
    let config_path = dir.path().join("gateway.toml");
    std::fs::write(&config_path, config.toml()).unwrap();

    let mut first = GatewayProcess::start(&config).await;

    // Slow streams, each paused mid-way with its reservation open.
    let mut slow = Vec::new();
    let mut started = Vec::new();
    for i in 0..SLOW_STREAMS {
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        started.push(rx);
        let url = first.url.clone();
        let key = keys[i % 2].raw.clone();
        slow.push(tokio::spawn(async move {
            let body = chat(
                "gpt-4o",
                "a long answer mock:tokens=1000 mock:sleep_ms=20",
                true,
                1_200,
            );
            let mut stream = post_chat(&client(), &url, &key, &body).await;
            assert_eq!(stream.status(), 200);
            let exec_id = request_id(&stream);
            assert!(stream.chunk().await.unwrap().is_some(), "no first chunk");
            let _ = tx.send(exec_id);
            // Read on until the gateway dies under it.
            while let Ok(Some(_)) = stream.chunk().await {}
        }));
    }
    let mut slow_ids = Vec::new();
    for rx in started {
        slow_ids.push(rx.await.unwrap());
    }

    // Quick calls, streamed and not, running when the gateway is killed.
    let answered: Answered = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut quick = Vec::new();
    for worker in 0..QUICK_WORKERS {
        let (url, key) = (first.url.clone(), keys[worker % 2].raw.clone());
        let (answered, stop) = (answered.clone(), stop.clone());
        quick.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                quick_call(&url, &key, i % 2 == 0, &answered).await;
                i += 1;
            }
        }));
    }
    // Forty answered calls, or four seconds, whichever comes first: the
    // slow streams must still be running when the gateway dies.
    eventually(Duration::from_secs(4), || async {
        answered.lock().unwrap().len() >= 40
    })
    .await;
    first.kill();
    stop.store(true, Ordering::SeqCst);
    for task in quick.into_iter().chain(slow) {
        task.await.unwrap();
    }
    let answered = answered.lock().unwrap().clone();
    assert!(
        answered.len() >= 5,
        "only {} quick calls were answered",
        answered.len()
    );

    // The same file, a new process.
    let second = GatewayProcess::start(&config).await;
    let conn = Connection::open(&db).unwrap();
    let ledger = ledger_rows(&conn);
    for (exec_id, cost) in &answered {
        let (status, actual) = ledger
            .get(exec_id)
            .unwrap_or_else(|| panic!("answered call {exec_id} is not in the ledger"));
        assert!(
            status == "ok" || status == "estimated",
            "{exec_id}: {status}"
        );
        if let Some(cost) = cost {
            assert_eq!(actual, cost, "{exec_id} was answered with another cost");
        }
    }
    let held = open_holds(&conn);
    for exec_id in &slow_ids {
        assert!(
            held.contains_key(exec_id),
            "the slow stream {exec_id} lost its hold: {held:?}"
        );
    }
    assert_eq!(reconcile(&config_path), Some(0), "reconcile before expiry");

    // Past the deadline, the new gateway's sweep expires the dead process's
    // holds and charges them.
    assert!(
        eventually(Duration::from_secs(30), || async {
            open_holds(&conn).is_empty()
        })
        .await,
        "holds still open: {:?}",
        open_holds(&conn)
    );
    let ledger = ledger_rows(&conn);
    for exec_id in &slow_ids {
        let (status, actual) = &ledger[exec_id];
        assert_eq!(status, "expired", "{exec_id}");
        assert_eq!(*actual, held[exec_id], "{exec_id} was not charged its hold");
    }
    let reached = provider.stats.requests();
    assert!(
        ledger.len() as u64 >= reached,
        "{reached} calls reached the provider, {} are in the ledger",
        ledger.len()
    );
    assert_eq!(reconcile(&config_path), Some(0), "reconcile after expiry");

    // A counter that no longer matches its ledger is reported as drift.
    let drifted = Connection::open(&db).unwrap();
    drifted
        .execute(
            "UPDATE counters SET spent_usd_micros = spent_usd_micros + 1
              WHERE scope_kind = 'key' AND scope_id = ?1",
            [&keys[1].id],
        )
        .unwrap();
    assert_eq!(
        reconcile(&config_path),
        Some(1),
        "reconcile on a drifted counter"
    );
    drifted
        .execute(
            "UPDATE counters SET spent_usd_micros = spent_usd_micros - 1
              WHERE scope_kind = 'key' AND scope_id = ?1",
            [&keys[1].id],
        )
        .unwrap();

    // The counters the new gateway serves are the ledger's.
    for key in &keys {
        let budget = budget(&second.url, &key.raw).await;
        let spent: i64 = conn
            .query_row(
                "SELECT COALESCE(SUM(actual_usd_micros), 0) FROM ledger WHERE key = ?1",
                [&key.id],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(field(&budget, "key", "spent_usd_micros") as i64, spent);
        assert_eq!(field(&budget, "key", "reserved_usd_micros"), 0);
    }
}

/// One quick call; records it when its answer arrived in full.
async fn quick_call(url: &str, key: &str, stream: bool, answered: &Answered) {
    let body = chat("gpt-4o-mini", "hi mock:tokens=5", stream, 20);
    let Ok(response) = client()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
    else {
        return;
    };
    if response.status() != 200 {
        return;
    }
    let exec_id = request_id(&response);
    let cost = response
        .headers()
        .get("x-tollgate-cost-usd-micros")
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    let Ok(text) = response.text().await else {
        return;
    };
    let complete = if stream {
        text.contains("data: [DONE]")
    } else {
        serde_json::from_str::<serde_json::Value>(&text).is_ok()
    };
    if complete {
        answered.lock().unwrap().insert(exec_id, cost);
    }
}

fn request_id(response: &reqwest::Response) -> String {
    response.headers()["x-tollgate-request-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// exec id → (status, actual) of every ledger row.
fn ledger_rows(conn: &Connection) -> HashMap<String, (String, u64)> {
    let mut statement = conn
        .prepare("SELECT exec_id, status, actual_usd_micros FROM ledger")
        .unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, (row.get(1)?, row.get(2)?))))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// exec id → amount of every open reservation.
fn open_holds(conn: &Connection) -> HashMap<String, u64> {
    let mut statement = conn
        .prepare("SELECT exec_id, amount_usd_micros FROM reservations WHERE state = 'open'")
        .unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// `tollgate reconcile`'s exit code on the config.
fn reconcile(config: &Path) -> Option<i32> {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("reconcile")
        .arg("--config")
        .arg(config)
        .env("TEST_PROVIDER_KEY", PROVIDER_KEY)
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .unwrap();
    if !output.status.success() {
        eprintln!(
            "reconcile:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output.status.code()
}

#[tokio::test]
async fn a_second_gateway_on_the_same_file_exits_naming_the_file_and_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("books.db");
    let provider = mock().await;
    let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
    config.sqlite_path = Some(db.clone());
    config.keys.push(KeySpec::new("fay", None, "1.00", "day"));
    let first = GatewayProcess::start(&config).await;
    assert_eq!(readyz(&first.url).await, 200);

    let config_path = dir.path().join("second.toml");
    std::fs::write(&config_path, config.toml()).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .env("TEST_PROVIDER_KEY", PROVIDER_KEY)
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "a second gateway started on the file"
    );
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains(&db.display().to_string()), "{log}");
    assert!(
        log.contains("in use by another tollgate process (pid "),
        "{log}"
    );
    // The first one carries on.
    assert_eq!(readyz(&first.url).await, 200);
}

#[tokio::test]
async fn a_gateway_stopped_cleanly_leaves_its_file_whole_with_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("books.db");
    let provider = mock().await;
    let key = KeySpec::new("gus", None, "1.00", "day");
    let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
    config.sqlite_path = Some(db.clone());
    config.keys.push(key.clone());
    let mut gateway = GatewayProcess::start(&config).await;
    for stream in [false, true] {
        let body = chat("gpt-4o-mini", "hello mock:tokens=5", stream, 50);
        let response = post_chat(&client(), &gateway.url, &key.raw, &body).await;
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
    }
    let spent = field(
        &budget(&gateway.url, &key.raw).await,
        "key",
        "spent_usd_micros",
    );
    assert!(spent > 0);
    assert!(gateway.terminate().success(), "{}", gateway.log());
    // Copied into the file: no frames left in a log beside it.
    let wal = dir.path().join("books.db-wal");
    assert_eq!(std::fs::metadata(&wal).map_or(0, |meta| meta.len()), 0);
    let conn =
        Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    assert_eq!(ledger_rows(&conn).len(), 2);
    drop(conn);
    // The next gateway on the file starts on the same books.
    let next = GatewayProcess::start(&config).await;
    assert_eq!(
        field(
            &budget(&next.url, &key.raw).await,
            "key",
            "spent_usd_micros"
        ),
        spent
    );
}
