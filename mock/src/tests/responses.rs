//! The Responses API.

use serde_json::{json, Value};

use super::{post, post_json, post_sse, read_until_cut, settled, start};
use crate::reply::{count_tokens, text};
use crate::usage::Usage;

#[tokio::test]
async fn a_response_carries_the_output_and_usage() {
    let server = start().await;
    let request = json!({
        "model": "gpt-4.1-mini",
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": "first"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "second mock:cached=3"}],
            },
        ],
    });
    let (status, body) = post_json(&server, "/v1/responses", request).await;
    assert_eq!(status, 200);
    assert!(body["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["model"], "gpt-4.1-mini");
    assert_eq!(body["instructions"], "be brief");
    assert_eq!(body["incomplete_details"], Value::Null);
    let item = &body["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(item["role"], "assistant");
    assert_eq!(item["status"], "completed");
    assert!(item["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        item["content"][0],
        json!({"type": "output_text", "text": text(12), "annotations": [], "logprobs": []})
    );
    let prompt = count_tokens("system")
        + count_tokens("be brief")
        + 2 * count_tokens("user")
        + count_tokens("first")
        + count_tokens("second mock:cached=3")
        + 3 * 3
        + 3;
    let usage = &body["usage"];
    assert_eq!(usage["input_tokens"], prompt);
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 3);
    assert_eq!(usage["output_tokens"], 12);
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(usage["total_tokens"], prompt + 12);
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: prompt - 3,
            cached_input: 3,
            output: 12,
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn a_capped_response_is_incomplete() {
    let server = start().await;
    let request = json!({"model": "gpt-4.1-mini", "input": "hello", "max_output_tokens": 4});
    let (_, body) = post_json(&server, "/v1/responses", request).await;
    assert_eq!(body["status"], "incomplete");
    assert_eq!(
        body["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(body["output"][0]["content"][0]["text"], text(4));
    assert_eq!(
        body["usage"]["input_tokens"],
        count_tokens("user") + count_tokens("hello") + 6
    );
    assert_eq!(body["max_output_tokens"], 4);
}

#[tokio::test]
async fn a_response_stream_sends_typed_numbered_events() {
    let server = start().await;
    let request = json!({"model": "gpt-4.1-mini", "input": "hi mock:tokens=3", "stream": true});
    let events = post_sse(&server, "/v1/responses", request).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|event| event.name.as_deref().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let payloads: Vec<Value> = events.iter().map(|event| event.json()).collect();
    for (sequence, (payload, kind)) in payloads.iter().zip(&kinds).enumerate() {
        assert_eq!(payload["type"], *kind);
        assert_eq!(payload["sequence_number"], sequence);
    }
    assert_eq!(payloads[0]["response"]["status"], "in_progress");
    assert_eq!(payloads[0]["response"]["usage"], Value::Null);
    let item_id = &payloads[2]["item"]["id"];
    let deltas: String = payloads[4..7]
        .iter()
        .map(|payload| {
            assert_eq!(&payload["item_id"], item_id);
            assert_eq!(payload["output_index"], 0);
            assert_eq!(payload["content_index"], 0);
            payload["delta"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(deltas, text(3));
    assert_eq!(payloads[7]["text"], text(3));
    assert_eq!(payloads[9]["item"]["status"], "completed");
    let done = &payloads[10]["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["id"], payloads[0]["response"]["id"]);
    assert_eq!(done["output"][0]["content"][0]["text"], text(3));
    assert_eq!(done["usage"]["output_tokens"], 3);
    let prompt = count_tokens("user") + count_tokens("hi mock:tokens=3") + 6;
    settled(
        &server,
        Usage {
            input: prompt,
            output: 3,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn a_capped_stream_ends_with_response_incomplete_and_cuts_drop_it() {
    let server = start().await;
    let request = json!({"model": "m", "input": "hi", "stream": true, "max_output_tokens": 2});
    let events = post_sse(&server, "/v1/responses", request).await;
    let last = events.last().unwrap();
    assert_eq!(last.name.as_deref(), Some("response.incomplete"));
    assert_eq!(
        last.json()["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );

    let cut = json!({"model": "m", "input": "hi mock:cut=1", "stream": true});
    let (received, was_cut) = read_until_cut(post(&server, "/v1/responses", cut).await).await;
    assert!(was_cut);
    assert_eq!(
        received.matches("response.output_text.delta").count(),
        2,
        "event line and type"
    );
    assert!(!received.contains("response.completed"));
}

#[tokio::test]
async fn hosted_tool_calls_are_output_items_capped_by_max_tool_calls() {
    use crate::reply::TOOL_RESULT_TOKENS;
    let server = start().await;
    let input = "look it up mock:tool_calls=3";
    let request = json!({"model": "gpt-4.1-mini", "input": input,
        "tools": [{"type": "custom", "name": "f"}, {"type": "web_search"}]});
    let (_, body) = post_json(&server, "/v1/responses", request).await;
    let kinds: Vec<&str> = body["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "web_search_call",
            "web_search_call",
            "web_search_call",
            "message"
        ]
    );
    assert_eq!(body["output"][0]["status"], "completed");
    assert_eq!(body["output"][0]["action"]["type"], "search");
    let prompt = count_tokens("user") + count_tokens(input) + 6;
    assert_eq!(
        body["usage"]["input_tokens"],
        prompt + 3 * TOOL_RESULT_TOKENS
    );
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: prompt + 3 * TOOL_RESULT_TOKENS,
            output: 12,
            tool_calls: 3,
            ..Usage::default()
        }
    );

    // A stream: the calls are items before the message, which follows them.
    let capped = json!({"model": "gpt-4.1-mini", "input": "x mock:tool_calls=9 mock:tokens=2",
        "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}],
        "max_tool_calls": 2, "stream": true});
    let events = post_sse(&server, "/v1/responses", capped).await;
    let payloads: Vec<Value> = events.iter().map(|event| event.json()).collect();
    for (sequence, payload) in payloads.iter().enumerate() {
        assert_eq!(payload["sequence_number"], sequence);
    }
    assert_eq!(payloads[2]["item"]["type"], "file_search_call");
    assert_eq!(payloads[2]["item"]["status"], "in_progress");
    assert_eq!(payloads[5]["output_index"], 1);
    assert_eq!(payloads[5]["item"]["status"], "completed");
    assert_eq!(payloads[6]["output_index"], 2);
    assert_eq!(payloads[6]["item"]["type"], "message");
    assert_eq!(payloads[8]["output_index"], 2);
    let done = &payloads.last().unwrap()["response"];
    assert_eq!(done["max_tool_calls"], 2);
    assert_eq!(done["output"].as_array().unwrap().len(), 3);
    assert_eq!(done["output"][1]["type"], "file_search_call");

    // No hosted tool declared: the directive does nothing.
    let plain = json!({"model": "m", "input": "mock:tool_calls=2"});
    let (_, body) = post_json(&server, "/v1/responses", plain).await;
    assert_eq!(body["output"].as_array().unwrap().len(), 1);
}
