//! Inputs of the micro-benchmarks, built once: long provider streams with
//! their usage at the end, response bodies of every API shape, and chat
//! requests whose prompts hold a chosen number of tokens.

use bytes::Bytes;
use serde_json::json;
use tollgate::estimate::TokenCounter;

/// Content events in a generated stream: a long answer (about 2,000
/// output tokens), so the scan of the content dominates.
pub const STREAM_TOKENS: usize = 2_000;

/// Words the generated text is made of: English prose, a few tokens each.
const WORDS: &[&str] = &[
    "the",
    "gateway",
    "reserves",
    "an",
    "upper",
    "bound",
    "of",
    "every",
    "call",
    "before",
    "forwarding",
    "it",
    "and",
    "settles",
    "actual",
    "cost",
    "when",
    "provider",
    "reports",
    "its",
    "usage",
    "streaming",
    "responses",
    "pass",
    "through",
    "unchanged",
    "while",
    "each",
    "event",
    "is",
    "read",
    "once",
    "for",
    "tokens",
    "budget",
    "caps",
    "hold",
    "under",
    "concurrency",
    "exactly",
];

/// The `n`th word of the generated text, with its leading space.
fn word(n: usize) -> String {
    format!(" {}", WORDS[n % WORDS.len()])
}

/// An OpenAI chat stream as the API sends it with `include_usage`: a role
/// chunk, one chunk per token, the finish chunk, the usage chunk, `[DONE]`.
/// One `Bytes` per event, as they arrive from the provider.
pub fn openai_chat_stream(tokens: usize) -> Vec<Bytes> {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        json!({
            "id": "chatcmpl-BL0vh2RZ2JmQBH6yaf3iQ5Zq7uXkT",
            "object": "chat.completion.chunk",
            "created": 1744464521,
            "model": "gpt-4o-mini-2024-07-18",
            "service_tier": "default",
            "system_fingerprint": "fp_44added55e",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "usage": null
        })
    };
    let data = |value: serde_json::Value| Bytes::from(format!("data: {value}\n\n"));
    let mut events = Vec::with_capacity(tokens + 4);
    events.push(data(chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    )));
    for n in 0..tokens {
        events.push(data(chunk(json!({"content": word(n)}), None)));
    }
    events.push(data(chunk(json!({}), Some("stop"))));
    events.push(data(json!({
        "id": "chatcmpl-BL0vh2RZ2JmQBH6yaf3iQ5Zq7uXkT",
        "object": "chat.completion.chunk",
        "created": 1744464521,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [],
        "usage": {
            "prompt_tokens": 1133, "completion_tokens": tokens, "total_tokens": 1133 + tokens,
            "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}
        }
    })));
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

/// An Anthropic Messages stream: `message_start` with the input counts, one
/// `content_block_delta` per token, `message_delta` with the output count,
/// `message_stop`.
pub fn anthropic_stream(tokens: usize) -> Vec<Bytes> {
    let named = |name: &str, value: serde_json::Value| {
        Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
    };
    let mut events = Vec::with_capacity(tokens + 6);
    events.push(named(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_01HCDu5LRGeP2o7s2xGmxyx8", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-20250514", "content": [], "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 472, "cache_creation_input_tokens": 1536,
                      "cache_read_input_tokens": 8192, "output_tokens": 4}}}),
    ));
    events.push(named(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}),
    ));
    for n in 0..tokens {
        events.push(named(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": word(n)}}),
        ));
    }
    events.push(named(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push(named(
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": tokens}}),
    ));
    events.push(named("message_stop", json!({"type": "message_stop"})));
    events
}

/// The same bytes cut into reads of `size`, as a busy socket delivers them:
/// events split across reads and several in one.
pub fn reads_of(events: &[Bytes], size: usize) -> Vec<Bytes> {
    let whole: Vec<u8> = events.iter().flat_map(|e| e.iter().copied()).collect();
    whole.chunks(size).map(Bytes::copy_from_slice).collect()
}

pub fn total_len(chunks: &[Bytes]) -> u64 {
    chunks.iter().map(|c| c.len() as u64).sum()
}

/// A chat completion body as OpenAI returns it.
pub const CHAT_BODY: &str = r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"The image shows a wooden boardwalk path running through a lush green field or meadow, under a blue sky with scattered clouds.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}"#;

/// A legacy completion body.
pub const COMPLETIONS_BODY: &str = r#"{"id":"cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7","object":"text_completion","created":1589478378,"model":"gpt-3.5-turbo-instruct","system_fingerprint":"fp_44709d6fcb","choices":[{"text":"\n\nThis is indeed a test","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#;

/// A Responses API body.
pub const RESPONSES_BODY: &str = r#"{"id":"resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41","object":"response","created_at":1741476777,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4o-2024-08-06","output":[{"type":"message","id":"msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41","status":"completed","role":"assistant","content":[{"type":"output_text","text":"The image depicts a scenic landscape with a wooden boardwalk or pathway.","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":328,"input_tokens_details":{"cached_tokens":128},"output_tokens":52,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":380},"user":null,"metadata":{}}"#;

/// An Anthropic Messages body.
pub const MESSAGES_BODY: &str = r#"{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":21,"cache_creation_input_tokens":188086,"cache_read_input_tokens":2048,"cache_creation":{"ephemeral_5m_input_tokens":188086,"ephemeral_1h_input_tokens":0},"output_tokens":393,"service_tier":"standard"}}"#;

/// An embeddings body with a full 1,536-dimension vector: most of its bytes
/// are numbers the usage reader must skip.
pub fn embeddings_body() -> String {
    let vector: Vec<String> = (0..1536)
        .map(|i| format!("{:.9}", ((i * 7919) % 2000) as f64 / 1000.0 - 1.0))
        .collect();
    format!(
        r#"{{"object":"list","data":[{{"object":"embedding","index":0,"embedding":[{}]}}],"model":"text-embedding-3-small","usage":{{"prompt_tokens":8,"total_tokens":8}}}}"#,
        vector.join(",")
    )
}

/// A chat message of the length an agent's calls carry.
pub const SUPPORT_MESSAGE: &str = "You are the support agent of a small online \
shop. Answer in two sentences at most, politely, and escalate billing disputes \
or refunds above $50 to a human with the ticket number.";

/// Prose of about `tokens` tokens by `counter`'s count (at least that
/// many, give or take the seams between repeated blocks).
pub fn prose(tokens: u64, counter: TokenCounter) -> String {
    // One block is counted and repeated: counting a growing text until it
    // is long enough would tokenize it over and over.
    let mut block = String::new();
    for n in 0..50 {
        block.push_str(&word(n));
        if n % 17 == 16 {
            block.push('.');
        }
    }
    let per_block = counter.count(&block).max(1);
    block.repeat(tokens.div_ceil(per_block) as usize)
}

/// A chat request with a system prompt, a short exchange and the long
/// user message that makes up most of `tokens`.
pub fn chat_request(model: &str, tokens: u64, counter: TokenCounter) -> Bytes {
    let body = json!({
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a careful assistant. Answer briefly."},
            {"role": "user", "content": "Summarise the text I am about to send."},
            {"role": "assistant", "content": "Send it."},
            {"role": "user", "content": prose(tokens, counter)},
        ],
        "temperature": 0.2,
        "stream": true,
    });
    Bytes::from(body.to_string())
}
