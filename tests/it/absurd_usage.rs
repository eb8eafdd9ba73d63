//! A provider that reports usage no call can have — a count that is
//! negative, fractional, 2^53 or more, or not a number; a cost of 2^53 µUSD
//! or more; or one the store cannot add to its counter — through the real
//! server: the call is charged its upper bound at once (the client does
//! not wait for retries), marked `estimated`, the books balance, and
//! `tollgate_absurd_usage_total` counts it. On the memory store and on
//! Redis alike.
//!
//! The mock provider reports only sane usage, so the provider here is a
//! tiny one of this file's own: it answers every chat completion with the
//! usage its request's last message spells, verbatim, served at the
//! default tier (and says so, as OpenAI does).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use tollgate::budget::LedgerStatus;
use tollgate::money::{delta, MAX_USD_MICROS};

use crate::common;
use crate::redis_support;

/// Far less than the two reservation TTLs a settle is retried for when the
/// store is down: a call that waits this long was retried.
const AT_ONCE: Duration = Duration::from_secs(10);

// === The provider ===

/// Starts the provider on a free port; it runs until the test ends.
async fn spawn_provider() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(answer)),
            );
        }
    });
    addr
}

/// A chat completion, or its stream, reporting as `usage` the text of the
/// request's last message.
async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    let usage = body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let (content_type, text) = if body["stream"] == json!(true) {
        let chunk = r#"{"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","service_tier":"default","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#;
        (
            "text/event-stream",
            format!(
                "data: {chunk}\n\n\
                 data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"service_tier\":\"default\",\"choices\":[],\"usage\":{usage}}}\n\n\
                 data: [DONE]\n\n"
            ),
        )
    } else {
        (
            "application/json",
            format!(
                r#"{{"id":"c1","object":"chat.completion","model":"gpt-4o","service_tier":"default","choices":[{{"index":0,"message":{{"role":"assistant","content":"Hi"}},"finish_reason":"stop"}}],"usage":{usage}}}"#
            ),
        )
    };
    Ok(Response::builder()
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(text)))
        .unwrap())
}

/// A gpt-4o call whose provider will report `usage`, bounded to 100
/// output tokens.
fn call(usage: &str, stream: bool) -> Value {
    json!({
        "model": "gpt-4o",
        "stream": stream,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": usage}],
    })
}

/// Usage no call can have, each way it comes.
const ABSURD: [&str; 6] = [
    r#"{"prompt_tokens":12,"completion_tokens":-3}"#,
    r#"{"prompt_tokens":12.5,"completion_tokens":3}"#,
    r#"{"prompt_tokens":12,"completion_tokens":9007199254740993}"#,
    r#"{"prompt_tokens":12,"completion_tokens":1e30}"#,
    r#"{"prompt_tokens":"12","completion_tokens":3}"#,
    // Each count is fine; at gpt-4o's $10/Mtok output, the cost is not.
    r#"{"prompt_tokens":12,"completion_tokens":900719925474100}"#,
];

async fn absurd_usage_count(gateway: &str) -> u64 {
    common::metric(gateway, "tollgate_absurd_usage_total").await
}

/// Sends `body` and reads the whole answer, within [`AT_ONCE`]; returns
/// the status, the charge header (plain calls) and the body.
async fn send(
    client: &reqwest::Client,
    gateway: &str,
    key: &str,
    body: &Value,
) -> (u16, Option<u64>, String) {
    let started = Instant::now();
    let answer = tokio::time::timeout(AT_ONCE, async {
        let response = client
            .post(format!("{gateway}/v1/chat/completions"))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let cost = response
            .headers()
            .get("x-tollgate-cost-usd-micros")
            .map(|value| value.to_str().unwrap().parse().unwrap());
        (status, cost, response.text().await.unwrap())
    })
    .await
    .unwrap_or_else(|_| panic!("no answer within {AT_ONCE:?}: the settle was retried"));
    eprintln!("answered in {:?}", started.elapsed());
    answer
}

// === On the memory store ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_usage_is_charged_the_bound_at_once() {
    let provider = spawn_provider().await;
    let h = common::start(common::Setup {
        openai_base_url: Some(format!("http://{provider}")),
        ..common::Setup::default()
    })
    .await;
    let client = h.client();
    let mut calls = 0;
    for usage in ABSURD {
        for stream in [false, true] {
            let (status, cost, text) =
                send(&client, &h.url, common::ALICE, &call(usage, stream)).await;
            assert_eq!(status, 200, "{usage}: {text}");
            calls += 1;
            let ledger = h.ledger();
            assert_eq!(ledger.len(), calls, "{ledger:?}");
            let entry = ledger.last().unwrap();
            assert_eq!(entry.status, LedgerStatus::Estimated, "{usage}: {entry:?}");
            assert_eq!(entry.actual, delta(entry.reserved), "{usage}: {entry:?}");
            assert_eq!(entry.usage.output, 100, "the output limit: {entry:?}");
            if stream {
                assert!(text.contains("[DONE]"), "{text}");
                assert!(
                    !text.contains("usage"),
                    "the usage chunk was hidden: {text}"
                );
            } else {
                assert_eq!(cost, Some(entry.reserved), "{usage}");
            }
        }
    }
    let spent: i64 = h.ledger().iter().map(|entry| entry.actual).sum();
    assert_eq!(delta(common::spent(&h, common::ALICE).await), spent);
    for row in h.store.reconcile() {
        assert_eq!(row.drift(), 0, "{row:?}");
    }
    assert_eq!(h.store.open_reservations(), (0, 0));
    assert_eq!(absurd_usage_count(&h.url).await, 2 * ABSURD.len() as u64);
}

/// Sane usage is charged as reported, and counted as nothing absurd.
#[tokio::test]
async fn sane_usage_is_charged_as_reported() {
    let provider = spawn_provider().await;
    let h = common::start(common::Setup {
        openai_base_url: Some(format!("http://{provider}")),
        ..common::Setup::default()
    })
    .await;
    let usage = r#"{"prompt_tokens":12.0,"completion_tokens":3,"prompt_tokens_details":null}"#;
    let (status, cost, _) = send(&h.client(), &h.url, common::ALICE, &call(usage, false)).await;
    assert_eq!(status, 200);
    let entry = common::only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!((entry.usage.input, entry.usage.output), (12, 3));
    assert_eq!(cost.map(delta), Some(entry.actual));
    assert_eq!(absurd_usage_count(&h.url).await, 0);
}

// === On Redis ===

/// The key's counter is taken to within 100,000 µUSD of 2^53 by a first
/// call's (legitimate, if enormous) overrun; the next call's usage is
/// sane, but adding its cost would take the counter to 2^53, which the
/// store refuses. That call is charged its bound at once, where it was
/// once retried for two reservation TTLs and then charged nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_the_store_cannot_add_is_charged_the_bound_at_once() {
    use redis_support::{assert_books_balance, budget, field, store, GatewayConfig, KeySpec};

    let provider = spawn_provider().await;
    let key = KeySpec::new("near-max", None, "9007199254.740991", "total");
    let mut config = GatewayConfig::new(redis_support::shared_redis_url(), provider);
    config.keys.push(key.clone());
    let gateway = redis_support::UnsweptGateway::start(&config).await;
    let client = redis_support::client();

    // 900,719,925,464,099 output tokens at $10/Mtok and 12 input tokens at
    // $2.50/Mtok: 9,007,199,254,641,020 µUSD, 99,971 below 2^53.
    let first = r#"{"prompt_tokens":12,"completion_tokens":900719925464099}"#;
    let (status, cost, text) = send(&client, &gateway.url, &key.raw, &call(first, false)).await;
    assert_eq!(status, 200, "{text}");
    let first_cost = cost.unwrap();
    assert_eq!(first_cost, MAX_USD_MICROS - 99_971);

    let second = r#"{"prompt_tokens":12,"completion_tokens":20000}"#;
    let (status, cost, text) = send(&client, &gateway.url, &key.raw, &call(second, false)).await;
    assert_eq!(status, 200, "{text}");
    let reader = store(redis_support::shared_redis_url()).await;
    let ledger = reader.ledger(&key.tag()).await.unwrap();
    assert_eq!(ledger.len(), 2, "{ledger:?}");
    assert_eq!(ledger[0].status, LedgerStatus::Overrun);
    let entry = &ledger[1];
    assert_eq!(entry.status, LedgerStatus::Estimated, "{entry:?}");
    assert_eq!(entry.actual, delta(entry.reserved));
    assert_eq!(cost, Some(entry.reserved));

    let state = budget(&gateway.url, &key.raw).await;
    assert_eq!(
        field(&state, "key", "spent_usd_micros"),
        first_cost + entry.reserved
    );
    assert_eq!(field(&state, "key", "reserved_usd_micros"), 0);
    assert_books_balance(&reader, &config.tags()).await;
    assert_eq!(absurd_usage_count(&gateway.url).await, 1);
}

/// On an Azure deployment, as on OpenAI's routes: the same usage, read the
/// same way, charged its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_usage_on_an_azure_deployment_is_charged_the_bound_at_once() {
    let provider = spawn_provider().await;
    let h = common::start(common::Setup {
        azure: true,
        azure_base_url: Some(format!("http://{provider}")),
        ..common::Setup::default()
    })
    .await;
    let client = h.client();
    for usage in ABSURD {
        for stream in [false, true] {
            let mut body = call(usage, stream);
            body.as_object_mut().unwrap().remove("model");
            let started = Instant::now();
            let response = client
                .post(format!(
                    "{}/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21",
                    h.url
                ))
                .header("api-key", common::ALICE)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{usage}");
            response.bytes().await.unwrap();
            assert!(started.elapsed() < AT_ONCE, "the settle was retried");
            h.settled().await;
            let entry = h.ledger().last().cloned().unwrap();
            assert_eq!(entry.status, LedgerStatus::Estimated, "{usage}: {entry:?}");
            assert_eq!(entry.actual, delta(entry.reserved), "{usage}: {entry:?}");
        }
    }
    assert_eq!(absurd_usage_count(&h.url).await, 2 * ABSURD.len() as u64);
}
