//! The routes SDKs call beside the proxied ones: one model by id
//! (`client.models.retrieve()`), and Anthropic's token counting, forwarded
//! to the provider and charged nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::{json, Value};

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
