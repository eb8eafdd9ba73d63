//! What the mock answers, independent of the wire format: the test
//! directives found in the prompt, the deterministic reply text, the reply
//! length after the request's output limit, and the token counts it reports.

use std::sync::OnceLock;
use std::time::Duration;

use http::StatusCode;
use serde_json::Value;
use tiktoken_rs::CoreBPE;

use super::MockOptions;
use crate::usage::Usage;

/// The reply vocabulary. Every word is a single token in both o200k_base
/// and cl100k_base (checked by a test), so a client that counts the tokens
/// of the text it saw gets exactly the output tokens the mock reports.
const WORDS: [&str; 43] = [
    " lorem",
    " ipsum",
    " dolor",
    " sit",
    " amet",
    " consectetur",
    " adipiscing",
    " elit",
    " sed",
    " do",
    " eiusmod",
    " tempor",
    " incididunt",
    " ut",
    " labore",
    " et",
    " dolore",
    " magna",
    " aliqua",
    " enim",
    " ad",
    " minim",
    " veniam",
    " quis",
    " exercitation",
    " nisi",
    " ex",
    " ea",
    " commodo",
    " consequat",
    " aute",
    " in",
    " velit",
    " esse",
    " nulla",
    " sint",
    " non",
    " sunt",
    " culpa",
    " qui",
    " anim",
    " id",
    " est",
];

/// The `i`-th output token of every reply.
pub(crate) fn word(i: u64) -> &'static str {
    let len = WORDS.len() as u64;
    WORDS[usize::try_from(i % len).unwrap_or(0)]
}

/// The full text of a reply of `tokens` tokens.
pub(crate) fn text(tokens: u64) -> String {
    (0..tokens).map(word).collect()
}

/// Instructions a test embeds in the last user message, as `mock:NAME=N`
/// words anywhere in its text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Directives {
    /// `mock:tokens=N`: reply length, before the request's output limit.
    pub tokens: Option<u64>,
    /// `mock:status=CODE`: answer with this error status (400..=599).
    pub status: Option<StatusCode>,
    /// `mock:cut=N`: drop the connection after N streamed content tokens.
    pub cut: Option<u64>,
    /// `mock:cached=N`: input tokens reported as read from the cache.
    pub cached: Option<u64>,
    /// `mock:cache_write=N`: input tokens reported as written to the cache
    /// (Anthropic only).
    pub cache_write: Option<u64>,
    /// `mock:sleep_ms=N`: pause between streamed tokens for this request.
    pub sleep_ms: Option<u64>,
    /// `mock:hidden=N`: reasoning tokens billed as output but never
    /// streamed, generated before the visible reply.
    pub hidden: Option<u64>,
    /// `mock:tool_calls=N`: use the request's first hosted tool N times
    /// (at most as often as the request allows).
    pub tool_calls: Option<u64>,
    /// `mock:downgrade=1`: serve a request for the priority tier at the
    /// default one, as OpenAI does past a priority ramp limit.
    pub downgrade: Option<u64>,
    /// `mock:project_priority=1`: serve a request that names no tier, or
    /// `"auto"`, at priority, as OpenAI does for a project whose default
    /// tier is priority.
    pub project_priority: Option<u64>,
    /// `mock:thoughts=N`: Gemini thinking tokens (`thoughtsTokenCount`),
    /// billed as output, at most the request's thinking budget.
    pub thoughts: Option<u64>,
    /// `mock:tool_prompt=N`: Gemini `toolUsePromptTokenCount`, billed as
    /// input on top of the prompt.
    pub tool_prompt: Option<u64>,
}

impl Directives {
    /// Reads every `mock:NAME=N` word of `text`; unknown names and values
    /// that are not numbers are ignored, as is a status below 400.
    pub(crate) fn parse(text: &str) -> Self {
        let mut directives = Self::default();
        for (name, value) in text
            .split_whitespace()
            .filter_map(|word| word.strip_prefix("mock:"))
            .filter_map(|directive| directive.split_once('='))
        {
            let Ok(value) = value.parse::<u64>() else {
                continue;
            };
            match name {
                "tokens" => directives.tokens = Some(value),
                "status" => {
                    directives.status = u16::try_from(value)
                        .ok()
                        .and_then(|code| StatusCode::from_u16(code).ok())
                        .filter(|status| status.is_client_error() || status.is_server_error());
                }
                "cut" => directives.cut = Some(value),
                "cached" => directives.cached = Some(value),
                "cache_write" => directives.cache_write = Some(value),
                "sleep_ms" => directives.sleep_ms = Some(value),
                "hidden" => directives.hidden = Some(value),
                "tool_calls" => directives.tool_calls = Some(value),
                "downgrade" => directives.downgrade = Some(value),
                "project_priority" => directives.project_priority = Some(value),
                "thoughts" => directives.thoughts = Some(value),
                "tool_prompt" => directives.tool_prompt = Some(value),
                _ => {}
            }
        }
        directives
    }
}

/// How long each reply choice is and why it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    /// Output tokens of one choice.
    pub tokens: u64,
    /// The request's output limit cut the reply short.
    pub capped: bool,
}

impl Reply {
    /// A reply of `wanted` tokens, cut to the request's output `limit`.
    pub(crate) fn plan(wanted: u64, limit: Option<u64>) -> Self {
        match limit {
            Some(limit) if limit < wanted => Self {
                tokens: limit,
                capped: true,
            },
            _ => Self {
                tokens: wanted,
                capped: false,
            },
        }
    }
}

impl MockOptions {
    /// The reply for a request with these directives and output limit.
    pub(crate) fn reply(&self, directives: &Directives, limit: Option<u64>) -> Reply {
        Reply::plan(directives.tokens.unwrap_or(self.reply_tokens), limit)
    }

    /// Time between streamed tokens: the request's `mock:sleep_ms`, else
    /// the configured rate.
    pub(crate) fn pace(&self, directives: &Directives) -> Duration {
        match (directives.sleep_ms, self.tokens_per_sec) {
            (Some(ms), _) => Duration::from_millis(ms),
            (None, Some(rate)) if rate > 0 => Duration::from_secs(1) / rate,
            _ => Duration::ZERO,
        }
    }
}

/// Input tokens each hosted tool use feeds back to the model (a search's
/// results, a fetched page), as providers bill them.
pub(crate) const TOOL_RESULT_TOKENS: u64 = 1_000;

/// The token counts of one answer, as the provider reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Every input token, cached and cache writes included.
    pub prompt: u64,
    /// Input tokens read from the cache (part of `prompt`).
    pub cached: u64,
    /// Input tokens written to the cache (part of `prompt`).
    pub cache_write: u64,
    /// Output tokens, all choices together, hidden ones included.
    pub output: u64,
    /// Hidden (reasoning) output tokens, part of `output`: billed even when
    /// the stream stops before the visible reply.
    pub hidden: u64,
    /// Hosted tool uses, billed per use.
    pub tool_calls: u64,
    /// The cache writes are kept for an hour (the request asked for a
    /// `cache_control` ttl of `"1h"`).
    pub hour_cache: bool,
}

impl Tally {
    /// Counts for a prompt of `prompt` tokens with the cache directives
    /// applied; the cached and written parts never exceed the prompt.
    pub(crate) fn new(prompt: u64, directives: &Directives, output: u64) -> Self {
        let cached = directives.cached.unwrap_or(0).min(prompt);
        let cache_write = directives.cache_write.unwrap_or(0).min(prompt - cached);
        let hidden = directives.hidden.unwrap_or(0);
        Self {
            prompt,
            cached,
            cache_write,
            output: output.saturating_add(hidden),
            hidden,
            tool_calls: 0,
            hour_cache: false,
        }
    }

    /// The same answer after `calls` hosted tool uses, each feeding back
    /// [`TOOL_RESULT_TOKENS`] of input, billed at the full input price.
    pub(crate) fn with_tool_calls(self, calls: u64) -> Self {
        Self {
            prompt: self
                .prompt
                .saturating_add(calls.saturating_mul(TOOL_RESULT_TOKENS)),
            tool_calls: calls,
            ..self
        }
    }

    /// Input tokens read before any tool was used: what a stream reports
    /// when it starts.
    pub(crate) fn uncached_before_tools(&self) -> u64 {
        self.uncached()
            .saturating_sub(self.tool_calls.saturating_mul(TOOL_RESULT_TOKENS))
    }

    /// Input tokens billed at the full input price.
    pub(crate) fn uncached(&self) -> u64 {
        self.prompt - self.cached - self.cache_write
    }

    /// The same call with `output` visible tokens generated instead.
    pub(crate) fn with_output(self, output: u64) -> Self {
        Self {
            output: output.saturating_add(self.hidden),
            ..self
        }
    }

    /// The usage a provider bills for these counts.
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            input: self.uncached(),
            cached_input: self.cached,
            cache_write: self.cache_write,
            output: self.output,
            tool_calls: self.tool_calls,
            cache_write_1h: if self.hour_cache { self.cache_write } else { 0 },
        }
    }
}

/// The OpenAI service tier an answer is served at: `priority` when the
/// request asks for it, or leaves the tier to the project's default (no
/// tier, or `"auto"`) under `mock:project_priority`, unless
/// `mock:downgrade`; else `default`. A tier's case and surrounding spaces
/// are ignored, as the gateway ignores them, so that an odd spelling is
/// served at the dearer tier it may mean.
pub(crate) fn served_tier(body: &Value, directives: &Directives) -> &'static str {
    let project_default = directives.project_priority.is_some();
    let priority = match body.get("service_tier") {
        None | Some(Value::Null) => project_default,
        Some(Value::String(tier)) => match tier.trim().to_ascii_lowercase().as_str() {
            "auto" => project_default,
            "priority" => true,
            _ => false,
        },
        Some(_) => false,
    };
    if priority && directives.downgrade.is_none() {
        "priority"
    } else {
        "default"
    }
}

/// Whether any `cache_control` of a body asks for the hour-long cache.
pub(crate) fn asks_for_hour_cache(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(key, value)| {
            (key == "cache_control" && value.get("ttl").and_then(Value::as_str) == Some("1h"))
                || asks_for_hour_cache(value)
        }),
        Value::Array(items) => items.iter().any(asks_for_hour_cache),
        _ => false,
    }
}

/// The o200k_base tokenizer, built once (it takes about 100 ms).
pub(crate) fn tokenizer() -> Option<&'static CoreBPE> {
    static TOKENIZER: OnceLock<Option<CoreBPE>> = OnceLock::new();
    TOKENIZER
        .get_or_init(|| match tiktoken_rs::o200k_base() {
            Ok(bpe) => Some(bpe),
            Err(error) => {
                tracing::error!(
                    %error,
                    "o200k_base tokenizer unavailable; counting 4 bytes per token"
                );
                None
            }
        })
        .as_ref()
}

/// Tokens of `text` in o200k_base.
pub(crate) fn count_tokens(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    match tokenizer() {
        Some(bpe) => bpe.encode_ordinary(text).len() as u64,
        None => (text.len() as u64).div_ceil(4),
    }
}

/// Pushes every text of a message `content`: a string, or an array of
/// strings and parts carrying `text` (nested `content`, as in tool
/// results, is searched too). Images and other parts carry no text.
pub(crate) fn content_texts<'a>(content: &'a Value, out: &mut Vec<&'a str>) {
    match content {
        Value::String(text) => out.push(text),
        Value::Array(parts) => {
            for part in parts {
                match part {
                    Value::String(text) => out.push(text),
                    Value::Object(fields) => {
                        if let Some(Value::String(text)) = fields.get("text") {
                            out.push(text);
                        }
                        if let Some(nested) = fields.get("content") {
                            content_texts(nested, out);
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// The text of a message `content`, parts joined by newlines.
pub(crate) fn content_text(content: &Value) -> String {
    let mut texts = Vec::new();
    content_texts(content, &mut texts);
    texts.join("\n")
}

/// The directives of the last message whose role is `user`.
pub(crate) fn last_user_directives(messages: &[Value]) -> Directives {
    messages
        .iter()
        .rev()
        .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|message| message.get("content"))
        .map(|content| Directives::parse(&content_text(content)))
        .unwrap_or_default()
}

/// A non-negative integer field of the request, if present.
pub(crate) fn u64_field(body: &Value, name: &str) -> Option<u64> {
    body.get(name).and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_word_is_one_token_in_both_openai_encodings() {
        let o200k = tiktoken_rs::o200k_base().unwrap();
        let cl100k = tiktoken_rs::cl100k_base().unwrap();
        for word in WORDS {
            assert_eq!(o200k.encode_ordinary(word).len(), 1, "{word:?}");
            assert_eq!(cl100k.encode_ordinary(word).len(), 1, "{word:?}");
        }
        let reply = text(100);
        assert_eq!(count_tokens(&reply), 100);
    }

    #[test]
    fn directives_are_read_from_anywhere_in_the_text() {
        let directives =
            Directives::parse("hello mock:tokens=5\nmock:cut=2 mock:cached=7 mock:sleep_ms=3");
        assert_eq!(directives.tokens, Some(5));
        assert_eq!(directives.cut, Some(2));
        assert_eq!(directives.cached, Some(7));
        assert_eq!(directives.sleep_ms, Some(3));
        assert_eq!(directives.status, None);
        assert_eq!(
            Directives::parse("mock:status=529").status,
            Some(StatusCode::from_u16(529).unwrap())
        );
        assert_eq!(Directives::parse("mock:status=200").status, None);
        assert_eq!(
            Directives::parse("mock:tokens=x mock:nope=1"),
            Directives::default()
        );
    }

    #[test]
    fn a_project_default_of_priority_serves_an_open_tier_at_priority() {
        let project = Directives::parse("hi mock:project_priority=1");
        assert_eq!(project.project_priority, Some(1));
        let downgraded = Directives {
            downgrade: Some(1),
            ..project
        };
        let served = |tier: Value, directives: &Directives| {
            let mut body = json!({"model": "m"});
            if tier != json!("absent") {
                body["service_tier"] = tier;
            }
            served_tier(&body, directives)
        };
        for open in [json!("absent"), Value::Null, json!("auto"), json!(" Auto")] {
            assert_eq!(served(open.clone(), &Directives::default()), "default");
            assert_eq!(served(open.clone(), &project), "priority", "{open}");
            assert_eq!(served(open, &downgraded), "default");
        }
        for pinned in ["default", "flex"] {
            assert_eq!(served(json!(pinned), &project), "default", "{pinned}");
        }
        assert_eq!(
            served(json!("priority"), &Directives::default()),
            "priority"
        );
    }

    #[test]
    fn the_output_limit_caps_the_reply() {
        assert_eq!(
            Reply::plan(12, Some(5)),
            Reply {
                tokens: 5,
                capped: true
            }
        );
        assert_eq!(
            Reply::plan(12, Some(12)),
            Reply {
                tokens: 12,
                capped: false
            }
        );
        assert_eq!(
            Reply::plan(12, None),
            Reply {
                tokens: 12,
                capped: false
            }
        );
    }

    #[test]
    fn cache_directives_never_exceed_the_prompt() {
        let directives = Directives {
            cached: Some(8),
            cache_write: Some(8),
            ..Directives::default()
        };
        let tally = Tally::new(10, &directives, 3);
        assert_eq!(
            (tally.cached, tally.cache_write, tally.uncached()),
            (8, 2, 0)
        );
        assert_eq!(
            tally.usage(),
            Usage {
                input: 0,
                cached_input: 8,
                cache_write: 2,
                output: 3,
                tool_calls: 0,
                cache_write_1h: 0,
            }
        );
    }

    #[test]
    fn the_last_user_message_carries_the_directives() {
        let messages = vec![
            json!({"role": "user", "content": "mock:tokens=1"}),
            json!({"role": "assistant", "content": "mock:tokens=2"}),
            json!({"role": "user", "content": [{"type": "text", "text": "mock:tokens=3"}]}),
        ];
        assert_eq!(last_user_directives(&messages).tokens, Some(3));
    }
}
