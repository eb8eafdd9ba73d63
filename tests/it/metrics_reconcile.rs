//! `GET /metrics` and `tollgate reconcile` against real servers.
//!
//! The metrics are scraped over HTTP from a gateway on the memory store,
//! after calls that were allowed, denied and failed upstream, and while a
//! stream holds its reservation open. `tollgate reconcile` is the real
//! binary, run against the books a gateway on the shared Redis (the one
//! this test process starts) just wrote, under fresh org and key ids so no
//! other test's data is read; then one counter is corrupted and the drift
//! must show on its row.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use tollgate::budget::{BudgetStore, RedisStore, Rules, Upkeep};
use tollgate::config::Config;
use tollgate::server;
use tollgate_mock::{MockOptions, MockServer};

use crate::common::*;
use crate::redis_support::shared_redis_url;

/// The value of the sample line starting with `series` in a scrape.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().unwrap())
}

async fn scrape(url: &str) -> String {
    let response = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    text
}

fn cost_header(response: &reqwest::Response) -> u64 {
    response.headers()["x-tollgate-cost-usd-micros"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

// === GET /metrics ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_reserves_settlements_and_open_reservations() {
    let h = start(Setup {
        bob_cap: "0.000001",
        ..Setup::default()
    })
    .await;
    let mut charged = 0;
    for _ in 0..2 {
        let response = h
            .post(
                "/v1/chat/completions",
                ALICE,
                &chat("gpt-4o-mini", "hi mock:tokens=5"),
            )
            .await;
        assert_eq!(response.status(), 200);
        charged += cost_header(&response);
    }
    let denied = h
        .post("/v1/chat/completions", BOB, &chat("gpt-4o-mini", "hi"))
        .await;
    assert_eq!(denied.status(), 402);
    let failed = h
        .post(
            "/v1/chat/completions",
            ALICE,
            &chat("gpt-4o-mini", "hi mock:status=500"),
        )
        .await;
    assert_eq!(failed.status(), 500);

    let text = scrape(&h.url).await;
    let count = |series: &str| sample(&text, series);
    assert_eq!(
        count(r#"tollgate_reserve_total{outcome="allowed",scope=""}"#),
        Some(3),
        "{text}"
    );
    assert_eq!(
        count(r#"tollgate_reserve_total{outcome="denied",scope="key"}"#),
        Some(1)
    );
    assert_eq!(
        count(r#"tollgate_reserve_total{outcome="denied",scope="org"}"#),
        Some(0)
    );
    assert_eq!(
        count(r#"tollgate_reserve_total{outcome="error",scope=""}"#),
        Some(0)
    );
    // The failed call settles at zero: ok, and nothing charged.
    assert_eq!(count(r#"tollgate_settlements_total{status="ok"}"#), Some(3));
    assert_eq!(count("tollgate_charged_usd_micros_total"), Some(charged));
    assert_eq!(count("tollgate_open_reservations"), Some(0));
    assert_eq!(count("tollgate_open_reservations_usd_micros"), Some(0));
    assert_eq!(
        count(r#"tollgate_store_call_duration_seconds_count{op="reserve"}"#),
        Some(4)
    );
    assert_eq!(
        count(r#"tollgate_store_call_duration_seconds_count{op="settle"}"#),
        Some(3)
    );
    assert_eq!(
        count(r#"tollgate_store_errors_total{op="reserve"}"#),
        Some(0)
    );
    for (status, calls) in [(200, 2), (402, 1), (500, 1)] {
        let series =
            format!(r#"tollgate_requests_total{{route="/v1/chat/completions",status="{status}"}}"#);
        assert_eq!(count(&series), Some(calls), "{series}\n{text}");
    }
    // No key or org id ever becomes a label.
    assert!(!text.contains("alice") && !text.contains("acme"), "{text}");

    // A stream in flight holds its reservation: the scrape shows it.
    let streaming = h
        .post(
            "/v1/chat/completions",
            ALICE,
            &json!({
                "model": "gpt-4o-mini",
                "stream": true,
                "max_tokens": 100,
                "messages": [{"role": "user", "content": "hi mock:tokens=20 mock:sleep_ms=50"}],
            }),
        )
        .await;
    assert_eq!(streaming.status(), 200);
    let text = scrape(&h.url).await;
    assert_eq!(
        sample(&text, "tollgate_open_reservations"),
        Some(1),
        "{text}"
    );
    let held = sample(&text, "tollgate_open_reservations_usd_micros").unwrap();
    assert!(held > 0, "{text}");
    streaming.bytes().await.unwrap();
    h.settled().await;

    let text = scrape(&h.url).await;
    assert_eq!(sample(&text, "tollgate_open_reservations"), Some(0));
    assert_eq!(
        sample(&text, r#"tollgate_settlements_total{status="ok"}"#),
        Some(4),
        "{text}"
    );
    let scrapes = sample(
        &text,
        r#"tollgate_requests_total{route="/metrics",status="200"}"#,
    );
    assert_eq!(scrapes, Some(2), "{text}");
}

// === tollgate reconcile ===

/// A gateway on the shared Redis with ids of its own, and its config on
/// disk for the `reconcile` binary.
struct RedisGateway {
    url: String,
    org: String,
    alice: String,
    solo: String,
    config_dir: tempfile::TempDir,
    _mock: MockServer,
    shutdown: Option<oneshot::Sender<()>>,
    running: Option<server::Running>,
}

impl RedisGateway {
    async fn start() -> RedisGateway {
        let mock = tollgate_mock::spawn(MockOptions {
            expect_key: Some(PROVIDER_KEY.to_owned()),
            ..MockOptions::default()
        })
        .await
        .unwrap();
        let unique = uuid::Uuid::now_v7().simple().to_string();
        let org = format!("metrics-org-{unique}");
        let alice = format!("metrics-alice-{unique}");
        let bob = format!("metrics-bob-{unique}");
        let solo = format!("metrics-solo-{unique}");
        let text = redis_config(&mock, shared_redis_url(), &org, &alice, &bob, &solo);
        let config_dir = tempfile::tempdir().unwrap();
        std::fs::write(config_dir.path().join("tollgate.toml"), &text).unwrap();

        let env = |name: &str| (name == "TEST_OPENAI_KEY").then(|| PROVIDER_KEY.to_owned());
        let config = Config::from_toml_str_with_env(&text, Path::new("test.toml"), &env).unwrap();
        let store = RedisStore::connect(shared_redis_url(), Rules::of(&config.store))
            .await
            .unwrap();
        for key in &config.keys {
            store.track_key(&key.id, key.org.as_deref());
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = rx.await;
        };
        let running = server::start(
            config,
            BudgetStore::Redis(store),
            listener,
            shutdown,
            server::Options::default(),
        )
        .await
        .unwrap();
        RedisGateway {
            url,
            org,
            alice,
            solo,
            config_dir,
            _mock: mock,
            shutdown: Some(tx),
            running: Some(running),
        }
    }

    fn config_path(&self) -> std::path::PathBuf {
        self.config_dir.path().join("tollgate.toml")
    }

    async fn chat(&self, key: &str, text: &str) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", self.url))
            .bearer_auth(key)
            .json(&chat("gpt-4o-mini", text))
            .send()
            .await
            .unwrap()
    }

    async fn key_period_id(&self, key: &str) -> String {
        let budget: Value = reqwest::Client::new()
            .get(format!("{}/v1/budget", self.url))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        budget["key"]["period_id"].as_str().unwrap().to_owned()
    }

    /// Removes this gateway's budget data from the shared Redis.
    async fn forget_books(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(running) = self.running.take() {
            running.stopped().await.unwrap();
        }
        let mut redis = shared_redis().await;
        for tag in [self.org.clone(), format!("key:{}", self.solo)] {
            let keys: Vec<String> = [
                "spend", "res", "pending", "closed", "ledger", "agg", "done", "cust",
            ]
            .iter()
            .map(|name| format!("tg:{{{tag}}}:{name}"))
            .collect();
            for key in keys {
                let _: i64 = redis::cmd("DEL")
                    .arg(&key)
                    .query_async(&mut redis)
                    .await
                    .unwrap();
            }
        }
    }
}

fn redis_config(
    mock: &MockServer,
    redis_url: &str,
    org: &str,
    alice: &str,
    bob: &str,
    solo: &str,
) -> String {
    let prices = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prices.toml");
    let sha = |raw: &str| hex::encode(tollgate::config::hash_key(raw));
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream_timeout_secs = 30

[store]
backend = "redis"
redis_url = "{redis_url}"
reservation_ttl_secs = 60

[prices]
file = "{prices}"

[[providers]]
name = "openai"
kind = "openai"
base_url = "http://{mock}"
api_key_env = "TEST_OPENAI_KEY"
service_tier_default = "priority"  # the mock plays OpenAI itself
models = ["gpt-*"]

[[orgs]]
id = "{org}"
cap_usd = "100.00"
period = "month"

[[keys]]
id = "{alice}"
org = "{org}"
key_sha256 = "{alice_sha}"
cap_usd = "10.00"
period = "day"

[[keys]]
id = "{bob}"
org = "{org}"
key_sha256 = "{bob_sha}"
cap_usd = "0.000001"
period = "day"

[[keys]]
id = "{solo}"
key_sha256 = "{solo_sha}"
cap_usd = "1.00"
period = "total"
"#,
        prices = prices.display(),
        mock = mock.addr,
        alice_sha = sha(ALICE),
        bob_sha = sha(BOB),
        solo_sha = sha(SOLO),
    )
}

async fn shared_redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(shared_redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("the shared Redis answers")
}

async fn reconcile(config: &Path, json: bool) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .arg("reconcile")
        .arg("--config")
        .arg(config)
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_REDIS_URL")
        .env("RUST_LOG", "warn");
    if json {
        command.arg("--json");
    }
    command.output().await.unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// The JSON row of one scope.
fn row<'a>(report: &'a Value, kind: &str, id: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["kind"] == kind && row["id"] == id)
        .unwrap_or_else(|| panic!("no {kind} {id} row in {report}"))
}

/// The table line of one scope.
fn line<'a>(table: &'a str, kind: &str, id: &str) -> &'a str {
    table
        .lines()
        .find(|line| line.split_whitespace().take(2).eq([kind, id]))
        .unwrap_or_else(|| panic!("no {kind} {id} line in\n{table}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_balances_the_books_and_names_the_row_that_drifts() {
    let mut g = RedisGateway::start().await;
    let mut alice_spent = 0;
    for _ in 0..2 {
        let response = g.chat(ALICE, "hi mock:tokens=5").await;
        assert_eq!(response.status(), 200);
        alice_spent += cost_header(&response);
    }
    let solo = g.chat(SOLO, "hi mock:tokens=3").await;
    assert_eq!(solo.status(), 200);
    let solo_spent = cost_header(&solo);
    assert_eq!(g.chat(ALICE, "hi mock:status=500").await.status(), 500);
    assert_eq!(g.chat(BOB, "hi").await.status(), 402);

    // The Redis gateway's scrape reads the open reservations from Redis.
    let text = scrape(&g.url).await;
    assert_eq!(
        sample(&text, "tollgate_open_reservations"),
        Some(0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"tollgate_reserve_total{outcome="allowed",scope=""}"#
        ),
        Some(4)
    );

    let output = reconcile(&g.config_path(), true).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["balanced"], true, "{report}");
    for row in report["rows"].as_array().unwrap() {
        assert_eq!(row["drift_usd_micros"], 0, "{report}");
        assert_eq!(row["open_usd_micros"], 0, "{report}");
    }
    let alice = row(&report, "key", &g.alice);
    assert_eq!(alice["counter_usd_micros"], alice_spent, "{report}");
    assert_eq!(alice["ledger_usd_micros"], alice_spent, "{report}");
    let org = row(&report, "org", &g.org);
    assert_eq!(org["counter_usd_micros"], alice_spent, "{report}");
    let solo = row(&report, "key", &g.solo);
    assert_eq!(solo["counter_usd_micros"], solo_spent, "{report}");
    assert_eq!(solo["ledger_usd_micros"], solo_spent, "{report}");

    let output = reconcile(&g.config_path(), false).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let table = stdout(&output);
    let columns: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        columns,
        ["kind", "id", "period", "counter", "folded", "ledger", "open", "drift"]
    );
    let alice_line: Vec<&str> = line(&table, "key", &g.alice).split_whitespace().collect();
    let period_id = g.key_period_id(ALICE).await;
    let spent = alice_spent.to_string();
    assert_eq!(
        alice_line,
        ["key", &g.alice, &period_id, &spent, "0", &spent, "0", "0"]
    );
    assert!(
        table.trim_end().ends_with("no drift (amounts in µUSD)"),
        "{table}"
    );

    // Corrupt alice's counter for the day: the drift shows on that row only.
    let mut redis = shared_redis().await;
    let spend = format!("tg:{{{}}}:spend", g.org);
    let field = format!("key:{}:{period_id}", g.alice);
    let exists: bool = redis::cmd("HEXISTS")
        .arg(&spend)
        .arg(&field)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(exists, "{spend} has no field {field}");
    let _: i64 = redis::cmd("HINCRBY")
        .arg(&spend)
        .arg(&field)
        .arg(7)
        .query_async(&mut redis)
        .await
        .unwrap();

    let output = reconcile(&g.config_path(), false).await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let table = stdout(&output);
    let alice_line: Vec<&str> = line(&table, "key", &g.alice).split_whitespace().collect();
    let counter = (alice_spent + 7).to_string();
    assert_eq!(
        alice_line,
        ["key", &g.alice, &period_id, &counter, "0", &spent, "0", "7"]
    );
    assert!(line(&table, "org", &g.org).ends_with(" 0"), "{table}");
    assert!(table.contains("DRIFT in 1 of"), "{table}");

    let output = reconcile(&g.config_path(), true).await;
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["balanced"], false);
    assert_eq!(row(&report, "key", &g.alice)["drift_usd_micros"], 7);
    assert_eq!(row(&report, "org", &g.org)["drift_usd_micros"], 0);
    assert_eq!(row(&report, "key", &g.solo)["drift_usd_micros"], 0);

    g.forget_books().await;
}

#[tokio::test]
async fn reconcile_cannot_tell_on_the_memory_store_a_missing_file_or_without_redis() {
    let mock = tollgate_mock::spawn(MockOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();

    let memory = redis_config(&mock, shared_redis_url(), "o", "a", "b", "s")
        .replace("backend = \"redis\"", "backend = \"memory\"");
    let path = dir.path().join("memory.toml");
    std::fs::write(&path, memory).unwrap();
    let output = reconcile(&path, false).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(
            "the memory store lives inside the gateway process; \
             reconcile needs store.backend = \"sqlite\" or \"redis\""
        ),
        "{}",
        stderr(&output)
    );
    assert!(stdout(&output).is_empty());

    // A SQLite store whose file was never created: reconcile reads, it
    // never creates one.
    let absent = dir.path().join("absent.db");
    let sqlite = redis_config(&mock, shared_redis_url(), "o", "a", "b", "s").replace(
        "backend = \"redis\"",
        &format!(
            "backend = \"sqlite\"\nsqlite_path = \"{}\"",
            absent.display()
        ),
    );
    let path = dir.path().join("sqlite.toml");
    std::fs::write(&path, sqlite).unwrap();
    let output = reconcile(&path, false).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no such file"),
        "{}",
        stderr(&output)
    );
    assert!(!absent.exists());

    // Nothing listens on port 1.
    let down = redis_config(&mock, "redis://127.0.0.1:1", "o", "a", "b", "s");
    let path = dir.path().join("down.toml");
    std::fs::write(&path, down).unwrap();
    let started = std::time::Instant::now();
    let output = reconcile(&path, true).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("cannot reach the budget store at redis://127.0.0.1:1"),
        "{}",
        stderr(&output)
    );
    assert!(stdout(&output).is_empty());
    assert!(started.elapsed() < Duration::from_secs(20));
}
