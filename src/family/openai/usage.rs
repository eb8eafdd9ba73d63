//! OpenAI's `usage` objects, in bodies and stream events alike: small
//! typed structs that name only the fields read, and how each becomes a
//! [`Usage`]. OpenAI counts cached tokens inside `prompt_tokens` /
//! `input_tokens`, so they are subtracted out; reasoning tokens are inside
//! the output count. The Responses API's hosted tool uses are its output
//! items (`tool_items`), and the `service_tier` beside the usage says the
//! rates the call was billed at.

use serde::Deserialize;

use super::tool_items::ToolItems;
use crate::api::Api;
use crate::usage::count::Count;
use crate::usage::{AbsurdUsage, Reported, ServiceTier, Usage};

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
            usage.service_tier = tier_of(self.service_tier.as_ref());
        }
        Some(usage)
    }
}

/// `prompt_tokens_details` / `input_tokens_details`.
#[derive(Clone, Debug, Deserialize)]
struct CachedTokens {
    cached_tokens: Option<Count>,
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

/// The usage of a plain (non-streamed) response body of `api`; `None` when
/// the body is not JSON or carries no `usage` object.
pub(crate) fn body_usage(api: Api, body: &[u8]) -> Option<Reported> {
    if api == Api::Responses {
        return serde_json::from_slice::<ResponseObject>(body)
            .ok()?
            .into_usage();
    }
    let WithUsage {
        usage,
        service_tier,
    } = serde_json::from_slice::<WithUsage>(body).ok()?;
    let tier = tier_of(service_tier.as_ref());
    usage.map(|usage| {
        usage.to_usage().map(|usage| Usage {
            service_tier: tier,
            ..usage
        })
    })
}

/// The top-level `usage` object of a JSON body and the `service_tier`
/// beside it, nothing else.
#[derive(Deserialize)]
struct WithUsage {
    usage: Option<OpenAiUsage>,
    service_tier: Option<serde_json::Value>,
}

/// A reported `service_tier`: `priority` in any spelling is the priority
/// tier, any other string the standard one, and anything else says
/// nothing.
pub(super) fn tier_of(value: Option<&serde_json::Value>) -> Option<ServiceTier> {
    let tier = value?.as_str()?.trim();
    Some(if tier.eq_ignore_ascii_case("priority") {
        ServiceTier::Priority
    } else {
        ServiceTier::Standard
    })
}
