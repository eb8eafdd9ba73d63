//! Azure's routes, keys and upstream paths.

use http::HeaderValue;

use super::*;

#[test]
fn routes_name_the_deployment_the_operation_and_the_api_version() {
    let chat = route(
        "/openai/deployments/prod-4o/chat/completions",
        Some("api-version=2024-10-21"),
    )
    .unwrap();
    assert_eq!(chat.family, ProviderKind::Azure);
    assert_eq!(chat.api, Api::ChatCompletions);
    assert_eq!(chat.model.as_deref(), Some("prod-4o"));
    assert_eq!(chat.version, "2024-10-21");
    for (path, api) in [
        ("/openai/deployments/d/completions", Api::Completions),
        ("/openai/deployments/d/embeddings", Api::Embeddings),
        ("/openai/deployments/d/responses", Api::Responses),
        ("/openai/responses", Api::Responses),
        ("/openai/v1/chat/completions", Api::ChatCompletions),
        ("/openai/v1/responses", Api::Responses),
        ("/openai/v1/embeddings", Api::Embeddings),
    ] {
        assert_eq!(route(path, None).map(|r| r.api), Some(api), "{path}");
    }
    assert_eq!(
        route("/openai/deployments/my%2Edep/embeddings", None)
            .unwrap()
            .model
            .as_deref(),
        Some("my.dep")
    );
    for other in [
        "/openai/deployments/d/images/generations",
        "/openai/deployments/d",
        "/openai/v1/models",
        "/openai/chat/completions",
        "/v1/chat/completions",
    ] {
        assert!(route(other, None).is_none(), "{other}");
    }
}

#[test]
fn the_key_comes_in_api_key_or_as_a_bearer_token() {
    let mut headers = HeaderMap::new();
    headers.insert("api-key", HeaderValue::from_static(" tg-a "));
    headers.insert("authorization", HeaderValue::from_static("Bearer tg-b"));
    assert_eq!(gateway_key(&headers).as_deref(), Some("tg-a"));
    headers.remove("api-key");
    assert_eq!(gateway_key(&headers).as_deref(), Some("tg-b"));
}

#[test]
fn dated_routes_need_an_api_version() {
    let body = Bytes::from_static(br#"{"model":"d","input":"hi"}"#);
    let dated = route("/openai/responses", None).unwrap();
    assert!(matches!(
        parse(&dated, body.clone()),
        Err(GatewayError::BadRequest {
            code: Some("missing_api_version"),
            ..
        })
    ));
    let v1 = route("/openai/v1/responses", None).unwrap();
    assert_eq!(parse(&v1, body).unwrap().model, "d");
    // On a deployment's path the body's model is not read.
    let path = route(
        "/openai/deployments/prod/chat/completions",
        Some("api-version=2024-10-21"),
    )
    .unwrap();
    let body =
        Bytes::from_static(br#"{"model":"other","messages":[{"role":"user","content":"x"}]}"#);
    assert_eq!(parse(&path, body).unwrap().model, "prod");
}
