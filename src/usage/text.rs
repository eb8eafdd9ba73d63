//! Measuring the text a stream event carries without keeping it: a JSON
//! string is read for its decoded byte length and dropped, and an array
//! of choices or tool calls is folded as it is parsed, so metering an
//! event allocates nothing beyond serde_json's scratch space for escaped
//! strings. Each family's event shapes are built from these pieces.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// Generated text carried by a parsed piece of an event.
pub(crate) trait TextBytes {
    fn text_bytes(&self) -> u64;
}

pub(crate) fn len(text: Option<TextLen>) -> u64 {
    text.map_or(0, |t| t.0)
}

/// The decoded UTF-8 length of a JSON string, read without keeping the
/// string. Any other JSON value measures 0 instead of failing the parse, so
/// a provider's unusual content shape never costs the chunk's usage.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TextLen(pub(crate) u64);

impl<'de> Deserialize<'de> for TextLen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextLenVisitor)
    }
}

struct TextLenVisitor;

impl<'de> Visitor<'de> for TextLenVisitor {
    type Value = TextLen;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<TextLen, E> {
        Ok(TextLen(text.len() as u64))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_unit<E: de::Error>(self) -> Result<TextLen, E> {
        Ok(TextLen(0))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextLen, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(TextLen(0))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextLen, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(TextLen(0))
    }
}

/// A JSON array folded, as it is parsed, into its length and the text its
/// elements carry; the elements themselves are never collected.
pub(crate) struct Folded<T> {
    pub(crate) items: u64,
    pub(crate) text_bytes: u64,
    element: PhantomData<T>,
}

impl<T> Default for Folded<T> {
    fn default() -> Self {
        Self {
            items: 0,
            text_bytes: 0,
            element: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de> + TextBytes> Deserialize<'de> for Folded<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(FoldedVisitor(PhantomData))
    }
}

struct FoldedVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + TextBytes> Visitor<'de> for FoldedVisitor<T> {
    type Value = Folded<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Folded<T>, A::Error> {
        let mut folded = Folded::default();
        while let Some(element) = seq.next_element::<T>()? {
            folded.items += 1;
            folded.text_bytes = folded.text_bytes.saturating_add(element.text_bytes());
        }
        Ok(folded)
    }
}
