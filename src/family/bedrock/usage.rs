//! Converse's `usage`, in a body or a stream's `metadata` event:
//! `inputTokens` excludes the cache reads and writes,
//! which Bedrock counts apart (`cacheReadInputTokens`,
//! `cacheWriteInputTokens`), and `outputTokens` includes thinking.

use serde::Deserialize;

use crate::usage::count::Count;
use crate::usage::{Reported, Usage};

// `Option`, so that an explicit `null` reads as absent instead of failing
// the parse.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConverseUsage {
    input_tokens: Option<Count>,
    output_tokens: Option<Count>,
    cache_read_input_tokens: Option<Count>,
    cache_write_input_tokens: Option<Count>,
}

impl ConverseUsage {
    pub(super) fn to_usage(&self) -> Reported {
        Ok(Usage {
            input: Count::read("usage.inputTokens", self.input_tokens.as_ref())?,
            cached_input: Count::read(
                "usage.cacheReadInputTokens",
                self.cache_read_input_tokens.as_ref(),
            )?,
            cache_write: Count::read(
                "usage.cacheWriteInputTokens",
                self.cache_write_input_tokens.as_ref(),
            )?,
            output: Count::read("usage.outputTokens", self.output_tokens.as_ref())?,
            ..Usage::default()
        })
    }
}

/// The usage of a Converse response body; `None` when the body is not
/// JSON or carries none.
pub(crate) fn body_usage(body: &[u8]) -> Option<Reported> {
    #[derive(Deserialize)]
    struct WithUsage {
        usage: Option<ConverseUsage>,
    }
    serde_json::from_slice::<WithUsage>(body)
        .ok()?
        .usage
        .map(|usage| usage.to_usage())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::AbsurdUsage;

    #[test]
    fn cache_reads_and_writes_are_classes_of_their_own() {
        let body = br#"{"output":{"message":{"role":"assistant","content":[{"text":"Hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":2,"totalTokens":1512,"cacheReadInputTokens":1000,"cacheWriteInputTokens":500},"metrics":{"latencyMs":123}}"#;
        let usage = body_usage(body).unwrap().unwrap();
        assert_eq!(
            (
                usage.input,
                usage.cached_input,
                usage.cache_write,
                usage.output
            ),
            (10, 1000, 500, 2)
        );
        assert!(body_usage(br#"{"message":"bad"}"#).is_none());
        let absurd = body_usage(br#"{"usage":{"inputTokens":-1,"outputTokens":2}}"#).unwrap();
        assert!(matches!(
            absurd,
            Err(AbsurdUsage {
                field: "usage.inputTokens",
                ..
            })
        ));
    }
}
