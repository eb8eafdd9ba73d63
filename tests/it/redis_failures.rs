//! A gateway whose Redis goes away fails closed and heals by itself: while
//! Redis is down every call gets 503 and nothing reaches the provider (or,
//! with `on_store_error = "allow"`, the call is let through unmetered);
//! once a Redis answers again on the same address with its data (it has
//! lost its script cache), calls pass and are charged exactly, with no
//! restart of the gateway. Each test runs its own `redis-server`. (A Redis
//! that comes back without its data is `redis_epoch.rs`.)

use std::time::{Duration, Instant};

use serde_json::Value;
use tollgate::budget::LedgerStatus;

use crate::redis_support::servers::{redis_cli, RedisServer};
use crate::redis_support::*;

/// How long a gateway may take to notice that Redis is back.
const RECOVERY: Duration = Duration::from_secs(20);

fn config(redis: &RedisServer, provider: std::net::SocketAddr) -> GatewayConfig {
    let org = OrgSpec {
        id: unique("org"),
        cap: "10.00",
        period: "month",
    };
    let key = KeySpec::new("dave", Some(&org), "5.00", "day");
    let mut config = GatewayConfig::new(&redis.url(), provider);
    config.orgs.push(org);
    config.keys.push(key);
    config
}

/// One small non-streaming chat call: its status and body.
async fn small_call(gateway: &str, key: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let body = chat("gpt-4o-mini", "hello mock:tokens=7", false, 50);
    let response = post_chat(&client(), gateway, key, &body).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, headers, value)
}

/// The answer every call gets while the store is down.
fn assert_store_unavailable_openai(body: &Value) {
    let error = &body["error"];
    assert_eq!(error["type"], "server_error", "{body}");
    assert_eq!(error["code"], "budget_store_unavailable", "{body}");
    assert!(error["param"].is_null(), "{body}");
    assert!(
        !error["message"].as_str().unwrap_or_default().is_empty(),
        "{body}"
    );
}

/// Calls until one gets 200 (each other answer must be 503); returns it.
async fn call_until_served(gateway: &str, key: &str) -> (reqwest::header::HeaderMap, Value) {
    let deadline = Instant::now() + RECOVERY;
    loop {
        let (status, headers, body) = small_call(gateway, key).await;
        if status == 200 {
            return (headers, body);
        }
        assert_eq!(status, 503, "{body}");
        assert!(Instant::now() < deadline, "never recovered: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_fails_closed_and_the_gateway_recovers_by_itself() {
    let started = Instant::now();
    // Persistent, as Redis must run under tollgate: it comes back with its
    // data, every write on disk before its reply (`everysec` may hold
    // writes back from a server killed outright).
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mock = mock().await;
    let config = config(&redis, mock.addr);
    let key = config.keys[0].raw.clone();
    let gateway = GatewayProcess::start(&config).await;
    let (status, _, body) = small_call(&gateway.url, &key).await;
    assert_eq!(status, 200, "{body}");
    let before = prices()
        .get("gpt-4o-mini")
        .unwrap()
        .cost(&chat_usage(&body));
    assert_eq!(readyz(&gateway.url).await, 200);

    redis.kill();
    let forwarded = mock.stats.requests();
    let billed = mock.stats.billed();
    let down = Instant::now();
    for _ in 0..3 {
        let (status, _, body) = small_call(&gateway.url, &key).await;
        assert_eq!(status, 503, "{body}");
        assert_store_unavailable_openai(&body);
    }
    let stream = chat("gpt-4o-mini", "hi", true, 50);
    let response = post_chat(&client(), &gateway.url, &key, &stream).await;
    assert_eq!(response.status(), 503);
    assert_store_unavailable_openai(&response.json().await.unwrap());
    let response = client()
        .post(format!("{}/v1/messages", gateway.url))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .json(&messages("claude-haiku-4-5", "hi", false, 50))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "api_error", "{body}");
    let refusing = down.elapsed() / 5;
    assert_eq!(readyz(&gateway.url).await, 503);
    assert_eq!(mock.stats.requests(), forwarded, "forwarded while down");

    // Back on the same port with its data, but no scripts.
    redis.restart();
    let restarted = Instant::now();
    let reserve = script_sha("reserve");
    assert_eq!(
        redis_cli(redis.port, &["script", "exists", &reserve]).trim(),
        "0"
    );
    let (headers, answer) = call_until_served(&gateway.url, &key).await;
    let recovered = restarted.elapsed();
    assert_eq!(
        redis_cli(redis.port, &["script", "exists", &reserve]).trim(),
        "1"
    );
    assert_eq!(readyz(&gateway.url).await, 200);
    assert_eq!(mock.stats.requests(), forwarded + 1);

    // The call after recovery is charged exactly what the provider billed.
    let usage = chat_usage(&answer);
    let cost = prices().get("gpt-4o-mini").unwrap().cost(&usage);
    assert_eq!(
        headers["x-tollgate-cost-usd-micros"],
        cost.to_string().as_str()
    );
    let billed_since = mock.stats.billed();
    assert_eq!(
        (
            billed_since.input - billed.input,
            billed_since.output - billed.output
        ),
        (usage.input, usage.output)
    );
    let state = budget(&gateway.url, &key).await;
    let spent = before + cost;
    assert_eq!(field(&state, "key", "spent_usd_micros"), spent, "{state}");
    assert_eq!(field(&state, "org", "spent_usd_micros"), spent, "{state}");
    assert_eq!(field(&state, "key", "reserved_usd_micros"), 0, "{state}");
    let store = store(&redis.url()).await;
    let ledger = store.ledger(&config.keys[0].tag()).await.unwrap();
    assert_eq!(ledger.len(), 2, "{ledger:?}");
    assert_eq!(
        (ledger[1].status, ledger[1].actual),
        (LedgerStatus::Ok, delta(cost))
    );
    assert_eq!(ledger[1].usage, usage);
    assert_books_balance(&store, &config.tags()).await;
    eprintln!(
        "503 in {refusing:?} per call while down; served again {:?} after the restart; \
         total {:?}",
        recovered,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_while_redis_is_down_becomes_ready_when_it_comes_up() {
    let started = Instant::now();
    let mut redis = RedisServer::stopped();
    let mock = mock().await;
    let config = config(&redis, mock.addr);
    let key = config.keys[0].raw.clone();
    let gateway = GatewayProcess::start_unready(&config).await;
    assert_eq!(readyz(&gateway.url).await, 503);
    let (status, _, body) = small_call(&gateway.url, &key).await;
    assert_eq!(status, 503, "{body}");
    assert_store_unavailable_openai(&body);
    assert_eq!(mock.stats.requests(), 0);

    redis.restart();
    let ready = eventually(RECOVERY, || {
        let url = gateway.url.clone();
        async move { readyz(&url).await == 200 }
    })
    .await;
    assert!(ready, "/readyz never said ready:\n{}", gateway.log());
    let (headers, answer) = call_until_served(&gateway.url, &key).await;
    let cost = prices()
        .get("gpt-4o-mini")
        .unwrap()
        .cost(&chat_usage(&answer));
    assert_eq!(
        headers["x-tollgate-cost-usd-micros"],
        cost.to_string().as_str()
    );
    let state = budget(&gateway.url, &key).await;
    assert_eq!(field(&state, "key", "spent_usd_micros"), cost, "{state}");
    assert_eq!(mock.stats.requests(), 1);
    assert_books_balance(&store(&redis.url()).await, &config.tags()).await;
    eprintln!("total {:?}", started.elapsed());
}

/// A reserve whose answer never came may still have landed. The call is
/// refused and not forwarded, and whatever it reserved is released at once,
/// not at the reservation's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_that_landed_unanswered_is_released_at_once() {
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let mock = mock().await;
    let config = config(&redis, mock.addr);
    let key = config.keys[0].raw.clone();
    let gateway = GatewayProcess::start(&config).await;
    let (status, _, body) = small_call(&gateway.url, &key).await;
    assert_eq!(status, 200, "{body}");
    let spent = field(&budget(&gateway.url, &key).await, "key", "spent_usd_micros");

    // Redis stalls for longer than the gateway's attempts at a reserve
    // (three of 2 s each); they run when it wakes, with no one waiting.
    let port = redis.port;
    let stall = tokio::task::spawn_blocking(move || redis_cli(port, &["DEBUG", "SLEEP", "8"]));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let forwarded = mock.stats.requests();
    let (status, _, body) = small_call(&gateway.url, &key).await;
    assert_eq!(status, 503, "{body}");
    assert_store_unavailable_openai(&body);
    stall.await.unwrap();
    assert_eq!(mock.stats.requests(), forwarded, "a refused call was sent");

    // The reservation landed and was released with nothing charged, long
    // before its 60 s deadline.
    let store = store(&redis.url()).await;
    let tag = config.keys[0].tag();
    let released = eventually(Duration::from_secs(10), || async {
        let ledger = store.ledger(&tag).await.unwrap();
        ledger.len() == 2 && ledger[1].actual == 0 && ledger[1].status == LedgerStatus::Ok
    })
    .await;
    assert!(released, "{:?}", store.ledger(&tag).await.unwrap());
    let now = budget(&gateway.url, &key).await;
    assert_eq!(field(&now, "key", "reserved_usd_micros"), 0, "{now}");
    assert_eq!(field(&now, "key", "spent_usd_micros"), spent, "{now}");
    assert_books_balance(&store, &config.tags()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_store_error_allow_calls_pass_unmetered_while_redis_is_down() {
    let mut redis = RedisServer::stopped();
    let mock = mock().await;
    let mut config = config(&redis, mock.addr);
    config.on_store_error = "allow";
    let key = config.keys[0].raw.clone();
    let gateway = GatewayProcess::start_unready(&config).await;

    let (status, _, body) = small_call(&gateway.url, &key).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion", "{body}");
    let stream = chat("gpt-4o-mini", "hi mock:tokens=3", true, 50);
    let response = post_chat(&client(), &gateway.url, &key, &stream).await;
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().contains("[DONE]"));
    assert_eq!(mock.stats.requests(), 2, "the provider got both calls");
    assert_eq!(readyz(&gateway.url).await, 503);
    let free_passes = gateway.log().matches("UNMETERED").count();
    assert_eq!(
        free_passes,
        2,
        "each free pass is logged:\n{}",
        gateway.log()
    );

    // Nothing was recorded for them; calls are metered again once Redis is
    // back (before that, a call would pass unmetered).
    redis.restart();
    let ready = eventually(RECOVERY, || {
        let url = gateway.url.clone();
        async move { readyz(&url).await == 200 }
    })
    .await;
    assert!(ready, "/readyz never said ready:\n{}", gateway.log());
    let (status, headers, answer) = small_call(&gateway.url, &key).await;
    assert_eq!(status, 200, "{answer}");
    let cost = prices()
        .get("gpt-4o-mini")
        .unwrap()
        .cost(&chat_usage(&answer));
    assert_eq!(
        headers["x-tollgate-cost-usd-micros"],
        cost.to_string().as_str()
    );
    let state = budget(&gateway.url, &key).await;
    assert_eq!(field(&state, "key", "spent_usd_micros"), cost, "{state}");
    let store = store(&redis.url()).await;
    assert_eq!(store.ledger(&config.keys[0].tag()).await.unwrap().len(), 1);
    assert_books_balance(&store, &config.tags()).await;
}
