//! Money: integer micro-USD, exact decimal parsing and exact per-call pricing.
//!
//! A price is decimal USD per million tokens, which is the same number as
//! µUSD per token. It is kept exactly as an integer count of 10⁻⁶ µUSD per
//! token, so a call's cost is an integer sum that is rounded up to a whole
//! µUSD once, at the end. No float ever touches a money path.

use std::fmt;

/// Integer micro-USD: 1 USD = 1,000,000.
pub type UsdMicros = u64;

/// A signed amount of micro-USD: what a ledger entry moved its counters by.
/// Negative when an entry gives money back, such as a late settle of a call
/// that cost less than what its expiry charged.
pub type UsdMicrosDelta = i64;

/// Largest amount any cap or counter may hold: Redis Lua numbers are doubles,
/// so every value stays an exact integer only below 2^53.
pub const MAX_USD_MICROS: UsdMicros = (1 << 53) - 1;

/// Decimal places a price may carry (USD per million tokens).
const PRICE_DECIMALS: u32 = 6;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("{0:?} is not a decimal number like \"25.00\"")]
    NotDecimal(String),
    #[error("{0:?} has more than {1} decimal places")]
    TooPrecise(String, u32),
    #[error("{0:?} is too large (the limit is 9007199254.740991 USD)")]
    TooLarge(String),
}

/// Parses a decimal USD string (`"25.00"`, `"0.0001"`) into µUSD, exactly.
pub fn parse_usd(text: &str) -> Result<UsdMicros, MoneyError> {
    let micros = parse_decimal(text, 6)?;
    u64::try_from(micros)
        .ok()
        .filter(|m| *m <= MAX_USD_MICROS)
        .ok_or_else(|| MoneyError::TooLarge(text.to_owned()))
}

/// `amount` as a delta. Every amount the stores accept is below 2^53, so
/// this is exact; beyond `i64::MAX` it saturates rather than wrap.
pub fn delta(amount: UsdMicros) -> UsdMicrosDelta {
    UsdMicrosDelta::try_from(amount).unwrap_or(UsdMicrosDelta::MAX)
}

/// Formats µUSD as a decimal USD string with six places (`"25.000000"`).
pub fn format_usd(micros: UsdMicros) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// Parses a non-negative decimal string into an integer scaled by 10^`places`.
fn parse_decimal(text: &str, places: u32) -> Result<u128, MoneyError> {
    let not_decimal = || MoneyError::NotDecimal(text.to_owned());
    let (whole, frac) = match text.trim().split_once('.') {
        Some((w, f)) => (w, f),
        None => (text.trim(), ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && frac.is_empty() || !digits(whole) || !digits(frac) {
        return Err(not_decimal());
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > places as usize {
        return Err(MoneyError::TooPrecise(text.to_owned(), places));
    }
    let too_large = || MoneyError::TooLarge(text.to_owned());
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_large())?
    };
    let frac_value: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| not_decimal())?
    };
    let scale = 10u128.pow(places);
    let frac_scaled = frac_value * 10u128.pow(places - frac.len() as u32);
    whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(frac_scaled))
        .filter(|v| *v < (1u128 << 100))
        .ok_or_else(too_large)
}

/// Decimal places an alert threshold may carry (`alert_at`).
const THRESHOLD_DECIMALS: u32 = 6;

/// A spending alert's threshold: a fraction of a cap in (0, 1], kept
/// exactly as parts per million beside the text it was written as.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Threshold {
    ppm: u32,
    text: String,
}

impl Threshold {
    /// Parses one threshold (`"0.5"`, `"0.875"`, `"1"`).
    pub fn parse(text: &str) -> Result<Threshold, String> {
        let bad = || {
            format!("{text:?} is not a fraction of the cap in (0, 1] like \"0.8\", with at most {THRESHOLD_DECIMALS} decimal places")
        };
        let ppm = parse_decimal(text, THRESHOLD_DECIMALS).map_err(|_| bad())?;
        match u32::try_from(ppm) {
            Ok(ppm) if (1..=1_000_000).contains(&ppm) => Ok(Threshold {
                ppm,
                text: text.trim().to_owned(),
            }),
            _ => Err(bad()),
        }
    }

    /// Parses a list of thresholds, which must ascend without repeats.
    pub fn parse_list<S: AsRef<str>>(texts: &[S]) -> Result<Vec<Threshold>, String> {
        let thresholds = texts
            .iter()
            .map(|text| Threshold::parse(text.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if thresholds.windows(2).any(|pair| pair[0].ppm >= pair[1].ppm) {
            return Err("thresholds must ascend, each once (like [\"0.5\", \"0.8\"])".to_owned());
        }
        Ok(thresholds)
    }

    /// Whether `committed` has reached this fraction of `cap`, exactly.
    pub fn reached(&self, committed: UsdMicros, cap: UsdMicros) -> bool {
        u128::from(committed) * 1_000_000 >= u128::from(self.ppm) * u128::from(cap)
    }

    /// The fraction in parts per million: the same for every way of
    /// writing it (`"0.5"`, `"0.50"`).
    pub fn ppm(&self) -> u32 {
        self.ppm
    }

    /// The threshold as it was written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// A price per token class, exactly: units of 10⁻⁶ µUSD per token
/// (equivalently, µUSD per million tokens).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Price(u64);

impl Price {
    pub const ZERO: Price = Price(0);

    /// Parses decimal USD per million tokens (`"0.15"`, `"2.50"`).
    pub fn per_mtok(text: &str) -> Result<Price, MoneyError> {
        let value = parse_decimal(text, PRICE_DECIMALS)?;
        u64::try_from(value)
            .map(Price)
            .map_err(|_| MoneyError::TooLarge(text.to_owned()))
    }

    /// µUSD per million tokens.
    pub fn micros_per_mtok(self) -> u64 {
        self.0
    }

    pub fn from_micros_per_mtok(value: u64) -> Price {
        Price(value)
    }
}

impl fmt::Debug for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}.{:06}/Mtok", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// An exact running sum of tokens × price, rounded up to whole µUSD only when
/// read, so a call is rounded once however many token classes it has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost(u128);

impl Cost {
    pub fn add(&mut self, tokens: u64, price: Price) {
        self.0 = self
            .0
            .saturating_add(u128::from(tokens) * u128::from(price.0));
    }

    /// Adds `count` fees of `each` µUSD (per-call prices), exactly.
    pub fn add_fees(&mut self, count: u64, each: UsdMicros) {
        const UNITS_PER_MICRO: u128 = 1_000_000;
        let fees = (u128::from(count) * u128::from(each)).saturating_mul(UNITS_PER_MICRO);
        self.0 = self.0.saturating_add(fees);
    }

    /// The total in µUSD, rounded up, saturating at [`MAX_USD_MICROS`] so an
    /// absurd token count can never wrap into a small charge.
    pub fn usd_micros(self) -> UsdMicros {
        self.checked_usd_micros().unwrap_or(MAX_USD_MICROS)
    }

    /// The total in µUSD, rounded up; `None` from 2^53 on, which no store
    /// holds exactly (a cost that large is no cost a call can have).
    pub fn checked_usd_micros(self) -> Option<UsdMicros> {
        let micros = self.0.div_ceil(1_000_000);
        u64::try_from(micros)
            .ok()
            .filter(|micros| *micros <= MAX_USD_MICROS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_exact_fractions_of_a_cap() {
        let half = Threshold::parse("0.5").unwrap();
        assert_eq!(half.ppm(), 500_000);
        assert!(half.reached(5, 10));
        assert!(!half.reached(4, 9));
        assert!(Threshold::parse("1").unwrap().reached(10, 10));
        for bad in ["0", "1.0000001", "1.5", "-0.5", "x", "0.1234567"] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
        assert!(Threshold::parse_list(&["0.5", "0.8"]).is_ok());
        assert!(Threshold::parse_list(&["0.8", "0.5"]).is_err());
        assert!(Threshold::parse_list(&["0.5", "0.50"]).is_err());
    }

    #[test]
    fn parses_usd_exactly() {
        assert_eq!(parse_usd("25.00"), Ok(25_000_000));
        assert_eq!(parse_usd("0.0001"), Ok(100));
        assert_eq!(parse_usd("0.000001"), Ok(1));
        assert_eq!(parse_usd("7"), Ok(7_000_000));
        assert_eq!(parse_usd(".5"), Ok(500_000));
        assert_eq!(parse_usd("1.100000"), Ok(1_100_000));
        assert!(matches!(
            parse_usd("0.0000001"),
            Err(MoneyError::TooPrecise(..))
        ));
        assert!(matches!(parse_usd("-1"), Err(MoneyError::NotDecimal(_))));
        assert!(matches!(parse_usd("1e3"), Err(MoneyError::NotDecimal(_))));
        assert!(matches!(parse_usd(""), Err(MoneyError::NotDecimal(_))));
        assert!(matches!(parse_usd("."), Err(MoneyError::NotDecimal(_))));
        assert!(matches!(
            parse_usd("9007199255"),
            Err(MoneyError::TooLarge(_))
        ));
        assert_eq!(parse_usd("9007199254.740991"), Ok(MAX_USD_MICROS));
    }

    #[test]
    fn formats_usd() {
        assert_eq!(format_usd(25_000_000), "25.000000");
        assert_eq!(format_usd(1), "0.000001");
    }

    #[test]
    fn prices_are_exact() {
        assert_eq!(Price::per_mtok("0.15").unwrap().micros_per_mtok(), 150_000);
        assert_eq!(Price::per_mtok("0.075").unwrap().micros_per_mtok(), 75_000);
        assert_eq!(Price::per_mtok("15").unwrap().micros_per_mtok(), 15_000_000);
        assert!(Price::per_mtok("0.0000001").is_err());
    }

    #[test]
    fn cost_rounds_up_once_per_call() {
        // 3 tokens at $0.15/Mtok = 0.45 µUSD, and 3 more = 0.9 µUSD: one µUSD,
        // not two (rounding each class up separately would overcharge).
        let price = Price::per_mtok("0.15").unwrap();
        let mut cost = Cost::default();
        cost.add(3, price);
        cost.add(3, price);
        assert_eq!(cost.usd_micros(), 1);

        let mut exact = Cost::default();
        exact.add(1_000_000, Price::per_mtok("2.50").unwrap());
        assert_eq!(exact.usd_micros(), 2_500_000);

        let mut tiny = Cost::default();
        tiny.add(1, Price::per_mtok("0.000001").unwrap());
        assert_eq!(tiny.usd_micros(), 1);
        assert_eq!(Cost::default().usd_micros(), 0);
    }

    #[test]
    fn fees_join_the_sum_before_the_one_rounding() {
        // 0.4 µUSD of tokens and a 10,000 µUSD fee: 10,001, not 10,000.
        let mut cost = Cost::default();
        cost.add(4, Price::per_mtok("0.1").unwrap());
        cost.add_fees(1, 10_000);
        assert_eq!(cost.usd_micros(), 10_001);
        cost.add_fees(3, 2_500);
        assert_eq!(cost.usd_micros(), 17_501);
        let mut huge = Cost::default();
        huge.add_fees(u64::MAX, u64::MAX);
        assert_eq!(huge.usd_micros(), MAX_USD_MICROS);
    }

    #[test]
    fn cost_saturates() {
        let mut cost = Cost::default();
        cost.add(u64::MAX, Price::per_mtok("1000").unwrap());
        assert_eq!(cost.usd_micros(), MAX_USD_MICROS);
        assert_eq!(cost.checked_usd_micros(), None);
    }

    #[test]
    fn checked_cost_stops_below_2_to_the_53() {
        let per_token = Price::per_mtok("1").unwrap();
        let mut at_limit = Cost::default();
        at_limit.add(MAX_USD_MICROS, per_token);
        assert_eq!(at_limit.checked_usd_micros(), Some(MAX_USD_MICROS));
        let mut past = at_limit;
        past.add(1, per_token);
        assert_eq!(past.checked_usd_micros(), None);
        assert_eq!(past.usd_micros(), MAX_USD_MICROS);
    }
}
