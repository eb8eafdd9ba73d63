//! Tests of the mock over real sockets: every route's shapes and usage,
//! the directives, the key and token checks, the stats and incremental
//! streaming.

mod anthropic;
mod azure;
mod bedrock;
mod functions;
mod gemini;
mod openai;
mod responses;
mod token;
mod vertex;

use serde_json::{json, Value};

use super::reply::{count_tokens, text};
use super::{spawn, MockOptions, MockServer};

pub(super) async fn start() -> MockServer {
    spawn(MockOptions::default()).await.unwrap()
}

pub(super) async fn post(server: &MockServer, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

pub(super) async fn post_json(server: &MockServer, path: &str, body: Value) -> (u16, Value) {
    let response = post(server, path, body).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// One SSE event: its `event:` name, if any, and its data.
#[derive(Debug)]
pub(super) struct Sse {
    pub name: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

pub(super) fn parse_sse(body: &str) -> Vec<Sse> {
    assert!(body.ends_with("\n\n"), "stream ends mid-event: {body:?}");
    body.split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = Some(value.to_owned());
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            Sse {
                name,
                data: data.unwrap(),
            }
        })
        .collect()
}

pub(super) async fn post_sse(server: &MockServer, path: &str, body: Value) -> Vec<Sse> {
    let response = post(server, path, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    parse_sse(&response.text().await.unwrap())
}

/// Reads a stream until it ends or breaks; returns the bytes and whether it
/// broke.
pub(super) async fn read_until_cut(response: reqwest::Response) -> (String, bool) {
    use futures_util::StreamExt;
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(_) => return (String::from_utf8(received).unwrap(), true),
        }
    }
    (String::from_utf8(received).unwrap(), false)
}

/// Waits until a stream task has billed (it bills just before its
/// terminal events, which the client may read first).
pub(super) async fn settled(server: &MockServer, want: crate::usage::Usage) {
    for _ in 0..200 {
        if server.stats.billed() == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(server.stats.billed(), want);
}

/// The chat prompt count of a single user message.
pub(super) fn one_user_message_tokens(content: &str) -> u64 {
    count_tokens("user") + count_tokens(content) + 3 + 3
}

#[tokio::test]
async fn unknown_paths_get_openai_404() {
    let server = start().await;
    let (status, body) = post_json(&server, "/v1/nope", json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["message"], "Invalid URL (POST /v1/nope)");
    assert_eq!(server.stats.requests(), 1);
    assert_eq!(server.stats.last_request().unwrap().path, "/v1/nope");
}

#[tokio::test]
async fn malformed_json_is_a_400_in_each_provider_shape() {
    let server = start().await;
    let client = reqwest::Client::new();
    for (path, anthropic) in [("/v1/chat/completions", false), ("/v1/messages", true)] {
        let response = client
            .post(format!("{}{path}", server.url()))
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await.unwrap();
        if anthropic {
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], "invalid_request_error");
        } else {
            assert_eq!(body["error"]["type"], "invalid_request_error");
            assert!(body["error"]["message"].as_str().unwrap().contains("JSON"));
        }
    }
    let last = server.stats.last_request().unwrap();
    assert_eq!(last.body, Value::Null);
    assert_eq!(server.stats.billed(), crate::usage::Usage::default());
}

#[tokio::test]
async fn the_expected_key_is_enforced_per_provider() {
    let server = spawn(MockOptions {
        expect_key: Some("sk-upstream".into()),
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let chat = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/v1/chat/completions", server.url());

    let missing = client.post(&url).json(&chat).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");

    let wrong = client
        .post(&url)
        .bearer_auth("sk-other")
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);

    let right = client
        .post(&url)
        .bearer_auth("sk-upstream")
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);

    let message = json!({"model": "claude-haiku-4-5", "max_tokens": 10,
                         "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/v1/messages", server.url());
    let wrong = client
        .post(&url)
        .header("x-api-key", "sk-other")
        .json(&message)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    let bearer = client
        .post(&url)
        .bearer_auth("sk-upstream")
        .json(&message)
        .send()
        .await
        .unwrap();
    assert_eq!(
        bearer.status(),
        200,
        "Anthropic's SDK sends the key as a bearer token"
    );
    let keyed = client
        .post(&url)
        .header("x-api-key", "sk-upstream")
        .json(&message)
        .send()
        .await
        .unwrap();
    assert_eq!(keyed.status(), 200);
    assert_eq!(server.stats.requests(), 6);
}

#[tokio::test]
async fn models_are_listed_in_the_callers_shape() {
    let server = start().await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/models", server.url());
    let openai: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(openai["object"], "list");
    assert!(openai["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "gpt-4o-mini"));
    let anthropic: Value = client
        .get(&url)
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(anthropic["data"][0]["type"], "model");
    assert_eq!(anthropic["has_more"], false);
}

#[tokio::test]
async fn http2_and_keep_alive_are_served() {
    let server = start().await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for _ in 0..3 {
        let response = client
            .post(format!("{}/v1/chat/completions", server.url()))
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.version(), reqwest::Version::HTTP_2);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], text(12));
    }
    assert_eq!(server.stats.requests(), 3);

    let cut = json!({"model": "m", "stream": true,
                     "messages": [{"role": "user", "content": "hi mock:cut=2"}]});
    let response = client
        .post(format!("{}/v1/chat/completions", server.url()))
        .json(&cut)
        .send()
        .await
        .unwrap();
    let (received, was_cut) = read_until_cut(response).await;
    assert!(was_cut);
    assert_eq!(parse_sse(&received).len(), 1 + 2, "{received}");
}

#[tokio::test]
async fn oversized_bodies_get_413_in_provider_shape() {
    let server = start().await;
    let body = vec![b' '; (32 << 20) + 1];
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.url()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "request_too_large");
}

#[tokio::test]
async fn shutdown_stops_the_server() {
    let server = start().await;
    let addr = server.addr;
    server.shutdown().await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
