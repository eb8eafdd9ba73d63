//! Options billed at other rates than a model's standard ones — OpenAI's
//! priority tier, Anthropic's hour-long cache writes and long context —
//! are reserved at their rates and charged exactly what the usage the
//! provider reports implies; for a model whose price entry lacks them
//! they are refused before anything is forwarded or charged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tollgate::budget::LedgerStatus;
use tollgate::usage::{ServiceTier, Usage};

/// The call's only ledger entry, checked to be charged `expected` exactly
/// (the ledger keeps the token counts, not the rates they were billed at).
async fn charged_exactly(h: &Harness, expected: u64) -> tollgate::budget::LedgerEntry {
    h.settled().await;
    let ledger = h.ledger();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    let entry = ledger.into_iter().next().unwrap();
    assert_eq!(entry.status, LedgerStatus::Ok, "{entry:?}");
    assert_eq!(entry.actual, i64::try_from(expected).unwrap(), "{entry:?}");
    assert!(entry.reserved >= expected, "{entry:?}");
    entry
}

#[tokio::test]
async fn priority_is_reserved_and_charged_at_its_rates() {
    for (stream, downgrade) in [(false, false), (true, false), (false, true)] {
        let h = start(Setup::default()).await;
        let text = if downgrade {
            "hello mock:cached=4 mock:downgrade=1"
        } else {
            "hello mock:cached=4"
        };
        let mut body = chat("gpt-4o-mini", text);
        body["service_tier"] = "priority".into();
        body["max_tokens"] = 40.into();
        body["stream"] = stream.into();
        let response = h.post("/v1/chat/completions", ALICE, &body).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.bytes().await.unwrap();
        let billed = billed_by(&h.mock.stats);
        let tier = if downgrade {
            ServiceTier::Standard
        } else {
            ServiceTier::Priority
        };
        let usage = Usage {
            service_tier: Some(tier),
            ..billed
        };
        let expected = cost("gpt-4o-mini", &usage);
        let entry = charged_exactly(&h, expected).await;
        assert_eq!(entry.usage, billed);
        let standard = cost("gpt-4o-mini", &billed);
        if downgrade {
            assert_eq!(expected, standard);
        } else {
            assert!(expected > standard, "{expected} > {standard}");
        }
        // The reservation bounds the output at priority rates: 40 tokens
        // at $1/Mtok is 40 µUSD on its own.
        assert!(entry.reserved >= 40, "{entry:?}");
    }
}

#[tokio::test]
async fn priority_on_the_responses_route_is_charged_at_its_rates() {
    let h = start(Setup::default()).await;
    let body = json!({"model": "gpt-4o-mini", "input": "hello", "service_tier": "priority",
        "max_output_tokens": 20});
    let response = h.post("/v1/responses", ALICE, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.bytes().await.unwrap();
    let usage = Usage {
        service_tier: Some(ServiceTier::Priority),
        ..billed_by(&h.mock.stats)
    };
    charged_exactly(&h, cost("gpt-4o-mini", &usage)).await;
}

fn hour_cached(model: &str, text: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 50,
        "system": [{"type": "text", "text": "You are terse.",
                    "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": text}],
    })
}

#[tokio::test]
async fn hour_long_cache_writes_are_charged_at_their_rate() {
    for stream in [false, true] {
        let h = start(Setup::default()).await;
        let mut body = hour_cached("claude-sonnet-4-5", "hello there mock:cache_write=6");
        body["stream"] = stream.into();
        let response = h.post("/v1/messages", ALICE, &body).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.bytes().await.unwrap();
        let billed = h.mock.stats.billed();
        assert_eq!((billed.cache_write, billed.cache_write_1h), (6, 6));
        let usage = Usage {
            cache_write_1h: Some(billed.cache_write_1h),
            ..billed_by(&h.mock.stats)
        };
        let expected = cost("claude-sonnet-4-5", &usage);
        // 6 writes at $6 rather than $3.75/Mtok.
        assert!(expected > cost("claude-sonnet-4-5", &billed_by(&h.mock.stats)));
        charged_exactly(&h, expected).await;
    }
}

#[tokio::test]
async fn long_context_is_charged_at_its_rates_past_the_threshold() {
    let h = start(Setup {
        alice_cap: "50.00",
        ..Setup::default()
    })
    .await;
    // About 220,000 input tokens as the mock counts them (4 bytes each).
    let text = format!("{} mock:tokens=10", "word ".repeat(176_000));
    let body = messages("claude-sonnet-4-5", &text, 100);
    let response = h
        .client()
        .post(format!("{}/v1/messages", h.url))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "context-1m-2025-08-07")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.bytes().await.unwrap();
    let billed = billed_by(&h.mock.stats);
    assert!(billed.total_input() > 200_000, "{billed:?}");
    // Every input token at $6 and output at $22.50 per Mtok.
    let expected = (billed.input * 6_000_000 + billed.output * 22_500_000).div_ceil(1_000_000);
    assert_eq!(cost("claude-sonnet-4-5", &billed), expected);
    charged_exactly(&h, expected).await;
}

#[tokio::test]
async fn an_unpriced_option_is_refused_in_the_callers_shape() {
    let h = start(Setup::default()).await;
    let refusals = [
        (
            "/v1/embeddings",
            json!({"model": "text-embedding-3-small", "input": "x", "service_tier": "priority"}),
            None,
            "priority_input_per_mtok",
        ),
        (
            "/v1/messages",
            hour_cached("claude-3-5-haiku-latest", "hello"),
            None,
            "cache_write_1h_per_mtok",
        ),
        (
            "/v1/messages",
            messages("claude-haiku-4-5", "hello", 10),
            Some("context-1m-2025-08-07"),
            "long_context_input_per_mtok",
        ),
    ];
    for (path, body, beta, field) in refusals {
        let mut request = h.client().post(format!("{}{path}", h.url)).json(&body);
        request = if path == "/v1/messages" {
            request
                .header("x-api-key", ALICE)
                .header("anthropic-version", "2023-06-01")
        } else {
            request.bearer_auth(ALICE)
        };
        if let Some(beta) = beta {
            request = request.header("anthropic-beta", beta);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{field}");
        let error: Value = response.json().await.unwrap();
        let message = if path == "/v1/messages" {
            assert_eq!(error["type"], "error", "{error}");
            assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
            error["error"]["message"].as_str().unwrap().to_owned()
        } else {
            assert_eq!(error["error"]["code"], "option_not_priced", "{error}");
            assert_eq!(error["error"]["param"], "service_tier", "{error}");
            error["error"]["message"].as_str().unwrap().to_owned()
        };
        assert!(message.contains(field), "{message}");
    }
    assert_eq!(h.mock.stats.requests(), 0, "nothing was forwarded");
    h.settled().await;
    assert!(h.ledger().is_empty(), "nothing was charged");
    assert_eq!(spent(&h, ALICE).await, 0);
}

#[tokio::test]
async fn an_unpriced_model_says_how_to_price_it() {
    let h = start(Setup::default()).await;
    let response = h
        .post(
            "/v1/chat/completions",
            ALICE,
            &chat("gpt-nonexistent", "hi"),
        )
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let error: Value = response.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("tollgate prices import"), "{message}");
    assert_eq!(h.mock.stats.requests(), 0);
}
