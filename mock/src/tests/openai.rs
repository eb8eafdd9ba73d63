//! Chat completions, legacy completions and embeddings.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    one_user_message_tokens, parse_sse, post, post_json, post_sse, read_until_cut, settled, start,
};
use crate::reply::{count_tokens, text, word};
use crate::usage::Usage;
use crate::{spawn, MockOptions};

fn chat(content: &str) -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}]})
}

#[tokio::test]
async fn chat_answers_with_openai_shape_and_request_usage() {
    let server = start().await;
    let mut request = chat("hello there");
    request["messages"] = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
    ]);
    let response = post(&server, "/v1/chat/completions", request).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().contains_key("x-request-id"));
    let body: Value = response.json().await.unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-4o-mini");
    assert!(body["created"].is_u64());
    assert!(body["system_fingerprint"].is_string());
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], text(12));
    assert_eq!(choice["message"]["refusal"], Value::Null);
    assert_eq!(choice["logprobs"], Value::Null);
    assert_eq!(choice["finish_reason"], "stop");
    let prompt = count_tokens("system")
        + count_tokens("be brief")
        + count_tokens("user")
        + count_tokens("hello there")
        + 3 * 2
        + 3;
    let usage = &body["usage"];
    assert_eq!(usage["prompt_tokens"], prompt);
    assert_eq!(usage["completion_tokens"], 12);
    assert_eq!(usage["total_tokens"], prompt + 12);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: prompt,
            output: 12,
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn chat_choices_are_capped_by_the_output_limit() {
    let server = start().await;
    let mut request = chat("hi mock:tokens=8");
    request["n"] = json!(3);
    request["max_completion_tokens"] = json!(5);
    let (status, body) = post_json(&server, "/v1/chat/completions", request).await;
    assert_eq!(status, 200);
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (index, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], index);
        assert_eq!(choice["finish_reason"], "length");
        assert_eq!(choice["message"]["content"], text(5));
    }
    assert_eq!(body["usage"]["completion_tokens"], 15);

    let mut uncapped = chat("hi mock:tokens=3");
    uncapped["max_tokens"] = json!(3);
    let (_, body) = post_json(&server, "/v1/chat/completions", uncapped).await;
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn chat_stream_with_usage_ends_with_a_usage_chunk_then_done() {
    let server = start().await;
    let mut request = chat("hi mock:tokens=4 mock:cached=2");
    request["stream"] = json!(true);
    request["stream_options"] = json!({"include_usage": true});
    let events = post_sse(&server, "/v1/chat/completions", request).await;
    assert!(events.iter().all(|event| event.name.is_none()));
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|event| event.json())
        .collect();
    assert_eq!(chunks.len(), 1 + 4 + 1 + 1);
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["id"], chunks[0]["id"]);
        assert_eq!(chunk["model"], "gpt-4o-mini");
        assert!(chunk.as_object().unwrap().contains_key("usage"));
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": "", "refusal": null})
    );
    assert_eq!(chunks[0]["usage"], Value::Null);
    let content: String = chunks[1..5]
        .iter()
        .map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(content, text(4));
    assert_eq!(chunks[5]["choices"][0]["delta"], json!({}));
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[6]["choices"], json!([]));
    let prompt = one_user_message_tokens("hi mock:tokens=4 mock:cached=2");
    assert_eq!(chunks[6]["usage"]["prompt_tokens"], prompt);
    assert_eq!(chunks[6]["usage"]["completion_tokens"], 4);
    assert_eq!(
        chunks[6]["usage"]["prompt_tokens_details"]["cached_tokens"],
        2
    );
    settled(
        &server,
        Usage {
            input: prompt - 2,
            cached_input: 2,
            output: 4,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn chat_stream_without_usage_sends_none_but_bills_it() {
    let server = start().await;
    let mut request = chat("hi");
    request["stream"] = json!(true);
    request["n"] = json!(2);
    let events = post_sse(&server, "/v1/chat/completions", request).await;
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|event| event.json())
        .collect();
    assert_eq!(chunks.len(), 2 + 12 * 2 + 2);
    assert!(chunks.iter().all(|chunk| chunk.get("usage").is_none()));
    assert!(chunks
        .iter()
        .all(|chunk| chunk["choices"].as_array().unwrap().len() == 1));
    for index in 0..2 {
        let content: String = chunks
            .iter()
            .filter(|chunk| chunk["choices"][0]["index"] == index)
            .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(content, text(12));
    }
    settled(
        &server,
        Usage {
            input: one_user_message_tokens("hi"),
            output: 24,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn legacy_completions_answer_and_stream() {
    let server = start().await;
    let request = json!({"model": "gpt-3.5-turbo-instruct", "prompt": "Say this", "max_tokens": 7});
    let (status, body) = post_json(&server, "/v1/completions", request.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], text(7));
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["prompt_tokens"], count_tokens("Say this"));
    assert_eq!(body["usage"]["completion_tokens"], 7);

    let mut streamed = request;
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let events = post_sse(&server, "/v1/completions", streamed).await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|event| event.json())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(content, text(7));
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "length"
    );
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 7);
}

#[tokio::test]
async fn embeddings_are_deterministic_per_input() {
    let server = start().await;
    let request = json!({
        "model": "text-embedding-3-small",
        "input": ["alpha beta", [1, 2, 3], "alpha beta"],
    });
    let (status, body) = post_json(&server, "/v1/embeddings", request).await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "list");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data[1]["object"], "embedding");
    assert_eq!(data[2]["index"], 2);
    assert_eq!(data[0]["embedding"], data[2]["embedding"]);
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);
    assert_eq!(data[0]["embedding"].as_array().unwrap().len(), 8);
    let prompt = 2 * count_tokens("alpha beta") + 3;
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": prompt, "total_tokens": prompt})
    );
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: prompt,
            ..Usage::default()
        }
    );

    let encoded =
        json!({"model": "m", "input": "alpha beta", "encoding_format": "base64", "dimensions": 4});
    let (_, body) = post_json(&server, "/v1/embeddings", encoded).await;
    let base64 = body["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(base64.len(), 24, "16 bytes of f32s");
    let floats = json!({"model": "m", "input": "alpha beta", "dimensions": 4});
    let (_, body) = post_json(&server, "/v1/embeddings", floats).await;
    let first = body["data"][0]["embedding"][0].as_f64().unwrap() as f32;
    let decoded = crate::embeddings::base64_f32(&[first]);
    assert_eq!(&base64[..5], &decoded[..5], "the first float's bytes");
}

#[tokio::test]
async fn status_directives_answer_errors_in_openai_shape() {
    let server = start().await;
    let (status, body) = post_json(&server, "/v1/chat/completions", chat("mock:status=429")).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(body["error"].as_object().unwrap().contains_key("param"));
    let mut streamed = chat("mock:status=500");
    streamed["stream"] = json!(true);
    let (status, body) = post_json(&server, "/v1/chat/completions", streamed).await;
    assert_eq!(status, 500);
    assert_eq!(body["error"]["type"], "server_error");
    assert_eq!(server.stats.billed(), Usage::default());
    let missing = json!({"model": "gpt-4o-mini"});
    let (status, body) = post_json(&server, "/v1/chat/completions", missing).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "messages");
}

#[tokio::test]
async fn a_cut_stream_drops_the_connection_and_bills_what_was_sent() {
    let server = start().await;
    let content = "go mock:cut=3";
    let mut request = chat(content);
    request["stream"] = json!(true);
    request["stream_options"] = json!({"include_usage": true});
    let response = post(&server, "/v1/chat/completions", request).await;
    let (received, cut) = read_until_cut(response).await;
    assert!(cut, "the stream must end with an error: {received}");
    assert!(!received.contains("[DONE]"));
    assert!(!received.contains("finish_reason\":\"stop"));
    assert_eq!(received.matches(word(2)).count(), 1);
    assert!(!received.contains(word(3)));
    let events = parse_sse(&received);
    assert_eq!(events.len(), 1 + 3);
    assert!(events.iter().all(|event| event.json()["usage"].is_null()));
    settled(
        &server,
        Usage {
            input: one_user_message_tokens(content),
            output: 3,
            ..Usage::default()
        },
    )
    .await;

    let error = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url()))
        .json(&chat(content))
        .send()
        .await;
    assert!(error.is_err(), "a non-stream cut closes without a response");
}

#[tokio::test]
async fn paced_streams_arrive_incrementally() {
    let server = spawn(MockOptions {
        tokens_per_sec: Some(20),
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let mut request = chat("hi mock:tokens=6");
    request["stream"] = json!(true);
    let started = Instant::now();
    let response = post(&server, "/v1/chat/completions", request).await;
    use futures_util::StreamExt;
    let mut stream = response.bytes_stream();
    let mut arrivals = Vec::new();
    let mut received = String::new();
    while let Some(chunk) = stream.next().await {
        received.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        arrivals.push((
            started.elapsed(),
            received.matches("\"content\":\" ").count(),
        ));
    }
    let first_token = arrivals.iter().find(|(_, tokens)| *tokens >= 1).unwrap().0;
    let total = started.elapsed();
    assert!(
        total >= Duration::from_millis(250),
        "6 tokens at 20/s take 250 ms, took {total:?}"
    );
    assert!(
        first_token + Duration::from_millis(150) < total,
        "first {first_token:?}, total {total:?}"
    );
    assert!(arrivals.len() >= 4, "{arrivals:?}");

    let mut request = chat("hi mock:tokens=3 mock:sleep_ms=100");
    request["stream"] = json!(true);
    let started = Instant::now();
    let _ = post(&server, "/v1/chat/completions", request)
        .await
        .text()
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn stats_record_the_last_request() {
    let server = spawn(MockOptions {
        latency: Duration::from_millis(50),
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let mut request = chat("hi");
    request["max_tokens"] = json!(2);
    let started = Instant::now();
    let (status, _) = post_json(&server, "/v1/chat/completions", request).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(50));
    let last = server.stats.last_request().unwrap();
    assert_eq!(last.path, "/v1/chat/completions");
    assert_eq!(last.body["max_tokens"], 2);
    assert_eq!(last.headers["content-type"], "application/json");
    assert_eq!(server.stats.requests(), 1);
}

#[tokio::test]
async fn chat_serves_the_priority_tier_it_is_asked_for() {
    let server = start().await;
    let tier = |body: &Value| body["service_tier"].as_str().unwrap().to_owned();
    let mut request = chat("hello");
    let (_, body) = post_json(&server, "/v1/chat/completions", request.clone()).await;
    assert_eq!(tier(&body), "default");
    request["service_tier"] = "priority".into();
    let (_, body) = post_json(&server, "/v1/chat/completions", request.clone()).await;
    assert_eq!(tier(&body), "priority");
    request["messages"][0]["content"] = "hello mock:downgrade=1".into();
    let (_, body) = post_json(&server, "/v1/chat/completions", request).await;
    assert_eq!(tier(&body), "default");
}

#[tokio::test]
async fn a_project_default_of_priority_is_reported_on_every_route() {
    let server = start().await;
    let chat_request = chat("hello mock:project_priority=1");
    let responses_request =
        json!({"model": "gpt-4o-mini", "input": "hello mock:project_priority=1"});
    for (path, request) in [
        ("/v1/chat/completions", chat_request),
        ("/v1/responses", responses_request),
    ] {
        for tier in [None, Some("auto"), Some("default")] {
            let mut request = request.clone();
            if let Some(tier) = tier {
                request["service_tier"] = tier.into();
            }
            let expected = if tier == Some("default") {
                "default"
            } else {
                "priority"
            };
            let (_, body) = post_json(&server, path, request.clone()).await;
            assert_eq!(body["service_tier"], expected, "{path} {tier:?}");
            request["stream"] = true.into();
            request["stream_options"] = json!({"include_usage": true});
            if path == "/v1/responses" {
                request.as_object_mut().unwrap().remove("stream_options");
            }
            let events = post_sse(&server, path, request).await;
            let tiers: Vec<Value> = events
                .iter()
                .filter(|event| event.data != "[DONE]")
                .map(|event| {
                    let event = event.json();
                    match path {
                        "/v1/responses" => event["response"]["service_tier"].clone(),
                        _ => event["service_tier"].clone(),
                    }
                })
                .filter(|tier| !tier.is_null())
                .collect();
            assert!(!tiers.is_empty(), "{path} {tier:?}");
            assert!(
                tiers.iter().all(|tier| tier == expected),
                "{path} {tier:?}: {tiers:?}"
            );
        }
    }
}
