//! Model groups and rate limits through the real server: a group's cap
//! refuses its models with a 402 naming the group, and lets other models
//! through; a key's `rpm` and `tpm` answer 429 with `retry-after` and
//! OpenAI-style `x-ratelimit-*` headers, which every response of a key
//! with limits carries; nothing refused is forwarded or charged.

use std::time::Duration;

use chrono::{Timelike, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::*;

fn limited(model: &str, max_tokens: u64) -> Value {
    let mut body = chat(model, "Say hello to the rate limiter.");
    body["max_tokens"] = json!(max_tokens);
    body
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|value| value.to_str().unwrap().to_owned())
}

/// Waits, if need be, until at least 10 s of the current minute are left:
/// a rate limit's window is the calendar minute, and a test's calls must
/// fall in one.
async fn early_in_a_minute() {
    let second = Utc::now().second();
    if second >= 50 {
        tokio::time::sleep(Duration::from_secs(u64::from(61 - second))).await;
    }
}

#[tokio::test]
async fn a_model_group_refuses_its_models_and_names_itself() {
    let h = start(Setup {
        alice_extra: r#"model_caps = [{ name = "mini", models = ["gpt-4o-mini*"], cap_usd = "0.000001", period = "day" }]"#,
        ..Setup::default()
    })
    .await;
    let refused = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 50))
        .await;
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(header(&refused, "x-should-retry").as_deref(), Some("false"));
    let error = refused.json::<Value>().await.unwrap()["error"].clone();
    assert_eq!(error["type"], "insufficient_quota");
    assert_eq!(error["code"], "budget_exceeded");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("model cap `mini` of key `alice`"),
        "{message}"
    );
    assert_eq!(h.mock.stats.requests(), 0, "nothing forwarded");
    assert_eq!(spent(&h, ALICE).await, 0);

    // Another model is outside the group: the key's own cap holds it.
    let other = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o", 50))
        .await;
    assert_eq!(other.status(), StatusCode::OK);
    other.bytes().await.unwrap();
    h.settled().await;
    assert_eq!(spent(&h, ALICE).await, only_entry(&h).actual as u64);
    // Bob has no groups: the same model goes through.
    let bob = h
        .post("/v1/chat/completions", BOB, &limited("gpt-4o-mini", 50))
        .await;
    assert_eq!(bob.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_rpm_limit_answers_429_with_retry_after_and_the_headers() {
    let h = start(Setup {
        alice_extra: "rpm = 2",
        ..Setup::default()
    })
    .await;
    early_in_a_minute().await;
    for remaining in ["1", "0"] {
        let response = h
            .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 20))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            header(&response, "x-ratelimit-limit-requests").as_deref(),
            Some("2")
        );
        assert_eq!(
            header(&response, "x-ratelimit-remaining-requests").as_deref(),
            Some(remaining)
        );
        let reset = header(&response, "x-ratelimit-reset-requests").unwrap();
        let secs: u64 = reset.trim_end_matches('s').parse().unwrap();
        assert!((1..=60).contains(&secs), "{reset}");
        response.bytes().await.unwrap();
    }
    let refused = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 20))
        .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(header(&refused, "x-should-retry"), None);
    assert_eq!(
        header(&refused, "x-ratelimit-remaining-requests").as_deref(),
        Some("0")
    );
    let error = refused.json::<Value>().await.unwrap()["error"].clone();
    assert_eq!(error["type"], "rate_limit_exceeded");
    assert_eq!(error["code"], "rate_limited");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("key `alice`") && message.contains("2 requests per minute"),
        "{message}"
    );
    // Anthropic's shape for its own route.
    let anthropic = h
        .client()
        .post(format!("{}/v1/messages", h.url))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .json(&messages("claude-haiku-4-5", "hi", 20))
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.status(), StatusCode::TOO_MANY_REQUESTS);
    let body = anthropic.json::<Value>().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    // Only the two admitted calls reached the provider and were charged.
    h.settled().await;
    assert_eq!(h.mock.stats.requests(), 2);
    assert_eq!(h.ledger().len(), 2);
    // A key without limits is told nothing of them.
    let bob = h
        .post("/v1/chat/completions", BOB, &limited("gpt-4o-mini", 20))
        .await;
    assert_eq!(bob.status(), StatusCode::OK);
    assert_eq!(header(&bob, "x-ratelimit-limit-requests"), None);
}

#[tokio::test]
async fn a_call_that_fails_after_its_reserve_still_states_the_limits() {
    // The provider refuses every connection.
    let (_socket, closed) = refusing_port();
    let h = start(Setup {
        alice_extra: "rpm = 3",
        openai_base_url: Some(format!("http://{closed}")),
        ..Setup::default()
    })
    .await;
    early_in_a_minute().await;
    let response = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 20))
        .await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(
        header(&response, "x-ratelimit-limit-requests").as_deref(),
        Some("3")
    );
    assert_eq!(
        header(&response, "x-ratelimit-remaining-requests").as_deref(),
        Some("2")
    );
    assert!(header(&response, "x-ratelimit-reset-requests").is_some());
}

#[tokio::test]
async fn a_tpm_limit_refuses_a_call_whose_bound_does_not_fit() {
    let h = start(Setup {
        alice_extra: "tpm = 300",
        ..Setup::default()
    })
    .await;
    early_in_a_minute().await;
    let refused = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 500))
        .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&refused, "x-ratelimit-limit-tokens").as_deref(),
        Some("300")
    );
    let error = refused.json::<Value>().await.unwrap()["error"].clone();
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("300 tokens per minute"), "{message}");
    assert_eq!(h.mock.stats.requests(), 0);

    // A smaller output limit fits; the tokens it did not use come back.
    let fits = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 100))
        .await;
    assert_eq!(fits.status(), StatusCode::OK);
    let remaining: u64 = header(&fits, "x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!(remaining < 200, "the bound is held: {remaining}");
    fits.bytes().await.unwrap();
    h.settled().await;
    let next = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 100))
        .await;
    assert_eq!(next.status(), StatusCode::OK);
    let after: u64 = header(&next, "x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    let entry = &h.ledger()[0];
    let used = entry.usage.input + entry.usage.output;
    assert_eq!(
        after,
        remaining - used,
        "settled to the usage ({used} tokens)"
    );
}

#[tokio::test]
async fn each_customer_of_a_key_has_the_templates_cap() {
    let h = start(Setup {
        alice_extra: r#"customer_cap_usd = "0.000500"
customer_period = "day"
customer_rpm = 100"#,
        ..Setup::default()
    })
    .await;
    let call = |customer: &'static str, max_tokens: u64| {
        h.client()
            .post(format!("{}/v1/chat/completions", h.url))
            .bearer_auth(ALICE)
            .header("x-tollgate-customer", customer)
            .json(&limited("gpt-4o-mini", max_tokens))
            .send()
    };
    // One customer spends its cap; another still has its own whole.
    let mut spent_by_c1 = 0;
    loop {
        let response = call("c1@example.com", 200).await.unwrap();
        if response.status() == StatusCode::PAYMENT_REQUIRED {
            let error = response.json::<Value>().await.unwrap()["error"].clone();
            let message = error["message"].as_str().unwrap();
            assert!(
                message.contains("customer `c1@example.com` of key `alice`"),
                "{message}"
            );
            break;
        }
        assert_eq!(response.status(), StatusCode::OK);
        spent_by_c1 += response.headers()["x-tollgate-cost-usd-micros"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap();
        response.bytes().await.unwrap();
        assert!(spent_by_c1 <= 500, "the customer spent past its cap");
    }
    assert!(spent_by_c1 > 0);
    let other = call("c2", 200).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    // The header never reaches the provider.
    let seen = h.mock.stats.last_request().unwrap();
    assert!(
        !seen
            .headers
            .keys()
            .any(|name| name.as_str().starts_with("x-tollgate-")),
        "{:?}",
        seen.headers
    );
    // A call naming no customer is the key's alone.
    let plain = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 200))
        .await;
    assert_eq!(plain.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_key_may_take_its_customer_from_the_body_and_require_one() {
    let h = start(Setup {
        alice_extra: r#"customer_cap_usd = "0.000001"
customer_period = "month"
customer_from = "body"
customer_required = true"#,
        ..Setup::default()
    })
    .await;
    // No customer anywhere: 400 customer_required, nothing forwarded.
    let none = h
        .post("/v1/chat/completions", ALICE, &limited("gpt-4o-mini", 20))
        .await;
    assert_eq!(none.status(), StatusCode::BAD_REQUEST);
    let error = none.json::<Value>().await.unwrap()["error"].clone();
    assert_eq!(error["code"], "customer_required");
    // OpenAI's `user` names it: its cap (1 µUSD) refuses the call, naming it.
    let mut body = limited("gpt-4o-mini", 20);
    body["user"] = json!("end-user-7");
    let named = h.post("/v1/chat/completions", ALICE, &body).await;
    assert_eq!(named.status(), StatusCode::PAYMENT_REQUIRED);
    let message = named.json::<Value>().await.unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("customer `end-user-7`"), "{message}");
    // Anthropic's `metadata.user_id`, in Anthropic's shape.
    let mut body = messages("claude-haiku-4-5", "hi", 20);
    body["metadata"] = json!({"user_id": "end-user-8"});
    let anthropic = h
        .client()
        .post(format!("{}/v1/messages", h.url))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.status(), StatusCode::PAYMENT_REQUIRED);
    let body = anthropic.json::<Value>().await.unwrap();
    assert_eq!(body["error"]["type"], "billing_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("customer `end-user-8`"),
        "{body}"
    );
    // A malformed id: 400 naming the field.
    let mut body = limited("gpt-4o-mini", 20);
    body["user"] = json!("has spaces");
    let bad = h.post("/v1/chat/completions", ALICE, &body).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let error = bad.json::<Value>().await.unwrap()["error"].clone();
    assert_eq!(
        (error["code"].as_str(), error["param"].as_str()),
        (Some("invalid_customer"), Some("user"))
    );
    assert_eq!(h.mock.stats.requests(), 0, "nothing forwarded");
    assert_eq!(spent(&h, ALICE).await, 0);
}
