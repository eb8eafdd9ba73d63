//! `tollgate prices import`: LiteLLM's `model_prices_and_context_window.json`
//! written out as tollgate's own TOML price file, so the table can be
//! refreshed from a maintained source and then reviewed and committed.
//!
//! Only entries tollgate can proxy are kept: the token-priced chat,
//! completion, responses and embedding models of OpenAI and Anthropic,
//! under their plain names (LiteLLM's `provider/model` aliases are left
//! out), and the Gemini and Claude chat models of the Gemini API and
//! Vertex AI, under the names clients send (`gemini/gemini-2.5-pro` →
//! `gemini-2.5-pro`, `vertex_ai/claude-sonnet-4-5@20250929` →
//! `claude-sonnet-4-5@20250929`). A model LiteLLM lists under both the
//! Gemini API and Vertex AI is written once, priced to bound what either
//! bills (see `litellm_names`). Claude on Amazon Bedrock is written under
//! the model id a call is priced by (`us.anthropic.claude-…-v1:0` →
//! `anthropic.claude-…-v1:0`, the dearer price kept when LiteLLM lists
//! both), and Azure OpenAI's entries keep their `azure/` names, for an
//! azure provider's `deployments` to name. Every price is converted exactly as the
//! gateway loads the JSON itself, so the TOML prices a call the same as
//! the JSON would. LiteLLM knows no thinking budgets: a Gemini thinking
//! model's `max_thinking_tokens` is the reviewer's to add.

use std::fmt::Write;

use glob::Pattern;

use super::litellm::{self, LiteLlmEntry};
use super::litellm_names::{self, BEDROCK_PROVIDERS, GEMINI_PROVIDERS, VERTEX_ANTHROPIC_PROVIDER};
use super::{ModelPrice, PriceError};
use crate::money::{Price, UsdMicros};

/// LiteLLM's names for the OpenAI and Anthropic providers tollgate speaks.
const PROVIDERS: [&str; 3] = ["openai", "text-completion-openai", "anthropic"];

/// LiteLLM's name for Azure OpenAI, whose entries keep their `azure/` names
/// (`azure/gpt-4o`, `azure/eu/gpt-4o` for a data zone): an azure
/// provider's `deployments` map each deployment to one of them.
const AZURE_PROVIDER: &str = "azure";

/// LiteLLM's modes of the OpenAI and Anthropic models tollgate proxies.
const MODES: [&str; 4] = ["chat", "completion", "responses", "embedding"];

/// The only mode of Google's models tollgate proxies: `generateContent`
/// and Vertex's `rawPredict` (Claude) are chat.
const GOOGLE_MODE: &str = "chat";

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Prices(#[from] PriceError),
    #[error("--models {pattern:?} is not a glob pattern: {message}")]
    Glob { pattern: String, message: String },
    #[error(
        "{file}: no OpenAI, Anthropic, Gemini API, Vertex AI, Azure or Bedrock model tollgate \
         proxies matches"
    )]
    Empty { file: String },
}

/// The TOML price file of the entries of LiteLLM's `text` (read from
/// `file`, named in messages) whose names match any of `globs` (every
/// entry when there are none), sorted by name.
pub fn litellm_to_toml(text: &str, file: &str, globs: &[String]) -> Result<String, ImportError> {
    let patterns = globs
        .iter()
        .map(|glob| {
            Pattern::new(glob).map_err(|e| ImportError::Glob {
                pattern: glob.clone(),
                message: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let entries = litellm::entries(text, file)?
        .into_iter()
        .filter(is_proxied)
        .filter(|entry| patterns.is_empty() || patterns.iter().any(|p| p.matches(&entry.model)))
        .map(|entry| (entry.model, entry.price));
    // Sorted by name, one entry a name.
    let models = litellm_names::by_name(entries);
    if models.is_empty() {
        return Err(ImportError::Empty {
            file: file.to_owned(),
        });
    }
    let mut out = format!(
        "# Model prices for tollgate, imported from LiteLLM's {file}\n\
         # by `tollgate prices import`. Review against the providers' pricing\n\
         # pages before use: a wrong price is a wrong charge against every cap.\n"
    );
    for (model, price) in &models {
        out.push('\n');
        write_entry(&mut out, model, price);
    }
    Ok(out)
}

/// Whether tollgate proxies the entry's model under its name. Of Google's
/// entries only Gemini models (Vertex: Claude ones too) are kept: the
/// Gemma, Lyria, MedLM and Deep Research entries LiteLLM lists beside
/// them are served by other APIs or billed in other units.
fn is_proxied(entry: &LiteLlmEntry) -> bool {
    let known = |value: &Option<String>, among: &[&str]| {
        value.as_deref().is_some_and(|value| among.contains(&value))
    };
    let family_serves = if known(&entry.provider, &PROVIDERS) {
        known(&entry.mode, &MODES)
    } else if known(&entry.provider, &GEMINI_PROVIDERS) {
        known(&entry.mode, &[GOOGLE_MODE]) && entry.model.starts_with("gemini-")
    } else if known(&entry.provider, &[VERTEX_ANTHROPIC_PROVIDER]) {
        known(&entry.mode, &[GOOGLE_MODE]) && entry.model.starts_with("claude-")
    } else if known(&entry.provider, &BEDROCK_PROVIDERS) {
        // Claude, which the bedrock family serves.
        known(&entry.mode, &[GOOGLE_MODE]) && entry.model.starts_with("anthropic.claude-")
    } else if known(&entry.provider, &[AZURE_PROVIDER]) {
        return known(&entry.mode, &MODES) && entry.model.starts_with("azure/");
    } else {
        false
    };
    family_serves && !entry.model.contains('/')
}

/// One `[models."name"]` table; fields equal to their defaults are left
/// out.
pub fn write_entry(out: &mut String, model: &str, price: &ModelPrice) {
    // Writing to a String cannot fail.
    let _ = writeln!(out, "[models.{model:?}]");
    let mut line = |key: &str, value: String| {
        let _ = writeln!(out, "{key} = {value}");
    };
    let decimal = |price: Price| format!("{:?}", per_mtok(price));
    line("input_per_mtok", decimal(price.input));
    if price.cached_input != price.input {
        line("cached_input_per_mtok", decimal(price.cached_input));
    }
    if price.cache_write != price.input {
        line("cache_write_per_mtok", decimal(price.cache_write));
    }
    if let Some(hour) = price.cache_write_1h {
        line("cache_write_1h_per_mtok", decimal(hour));
    }
    line("output_per_mtok", decimal(price.output));
    if let Some(priority) = price.priority {
        line("priority_input_per_mtok", decimal(priority.input));
        if let Some(cached) = priority.cached_input {
            line("priority_cached_input_per_mtok", decimal(cached));
        }
        line("priority_output_per_mtok", decimal(priority.output));
    }
    if let Some(long) = price.long_context {
        line(
            "long_context_threshold_tokens",
            long.threshold_tokens.to_string(),
        );
        line("long_context_input_per_mtok", decimal(long.input));
        line("long_context_output_per_mtok", decimal(long.output));
    }
    if let Some(tokens) = price.max_output_tokens {
        line("max_output_tokens", tokens.to_string());
    }
    if let Some(tokens) = price.context_window {
        line("context_window", tokens.to_string());
    }
    if price.input_bytes_per_token != 1 {
        line(
            "input_bytes_per_token",
            price.input_bytes_per_token.to_string(),
        );
    }
    if let Some(tokens) = price.max_thinking_tokens {
        line("max_thinking_tokens", tokens.to_string());
    }
    if price.reasoning {
        line("reasoning", "true".to_owned());
    }
    if !price.tool_call_usd.is_empty() {
        let fees: Vec<String> = price
            .tool_call_usd
            .iter()
            .map(|(tool, fee)| format!("{} = {:?}", tool.name(), usd(*fee)))
            .collect();
        line("tool_call_usd", format!("{{ {} }}", fees.join(", ")));
    }
}

/// A price as decimal USD per million tokens, without trailing zeros.
fn per_mtok(price: Price) -> String {
    decimal_micros(price.micros_per_mtok())
}

/// µUSD as decimal USD, without trailing zeros.
fn usd(micros: UsdMicros) -> String {
    decimal_micros(micros)
}

fn decimal_micros(micros: u64) -> String {
    let (whole, frac) = (micros / 1_000_000, micros % 1_000_000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:06}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::HostedTool;
    use crate::prices::PriceTable;

    const LITELLM: &str = r#"{
        "sample_spec": {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0},
        "gpt-5": {
            "litellm_provider": "openai", "mode": "chat",
            "input_cost_per_token": 1.25e-06, "output_cost_per_token": 1e-05,
            "cache_read_input_token_cost": 1.25e-07,
            "input_cost_per_token_priority": 2.5e-06, "output_cost_per_token_priority": 2e-05,
            "cache_read_input_token_cost_priority": 2.5e-07,
            "max_input_tokens": 272000, "max_output_tokens": 128000,
            "supports_reasoning": true,
            "search_context_cost_per_query": {"search_context_size_low": 0.01, "search_context_size_high": 0.01}
        },
        "gpt-5.4": {
            "litellm_provider": "openai", "mode": "chat",
            "input_cost_per_token": 2.5e-06, "output_cost_per_token": 1.5e-05,
            "input_cost_per_token_above_272k_tokens": 5e-06,
            "output_cost_per_token_above_272k_tokens": 2.25e-05,
            "input_cost_per_token_above_272k_tokens_priority": 1e-05,
            "max_input_tokens": 1050000
        },
        "claude-sonnet-4-5": {
            "litellm_provider": "anthropic", "mode": "chat",
            "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05,
            "cache_creation_input_token_cost": 3.75e-06,
            "cache_creation_input_token_cost_above_1hr": 6e-06,
            "cache_read_input_token_cost": 3e-07
        },
        "text-embedding-3-small": {
            "litellm_provider": "openai", "mode": "embedding",
            "input_cost_per_token": 2e-08, "output_cost_per_token": 0.0
        },
        "gpt-3.5-turbo-instruct": {
            "litellm_provider": "text-completion-openai", "mode": "completion",
            "input_cost_per_token": 1.5e-06, "output_cost_per_token": 2e-06
        },
        "dall-e-3": {"litellm_provider": "openai", "mode": "image_generation"},
        "tts-1": {"litellm_provider": "openai", "mode": "audio_speech",
                  "input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06},
        "openai/gpt-5": {"litellm_provider": "openai", "mode": "chat",
                         "input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06},
        "gemini/gemini-2.5-pro": {"litellm_provider": "gemini", "mode": "chat",
                                  "input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06}
    }"#;

    #[test]
    fn imports_what_tollgate_proxies_with_every_tier() {
        let toml = litellm_to_toml(LITELLM, "prices.json", &[]).unwrap();
        let imported = PriceTable::from_toml_str(&toml).unwrap();
        let names: Vec<&str> = imported.models().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            [
                "claude-sonnet-4-5",
                "gemini-2.5-pro",
                "gpt-3.5-turbo-instruct",
                "gpt-5",
                "gpt-5.4",
                "text-embedding-3-small"
            ]
        );
        // The TOML prices every model exactly as the JSON does.
        let json = PriceTable::from_litellm_json(LITELLM).unwrap();
        for (name, price) in imported.models() {
            assert_eq!(Some(price), json.get(name), "{name}");
        }
        assert!(
            toml.contains("[models.\"gpt-5\"]\ninput_per_mtok = \"1.25\"\n"),
            "{toml}"
        );
        assert!(
            toml.contains("priority_cached_input_per_mtok = \"0.25\""),
            "{toml}"
        );
        assert!(toml.contains("cache_write_1h_per_mtok = \"6\""), "{toml}");
        assert!(
            toml.contains("long_context_threshold_tokens = 272000"),
            "{toml}"
        );
        assert!(
            toml.contains("long_context_output_per_mtok = \"22.5\""),
            "{toml}"
        );
        assert!(toml.contains("reasoning = true"), "{toml}");
        assert!(
            toml.contains(
                "tool_call_usd = { web_search = \"0.01\", web_search_preview = \"0.01\" }"
            ),
            "{toml}"
        );
        let long = json.get("gpt-5.4").unwrap().long_context.unwrap();
        assert_eq!(long.input, Price::per_mtok("5").unwrap());
    }

    #[test]
    fn globs_choose_the_models() {
        let globs = ["claude-*".to_owned(), "gpt-5".to_owned()];
        let toml = litellm_to_toml(LITELLM, "prices.json", &globs).unwrap();
        let table = PriceTable::from_toml_str(&toml).unwrap();
        let names: Vec<&str> = table.models().map(|(name, _)| name).collect();
        assert_eq!(names, ["claude-sonnet-4-5", "gpt-5"]);
        let none = litellm_to_toml(LITELLM, "prices.json", &["mistral-*".to_owned()]);
        assert!(matches!(none, Err(ImportError::Empty { .. })));
        let bad = litellm_to_toml(LITELLM, "prices.json", &["[".to_owned()]);
        assert!(matches!(bad, Err(ImportError::Glob { .. })));
    }

    /// Excerpts of LiteLLM's Gemini API and Vertex AI entries, with the
    /// neighbours the import leaves out.
    const GOOGLE: &str = r#"{
        "gemini/gemini-2.5-pro": {
            "litellm_provider": "gemini", "mode": "chat",
            "input_cost_per_token": 1.25e-06, "output_cost_per_token": 1e-05,
            "cache_read_input_token_cost": 1.25e-07,
            "input_cost_per_token_above_200k_tokens": 2.5e-06,
            "output_cost_per_token_above_200k_tokens": 1.5e-05,
            "cache_read_input_token_cost_above_200k_tokens": 2.5e-07,
            "input_cost_per_token_priority": 2.25e-06, "output_cost_per_token_priority": 1.8e-05,
            "output_cost_per_token_above_200k_tokens_priority": 2.7e-05,
            "input_cost_per_token_batches": 6.25e-07,
            "max_input_tokens": 1048576, "max_output_tokens": 65536,
            "supports_reasoning": true,
            "search_context_cost_per_query": {"search_context_size_low": 0.035,
                "search_context_size_medium": 0.035, "search_context_size_high": 0.035},
            "google_maps_grounding_cost_per_query": 0.025
        },
        "gemini-2.5-pro": {
            "litellm_provider": "vertex_ai-language-models", "mode": "chat",
            "input_cost_per_token": 1.25e-06, "output_cost_per_token": 1e-05,
            "cache_read_input_token_cost": 1.25e-07,
            "input_cost_per_token_above_200k_tokens": 2.5e-06,
            "output_cost_per_token_above_200k_tokens": 1.5e-05,
            "max_input_tokens": 1048576, "max_output_tokens": 65535,
            "supports_reasoning": true,
            "search_context_cost_per_query": {"search_context_size_low": 0.035,
                "search_context_size_medium": 0.035, "search_context_size_high": 0.035}
        },
        "gemini/gemini-2.5-flash": {
            "litellm_provider": "gemini", "mode": "chat",
            "input_cost_per_token": 3e-07, "input_cost_per_audio_token": 1e-06,
            "output_cost_per_token": 2.5e-06, "output_cost_per_reasoning_token": 2.5e-06,
            "cache_read_input_token_cost": 3e-08,
            "max_input_tokens": 1048576, "max_output_tokens": 65536, "supports_reasoning": true
        },
        "gemini/gemini-2.5-flash-preview-04-17": {
            "litellm_provider": "gemini", "mode": "chat",
            "input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07,
            "output_cost_per_reasoning_token": 3.5e-06, "max_output_tokens": 65535
        },
        "vertex_ai/gemini-3-pro-preview": {
            "litellm_provider": "vertex_ai", "mode": "chat",
            "input_cost_per_token": 2e-06, "output_cost_per_token": 1.2e-05,
            "cache_read_input_token_cost": 2e-07,
            "input_cost_per_token_above_200k_tokens": 4e-06,
            "output_cost_per_token_above_200k_tokens": 1.8e-05,
            "max_input_tokens": 1048576, "max_output_tokens": 65535, "supports_reasoning": true,
            "search_context_cost_per_query": {"search_context_size_low": 0.014,
                "search_context_size_medium": 0.014, "search_context_size_high": 0.014},
            "web_search_billing_unit": "per_query"
        },
        "vertex_ai/claude-sonnet-4-5@20250929": {
            "litellm_provider": "vertex_ai-anthropic_models", "mode": "chat",
            "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05,
            "cache_creation_input_token_cost": 3.75e-06,
            "cache_creation_input_token_cost_above_1hr": 6e-06,
            "cache_read_input_token_cost": 3e-07,
            "input_cost_per_token_above_200k_tokens": 6e-06,
            "output_cost_per_token_above_200k_tokens": 2.25e-05,
            "max_input_tokens": 200000, "max_output_tokens": 64000, "supports_reasoning": true,
            "search_context_cost_per_query": {"search_context_size_low": 0.01,
                "search_context_size_medium": 0.01, "search_context_size_high": 0.01}
        },
        "gemini/gemma-3-27b-it": {"litellm_provider": "gemini", "mode": "chat",
                                  "input_cost_per_token": 0, "output_cost_per_token": 0},
        "gemini/lyria-3-pro-preview": {"litellm_provider": "gemini", "mode": "chat",
                                       "input_cost_per_token": 0, "output_cost_per_token": 0},
        "gemini/gemini-embedding-001": {"litellm_provider": "gemini", "mode": "embedding",
                                        "input_cost_per_token": 1.5e-07, "output_cost_per_token": 0},
        "vertex_ai/xai/grok-4.3": {"litellm_provider": "vertex_ai", "mode": "chat",
                                   "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05},
        "vertex_ai/mistral-large@2411": {"litellm_provider": "vertex_ai-mistral_models",
                                         "mode": "chat", "input_cost_per_token": 2e-06,
                                         "output_cost_per_token": 6e-06}
    }"#;

    #[test]
    fn imports_bedrock_claude_by_the_model_a_profile_runs_and_azure_by_its_own_names() {
        let litellm = r#"{
            "anthropic.claude-haiku-4-5-20251001-v1:0": {"litellm_provider": "bedrock_converse",
                "mode": "chat", "input_cost_per_token": 1e-06, "output_cost_per_token": 5e-06},
            "us.anthropic.claude-haiku-4-5-20251001-v1:0": {"litellm_provider": "bedrock_converse",
                "mode": "chat", "input_cost_per_token": 1.1e-06, "output_cost_per_token": 5.5e-06},
            "bedrock/us-east-1/anthropic.claude-3-haiku-20240307-v1:0": {"litellm_provider": "bedrock",
                "mode": "chat", "input_cost_per_token": 2.5e-07, "output_cost_per_token": 1.25e-06},
            "meta.llama3-70b-instruct-v1:0": {"litellm_provider": "bedrock", "mode": "chat",
                "input_cost_per_token": 2.65e-06, "output_cost_per_token": 3.5e-06},
            "azure/gpt-4o": {"litellm_provider": "azure", "mode": "chat",
                "input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05},
            "azure/eu/gpt-4o": {"litellm_provider": "azure", "mode": "chat",
                "input_cost_per_token": 2.75e-06, "output_cost_per_token": 1.1e-05},
            "azure/dall-e-3": {"litellm_provider": "azure", "mode": "image_generation"}
        }"#;
        let toml = litellm_to_toml(litellm, "prices.json", &[]).unwrap();
        let imported = PriceTable::from_toml_str(&toml).unwrap();
        let names: Vec<&str> = imported.models().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            [
                "anthropic.claude-haiku-4-5-20251001-v1:0",
                "azure/eu/gpt-4o",
                "azure/gpt-4o"
            ]
        );
        // The profile's and the model's entries are one, at the dearer prices.
        let haiku = imported
            .get("anthropic.claude-haiku-4-5-20251001-v1:0")
            .unwrap();
        assert_eq!(haiku.input, Price::per_mtok("1.1").unwrap());
        assert_eq!(haiku.output, Price::per_mtok("5.5").unwrap());
    }

    #[test]
    fn imports_gemini_and_vertex_models_under_the_names_clients_send() {
        let toml = litellm_to_toml(GOOGLE, "prices.json", &[]).unwrap();
        let imported = PriceTable::from_toml_str(&toml).unwrap();
        let names: Vec<&str> = imported.models().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            [
                "claude-sonnet-4-5@20250929",
                "gemini-2.5-flash",
                "gemini-2.5-flash-preview-04-17",
                "gemini-2.5-pro",
                "gemini-3-pro-preview"
            ]
        );
        // Loading the JSON itself sees the same names and prices.
        let json = PriceTable::from_litellm_json(GOOGLE).unwrap();
        for (name, price) in imported.models() {
            assert_eq!(Some(price), json.get(name), "{name}");
        }
        assert_eq!(json.get("gemini/gemini-2.5-pro"), None);

        // Listed by the Gemini API and by Vertex: one entry, bounding both.
        let pro = imported.get("gemini-2.5-pro").unwrap();
        assert_eq!(pro.input, Price::per_mtok("1.25").unwrap());
        assert_eq!(pro.cached_input, Price::per_mtok("0.125").unwrap());
        let long = pro.long_context.unwrap();
        assert_eq!(long.threshold_tokens, 200_000);
        assert_eq!(
            (long.input, long.output),
            (
                Price::per_mtok("2.5").unwrap(),
                Price::per_mtok("15").unwrap()
            )
        );
        assert_eq!(pro.max_output_tokens, Some(65_536));
        assert_eq!(pro.context_window, Some(1_048_576));
        assert!(pro.reasoning);
        assert_eq!(pro.priority, None, "Vertex's entry has no priority prices");
        assert_eq!(pro.tool_call(HostedTool::GoogleSearch), Some(35_000));
        assert_eq!(pro.tool_call(HostedTool::WebSearch), None);
        assert_eq!(pro.max_thinking_tokens, None, "LiteLLM does not say");
        assert!(
            toml.contains(
                "[models.\"gemini-2.5-pro\"]\ninput_per_mtok = \"1.25\"\n\
                 cached_input_per_mtok = \"0.125\"\noutput_per_mtok = \"10\"\n\
                 long_context_threshold_tokens = 200000\n\
                 long_context_input_per_mtok = \"2.5\"\n\
                 long_context_output_per_mtok = \"15\"\n\
                 max_output_tokens = 65536\ncontext_window = 1048576\nreasoning = true\n\
                 tool_call_usd = { google_search = \"0.035\" }\n"
            ),
            "{toml}"
        );

        // Thinking is billed as output: the dearer of the two prices.
        let preview = imported.get("gemini-2.5-flash-preview-04-17").unwrap();
        assert_eq!(preview.output, Price::per_mtok("3.5").unwrap());
        let gemini_3 = imported.get("gemini-3-pro-preview").unwrap();
        assert_eq!(gemini_3.tool_call(HostedTool::GoogleSearch), Some(14_000));
        let claude = imported.get("claude-sonnet-4-5@20250929").unwrap();
        assert_eq!(claude.cache_write_1h, Some(Price::per_mtok("6").unwrap()));
        assert_eq!(claude.tool_call(HostedTool::WebSearch), Some(10_000));
        assert_eq!(claude.tool_call(HostedTool::GoogleSearch), None);
        assert!(claude.long_context.is_some());
    }

    #[test]
    fn max_thinking_tokens_is_written_when_known() {
        let table = PriceTable::from_toml_str(
            "[models.\"m\"]\ninput_per_mtok = \"1\"\noutput_per_mtok = \"2\"\n\
             max_output_tokens = 65536\nmax_thinking_tokens = 32768\n",
        )
        .unwrap();
        let price = table.get("m").unwrap();
        let mut out = String::new();
        write_entry(&mut out, "m", price);
        assert!(out.contains("max_thinking_tokens = 32768\n"), "{out}");
        let again = PriceTable::from_toml_str(&out).unwrap();
        assert_eq!(again.get("m"), Some(price));
    }

    #[test]
    fn decimals_are_exact_and_short() {
        assert_eq!(decimal_micros(0), "0");
        assert_eq!(decimal_micros(150_000), "0.15");
        assert_eq!(decimal_micros(3_000_000), "3");
        assert_eq!(decimal_micros(22_500_000), "22.5");
        assert_eq!(decimal_micros(1), "0.000001");
    }
}
