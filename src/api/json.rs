//! Reading a request body the way every JSON parser reads it. Parsers
//! disagree on a key that appears twice in one object (most keep the last,
//! some the first), so a provider could read another `model` or output
//! limit than the one the gateway priced: such a body is refused.
//!
//! serde_json still does the parsing; only the [`Value`] is built here,
//! because serde_json's own keeps the last of a repeated key without a
//! word and has no setting to refuse one (nor does any crate that builds
//! a `Value`). A visitor that checks each object's keys as they are read
//! costs no second pass over the body.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `bytes` as JSON, refusing any object that names a key twice.
pub fn parse_unambiguous(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Unambiguous.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Builds a [`Value`] like serde_json's own, checking each object's keys.
#[derive(Clone, Copy)]
struct Unambiguous;

impl<'de> DeserializeSeed<'de> for Unambiguous {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unambiguous {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key `{key}` appears twice in one object; send each key once"
                )));
            }
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_serde_json_reads() {
        let text =
            r#"{"a":[1,-2,3.5,"x",null,true,{"b":{}}],"c":"\u00e9\"","d":18446744073709551615}"#;
        let ours = parse_unambiguous(text.as_bytes()).unwrap();
        let theirs: Value = serde_json::from_str(text).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn refuses_a_key_twice_at_any_depth() {
        for text in [
            r#"{"model":"a","model":"b"}"#,
            r#"{"x":[{"max_tokens":1,"max_tokens":2}]}"#,
            r#"{"m\u006fdel":"a","model":"b"}"#,
        ] {
            let error = parse_unambiguous(text.as_bytes()).unwrap_err().to_string();
            assert!(error.contains("appears twice"), "{text}: {error}");
        }
        // The same key in two objects is fine.
        assert!(parse_unambiguous(br#"{"a":{"k":1},"b":{"k":2}}"#).is_ok());
    }

    #[test]
    fn refuses_trailing_bytes_and_bad_json() {
        assert!(parse_unambiguous(br#"{"a":1} x"#).is_err());
        assert!(parse_unambiguous(br#"{"a":"#).is_err());
    }
}
