//! `streamGenerateContent`: the chunks of a Gemini answer and their two
//! framings. Every chunk is a whole response object whose candidates each
//! carry the next piece and whose `usageMetadata` counts what is out so
//! far; the last one carries every candidate's `finishReason`, the
//! grounding and the final usage.
//!
//! A reply is one chunk per token (one word of every candidate), then the
//! closing chunk with an empty text part. A thought summary, when asked
//! for, comes first in a chunk of its own. A function call is one chunk
//! that ends the stream, as Gemini sends it.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::gemini::{Framing, Generation};
use super::handler::Answer;
use super::reply::{word, Directives};
use super::stream::{crlf_data, Event, EventStream};
use super::MockOptions;

/// One step of the answer before framing.
enum Step {
    /// A chunk that carries no reply token.
    Chunk(Value),
    /// A chunk that carries this many reply tokens, all candidates
    /// together.
    Tokens(Value, u64),
    /// Generation is over (see [`Event::Generated`]).
    Generated,
}

/// The streamed answer to `generation`.
pub(crate) fn answer(
    generation: Generation,
    framing: Framing,
    directives: &Directives,
    opts: &MockOptions,
) -> Answer {
    let tally = generation.tally();
    let generation = Arc::new(generation);
    let opening = generation.thought_part().map(|thought| {
        Step::Chunk(generation.response(every_candidate(&generation, &[thought], false), 0))
    });
    let body: Box<dyn Iterator<Item = Step> + Send> = match generation.call_part() {
        Some(call) => {
            let closing = generation.clone();
            Box::new(
                [Step::Generated]
                    .into_iter()
                    .chain(std::iter::once_with(move || {
                        Step::Chunk(closing.response(
                            every_candidate(&closing, &[call], true),
                            closing.candidates_tokens(),
                        ))
                    })),
            )
        }
        None => {
            let tokens = generation.clone();
            let closing = generation.clone();
            let candidates = generation.candidates;
            Box::new(
                (0..generation.reply.tokens)
                    .map(move |position| {
                        let part = json!({"text": word(position)});
                        let out = (position + 1).saturating_mul(candidates);
                        Step::Tokens(
                            tokens.response(every_candidate(&tokens, &[part], false), out),
                            candidates,
                        )
                    })
                    .chain(std::iter::once(Step::Generated))
                    .chain(std::iter::once_with(move || {
                        Step::Chunk(closing.response(
                            every_candidate(&closing, &[json!({"text": ""})], true),
                            closing.candidates_tokens(),
                        ))
                    })),
            )
        }
    };
    let steps = opening.into_iter().chain(body);
    let mut first = true;
    let events = steps.map(move |step| match step {
        Step::Chunk(chunk) => Event::Frame(frame(framing, &chunk, &mut first)),
        Step::Tokens(chunk, tokens) => Event::Tokens(frame(framing, &chunk, &mut first), tokens),
        Step::Generated => Event::Generated,
    });
    let closing = (framing == Framing::JsonArray).then(|| Event::Frame(Bytes::from_static(b"\n]")));
    let stream = EventStream {
        events: Box::new(events.chain(closing)),
        tally,
        cut: directives.cut,
        pace: opts.pace(directives),
    };
    match framing {
        Framing::Sse => Answer::Stream(stream),
        Framing::JsonArray => Answer::JsonStream(stream),
    }
}

/// Every candidate with the same `parts`.
fn every_candidate(generation: &Generation, parts: &[Value], finished: bool) -> Vec<Value> {
    (0..generation.candidates)
        .map(|index| generation.candidate(index, parts.to_vec(), finished))
        .collect()
}

/// One chunk as the framing writes it: an SSE event, or an element of the
/// JSON array (the array opens before the first).
fn frame(framing: Framing, chunk: &Value, first: &mut bool) -> Bytes {
    match framing {
        Framing::Sse => crlf_data(chunk),
        Framing::JsonArray => {
            let separator = if std::mem::take(first) {
                "["
            } else {
                "\n,\r\n"
            };
            Bytes::from(format!("{separator}{chunk}"))
        }
    }
}
