//! Bedrock's routes, model ids and signed requests.

use http::HeaderValue;

use super::*;
use crate::config::{AwsKeys, Secret};

#[test]
fn routes_decode_the_model_id_of_their_path() {
    let converse = route("/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse").unwrap();
    assert_eq!(converse.family, ProviderKind::Bedrock);
    assert_eq!(converse.api, Api::Converse);
    assert_eq!(
        converse.model.as_deref(),
        Some("us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    );
    let arn = "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-haiku-4-5-20251001-v1%3A0";
    let invoke = route(&format!("/model/{arn}/invoke")).unwrap();
    assert_eq!(invoke.api, Api::Messages);
    assert_eq!(invoke.shape(), crate::error::Shape::Bedrock);
    assert!(invoke
        .model
        .as_deref()
        .unwrap()
        .ends_with("inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0"));
    for other in [
        "/model//converse",
        "/model/m/converse-x",
        "/model/m",
        "/models/m/converse",
    ] {
        assert!(route(other).is_none(), "{other}");
    }
}

#[test]
fn a_call_is_priced_as_the_model_its_profile_runs() {
    for (id, model) in [
        ("anthropic.claude-3-haiku-20240307-v1:0", "anthropic.claude-3-haiku-20240307-v1:0"),
        ("us.anthropic.claude-3-haiku-20240307-v1:0", "anthropic.claude-3-haiku-20240307-v1:0"),
        ("global.anthropic.claude-haiku-4-5-20251001-v1:0", "anthropic.claude-haiku-4-5-20251001-v1:0"),
        (
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0",
            "anthropic.claude-3-haiku-20240307-v1:0",
        ),
    ] {
        assert_eq!(bedrock_model(id), model, "{id}");
    }
    let route = route("/model/us.anthropic.claude-3-haiku-20240307-v1%3A0/converse").unwrap();
    let body = Bytes::from_static(br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#);
    let call = parse(&route, body).unwrap();
    assert_eq!(call.model, "anthropic.claude-3-haiku-20240307-v1:0");
    assert_eq!(
        call.served_as.as_deref(),
        Some("us.anthropic.claude-3-haiku-20240307-v1:0")
    );
}

fn provider() -> Provider {
    let text = r#"
[[providers]]
name = "bedrock"
kind = "bedrock"
base_url = "https://bedrock-runtime.us-east-1.amazonaws.com"
region = "us-east-1"
models = ["anthropic.*"]

[[keys]]
id = "k"
key_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
cap_usd = "1.00"
period = "day"
"#;
    let env = |name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some("AKIDEXAMPLE".to_owned()),
        "AWS_SECRET_ACCESS_KEY" => Some("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned()),
        "AWS_SESSION_TOKEN" => Some("session-token".to_owned()),
        _ => None,
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/test.toml");
    let text = format!(
        "[prices]\nfile = \"{}\"\n{text}",
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config/prices.toml")
            .display()
    );
    let config = crate::config::Config::from_toml_str_with_env(&text, &path, &env).unwrap();
    config.providers.into_iter().next().unwrap()
}

#[test]
fn sigv4_signs_the_encoded_path_for_the_region_with_the_session_token() {
    let provider = provider();
    let aws = provider.aws.clone().unwrap();
    let keys: AwsKeys = aws.keys.clone().unwrap();
    let credential = Credential::Aws(keys);
    let route = route("/model/us.anthropic.claude-3-haiku-20240307-v1%3A0/converse").unwrap();
    let mut client = HeaderMap::new();
    client.insert("authorization", HeaderValue::from_static("Bearer tg-key"));
    let body = Bytes::from_static(br#"{"messages":[]}"#);
    let request = upstream_request(
        &provider,
        &credential,
        &route,
        "us.anthropic.claude-3-haiku-20240307-v1:0",
        &client,
        body.into(),
    )
    .unwrap();
    assert_eq!(
        request.uri().path(),
        "/model/us.anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    );
    let authorization = request.headers()["authorization"].to_str().unwrap();
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
        "{authorization}"
    );
    assert!(
        authorization.contains("/us-east-1/bedrock/aws4_request"),
        "{authorization}"
    );
    assert!(!authorization.contains("tg-key"));
    assert!(request.headers().contains_key("x-amz-date"));
    assert_eq!(request.headers()["x-amz-security-token"], "session-token");
    // A Bedrock API key goes as a bearer token instead.
    let key = Credential::Key(Secret::new("bedrock-api-key".to_owned()));
    let body = Bytes::from_static(b"{}");
    let request = upstream_request(&provider, &key, &route, "m", &client, body.into()).unwrap();
    assert_eq!(request.headers()["authorization"], "Bearer bedrock-api-key");
    assert!(!request.headers().contains_key("x-amz-date"));
}

#[test]
fn claudes_long_context_beta_in_converse_is_a_priced_option() {
    let route = route("/model/anthropic.claude-sonnet-4-20250514-v1%3A0/converse").unwrap();
    let body = Bytes::from_static(
        br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}],
             "additionalModelRequestFields":{"anthropic_beta":["context-1m-2025-08-07"]}}"#,
    );
    assert!(parse(&route, body).unwrap().options.long_context);
    let plain = Bytes::from_static(br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#);
    assert!(!parse(&route, plain).unwrap().options.long_context);
}
