//! Anthropic's `usage` object, in a body, `message_start` or
//! `message_delta`: `input_tokens` already excludes cache reads and
//! writes, which are classes of their own; the split of the writes by
//! lifetime moves their rate; `server_tool_use` counts the server tools'
//! billed uses.

use serde::Deserialize;

use crate::hosted::{HostedTool, ToolCalls};
use crate::usage::count::Count;
use crate::usage::{AbsurdUsage, Reported, Usage};

// Token counts are `Option` so that an explicit `null` reads as absent
// instead of failing the parse.

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

/// The usage of a plain (non-streamed) Messages body; `None` when the
/// body is not JSON or carries no `usage` object.
pub(crate) fn body_usage(body: &[u8]) -> Option<Reported> {
    #[derive(Deserialize)]
    struct WithUsage {
        usage: Option<AnthropicUsage>,
    }
    serde_json::from_slice::<WithUsage>(body)
        .ok()?
        .usage
        .map(|usage| usage.to_usage())
}
