//! Token usage: what a call consumed, by price class, as the provider
//! reports it in a response body or in the events of a stream.
//!
//! Every provider family names its counts differently (each family's
//! module in `family` reads its own); here they all become one
//! [`Usage`], by price class. Two details of a report move the rates
//! rather than the counts: the split of cache writes by lifetime and the
//! service tier the provider reports billing the call at.
//!
//! Parsing uses small typed structs that name only the fields read, so
//! the rest of a body (the generated text, tool definitions) is skipped,
//! never built into a tree; `text` measures the text of a stream's events
//! without keeping it, and `seen` is what a stream has shown so far.
//!
//! A count no call can have (negative, fractional, 2^53 or more, not a
//! number) makes the whole report [`AbsurdUsage`] rather than a smaller
//! one (see `count`).

pub(crate) mod count;
mod seen;
pub(crate) mod text;

pub use count::AbsurdUsage;
pub use seen::{count_output_tokens, EventAction, StreamSeen};

use crate::hosted::ToolCalls;

/// Usage as the provider reported it: its counts, or the first count in it
/// that no call can have.
pub type Reported = Result<Usage, AbsurdUsage>;

/// Tokens of one call, by price class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens billed at the input price (not cached, not cache writes).
    pub input: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cached_input: u64,
    /// Input tokens written to the provider's prompt cache, for any
    /// lifetime.
    pub cache_write: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Billed uses of hosted tools (web searches, file searches, …).
    pub tool_calls: ToolCalls,
    /// How many of the cache writes are kept for an hour (billed dearer
    /// than the default 5 minutes); `None` when the provider did not split
    /// them. A rate detail: the ledger keeps the counts above.
    pub cache_write_1h: Option<u64>,
    /// The tier the provider reports billing the call at; `None` when it
    /// did not say. A rate detail, like `cache_write_1h`.
    pub service_tier: Option<ServiceTier>,
}

/// The rates a provider reports billing a call at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceTier {
    /// The model's standard rates (OpenAI's `default`, and `flex`, which
    /// costs less).
    Standard,
    /// OpenAI's `priority` processing.
    Priority,
}

impl Usage {
    /// Every input token, from the cache or not: what decides a long
    /// context tier.
    pub fn total_input(&self) -> u64 {
        self.input
            .saturating_add(self.cached_input)
            .saturating_add(self.cache_write)
    }

    /// The counts alone, without the rate details: what a ledger keeps.
    pub fn counts(&self) -> Usage {
        Usage {
            cache_write_1h: None,
            service_tier: None,
            ..*self
        }
    }
}
