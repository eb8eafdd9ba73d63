//! Which API family a provider speaks. The config names it, the families
//! (the `family` modules) shape requests by it, and the estimate picks a
//! tokenizer by it; and the body fields through which providers limit
//! output.

/// The API family a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI or any OpenAI-compatible API.
    OpenAi,
    Anthropic,
    /// Google's Gemini API.
    Gemini,
    /// Google Cloud's Vertex AI: Gemini and Claude models.
    Vertex,
    /// Azure OpenAI: OpenAI's models, served from deployments.
    Azure,
    /// Amazon Bedrock Runtime: Claude, by Converse or Anthropic's
    /// Messages inside `invoke`.
    Bedrock,
}

impl ProviderKind {
    /// Every kind, by its name in the config.
    pub const ALL: [(ProviderKind, &'static str); 6] = [
        (ProviderKind::OpenAi, "openai"),
        (ProviderKind::Anthropic, "anthropic"),
        (ProviderKind::Gemini, "gemini"),
        (ProviderKind::Vertex, "vertex"),
        (ProviderKind::Azure, "azure"),
        (ProviderKind::Bedrock, "bedrock"),
    ];

    pub fn from_name(name: &str) -> Option<ProviderKind> {
        Self::ALL
            .iter()
            .find(|(_, known)| *known == name)
            .map(|(kind, _)| *kind)
    }

    /// Whether its models count tokens as OpenAI's do.
    pub fn counts_like_openai(self) -> bool {
        matches!(self, ProviderKind::OpenAi | ProviderKind::Azure)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(kind, _)| *kind == self)
            .map_or("", |(_, name)| name)
    }
}

/// Every body field through which the OpenAI and Anthropic APIs limit
/// output tokens.
pub const OUTPUT_LIMIT_FIELDS: [&str; 3] =
    ["max_tokens", "max_completion_tokens", "max_output_tokens"];
