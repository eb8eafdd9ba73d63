//! Which API family a provider speaks. The config names it, the upstream
//! client shapes requests by it, and the estimate picks a tokenizer by it.

/// The API shape a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI or any OpenAI-compatible API.
    OpenAi,
    Anthropic,
}
