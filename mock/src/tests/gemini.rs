//! The Gemini API: generateContent, both stream framings, countTokens, the
//! model list, the key check and the directives.

use serde_json::{json, Value};

use super::{read_until_cut, settled, start};
use crate::reply::text;
use crate::usage::Usage;
use crate::{spawn, MockOptions, MockServer};

const KEY: &str = "AIza-test-key";
const FLASH: &str = "/v1beta/models/gemini-2.5-flash";

/// A request with a system instruction and one user turn of `prompt`.
fn request(prompt: &str) -> Value {
    json!({
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": [{"role": "user", "parts": [{"text": prompt}]}],
    })
}

/// ceil(bytes / 4) per text plus 3 per content, the system instruction
/// one of them, as the mock counts Gemini prompts.
fn prompt_tokens(prompt: &str) -> u64 {
    (8u64).div_ceil(4) + 3 + (prompt.len() as u64).div_ceil(4) + 3
}

pub(super) async fn call(server: &MockServer, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .header("x-goog-api-key", KEY)
        .json(&body)
        .send()
        .await
        .unwrap()
}

pub(super) async fn call_json(server: &MockServer, path: &str, body: Value) -> (u16, Value) {
    let response = call(server, path, body).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The chunks of a `?alt=sse` stream, each `data: {json}\r\n\r\n`.
pub(super) fn sse_chunks(body: &str) -> Vec<Value> {
    assert!(
        body.ends_with("\r\n\r\n"),
        "stream ends mid-event: {body:?}"
    );
    body.split("\r\n\r\n")
        .filter(|event| !event.is_empty())
        .map(|event| serde_json::from_str(event.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

/// The chunks of a JSON-array stream, checking its framing.
pub(super) fn array_chunks(body: &str) -> Vec<Value> {
    assert!(body.starts_with("[{"), "{body:?}");
    assert!(body.ends_with("}\n]"), "{body:?}");
    let elements = body[1..body.len() - 2].split("\n,\r\n").count();
    let chunks: Vec<Value> = serde_json::from_str(body).unwrap();
    assert_eq!(chunks.len(), elements, "one separator between elements");
    chunks
}

fn texts(chunk: &Value, candidate: usize) -> String {
    chunk["candidates"][candidate]["content"]["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter(|part| part["thought"] != true)
                .filter_map(|part| part["text"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn generate_content_answers_text_and_usage() {
    let server = start().await;
    let response = call(
        &server,
        &format!("{FLASH}:generateContent"),
        request("hello"),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/json; charset=UTF-8"
    );
    let body: Value = response.json().await.unwrap();
    let candidate = &body["candidates"][0];
    assert_eq!(
        candidate["content"],
        json!({"role": "model", "parts": [{"text": text(12)}]})
    );
    assert_eq!(candidate["finishReason"], "STOP");
    assert_eq!(candidate["index"], 0);
    let prompt = prompt_tokens("hello");
    assert_eq!(
        body["usageMetadata"],
        json!({
            "promptTokenCount": prompt,
            "candidatesTokenCount": 12,
            "totalTokenCount": prompt + 12,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        })
    );
    assert_eq!(body["modelVersion"], "gemini-2.5-flash");
    assert!(!body["responseId"].as_str().unwrap().is_empty());
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: prompt,
            output: 12,
            ..Usage::default()
        }
    );
    let seen = server.stats.last_request().unwrap();
    assert_eq!(seen.google_api_key().as_deref(), Some(KEY));
    assert_eq!(seen.path_and_query(), format!("{FLASH}:generateContent"));
    assert_eq!(seen.vertex_target(), None);
}

#[tokio::test]
async fn the_api_key_is_required_in_the_header_or_the_query() {
    let server = spawn(MockOptions {
        expect_key: Some(KEY.into()),
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}{FLASH}:generateContent", server.url());

    let missing = client.post(&url).json(&request("hi")).send().await.unwrap();
    assert_eq!(missing.status(), 403);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], 403);
    assert_eq!(body["error"]["status"], "PERMISSION_DENIED");

    let wrong = client
        .post(&url)
        .header("x-goog-api-key", "AIza-other")
        .json(&request("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 400);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(body["error"]["details"][0]["reason"], "API_KEY_INVALID");

    let in_query = client
        .post(format!("{url}?key={KEY}"))
        .json(&request("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(in_query.status(), 200);
    let seen = server.stats.last_request().unwrap();
    assert_eq!(seen.query_param("key").as_deref(), Some(KEY));
    assert_eq!(seen.google_api_key().as_deref(), Some(KEY));
    assert_eq!(
        seen.path_and_query(),
        format!("{FLASH}:generateContent?key={KEY}")
    );
    assert_eq!(server.stats.requests(), 3);
}

#[tokio::test]
async fn output_limit_and_candidates_shape_the_reply() {
    let server = start().await;
    let mut body = request("hi");
    // Proto names and string integers read as Google reads them.
    body["generation_config"] = json!({"max_output_tokens": "5", "candidate_count": 2});
    let (status, answer) = call_json(&server, &format!("{FLASH}:generateContent"), body).await;
    assert_eq!(status, 200);
    for index in 0..2 {
        let candidate = &answer["candidates"][index];
        assert_eq!(candidate["index"], index);
        assert_eq!(candidate["finishReason"], "MAX_TOKENS");
        assert_eq!(texts(&answer, index), text(5));
    }
    assert_eq!(answer["usageMetadata"]["candidatesTokenCount"], 10);

    let mut too_many = request("hi");
    too_many["generationConfig"] = json!({"candidateCount": 9});
    let (status, error) = call_json(&server, &format!("{FLASH}:generateContent"), too_many).await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["status"], "INVALID_ARGUMENT");

    let (status, error) = call_json(
        &server,
        &format!("{FLASH}:generateContent"),
        json!({"contents": []}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("contents"));
}

#[tokio::test]
async fn an_sse_stream_sends_a_chunk_per_token_with_usage_so_far() {
    let server = start().await;
    let mut body = request("hi mock:tokens=3");
    body["generationConfig"] = json!({"candidateCount": 2});
    let response = call(
        &server,
        &format!("{FLASH}:streamGenerateContent?alt=sse"),
        body,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let chunks = sse_chunks(&response.text().await.unwrap());
    assert_eq!(
        chunks.len(),
        3 + 1,
        "a chunk per token, then the closing one"
    );
    let prompt = prompt_tokens("hi mock:tokens=3");
    for (position, chunk) in chunks[..3].iter().enumerate() {
        for candidate in 0..2 {
            assert_eq!(texts(chunk, candidate), crate::reply::word(position as u64));
            assert!(chunk["candidates"][candidate].get("finishReason").is_none());
        }
        let out = 2 * (position as u64 + 1);
        assert_eq!(chunk["usageMetadata"]["candidatesTokenCount"], out);
        assert_eq!(chunk["usageMetadata"]["totalTokenCount"], prompt + out);
        assert_eq!(chunk["modelVersion"], "gemini-2.5-flash");
        assert_eq!(chunk["responseId"], chunks[0]["responseId"]);
    }
    let last = chunks.last().unwrap();
    for candidate in 0..2 {
        assert_eq!(last["candidates"][candidate]["finishReason"], "STOP");
    }
    assert_eq!(last["usageMetadata"]["promptTokenCount"], prompt);
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 6);
    settled(
        &server,
        Usage {
            input: prompt,
            output: 6,
            ..Usage::default()
        },
    )
    .await;
}

#[tokio::test]
async fn without_alt_sse_the_stream_is_one_json_array_sent_element_by_element() {
    use futures_util::StreamExt;
    let server = start().await;
    let response = call(
        &server,
        "/v1/models/gemini-2.5-flash:streamGenerateContent",
        request("hi mock:tokens=4 mock:sleep_ms=20"),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/json; charset=UTF-8"
    );
    let mut pieces = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(piece) = stream.next().await {
        pieces.push(String::from_utf8(piece.unwrap().to_vec()).unwrap());
    }
    assert!(pieces.len() > 2, "written as generated: {pieces:?}");
    assert!(pieces[0].starts_with("[{"));
    let chunks = array_chunks(&pieces.concat());
    assert_eq!(chunks.len(), 4 + 1);
    let reply: String = chunks.iter().map(|chunk| texts(chunk, 0)).collect();
    assert_eq!(reply, text(4));
    assert_eq!(chunks[4]["candidates"][0]["finishReason"], "STOP");
    assert_eq!(chunks[4]["usageMetadata"]["candidatesTokenCount"], 4);
}

#[tokio::test]
async fn a_cut_stream_bills_its_input_thoughts_and_the_tokens_sent() {
    let server = start().await;
    let prompt_text = "hi mock:cut=3 mock:thoughts=7";
    let mut body = request(prompt_text);
    body["generationConfig"] = json!({"candidateCount": 2});
    let response = call(
        &server,
        &format!("{FLASH}:streamGenerateContent?alt=sse"),
        body,
    )
    .await;
    let (received, cut) = read_until_cut(response).await;
    assert!(cut);
    let chunks = sse_chunks(&received);
    assert_eq!(chunks.len(), 2, "whole chunks until 3 tokens are out");
    assert!(!received.contains("finishReason"));
    settled(
        &server,
        Usage {
            input: prompt_tokens(prompt_text),
            output: 4 + 7,
            ..Usage::default()
        },
    )
    .await;

    // A cut request that does not stream gets no response at all.
    let result = reqwest::Client::new()
        .post(format!("{}{FLASH}:generateContent", server.url()))
        .header("x-goog-api-key", KEY)
        .json(&request("hi mock:cut=1"))
        .send()
        .await;
    assert!(result.is_err());
}

#[tokio::test]
async fn directed_errors_take_googles_shape() {
    let server = start().await;
    for (code, status) in [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
    ] {
        let (got, body) = call_json(
            &server,
            &format!("{FLASH}:generateContent"),
            request(&format!("mock:status={code}")),
        )
        .await;
        assert_eq!(got, code);
        assert_eq!(body["error"]["code"], code);
        assert_eq!(body["error"]["status"], status);
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mock:status"));
    }
    assert_eq!(server.stats.billed(), Usage::default());
}

#[tokio::test]
async fn cache_thoughts_and_tool_prompt_are_reported_and_billed() {
    let server = start().await;
    let prompt_text = format!(
        "{} mock:cached=20 mock:thoughts=50 mock:tool_prompt=9",
        "x".repeat(200)
    );
    let mut body = request(&prompt_text);
    body["generationConfig"] =
        json!({"thinkingConfig": {"thinkingBudget": 30, "includeThoughts": true}});
    let (_, answer) = call_json(&server, &format!("{FLASH}:generateContent"), body).await;
    let prompt = prompt_tokens(&prompt_text);
    let usage = &answer["usageMetadata"];
    assert_eq!(usage["promptTokenCount"], prompt, "cached tokens included");
    assert_eq!(usage["cachedContentTokenCount"], 20);
    assert_eq!(usage["thoughtsTokenCount"], 30, "at most the budget");
    assert_eq!(usage["toolUsePromptTokenCount"], 9);
    assert_eq!(usage["candidatesTokenCount"], 12);
    assert_eq!(usage["totalTokenCount"], prompt + 12 + 30 + 9);
    let parts = &answer["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0]["thought"], true);
    assert_eq!(parts[1], json!({"text": text(12)}));
    assert_eq!(
        server.stats.billed(),
        Usage {
            input: prompt - 20 + 9,
            cached_input: 20,
            output: 12 + 30,
            ..Usage::default()
        }
    );

    // Without includeThoughts the thoughts are billed but not shown; a
    // streamed thought summary comes first, in a chunk of its own.
    let (_, hidden) = call_json(
        &server,
        &format!("{FLASH}:generateContent"),
        request("hi mock:thoughts=5"),
    )
    .await;
    assert_eq!(hidden["usageMetadata"]["thoughtsTokenCount"], 5);
    assert_eq!(
        hidden["candidates"][0]["content"]["parts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let mut streamed = request("hi mock:thoughts=5 mock:tokens=2");
    streamed["generationConfig"] = json!({"thinkingConfig": {"includeThoughts": true}});
    let response = call(
        &server,
        &format!("{FLASH}:streamGenerateContent?alt=sse"),
        streamed,
    )
    .await;
    let chunks = sse_chunks(&response.text().await.unwrap());
    assert_eq!(chunks.len(), 1 + 2 + 1);
    assert_eq!(
        chunks[0]["candidates"][0]["content"]["parts"][0]["thought"],
        true
    );
    assert!(chunks[0]["usageMetadata"]
        .get("candidatesTokenCount")
        .is_none());
    assert_eq!(chunks[0]["usageMetadata"]["thoughtsTokenCount"], 5);
}

#[tokio::test]
async fn google_search_grounds_the_answer_with_its_queries() {
    let server = start().await;
    let mut body = request("news mock:tool_calls=2 mock:tokens=3");
    body["tools"] = json!([{"google_search": {}}]);
    let (_, answer) = call_json(&server, &format!("{FLASH}:generateContent"), body.clone()).await;
    let grounding = &answer["candidates"][0]["groundingMetadata"];
    assert_eq!(
        grounding["webSearchQueries"],
        json!(["mock query 0", "mock query 1"])
    );
    assert_eq!(grounding["groundingChunks"].as_array().unwrap().len(), 2);
    assert_eq!(server.stats.billed().tool_calls, 2);

    // Streamed, the grounding rides on the closing chunk.
    let response = call(
        &server,
        &format!("{FLASH}:streamGenerateContent?alt=sse"),
        body,
    )
    .await;
    let chunks = sse_chunks(&response.text().await.unwrap());
    assert!(chunks[..3]
        .iter()
        .all(|chunk| chunk["candidates"][0].get("groundingMetadata").is_none()));
    assert_eq!(
        chunks[3]["candidates"][0]["groundingMetadata"]["webSearchQueries"][1],
        "mock query 1"
    );

    // Without a search tool the directive runs nothing.
    let (_, plain) = call_json(
        &server,
        &format!("{FLASH}:generateContent"),
        request("news mock:tool_calls=2"),
    )
    .await;
    assert!(plain["candidates"][0].get("groundingMetadata").is_none());
}

fn weather_tools() -> Value {
    json!([{"functionDeclarations": [{"name": "get_weather", "description": "Weather",
        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}},
            "required": ["city"]}}]}])
}

#[tokio::test]
async fn a_declared_function_is_called_then_its_response_answered() {
    let server = start().await;
    let mut body = request("Weather in Paris? mock:tokens=4");
    body["tools"] = weather_tools();
    let (_, answer) = call_json(&server, &format!("{FLASH}:generateContent"), body.clone()).await;
    let candidate = &answer["candidates"][0];
    assert_eq!(
        candidate["content"]["parts"],
        json!([{"functionCall": {"name": "get_weather", "args": {"city": "lorem"}}}])
    );
    assert_eq!(candidate["finishReason"], "STOP");
    let call_tokens = crate::reply::count_tokens(r#"{"city":"lorem"}"#);
    assert_eq!(answer["usageMetadata"]["candidatesTokenCount"], call_tokens);

    // Streamed, the call is one chunk that ends the stream.
    let response = call(
        &server,
        &format!("{FLASH}:streamGenerateContent?alt=sse"),
        body.clone(),
    )
    .await;
    let chunks = sse_chunks(&response.text().await.unwrap());
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0]["candidates"][0]["content"], candidate["content"]);
    assert_eq!(chunks[0]["candidates"][0]["finishReason"], "STOP");

    let mut answered = body.clone();
    answered["contents"].as_array_mut().unwrap().extend([
        json!({"role": "model", "parts": candidate["content"]["parts"]}),
        json!({"role": "user", "parts": [{"functionResponse": {"name": "get_weather",
            "response": {"sky": "clear"}}}]}),
    ]);
    let (_, reply) = call_json(&server, &format!("{FLASH}:generateContent"), answered).await;
    assert_eq!(
        texts(&reply, 0),
        text(4),
        "the prompt's directives still apply"
    );

    let mut refused = body;
    refused["toolConfig"] = json!({"functionCallingConfig": {"mode": "NONE"}});
    let (_, reply) = call_json(&server, &format!("{FLASH}:generateContent"), refused).await;
    assert_eq!(texts(&reply, 0), text(4));
}

#[tokio::test]
async fn count_tokens_reads_both_request_forms_and_bills_nothing() {
    let server = start().await;
    let (status, counted) = call_json(
        &server,
        &format!("{FLASH}:countTokens"),
        json!({"contents": [{"parts": [{"text": "hello"}]}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(counted["totalTokens"], 2 + 3);
    let (_, wrapped) = call_json(
        &server,
        &format!("{FLASH}:countTokens"),
        json!({"generateContentRequest": {"model": "models/gemini-2.5-flash",
            "systemInstruction": {"parts": [{"text": "be brief"}]},
            "contents": [{"role": "user", "parts": [{"text": "hello"}]}]}}),
    )
    .await;
    assert_eq!(wrapped["totalTokens"], prompt_tokens("hello"));
    assert_eq!(server.stats.billed(), Usage::default());
}

#[tokio::test]
async fn models_are_listed_and_fetched_in_googles_shape() {
    let server = start().await;
    let client = reqwest::Client::new();
    let get = |path: &str, key: bool| {
        let mut request = client.get(format!("{}{path}", server.url()));
        if key {
            request = request.header("x-goog-api-key", KEY);
        }
        request.send()
    };
    let listed: Value = get("/v1beta/models", true)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = listed["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"models/gemini-2.5-flash"), "{names:?}");
    assert!(listed["models"][0]["outputTokenLimit"].is_u64());

    let one: Value = get(FLASH, true).await.unwrap().json().await.unwrap();
    assert_eq!(one["name"], "models/gemini-2.5-flash");
    assert_eq!(one["displayName"], "Gemini 2.5 Flash");

    let missing = get("/v1beta/models/gemini-0", true).await.unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["status"], "NOT_FOUND");

    // `/v1/models` is Gemini's with a Google key, OpenAI's without.
    let gemini: Value = get("/v1/models", true).await.unwrap().json().await.unwrap();
    assert!(gemini["models"].is_array());
    let openai: Value = get("/v1/models", false)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(openai["object"], "list");

    let unknown = call(&server, "/v1beta/models/m:embedContent", json!({})).await;
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["status"], "NOT_FOUND");
}
