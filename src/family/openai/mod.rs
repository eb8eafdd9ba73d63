//! The openai family: OpenAI's API and every OpenAI-compatible one —
//! chat completions, legacy completions, Responses and embeddings. Its
//! usage (`usage`, `tool_items`) and its streams (`stream`).

pub(super) mod stream;
mod tool_items;
mod usage;

pub(crate) use usage::body_usage;
