//! Event-stream frames cut, checked and read.

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use base64::Engine;
use serde_json::{json, Value};

use super::*;

fn frame(message_type: &'static str, event_type: &'static str, payload: &Value) -> Vec<u8> {
    let type_header = if message_type == "exception" {
        ":exception-type"
    } else {
        ":event-type"
    };
    let message = Message::new(serde_json::to_vec(payload).unwrap())
        .add_header(Header::new(
            type_header,
            HeaderValue::String(event_type.into()),
        ))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ))
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String(message_type.into()),
        ));
    let mut bytes = Vec::new();
    write_message_to(&message, &mut bytes).unwrap();
    bytes
}

fn converse_stream() -> Vec<Vec<u8>> {
    vec![
        frame(
            "event",
            "messageStart",
            &json!({"role": "assistant", "p": "abcd"}),
        ),
        frame(
            "event",
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"text": "Hello there"}, "p": "ab"}),
        ),
        frame(
            "event",
            "contentBlockStop",
            &json!({"contentBlockIndex": 0}),
        ),
        frame("event", "messageStop", &json!({"stopReason": "end_turn"})),
        frame(
            "event",
            "metadata",
            &json!({"usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15,
                              "cacheReadInputTokens": 100}, "metrics": {"latencyMs": 9}}),
        ),
    ]
}

#[test]
fn frames_are_cut_whole_however_the_bytes_arrive() {
    let frames = converse_stream();
    let all: Vec<u8> = frames.concat();
    for piece in [1, 7, 64, all.len()] {
        let mut splitter = EventStreamSplitter::new();
        let mut out = Vec::new();
        for chunk in all.chunks(piece) {
            splitter.push(chunk);
            while let Some(frame) = splitter.next_frame() {
                out.push(frame.to_vec());
            }
        }
        assert_eq!(out, frames, "pieces of {piece}");
        assert!(splitter.take_rest().is_empty());
    }
}

#[test]
fn a_converse_stream_is_settled_on_its_metadata() {
    let mut seen = StreamSeen::default();
    let frames = converse_stream();
    let actions: Vec<EventAction> = frames.iter().map(|f| converse(&mut seen, f)).collect();
    assert_eq!(actions[..4], [EventAction::Forward; 4]);
    assert_eq!(actions[4], EventAction::Terminal);
    let usage = seen.reported_usage().unwrap().unwrap();
    assert_eq!(
        (usage.input, usage.cached_input, usage.output),
        (12, 100, 3)
    );
    assert_eq!(seen.output_text_bytes(), "Hello there".len() as u64);
}

#[test]
fn a_frame_whose_checksum_fails_is_not_believed() {
    let mut metadata = converse_stream().pop().unwrap();
    // A payload byte changed: the message checksum no longer matches.
    let at = metadata.len() - 10;
    metadata[at] ^= 1;
    let mut seen = StreamSeen::default();
    assert_eq!(converse(&mut seen, &metadata), EventAction::Forward);
    assert!(seen.reported_usage().is_none());
    // An exception ends the stream without usage.
    let exception = frame(
        "exception",
        "throttlingException",
        &json!({"message": "slow down"}),
    );
    assert_eq!(converse(&mut seen, &exception), EventAction::Forward);
    assert!(seen.reported_usage().is_none());
}

#[test]
fn an_invoke_stream_is_anthropics_events_inside() {
    let chunk = |event: Value| {
        let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
        frame("event", "chunk", &json!({"bytes": bytes, "p": "abc"}))
    };
    let frames = [
        chunk(
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 20, "output_tokens": 1}}}),
        ),
        chunk(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ),
        chunk(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}}),
        ),
        chunk(
            json!({"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 20, "outputTokenCount": 7}}),
        ),
    ];
    let mut seen = StreamSeen::default();
    let actions: Vec<EventAction> = frames.iter().map(|f| invoke(&mut seen, f)).collect();
    assert_eq!(actions[3], EventAction::Terminal);
    let usage = seen.reported_usage().unwrap().unwrap();
    assert_eq!((usage.input, usage.output), (20, 7));
}
