//! Micro-benchmarks of the work the gateway adds to every call, each step
//! on its own: scanning a stream for its usage, reading usage from a body,
//! parsing and estimating a request, counting tokens (beside tiktoken-rs),
//! a turn of a long conversation (its counts remembered, or not),
//! one call's whole path through its family (Gemini beside OpenAI, Bedrock
//! beside Anthropic), and one reserve + settle on the memory store and on
//! the SQLite store (one call at a time, and 32 at once).
//!
//! `cargo bench --bench micro` measures; `cargo bench --bench micro --
//! --test` runs each benchmark once, to check they still work.

#[path = "micro/fixtures.rs"]
mod fixtures;

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use tollgate::api::{Api, Call};
use tollgate::budget::caps::model_scope_id;
use tollgate::budget::{
    Books, Cap, MemoryStore, Meter, Period, ReserveOutcome, ReserveRequest, Rules, Scope,
    ScopeKind, Settlement, SqliteStore,
};
use tollgate::estimate::{estimate, TokenCounter};
use tollgate::family::{self, body_usage, StreamKind, StreamMeter};
use tollgate::prices::{ModelPrice, PriceTable};
use tollgate::provider::ProviderKind;
use tollgate::sse::SseSplitter;
use tollgate::usage::{EventAction, Usage};

use fixtures::{STREAM_TOKENS, *};

const PRICES: &str = r#"
[models."gpt-4o-mini"]
input_per_mtok = "0.15"
cached_input_per_mtok = "0.075"
output_per_mtok = "0.60"
max_output_tokens = 16384
context_window = 128000

[models."claude-haiku-4-5"]
input_per_mtok = "1.00"
cached_input_per_mtok = "0.10"
cache_write_per_mtok = "1.25"
output_per_mtok = "5.00"
max_output_tokens = 64000
context_window = 200000

[models."anthropic.claude-haiku-4-5-20251001-v1:0"]
input_per_mtok = "1.00"
cached_input_per_mtok = "0.10"
cache_write_per_mtok = "1.25"
output_per_mtok = "5.00"
max_output_tokens = 64000
context_window = 200000

[models."gemini-2.5-flash"]
input_per_mtok = "0.30"
cached_input_per_mtok = "0.03"
output_per_mtok = "2.50"
max_output_tokens = 65536
max_thinking_tokens = 24576
context_window = 1048576
reasoning = true
"#;

fn price(model: &str) -> ModelPrice {
    match PriceTable::from_toml_str(PRICES)
        .ok()
        .and_then(|table| table.get(model).cloned())
    {
        Some(price) => price,
        None => unreachable!("the benchmark's price table lists {model}"),
    }
}

/// What the gateway does with every read of a stream: split it into
/// events, meter each, forward or hold it. Returns the usage found.
fn scan(chunks: &[Bytes], kind: StreamKind) -> Option<Usage> {
    let mut splitter = SseSplitter::new();
    let mut meter = StreamMeter::new(kind);
    let mut forwarded = 0usize;
    for chunk in chunks {
        splitter.push(chunk);
        while let Some(event) = splitter.next_event() {
            match meter.observe(&event) {
                EventAction::Forward | EventAction::Terminal => forwarded += event.len(),
                EventAction::Drop => {}
            }
        }
    }
    black_box(forwarded);
    meter.reported_usage().and_then(Result::ok)
}

fn sse_scanning(c: &mut Criterion) {
    let chat = openai_chat_stream(STREAM_TOKENS);
    let chat_kind = StreamKind::OpenAiChat {
        hide_usage_chunk: true,
    };
    let anthropic = anthropic_stream(STREAM_TOKENS);
    let cases = [
        ("openai_chat/per_event", chat.clone(), chat_kind),
        ("openai_chat/4KiB_reads", reads_of(&chat, 4096), chat_kind),
        ("openai_chat/1B_reads", reads_of(&chat[..64], 1), chat_kind),
        (
            "anthropic/per_event",
            anthropic,
            StreamKind::AnthropicMessages,
        ),
    ];
    let mut group = c.benchmark_group("sse_scan");
    for (name, chunks, kind) in cases {
        // The usage is at the very end: a scan that found it read it all.
        if name.ends_with("per_event") && scan(&chunks, kind).is_none() {
            unreachable!("{name}: the generated stream carries its usage");
        }
        group.throughput(Throughput::Bytes(total_len(&chunks)));
        group.bench_function(name, |b| b.iter(|| scan(black_box(&chunks), kind)));
    }
    group.finish();
}

fn usage_parsing(c: &mut Criterion) {
    let embeddings = embeddings_body();
    let cases = [
        ("chat_completions", Api::ChatCompletions, CHAT_BODY),
        ("completions", Api::Completions, COMPLETIONS_BODY),
        ("responses", Api::Responses, RESPONSES_BODY),
        ("messages", Api::Messages, MESSAGES_BODY),
        ("embeddings_1536d", Api::Embeddings, embeddings.as_str()),
    ];
    let mut group = c.benchmark_group("usage_body");
    for (name, api, body) in cases {
        if body_usage(api, body.as_bytes()).is_none() {
            unreachable!("{name}: the body carries usage");
        }
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| body_usage(api, black_box(body.as_bytes())))
        });
    }
    group.finish();
}

fn parse(bytes: &Bytes) -> Call {
    match tollgate::family::parse_own_route(Api::ChatCompletions, bytes.clone()) {
        Ok(mut call) => {
            call.bound_output(16_384, &[]);
            call
        }
        Err(error) => unreachable!("the benchmark's request is valid: {error}"),
    }
}

fn request_parsing(c: &mut Criterion) {
    let counter = TokenCounter::for_model(ProviderKind::OpenAi, "gpt-4o-mini");
    let mut group = c.benchmark_group("call_parse");
    for tokens in [100u64, 1_000, 10_000] {
        let body = chat_request("gpt-4o-mini", tokens, counter);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("chat", format!("{tokens}_tokens")),
            &body,
            |b, body| b.iter(|| parse(black_box(body))),
        );
    }
    group.finish();
}

fn cost_estimation(c: &mut Criterion) {
    let mut group = c.benchmark_group("estimate");
    let models = [
        ("exact", ProviderKind::OpenAi, "gpt-4o-mini"),
        ("heuristic", ProviderKind::Anthropic, "claude-haiku-4-5"),
    ];
    for (counting, kind, model) in models {
        let counter = TokenCounter::for_model(kind, model);
        let price = price(model);
        for tokens in [1_000u64, 10_000] {
            let body = chat_request(model, tokens, counter);
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_with_input(
                BenchmarkId::new(counting, format!("{tokens}_tokens")),
                &body,
                |b, body| {
                    b.iter(|| {
                        let call = parse(black_box(body));
                        estimate(&call, &price, counter)
                    })
                },
            );
        }
    }
    group.finish();
}

/// One call's whole synchronous path through its family — route, parse,
/// bound, estimate, and the usage of its answer — for a chat completion
/// and a Gemini `generateContent` of the same prompt and answer, both
/// counted by the byte heuristic: what the Gemini family costs the
/// gateway beside OpenAI's, paired in one run.
fn family_paths(c: &mut Criterion) {
    let mut group = c.benchmark_group("family_call");
    let price = price("gemini-2.5-flash");
    let counter = TokenCounter::STRICT;
    for words in [100usize, 2_000] {
        let text = "lorem ipsum dolor sit amet ".repeat(words / 5);
        let answer = "consectetur adipiscing elit ".repeat(words / 10);
        let chat = Bytes::from(
            serde_json::json!({"model": "gemini-2.5-flash",
                "messages": [{"role": "user", "content": text}]})
            .to_string(),
        );
        let chat_answer = serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}})
        .to_string();
        let gemini = Bytes::from(
            serde_json::json!({"contents": [{"role": "user", "parts": [{"text": text}]}]})
                .to_string(),
        );
        let gemini_answer = serde_json::json!({"candidates": [{"content": {"role": "model",
                "parts": [{"text": answer}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 50,
                "totalTokenCount": 150}, "modelVersion": "gemini-2.5-flash"})
        .to_string();
        let paths = [
            ("chat", "/v1/chat/completions", chat, chat_answer),
            (
                "gemini",
                "/v1beta/models/gemini-2.5-flash:generateContent",
                gemini,
                gemini_answer,
            ),
        ];
        for (name, path, body, answer) in paths {
            group.bench_with_input(
                BenchmarkId::new(name, format!("{words}_words")),
                &(body, answer),
                |b, (body, answer)| {
                    b.iter(|| {
                        let Some(route) = family::route(black_box(path), None) else {
                            unreachable!("{path} is a route")
                        };
                        let Ok(mut call) = family::parse(&route, body.clone()) else {
                            unreachable!("the benchmark's request is valid")
                        };
                        family::bound_by_price(&mut call, &price);
                        call.bound_output(65_536, &[]);
                        let bound = estimate(&call, &price, counter);
                        let forwarded = call.forward_body();
                        let usage = body_usage(call.api, black_box(answer.as_bytes()));
                        (bound, forwarded, usage)
                    })
                },
            );
        }
    }
    group.finish();
}

/// The Anthropic and Bedrock providers of the Bedrock benchmark: a key,
/// and SigV4 with a session token.
fn bedrock_providers() -> Vec<tollgate::config::Provider> {
    let text = r#"
[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "https://api.anthropic.com"
api_key_env = "ANTHROPIC_API_KEY"
models = ["claude-*"]

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
        "ANTHROPIC_API_KEY" => Some("sk-ant".to_owned()),
        "AWS_ACCESS_KEY_ID" => Some("AKIDEXAMPLE".to_owned()),
        "AWS_SECRET_ACCESS_KEY" => Some("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned()),
        "AWS_SESSION_TOKEN" => Some("session-token".to_owned()),
        _ => None,
    };
    let path = std::path::Path::new("bench.toml");
    match tollgate::config::Config::from_toml_str_with_env(text, path, &env) {
        Ok(config) => config.providers,
        Err(error) => unreachable!("the benchmark's config loads: {error}"),
    }
}

/// One AWS event-stream frame of `event_type` carrying `payload`.
fn event_frame(event_type: &'static str, payload: &serde_json::Value) -> Bytes {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    let message = Message::new(payload.to_string().into_bytes())
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String(event_type.into()),
        ))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ))
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("event".into()),
        ));
    let mut bytes = Vec::new();
    if aws_smithy_eventstream::frame::write_message_to(&message, &mut bytes).is_err() {
        unreachable!("a small frame is written");
    }
    Bytes::from(bytes)
}

/// A streamed Claude call's whole synchronous path, on Anthropic's API and
/// on Bedrock's `invoke-with-response-stream` for the same prompt and the
/// same events: route, parse, bound, estimate, the provider's request
/// (Bedrock's signed with SigV4) and the meter over the answer (Bedrock's
/// frames checked and their events decoded). Bedrock's cost over
/// Anthropic's is its signing and its framing.
fn bedrock_paths(c: &mut Criterion) {
    use base64::Engine;
    let mut group = c.benchmark_group("bedrock_call");
    let providers = bedrock_providers();
    let counter = TokenCounter::STRICT;
    let text = "lorem ipsum dolor sit amet ".repeat(100);
    let body = |model: Option<&str>| {
        let mut body = serde_json::json!({"max_tokens": 400, "stream": true,
            "messages": [{"role": "user", "content": text}]});
        match model {
            Some(model) => body["model"] = model.into(),
            None => {
                body["anthropic_version"] = "bedrock-2023-05-31".into();
                body.as_object_mut().map(|body| body.remove("stream"));
            }
        }
        Bytes::from(body.to_string())
    };
    let mut events = vec![
        serde_json::json!({"type": "message_start", "message": {"id": "m",
        "type": "message", "role": "assistant", "content": [], "model": "claude-haiku-4-5",
        "usage": {"input_tokens": 500, "output_tokens": 1}}}),
    ];
    for _ in 0..STREAM_TOKENS {
        events.push(
            serde_json::json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": " lorem"}}),
        );
    }
    events.push(serde_json::json!({"type": "message_delta",
        "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": STREAM_TOKENS}}));
    events.push(serde_json::json!({"type": "message_stop"}));
    let sse: Vec<Bytes> = events
        .iter()
        .map(|event| {
            Bytes::from(format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or("")
            ))
        })
        .collect();
    let frames: Vec<Bytes> = events
        .iter()
        .map(|event| {
            let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
            event_frame("chunk", &serde_json::json!({"bytes": bytes}))
        })
        .collect();
    let headers = http::HeaderMap::new();
    let calls = [
        (
            "anthropic",
            "/v1/messages",
            body(Some("claude-haiku-4-5")),
            sse,
            &providers[0],
        ),
        (
            "bedrock",
            "/model/us.anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke-with-response-stream",
            body(None),
            frames,
            &providers[1],
        ),
    ];
    for (name, path, request, answer, provider) in calls {
        let price = match name {
            "bedrock" => price("anthropic.claude-haiku-4-5-20251001-v1:0"),
            _ => price("claude-haiku-4-5"),
        };
        let credential = match (
            &provider.api_key,
            provider.aws.as_ref().and_then(|aws| aws.keys.clone()),
        ) {
            (Some(key), _) => family::Credential::Key(key.clone()),
            (None, Some(keys)) => family::Credential::Aws(keys),
            (None, None) => unreachable!("the benchmark's providers have credentials"),
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                let Some(route) = family::route(black_box(path), None) else {
                    unreachable!("{path} is a route")
                };
                let Ok(mut call) = family::parse(&route, request.clone()) else {
                    unreachable!("the benchmark's request is valid")
                };
                call.bound_output(64_000, &[]);
                let bound = estimate(&call, &price, counter);
                let upstream = family::upstream_request(
                    provider,
                    &credential,
                    &route,
                    call.served_as(),
                    &headers,
                    call.forward_body(),
                );
                let Some(kind) = family::stream_kind(&route, &call) else {
                    unreachable!("the call streams")
                };
                let mut frames = kind.frames();
                let mut meter = StreamMeter::new(kind);
                for chunk in &answer {
                    frames.push(chunk);
                    while let Some(event) = frames.next_event() {
                        black_box(meter.observe(&event));
                    }
                }
                (bound, upstream.is_ok(), meter.reported_usage())
            })
        });
    }
    group.finish();
}

/// One turn of an agent's conversation, resent whole as agents do: parse,
/// estimate and the body to forward (an output limit added), for a turn
/// whose messages were all counted before (`again`, the common case: the
/// counts come from the count cache) and for one whose messages are all
/// new (`first`, every message counted afresh).
fn conversation_turns(c: &mut Criterion) {
    let counter = TokenCounter::for_model(ProviderKind::OpenAi, "gpt-4o-mini");
    let price = price("gpt-4o-mini");
    let message = prose(800, counter);
    let conversation = |tokens: u64, nonce: u64| {
        let messages: Vec<serde_json::Value> = (0..tokens / 800)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                serde_json::json!({"role": role, "content": format!("{nonce} {i} {message}")})
            })
            .collect();
        Bytes::from(serde_json::json!({"model": "gpt-4o-mini", "messages": messages}).to_string())
    };
    let turn = |body: &Bytes| {
        let call = parse(body);
        let bound = estimate(&call, &price, counter);
        (bound, call.forward_body().to_bytes())
    };
    let mut group = c.benchmark_group("conversation_turn");
    group.sample_size(20);
    for tokens in [32_000u64, 128_000] {
        let body = conversation(tokens, 0);
        group.throughput(Throughput::Bytes(body.len() as u64));
        let name = format!("{}k_tokens", tokens / 1000);
        group.bench_with_input(BenchmarkId::new("again", &name), &body, |b, body| {
            turn(body);
            b.iter(|| turn(black_box(body)))
        });
        let mut nonce = 0;
        group.bench_function(BenchmarkId::new("first", &name), |b| {
            b.iter_batched(
                || {
                    nonce += 1;
                    conversation(tokens, nonce)
                },
                |body| turn(&body),
                criterion::BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

/// The gateway's count-only tokenizer beside tiktoken-rs, the reference it
/// matches, on the same texts: a chat message and long prose.
fn token_counting(c: &mut Criterion) {
    let counter = TokenCounter::for_model(ProviderKind::OpenAi, "gpt-4o-mini");
    let (Some(ours), reference) = (
        tollgate::tokenizer::Tokenizer::o200k_base(),
        tiktoken_rs::o200k_base_singleton(),
    ) else {
        unreachable!("the o200k_base tables are built into the binary");
    };
    let mut group = c.benchmark_group("token_count");
    let texts = [
        ("message", SUPPORT_MESSAGE.to_owned()),
        ("1k_tokens", prose(1_000, counter)),
        ("10k_tokens", prose(10_000, counter)),
    ];
    for (name, text) in &texts {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::new("tollgate", name), text, |b, text| {
            b.iter(|| ours.count_afresh(black_box(text)))
        });
        // The same text again, as every turn of a conversation resends it.
        group.bench_with_input(BenchmarkId::new("tollgate-again", name), text, |b, text| {
            b.iter(|| ours.count(black_box(text)))
        });
        group.bench_with_input(BenchmarkId::new("tiktoken-rs", name), text, |b, text| {
            b.iter(|| reference.encode_ordinary(black_box(text)).len())
        });
    }
    group.finish();
}

/// Operations run on one store before a fresh one replaces it, so the
/// ledger stays the size a gateway holds after a few thousand calls.
const OPS_PER_STORE: u64 = 4_096;

fn scope(kind: ScopeKind, id: &str) -> Scope {
    Scope {
        kind,
        id: id.to_owned(),
        cap: 9_000_000_000_000,
        period: Period::Day,
    }
}

/// The reserve and the settle of call `n`, as the gateway sends them.
fn call_of(n: u64, key: &Scope, org: &Scope) -> (ReserveRequest, Settlement) {
    let exec_id = format!("0190b6a2-7c1e-7000-8000-{n:012x}");
    let request = ReserveRequest {
        exec_id: exec_id.clone(),
        key: key.clone(),
        org: Some(org.clone()),
        model: "gpt-4o-mini".to_owned(),
        amount: 12_345,
        min_amount: 12_345,
        run: None,
        caps: Vec::new(),
        tokens: 0,
        customer: None,
        ttl: Duration::from_secs(900),
    };
    let settlement = Settlement {
        exec_id,
        key: key.id.clone(),
        org: Some(org.id.clone()),
        model: "gpt-4o-mini".to_owned(),
        usage: Usage {
            input: 1_000,
            output: 200,
            ..Usage::default()
        },
        actual: 270,
        estimated: false,
    };
    (request, settlement)
}

/// The caps of a key with a model group (money, rpm) and its own rpm and
/// tpm: what a call of such a key is reserved against beside key and org.
fn caps_of(key: &Scope) -> Vec<Cap> {
    let group = model_scope_id(ScopeKind::Key, &key.id, "mini");
    let cap = |kind, id: &str, meter, period, limit| Cap {
        kind,
        id: id.to_owned(),
        meter,
        period,
        limit,
    };
    vec![
        cap(
            ScopeKind::Model,
            &group,
            Meter::Usd,
            Period::Day,
            9_000_000_000_000,
        ),
        cap(
            ScopeKind::Model,
            &group,
            Meter::Requests,
            Period::Minute,
            1 << 40,
        ),
        cap(
            ScopeKind::Key,
            &key.id,
            Meter::Requests,
            Period::Minute,
            1 << 40,
        ),
        cap(
            ScopeKind::Key,
            &key.id,
            Meter::Tokens,
            Period::Minute,
            1 << 50,
        ),
    ]
}

/// Reserve and settle on the memory store, for a key without other caps
/// and, beside it, one with a model group and rate limits (the caps'
/// cost is the difference).
fn reserve_and_settle(c: &mut Criterion) {
    let key = scope(ScopeKind::Key, "alice");
    let org = scope(ScopeKind::Org, "acme");
    let mut group = c.benchmark_group("memory_store");
    group.throughput(Throughput::Elements(1));
    for (name, caps) in [
        ("reserve_settle", Vec::new()),
        ("reserve_settle_with_caps", caps_of(&key)),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                let mut done = 0u64;
                while done < iters {
                    let store = MemoryStore::new(rules());
                    let batch = (iters - done).min(OPS_PER_STORE);
                    let started = Instant::now();
                    for n in done..done + batch {
                        let (mut request, settlement) = call_of(n, &key, &org);
                        request.caps.clone_from(&caps);
                        request.tokens = 1_400;
                        if !store.reserve(&request).is_reserved() {
                            unreachable!("the caps are far above the benchmark's spend");
                        }
                        black_box(store.settle(&settlement).is_ok());
                    }
                    elapsed += started.elapsed();
                    done += batch;
                    drop(store);
                }
                elapsed
            })
        });
    }
    group.finish();
}

/// The rules the benchmark's stores keep: a settle epsilon of 100 µUSD.
fn rules() -> Rules {
    Rules {
        settle_epsilon: 100,
        ..Rules::default()
    }
}

/// A SQLite store on a fresh file in a temp dir, removed when the dir
/// handle drops.
fn sqlite_store() -> (SqliteStore, tempfile::TempDir) {
    let Ok(dir) = tempfile::Builder::new().prefix("tollgate-micro-").tempdir() else {
        unreachable!("a temp dir for the benchmark's store");
    };
    let Ok(store) = SqliteStore::open(&dir.path().join("micro.db"), rules()) else {
        unreachable!("the benchmark's store opens in its own temp dir");
    };
    (store, dir)
}

/// Reserves and settles call `n` on `store`.
async fn sqlite_call(store: &SqliteStore, n: u64, key: &Scope, org: &Scope) {
    let (request, settlement) = call_of(n, key, org);
    if !matches!(
        store.reserve(&request).await,
        Ok(ReserveOutcome::Reserved { .. })
    ) {
        unreachable!("the cap is far above the benchmark's spend");
    }
    black_box(store.settle(&settlement).await.is_ok());
}

/// One call at a time on a SQLite file, as at concurrency 1: the hop to the
/// store's thread and back, the statements and a commit, for the reserve
/// and again for the settle. The file grows over the whole measurement.
fn sqlite_reserve_and_settle(c: &mut Criterion) {
    let key = scope(ScopeKind::Key, "alice");
    let org = scope(ScopeKind::Org, "acme");
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        unreachable!("a runtime for the benchmark");
    };
    let (store, _dir) = sqlite_store();
    let mut next = 0u64;
    let mut group = c.benchmark_group("sqlite_store");
    group.throughput(Throughput::Elements(1));
    group.bench_function("reserve_settle", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    sqlite_call(&store, next, &key, &org).await;
                    next += 1;
                }
                started.elapsed()
            })
        })
    });
    group.finish();
}

/// Calls at once on a SQLite file, as under load: 32 tasks on the
/// gateway's two runtime threads, each reserving and settling one call
/// after another, so the store's thread takes many jobs per transaction
/// (group commit). Reported per reserve + settle.
fn sqlite_reserve_and_settle_at_once(c: &mut Criterion) {
    const TASKS: u64 = 32;
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    else {
        unreachable!("a runtime for the benchmark");
    };
    let (store, _dir) = sqlite_store();
    let mut next = 0u64;
    let mut group = c.benchmark_group("sqlite_store");
    group.throughput(Throughput::Elements(1));
    group.bench_function("reserve_settle_32_at_once", |b| {
        b.iter_custom(|iters| {
            let per_task = iters.div_ceil(TASKS);
            let first = next;
            next += per_task * TASKS;
            runtime.block_on(async {
                let started = Instant::now();
                let tasks: Vec<_> = (0..TASKS)
                    .map(|task| {
                        let store = store.clone();
                        tokio::spawn(async move {
                            let key = scope(ScopeKind::Key, "alice");
                            let org = scope(ScopeKind::Org, "acme");
                            for n in 0..per_task {
                                sqlite_call(&store, first + task * per_task + n, &key, &org).await;
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    if task.await.is_err() {
                        unreachable!("a benchmark task panicked");
                    }
                }
                // Per call actually made, which rounds `iters` up.
                started
                    .elapsed()
                    .mul_f64(iters as f64 / (per_task * TASKS) as f64)
            })
        })
    });
    group.finish();
}

criterion_group! {
    name = micro;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = sse_scanning, usage_parsing, request_parsing, cost_estimation, family_paths, bedrock_paths, token_counting, conversation_turns, reserve_and_settle,
        sqlite_reserve_and_settle, sqlite_reserve_and_settle_at_once
}
criterion_main!(micro);
