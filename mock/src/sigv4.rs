//! AWS Signature Version 4, as Amazon Bedrock checks it: the
//! `Authorization: AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…,
//! Signature=…` header read apart, and the request signed again with the
//! configured secret (`aws-sigv4`: the same `x-amz-date`, the same signed
//! headers, the path encoded twice as Bedrock's signers encode it, the body
//! as the payload) to compare signatures. A signature over HTTP/2
//! pseudo-headers (`:authority`, as the JS SDK signs over HTTP/2), which
//! `aws-sigv4` cannot reproduce, is checked against a canonical request
//! built here.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_types::date_time::Format;
use aws_smithy_types::DateTime;
use http::header::{AUTHORIZATION, HOST};
use http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};

use super::handler::ApiError;

/// The only algorithm Bedrock takes.
pub(crate) const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The name Bedrock Runtime is signed for (not `bedrock-runtime`).
pub(crate) const SIGNING_NAME: &str = "bedrock";

/// How far `x-amz-date` may be from the mock's clock, either way.
const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

const SIGNATURE_MISMATCH: &str = "The request signature we calculated does not match the \
    signature you provided. Check your AWS Secret Access Key and signing method. Consult the \
    service documentation for details.";

const UNRECOGNIZED_CLIENT: &str = "The security token included in the request is invalid.";

const INCOMPLETE_SIGNATURE: &str = "Authorization header requires 'Credential' parameter. \
    Authorization header requires 'Signature' parameter. Authorization header requires \
    'SignedHeaders' parameter. Authorization header requires existence of either a \
    'X-Amz-Date' or a 'Date' header.";

/// What a signature covers of a request as it was received.
pub(crate) struct SignedRequest<'a> {
    pub method: &'a str,
    /// The path as received, percent-encoded.
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// The request URI's authority (HTTP/2 sends no `Host`).
    pub authority: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// The parts of a SigV4 `Authorization` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Authorization<'a> {
    pub access_key_id: &'a str,
    /// The credential scope's date, `yyyymmdd`.
    pub date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    pub signed_headers: Vec<&'a str>,
    pub signature: &'a str,
}

impl<'a> Authorization<'a> {
    /// Reads `AWS4-HMAC-SHA256 Credential=<id>/<date>/<region>/<service>/aws4_request,
    /// SignedHeaders=<a;b;c>, Signature=<hex>`; `None` for anything else.
    pub(crate) fn parse(value: &'a str) -> Option<Self> {
        let rest = value.strip_prefix(ALGORITHM)?.strip_prefix(' ')?;
        let (mut credential, mut signed_headers, mut signature) = (None, None, None);
        for part in rest.split(',') {
            let (key, value) = part.trim().split_once('=')?;
            match key {
                "Credential" => credential = Some(value),
                "SignedHeaders" => signed_headers = Some(value),
                "Signature" => signature = Some(value),
                _ => {}
            }
        }
        let mut scope = credential?.split('/');
        let mut next = || scope.next().filter(|part| !part.is_empty());
        let (access_key_id, date, region, service) = (next()?, next()?, next()?, next()?);
        if next()? != "aws4_request" || next().is_some() {
            return None;
        }
        Some(Self {
            access_key_id,
            date,
            region,
            service,
            signed_headers: signed_headers?.split(';').collect(),
            signature: signature.filter(|signature| !signature.is_empty())?,
        })
    }

    /// The request's SigV4 authorization, if it is signed.
    pub(crate) fn of(headers: &'a HeaderMap) -> Option<Self> {
        headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(Self::parse)
    }
}

/// A refusal of the signature, as AWS's front end words it (403).
fn refusal(exception: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, message).with_code(exception)
}

fn mismatch() -> ApiError {
    refusal("InvalidSignatureException", SIGNATURE_MISMATCH)
}

/// The refusal of an access key the mock does not know.
pub(crate) fn unrecognized_client() -> ApiError {
    refusal("UnrecognizedClientException", UNRECOGNIZED_CLIENT)
}

/// The refusal of an `Authorization` header that is not a whole SigV4 one.
pub(crate) fn incomplete() -> ApiError {
    refusal("IncompleteSignatureException", INCOMPLETE_SIGNATURE)
}

/// Checks the request's SigV4 signature with the access key and secret
/// the mock was given: the key must be the one configured, the scope's
/// service `bedrock`, `x-amz-date` within 15 minutes of now, and the
/// signature the one this request signed with the secret yields. A session
/// token (`x-amz-security-token`) is taken as sent, signed with the request
/// when `SignedHeaders` names it.
pub(crate) fn verify(
    request: &SignedRequest<'_>,
    access_key_id: &str,
    secret_access_key: &str,
) -> Result<(), ApiError> {
    verify_at(request, access_key_id, secret_access_key, SystemTime::now())
}

/// [`verify`] with the mock's clock at `now`.
fn verify_at(
    request: &SignedRequest<'_>,
    access_key_id: &str,
    secret_access_key: &str,
    now: SystemTime,
) -> Result<(), ApiError> {
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
    };
    let authorization = Authorization::of(request.headers).ok_or_else(incomplete)?;
    if authorization.access_key_id != access_key_id {
        return Err(unrecognized_client());
    }
    if authorization.service != SIGNING_NAME {
        return Err(refusal(
            "InvalidSignatureException",
            format!("Credential should be scoped to correct service: '{SIGNING_NAME}'. "),
        ));
    }
    let date = header("x-amz-date").ok_or_else(incomplete)?;
    let time = parse_amz_date(date).ok_or_else(incomplete)?;
    check_skew(date, time, now)?;
    let signed: Vec<String> = authorization
        .signed_headers
        .iter()
        .map(|name| name.to_ascii_lowercase())
        .collect();
    if signed.iter().any(|name| name.starts_with(':')) {
        let signature = pseudo_header_signature(
            request,
            &authorization,
            &signed,
            date,
            time,
            secret_access_key,
        )
        .ok_or_else(mismatch)?;
        return if signature == authorization.signature {
            Ok(())
        } else {
            Err(mismatch())
        };
    }
    let session_token = signed
        .iter()
        .any(|name| name == "x-amz-security-token")
        .then(|| header("x-amz-security-token").map(str::to_owned))
        .flatten();
    // Only the headers the client signed, in full; `x-amz-date` and the
    // session token the signer adds itself.
    let mut headers: Vec<(&str, &str)> = Vec::new();
    for name in &signed {
        if matches!(name.as_str(), "x-amz-date" | "x-amz-security-token") {
            continue;
        }
        let before = headers.len();
        for value in request.headers.get_all(name.as_str()) {
            headers.push((name, value.to_str().map_err(|_| mismatch())?));
        }
        if headers.len() == before && name == HOST.as_str() {
            if let Some(authority) = request.authority {
                headers.push((name, authority));
            }
        }
    }
    let host = header(HOST.as_str())
        .or(request.authority)
        .unwrap_or("localhost");
    let uri = match request.query {
        Some(query) => format!("http://{host}{}?{query}", request.path),
        None => format!("http://{host}{}", request.path),
    };
    let identity = Credentials::new(
        access_key_id,
        secret_access_key,
        session_token,
        None,
        "tollgate-mock",
    )
    .into();
    let mut settings = SigningSettings::default();
    // Every header the client signed is signed again, whatever its name.
    settings.excluded_headers = Some(Vec::new());
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(authorization.region)
        .name(SIGNING_NAME)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|_| mismatch())?
        .into();
    let signable = SignableRequest::new(
        request.method,
        uri,
        headers.into_iter(),
        SignableBody::Bytes(request.body),
    )
    .map_err(|_| mismatch())?;
    let (_, signature) = sign(signable, &params)
        .map_err(|_| mismatch())?
        .into_parts();
    if signature == authorization.signature {
        Ok(())
    } else {
        Err(mismatch())
    }
}

/// The signature of a request that signs HTTP/2 pseudo-headers, which
/// `aws-sigv4` cannot sign again (it signs `host`, and no header name with
/// a `:`): the JS SDK signs `:authority` instead of `host` over HTTP/2.
/// The canonical request is built by hand as SigV4 defines it (the path
/// encoded again, the signed headers in the order the client listed them,
/// each value trimmed, the body's SHA-256) and signed with `aws-sigv4`'s
/// key derivation and HMAC. `None` when a signed header is missing.
fn pseudo_header_signature(
    request: &SignedRequest<'_>,
    authorization: &Authorization<'_>,
    signed: &[String],
    date: &str,
    time: SystemTime,
    secret_access_key: &str,
) -> Option<String> {
    let mut canonical = format!(
        "{}\n{}\n{}\n",
        request.method,
        encode_again(request.path),
        canonical_query(request.query),
    );
    for name in signed {
        let value = match name.as_str() {
            ":authority" => request.authority.or_else(|| {
                request
                    .headers
                    .get(HOST)
                    .and_then(|value| value.to_str().ok())
            })?,
            ":method" => request.method,
            ":path" => request.path,
            ":scheme" => "http",
            _ => "",
        };
        let value = if name.starts_with(':') {
            value.to_owned()
        } else {
            let values: Option<Vec<String>> = request
                .headers
                .get_all(name.as_str())
                .iter()
                .map(|value| value.to_str().ok().map(trim_all))
                .collect();
            values.filter(|values| !values.is_empty())?.join(",")
        };
        canonical.push_str(&format!("{name}:{value}\n"));
    }
    canonical.push_str(&format!(
        "\n{}\n{}",
        signed.join(";"),
        sha256_hex(request.body)
    ));
    let scope = format!(
        "{}/{}/{SIGNING_NAME}/aws4_request",
        date.get(..8)?,
        authorization.region
    );
    let string_to_sign = format!(
        "{ALGORITHM}\n{date}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let key = v4::generate_signing_key(secret_access_key, time, authorization.region, SIGNING_NAME);
    Some(v4::calculate_signature(key, string_to_sign.as_bytes()))
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The path as SigV4 encodes it for every service but S3: each byte but
/// the unreserved ones and `/` percent-encoded, so an already encoded
/// `%3A` becomes `%253A`.
fn encode_again(path: &str) -> String {
    path.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

/// The query's parameters sorted, as received (`name=value`).
fn canonical_query(query: Option<&str>) -> String {
    let mut pairs: Vec<String> = query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            if pair.contains('=') {
                pair.to_owned()
            } else {
                format!("{pair}=")
            }
        })
        .collect();
    pairs.sort();
    pairs.join("&")
}

/// A header value trimmed, its runs of spaces made one.
fn trim_all(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads an `x-amz-date`, `yyyymmddThhmmssZ`.
pub(crate) fn parse_amz_date(date: &str) -> Option<SystemTime> {
    let bytes = date.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        bytes
            .get(range.clone())
            .filter(|part| part.iter().all(u8::is_ascii_digit))
            .and_then(|_| date.get(range))
    };
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let iso = format!(
        "{}-{}-{}T{}:{}:{}Z",
        digits(0..4)?,
        digits(4..6)?,
        digits(6..8)?,
        digits(9..11)?,
        digits(11..13)?,
        digits(13..15)?,
    );
    let time = DateTime::from_str(&iso, Format::DateTime).ok()?;
    SystemTime::try_from(time).ok()
}

/// `time` as an `x-amz-date`.
pub(crate) fn format_amz_date(time: SystemTime) -> String {
    let seconds = DateTime::from_secs(DateTime::from(time).secs());
    seconds
        .fmt(Format::DateTime)
        .unwrap_or_default()
        .replace(['-', ':'], "")
}

/// Refuses a request signed more than 15 minutes from now, either way, in
/// AWS's words.
fn check_skew(date: &str, time: SystemTime, now: SystemTime) -> Result<(), ApiError> {
    match now.duration_since(time) {
        Ok(age) if age > MAX_SKEW => Err(refusal(
            "InvalidSignatureException",
            format!(
                "Signature expired: {date} is now earlier than {} ({} - 15 min.)",
                format_amz_date(now - MAX_SKEW),
                format_amz_date(now),
            ),
        )),
        Ok(_) => Ok(()),
        Err(ahead) if ahead.duration() > MAX_SKEW => Err(refusal(
            "InvalidSignatureException",
            format!(
                "Signature not yet current: {date} is still later than {} ({} + 15 min.)",
                format_amz_date(now + MAX_SKEW),
                format_amz_date(now),
            ),
        )),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_authorization_header_is_read_apart() {
        let value =
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261204/us-east-1/bedrock/aws4_request, \
                     SignedHeaders=content-type;host;x-amz-date, Signature=abc123";
        assert_eq!(
            Authorization::parse(value),
            Some(Authorization {
                access_key_id: "AKIDEXAMPLE",
                date: "20261204",
                region: "us-east-1",
                service: "bedrock",
                signed_headers: vec!["content-type", "host", "x-amz-date"],
                signature: "abc123",
            })
        );
        for broken in [
            "Bearer abc",
            "AWS4-HMAC-SHA256 Credential=AKID/20261204/us-east-1/bedrock/aws4_request, Signature=a",
            "AWS4-HMAC-SHA256 Credential=AKID/20261204/us-east-1/bedrock, SignedHeaders=host, Signature=a",
            "AWS4-HMAC-SHA256 Credential=AKID/20261204/us-east-1/bedrock/aws4_request, SignedHeaders=host",
            "AWS4-HMAC-SHA256Credential=AKID/20261204/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=a",
        ] {
            assert_eq!(Authorization::parse(broken), None, "{broken}");
        }
    }

    fn request<'a>(
        path: &'a str,
        authority: Option<&'a str>,
        headers: &'a HeaderMap,
        body: &'a [u8],
    ) -> SignedRequest<'a> {
        SignedRequest {
            method: "POST",
            path,
            query: None,
            authority,
            headers,
            body,
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (http::HeaderName::from_static(name), value.parse().unwrap()))
            .collect()
    }

    const ACCESS_KEY_ID: &str = "AKIDMOCKEXAMPLE";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYMOCKEXAMPLE";

    /// A request botocore 1.43 signed (`SigV4Auth`, at a fixed time) for an
    /// inference profile ARN, with a session token: an independent signer
    /// of the double-encoded path.
    #[test]
    fn a_botocore_signature_verifies() {
        let path = "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile\
                    %2Fus.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse";
        let body: &[u8] = br#"{"messages": [{"role": "user", "content": [{"text": "hello"}]}], "inferenceConfig": {"maxTokens": 10}}"#;
        let signed = headers(&[
            ("host", "127.0.0.1:8080"),
            ("content-type", "application/json"),
            ("x-amz-date", "20261204T101112Z"),
            ("x-amz-security-token", "SESSIONTOKEN"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIDMOCKEXAMPLE/20261204/us-east-1/bedrock/\
                 aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, \
                 Signature=f96339b1caaeb4b35f1af8eedfa42c3d4f77f26f50d826ea6500424995ccd2e3",
            ),
        ]);
        let now = parse_amz_date("20261204T101500Z").unwrap();
        let verified = |body, headers| {
            verify_at(
                &request(path, None, headers, body),
                ACCESS_KEY_ID,
                SECRET,
                now,
            )
        };
        assert!(verified(body, &signed).is_ok());
        assert_eq!(
            verified(b"{}", &signed).unwrap_err().code,
            Some("InvalidSignatureException")
        );
        let mut other_token = signed.clone();
        other_token.insert("x-amz-security-token", "OTHER".parse().unwrap());
        assert!(verified(body, &other_token).is_err());
        let later = parse_amz_date("20261204T103000Z").unwrap();
        let stale = verify_at(
            &request(path, None, &signed, body),
            ACCESS_KEY_ID,
            SECRET,
            later,
        );
        assert!(stale
            .unwrap_err()
            .message
            .starts_with("Signature expired: 20261204T101112Z"));
    }

    /// A request the JS SDK (3.1177) signed over HTTP/2: `:authority` is
    /// signed, `host` is not sent.
    #[test]
    fn a_js_sdk_http2_signature_verifies() {
        let path = "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse";
        let body: &[u8] = br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#;
        let signed = headers(&[
            ("content-type", "application/json"),
            ("content-length", "56"),
            ("x-amz-user-agent", "aws-sdk-js/3.1177.0"),
            ("user-agent", "aws-sdk-js/3.1177.0 ua/2.1 os/linux lang/js"),
            (
                "amz-sdk-invocation-id",
                "403c9824-b17e-4c84-8e2b-752cfa0d9e62",
            ),
            ("amz-sdk-request", "attempt=1; max=1"),
            ("x-amz-date", "20261204T031743Z"),
            (
                "x-amz-content-sha256",
                "c3335e07d6e89650bf94cb98664be69f8774dbc3198df221f113db0a59ea14f0",
            ),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIDMOCKEXAMPLE/20261204/us-west-2/bedrock/\
                 aws4_request, SignedHeaders=:authority;amz-sdk-invocation-id;amz-sdk-request;\
                 content-length;content-type;x-amz-content-sha256;x-amz-date;x-amz-user-agent, \
                 Signature=b53e74bd91e29870910d3cd495a2da384d5b6dde28a02c913e801af4d78b8b9f",
            ),
        ]);
        let now = parse_amz_date("20261204T031800Z").unwrap();
        let verified = |authority, body| {
            verify_at(
                &request(path, Some(authority), &signed, body),
                ACCESS_KEY_ID,
                SECRET,
                now,
            )
        };
        assert!(verified("127.0.0.1:47312", body).is_ok());
        assert!(verified("127.0.0.1:47313", body).is_err());
        assert!(verified("127.0.0.1:47312", br#"{"messages":[]}"#).is_err());
    }

    #[test]
    fn amz_dates_round_trip() {
        let time = parse_amz_date("20261204T101112Z").unwrap();
        assert_eq!(format_amz_date(time), "20261204T101112Z");
        for broken in [
            "20261204T101112",
            "2026-12-04T10:11:12Z",
            "20261304T101112Z",
        ] {
            assert_eq!(parse_amz_date(broken), None, "{broken}");
        }
    }
}
