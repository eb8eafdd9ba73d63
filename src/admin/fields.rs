//! What an admin body may say, checked field by field: each bad field gets
//! a 400 naming it and saying how to write it, and nothing is changed.

use serde_json::{Map, Value};

use super::AdminError;
use crate::config::limits::FieldError;
use crate::config::{CustomerFrom, CustomerSpec, CustomerTemplate, ModelCapSpec, OnInsufficient};
use crate::money::{parse_usd, Threshold};
use crate::period::Period;

/// The most metadata a key may carry, as JSON text.
const MAX_METADATA_BYTES: usize = 16 * 1024;

/// The fields of a model group, as the config file's `model_caps` take them.
const GROUP_FIELDS: &str = "name, models, cap_usd, period, rpm, tpm";

/// A model group as an example, for the messages that say how to write one.
const GROUP_EXAMPLE: &str =
    r#"{"name": "opus", "models": ["claude-opus-*"], "cap_usd": "50.00", "period": "day"}"#;

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
        self.period_named("period")
    }

    /// A period (`minute` … `total`) in the field `name`.
    pub fn period_named(&mut self, name: &str) -> Result<Option<Period>, AdminError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(text)) => text.parse().map(Some).map_err(|_| bad_period(name)),
            Some(_) => Err(bad_period(name)),
        }
    }

    /// A decimal USD string, checked and kept as written (a document keeps
    /// a customer cap as its text, as the config file does).
    pub fn usd_text(&mut self, name: &str) -> Result<Option<String>, AdminError> {
        match self.map.get(name) {
            Some(Value::String(text)) => {
                let text = text.trim().to_owned();
                self.usd(name)?;
                Ok(Some(text))
            }
            _ => self.usd(name).map(|_| None),
        }
    }

    /// Where a key's calls name their customer: `"header"` (the
    /// `x-tollgate-customer` header) or `"body"` (the body's end-user
    /// field, else the header).
    pub fn customer_from(&mut self) -> Result<Option<CustomerFrom>, AdminError> {
        let name = "customer_from";
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(text)) if CustomerFrom::parse(&text).is_some() => {
                Ok(CustomerFrom::parse(&text))
            }
            Some(_) => Err(AdminError::bad(
                "customer_from must be \"header\" (the x-tollgate-customer header names a \
                 call's customer) or \"body\" (the body's end-user field: OpenAI's \
                 `safety_identifier` or `user`, Anthropic's `metadata.user_id`; else the header)",
                Some(name),
            )),
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

    /// Model groups (`model_caps`): a list of `{name, models, cap_usd,
    /// period, rpm, tpm}`; `null` is none, like `[]`. Each group's fields
    /// are held to their types here (a misspelt field, a number for
    /// `cap_usd`, named as `model_caps[0].cap_usd`); their values, with the
    /// rate limits, by [`checked_limits`].
    pub fn model_caps(&mut self) -> Result<Option<Vec<ModelCapSpec>>, AdminError> {
        match self.map.remove("model_caps") {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(Vec::new())),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(at, item)| model_cap(at, item))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(AdminError::bad(
                format!(
                    "model_caps must be a list of groups such as [{GROUP_EXAMPLE}], \
                     or null for none"
                ),
                Some("model_caps"),
            )),
        }
    }

    /// A rate limit (`rpm`, `tpm`): a whole number per minute; `null` (or
    /// absent) is none. 0 and the too-large are refused by
    /// [`checked_limits`].
    pub fn rate(&mut self, name: &str) -> Result<Option<u64>, AdminError> {
        match self.take(name) {
            None => Ok(None),
            Some(value) => value.as_u64().map(Some).ok_or_else(|| bad_rate(name)),
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

fn bad_period(name: &str) -> AdminError {
    AdminError::bad(
        format!(
            "{name} must be one of \"minute\", \"hour\", \"day\", \"week\", \"month\", \"total\""
        ),
        Some(name),
    )
}

/// One model group of a body's `model_caps`, its fields held to their
/// types; `at` is its place in the list.
fn model_cap(at: usize, item: Value) -> Result<ModelCapSpec, AdminError> {
    let field = |name: &str| format!("model_caps[{at}].{name}");
    let Value::Object(mut group) = item else {
        return Err(AdminError::bad(
            format!("model_caps[{at}] must be an object such as {GROUP_EXAMPLE}"),
            Some(&format!("model_caps[{at}]")),
        ));
    };
    let known = ["name", "models", "cap_usd", "period", "rpm", "tpm"];
    if let Some(unknown) = group.keys().find(|name| !known.contains(&name.as_str())) {
        let name = field(unknown);
        return Err(AdminError::bad(
            format!("unknown field `{name}`; a group's fields are {GROUP_FIELDS}"),
            Some(&name),
        ));
    }
    let mut take = |name: &str| group.remove(name).filter(|value| !value.is_null());
    let (name, models, cap_usd, period, rpm, tpm) = (
        take("name"),
        take("models"),
        take("cap_usd"),
        take("period"),
        take("rpm"),
        take("tpm"),
    );
    let name = match name {
        Some(Value::String(name)) => name,
        None => {
            return Err(AdminError::bad(
                format!(
                    "{} is required: the group's name, such as \"opus\"",
                    field("name")
                ),
                Some(&field("name")),
            ))
        }
        Some(_) => {
            return Err(AdminError::bad(
                format!("{} must be text, such as \"opus\"", field("name")),
                Some(&field("name")),
            ))
        }
    };
    let bad_models = || {
        AdminError::bad(
            format!(
                "{} must be a list of model names or globs, such as [\"claude-opus-*\"]",
                field("models")
            ),
            Some(&field("models")),
        )
    };
    let models = match models {
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(pattern) => Ok(pattern),
                _ => Err(bad_models()),
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(bad_models()),
    };
    let cap_usd = match cap_usd {
        None => None,
        Some(Value::String(text)) => Some(text),
        Some(Value::Number(number)) => {
            return Err(AdminError::bad(
                format!(
                    "{} must be a decimal string such as \"{number}\", not a JSON number \
                     (money is never passed through a float)",
                    field("cap_usd")
                ),
                Some(&field("cap_usd")),
            ))
        }
        Some(_) => {
            return Err(AdminError::bad(
                format!(
                    "{} must be a decimal string such as \"50.00\"",
                    field("cap_usd")
                ),
                Some(&field("cap_usd")),
            ))
        }
    };
    let period = match period {
        None => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => {
            return Err(AdminError::bad(
                format!(
                "{} must be one of \"minute\", \"hour\", \"day\", \"week\", \"month\", \"total\"",
                field("period")
            ),
                Some(&field("period")),
            ))
        }
    };
    let rate = |name: &str, value: Option<Value>| match value {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad_rate(&field(name))),
    };
    Ok(ModelCapSpec {
        name,
        models,
        cap_usd,
        period,
        rpm: rate("rpm", rpm)?,
        tpm: rate("tpm", tpm)?,
    })
}

fn bad_rate(name: &str) -> AdminError {
    let per = if name.ends_with("tpm") {
        "tokens (input and output)"
    } else {
        "requests"
    };
    AdminError::bad(
        format!(
            "{name} must be a whole number of {per} per minute, at least 1, or null for no limit"
        ),
        Some(name),
    )
}

/// A key's or an org's model groups and rate limits, checked as the config
/// file's are: a bad value gets 400 naming its field (`model_caps[0].cap_usd`,
/// `rpm`) with the check's message.
pub fn checked_limits(
    model_caps: &[ModelCapSpec],
    rpm: Option<u64>,
    tpm: Option<u64>,
) -> Result<(), AdminError> {
    crate::config::Limits::check(model_caps, rpm, tpm)
        .map(|_| ())
        .map_err(|FieldError { field, message }| {
            AdminError::bad(format!("{field}: {message}"), Some(&field))
        })
}

/// A key's customer template (`customer_*`), checked as the config file's
/// is: a bad value gets 400 naming its field with the check's message.
pub fn checked_customer(spec: CustomerSpec<'_>) -> Result<CustomerTemplate, AdminError> {
    CustomerTemplate::check(spec).map_err(|FieldError { field, message }| {
        AdminError::bad(format!("{field}: {message}"), Some(&field))
    })
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
    fn model_groups_and_rates_name_the_field_they_got_wrong() {
        let param = |body: Value| {
            let mut f = fields(body);
            let error = match f.model_caps() {
                Err(error) => error,
                Ok(groups) => {
                    let rpm = f.rate("rpm");
                    let tpm = f.rate("tpm");
                    match (rpm, tpm) {
                        (Err(error), _) | (_, Err(error)) => error,
                        (Ok(rpm), Ok(tpm)) => {
                            checked_limits(&groups.unwrap_or_default(), rpm, tpm).unwrap_err()
                        }
                    }
                }
            };
            assert_eq!(error.status, http::StatusCode::BAD_REQUEST);
            error.param.unwrap_or_default()
        };
        let opus = || json!({"name": "opus", "models": ["claude-opus-*"], "cap_usd": "50.00", "period": "day"});
        let with = |field: &str, value: Value| {
            let mut group = opus();
            group[field] = value;
            json!({"model_caps": [opus(), group]})
        };
        assert_eq!(param(with("cap_usd", json!(50))), "model_caps[1].cap_usd");
        assert_eq!(
            param(with("cap_usd", json!("lots"))),
            "model_caps[1].cap_usd"
        );
        assert_eq!(param(with("cost", json!("1"))), "model_caps[1].cost");
        assert_eq!(
            param(with("models", json!("claude-*"))),
            "model_caps[1].models"
        );
        assert_eq!(param(with("models", json!([]))), "model_caps[1].models");
        assert_eq!(param(with("rpm", json!(1.5))), "model_caps[1].rpm");
        assert_eq!(param(with("tpm", json!(0))), "model_caps[1].tpm");
        assert_eq!(
            param(with("period", json!("fortnight"))),
            "model_caps[1].period"
        );
        // The same name twice: the second is named.
        assert_eq!(param(with("period", json!("day"))), "model_caps[1].name");
        assert_eq!(param(json!({"model_caps": [7]})), "model_caps[0]");
        assert_eq!(param(json!({"model_caps": {"name": "a"}})), "model_caps");
        assert_eq!(param(json!({"rpm": -1})), "rpm");
        assert_eq!(param(json!({"rpm": "60"})), "rpm");
        assert_eq!(param(json!({"tpm": 0})), "tpm");

        let mut f = fields(json!({"model_caps": null, "rpm": 60, "tpm": null}));
        assert_eq!(f.model_caps().unwrap(), Some(Vec::new()));
        assert_eq!(f.rate("rpm").unwrap(), Some(60));
        assert_eq!(f.rate("tpm").unwrap(), None);
        let mut f = fields(json!({"model_caps": [opus()]}));
        let groups = f.model_caps().unwrap().unwrap();
        assert_eq!(groups[0].cap_usd.as_deref(), Some("50.00"));
        assert!(checked_limits(&groups, None, None).is_ok());
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
