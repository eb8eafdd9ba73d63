//! Checking `[[providers]]`: each provider's name, API family, base URL,
//! key variable (or, for `vertex`, project, location and service account
//! file) and model patterns.

use std::collections::HashSet;

use super::super::raw::RawProvider;
use super::super::{AwsKeys, AwsSettings, ConfigError, Provider, VertexSettings};
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
            let kind = ProviderKind::from_name(&raw.kind).ok_or_else(|| {
                self.invalid(
                    field("kind"),
                    format!(
                        "{:?} is not \"openai\", \"anthropic\", \"gemini\", \"vertex\", \
                         \"azure\" or \"bedrock\"",
                        raw.kind
                    ),
                )
            })?;
            let base_url = base_url(&raw.base_url)
                .map_err(|message| self.invalid(field("base_url"), message))?;
            let vertex = self.vertex(raw, kind, &field)?;
            let deployments = self.deployments(raw, kind, &field)?;
            let aws = self.aws(raw, kind, &field)?;
            let unnamed_tier_may_be_priority =
                self.service_tier_default(raw, kind, &base_url, &field)?;
            let api_key_env = match (&raw.api_key_env, kind) {
                (Some(_), ProviderKind::Vertex) => {
                    return Err(self.invalid(
                        field("api_key_env"),
                        "a vertex provider signs in with its service account: set \
                         credentials_file instead",
                    ))
                }
                (None, ProviderKind::Vertex) => String::new(),
                // A Bedrock API key is optional: without one, SigV4.
                (None, ProviderKind::Bedrock) => String::new(),
                (Some(env), _) if !env.trim().is_empty() => env.clone(),
                _ => {
                    return Err(
                        self.invalid(field("api_key_env"), "must name an environment variable")
                    )
                }
            };
            // An azure provider serves its deployments, not model names.
            if raw.models.is_empty() && kind != ProviderKind::Azure {
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
                api_key: self.secret_var(&api_key_env),
                api_key_env,
                vertex,
                models: self.patterns(&field("models"), &raw.models)?,
                output_limit_fields: raw.output_limit_fields.clone(),
                deployments,
                unnamed_tier_may_be_priority,
                aws,
            });
        }
        Ok(providers)
    }
}

impl Checker<'_> {
    /// A `vertex` provider's project, location and service account file;
    /// none of them for any other kind.
    fn vertex(
        &self,
        raw: &RawProvider,
        kind: ProviderKind,
        field: &dyn Fn(&str) -> String,
    ) -> Result<Option<VertexSettings>, ConfigError> {
        let given = [
            ("project", &raw.project),
            ("location", &raw.location),
            ("credentials_file", &raw.credentials_file),
        ];
        if kind != ProviderKind::Vertex {
            return match given.iter().find(|(_, value)| value.is_some()) {
                Some((name, _)) => {
                    Err(self.invalid(field(name), "is a setting of vertex providers"))
                }
                None => Ok(None),
            };
        }
        let mut values = Vec::with_capacity(given.len());
        for (name, value) in given {
            let value = value.as_deref().map(str::trim).unwrap_or_default();
            if value.is_empty() {
                return Err(self.invalid(field(name), "is required for a vertex provider"));
            }
            values.push(value);
        }
        // A project or location becomes a path segment of every call.
        let segment = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        for (name, value) in [("project", values[0]), ("location", values[1])] {
            if !value.chars().all(segment) {
                return Err(self.invalid(
                    field(name),
                    format!("{value:?} must be letters, digits, '-', '_' or '.'"),
                ));
            }
        }
        Ok(Some(VertexSettings {
            project: values[0].to_owned(),
            location: values[1].to_owned(),
            credentials_file: self.beside_config(values[2]),
        }))
    }
}

impl Checker<'_> {
    /// An `azure` provider's deployments (at least one, each named as Azure
    /// allows and mapped to a model); none for any other kind.
    fn deployments(
        &self,
        raw: &RawProvider,
        kind: ProviderKind,
        field: &dyn Fn(&str) -> String,
    ) -> Result<Vec<(String, String)>, ConfigError> {
        let Some(deployments) = &raw.deployments else {
            return match kind {
                ProviderKind::Azure => Err(self.invalid(
                    field("deployments"),
                    "is required for an azure provider: map each deployment to the priced \
                     model it runs, like { \"prod-4o\" = \"gpt-4o-2024-08-06\" }",
                )),
                _ => Ok(Vec::new()),
            };
        };
        if kind != ProviderKind::Azure {
            return Err(self.invalid(field("deployments"), "is a setting of azure providers"));
        }
        if deployments.is_empty() {
            return Err(self.invalid(field("deployments"), "needs at least one deployment"));
        }
        let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        for (deployment, model) in deployments {
            if deployment.is_empty() || !deployment.chars().all(name_char) {
                return Err(self.invalid(
                    field("deployments"),
                    format!("{deployment:?} must be letters, digits, '-', '_' or '.'"),
                ));
            }
            if model.trim().is_empty() {
                return Err(self.invalid(
                    field("deployments"),
                    format!("{deployment:?} must name the priced model it runs"),
                ));
            }
        }
        // A BTreeMap iterates sorted: `Provider::deployment_model` searches it.
        Ok(deployments
            .iter()
            .map(|(deployment, model)| (deployment.clone(), model.trim().to_owned()))
            .collect())
    }

    /// Whether a request naming no tier may be billed at priority: as
    /// `service_tier_default` says, else only on OpenAI itself.
    fn service_tier_default(
        &self,
        raw: &RawProvider,
        kind: ProviderKind,
        base_url: &http::Uri,
        field: &dyn Fn(&str) -> String,
    ) -> Result<bool, ConfigError> {
        let tiered = matches!(kind, ProviderKind::OpenAi | ProviderKind::Azure);
        match raw.service_tier_default.as_deref() {
            Some(_) if !tiered => Err(self.invalid(
                field("service_tier_default"),
                "is a setting of openai and azure providers",
            )),
            Some("priority") => Ok(true),
            Some("default") => Ok(false),
            Some(other) => Err(self.invalid(
                field("service_tier_default"),
                format!("{other:?} is not \"default\" or \"priority\""),
            )),
            None => Ok(kind == ProviderKind::OpenAi && base_url.host() == Some(OPENAI_HOST)),
        }
    }
}

impl Checker<'_> {
    /// A `bedrock` provider's region and credential variables (AWS's own
    /// names unless named); none of them for any other kind.
    fn aws(
        &self,
        raw: &RawProvider,
        kind: ProviderKind,
        field: &dyn Fn(&str) -> String,
    ) -> Result<Option<AwsSettings>, ConfigError> {
        let given = [
            ("region", &raw.region),
            ("access_key_id_env", &raw.access_key_id_env),
            ("secret_access_key_env", &raw.secret_access_key_env),
            ("session_token_env", &raw.session_token_env),
        ];
        if kind != ProviderKind::Bedrock {
            return match given.iter().find(|(_, value)| value.is_some()) {
                Some((name, _)) => {
                    Err(self.invalid(field(name), "is a setting of bedrock providers"))
                }
                None => Ok(None),
            };
        }
        let region = raw.region.as_deref().map(str::trim).unwrap_or_default();
        let region_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if region.is_empty() || !region.chars().all(region_char) {
            return Err(self.invalid(
                field("region"),
                "is required for a bedrock provider: an AWS region such as \"us-east-1\"",
            ));
        }
        let name = |value: &Option<String>, default: &str| {
            value
                .as_deref()
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .unwrap_or(default)
                .to_owned()
        };
        let access_key_id_env = name(&raw.access_key_id_env, "AWS_ACCESS_KEY_ID");
        let secret_access_key_env = name(&raw.secret_access_key_env, "AWS_SECRET_ACCESS_KEY");
        let session_token_env = name(&raw.session_token_env, "AWS_SESSION_TOKEN");
        let keys = match (
            self.secret_var(&access_key_id_env),
            self.secret_var(&secret_access_key_env),
        ) {
            (Some(access_key_id), Some(secret_access_key)) => Some(AwsKeys {
                access_key_id,
                secret_access_key,
                session_token: self.secret_var(&session_token_env),
            }),
            _ => None,
        };
        Ok(Some(AwsSettings {
            region: region.to_owned(),
            access_key_id_env,
            secret_access_key_env,
            session_token_env,
            keys,
        }))
    }
}

/// OpenAI's own API, whose projects may default to the priority tier.
const OPENAI_HOST: &str = "api.openai.com";

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
