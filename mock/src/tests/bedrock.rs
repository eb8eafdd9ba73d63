//! Amazon Bedrock Runtime: Converse and ConverseStream, InvokeModel and
//! InvokeModelWithResponseStream for Claude, CountTokens, model ids in the
//! path, the event-stream framing, Bedrock's errors, API keys and SigV4.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::HeaderValue;
use bytes::BytesMut;
use serde_json::{json, Value};

use super::{post_json, settled, start};
use crate::reply::{count_tokens, text};
use crate::usage::Usage;
use crate::{spawn, MockOptions, MockServer};

const MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const ARN: &str = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/\
                   us.anthropic.claude-3-5-sonnet-20241022-v2:0";
const ACCESS_KEY_ID: &str = "AKIDMOCKEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYMOCKEXAMPLE";
const EXCEPTION_SUFFIX: &str = ":http://internal.amazon.com/coral/com.amazon.bedrock/";

/// A model id as the SDKs put it in the path: `:` and `/` encoded.
fn encode(model: &str) -> String {
    model.replace(':', "%3A").replace('/', "%2F")
}

fn path(model: &str, operation: &str) -> String {
    format!("/model/{}/{operation}", encode(model))
}

/// ceil(bytes / 4) + 3 per message, as the mock counts Claude's input.
fn prompt(texts: &[&str], messages: u64) -> u64 {
    let bytes: usize = texts.iter().map(|text| text.len()).sum();
    (bytes as u64).div_ceil(4) + 3 * messages
}

fn converse_body(content: &str) -> Value {
    json!({
        "system": [{"text": "be brief"}],
        "messages": [{"role": "user", "content": [{"text": content}]}],
        "inferenceConfig": {"maxTokens": 100, "temperature": 0.2},
    })
}

fn invoke_body(content: &str) -> Value {
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100, "system": "be brief",
        "messages": [{"role": "user", "content": content}]})
}

async fn send(server: &MockServer, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// One event-stream message, decoded with both CRCs checked.
#[derive(Debug)]
struct Frame {
    headers: BTreeMap<String, String>,
    payload: Value,
}

impl Frame {
    fn event_type(&self) -> &str {
        &self.headers[":event-type"]
    }

    /// The Anthropic event a Bedrock `chunk` frame carries.
    fn chunk(&self) -> Value {
        assert_eq!(self.event_type(), "chunk");
        let bytes =
            aws_smithy_types::base64::decode(self.payload["bytes"].as_str().unwrap()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }
}

/// Every frame of a whole stream body; the body must end with a frame.
fn frames(body: &[u8]) -> Vec<Frame> {
    let mut buffer = BytesMut::from(body);
    let mut decoder = MessageFrameDecoder::new();
    let mut frames = Vec::new();
    while let DecodedFrame::Complete(message) = decoder.decode_frame(&mut buffer).unwrap() {
        let headers = message
            .headers()
            .iter()
            .map(|header| match header.value() {
                HeaderValue::String(value) => {
                    (header.name().as_str().to_owned(), value.as_str().to_owned())
                }
                other => panic!("unexpected header value {other:?}"),
            })
            .collect();
        let payload = serde_json::from_slice(message.payload()).unwrap();
        frames.push(Frame { headers, payload });
    }
    assert!(buffer.is_empty(), "stream ends mid-frame");
    frames
}

/// Reads a stream until it ends or breaks: the bytes, and whether it broke.
async fn read_until_cut(response: reqwest::Response) -> (Vec<u8>, bool) {
    use futures_util::StreamExt;
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(_) => return (received, true),
        }
    }
    (received, false)
}

async fn stream_frames(server: &MockServer, path: &str, body: &Value) -> Vec<Frame> {
    let response = send(server, path, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/vnd.amazon.eventstream"
    );
    frames(&response.bytes().await.unwrap())
}

fn assert_error(response: &reqwest::Response, status: u16, exception: &str) {
    assert_eq!(response.status(), status);
    assert_eq!(
        response.headers()["x-amzn-errortype"],
        format!("{exception}{EXCEPTION_SUFFIX}").as_str()
    );
    assert_eq!(response.headers()["content-type"], "application/json");
}

#[tokio::test]
async fn converse_answers_text_with_bedrock_usage() {
    let server = start().await;
    let response = send(&server, &path(MODEL, "converse"), &converse_body("hello")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().contains_key("x-amzn-requestid"));
    let body: Value = response.json().await.unwrap();
    let input = prompt(&["be brief", "hello"], 1);
    assert_eq!(
        body["output"],
        json!({"message": {"role": "assistant", "content": [{"text": text(12)}]}})
    );
    assert_eq!(body["stopReason"], "end_turn");
    assert_eq!(
        body["usage"],
        json!({"inputTokens": input, "outputTokens": 12, "totalTokens": input + 12,
            "cacheReadInputTokens": 0, "cacheWriteInputTokens": 0})
    );
    assert!(body["metrics"]["latencyMs"].is_u64());
    assert_eq!(
        server.stats.billed(),
        Usage {
            input,
            output: 12,
            ..Usage::default()
        }
    );
    let seen = server.stats.last_request().unwrap();
    assert_eq!(
        seen.path,
        "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    );
    assert_eq!(seen.bedrock_model().as_deref(), Some(MODEL));
    assert_eq!(seen.body, converse_body("hello"));
}

#[tokio::test]
async fn max_tokens_caps_the_reply_and_must_be_positive() {
    let server = start().await;
    let mut capped = converse_body("hi mock:tokens=30");
    capped["inferenceConfig"]["maxTokens"] = json!(5);
    let (status, body) = post_json(&server, &path(MODEL, "converse"), capped).await;
    assert_eq!(status, 200);
    assert_eq!(body["stopReason"], "max_tokens");
    assert_eq!(body["output"]["message"]["content"][0]["text"], text(5));
    assert_eq!(body["usage"]["outputTokens"], 5);

    let mut unlimited = converse_body("hi mock:tokens=30");
    unlimited.as_object_mut().unwrap().remove("inferenceConfig");
    let (_, body) = post_json(&server, &path(MODEL, "converse"), unlimited).await;
    assert_eq!(body["stopReason"], "end_turn");
    assert_eq!(body["usage"]["outputTokens"], 30);

    let mut zero = converse_body("hi");
    zero["inferenceConfig"]["maxTokens"] = json!(0);
    let response = send(&server, &path(MODEL, "converse"), &zero).await;
    assert_error(&response, 400, "ValidationException");
    let body: Value = response.json().await.unwrap();
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("inferenceConfig.maxTokens"));

    let response = send(&server, &path(MODEL, "converse"), &json!({"system": []})).await;
    assert_error(&response, 400, "ValidationException");
}

#[tokio::test]
async fn converse_counts_input_as_messages_does() {
    let server = start().await;
    let converse = json!({
        "system": [{"text": "You are terse."}, {"cachePoint": {"type": "default"}}],
        "messages": [
            {"role": "user", "content": [
                {"text": "What is in this image and the weather in Paris?"},
                {"image": {"format": "png", "source": {"bytes": "aGVsbG8="}}},
            ]},
            {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather",
                    "input": {"city": "Paris"}}},
            ]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "tooluse_1", "status": "success",
                    "content": [{"json": {"temp_c": 21}}, {"text": "sunny"}]}},
            ]},
        ],
        "inferenceConfig": {"maxTokens": 100},
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 2048}},
    });
    let messages = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 100,
        "system": [{"type": "text", "text": "You are terse."}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this image and the weather in Paris?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                    "data": "aGVsbG8="}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "think", "signature": "sig"},
                {"type": "tool_use", "id": "tooluse_1", "name": "get_weather",
                    "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tooluse_1", "content": [
                    {"type": "text", "text": "{\"temp_c\":21}"}, {"type": "text", "text": "sunny"},
                ]},
            ]},
        ],
    });
    let (_, anthropic) = post_json(&server, "/v1/messages", messages).await;
    let (status, bedrock) = post_json(&server, &path(MODEL, "converse"), converse).await;
    assert_eq!(status, 200);
    let input = prompt(
        &[
            "You are terse.",
            "What is in this image and the weather in Paris?",
            "{\"temp_c\":21}",
            "sunny",
        ],
        3,
    );
    assert_eq!(anthropic["usage"]["input_tokens"], input);
    assert_eq!(bedrock["usage"]["inputTokens"], input);
    assert_eq!(
        bedrock["output"]["message"]["content"][0]["text"],
        anthropic["content"][0]["text"]
    );
}

#[tokio::test]
async fn cache_directives_keep_reads_and_writes_out_of_the_input() {
    let server = start().await;
    let content = format!("{} mock:cached=50 mock:cache_write=20", "x".repeat(400));
    let mut request = converse_body(&content);
    request["messages"][0]["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"cachePoint": {"type": "default", "ttl": "1h"}}));
    let (_, body) = post_json(&server, &path(MODEL, "converse"), request).await;
    let total = prompt(&["be brief", &content], 1);
    assert_eq!(
        body["usage"],
        json!({
            "inputTokens": total - 70, "outputTokens": 12, "totalTokens": total + 12,
            "cacheReadInputTokens": 50, "cacheWriteInputTokens": 20,
            "cacheDetails": [{"ttl": "1h", "inputTokens": 20}],
        })
    );
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: total - 70,
            cached_input: 50,
            cache_write: 20,
            cache_write_1h: 20,
            output: 12,
            tool_calls: 0,
        }
    );
}

fn weather_tools() -> Value {
    json!({"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather",
        "inputSchema": {"json": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}}}],
        "toolChoice": {"auto": {}}})
}

#[tokio::test]
async fn converse_calls_a_tool_then_replies_to_its_result() {
    let server = start().await;
    let mut request = converse_body("weather in Paris? mock:tokens=4");
    request["toolConfig"] = weather_tools();
    let (status, body) = post_json(&server, &path(MODEL, "converse"), request.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(body["stopReason"], "tool_use");
    let used = &body["output"]["message"]["content"][0]["toolUse"];
    assert!(used["toolUseId"].as_str().unwrap().starts_with("tooluse_"));
    assert_eq!(used["name"], "get_weather");
    assert_eq!(used["input"], json!({"city": "lorem"}));
    let arguments = count_tokens(r#"{"city":"lorem"}"#);
    assert_eq!(body["usage"]["outputTokens"], arguments);

    let frames = stream_frames(&server, &path(MODEL, "converse-stream"), &request).await;
    let kinds: Vec<&str> = frames.iter().map(Frame::event_type).collect();
    assert_eq!(kinds[..2], ["messageStart", "contentBlockStart"]);
    assert_eq!(frames[1].payload["start"]["toolUse"]["name"], "get_weather");
    let input: String = frames
        .iter()
        .filter(|frame| frame.event_type() == "contentBlockDelta")
        .map(|frame| frame.payload["delta"]["toolUse"]["input"].as_str().unwrap())
        .collect();
    assert_eq!(input, r#"{"city":"lorem"}"#);
    assert_eq!(frames[frames.len() - 2].payload["stopReason"], "tool_use");

    let messages = request["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": [{"toolUse": used}]}));
    messages.push(json!({"role": "user", "content": [{"toolResult": {
        "toolUseId": used["toolUseId"], "content": [{"json": {"temp_c": 21}}]}}]}));
    let (_, body) = post_json(&server, &path(MODEL, "converse"), request).await;
    assert_eq!(body["stopReason"], "end_turn");
    assert_eq!(body["output"]["message"]["content"][0]["text"], text(4));
}

#[tokio::test]
async fn converse_stream_sends_one_frame_per_token_then_the_usage() {
    let server = start().await;
    let frames = stream_frames(
        &server,
        &path(MODEL, "converse-stream"),
        &converse_body("hello mock:tokens=5"),
    )
    .await;
    let kinds: Vec<&str> = frames.iter().map(Frame::event_type).collect();
    assert_eq!(
        kinds,
        [
            "messageStart",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata",
        ]
    );
    for frame in &frames {
        assert_eq!(frame.headers[":message-type"], "event");
        assert_eq!(frame.headers[":content-type"], "application/json");
        assert!(!frame.payload["p"].as_str().unwrap().is_empty(), "padded");
    }
    assert_eq!(frames[0].payload["role"], "assistant");
    let streamed: String = frames[1..6]
        .iter()
        .map(|frame| {
            assert_eq!(frame.payload["contentBlockIndex"], 0);
            frame.payload["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(streamed, text(5));
    assert_eq!(frames[6].payload["contentBlockIndex"], 0);
    assert_eq!(frames[7].payload["stopReason"], "end_turn");
    let input = prompt(&["be brief", "hello mock:tokens=5"], 1);
    assert_eq!(
        frames[8].payload["usage"],
        json!({"inputTokens": input, "outputTokens": 5, "totalTokens": input + 5,
            "cacheReadInputTokens": 0, "cacheWriteInputTokens": 0})
    );
    assert!(frames[8].payload["metrics"]["latencyMs"].is_u64());
    settled(
        &server,
        Usage {
            input,
            output: 5,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn streamed_frames_arrive_as_they_are_generated() {
    let server = start().await;
    let response = send(
        &server,
        &path(MODEL, "converse-stream"),
        &converse_body("hi mock:tokens=4 mock:sleep_ms=40"),
    )
    .await;
    use futures_util::StreamExt;
    let mut chunks = response.bytes_stream();
    let mut received = Vec::new();
    let mut reads = 0;
    while let Some(chunk) = chunks.next().await {
        received.extend_from_slice(&chunk.unwrap());
        reads += 1;
    }
    assert!(reads >= 4, "{reads} reads");
    assert_eq!(frames(&received).len(), 1 + 4 + 3);
}

#[tokio::test]
async fn a_cut_stream_drops_the_connection_and_bills_what_was_sent() {
    let server = start().await;
    let content = "hi mock:cut=2";
    let response = send(
        &server,
        &path(MODEL, "converse-stream"),
        &converse_body(content),
    )
    .await;
    let (received, cut) = read_until_cut(response).await;
    assert!(cut);
    let frames = frames(&received);
    let kinds: Vec<&str> = frames.iter().map(Frame::event_type).collect();
    assert_eq!(
        kinds,
        ["messageStart", "contentBlockDelta", "contentBlockDelta"]
    );
    let input = prompt(&["be brief", content], 1);
    settled(
        &server,
        Usage {
            input,
            output: 2,
            ..Usage::default()
        },
    )
    .await;

    let closed = reqwest::Client::new()
        .post(format!("{}{}", server.url(), path(MODEL, "converse")))
        .json(&converse_body(content))
        .send()
        .await;
    assert!(
        closed.is_err(),
        "a non-stream call is closed without an answer"
    );
}

#[tokio::test]
async fn invoke_answers_as_messages_with_token_count_headers() {
    let server = start().await;
    let content = "hello mock:tokens=7 mock:cached=2";
    let response = send(&server, &path(MODEL, "invoke"), &invoke_body(content)).await;
    assert_eq!(response.status(), 200);
    let input = prompt(&["be brief", content], 1);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        headers["x-amzn-bedrock-input-token-count"],
        (input - 2).to_string().as_str()
    );
    assert_eq!(headers["x-amzn-bedrock-output-token-count"], "7");
    assert!(headers.contains_key("x-amzn-bedrock-invocation-latency"));
    assert!(headers.contains_key("x-amzn-requestid"));
    let body: Value = response.json().await.unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("msg_bdrk_"));
    assert_eq!(body["type"], "message");
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["content"], json!([{"type": "text", "text": text(7)}]));
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(body["usage"]["input_tokens"], input - 2);
    assert_eq!(body["usage"]["cache_read_input_tokens"], 2);
    assert_eq!(body["usage"]["output_tokens"], 7);

    let mut messages = invoke_body(content);
    let fields = messages.as_object_mut().unwrap();
    fields.remove("anthropic_version");
    fields.insert("model".into(), "claude-sonnet-4-5".into());
    let (_, direct) = post_json(&server, "/v1/messages", messages).await;
    assert_eq!(
        direct["usage"], body["usage"],
        "counted as /v1/messages counts"
    );
    assert_eq!(direct["content"], body["content"]);
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: 2 * (input - 2),
            cached_input: 4,
            output: 14,
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn invoke_wants_the_bedrock_anthropic_version_and_no_model() {
    let server = start().await;
    let mut missing = invoke_body("hi");
    missing.as_object_mut().unwrap().remove("anthropic_version");
    let response = send(&server, &path(MODEL, "invoke"), &missing).await;
    assert_error(&response, 400, "ValidationException");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"message": "Malformed input request: #: required key [anthropic_version] not \
            found, please reformat your input and try again."})
    );

    let mut other = invoke_body("hi");
    other["anthropic_version"] = json!("2023-06-01");
    let response = send(&server, &path(MODEL, "invoke"), &other).await;
    assert_error(&response, 400, "ValidationException");

    for extraneous in ["model", "stream"] {
        let mut named = invoke_body("hi");
        named[extraneous] = json!(if extraneous == "model" {
            json!("claude")
        } else {
            json!(true)
        });
        let response = send(&server, &path(MODEL, "invoke-with-response-stream"), &named).await;
        assert_error(&response, 400, "ValidationException");
        let body: Value = response.json().await.unwrap();
        assert!(body["message"]
            .as_str()
            .unwrap()
            .contains(&format!("extraneous key [{extraneous}]")));
    }

    let mut no_limit = invoke_body("hi");
    no_limit.as_object_mut().unwrap().remove("max_tokens");
    let response = send(&server, &path(MODEL, "invoke"), &no_limit).await;
    assert_error(&response, 400, "ValidationException");
    assert_eq!(server.stats.billed(), Usage::default());
}

#[tokio::test]
async fn invoke_with_response_stream_sends_anthropic_events_in_chunks() {
    let server = start().await;
    let content = "hello mock:tokens=3 mock:cached=4 mock:cache_write=5";
    let response = send(
        &server,
        &path(MODEL, "invoke-with-response-stream"),
        &invoke_body(content),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/vnd.amazon.eventstream"
    );
    assert_eq!(
        response.headers()["x-amzn-bedrock-content-type"],
        "application/json"
    );
    let frames = frames(&response.bytes().await.unwrap());
    for frame in &frames {
        assert_eq!(frame.headers[":message-type"], "event");
        assert!(frame.payload["p"].is_string(), "padded");
    }
    let events: Vec<Value> = frames.iter().map(Frame::chunk).collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|event| event["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let message = &events[0]["message"];
    assert!(message["id"].as_str().unwrap().starts_with("msg_bdrk_"));
    assert_eq!(message["model"], MODEL);
    let streamed: String = events[2..5]
        .iter()
        .map(|event| event["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, text(3));
    let input = prompt(&["be brief", content], 1) - 9;
    assert_eq!(events[6]["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[6]["usage"]["output_tokens"], 3);
    let metrics = &events[7]["amazon-bedrock-invocationMetrics"];
    assert_eq!(metrics["inputTokenCount"], input);
    assert_eq!(metrics["outputTokenCount"], 3);
    assert_eq!(metrics["cacheReadInputTokenCount"], 4);
    assert_eq!(metrics["cacheWriteInputTokenCount"], 5);
    assert!(metrics["invocationLatency"].is_u64());
    assert!(
        metrics["firstByteLatency"].as_u64().unwrap()
            <= metrics["invocationLatency"].as_u64().unwrap()
    );
    settled(
        &server,
        Usage {
            input,
            cached_input: 4,
            cache_write: 5,
            output: 3,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn count_tokens_counts_either_input_and_bills_nothing() {
    let server = start().await;
    let converse = converse_body("count me");
    let (status, counted) = post_json(
        &server,
        &path(MODEL, "count-tokens"),
        json!({"input": {"converse": converse}}),
    )
    .await;
    assert_eq!(status, 200);
    let input = prompt(&["be brief", "count me"], 1);
    assert_eq!(counted, json!({"inputTokens": input}));

    let encoded = aws_smithy_types::base64::encode(invoke_body("count me").to_string());
    let (_, counted) = post_json(
        &server,
        &path(MODEL, "count-tokens"),
        json!({"input": {"invokeModel": {"body": encoded}}}),
    )
    .await;
    assert_eq!(counted, json!({"inputTokens": input}));

    let response = send(&server, &path(MODEL, "count-tokens"), &json!({"input": {}})).await;
    assert_error(&response, 400, "ValidationException");
    assert_eq!(server.stats.billed(), Usage::default());
}

#[tokio::test]
async fn model_ids_are_decoded_after_the_path_is_split() {
    let server = start().await;
    for model in [
        MODEL,
        ARN,
        "anthropic.claude-3-haiku-20240307-v1:0",
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
    ] {
        let (status, _) = post_json(&server, &path(model, "converse"), converse_body("hi")).await;
        assert_eq!(status, 200, "{model}");
        let seen = server.stats.last_request().unwrap();
        assert_eq!(seen.bedrock_model().as_deref(), Some(model));
        let (_, body) = post_json(&server, &path(model, "invoke"), invoke_body("hi")).await;
        assert_eq!(body["model"], model);
    }
    assert_eq!(
        path(ARN, "converse"),
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F\
         us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse"
    );

    let response = send(&server, &path(MODEL, "nope"), &json!({})).await;
    assert_eq!(response.status(), 404);
    assert_eq!(
        response.headers()["x-amzn-errortype"],
        "UnknownOperationException:http://internal.amazon.com/coral/com.amazon.coral.service/"
    );
    let response = reqwest::Client::new()
        .get(format!("{}{}", server.url(), path(MODEL, "converse")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert!(response.headers().contains_key("x-amzn-errortype"));
}

#[tokio::test]
async fn directed_statuses_answer_in_bedrocks_shape() {
    let server = start().await;
    let cases = [
        (400, "ValidationException"),
        (403, "AccessDeniedException"),
        (404, "ResourceNotFoundException"),
        (424, "ModelErrorException"),
        (429, "ThrottlingException"),
        (500, "InternalServerException"),
        (503, "ServiceUnavailableException"),
    ];
    for (status, exception) in cases {
        let prompt = format!("hi mock:status={status}");
        for (operation, body) in [
            ("converse", converse_body(&prompt)),
            ("converse-stream", converse_body(&prompt)),
            ("invoke", invoke_body(&prompt)),
            ("invoke-with-response-stream", invoke_body(&prompt)),
        ] {
            let response = send(&server, &path(MODEL, operation), &body).await;
            assert_error(&response, status, exception);
            assert!(response.headers().contains_key("x-amzn-requestid"));
            let body: Value = response.json().await.unwrap();
            let message = body["message"].as_str().unwrap();
            assert!(
                message.ends_with(&format!("(mock:status={status})")),
                "{operation}: {message}"
            );
            assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
        }
    }
    let response = send(
        &server,
        &path(MODEL, "converse"),
        &converse_body("hi mock:status=429"),
    )
    .await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["message"],
        "Too many requests, please wait before trying again. (mock:status=429)"
    );
    assert_eq!(server.stats.billed(), Usage::default());
}

#[tokio::test]
async fn a_bedrock_api_key_is_a_bearer_token() {
    let server = spawn(MockOptions {
        expect_key: Some("bedrock-api-key-mock".into()),
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}{}", server.url(), path(MODEL, "converse"));
    let body = converse_body("hi");

    let missing = client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(missing.status(), 403);
    assert_eq!(
        missing.headers()["x-amzn-errortype"],
        "MissingAuthenticationTokenException:http://internal.amazon.com/coral/com.amazon.coral.service/"
    );
    let wrong = client
        .post(&url)
        .bearer_auth("bedrock-api-key-other")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_error(&wrong, 403, "AccessDeniedException");
    let wrong: Value = wrong.json().await.unwrap();
    assert_eq!(
        wrong["message"],
        "Authentication failed: Please make sure your API Key is valid."
    );
    let right = client
        .post(&url)
        .bearer_auth("bedrock-api-key-mock")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);

    // Signed calls are refused: the mock knows no AWS credentials.
    let signed = signed_request(&server, &path(MODEL, "converse"), &body, Signer::default());
    let response = signed.send().await.unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(
        response.headers()["x-amzn-errortype"],
        "UnrecognizedClientException:http://internal.amazon.com/coral/com.amazon.coral.service/"
    );
    assert_eq!(server.stats.requests(), 4);
}

/// How a test signs a call.
struct Signer {
    access_key_id: &'static str,
    secret: &'static str,
    session_token: Option<&'static str>,
    region: &'static str,
    time: SystemTime,
    /// Sign this body but send the request's.
    signed_body: Option<Vec<u8>>,
    http2: bool,
}

impl Default for Signer {
    fn default() -> Self {
        Self {
            access_key_id: ACCESS_KEY_ID,
            secret: SECRET,
            session_token: None,
            region: "us-east-1",
            time: SystemTime::now(),
            signed_body: None,
            http2: false,
        }
    }
}

/// A call signed with aws-sigv4, as the Rust SDK (and the gateway) signs
/// Bedrock calls: `content-type`, `host` and `x-amz-date` signed, the
/// encoded path encoded again in the canonical request.
fn signed_request(
    server: &MockServer,
    path: &str,
    body: &Value,
    signer: Signer,
) -> reqwest::RequestBuilder {
    let url = format!("{}{path}", server.url());
    let bytes = serde_json::to_vec(body).unwrap();
    let identity = Credentials::new(
        signer.access_key_id,
        signer.secret,
        signer.session_token.map(str::to_owned),
        None,
        "test",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(signer.region)
        .name("bedrock")
        .time(signer.time)
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let signed_body = signer.signed_body.as_deref().unwrap_or(&bytes);
    let signable = SignableRequest::new(
        "POST",
        url.clone(),
        [("content-type", "application/json")].into_iter(),
        SignableBody::Bytes(signed_body),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let client = if signer.http2 {
        reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap()
    } else {
        reqwest::Client::new()
    };
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(bytes);
    for (name, value) in instructions.headers() {
        request = request.header(name, value);
    }
    request
}

fn assert_signature_refused(response: &reqwest::Response, exception: &str) {
    assert_eq!(response.status(), 403);
    assert_eq!(
        response.headers()["x-amzn-errortype"],
        format!("{exception}:http://internal.amazon.com/coral/com.amazon.coral.service/").as_str()
    );
}

#[tokio::test]
async fn sigv4_signatures_are_verified() {
    let server = spawn(MockOptions {
        aws_credentials: Some((ACCESS_KEY_ID.into(), SECRET.into())),
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let body = converse_body("hi");

    for model in [MODEL, ARN] {
        let response = signed_request(&server, &path(model, "converse"), &body, Signer::default())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{model}");
        let seen = server.stats.last_request().unwrap();
        assert_eq!(seen.aws_access_key_id().as_deref(), Some(ACCESS_KEY_ID));
        assert_eq!(seen.aws_region().as_deref(), Some("us-east-1"));
        assert_eq!(seen.aws_session_token(), None);
    }

    let eu = Signer {
        region: "eu-west-3",
        session_token: Some("FwoGZXIvYXdzEMOCKTOKEN"),
        ..Signer::default()
    };
    let response = signed_request(&server, &path(MODEL, "invoke"), &invoke_body("hi"), eu)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let seen = server.stats.last_request().unwrap();
    assert_eq!(seen.aws_region().as_deref(), Some("eu-west-3"));
    assert_eq!(
        seen.aws_session_token().as_deref(),
        Some("FwoGZXIvYXdzEMOCKTOKEN")
    );

    let http2 = Signer {
        http2: true,
        ..Signer::default()
    };
    let response = signed_request(&server, &path(MODEL, "converse-stream"), &body, http2)
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), 200, "the authority stands in for Host");
    assert_eq!(frames(&response.bytes().await.unwrap()).len(), 1 + 12 + 3);

    let tampered = Signer {
        signed_body: Some(serde_json::to_vec(&converse_body("other")).unwrap()),
        ..Signer::default()
    };
    let response = signed_request(&server, &path(MODEL, "converse"), &body, tampered)
        .send()
        .await
        .unwrap();
    assert_signature_refused(&response, "InvalidSignatureException");
    let refused: Value = response.json().await.unwrap();
    assert!(refused["message"].as_str().unwrap().starts_with(
        "The request signature we calculated does not match the signature you provided"
    ));

    let wrong_secret = Signer {
        secret: "not-the-secret",
        ..Signer::default()
    };
    let response = signed_request(&server, &path(MODEL, "converse"), &body, wrong_secret)
        .send()
        .await
        .unwrap();
    assert_signature_refused(&response, "InvalidSignatureException");

    // The path is signed: the same signature on another model's path fails.
    let signed = signed_request(&server, &path(MODEL, "converse"), &body, Signer::default())
        .build()
        .unwrap();
    let mut moved = reqwest::Request::new(
        reqwest::Method::POST,
        format!("{}{}", server.url(), path(ARN, "converse"))
            .parse()
            .unwrap(),
    );
    *moved.headers_mut() = signed.headers().clone();
    *moved.body_mut() = Some(serde_json::to_vec(&body).unwrap().into());
    let response = reqwest::Client::new().execute(moved).await.unwrap();
    assert_signature_refused(&response, "InvalidSignatureException");

    let stranger = Signer {
        access_key_id: "AKIDSTRANGER",
        ..Signer::default()
    };
    let response = signed_request(&server, &path(MODEL, "converse"), &body, stranger)
        .send()
        .await
        .unwrap();
    assert_signature_refused(&response, "UnrecognizedClientException");

    let stale = Signer {
        time: SystemTime::now() - Duration::from_secs(20 * 60),
        ..Signer::default()
    };
    let response = signed_request(&server, &path(MODEL, "converse"), &body, stale)
        .send()
        .await
        .unwrap();
    assert_signature_refused(&response, "InvalidSignatureException");
    let refused: Value = response.json().await.unwrap();
    assert!(refused["message"]
        .as_str()
        .unwrap()
        .starts_with("Signature expired: "));

    let unsigned = send(&server, &path(MODEL, "converse"), &body).await;
    assert_signature_refused(&unsigned, "MissingAuthenticationTokenException");
    let bearer = reqwest::Client::new()
        .post(format!("{}{}", server.url(), path(MODEL, "converse")))
        .bearer_auth("bedrock-api-key-any")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_error(&bearer, 403, "AccessDeniedException");
    let broken = reqwest::Client::new()
        .post(format!("{}{}", server.url(), path(MODEL, "converse")))
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDMOCKEXAMPLE",
        )
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_signature_refused(&broken, "IncompleteSignatureException");
    assert_eq!(server.stats.billed().output, 12 * 4);
}

#[tokio::test]
async fn both_a_key_and_credentials_may_be_accepted() {
    let server = spawn(MockOptions {
        expect_key: Some("bedrock-api-key-mock".into()),
        aws_credentials: Some((ACCESS_KEY_ID.into(), SECRET.into())),
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let body = converse_body("hi");
    let signed = signed_request(&server, &path(MODEL, "converse"), &body, Signer::default())
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 200);
    let bearer = reqwest::Client::new()
        .post(format!("{}{}", server.url(), path(MODEL, "converse")))
        .bearer_auth("bedrock-api-key-mock")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);
    assert_eq!(
        server.stats.last_request().unwrap().aws_access_key_id(),
        None
    );
}
