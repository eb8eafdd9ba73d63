//! Which API family a provider speaks. The config names it, the upstream
//! client shapes requests by it, and the estimate picks a tokenizer by it;
//! and the body fields through which providers limit output.

/// The API shape a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI or any OpenAI-compatible API.
    OpenAi,
    Anthropic,
}

/// Every body field through which the provider APIs limit output tokens.
pub const OUTPUT_LIMIT_FIELDS: [&str; 3] =
    ["max_tokens", "max_completion_tokens", "max_output_tokens"];
