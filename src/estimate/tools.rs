//! What a call's hosted tools add to its bound: their fees, and the input
//! their results make the model read.
//!
//! Fees: each tool's price times the most uses the forwarded body allows —
//! Anthropic's per-tool `max_uses`; the Responses API's `max_tool_calls`,
//! which counts the calls of every tool together, so all of them are
//! priced at the dearest tool's fee; a tool billed per request (a code
//! interpreter container session, a search model's search) once.
//!
//! Input: the provider feeds each result back to the model and samples
//! again, and every sampling turn is billed for the whole conversation it
//! reads. So each use can cost one more turn reading at most the prompt,
//! every result and all the output — and never more than the model's
//! context window, which no turn can exceed. With `n` uses, `p` prompt
//! tokens, `r` tokens of results in all and `o` output tokens, the results
//! add at most `n × min(window, p + r + o)` input tokens. A Chat
//! Completions search model searches once, before its only turn: its
//! results add `min(window, r)`.
//!
//! One result's size, when the request does not bound it:
//! - a web search: [`WEB_SEARCH_RESULT_TOKENS`];
//! - a file search: `max_num_results` (at most 50) chunks of at most
//!   [`FILE_SEARCH_CHUNK_TOKENS`];
//! - a web fetch: Anthropic's `max_content_tokens` plus a tenth (the limit
//!   is approximate), else the context window;
//! - code interpreter output, a generated image, an MCP tool's answer: the
//!   context window, as nothing bounds them.

use crate::api::HostedTools;
use crate::hosted::{HostedTool, ToolCalls};
use crate::money::Cost;
use crate::prices::ModelPrice;
use crate::usage::Usage;

/// Input tokens allowed for one web search's results. OpenAI bills a fixed
/// 8,000 input tokens per search on its mini models, and Anthropic's own
/// example of one search reads about 7,000; four times that covers a
/// search with a high search context size.
pub const WEB_SEARCH_RESULT_TOKENS: u64 = 32_000;

/// The largest chunk a vector store cuts a file into (OpenAI's static
/// chunking allows 100 to 4,096 tokens): one file search result.
pub const FILE_SEARCH_CHUNK_TOKENS: u64 = 4_096;

/// The most results one file search returns (`max_num_results` is at most
/// 50).
const FILE_SEARCH_MAX_RESULTS: u64 = 50;

/// The hosted tool part of a call's bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolBound {
    /// The most uses of each tool the provider can bill for the call: what
    /// a call whose usage never comes is charged.
    pub calls: ToolCalls,
    /// Input tokens the tools' results can add, on top of the prompt.
    pub result_tokens: u64,
    /// Uses billed once per request whatever the response reports.
    per_request: ToolCalls,
    /// What a Responses `web_search_call` item is billed as: the web
    /// search tool the request declared (the dearer one when it declared
    /// both).
    web_search_as: Option<HostedTool>,
}

impl ToolBound {
    /// No hosted tools: nothing to add.
    pub const NONE: ToolBound = ToolBound {
        calls: ToolCalls::NONE,
        result_tokens: 0,
        per_request: ToolCalls::NONE,
        web_search_as: None,
    };

    /// The bound of the hosted tools `tools` declares, for a prompt of
    /// `prompt_tokens` and at most `output_tokens` of output.
    pub fn of(
        tools: &HostedTools,
        price: &ModelPrice,
        prompt_tokens: u64,
        output_tokens: u64,
        context_window: u64,
    ) -> ToolBound {
        if tools.is_empty() {
            return ToolBound::default();
        }
        let fee = |tool: HostedTool| price.tool_call(tool).unwrap_or(0);
        let mut bound = ToolBound::default();
        // Tool uses that each start another sampling turn, and the tokens
        // all their results can add.
        let (mut uses, mut results) = (0u64, 0u64);
        // Results read in the one turn of a Chat Completions search.
        let mut read_once = 0u64;
        for declared in &tools.declared {
            let Some(units) = declared.per_request else {
                continue;
            };
            bound.per_request.add(declared.tool, units);
            if declared.max_uses.is_none() && tools.max_calls.is_none() {
                read_once = read_once.saturating_add(result_tokens(declared, context_window));
            }
        }
        if let Some(max_calls) = tools.max_calls {
            uses = max_calls;
            let dearest = tools
                .declared
                .iter()
                .filter(|d| d.per_request.is_none())
                .max_by_key(|d| fee(d.tool));
            if let Some(dearest) = dearest {
                bound.calls.add(dearest.tool, max_calls);
            }
            let largest = tools
                .declared
                .iter()
                .map(|d| result_tokens(d, context_window))
                .max()
                .unwrap_or(0);
            results = max_calls.saturating_mul(largest);
        } else {
            for declared in &tools.declared {
                let Some(max_uses) = declared.max_uses else {
                    continue;
                };
                uses = uses.saturating_add(max_uses);
                if declared.per_request.is_none() {
                    bound.calls.add(declared.tool, max_uses);
                }
                let each = result_tokens(declared, context_window);
                results = results.saturating_add(max_uses.saturating_mul(each));
            }
        }
        // An MCP server's tool list is read before the first turn.
        if tools.declared.iter().any(|d| d.tool == HostedTool::Mcp) {
            uses = uses.saturating_add(1);
        }
        let turn = prompt_tokens
            .saturating_add(results)
            .saturating_add(output_tokens)
            .min(context_window);
        bound.result_tokens = uses
            .saturating_mul(turn)
            .saturating_add(read_once.min(context_window));
        for (tool, count) in bound.per_request.iter() {
            bound.calls.add(tool, count);
        }
        bound.web_search_as = tools
            .declared
            .iter()
            .map(|d| d.tool)
            .filter(|tool| matches!(tool, HostedTool::WebSearch | HostedTool::WebSearchPreview))
            .max_by_key(|tool| fee(*tool));
        bound
    }

    /// Adds the fees of the bound's uses to `cost`.
    pub fn add_fees(&self, cost: &mut Cost, price: &ModelPrice) {
        for (tool, count) in self.calls.iter() {
            cost.add_fees(count, price.tool_call(tool).unwrap_or(0));
        }
    }

    /// The uses a provider reported, as they are billed: web search calls
    /// as the web search tool the request declared, and tools billed per
    /// request once per request.
    pub fn reported(&self, mut usage: Usage) -> Usage {
        let calls = &mut usage.tool_calls;
        if let Some(tool) = self.web_search_as.filter(|t| *t != HostedTool::WebSearch) {
            let searches = calls.get(HostedTool::WebSearch);
            calls.set(HostedTool::WebSearch, 0);
            calls.add(tool, searches);
        }
        for (tool, count) in self.per_request.iter() {
            calls.set(tool, count);
        }
        usage
    }

    /// A call cut after the provider reported its input: that input can
    /// have grown by every result since, and the tools may have been used
    /// as often as the bound allows.
    pub fn cut(&self, seen: Usage) -> Usage {
        let reported = self.reported(seen);
        Usage {
            input: seen.input.saturating_add(self.result_tokens),
            tool_calls: reported.tool_calls.max(self.calls),
            ..seen
        }
    }
}

/// The most tokens one use of `declared` can feed back.
fn result_tokens(declared: &crate::api::DeclaredTool, context_window: u64) -> u64 {
    match declared.tool {
        HostedTool::WebSearch | HostedTool::WebSearchPreview | HostedTool::GoogleSearch => {
            WEB_SEARCH_RESULT_TOKENS
        }
        HostedTool::FileSearch => declared
            .result_limit
            .unwrap_or(FILE_SEARCH_MAX_RESULTS)
            .saturating_mul(FILE_SEARCH_CHUNK_TOKENS),
        HostedTool::WebFetch => declared.result_limit.map_or(context_window, |limit| {
            limit.saturating_add(limit.div_ceil(10))
        }),
        HostedTool::CodeInterpreter | HostedTool::ImageGeneration | HostedTool::Mcp => {
            context_window
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Api, Call};
    use crate::estimate::{estimate, TokenCounter};
    use crate::family::openai::DEFAULT_MAX_TOOL_CALLS;
    use crate::money::Price;
    use crate::prices::PriceTable;
    use serde_json::{json, Value};

    const WINDOW: u64 = 1_000_000;

    fn price() -> ModelPrice {
        let table = PriceTable::from_toml_str(
            r#"
            [models."m"]
            input_per_mtok = "1"
            output_per_mtok = "4"
            context_window = 1000000
            tool_call_usd = { web_search = "0.01", web_search_preview = "0.025", web_fetch = "0", file_search = "0.0025", code_interpreter = "0.03" }
            "#,
        )
        .unwrap();
        table.get("m").unwrap().clone()
    }

    fn call(api: Api, body: Value) -> Call {
        let mut call =
            crate::family::parse_own_route(api, bytes::Bytes::from(body.to_string())).unwrap();
        call.bound_output(100, &[]);
        call
    }

    fn bound(call: &Call, prompt: u64) -> ToolBound {
        ToolBound::of(&call.tools, &price(), prompt, 100, WINDOW)
    }

    fn calls(pairs: &[(HostedTool, u64)]) -> ToolCalls {
        let mut calls = ToolCalls::default();
        for (tool, count) in pairs {
            calls.set(*tool, *count);
        }
        calls
    }

    #[test]
    fn responses_web_search_reserves_every_call_and_every_turn() {
        let c = call(
            Api::Responses,
            json!({"model": "m", "input": "news", "max_output_tokens": 100, "tools": [{"type": "web_search"}]}),
        );
        let b = bound(&c, 50);
        let n = DEFAULT_MAX_TOOL_CALLS;
        assert_eq!(b.calls, calls(&[(HostedTool::WebSearch, n)]));
        // Each call starts a turn reading the prompt, all results, all output.
        assert_eq!(
            b.result_tokens,
            n * (50 + n * WEB_SEARCH_RESULT_TOKENS + 100)
        );
        // The estimate prices the results as input and adds the fees.
        let e = estimate(&c, &price(), TokenCounter::STRICT);
        let prompt = e.input_tokens - e.tools.result_tokens;
        assert_eq!(e.tools, bound(&c, prompt));
        let mut expected = Cost::default();
        expected.add(e.input_tokens, Price::per_mtok("1").unwrap());
        expected.add(100, Price::per_mtok("4").unwrap());
        expected.add_fees(n, 10_000);
        assert_eq!(e.amount, expected.usd_micros());
        assert!(e.amount >= n * 10_000 + n * WEB_SEARCH_RESULT_TOKENS);
        assert_eq!(e.fallback_usage(0).tool_calls, b.calls);
    }

    #[test]
    fn one_limit_for_all_responses_tools_prices_every_call_at_the_dearest() {
        let c = call(
            Api::Responses,
            json!({"model": "m", "input": "x", "max_tool_calls": 2, "tools": [
                {"type": "file_search", "vector_store_ids": ["vs"]},
                {"type": "web_search_preview"},
                {"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "4g"}},
            ]}),
        );
        let b = bound(&c, 10);
        // Two calls at $0.025, one 4 GB container session.
        assert_eq!(
            b.calls,
            calls(&[
                (HostedTool::WebSearchPreview, 2),
                (HostedTool::CodeInterpreter, 4)
            ])
        );
        // Code interpreter output is bounded only by the context window.
        assert_eq!(b.result_tokens, 2 * WINDOW);
        let small_files = call(
            Api::Responses,
            json!({"model": "m", "input": "x", "max_tool_calls": 1, "tools": [
                {"type": "file_search", "vector_store_ids": ["vs"], "max_num_results": 3}]}),
        );
        assert_eq!(
            bound(&small_files, 10).result_tokens,
            10 + 3 * FILE_SEARCH_CHUNK_TOKENS + 100
        );
    }

    #[test]
    fn anthropic_tools_are_bounded_each_by_its_max_uses() {
        let c = call(
            Api::Messages,
            json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}],
            "tools": [
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
                {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 2,
                 "max_content_tokens": 1000},
            ]}),
        );
        let b = bound(&c, 40);
        assert_eq!(
            b.calls,
            calls(&[(HostedTool::WebSearch, 3), (HostedTool::WebFetch, 2)])
        );
        let results = 3 * WEB_SEARCH_RESULT_TOKENS + 2 * 1_100;
        assert_eq!(b.result_tokens, 5 * (40 + results + 100));
        // No turn reads more than the context window.
        let capped = ToolBound::of(&c.tools, &price(), 40, 100, 50_000);
        assert_eq!(capped.result_tokens, 5 * 50_000);
    }

    #[test]
    fn a_search_model_searches_once_per_request() {
        let c = call(
            Api::ChatCompletions,
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "web_search_options": {}}),
        );
        let b = bound(&c, 10);
        assert_eq!(b.calls, calls(&[(HostedTool::WebSearchPreview, 1)]));
        assert_eq!(b.result_tokens, WEB_SEARCH_RESULT_TOKENS);
        // Chat reports no searches; the request was billed for one.
        let reported = b.reported(Usage {
            input: 7,
            ..Usage::default()
        });
        assert_eq!(reported.tool_calls, b.calls);
        assert_eq!(reported.input, 7);
    }

    #[test]
    fn reported_uses_are_billed_as_the_tool_declared() {
        let preview = call(
            Api::Responses,
            json!({"model": "m", "input": "x", "tools": [{"type": "web_search_preview"},
                {"type": "code_interpreter", "container": {"type": "auto"}}]}),
        );
        let usage = Usage {
            tool_calls: calls(&[(HostedTool::WebSearch, 2), (HostedTool::CodeInterpreter, 3)]),
            ..Usage::default()
        };
        // Searches as the preview tool; three code runs in one session.
        assert_eq!(
            bound(&preview, 1).reported(usage).tool_calls,
            calls(&[
                (HostedTool::WebSearchPreview, 2),
                (HostedTool::CodeInterpreter, 1)
            ])
        );
        let plain = call(
            Api::Responses,
            json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}),
        );
        assert_eq!(
            bound(&plain, 1).reported(usage).tool_calls,
            usage.tool_calls
        );
        assert_eq!(ToolBound::default().reported(usage), usage);
    }

    #[test]
    fn a_cut_call_is_charged_the_bound_on_top_of_the_input_it_reported() {
        let c = call(
            Api::Messages,
            json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]}),
        );
        let b = bound(&c, 40);
        let mut seen = Usage {
            input: 30,
            cached_input: 5,
            output: 9,
            ..Usage::default()
        };
        seen.tool_calls.set(HostedTool::WebSearch, 1);
        let cut = b.cut(seen);
        assert_eq!(cut.input, 30 + b.result_tokens);
        assert_eq!((cut.cached_input, cut.output), (5, 9));
        assert_eq!(cut.tool_calls, calls(&[(HostedTool::WebSearch, 2)]));
        assert_eq!(ToolBound::default().cut(seen), seen);
    }

    #[test]
    fn no_hosted_tools_no_bound() {
        let c = call(
            Api::Responses,
            json!({"model": "m", "input": "x", "max_tool_calls": 3, "tools": [{"type": "function", "name": "f"}]}),
        );
        assert_eq!(bound(&c, 10), ToolBound::default());
    }
}
