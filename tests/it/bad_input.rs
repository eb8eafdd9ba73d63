//! Bad input gets its specified status and a body in the caller's API shape
//! that says what to fix, costs nothing, and forwards nothing.

use serde_json::{json, Value};

use crate::common::*;

struct Case {
    name: &'static str,
    path: &'static str,
    key: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    /// OpenAI `error.code` / `error.param`, or Anthropic `error.type`.
    expect: Expect,
}

enum Expect {
    OpenAi {
        code: Option<&'static str>,
        param: Option<&'static str>,
    },
    Anthropic {
        kind: &'static str,
    },
}

fn json_body(value: Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

fn cases() -> Vec<Case> {
    let chat_ok = chat("gpt-4o-mini", "hi");
    vec![
        Case {
            name: "missing key",
            path: "/v1/chat/completions",
            key: None,
            body: json_body(chat_ok.clone()),
            status: 401,
            expect: Expect::OpenAi {
                code: Some("missing_api_key"),
                param: None,
            },
        },
        Case {
            name: "wrong key",
            path: "/v1/chat/completions",
            key: Some("tg-nobody"),
            body: json_body(chat_ok.clone()),
            status: 401,
            expect: Expect::OpenAi {
                code: Some("invalid_api_key"),
                param: None,
            },
        },
        Case {
            name: "wrong key, anthropic",
            path: "/v1/messages",
            key: Some("tg-nobody"),
            body: json_body(messages("claude-haiku-4-5", "hi", 5)),
            status: 401,
            expect: Expect::Anthropic {
                kind: "authentication_error",
            },
        },
        Case {
            name: "bad JSON",
            path: "/v1/chat/completions",
            key: Some(ALICE),
            body: b"{\"model\": \"gpt-4o-mini\", ".to_vec(),
            status: 400,
            expect: Expect::OpenAi {
                code: None,
                param: None,
            },
        },
        Case {
            name: "bad JSON, anthropic",
            path: "/v1/messages",
            key: Some(ALICE),
            body: b"not json".to_vec(),
            status: 400,
            expect: Expect::Anthropic {
                kind: "invalid_request_error",
            },
        },
        Case {
            name: "missing model",
            path: "/v1/chat/completions",
            key: Some(ALICE),
            body: json_body(json!({"messages": [{"role": "user", "content": "hi"}]})),
            status: 400,
            expect: Expect::OpenAi {
                code: None,
                param: Some("model"),
            },
        },
        Case {
            name: "missing messages",
            path: "/v1/messages",
            key: Some(ALICE),
            body: json_body(json!({"model": "claude-haiku-4-5", "max_tokens": 5})),
            status: 400,
            expect: Expect::Anthropic {
                kind: "invalid_request_error",
            },
        },
        Case {
            name: "negative max_tokens",
            path: "/v1/chat/completions",
            key: Some(ALICE),
            body: json_body(
                json!({"model": "gpt-4o-mini", "max_tokens": -5, "messages": [{"role": "user", "content": "hi"}]}),
            ),
            status: 400,
            expect: Expect::OpenAi {
                code: None,
                param: Some("max_tokens"),
            },
        },
        Case {
            name: "negative n",
            path: "/v1/chat/completions",
            key: Some(ALICE),
            body: json_body(
                json!({"model": "gpt-4o-mini", "n": -1, "messages": [{"role": "user", "content": "hi"}]}),
            ),
            status: 400,
            expect: Expect::OpenAi {
                code: None,
                param: Some("n"),
            },
        },
        Case {
            name: "negative max_output_tokens",
            path: "/v1/responses",
            key: Some(ALICE),
            body: json_body(
                json!({"model": "gpt-4o-mini", "input": "hi", "max_output_tokens": -1}),
            ),
            status: 400,
            expect: Expect::OpenAi {
                code: None,
                param: Some("max_output_tokens"),
            },
        },
        Case {
            name: "embeddings without input",
            path: "/v1/embeddings",
            key: Some(ALICE),
            body: json_body(json!({"model": "text-embedding-3-small"})),
            status: 400,
            expect: Expect::OpenAi {
                code: None,
                param: Some("input"),
            },
        },
        Case {
            name: "unknown model",
            path: "/v1/chat/completions",
            key: Some(ALICE),
            body: json_body(chat("gpt-nonexistent-9", "hi")),
            status: 404,
            expect: Expect::OpenAi {
                code: Some("model_not_found"),
                param: Some("model"),
            },
        },
        Case {
            name: "unknown model, anthropic",
            path: "/v1/messages",
            key: Some(ALICE),
            body: json_body(messages("claude-nonexistent-9", "hi", 5)),
            status: 404,
            expect: Expect::Anthropic {
                kind: "not_found_error",
            },
        },
        Case {
            name: "model not allowed for the key",
            path: "/v1/chat/completions",
            key: Some(SOLO),
            body: json_body(chat("gpt-4o", "hi")),
            status: 403,
            expect: Expect::OpenAi {
                code: Some("model_not_allowed"),
                param: Some("model"),
            },
        },
        Case {
            name: "model on the wrong API",
            path: "/v1/chat/completions",
            key: Some(ALICE),
            body: json_body(chat("claude-haiku-4-5", "hi")),
            status: 400,
            expect: Expect::OpenAi {
                code: None,
                param: Some("model"),
            },
        },
        Case {
            name: "unpriced service tier",
            path: "/v1/chat/completions",
            key: Some(ALICE),
            body: json_body(
                json!({"model": "gpt-5-nano", "service_tier": "priority", "messages": [{"role": "user", "content": "hi"}]}),
            ),
            status: 400,
            expect: Expect::OpenAi {
                code: Some("option_not_priced"),
                param: Some("service_tier"),
            },
        },
        Case {
            name: "unpriced hour-long prompt cache",
            path: "/v1/messages",
            key: Some(ALICE),
            body: json_body(
                json!({"model": "claude-3-5-haiku-latest", "max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}),
            ),
            status: 400,
            expect: Expect::Anthropic {
                kind: "invalid_request_error",
            },
        },
        Case {
            name: "body too large",
            path: "/v1/chat/completions",
            key: Some(ALICE),
            body: json_body(chat("gpt-4o-mini", &"x".repeat(2 << 20))),
            status: 413,
            expect: Expect::OpenAi {
                code: Some("request_too_large"),
                param: None,
            },
        },
        Case {
            name: "body too large, anthropic",
            path: "/v1/messages",
            key: Some(ALICE),
            body: json_body(messages("claude-haiku-4-5", &"x".repeat(2 << 20), 5)),
            status: 413,
            expect: Expect::Anthropic {
                kind: "request_too_large",
            },
        },
    ]
}

#[tokio::test]
async fn bad_input_is_refused_costs_nothing_and_forwards_nothing() {
    let h = start(Setup::default()).await;
    for case in cases() {
        let mut request = h
            .client()
            .post(format!("{}{}", h.url, case.path))
            .header("content-type", "application/json")
            .body(case.body);
        if let Some(key) = case.key {
            request = if case.path == "/v1/messages" {
                request
                    .header("x-api-key", key)
                    .header("anthropic-version", "2023-06-01")
            } else {
                request.bearer_auth(key)
            };
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), case.status, "{}", case.name);
        let body: Value = response.json().await.unwrap();
        match case.expect {
            Expect::OpenAi { code, param } => {
                let error = &body["error"];
                let message = error["message"].as_str().unwrap_or_default();
                assert!(message.len() > 10, "{}: {body}", case.name);
                assert!(error["type"].is_string(), "{}: {body}", case.name);
                assert_eq!(error["code"].as_str(), code, "{}: {body}", case.name);
                assert_eq!(error["param"].as_str(), param, "{}: {body}", case.name);
            }
            Expect::Anthropic { kind } => {
                assert_eq!(body["type"], "error", "{}: {body}", case.name);
                assert_eq!(body["error"]["type"], kind, "{}: {body}", case.name);
                assert!(body["error"]["message"].as_str().unwrap().len() > 10);
            }
        }
    }
    assert_eq!(h.mock.stats.requests(), 0, "a bad request was forwarded");
    assert!(h.ledger().is_empty());
    assert_eq!(h.store.open_reservations(), (0, 0));
    for key in [ALICE, SOLO] {
        let budget = h.budget(key).await;
        assert_eq!(budget["key"]["spent_usd_micros"], 0);
        assert_eq!(budget["key"]["reserved_usd_micros"], 0);
    }
}

#[tokio::test]
async fn exhausted_budget_is_402_naming_the_scope() {
    let h = start(Setup {
        alice_cap: "0.000100",
        ..Setup::default()
    })
    .await;
    let response = h
        .post("/v1/chat/completions", ALICE, &chat("gpt-4o-mini", "hi"))
        .await;
    assert_eq!(response.status(), 402);
    assert_eq!(response.headers()["x-should-retry"], "false");
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=86_400).contains(&retry_after));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "insufficient_quota");
    assert_eq!(body["error"]["code"], "budget_exceeded");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("key `alice`") && message.contains("0.000100"),
        "{message}"
    );

    let response = h
        .post(
            "/v1/messages",
            ALICE,
            &messages("claude-haiku-4-5", "hi", 4000),
        )
        .await;
    assert_eq!(response.status(), 402);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "billing_error");
    assert_eq!(h.mock.stats.requests(), 0);
    assert!(h.ledger().is_empty());
    assert_eq!(h.budget(ALICE).await["key"]["spent_usd_micros"], 0);
}

#[tokio::test]
async fn org_cap_denies_when_tighter_and_names_the_org() {
    let h = start(Setup {
        org_cap: "0.000100",
        ..Setup::default()
    })
    .await;
    let response = h
        .post("/v1/chat/completions", BOB, &chat("gpt-4o-mini", "hi"))
        .await;
    assert_eq!(response.status(), 402);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("org `acme`"),
        "{body}"
    );
    assert!(response_has_no_retry(&h).await);
}

async fn response_has_no_retry(h: &Harness) -> bool {
    h.mock.stats.requests() == 0 && h.ledger().is_empty()
}

#[tokio::test]
async fn provider_without_a_key_is_503_naming_the_variable() {
    let h = start(Setup {
        anthropic_key_missing: true,
        ..Setup::default()
    })
    .await;
    let response = h
        .post(
            "/v1/messages",
            ALICE,
            &messages("claude-haiku-4-5", "hi", 5),
        )
        .await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("TEST_ANTHROPIC_KEY"),
        "{body}"
    );
    assert_eq!(h.mock.stats.requests(), 0);
    assert!(h.ledger().is_empty());
    // The other provider still works.
    let response = h
        .post("/v1/chat/completions", ALICE, &chat("gpt-4o-mini", "hi"))
        .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn unknown_routes_are_404_in_the_callers_shape() {
    let h = start(Setup::default()).await;
    let response = h
        .client()
        .get(format!("{}/v1/nothing", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/v1/nothing"));
}

#[tokio::test]
async fn unpriced_anthropic_beta_is_refused() {
    let h = start(Setup::default()).await;
    let response = h
        .client()
        .post(format!("{}/v1/messages", h.url))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "context-1m-2025-08-07")
        .json(&messages("claude-haiku-4-5", "hi", 10))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("context-1m"));
    assert_eq!(h.mock.stats.requests(), 0);
    assert!(h.ledger().is_empty());
}
