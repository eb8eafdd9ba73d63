//! Provider families: each API family the gateway speaks is one module
//! here, knowing its usage reports (plain and streamed) and its stream's
//! framing; the proxy path calls them through the functions of this
//! module, so adding a family touches no other family.
//!
//! - [`openai`]: OpenAI and every OpenAI-compatible API;
//! - [`anthropic`]: Anthropic's Messages API.

pub mod anthropic;
pub mod gemini;
pub mod openai;
mod stream;
pub mod vertex;

pub use stream::{Frames, StreamKind, StreamMeter};

use crate::api::{Api, Call};
use crate::usage::Reported;

/// The usage of a plain (non-streamed) response body of a call to `api`;
/// `None` when the body is not JSON or carries no usage.
pub fn body_usage(api: Api, body: &[u8]) -> Option<Reported> {
    match api {
        Api::ChatCompletions | Api::Completions | Api::Responses | Api::Embeddings => {
            openai::body_usage(api, body)
        }
        Api::Messages => anthropic::body_usage(body),
    }
}

/// How the stream of `call` is read.
pub fn stream_kind(call: &Call) -> StreamKind {
    match call.api {
        Api::Responses => StreamKind::OpenAiResponses,
        Api::Messages => StreamKind::AnthropicMessages,
        _ => StreamKind::OpenAiChat {
            hide_usage_chunk: call.hide_usage_chunk,
        },
    }
}

#[cfg(test)]
mod tests;
