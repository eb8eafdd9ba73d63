//! Azure OpenAI: the deployment, dated Responses and v1 routes, the key in
//! either header, `api-version`, deployments and their base models, the
//! content filter annotations, the tier and Azure's errors.

use serde_json::{json, Value};

use super::{one_user_message_tokens, parse_sse, read_until_cut, settled, start, Sse};
use crate::reply::{count_tokens, text};
use crate::usage::Usage;
use crate::{spawn, MockOptions, MockServer};

const VERSION: &str = "api-version=2024-10-21";

const ACCESS_DENIED: &str = "Access denied due to invalid subscription key or wrong API \
    endpoint. Make sure to provide a valid key for an active subscription and use a correct \
    regional API endpoint for your resource.";

const DEPLOYMENT_NOT_FOUND: &str = "The API deployment for this resource does not exist. If \
    you created the deployment within the last 5 minutes, please wait a moment and try again.";

fn chat(content: &str) -> Value {
    json!({"messages": [{"role": "user", "content": content}]})
}

/// A mock whose resource has one chat and one embeddings deployment.
async fn with_deployments() -> MockServer {
    spawn(MockOptions {
        azure_deployments: vec![
            ("prod-4o".into(), "gpt-4o-2024-08-06".into()),
            ("embed".into(), "text-embedding-3-small".into()),
        ],
        ..MockOptions::default()
    })
    .await
    .unwrap()
}

async fn send(server: &MockServer, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn send_json(server: &MockServer, path: &str, body: &Value) -> (u16, Value) {
    let response = send(server, path, body).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn send_sse(server: &MockServer, path: &str, body: &Value) -> Vec<Sse> {
    let response = send(server, path, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    parse_sse(&response.text().await.unwrap())
}

/// The JSON chunks of a chat or completions stream, `[DONE]` checked and
/// left off.
fn chunks(events: &[Sse]) -> Vec<Value> {
    assert_eq!(events.last().unwrap().data, "[DONE]");
    events[..events.len() - 1]
        .iter()
        .map(|event| event.json())
        .collect()
}

fn safe() -> Value {
    json!({"filtered": false, "severity": "safe"})
}

fn prompt_filter_results(prompts: u64) -> Value {
    (0..prompts)
        .map(|index| {
            json!({"prompt_index": index, "content_filter_results": {
                "hate": safe(),
                "jailbreak": {"filtered": false, "detected": false},
                "self_harm": safe(),
                "sexual": safe(),
                "violence": safe(),
            }})
        })
        .collect()
}

#[tokio::test]
async fn every_route_answers_naming_the_deployment_when_none_are_configured() {
    let server = start().await;
    let chat_body = chat("hello");
    let completion = json!({"prompt": "Say this"});
    let embedding = json!({"input": "alpha beta"});
    let response = json!({"input": "hello"});
    let named = |mut body: Value| {
        body["model"] = "my-dep".into();
        body
    };
    let routes = [
        (
            "/openai/deployments/my-dep/chat/completions",
            chat_body.clone(),
        ),
        ("/openai/deployments/my-dep/completions", completion.clone()),
        ("/openai/deployments/my-dep/embeddings", embedding.clone()),
        ("/openai/deployments/my-dep/responses", response.clone()),
        ("/openai/responses", named(response.clone())),
        ("/openai/v1/chat/completions", named(chat_body)),
        ("/openai/v1/completions", named(completion)),
        ("/openai/v1/embeddings", named(embedding)),
        ("/openai/v1/responses", named(response)),
    ];
    for (path, body) in routes {
        let query = if path.starts_with("/openai/v1/") {
            String::new()
        } else {
            format!("?{VERSION}")
        };
        let reply = send(&server, &format!("{path}{query}"), &body).await;
        assert_eq!(reply.status(), 200, "{path}");
        assert_eq!(reply.headers()["content-type"], "application/json");
        assert!(reply.headers().contains_key("apim-request-id"), "{path}");
        assert!(reply.headers().contains_key("x-request-id"), "{path}");
        let answer: Value = reply.json().await.unwrap();
        assert_eq!(answer["model"], "my-dep", "{path}");
        let expected_object = match path.rsplit('/').next().unwrap() {
            "completions" if path.contains("chat") => "chat.completion",
            "completions" => "text_completion",
            "embeddings" => "list",
            _ => "response",
        };
        assert_eq!(answer["object"], expected_object, "{path}");
        let last = server.stats.last_request().unwrap();
        assert_eq!(last.path_and_query(), format!("{path}{query}"));
        let deployment = path.contains("/deployments/").then(|| "my-dep".to_owned());
        assert_eq!(last.azure_deployment(), deployment, "{path}");
    }
    assert_eq!(server.stats.requests(), 9);
}

#[tokio::test]
async fn answers_match_the_openai_routes_and_bill_the_same() {
    let server = start().await;
    let content = "hello there mock:tokens=5 mock:cached=2";
    let path = format!("/openai/deployments/gpt-4o-mini/chat/completions?{VERSION}");
    let (status, body) = send_json(&server, &path, &chat(content)).await;
    assert_eq!(status, 200);
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["choices"][0]["message"]["content"], text(5));
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let prompt = one_user_message_tokens(content);
    assert_eq!(body["usage"]["prompt_tokens"], prompt);
    assert_eq!(body["usage"]["completion_tokens"], 5);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
    let billed = Usage {
        input: prompt - 2,
        cached_input: 2,
        output: 5,
        ..Usage::default()
    };
    assert_eq!(server.stats.billed(), billed);

    let embedding = json!({"input": ["alpha beta", "gamma"], "dimensions": 4});
    let path = format!("/openai/deployments/emb/embeddings?{VERSION}");
    let (_, azure) = send_json(&server, &path, &embedding).await;
    let mut openai_request = embedding.clone();
    openai_request["model"] = "emb".into();
    let (_, openai) = super::post_json(&server, "/v1/embeddings", openai_request).await;
    assert_eq!(azure, openai, "the same vectors, usage and model");
    let input = count_tokens("alpha beta") + count_tokens("gamma");
    assert_eq!(azure["usage"]["prompt_tokens"], input);
    assert_eq!(
        server.stats.billed(),
        billed.saturating_add(Usage {
            input: 2 * input,
            ..Usage::default()
        })
    );
}

#[tokio::test]
async fn the_key_is_taken_from_either_header() {
    let server = spawn(MockOptions {
        expect_key: Some("azure-key".into()),
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let deployment = format!(
        "{}/openai/deployments/d/chat/completions?{VERSION}",
        server.url()
    );
    let v1 = format!("{}/openai/v1/chat/completions", server.url());
    let mut named = chat("hi");
    named["model"] = "d".into();
    for url in [&deployment, &v1] {
        let keyed = client
            .post(url)
            .header("api-key", "azure-key")
            .json(&named)
            .send()
            .await
            .unwrap();
        assert_eq!(keyed.status(), 200, "{url}");
        let bearer = client
            .post(url)
            .bearer_auth("azure-key")
            .json(&named)
            .send()
            .await
            .unwrap();
        assert_eq!(bearer.status(), 200, "{url}");
        let wrong = client
            .post(url)
            .header("api-key", "other")
            .json(&named)
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401, "{url}");
        let missing = client.post(url).json(&named).send().await.unwrap();
        assert_eq!(missing.status(), 401, "{url}");
        let body: Value = missing.json().await.unwrap();
        assert_eq!(
            body,
            json!({"error": {"code": "401", "message": ACCESS_DENIED}})
        );
    }
    assert_eq!(server.stats.requests(), 8);
    assert_eq!(
        server.stats.billed().output,
        4 * 12,
        "only the keyed calls answer"
    );
}

#[tokio::test]
async fn the_dated_api_wants_an_api_version_and_v1_does_not() {
    let server = start().await;
    let mut named = chat("hi");
    named["model"] = "d".into();
    for path in [
        "/openai/deployments/d/chat/completions",
        "/openai/deployments/d/chat/completions?api-version=",
        "/openai/deployments/d/embeddings?other=1",
        "/openai/responses",
    ] {
        let (status, body) = send_json(&server, path, &json!({"model": "d", "input": "hi"})).await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(body["error"]["code"], "BadRequest", "{path}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("api-version"),
            "{body}"
        );
    }
    assert_eq!(server.stats.billed(), Usage::default());
    let (status, _) = send_json(&server, "/openai/v1/chat/completions", &named).await;
    assert_eq!(status, 200);
    let path = "/openai/v1/chat/completions?api-version=preview";
    let (status, _) = send_json(&server, path, &named).await;
    assert_eq!(status, 200);
    let last = server.stats.last_request().unwrap();
    assert_eq!(last.query_param("api-version").as_deref(), Some("preview"));

    let (status, body) = send_json(&server, "/openai/v1/chat/completions", &chat("hi")).await;
    assert_eq!(status, 400, "the v1 API needs the deployment in `model`");
    assert_eq!(body["error"]["code"], "BadRequest");
    assert_eq!(body["error"]["param"], "model");
}

#[tokio::test]
async fn an_unknown_deployment_is_not_found() {
    let server = with_deployments().await;
    let unknown = json!({"error": {"code": "DeploymentNotFound", "message": DEPLOYMENT_NOT_FOUND}});
    let path = format!("/openai/deployments/staging/chat/completions?{VERSION}");
    let (status, body) = send_json(&server, &path, &chat("hi")).await;
    assert_eq!(status, 404);
    assert_eq!(body, unknown);
    let (status, body) = send_json(
        &server,
        "/openai/v1/responses",
        &json!({"model": "staging", "input": "hi"}),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body, unknown);
    assert_eq!(server.stats.billed(), Usage::default());

    let path = format!("/openai/deployments/prod-4o/chat/completions?{VERSION}");
    let (status, _) = send_json(&server, &path, &chat("hi")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn answers_name_the_base_model_not_the_deployment() {
    let server = with_deployments().await;
    let mut request = chat("hi mock:tokens=3");
    request["model"] = "ignored".into();
    let path = format!("/openai/deployments/prod-4o/chat/completions?{VERSION}");
    let (_, body) = send_json(&server, &path, &request).await;
    assert_eq!(body["model"], "gpt-4o-2024-08-06");

    request["stream"] = true.into();
    request["stream_options"] = json!({"include_usage": true});
    let streamed = chunks(&send_sse(&server, &path, &request).await);
    assert_eq!(streamed[0]["model"], "", "the prompt filter chunk");
    assert!(streamed[1..]
        .iter()
        .all(|chunk| chunk["model"] == "gpt-4o-2024-08-06"));

    let completion = json!({"model": "prod-4o", "prompt": "Say", "stream": true});
    let streamed = chunks(&send_sse(&server, "/openai/v1/completions", &completion).await);
    assert_eq!(streamed[0]["model"], "");
    assert!(streamed[1..]
        .iter()
        .all(|chunk| chunk["model"] == "gpt-4o-2024-08-06"));

    let response = json!({"model": "prod-4o", "input": "hi", "stream": true});
    let path = format!("/openai/responses?{VERSION}");
    let events = send_sse(&server, &path, &response).await;
    let models: Vec<Value> = events
        .iter()
        .filter_map(|event| event.json().get("response").cloned())
        .map(|response| response["model"].clone())
        .collect();
    assert_eq!(models.len(), 3, "created, in_progress, completed");
    assert!(models.iter().all(|model| model == "gpt-4o-2024-08-06"));

    let path = format!("/openai/deployments/embed/embeddings?{VERSION}");
    let (_, body) = send_json(&server, &path, &json!({"input": "x"})).await;
    assert_eq!(body["model"], "text-embedding-3-small");
}

#[tokio::test]
async fn chat_carries_the_content_filter_annotations() {
    let server = start().await;
    let mut request = chat("hi mock:tokens=2");
    request["n"] = 2.into();
    let path = format!("/openai/deployments/d/chat/completions?{VERSION}");
    let (_, body) = send_json(&server, &path, &request).await;
    assert_eq!(body["prompt_filter_results"], prompt_filter_results(1));
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    for choice in choices {
        let results = &choice["content_filter_results"];
        assert_eq!(results["hate"], safe());
        assert_eq!(results["violence"], safe());
        assert_eq!(
            results["protected_material_text"],
            json!({"filtered": false, "detected": false})
        );
    }

    let completion = json!({"prompt": ["one", "two"]});
    let path = format!("/openai/deployments/d/completions?{VERSION}");
    let (_, body) = send_json(&server, &path, &completion).await;
    assert_eq!(body["prompt_filter_results"], prompt_filter_results(2));
    assert!(body["choices"][1]["content_filter_results"].is_object());
}

#[tokio::test]
async fn a_chat_stream_opens_with_the_prompt_filter_chunk() {
    let server = start().await;
    let content = "hi mock:tokens=3";
    let mut request = chat(content);
    request["stream"] = true.into();
    request["stream_options"] = json!({"include_usage": true});
    let path = format!("/openai/deployments/d/chat/completions?{VERSION}");
    let events = send_sse(&server, &path, &request).await;
    assert!(events.iter().all(|event| event.name.is_none()));
    let chunks = chunks(&events);
    assert_eq!(chunks.len(), 1 + 1 + 3 + 1 + 1);
    assert_eq!(
        chunks[0],
        json!({
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": prompt_filter_results(1),
        })
    );
    let opening = &chunks[1]["choices"][0];
    assert_eq!(opening["delta"]["role"], "assistant");
    assert_eq!(opening["content_filter_results"], json!({}));
    for chunk in &chunks[2..5] {
        assert_eq!(
            chunk["choices"][0]["content_filter_results"]["sexual"],
            safe()
        );
    }
    let text: String = chunks[2..5]
        .iter()
        .map(|chunk| chunk["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, crate::reply::text(3));
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[5]["choices"][0]["content_filter_results"], json!({}));
    let usage_chunk = &chunks[6];
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 3);
    for chunk in &chunks[1..] {
        assert_eq!(chunk["id"], chunks[1]["id"]);
        assert_eq!(chunk["object"], "chat.completion.chunk");
    }
    settled(
        &server,
        Usage {
            input: one_user_message_tokens(content),
            output: 3,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn a_streamed_tool_call_is_annotated_too() {
    let server = start().await;
    let request = json!({
        "model": "d",
        "stream": true,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    });
    let chunks = chunks(&send_sse(&server, "/openai/v1/chat/completions", &request).await);
    assert_eq!(chunks[0]["prompt_filter_results"], prompt_filter_results(1));
    let opening = &chunks[1]["choices"][0];
    assert_eq!(
        opening["delta"]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    assert!(chunks[1..].iter().all(|chunk| chunk["model"] == "d"));
    assert!(chunks
        .iter()
        .all(|chunk| chunk.get("service_tier").is_none()));

    let mut whole = request;
    whole["stream"] = false.into();
    let (_, body) = send_json(&server, "/openai/v1/chat/completions", &whole).await;
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(body["prompt_filter_results"], prompt_filter_results(1));
    assert!(body.get("service_tier").is_none());
}

#[tokio::test]
async fn chat_reports_no_tier_and_responses_no_project_default() {
    let server = start().await;
    let path = format!("/openai/deployments/d/chat/completions?{VERSION}");
    for tier in [None, Some("priority")] {
        let mut request = chat("hi mock:project_priority=1");
        if let Some(tier) = tier {
            request["service_tier"] = tier.into();
        }
        let (_, body) = send_json(&server, &path, &request).await;
        assert!(body.get("service_tier").is_none(), "{body}");
        request["stream"] = true.into();
        request["stream_options"] = json!({"include_usage": true});
        let streamed = chunks(&send_sse(&server, &path, &request).await);
        assert!(streamed
            .iter()
            .all(|chunk| chunk.get("service_tier").is_none()));
    }
    let completion = json!({"model": "d", "prompt": "hi", "service_tier": "priority"});
    let (_, body) = send_json(&server, "/openai/v1/completions", &completion).await;
    assert!(body.get("service_tier").is_none());

    let path = format!("/openai/responses?{VERSION}");
    for (tier, expected) in [
        (None, "default"),
        (Some("auto"), "default"),
        (Some("priority"), "priority"),
    ] {
        let mut request = json!({"model": "d", "input": "hi mock:project_priority=1"});
        if let Some(tier) = tier {
            request["service_tier"] = tier.into();
        }
        let (_, body) = send_json(&server, &path, &request).await;
        assert_eq!(body["service_tier"], expected, "{tier:?}");
    }
}

#[tokio::test]
async fn status_directives_answer_in_azure_shape() {
    let server = start().await;
    let path = format!("/openai/deployments/d/chat/completions?{VERSION}");
    let response = send(&server, &path, &chat("mock:status=429")).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "429");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Rate limit is exceeded."));
    assert_eq!(body["error"].as_object().unwrap().len(), 2, "{body}");

    let mut streamed = chat("mock:status=500");
    streamed["stream"] = true.into();
    let (status, body) = send_json(&server, &path, &streamed).await;
    assert_eq!(status, 500);
    assert_eq!(body["error"]["code"], "InternalServerError");
    let (status, body) = send_json(&server, &path, &chat("mock:status=503")).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "503");

    let (status, body) = send_json(&server, &path, &chat("mock:status=400")).await;
    assert_eq!(status, 400);
    let error = &body["error"];
    assert_eq!(error["code"], "content_filter");
    assert_eq!(error["param"], "prompt");
    assert_eq!(error["status"], 400);
    assert_eq!(error["innererror"]["code"], "ResponsibleAIPolicyViolation");
    assert_eq!(
        error["innererror"]["content_filter_result"]["violence"]["filtered"],
        true
    );

    let embedding = json!({"model": "e", "input": "x mock:status=429"});
    let (status, body) = send_json(&server, "/openai/v1/embeddings", &embedding).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["code"], "429");
    let response = json!({"model": "r", "input": "x mock:status=404"});
    let (status, body) = send_json(&server, "/openai/v1/responses", &response).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "DeploymentNotFound");
    assert_eq!(server.stats.billed(), Usage::default());
}

#[tokio::test]
async fn other_refusals_are_in_azure_shape_too() {
    let server = start().await;
    let (status, body) = send_json(&server, "/openai/v1/models/x/nope", &json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"error": {"code": "404", "message": "Resource not found"}})
    );
    let get = reqwest::Client::new()
        .get(format!(
            "{}/openai/deployments/d/chat/completions?{VERSION}",
            server.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 404);

    let response = reqwest::Client::new()
        .post(format!("{}/openai/v1/chat/completions", server.url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "BadRequest");
    assert!(body["error"]["message"].as_str().unwrap().contains("JSON"));

    let path = format!("/openai/deployments/d/chat/completions?{VERSION}");
    let (status, body) = send_json(&server, &path, &json!({})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "messages");
}

#[tokio::test]
async fn the_path_deployment_is_percent_decoded() {
    let server = start().await;
    let path = format!("/openai/deployments/team%2Fprod%204o/chat/completions?{VERSION}");
    let (status, body) = send_json(&server, &path, &chat("hi")).await;
    assert_eq!(status, 200);
    assert_eq!(body["model"], "team/prod 4o");
    let last = server.stats.last_request().unwrap();
    assert_eq!(last.azure_deployment().as_deref(), Some("team/prod 4o"));
    assert_eq!(
        last.path,
        "/openai/deployments/team%2Fprod%204o/chat/completions"
    );

    let broken = format!("/openai/deployments/bad%zz/chat/completions?{VERSION}");
    let (status, body) = send_json(&server, &broken, &chat("hi")).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "404");
}

#[tokio::test]
async fn a_cut_azure_stream_bills_what_was_sent() {
    let server = start().await;
    let content = "go mock:cut=2";
    let mut request = chat(content);
    request["stream"] = true.into();
    let path = format!("/openai/deployments/d/chat/completions?{VERSION}");
    let response = send(&server, &path, &request).await;
    let (received, cut) = read_until_cut(response).await;
    assert!(cut, "{received}");
    assert_eq!(parse_sse(&received).len(), 1 + 1 + 2);
    settled(
        &server,
        Usage {
            input: one_user_message_tokens(content),
            output: 2,
            ..Usage::default()
        },
    )
    .await;
}
