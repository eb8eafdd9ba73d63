//! Hosted tools through the real server to the mock provider: a web search
//! (OpenAI Responses, Anthropic Messages) is reserved at its fee times the
//! most searches the forwarded body allows plus the input its results can
//! feed back, charged what the provider billed, fees included, and a tool
//! the price table does not price is refused before anything is sent or
//! charged. The books balance after each.

use futures_util::StreamExt;
use serde_json::{json, Value};
use tollgate::budget::{LedgerEntry, LedgerStatus};
use tollgate::estimate::WEB_SEARCH_RESULT_TOKENS;
use tollgate::family::{anthropic::DEFAULT_MAX_USES, openai::DEFAULT_MAX_TOOL_CALLS};
use tollgate::hosted::HostedTool;
use tollgate::usage::Usage;

use crate::common::*;

/// What the mock billed, with its tool uses as uses of `tool`.
fn billed_with(h: &Harness, tool: HostedTool) -> Usage {
    let mut usage = billed_by(&h.mock.stats);
    usage.tool_calls.set(tool, h.mock.stats.billed().tool_calls);
    usage
}

/// The least a call declaring a web search may reserve: the fee of every
/// search it allows and, as input, each search's result allowance.
fn search_floor(model: &str, searches: u64) -> u64 {
    let fee = prices()
        .get(model)
        .unwrap()
        .tool_call(HostedTool::WebSearch)
        .unwrap();
    let results = Usage {
        input: searches * WEB_SEARCH_RESULT_TOKENS,
        ..Usage::default()
    };
    searches * fee + cost(model, &results)
}

/// Nothing stays reserved, and the key spent exactly what its ledger says.
async fn books_balance(h: &Harness) -> Vec<LedgerEntry> {
    h.settled().await;
    let budget = h.budget(ALICE).await;
    assert_eq!(budget["key"]["reserved_usd_micros"], 0, "{budget}");
    let ledger = h.ledger();
    let charged: i64 = ledger.iter().map(|entry| entry.actual).sum();
    assert_eq!(delta(spent(h, ALICE).await), charged);
    ledger
}

async fn read_stream(response: reqwest::Response) -> (String, bool) {
    let mut stream = response.bytes_stream();
    let (mut text, mut failed) = (Vec::new(), false);
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => text.extend_from_slice(&bytes),
            Err(_) => failed = true,
        }
    }
    (String::from_utf8(text).unwrap(), failed)
}

#[tokio::test]
async fn a_responses_web_search_is_reserved_for_every_call_and_charged_its_fees() {
    let h = start(Setup::default()).await;
    let body = json!({"model": "gpt-4o-mini", "max_output_tokens": 50,
        "input": "what happened today? mock:tool_calls=2",
        "tools": [{"type": "web_search"}]});
    let response = h.post("/v1/responses", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let charged: u64 = response.headers()["x-tollgate-cost-usd-micros"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let reply: Value = response.json().await.unwrap();
    assert_eq!(reply["output"][0]["type"], "web_search_call");
    // The gateway bounded the calls where the provider reads the bound.
    let sent = h.mock.stats.last_request().unwrap().body;
    assert_eq!(sent["max_tool_calls"], DEFAULT_MAX_TOOL_CALLS);

    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Ok);
    let billed = billed_with(&h, HostedTool::WebSearch);
    assert_eq!(billed.tool_calls.get(HostedTool::WebSearch), 2);
    assert_eq!(entry.usage, billed);
    assert_eq!(entry.actual, delta(cost("gpt-4o-mini", &billed)));
    assert_eq!(delta(charged), entry.actual);
    // Two searches at $0.01 on top of the tokens.
    let tokens_only = Usage {
        tool_calls: Default::default(),
        ..billed
    };
    assert_eq!(
        entry.actual,
        delta(cost("gpt-4o-mini", &tokens_only) + 2 * 10_000)
    );
    assert!(
        entry.reserved >= search_floor("gpt-4o-mini", DEFAULT_MAX_TOOL_CALLS),
        "{entry:?}"
    );
    books_balance(&h).await;
}

#[tokio::test]
async fn a_responses_stream_is_charged_the_calls_its_completion_lists() {
    let h = start(Setup::default()).await;
    let body = json!({"model": "gpt-4o", "max_output_tokens": 20, "stream": true,
        "max_tool_calls": 1, "input": "news mock:tool_calls=3 mock:tokens=5",
        "tools": [{"type": "web_search"}]});
    let response = h.post("/v1/responses", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let (text, failed) = read_stream(response).await;
    assert!(!failed && text.contains("response.completed"));
    let sent = h.mock.stats.last_request().unwrap().body;
    assert_eq!(sent["max_tool_calls"], 1, "the client's own limit stands");

    let ledger = books_balance(&h).await;
    let entry = &ledger[0];
    let billed = billed_with(&h, HostedTool::WebSearch);
    assert_eq!(billed.tool_calls.get(HostedTool::WebSearch), 1);
    assert_eq!(entry.usage, billed);
    assert_eq!(entry.actual, delta(cost("gpt-4o", &billed)));
    assert!(entry.reserved >= search_floor("gpt-4o", 1), "{entry:?}");
}

#[tokio::test]
async fn an_anthropic_web_search_is_reserved_for_its_max_uses_and_charged_its_fees() {
    let h = start(Setup::default()).await;
    let model = "claude-haiku-4-5";
    let mut body = messages(model, "look it up mock:tool_calls=2", 64);
    body["tools"] = json!([{"type": "web_search_20250305", "name": "web_search"}]);
    let response = h.post("/v1/messages", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.unwrap();
    assert_eq!(reply["usage"]["server_tool_use"]["web_search_requests"], 2);
    let sent = h.mock.stats.last_request().unwrap().body;
    assert_eq!(sent["tools"][0]["max_uses"], DEFAULT_MAX_USES);

    let entry = only_entry(&h);
    let billed = billed_with(&h, HostedTool::WebSearch);
    assert_eq!(entry.usage, billed);
    assert_eq!(entry.actual, delta(cost(model, &billed)));
    assert!(entry.actual > 2 * 10_000);
    assert!(
        entry.reserved >= search_floor(model, DEFAULT_MAX_USES),
        "{entry:?}"
    );
    books_balance(&h).await;

    // Streamed, with the client's own max_uses: the uses come in
    // message_delta, with the input the results added.
    let mut body = messages(model, "again mock:tool_calls=5 mock:tokens=4", 64);
    body["stream"] = json!(true);
    body["tools"] = json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]);
    let before = billed_by(&h.mock.stats);
    let response = h.post("/v1/messages", ALICE, &body).await;
    let (text, failed) = read_stream(response).await;
    assert!(!failed && text.contains("message_stop"));
    let ledger = books_balance(&h).await;
    let entry = ledger.last().unwrap();
    let total = billed_by(&h.mock.stats);
    let mut streamed = Usage {
        input: total.input - before.input,
        output: total.output - before.output,
        ..Usage::default()
    };
    // Five asked for, three allowed.
    streamed.tool_calls.set(HostedTool::WebSearch, 3);
    assert_eq!(h.mock.stats.billed().tool_calls, 2 + 3);
    assert_eq!(entry.usage, streamed);
    assert_eq!(entry.actual, delta(cost(model, &streamed)));
    assert!(entry.reserved >= search_floor(model, 3), "{entry:?}");
}

#[tokio::test]
async fn an_unpriced_or_unbounded_tool_is_refused_naming_it() {
    let h = start(Setup::default()).await;
    let refusals = [
        (
            "/v1/responses",
            json!({"model": "gpt-4o-mini", "input": "draw a cat",
                "tools": [{"type": "web_search"}, {"type": "image_generation"}]}),
            "image_generation",
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-4.1-nano", "input": "news", "tools": [{"type": "web_search"}]}),
            "web_search",
        ),
        (
            "/v1/messages",
            json!({"model": "claude-haiku-4-5", "max_tokens": 10,
                "messages": [{"role": "user", "content": "run it"}],
                "tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}),
            "code_execution_20250825",
        ),
    ];
    for (path, body, tool) in refusals {
        let response = h.post(path, ALICE, &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        let message = if path == "/v1/messages" {
            assert_eq!(error["error"]["type"], "invalid_request_error");
            error["error"]["message"].as_str().unwrap().to_owned()
        } else {
            assert_eq!(error["error"]["code"], "tool_not_priced", "{error}");
            assert_eq!(error["error"]["param"], "tools");
            error["error"]["message"].as_str().unwrap().to_owned()
        };
        assert!(message.contains(&format!("`{tool}`")), "{message}");
    }
    assert!(h.mock.stats.last_request().is_none(), "nothing forwarded");
    assert!(h.ledger().is_empty(), "nothing charged");
    assert_eq!(spent(&h, ALICE).await, 0);
    books_balance(&h).await;
}

#[tokio::test]
async fn a_cut_stream_is_charged_every_use_the_bound_allowed() {
    let h = start(Setup::default()).await;
    let model = "claude-haiku-4-5";
    let mut body = messages(model, "mock:tool_calls=1 mock:tokens=20 mock:cut=2", 64);
    body["stream"] = json!(true);
    body["tools"] = json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]);
    let response = h.post("/v1/messages", ALICE, &body).await;
    let (_, failed) = read_stream(response).await;
    assert!(failed, "the stream was cut");
    let ledger = books_balance(&h).await;
    let entry = &ledger[0];
    assert_eq!(entry.status, LedgerStatus::Estimated);
    // The provider billed one search; two could have been, and their
    // results read as input after message_start reported the prompt.
    assert_eq!(entry.usage.tool_calls.get(HostedTool::WebSearch), 2);
    let billed = billed_with(&h, HostedTool::WebSearch);
    assert!(entry.usage.input >= billed.input, "{entry:?} {billed:?}");
    assert!(
        entry.actual >= delta(cost(model, &billed)),
        "{entry:?} {billed:?}"
    );
    assert!(entry.actual <= delta(entry.reserved), "{entry:?}");

    // Responses reports nothing before it completes: the whole bound's
    // searches are charged.
    let body = json!({"model": "gpt-4o-mini", "max_output_tokens": 30, "stream": true,
        "input": "mock:tool_calls=1 mock:cut=1", "tools": [{"type": "web_search"}]});
    let response = h.post("/v1/responses", ALICE, &body).await;
    let (_, failed) = read_stream(response).await;
    assert!(failed);
    let ledger = books_balance(&h).await;
    let entry = ledger.last().unwrap();
    assert_eq!(entry.status, LedgerStatus::Estimated);
    assert_eq!(
        entry.usage.tool_calls.get(HostedTool::WebSearch),
        DEFAULT_MAX_TOOL_CALLS
    );
    assert!(entry.actual <= delta(entry.reserved), "{entry:?}");
}

#[tokio::test]
async fn a_search_model_is_charged_one_search_per_request() {
    let h = start(Setup::default()).await;
    let model = "gpt-4o-mini-search-preview";
    let mut body = chat(model, "weather in Paris?");
    body["web_search_options"] = json!({"search_context_size": "medium"});
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let _ = response.bytes().await.unwrap();
    let entry = only_entry(&h);
    let tokens = billed_by(&h.mock.stats);
    assert_eq!(entry.usage.tool_calls.get(HostedTool::WebSearchPreview), 1);
    assert_eq!(entry.actual, delta(cost(model, &tokens) + 25_000));
    books_balance(&h).await;
}

#[tokio::test]
async fn a_stream_read_on_after_its_client_left_bills_the_declared_tool() {
    let mut setup = Setup::default();
    setup.mock.tokens_per_sec = Some(100);
    let h = start(setup).await;
    // A reasoning model's stream is read to its end when its client
    // leaves; its web_search_call items are billed as the preview tool
    // the request declared.
    let body = json!({"model": "gpt-5-mini", "max_output_tokens": 100, "stream": true,
        "input": "mock:tool_calls=2 mock:tokens=40", "tools": [{"type": "web_search_preview"}]});
    let response = h.post("/v1/responses", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    for _ in 0..3 {
        stream.next().await.unwrap().unwrap();
    }
    drop(stream);
    let ledger = books_balance(&h).await;
    let entry = &ledger[0];
    assert_eq!(entry.status, LedgerStatus::Ok, "{entry:?}");
    let billed = billed_with(&h, HostedTool::WebSearchPreview);
    assert_eq!(entry.usage, billed);
    assert_eq!(entry.usage.tool_calls.get(HostedTool::WebSearch), 0);
    assert_eq!(entry.actual, delta(cost("gpt-5-mini", &billed)));
}
