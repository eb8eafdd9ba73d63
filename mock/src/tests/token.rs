//! The OAuth2 token endpoint: JWT-bearer grants signed with the fixture key
//! get a token; anything else is refused as Google refuses it.

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::start;
use crate::handler::unix_now;
use crate::token::CLOUD_PLATFORM_SCOPE;
use crate::{
    service_account_json, MockServer, SERVICE_ACCOUNT_EMAIL, SERVICE_ACCOUNT_KEY_ID,
    SERVICE_ACCOUNT_PRIVATE_KEY,
};

const UNKNOWN_SIGNER: &str = include_str!("../../fixtures/unknown-signer-key.pem");

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The claims a service account signs for `server`'s token endpoint.
pub(super) fn claims(server: &MockServer) -> Value {
    let now = unix_now();
    json!({
        "iss": SERVICE_ACCOUNT_EMAIL,
        "scope": CLOUD_PLATFORM_SCOPE,
        "aud": server.token_url(),
        "iat": now,
        "exp": now + 3600,
    })
}

/// A JWT of `claims` signed RS256 with `key` (PKCS#8 PEM).
pub(super) fn signed(claims: &Value, key: &str, kid: Option<&str>) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = kid.map(str::to_owned);
    let key = EncodingKey::from_rsa_pem(key.as_bytes()).unwrap();
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

/// Posts a form to `/token`.
pub(super) async fn post_form(server: &MockServer, fields: &[(&str, &str)]) -> (u16, Value) {
    let form = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    let response = reqwest::Client::new()
        .post(server.token_url())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn grant(server: &MockServer, assertion: &str) -> (u16, Value) {
    post_form(
        server,
        &[("grant_type", JWT_BEARER), ("assertion", assertion)],
    )
    .await
}

/// A fresh access token for the Vertex routes.
pub(super) async fn access_token(server: &MockServer) -> String {
    let assertion = signed(
        &claims(server),
        SERVICE_ACCOUNT_PRIVATE_KEY,
        Some(SERVICE_ACCOUNT_KEY_ID),
    );
    let (status, body) = grant(server, &assertion).await;
    assert_eq!(status, 200, "{body}");
    body["access_token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_grant_signed_with_the_service_account_key_gets_a_fresh_token() {
    let server = start().await;
    let assertion = signed(
        &claims(&server),
        SERVICE_ACCOUNT_PRIVATE_KEY,
        Some(SERVICE_ACCOUNT_KEY_ID),
    );
    let (status, first) = grant(&server, &assertion).await;
    assert_eq!(status, 200);
    assert_eq!(first["token_type"], "Bearer");
    assert_eq!(first["expires_in"], 3600);
    let token = first["access_token"].as_str().unwrap();
    assert!(token.starts_with("ya29."), "{token}");
    // A header without `kid` is fine: Google tries the account's keys.
    let unnamed = signed(&claims(&server), SERVICE_ACCOUNT_PRIVATE_KEY, None);
    let (status, second) = grant(&server, &unnamed).await;
    assert_eq!(status, 200);
    assert_ne!(second["access_token"], first["access_token"]);
    assert_eq!((server.tokens.requests(), server.tokens.refused()), (2, 0));
    assert_eq!(server.stats.requests(), 0, "grants are not model calls");
    assert!(server.stats.last_request().is_none());
}

#[tokio::test]
async fn bad_grants_are_refused_as_google_refuses_them() {
    let server = start().await;
    let good = claims(&server);
    let with = |field: &str, value: Value| {
        let mut claims = good.clone();
        claims[field] = value;
        claims
    };
    let now = unix_now();
    let key = SERVICE_ACCOUNT_PRIVATE_KEY;
    let kid = Some(SERVICE_ACCOUNT_KEY_ID);
    let cases = [
        (
            signed(&good, UNKNOWN_SIGNER, kid),
            "invalid_grant",
            "Invalid JWT Signature.",
        ),
        (
            signed(&good, key, Some("0000")),
            "invalid_grant",
            "Invalid JWT Signature.",
        ),
        (
            signed(&with("exp", json!(now - 10)), key, kid),
            "invalid_grant",
            "short-lived",
        ),
        (
            signed(&with("exp", json!(now + 3601)), key, kid),
            "invalid_grant",
            "short-lived",
        ),
        (
            signed(
                &with("iss", json!("someone@else.iam.gserviceaccount.com")),
                key,
                kid,
            ),
            "invalid_grant",
            "account not found",
        ),
        (
            signed(&with("aud", json!("https://example.com/other")), key, kid),
            "invalid_grant",
            "audience",
        ),
        (
            signed(
                &with("scope", json!("https://www.googleapis.com/auth/drive")),
                key,
                kid,
            ),
            "invalid_scope",
            "scope",
        ),
        ("not.a.jwt".to_owned(), "invalid_grant", "Invalid JWT"),
    ];
    let count = cases.len() as u64;
    for (assertion, error, description) in cases {
        let (status, body) = grant(&server, &assertion).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"], error, "{body}");
        let text = body["error_description"].as_str().unwrap();
        assert!(text.contains(description), "{text}");
    }
    let (status, body) = post_form(
        &server,
        &[("grant_type", "client_credentials"), ("assertion", "x")],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("unsupported_grant_type"))
    );
    let (status, body) = post_form(&server, &[("grant_type", JWT_BEARER)]).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_request"))
    );
    assert_eq!(server.tokens.requests(), count + 2);
    assert_eq!(server.tokens.refused(), count + 2);
}

#[tokio::test]
async fn the_next_token_requests_can_be_made_to_fail() {
    let server = start().await;
    server.tokens.fail_next_requests(2);
    let assertion = signed(
        &claims(&server),
        SERVICE_ACCOUNT_PRIVATE_KEY,
        Some(SERVICE_ACCOUNT_KEY_ID),
    );
    for _ in 0..2 {
        let (status, body) = grant(&server, &assertion).await;
        assert_eq!(status, 500);
        assert_eq!(body["error"], "internal_failure");
    }
    let (status, _) = grant(&server, &assertion).await;
    assert_eq!(status, 200);
    assert_eq!((server.tokens.requests(), server.tokens.refused()), (3, 2));
}

#[tokio::test]
async fn the_service_account_json_is_complete_and_its_key_is_accepted() {
    let server = start().await;
    let account: Value = serde_json::from_str(&service_account_json(&server.token_url())).unwrap();
    assert_eq!(account["type"], "service_account");
    assert_eq!(account["project_id"], "tollgate-test");
    assert_eq!(account["client_email"], SERVICE_ACCOUNT_EMAIL);
    assert_eq!(account["private_key_id"], SERVICE_ACCOUNT_KEY_ID);
    assert_eq!(account["token_uri"], server.token_url());
    for field in [
        "client_id",
        "auth_uri",
        "auth_provider_x509_cert_url",
        "client_x509_cert_url",
    ] {
        assert!(account[field].is_string(), "{field}");
    }
    let key = account["private_key"].as_str().unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    let kid = account["private_key_id"].as_str();
    let (status, _) = grant(&server, &signed(&claims(&server), key, kid)).await;
    assert_eq!(status, 200);
}
