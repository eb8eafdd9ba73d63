//! A Redis that restarts without its data has forgotten what every key
//! spent. Two gateways on it fail closed at once: every call gets 503 with
//! nothing forwarded, `/readyz` answers 503, and each logs that the store
//! epoch vanished. `tollgate admin store accept-epoch` puts the store back
//! in service: both gateways serve again within seconds, with no restart,
//! and charge exactly from the counters' new zero.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::redis_support::servers::{redis_cli, RedisServer};
use crate::redis_support::*;

/// How long the gateways may take to see the accepted epoch (their sweep
/// reads `tg:meta` every second).
const RESUME: Duration = Duration::from_secs(15);

/// One small non-streaming chat call: its status and body.
async fn small_call(gateway: &str, key: &str) -> (u16, Value) {
    let body = chat("gpt-4o-mini", "hello mock:tokens=7", false, 50);
    let response = post_chat(&client(), gateway, key, &body).await;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// What a call costs, from its answer's usage.
fn cost(answer: &Value) -> u64 {
    prices()
        .get("gpt-4o-mini")
        .unwrap()
        .cost(&chat_usage(answer))
}

/// Runs `tollgate admin store accept-epoch` on `config`; returns its
/// output.
fn accept_epoch(config: &GatewayConfig) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config.toml()).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["admin", "store", "accept-epoch", "--config"])
        .arg(&path)
        .env("TEST_PROVIDER_KEY", PROVIDER_KEY)
        .env_remove("TOLLGATE_REDIS_URL")
        .env_remove("TOLLGATE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "accept-epoch failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_fails_closed_until_an_operator_accepts_a_new_epoch() {
    let started = Instant::now();
    let mut redis = RedisServer::start();
    let mock = mock().await;
    let org = OrgSpec {
        id: unique("org"),
        cap: "10.00",
        period: "month",
    };
    let key = KeySpec::new("erin", Some(&org), "5.00", "day");
    let mut config = GatewayConfig::new(&redis.url(), mock.addr);
    config.orgs.push(org);
    config.keys.push(key.clone());
    let (a, b) = tokio::join!(
        GatewayProcess::start(&config),
        GatewayProcess::start(&config)
    );
    let gateways = [&a, &b];
    let mut before = 0;
    for gateway in gateways {
        let (status, answer) = small_call(&gateway.url, &key.raw).await;
        assert_eq!(status, 200, "{answer}");
        before += cost(&answer);
        assert_eq!(readyz(&gateway.url).await, 200);
    }
    let state = budget(&a.url, &key.raw).await;
    assert_eq!(field(&state, "key", "spent_usd_micros"), before, "{state}");
    let lost = redis_cli(redis.port, &["hget", "tg:meta", "epoch"])
        .trim()
        .to_owned();
    assert!(!lost.is_empty());

    // Back on the same port, empty: the books are gone.
    redis.restart();
    let forwarded = mock.stats.requests();
    for gateway in gateways {
        for _ in 0..2 {
            let (status, body) = small_call(&gateway.url, &key.raw).await;
            assert_eq!(status, 503, "{body}");
            assert_eq!(body["error"]["type"], "server_error", "{body}");
            assert_eq!(body["error"]["code"], "budget_store_unavailable", "{body}");
            assert!(body["error"]["message"].is_string(), "{body}");
        }
        assert_eq!(readyz(&gateway.url).await, 503);
    }
    assert_eq!(mock.stats.requests(), forwarded, "forwarded on lost books");
    let vanished = format!("the Redis store epoch {lost} vanished");
    for gateway in gateways {
        let logged = eventually(Duration::from_secs(5), || async {
            gateway.log().contains(&vanished)
        })
        .await;
        assert!(logged, "{}", gateway.log());
        assert!(gateway.log().contains("tollgate admin store accept-epoch"));
        let metrics = client()
            .get(format!("{}/metrics", gateway.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("tollgate_store_failed_closed 1"),
            "{metrics}"
        );
    }
    // Still closed after their sweeps ran; nothing written, not even a new
    // tg:meta.
    let deadline = Instant::now() + Duration::from_millis(1_500);
    while Instant::now() < deadline {
        for gateway in gateways {
            assert_eq!(small_call(&gateway.url, &key.raw).await.0, 503);
            assert_eq!(readyz(&gateway.url).await, 503);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(redis_cli(redis.port, &["keys", "*"]).trim(), "");
    assert_eq!(mock.stats.requests(), forwarded, "forwarded on lost books");

    // The operator accepts: both serve again, without a restart.
    let printed = accept_epoch(&config);
    let epoch = redis_cli(redis.port, &["hget", "tg:meta", "epoch"])
        .trim()
        .to_owned();
    assert!(!epoch.is_empty() && epoch != lost, "{epoch}");
    assert!(printed.contains(&epoch), "{printed}");
    for gateway in gateways {
        let ready = eventually(RESUME, || async { readyz(&gateway.url).await == 200 }).await;
        assert!(ready, "never ready again:\n{}", gateway.log());
    }

    // The counters restarted from zero; each call is charged exactly.
    let mut after = 0;
    for gateway in gateways {
        let (status, answer) = small_call(&gateway.url, &key.raw).await;
        assert_eq!(status, 200, "{answer}");
        after += cost(&answer);
    }
    assert_eq!(mock.stats.requests(), forwarded + 2);
    for gateway in gateways {
        let state = budget(&gateway.url, &key.raw).await;
        assert_eq!(field(&state, "key", "spent_usd_micros"), after, "{state}");
        assert_eq!(field(&state, "org", "spent_usd_micros"), after, "{state}");
        assert_eq!(field(&state, "key", "reserved_usd_micros"), 0, "{state}");
    }
    let tag = key.tag();
    let spend = format!("tg:{{{tag}}}:spend");
    assert_eq!(
        redis_cli(redis.port, &["hget", &spend, "epoch"]).trim(),
        epoch
    );
    let store = store(&redis.url()).await;
    assert_eq!(store.ledger(&tag).await.unwrap().len(), 2);
    assert_books_balance(&store, &config.tags()).await;
    eprintln!("total {:?}", started.elapsed());
}
