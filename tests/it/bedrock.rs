//! Amazon Bedrock through the real server to the mock, which checks every
//! SigV4 signature: Converse and `invoke`, plain and streamed in AWS
//! event-stream frames, priced as the model an inference profile runs,
//! settled before the frame that ends a stream, and every early end
//! settled once. Bad input is refused in Bedrock's shape, forwarded
//! nowhere and charged nothing.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::HeaderValue;
use base64::Engine;
use serde_json::{json, Value};
use tollgate::budget::LedgerStatus;

use crate::common::*;

const HAIKU: &str = "anthropic.claude-haiku-4-5-20251001-v1:0";
const PROFILE: &str = "us.anthropic.claude-haiku-4-5-20251001-v1:0";

async fn bedrock(setup: Setup) -> Harness {
    start(Setup {
        bedrock: true,
        ..setup
    })
    .await
}

/// The path of `operation` on `model`, encoded as the AWS SDKs encode it.
fn path(model: &str, operation: &str) -> String {
    format!(
        "/model/{}/{operation}",
        model.replace(':', "%3A").replace('/', "%2F")
    )
}

async fn post(h: &Harness, path: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = h.client().post(format!("{}{path}", h.url)).json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

fn converse(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": [{"text": text}]}]})
}

fn invoke(text: &str, max_tokens: u64) -> Value {
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": max_tokens,
           "messages": [{"role": "user", "content": text}]})
}

/// The events of an event-stream body: (`:event-type`, payload JSON).
fn events(body: &[u8]) -> Vec<(String, Value)> {
    let mut bytes = bytes::Bytes::copy_from_slice(body);
    let mut decoder = MessageFrameDecoder::new();
    let mut events = Vec::new();
    while let Ok(DecodedFrame::Complete(message)) = decoder.decode_frame(&mut bytes) {
        let kind = message
            .headers()
            .iter()
            .find(|header| header.name().as_str() == ":event-type")
            .and_then(|header| match header.value() {
                HeaderValue::String(value) => Some(value.as_str().to_owned()),
                _ => None,
            })
            .unwrap_or_default();
        events.push((kind, serde_json::from_slice(message.payload()).unwrap()));
    }
    events
}

/// Checks where the last call went and how it was signed.
fn check_signed_for(h: &Harness, model: &str) {
    let sent = h.mock.stats.last_request().unwrap();
    assert_eq!(sent.bedrock_model().as_deref(), Some(model));
    assert_eq!(sent.aws_access_key_id().as_deref(), Some(AWS_KEYS.0));
    assert_eq!(sent.aws_region().as_deref(), Some("us-east-1"));
    assert_eq!(sent.aws_session_token().as_deref(), Some(AWS_SESSION_TOKEN));
    let authorization = sent.headers["authorization"].to_str().unwrap();
    assert!(!authorization.contains(ALICE), "{authorization}");
}

#[tokio::test]
async fn converse_through_a_profile_is_signed_bounded_and_priced_as_its_model() {
    let h = bedrock(Setup::default()).await;
    let response = post(
        &h,
        &path(PROFILE, "converse"),
        Some(ALICE),
        &converse("mock:tokens=6 mock:cached=4 hello"),
    )
    .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["usage"]["outputTokens"], 6, "{answer}");
    check_signed_for(&h, PROFILE);
    let sent = h.mock.stats.last_request().unwrap();
    assert_eq!(sent.body["inferenceConfig"]["maxTokens"], 64000);
    let entry = only_entry(&h);
    assert_eq!(
        entry.model, HAIKU,
        "one name for the model, however it is reached"
    );
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.usage, billed_by(&h.mock.stats));
    assert_eq!(entry.usage.cached_input, 4);

    // The model's own id is the same model in the books.
    let response = post(&h, &path(HAIKU, "converse"), Some(ALICE), &converse("hi")).await;
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();
    check_signed_for(&h, HAIKU);
    assert!(h.ledger().iter().all(|entry| entry.model == HAIKU));
}

#[tokio::test]
async fn a_converse_stream_is_passed_through_and_settled_before_its_metadata() {
    let h = bedrock(Setup::default()).await;
    let mut body = converse("mock:tokens=9 hello");
    body["inferenceConfig"] = json!({"maxTokens": 50});
    let response = post(&h, &path(PROFILE, "converse-stream"), Some(ALICE), &body).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/vnd.amazon.eventstream"));
    let bytes = response.bytes().await.unwrap();
    assert_eq!(h.store.open_reservations().0, 0, "settled before the end");
    let events = events(&bytes);
    let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"messageStart"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"metadata"), "{kinds:?}");
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.usage.output, 9);
    assert_eq!(entry.usage, billed_by(&h.mock.stats));
    check_signed_for(&h, PROFILE);
}

#[tokio::test]
async fn invoke_is_anthropics_messages_plain_and_streamed() {
    let h = bedrock(Setup::default()).await;
    let response = post(
        &h,
        &path(HAIKU, "invoke"),
        Some(ALICE),
        &invoke("mock:tokens=5 hi", 40),
    )
    .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["type"], "message", "{answer}");
    let entry = only_entry(&h);
    assert_eq!(entry.usage.output, 5);
    assert_eq!(entry.usage, billed_by(&h.mock.stats));

    let billed_before = billed_by(&h.mock.stats);
    let stream = path(PROFILE, "invoke-with-response-stream");
    let response = post(&h, &stream, Some(ALICE), &invoke("mock:tokens=8 hi", 40)).await;
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.unwrap();
    assert_eq!(h.store.open_reservations().0, 0, "settled before the end");
    let inner: Vec<String> = events(&bytes)
        .iter()
        .filter(|(kind, _)| kind == "chunk")
        .map(|(_, chunk)| {
            let data = base64::engine::general_purpose::STANDARD
                .decode(chunk["bytes"].as_str().unwrap())
                .unwrap();
            serde_json::from_slice::<Value>(&data).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        inner.last().map(String::as_str),
        Some("message_stop"),
        "{inner:?}"
    );
    let entry = h.ledger().last().cloned().unwrap();
    assert_eq!(entry.model, HAIKU);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.usage.output, 8);
    assert_eq!(
        entry.usage.input,
        billed_by(&h.mock.stats).input - billed_before.input
    );
}

#[tokio::test]
async fn refusals_are_in_bedrocks_shape_forwarded_nowhere_and_charged_nothing() {
    let h = bedrock(Setup {
        alice_cap: "0.05",
        ..Setup::default()
    })
    .await;
    let mut over = converse("hi");
    over["inferenceConfig"] = json!({"maxTokens": 60000});
    let mut guarded = converse("hi");
    guarded["guardrailConfig"] = json!({"guardrailIdentifier": "g", "guardrailVersion": "1"});
    let mut named = converse("hi");
    named["modelId"] = json!(HAIKU);
    let mut system_tool = converse("hi");
    system_tool["toolConfig"] = json!({"tools": [{"systemTool": {"name": "nova_grounding"}}]});
    let cases = [
        (
            "no key",
            path(HAIKU, "converse"),
            None,
            converse("hi"),
            401,
            "UnrecognizedClientException",
        ),
        (
            "a wrong key",
            path(HAIKU, "converse"),
            Some("tg-nobody"),
            converse("hi"),
            401,
            "UnrecognizedClientException",
        ),
        (
            "over budget",
            path(HAIKU, "converse"),
            Some(ALICE),
            over,
            402,
            "BudgetExceededException",
        ),
        (
            "a guardrail",
            path(HAIKU, "converse"),
            Some(ALICE),
            guarded,
            400,
            "ValidationException",
        ),
        (
            "the model in the body",
            path(HAIKU, "converse"),
            Some(ALICE),
            named,
            400,
            "ValidationException",
        ),
        (
            "a tool Bedrock runs",
            path(HAIKU, "converse"),
            Some(ALICE),
            system_tool,
            400,
            "ValidationException",
        ),
        (
            "an unpriced model",
            path("anthropic.claude-nonesuch-v1:0", "converse"),
            Some(ALICE),
            converse("hi"),
            404,
            "ResourceNotFoundException",
        ),
        (
            "the long context beta, unpriced for the model",
            path(HAIKU, "invoke"),
            Some(ALICE),
            json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
                   "anthropic_beta": ["context-1m-2025-08-07"],
                   "messages": [{"role": "user", "content": "hi"}]}),
            400,
            "ValidationException",
        ),
        (
            "invoke without max_tokens",
            path(HAIKU, "invoke"),
            Some(ALICE),
            json!({"anthropic_version": "bedrock-2023-05-31", "messages": [{"role": "user", "content": "hi"}]}),
            400,
            "ValidationException",
        ),
    ];
    for (name, path, key, body, status, error_type) in cases {
        let response = post(&h, &path, key, &body).await;
        assert_eq!(response.status(), status, "{name}");
        assert_eq!(response.headers()["x-amzn-errortype"], error_type, "{name}");
        let error: Value = response.json().await.unwrap();
        assert!(error["message"].is_string(), "{name}: {error}");
    }
    assert_eq!(h.mock.stats.requests(), 0, "nothing was forwarded");
    assert!(h.ledger().is_empty(), "nothing was charged");
}

#[tokio::test]
async fn an_upstream_error_passes_through_and_costs_nothing() {
    let h = bedrock(Setup::default()).await;
    let response = post(
        &h,
        &path(HAIKU, "converse"),
        Some(ALICE),
        &converse("mock:status=429"),
    )
    .await;
    assert_eq!(response.status(), 429);
    assert!(response.headers()["x-amzn-errortype"]
        .to_str()
        .unwrap()
        .starts_with("ThrottlingException"));
    h.settled().await;
    assert!(h.ledger().iter().all(|entry| entry.actual == 0));
    assert_eq!(spent(&h, ALICE).await, 0);
}

#[tokio::test]
async fn a_cut_converse_stream_is_settled_once_for_at_least_what_bedrock_billed() {
    let h = bedrock(Setup::default()).await;
    let mut body = converse("mock:tokens=40 mock:cut=5 mock:sleep_ms=5");
    body["inferenceConfig"] = json!({"maxTokens": 100});
    let response = post(&h, &path(HAIKU, "converse-stream"), Some(ALICE), &body).await;
    assert_eq!(response.status(), 200);
    let failed = read_to_failure(response).await;
    assert!(failed, "the client must see the stream fail");
    h.settled().await;
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Estimated);
    let billed = cost(HAIKU, &billed_by(&h.mock.stats));
    assert!(entry.actual >= delta(billed), "{entry:?} < {billed}");
    assert!(entry.actual <= delta(entry.reserved));
}

#[tokio::test]
async fn a_client_gone_mid_stream_is_charged_at_least_what_bedrock_billed() {
    let mut setup = Setup::default();
    setup.mock.tokens_per_sec = Some(50);
    let h = bedrock(setup).await;
    for (operation, body) in [
        ("converse-stream", {
            let mut body = converse("mock:tokens=200");
            body["inferenceConfig"] = json!({"maxTokens": 300});
            body
        }),
        (
            "invoke-with-response-stream",
            invoke("mock:tokens=200", 300),
        ),
    ] {
        let before = h.ledger().len();
        let billed_before = cost(HAIKU, &billed_by(&h.mock.stats));
        let response = post(&h, &path(PROFILE, operation), Some(ALICE), &body).await;
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
        let ledger = h.ledger();
        assert_eq!(ledger.len(), before + 1, "{operation}: {ledger:?}");
        let entry = ledger.last().unwrap();
        assert_eq!(entry.actual, delta(cost(&entry.model, &entry.usage)));
        // Give the provider time to notice and bill what it generated.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let billed = cost(HAIKU, &billed_by(&h.mock.stats)) - billed_before;
        assert!(
            entry.actual >= delta(billed),
            "{operation}: {entry:?} < {billed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_at_a_tight_cap_never_overspends() {
    // Each call's bound is about 5,100 µUSD (its 1,000 output tokens at
    // $5 a million); the cap holds three of them.
    let h = bedrock(Setup {
        alice_cap: "0.0160",
        ..Setup::default()
    })
    .await;
    let mut body = converse("mock:tokens=1000 hello");
    body["inferenceConfig"] = json!({"maxTokens": 1000});
    let path = path(PROFILE, "converse");
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
    assert!(spent <= 16_000, "spent {spent} µUSD of a 16,000 µUSD cap");
    let charged: i64 = h.ledger().iter().map(|entry| entry.actual).sum();
    assert_eq!(delta(spent), charged);
}

/// A Bedrock whose Converse answer reports, as `usage`, the text of the
/// request's first message, verbatim.
async fn spawn_verbatim_provider() -> std::net::SocketAddr {
    use http_body_util::{BodyExt, Full};
    let answer = |request: hyper::Request<hyper::body::Incoming>| async move {
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&body).unwrap();
        let usage = body["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        let answer = format!(
            r#"{{"output":{{"message":{{"role":"assistant","content":[{{"text":"Hi"}}]}}}},"stopReason":"end_turn","usage":{usage},"metrics":{{"latencyMs":1}}}}"#
        );
        Ok::<_, std::convert::Infallible>(
            hyper::Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(bytes::Bytes::from(answer)))
                .unwrap(),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                hyper::service::service_fn(answer),
            ));
        }
    });
    addr
}

#[tokio::test]
async fn absurd_usage_is_charged_the_bound_and_sane_usage_what_it_says() {
    let provider = spawn_verbatim_provider().await;
    let h = bedrock(Setup {
        bedrock_base_url: Some(format!("http://{provider}")),
        ..Setup::default()
    })
    .await;
    let cases = [
        (r#"{"inputTokens":4,"outputTokens":-2}"#, None),
        (r#"{"inputTokens":4.5,"outputTokens":2}"#, None),
        (r#"{"inputTokens":4,"outputTokens":9007199254740993}"#, None),
        (r#"{"inputTokens":"4","outputTokens":2}"#, None),
        (
            r#"{"inputTokens":4,"outputTokens":3,"cacheReadInputTokens":7}"#,
            Some((4, 7, 3)),
        ),
    ];
    for (usage, sane) in cases {
        let mut body = converse(usage);
        body["inferenceConfig"] = json!({"maxTokens": 100});
        let response = post(&h, &path(HAIKU, "converse"), Some(ALICE), &body).await;
        assert_eq!(response.status(), 200, "{usage}");
        response.bytes().await.unwrap();
        h.settled().await;
        let entry = h.ledger().last().cloned().unwrap();
        match sane {
            None => {
                assert_eq!(entry.status, LedgerStatus::Estimated, "{usage}: {entry:?}");
                assert_eq!(entry.actual, delta(entry.reserved), "{usage}: {entry:?}");
            }
            Some((input, cached, output)) => {
                assert_eq!(entry.status, LedgerStatus::Ok, "{usage}: {entry:?}");
                let counts = (
                    entry.usage.input,
                    entry.usage.cached_input,
                    entry.usage.output,
                );
                assert_eq!(counts, (input, cached, output));
            }
        }
    }
    assert_eq!(metric(&h.url, "tollgate_absurd_usage_total").await, 4);
}
