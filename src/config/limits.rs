//! A key's or an org's caps beyond its money cap: model groups
//! (`model_caps`) and rate limits (`rpm`, `tpm`), as the config file and
//! the admin API write them ([`ModelCapSpec`]) and as the gateway
//! enforces them ([`Limits`]). `directory::caps` turns them into what a
//! call is reserved against.

use glob::Pattern;
use serde::{Deserialize, Serialize};

use crate::money::{parse_usd, UsdMicros, MAX_USD_MICROS};
use crate::period::Period;

/// The most model groups a key or an org may have.
pub const MAX_MODEL_CAPS: usize = 32;

/// A model group as written, in the config file or an admin request, and
/// as the admin API keeps it: money as a decimal string.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCapSpec {
    pub name: String,
    /// Globs over the priced model name.
    pub models: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_usd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
}

/// A model group as enforced.
#[derive(Clone, Debug)]
pub struct ModelCap {
    pub name: String,
    pub models: Vec<Pattern>,
    /// The group's money cap per `period`; `None`: rate limits only.
    pub cap: Option<UsdMicros>,
    pub period: Period,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    /// As written, for the admin API to show.
    pub spec: ModelCapSpec,
}

impl ModelCap {
    pub fn matches(&self, model: &str) -> bool {
        self.models.iter().any(|pattern| pattern.matches(model))
    }
}

/// A key's or an org's caps beyond its money cap.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    pub model_caps: Vec<ModelCap>,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
}

/// A field a check refused, named under the object it is in
/// (`model_caps[0].cap_usd`), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl Limits {
    /// Checks what a key or an org wrote; fields are named as written.
    pub fn check(
        model_caps: &[ModelCapSpec],
        rpm: Option<u64>,
        tpm: Option<u64>,
    ) -> Result<Limits, FieldError> {
        if model_caps.len() > MAX_MODEL_CAPS {
            return Err(FieldError::new(
                "model_caps",
                format!(
                    "{} groups: at most {MAX_MODEL_CAPS} (each is read on every budget view)",
                    model_caps.len()
                ),
            ));
        }
        let mut groups: Vec<ModelCap> = Vec::with_capacity(model_caps.len());
        for (i, spec) in model_caps.iter().enumerate() {
            let group = model_cap(spec).map_err(|error| FieldError {
                field: format!("model_caps[{i}].{}", error.field),
                ..error
            })?;
            if groups.iter().any(|other| other.name == group.name) {
                return Err(FieldError::new(
                    format!("model_caps[{i}].name"),
                    format!(
                        "{:?} names another group too; names must differ",
                        group.name
                    ),
                ));
            }
            groups.push(group);
        }
        Ok(Limits {
            model_caps: groups,
            rpm: rate("rpm", rpm)?,
            tpm: rate("tpm", tpm)?,
        })
    }

    /// Whether a call of this key or org is held against any rate limit.
    pub fn has_rate_limits(&self) -> bool {
        self.rpm.is_some()
            || self.tpm.is_some()
            || self
                .model_caps
                .iter()
                .any(|group| group.rpm.is_some() || group.tpm.is_some())
    }
}

fn model_cap(spec: &ModelCapSpec) -> Result<ModelCap, FieldError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if spec.name.is_empty() || spec.name.len() > 64 || !spec.name.chars().all(allowed) {
        return Err(FieldError::new(
            "name",
            format!(
                "{:?} is not a group name: 1 to 64 letters, digits, '.', '_' or '-'",
                spec.name
            ),
        ));
    }
    if spec.models.is_empty() {
        return Err(FieldError::new(
            "models",
            "an empty list matches no model: name the models' globs, such as \"claude-opus-*\"",
        ));
    }
    let models = spec
        .models
        .iter()
        .enumerate()
        .map(|(i, text)| {
            if text.is_empty() {
                return Err(FieldError::new(
                    format!("models[{i}]"),
                    "an empty pattern matches no model",
                ));
            }
            Pattern::new(text).map_err(|error| {
                FieldError::new(
                    format!("models[{i}]"),
                    format!("{text:?} is not a glob pattern: {error}"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cap = spec
        .cap_usd
        .as_deref()
        .map(|text| parse_usd(text).map_err(|error| FieldError::new("cap_usd", error.to_string())))
        .transpose()?;
    let period = match (&spec.period, cap) {
        (Some(text), _) => text
            .parse::<Period>()
            .map_err(|error| FieldError::new("period", error.to_string()))?,
        (None, Some(_)) => return Err(FieldError::new(
            "period",
            "missing: a group's cap_usd needs a period (minute, hour, day, week, month or total)",
        )),
        (None, None) => Period::Total,
    };
    let (rpm, tpm) = (rate("rpm", spec.rpm)?, rate("tpm", spec.tpm)?);
    if cap.is_none() && rpm.is_none() && tpm.is_none() {
        return Err(FieldError::new(
            "cap_usd",
            "missing: a group caps something: set cap_usd (with period), rpm or tpm",
        ));
    }
    Ok(ModelCap {
        name: spec.name.clone(),
        models,
        cap,
        period,
        rpm,
        tpm,
        spec: spec.clone(),
    })
}

/// Where a key's calls name their customer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CustomerFrom {
    /// The `x-tollgate-customer` header.
    #[default]
    Header,
    /// The body's end-user field (OpenAI's `user` or `safety_identifier`,
    /// Anthropic's `metadata.user_id`), else the header.
    Body,
}

impl CustomerFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            CustomerFrom::Header => "header",
            CustomerFrom::Body => "body",
        }
    }

    pub fn parse(text: &str) -> Option<CustomerFrom> {
        match text {
            "header" => Some(CustomerFrom::Header),
            "body" => Some(CustomerFrom::Body),
            _ => None,
        }
    }
}

/// A key's caps for each of its customers (the agent's own end users), a
/// template instantiated per customer id in the same atomic step as the
/// key's cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomerTemplate {
    /// Each customer's money cap per `period`; `None`: not capped.
    pub cap: Option<UsdMicros>,
    pub period: Period,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub from: CustomerFrom,
    /// A call naming no customer is refused (400 `customer_required`).
    pub required: bool,
}

/// A key's customer fields as written (`customer_*`), money as a decimal
/// string.
#[derive(Clone, Copy, Debug, Default)]
pub struct CustomerSpec<'a> {
    pub cap_usd: Option<&'a str>,
    pub period: Option<&'a str>,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub from: Option<&'a str>,
    pub required: Option<bool>,
}

impl Default for CustomerTemplate {
    fn default() -> Self {
        CustomerTemplate {
            cap: None,
            period: Period::Month,
            rpm: None,
            tpm: None,
            from: CustomerFrom::Header,
            required: false,
        }
    }
}

impl CustomerTemplate {
    /// Checks a key's `customer_*` fields; errors name them.
    pub fn check(spec: CustomerSpec<'_>) -> Result<CustomerTemplate, FieldError> {
        let cap = spec
            .cap_usd
            .map(|text| {
                parse_usd(text)
                    .map_err(|error| FieldError::new("customer_cap_usd", error.to_string()))
            })
            .transpose()?;
        let period = match (spec.period, cap) {
            (Some(text), _) => text
                .parse::<Period>()
                .map_err(|error| FieldError::new("customer_period", error.to_string()))?,
            (None, Some(_)) => {
                return Err(FieldError::new(
                    "customer_period",
                    "missing: customer_cap_usd needs a period (minute, hour, day, week, month or total)",
                ))
            }
            // Not capped: the period only names the counter a customer's
            // spend is shown under.
            (None, None) => Period::Month,
        };
        let from = match spec.from {
            None => CustomerFrom::Header,
            Some(text) => CustomerFrom::parse(text).ok_or_else(|| {
                FieldError::new(
                    "customer_from",
                    format!("{text:?} is not \"header\" or \"body\""),
                )
            })?,
        };
        Ok(CustomerTemplate {
            cap,
            period,
            rpm: rate("customer_rpm", spec.rpm)?,
            tpm: rate("customer_tpm", spec.tpm)?,
            from,
            required: spec.required.unwrap_or(false),
        })
    }

    /// Whether the key holds its customers to anything: a cap or a rate
    /// limit.
    pub fn caps_anything(&self) -> bool {
        self.cap.is_some() || self.rpm.is_some() || self.tpm.is_some()
    }
}

/// A rate limit: at least 1 (remove the field for none), below 2^53.
fn rate(field: &str, value: Option<u64>) -> Result<Option<u64>, FieldError> {
    match value {
        Some(0) => Err(FieldError::new(
            field,
            "0 admits nothing: set at least 1, or leave the field out for no limit",
        )),
        Some(limit) if limit > MAX_USD_MICROS => Err(FieldError::new(
            field,
            format!("{limit} is too large: at most {MAX_USD_MICROS}"),
        )),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, models: &[&str]) -> ModelCapSpec {
        ModelCapSpec {
            name: name.into(),
            models: models.iter().map(|m| m.to_string()).collect(),
            cap_usd: Some("50.00".into()),
            period: Some("day".into()),
            rpm: None,
            tpm: None,
        }
    }

    #[test]
    fn bad_values_are_refused_naming_the_field() {
        let refused =
            |specs: &[ModelCapSpec], rpm, tpm| Limits::check(specs, rpm, tpm).unwrap_err();
        assert_eq!(refused(&[], Some(0), None).field, "rpm");
        assert_eq!(refused(&[], None, Some(1 << 60)).field, "tpm");
        let bad_name = spec("no spaces", &["x"]);
        assert_eq!(refused(&[bad_name], None, None).field, "model_caps[0].name");
        let no_models = spec("a", &[]);
        assert_eq!(
            refused(&[no_models], None, None).field,
            "model_caps[0].models"
        );
        let number = ModelCapSpec {
            cap_usd: Some("lots".into()),
            ..spec("a", &["x"])
        };
        assert_eq!(
            refused(&[number], None, None).field,
            "model_caps[0].cap_usd"
        );
        let no_period = ModelCapSpec {
            period: None,
            ..spec("a", &["x"])
        };
        assert_eq!(
            refused(&[no_period], None, None).field,
            "model_caps[0].period"
        );
        let nothing = ModelCapSpec {
            cap_usd: None,
            period: None,
            ..spec("a", &["x"])
        };
        assert_eq!(
            refused(&[nothing], None, None).field,
            "model_caps[0].cap_usd"
        );
        let twice = [spec("a", &["x"]), spec("a", &["y"])];
        assert_eq!(refused(&twice, None, None).field, "model_caps[1].name");
    }
}
