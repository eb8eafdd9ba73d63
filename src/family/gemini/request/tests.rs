//! The rules of a `generateContent` body: limits under either spelling,
//! thinking budgets, candidates, tools and refused input.

use serde_json::json;

use super::*;
use crate::prices::PriceTable;

fn parse_json(body: serde_json::Value) -> Result<Call, GatewayError> {
    parse("gemini-2.5-flash", false, Bytes::from(body.to_string()))
}

fn contents() -> serde_json::Value {
    json!([{"role": "user", "parts": [{"text": "hi"}]}])
}

fn price() -> ModelPrice {
    let table = PriceTable::from_toml_str(
        r#"
        [models."gemini-2.5-flash"]
        input_per_mtok = "0.30"
        output_per_mtok = "2.50"
        max_output_tokens = 65536
        max_thinking_tokens = 24576
        reasoning = true
        "#,
    )
    .unwrap();
    table.get("gemini-2.5-flash").unwrap().clone()
}

#[test]
fn an_absent_limit_is_set_where_the_client_spells_the_config() {
    let mut call = parse_json(json!({"contents": contents()})).unwrap();
    bound_thinking(&mut call, &price());
    call.bound_output(65536, &[]);
    let body: serde_json::Value = serde_json::from_slice(&call.forward_body().to_bytes()).unwrap();
    assert_eq!(body["generationConfig"]["maxOutputTokens"], 65536);
    // Thinking is dynamic: the model's most, on top of the output limit.
    assert_eq!(call.output_bound(), 65536 + 24576);

    let mut call = parse_json(json!({"contents": contents(),
        "generation_config": {"max_output_tokens": 50, "candidate_count": 2,
            "thinking_config": {"thinking_budget": 0}}}))
    .unwrap();
    bound_thinking(&mut call, &price());
    call.bound_output(65536, &[]);
    assert_eq!(
        (call.output_limit, call.choices, call.output_bound()),
        (50, 2, 50)
    );
    assert_eq!(
        call.forward_body().to_bytes(),
        call.original,
        "nothing to change"
    );

    let mut call = parse_json(json!({"contents": contents(),
        "generation_config": {"candidate_count": 3}}))
    .unwrap();
    call.bound_output(1000, &[]);
    let body: serde_json::Value = serde_json::from_slice(&call.forward_body().to_bytes()).unwrap();
    assert_eq!(body["generation_config"]["maxOutputTokens"], 1000);
    assert!(body.get("generationConfig").is_none());

    // A config the client named as null is filled in under its name, not
    // sent beside a second spelling.
    for name in ["generation_config", "generationConfig"] {
        let mut call = parse_json(json!({"contents": contents(), name: null})).unwrap();
        call.bound_output(1000, &[]);
        let body: serde_json::Value =
            serde_json::from_slice(&call.forward_body().to_bytes()).unwrap();
        assert_eq!(body[name]["maxOutputTokens"], 1000, "{body}");
        assert_eq!(body.as_object().unwrap().len(), 2, "{body}");
    }
}

#[test]
fn a_thinking_budget_bounds_thinking() {
    let mut call = parse_json(json!({"contents": contents(),
        "generationConfig": {"maxOutputTokens": 100, "thinkingConfig": {"thinkingBudget": 512}}}))
    .unwrap();
    bound_thinking(&mut call, &price());
    assert_eq!(call.output_bound(), 612);
    for dynamic in [
        json!({"thinkingBudget": -1}),
        json!({"thinkingLevel": "high"}),
        json!({}),
    ] {
        let mut call = parse_json(json!({"contents": contents(),
            "generationConfig": {"maxOutputTokens": 100, "thinkingConfig": dynamic}}))
        .unwrap();
        bound_thinking(&mut call, &price());
        assert_eq!(call.output_bound(), 100 + 24576);
    }
    assert!(parse_json(json!({"contents": contents(),
        "generationConfig": {"thinkingConfig": {"thinkingBudget": -2}}}))
    .is_err());
}

#[test]
fn a_field_under_both_spellings_is_refused() {
    for body in [
        json!({"contents": contents(), "generationConfig": {}, "generation_config": {}}),
        json!({"contents": contents(), "generationConfig": {"maxOutputTokens": 5, "max_output_tokens": 9}}),
        json!({"contents": contents(), "generationConfig": {"thinkingConfig": {"thinkingBudget": 1, "thinking_budget": 2}}}),
    ] {
        let error = parse_json(body.clone()).unwrap_err();
        assert!(
            error.to_string().contains("name the same field"),
            "{body}: {error}"
        );
    }
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    let cases = [
        (json!({}), "`contents` is required"),
        (json!({"contents": []}), "non-empty array"),
        (
            json!({"contents": contents(), "generationConfig": {"maxOutputTokens": 0}}),
            "maxOutputTokens",
        ),
        (
            json!({"contents": contents(), "generationConfig": {"candidateCount": 9}}),
            "at most 8",
        ),
        (
            json!({"contents": contents(), "generationConfig": 5}),
            "must be an object",
        ),
        (
            json!({"contents": contents(), "model": "gemini-2.5-pro"}),
            "named in the path",
        ),
    ];
    for (body, expected) in cases {
        let error = parse_json(body.clone()).unwrap_err();
        assert!(error.to_string().contains(expected), "{body}: {error}");
    }
}

#[test]
fn audio_and_unbounded_tools_are_refused_search_is_priced() {
    let audio = json!({"contents": [{"role": "user", "parts": [
        {"inlineData": {"mimeType": "audio/wav", "data": "AAAA"}}]}]});
    let error = parse_json(audio).unwrap_err();
    assert!(error.to_string().contains("audio"), "{error}");

    let error =
        parse_json(json!({"contents": contents(), "tools": [{"codeExecution": {}}]})).unwrap_err();
    assert!(error.to_string().contains("`codeExecution`"), "{error}");

    let call = parse_json(json!({"contents": contents(),
        "tools": [{"functionDeclarations": [{"name": "f"}]}, {"google_search": {}}]}))
    .unwrap();
    assert_eq!(call.tools.declared.len(), 1);
    let search = &call.tools.declared[0];
    assert_eq!(search.tool, HostedTool::GoogleSearch);
    // Gemini 2.x bills a grounded request once; newer models per query.
    assert_eq!((search.per_request, search.max_uses), (Some(1), None));
    let call = parse(
        "gemini-3-pro-preview",
        false,
        Bytes::from(json!({"contents": contents(), "tools": [{"googleSearch": {}}]}).to_string()),
    )
    .unwrap();
    let search = &call.tools.declared[0];
    assert_eq!(
        (search.per_request, search.max_uses),
        (None, Some(SEARCH_QUERIES_RESERVED))
    );
}
