//! Counting a request's input tokens: every string and key of its body,
//! with OpenAI's tokenizer for OpenAI models and one token per byte
//! elsewhere (no model's tokenizer yields more), plus the framing of each
//! message; each image by
//! its model's rule (`images`), and input the gateway cannot see (files,
//! stored items, server-side state) as the model's whole context window.

use serde_json::{Map, Value};
use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer as Encoding};

use super::images::{self, ImageRule, IMAGE_TYPES};
use crate::api::Api;
use crate::prices::MAX_INPUT_BYTES_PER_TOKEN;
use crate::provider::ProviderKind;
use crate::tokenizer::cache::{CountCache, MIN_CACHED_BYTES};
use crate::tokenizer::Tokenizer;

/// Tokens framing each message or input item (role markers, separators):
/// OpenAI's chat format uses 3 to 4; 4 covers every shape.
const TOKENS_PER_ITEM: u64 = 4;
/// Tokens priming the reply.
const TOKENS_PER_REPLY: u64 = 3;

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
    /// A token per `bytes_per_token` bytes of UTF-8 text, rounded up: at 1,
    /// a bound no byte-level or byte-fallback tokenizer can pass, as each
    /// of their tokens is at least one byte.
    Bytes { bytes_per_token: u64 },
}

impl TokenCounter {
    /// One token per byte: the strict bound of a model without a public
    /// tokenizer.
    pub const STRICT: TokenCounter = TokenCounter::Bytes { bytes_per_token: 1 };

    /// OpenAI's own tokenizer for OpenAI models; one token per byte for
    /// every other model, including other models behind OpenAI-compatible
    /// APIs (see [`TokenCounter::at_bytes_per_token`]).
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
        let tokenizer = match encoding.filter(|_| kind.counts_like_openai()) {
            Some(Encoding::O200kBase) => Tokenizer::o200k_base(),
            Some(Encoding::Cl100kBase) => Tokenizer::cl100k_base(),
            _ => None,
        };
        tokenizer.map_or(TokenCounter::STRICT, TokenCounter::Exact)
    }

    /// A byte count at the model's `input_bytes_per_token` (a price entry's
    /// choice to reserve less than the strict bound, at the risk of an
    /// overrun); an exact tokenizer is kept.
    pub fn at_bytes_per_token(self, bytes_per_token: u64) -> TokenCounter {
        match self {
            TokenCounter::Bytes { .. } => TokenCounter::Bytes {
                bytes_per_token: bytes_per_token.clamp(1, MAX_INPUT_BYTES_PER_TOKEN),
            },
            exact => exact,
        }
    }

    pub fn count(self, text: &str) -> u64 {
        self.count_in(CountCache::global(), text)
    }

    /// [`TokenCounter::count`], an exact count remembered in `cache`.
    pub fn count_in(self, cache: &CountCache, text: &str) -> u64 {
        match self {
            TokenCounter::Exact(tokenizer) => tokenizer.count_in(cache, text),
            TokenCounter::Bytes { bytes_per_token } => {
                (text.len() as u64).div_ceil(bytes_per_token)
            }
        }
    }
}

/// Builds the tokenizers at startup rather than on the first call.
pub fn warm_up() {
    let _ = Tokenizer::o200k_base();
    let _ = Tokenizer::cl100k_base();
}

pub(super) fn input_tokens(
    api: Api,
    body: &Map<String, Value>,
    counter: TokenCounter,
    context_window: u64,
) -> u64 {
    input_tokens_in(CountCache::global(), api, body, counter, context_window)
}

/// [`input_tokens`], with exact counts remembered in `cache`.
fn input_tokens_in(
    cache: &CountCache,
    api: Api,
    body: &Map<String, Value>,
    counter: TokenCounter,
    context_window: u64,
) -> u64 {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    let mut tally = Tally {
        cache,
        counter,
        context_window,
        images: images::rule_for(model),
        tokens: TOKENS_PER_REPLY,
        long_texts: Vec::new(),
    };
    for (key, value) in body {
        match key.as_str() {
            "model" => {}
            // Gemini's conversation is its `contents`.
            "messages" | "input" | "contents" => {
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
            "system" | "instructions" | "systemInstruction" | "system_instruction" => {
                tally.add(TOKENS_PER_ITEM);
                tally.add(tally.count(key));
                tally.walk(value);
            }
            // Server-side state the gateway cannot see.
            "previous_response_id" | "conversation" if api == Api::Responses => {
                tally.add(context_window)
            }
            "prompt" if api == Api::Responses => tally.add(context_window),
            // A Gemini context cache, held at the provider.
            "cachedContent" | "cached_content" if api == Api::GenerateContent => {
                tally.add(context_window)
            }
            _ => {
                tally.add(tally.count(key));
                tally.walk(value);
            }
        }
    }
    tally.finish()
}

struct Tally<'a, 'b> {
    cache: &'a CountCache,
    counter: TokenCounter,
    context_window: u64,
    images: ImageRule,
    tokens: u64,
    /// The texts the cache keeps counts of, in the body's order, counted
    /// together at the end as one sequence (`CountCache::count_all`).
    long_texts: Vec<&'b str>,
}

impl<'b> Tally<'_, 'b> {
    fn add(&mut self, tokens: u64) {
        self.tokens = self.tokens.saturating_add(tokens);
    }

    fn count(&self, text: &str) -> u64 {
        self.counter.count_in(self.cache, text)
    }

    /// A string's tokens: now if short or counted by bytes, at the end
    /// with the body's other long texts if the cache keeps its count.
    fn text(&mut self, text: &'b str) {
        match self.counter {
            TokenCounter::Exact(_) if text.len() >= MIN_CACHED_BYTES => self.long_texts.push(text),
            _ => self.add(self.count(text)),
        }
    }

    fn finish(mut self) -> u64 {
        if let TokenCounter::Exact(tokenizer) = self.counter {
            self.add(tokenizer.count_all_in(self.cache, &self.long_texts));
        }
        self.tokens
    }

    fn walk(&mut self, value: &'b Value) {
        match value {
            Value::Null => {}
            Value::Bool(_) | Value::Number(_) => self.add(1),
            Value::String(text) => self.text(text),
            Value::Array(items) => items.iter().for_each(|item| self.walk(item)),
            Value::Object(map) => {
                let kind = map.get("type").and_then(Value::as_str).unwrap_or("");
                if IMAGE_TYPES.contains(&kind) {
                    self.add(images::part_tokens(self.images, map));
                } else if UNSEEN_TYPES.contains(&kind)
                    || ["file_id", "fileUri", "file_uri"]
                        .iter()
                        .any(|key| map.contains_key(*key))
                {
                    self.add(self.context_window);
                } else {
                    for (key, value) in map {
                        self.add(self.count(key));
                        self.walk(value);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::estimate;
    use super::super::tests::{call, openai, price};
    use super::*;

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
    fn without_a_public_tokenizer_every_byte_is_a_token() {
        // Emoji, CJK and hex: text denser than prose, at a token per byte.
        let text = format!(
            "{}{}{}",
            "😀".repeat(100),
            "漢字".repeat(50),
            "9f3a".repeat(100)
        );
        let c = call(
            Api::Messages,
            serde_json::json!({
                "model": "claude-haiku-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": text}],
            }),
        );
        let strict = estimate(&c, &price(), TokenCounter::STRICT).input_tokens;
        assert!(
            strict >= text.len() as u64,
            "{strict} < {} bytes",
            text.len()
        );
        // An operator's looser bound counts a quarter of that, no looser.
        let loose = TokenCounter::STRICT.at_bytes_per_token(9);
        assert!(matches!(loose, TokenCounter::Bytes { bytes_per_token: 4 }));
        let quarter = estimate(&c, &price(), loose).input_tokens;
        assert!(quarter >= (text.len() as u64).div_ceil(4) && quarter < strict);
        // Never more than the context window, which is all a provider bills.
        let huge = call(
            Api::Messages,
            serde_json::json!({
                "model": "claude-haiku-4-5", "max_tokens": 1,
                "messages": [{"role": "user", "content": "x".repeat(300_000)}],
            }),
        );
        let window = price().context_window.unwrap();
        assert_eq!(
            estimate(&huge, &price(), TokenCounter::STRICT).seen_input_tokens,
            window
        );
        // OpenAI's own tokenizer stays exact.
        let exact = TokenCounter::for_model(ProviderKind::OpenAi, "gpt-4o-mini");
        assert!(matches!(
            exact.at_bytes_per_token(4),
            TokenCounter::Exact(_)
        ));
    }

    /// The test price with a window wide enough not to bound the input.
    fn wide() -> crate::prices::ModelPrice {
        crate::prices::ModelPrice {
            context_window: Some(1_000_000),
            ..price()
        }
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
        let e = estimate(&c, &wide(), openai());
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
        use super::super::image_size::tests::{encode, png};
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
            estimate(&c, &wide(), TokenCounter::STRICT).input_tokens
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
        let e = estimate(&c, &price(), TokenCounter::STRICT);
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
        assert!(estimate(&c, &wide(), openai()).input_tokens >= 20_000);
    }

    /// A conversation resent every turn, one exchange longer each time,
    /// with a system prompt, tools, an image and tool results: counted
    /// with remembered counts, every turn's count is exactly the count
    /// taken afresh, and every turn after the first finds its earlier
    /// messages remembered.
    #[test]
    fn remembered_counts_are_exactly_the_counts_afresh() {
        use super::super::image_size::tests::{encode, png};
        let words = |seed: usize, n: usize| {
            let vocabulary = [
                "budget", "agent", "token", "stream", "settle", "reserve", "cap", "the", "of",
                "provider", "gateway", "call", "{\"id\":", "0x9f3a", "über", "漢字",
            ];
            (0..n)
                .map(|i| vocabulary[(seed * 7 + i * 13) % vocabulary.len()])
                .collect::<Vec<_>>()
                .join(" ")
        };
        let image = format!("data:image/png;base64,{}", encode(&png(640, 480)));
        let tools = serde_json::json!([{"type": "function", "function": {
            "name": "search", "description": words(99, 80),
            "parameters": {"type": "object", "properties": {"q": {"type": "string",
                "description": words(98, 60)}}}}}]);
        let exact = TokenCounter::for_model(ProviderKind::OpenAi, "gpt-4o-mini");
        let remembered = CountCache::new(4);
        let afresh = CountCache::new(0);
        let mut messages = vec![
            serde_json::json!({"role": "system", "content": words(1, 300)}),
            serde_json::json!({"role": "user", "content": [
                {"type": "text", "text": words(2, 120)},
                {"type": "image_url", "image_url": {"url": image}}]}),
        ];
        for turn in 0..12 {
            messages.push(serde_json::json!({"role": "assistant", "content": null,
                "tool_calls": [{"id": format!("call_{turn}"), "type": "function",
                    "function": {"name": "search", "arguments": format!("{{\"q\": \"{}\"}}", words(turn, 70))}}]}));
            messages.push(
                serde_json::json!({"role": "tool", "tool_call_id": format!("call_{turn}"),
                "content": words(turn + 50, 200 + turn * 40)}),
            );
            messages.push(serde_json::json!({"role": "user", "content": words(turn + 100, 90)}));
            let body = serde_json::json!({"model": "gpt-4o-mini", "max_tokens": 10,
                "messages": messages, "tools": tools});
            let body = body.as_object().unwrap();
            let hits_before = remembered.counters().0.get();
            let counted = input_tokens_in(&remembered, Api::ChatCompletions, body, exact, 1 << 40);
            let fresh = input_tokens_in(&afresh, Api::ChatCompletions, body, exact, 1 << 40);
            assert_eq!(counted, fresh, "turn {turn}");
            // Counted again, everything long comes from the cache.
            assert_eq!(
                input_tokens_in(&remembered, Api::ChatCompletions, body, exact, 1 << 40),
                fresh
            );
            if turn > 0 {
                assert!(remembered.counters().0.get() > hits_before, "turn {turn}");
            }
        }
        // Anthropic's shape, a system prompt beside the messages, by the
        // same rule (the byte count needs no cache, and gets the same).
        let body = serde_json::json!({"model": "claude-haiku-4-5", "max_tokens": 10,
            "system": [{"type": "text", "text": words(7, 400)}],
            "tools": [{"name": "search", "description": words(8, 100), "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": words(9, 500)}]});
        let body = body.as_object().unwrap();
        for counter in [exact, TokenCounter::STRICT] {
            let fresh = input_tokens_in(&afresh, Api::Messages, body, counter, 1 << 40);
            for _ in 0..2 {
                assert_eq!(
                    input_tokens_in(&remembered, Api::Messages, body, counter, 1 << 40),
                    fresh
                );
            }
        }
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
            TokenCounter::Bytes { bytes_per_token: 1 }
        ));
    }
}
