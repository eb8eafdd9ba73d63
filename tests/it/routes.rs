//! Every proxied route, streaming and not, through the real server to the
//! mock provider: the response reaches the client intact, the provider sees
//! the provider's credential (never the client's key), and exactly what the
//! provider reported is charged, settled before the client sees the end.

use futures_util::StreamExt;
use serde_json::{json, Value};
use tollgate::budget::LedgerStatus;
use tollgate::usage::Usage;

use crate::common::*;

fn check_forwarded_credential(h: &Harness) {
    let request = h.mock.stats.last_request().unwrap();
    let auth = request
        .headers
        .get("authorization")
        .or_else(|| request.headers.get("x-api-key"))
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(auth.ends_with(PROVIDER_KEY), "{auth}");
    assert!(!auth.contains(ALICE));
}

#[tokio::test]
async fn chat_completion_is_charged_what_the_provider_reported() {
    let h = start(Setup::default()).await;
    let response = h
        .post(
            "/v1/chat/completions",
            ALICE,
            &chat("gpt-4o-mini", "Say hello mock:tokens=9"),
        )
        .await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    let body: Value = response.json().await.unwrap();
    let usage = &body["usage"];
    assert_eq!(usage["completion_tokens"], 9);
    let expected = Usage {
        input: usage["prompt_tokens"].as_u64().unwrap(),
        output: 9,
        ..Usage::default()
    };
    let entry = only_entry(&h);
    assert_eq!(entry.usage, expected);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(
        headers["x-tollgate-cost-usd-micros"].to_str().unwrap(),
        entry.actual.to_string()
    );
    let budget = h.budget(ALICE).await;
    assert_eq!(
        budget["key"]["spent_usd_micros"].as_i64().unwrap(),
        entry.actual
    );
    assert_eq!(budget["key"]["reserved_usd_micros"], 0);
    assert_eq!(
        headers["x-tollgate-budget-remaining-usd-micros"]
            .to_str()
            .unwrap(),
        budget["key"]["remaining_usd_micros"].to_string()
    );
    assert!(headers.contains_key("x-tollgate-request-id"));
    assert_eq!(
        budget["org"]["spent_usd_micros"].as_i64().unwrap(),
        entry.actual
    );
    check_forwarded_credential(&h);
    // The gateway bounded the call for the provider.
    let forwarded = h.mock.stats.last_request().unwrap().body;
    assert!(forwarded["max_completion_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn cached_tokens_are_priced_as_cached() {
    let h = start(Setup::default()).await;
    let text = "word ".repeat(300) + "mock:cached=128";
    let response = h
        .post("/v1/chat/completions", ALICE, &chat("gpt-4o-mini", &text))
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let prompt = body["usage"]["prompt_tokens"].as_u64().unwrap();
    let entry = only_entry(&h);
    assert_eq!(entry.usage.cached_input, 128);
    assert_eq!(entry.usage.input, prompt - 128);
}

/// Reads an SSE response to the end, returning its raw text, and checks
/// that when the terminal event arrived the call was already settled.
async fn read_stream(h: &Harness, response: reqwest::Response, terminal: &str) -> String {
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut text = String::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = String::from_utf8(chunk.unwrap().to_vec()).unwrap();
        if chunk.contains(terminal) {
            assert_eq!(
                h.store.open_reservations().0,
                0,
                "terminal event sent before settling"
            );
            assert_eq!(h.ledger().len(), 1);
        }
        text.push_str(&chunk);
    }
    assert!(text.contains(terminal), "no terminal event in {text}");
    text
}

fn data_events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

#[tokio::test]
async fn chat_stream_without_usage_request_hides_the_injected_usage_chunk() {
    let h = start(Setup::default()).await;
    let mut body = chat("gpt-4o-mini", "Stream please mock:tokens=7");
    body["stream"] = json!(true);
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    let text = read_stream(&h, response, "data: [DONE]").await;
    let events = data_events(&text);
    assert!(
        events
            .iter()
            .all(|e| e["choices"].as_array().is_some_and(|c| !c.is_empty())),
        "usage chunk leaked: {text}"
    );
    let content: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content.split_whitespace().count(), 7, "{content}");
    let entry = only_entry(&h);
    assert_eq!(entry.usage.output, 7);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(
        h.mock.stats.last_request().unwrap().body["stream_options"]["include_usage"],
        true
    );
}

#[tokio::test]
async fn chat_stream_with_usage_request_delivers_the_usage_it_charged() {
    let h = start(Setup::default()).await;
    let mut body = chat("gpt-4o-mini", "Stream please mock:tokens=5");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    let text = read_stream(&h, response, "data: [DONE]").await;
    let usage = data_events(&text)
        .into_iter()
        .find(|e| e["usage"].is_object())
        .expect("usage chunk");
    let entry = only_entry(&h);
    assert_eq!(
        entry.usage.output,
        usage["usage"]["completion_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        entry.usage.input,
        usage["usage"]["prompt_tokens"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn responses_route_streaming_and_not() {
    let h = start(Setup::default()).await;
    let body = json!({"model": "gpt-4o-mini", "input": "Tell me mock:tokens=6", "instructions": "Be brief."});
    let response = h.post("/v1/responses", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.unwrap();
    assert_eq!(reply["usage"]["output_tokens"], 6);
    let entry = only_entry(&h);
    assert_eq!(
        entry.usage.input,
        reply["usage"]["input_tokens"].as_u64().unwrap()
    );
    assert!(
        h.mock.stats.last_request().unwrap().body["max_output_tokens"]
            .as_u64()
            .is_some()
    );

    let h = start(Setup::default()).await;
    let mut body = body;
    body["stream"] = json!(true);
    let response = h.post("/v1/responses", ALICE, &body).await;
    let text = read_stream(&h, response, "response.completed").await;
    let completed = data_events(&text)
        .into_iter()
        .find(|e| e["type"] == "response.completed")
        .unwrap();
    let entry = only_entry(&h);
    assert_eq!(
        entry.usage.output,
        completed["response"]["usage"]["output_tokens"]
            .as_u64()
            .unwrap()
    );
    assert_eq!(entry.usage.output, 6);
}

#[tokio::test]
async fn embeddings_charge_input_only() {
    let h = start(Setup::default()).await;
    let body =
        json!({"model": "text-embedding-3-small", "input": ["one line", "and another line"]});
    let response = h.post("/v1/embeddings", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.unwrap();
    assert_eq!(reply["data"].as_array().unwrap().len(), 2);
    let entry = only_entry(&h);
    assert_eq!(
        entry.usage.input,
        reply["usage"]["prompt_tokens"].as_u64().unwrap()
    );
    assert_eq!(entry.usage.output, 0);
    assert!(entry.actual > 0);
}

#[tokio::test]
async fn anthropic_messages_streaming_and_not() {
    let h = start(Setup::default()).await;
    let body = messages(
        "claude-haiku-4-5",
        "Hello mock:tokens=8 mock:cached=3 mock:cache_write=2",
        100,
    );
    let response = h.post("/v1/messages", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.unwrap();
    let entry = only_entry(&h);
    assert_eq!(
        entry.usage,
        Usage {
            input: reply["usage"]["input_tokens"].as_u64().unwrap(),
            cached_input: 3,
            cache_write: 2,
            output: 8,
            ..Usage::default()
        }
    );
    check_forwarded_credential(&h);
    let forwarded = h.mock.stats.last_request().unwrap();
    assert!(forwarded.headers.contains_key("anthropic-version"));

    let h = start(Setup::default()).await;
    let mut body = messages("claude-haiku-4-5", "Hello mock:tokens=11", 100);
    body["stream"] = json!(true);
    let response = h.post("/v1/messages", ALICE, &body).await;
    let text = read_stream(&h, response, "message_stop").await;
    let delta = data_events(&text)
        .into_iter()
        .rev()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    let entry = only_entry(&h);
    assert_eq!(
        entry.usage.output,
        delta["usage"]["output_tokens"].as_u64().unwrap()
    );
    assert_eq!(entry.usage.output, 11);
}

#[tokio::test]
async fn anthropic_request_without_max_tokens_is_refused_as_anthropic_would() {
    let h = start(Setup::default()).await;
    let body =
        json!({"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "hi"}]});
    let response = h.post("/v1/messages", ALICE, &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens"),
        "{error}"
    );
    assert!(
        h.mock.stats.last_request().is_none(),
        "nothing is forwarded"
    );
    assert!(h.ledger().is_empty(), "nothing is charged");
}

#[tokio::test]
async fn models_and_budget_routes() {
    let h = start(Setup::default()).await;
    let response = h
        .client()
        .get(format!("{}/v1/models", h.url))
        .bearer_auth(SOLO)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let models: Value = response.json().await.unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["gpt-4o-mini"], "solo may use only gpt-4o-mini");

    let response = h
        .client()
        .get(format!("{}/v1/models", h.url))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    let models: Value = response.json().await.unwrap();
    assert!(models["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "claude-haiku-4-5" && m["type"] == "model"));

    let budget = h.budget(SOLO).await;
    assert_eq!(budget["org"], Value::Null);
    assert_eq!(budget["key"]["period"], "total");
    assert_eq!(budget["key"]["resets_at"], Value::Null);
    assert_eq!(budget["key"]["cap_usd_micros"], 1_000_000);
    let budget = h.budget(ALICE).await;
    assert_eq!(budget["key"]["period"], "day");
    assert_eq!(budget["org"]["id"], "acme");
    assert_eq!(budget["org"]["remaining_usd_micros"], 100_000_000);
    assert!(budget["key"]["resets_at"]
        .as_str()
        .unwrap()
        .ends_with("T00:00:00Z"));

    let health = h
        .client()
        .get(format!("{}/healthz", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = h
        .client()
        .get(format!("{}/readyz", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn client_account_headers_do_not_reach_the_provider() {
    let h = start(Setup::default()).await;
    let response = h
        .client()
        .post(format!("{}/v1/chat/completions", h.url))
        .bearer_auth(ALICE)
        .header("openai-organization", "org-client")
        .header("openai-project", "proj-client")
        .header("x-custom-trace", "kept")
        .json(&chat("gpt-4o-mini", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let forwarded = h.mock.stats.last_request().unwrap().headers;
    assert!(!forwarded.contains_key("openai-organization"));
    assert!(!forwarded.contains_key("openai-project"));
    assert_eq!(forwarded["x-custom-trace"], "kept");
    assert_eq!(forwarded["accept-encoding"], "identity");
}
