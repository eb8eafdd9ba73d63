//! Request checks, field by field.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::api::{Api, Call};
use crate::error::GatewayError;
use crate::family::parse_own_route;

fn parse(api: Api, body: &str) -> Result<Call, GatewayError> {
    let mut call = parse_own_route(api, Bytes::from(body.to_owned()))?;
    call.bound_output(1000, &[]);
    Ok(call)
}

fn forwarded(call: &Call) -> Value {
    serde_json::from_slice(&call.forward_body().to_bytes()).unwrap()
}

fn param_of(err: GatewayError) -> Option<&'static str> {
    match err {
        GatewayError::BadRequest { param, .. } => param,
        other => panic!("not a bad request: {other:?}"),
    }
}

#[test]
fn sets_the_output_limit_when_missing() {
    let call = parse(
        Api::ChatCompletions,
        r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .unwrap();
    assert_eq!(call.output_limit, 1000);
    let forwarded: Value = serde_json::from_slice(&call.forward_body().to_bytes()).unwrap();
    assert_eq!(forwarded["max_completion_tokens"], 1000);

    let call = parse(Api::Responses, r#"{"model":"gpt-4o-mini","input":"hi"}"#).unwrap();
    let forwarded: Value = serde_json::from_slice(&call.forward_body().to_bytes()).unwrap();
    assert_eq!(forwarded["max_output_tokens"], 1000);

    let call = parse(
        Api::Completions,
        r#"{"model":"gpt-3.5-turbo-instruct","prompt":"hi"}"#,
    )
    .unwrap();
    // OpenAI's own default for legacy completions.
    assert_eq!(call.output_limit, 16);
}

#[test]
fn keeps_the_client_limit_and_bytes() {
    let raw = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":7,"n":3}"#;
    let call = parse(Api::ChatCompletions, raw).unwrap();
    assert_eq!((call.output_limit, call.choices), (7, 3));
    assert_eq!(call.forward_body().to_bytes(), raw.as_bytes());
}

/// What the gateway adds or changes is spliced into the client's bytes:
/// the conversation goes on byte for byte as the client wrote it (spacing,
/// escapes, key order), and the whole reads as the body the gateway
/// checked and priced.
#[test]
fn changes_are_spliced_into_the_client_bytes() {
    let messages = r#""messages": [ {"role":"system", "content":"Be \u0062rief.\n"},
        {"role": "user","content": "a \"quoted\" }{ ] text" } ]"#;
    let contents = r#""contents":[{"role":"user","parts":[{"text":"a }]{ \u00e9"}]}]"#;
    let cases = [
        // A stream asking for no usage and no limit: both added.
        (
            "/v1/chat/completions",
            format!(r#"{{"model":"gpt-4o-mini", "stream":true, {messages} }}"#),
            messages,
        ),
        // Usage turned off, a limit in the field the provider does not read.
        (
            "/v1/chat/completions",
            format!(
                r#"{{"stream_options":{{"include_usage":false}},"max_tokens":5000,"model":"gpt-4o-mini","stream":true,{messages}}}"#
            ),
            messages,
        ),
        // Gemini's config object, holding other settings.
        (
            "/v1beta/models/gemini-2.5-flash:generateContent",
            format!(r#"{{{contents}, "generationConfig": {{"temperature": 0.5}} }}"#),
            contents,
        ),
    ];
    for (path, raw, kept) in cases {
        let route = crate::family::route(path, None).unwrap();
        let mut call = crate::family::parse(&route, Bytes::from(raw.clone())).unwrap();
        call.bound_output(1000, &["max_completion_tokens".to_owned()]);
        let payload = call.forward_body();
        // The client's bytes go as slices of the buffer they came in,
        // not a copy.
        let original = call.original.as_ptr_range();
        assert!(
            payload
                .parts()
                .any(|part| original.contains(&part.as_ptr()) && part.len() >= kept.len()),
            "{path}"
        );
        let sent = payload.to_bytes();
        let sent_text = std::str::from_utf8(&sent).unwrap();
        assert_ne!(sent_text, raw);
        assert!(sent_text.contains(kept), "{sent_text}");
        let reread: serde_json::Map<String, Value> = serde_json::from_slice(&sent).unwrap();
        assert_eq!(reread, call.body, "{sent_text}");
    }
}

#[test]
fn the_limit_goes_where_the_provider_reads_it_and_nowhere_else() {
    let body = r#"{"model":"m","messages":[{}],"max_tokens":5}"#;
    let call = parse(Api::ChatCompletions, body).unwrap();
    let sent = forwarded(&call);
    assert_eq!(sent["max_completion_tokens"], 5);
    assert!(sent.get("max_tokens").is_none(), "{sent}");

    let same = r#"{"model":"m","messages":[{}],"max_tokens":9,"max_completion_tokens":9}"#;
    let sent = forwarded(&parse(Api::ChatCompletions, same).unwrap());
    assert_eq!(sent["max_completion_tokens"], 9);
    assert!(sent.get("max_tokens").is_none(), "{sent}");

    // A provider that reads only `max_tokens` gets it, set or injected.
    let reads_max_tokens = ["max_tokens".to_owned()];
    for (body, limit) in [
        (
            r#"{"model":"m","messages":[{}],"max_completion_tokens":7}"#,
            7,
        ),
        (r#"{"model":"m","messages":[{}]}"#, 1000),
    ] {
        let mut call = parse_own_route(Api::ChatCompletions, Bytes::from(body)).unwrap();
        call.bound_output(1000, &reads_max_tokens);
        let sent = forwarded(&call);
        assert_eq!(sent["max_tokens"], limit);
        assert!(sent.get("max_completion_tokens").is_none(), "{sent}");
        assert_eq!(call.output_limit, limit);
    }
    // One that reads both gets both, equal.
    let both = ["max_tokens".to_owned(), "max_completion_tokens".to_owned()];
    let mut call = parse_own_route(Api::ChatCompletions, Bytes::from(body)).unwrap();
    call.bound_output(1000, &both);
    let sent = forwarded(&call);
    assert_eq!(
        (&sent["max_tokens"], &sent["max_completion_tokens"]),
        (&json!(5), &json!(5))
    );
}

#[test]
fn another_apis_limit_field_is_refused() {
    for (api, body, field) in [
        (
            Api::ChatCompletions,
            r#"{"model":"m","messages":[{}],"max_output_tokens":5}"#,
            "max_output_tokens",
        ),
        (
            Api::Responses,
            r#"{"model":"m","input":"x","max_tokens":5}"#,
            "max_tokens",
        ),
        (
            Api::Messages,
            r#"{"model":"m","messages":[{}],"max_tokens":5,"max_completion_tokens":9}"#,
            "max_completion_tokens",
        ),
        (
            Api::Embeddings,
            r#"{"model":"m","input":"x","max_tokens":5}"#,
            "max_tokens",
        ),
    ] {
        assert_eq!(
            param_of(parse(api, body).unwrap_err()),
            Some(field),
            "{body}"
        );
    }
}

#[test]
fn limits_that_disagree_are_refused() {
    let both = r#"{"model":"m","messages":[{}],"max_tokens":5,"max_completion_tokens":2000}"#;
    let error = parse(Api::ChatCompletions, both).unwrap_err();
    assert!(error.to_string().contains("disagree"), "{error}");
}

#[test]
fn anthropic_requires_max_tokens_and_bounds_thinking() {
    let missing = r#"{"model":"claude-haiku-4-5","messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(
        param_of(parse(Api::Messages, missing).unwrap_err()),
        Some("max_tokens")
    );
    let thinking = r#"{"model":"c","max_tokens":100,"thinking":{"type":"enabled","budget_tokens":3000},"messages":[{}]}"#;
    let call = parse(Api::Messages, thinking).unwrap();
    assert_eq!((call.output_limit, call.output_bound()), (100, 3000));
    assert_eq!(call.forward_body().to_bytes(), thinking.as_bytes());
}

#[test]
fn a_key_twice_is_refused() {
    let twice = r#"{"model":"gpt-4o-mini","model":"gpt-4o","messages":[{}]}"#;
    let error = parse(Api::ChatCompletions, twice).unwrap_err();
    assert!(
        error.to_string().contains("`model` appears twice"),
        "{error}"
    );
}

#[test]
fn asks_for_stream_usage_and_hides_it() {
    let call = parse(
        Api::ChatCompletions,
        r#"{"model":"m","messages":[{}],"stream":true,"max_tokens":5}"#,
    )
    .unwrap();
    assert!(call.hide_usage_chunk);
    let forwarded: Value = serde_json::from_slice(&call.forward_body().to_bytes()).unwrap();
    assert_eq!(forwarded["stream_options"]["include_usage"], true);

    let asked = r#"{"model":"m","messages":[{}],"stream":true,"max_completion_tokens":5,"stream_options":{"include_usage":true}}"#;
    let call = parse(Api::ChatCompletions, asked).unwrap();
    assert!(!call.hide_usage_chunk);
    assert_eq!(call.forward_body().to_bytes(), asked.as_bytes());
}

#[test]
fn rejects_bad_fields_naming_them() {
    let cases = [
        (Api::ChatCompletions, r#"{"messages":[{}]}"#, Some("model")),
        (
            Api::ChatCompletions,
            r#"{"model":3,"messages":[{}]}"#,
            Some("model"),
        ),
        (Api::ChatCompletions, r#"{"model":"m"}"#, Some("messages")),
        (
            Api::ChatCompletions,
            r#"{"model":"m","messages":[]}"#,
            Some("messages"),
        ),
        (
            Api::ChatCompletions,
            r#"{"model":"m","messages":[{}],"max_tokens":-1}"#,
            Some("max_tokens"),
        ),
        (
            Api::ChatCompletions,
            r#"{"model":"m","messages":[{}],"max_tokens":0}"#,
            Some("max_tokens"),
        ),
        (
            Api::ChatCompletions,
            r#"{"model":"m","messages":[{}],"max_tokens":1.5}"#,
            Some("max_tokens"),
        ),
        (
            Api::ChatCompletions,
            r#"{"model":"m","messages":[{}],"n":0}"#,
            Some("n"),
        ),
        (
            Api::ChatCompletions,
            r#"{"model":"m","messages":[{}],"n":1000}"#,
            Some("n"),
        ),
        (
            Api::ChatCompletions,
            r#"{"model":"m","messages":[{}],"stream":"yes"}"#,
            Some("stream"),
        ),
        (
            Api::Messages,
            r#"{"model":"m","messages":[{}],"max_tokens":"10"}"#,
            Some("max_tokens"),
        ),
        (Api::Responses, r#"{"model":"m"}"#, Some("input")),
        (
            Api::Responses,
            r#"{"model":"m","input":"x","max_output_tokens":-5}"#,
            Some("max_output_tokens"),
        ),
        (Api::Embeddings, r#"{"model":"m"}"#, Some("input")),
        (
            Api::Embeddings,
            r#"{"model":"m","input":""}"#,
            Some("input"),
        ),
        (
            Api::Embeddings,
            r#"{"model":"m","input":"x","stream":true}"#,
            Some("stream"),
        ),
        (
            Api::Completions,
            r#"{"model":"m","prompt":"x","best_of":0}"#,
            Some("best_of"),
        ),
        (Api::ChatCompletions, "[1,2]", None),
        (Api::ChatCompletions, "{not json", None),
    ];
    for (api, body, param) in cases {
        let err = parse(api, body).expect_err(body);
        assert_eq!(err.status(), http::StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(param_of(err), param, "{body}");
    }
}

#[test]
fn every_prompt_of_a_completion_gets_its_choices() {
    let call = parse(
        Api::Completions,
        r#"{"model":"m","prompt":["a","b","c"],"n":2}"#,
    )
    .unwrap();
    assert_eq!(call.choices, 6);
    let tokens = parse(Api::Completions, r#"{"model":"m","prompt":[1,2,3]}"#).unwrap();
    assert_eq!(tokens.choices, 1);
    let arrays = parse(Api::Completions, r#"{"model":"m","prompt":[[1],[2]]}"#).unwrap();
    assert_eq!(arrays.choices, 2);
}

#[test]
fn best_of_multiplies_choices() {
    let call = parse(
        Api::Completions,
        r#"{"model":"m","prompt":"x","n":2,"best_of":5}"#,
    )
    .unwrap();
    assert_eq!(call.choices, 5);
}

#[test]
fn responses_may_continue_server_side_state() {
    assert!(parse(
        Api::Responses,
        r#"{"model":"m","previous_response_id":"resp_1"}"#
    )
    .is_ok());
}
