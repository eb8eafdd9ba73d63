//! Function tools: a call in place of the reply, then text once the result
//! comes back, on each API, streamed and not.

use serde_json::{json, Value};

use super::{one_user_message_tokens, post_json, post_sse, settled, start};
use crate::reply::{count_tokens, text};
use crate::usage::Usage;

const ARGUMENTS: &str = r#"{"city":"lorem"}"#;

fn parameters() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"], "additionalProperties": false})
}

fn chat_request(stream: bool) -> Value {
    json!({
        "model": "gpt-4o-mini",
        "stream": stream,
        "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
        "messages": [{"role": "user", "content": "Weather in Paris? mock:tokens=4"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "parameters": parameters()}}],
    })
}

#[tokio::test]
async fn chat_calls_the_tool_then_replies_to_its_result() {
    let server = start().await;
    let prompt = one_user_message_tokens("Weather in Paris? mock:tokens=4");
    let call_tokens = count_tokens(ARGUMENTS);

    let (status, body) = post_json(&server, "/v1/chat/completions", chat_request(false)).await;
    assert_eq!(status, 200);
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(call["function"]["arguments"], ARGUMENTS);
    assert_eq!(body["usage"]["prompt_tokens"], prompt);
    assert_eq!(body["usage"]["completion_tokens"], call_tokens);

    let events = post_sse(&server, "/v1/chat/completions", chat_request(true)).await;
    let chunks: Vec<Value> = events
        .iter()
        .filter(|event| event.data != "[DONE]")
        .map(|event| event.json())
        .collect();
    let opening = &chunks[0]["choices"][0]["delta"];
    assert_eq!(opening["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(opening["tool_calls"][0]["function"]["arguments"], "");
    let arguments: String = chunks[1..]
        .iter()
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        })
        .collect();
    assert_eq!(arguments, ARGUMENTS);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        chunks.last().unwrap()["usage"]["completion_tokens"],
        call_tokens
    );

    let mut answered = chat_request(false);
    let id = call["id"].clone();
    answered["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": null, "tool_calls": [call]}),
        json!({"role": "tool", "tool_call_id": id, "content": "sunny"}),
    ]);
    let (_, reply) = post_json(&server, "/v1/chat/completions", answered).await;
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert_eq!(reply["choices"][0]["message"]["content"], text(4));
    let reply_prompt = reply["usage"]["prompt_tokens"].as_u64().unwrap();

    settled(
        &server,
        Usage {
            input: 2 * prompt + reply_prompt,
            output: 2 * call_tokens + 4,
            ..Usage::default()
        },
    )
    .await;
}

fn responses_request(stream: bool) -> Value {
    json!({
        "model": "gpt-4.1-mini",
        "stream": stream,
        "input": [{"role": "user", "content": "Weather in Paris? mock:tokens=3"}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": parameters()}],
    })
}

#[tokio::test]
async fn responses_call_the_tool_then_reply_to_its_output() {
    let server = start().await;
    let call_tokens = count_tokens(ARGUMENTS);

    let (status, body) = post_json(&server, "/v1/responses", responses_request(false)).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "completed");
    let item = &body["output"][0];
    assert_eq!(body["output"].as_array().unwrap().len(), 1);
    assert_eq!(item["type"], "function_call");
    assert!(item["id"].as_str().unwrap().starts_with("fc_"));
    assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(item["name"], "get_weather");
    assert_eq!(item["arguments"], ARGUMENTS);
    assert_eq!(body["usage"]["output_tokens"], call_tokens);
    let prompt = body["usage"]["input_tokens"].as_u64().unwrap();

    let events = post_sse(&server, "/v1/responses", responses_request(true)).await;
    let payloads: Vec<Value> = events.iter().map(|event| event.json()).collect();
    let kinds: Vec<&str> = payloads
        .iter()
        .map(|payload| payload["type"].as_str().unwrap())
        .collect();
    let deltas = call_tokens as usize;
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ];
    expected.extend(std::iter::repeat_n(
        "response.function_call_arguments.delta",
        deltas,
    ));
    expected.extend([
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);
    for (sequence, payload) in payloads.iter().enumerate() {
        assert_eq!(payload["sequence_number"], sequence);
    }
    assert_eq!(payloads[2]["item"]["type"], "function_call");
    assert_eq!(payloads[2]["item"]["arguments"], "");
    let arguments: String = payloads[3..3 + deltas]
        .iter()
        .map(|payload| payload["delta"].as_str().unwrap())
        .collect();
    assert_eq!(arguments, ARGUMENTS);
    assert_eq!(payloads[3]["item_id"], payloads[2]["item"]["id"]);
    assert_eq!(payloads[3 + deltas]["arguments"], ARGUMENTS);
    let completed = &payloads.last().unwrap()["response"];
    assert_eq!(completed["output"][0]["arguments"], ARGUMENTS);
    assert_eq!(completed["usage"]["output_tokens"], call_tokens);

    let mut answered = responses_request(false);
    let call_id = item["call_id"].clone();
    answered["input"].as_array_mut().unwrap().extend([
        item.clone(),
        json!({"type": "function_call_output", "call_id": call_id, "output": "sunny"}),
    ]);
    let (_, reply) = post_json(&server, "/v1/responses", answered).await;
    assert_eq!(reply["output"][0]["type"], "message");
    assert_eq!(reply["output"][0]["content"][0]["text"], text(3));
    let reply_prompt = reply["usage"]["input_tokens"].as_u64().unwrap();
    assert!(reply_prompt > prompt);

    settled(
        &server,
        Usage {
            input: 2 * prompt + reply_prompt,
            output: 2 * call_tokens + 3,
            ..Usage::default()
        },
    )
    .await;
}

fn messages_request(stream: bool) -> Value {
    json!({
        "model": "claude-haiku-4-5",
        "max_tokens": 100,
        "stream": stream,
        "messages": [{"role": "user", "content": "Weather in Paris? mock:tokens=5"}],
        "tools": [{"name": "get_weather", "input_schema": parameters()}],
    })
}

#[tokio::test]
async fn messages_use_the_tool_then_reply_to_its_result() {
    let server = start().await;
    let call_tokens = count_tokens(ARGUMENTS);

    let (status, body) = post_json(&server, "/v1/messages", messages_request(false)).await;
    assert_eq!(status, 200);
    assert_eq!(body["stop_reason"], "tool_use");
    let block = &body["content"][0];
    assert_eq!(body["content"].as_array().unwrap().len(), 1);
    assert_eq!(block["type"], "tool_use");
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(block["name"], "get_weather");
    assert_eq!(block["input"], json!({"city": "lorem"}));
    assert_eq!(body["usage"]["output_tokens"], call_tokens);
    let prompt = body["usage"]["input_tokens"].as_u64().unwrap();

    let events = post_sse(&server, "/v1/messages", messages_request(true)).await;
    let payloads: Vec<Value> = events.iter().map(|event| event.json()).collect();
    assert_eq!(payloads[1]["type"], "content_block_start");
    assert_eq!(
        payloads[1]["content_block"],
        json!({"type": "tool_use", "id": payloads[1]["content_block"]["id"],
            "name": "get_weather", "input": {}})
    );
    let partial: String = payloads
        .iter()
        .filter(|payload| payload["type"] == "content_block_delta")
        .map(|payload| {
            assert_eq!(payload["delta"]["type"], "input_json_delta");
            payload["delta"]["partial_json"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(partial, ARGUMENTS);
    let delta = payloads
        .iter()
        .find(|payload| payload["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], call_tokens);
    assert_eq!(delta["usage"]["input_tokens"], prompt);

    let mut answered = messages_request(false);
    let id = block["id"].clone();
    answered["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": [block]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "sunny"}]}),
    ]);
    let (_, reply) = post_json(&server, "/v1/messages", answered).await;
    assert_eq!(reply["stop_reason"], "end_turn");
    // The prompt's directives still hold once the result is sent back.
    assert_eq!(reply["content"][0]["text"], text(5));
    let reply_prompt = reply["usage"]["input_tokens"].as_u64().unwrap();

    settled(
        &server,
        Usage {
            input: 2 * prompt + reply_prompt,
            output: 2 * call_tokens + 5,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn without_function_tools_the_reply_is_text() {
    let server = start().await;
    let mut request = chat_request(false);
    request["tools"] = json!([]);
    let (_, body) = post_json(&server, "/v1/chat/completions", request).await;
    assert_eq!(body["choices"][0]["message"]["content"], text(4));
    let mut request = chat_request(false);
    request["tool_choice"] = json!("none");
    let (_, body) = post_json(&server, "/v1/chat/completions", request).await;
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}
