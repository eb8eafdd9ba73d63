//! A Gemini stream, chunk by chunk: each `GenerateContentResponse` (an
//! SSE event's data, or an element of the JSON array) carries its text
//! and the usage so far; the last `usageMetadata` counts. The chunk in
//! which every candidate has finished, with its usage, ends the stream:
//! it is settled before the client gets it.

use super::usage::{read_chunk, Grounding};
use super::with_grounding;
use crate::usage::{EventAction, StreamSeen};

/// What a Gemini stream has shown beyond the usage.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GeminiSeen {
    /// The candidates that have finished, as bits by index.
    finished: u64,
    /// The most grounding any chunk showed.
    grounding: Grounding,
}

/// Reads one chunk of a stream of `candidates` candidates.
pub(crate) fn chunk(
    seen: &mut StreamSeen,
    gemini: &mut GeminiSeen,
    data: &[u8],
    candidates: u64,
) -> EventAction {
    let Some(chunk) = read_chunk(data) else {
        return EventAction::Forward;
    };
    seen.count_text(chunk.text_bytes);
    gemini.grounding = Grounding {
        queries: gemini.grounding.queries.max(chunk.grounding.queries),
        grounded: gemini.grounding.grounded || chunk.grounding.grounded,
    };
    for index in chunk.finished {
        if index < 64 {
            gemini.finished |= 1 << index;
        }
    }
    let Some(reported) = chunk.usage else {
        return EventAction::Forward;
    };
    match reported {
        Ok(usage) => {
            // Each report counts everything so far: it replaces the last.
            seen.usage = with_grounding(usage, gemini.grounding);
            seen.input_reported = true;
        }
        Err(absurd) => seen.note_absurd(absurd),
    }
    if u64::from(gemini.finished.count_ones()) >= candidates.min(64) {
        seen.output_reported = true;
        return EventAction::Terminal;
    }
    EventAction::Forward
}
