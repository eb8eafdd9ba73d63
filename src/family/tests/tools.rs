//! How a request's hosted tools are read, bounded and refused.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::api::{Api, Call};
use crate::error::GatewayError;
use crate::family::parse_own_route;
use crate::family::{anthropic::DEFAULT_MAX_USES, openai::DEFAULT_MAX_TOOL_CALLS};
use crate::hosted::HostedTool;

fn parse(api: Api, body: Value) -> Result<Call, GatewayError> {
    parse_own_route(api, Bytes::from(body.to_string()))
}

fn sent(call: &Call) -> Value {
    serde_json::from_slice(&call.forward_body().to_bytes()).unwrap()
}

fn refusal(error: GatewayError) -> (String, Option<&'static str>, Option<&'static str>) {
    match error {
        GatewayError::BadRequest {
            message,
            param,
            code,
        } => (message, param, code),
        other => panic!("not a bad request: {other:?}"),
    }
}

#[test]
fn responses_without_a_limit_get_one() {
    let call = parse(
        Api::Responses,
        json!({"model": "gpt-5", "input": "news?", "tools": [
            {"type": "function", "name": "f", "parameters": {}},
            {"type": "web_search"},
            {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 8},
            {"type": "code_interpreter", "container": {"type": "auto"}},
            {"type": "web_search_preview_2025_03_11"},
        ]}),
    )
    .unwrap();
    assert_eq!(call.tools.max_calls, Some(DEFAULT_MAX_TOOL_CALLS));
    assert_eq!(sent(&call)["max_tool_calls"], DEFAULT_MAX_TOOL_CALLS);
    let tools: Vec<_> = call.tools.declared.iter().map(|d| d.tool).collect();
    assert_eq!(
        tools,
        [
            HostedTool::WebSearch,
            HostedTool::FileSearch,
            HostedTool::CodeInterpreter,
            HostedTool::WebSearchPreview
        ]
    );
    assert_eq!(call.tools.declared[1].result_limit, Some(8));
    assert_eq!(call.tools.declared[2].per_request, Some(1));
    assert_eq!(call.tools.declared[0].per_request, None);
    assert_eq!(call.tools.declared[3].name, "web_search_preview_2025_03_11");
}

#[test]
fn a_limit_given_and_tools_billed_by_tokens_are_left_alone() {
    let given = json!({"model": "gpt-5", "input": "x", "max_output_tokens": 10,
        "max_tool_calls": 2, "tools": [{"type": "web_search"}]});
    let call = parse(Api::Responses, given.clone()).unwrap();
    assert_eq!(call.tools.max_calls, Some(2));
    assert_eq!(call.forward_body().to_bytes(), given.to_string().as_bytes());

    let functions = json!({"model": "gpt-5", "input": "x", "max_output_tokens": 10,
        "tools": [{"type": "function", "name": "f"}, {"type": "local_shell"}]});
    let call = parse(Api::Responses, functions.clone()).unwrap();
    assert!(call.tools.is_empty());
    assert_eq!(
        call.forward_body().to_bytes(),
        functions.to_string().as_bytes()
    );
}

#[test]
fn anthropic_server_tools_get_max_uses() {
    let call = parse(
        Api::Messages,
        json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"name": "get_weather", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search"},
            {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 2,
             "max_content_tokens": 5000},
            {"type": "bash_20250124", "name": "bash"},
        ]}),
    )
    .unwrap();
    let tools = &sent(&call)["tools"];
    assert_eq!(tools[1]["max_uses"], DEFAULT_MAX_USES);
    assert_eq!(tools[2]["max_uses"], 2);
    assert!(tools[0].get("max_uses").is_none() && tools[3].get("max_uses").is_none());
    let declared = &call.tools.declared;
    assert_eq!(
        (declared[0].tool, declared[0].max_uses),
        (HostedTool::WebSearch, Some(DEFAULT_MAX_USES))
    );
    assert_eq!(
        (
            declared[1].tool,
            declared[1].max_uses,
            declared[1].result_limit
        ),
        (HostedTool::WebFetch, Some(2), Some(5000))
    );
    assert_eq!(call.tools.max_calls, None);
}

#[test]
fn a_code_interpreter_session_is_billed_by_its_memory() {
    let session = |container: Value| {
        parse(
            Api::Responses,
            json!({"model": "gpt-5", "input": "x",
                "tools": [{"type": "code_interpreter", "container": container}]}),
        )
        .map(|call| call.tools.declared[0].per_request)
    };
    assert_eq!(session(json!({"type": "auto"})).unwrap(), Some(1));
    assert_eq!(
        session(json!({"type": "auto", "memory_limit": "16g"})).unwrap(),
        Some(16)
    );
    let (message, _, code) = refusal(session(json!("cntr_abc")).unwrap_err());
    assert!(message.contains("cntr_abc"), "{message}");
    assert_eq!(code, Some("tool_not_supported"));
    let (message, param, _) =
        refusal(session(json!({"type": "auto", "memory_limit": "2g"})).unwrap_err());
    assert!(message.contains("memory_limit"), "{message}");
    assert_eq!(param, Some("tools"));
}

#[test]
fn chat_search_is_one_per_request() {
    let call = parse(
        Api::ChatCompletions,
        json!({"model": "gpt-4o-search-preview", "messages": [{"role": "user", "content": "x"}],
            "web_search_options": {"search_context_size": "high"}}),
    )
    .unwrap();
    let declared = &call.tools.declared;
    assert_eq!(declared.len(), 1);
    assert_eq!(declared[0].tool, HostedTool::WebSearchPreview);
    assert_eq!(declared[0].per_request, Some(1));
    assert_eq!(declared[0].param(), "web_search_options");
    let bad = json!({"model": "m", "messages": [{}], "web_search_options": true});
    let (_, param, _) = refusal(parse(Api::ChatCompletions, bad).unwrap_err());
    assert_eq!(param, Some("web_search_options"));
    // Functions are the client's; another type may be run and billed
    // by an OpenAI-compatible provider.
    let functions = json!({"model": "m", "messages": [{}],
        "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "custom", "custom": {"name": "g"}}]});
    assert!(parse(Api::ChatCompletions, functions)
        .unwrap()
        .tools
        .is_empty());
    let browsing = json!({"model": "m", "messages": [{}], "tools": [{"type": "browser_search"}]});
    let (message, _, code) = refusal(parse(Api::ChatCompletions, browsing).unwrap_err());
    assert!(message.contains("browser_search"), "{message}");
    assert_eq!(code, Some("tool_not_supported"));
}

#[test]
fn tools_that_cannot_be_bounded_are_refused_by_name() {
    let messages = |tools: Value, extra: Value| {
        let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
            "messages": [{"role": "user", "content": "x"}], "tools": tools});
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
            body.extend(extra);
        }
        refusal(parse(Api::Messages, body).unwrap_err())
    };
    let (message, param, code) = messages(
        json!([{"type": "code_execution_20250825", "name": "code_execution"}]),
        json!({}),
    );
    assert!(message.contains("code_execution_20250825"), "{message}");
    assert_eq!((param, code), (Some("tools"), Some("tool_not_supported")));
    let (message, param, _) = messages(
        json!([]),
        json!({"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]}),
    );
    assert!(message.contains("mcp_servers"), "{message}");
    assert_eq!(param, Some("mcp_servers"));
    let (message, ..) = messages(
        json!([{"type": "telepathy_20990101", "name": "t"}]),
        json!({}),
    );
    assert!(message.contains("telepathy_20990101"), "{message}");

    let (message, _, code) = refusal(
        parse(
            Api::Responses,
            json!({"model": "gpt-5", "input": "x", "tools": [{"type": "deep_research"}]}),
        )
        .unwrap_err(),
    );
    assert!(message.contains("deep_research"), "{message}");
    assert_eq!(code, Some("tool_not_supported"));
}

#[test]
fn limits_must_be_counts() {
    let cases = [
        (
            Api::Responses,
            json!({"model": "m", "input": "x", "max_tool_calls": -1, "tools": [{"type": "web_search"}]}),
            "max_tool_calls",
        ),
        (
            Api::Responses,
            json!({"model": "m", "input": "x", "tools": {"type": "web_search"}}),
            "tools",
        ),
        (
            Api::Responses,
            json!({"model": "m", "input": "x", "tools": [{"name": "no type"}]}),
            "tools",
        ),
        (
            Api::Messages,
            json!({"model": "m", "max_tokens": 1, "messages": [{}],
                "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": "5"}]}),
            "tools",
        ),
        (
            Api::Messages,
            json!({"model": "m", "max_tokens": 1, "messages": [{}], "tools": ["web_search"]}),
            "tools",
        ),
    ];
    for (api, body, field) in cases {
        let (message, param, _) = refusal(parse(api, body.clone()).unwrap_err());
        assert_eq!(param, Some(field), "{body}: {message}");
    }
}

#[test]
fn a_stored_prompt_is_allowed_no_hosted_tool_call() {
    let call = parse(
        Api::Responses,
        json!({"model": "gpt-5", "prompt": {"id": "pmpt_1", "version": "2"}, "input": "hi"}),
    )
    .unwrap();
    assert_eq!(sent(&call)["max_tool_calls"], 0);
    assert_eq!(call.tools.max_calls, Some(0));
    // Function tools are not hosted: they still go through.
    let call = parse(
        Api::Responses,
        json!({"model": "gpt-5", "prompt": {"id": "pmpt_1"}, "max_tool_calls": 0,
               "tools": [{"type": "function", "name": "f", "parameters": {}}]}),
    )
    .unwrap();
    assert_eq!(sent(&call)["max_tool_calls"], 0);

    for body in [
        json!({"model": "gpt-5", "prompt": {"id": "pmpt_1"}, "max_tool_calls": 3}),
        json!({"model": "gpt-5", "prompt": {"id": "pmpt_1"}, "tools": [{"type": "web_search"}]}),
    ] {
        let (message, param, code) = refusal(parse(Api::Responses, body).unwrap_err());
        assert_eq!(
            (param, code),
            (Some("prompt"), Some("tool_not_supported")),
            "{message}"
        );
    }
}
