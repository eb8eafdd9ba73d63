//! The input bound of a model without a public tokenizer is strict: one
//! token per UTF-8 byte of text, plus framing. A provider that bills one
//! token per byte, the most any byte-level or byte-fallback tokenizer can,
//! never lets a burst at a tight cap pass it; a price entry that chooses a
//! looser `input_bytes_per_token` is overrun by such text, and `/metrics`
//! counts the input part of each overrun.
//!
//! The provider here is this file's own: Anthropic's Messages API billing
//! every byte of the request's text as an input token, and the whole
//! output limit as output.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use tollgate::budget::LedgerStatus;

use crate::common::*;

/// Text denser than any tokenizer's average: emoji, CJK and hex.
fn dense(units: usize) -> String {
    format!(
        "{}{}{}",
        "😀".repeat(units),
        "漢字".repeat(units),
        "9f3a".repeat(units)
    )
}

/// The bytes of every string in `value`.
fn text_bytes(value: &Value) -> u64 {
    match value {
        Value::String(text) => text.len() as u64,
        Value::Array(items) => items.iter().map(text_bytes).sum(),
        Value::Object(map) => map.values().map(text_bytes).sum(),
        _ => 0,
    }
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    let input = text_bytes(&body["messages"]) + text_bytes(&body["system"]);
    let output = body["max_tokens"].as_u64().unwrap();
    let message = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "max_tokens", "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output},
    });
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(message.to_string())))
        .unwrap())
}

async fn spawn_provider() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(answer)),
            );
        }
    });
    addr
}

fn call(text: &str) -> Value {
    messages("claude-haiku-4-5", text, 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_billed_a_token_per_byte_never_passes_a_tight_cap() {
    let provider = spawn_provider().await;
    let text = dense(200);
    // claude-haiku-4-5: $1 a million input tokens, $5 output. Each call
    // costs about its text's bytes in µUSD: a cap of 3.5 calls' worth.
    let one = text.len() as u64 + 50;
    let cap = one * 7 / 2;
    let h = start(Setup {
        alice_cap: Box::leak(format!("0.{cap:06}").into_boxed_str()),
        anthropic_base_url: Some(format!("http://{provider}")),
        ..Setup::default()
    })
    .await;
    let body = call(&text);
    let calls = (0..8).map(|_| h.post("/v1/messages", ALICE, &body));
    let statuses: Vec<u16> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|response| response.status().as_u16())
        .collect();
    h.settled().await;
    let admitted = statuses.iter().filter(|status| **status == 200).count();
    assert!(admitted >= 1, "{statuses:?}");
    assert!(
        statuses.iter().all(|status| [200, 402].contains(status)),
        "{statuses:?}"
    );
    let ledger = h.ledger();
    assert_eq!(ledger.len(), admitted);
    for entry in &ledger {
        assert_eq!(
            entry.status,
            LedgerStatus::Ok,
            "never an overrun: {entry:?}"
        );
        assert!(
            entry.usage.input >= text.len() as u64,
            "billed per byte: {entry:?}"
        );
    }
    let spent = spent(&h, ALICE).await;
    assert!(spent <= cap, "spent {spent} µUSD of a {cap} µUSD cap");
    assert_eq!(metric(&h.url, "tollgate_input_overruns_total").await, 0);
}

#[tokio::test]
async fn a_looser_bound_chosen_in_the_price_entry_is_overrun_and_counted() {
    let provider = spawn_provider().await;
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.toml");
    std::fs::write(
        &prices,
        "[models.\"claude-haiku-4-5\"]\ninput_per_mtok = \"1.00\"\noutput_per_mtok = \"5.00\"\n\
         max_output_tokens = 64000\ncontext_window = 200000\ninput_bytes_per_token = 4\n",
    )
    .unwrap();
    let h = start(Setup {
        anthropic_base_url: Some(format!("http://{provider}")),
        prices_file: Some(prices),
        ..Setup::default()
    })
    .await;
    let text = dense(200);
    let response = h.post("/v1/messages", ALICE, &call(&text)).await;
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();
    h.settled().await;
    let entry = h.ledger().into_iter().next().unwrap();
    assert_eq!(entry.status, LedgerStatus::Overrun, "{entry:?}");
    // Charged what the provider billed, beyond what was reserved.
    assert!(entry.actual > delta(entry.reserved), "{entry:?}");
    assert_eq!(metric(&h.url, "tollgate_input_overruns_total").await, 1);
    let excess = metric(&h.url, "tollgate_input_overrun_tokens_total").await;
    // A quarter of the bytes was reserved: about three quarters overran.
    let bytes = text.len() as u64;
    assert!(excess > bytes / 2 && excess < bytes, "{excess} of {bytes}");
}
