//! One token count as a provider writes it, read without trusting it: a
//! whole number below 2^53, or an [`AbsurdUsage`] naming what was there.
//!
//! A count that is negative, fractional, 2^53 or more, or not a number at
//! all is no count a call can have. Reading it as absent (0) would charge
//! the call less than it may have cost, so it is kept apart: the call is
//! then charged its upper bound (docs/design.md, "Never under-charge").

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// Counts at or above 2^53 break the stores' exact arithmetic (Lua numbers
/// are doubles), and no call comes near it.
const MAX_COUNT: u64 = (1 << 53) - 1;

/// The longest piece of an absurd value kept for the log: a provider's
/// string can be any length.
const MAX_VALUE_CHARS: usize = 40;

/// A usage count no call can have, with the field it came in and the value
/// as it read, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbsurdUsage {
    pub field: &'static str,
    pub value: String,
}

impl fmt::Display for AbsurdUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}", self.field, self.value)
    }
}

/// One count as read: a believable number of tokens, or the value that was
/// there instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Count(Result<u64, String>);

impl Count {
    /// The count of `field`, 0 when absent (or `null`).
    pub(crate) fn read(field: &'static str, count: Option<&Count>) -> Result<u64, AbsurdUsage> {
        match count {
            None => Ok(0),
            Some(Count(Ok(tokens))) => Ok(*tokens),
            Some(Count(Err(value))) => Err(AbsurdUsage {
                field,
                value: value.clone(),
            }),
        }
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Any JSON value is read, so an absurd count never fails the parse
        // of the event or body around it (its text and other counts).
        deserializer.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

fn absurd<E>(value: impl fmt::Display) -> Result<Count, E> {
    let mut text = value.to_string();
    if let Some((cut, _)) = text.char_indices().nth(MAX_VALUE_CHARS) {
        text.truncate(cut);
        text.push('…');
    }
    Ok(Count(Err(text)))
}

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a token count")
    }

    fn visit_u64<E: de::Error>(self, tokens: u64) -> Result<Count, E> {
        if tokens > MAX_COUNT {
            return absurd(tokens);
        }
        Ok(Count(Ok(tokens)))
    }

    fn visit_i64<E: de::Error>(self, tokens: i64) -> Result<Count, E> {
        match u64::try_from(tokens) {
            Ok(tokens) => self.visit_u64(tokens),
            Err(_) => absurd(tokens),
        }
    }

    /// A whole number written as a float (`12.0`) is that count; a
    /// fraction is not a count.
    fn visit_f64<E: de::Error>(self, tokens: f64) -> Result<Count, E> {
        // Below 2^53 every whole f64 converts to u64 exactly.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        if tokens.fract() == 0.0 && (0.0..=MAX_COUNT as f64).contains(&tokens) {
            return Ok(Count(Ok(tokens as u64)));
        }
        absurd(tokens)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Count, E> {
        absurd(format_args!("{text:?}"))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Count, E> {
        absurd(value)
    }

    /// `null` where a count was expected reads as absent, as it does for
    /// an optional field.
    fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
        Ok(Count(Ok(0)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        absurd("an array")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        absurd("an object")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<u64, AbsurdUsage> {
        let count: Option<Count> = serde_json::from_str(json).unwrap();
        Count::read("output_tokens", count.as_ref())
    }

    fn absurd_value(json: &str) -> String {
        read(json).unwrap_err().value
    }

    #[test]
    fn whole_counts_below_2_to_the_53_read_as_they_are() {
        assert_eq!(read("0"), Ok(0));
        assert_eq!(read("1271"), Ok(1271));
        assert_eq!(read("9007199254740991"), Ok(MAX_COUNT));
        assert_eq!(read("12.0"), Ok(12));
        assert_eq!(read("1e3"), Ok(1000));
        assert_eq!(read("null"), Ok(0));
    }

    #[test]
    fn counts_no_call_can_have_are_absurd() {
        assert_eq!(
            read("-5"),
            Err(AbsurdUsage {
                field: "output_tokens",
                value: "-5".to_owned()
            })
        );
        assert_eq!(absurd_value("12.5"), "12.5");
        assert_eq!(absurd_value("9007199254740992"), "9007199254740992");
        assert_eq!(absurd_value("18446744073709551615"), "18446744073709551615");
        // Beyond u64, serde_json reads a float.
        assert_eq!(absurd_value("1e30"), "1000000000000000000000000000000");
        assert_eq!(absurd_value("-0.5"), "-0.5");
        assert_eq!(absurd_value("\"12\""), "\"12\"");
        assert_eq!(absurd_value("true"), "true");
        assert_eq!(absurd_value("[1]"), "an array");
        assert_eq!(absurd_value("{\"a\":1}"), "an object");
    }

    #[test]
    fn a_long_absurd_value_is_cut_for_the_log() {
        let long = format!("\"{}\"", "x".repeat(1_000));
        let value = absurd_value(&long);
        assert_eq!(value.chars().count(), MAX_VALUE_CHARS + 1, "{value}");
        assert!(value.ends_with('…'));
        assert_eq!(read("-7").unwrap_err().to_string(), "output_tokens = -7");
    }
}
