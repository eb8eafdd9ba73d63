//! The price table: what one token of each class costs, per model.
//!
//! Two file formats load into the same [`PriceTable`]: tollgate's own TOML
//! (`[models."gpt-4o-mini"]`, prices as decimal strings in USD per million
//! tokens) and LiteLLM's `model_prices_and_context_window.json` (USD per
//! token as JSON numbers), read in `toml_file` and `litellm`. Both are
//! converted to exact [`Price`]s; a price that cannot be held exactly is
//! rounded up, never down, so the gateway never under-charges.
//!
//! Beside the standard rates an entry may price Anthropic's 1-hour cache
//! writes, a long context tier and OpenAI's priority tier (the `tiers`
//! module); a request asking for one its model's entry lacks is refused.
//!
//! Hosted tools are priced per use (`tool_call_usd = { web_search =
//! "0.01" }`, decimal USD): a tool a model's entry does not price is
//! refused for that model.

use std::collections::BTreeMap;
use std::path::Path;

use crate::hosted::HostedTool;
use crate::money::{Cost, Price, UsdMicros};
use crate::usage::Usage;

pub mod import;
mod litellm;
mod litellm_names;
mod tiers;
mod toml_file;

pub use litellm_names::bedrock_model;
pub use tiers::{LongContextPrices, PricedOptions, PriorityPrices, Rates, TierRequest, Unpriced};

/// What one model charges per token class, and its token limits.
/// The most bytes per token a price entry may set
/// (`input_bytes_per_token`): beyond it the count would fall below what
/// English prose averages.
pub const MAX_INPUT_BYTES_PER_TOKEN: u64 = 4;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelPrice {
    pub input: Price,
    pub cached_input: Price,
    /// Cache writes kept for the default 5 minutes.
    pub cache_write: Price,
    /// Anthropic's hour-long cache writes; `None` refuses requests for them.
    pub cache_write_1h: Option<Price>,
    pub output: Price,
    /// OpenAI's priority tier; `None` refuses requests for it. With it, a
    /// request that leaves its tier to the project's default is bounded at
    /// it too ([`TierRequest::Open`]).
    pub priority: Option<PriorityPrices>,
    /// The long context tier; `None` refuses requests for the long
    /// context (input past it cannot then be sent).
    pub long_context: Option<LongContextPrices>,
    /// The model's own output ceiling: the output allowance when a request
    /// sets no limit.
    pub max_output_tokens: Option<u64>,
    /// Bounds input the gateway cannot see (server-side conversation state).
    pub context_window: Option<u64>,
    /// The most thinking tokens the model may spend when a request leaves
    /// its thinking budget unset or dynamic (Gemini's `thinkingBudget` -1),
    /// which the gateway then reserves as output.
    pub max_thinking_tokens: Option<u64>,
    /// Bytes of text counted as one input token for a model without a
    /// public tokenizer: 1 (the default) is a strict bound; more reserves
    /// less, and text that tokenizes denser is then billed above the
    /// reservation.
    pub input_bytes_per_token: u64,
    /// Output may be hidden: reasoning tokens are billed but not streamed,
    /// so what a client saw of a stream says nothing of what it cost.
    pub reasoning: bool,
    /// µUSD per use of each hosted tool the model may call; a tool not
    /// here is refused for this model.
    pub tool_call_usd: BTreeMap<HostedTool, UsdMicros>,
}

impl ModelPrice {
    /// The exact cost of a call, hosted tool fees included, rounded up to a
    /// whole µUSD once (saturating at 2^53 - 1; see
    /// [`ModelPrice::checked_cost`]).
    pub fn cost(&self, usage: &Usage) -> UsdMicros {
        self.sum(usage).usd_micros()
    }

    /// The exact cost of a call, or `None` when it reaches 2^53 µUSD: usage
    /// no call can have, which no store can charge exactly.
    pub fn checked_cost(&self, usage: &Usage) -> Option<UsdMicros> {
        self.sum(usage).checked_usd_micros()
    }

    fn sum(&self, usage: &Usage) -> Cost {
        let rates = self.rates_for(usage);
        let hour_long = usage.cache_write_1h.unwrap_or(0).min(usage.cache_write);
        let mut cost = Cost::default();
        cost.add(usage.input, rates.input);
        cost.add(usage.cached_input, rates.cached_input);
        cost.add(usage.cache_write - hour_long, rates.cache_write);
        cost.add(hour_long, rates.cache_write_1h);
        cost.add(usage.output, rates.output);
        // A use of a tool without a price adds nothing: requests declaring
        // one are refused, so only a use the request never declared can
        // be reported here.
        for (tool, count) in usage.tool_calls.iter() {
            cost.add_fees(count, self.tool_call(tool).unwrap_or(0));
        }
        cost
    }

    /// The price of one use of `tool`, if the model's entry has one.
    pub fn tool_call(&self, tool: HostedTool) -> Option<UsdMicros> {
        self.tool_call_usd.get(&tool).copied()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    #[error("{file}: cannot read the price file: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    /// A syntax or shape error; TOML messages carry the line and column.
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: model {model:?}, field {field}: {message}")]
    Field {
        file: String,
        model: String,
        field: String,
        message: String,
    },
    #[error("{file}: no model has a price")]
    Empty { file: String },
}

/// Prices by model name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriceTable {
    models: BTreeMap<String, ModelPrice>,
}

/// Names the source in messages when a table is parsed from a string.
const INLINE_ORIGIN: &str = "<prices>";

impl PriceTable {
    /// Loads a price file: LiteLLM's JSON when the name ends in `.json`,
    /// tollgate's TOML otherwise.
    pub fn load(path: &Path) -> Result<PriceTable, PriceError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Read {
            file: file.clone(),
            source,
        })?;
        let is_json = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
        if is_json {
            litellm::parse(&text, &file)
        } else {
            toml_file::parse(&text, &file)
        }
    }

    pub fn from_toml_str(text: &str) -> Result<PriceTable, PriceError> {
        toml_file::parse(text, INLINE_ORIGIN)
    }

    pub fn from_litellm_json(text: &str) -> Result<PriceTable, PriceError> {
        litellm::parse(text, INLINE_ORIGIN)
    }

    /// The price of `model`, or of the same name without a trailing date
    /// snapshot (`-2024-07-18`, `-20250929`): providers answer with dated
    /// names and publish one price for every snapshot of a model.
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        self.models
            .get(model)
            .or_else(|| self.models.get(strip_date_snapshot(model)?))
    }

    /// Every priced model, sorted by name.
    pub fn models(&self) -> impl Iterator<Item = (&str, &ModelPrice)> {
        self.models
            .iter()
            .map(|(name, price)| (name.as_str(), price))
    }

    pub fn len(&self) -> usize {
        self.models.len()
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

/// `gpt-4o-mini-2024-07-18` → `gpt-4o-mini`, `claude-sonnet-4-5-20250929`
/// → `claude-sonnet-4-5`; `None` when the name ends in no date.
fn strip_date_snapshot(model: &str) -> Option<&str> {
    // `d` stands for any digit.
    const SNAPSHOT_SHAPES: [&[u8]; 2] = [b"-dddd-dd-dd", b"-dddddddd"];
    SNAPSHOT_SHAPES.iter().find_map(|shape| {
        let at = model.len().checked_sub(shape.len()).filter(|at| *at > 0)?;
        let tail = model.as_bytes().get(at..)?;
        let fits = tail
            .iter()
            .zip(shape.iter())
            .all(|(byte, want)| match want {
                b'd' => byte.is_ascii_digit(),
                _ => byte == want,
            });
        // The tail starts with an ASCII '-', so `at` is a char boundary.
        fits.then(|| model.get(..at)).flatten()
    })
}

fn non_empty(models: BTreeMap<String, ModelPrice>, file: &str) -> Result<PriceTable, PriceError> {
    if models.is_empty() {
        return Err(PriceError::Empty {
            file: file.to_owned(),
        });
    }
    Ok(PriceTable { models })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(text: &str) -> Price {
        Price::per_mtok(text).unwrap()
    }

    const TABLE: &str = r#"
        [models."gpt-4o-mini"]
        input_per_mtok = "0.15"
        cached_input_per_mtok = "0.075"
        output_per_mtok = "0.60"
        max_output_tokens = 16384
        context_window = 128000

        [models."claude-sonnet-4-5"]
        input_per_mtok = "3"
        cached_input_per_mtok = "0.30"
        cache_write_per_mtok = "3.75"
        output_per_mtok = "15"

        [models."text-embedding-3-small"]
        input_per_mtok = "0.02"
        output_per_mtok = 0
    "#;

    #[test]
    fn loads_toml_with_defaults() {
        let table = PriceTable::from_toml_str(TABLE).unwrap();
        assert_eq!(table.len(), 3);
        let mini = table.get("gpt-4o-mini").unwrap();
        assert_eq!(mini.input, price("0.15"));
        assert_eq!(mini.cached_input, price("0.075"));
        assert_eq!(
            mini.cache_write,
            price("0.15"),
            "defaults to the input price"
        );
        assert_eq!(mini.max_output_tokens, Some(16384));
        assert_eq!(mini.context_window, Some(128_000));
        let embedding = table.get("text-embedding-3-small").unwrap();
        assert_eq!(embedding.cached_input, price("0.02"));
        assert_eq!(embedding.output, Price::ZERO);
        assert_eq!(embedding.max_output_tokens, None);
        let names: Vec<&str> = table.models().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            ["claude-sonnet-4-5", "gpt-4o-mini", "text-embedding-3-small"]
        );
    }

    #[test]
    fn cost_is_exact_and_rounded_up_once() {
        let table = PriceTable::from_toml_str(TABLE).unwrap();
        let mini = table.get("gpt-4o-mini").unwrap();
        // 3 × 0.15 + 2 × 0.075 + 1 × 0.60 = 1.2 µUSD → 2, where rounding
        // each class up would give 1 + 1 + 1 = 3.
        let usage = Usage {
            input: 3,
            cached_input: 2,
            cache_write: 0,
            output: 1,
            ..Usage::default()
        };
        assert_eq!(mini.cost(&usage), 2);
        let sonnet = table.get("claude-sonnet-4-5").unwrap();
        let usage = Usage {
            input: 1_000_000,
            cached_input: 1_000_000,
            cache_write: 1_000_000,
            output: 1_000_000,
            ..Usage::default()
        };
        assert_eq!(
            sonnet.cost(&usage),
            3_000_000 + 300_000 + 3_750_000 + 15_000_000
        );
        assert_eq!(sonnet.cost(&Usage::default()), 0);
    }

    #[test]
    fn tool_uses_are_priced_per_use_and_rounded_with_the_tokens() {
        let text = format!(
            "{TABLE}\n[models.\"search\"]\ninput_per_mtok = \"0.1\"\noutput_per_mtok = \"0\"\n\
             tool_call_usd = {{ web_search = \"0.01\", file_search = \"0.0025\", web_fetch = 0 }}\n"
        );
        let table = PriceTable::from_toml_str(&text).unwrap();
        let search = table.get("search").unwrap();
        assert_eq!(search.tool_call(HostedTool::WebSearch), Some(10_000));
        assert_eq!(search.tool_call(HostedTool::FileSearch), Some(2_500));
        assert_eq!(search.tool_call(HostedTool::WebFetch), Some(0));
        assert_eq!(search.tool_call(HostedTool::CodeInterpreter), None);
        let mut usage = Usage {
            input: 4,
            ..Usage::default()
        };
        usage.tool_calls.set(HostedTool::WebSearch, 3);
        usage.tool_calls.set(HostedTool::FileSearch, 1);
        // 0.4 µUSD of input, rounded once with 30,000 + 2,500 of fees.
        assert_eq!(search.cost(&usage), 32_501);
        // An unpriced tool's uses add nothing.
        usage.tool_calls.set(HostedTool::Mcp, 9);
        assert_eq!(search.cost(&usage), 32_501);
        assert!(table.get("gpt-4o-mini").unwrap().tool_call_usd.is_empty());
    }

    #[test]
    fn dated_snapshots_price_as_their_base_model() {
        let table = PriceTable::from_toml_str(TABLE).unwrap();
        let base = table.get("gpt-4o-mini").unwrap();
        assert_eq!(table.get("gpt-4o-mini-2024-07-18"), Some(base));
        assert_eq!(
            table.get("claude-sonnet-4-5-20250929"),
            table.get("claude-sonnet-4-5")
        );
        assert_eq!(table.get("gpt-4o-mini-2024-7-18"), None);
        assert_eq!(table.get("gpt-4o-mini-x"), None);
        assert_eq!(table.get("gpt-4o"), None);
        assert_eq!(strip_date_snapshot("-20250929"), None);
        assert_eq!(strip_date_snapshot("o3-2025-04-16"), Some("o3"));
        assert_eq!(
            strip_date_snapshot("claude-opus-4-1-20250805"),
            Some("claude-opus-4-1")
        );
    }

    #[test]
    fn an_exact_name_wins_over_its_base() {
        let text = format!(
            "{TABLE}\n[models.\"gpt-4o-mini-2024-07-18\"]\ninput_per_mtok = \"1\"\noutput_per_mtok = \"2\"\n"
        );
        let table = PriceTable::from_toml_str(&text).unwrap();
        assert_eq!(
            table.get("gpt-4o-mini-2024-07-18").unwrap().input,
            price("1")
        );
    }

    #[test]
    fn load_picks_the_format_by_extension() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("prices.json");
        let litellm =
            r#"{"gpt-4o-mini": {"input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07}}"#;
        std::fs::write(&json, litellm).unwrap();
        let table = PriceTable::load(&json).unwrap();
        assert_eq!(table.get("gpt-4o-mini").unwrap().output, price("0.60"));
        let toml = dir.path().join("prices.toml");
        std::fs::write(&toml, TABLE).unwrap();
        assert_eq!(PriceTable::load(&toml).unwrap().len(), 3);
        let missing = dir.path().join("missing.toml");
        let message = PriceTable::load(&missing).unwrap_err().to_string();
        assert!(message.contains("missing.toml"), "{message}");
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{").unwrap();
        let message = PriceTable::load(&bad).unwrap_err().to_string();
        assert!(message.contains("bad.json"), "{message}");
    }
}
