//! SigV4: how a call to Bedrock is signed with the provider's AWS
//! credentials, by AWS's own signer (`aws-sigv4`). The path is signed
//! encoded twice, as Bedrock's service expects of every AWS service but
//! S3; the payload is signed as sent.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign as sign_request, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use http::Request;
use percent_encoding::AsciiSet;

use crate::config::AwsKeys;
use crate::upstream::Payload;

/// Bedrock's signing name (the service is `bedrock-runtime`, its name in
/// signatures `bedrock`).
const SERVICE: &str = "bedrock";

/// What a model id keeps encoded as one path segment: everything but
/// RFC 3986's unreserved characters, as the AWS SDKs encode it.
pub(super) const PATH_SEGMENT: &AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Signs `request` (its URI absolute, its headers final) and its `body`
/// for `region`, adding `authorization`, `x-amz-date` and, for temporary
/// credentials, `x-amz-security-token`. A request the signer refuses (it
/// cannot, with a checked region and a URI the gateway built) is sent
/// unsigned: Bedrock refuses it, and it costs nothing.
pub(super) fn sign(request: &mut Request<Payload>, keys: &AwsKeys, region: &str, body: &[u8]) {
    if let Err(error) = try_sign(request, keys, region, body) {
        tracing::error!(%error, "could not sign the Bedrock request; it is sent unsigned");
    }
}

fn try_sign(
    request: &mut Request<Payload>,
    keys: &AwsKeys,
    region: &str,
    body: &[u8],
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let identity = Credentials::new(
        keys.access_key_id.expose(),
        keys.secret_access_key.expose(),
        keys.session_token
            .as_ref()
            .map(|token| token.expose().to_owned()),
        None,
        "tollgate",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()?
        .into();
    let uri = request.uri().to_string();
    let headers: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let signable = SignableRequest::new(
        request.method().as_str(),
        &uri,
        headers.into_iter(),
        SignableBody::Bytes(body),
    )?;
    let (instructions, _signature) = sign_request(signable, &params)?.into_parts();
    instructions.apply_to_request_http1x(request);
    Ok(())
}
