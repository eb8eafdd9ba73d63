//! The provider's side of usage: the tokens the mock bills for an answer,
//! by price class. The gateway reads the same counts from the wire into its
//! own type; this one is what the provider meant, for tests to compare with.

/// Tokens billed for one answer, or summed over many, by price class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens billed at the full input price (not cache reads or
    /// writes).
    pub input: u64,
    /// Input tokens read from the prompt cache.
    pub cached_input: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
    /// The part of `cache_write` kept for an hour.
    pub cache_write_1h: u64,
    /// Output tokens.
    pub output: u64,
    /// Uses of a hosted tool (web searches, fetches, file searches, …),
    /// billed per use; the mock uses one tool per request.
    pub tool_calls: u64,
}

impl Usage {
    /// `self + other`, field by field, stopping at `u64::MAX`.
    pub fn saturating_add(self, other: Usage) -> Usage {
        Usage {
            input: self.input.saturating_add(other.input),
            cached_input: self.cached_input.saturating_add(other.cached_input),
            cache_write: self.cache_write.saturating_add(other.cache_write),
            cache_write_1h: self.cache_write_1h.saturating_add(other.cache_write_1h),
            output: self.output.saturating_add(other.output),
            tool_calls: self.tool_calls.saturating_add(other.tool_calls),
        }
    }
}
