//! The `usage` objects of each API shape as the providers send them, in
//! bodies and stream events alike: small typed structs that name only the
//! fields read, and how each becomes a [`Usage`].

use serde::Deserialize;

use super::count::Count;
use super::tool_items::ToolItems;
use super::{AbsurdUsage, Reported, ServiceTier, Usage};
use crate::hosted::{HostedTool, ToolCalls};

// Token counts are `Option` so that an explicit `null`, which some
// OpenAI-compatible servers send, reads as absent instead of failing the parse.

/// `usage` of OpenAI chat completions, legacy completions and embeddings.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct OpenAiUsage {
    prompt_tokens: Option<Count>,
    completion_tokens: Option<Count>,
    prompt_tokens_details: Option<CachedTokens>,
}

/// `usage` of the OpenAI Responses API.
#[derive(Clone, Debug, Deserialize)]
struct ResponsesUsage {
    input_tokens: Option<Count>,
    input_tokens_details: Option<CachedTokens>,
    output_tokens: Option<Count>,
}

/// A Responses API response object: a body, or the `response` of a
/// stream's terminal event.
#[derive(Debug, Deserialize)]
pub(super) struct ResponseObject {
    usage: Option<ResponsesUsage>,
    /// Its output items, read only for the hosted tool calls among them.
    output: Option<ToolItems>,
    service_tier: Option<serde_json::Value>,
}

impl ResponseObject {
    pub(super) fn into_usage(self) -> Option<Reported> {
        let mut usage = self.usage?.to_usage();
        if let Ok(usage) = &mut usage {
            if let Some(items) = self.output {
                usage.tool_calls = items.0;
            }
            usage.service_tier = ServiceTier::from_reported(self.service_tier.as_ref());
        }
        Some(usage)
    }
}

/// `prompt_tokens_details` / `input_tokens_details`.
#[derive(Clone, Debug, Deserialize)]
struct CachedTokens {
    cached_tokens: Option<Count>,
}

/// `usage` of Anthropic Messages, in a body, `message_start` or
/// `message_delta`.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct AnthropicUsage {
    pub(super) input_tokens: Option<Count>,
    pub(super) cache_read_input_tokens: Option<Count>,
    pub(super) cache_creation_input_tokens: Option<Count>,
    pub(super) output_tokens: Option<Count>,
    pub(super) server_tool_use: Option<ServerToolUse>,
    pub(super) cache_creation: Option<CacheCreation>,
}

/// `usage.cache_creation`: Anthropic's split of the cache writes by how
/// long they are kept.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct CacheCreation {
    ephemeral_1h_input_tokens: Option<Count>,
}

/// `usage.server_tool_use`: Anthropic's count of its server tools' uses.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct ServerToolUse {
    web_search_requests: Option<Count>,
    web_fetch_requests: Option<Count>,
}

impl ServerToolUse {
    /// Writes the counts reported into `calls`, leaving the others.
    pub(super) fn write(&self, calls: &mut ToolCalls) -> Result<(), AbsurdUsage> {
        let counts = [
            (
                HostedTool::WebSearch,
                "server_tool_use.web_search_requests",
                &self.web_search_requests,
            ),
            (
                HostedTool::WebFetch,
                "server_tool_use.web_fetch_requests",
                &self.web_fetch_requests,
            ),
        ];
        for (tool, field, count) in counts {
            if count.is_some() {
                calls.set(tool, Count::read(field, count.as_ref())?);
            }
        }
        Ok(())
    }
}

impl CachedTokens {
    fn of(field: &'static str, details: Option<&CachedTokens>) -> Result<u64, AbsurdUsage> {
        Count::read(field, details.and_then(|d| d.cached_tokens.as_ref()))
    }
}

impl OpenAiUsage {
    pub(super) fn to_usage(&self) -> Reported {
        let cached = CachedTokens::of(
            "prompt_tokens_details.cached_tokens",
            self.prompt_tokens_details.as_ref(),
        )?;
        Ok(Usage {
            input: Count::read("prompt_tokens", self.prompt_tokens.as_ref())?
                .saturating_sub(cached),
            cached_input: cached,
            cache_write: 0,
            output: Count::read("completion_tokens", self.completion_tokens.as_ref())?,
            ..Usage::default()
        })
    }
}

impl ResponsesUsage {
    pub(super) fn to_usage(&self) -> Reported {
        let cached = CachedTokens::of(
            "input_tokens_details.cached_tokens",
            self.input_tokens_details.as_ref(),
        )?;
        Ok(Usage {
            input: Count::read("input_tokens", self.input_tokens.as_ref())?.saturating_sub(cached),
            cached_input: cached,
            cache_write: 0,
            output: Count::read("output_tokens", self.output_tokens.as_ref())?,
            ..Usage::default()
        })
    }
}

impl AnthropicUsage {
    pub(super) fn to_usage(&self) -> Reported {
        let mut tool_calls = ToolCalls::default();
        if let Some(server) = &self.server_tool_use {
            server.write(&mut tool_calls)?;
        }
        Ok(Usage {
            input: self.input_tokens()?,
            cached_input: self.cache_read_input_tokens()?,
            cache_write: self.cache_creation_input_tokens()?,
            output: self.output_tokens()?,
            tool_calls,
            cache_write_1h: self.cache_write_1h()?,
            service_tier: None,
        })
    }

    /// The hour-long part of the cache writes, when the split is reported;
    /// never more than the writes (a larger count is billed as all of
    /// them at the hour's rate).
    pub(super) fn cache_write_1h(&self) -> Result<Option<u64>, AbsurdUsage> {
        self.cache_creation
            .as_ref()
            .map(|split| {
                Count::read(
                    "cache_creation.ephemeral_1h_input_tokens",
                    split.ephemeral_1h_input_tokens.as_ref(),
                )
            })
            .transpose()
    }

    pub(super) fn input_tokens(&self) -> Result<u64, AbsurdUsage> {
        Count::read("input_tokens", self.input_tokens.as_ref())
    }

    pub(super) fn cache_read_input_tokens(&self) -> Result<u64, AbsurdUsage> {
        Count::read(
            "cache_read_input_tokens",
            self.cache_read_input_tokens.as_ref(),
        )
    }

    pub(super) fn cache_creation_input_tokens(&self) -> Result<u64, AbsurdUsage> {
        Count::read(
            "cache_creation_input_tokens",
            self.cache_creation_input_tokens.as_ref(),
        )
    }

    pub(super) fn output_tokens(&self) -> Result<u64, AbsurdUsage> {
        Count::read("output_tokens", self.output_tokens.as_ref())
    }
}
