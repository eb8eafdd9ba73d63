//! A provider must read the request the gateway priced. Each case sends
//! what an adversarial client would to a provider that parses and honours
//! limits the way real OpenAI-compatible servers do, and checks that the
//! key is charged at least what that provider billed, that nothing is
//! forwarded or charged when the gateway refuses, and that the books
//! balance (every reservation settled, spent = Σ ledger).

use serde_json::{json, Value};

use crate::common::*;

/// Checks that the key's books balance and returns what it spent.
async fn balanced(h: &Harness, key: &str) -> u64 {
    h.settled().await;
    let budget = h.budget(key).await;
    assert_eq!(budget["key"]["reserved_usd_micros"], 0, "{budget}");
    let spent = budget["key"]["spent_usd_micros"].as_u64().unwrap();
    let ledger: i64 = h.ledger().iter().map(|entry| entry.actual).sum();
    assert_eq!(delta(spent), ledger, "spent must equal the ledger");
    spent
}

/// Sends raw bytes, so a body can say what `serde_json` would never write.
async fn post_bytes(h: &Harness, path: &str, body: &str) -> reqwest::Response {
    h.client()
        .post(format!("{}{path}", h.url))
        .bearer_auth(ALICE)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// A refusal: 400 in OpenAI's shape, nothing forwarded, nothing charged.
async fn refused(h: &Harness, response: reqwest::Response) -> Value {
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert!(
        h.mock.stats.last_request().is_none(),
        "nothing is forwarded"
    );
    assert!(h.ledger().is_empty(), "nothing is charged");
    assert_eq!(balanced(h, ALICE).await, 0);
    error
}

/// The output tokens the provider billed for the last call.
fn billed_output(h: &Harness) -> u64 {
    let entry = h.ledger().pop().unwrap();
    assert!(
        entry.actual <= delta(entry.reserved),
        "an overrun: {entry:?}"
    );
    entry.usage.output
}

#[tokio::test]
async fn two_limit_fields_that_disagree_are_refused() {
    let h = start(Setup::default()).await;
    let mut body = chat("gpt-4o-mini", "mock:tokens=2000");
    body["max_tokens"] = json!(5);
    body["max_completion_tokens"] = json!(2000);
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    let error = refused(&h, response).await;
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("disagree"),
        "{error}"
    );
}

#[tokio::test]
async fn the_limit_reaches_a_provider_that_reads_only_the_other_field() {
    let mut setup = Setup::default();
    setup.mock.chat_limit_field = Some("max_completion_tokens".to_owned());
    let h = start(setup).await;
    let mut body = chat("gpt-4o-mini", "mock:tokens=2000");
    body["max_tokens"] = json!(5);
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let forwarded = h.mock.stats.last_request().unwrap().body;
    assert_eq!(forwarded["max_completion_tokens"], 5, "{forwarded}");
    assert!(forwarded.get("max_tokens").is_none(), "{forwarded}");
    assert_eq!(billed_output(&h), 5);
    balanced(&h, ALICE).await;
}

#[tokio::test]
async fn the_injected_limit_goes_where_the_provider_reads_it() {
    let mut setup = Setup::default();
    setup.mock.chat_limit_field = Some("max_tokens".to_owned());
    setup.openai_provider_extra = r#"output_limit_fields = ["max_tokens"]"#;
    let h = start(setup).await;
    let max_output = prices()
        .get("gpt-4o-mini")
        .unwrap()
        .max_output_tokens
        .unwrap();
    let body = chat("gpt-4o-mini", &format!("mock:tokens={}", max_output * 2));
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let forwarded = h.mock.stats.last_request().unwrap().body;
    assert_eq!(forwarded["max_tokens"], max_output, "{forwarded}");
    assert!(forwarded.get("max_completion_tokens").is_none());
    assert_eq!(billed_output(&h), max_output);
    balanced(&h, ALICE).await;
}

#[tokio::test]
async fn a_key_sent_twice_is_refused_before_anything_is_sent() {
    let h = start(Setup::default()).await;
    for body in [
        // A first-wins parser would read `gpt-4o`, priced far above.
        r#"{"model":"gpt-4o-mini","model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"gpt-4o-mini","max_completion_tokens":2000,"max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"gpt-4o-mini","service_tier":"priority","service_tier":"default","messages":[{"role":"user","content":"hi"}]}"#,
    ] {
        let response = post_bytes(&h, "/v1/chat/completions", body).await;
        let error = refused(&h, response).await;
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("appears twice"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn background_responses_are_refused() {
    let h = start(Setup::default()).await;
    let body = json!({"model": "gpt-4o-mini", "input": "hi", "background": true, "stream": true});
    let response = h.post("/v1/responses", ALICE, &body).await;
    let error = refused(&h, response).await;
    assert_eq!(error["error"]["code"], "background_not_supported");
    assert_eq!(error["error"]["param"], "background");
}

#[tokio::test]
async fn variants_of_refused_options_are_refused() {
    let h = start(Setup::default()).await;
    // A refused beta behind a byte that is not a token character.
    let response = h
        .client()
        .post(format!("{}/v1/messages", h.url))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .header(
            "anthropic-beta",
            reqwest::header::HeaderValue::from_bytes(b"context-1m-2025-08-07\xa0").unwrap(),
        )
        .json(&messages("claude-haiku-4-5", "hi", 16))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");

    // The 1-hour cache asked for at the top level of the body.
    let mut body = messages("claude-3-5-haiku-latest", "hi", 16);
    body["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    let response = h.post("/v1/messages", ALICE, &body).await;
    assert_eq!(response.status(), 400);

    // An unpriced tier in another spelling.
    let mut body = chat("gpt-5-nano", "hi");
    body["service_tier"] = json!(" Priority");
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    refused(&h, response).await;
}

#[tokio::test]
async fn an_anthropic_thinking_budget_is_reserved_in_full() {
    let h = start(Setup::default()).await;
    let mut body = messages("claude-haiku-4-5", "mock:tokens=10", 100);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 3000});
    let response = h.post("/v1/messages", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let entry = h.ledger().pop().unwrap();
    let price = prices().get("claude-haiku-4-5").unwrap().clone();
    let thinking_bound = cost(
        "claude-haiku-4-5",
        &tollgate::usage::Usage {
            output: 3000,
            ..Default::default()
        },
    );
    assert!(
        entry.reserved >= thinking_bound,
        "reserved {} < the cost of the thinking budget {thinking_bound} ({price:?})",
        entry.reserved
    );
    balanced(&h, ALICE).await;
}
