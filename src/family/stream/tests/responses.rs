//! The OpenAI Responses stream: its terminal events, its usage, and the
//! deltas whose text is counted.

use super::*;

#[test]
fn responses_stream() {
    let metered = meter_at_every_split(StreamKind::OpenAiResponses, RESPONSES);
    assert_eq!(
        metered.actions,
        forwards(20, &[(19, EventAction::Terminal)])
    );
    assert_eq!(
        metered.reported,
        Some(Ok(at_standard(usage(270, 2048, 0, 19))))
    );
    assert_eq!(metered.text_bytes, 47);
}

#[test]
fn responses_stream_without_event_lines_reads_the_type_field() {
    let stripped = without_event_lines(RESPONSES);
    let metered = meter_at_every_split(StreamKind::OpenAiResponses, &stripped);
    assert_eq!(metered, meter(StreamKind::OpenAiResponses, [RESPONSES]));
}

#[test]
fn responses_stream_cut_before_completion() {
    let cut = cut_before_event(RESPONSES, 9);
    let metered = meter(StreamKind::OpenAiResponses, [cut]);
    assert_eq!(metered.reported, None);
    let seen = "Hi there! How can".len() as u64;
    assert_eq!(metered.text_bytes, seen);
    assert_eq!(metered.partial, usage(0, 0, 0, 6));
}

#[test]
fn responses_other_terminal_events() {
    let mut meter = StreamMeter::new(StreamKind::OpenAiResponses);
    let incomplete = br#"event: response.incomplete
data: {"type":"response.incomplete","sequence_number":57,"response":{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":0},"output_tokens":256,"output_tokens_details":{"reasoning_tokens":192},"total_tokens":296}}}

"#;
    assert_eq!(meter.observe(incomplete), EventAction::Terminal);
    assert_eq!(meter.reported_usage(), Some(Ok(usage(40, 0, 0, 256))));

    let mut meter = StreamMeter::new(StreamKind::OpenAiResponses);
    let failed = br#"event: response.failed
data: {"type":"response.failed","sequence_number":3,"response":{"id":"resp_2","object":"response","status":"failed","error":{"code":"server_error","message":"The model failed to generate a response."},"usage":null}}

"#;
    assert_eq!(meter.observe(failed), EventAction::Terminal);
    assert_eq!(meter.reported_usage(), None);
}

#[test]
fn responses_deltas_of_other_kinds() {
    let mut meter = StreamMeter::new(StreamKind::OpenAiResponses);
    let events: [&[u8]; 4] = [
        b"event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"item_id\":\"rs_1\",\"output_index\":0,\"summary_index\":0,\"delta\":\"**Plan**\"}\n\n",
        b"event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"output_index\":1,\"delta\":\"{\\\"a\\\":1}\"}\n\n",
        b"event: response.refusal.delta\ndata: {\"type\":\"response.refusal.delta\",\"item_id\":\"msg_1\",\"output_index\":2,\"content_index\":0,\"delta\":\"No\"}\n\n",
        // Audio is base64, not text.
        b"event: response.audio.delta\ndata: {\"type\":\"response.audio.delta\",\"response_id\":\"resp_1\",\"delta\":\"UklGRiQAAABXQVZF\"}\n\n",
    ];
    for event in events {
        assert_eq!(meter.observe(event), EventAction::Forward);
    }
    assert_eq!(meter.output_text_bytes(), 8 + 7 + 2);
}
