//! The Anthropic Messages stream: input counts from `message_start`,
//! cumulative counts in each `message_delta`, and cut streams.

use super::*;

#[test]
fn anthropic_stream() {
    let metered = meter_at_every_split(StreamKind::AnthropicMessages, ANTHROPIC);
    assert_eq!(
        metered.actions,
        forwards(19, &[(18, EventAction::Terminal)])
    );
    assert_eq!(
        metered.reported,
        Some(Ok(unsplit_hour(usage(472, 8192, 1536, 89))))
    );
    // Thinking, text and tool input; the signature is not counted.
    assert_eq!(metered.text_bytes, 147);
}

#[test]
fn anthropic_stream_without_event_lines_reads_the_type_field() {
    let stripped = without_event_lines(ANTHROPIC);
    let metered = meter_at_every_split(StreamKind::AnthropicMessages, &stripped);
    assert_eq!(metered, meter(StreamKind::AnthropicMessages, [ANTHROPIC]));
}

const MESSAGE_START: &[u8] = br#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}

"#;

#[test]
fn anthropic_output_is_cumulative_not_summed() {
    let mut meter = StreamMeter::new(StreamKind::AnthropicMessages);
    meter.observe(MESSAGE_START);
    assert_eq!(meter.reported_usage(), None);
    let first = b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null,\"stop_sequence\":null},\"usage\":{\"output_tokens\":10}}\n\n";
    let second = b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":25}}\n\n";
    assert_eq!(meter.observe(first), EventAction::Forward);
    assert_eq!(meter.reported_usage(), Some(Ok(usage(25, 0, 0, 10))));
    assert_eq!(meter.observe(second), EventAction::Forward);
    assert_eq!(meter.reported_usage(), Some(Ok(usage(25, 0, 0, 25))));
    let stop = b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    assert_eq!(meter.observe(stop), EventAction::Terminal);
}

#[test]
fn anthropic_delta_repeating_input_counts_replaces_them() {
    let mut meter = StreamMeter::new(StreamKind::AnthropicMessages);
    meter.observe(MESSAGE_START);
    let delta = br#"event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":27,"cache_creation_input_tokens":0,"cache_read_input_tokens":4096,"output_tokens":48,"server_tool_use":{"web_search_requests":0}}}

"#;
    meter.observe(delta);
    assert_eq!(meter.reported_usage(), Some(Ok(usage(27, 4096, 0, 48))));
}

/// The current API repeats every count in `message_delta`, cumulative:
/// the input and cache counts equal those of `message_start` and must not
/// be added to them; a tool call ends the message as text does.
const ANTHROPIC_CUMULATIVE_TOOL_USE: &[u8] = br#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":412,"cache_creation_input_tokens":1024,"cache_read_input_tokens":2048,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":412,"cache_creation_input_tokens":1024,"cache_read_input_tokens":2048,"output_tokens":57}}

event: message_stop
data: {"type":"message_stop"}

"#;

#[test]
fn anthropic_cumulative_delta_counts_are_not_added_twice() {
    let metered =
        meter_at_every_split(StreamKind::AnthropicMessages, ANTHROPIC_CUMULATIVE_TOOL_USE);
    assert_eq!(metered.actions, forwards(7, &[(6, EventAction::Terminal)]));
    assert_eq!(metered.reported, Some(Ok(usage(412, 2048, 1024, 57))));
    assert_eq!(metered.text_bytes, r#"{"city":"Paris"}"#.len() as u64);
}

#[test]
fn anthropic_stream_cut_after_start_keeps_reported_input() {
    let cut = cut_before_event(ANTHROPIC, 10);
    let metered = meter(StreamKind::AnthropicMessages, [cut]);
    assert_eq!(metered.reported, None);
    let seen = "The user wants the weather in Paris.\nI should call get_weather.I'll check the weather in Paris".len() as u64;
    assert_eq!(metered.text_bytes, seen);
    assert_eq!(
        metered.partial,
        unsplit_hour(usage(472, 8192, 1536, seen.div_ceil(3)))
    );

    let mut meter = StreamMeter::new(StreamKind::AnthropicMessages);
    assert!(!meter.seen.input_reported);
    meter.observe(MESSAGE_START);
    assert!(meter.seen.input_reported);
    // Nothing generated yet: the output reported at the start stands.
    assert_eq!(meter.partial_usage(), usage(25, 0, 0, 1));
}

#[test]
fn anthropic_error_and_unknown_events_are_forwarded() {
    let mut meter = StreamMeter::new(StreamKind::AnthropicMessages);
    let events: [&[u8]; 4] = [
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        b"event: ping\ndata: {\"type\": \"ping\"}\n\n",
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\n\n",
        b"data: {\"type\":\"some_future_event\"}\n\n",
    ];
    for event in events {
        assert_eq!(meter.observe(event), EventAction::Forward);
    }
    assert_eq!(meter.output_text_bytes(), 0);
    assert_eq!(meter.reported_usage(), None);
}

#[test]
fn anthropic_absurd_counts_in_start_or_delta_are_kept() {
    let start = br#"event: message_start
data: {"type":"message_start","message":{"usage":{"input_tokens":-20,"output_tokens":1}}}

"#;
    let delta = br#"event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}

"#;
    let mut meter = StreamMeter::new(StreamKind::AnthropicMessages);
    meter.observe(start);
    meter.observe(delta);
    // The later, sane delta does not make the report believable again.
    assert_eq!(
        meter.reported_usage().map(|r| r.map_err(|a| a.to_string())),
        Some(Err("input_tokens = -20".to_owned()))
    );

    let fractional = br#"event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2.5}}

"#;
    let mut meter = StreamMeter::new(StreamKind::AnthropicMessages);
    meter.observe(MESSAGE_START);
    meter.observe(fractional);
    assert_eq!(
        meter.absurd_usage().map(ToString::to_string).as_deref(),
        Some("output_tokens = 2.5")
    );
}
