//! Azure OpenAI through the real server to the mock: every route shape
//! (a deployment's path, the dated Responses route, the v1 API), the key
//! in `api-key` or as a bearer token, each call priced as the model its
//! deployment is mapped to (not the one Azure's answer names), every OpenAI
//! rule, and a tier left open billed at the standard tier it was sent at.
//! Bad input is refused in OpenAI's shape, forwarded nowhere and charged
//! nothing.

use serde_json::{json, Value};
use tollgate::budget::LedgerStatus;

use crate::common::*;

const VERSION: &str = "api-version=2024-10-21";

async fn azure(setup: Setup) -> Harness {
    start(Setup {
        azure: true,
        ..setup
    })
    .await
}

/// POSTs `body` to `path` with `key` in `api-key`, as `AzureOpenAI` sends it.
async fn post(h: &Harness, path: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = h.client().post(format!("{}{path}", h.url)).json(body);
    if let Some(key) = key {
        request = request.header("api-key", key);
    }
    request.send().await.unwrap()
}

fn messages_of(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}], "max_tokens": 50})
}

#[tokio::test]
async fn a_deployment_is_priced_as_its_mapped_model_and_signed_with_the_providers_key() {
    let h = azure(Setup::default()).await;
    let path = format!("/openai/deployments/prod-4o/chat/completions?{VERSION}");
    let response = post(&h, &path, Some(ALICE), &messages_of("mock:tokens=7 hello")).await;
    assert_eq!(response.status(), 200);
    let cost_header: i64 = response.headers()["x-tollgate-cost-usd-micros"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let answer: Value = response.json().await.unwrap();
    // Azure names the model the deployment runs, which is not priced.
    assert_eq!(answer["model"], "gpt-4o-2024-08-06");
    let entry = only_entry(&h);
    assert_eq!(entry.model, "gpt-4o");
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.usage, billed_by(&h.mock.stats));
    assert_eq!(entry.actual, cost_header);
    let sent = h.mock.stats.last_request().unwrap();
    assert_eq!(sent.path_and_query(), path);
    assert_eq!(sent.headers["api-key"], PROVIDER_KEY);
    assert!(sent.headers.get("authorization").is_none());
    assert_eq!(sent.body["max_completion_tokens"], 50);
}

#[tokio::test]
async fn every_route_shape_is_served_and_charged_exactly() {
    let h = azure(Setup::default()).await;
    let chat_v1 = json!({"model": "mini", "messages": [{"role": "user", "content": "hi"}]});
    let responses = json!({"model": "mini", "input": "hi", "max_output_tokens": 40});
    let cases = [
        (
            format!("/openai/deployments/mini/completions?{VERSION}"),
            json!({"prompt": "hi", "max_tokens": 5}),
            true,
        ),
        (
            format!("/openai/deployments/mini/embeddings?{VERSION}"),
            json!({"input": "hi"}),
            true,
        ),
        (
            "/openai/deployments/mini/responses?api-version=2025-04-01-preview".to_owned(),
            json!({"input": "hi"}),
            true,
        ),
        (
            "/openai/responses?api-version=2025-04-01-preview".to_owned(),
            responses.clone(),
            true,
        ),
        ("/openai/v1/responses".to_owned(), responses, false),
        ("/openai/v1/chat/completions".to_owned(), chat_v1, false),
    ];
    for (path, body, api_key) in cases {
        let before = h.ledger().len();
        let billed_before = billed_by(&h.mock.stats);
        // The plain OpenAI client on the v1 API sends a bearer token.
        let mut request = h.client().post(format!("{}{path}", h.url)).json(&body);
        request = if api_key {
            request.header("api-key", ALICE)
        } else {
            request.bearer_auth(ALICE)
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        response.bytes().await.unwrap();
        let ledger = h.ledger();
        assert_eq!(ledger.len(), before + 1, "{path}");
        let entry = ledger.last().unwrap();
        assert_eq!(entry.model, "gpt-4o-mini", "{path}");
        let billed = billed_by(&h.mock.stats);
        assert_eq!(
            entry.usage.input,
            billed.input - billed_before.input,
            "{path}"
        );
        assert_eq!(
            entry.usage.output,
            billed.output - billed_before.output,
            "{path}"
        );
        assert_eq!(
            entry.actual,
            delta(cost("gpt-4o-mini", &entry.usage)),
            "{path}"
        );
        let sent = h.mock.stats.last_request().unwrap();
        assert_eq!(sent.path_and_query(), path);
    }
}

#[tokio::test]
async fn a_stream_asks_for_its_usage_hides_it_and_keeps_azures_own_chunks() {
    let h = azure(Setup::default()).await;
    let mut body = messages_of("mock:tokens=9 hi");
    body["stream"] = json!(true);
    let path = format!("/openai/deployments/prod-4o/chat/completions?{VERSION}");
    let response = post(&h, &path, Some(ALICE), &body).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert_eq!(h.store.open_reservations().0, 0, "settled before the end");
    assert!(text.contains("prompt_filter_results"), "{text}");
    assert!(
        !text.contains("\"usage\":{"),
        "the usage chunk is hidden: {text}"
    );
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let sent = h.mock.stats.last_request().unwrap();
    assert_eq!(sent.body["stream_options"]["include_usage"], true);
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.usage.output, 9);
    assert_eq!(entry.usage, billed_by(&h.mock.stats));
}

#[tokio::test]
async fn a_tier_left_open_is_reserved_and_billed_at_the_standard_tier() {
    let h = azure(Setup::default()).await;
    let mut body =
        json!({"model": "mini", "input": "hi mock:project_priority=1", "max_output_tokens": 1000});
    let response = post(&h, "/openai/v1/responses", Some(ALICE), &body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_ne!(answer["service_tier"], "priority", "{answer}");
    let open = only_entry(&h);
    assert_eq!(
        open.actual,
        delta(cost("gpt-4o-mini", &billed_by(&h.mock.stats)))
    );
    // Named, priority is reserved at its rates: more than the open call.
    body["service_tier"] = json!("priority");
    let response = post(&h, "/openai/v1/responses", Some(ALICE), &body).await;
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();
    let named = h.ledger().last().cloned().unwrap();
    assert!(named.reserved > open.reserved, "{open:?} {named:?}");
}

#[tokio::test]
async fn refusals_are_in_openais_shape_forwarded_nowhere_and_charged_nothing() {
    let h = azure(Setup {
        alice_cap: "0.01",
        ..Setup::default()
    })
    .await;
    let chat =
        |deployment: &str| format!("/openai/deployments/{deployment}/chat/completions?{VERSION}");
    // Name, path, key, body, status, and the error's code.
    type Case<'a> = (&'a str, String, Option<&'a str>, Value, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "no key",
            chat("prod-4o"),
            None,
            messages_of("hi"),
            401,
            "missing_api_key",
        ),
        (
            "a wrong key",
            chat("prod-4o"),
            Some("tg-nobody"),
            messages_of("hi"),
            401,
            "invalid_api_key",
        ),
        (
            "an unmapped deployment",
            chat("staging"),
            Some(ALICE),
            messages_of("hi"),
            404,
            "DeploymentNotFound",
        ),
        (
            "no api-version",
            "/openai/deployments/prod-4o/chat/completions".to_owned(),
            Some(ALICE),
            messages_of("hi"),
            400,
            "missing_api_version",
        ),
        (
            "over budget",
            chat("prod-4o"),
            Some(ALICE),
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16000}),
            402,
            "budget_exceeded",
        ),
        (
            "background mode",
            "/openai/v1/responses".to_owned(),
            Some(ALICE),
            json!({"model": "mini", "input": "hi", "background": true}),
            400,
            "background_not_supported",
        ),
        (
            "an unmapped deployment on v1",
            "/openai/v1/chat/completions".to_owned(),
            Some(ALICE),
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
            404,
            "DeploymentNotFound",
        ),
        (
            "a key the model is not allowed for",
            chat("prod-4o"),
            Some(SOLO),
            messages_of("hi"),
            403,
            "model_not_allowed",
        ),
    ];
    for (name, path, key, body, status, code) in cases {
        let response = post(&h, &path, key, &body).await;
        assert_eq!(response.status(), status, "{name}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], code, "{name}: {error}");
        assert!(error["error"]["message"].is_string(), "{name}");
        if code == "DeploymentNotFound" {
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains("deployments"), "{message}");
        }
    }
    // A key twice in the body, as on OpenAI's routes.
    let response = h
        .client()
        .post(format!("{}{}", h.url, chat("prod-4o")))
        .header("api-key", ALICE)
        .header("content-type", "application/json")
        .body(r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_tokens":9000}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // The key that may use only gpt-4o-mini may use the deployment of it.
    let response = post(&h, &chat("mini"), Some(SOLO), &messages_of("hi")).await;
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();
    assert_eq!(
        h.mock.stats.requests(),
        1,
        "only the allowed call was forwarded"
    );
    assert_eq!(h.ledger().len(), 1);
    assert_eq!(spent(&h, ALICE).await, 0);
}

#[tokio::test]
async fn an_upstream_error_passes_through_and_costs_nothing() {
    let h = azure(Setup::default()).await;
    let path = format!("/openai/deployments/prod-4o/chat/completions?{VERSION}");
    let response = post(&h, &path, Some(ALICE), &messages_of("mock:status=429")).await;
    assert_eq!(response.status(), 429);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "429", "{error}");
    h.settled().await;
    assert!(h.ledger().iter().all(|entry| entry.actual == 0));
    assert_eq!(spent(&h, ALICE).await, 0);
}

#[tokio::test]
async fn a_cut_stream_is_settled_once_for_at_least_what_azure_billed() {
    let h = azure(Setup::default()).await;
    let mut body = messages_of("mock:tokens=40 mock:cut=4 mock:sleep_ms=5");
    body["stream"] = json!(true);
    let path = format!("/openai/deployments/prod-4o/chat/completions?{VERSION}");
    let response = post(&h, &path, Some(ALICE), &body).await;
    assert_eq!(response.status(), 200);
    let failed = read_to_failure(response).await;
    assert!(failed, "the client must see the stream fail");
    h.settled().await;
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Estimated);
    let billed = cost("gpt-4o", &billed_by(&h.mock.stats));
    assert!(entry.actual >= delta(billed), "{entry:?} < {billed}");
}

#[tokio::test]
async fn a_client_gone_mid_stream_is_charged_at_least_what_azure_billed() {
    let mut setup = Setup::default();
    setup.mock.tokens_per_sec = Some(50);
    let h = azure(setup).await;
    let mut body = messages_of("mock:tokens=200");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(300);
    let path = format!("/openai/deployments/prod-4o/chat/completions?{VERSION}");
    let response = post(&h, &path, Some(ALICE), &body).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    for _ in 0..3 {
        futures_util::StreamExt::next(&mut stream)
            .await
            .unwrap()
            .unwrap();
    }
    drop(stream);
    h.settled().await;
    let entry = only_entry(&h);
    assert_eq!(entry.model, "gpt-4o");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let billed = cost("gpt-4o", &billed_by(&h.mock.stats));
    assert!(entry.actual >= delta(billed), "{entry:?} < {billed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_at_a_tight_cap_never_overspends() {
    // gpt-4o: $10 a million output tokens; each call's bound is about
    // 10,000 µUSD, and the cap holds three.
    let h = azure(Setup {
        alice_cap: "0.0320",
        ..Setup::default()
    })
    .await;
    let body = json!({"messages": [{"role": "user", "content": "mock:tokens=1000 hi"}], "max_tokens": 1000});
    let path = format!("/openai/deployments/prod-4o/chat/completions?{VERSION}");
    let calls = (0..10).map(|_| post(&h, &path, Some(ALICE), &body));
    let statuses: Vec<u16> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|response| response.status().as_u16())
        .collect();
    h.settled().await;
    assert!(
        statuses.iter().all(|status| [200, 402].contains(status)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&402), "{statuses:?}");
    let spent = spent(&h, ALICE).await;
    assert!(spent <= 32_000, "spent {spent} µUSD of a 32,000 µUSD cap");
}
