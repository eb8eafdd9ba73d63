//! The anthropic family: Anthropic's Messages API, also spoken by Vertex
//! AI's Claude models. Its usage (`usage`) and its stream (`stream`).

pub(super) mod stream;
mod usage;

pub(crate) use usage::body_usage;
