//! `tollgate prices import`: LiteLLM's `model_prices_and_context_window.json`
//! written out as tollgate's own TOML price file, so the table can be
//! refreshed from a maintained source and then reviewed and committed.
//!
//! Only entries tollgate can proxy are kept: the token-priced chat,
//! completion, responses and embedding models of OpenAI and Anthropic,
//! under their plain names (LiteLLM's `provider/model` aliases are left
//! out). Every price is converted exactly as the gateway loads the JSON
//! itself, so the TOML prices a call the same as the JSON would.

use std::fmt::Write;

use glob::Pattern;

use super::litellm::{self, LiteLlmEntry};
use super::{ModelPrice, PriceError};
use crate::money::{Price, UsdMicros};

/// LiteLLM's names for the providers tollgate speaks.
const PROVIDERS: [&str; 3] = ["openai", "text-completion-openai", "anthropic"];

/// LiteLLM's modes of the models tollgate proxies.
const MODES: [&str; 4] = ["chat", "completion", "responses", "embedding"];

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Prices(#[from] PriceError),
    #[error("--models {pattern:?} is not a glob pattern: {message}")]
    Glob { pattern: String, message: String },
    #[error("{file}: no OpenAI or Anthropic chat, completion or embedding model matches")]
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
    let mut entries: Vec<LiteLlmEntry> = litellm::entries(text, file)?
        .into_iter()
        .filter(is_proxied)
        .filter(|entry| patterns.is_empty() || patterns.iter().any(|p| p.matches(&entry.model)))
        .collect();
    if entries.is_empty() {
        return Err(ImportError::Empty {
            file: file.to_owned(),
        });
    }
    entries.sort_by(|a, b| a.model.cmp(&b.model));
    let mut out = format!(
        "# Model prices for tollgate, imported from LiteLLM's {file}\n\
         # by `tollgate prices import`. Review against the providers' pricing\n\
         # pages before use: a wrong price is a wrong charge against every cap.\n"
    );
    for entry in &entries {
        out.push('\n');
        write_entry(&mut out, &entry.model, &entry.price);
    }
    Ok(out)
}

fn is_proxied(entry: &LiteLlmEntry) -> bool {
    let known = |value: &Option<String>, among: &[&str]| {
        value.as_deref().is_some_and(|value| among.contains(&value))
    };
    known(&entry.provider, &PROVIDERS) && known(&entry.mode, &MODES) && !entry.model.contains('/')
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
        "gemini-2.5-pro": {"litellm_provider": "gemini", "mode": "chat",
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
        let none = litellm_to_toml(LITELLM, "prices.json", &["gemini-*".to_owned()]);
        assert!(matches!(none, Err(ImportError::Empty { .. })));
        let bad = litellm_to_toml(LITELLM, "prices.json", &["[".to_owned()]);
        assert!(matches!(bad, Err(ImportError::Glob { .. })));
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
