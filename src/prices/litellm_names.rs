//! The names LiteLLM's price file gives Google's and Amazon Bedrock's
//! models, turned into the names the gateway prices them by, and one entry
//! for a name LiteLLM prices twice.
//!
//! LiteLLM keys the Gemini API's models `gemini/gemini-2.5-pro` and
//! Vertex AI's `vertex_ai/gemini-3-pro-preview` or plainly
//! `gemini-2.5-pro`, and Claude on Vertex
//! `vertex_ai/claude-sonnet-4-5@20250929`, while a client names the model
//! alone, in the Gemini API's path or Vertex's. Both families price a call
//! by that one name, so when LiteLLM lists a model under both
//! (`gemini/gemini-2.5-pro` and `gemini-2.5-pro`), the entry kept must
//! bound what either provider bills: it is the two entries' [`covering`]
//! entry, each price the dearer of the two. Their token prices agree for
//! every Gemini model today; they differ in token limits (Vertex's 65,535
//! output tokens against the Gemini API's 65,536) and in which tiers
//! LiteLLM records, and keeping either one whole would under-charge the
//! other provider wherever it is the dearer.

use std::collections::BTreeMap;

use super::{LongContextPrices, ModelPrice, PriorityPrices};

/// LiteLLM's providers of Google's Gemini models: the Gemini API and
/// Vertex AI (whose Gemini entries carry either name).
pub(crate) const GEMINI_PROVIDERS: [&str; 3] = ["gemini", "vertex_ai-language-models", "vertex_ai"];

/// LiteLLM's provider of Anthropic's models on Vertex AI.
pub(crate) const VERTEX_ANTHROPIC_PROVIDER: &str = "vertex_ai-anthropic_models";

/// LiteLLM's providers of Amazon Bedrock's models.
pub(crate) const BEDROCK_PROVIDERS: [&str; 2] = ["bedrock", "bedrock_converse"];

/// Geographies of Bedrock's cross-region inference profiles: an id that
/// starts with one of these runs the model after it, at its price.
const PROFILE_PREFIXES: [&str; 8] = [
    "us.", "eu.", "apac.", "global.", "us-gov.", "jp.", "au.", "ca.",
];

/// The model a Bedrock model id runs, the name it is priced and capped
/// by: an inference profile's ARN prefix and geography taken off
/// (`arn:…:inference-profile/us.anthropic.claude-…` and
/// `us.anthropic.claude-…` are `anthropic.claude-…`).
pub fn bedrock_model(id: &str) -> &str {
    let id = match id.strip_prefix("arn:") {
        Some(arn) => arn.rsplit('/').next().unwrap_or(arn),
        None => id,
    };
    PROFILE_PREFIXES
        .iter()
        .find_map(|prefix| id.strip_prefix(prefix))
        .unwrap_or(id)
}

/// The name a client sends for LiteLLM's entry `key` of `provider`:
/// `gemini/gemini-2.5-pro` → `gemini-2.5-pro`,
/// `vertex_ai/claude-sonnet-4-5@20250929` → `claude-sonnet-4-5@20250929`.
/// Any other key is its own name, as is a Google key naming another
/// publisher's model (`vertex_ai/xai/grok-4.3`), which no family here
/// serves under a plain name.
pub(crate) fn client_name<'a>(key: &'a str, provider: Option<&str>) -> &'a str {
    if provider.is_some_and(|provider| BEDROCK_PROVIDERS.contains(&provider)) {
        // Region-priced keys (`bedrock/us-east-1/…`) keep their names.
        return match key.contains('/') {
            true => key,
            false => bedrock_model(key),
        };
    }
    let prefix = match provider {
        Some("gemini") => "gemini/",
        Some(provider) if is_vertex(provider) => "vertex_ai/",
        _ => return key,
    };
    match key.strip_prefix(prefix) {
        Some(model) if !model.is_empty() && !model.contains('/') => model,
        _ => key,
    }
}

/// Vertex AI's providers whose models the vertex family serves; LiteLLM's
/// other `vertex_ai-…` providers (Mistral, Llama, …) keep their keys.
fn is_vertex(provider: &str) -> bool {
    matches!(
        provider,
        "vertex_ai" | "vertex_ai-language-models" | VERTEX_ANTHROPIC_PROVIDER
    )
}

/// Entries by name, those of one name folded into their [`covering`]
/// entry.
pub(crate) fn by_name(
    entries: impl IntoIterator<Item = (String, ModelPrice)>,
) -> BTreeMap<String, ModelPrice> {
    let mut models: BTreeMap<String, ModelPrice> = BTreeMap::new();
    for (model, price) in entries {
        let kept = match models.remove(&model) {
            Some(earlier) => covering(&earlier, &price),
            None => price,
        };
        models.insert(model, kept);
    }
    models
}

/// An entry that bills no call less than `a` or `b` would:
/// - each token price the dearer of the two;
/// - an option a request asks for (hour-long cache writes, the priority
///   tier, a hosted tool) priced only when both price it, at the dearer
///   price: one priced by a single entry is refused, as that entry's
///   provider alone is known to offer it at that price;
/// - the long context tier kept when either has one, at the lower
///   threshold and the dearer prices: Google bills it by itself past the
///   threshold, no request asks for it;
/// - the larger of each token limit (they bound what can be billed), and
///   reasoning when either reasons.
pub(crate) fn covering(a: &ModelPrice, b: &ModelPrice) -> ModelPrice {
    let both = |x, y| match (x, y) {
        (Some(x), Some(y)) => Some(std::cmp::max(x, y)),
        _ => None,
    };
    let input = a.input.max(b.input);
    let output = a.output.max(b.output);
    let priority = match (a.priority, b.priority) {
        (Some(x), Some(y)) => Some(PriorityPrices {
            input: x.input.max(y.input),
            output: x.output.max(y.output),
            cached_input: both(x.cached_input, y.cached_input),
        }),
        _ => None,
    };
    let long_context = match (a.long_context, b.long_context) {
        (Some(x), Some(y)) => Some(LongContextPrices {
            threshold_tokens: x.threshold_tokens.min(y.threshold_tokens),
            input: x.input.max(y.input),
            output: x.output.max(y.output),
        }),
        (tier, None) | (None, tier) => tier,
    }
    // A tier from one entry alone never bills below the other's standard
    // rates.
    .map(|tier| LongContextPrices {
        input: tier.input.max(input),
        output: tier.output.max(output),
        ..tier
    });
    let tool_call_usd = a
        .tool_call_usd
        .iter()
        .filter_map(|(tool, fee)| Some((*tool, (*fee).max(*b.tool_call_usd.get(tool)?))))
        .collect();
    ModelPrice {
        input,
        cached_input: a.cached_input.max(b.cached_input),
        cache_write: a.cache_write.max(b.cache_write),
        cache_write_1h: both(a.cache_write_1h, b.cache_write_1h),
        output,
        priority,
        long_context,
        // `None` (unknown) is below any limit, so a known one is kept.
        max_output_tokens: a.max_output_tokens.max(b.max_output_tokens),
        context_window: a.context_window.max(b.context_window),
        max_thinking_tokens: a.max_thinking_tokens.max(b.max_thinking_tokens),
        // The stricter count reserves more.
        input_bytes_per_token: a.input_bytes_per_token.min(b.input_bytes_per_token),
        reasoning: a.reasoning || b.reasoning,
        tool_call_usd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::HostedTool;
    use crate::money::Price;

    fn price(text: &str) -> Price {
        Price::per_mtok(text).unwrap()
    }

    #[test]
    fn google_keys_become_the_names_clients_send() {
        let name = |key, provider| client_name(key, Some(provider));
        assert_eq!(name("gemini/gemini-2.5-pro", "gemini"), "gemini-2.5-pro");
        assert_eq!(name("gemini-flash-latest", "gemini"), "gemini-flash-latest");
        assert_eq!(
            name("vertex_ai/gemini-3-pro-preview", "vertex_ai"),
            "gemini-3-pro-preview"
        );
        assert_eq!(
            name(
                "vertex_ai/gemini-3.1-flash-lite",
                "vertex_ai-language-models"
            ),
            "gemini-3.1-flash-lite"
        );
        assert_eq!(
            name(
                "vertex_ai/claude-sonnet-4-5@20250929",
                "vertex_ai-anthropic_models"
            ),
            "claude-sonnet-4-5@20250929"
        );
        assert_eq!(
            name("gemini-2.5-pro", "vertex_ai-language-models"),
            "gemini-2.5-pro"
        );
        // Another publisher's model, another provider's prefix, no model.
        assert_eq!(
            name("vertex_ai/xai/grok-4.3", "vertex_ai"),
            "vertex_ai/xai/grok-4.3"
        );
        assert_eq!(
            name("gemini/gemini-2.5-pro", "openai"),
            "gemini/gemini-2.5-pro"
        );
        assert_eq!(
            name("vertex_ai/gemini-2.5-pro", "gemini"),
            "vertex_ai/gemini-2.5-pro"
        );
        assert_eq!(name("gemini/", "gemini"), "gemini/");
        assert_eq!(
            client_name("gemini/gemini-2.5-pro", None),
            "gemini/gemini-2.5-pro"
        );
    }

    fn gemini_api() -> ModelPrice {
        ModelPrice {
            input: price("1.25"),
            cached_input: price("0.125"),
            cache_write: price("1.25"),
            output: price("10"),
            priority: Some(PriorityPrices {
                input: price("2.25"),
                output: price("18"),
                cached_input: Some(price("0.225")),
            }),
            long_context: Some(LongContextPrices {
                threshold_tokens: 200_000,
                input: price("2.5"),
                output: price("15"),
            }),
            max_output_tokens: Some(65_536),
            context_window: Some(1_048_576),
            reasoning: true,
            tool_call_usd: [(HostedTool::GoogleSearch, 35_000)].into(),
            ..ModelPrice::default()
        }
    }

    #[test]
    fn the_covering_entry_bills_no_call_below_either() {
        let vertex = ModelPrice {
            output: price("12"),
            priority: None,
            long_context: None,
            max_output_tokens: Some(65_535),
            max_thinking_tokens: Some(32_768),
            reasoning: false,
            tool_call_usd: [
                (HostedTool::GoogleSearch, 40_000),
                (HostedTool::WebSearch, 1),
            ]
            .into(),
            ..gemini_api()
        };
        let kept = covering(&gemini_api(), &vertex);
        assert_eq!(kept.input, price("1.25"));
        assert_eq!(kept.output, price("12"));
        assert_eq!(kept.priority, None, "only one entry prices priority");
        assert_eq!(
            kept.long_context,
            gemini_api().long_context,
            "the tier Google applies by itself is kept"
        );
        assert_eq!(kept.max_output_tokens, Some(65_536));
        assert_eq!(kept.max_thinking_tokens, Some(32_768));
        assert!(kept.reasoning);
        assert_eq!(
            kept.tool_call_usd,
            [(HostedTool::GoogleSearch, 40_000)].into(),
            "a tool one entry does not price is refused"
        );
        assert_eq!(
            covering(&vertex, &gemini_api()),
            kept,
            "order does not matter"
        );
        assert_eq!(covering(&gemini_api(), &gemini_api()), gemini_api());
    }

    #[test]
    fn a_tier_from_one_entry_is_raised_to_the_others_rates() {
        let flat = ModelPrice {
            input: price("3"),
            output: price("20"),
            long_context: None,
            ..gemini_api()
        };
        let tier = covering(&gemini_api(), &flat).long_context.unwrap();
        assert_eq!((tier.input, tier.output), (price("3"), price("20")));
        let lower = ModelPrice {
            long_context: Some(LongContextPrices {
                threshold_tokens: 128_000,
                input: price("2"),
                output: price("16"),
            }),
            ..gemini_api()
        };
        let tier = covering(&gemini_api(), &lower).long_context.unwrap();
        assert_eq!(tier.threshold_tokens, 128_000);
        assert_eq!((tier.input, tier.output), (price("2.5"), price("16")));
    }

    #[test]
    fn names_priced_twice_are_folded() {
        let vertex = ModelPrice {
            max_output_tokens: Some(65_535),
            ..gemini_api()
        };
        let models = by_name([
            ("gemini-2.5-pro".to_owned(), vertex),
            ("gemini-2.5-flash".to_owned(), ModelPrice::default()),
            ("gemini-2.5-pro".to_owned(), gemini_api()),
        ]);
        assert_eq!(models.len(), 2);
        assert_eq!(models["gemini-2.5-pro"], gemini_api());
    }
}
