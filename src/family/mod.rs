//! The provider families beyond OpenAI and Anthropic.

pub mod vertex;
