//! LiteLLM's price file (`model_prices_and_context_window.json`): model
//! name → costs in USD per token as JSON numbers, converted to exact
//! [`Price`]s by shifting decimal digits, never by float arithmetic.
//!
//! Google's models are listed under the names clients send
//! (`gemini/gemini-2.5-pro` → `gemini-2.5-pro`), one entry a name
//! (`litellm_names`). Reasoning tokens are billed as output, so an entry's
//! output price is the dearer of `output_cost_per_token` and
//! `output_cost_per_reasoning_token`. LiteLLM records no thinking budget,
//! so its entries have no `max_thinking_tokens`.
//!
//! Hosted tools: `search_context_cost_per_query` (USD per web search, by
//! search context size: the dearest size prices every search, since a
//! request may ask for any; on a Gemini model, per Google Search
//! grounding), `file_search_cost_per_1k_calls` and
//! `code_interpreter_cost_per_session`. An entry without them prices no
//! hosted tool, so the gateway refuses those tools for its model.

use std::collections::BTreeMap;

use super::litellm_names::{self, GEMINI_PROVIDERS};
use super::{non_empty, LongContextPrices, ModelPrice, PriceError, PriceTable, PriorityPrices};
use crate::hosted::HostedTool;
use crate::money::{Price, UsdMicros};

/// LiteLLM documents its schema in this entry; it prices nothing.
const LITELLM_SAMPLE_ENTRY: &str = "sample_spec";

pub(super) fn parse(text: &str, file: &str) -> Result<PriceTable, PriceError> {
    let entries = entries(text, file)?
        .into_iter()
        .map(|entry| (entry.model, entry.price));
    non_empty(litellm_names::by_name(entries), file)
}

/// One priced entry of a LiteLLM file, with what LiteLLM says of its
/// provider and kind (`chat`, `embedding`, …).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LiteLlmEntry {
    /// The name clients send: the entry's key, without the Gemini API's or
    /// Vertex AI's prefix. Several entries may have one name.
    pub model: String,
    pub price: ModelPrice,
    pub provider: Option<String>,
    pub mode: Option<String>,
}

/// Every entry of a LiteLLM file that prices tokens, in the file's order
/// of keys.
pub(crate) fn entries(text: &str, file: &str) -> Result<Vec<LiteLlmEntry>, PriceError> {
    let entries: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| PriceError::Parse {
            file: file.to_owned(),
            message: format!("not a LiteLLM price file: {e}"),
        })?;
    let mut priced = Vec::new();
    for (model, entry) in &entries {
        if model == LITELLM_SAMPLE_ENTRY {
            continue;
        }
        let field_error = |field: &str, message: String| PriceError::Field {
            file: file.to_owned(),
            model: model.clone(),
            field: field.to_owned(),
            message,
        };
        let cost = |field: &str| -> Result<Option<Price>, PriceError> {
            entry
                .get(field)
                .filter(|value| !value.is_null())
                .map(|value| per_token_price(value).map_err(|message| field_error(field, message)))
                .transpose()
        };
        // Image, audio and rerank entries price other units; without both
        // token costs an entry says nothing about a token-metered call.
        let (Some(input), Some(output)) = (
            cost("input_cost_per_token")?,
            cost("output_cost_per_token")?,
        ) else {
            continue;
        };
        let output = output.max(cost("output_cost_per_reasoning_token")?.unwrap_or(output));
        let text_of = |field: &str| {
            entry
                .get(field)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let provider = text_of("litellm_provider");
        let is_gemini = provider
            .as_deref()
            .is_some_and(|provider| GEMINI_PROVIDERS.contains(&provider));
        let tokens = |field: &str| {
            entry
                .get(field)
                .and_then(serde_json::Value::as_u64)
                .filter(|n| *n > 0)
        };
        let priority = match (
            cost("input_cost_per_token_priority")?,
            cost("output_cost_per_token_priority")?,
        ) {
            (Some(input), Some(output)) => Some(PriorityPrices {
                input,
                output,
                cached_input: cost("cache_read_input_token_cost_priority")?,
            }),
            _ => None,
        };
        let entry_price = ModelPrice {
            input,
            cached_input: cost("cache_read_input_token_cost")?.unwrap_or(input),
            cache_write: cost("cache_creation_input_token_cost")?.unwrap_or(input),
            cache_write_1h: cost("cache_creation_input_token_cost_above_1hr")?,
            output,
            priority,
            long_context: long_context(entry, input, output)
                .map_err(|(field, message)| field_error(&field, message))?,
            max_output_tokens: tokens("max_output_tokens"),
            context_window: tokens("max_input_tokens").or_else(|| tokens("max_tokens")),
            max_thinking_tokens: None,
            input_bytes_per_token: 1,
            reasoning: entry
                .get("supports_reasoning")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            tool_call_usd: tool_prices(entry, is_gemini)
                .map_err(|(field, message)| field_error(field, message))?,
        };
        priced.push(LiteLlmEntry {
            model: litellm_names::client_name(model, provider.as_deref()).to_owned(),
            price: entry_price,
            provider,
            mode: text_of("mode"),
        });
    }
    Ok(priced)
}

/// The long context tier of an entry: LiteLLM writes it as
/// `input_cost_per_token_above_272k_tokens` (and the same for output).
/// Were there several thresholds, the lowest with the dearest prices
/// bounds them all; a class without a price above the threshold keeps its
/// standard price there.
fn long_context(
    entry: &serde_json::Value,
    input: Price,
    output: Price,
) -> Result<Option<LongContextPrices>, (String, String)> {
    const INPUT: &str = "input_cost_per_token_above_";
    const OUTPUT: &str = "output_cost_per_token_above_";
    let Some(fields) = entry.as_object() else {
        return Ok(None);
    };
    let mut tier: Option<LongContextPrices> = None;
    for (field, value) in fields.iter().filter(|(_, value)| !value.is_null()) {
        let threshold = |prefix: &str| {
            let thousands = field.strip_prefix(prefix)?.strip_suffix("k_tokens")?;
            thousands.parse::<u64>().ok()?.checked_mul(1_000)
        };
        let (is_input, threshold_tokens) = match (threshold(INPUT), threshold(OUTPUT)) {
            (Some(tokens), _) => (true, tokens),
            (None, Some(tokens)) => (false, tokens),
            (None, None) => continue,
        };
        let price = per_token_price(value).map_err(|message| (field.clone(), message))?;
        let current = tier.get_or_insert(LongContextPrices {
            threshold_tokens,
            input,
            output,
        });
        current.threshold_tokens = current.threshold_tokens.min(threshold_tokens);
        if is_input {
            current.input = current.input.max(price);
        } else {
            current.output = current.output.max(price);
        }
    }
    Ok(tier)
}

/// The hosted tool prices of one entry, in µUSD per use. A Gemini model's
/// search is Grounding with Google Search, whose price LiteLLM gives per
/// grounded request or per search query as Google bills the model (its
/// `web_search_billing_unit`), which is the tool's unit either way;
/// anyone else's is a web search.
fn tool_prices(
    entry: &serde_json::Value,
    is_gemini: bool,
) -> Result<BTreeMap<HostedTool, UsdMicros>, (&'static str, String)> {
    const SEARCH: &str = "search_context_cost_per_query";
    const FILE_SEARCH: &str = "file_search_cost_per_1k_calls";
    const CODE_INTERPRETER: &str = "code_interpreter_cost_per_session";
    let mut prices = BTreeMap::new();
    let search = match entry.get(SEARCH) {
        None | Some(serde_json::Value::Null) => None,
        // One price per context size: the dearest bounds them all.
        Some(serde_json::Value::Object(sizes)) => sizes
            .values()
            .filter(|value| !value.is_null())
            .map(|value| per_use_micros(value, 1).map_err(|message| (SEARCH, message)))
            .try_fold(None, |dearest: Option<UsdMicros>, fee| {
                Ok(Some(dearest.unwrap_or(0).max(fee?)))
            })?,
        Some(value) => Some(per_use_micros(value, 1).map_err(|message| (SEARCH, message))?),
    };
    match search {
        Some(fee) if is_gemini => {
            prices.insert(HostedTool::GoogleSearch, fee);
        }
        Some(fee) => {
            prices.insert(HostedTool::WebSearch, fee);
            prices.insert(HostedTool::WebSearchPreview, fee);
        }
        None => {}
    }
    for (field, tool, uses) in [
        (FILE_SEARCH, HostedTool::FileSearch, 1_000),
        (CODE_INTERPRETER, HostedTool::CodeInterpreter, 1),
    ] {
        if let Some(value) = entry.get(field).filter(|value| !value.is_null()) {
            let fee = per_use_micros(value, uses).map_err(|message| (field, message))?;
            prices.insert(tool, fee);
        }
    }
    Ok(prices)
}

/// A LiteLLM cost in USD for `uses` uses → µUSD per use, rounded up, by
/// digit shifting like token prices.
fn per_use_micros(value: &serde_json::Value, uses: u64) -> Result<UsdMicros, String> {
    // `micros_per_mtok` scales USD by 10^12; a µUSD is 10^6 of those.
    const UNITS_PER_MICRO: u64 = 1_000_000;
    let text = match value {
        serde_json::Value::Number(n) => n.to_string(),
        other => return Err(format!("expected a number of USD, found {other}")),
    };
    let units = micros_per_mtok(&text)
        .ok_or_else(|| format!("{text} is not a non-negative number of USD within range"))?;
    Ok(units.div_ceil(UNITS_PER_MICRO.saturating_mul(uses)))
}

/// Converts a LiteLLM cost (USD per token, a JSON number such as `1.5e-07`)
/// to a [`Price`] by shifting the digits of its decimal text: no float
/// arithmetic.
///
/// The text is the shortest representation of the parsed double, so a
/// short literal such as `1.5e-07` comes back as itself. A price finer than
/// 10⁻⁶ USD per million tokens is rounded up to the next step.
fn per_token_price(value: &serde_json::Value) -> Result<Price, String> {
    let text = match value {
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => s.trim().to_owned(),
        other => return Err(format!("expected a number of USD per token, found {other}")),
    };
    let units = micros_per_mtok(&text).ok_or_else(|| {
        format!("{text} is not a non-negative number of USD per token within range")
    })?;
    Ok(Price::from_micros_per_mtok(units))
}

/// USD per token (decimal text, scientific notation allowed) → µUSD per
/// million tokens, rounded up; `None` for a negative, malformed or absurdly
/// large value.
fn micros_per_mtok(text: &str) -> Option<u64> {
    // µUSD per Mtok = USD per token × 10^12.
    const SCALE_EXPONENT: i64 = 12;
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.strip_prefix('+').unwrap_or(e).parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let is_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && frac.is_empty() || !is_digits(whole) || !is_digits(frac) {
        return None;
    }
    let digits = format!("{whole}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(0);
    }
    let significand: u128 = digits.parse().ok()?;
    let frac_len = i64::try_from(frac.len()).ok()?;
    let shift = exponent
        .checked_sub(frac_len)?
        .checked_add(SCALE_EXPONENT)?;
    let units = if shift >= 0 {
        let factor = 10u128.checked_pow(u32::try_from(shift).ok()?)?;
        significand.checked_mul(factor)?
    } else {
        match u32::try_from(-shift)
            .ok()
            .and_then(|s| 10u128.checked_pow(s))
        {
            Some(divisor) => significand.div_ceil(divisor),
            // Smaller than one unit but not zero: the smallest step up.
            None => 1,
        }
    };
    u64::try_from(units).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(text: &str) -> Price {
        Price::per_mtok(text).unwrap()
    }

    #[test]
    fn converts_litellm_costs_by_digit_shifting() {
        let units = |text: &str| micros_per_mtok(text).unwrap();
        assert_eq!(units("1.5e-7"), 150_000);
        assert_eq!(units("1.5e-07"), 150_000);
        assert_eq!(units("3e-06"), 3_000_000);
        assert_eq!(units("1.25e-06"), 1_250_000);
        assert_eq!(units("0.000015"), 15_000_000);
        assert_eq!(units("7.5e-8"), 75_000);
        assert_eq!(units("0"), 0);
        assert_eq!(units("0.0"), 0);
        assert_eq!(units("2E+0"), 2_000_000_000_000);
        // Finer than 10⁻⁶ USD/Mtok: rounded up, never down.
        assert_eq!(units("1.0000001e-7"), 100_001);
        assert_eq!(units("1e-19"), 1);
        assert_eq!(units("1e-400"), 1);
        assert_eq!(micros_per_mtok("-1e-6"), None);
        assert_eq!(micros_per_mtok("1e400"), None);
        assert_eq!(micros_per_mtok("abc"), None);
        assert_eq!(micros_per_mtok("."), None);
    }

    const LITELLM: &str = r#"{
        "sample_spec": {
            "max_tokens": "LEGACY parameter. set to max_output_tokens if provider specifies it.",
            "input_cost_per_token": 0.0000,
            "output_cost_per_token": 0.0,
            "litellm_provider": "one of https://docs.litellm.ai/docs/providers"
        },
        "gpt-4o-mini": {
            "max_tokens": 16384,
            "max_input_tokens": 128000,
            "max_output_tokens": 16384,
            "input_cost_per_token": 1.5e-07,
            "output_cost_per_token": 6e-07,
            "cache_read_input_token_cost": 7.5e-08,
            "litellm_provider": "openai",
            "mode": "chat",
            "supports_vision": true
        },
        "claude-sonnet-4-5": {
            "max_tokens": 64000,
            "max_output_tokens": 64000,
            "input_cost_per_token": 3e-06,
            "output_cost_per_token": 1.5e-05,
            "cache_creation_input_token_cost": 3.75e-06,
            "cache_read_input_token_cost": 3e-07,
            "mode": "chat"
        },
        "some-image-model": {
            "input_cost_per_pixel": 1e-08,
            "output_cost_per_token": 0.0,
            "mode": "image_generation"
        },
        "priced-by-the-million": {
            "input_cost_per_token": 1.25e-06,
            "output_cost_per_token": 1e-05,
            "search_context_cost_per_query": {
                "search_context_size_low": 0.025,
                "search_context_size_medium": 0.0275,
                "search_context_size_high": 0.03
            },
            "file_search_cost_per_1k_calls": 2.5,
            "code_interpreter_cost_per_session": 0.03
        }
    }"#;

    #[test]
    fn loads_litellm_json() {
        let table = parse(LITELLM, "prices.json").unwrap();
        assert_eq!(
            table.len(),
            3,
            "sample_spec and the image model are skipped"
        );
        assert!(table.get("sample_spec").is_none());
        let mini = table.get("gpt-4o-mini-2024-07-18").unwrap();
        assert_eq!(mini.input, price("0.15"));
        assert_eq!(mini.output, price("0.60"));
        assert_eq!(mini.cached_input, price("0.075"));
        assert_eq!(mini.cache_write, price("0.15"));
        assert_eq!(mini.max_output_tokens, Some(16384));
        assert_eq!(mini.context_window, Some(128_000));
        let sonnet = table.get("claude-sonnet-4-5").unwrap();
        assert_eq!(sonnet.input, price("3"));
        assert_eq!(sonnet.output, price("15"));
        assert_eq!(sonnet.cache_write, price("3.75"));
        assert_eq!(sonnet.cached_input, price("0.30"));
        assert_eq!(
            sonnet.context_window,
            Some(64000),
            "falls back to max_tokens"
        );
        let tooled = table.get("priced-by-the-million").unwrap();
        assert_eq!(tooled.input, price("1.25"));
        // The dearest search context size prices every search.
        assert_eq!(tooled.tool_call(HostedTool::WebSearch), Some(30_000));
        assert_eq!(tooled.tool_call(HostedTool::WebSearchPreview), Some(30_000));
        assert_eq!(tooled.tool_call(HostedTool::FileSearch), Some(2_500));
        assert_eq!(tooled.tool_call(HostedTool::CodeInterpreter), Some(30_000));
        assert_eq!(tooled.tool_call(HostedTool::Mcp), None);
        assert!(mini.tool_call_usd.is_empty(), "no tool price, no tool");
    }

    #[test]
    fn per_use_prices_round_up_to_the_micro() {
        let fee = |json: &str, uses| per_use_micros(&serde_json::from_str(json).unwrap(), uses);
        assert_eq!(fee("0.01", 1), Ok(10_000));
        assert_eq!(fee("2.5", 1_000), Ok(2_500));
        assert_eq!(fee("1e-9", 1), Ok(1));
        assert_eq!(fee("0", 1), Ok(0));
        assert!(fee("-0.01", 1).is_err());
        assert!(fee("\"0.01\"", 1).is_err());
        let bad = r#"{"m4": {"input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6,
            "search_context_cost_per_query": {"search_context_size_high": "x"}}}"#;
        let message = parse(bad, "prices.json").unwrap_err().to_string();
        assert!(
            message.contains("search_context_cost_per_query"),
            "{message}"
        );
    }

    #[test]
    fn litellm_errors_name_model_and_field() {
        let negative = r#"{"m2": {"input_cost_per_token": -1e-6, "output_cost_per_token": 1e-6}}"#;
        let message = parse(negative, "prices.json").unwrap_err().to_string();
        assert!(
            message.contains("\"m2\"") && message.contains("input_cost_per_token"),
            "{message}"
        );
        let wrong_type = r#"{"m3": {"input_cost_per_token": 1e-6, "output_cost_per_token": true}}"#;
        let message = parse(wrong_type, "prices.json").unwrap_err().to_string();
        assert!(message.contains("output_cost_per_token"), "{message}");
        assert!(parse("[1, 2]", "prices.json").is_err());
    }
}
