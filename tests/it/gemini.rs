//! The Gemini API through the real server to the mock: every route, the
//! request rules that move the price, usage read exactly (thoughts, cached
//! content, tool-use prompts, grounding), both stream framings, and every
//! way a call can end early. Bad input is 4xx in Google's shape, forwarded
//! nowhere and charged nothing.

use futures_util::StreamExt;
use serde_json::{json, Value};
use tollgate::budget::LedgerStatus;
use tollgate::hosted::HostedTool;
use tollgate::usage::Usage;

use crate::common::*;

const FLASH: &str = "gemini-2.5-flash";

async fn google() -> Harness {
    start(Setup {
        google: true,
        ..Setup::default()
    })
    .await
}

/// A one-turn request saying `text`.
fn contents(text: &str) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": text}]}]})
}

/// POSTs `body` to `/v1beta/models/{model}:{method}{query}` with the
/// gateway key in `x-goog-api-key`, as the SDKs send it.
async fn call(
    h: &Harness,
    model: &str,
    method: &str,
    query: &str,
    body: &Value,
) -> reqwest::Response {
    h.client()
        .post(format!("{}/v1beta/models/{model}:{method}{query}", h.url))
        .header("x-goog-api-key", ALICE)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The Google error a refused call answers, after checking its shape:
/// `{"error": {"code", "message", "status"}}` with the HTTP status as code.
async fn google_error(response: reqwest::Response, status: u16, google_status: &str) -> String {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], status, "{body}");
    assert_eq!(body["error"]["status"], google_status, "{body}");
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// What the mock billed, as the gateway's usage, with `searches` Google
/// Search uses.
fn billed(h: &Harness, searches: u64) -> Usage {
    let mut usage = billed_by(&h.mock.stats);
    if searches > 0 {
        usage.tool_calls.set(HostedTool::GoogleSearch, searches);
    }
    usage
}

#[tokio::test]
async fn a_call_is_bounded_forwarded_with_the_providers_key_and_charged_what_google_reports() {
    let h = google().await;
    let response = call(
        &h,
        FLASH,
        "generateContent",
        "",
        &contents("mock:tokens=7 hello"),
    )
    .await;
    assert_eq!(response.status(), 200);
    let cost_header: u64 = response.headers()["x-tollgate-cost-usd-micros"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["usageMetadata"]["candidatesTokenCount"], 7);
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.model, FLASH);
    assert_eq!(entry.usage, billed(&h, 0));
    assert_eq!(delta(cost_header), entry.actual);
    assert_eq!(delta(spent(&h, ALICE).await), entry.actual);
    // The output limit the price assumed is the one Google was sent, and
    // the provider's key replaced the gateway's.
    let sent = h.mock.stats.last_request().unwrap();
    assert_eq!(sent.body["generationConfig"]["maxOutputTokens"], 65536);
    assert_eq!(sent.google_api_key().as_deref(), Some(PROVIDER_KEY));
    // The bound: 65,536 output tokens plus 24,576 of dynamic thinking.
    let prices = prices();
    let price = prices.get(FLASH).unwrap();
    let output_bound = price.cost(&Usage {
        output: 65536 + 24576,
        ..Usage::default()
    });
    assert!(entry.reserved >= output_bound, "{entry:?}");
}

#[tokio::test]
async fn the_key_may_come_as_a_query_parameter_and_is_never_forwarded() {
    let h = google().await;
    let response = h
        .client()
        .post(format!(
            "{}/v1/models/{FLASH}:generateContent?key={ALICE}",
            h.url
        ))
        .json(&contents("hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let sent = h.mock.stats.last_request().unwrap();
    assert_eq!(sent.path, format!("/v1/models/{FLASH}:generateContent"));
    assert_eq!(sent.query_param("key"), None, "{sent:?}");
    assert_eq!(sent.google_api_key().as_deref(), Some(PROVIDER_KEY));
    only_entry(&h);
}

/// Reads a whole stream, checking that the call is settled when the last
/// byte arrives: the chunk that ends it is held until then.
async fn read_stream(h: &Harness, response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert_eq!(h.store.open_reservations().0, 0, "settled after the end");
    text
}

#[tokio::test]
async fn both_stream_framings_are_charged_exactly_with_thoughts_cache_and_tool_prompts() {
    let h = google().await;
    let mut expected = 0;
    for query in ["?alt=sse", ""] {
        let mut body =
            contents("mock:tokens=9 mock:thoughts=40 mock:cached=3 mock:tool_prompt=5 go");
        body["generationConfig"] = json!({"candidateCount": 2, "maxOutputTokens": 20});
        let billed_before = billed(&h, 0);
        let response = call(&h, FLASH, "streamGenerateContent", query, &body).await;
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        let text = read_stream(&h, response).await;
        if query.is_empty() {
            assert!(
                content_type.starts_with("application/json"),
                "{content_type}"
            );
            let chunks: Vec<Value> = serde_json::from_str(&text).unwrap();
            assert!(chunks.len() > 9, "{text}");
        } else {
            assert!(
                content_type.starts_with("text/event-stream"),
                "{content_type}"
            );
            assert!(text.starts_with("data: "), "{text}");
        }
        let entry = h.ledger().last().cloned().unwrap();
        assert_eq!(entry.status, LedgerStatus::Ok);
        let billed_now = billed(&h, 0);
        let this_call = Usage {
            input: billed_now.input - billed_before.input,
            cached_input: billed_now.cached_input - billed_before.cached_input,
            output: billed_now.output - billed_before.output,
            ..Usage::default()
        };
        assert_eq!(entry.usage, this_call, "{query}");
        // Two candidates of 9 words, and 40 thinking tokens, are output;
        // the cached tokens are read apart and the tool-use prompt is input.
        assert_eq!(entry.usage.output, 2 * 9 + 40);
        assert_eq!(entry.usage.cached_input, 3);
        assert_eq!(entry.actual, delta(cost(FLASH, &entry.usage)));
        expected += entry.actual;
    }
    assert_eq!(delta(spent(&h, ALICE).await), expected);
}

#[tokio::test]
async fn thinking_budgets_move_the_bound() {
    let h = google().await;
    let reserved = |budget: Option<i64>| {
        let mut body = contents("think");
        body["generationConfig"] = json!({"maxOutputTokens": 100});
        if let Some(budget) = budget {
            body["generationConfig"]["thinkingConfig"] = json!({"thinkingBudget": budget});
        }
        let h = &h;
        async move {
            let response = call(h, FLASH, "generateContent", "", &body).await;
            assert_eq!(response.status(), 200);
            let sent = h.mock.stats.last_request().unwrap();
            assert_eq!(sent.body["generationConfig"], body["generationConfig"]);
            h.ledger().last().unwrap().reserved
        }
    };
    let none = reserved(Some(0)).await;
    let thousand = reserved(Some(1000)).await;
    let dynamic = reserved(Some(-1)).await;
    let unset = reserved(None).await;
    let output = |tokens| {
        cost(
            FLASH,
            &Usage {
                output: tokens,
                ..Usage::default()
            },
        )
    };
    // Costs round up once per call: the differences agree to a micro.
    assert!(
        (thousand - none).abs_diff(output(1000)) <= 1,
        "{none} {thousand}"
    );
    assert!(
        (dynamic - none).abs_diff(output(24576)) <= 1,
        "{none} {dynamic}"
    );
    // Unset is dynamic; the two bodies' framing differs by a few bytes.
    assert!(dynamic.abs_diff(unset) <= 10, "{dynamic} {unset}");
}

#[tokio::test]
async fn google_search_is_charged_per_prompt_on_gemini_2_and_per_query_after() {
    let h = google().await;
    let mut body = contents("mock:tool_calls=3 search");
    body["tools"] = json!([{"googleSearch": {}}]);
    body["generationConfig"] = json!({"maxOutputTokens": 50});

    let response = call(&h, FLASH, "generateContent", "", &body).await;
    assert_eq!(response.status(), 200);
    let grounded: Value = response.json().await.unwrap();
    let queries = &grounded["candidates"][0]["groundingMetadata"]["webSearchQueries"];
    assert_eq!(queries.as_array().unwrap().len(), 3, "{grounded}");
    let entry = only_entry(&h);
    assert_eq!(entry.usage.tool_calls.get(HostedTool::GoogleSearch), 1);

    let response = call(&h, "gemini-3-flash-preview", "generateContent", "", &body).await;
    assert_eq!(response.status(), 200);
    let entry = h.ledger().last().cloned().unwrap();
    assert_eq!(entry.usage.tool_calls.get(HostedTool::GoogleSearch), 3);
    assert_eq!(entry.actual, delta(cost(&entry.model, &entry.usage)));
    // Five queries are reserved; each is $0.014.
    let without_search = cost(
        "gemini-3-flash-preview",
        &Usage {
            tool_calls: Default::default(),
            ..entry.usage
        },
    );
    assert!(entry.actual - delta(without_search) >= 3 * 14_000 - 1);
}

#[tokio::test]
async fn count_tokens_is_forwarded_and_charged_nothing() {
    let h = google().await;
    let response = call(&h, FLASH, "countTokens", "", &contents("count these words")).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(body["totalTokens"].as_u64().unwrap() > 0, "{body}");
    assert_eq!(h.mock.stats.requests(), 1);
    assert!(h.ledger().is_empty());
    assert_eq!(spent(&h, ALICE).await, 0);
}

#[tokio::test]
async fn the_models_routes_answer_in_googles_shape() {
    let h = google().await;
    let get = |path: String| {
        h.client()
            .get(format!("{}{path}", h.url))
            .header("x-goog-api-key", ALICE)
            .send()
    };
    let list: Value = get("/v1beta/models".to_owned())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = list["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"models/gemini-2.5-flash"), "{list}");
    let one = get(format!("/v1beta/models/{FLASH}")).await.unwrap();
    assert_eq!(one.status(), 200);
    let one: Value = one.json().await.unwrap();
    assert_eq!(one["name"], "models/gemini-2.5-flash");
    let missing = get("/v1beta/models/gemini-0-nonesuch".to_owned())
        .await
        .unwrap();
    google_error(missing, 404, "NOT_FOUND").await;
    assert_eq!(
        h.mock.stats.requests(),
        0,
        "the gateway answers these itself"
    );
}

#[tokio::test]
async fn a_budget_refusal_is_402_failed_precondition_naming_the_scope() {
    let h = start(Setup {
        google: true,
        alice_cap: "0.10",
        ..Setup::default()
    })
    .await;
    let mut body = contents("hello");
    body["generationConfig"] = json!({"maxOutputTokens": 60000});
    let response = call(&h, FLASH, "generateContent", "", &body).await;
    let message = google_error(response, 402, "FAILED_PRECONDITION").await;
    assert!(message.contains("key"), "{message}");
    assert!(
        message.contains("maxOutputTokens"),
        "says how to fit: {message}"
    );
    assert_eq!(h.mock.stats.requests(), 0);
    assert!(h.ledger().is_empty());
}

#[tokio::test]
async fn bad_input_is_refused_in_googles_shape_forwarded_nowhere_and_charged_nothing() {
    let h = google().await;
    let with = |extra: Value| {
        let mut body = contents("hello");
        for (field, value) in extra.as_object().unwrap() {
            body[field] = value.clone();
        }
        body
    };
    let cases: Vec<(&str, &str, Value, u16, &str, &str)> = vec![
        (
            "not JSON",
            FLASH,
            json!("{\"contents\": ["),
            400,
            "INVALID_ARGUMENT",
            "",
        ),
        (
            "nine candidates",
            FLASH,
            with(json!({"generationConfig": {"candidateCount": 9}})),
            400,
            "INVALID_ARGUMENT",
            "candidateCount",
        ),
        (
            "a field spelled both ways",
            FLASH,
            with(json!({"generationConfig": {"maxOutputTokens": 10, "max_output_tokens": 5000}})),
            400,
            "INVALID_ARGUMENT",
            "max_output_tokens",
        ),
        (
            "generationConfig both ways",
            FLASH,
            with(json!({"generationConfig": {}, "generation_config": {"maxOutputTokens": 9}})),
            400,
            "INVALID_ARGUMENT",
            "generation_config",
        ),
        (
            "a negative output limit",
            FLASH,
            with(json!({"generationConfig": {"maxOutputTokens": -5}})),
            400,
            "INVALID_ARGUMENT",
            "maxOutputTokens",
        ),
        (
            "audio input",
            FLASH,
            json!({"contents": [{"role": "user", "parts": [
                {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}}]}]}),
            400,
            "INVALID_ARGUMENT",
            "audio",
        ),
        (
            "code execution",
            FLASH,
            with(json!({"tools": [{"codeExecution": {}}]})),
            400,
            "INVALID_ARGUMENT",
            "codeExecution",
        ),
        (
            "url context",
            FLASH,
            with(json!({"tools": [{"url_context": {}}]})),
            400,
            "INVALID_ARGUMENT",
            "url_context",
        ),
        (
            "an unpriced model",
            "gemini-0-nonesuch",
            contents("hi"),
            404,
            "NOT_FOUND",
            "gemini-0-nonesuch",
        ),
        (
            "a model of another family",
            "gpt-4o-mini",
            contents("hi"),
            400,
            "INVALID_ARGUMENT",
            "gpt-4o-mini",
        ),
    ];
    for (name, model, body, status, google_status, names) in cases {
        let body = match body {
            Value::String(raw) => raw,
            body => body.to_string(),
        };
        let response = h
            .client()
            .post(format!("{}/v1beta/models/{model}:generateContent", h.url))
            .header("x-goog-api-key", ALICE)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        eprintln!("case: {name}");
        let message = google_error(response, status, google_status).await;
        assert!(message.contains(names), "{name}: {message}");
    }
    for (name, key, status, google_status) in [
        ("no key", None, 401, "UNAUTHENTICATED"),
        ("a wrong key", Some("tg-nobody"), 401, "UNAUTHENTICATED"),
    ] {
        let mut request = h
            .client()
            .post(format!(
                "{}/v1beta/models/{FLASH}:streamGenerateContent?alt=sse",
                h.url
            ))
            .json(&contents("hi"));
        if let Some(key) = key {
            request = request.header("x-goog-api-key", key);
        }
        let message = google_error(request.send().await.unwrap(), status, google_status).await;
        assert!(!message.is_empty(), "{name}");
    }
    assert_eq!(h.mock.stats.requests(), 0, "nothing was forwarded");
    assert!(h.ledger().is_empty(), "nothing was charged");
}

#[tokio::test]
async fn an_upstream_error_passes_through_and_costs_nothing() {
    let h = google().await;
    for (status, google_status) in [(429, "RESOURCE_EXHAUSTED"), (500, "INTERNAL")] {
        let text = format!("mock:status={status}");
        let response = call(
            &h,
            FLASH,
            "streamGenerateContent",
            "?alt=sse",
            &contents(&text),
        )
        .await;
        google_error(response, status, google_status).await;
    }
    h.settled().await;
    assert!(
        h.ledger().iter().all(|entry| entry.actual == 0),
        "{:?}",
        h.ledger()
    );
    assert_eq!(spent(&h, ALICE).await, 0);
}

#[tokio::test]
async fn a_cut_stream_is_settled_once_for_at_least_what_google_billed() {
    let h = google().await;
    for query in ["?alt=sse", ""] {
        let before = h.ledger().len();
        let billed_before = cost(FLASH, &billed(&h, 0));
        let mut body = contents("mock:tokens=50 mock:thoughts=30 mock:cut=6 mock:sleep_ms=5");
        body["generationConfig"] = json!({"maxOutputTokens": 100});
        let response = call(&h, FLASH, "streamGenerateContent", query, &body).await;
        assert_eq!(response.status(), 200);
        let failed = read_to_failure(response).await;
        assert!(failed, "{query}: the client must see the stream fail");
        h.settled().await;
        let ledger = h.ledger();
        assert_eq!(ledger.len(), before + 1, "{ledger:?}");
        let entry = ledger.last().unwrap();
        assert_eq!(entry.status, LedgerStatus::Estimated, "{query}");
        // Thinking models bill what they never stream: a cut one is
        // charged its whole output bound.
        assert_eq!(entry.usage.output, 100 + 24576, "{query}: {entry:?}");
        let billed = cost(FLASH, &billed(&h, 0)) - billed_before;
        assert!(
            entry.actual >= delta(billed),
            "{query}: {entry:?} < {billed}"
        );
    }
}

#[tokio::test]
async fn a_client_gone_mid_stream_is_charged_at_least_what_google_billed() {
    let mut setup = Setup {
        google: true,
        ..Setup::default()
    };
    setup.mock.tokens_per_sec = Some(100);
    let h = start(setup).await;
    let mut body = contents("mock:tokens=60 mock:thoughts=500");
    body["generationConfig"] = json!({"maxOutputTokens": 1000});
    let response = call(&h, FLASH, "streamGenerateContent", "?alt=sse", &body).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    for _ in 0..3 {
        stream.next().await.unwrap().unwrap();
    }
    drop(stream);
    h.settled().await;
    let entry = only_entry(&h);
    // The gateway reads a thinking model's stream to its end when its
    // client leaves, and charges the usage Google reports.
    assert_eq!(entry.status, LedgerStatus::Ok, "{entry:?}");
    assert_eq!(entry.usage, billed(&h, 0));
    assert_eq!(entry.usage.output, 560);
    assert_eq!(delta(spent(&h, ALICE).await), entry.actual);
}

/// A Gemini API that reports, as `usageMetadata`, the text of the
/// request's last part, verbatim; plain or as one SSE event.
async fn spawn_verbatim_provider() -> std::net::SocketAddr {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;
    let answer = |request: hyper::Request<Incoming>| async move {
        let stream = request.uri().path().ends_with(":streamGenerateContent");
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&body).unwrap();
        let usage = body["contents"][0]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        let chunk = format!(
            r#"{{"candidates":[{{"content":{{"role":"model","parts":[{{"text":"Hi"}}]}},"finishReason":"STOP","index":0}}],"usageMetadata":{usage},"modelVersion":"{FLASH}"}}"#
        );
        let (content_type, text) = if stream {
            ("text/event-stream", format!("data: {chunk}\r\n\r\n"))
        } else {
            ("application/json", chunk)
        };
        Ok::<_, std::convert::Infallible>(
            hyper::Response::builder()
                .header("content-type", content_type)
                .body(Full::new(bytes::Bytes::from(text)))
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
    let h = start(Setup {
        google: true,
        gemini_base_url: Some(format!("http://{provider}")),
        ..Setup::default()
    })
    .await;
    let cases = [
        (r#"{"promptTokenCount":4,"candidatesTokenCount":-2}"#, None),
        (r#"{"promptTokenCount":4,"thoughtsTokenCount":2.5}"#, None),
        (
            r#"{"promptTokenCount":4,"candidatesTokenCount":9007199254740993}"#,
            None,
        ),
        (
            r#"{"promptTokenCount":4,"candidatesTokenCount":"many"}"#,
            None,
        ),
        (r#"{"promptTokenCount":"4","candidatesTokenCount":3}"#, None),
        (
            r#"{"promptTokenCount":4,"candidatesTokenCount":3,"thoughtsTokenCount":5}"#,
            Some((4, 8)),
        ),
    ];
    for (usage, sane) in cases {
        for query in ["generateContent", "streamGenerateContent?alt=sse"] {
            let (method, query) = query
                .split_once('?')
                .map_or((query, ""), |(m, _)| (m, "?alt=sse"));
            let mut body = contents(usage);
            body["generationConfig"] =
                json!({"maxOutputTokens": 100, "thinkingConfig": {"thinkingBudget": 0}});
            let response = call(&h, FLASH, method, query, &body).await;
            assert_eq!(response.status(), 200, "{usage}");
            response.bytes().await.unwrap();
            h.settled().await;
            let entry = h.ledger().last().cloned().unwrap();
            match sane {
                None => {
                    assert_eq!(entry.status, LedgerStatus::Estimated, "{usage}: {entry:?}");
                    assert_eq!(entry.actual, delta(entry.reserved), "{usage}: {entry:?}");
                    assert_eq!(entry.usage.output, 100, "{usage}: {entry:?}");
                }
                Some((input, output)) => {
                    assert_eq!(entry.status, LedgerStatus::Ok, "{usage}: {entry:?}");
                    assert_eq!((entry.usage.input, entry.usage.output), (input, output));
                    assert_eq!(entry.actual, delta(cost(FLASH, &entry.usage)));
                }
            }
        }
    }
    assert_eq!(metric(&h.url, "tollgate_absurd_usage_total").await, 10);
}
