//! Options billed at other rates than a model's standard ones — OpenAI's
//! priority tier, Anthropic's hour-long cache writes and long context —
//! are reserved at their rates and charged exactly what the usage the
//! provider reports implies; for a model whose price entry lacks them
//! they are refused before anything is forwarded or charged. On a
//! provider whose project may default to priority (OpenAI itself, or one
//! configured `service_tier_default = "priority"`, as the mock is here), a
//! request that leaves its tier to that default (no `service_tier`, or
//! `"auto"`) may be served at priority, so on a model with priority prices
//! it is reserved at them too; on any other provider it is the standard
//! tier it was sent at.

use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tollgate::api::Api;
use tollgate::budget::LedgerStatus;
use tollgate::estimate::{estimate, TokenCounter};
use tollgate::money::Price;
use tollgate::provider::ProviderKind;
use tollgate::usage::{ServiceTier, Usage};

use crate::common::*;

/// The mock as OpenAI itself, serving a project whose default tier may be
/// priority (what the test config says unless told otherwise).
fn priority_project() -> Setup {
    Setup {
        openai_tier: "priority",
        ..Setup::default()
    }
}

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
        let h = start(priority_project()).await;
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
    let h = start(priority_project()).await;
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
        let h = start(priority_project()).await;
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
    let h = start(priority_project()).await;
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
    let h = start(priority_project()).await;
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

// === A tier left to the project's default ===

/// gpt-4o-mini's rates in µUSD per million tokens, from
/// config/prices.toml: the dearest input rate (uncached input; cache
/// writes cost the same) and output, at the standard and priority tiers.
const MINI_STANDARD: (u64, u64) = (150_000, 600_000);
const MINI_PRIORITY: (u64, u64) = (250_000, 1_000_000);

/// What the gateway reserves for `body` on chat completions at `rates`:
/// its own input count (the estimate's, so only the rates are checked
/// here) at the input rate plus the output limit at the output rate,
/// rounded up once.
fn mini_bound(body: &Value, (input, output): (u64, u64)) -> u64 {
    let price = prices().get("gpt-4o-mini").unwrap().clone();
    assert_eq!(price.input, Price::from_micros_per_mtok(MINI_STANDARD.0));
    assert_eq!(price.output, Price::from_micros_per_mtok(MINI_STANDARD.1));
    let priority = price.priority.unwrap();
    assert_eq!(priority.input, Price::from_micros_per_mtok(MINI_PRIORITY.0));
    assert_eq!(
        priority.output,
        Price::from_micros_per_mtok(MINI_PRIORITY.1)
    );
    let mut call =
        tollgate::family::parse_own_route(Api::ChatCompletions, Bytes::from(body.to_string()))
            .unwrap();
    call.bound_output(price.max_output_tokens.unwrap(), &[]);
    let counter = TokenCounter::for_model(ProviderKind::OpenAi, "gpt-4o-mini");
    let e = estimate(&call, &price, counter);
    (e.input_tokens * input + e.output_tokens * output).div_ceil(1_000_000)
}

/// A cap of `micros` µUSD as the config writes it.
fn cap(micros: u64) -> &'static str {
    let text = format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000);
    Box::leak(text.into_boxed_str())
}

/// A gateway whose alice key may spend `micros`, before a mock provider.
async fn capped(micros: u64) -> Harness {
    start(Setup {
        alice_cap: cap(micros),
        ..priority_project()
    })
    .await
}

/// Overruns this gateway counted.
async fn overruns(h: &Harness) -> u64 {
    metric(&h.url, r#"tollgate_settlements_total{status="overrun"}"#).await
}

/// Nothing stays reserved, alice spent exactly what the ledger says, and
/// every counter reconciles with the ledger.
async fn books_balance(h: &Harness) {
    h.settled().await;
    let budget = h.budget(ALICE).await;
    assert_eq!(budget["key"]["reserved_usd_micros"], 0, "{budget}");
    let charged: i64 = h.ledger().iter().map(|entry| entry.actual).sum();
    assert_eq!(delta(spent(h, ALICE).await), charged);
    for row in h.store.reconcile() {
        assert_eq!(row.drift(), 0, "{row:?}");
    }
}

/// A chat call of gpt-4o-mini to a project whose default tier is
/// priority, with `tier` as its `service_tier` (`None`: no field).
fn to_a_priority_project(tier: Option<&str>) -> Value {
    let mut body = chat(
        "gpt-4o-mini",
        "hello mock:project_priority=1 mock:tokens=30",
    );
    body["max_completion_tokens"] = 5_000.into();
    if let Some(tier) = tier {
        body["service_tier"] = tier.into();
    }
    body
}

#[tokio::test]
async fn a_tier_left_open_is_reserved_at_priority_and_charged_as_served() {
    for tier in [None, Some("auto"), Some(" Auto")] {
        let body = to_a_priority_project(tier);
        let standard = mini_bound(&body, MINI_STANDARD);
        let priority = mini_bound(&body, MINI_PRIORITY);
        // 5,000 output tokens: $0.003 at standard rates, $0.005 at priority.
        assert!(
            priority > standard + 1_900,
            "{tier:?}: {standard} {priority}"
        );

        // A cap with room for the priority bound, and not a µUSD more.
        let h = capped(priority).await;
        let response = h.post("/v1/chat/completions", ALICE, &body).await;
        assert_eq!(response.status(), StatusCode::OK, "{tier:?}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["service_tier"], "priority", "{tier:?}");
        h.settled().await;
        let entry = h.ledger().into_iter().next().unwrap();
        assert_eq!(entry.reserved, priority, "{tier:?}: {entry:?}");
        // Charged at the tier the project served, within the bound.
        let served = Usage {
            service_tier: Some(ServiceTier::Priority),
            ..billed_by(&h.mock.stats)
        };
        assert_eq!(entry.usage, billed_by(&h.mock.stats));
        assert_eq!(entry.status, LedgerStatus::Ok, "{tier:?}: {entry:?}");
        assert_eq!(entry.actual, delta(cost("gpt-4o-mini", &served)));
        assert!(entry.actual > delta(cost("gpt-4o-mini", &entry.usage)));
        assert_eq!(overruns(&h).await, 0, "{tier:?}");
        books_balance(&h).await;
    }
}

#[tokio::test]
async fn a_cap_that_holds_only_the_standard_bound_refuses_a_tier_left_open() {
    let open = to_a_priority_project(None);
    let priority = mini_bound(&open, MINI_PRIORITY);
    let h = capped(priority - 1).await;
    for tier in [None, Some("auto"), Some("priority")] {
        let body = to_a_priority_project(tier);
        assert!(mini_bound(&body, MINI_STANDARD) < priority - 1);
        let response = h.post("/v1/chat/completions", ALICE, &body).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{tier:?}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "budget_exceeded", "{error}");
    }
    assert_eq!(h.mock.stats.requests(), 0, "nothing was forwarded");
    h.settled().await;
    assert!(h.ledger().is_empty(), "nothing was charged");

    // Named, the standard tier is reserved and charged at standard rates,
    // whatever the project's default.
    let pinned = to_a_priority_project(Some("default"));
    let standard = mini_bound(&pinned, MINI_STANDARD);
    let response = h.post("/v1/chat/completions", ALICE, &pinned).await;
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["service_tier"], "default");
    h.settled().await;
    let entry = h.ledger().into_iter().next().unwrap();
    assert_eq!(entry.reserved, standard, "{entry:?}");
    assert_eq!(entry.status, LedgerStatus::Ok, "{entry:?}");
    assert_eq!(
        entry.actual,
        delta(cost("gpt-4o-mini", &billed_by(&h.mock.stats)))
    );
    assert_eq!(overruns(&h).await, 0);
    books_balance(&h).await;
}

#[tokio::test]
async fn a_project_default_of_priority_is_charged_on_every_route() {
    let chat_body = |text: &str, stream: bool| {
        let mut body = chat("gpt-4o-mini", text);
        body["max_completion_tokens"] = 100.into();
        body["stream"] = stream.into();
        body
    };
    let responses_body = |text: &str, stream: bool| json!({"model": "gpt-4o-mini", "input": text, "max_output_tokens": 100, "stream": stream});
    let project = "hello mock:project_priority=1 mock:tokens=20";
    // (path, body, billed at priority): the project's default serves
    // every call at priority; legacy completions report no tier, and one
    // left open is charged at priority. Without the project's default the
    // provider reports the default tier, and that is charged.
    let calls = [
        ("/v1/chat/completions", chat_body(project, true), true),
        ("/v1/responses", responses_body(project, false), true),
        ("/v1/responses", responses_body(project, true), true),
        (
            "/v1/completions",
            json!({"model": "gpt-4o-mini", "prompt": project, "max_tokens": 100}),
            true,
        ),
        (
            "/v1/chat/completions",
            chat_body("hello mock:tokens=20", true),
            false,
        ),
        (
            "/v1/responses",
            responses_body("hello mock:tokens=20", false),
            false,
        ),
    ];
    for (path, body, at_priority) in calls {
        let h = start(priority_project()).await;
        let response = h.post(path, ALICE, &body).await;
        assert_eq!(response.status(), StatusCode::OK, "{path} {body}");
        response.bytes().await.unwrap();
        h.settled().await;
        let entry = h.ledger().into_iter().next().unwrap();
        let billed = billed_by(&h.mock.stats);
        assert_eq!(entry.usage, billed, "{path} {body}");
        let tier = match at_priority {
            true => ServiceTier::Priority,
            false => ServiceTier::Standard,
        };
        let served = Usage {
            service_tier: Some(tier),
            ..billed
        };
        assert_eq!(entry.status, LedgerStatus::Ok, "{path} {body}: {entry:?}");
        assert_eq!(
            entry.actual,
            delta(cost("gpt-4o-mini", &served)),
            "{path} {body}"
        );
        assert!(entry.actual <= delta(entry.reserved), "{entry:?}");
        assert_eq!(overruns(&h).await, 0, "{path} {body}");
        books_balance(&h).await;
    }
}

#[tokio::test]
async fn a_tier_left_open_on_a_model_without_priority_prices_is_standard() {
    // gpt-5-nano has no priority prices: OpenAI serves it at standard
    // rates whatever the project's default, and a request naming no tier
    // is neither refused nor reserved at a priority it cannot have.
    let h = start(priority_project()).await;
    let nano = prices().get("gpt-5-nano").unwrap().clone();
    assert!(nano.priority.is_none());
    let mut body = chat("gpt-5-nano", "hello mock:tokens=10");
    body["max_completion_tokens"] = 1_000.into();
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.bytes().await.unwrap();
    h.settled().await;
    let entry = h.ledger().into_iter().next().unwrap();
    let mut call =
        tollgate::family::parse_own_route(Api::ChatCompletions, Bytes::from(body.to_string()))
            .unwrap();
    call.bound_output(nano.max_output_tokens.unwrap(), &[]);
    let counter = TokenCounter::for_model(ProviderKind::OpenAi, "gpt-5-nano");
    let e = estimate(&call, &nano, counter);
    // $0.05 input (cache writes cost the same) and $0.40 output per Mtok.
    let standard = (e.input_tokens * 50_000 + e.output_tokens * 400_000).div_ceil(1_000_000);
    assert_eq!(entry.reserved, standard, "{entry:?}");
    assert_eq!(
        entry.actual,
        delta(cost("gpt-5-nano", &billed_by(&h.mock.stats)))
    );
    books_balance(&h).await;
}

#[tokio::test]
async fn a_tier_left_open_on_any_other_provider_is_the_standard_tier_it_was_sent_at() {
    // The mock as an OpenAI-compatible server: no project default tier.
    let compatible = || Setup {
        openai_tier: "default",
        ..Setup::default()
    };
    let open = to_a_priority_project(None);
    let standard = mini_bound(&open, MINI_STANDARD);
    let h = capped_at(standard, compatible()).await;
    let completion =
        json!({"model": "gpt-4o-mini", "prompt": "hello mock:tokens=20", "max_tokens": 100});
    // Legacy completions report no tier: billed as sent, at standard.
    let response = h.post("/v1/completions", ALICE, &completion).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.bytes().await.unwrap();
    h.settled().await;
    let entry = h.ledger().into_iter().next().unwrap();
    let billed = billed_by(&h.mock.stats);
    assert_eq!(billed.service_tier, None);
    assert_eq!(
        entry.actual,
        delta(cost("gpt-4o-mini", &billed)),
        "{entry:?}"
    );
    assert_eq!(overruns(&h).await, 0);
    books_balance(&h).await;
    // A chat call whose whole standard bound is all the cap holds is
    // reserved at standard, not refused for a priority it cannot have.
    let h = capped_at(standard, compatible()).await;
    let mut chat_body = chat("gpt-4o-mini", "hello mock:tokens=30");
    chat_body["max_completion_tokens"] = 5_000.into();
    let response = h.post("/v1/chat/completions", ALICE, &chat_body).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.bytes().await.unwrap();
    h.settled().await;
    let entry = h.ledger().into_iter().next().unwrap();
    assert_eq!(
        entry.reserved,
        mini_bound(&chat_body, MINI_STANDARD),
        "{entry:?}"
    );
    books_balance(&h).await;
}

/// A gateway of `setup` whose alice key may spend `micros`.
async fn capped_at(micros: u64, setup: Setup) -> Harness {
    start(Setup {
        alice_cap: cap(micros),
        ..setup
    })
    .await
}
