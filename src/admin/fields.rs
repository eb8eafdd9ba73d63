//! What an admin body may say, checked field by field: each bad field gets
//! a 400 naming it and saying how to write it, and nothing is changed.

use serde_json::{Map, Value};

use super::AdminError;
use crate::config::OnInsufficient;
use crate::money::{parse_usd, Threshold};
use crate::period::Period;

/// The most metadata a key may carry, as JSON text.
const MAX_METADATA_BYTES: usize = 16 * 1024;

/// A body's fields, taken one by one; what is left at the end is unknown.
pub struct Fields {
    map: Map<String, Value>,
}

impl Fields {
    pub fn new(map: Map<String, Value>) -> Fields {
        Fields { map }
    }

    /// Refuses a field nobody took: a misspelt field must not be ignored.
    pub fn finish(self, known: &str) -> Result<(), AdminError> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(name) => Err(AdminError::bad(
                format!("unknown field `{name}`; the fields are {known}"),
                Some(name),
            )),
        }
    }

    /// Whether the body names `name` at all (even as `null`).
    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name).filter(|value| !value.is_null())
    }

    /// An id: `[A-Za-z0-9._-]{1,64}`.
    pub fn id(&mut self, name: &str) -> Result<Option<String>, AdminError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(id)) if valid_id(&id) => Ok(Some(id)),
            Some(_) => Err(bad_id(name)),
        }
    }

    /// A decimal USD string, in µUSD.
    pub fn usd(&mut self, name: &str) -> Result<Option<u64>, AdminError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(text)) => parse_usd(&text)
                .map(Some)
                .map_err(|error| AdminError::bad(format!("{name}: {error}"), Some(name))),
            Some(Value::Number(number)) => Err(AdminError::bad(
                format!(
                    "{name} must be a decimal string such as \"{number}\", not a JSON number \
                     (money is never passed through a float)"
                ),
                Some(name),
            )),
            Some(_) => Err(AdminError::bad(
                format!("{name} must be a decimal string such as \"25.00\""),
                Some(name),
            )),
        }
    }

    /// A signed decimal USD string (`"-0.25"` refunds), in µUSD.
    pub fn signed_usd(&mut self, name: &str) -> Result<Option<i64>, AdminError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(text)) => super::books::parse_signed_usd(&text)
                .map(Some)
                .map_err(|why| AdminError::bad(format!("{name}: {why}"), Some(name))),
            Some(_) => Err(AdminError::bad(
                format!("{name} must be a decimal string such as \"-0.25\" (negative refunds)"),
                Some(name),
            )),
        }
    }

    /// Text of at most `max` bytes, not blank.
    pub fn text(&mut self, name: &str, max: usize) -> Result<Option<String>, AdminError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(text)) if !text.trim().is_empty() && text.len() <= max => {
                Ok(Some(text))
            }
            Some(_) => Err(AdminError::bad(
                format!("{name} must be text of 1 to {max} bytes"),
                Some(name),
            )),
        }
    }

    pub fn period(&mut self) -> Result<Option<Period>, AdminError> {
        match self.take("period") {
            None => Ok(None),
            Some(Value::String(text)) => text.parse().map(Some).map_err(|_| bad_period()),
            Some(_) => Err(bad_period()),
        }
    }

    /// A model allow-list: glob patterns; `null` (or absent) allows every
    /// model.
    pub fn models(&mut self) -> Result<Option<Vec<String>>, AdminError> {
        let bad = |why: String| AdminError::bad(format!("models: {why}"), Some("models"));
        match self.take("models") {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(pattern) if !pattern.is_empty() => glob::Pattern::new(&pattern)
                        .map(|_| pattern)
                        .map_err(|error| bad(format!("{error}"))),
                    _ => Err(bad(
                        "each entry must be a model name or a glob such as \"gpt-4o*\"".to_owned(),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(bad(
                "must be a list of model names or globs, or null for every model".to_owned(),
            )),
        }
    }

    /// An RFC 3339 time, kept as the canonical UTC text; `null` clears it.
    pub fn time(&mut self, name: &str) -> Result<Option<String>, AdminError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(text)) => crate::directory::parse_time(&text)
                .map(|at| Some(crate::directory::format_time(at)))
                .map_err(|why| AdminError::bad(format!("{name}: {why}"), Some(name))),
            Some(_) => Err(AdminError::bad(
                format!(
                    "{name} must be an RFC 3339 time such as \"2026-12-31T00:00:00Z\", or null"
                ),
                Some(name),
            )),
        }
    }

    pub fn bool(&mut self, name: &str) -> Result<Option<bool>, AdminError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Bool(value)) => Ok(Some(value)),
            Some(_) => Err(AdminError::bad(
                format!("{name} must be true or false"),
                Some(name),
            )),
        }
    }

    /// Free-form metadata: a JSON object of bounded size.
    pub fn metadata(&mut self) -> Result<Option<Map<String, Value>>, AdminError> {
        match self.take("metadata") {
            None => Ok(None),
            Some(Value::Object(map)) => {
                if Value::Object(map.clone()).to_string().len() > MAX_METADATA_BYTES {
                    return Err(AdminError::bad(
                        format!("metadata is larger than {MAX_METADATA_BYTES} bytes of JSON"),
                        Some("metadata"),
                    ));
                }
                Ok(Some(map))
            }
            Some(_) => Err(AdminError::bad(
                "metadata must be a JSON object",
                Some("metadata"),
            )),
        }
    }

    /// What a key does with a call whose client-set output limit does not
    /// fit: `"refuse"` it (402), or `"clamp"` the limit to what fits.
    pub fn on_insufficient(&mut self) -> Result<Option<String>, AdminError> {
        match self.take("on_insufficient") {
            None => Ok(None),
            Some(Value::String(text)) if OnInsufficient::parse(&text).is_some() => Ok(Some(text)),
            Some(_) => Err(AdminError::bad(
                "on_insufficient must be \"refuse\" (a call whose bound does not fit what \
                 remains gets 402) or \"clamp\" (its output limit is lowered to what fits)",
                Some("on_insufficient"),
            )),
        }
    }

    /// Alert thresholds: fractions of the cap as decimal strings, each in
    /// (0, 1], ascending (`["0.5", "0.8"]`); `[]` sends none.
    pub fn alert_at(&mut self) -> Result<Option<Vec<String>>, AdminError> {
        let bad =
            |message: String| AdminError::bad(format!("alert_at: {message}"), Some("alert_at"));
        match self.take("alert_at") {
            None => Ok(None),
            Some(Value::Array(items)) => {
                let texts = items
                    .into_iter()
                    .map(|item| match item {
                        Value::String(text) => Ok(text),
                        _ => Err(bad(
                            "each threshold is a decimal string like \"0.8\", not a JSON number"
                                .to_owned(),
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Threshold::parse_list(&texts).map_err(bad)?;
                Ok(Some(texts))
            }
            Some(_) => Err(bad(
                "a list of fractions of the cap as decimal strings, like [\"0.5\", \"0.8\"]"
                    .to_owned(),
            )),
        }
    }
}

fn bad_period() -> AdminError {
    AdminError::bad(
        "period must be one of \"hour\", \"day\", \"week\", \"month\", \"total\"",
        Some("period"),
    )
}

/// The 400 for an id that breaks the rule of [`valid_id`], naming `name`.
pub fn bad_id(name: &str) -> AdminError {
    AdminError::bad(
        format!(
            "{name} must be 1 to 64 of A-Z, a-z, 0-9, `.`, `_` and `-`, and not `.` or `..` \
             (in a path: as it is, not percent-encoded)"
        ),
        Some(name),
    )
}

/// Whether `id` may name a key or an org. Not `.` nor `..`: in a path
/// (`/admin/v1/keys/..`) every URL-normalizing client (curl, browsers,
/// reqwest) rewrites them away, so such a key could be made but never
/// shown, changed or deleted again.
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A cap must be given when a key or org is made.
pub fn required<T>(value: Option<T>, name: &str) -> Result<T, AdminError> {
    value.ok_or_else(|| AdminError::bad(format!("{name} is required"), Some(name)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(value: Value) -> Fields {
        match value {
            Value::Object(map) => Fields::new(map),
            _ => unreachable!(),
        }
    }

    #[test]
    fn money_is_a_decimal_string_and_never_a_number() {
        let mut f = fields(json!({"cap_usd": "25.50", "amount": 3.5}));
        assert_eq!(f.usd("cap_usd").unwrap(), Some(25_500_000));
        let error = f.usd("amount").unwrap_err();
        assert_eq!(error.status, http::StatusCode::BAD_REQUEST);
        assert_eq!(error.param.as_deref(), Some("amount"));
        assert!(
            error.message.contains("decimal string"),
            "{}",
            error.message
        );
        let mut f = fields(json!({"cap_usd": "1e3"}));
        assert!(f.usd("cap_usd").is_err());
        let mut f = fields(json!({"cap_usd": "9007199255"}));
        assert!(f.usd("cap_usd").is_err());
    }

    #[test]
    fn ids_are_short_and_plain() {
        assert!(valid_id("agent-7.prod_1"));
        assert!(!valid_id(""));
        assert!(!valid_id(&"a".repeat(65)));
        assert!(!valid_id("a b"));
        assert!(!valid_id("a/b"));
        assert!(!valid_id("<script>"));
        assert!(!valid_id(".") && !valid_id(".."));
        assert!(valid_id("...") && valid_id("a..b"));
        assert!(!valid_id("\u{430}gent") && !valid_id("agent\u{200b}") && !valid_id("agent "));
    }

    #[test]
    fn an_unknown_field_is_named() {
        let mut f = fields(json!({"cap_usd": "1", "cap": "2"}));
        f.usd("cap_usd").unwrap();
        let error = f.finish("cap_usd").unwrap_err();
        assert_eq!(error.param.as_deref(), Some("cap"));
    }

    #[test]
    fn times_are_kept_in_utc_and_models_as_globs() {
        let mut f =
            fields(json!({"expires_at": "2026-12-31T01:00:00+01:00", "models": ["gpt-4o*"]}));
        assert_eq!(
            f.time("expires_at").unwrap().as_deref(),
            Some("2026-12-31T00:00:00Z")
        );
        assert_eq!(f.models().unwrap(), Some(vec!["gpt-4o*".to_owned()]));
        let mut f = fields(json!({"expires_at": "tomorrow", "models": ["[x"]}));
        assert!(f.time("expires_at").is_err());
        assert!(f.models().is_err());
    }
}
