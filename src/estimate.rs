//! The upper bound of a call's cost, computed before it is sent.
//!
//! Input tokens are counted over every string and key of the request body
//! (OpenAI's tokenizer for OpenAI models, a conservative byte heuristic
//! elsewhere) plus per-message framing, so the count is at or above what the
//! provider bills for the same text. Each image is bounded by its
//! provider's rule for the model (the `images` module); input the gateway
//! cannot see — files, server-side conversation state — gets a fixed
//! allowance. Output is the call's output limit times its choices. The
//! bound is priced at the dearest input rate, so prompt-cache writes cannot
//! push a call past it, and at the rates of every tier the call can be
//! billed at: the priority tier it asked for, or left to a project default
//! that may be priority (no `service_tier`, or `"auto"`, on a model with
//! priority prices), the hour-long cache it asked for, the long context
//! tier when its input bound passes the threshold.

use serde_json::{Map, Value};
use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer as Encoding};

use crate::api::{Api, Call};
use crate::money::{Cost, UsdMicros};
use crate::prices::{ModelPrice, PricedOptions};
use crate::provider::ProviderKind;
use crate::tokenizer::Tokenizer;
use crate::usage::Usage;

mod image_size;
mod images;

use images::{ImageRule, IMAGE_TYPES};

/// Tokens framing each message or input item (role markers, separators):
/// OpenAI's chat format uses 3 to 4; 4 covers every shape.
const TOKENS_PER_ITEM: u64 = 4;
/// Tokens priming the reply.
const TOKENS_PER_REPLY: u64 = 3;
/// Context window assumed for a model the price table gives none.
const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;
/// Bytes per token of the heuristic count: half the 3.5 to 4 bytes an
/// English token averages, and at or below what digits, code and CJK text
/// average, so the count stays above the provider's for nearly all text.
const HEURISTIC_BYTES_PER_TOKEN: u64 = 2;

/// Content parts whose text lives at the provider (uploads, documents):
/// bounded by the model's context window.
const UNSEEN_TYPES: &[&str] = &[
    "input_file",
    "file",
    "document",
    "input_audio",
    "container_upload",
    "item_reference",
];

/// How input tokens are counted for a model.
#[derive(Clone, Copy)]
pub enum TokenCounter {
    /// OpenAI's own tokenizer.
    Exact(&'static Tokenizer),
    Heuristic,
}

impl TokenCounter {
    /// OpenAI's own tokenizer for OpenAI models; the heuristic for every
    /// other model, including other models behind OpenAI-compatible APIs.
    pub fn for_model(kind: ProviderKind, model: &str) -> TokenCounter {
        // OpenAI's newer families use o200k, as tiktoken's own table does
        // for gpt-4o and o3 (the crate's table predates some of them).
        let newer = ["gpt-5", "o1", "o3", "o4", "gpt-4.1", "gpt-4o", "chatgpt-4o"];
        let encoding = get_tokenizer(model).or_else(|| {
            newer
                .iter()
                .any(|family| model.starts_with(family))
                .then_some(Encoding::O200kBase)
        });
        let tokenizer = match (kind, encoding) {
            (ProviderKind::OpenAi, Some(Encoding::O200kBase)) => Tokenizer::o200k_base(),
            (ProviderKind::OpenAi, Some(Encoding::Cl100kBase)) => Tokenizer::cl100k_base(),
            _ => None,
        };
        tokenizer.map_or(TokenCounter::Heuristic, TokenCounter::Exact)
    }

    pub fn count(self, text: &str) -> u64 {
        match self {
            TokenCounter::Exact(tokenizer) => tokenizer.count(text),
            TokenCounter::Heuristic => (text.len() as u64).div_ceil(HEURISTIC_BYTES_PER_TOKEN),
        }
    }
}

/// Builds the tokenizers at startup rather than on the first call.
pub fn warm_up() {
    let _ = Tokenizer::o200k_base();
    let _ = Tokenizer::cl100k_base();
}

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
    let seen = input_tokens(call.api, &call.body, counter, context_window);
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

fn input_tokens(
    api: Api,
    body: &Map<String, Value>,
    counter: TokenCounter,
    context_window: u64,
) -> u64 {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    let mut tally = Tally {
        counter,
        context_window,
        images: images::rule_for(model),
        tokens: TOKENS_PER_REPLY,
    };
    for (key, value) in body {
        match key.as_str() {
            "model" => {}
            "messages" | "input" => {
                let items = match value {
                    Value::Array(items) => items.len() as u64,
                    // The Responses API takes a string as one user message.
                    Value::String(_) => 1,
                    _ => 0,
                };
                tally.add(TOKENS_PER_ITEM.saturating_mul(items));
                tally.walk(value);
            }
            // A system prompt given beside the messages (Anthropic's
            // `system`, the Responses API's `instructions`) is framed as
            // one more message.
            "system" | "instructions" => {
                tally.add(TOKENS_PER_ITEM);
                tally.add(counter.count(key));
                tally.walk(value);
            }
            // Server-side state the gateway cannot see.
            "previous_response_id" | "conversation" if api == Api::Responses => {
                tally.add(context_window)
            }
            "prompt" if api == Api::Responses => tally.add(context_window),
            _ => {
                tally.add(counter.count(key));
                tally.walk(value);
            }
        }
    }
    tally.tokens
}

struct Tally {
    counter: TokenCounter,
    context_window: u64,
    images: ImageRule,
    tokens: u64,
}

impl Tally {
    fn add(&mut self, tokens: u64) {
        self.tokens = self.tokens.saturating_add(tokens);
    }

    fn walk(&mut self, value: &Value) {
        match value {
            Value::Null => {}
            Value::Bool(_) | Value::Number(_) => self.add(1),
            Value::String(text) => self.add(self.counter.count(text)),
            Value::Array(items) => items.iter().for_each(|item| self.walk(item)),
            Value::Object(map) => {
                let kind = map.get("type").and_then(Value::as_str).unwrap_or("");
                if IMAGE_TYPES.contains(&kind) {
                    self.add(images::part_tokens(self.images, map));
                } else if UNSEEN_TYPES.contains(&kind) || map.contains_key("file_id") {
                    self.add(self.context_window);
                } else {
                    for (key, value) in map {
                        self.add(self.counter.count(key));
                        self.walk(value);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn price() -> ModelPrice {
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

    fn call(api: Api, body: serde_json::Value) -> Call {
        let mut call = Call::parse(api, Bytes::from(body.to_string())).unwrap();
        call.bound_output(100, &[]);
        call
    }

    fn openai() -> TokenCounter {
        TokenCounter::for_model(ProviderKind::OpenAi, "gpt-4o-mini")
    }

    #[test]
    fn counts_every_text_with_framing() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let c = call(
            Api::ChatCompletions,
            serde_json::json!({
                "model": "gpt-4o-mini", "max_tokens": 10,
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
            }),
        );
        let e = estimate(&c, &price(), openai());
        let exact = openai().count(&text) + openai().count("Be brief.") + 2 * 3 + 3;
        assert!(e.input_tokens >= exact, "{} < {exact}", e.input_tokens);
        assert!(
            e.input_tokens < exact + 80,
            "framing overhead too large: {}",
            e.input_tokens
        );
        assert_eq!(e.output_tokens, 10);
    }

    #[test]
    fn instructions_and_a_string_input_are_framed_as_messages() {
        let (instructions, input) = ("Be terse.", "Summarise the news of the day.");
        let c = call(
            Api::Responses,
            serde_json::json!({"model": "gpt-4o-mini", "instructions": instructions, "input": input}),
        );
        // Each becomes a message the provider frames with 3 tokens and a
        // role, and 3 more prime the reply.
        let billed = openai().count(instructions) + openai().count(input) + 2 * (3 + 1) + 3;
        let e = estimate(&c, &price(), openai());
        assert!(e.input_tokens >= billed, "{} < {billed}", e.input_tokens);
    }

    #[test]
    fn prices_input_at_the_dearest_rate_and_output_per_choice() {
        let c = call(
            Api::ChatCompletions,
            serde_json::json!({
                "model": "m", "max_tokens": 1000, "n": 3, "messages": [{"role": "user", "content": "hi"}],
            }),
        );
        let e = estimate(&c, &price(), TokenCounter::Heuristic);
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
            let e = estimate(&c, &tiered, TokenCounter::Heuristic);
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
        let e = estimate(&c, &price(), TokenCounter::Heuristic);
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
    fn heuristic_is_above_four_bytes_per_token() {
        let text = "x".repeat(3000);
        let c = call(
            Api::Messages,
            serde_json::json!({
                "model": "claude-haiku-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": text}],
            }),
        );
        let e = estimate(&c, &price(), TokenCounter::Heuristic);
        assert!(e.input_tokens >= 1000);
    }

    #[test]
    fn media_and_unseen_input_get_allowances() {
        // Not an image header the gateway can read: gpt-4o-mini's largest
        // image, 2,833 tokens and 8 tiles of 5,667.
        let data_url = format!("data:image/png;base64,{}", "A".repeat(100_000));
        let c = call(
            Api::ChatCompletions,
            serde_json::json!({
                "model": "gpt-4o-mini", "max_tokens": 1,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": data_url}},
                ]}],
            }),
        );
        let e = estimate(&c, &price(), openai());
        let image = 2_833 + 8 * 5_667;
        assert!(
            e.input_tokens >= image && e.input_tokens < image + 50,
            "{}",
            e.input_tokens
        );

        let c = call(
            Api::Responses,
            serde_json::json!({
                "model": "gpt-4o-mini", "max_output_tokens": 1, "previous_response_id": "resp_1", "input": "go on",
            }),
        );
        assert!(estimate(&c, &price(), openai()).input_tokens >= 10_000);

        let c = call(
            Api::Responses,
            serde_json::json!({
                "model": "gpt-4o-mini", "max_output_tokens": 1,
                "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}],
            }),
        );
        assert!(estimate(&c, &price(), openai()).input_tokens >= 10_000);
    }

    #[test]
    fn each_image_is_bounded_by_its_models_rule() {
        use image_size::tests::{encode, png};
        let image = |width, height, detail: &str| {
            let url = format!("data:image/png;base64,{}", encode(&png(width, height)));
            serde_json::json!({"type": "image_url", "image_url": {"url": url, "detail": detail}})
        };
        let input = |model: &str, parts: Vec<Value>| {
            let c = call(
                Api::ChatCompletions,
                serde_json::json!({"model": model, "max_tokens": 1,
                    "messages": [{"role": "user", "content": parts}]}),
            );
            estimate(&c, &price(), TokenCounter::Heuristic).input_tokens
        };
        let text_only = input("gpt-4o-mini", vec![]);
        // A large high-detail image on gpt-4o-mini: 2048x768 after scaling,
        // 8 tiles, far past the 2,000 tokens once allowed per image.
        let large = input("gpt-4o-mini", vec![image(4096, 1536, "high")]);
        assert_eq!(large - text_only, 2_833 + 8 * 5_667);
        let low = input("gpt-4o-mini", vec![image(4096, 1536, "low")]);
        assert_eq!(low - text_only, 2_833);
        // Two images on gpt-4o, 85 + 170 a tile: 1024x1024 at high is scaled
        // to 768x768 (4 tiles), 512x512 at auto is one tile.
        let two = input(
            "gpt-4o",
            vec![image(1024, 1024, "high"), image(512, 512, "auto")],
        );
        assert_eq!(two - input("gpt-4o", vec![]), 765 + 255);

        let c = call(
            Api::Messages,
            serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "image", "source": {
                    "type": "base64", "media_type": "image/png", "data": encode(&png(200, 200))}}]}]}),
        );
        let e = estimate(&c, &price(), TokenCounter::Heuristic);
        assert!(
            e.input_tokens >= 64 && e.input_tokens < 64 + 60,
            "{}",
            e.input_tokens
        );
    }

    #[test]
    fn text_that_looks_like_a_data_url_is_still_counted() {
        let text = format!("data: {}", "word ".repeat(20_000));
        let c = call(
            Api::ChatCompletions,
            serde_json::json!({
                "model": "gpt-4o-mini", "max_tokens": 1, "messages": [{"role": "user", "content": text}],
            }),
        );
        assert!(estimate(&c, &price(), openai()).input_tokens >= 20_000);
    }

    #[test]
    fn stored_items_and_newer_models_are_bounded() {
        let c = call(
            Api::Responses,
            serde_json::json!({
                "model": "gpt-5-mini", "max_output_tokens": 1,
                "input": [{"type": "item_reference", "id": "msg_1"}],
            }),
        );
        assert!(estimate(&c, &price(), openai()).input_tokens >= 10_000);
        for model in ["gpt-5", "gpt-5-mini", "gpt-4.1-nano", "o3", "o4-mini"] {
            assert!(
                matches!(
                    TokenCounter::for_model(ProviderKind::OpenAi, model),
                    TokenCounter::Exact(_)
                ),
                "{model}"
            );
        }
        assert!(matches!(
            TokenCounter::for_model(ProviderKind::Anthropic, "claude-haiku-4-5"),
            TokenCounter::Heuristic
        ));
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
