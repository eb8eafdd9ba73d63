//! tollgate's own price file: `[models."name"]` tables with prices as
//! decimal strings in USD per million tokens (an integer is taken as
//! written; a float is refused, since it cannot say an exact price),
//! token limits (output, context window, thinking), and `tool_call_usd`
//! per hosted tool use.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{
    non_empty, LongContextPrices, ModelPrice, PriceError, PriceTable, PriorityPrices,
    MAX_INPUT_BYTES_PER_TOKEN,
};
use crate::hosted::HostedTool;
use crate::money::{parse_usd, Price, UsdMicros};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPriceFile {
    #[serde(default)]
    models: BTreeMap<String, RawModelPrice>,
}

/// Prices stay [`toml::Value`]s until checked so a float or a negative gets
/// a message naming the model and field, not a bare type error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModelPrice {
    input_per_mtok: toml::Value,
    output_per_mtok: toml::Value,
    cached_input_per_mtok: Option<toml::Value>,
    cache_write_per_mtok: Option<toml::Value>,
    cache_write_1h_per_mtok: Option<toml::Value>,
    priority_input_per_mtok: Option<toml::Value>,
    priority_output_per_mtok: Option<toml::Value>,
    priority_cached_input_per_mtok: Option<toml::Value>,
    long_context_threshold_tokens: Option<toml::Value>,
    long_context_input_per_mtok: Option<toml::Value>,
    long_context_output_per_mtok: Option<toml::Value>,
    max_output_tokens: Option<toml::Value>,
    context_window: Option<toml::Value>,
    max_thinking_tokens: Option<toml::Value>,
    input_bytes_per_token: Option<toml::Value>,
    #[serde(default)]
    reasoning: bool,
    #[serde(default)]
    tool_call_usd: BTreeMap<String, toml::Value>,
}

pub(super) fn parse(text: &str, file: &str) -> Result<PriceTable, PriceError> {
    let raw: RawPriceFile = toml::from_str(text).map_err(|e| PriceError::Parse {
        file: file.to_owned(),
        message: e.to_string(),
    })?;
    let mut models = BTreeMap::new();
    for (model, raw) in raw.models {
        let field_error = |field: &str, message: String| PriceError::Field {
            file: file.to_owned(),
            model: model.clone(),
            field: field.to_owned(),
            message,
        };
        if model.trim().is_empty() {
            return Err(field_error("name", "a model name must not be empty".into()));
        }
        let price = |field: &str, value: &toml::Value| {
            toml_price(value).map_err(|message| field_error(field, message))
        };
        let tokens = |field: &str, value: Option<&toml::Value>| {
            value
                .map(toml_token_count)
                .transpose()
                .map_err(|message| field_error(field, message))
        };
        let input = price("input_per_mtok", &raw.input_per_mtok)?;
        let output = price("output_per_mtok", &raw.output_per_mtok)?;
        let cached_input = match &raw.cached_input_per_mtok {
            Some(value) => price("cached_input_per_mtok", value)?,
            None => input,
        };
        let cache_write = match &raw.cache_write_per_mtok {
            Some(value) => price("cache_write_per_mtok", value)?,
            None => input,
        };
        let optional = |field: &str, value: Option<&toml::Value>| {
            value.map(|value| price(field, value)).transpose()
        };
        let cache_write_1h = optional(
            "cache_write_1h_per_mtok",
            raw.cache_write_1h_per_mtok.as_ref(),
        )?;
        let priority = match (
            optional(
                "priority_input_per_mtok",
                raw.priority_input_per_mtok.as_ref(),
            )?,
            optional(
                "priority_output_per_mtok",
                raw.priority_output_per_mtok.as_ref(),
            )?,
            optional(
                "priority_cached_input_per_mtok",
                raw.priority_cached_input_per_mtok.as_ref(),
            )?,
        ) {
            (None, None, None) => None,
            (Some(input), Some(output), cached_input) => Some(PriorityPrices {
                input,
                output,
                cached_input,
            }),
            _ => {
                return Err(field_error(
                    "priority_input_per_mtok",
                    "the priority tier needs both priority_input_per_mtok and \
                     priority_output_per_mtok"
                        .into(),
                ))
            }
        };
        let long_context = match (
            tokens(
                "long_context_threshold_tokens",
                raw.long_context_threshold_tokens.as_ref(),
            )?,
            optional(
                "long_context_input_per_mtok",
                raw.long_context_input_per_mtok.as_ref(),
            )?,
            optional(
                "long_context_output_per_mtok",
                raw.long_context_output_per_mtok.as_ref(),
            )?,
        ) {
            (None, None, None) => None,
            (Some(threshold_tokens), Some(input), Some(output)) => Some(LongContextPrices {
                threshold_tokens,
                input,
                output,
            }),
            _ => {
                return Err(field_error(
                    "long_context_threshold_tokens",
                    "the long context tier needs long_context_threshold_tokens, \
                     long_context_input_per_mtok and long_context_output_per_mtok together"
                        .into(),
                ))
            }
        };
        let max_output_tokens = tokens("max_output_tokens", raw.max_output_tokens.as_ref())?;
        let context_window = tokens("context_window", raw.context_window.as_ref())?;
        let max_thinking_tokens = tokens("max_thinking_tokens", raw.max_thinking_tokens.as_ref())?;
        let input_bytes_per_token = match &raw.input_bytes_per_token {
            None => 1,
            Some(toml::Value::Integer(n)) if (1..=MAX_INPUT_BYTES_PER_TOKEN as i64).contains(n) => {
                *n as u64
            }
            Some(other) => {
                return Err(field_error(
                    "input_bytes_per_token",
                    format!(
                        "{other} is not a whole number from 1 to {MAX_INPUT_BYTES_PER_TOKEN} \
                         (1, the default, bounds any tokenizer)"
                    ),
                ))
            }
        };
        let mut tool_call_usd = BTreeMap::new();
        for (name, value) in &raw.tool_call_usd {
            let field = format!("tool_call_usd.{name}");
            let tool = HostedTool::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = HostedTool::ALL.iter().map(|t| t.name()).collect();
                field_error(
                    &field,
                    format!("not a hosted tool; the tools are {}", known.join(", ")),
                )
            })?;
            let fee = toml_usd(value).map_err(|message| field_error(&field, message))?;
            tool_call_usd.insert(tool, fee);
        }
        let entry = ModelPrice {
            input,
            cached_input,
            cache_write,
            cache_write_1h,
            output,
            priority,
            long_context,
            max_output_tokens,
            context_window,
            max_thinking_tokens,
            input_bytes_per_token,
            reasoning: raw.reasoning,
            tool_call_usd,
        };
        models.insert(model, entry);
    }
    non_empty(models, file)
}

fn toml_price(value: &toml::Value) -> Result<Price, String> {
    match value {
        toml::Value::String(text) => Price::per_mtok(text).map_err(|e| e.to_string()),
        toml::Value::Integer(n) if *n >= 0 => {
            Price::per_mtok(&n.to_string()).map_err(|e| e.to_string())
        }
        toml::Value::Integer(n) => Err(format!("{n} is negative; a price is zero or more")),
        toml::Value::Float(x) => Err(format!(
            "{x} is a float; write the price as a decimal string like \"0.15\" so it is exact"
        )),
        other => Err(format!(
            "expected a decimal string like \"0.15\" (USD per million tokens), found a {}",
            other.type_str()
        )),
    }
}

/// A per-use price: decimal USD (`"0.01"`), exact to the µUSD.
fn toml_usd(value: &toml::Value) -> Result<UsdMicros, String> {
    match value {
        toml::Value::String(text) => parse_usd(text).map_err(|e| e.to_string()),
        toml::Value::Integer(n) if *n >= 0 => parse_usd(&n.to_string()).map_err(|e| e.to_string()),
        toml::Value::Integer(n) => Err(format!("{n} is negative; a price is zero or more")),
        toml::Value::Float(x) => Err(format!(
            "{x} is a float; write the price as a decimal string like \"0.01\" so it is exact"
        )),
        other => Err(format!(
            "expected a decimal string like \"0.01\" (USD per use), found a {}",
            other.type_str()
        )),
    }
}

fn toml_token_count(value: &toml::Value) -> Result<u64, String> {
    match value {
        toml::Value::Integer(n) if *n > 0 => u64::try_from(*n).map_err(|e| e.to_string()),
        toml::Value::Integer(n) => Err(format!("{n} is not a positive token count")),
        other => Err(format!(
            "expected a whole number of tokens, found a {}",
            other.type_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn price(text: &str) -> Price {
        Price::per_mtok(text).unwrap()
    }

    #[test]
    fn bad_tool_prices_are_named() {
        let base = "input_per_mtok = \"1\"\noutput_per_mtok = \"1\"\n";
        let unknown = toml_error(&format!(
            "{base}tool_call_usd = {{ code_execution = \"0.05\" }}"
        ));
        assert!(
            unknown.contains("tool_call_usd.code_execution") && unknown.contains("web_search"),
            "{unknown}"
        );
        let float = toml_error(&format!("{base}tool_call_usd = {{ web_search = 0.01 }}"));
        assert!(
            float.contains("tool_call_usd.web_search") && float.contains("decimal string"),
            "{float}"
        );
        let precise = toml_error(&format!(
            "{base}tool_call_usd = {{ web_search = \"0.0000001\" }}"
        ));
        assert!(precise.contains("decimal places"), "{precise}");
        let not_a_table = toml_error(&format!("{base}tool_call_usd = \"0.01\""));
        assert!(not_a_table.contains("tool_call_usd"), "{not_a_table}");
    }

    fn toml_error(body: &str) -> String {
        let text = format!("[models.\"m1\"]\n{body}\n");
        PriceTable::from_toml_str(&text).unwrap_err().to_string()
    }

    #[test]
    fn input_bytes_per_token_is_a_whole_number_from_1_to_4() {
        let table = |extra: &str| {
            PriceTable::from_toml_str(&format!(
                "[models.\"m1\"]\ninput_per_mtok = \"1\"\noutput_per_mtok = \"1\"\n{extra}"
            ))
        };
        assert_eq!(
            table("").unwrap().get("m1").unwrap().input_bytes_per_token,
            1
        );
        let three = table("input_bytes_per_token = 3").unwrap();
        assert_eq!(three.get("m1").unwrap().input_bytes_per_token, 3);
        for bad in ["0", "5", "2.5", "\"2\""] {
            let error = table(&format!("input_bytes_per_token = {bad}"))
                .unwrap_err()
                .to_string();
            assert!(error.contains("input_bytes_per_token"), "{bad}: {error}");
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let float = toml_error("input_per_mtok = 0.15\noutput_per_mtok = \"1\"");
        assert!(
            float.contains("\"m1\"") && float.contains("input_per_mtok"),
            "{float}"
        );
        assert!(float.contains("decimal string"), "{float}");

        let negative = toml_error("input_per_mtok = \"1\"\noutput_per_mtok = \"-1\"");
        assert!(
            negative.contains("output_per_mtok") && negative.contains("\"-1\""),
            "{negative}"
        );

        let negative_int = toml_error("input_per_mtok = -1\noutput_per_mtok = \"1\"");
        assert!(negative_int.contains("negative"), "{negative_int}");

        let precise = toml_error("input_per_mtok = \"0.0000001\"\noutput_per_mtok = \"1\"");
        assert!(precise.contains("decimal places"), "{precise}");

        let tokens =
            toml_error("input_per_mtok = \"1\"\noutput_per_mtok = \"1\"\ncontext_window = \"big\"");
        assert!(
            tokens.contains("context_window") && tokens.contains("\"m1\""),
            "{tokens}"
        );

        let thinking =
            toml_error("input_per_mtok = \"1\"\noutput_per_mtok = \"1\"\nmax_thinking_tokens = 0");
        assert!(
            thinking.contains("max_thinking_tokens") && thinking.contains("positive token count"),
            "{thinking}"
        );
        let thinking = toml_error(
            "input_per_mtok = \"1\"\noutput_per_mtok = \"1\"\nmax_thinking_tokens = \"dynamic\"",
        );
        assert!(thinking.contains("max_thinking_tokens"), "{thinking}");

        let missing = toml_error("input_per_mtok = \"1\"");
        assert!(missing.contains("output_per_mtok"), "{missing}");

        let unknown = toml_error("input_per_mtok = \"1\"\noutput_per_mtok = \"1\"\noutput = \"1\"");
        assert!(unknown.contains("unknown field `output`"), "{unknown}");
        assert!(unknown.contains("line 4"), "{unknown}");

        let empty = PriceTable::from_toml_str("").unwrap_err();
        assert!(matches!(empty, PriceError::Empty { .. }));
    }

    #[test]
    fn shipped_price_file_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prices.toml");
        let table = PriceTable::load(&path).unwrap();
        for model in [
            "gpt-4o-mini",
            "gpt-5",
            "o3",
            "text-embedding-3-small",
            "claude-sonnet-4-5",
        ] {
            assert!(table.get(model).is_some(), "{model} is priced");
        }
        let sonnet = table.get("claude-sonnet-4-20250514").unwrap();
        assert_eq!(sonnet.cache_write, price("3.75"));
        assert_eq!(sonnet.tool_call(HostedTool::WebSearch), Some(10_000));
        assert_eq!(sonnet.tool_call(HostedTool::WebFetch), Some(0));
        let mini = table.get("gpt-4o-mini").unwrap();
        assert_eq!(mini.tool_call(HostedTool::WebSearch), Some(10_000));
        assert_eq!(mini.tool_call(HostedTool::WebSearchPreview), Some(25_000));
        assert_eq!(mini.tool_call(HostedTool::FileSearch), Some(2_500));
        assert_eq!(mini.tool_call(HostedTool::CodeInterpreter), Some(30_000));
        assert_eq!(mini.tool_call(HostedTool::ImageGeneration), None);
        let priority = mini.priority.unwrap();
        assert_eq!(
            (priority.input, priority.output),
            (price("0.25"), price("1"))
        );
        let sonnet_4_5 = table.get("claude-sonnet-4-5").unwrap();
        assert_eq!(sonnet_4_5.cache_write_1h, Some(price("6")));
        assert_eq!(
            sonnet_4_5.long_context.map(|long| long.threshold_tokens),
            Some(200_000)
        );
        let pro = table.get("gemini-2.5-pro").unwrap();
        assert_eq!(pro.max_thinking_tokens, Some(32_768));
        assert_eq!(pro.tool_call(HostedTool::GoogleSearch), Some(35_000));
        assert_eq!(
            pro.long_context
                .map(|long| (long.threshold_tokens, long.input)),
            Some((200_000, price("2.5")))
        );
        for (model, thinking) in [
            ("gemini-2.5-flash", 24_576),
            ("gemini-2.5-flash-lite", 24_576),
        ] {
            assert_eq!(
                table.get(model).unwrap().max_thinking_tokens,
                Some(thinking)
            );
        }
        let gemini_3 = table.get("gemini-3.1-pro-preview").unwrap();
        assert_eq!(gemini_3.tool_call(HostedTool::GoogleSearch), Some(14_000));
        assert_eq!(gemini_3.max_thinking_tokens, gemini_3.max_output_tokens);
        // Claude under its Vertex AI ids, priced as on Anthropic's API.
        for (vertex, anthropic) in [
            ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
            ("claude-haiku-4-5@20251001", "claude-haiku-4-5"),
            ("claude-opus-4-1@20250805", "claude-opus-4-1"),
            ("claude-opus-4-5@20251101", "claude-opus-4-5"),
        ] {
            assert_eq!(table.get(vertex), table.get(anthropic), "{vertex}");
        }
        let o3 = table.get("o3").unwrap();
        assert_eq!(o3.tool_call(HostedTool::WebSearchPreview), Some(10_000));
        assert_eq!(
            table
                .get("text-embedding-3-small")
                .unwrap()
                .max_output_tokens,
            None
        );
    }
}
