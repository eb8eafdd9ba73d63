//! Anthropic's Messages API.

use serde_json::{json, Value};

use super::{post, post_json, post_sse, read_until_cut, settled, start};
use crate::reply::text;
use crate::usage::Usage;

fn message(content: &str) -> Value {
    json!({"model": "claude-haiku-4-5", "max_tokens": 100, "system": "be brief",
           "messages": [{"role": "user", "content": content}]})
}

/// ceil(bytes / 4) + 3 per message, as the mock counts Anthropic input.
fn prompt(texts: &[&str], messages: u64) -> u64 {
    let bytes: usize = texts.iter().map(|text| text.len()).sum();
    (bytes as u64).div_ceil(4) + 3 * messages
}

#[tokio::test]
async fn a_message_carries_the_text_and_usage() {
    let server = start().await;
    let response = post(&server, "/v1/messages", message("hello")).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("request-id"));
    let body: Value = response.json().await.unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["model"], "claude-haiku-4-5");
    assert_eq!(body["content"], json!([{"type": "text", "text": text(12)}]));
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(body["stop_sequence"], Value::Null);
    let input = prompt(&["be brief", "hello"], 1);
    assert_eq!(body["usage"]["input_tokens"], input);
    assert_eq!(body["usage"]["output_tokens"], 12);
    assert_eq!(body["usage"]["cache_creation_input_tokens"], 0);
    assert_eq!(body["usage"]["cache_read_input_tokens"], 0);
    assert_eq!(
        server.stats.billed(),
        Usage {
            input,
            output: 12,
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn max_tokens_is_required_and_caps_the_reply() {
    let server = start().await;
    let mut missing = message("hi");
    missing.as_object_mut().unwrap().remove("max_tokens");
    let (status, body) = post_json(&server, "/v1/messages", missing).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
        })
    );

    let mut capped = message("hi");
    capped["max_tokens"] = json!(5);
    let (_, body) = post_json(&server, "/v1/messages", capped).await;
    assert_eq!(body["stop_reason"], "max_tokens");
    assert_eq!(body["content"][0]["text"], text(5));
}

#[tokio::test]
async fn cache_directives_split_the_input() {
    let server = start().await;
    let content = format!("{} mock:cached=50 mock:cache_write=20", "x".repeat(400));
    let mut request = message("");
    request["messages"][0]["content"] = json!([{"type": "text", "text": content}]);
    request["system"] = json!([{"type": "text", "text": "be brief"}]);
    let (_, body) = post_json(&server, "/v1/messages", request).await;
    let total = prompt(&["be brief", &content], 1);
    assert_eq!(body["usage"]["cache_read_input_tokens"], 50);
    assert_eq!(body["usage"]["cache_creation_input_tokens"], 20);
    assert_eq!(body["usage"]["input_tokens"], total - 70);
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: total - 70,
            cached_input: 50,
            cache_write: 20,
            output: 12,
            tool_calls: 0,
            cache_write_1h: 0,
        }
    );
}

#[tokio::test]
async fn hour_long_cache_writes_are_reported_apart() {
    let server = start().await;
    let mut body = message(&format!("{} mock:cache_write=20", "hello ".repeat(40)));
    body["system"] = json!([{"type": "text", "text": "be brief",
                             "cache_control": {"type": "ephemeral", "ttl": "1h"}}]);
    let response = post(&server, "/v1/messages", body).await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["usage"]["cache_creation_input_tokens"], 20);
    assert_eq!(
        body["usage"]["cache_creation"],
        json!({"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 20})
    );
    assert_eq!(server.stats.billed().cache_write_1h, 20);
}

#[tokio::test]
async fn a_message_stream_follows_anthropics_event_order() {
    let server = start().await;
    let mut request = message("hi mock:tokens=3 mock:cached=1");
    request["stream"] = json!(true);
    let events = post_sse(&server, "/v1/messages", request).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|event| event.name.as_deref().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let payloads: Vec<Value> = events.iter().map(|event| event.json()).collect();
    for (payload, kind) in payloads.iter().zip(&kinds) {
        assert_eq!(payload["type"], *kind);
    }
    let input = prompt(&["be brief", "hi mock:tokens=3 mock:cached=1"], 1);
    let start_usage = &payloads[0]["message"]["usage"];
    assert_eq!(start_usage["input_tokens"], input - 1);
    assert_eq!(start_usage["cache_read_input_tokens"], 1);
    assert_eq!(start_usage["output_tokens"], 1);
    assert_eq!(payloads[0]["message"]["content"], json!([]));
    let deltas: String = payloads[3..6]
        .iter()
        .map(|payload| payload["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(deltas, text(3));
    assert_eq!(payloads[3]["delta"]["type"], "text_delta");
    assert_eq!(
        payloads[7]["delta"],
        json!({"stop_reason": "end_turn", "stop_sequence": null})
    );
    // Cumulative counts: the input is repeated, not added to.
    assert_eq!(
        payloads[7]["usage"],
        json!({"input_tokens": input - 1, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 1, "output_tokens": 3})
    );
    settled(
        &server,
        Usage {
            input: input - 1,
            cached_input: 1,
            output: 3,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn anthropic_directives_give_errors_and_cuts() {
    let server = start().await;
    for (code, kind) in [
        (529, "overloaded_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
    ] {
        let (status, body) = post_json(
            &server,
            "/v1/messages",
            message(&format!("mock:status={code}")),
        )
        .await;
        assert_eq!(status, code);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], kind);
    }
    assert_eq!(server.stats.billed(), Usage::default());

    let content = "hi mock:cut=2";
    let mut request = message(content);
    request["stream"] = json!(true);
    let (received, cut) = read_until_cut(post(&server, "/v1/messages", request).await).await;
    assert!(cut);
    assert_eq!(received.matches("event: content_block_delta").count(), 2);
    assert!(!received.contains("message_delta"));
    assert!(!received.contains("message_stop"));
    settled(
        &server,
        Usage {
            input: prompt(&["be brief", content], 1),
            output: 2,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn server_tool_uses_are_blocks_and_usage_capped_by_max_uses() {
    use crate::reply::TOOL_RESULT_TOKENS;
    let server = start().await;
    let content = "search mock:tool_calls=4 mock:tokens=2";
    let mut request = message(content);
    request["tools"] = json!([{"type": "bash_20250124", "name": "bash"},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]);
    let (_, body) = post_json(&server, "/v1/messages", request.clone()).await;
    let kinds: Vec<&str> = body["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| block["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "server_tool_use",
            "web_search_tool_result",
            "server_tool_use",
            "web_search_tool_result",
            "text"
        ]
    );
    assert_eq!(body["content"][1]["tool_use_id"], body["content"][0]["id"]);
    let input = prompt(&["be brief", content], 1) + 2 * TOOL_RESULT_TOKENS;
    assert_eq!(body["usage"]["input_tokens"], input);
    assert_eq!(
        body["usage"]["server_tool_use"],
        json!({"web_search_requests": 2})
    );
    let billed = Usage {
        input,
        output: 2,
        tool_calls: 2,
        ..Usage::default()
    };
    assert_eq!(server.stats.billed(), billed);

    // A stream reports the input before the tools first, all of it last.
    request["stream"] = json!(true);
    request["tools"] = json!([{"type": "web_fetch_20250910", "name": "web_fetch"}]);
    let events = post_sse(&server, "/v1/messages", request).await;
    let payloads: Vec<Value> = events.iter().map(|event| event.json()).collect();
    let start = &payloads[0]["message"]["usage"];
    assert_eq!(start["input_tokens"], prompt(&["be brief", content], 1));
    assert_eq!(start["server_tool_use"], json!({"web_fetch_requests": 0}));
    assert_eq!(payloads[1]["content_block"]["type"], "server_tool_use");
    assert_eq!(payloads[2]["delta"]["type"], "input_json_delta");
    assert_eq!(
        payloads[4]["content_block"]["type"],
        "web_fetch_tool_result"
    );
    let text_start = payloads
        .iter()
        .find(|p| p["content_block"]["type"] == "text")
        .unwrap();
    assert_eq!(text_start["index"], 8, "after four uses and their results");
    let delta = &payloads[payloads.len() - 2];
    assert_eq!(delta["type"], "message_delta");
    let all_input = prompt(&["be brief", content], 1) + 4 * TOOL_RESULT_TOKENS;
    assert_eq!(delta["usage"]["input_tokens"], all_input);
    assert_eq!(
        delta["usage"]["server_tool_use"],
        json!({"web_fetch_requests": 4})
    );
    settled(
        &server,
        billed.saturating_add(Usage {
            input: all_input,
            output: 2,
            tool_calls: 4,
            ..Usage::default()
        }),
    )
    .await;
}
