//! The upper bound of a call's cost, computed before it is sent.
//!
//! Input tokens are counted (the `input` module) over every string and key
//! of the request body (OpenAI's tokenizer for OpenAI models, a
//! conservative byte heuristic elsewhere) plus per-message framing, so the
//! count is at or above what the provider bills for the same text. Each
//! image is bounded by its
//! provider's rule for the model (the `images` module); input the gateway
//! cannot see — files, server-side conversation state — gets a fixed
//! allowance. Output is the call's output limit times its choices. The
//! bound is priced at the dearest input rate, so prompt-cache writes cannot
//! push a call past it, and at the rates of every tier the call can be
//! billed at: the priority tier it asked for, or left to a project default
//! that may be priority (no `service_tier`, or `"auto"`, on a model with
//! priority prices), the hour-long cache it asked for, the long context
//! tier when its input bound passes the threshold.

use crate::api::{Api, Call};
use crate::money::{Cost, UsdMicros};
use crate::prices::{ModelPrice, PricedOptions};
use crate::usage::Usage;

mod image_size;
mod images;
mod input;

pub use input::{warm_up, TokenCounter};

/// Context window assumed for a model the price table gives none.
const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// A call's upper bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// Input tokens counted in the request, before hosted tool results:
    /// what [`bound`] prices the call from again for another output limit.
    pub seen_input_tokens: u64,
    /// Input tokens, hosted tool results included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The amount to reserve.
    pub amount: UsdMicros,
    /// What the call's hosted tools may add (see [`ToolBound`]).
    pub tools: ToolBound,
    /// The priced options it asked for, which fill in what its usage
    /// report leaves out ([`PricedOptions::complete`]).
    pub options: PricedOptions,
}

impl Estimate {
    /// What a call is charged when its usage never comes: the estimated
    /// input (hosted tool results included) plus the output the gateway
    /// counted, and every hosted tool use the bound allowed.
    pub fn fallback_usage(&self, output_tokens: u64) -> Usage {
        Usage {
            input: self.input_tokens,
            output: output_tokens.min(self.output_tokens),
            tool_calls: self.tools.calls,
            ..Usage::default()
        }
    }
}

// Hosted tools: their fees and the input their results add.
mod tools;

pub use tools::{ToolBound, FILE_SEARCH_CHUNK_TOKENS, WEB_SEARCH_RESULT_TOKENS};

pub fn estimate(call: &Call, price: &ModelPrice, counter: TokenCounter) -> Estimate {
    let context_window = price.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW);
    let seen = input::input_tokens(call.api, &call.body, counter, context_window);
    // One prompt longer than the context window is refused by the
    // provider, not billed. Embeddings and legacy completions take several
    // inputs, each with its own window, and the long context beta widens
    // the window past the price entry's.
    let one_window =
        !matches!(call.api, Api::Embeddings | Api::Completions) && !call.options.long_context;
    let seen = if one_window {
        seen.min(context_window)
    } else {
        seen
    };
    bound(call, price, seen, call.output_bound())
}

/// The bound of `call` with `seen_input_tokens` counted in its request and
/// an output bound of `output_bound` tokens per choice: how the gateway
/// prices one call at several output limits without counting its input
/// again.
pub fn bound(
    call: &Call,
    price: &ModelPrice,
    seen_input_tokens: u64,
    output_bound: u64,
) -> Estimate {
    let context_window = price.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW);
    let input_tokens = seen_input_tokens;
    let output_tokens = output_bound.saturating_mul(call.choices);
    let tools = ToolBound::of(
        &call.tools,
        price,
        input_tokens,
        output_tokens,
        context_window,
    );
    let input_tokens = input_tokens.saturating_add(tools.result_tokens);
    let options = call.options;
    // A tier left open is served at the project's default, which the
    // gateway cannot see and may be priority.
    let rates = price.rates(options.tier.may_be_priority(), input_tokens);
    let input_price = if options.hour_cache {
        rates.dearest_input()
    } else {
        rates.input.max(rates.cached_input).max(rates.cache_write)
    };
    let mut cost = Cost::default();
    cost.add(input_tokens, input_price);
    cost.add(output_tokens, rates.output);
    tools.add_fees(&mut cost, price);
    Estimate {
        seen_input_tokens,
        input_tokens,
        output_tokens,
        amount: cost.usd_micros(),
        tools,
        options,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Api;
    use crate::provider::ProviderKind;
    use bytes::Bytes;

    pub(super) fn price() -> ModelPrice {
        use crate::money::Price;
        ModelPrice {
            input: Price::per_mtok("1").unwrap(),
            cached_input: Price::per_mtok("0.1").unwrap(),
            cache_write: Price::per_mtok("1.25").unwrap(),
            output: Price::per_mtok("5").unwrap(),
            max_output_tokens: Some(100),
            context_window: Some(10_000),
            reasoning: false,
            tool_call_usd: Default::default(),
            ..ModelPrice::default()
        }
    }

    pub(super) fn call(api: Api, body: serde_json::Value) -> Call {
        let mut call = crate::family::parse_own_route(api, Bytes::from(body.to_string())).unwrap();
        call.bound_output(100, &[]);
        call
    }

    pub(super) fn openai() -> TokenCounter {
        TokenCounter::for_model(ProviderKind::OpenAi, "gpt-4o-mini")
    }

    #[test]
    fn prices_input_at_the_dearest_rate_and_output_per_choice() {
        let c = call(
            Api::ChatCompletions,
            serde_json::json!({
                "model": "m", "max_tokens": 1000, "n": 3, "messages": [{"role": "user", "content": "hi"}],
            }),
        );
        let e = estimate(&c, &price(), TokenCounter::STRICT);
        assert_eq!(e.output_tokens, 3000);
        // input at $1.25/Mtok (the cache-write rate), output at $5/Mtok
        let mut cost = Cost::default();
        cost.add(
            e.input_tokens,
            crate::money::Price::per_mtok("1.25").unwrap(),
        );
        cost.add(3000, crate::money::Price::per_mtok("5").unwrap());
        assert_eq!(e.amount, cost.usd_micros());
    }

    #[test]
    fn tiers_asked_for_bound_the_call_at_their_rates() {
        use crate::money::Price;
        use crate::prices::{LongContextPrices, PriorityPrices, TierRequest};
        let p = |text: &str| Price::per_mtok(text).unwrap();
        let tiered = ModelPrice {
            cache_write_1h: Some(p("2")),
            priority: Some(PriorityPrices {
                input: p("3"),
                output: p("9"),
                cached_input: None,
            }),
            long_context: Some(LongContextPrices {
                threshold_tokens: 1_000,
                input: p("4"),
                output: p("7.5"),
            }),
            ..price()
        };
        let bound = |api: Api, body: serde_json::Value, long_context: bool| {
            let mut c = call(api, body);
            c.options.long_context = long_context;
            let e = estimate(&c, &tiered, TokenCounter::STRICT);
            (e.input_tokens, e.output_tokens, e.amount, e.options)
        };
        let amount = |input: u64, input_price: &str, output: u64, output_price: &str| {
            let mut cost = Cost::default();
            cost.add(input, p(input_price));
            cost.add(output, p(output_price));
            cost.usd_micros()
        };
        let short = serde_json::json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
            "service_tier": "default"});
        // Standard: the 5-minute write rate bounds input.
        let (input, output, standard, _) = bound(Api::Messages, short.clone(), false);
        assert_eq!(standard, amount(input, "1.25", output, "5"));
        // The hour-long cache: its write rate.
        let mut hour = short.clone();
        hour["system"] = serde_json::json!([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]);
        let (input, output, amount_hour, options) = bound(Api::Messages, hour, false);
        assert!(options.hour_cache);
        assert_eq!(amount_hour, amount(input, "2", output, "5"));
        // Priority: every class at the priority multiplier (3×).
        let mut priority = short.clone();
        priority["service_tier"] = "priority".into();
        let (input, output, amount_priority, options) =
            bound(Api::ChatCompletions, priority, false);
        assert_eq!(options.tier, TierRequest::Priority);
        assert_eq!(amount_priority, amount(input, "3.75", output, "9"));
        // No tier, or "auto": the project's default, which may be
        // priority, so priority rates too.
        for open in [None, Some("auto"), Some(" Auto")] {
            let mut body = short.clone();
            match open {
                Some(tier) => body["service_tier"] = tier.into(),
                None => {
                    body.as_object_mut().unwrap().remove("service_tier");
                }
            }
            let (input, output, amount_open, options) = bound(Api::ChatCompletions, body, false);
            assert_eq!(options.tier, TierRequest::Open);
            assert_eq!(amount_open, amount(input, "3.75", output, "9"));
            assert!(amount_open > amount(input, "1.25", output, "5"));
        }
        // "flex" and "standard_only" are billed at standard rates at most.
        for pinned in ["flex", "standard_only"] {
            let mut body = short.clone();
            body["service_tier"] = pinned.into();
            let (input, output, amount_pinned, options) = bound(Api::ChatCompletions, body, false);
            assert_eq!(options.tier, TierRequest::Standard);
            assert_eq!(amount_pinned, amount(input, "1.25", output, "5"));
        }
        // A model without priority prices: a tier left open is standard.
        let mut open = short.clone();
        open.as_object_mut().unwrap().remove("service_tier");
        let c = call(Api::ChatCompletions, open);
        let e = estimate(&c, &price(), TokenCounter::STRICT);
        assert_eq!(
            e.amount,
            amount(e.input_tokens, "1.25", e.output_tokens, "5")
        );
        // Long context: only when the input bound passes the threshold.
        let (_, _, amount_short, options) = bound(Api::Messages, short.clone(), true);
        assert!(options.long_context);
        assert_eq!(amount_short, standard);
        let mut long = short;
        long["messages"][0]["content"] = "x".repeat(4_000).into();
        let (input, output, amount_long, _) = bound(Api::Messages, long, true);
        assert!(input > 1_000);
        assert_eq!(amount_long, amount(input, "5", output, "7.5"));
    }

    #[test]
    fn embeddings_have_no_output() {
        let c = call(
            Api::Embeddings,
            serde_json::json!({"model": "text-embedding-3-small", "input": ["a", "b"]}),
        );
        let e = estimate(&c, &price(), openai());
        assert_eq!(e.output_tokens, 0);
        assert!(e.input_tokens >= 2);
    }

    #[test]
    fn fallback_usage_caps_counted_output() {
        let e = Estimate {
            seen_input_tokens: 10,
            input_tokens: 10,
            output_tokens: 5,
            amount: 1,
            tools: ToolBound::default(),
            options: PricedOptions::STANDARD,
        };
        assert_eq!(
            e.fallback_usage(9),
            Usage {
                input: 10,
                output: 5,
                ..Usage::default()
            }
        );
    }
}
