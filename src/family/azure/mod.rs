//! The azure family: Azure OpenAI, OpenAI's API served from deployments.
//!
//! Routes: `POST /openai/deployments/{deployment}/{chat/completions,
//! completions, embeddings, responses}?api-version=…` (the deployment in
//! the path, the body's `model` ignored, as Azure ignores it),
//! `/openai/responses?api-version=…` and the v1 API's
//! `/openai/v1/{chat/completions, completions, embeddings, responses}`
//! (the body's `model` names the deployment; `api-version` optional). The
//! client's gateway key comes in `api-key` (what `AzureOpenAI` and
//! `@ai-sdk/azure` send) or as a bearer token (the plain `OpenAI` client on
//! the v1 API); the provider's key goes upstream in `api-key`.
//!
//! Azure answers name the model a deployment runs, not the deployment: a
//! call is priced by the provider's `deployments` map, deployment to priced
//! model, and an unmapped deployment is refused before anything is spent.
//! Every request rule is the openai family's, bodies and streams are read
//! as OpenAI's, and a tier the request does not name is billed as the
//! standard one (Azure has no project default tier).

use std::borrow::Cow;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Request;

use super::openai;
use super::{Action, Credential, Route};
use crate::api::{Api, Call};
use crate::config::Provider;
use crate::error::GatewayError;
use crate::provider::ProviderKind;
use crate::upstream::Payload;

/// The routes of the family, for messages.
pub(super) const ROUTES: &str = "/openai/deployments/{deployment}/chat/completions (or \
     /completions, /embeddings, /responses) or /openai/v1/chat/completions";

/// The operations a deployment serves, by the path after the deployment
/// (or after `/openai/v1`).
const OPERATIONS: [(&str, Api); 4] = [
    ("/chat/completions", Api::ChatCompletions),
    ("/completions", Api::Completions),
    ("/embeddings", Api::Embeddings),
    ("/responses", Api::Responses),
];

/// The family's route for a `POST` to `path`.
pub(super) fn route(path: &str, query: Option<&str>) -> Option<Route> {
    let rest = path.strip_prefix("/openai")?;
    let api_version = api_version(query);
    if let Some(rest) = rest.strip_prefix("/deployments/") {
        let (deployment, operation) = rest.split_at(rest.find('/')?);
        let (label, api) = deployment_operation(operation)?;
        let deployment = percent_encoding::percent_decode_str(deployment)
            .decode_utf8()
            .ok()?;
        return Some(azure_route(
            api,
            Some(deployment.into_owned()),
            api_version,
            label,
        ));
    }
    if rest == "/responses" {
        return Some(azure_route(
            Api::Responses,
            None,
            api_version,
            "/openai/responses",
        ));
    }
    let operation = rest.strip_prefix("/v1")?;
    let (label, api) = match operation {
        "/chat/completions" => ("/openai/v1/chat/completions", Api::ChatCompletions),
        "/completions" => ("/openai/v1/completions", Api::Completions),
        "/embeddings" => ("/openai/v1/embeddings", Api::Embeddings),
        "/responses" => ("/openai/v1/responses", Api::Responses),
        _ => return None,
    };
    Some(azure_route(api, None, api_version, label))
}

/// The label (also the upstream path, the deployment put in) and API of
/// an operation under a deployment.
fn deployment_operation(operation: &str) -> Option<(&'static str, Api)> {
    let api = OPERATIONS
        .iter()
        .find(|(path, _)| *path == operation)
        .map(|(_, api)| *api)?;
    let label = match api {
        Api::ChatCompletions => "/openai/deployments/{deployment}/chat/completions",
        Api::Completions => "/openai/deployments/{deployment}/completions",
        Api::Embeddings => "/openai/deployments/{deployment}/embeddings",
        _ => "/openai/deployments/{deployment}/responses",
    };
    Some((label, api))
}

fn azure_route(
    api: Api,
    deployment: Option<String>,
    api_version: String,
    label: &'static str,
) -> Route {
    Route {
        family: ProviderKind::Azure,
        api,
        action: Action::Call,
        model: deployment,
        stream: None,
        sse: true,
        version: api_version,
        label,
    }
}

/// The `api-version` query parameter, empty when absent.
fn api_version(query: Option<&str>) -> String {
    query
        .and_then(|query| {
            form_urlencoded::parse(query.as_bytes())
                .find(|(name, _)| name == "api-version")
                .map(|(_, value)| value.into_owned())
        })
        .unwrap_or_default()
}

/// The gateway key: `api-key`, else a bearer token.
pub(super) fn gateway_key(headers: &HeaderMap) -> Option<Cow<'_, str>> {
    headers
        .get("api-key")
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .or_else(|| crate::directory::presented_key(headers))
        .map(Cow::Borrowed)
}

/// The call of an Azure route, by the openai family's rules; its model is
/// the deployment until [`price_deployment`] names the model it runs.
pub(super) fn parse(route: &Route, body: Bytes) -> Result<Call, GatewayError> {
    let dated = !route.label.starts_with("/openai/v1/");
    if dated && route.version.is_empty() {
        return Err(GatewayError::BadRequest {
            message: format!(
                "{} needs an `api-version` query parameter, such as ?api-version=2024-10-21 \
                 (the /openai/v1/ routes need none)",
                route.label
            ),
            param: None,
            code: Some("missing_api_version"),
        });
    }
    openai::request::parse_for(route.api, body, route.model.as_deref())
}

/// Names the model a call's deployment runs, the one it is priced and
/// capped as: the first azure provider that maps the deployment. An
/// unmapped deployment is refused naming it.
pub(super) fn price_deployment(
    providers: &[Provider],
    call: &mut Call,
) -> Result<(), GatewayError> {
    let deployment = std::mem::take(&mut call.model);
    let model = providers
        .iter()
        .filter(|provider| provider.kind == ProviderKind::Azure)
        .find_map(|provider| provider.deployment_model(&deployment));
    match model {
        Some(model) => {
            call.model = model.to_owned();
            call.served_as = Some(deployment);
            Ok(())
        }
        None => Err(GatewayError::UnknownDeployment { deployment }),
    }
}

/// The provider's request: the client's route under the provider's base
/// URL, with its `api-version`, and the provider's key in `api-key`.
pub(super) fn upstream_request(
    provider: &Provider,
    credential: &Credential,
    route: &Route,
    served_as: &str,
    headers: &HeaderMap,
    body: Payload,
) -> Result<Request<Payload>, http::Error> {
    let mut path = route.label.replace(
        "{deployment}",
        &percent_encoding::utf8_percent_encode(served_as, SEGMENT).to_string(),
    );
    if !route.version.is_empty() {
        path.push_str("?api-version=");
        path.extend(form_urlencoded::byte_serialize(route.version.as_bytes()));
    }
    let mut request = crate::upstream::request_to(&provider.base_url, &path, headers, body)?;
    let secret = credential.secret();
    let mut value = HeaderValue::try_from(secret)?;
    value.set_sensitive(true);
    request
        .headers_mut()
        .insert(HeaderName::from_static("api-key"), value);
    Ok(request)
}

/// What a deployment name keeps encoded as a path segment.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

#[cfg(test)]
mod tests;
