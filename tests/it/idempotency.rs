//! A client's `Idempotency-Key`: a repeat sent while the first request is
//! still in flight is refused with 409 (nothing forwarded, nothing charged);
//! a repeat of a finished request is forwarded and charged again; the same
//! key under another gateway key is another request; a malformed header is
//! a 400 that names it.

use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::common::*;

const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// A chat stream slow enough (20 tokens, 100 ms apart) to still be in
/// flight while the test sends its repeats.
fn slow_stream() -> Value {
    let mut body = chat(
        "gpt-4o-mini",
        "Count slowly mock:tokens=20 mock:sleep_ms=100",
    );
    body["stream"] = json!(true);
    body
}

async fn post_with_key(
    h: &Harness,
    path: &str,
    gateway_key: &str,
    idempotency_key: &str,
    body: &Value,
) -> reqwest::Response {
    let request = h
        .client()
        .post(format!("{}{path}", h.url))
        .header(IDEMPOTENCY_KEY, idempotency_key)
        .json(body);
    let request = if path == "/v1/messages" {
        request
            .header("x-api-key", gateway_key)
            .header("anthropic-version", "2023-06-01")
    } else {
        request.bearer_auth(gateway_key)
    };
    request.send().await.unwrap()
}

/// Reads a stream to its end.
async fn drain(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    let mut text = String::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    text
}

fn request_id(response: &reqwest::Response) -> String {
    response.headers()["x-tollgate-request-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_repeat_in_flight_is_refused_and_a_repeat_after_is_charged_again() {
    let h = start(Setup::default()).await;
    let first = post_with_key(
        &h,
        "/v1/chat/completions",
        ALICE,
        "order-42",
        &slow_stream(),
    )
    .await;
    assert_eq!(first.status(), 200);
    let first_id = request_id(&first);
    assert_eq!(h.mock.stats.requests(), 1);
    assert_eq!(
        h.mock.stats.last_request().unwrap().headers[IDEMPOTENCY_KEY],
        "order-42",
        "the header reaches the provider unchanged"
    );

    // The first is still streaming: its repeat is refused, sent nowhere.
    let repeat = post_with_key(
        &h,
        "/v1/chat/completions",
        ALICE,
        "order-42",
        &slow_stream(),
    )
    .await;
    assert_eq!(repeat.status(), 409);
    assert_ne!(request_id(&repeat), first_id);
    let body: Value = repeat.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "idempotency_conflict");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("Idempotency-Key"), "{message}");
    assert!(message.contains("still in progress"), "{message}");
    assert_eq!(h.mock.stats.requests(), 1);

    // Anthropic callers get the refusal in their own shape.
    let messages = post_with_key(
        &h,
        "/v1/messages",
        ALICE,
        "order-42",
        &messages("claude-3-5-haiku-latest", "Hi", 16),
    )
    .await;
    assert_eq!(messages.status(), 409);
    let body: Value = messages.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(h.mock.stats.requests(), 1);

    assert!(drain(first).await.contains("data: [DONE]"));
    h.settled().await;
    assert_eq!(h.ledger().len(), 1, "the refused repeats cost nothing");

    // Finished: a repeat is forwarded again, and charged again.
    let again = post_with_key(
        &h,
        "/v1/chat/completions",
        ALICE,
        "order-42",
        &slow_stream(),
    )
    .await;
    assert_eq!(again.status(), 200);
    assert_ne!(request_id(&again), first_id);
    drain(again).await;
    h.settled().await;
    assert_eq!(h.mock.stats.requests(), 2);
    let ledger = h.ledger();
    assert_eq!(ledger.len(), 2, "{ledger:?}");
    assert_ne!(ledger[0].exec_id, ledger[1].exec_id);
    for entry in &ledger {
        assert_eq!(entry.key, "alice");
        assert!(entry.actual > 0, "{entry:?}");
        assert_eq!(entry.actual, delta(cost(&entry.model, &entry.usage)));
    }
    let spent = h.budget(ALICE).await["key"]["spent_usd_micros"]
        .as_i64()
        .unwrap();
    assert_eq!(spent, ledger[0].actual + ledger[1].actual);
}

#[tokio::test]
async fn the_same_header_under_another_gateway_key_is_another_request() {
    let h = start(Setup::default()).await;
    let alices = post_with_key(
        &h,
        "/v1/chat/completions",
        ALICE,
        "shared-7",
        &slow_stream(),
    )
    .await;
    assert_eq!(alices.status(), 200);

    let bobs = post_with_key(&h, "/v1/chat/completions", BOB, "shared-7", &slow_stream()).await;
    assert_eq!(bobs.status(), 200);
    assert_eq!(h.mock.stats.requests(), 2);
    // Another header under the same key is another request too.
    let other = post_with_key(
        &h,
        "/v1/chat/completions",
        ALICE,
        "shared-8",
        &slow_stream(),
    )
    .await;
    assert_eq!(other.status(), 200);
    assert_eq!(h.mock.stats.requests(), 3);

    drain(alices).await;
    drain(bobs).await;
    drain(other).await;
    h.settled().await;
    let mut keys: Vec<String> = h.ledger().into_iter().map(|entry| entry.key).collect();
    keys.sort();
    assert_eq!(keys, ["alice", "alice", "bob"]);
}

#[tokio::test]
async fn a_malformed_header_is_a_400_that_names_it() {
    let h = start(Setup::default()).await;
    let too_long = "k".repeat(256);
    for value in ["", "has space", "tab\there", too_long.as_str(), "caf\u{e9}"] {
        let request = h
            .client()
            .post(format!("{}/v1/chat/completions", h.url))
            .bearer_auth(ALICE)
            .header(
                IDEMPOTENCY_KEY,
                reqwest::header::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            )
            .json(&chat("gpt-4o-mini", "Hi"));
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 400, "{value:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("Idempotency-Key"), "{message}");
    }

    // Twice is ambiguous: which one names the request?
    let response = h
        .client()
        .post(format!("{}/v1/chat/completions", h.url))
        .bearer_auth(ALICE)
        .header(IDEMPOTENCY_KEY, "a")
        .header(IDEMPOTENCY_KEY, "b")
        .json(&chat("gpt-4o-mini", "Hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);

    // The longest accepted header goes through.
    let longest = "k".repeat(255);
    let response = post_with_key(
        &h,
        "/v1/chat/completions",
        ALICE,
        &longest,
        &chat("gpt-4o-mini", "Hi"),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(h.mock.stats.requests(), 1);
    h.settled().await;
    assert_eq!(h.ledger().len(), 1);
}
