//! Rates beside a model's standard ones: Anthropic's 1-hour cache writes,
//! the long context tier (a call whose input passes a threshold is billed
//! whole at dearer rates) and OpenAI's priority processing.
//!
//! A request option that would be billed at one of these is priced only
//! when the model's entry has its prices ([`PricedOptions::unpriced`]);
//! otherwise it is refused. A request that names no OpenAI tier (or
//! `"auto"`) is served at its project's default tier, which the project's
//! owner may have set to priority: on a model with priority prices it is
//! bounded, and charged when unreported, at them ([`TierRequest::Open`]).
//!
//! A token class a tier gives no price of its own (cache reads and writes
//! under long context, say) costs its standard price times the tier's
//! input multiplier, rounded up, as the providers bill it.

use crate::money::Price;
use crate::usage::{ServiceTier, Usage};

use super::ModelPrice;

/// OpenAI's `service_tier: "priority"` rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorityPrices {
    pub input: Price,
    pub output: Price,
    /// `None`: the standard cached price times the priority multiplier.
    pub cached_input: Option<Price>,
}

/// Rates of a call whose input passes a threshold: every token of it,
/// output included, is billed at these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongContextPrices {
    /// Input tokens (cache reads and writes included) above which the
    /// whole call is billed at the long context rates.
    pub threshold_tokens: u64,
    pub input: Price,
    pub output: Price,
}

/// The OpenAI service tier a request names, as far as it moves the rates
/// the provider can bill.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TierRequest {
    /// No `service_tier`, or `"auto"`: the provider serves the call at the
    /// project's default tier, which can be priority. The gateway cannot
    /// see that setting, so a model with priority prices is bounded at
    /// them; a model OpenAI offers no priority processing for (no priority
    /// prices in its entry) is served at standard rates and not refused.
    #[default]
    Open,
    /// `"default"`, `"flex"` or `"standard_only"`: standard rates at most
    /// (flex costs less).
    Standard,
    /// `"priority"`: priority rates, refused for a model without them.
    Priority,
}

impl TierRequest {
    /// Whether the provider may bill the call at the priority tier: it
    /// asked for it, or left the tier to a project default that may be
    /// priority.
    pub fn may_be_priority(self) -> bool {
        self != TierRequest::Standard
    }
}

/// What a request asked for that moves its rates, fixed before it is
/// sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PricedOptions {
    /// The OpenAI `service_tier` it names, or leaves open.
    pub tier: TierRequest,
    /// A `cache_control` with `ttl: "1h"` (Anthropic).
    pub hour_cache: bool,
    /// The `context-1m` beta in the `anthropic-beta` header: input past
    /// the standard context window, billed at the long context rates.
    pub long_context: bool,
}

/// One refused option: the option as the client wrote it, and the price
/// field the model's entry lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unpriced {
    pub option: &'static str,
    pub field: &'static str,
    /// The body field to name in the error, if the option is one.
    pub param: Option<&'static str>,
}

impl PricedOptions {
    /// No priced option and the standard tier named: the standard rates.
    pub const STANDARD: PricedOptions = PricedOptions {
        tier: TierRequest::Standard,
        hour_cache: false,
        long_context: false,
    };

    /// The first option `price` has no rates for. Only a tier asked for
    /// by name is an option: one left open is served at standard rates on
    /// a model without priority prices.
    pub fn unpriced(&self, price: &ModelPrice) -> Option<Unpriced> {
        if self.tier == TierRequest::Priority && price.priority.is_none() {
            return Some(Unpriced {
                option: "service_tier \"priority\"",
                field: "priority_input_per_mtok and priority_output_per_mtok",
                param: Some("service_tier"),
            });
        }
        if self.hour_cache && price.cache_write_1h.is_none() {
            return Some(Unpriced {
                option: "cache_control ttl \"1h\"",
                field: "cache_write_1h_per_mtok",
                param: None,
            });
        }
        if self.long_context && price.long_context.is_none() {
            return Some(Unpriced {
                option: "the anthropic-beta context-1m option",
                field: "long_context_threshold_tokens, long_context_input_per_mtok and \
                        long_context_output_per_mtok",
                param: None,
            });
        }
        None
    }

    /// `usage` with what the request asked for filling in what the
    /// provider did not report: a call that asked for priority, or left
    /// its tier to the project's default, and whose tier is unreported may
    /// have been priority (a model without priority prices bills it at
    /// standard rates all the same); cache writes of a call that asked for
    /// the hour-long cache, unsplit, were all hour-long. Never below what
    /// the provider could have billed.
    pub fn complete(&self, usage: Usage) -> Usage {
        let mut usage = usage;
        if self.tier.may_be_priority() && usage.service_tier.is_none() {
            usage.service_tier = Some(ServiceTier::Priority);
        }
        if self.hour_cache && usage.cache_write_1h.is_none() {
            usage.cache_write_1h = Some(usage.cache_write);
        }
        usage
    }
}

/// The price of each token class of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rates {
    pub input: Price,
    pub cached_input: Price,
    /// Cache writes kept for the default 5 minutes.
    pub cache_write: Price,
    pub cache_write_1h: Price,
    pub output: Price,
}

impl Rates {
    /// The dearest price an input token can have.
    pub fn dearest_input(&self) -> Price {
        self.input
            .max(self.cached_input)
            .max(self.cache_write)
            .max(self.cache_write_1h)
    }
}

impl ModelPrice {
    /// The rates of a call at the priority tier or not, and with `input`
    /// tokens of input in all. Priority on a model without priority prices
    /// is its standard rates: a request naming the tier there is refused,
    /// and one left to the project's default is served at standard, as
    /// OpenAI serves a model it offers no priority processing for (the
    /// price table gives priority prices to those it does).
    pub fn rates(&self, priority: bool, input_tokens: u64) -> Rates {
        let standard = Rates {
            input: self.input,
            cached_input: self.cached_input,
            cache_write: self.cache_write,
            // A request for the hour-long cache is refused without its
            // price, so unsplit writes are the only ones billed here.
            cache_write_1h: self.cache_write_1h.unwrap_or(self.cache_write),
            output: self.output,
        };
        let base = self.input;
        let mut rates = match self.priority.filter(|_| priority) {
            None => standard,
            Some(tier) => Rates {
                input: tier.input,
                cached_input: tier
                    .cached_input
                    .unwrap_or_else(|| scale(standard.cached_input, tier.input, base)),
                cache_write: scale(standard.cache_write, tier.input, base),
                cache_write_1h: scale(standard.cache_write_1h, tier.input, base),
                output: tier.output,
            },
        };
        if let Some(long) = self.long_context_at(input_tokens) {
            rates = Rates {
                input: scale(rates.input, long.input, base),
                cached_input: scale(rates.cached_input, long.input, base),
                cache_write: scale(rates.cache_write, long.input, base),
                cache_write_1h: scale(rates.cache_write_1h, long.input, base),
                output: scale(rates.output, long.output, self.output),
            };
        }
        rates
    }

    /// The rates a call with `usage` is billed at.
    pub fn rates_for(&self, usage: &Usage) -> Rates {
        self.rates(
            usage.service_tier == Some(ServiceTier::Priority),
            usage.total_input(),
        )
    }

    /// The long context tier, if `input_tokens` of input pass its
    /// threshold.
    pub fn long_context_at(&self, input_tokens: u64) -> Option<&LongContextPrices> {
        self.long_context
            .as_ref()
            .filter(|long| input_tokens > long.threshold_tokens)
    }
}

/// `price` × `tier` / `standard`, rounded up: a class's price under a tier
/// that multiplies the standard price by `tier / standard`. Where the
/// standard price is 0 the multiplier is unknown, and the tier's own price
/// bounds the class.
fn scale(price: Price, tier: Price, standard: Price) -> Price {
    let (price, tier, standard) = (
        u128::from(price.micros_per_mtok()),
        u128::from(tier.micros_per_mtok()),
        u128::from(standard.micros_per_mtok()),
    );
    let scaled = match standard {
        0 => price.max(tier),
        _ => (price * tier).div_ceil(standard),
    };
    Price::from_micros_per_mtok(u64::try_from(scaled).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(text: &str) -> Price {
        Price::per_mtok(text).unwrap()
    }

    /// Claude Sonnet 4.5's prices, with its 1M-context tier.
    fn sonnet() -> ModelPrice {
        ModelPrice {
            input: price("3"),
            cached_input: price("0.30"),
            cache_write: price("3.75"),
            cache_write_1h: Some(price("6")),
            output: price("15"),
            long_context: Some(LongContextPrices {
                threshold_tokens: 200_000,
                input: price("6"),
                output: price("22.50"),
            }),
            ..ModelPrice::default()
        }
    }

    /// GPT-5's prices, with its priority tier.
    fn gpt5() -> ModelPrice {
        ModelPrice {
            input: price("1.25"),
            cached_input: price("0.125"),
            cache_write: price("1.25"),
            output: price("10"),
            priority: Some(PriorityPrices {
                input: price("2.50"),
                output: price("20"),
                cached_input: None,
            }),
            ..ModelPrice::default()
        }
    }

    #[test]
    fn hour_long_cache_writes_are_billed_at_their_price() {
        let usage = Usage {
            input: 1_000,
            cache_write: 3_000,
            cache_write_1h: Some(1_000),
            output: 100,
            ..Usage::default()
        };
        // 1,000 × 3 + 2,000 × 3.75 + 1,000 × 6 + 100 × 15 µUSD.
        assert_eq!(sonnet().cost(&usage), 3_000 + 7_500 + 6_000 + 1_500);
        // Unsplit writes of a call that asked for the hour are all hours.
        let asked = PricedOptions {
            hour_cache: true,
            ..PricedOptions::default()
        };
        let unsplit = Usage {
            cache_write_1h: None,
            ..usage
        };
        assert_eq!(sonnet().cost(&unsplit), 3_000 + 11_250 + 1_500);
        assert_eq!(
            sonnet().cost(&asked.complete(unsplit)),
            3_000 + 18_000 + 1_500
        );
        // A reported split is believed, even for a call that asked.
        assert_eq!(sonnet().cost(&asked.complete(usage)), 18_000);
    }

    #[test]
    fn long_context_bills_the_whole_call_past_the_threshold() {
        let at = |input: u64, cached: u64| Usage {
            input,
            cached_input: cached,
            output: 1_000,
            ..Usage::default()
        };
        // At the threshold: standard rates.
        assert_eq!(
            sonnet().cost(&at(150_000, 50_000)),
            450_000 + 15_000 + 15_000
        );
        // One token past it, counting cache reads: every class doubles
        // on input, output × 1.5.
        assert_eq!(
            sonnet().cost(&at(150_001, 50_000)),
            900_006 + 30_000 + 22_500
        );
        let rates = sonnet().rates(false, 200_001);
        assert_eq!(rates.cache_write, price("7.50"));
        assert_eq!(rates.cache_write_1h, price("12"));
        assert_eq!(rates.dearest_input(), price("12"));
    }

    #[test]
    fn priority_bills_at_the_tier_reported() {
        let usage = Usage {
            input: 1_000_000,
            cached_input: 1_000_000,
            output: 1_000_000,
            ..Usage::default()
        };
        let priority = Usage {
            service_tier: Some(ServiceTier::Priority),
            ..usage
        };
        let standard = Usage {
            service_tier: Some(ServiceTier::Standard),
            ..usage
        };
        assert_eq!(gpt5().cost(&priority), 2_500_000 + 250_000 + 20_000_000);
        assert_eq!(gpt5().cost(&standard), 1_250_000 + 125_000 + 10_000_000);
        // Unreported: what the request asked for.
        let asked = PricedOptions {
            tier: TierRequest::Priority,
            ..PricedOptions::default()
        };
        assert_eq!(gpt5().cost(&asked.complete(usage)), gpt5().cost(&priority));
        assert_eq!(
            gpt5().cost(&asked.complete(standard)),
            gpt5().cost(&standard)
        );
        assert_eq!(
            gpt5().cost(&PricedOptions::STANDARD.complete(usage)),
            gpt5().cost(&standard)
        );
        assert_eq!(gpt5().cost(&usage), gpt5().cost(&standard));
        // A model without the tier bills a reported priority at standard
        // rates: requests for it are refused.
        assert_eq!(sonnet().rates(true, 0), sonnet().rates(false, 0));
    }

    #[test]
    fn a_tier_left_open_is_charged_at_priority_unless_reported() {
        let usage = Usage {
            input: 1_000_000,
            cached_input: 1_000_000,
            output: 1_000_000,
            ..Usage::default()
        };
        let open = PricedOptions::default();
        assert_eq!(open.tier, TierRequest::Open);
        assert!(open.tier.may_be_priority());
        assert!(!TierRequest::Standard.may_be_priority());
        // Unreported: the project's default may have been priority.
        assert_eq!(
            open.complete(usage).service_tier,
            Some(ServiceTier::Priority)
        );
        assert_eq!(
            gpt5().cost(&open.complete(usage)),
            2_500_000 + 250_000 + 20_000_000
        );
        // Reported: that tier, whichever it is.
        for tier in [ServiceTier::Standard, ServiceTier::Priority] {
            let reported = Usage {
                service_tier: Some(tier),
                ..usage
            };
            assert_eq!(open.complete(reported), reported);
        }
        // A model without priority prices: standard rates, and a tier
        // left open is no unpriced option.
        let plain = ModelPrice {
            priority: None,
            ..gpt5()
        };
        assert_eq!(
            plain.cost(&open.complete(usage)),
            1_250_000 + 125_000 + 10_000_000
        );
        assert_eq!(open.unpriced(&plain), None);
    }

    #[test]
    fn derived_prices_round_up() {
        assert_eq!(
            scale(price("0.000001"), price("3"), price("2")),
            price("0.000002")
        );
        assert_eq!(scale(price("0.30"), price("6"), price("3")), price("0.60"));
        assert_eq!(scale(price("1"), price("2"), Price::ZERO), price("2"));
    }

    #[test]
    fn options_without_prices_are_named() {
        let all = PricedOptions {
            tier: TierRequest::Priority,
            hour_cache: true,
            long_context: true,
        };
        let unpriced = all.unpriced(&ModelPrice::default()).unwrap();
        assert_eq!(unpriced.param, Some("service_tier"));
        assert!(unpriced.field.contains("priority_input_per_mtok"));
        let no_priority = PricedOptions {
            tier: TierRequest::Open,
            ..all
        };
        assert_eq!(no_priority.unpriced(&sonnet()), None);
        assert_eq!(
            PricedOptions {
                tier: TierRequest::Standard,
                ..no_priority
            }
            .unpriced(&sonnet()),
            None
        );
        assert_eq!(
            no_priority.unpriced(&gpt5()).map(|u| u.field),
            Some("cache_write_1h_per_mtok")
        );
        assert_eq!(
            all.unpriced(&gpt5()).map(|u| u.option),
            Some("cache_control ttl \"1h\"")
        );
        assert_eq!(
            PricedOptions::default().unpriced(&ModelPrice::default()),
            None
        );
    }
}
