//! Checking `[[providers]]`: each provider's name, API shape, base URL,
//! key variable and model patterns.

use std::collections::HashSet;

use super::super::raw::RawProvider;
use super::super::{ConfigError, Provider};
use super::Checker;
use crate::provider::{ProviderKind, OUTPUT_LIMIT_FIELDS};

impl Checker<'_> {
    pub(super) fn providers(&self, raw: &[RawProvider]) -> Result<Vec<Provider>, ConfigError> {
        if raw.is_empty() {
            return Err(self.invalid(
                "providers",
                "no [[providers]] configured: no model could be served",
            ));
        }
        let mut names = HashSet::new();
        let mut providers = Vec::with_capacity(raw.len());
        for (i, raw) in raw.iter().enumerate() {
            let field = |name: &str| format!("providers[{i}].{name}");
            if raw.name.trim().is_empty() {
                return Err(self.invalid(field("name"), "must not be empty"));
            }
            if !names.insert(raw.name.as_str()) {
                return Err(self.invalid(
                    field("name"),
                    format!("{:?} is already used by another provider", raw.name),
                ));
            }
            let kind = match raw.kind.as_str() {
                "openai" => ProviderKind::OpenAi,
                "anthropic" => ProviderKind::Anthropic,
                other => {
                    return Err(self.invalid(
                        field("kind"),
                        format!("{other:?} is not \"openai\" or \"anthropic\""),
                    ))
                }
            };
            let base_url = base_url(&raw.base_url)
                .map_err(|message| self.invalid(field("base_url"), message))?;
            if raw.api_key_env.trim().is_empty() {
                return Err(self.invalid(field("api_key_env"), "must name an environment variable"));
            }
            if raw.models.is_empty() {
                return Err(self.invalid(
                    field("models"),
                    "needs at least one model pattern, like \"gpt-*\"",
                ));
            }
            for name in &raw.output_limit_fields {
                if !OUTPUT_LIMIT_FIELDS.contains(&name.as_str()) {
                    return Err(self.invalid(
                        field("output_limit_fields"),
                        format!(
                            "{name:?} is not an output-limit field: use \"max_tokens\", \
                             \"max_completion_tokens\" or \"max_output_tokens\""
                        ),
                    ));
                }
            }
            providers.push(Provider {
                name: raw.name.clone(),
                kind,
                base_url,
                api_key_env: raw.api_key_env.clone(),
                api_key: self.secret_var(&raw.api_key_env),
                models: self.patterns(&field("models"), &raw.models)?,
                output_limit_fields: raw.output_limit_fields.clone(),
            });
        }
        Ok(providers)
    }
}

/// Checks a provider base URL: http or https, a host, no credentials or
/// query; a trailing slash is dropped so paths append cleanly.
fn base_url(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    let scheme = match uri.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme,
        _ => return Err(format!("{text:?} must start with http:// or https://")),
    };
    let authority = match uri.authority() {
        Some(authority) if !authority.host().is_empty() => authority,
        _ => return Err(format!("{text:?} has no host")),
    };
    if authority.as_str().contains('@') {
        return Err("must not carry credentials; the key comes from api_key_env".to_owned());
    }
    if uri.query().is_some() {
        return Err(format!("{text:?} must not carry a query"));
    }
    let prefix = uri.path().trim_end_matches('/');
    let path = if prefix.is_empty() { "/" } else { prefix };
    http::Uri::builder()
        .scheme(scheme)
        .authority(authority.as_str())
        .path_and_query(path)
        .build()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))
}
