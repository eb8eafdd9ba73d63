//! The stream meter on recorded and hand-written streams of every API
//! shape, split at every byte; the Responses and Anthropic streams have
//! their own files.

use super::*;
use crate::usage::count_output_tokens;

mod anthropic;
mod responses;

const OPENAI_CHAT: &[u8] = include_bytes!("../fixtures/openai_chat.sse");
const OPENAI_TOOLS: &[u8] = include_bytes!("../fixtures/openai_chat_tools.sse");
const OPENAI_COMPLETIONS: &[u8] = include_bytes!("../fixtures/openai_completions.sse");
const RESPONSES: &[u8] = include_bytes!("../fixtures/responses.sse");
const ANTHROPIC: &[u8] = include_bytes!("../fixtures/anthropic.sse");

const CHAT: StreamKind = StreamKind::OpenAiChat {
    hide_usage_chunk: false,
};
const CHAT_HIDING_USAGE: StreamKind = StreamKind::OpenAiChat {
    hide_usage_chunk: true,
};

/// Everything a meter concluded from one stream.
#[derive(Debug, PartialEq)]
struct Metered {
    actions: Vec<EventAction>,
    reported: Option<Reported>,
    partial: Usage,
    text_bytes: u64,
}

fn meter<'a>(kind: StreamKind, chunks: impl IntoIterator<Item = &'a [u8]>) -> Metered {
    let mut splitter = kind.frames();
    let mut meter = StreamMeter::new(kind);
    let mut actions = Vec::new();
    for chunk in chunks {
        splitter.push(chunk);
        while let Some(event) = splitter.next_event() {
            actions.push(meter.observe(&event));
        }
    }
    assert!(splitter.take_rest().is_empty());
    Metered {
        actions,
        reported: meter.reported_usage(),
        partial: meter.partial_usage(),
        text_bytes: meter.output_text_bytes(),
    }
}

/// Metering gives the same result wherever the stream is split, and in
/// one-byte chunks.
fn meter_at_every_split(kind: StreamKind, input: &[u8]) -> Metered {
    let whole = meter(kind, [input]);
    for at in 0..=input.len() {
        let (head, tail) = input.split_at(at);
        assert_eq!(meter(kind, [head, tail]), whole, "split at byte {at}");
    }
    assert_eq!(meter(kind, input.chunks(1)), whole, "one-byte chunks");
    whole
}

/// `usage` as OpenAI reports it, at its `default` tier.
fn at_standard(usage: Usage) -> Usage {
    Usage {
        service_tier: Some(crate::usage::ServiceTier::Standard),
        ..usage
    }
}

/// `usage` as Anthropic reports it, with none of its cache writes kept
/// for an hour.
fn unsplit_hour(usage: Usage) -> Usage {
    Usage {
        cache_write_1h: Some(0),
        ..usage
    }
}

fn usage(input: u64, cached_input: u64, cache_write: u64, output: u64) -> Usage {
    Usage {
        input,
        cached_input,
        cache_write,
        output,
        ..Usage::default()
    }
}

/// `Forward` for every event but the ones named by index.
fn forwards(count: usize, exceptions: &[(usize, EventAction)]) -> Vec<EventAction> {
    let mut actions = vec![EventAction::Forward; count];
    for (index, action) in exceptions {
        actions[*index] = *action;
    }
    actions
}

/// The events of `input` up to, not including, the `cut`-th blank line.
fn cut_before_event(input: &[u8], cut: usize) -> &[u8] {
    let mut splitter = crate::sse::SseSplitter::new();
    splitter.push(input);
    let kept: usize = (0..cut)
        .map(|_| splitter.next_event().map_or(0, |e| e.len()))
        .sum();
    &input[..kept]
}

fn without_event_lines(input: &[u8]) -> Vec<u8> {
    input
        .split_inclusive(|b| *b == b'\n')
        .filter(|line| !line.starts_with(b"event:"))
        .flatten()
        .copied()
        .collect()
}

// === OpenAI chat and completions ===

#[test]
fn chat_stream_with_include_usage() {
    let metered = meter_at_every_split(CHAT, OPENAI_CHAT);
    assert_eq!(
        metered.actions,
        forwards(26, &[(25, EventAction::Terminal)])
    );
    assert_eq!(
        metered.reported,
        Some(Ok(at_standard(usage(109, 1024, 0, 24))))
    );
    // The text, with its `\n`, `"` and `\u2014` escapes decoded.
    assert_eq!(metered.text_bytes, 94);
}

#[test]
fn injected_usage_chunk_is_dropped() {
    let metered = meter_at_every_split(CHAT_HIDING_USAGE, OPENAI_CHAT);
    assert_eq!(
        metered.actions,
        forwards(26, &[(24, EventAction::Drop), (25, EventAction::Terminal)])
    );
    assert_eq!(
        metered.reported,
        Some(Ok(at_standard(usage(109, 1024, 0, 24))))
    );
}

#[test]
fn chat_tool_call_arguments_are_counted() {
    let metered = meter_at_every_split(CHAT_HIDING_USAGE, OPENAI_TOOLS);
    assert_eq!(
        metered.actions,
        forwards(11, &[(9, EventAction::Drop), (10, EventAction::Terminal)])
    );
    assert_eq!(metered.reported, Some(Ok(at_standard(usage(68, 0, 0, 17)))));
    assert_eq!(
        metered.text_bytes,
        br#"{"location":"Paris, France"}"#.len() as u64
    );
}

#[test]
fn legacy_completions_stream() {
    let metered = meter_at_every_split(CHAT_HIDING_USAGE, OPENAI_COMPLETIONS);
    assert_eq!(
        metered.actions,
        forwards(9, &[(7, EventAction::Drop), (8, EventAction::Terminal)])
    );
    assert_eq!(metered.reported, Some(Ok(usage(5, 0, 0, 7))));
    assert_eq!(metered.text_bytes, b"\n\nThis is a test.".len() as u64);
}

#[test]
fn usage_on_a_chunk_with_choices_is_never_dropped() {
    let mut meter = StreamMeter::new(CHAT_HIDING_USAGE);
    let chunk = br#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}

"#;
    assert_eq!(meter.observe(chunk), EventAction::Forward);
    assert_eq!(meter.reported_usage(), Some(Ok(usage(3, 0, 0, 1))));
    assert_eq!(meter.output_text_bytes(), 2);
}

#[test]
fn azure_filter_chunk_without_usage_is_forwarded() {
    let mut meter = StreamMeter::new(CHAT_HIDING_USAGE);
    let chunk = br#"data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}

"#;
    assert_eq!(meter.observe(chunk), EventAction::Forward);
    assert_eq!(meter.reported_usage(), None);
}

#[test]
fn chat_stream_cut_before_usage_counts_text_seen() {
    let cut = cut_before_event(OPENAI_CHAT, 12);
    let metered = meter_at_every_split(CHAT_HIDING_USAGE, cut);
    assert_eq!(metered.reported, None);
    let seen = "Here's a haiku:\n\nAutumn moonlight\u{2014}\na worm".len() as u64;
    assert_eq!(metered.text_bytes, seen);
    assert_eq!(
        metered.partial,
        at_standard(usage(0, 0, 0, seen.div_ceil(3)))
    );
}

#[test]
fn reasoning_under_two_names_is_counted_once() {
    let mut meter = StreamMeter::new(CHAT);
    let chunk = br#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Let me think","reasoning":"Let me think"},"finish_reason":null}]}

"#;
    meter.observe(chunk);
    assert_eq!(meter.output_text_bytes(), 12);
    let refusal = br#"data: {"choices":[{"index":0,"delta":{"refusal":"I can\u2019t help"}}]}

"#;
    meter.observe(refusal);
    assert_eq!(
        meter.output_text_bytes(),
        12 + "I can\u{2019}t help".len() as u64
    );
}

#[test]
fn unusual_content_shapes_do_not_cost_the_usage() {
    let mut meter = StreamMeter::new(CHAT_HIDING_USAGE);
    let chunk = br#"data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"prompt_tokens_details":null}}

"#;
    assert_eq!(meter.observe(chunk), EventAction::Drop);
    let chunk = br#"data: {"choices":[{"delta":{"content":[{"type":"thinking","thinking":"hm"}],"tool_calls":null}}],"usage":null}

"#;
    assert_eq!(meter.observe(chunk), EventAction::Forward);
    assert_eq!(meter.reported_usage(), Some(Ok(usage(7, 0, 0, 2))));
}

#[test]
fn malformed_chat_events_are_forwarded() {
    let mut meter = StreamMeter::new(CHAT_HIDING_USAGE);
    let events: [&[u8]; 7] = [
        b"data: {\"choices\":[{\"delta\":{\"content\":\"trunc\n\n",
        b"data: {\"usage\":[],\"choices\":[]}\n\n",
        b"data: not json\n\n",
        b": keep-alive\n\n",
        b"\n",
        b"data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n",
        b"\xff\xfe\n\n",
    ];
    for event in events {
        assert_eq!(meter.observe(event), EventAction::Forward);
    }
    assert_eq!(meter.reported_usage(), None);
    assert_eq!(
        meter.observe(b"data: [DONE]\r\n\r\n"),
        EventAction::Terminal
    );
}

#[test]
fn output_tokens_round_up_at_three_bytes() {
    assert_eq!(count_output_tokens(0), 0);
    assert_eq!(count_output_tokens(1), 1);
    assert_eq!(count_output_tokens(3), 1);
    assert_eq!(count_output_tokens(4), 2);
    assert_eq!(count_output_tokens(u64::MAX - 1), u64::MAX / 3);
}

// === Absurd usage ===

/// A count no call can have makes the stream's report absurd, whatever
/// else it reported, and even if the stream is cut before its end; the
/// event carrying it is handled as any usage event, its text counted.
#[test]
fn absurd_counts_make_the_stream_report_absurd() {
    let chat = b"data: {\"choices\":[{\"delta\":{\"content\":\"abcdef\"}}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":-4}}\n\n";
    let mut meter = StreamMeter::new(CHAT_HIDING_USAGE);
    assert_eq!(meter.observe(chat), EventAction::Forward);
    assert_eq!(meter.output_text_bytes(), 6);
    let absurd = AbsurdUsage {
        field: "completion_tokens",
        value: "-4".to_owned(),
    };
    assert_eq!(meter.reported_usage(), Some(Err(absurd.clone())));
    assert_eq!(meter.absurd_usage(), Some(&absurd));

    // A usage-only chunk the gateway asked for is still hidden.
    let hidden = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1.5}}\n\n";
    let mut meter = StreamMeter::new(CHAT_HIDING_USAGE);
    assert_eq!(meter.observe(hidden), EventAction::Drop);
    assert_eq!(meter.absurd_usage().map(|a| a.field), Some("prompt_tokens"));

    let completed = br#"event: response.completed
data: {"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":9007199254740993}}}

"#;
    let mut meter = StreamMeter::new(StreamKind::OpenAiResponses);
    assert_eq!(meter.observe(completed), EventAction::Terminal);
    assert_eq!(
        meter.reported_usage().map(|r| r.map_err(|a| a.field)),
        Some(Err("output_tokens"))
    );
}

// === Hosted tool uses ===

fn web_searches(searches: u64, fetches: u64) -> crate::hosted::ToolCalls {
    use crate::hosted::{HostedTool, ToolCalls};
    let mut calls = ToolCalls::default();
    calls.set(HostedTool::WebSearch, searches);
    calls.set(HostedTool::WebFetch, fetches);
    calls
}

#[test]
fn anthropic_server_tool_uses_are_cumulative() {
    let mut meter = StreamMeter::new(StreamKind::AnthropicMessages);
    let start = br#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":2679,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3,"server_tool_use":{"web_search_requests":0}}}}

"#;
    meter.observe(start);
    assert_eq!(meter.partial_usage().tool_calls, web_searches(0, 0));
    let delta = br#"event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":10682,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":510,"server_tool_use":{"web_search_requests":2,"web_fetch_requests":1}}}

"#;
    meter.observe(delta);
    let reported = meter.reported_usage().unwrap().unwrap();
    assert_eq!(reported.input, 10682);
    assert_eq!(reported.tool_calls, web_searches(2, 1));
    // A later delta naming one count keeps the other.
    let later = br#"event: message_delta
data: {"type":"message_delta","delta":{},"usage":{"output_tokens":511,"server_tool_use":{"web_search_requests":3}}}

"#;
    meter.observe(later);
    assert_eq!(
        meter.reported_usage().unwrap().unwrap().tool_calls,
        web_searches(3, 1)
    );
}

#[test]
fn responses_completed_counts_hosted_call_items() {
    use crate::hosted::HostedTool;
    let completed = br#"event: response.completed
data: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"rust"}},{"type":"web_search_call","id":"ws_2","status":"completed"},{"type":"file_search_call","id":"fs_1","status":"completed","queries":["q"],"results":null},{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Rust \"is\" fine","annotations":[]}]}],"usage":{"input_tokens":9000,"input_tokens_details":{"cached_tokens":0},"output_tokens":40,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":9040}}}

"#;
    let mut meter = StreamMeter::new(StreamKind::OpenAiResponses);
    assert_eq!(meter.observe(completed), EventAction::Terminal);
    let reported = meter.reported_usage().unwrap().unwrap();
    assert_eq!((reported.input, reported.output), (9000, 40));
    let calls: Vec<_> = reported.tool_calls.iter().collect();
    assert_eq!(
        calls,
        [(HostedTool::WebSearch, 2), (HostedTool::FileSearch, 1)]
    );
}

#[test]
fn streams_report_their_tier_and_cache_lifetimes() {
    let chat = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"service_tier\":\"priority\",\"usage\":null}\n\n\
data: {\"choices\":[],\"service_tier\":\"priority\",\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\n\
data: [DONE]\n\n";
    let metered = meter(
        StreamKind::OpenAiChat {
            hide_usage_chunk: false,
        },
        [&chat[..]],
    );
    let priority = Some(crate::usage::ServiceTier::Priority);
    assert_eq!(
        metered.reported.unwrap().unwrap().service_tier,
        priority,
        "the usage chunk's tier"
    );
    // Cut before the usage chunk: the tier the chunks reported.
    let cut = meter(
        StreamKind::OpenAiChat {
            hide_usage_chunk: false,
        },
        [&chat[..chat.iter().position(|b| *b == b'\n').unwrap() + 2]],
    );
    assert_eq!(cut.reported, None);
    assert_eq!(cut.partial.service_tier, priority);

    let anthropic = b"event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":300,\"cache_creation\":{\"ephemeral_5m_input_tokens\":100,\"ephemeral_1h_input_tokens\":200},\"output_tokens\":1}}}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";
    let metered = meter(StreamKind::AnthropicMessages, [&anthropic[..]]);
    assert_eq!(
        metered.reported,
        Some(Ok(Usage {
            cache_write_1h: Some(200),
            ..usage(5, 0, 300, 7)
        }))
    );
}
