//! Vertex AI through the real server to the mock: Gemini models under
//! `publishers/google` and Claude under `publishers/anthropic`, sent to the
//! provider's project and location, signed with an access token from its
//! service account (fetched once, refreshed before it expires, a failure
//! costing nothing), charged what Vertex reports, and every early end
//! settled once.

use futures_util::StreamExt;
use serde_json::{json, Value};
use tollgate::budget::LedgerStatus;

use crate::common::*;

const FLASH: &str = "gemini-2.5-flash";
const SONNET: &str = "claude-sonnet-4-5@20250929";

async fn vertex(setup: Setup) -> Harness {
    start(Setup {
        google: true,
        ..setup
    })
    .await
}

/// A Vertex AI path as a client names it: its own project and location,
/// which the gateway replaces.
fn path(publisher: &str, model: &str, method: &str) -> String {
    format!("/v1/projects/client-project/locations/us-central1/publishers/{publisher}/models/{model}:{method}")
}

async fn post(h: &Harness, path: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = h.client().post(format!("{}{path}", h.url)).json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

fn contents(text: &str) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": text}]}],
           "generationConfig": {"maxOutputTokens": 200}})
}

fn claude(text: &str, max_tokens: u64, stream: bool) -> Value {
    let mut body = json!({
        "anthropic_version": "vertex-2023-10-16",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
    });
    if stream {
        body["stream"] = json!(true);
    }
    body
}

/// Checks where the last call went and how it signed in.
fn check_sent_to_the_providers_project(h: &Harness, publisher: &str, model: &str) {
    let sent = h.mock.stats.last_request().unwrap();
    let target = sent.vertex_target().unwrap();
    assert_eq!(target.project, VERTEX_PROJECT);
    assert_eq!(target.location, VERTEX_LOCATION);
    assert_eq!(target.publisher, publisher);
    assert_eq!(target.model, model);
    let authorization = sent.headers["authorization"].to_str().unwrap();
    assert!(authorization.starts_with("Bearer ya29."), "{authorization}");
    assert!(!authorization.contains(ALICE));
}

#[tokio::test]
async fn gemini_goes_to_the_providers_project_signed_with_one_cached_token() {
    let h = vertex(Setup::default()).await;
    let response = post(
        &h,
        &path("google", FLASH, "generateContent"),
        Some(ALICE),
        &contents("mock:tokens=5 mock:thoughts=11 hi"),
    )
    .await;
    assert_eq!(response.status(), 200);
    check_sent_to_the_providers_project(&h, "google", FLASH);
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.model, FLASH);
    assert_eq!(entry.usage, billed_by(&h.mock.stats));
    assert_eq!(entry.usage.output, 16);

    let response = post(
        &h,
        &format!(
            "{}?alt=sse",
            path("google", FLASH, "streamGenerateContent").replace("/v1/", "/v1beta1/")
        ),
        Some(ALICE),
        &contents("mock:tokens=8 hi"),
    )
    .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.starts_with("data: "), "{text}");
    assert_eq!(h.store.open_reservations().0, 0, "settled before the end");
    check_sent_to_the_providers_project(&h, "google", FLASH);
    let ledger = h.ledger();
    assert_eq!(ledger.len(), 2);
    let second = &ledger[1];
    assert_eq!(second.actual, delta(cost(FLASH, &second.usage)));
    let billed = billed_by(&h.mock.stats);
    assert_eq!(ledger[0].usage.input + second.usage.input, billed.input);
    assert_eq!(ledger[0].usage.output + second.usage.output, billed.output);
    assert_eq!(h.mock.tokens.requests(), 1, "one token serves both calls");
}

#[tokio::test]
async fn claude_is_charged_what_vertex_reports_plain_and_streamed() {
    let h = vertex(Setup::default()).await;
    let response = post(
        &h,
        &path("anthropic", SONNET, "rawPredict"),
        Some(ALICE),
        &claude("mock:tokens=6 mock:cached=4 hello there", 50, false),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "message", "{body}");
    check_sent_to_the_providers_project(&h, "anthropic", SONNET);
    let sent = h.mock.stats.last_request().unwrap();
    assert_eq!(sent.body["anthropic_version"], "vertex-2023-10-16");
    let entry = only_entry(&h);
    assert_eq!(entry.model, SONNET);
    assert_eq!(entry.usage, billed_by(&h.mock.stats));
    assert_eq!(entry.usage.cached_input, 4);

    let billed_before = billed_by(&h.mock.stats);
    let response = post(
        &h,
        &path("anthropic", SONNET, "streamRawPredict"),
        Some(ALICE),
        &claude("mock:tokens=9 hello", 50, true),
    )
    .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("message_stop"), "{text}");
    assert_eq!(h.store.open_reservations().0, 0, "settled before the end");
    let entry = h.ledger().last().cloned().unwrap();
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.usage.output, 9);
    assert_eq!(
        entry.usage.input,
        billed_by(&h.mock.stats).input - billed_before.input
    );
    let total: i64 = h.ledger().iter().map(|entry| entry.actual).sum();
    assert_eq!(delta(spent(&h, ALICE).await), total);
}

#[tokio::test]
async fn refusals_keep_each_routes_shape_and_cost_nothing() {
    let h = vertex(Setup {
        alice_cap: "0.10",
        ..Setup::default()
    })
    .await;
    let gemini = path("google", FLASH, "generateContent");
    let sonnet = path("anthropic", SONNET, "rawPredict");
    let google_error = |status: u16, google_status: &'static str| {
        move |body: Value| {
            assert_eq!(body["error"]["code"], status, "{body}");
            assert_eq!(body["error"]["status"], google_status, "{body}");
        }
    };
    let anthropic_error = |kind: &'static str| {
        move |body: Value| {
            assert_eq!(body["type"], "error", "{body}");
            assert_eq!(body["error"]["type"], kind, "{body}");
        }
    };
    // Name, path, key, body, status, and what the error body must say.
    type Case<'a> = (
        &'a str,
        String,
        Option<&'a str>,
        Value,
        u16,
        Box<dyn Fn(Value)>,
    );
    let cases: Vec<Case> = vec![
        (
            "no key",
            gemini.clone(),
            None,
            contents("hi"),
            401,
            Box::new(google_error(401, "UNAUTHENTICATED")),
        ),
        (
            "a wrong key",
            gemini.clone(),
            Some("tg-nobody"),
            contents("hi"),
            401,
            Box::new(google_error(401, "UNAUTHENTICATED")),
        ),
        (
            "over budget, gemini",
            gemini.clone(),
            Some(ALICE),
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                   "generationConfig": {"maxOutputTokens": 60000}}),
            402,
            Box::new(google_error(402, "FAILED_PRECONDITION")),
        ),
        (
            "code execution",
            gemini.clone(),
            Some(ALICE),
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                   "tools": [{"code_execution": {}}]}),
            400,
            Box::new(google_error(400, "INVALID_ARGUMENT")),
        ),
        (
            "an unpriced gemini model",
            path("google", "gemini-0-nonesuch", "generateContent"),
            Some(ALICE),
            contents("hi"),
            404,
            Box::new(google_error(404, "NOT_FOUND")),
        ),
        (
            "over budget, claude",
            sonnet.clone(),
            Some(ALICE),
            claude("hi", 60000, false),
            402,
            Box::new(anthropic_error("billing_error")),
        ),
        (
            "claude without max_tokens",
            sonnet.clone(),
            Some(ALICE),
            json!({"anthropic_version": "vertex-2023-10-16",
                   "messages": [{"role": "user", "content": "hi"}]}),
            400,
            Box::new(anthropic_error("invalid_request_error")),
        ),
        (
            "claude's unversioned name",
            path("anthropic", "claude-0-nonesuch", "rawPredict"),
            Some(ALICE),
            claude("hi", 10, false),
            404,
            Box::new(anthropic_error("not_found_error")),
        ),
        (
            "an unknown publisher",
            path("meta", "llama-4", "rawPredict"),
            Some(ALICE),
            claude("hi", 10, false),
            404,
            Box::new(|body: Value| assert!(body["error"].is_object(), "{body}")),
        ),
    ];
    for (name, path, key, body, status, check) in cases {
        let response = post(&h, &path, key, &body).await;
        assert_eq!(response.status(), status, "{name}");
        let body: Value = response.json().await.unwrap();
        if status == 402 {
            let message = body["error"]["message"].as_str().unwrap();
            let field = if path.contains("anthropic") {
                "(max_tokens)"
            } else {
                "(maxOutputTokens)"
            };
            assert!(
                message.contains(field),
                "{name}: says how to fit: {message}"
            );
        }
        check(body);
    }
    assert_eq!(h.mock.stats.requests(), 0, "nothing was forwarded");
    assert!(h.ledger().is_empty(), "nothing was charged");
}

#[tokio::test]
async fn a_token_endpoint_that_fails_costs_nothing_and_the_next_call_tries_again() {
    let h = vertex(Setup::default()).await;
    h.mock.tokens.fail_next_requests(2);
    let response = post(
        &h,
        &path("google", FLASH, "generateContent"),
        Some(ALICE),
        &contents("hi"),
    )
    .await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["status"], "UNAVAILABLE", "{body}");
    let response = post(
        &h,
        &path("anthropic", SONNET, "rawPredict"),
        Some(ALICE),
        &claude("hi", 10, false),
    )
    .await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["type"], "error",
        "Claude's routes answer as Anthropic: {body}"
    );
    assert_eq!(h.mock.stats.requests(), 0, "nothing was sent");
    h.settled().await;
    assert!(
        h.ledger().iter().all(|entry| entry.actual == 0),
        "{:?}",
        h.ledger()
    );
    assert_eq!(spent(&h, ALICE).await, 0);

    let response = post(
        &h,
        &path("google", FLASH, "generateContent"),
        Some(ALICE),
        &contents("hi"),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(h.mock.tokens.requests(), 3);
}

#[tokio::test]
async fn a_token_is_replaced_before_it_expires_and_a_failed_refresh_of_a_spent_one_costs_nothing() {
    let h = vertex(Setup::default()).await;
    // Tokens that live less than the refresh margin are replaced on every
    // call, and one this close to its end is not handed out.
    h.mock
        .tokens
        .set_token_lifetime(std::time::Duration::from_secs(30));
    let gemini = path("google", FLASH, "generateContent");
    for _ in 0..2 {
        let response = post(&h, &gemini, Some(ALICE), &contents("hi")).await;
        assert_eq!(response.status(), 200);
    }
    assert_eq!(h.mock.tokens.requests(), 2);
    let forwarded = h.mock.stats.requests();
    let charged = spent(&h, ALICE).await;

    h.mock.tokens.fail_next_requests(1);
    let response = post(&h, &gemini, Some(ALICE), &contents("hi")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(h.mock.stats.requests(), forwarded, "nothing was sent");
    h.settled().await;
    assert_eq!(spent(&h, ALICE).await, charged);

    let response = post(&h, &gemini, Some(ALICE), &contents("hi")).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn an_upstream_error_passes_through_and_costs_nothing() {
    let h = vertex(Setup::default()).await;
    let response = post(
        &h,
        &path("google", FLASH, "generateContent"),
        Some(ALICE),
        &contents("mock:status=503"),
    )
    .await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["status"], "UNAVAILABLE", "{body}");
    let response = post(
        &h,
        &path("anthropic", SONNET, "rawPredict"),
        Some(ALICE),
        &claude("mock:status=529", 10, false),
    )
    .await;
    assert_eq!(response.status(), 529);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error", "{body}");
    h.settled().await;
    assert!(
        h.ledger().iter().all(|entry| entry.actual == 0),
        "{:?}",
        h.ledger()
    );
    assert_eq!(spent(&h, ALICE).await, 0);
}

#[tokio::test]
async fn a_cut_claude_stream_is_settled_once_for_at_least_what_vertex_billed() {
    let h = vertex(Setup::default()).await;
    let response = post(
        &h,
        &path("anthropic", SONNET, "streamRawPredict"),
        Some(ALICE),
        &claude("mock:tokens=50 mock:cut=5 mock:sleep_ms=5", 100, true),
    )
    .await;
    assert_eq!(response.status(), 200);
    let failed = read_to_failure(response).await;
    assert!(failed, "the client must see the stream fail");
    h.settled().await;
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Estimated);
    let billed = cost(SONNET, &billed_by(&h.mock.stats));
    assert!(entry.actual >= delta(billed), "{entry:?} < {billed}");
    assert!(entry.actual <= delta(entry.reserved));
}

#[tokio::test]
async fn a_client_gone_mid_stream_is_charged_at_least_what_vertex_billed() {
    let mut setup = Setup::default();
    setup.mock.tokens_per_sec = Some(50);
    let h = vertex(setup).await;
    for (path, body) in [
        (
            path("anthropic", SONNET, "streamRawPredict"),
            claude("mock:tokens=200", 300, true),
        ),
        (
            format!("{}?alt=sse", path("google", FLASH, "streamGenerateContent")),
            contents("mock:tokens=150"),
        ),
    ] {
        let before = h.ledger().len();
        let model = if path.contains("anthropic") {
            SONNET
        } else {
            FLASH
        };
        let billed_before = cost(model, &billed_by(&h.mock.stats));
        let response = post(&h, &path, Some(ALICE), &body).await;
        assert_eq!(response.status(), 200);
        let mut stream = response.bytes_stream();
        for _ in 0..3 {
            stream.next().await.unwrap().unwrap();
        }
        drop(stream);
        h.settled().await;
        let ledger = h.ledger();
        assert_eq!(ledger.len(), before + 1, "{ledger:?}");
        let entry = ledger.last().unwrap();
        assert_eq!(entry.actual, delta(cost(&entry.model, &entry.usage)));
        // Give the provider time to notice and bill what it generated.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let billed = cost(model, &billed_by(&h.mock.stats)) - billed_before;
        assert!(
            entry.actual >= delta(billed),
            "{path}: {entry:?} < {billed}"
        );
    }
}
