//! Reading the usage of plain response bodies of every family; the
//! request rules of the openai and anthropic families (`requests`,
//! `tools`).

mod requests;
mod tools;

use super::*;
use crate::hosted::HostedTool;
use crate::usage::{AbsurdUsage, ServiceTier, Usage};

fn usage(input: u64, cached_input: u64, cache_write: u64, output: u64) -> Usage {
    Usage {
        input,
        cached_input,
        cache_write,
        output,
        ..Usage::default()
    }
}

#[test]
fn chat_completion_body_subtracts_cached_tokens() {
    let body = br#"{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "The image shows a wooden boardwalk path running through a lush green field or meadow.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 1117,
    "completion_tokens": 46,
    "total_tokens": 1163,
    "prompt_tokens_details": {
      "cached_tokens": 1024,
      "audio_tokens": 0
    },
    "completion_tokens_details": {
      "reasoning_tokens": 0,
      "audio_tokens": 0,
      "accepted_prediction_tokens": 0,
      "rejected_prediction_tokens": 0
    }
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}"#;
    assert_eq!(
        body_usage(Api::ChatCompletions, body),
        Some(Ok(Usage {
            service_tier: Some(ServiceTier::Standard),
            ..usage(93, 1024, 0, 46)
        }))
    );
}

#[test]
fn reasoning_tokens_stay_inside_completion_tokens() {
    let body = br#"{"id":"chatcmpl-AaWGMnYt3OJGUoQQUw5wHGd6hNnLP","object":"chat.completion","created":1733162510,"model":"o1-2024-12-17","choices":[{"index":0,"message":{"role":"assistant","content":"42","refusal":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":1271,"total_tokens":1295,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":1216,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"system_fingerprint":"fp_9e5e5b1e2f"}"#;
    assert_eq!(
        body_usage(Api::ChatCompletions, body),
        Some(Ok(usage(24, 0, 0, 1271)))
    );
}

#[test]
fn legacy_completion_body_without_details() {
    let body = br#"{"id":"cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7","object":"text_completion","created":1589478378,"model":"gpt-3.5-turbo-instruct","system_fingerprint":"fp_44709d6fcb","choices":[{"text":"\n\nThis is indeed a test","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#;
    assert_eq!(
        body_usage(Api::Completions, body),
        Some(Ok(usage(5, 0, 0, 7)))
    );
}

#[test]
fn embeddings_body_has_no_output() {
    let body = br#"{
  "object": "list",
  "data": [
    {
      "object": "embedding",
      "index": 0,
      "embedding": [-0.006929283495992422, -0.005336422007530928, -4.547132266452536e-05, -0.024047505110502243]
    }
  ],
  "model": "text-embedding-3-small",
  "usage": {
    "prompt_tokens": 8,
    "total_tokens": 8
  }
}"#;
    assert_eq!(
        body_usage(Api::Embeddings, body),
        Some(Ok(usage(8, 0, 0, 0)))
    );
}

#[test]
fn responses_body_maps_input_details() {
    let body = br#"{
  "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41",
  "object": "response",
  "created_at": 1741476777,
  "status": "completed",
  "error": null,
  "incomplete_details": null,
  "instructions": null,
  "max_output_tokens": null,
  "model": "gpt-4o-2024-08-06",
  "output": [
    {
      "type": "message",
      "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41",
      "status": "completed",
      "role": "assistant",
      "content": [
        {
          "type": "output_text",
          "text": "The image depicts a scenic landscape with a wooden boardwalk or pathway.",
          "annotations": []
        }
      ]
    }
  ],
  "parallel_tool_calls": true,
  "previous_response_id": null,
  "reasoning": {"effort": null, "summary": null},
  "store": true,
  "temperature": 1.0,
  "text": {"format": {"type": "text"}},
  "tool_choice": "auto",
  "tools": [],
  "top_p": 1.0,
  "truncation": "disabled",
  "usage": {
    "input_tokens": 328,
    "input_tokens_details": {"cached_tokens": 128},
    "output_tokens": 52,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 380
  },
  "user": null,
  "metadata": {}
}"#;
    assert_eq!(
        body_usage(Api::Responses, body),
        Some(Ok(usage(200, 128, 0, 52)))
    );
}

#[test]
fn bodies_report_their_tier_and_cache_lifetimes() {
    let tier = |api, body: &[u8]| body_usage(api, body).unwrap().unwrap().service_tier;
    let chat = br#"{"usage":{"prompt_tokens":10,"completion_tokens":2},"service_tier":"priority"}"#;
    assert_eq!(
        tier(Api::ChatCompletions, chat),
        Some(ServiceTier::Priority)
    );
    let flex = br#"{"usage":{"prompt_tokens":10,"completion_tokens":2},"service_tier":"flex"}"#;
    assert_eq!(
        tier(Api::ChatCompletions, flex),
        Some(ServiceTier::Standard)
    );
    let odd = br#"{"usage":{"prompt_tokens":10,"completion_tokens":2},"service_tier":7}"#;
    assert_eq!(tier(Api::ChatCompletions, odd), None);
    let response =
        br#"{"usage":{"input_tokens":10,"output_tokens":2},"service_tier":"priority","output":[]}"#;
    assert_eq!(tier(Api::Responses, response), Some(ServiceTier::Priority));
    let messages = br#"{"usage":{"input_tokens":1,"cache_creation_input_tokens":30,"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20},"output_tokens":2}}"#;
    let usage = body_usage(Api::Messages, messages).unwrap().unwrap();
    assert_eq!((usage.cache_write, usage.cache_write_1h), (30, Some(20)));
    let unsplit =
        br#"{"usage":{"input_tokens":1,"cache_creation_input_tokens":30,"output_tokens":2}}"#;
    let usage = body_usage(Api::Messages, unsplit).unwrap().unwrap();
    assert_eq!(usage.cache_write_1h, None);
    assert_eq!(usage.counts(), usage);
}

#[test]
fn anthropic_body_keeps_cache_classes_apart() {
    let body = br#"{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":21,"cache_creation_input_tokens":188086,"cache_read_input_tokens":2048,"cache_creation":{"ephemeral_5m_input_tokens":188086,"ephemeral_1h_input_tokens":0},"output_tokens":393,"service_tier":"standard"}}"#;
    assert_eq!(
        body_usage(Api::Messages, body),
        Some(Ok(Usage {
            cache_write_1h: Some(0),
            ..usage(21, 2048, 188086, 393)
        }))
    );
}

#[test]
fn hosted_tool_uses_are_read_where_reported() {
    let anthropic = br#"{"id":"msg_1","type":"message","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},{"type":"text","text":"ok"}],"usage":{"input_tokens":6039,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":931,"server_tool_use":{"web_search_requests":3,"web_fetch_requests":1}}}"#;
    let usage = body_usage(Api::Messages, anthropic).unwrap().unwrap();
    assert_eq!(usage.input, 6039);
    assert_eq!(usage.tool_calls.get(HostedTool::WebSearch), 3);
    assert_eq!(usage.tool_calls.get(HostedTool::WebFetch), 1);

    let responses = br#"{"id":"resp_1","object":"response","output":[{"type":"web_search_call","id":"ws_1","status":"completed"},{"type":"code_interpreter_call","id":"ci_1","container_id":"cntr_1","code":"print(1)"},{"type":"code_interpreter_call","id":"ci_2","container_id":"cntr_1"},{"type":"image_generation_call","id":"ig_1","result":"iVBORw0K"},{"type":"mcp_call","id":"mcp_1","name":"roll","arguments":"{}"},{"type":"mcp_list_tools","id":"mcpl_1"},{"type":"reasoning","id":"rs_1","summary":[]},{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"done"}]}],"usage":{"input_tokens":500,"input_tokens_details":{"cached_tokens":0},"output_tokens":20}}"#;
    let usage = body_usage(Api::Responses, responses).unwrap().unwrap();
    let calls: Vec<_> = usage.tool_calls.iter().collect();
    assert_eq!(
        calls,
        [
            (HostedTool::WebSearch, 1),
            (HostedTool::CodeInterpreter, 2),
            (HostedTool::ImageGeneration, 1),
            (HostedTool::Mcp, 1)
        ]
    );
    // No output items, or none of a hosted tool: no uses.
    let plain = br#"{"usage":{"input_tokens":5,"output_tokens":1}}"#;
    assert!(body_usage(Api::Responses, plain)
        .unwrap()
        .unwrap()
        .tool_calls
        .is_empty());
    // Chat completions report no tool uses at all.
    let chat = br#"{"usage":{"prompt_tokens":5,"completion_tokens":1}}"#;
    assert!(body_usage(Api::ChatCompletions, chat)
        .unwrap()
        .unwrap()
        .tool_calls
        .is_empty());
}

#[test]
fn an_absurd_tool_count_is_absurd_usage() {
    let body = br#"{"usage":{"input_tokens":5,"output_tokens":1,"server_tool_use":{"web_search_requests":-2}}}"#;
    let absurd = body_usage(Api::Messages, body).unwrap().unwrap_err();
    assert_eq!(absurd.field, "server_tool_use.web_search_requests");
}

#[test]
fn null_and_missing_counts_read_as_zero() {
    let body =
        br#"{"usage":{"input_tokens":12,"cache_creation_input_tokens":null,"output_tokens":3}}"#;
    assert_eq!(
        body_usage(Api::Messages, body),
        Some(Ok(usage(12, 0, 0, 3)))
    );
    let body =
        br#"{"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":null}}"#;
    assert_eq!(
        body_usage(Api::ChatCompletions, body),
        Some(Ok(usage(9, 0, 0, 2)))
    );
}

#[test]
fn cached_beyond_prompt_saturates() {
    let body = br#"{"usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":20}}}"#;
    assert_eq!(
        body_usage(Api::ChatCompletions, body),
        Some(Ok(usage(0, 20, 0, 1)))
    );
}

#[test]
fn bodies_without_usage_give_none() {
    let error = br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    assert_eq!(body_usage(Api::ChatCompletions, error), None);
    let anthropic_error =
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(body_usage(Api::Messages, anthropic_error), None);
    assert_eq!(body_usage(Api::Responses, br#"{"usage":null}"#), None);
    assert_eq!(body_usage(Api::Embeddings, b"not json"), None);
    assert_eq!(body_usage(Api::Messages, b""), None);
}

/// A count no call can have is not read as 0 (nor does it make the
/// usage absent): the report is absurd, naming the count.
#[test]
fn absurd_counts_make_the_report_absurd() {
    let absurd = |field: &'static str, value: &str| {
        Some(Err(AbsurdUsage {
            field,
            value: value.to_owned(),
        }))
    };
    let cases: [(Api, &[u8], _); 7] = [
            (
                Api::ChatCompletions,
                br#"{"usage":{"prompt_tokens":-1,"completion_tokens":5}}"#,
                absurd("prompt_tokens", "-1"),
            ),
            (
                Api::ChatCompletions,
                br#"{"usage":{"prompt_tokens":10,"completion_tokens":2.5}}"#,
                absurd("completion_tokens", "2.5"),
            ),
            (
                Api::Embeddings,
                br#"{"usage":{"prompt_tokens":9007199254740992}}"#,
                absurd("prompt_tokens", "9007199254740992"),
            ),
            (
                Api::ChatCompletions,
                br#"{"usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":-3}}}"#,
                absurd("prompt_tokens_details.cached_tokens", "-3"),
            ),
            (
                Api::Responses,
                br#"{"usage":{"input_tokens":5,"output_tokens":"lots"}}"#,
                absurd("output_tokens", "\"lots\""),
            ),
            (
                Api::Messages,
                br#"{"usage":{"input_tokens":5,"cache_creation_input_tokens":-100,"output_tokens":3}}"#,
                absurd("cache_creation_input_tokens", "-100"),
            ),
            (
                Api::Messages,
                br#"{"usage":{"input_tokens":5,"output_tokens":1e30}}"#,
                absurd("output_tokens", "1000000000000000000000000000000"),
            ),
        ];
    for (api, body, expected) in cases {
        assert_eq!(
            body_usage(api, body),
            expected,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    // Whole numbers written as floats are counts.
    assert_eq!(
        body_usage(
            Api::ChatCompletions,
            br#"{"usage":{"prompt_tokens":12.0,"completion_tokens":3}}"#
        ),
        Some(Ok(usage(12, 0, 0, 3)))
    );
}
