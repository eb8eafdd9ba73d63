//! The routes SDKs call beside the proxied ones: one model by id
//! (`client.models.retrieve()`), and Anthropic's token counting, forwarded
//! to the provider and charged nothing.

use serde_json::{json, Value};

use crate::common::*;

async fn get_model(h: &Harness, id: &str, key: Option<&str>, anthropic: bool) -> reqwest::Response {
    let mut request = h.client().get(format!("{}/v1/models/{id}", h.url));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if anthropic {
        request = request.header("anthropic-version", "2023-06-01");
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn one_model_is_retrieved_in_the_callers_shape() {
    let h = start(Setup::default()).await;
    let response = get_model(&h, "gpt-4o-mini", Some(ALICE), false).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"id": "gpt-4o-mini", "object": "model", "created": 0, "owned_by": "openai"})
    );

    let response = get_model(&h, "claude-sonnet-4-5", Some(ALICE), true).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "model");
    assert_eq!(body["id"], "claude-sonnet-4-5");
    assert_eq!(body["display_name"], "claude-sonnet-4-5");
    assert!(body["created_at"].is_string());
}

#[tokio::test]
async fn a_model_the_key_may_not_use_is_not_found() {
    let h = start(Setup::default()).await;
    // Not on solo's allow-list.
    let response = get_model(&h, "claude-sonnet-4-5", Some(SOLO), true).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");
    // Unpriced.
    let response = get_model(&h, "gpt-nonexistent", Some(ALICE), false).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    // An id with a slash is the rest of the path, and unknown here.
    let response = get_model(&h, "org/gpt-4o-mini", Some(ALICE), false).await;
    assert_eq!(response.status(), 404);
    // Without a key.
    let response = get_model(&h, "gpt-4o-mini", None, false).await;
    assert_eq!(response.status(), 401);
}

#[tokio::test]
async fn model_lookups_share_one_metrics_label() {
    let h = start(Setup::default()).await;
    for id in ["gpt-4o-mini", "a", "b/c"] {
        get_model(&h, id, Some(ALICE), false).await;
    }
    let metrics = h
        .client()
        .get(format!("{}/metrics", h.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"tollgate_requests_total{route="/v1/models/{id}",status="200"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"tollgate_requests_total{route="/v1/models/{id}",status="404"} 2"#),
        "{metrics}"
    );
}

async fn count_tokens(h: &Harness, key: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = h
        .client()
        .post(format!("{}/v1/messages/count_tokens", h.url))
        .header("anthropic-version", "2023-06-01")
        .json(body);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.unwrap()
}

fn count_body(model: &str) -> Value {
    json!({
        "model": model,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "How many tokens is this?"}],
    })
}

#[tokio::test]
async fn tokens_are_counted_by_the_provider_and_charged_nothing() {
    let h = start(Setup::default()).await;
    let response = count_tokens(&h, Some(ALICE), &count_body("claude-sonnet-4-5")).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    // The mock counts ceil(bytes / 4) plus 3 a message: (9 + 24) / 4 → 9, + 3.
    assert_eq!(body, json!({"input_tokens": 12}));
    let seen = h.mock.stats.last_request().unwrap();
    assert_eq!(seen.path, "/v1/messages/count_tokens");
    assert_eq!(seen.headers["x-api-key"], PROVIDER_KEY);
    assert_eq!(seen.body, count_body("claude-sonnet-4-5"));
    assert!(h.ledger().is_empty());
    let budget = h.budget(ALICE).await;
    assert_eq!(budget["key"]["spent_usd_micros"], 0);
    assert_eq!(budget["key"]["reserved_usd_micros"], 0);
}

#[tokio::test]
async fn token_counting_is_checked_like_a_call() {
    let h = start(Setup::default()).await;
    let body = count_body("claude-sonnet-4-5");
    let response = count_tokens(&h, None, &body).await;
    assert_eq!(response.status(), 401);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "authentication_error");
    let response = count_tokens(&h, Some(SOLO), &body).await;
    assert_eq!(response.status(), 403);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "permission_error");
    // An OpenAI model has no token counting route.
    let response = count_tokens(&h, Some(ALICE), &count_body("gpt-4o-mini")).await;
    assert_eq!(response.status(), 400);
    // A key named twice could be read two ways.
    let response = h
        .client()
        .post(format!("{}/v1/messages/count_tokens", h.url))
        .header("x-api-key", ALICE)
        .header("content-type", "application/json")
        .body(r#"{"model":"claude-sonnet-4-5","model":"claude-opus-4-1","messages":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(h.mock.stats.requests(), 0);
    assert!(h.ledger().is_empty());
}
