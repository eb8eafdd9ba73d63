//! Vertex AI: the bearer check against issued tokens, Gemini under
//! `publishers/google` (both stream framings), and Claude's `rawPredict` /
//! `streamRawPredict`.

use std::time::Duration;

use serde_json::{json, Value};

use super::gemini::{array_chunks, sse_chunks};
use super::token::access_token;
use super::{parse_sse, settled, start};
use crate::reply::text;
use crate::usage::Usage;
use crate::{MockServer, VertexTarget};

const GEMINI: &str =
    "/v1/projects/tollgate-test/locations/us-central1/publishers/google/models/gemini-2.5-flash";
const CLAUDE: &str =
    "/v1/projects/tollgate-test/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929";

async fn call(
    server: &MockServer,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn contents(prompt: &str) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": prompt}]}]})
}

fn message(prompt: &str) -> Value {
    json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 100,
        "messages": [{"role": "user", "content": prompt}]})
}

#[tokio::test]
async fn vertex_routes_accept_only_tokens_the_mock_issued() {
    let server = start().await;
    for path in [
        format!("{GEMINI}:generateContent"),
        format!("{CLAUDE}:rawPredict"),
    ] {
        for token in [None, Some("ya29.forged")] {
            let response = call(&server, &path, token, contents("hi")).await;
            assert_eq!(response.status(), 401);
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], 401, "Google's shape on {path}");
            assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
        }
    }
    let token = access_token(&server).await;
    let response = call(
        &server,
        &format!("{GEMINI}:generateContent"),
        Some(&token),
        contents("hi"),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["candidates"][0]["content"]["parts"][0]["text"],
        text(12)
    );
    assert_eq!(body["usageMetadata"]["trafficType"], "ON_DEMAND");
    let seen = server.stats.last_request().unwrap();
    assert_eq!(
        seen.vertex_target(),
        Some(VertexTarget {
            version: "v1".into(),
            project: "tollgate-test".into(),
            location: "us-central1".into(),
            publisher: "google".into(),
            model: "gemini-2.5-flash".into(),
            method: "generateContent".into(),
        })
    );

    server.tokens.revoke_tokens();
    let response = call(
        &server,
        &format!("{GEMINI}:generateContent"),
        Some(&token),
        contents("hi"),
    )
    .await;
    assert_eq!(response.status(), 401);
}

#[tokio::test]
async fn a_token_expires_after_its_lifetime() {
    let server = start().await;
    server.tokens.set_token_lifetime(Duration::from_millis(150));
    let token = access_token(&server).await;
    let path = format!("{GEMINI}:generateContent");
    assert_eq!(
        call(&server, &path, Some(&token), contents("hi"))
            .await
            .status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = call(&server, &path, Some(&token), contents("hi")).await;
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["error"]["details"][0]["reason"],
        "ACCESS_TOKEN_EXPIRED"
    );
}

#[tokio::test]
async fn vertex_gemini_streams_in_both_framings_and_counts_tokens() {
    let server = start().await;
    let token = access_token(&server).await;
    let sse = call(
        &server,
        &format!("{GEMINI}:streamGenerateContent?alt=sse"),
        Some(&token),
        contents("hi mock:tokens=2"),
    )
    .await;
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let chunks = sse_chunks(&sse.text().await.unwrap());
    assert_eq!(chunks.len(), 3);
    assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");

    let array = call(
        &server,
        &format!(
            "{}:streamGenerateContent",
            GEMINI
                .replace("/v1/", "/v1beta1/")
                .replace("us-central1", "global")
        ),
        Some(&token),
        contents("hi mock:tokens=2"),
    )
    .await;
    assert_eq!(
        array.headers()["content-type"],
        "application/json; charset=UTF-8"
    );
    let chunks = array_chunks(&array.text().await.unwrap());
    assert_eq!(chunks.len(), 3);
    let target = server
        .stats
        .last_request()
        .unwrap()
        .vertex_target()
        .unwrap();
    assert_eq!(
        (target.version.as_str(), target.location.as_str()),
        ("v1beta1", "global")
    );

    let response = call(
        &server,
        &format!("{GEMINI}:countTokens"),
        Some(&token),
        contents("hello"),
    )
    .await;
    let counted: Value = response.json().await.unwrap();
    assert_eq!(counted["totalTokens"], 2 + 3);
    let prompt = ("hi mock:tokens=2".len() as u64).div_ceil(4) + 3;
    settled(
        &server,
        Usage {
            input: 2 * prompt,
            output: 4,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn raw_predict_answers_anthropic_messages_with_the_path_model() {
    let server = start().await;
    let token = access_token(&server).await;
    let response = call(
        &server,
        &format!("{CLAUDE}:rawPredict"),
        Some(&token),
        message("hello"),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["model"], "claude-sonnet-4-5@20250929");
    assert_eq!(body["content"][0]["text"], text(12));
    let input = ("hello".len() as u64).div_ceil(4) + 3;
    assert_eq!(body["usage"]["input_tokens"], input);
    assert_eq!(
        server.stats.billed(),
        Usage {
            input,
            output: 12,
            ..Usage::default()
        }
    );
    let seen = server.stats.last_request().unwrap();
    assert_eq!(seen.vertex_target().unwrap().publisher, "anthropic");
    assert_eq!(seen.body["anthropic_version"], "vertex-2023-10-16");

    let mut unversioned = message("hello");
    unversioned
        .as_object_mut()
        .unwrap()
        .remove("anthropic_version");
    let response = call(
        &server,
        &format!("{CLAUDE}:rawPredict"),
        Some(&token),
        unversioned,
    )
    .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "anthropic_version: Field required"}})
    );

    let counting = CLAUDE.replace("claude-sonnet-4-5@20250929", "count-tokens");
    let mut count = message("hello");
    count["model"] = json!("claude-sonnet-4-5@20250929");
    let response = call(
        &server,
        &format!("{counting}:rawPredict"),
        Some(&token),
        count,
    )
    .await;
    let counted: Value = response.json().await.unwrap();
    assert_eq!(counted, json!({"input_tokens": input}));

    let response = call(
        &server,
        &format!("{CLAUDE}:rawPredict"),
        Some(&token),
        message("mock:status=529"),
    )
    .await;
    assert_eq!(response.status(), 529);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn stream_raw_predict_answers_anthropic_events() {
    let server = start().await;
    let token = access_token(&server).await;
    let response = call(
        &server,
        &format!("{CLAUDE}:streamRawPredict"),
        Some(&token),
        message("hi mock:tokens=3"),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&response.text().await.unwrap());
    let names: Vec<&str> = events
        .iter()
        .map(|event| event.name.as_deref().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    assert_eq!(
        names
            .iter()
            .filter(|name| **name == "content_block_delta")
            .count(),
        3
    );
    assert_eq!(
        events[0].json()["message"]["model"],
        "claude-sonnet-4-5@20250929"
    );
    let input = ("hi mock:tokens=3".len() as u64).div_ceil(4) + 3;
    settled(
        &server,
        Usage {
            input,
            output: 3,
            ..Usage::default()
        },
    )
    .await;

    let wrong = call(
        &server,
        &format!("{CLAUDE}:generateContent"),
        Some(&token),
        message("hi"),
    )
    .await;
    assert_eq!(wrong.status(), 404);
}
