//! JSON values of a response measured as they are parsed, never kept:
//! the decoded length of a string, the compact length of any value, the
//! length of an array, and the few enum-like fields read. Each of these
//! leaf readers takes any JSON value, so an unusual value from the provider
//! measures nothing instead of failing the parse of the chunk around it;
//! only arrays folded with [`Summed`] insist on their shape.

use std::fmt;
use std::io;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

pub(super) use crate::usage::text::TextLen;

/// Generated text carried by a parsed piece of a response.
pub(super) trait TextBytes {
    fn text_bytes(&self) -> u64;
}

pub(super) fn sum(lengths: impl IntoIterator<Item = u64>) -> u64 {
    lengths.into_iter().fold(0, u64::saturating_add)
}

impl TextBytes for TextLen {
    fn text_bytes(&self) -> u64 {
        self.0
    }
}

impl TextBytes for JsonLen {
    fn text_bytes(&self) -> u64 {
        self.0
    }
}

/// An array folded, as it is parsed, into the text its elements carry.
pub(super) struct Summed<T>(pub(super) u64, PhantomData<T>);

impl<'de, T: Deserialize<'de> + TextBytes> Deserialize<'de> for Summed<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(SummedVisitor(PhantomData))
    }
}

struct SummedVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + TextBytes> Visitor<'de> for SummedVisitor<T> {
    type Value = Summed<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Summed<T>, A::Error> {
        let mut bytes = 0u64;
        while let Some(element) = seq.next_element::<T>()? {
            bytes = bytes.saturating_add(element.text_bytes());
        }
        Ok(Summed(bytes, PhantomData))
    }
}

/// Implements the visitor methods of a lenient reader that gives `$value`
/// for every JSON value it does not expect, draining arrays and objects,
/// so an unusual shape from the provider never fails the parse around it.
macro_rules! lenient_rest {
    ($ty:ty, $value:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_unit<E: de::Error>(self) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$ty, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
}

/// The length of a JSON value written as compact JSON (as serde_json
/// writes it: no whitespace), measured as it is parsed without building
/// it.
///
/// Not the bytes as sent: the JSON-array stream is pretty-printed, and its
/// indentation is no generated text. The compact form is the same length
/// whatever the framing, and within a few bytes of what the model wrote.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct JsonLen(pub(super) u64);

impl<'de> Deserialize<'de> for JsonLen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonLenVisitor)
    }
}

struct JsonLenVisitor;

/// The length of a string or number as serde_json writes it (escapes,
/// number forms), counted as it is written, without a buffer.
fn written_len<T: Serialize + ?Sized>(value: &T) -> u64 {
    struct Counter(u64);
    impl io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len() as u64);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // A string or a finite number always serializes, and the counter
    // never fails a write.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

impl<'de> Visitor<'de> for JsonLenVisitor {
    type Value = JsonLen;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<JsonLen, E> {
        Ok(JsonLen(written_len(text)))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<JsonLen, E> {
        Ok(JsonLen(if value { 4 } else { 5 }))
    }

    fn visit_unit<E: de::Error>(self) -> Result<JsonLen, E> {
        Ok(JsonLen(4))
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<JsonLen, E> {
        Ok(JsonLen(written_len(&number)))
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<JsonLen, E> {
        Ok(JsonLen(written_len(&number)))
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<JsonLen, E> {
        Ok(JsonLen(written_len(&number)))
    }

    /// `[`, the elements, a comma between each two, `]`.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonLen, A::Error> {
        let mut written = 1u64;
        while let Some(element) = seq.next_element::<JsonLen>()? {
            written = written.saturating_add(element.0).saturating_add(1);
        }
        Ok(JsonLen(written.max(2)))
    }

    /// `{`, each `"key":value`, a comma between each two, `}`.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonLen, A::Error> {
        let mut written = 1u64;
        while let Some((key, value)) = map.next_entry::<JsonLen, JsonLen>()? {
            written = sum([written, key.0, 1, value.0, 1]);
        }
        Ok(JsonLen(written.max(2)))
    }
}

/// The number of elements of a JSON array, counted without keeping them;
/// any other value counts 0.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ItemCount(pub(super) u64);

impl<'de> Deserialize<'de> for ItemCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ItemCountVisitor)
    }
}

struct ItemCountVisitor;

impl<'de> Visitor<'de> for ItemCountVisitor {
    type Value = ItemCount;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ItemCount, A::Error> {
        let mut items = 0u64;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            items += 1;
        }
        Ok(ItemCount(items))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<ItemCount, E> {
        Ok(ItemCount(0))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<ItemCount, E> {
        Ok(ItemCount(0))
    }

    lenient_rest!(ItemCount, ItemCount(0));
}

/// Whether a `finishReason` says the candidate stopped: any reason but
/// none (empty, or the enum's unused default).
pub(super) struct FinishReason(pub(super) bool);

impl<'de> Deserialize<'de> for FinishReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FinishReasonVisitor)
    }
}

struct FinishReasonVisitor;

impl<'de> Visitor<'de> for FinishReasonVisitor {
    type Value = FinishReason;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a finish reason")
    }

    fn visit_str<E: de::Error>(self, reason: &str) -> Result<FinishReason, E> {
        let reason = reason.trim();
        Ok(FinishReason(
            !reason.is_empty() && reason != "FINISH_REASON_UNSPECIFIED",
        ))
    }

    /// Proto3 JSON readers accept an enum by number; 0 is the default.
    fn visit_u64<E: de::Error>(self, reason: u64) -> Result<FinishReason, E> {
        Ok(FinishReason(reason != 0))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FinishReason, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(FinishReason(false))
    }

    lenient_rest!(FinishReason, FinishReason(false));
}

/// A candidate's `index`; `None` when it is no index a candidate can have.
pub(super) struct CandidateIndex(pub(super) Option<u32>);

impl<'de> Deserialize<'de> for CandidateIndex {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CandidateIndexVisitor)
    }
}

struct CandidateIndexVisitor;

impl<'de> Visitor<'de> for CandidateIndexVisitor {
    type Value = CandidateIndex;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a candidate index")
    }

    fn visit_u64<E: de::Error>(self, index: u64) -> Result<CandidateIndex, E> {
        Ok(CandidateIndex(u32::try_from(index).ok()))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<CandidateIndex, E> {
        Ok(CandidateIndex(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CandidateIndex, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(CandidateIndex(None))
    }

    lenient_rest!(CandidateIndex, CandidateIndex(None));
}
