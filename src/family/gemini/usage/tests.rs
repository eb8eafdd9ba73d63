use super::*;
use crate::usage::AbsurdUsage;

fn usage(input: u64, cached_input: u64, output: u64) -> Usage {
    Usage {
        input,
        cached_input,
        output,
        ..Usage::default()
    }
}

fn reported(body: &[u8]) -> Reported {
    body_usage(body).unwrap().0
}

fn chunk(json: &str) -> ChunkSeen {
    read_chunk(json.as_bytes()).unwrap()
}

#[test]
fn thinking_model_bills_thoughts_as_output() {
    let body = br#"{
  "candidates": [
    {
      "content": {
        "parts": [
          {"text": "15% of 240 is **36**.", "thoughtSignature": "CiQBVKhc7oQ1mK3/5u0n"}
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {
    "promptTokenCount": 20,
    "candidatesTokenCount": 198,
    "totalTokenCount": 623,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 20}],
    "thoughtsTokenCount": 405
  },
  "modelVersion": "gemini-2.5-flash",
  "responseId": "Il0taoSYJ5Cez7IPpLrjwQo"
}"#;
    assert_eq!(
        body_usage(body),
        Some((Ok(usage(20, 0, 603)), Grounding::default()))
    );
}

#[test]
fn cached_content_is_taken_out_of_the_prompt() {
    let body = br#"{"candidates":[{"content":{"parts":[{"text":"The transcript covers three topics."}],"role":"model"},"finishReason":"STOP","avgLogprobs":-0.21}],"usageMetadata":{"promptTokenCount":10240,"candidatesTokenCount":120,"totalTokenCount":10360,"cachedContentTokenCount":8192,"promptTokensDetails":[{"modality":"TEXT","tokenCount":10240}],"cacheTokensDetails":[{"modality":"TEXT","tokenCount":8192}],"candidatesTokensDetails":[{"modality":"TEXT","tokenCount":120}]},"modelVersion":"gemini-2.0-flash-001"}"#;
    assert_eq!(reported(body), Ok(usage(2048, 8192, 120)));
}

#[test]
fn grounded_answer_with_tool_use_prompt_on_vertex() {
    let body = r#"{
  "candidates": [
    {
      "content": {
        "role": "model",
        "parts": [{"text": "柯文哲目前並非台灣總統。"}]
      },
      "finishReason": "STOP",
      "groundingMetadata": {
        "searchEntryPoint": {"renderedContent": "<style>.container{}</style>"},
        "groundingChunks": [{"web": {"uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9", "title": "wikipedia.org"}}],
        "groundingSupports": [{"segment": {"endIndex": 36, "text": "柯文哲目前並非台灣總統。"}, "groundingChunkIndices": [0]}],
        "webSearchQueries": ["柯文哲 總統", "柯文哲 現任職位", "柯文哲 台灣政治"]
      }
    }
  ],
  "usageMetadata": {
    "candidatesTokenCount": 234,
    "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": 234}],
    "promptTokenCount": 94,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 94}],
    "thoughtsTokenCount": 154,
    "toolUsePromptTokenCount": 56,
    "toolUsePromptTokensDetails": [{"modality": "TEXT", "tokenCount": 56}],
    "totalTokenCount": 538,
    "trafficType": "ON_DEMAND"
  },
  "modelVersion": "gemini-2.5-flash",
  "createTime": "2025-06-02T08:15:03.519321Z",
  "responseId": "p1w9aPnZH5Km0-kP2dXV0Ak"
}"#;
    let (usage_seen, grounding) = body_usage(body.as_bytes()).unwrap();
    assert_eq!(usage_seen, Ok(usage(150, 0, 388)));
    assert_eq!(
        grounding,
        Grounding {
            queries: 3,
            grounded: true
        }
    );
}

#[test]
fn grounding_sums_over_candidates_and_counts_metadata_without_queries() {
    let body = br#"{"candidates":[{"index":0,"groundingMetadata":{"webSearchQueries":["a","b"]}},{"index":1,"groundingMetadata":{"webSearchQueries":["c"]}},{"index":2}],"usageMetadata":{"promptTokenCount":5}}"#;
    assert_eq!(
        body_usage(body).unwrap().1,
        Grounding {
            queries: 3,
            grounded: true
        }
    );
    let no_queries = br#"{"candidates":[{"groundingMetadata":{"searchEntryPoint":{"renderedContent":""}}}],"usageMetadata":{"promptTokenCount":5}}"#;
    assert_eq!(
        body_usage(no_queries).unwrap().1,
        Grounding {
            queries: 0,
            grounded: true
        }
    );
    let null =
        br#"{"candidates":[{"groundingMetadata":null}],"usageMetadata":{"promptTokenCount":5}}"#;
    assert_eq!(body_usage(null).unwrap().1, Grounding::default());
}

#[test]
fn function_call_body_reads_its_usage() {
    let body = br#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"get_weather","args":{"location":"Boston, MA","unit":"celsius"}},"thoughtSignature":"CtIBAVSoXO5"}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":73,"candidatesTokenCount":18,"totalTokenCount":150,"thoughtsTokenCount":59},"modelVersion":"gemini-2.5-pro"}"#;
    assert_eq!(reported(body), Ok(usage(73, 0, 77)));
    let seen = read_chunk(body).unwrap();
    assert_eq!(
        seen.text_bytes,
        r#"{"location":"Boston, MA","unit":"celsius"}"#.len() as u64
    );
    assert_eq!(seen.finished, [0]);
}

#[test]
fn tokens_the_total_counts_beyond_the_known_classes_are_output() {
    let body = br#"{"usageMetadata":{"promptTokenCount":100,"candidatesTokenCount":10,"totalTokenCount":150}}"#;
    assert_eq!(reported(body), Ok(usage(100, 0, 50)));
    // A total below the parts moves nothing.
    let low = br#"{"usageMetadata":{"promptTokenCount":100,"candidatesTokenCount":10,"totalTokenCount":7}}"#;
    assert_eq!(reported(low), Ok(usage(100, 0, 10)));
}

#[test]
fn missing_and_null_counts_read_zero() {
    let prompt_only = br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":12,"totalTokenCount":12}}"#;
    assert_eq!(reported(prompt_only), Ok(usage(12, 0, 0)));
    let nulls = br#"{"usageMetadata":{"promptTokenCount":null,"candidatesTokenCount":3,"thoughtsTokenCount":null}}"#;
    assert_eq!(reported(nulls), Ok(usage(0, 0, 3)));
    assert_eq!(reported(br#"{"usageMetadata":{}}"#), Ok(Usage::default()));
    // More cached than prompt: no negative input, every cached token kept.
    let odd = br#"{"usageMetadata":{"promptTokenCount":5,"cachedContentTokenCount":8}}"#;
    assert_eq!(reported(odd), Ok(usage(0, 8, 0)));
}

#[test]
fn absurd_counts_make_the_report_absurd() {
    let absurd = |field: &'static str, value: &str| {
        Err(AbsurdUsage {
            field,
            value: value.to_owned(),
        })
    };
    let cases: [(&[u8], Reported); 7] = [
        (
            br#"{"usageMetadata":{"promptTokenCount":-1,"candidatesTokenCount":5}}"#,
            absurd("promptTokenCount", "-1"),
        ),
        (
            br#"{"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":2.5}}"#,
            absurd("candidatesTokenCount", "2.5"),
        ),
        (
            br#"{"usageMetadata":{"promptTokenCount":10,"cachedContentTokenCount":9007199254740992}}"#,
            absurd("cachedContentTokenCount", "9007199254740992"),
        ),
        (
            br#"{"usageMetadata":{"promptTokenCount":10,"thoughtsTokenCount":"lots"}}"#,
            absurd("thoughtsTokenCount", "\"lots\""),
        ),
        (
            br#"{"usageMetadata":{"promptTokenCount":10,"toolUsePromptTokenCount":true}}"#,
            absurd("toolUsePromptTokenCount", "true"),
        ),
        (
            br#"{"usageMetadata":{"promptTokenCount":10,"totalTokenCount":[1]}}"#,
            absurd("totalTokenCount", "an array"),
        ),
        (
            br#"{"usageMetadata":{"candidatesTokenCount":1e30}}"#,
            absurd("candidatesTokenCount", "1000000000000000000000000000000"),
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(
            reported(body),
            expected,
            "{}",
            String::from_utf8_lossy(body)
        );
        let seen = read_chunk(body).unwrap();
        assert_eq!(seen.usage, Some(expected));
    }
    // Whole numbers written as floats are counts.
    let floats = br#"{"usageMetadata":{"promptTokenCount":12.0,"candidatesTokenCount":3}}"#;
    assert_eq!(reported(floats), Ok(usage(12, 0, 3)));
}

#[test]
fn bodies_without_usage_read_nothing() {
    let error = br#"{
  "error": {
    "code": 400,
    "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT",
    "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]
  }
}"#;
    let inputs: [&[u8]; 8] = [
        error,
        br#"{"candidates":[{"content":{"parts":[{"text":"hi"}]}}]}"#,
        br#"{"usageMetadata":null}"#,
        br#"[{"usageMetadata":{"promptTokenCount":5}}]"#,
        br#"[null,{"promptTokenCount":5}]"#,
        b"not json",
        b"",
        br#"{"usageMetadata":{"promptTokenCount":5}"#,
    ];
    for input in inputs {
        assert_eq!(
            body_usage(input),
            None,
            "{}",
            String::from_utf8_lossy(input)
        );
    }
    assert_eq!(read_chunk(error), Some(ChunkSeen::default()));
    assert_eq!(read_chunk(br#"[null,{"promptTokenCount":5}]"#), None);
    assert_eq!(read_chunk(b"]"), None);
}

#[test]
fn streamed_thinking_chunks_measure_thoughts_and_answer() {
    let thought = chunk(
        r#"{"candidates": [{"content": {"parts": [{"text": "**Calculating the percentage**\n\nI need 15% of 240.","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 20,"totalTokenCount": 405,"thoughtsTokenCount": 385},"modelVersion": "gemini-2.5-flash","responseId": "Il0taoSYJ5Cez7IPpLrjwQo"}"#,
    );
    assert_eq!(
        thought.text_bytes,
        "**Calculating the percentage**\n\nI need 15% of 240.".len() as u64
    );
    assert_eq!(thought.usage, Some(Ok(usage(20, 0, 385))));
    assert!(thought.finished.is_empty());

    let last = chunk(
        r#"{"candidates": [{"content": {"parts": [{"text": "It is 36 — café ☕ 😀."}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 20,"candidatesTokenCount": 12,"totalTokenCount": 417,"thoughtsTokenCount": 385}}"#,
    );
    assert_eq!(last.text_bytes, "It is 36 — café ☕ 😀.".len() as u64);
    assert_eq!(last.usage, Some(Ok(usage(20, 0, 397))));
    assert_eq!(last.finished, [0]);
}

#[test]
fn text_is_measured_decoded() {
    // `\n`, `\"`, `\u00e9` and a surrogate pair decode to 1, 1, 2 and 4 bytes.
    let seen =
        chunk(r#"{"candidates":[{"content":{"parts":[{"text":"a\n\"\u00e9\ud83d\ude00"}]}}]}"#);
    assert_eq!(seen.text_bytes, 1 + 1 + 1 + 2 + 4);
    assert_eq!(seen.usage, None);
}

#[test]
fn code_execution_parts_are_generated_text() {
    let seen = chunk(
        r#"{"candidates":[{"content":{"parts":[{"text":"Let me compute."},{"executableCode":{"language":"PYTHON","code":"print(sum(range(10)))\n"}},{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"45\n"}},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgoAAAANSUhEUg=="}}],"role":"model"},"index":0}]}"#,
    );
    assert_eq!(
        seen.text_bytes,
        ("Let me compute.".len() + "print(sum(range(10)))\n".len() + "45\n".len()) as u64
    );
}

#[test]
fn call_arguments_measure_as_compact_json() {
    let args = [
        r#"{"location":"Boston, MA"}"#,
        r#"{}"#,
        r#"{"q":"say \"hi\"\n\\ \u0001 é 😀","n":-12,"x":1.5,"big":1e30,"tiny":1e-7,"ok":true,"no":false,"nil":null,"list":[1,[],{},"a"]}"#,
        r#"[]"#,
        r#""just a string""#,
        r#"42"#,
        r#"[1e15,1e16,1e17,1e21,123.456,0.0001,0.00001,2.5e-8,1.2345678901234568e20,-0.0,18446744073709551615]"#,
    ];
    for args in args {
        let compact =
            serde_json::to_string(&serde_json::from_str::<serde_json::Value>(args).unwrap())
                .unwrap();
        let pretty = format!(
            "{{\"candidates\": [{{\"content\": {{\"parts\": [{{\"functionCall\": {{\"name\": \"f\", \"args\": {}}}}}]}}}}]}}",
            serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(args).unwrap()).unwrap()
        );
        assert_eq!(chunk(&pretty).text_bytes, compact.len() as u64, "{args}");
    }
    // Server-side tool calls and Vertex AI's streamed arguments count too.
    let seen = chunk(
        r#"{"candidates":[{"content":{"parts":[{"toolCall":{"id":"t1","toolType":"GOOGLE_SEARCH_WEB","args":{"q":"x"}}},{"functionCall":{"name":"f","partialArgs":[{"jsonPath":"$.city","stringValue":"Bos","willContinue":true},{"jsonPath":"$.days","numberValue":3},{"jsonPath":"$.metric","boolValue":false},{"jsonPath":"$.note","nullValue":"NULL_VALUE"}],"willContinue":true}}]}}]}"#,
    );
    assert_eq!(seen.text_bytes, (r#"{"q":"x"}"#.len() + 3 + 1 + 5) as u64);
}

#[test]
fn finished_lists_every_candidate_that_stopped() {
    let seen = chunk(
        r#"{"candidates":[{"content":{"parts":[{"text":"A"}]},"finishReason":"STOP"},{"content":{"parts":[{"text":"BB"}]},"index":1},{"finishReason":"MAX_TOKENS","index":2},{"finishReason":"","index":3},{"finishReason":"FINISH_REASON_UNSPECIFIED","index":4},{"finishReason":null,"index":5},{"finishReason":"SAFETY","index":-1},{"finishReason":"STOP","index":"6"},{"finishReason":7,"index":7},{"finishReason":0,"index":8},{"finishReason":"RECITATION","index":4294967296}]}"#,
    );
    assert_eq!(seen.text_bytes, 3);
    assert_eq!(seen.finished, [0, 2, 7]);
}

#[test]
fn unusual_shapes_never_fail_the_chunk() {
    let seen = chunk(
        r#"{"candidates":[{"content":{"parts":[{"text":7},{"text":null},{"text":{"a":"b"}},{"text":["x"]},{"executableCode":{"code":false}},{"unknownPart":{"x":1}},{"text":"ok"}]},"groundingMetadata":{"webSearchQueries":"one"},"finishReason":["STOP"]}],"usageMetadata":{"promptTokenCount":3},"somethingNew":{"deep":[1,2,{"x":null}]}}"#,
    );
    assert_eq!(seen.text_bytes, 2);
    assert_eq!(seen.usage, Some(Ok(usage(3, 0, 0))));
    assert_eq!(
        seen.grounding,
        Grounding {
            queries: 0,
            grounded: true
        }
    );
    assert!(seen.finished.is_empty());
    assert_eq!(
        read_chunk(br#"{"candidates":null}"#),
        Some(ChunkSeen::default())
    );
    assert_eq!(
        read_chunk(br#"{"candidates":[]}"#),
        Some(ChunkSeen::default())
    );
}

#[test]
fn no_input_panics() {
    // Every prefix of a real chunk, and some bytes that are no JSON.
    let full = br#"{"candidates":[{"content":{"parts":[{"text":"hi \u00e9"},{"functionCall":{"name":"f","args":{"a":[1,{"b":"c"}]}}}]},"finishReason":"STOP","groundingMetadata":{"webSearchQueries":["q"]}}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":2}}"#;
    for end in 0..=full.len() {
        let _ = read_chunk(&full[..end]);
        let _ = body_usage(&full[..end]);
    }
    let garbage: [&[u8]; 6] = [
        b"\xff\xfe{",
        b"{\"text\":\"\xc3\"}",
        b"{{{{",
        b"{\"a\":",
        b"  {}  ",
        b"{}garbage",
    ];
    for input in garbage {
        let _ = read_chunk(input);
        let _ = body_usage(input);
    }
    let deep = format!("{{\"candidates\":[{{\"content\":{{\"parts\":[{{\"functionCall\":{{\"args\":{}{}}}}}]}}}}]}}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(read_chunk(deep.as_bytes()), None);
}
