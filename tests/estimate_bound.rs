//! The reservation is an upper bound: for a spread of requests — long and
//! short words, code, non-Latin scripts, several choices, every route — the
//! amount reserved is never below what the provider then bills.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::json;
use tollgate::budget::LedgerStatus;

fn texts() -> Vec<String> {
    vec![
        "hi".to_owned(),
        "internationalization counterrevolutionaries electroencephalography ".repeat(40),
        "fn main() { println!(\"{}\", (0..10).map(|x| x * x).sum::<u32>()); }\n".repeat(30),
        "日本語のテキストはトークンが多い。".repeat(50),
        "🙂🚀✨ ".repeat(100),
        "a a a a a a a a a a a a a a a a".repeat(20),
        "1234567890".repeat(100),
        // Large enough to be counted off the async runtime.
        "lorem ipsum dolor sit amet ".repeat(4000),
    ]
}

#[tokio::test]
async fn the_reservation_covers_what_the_provider_bills() {
    let h = start(Setup::default()).await;
    let mut sent = 0;
    for text in texts() {
        let prompt = format!("{text} mock:tokens=30");
        let requests = [
            (
                "/v1/chat/completions",
                json!({"model": "gpt-4o-mini", "max_tokens": 30, "messages": [
                {"role": "system", "content": "You are terse."}, {"role": "user", "content": prompt}]}),
            ),
            (
                "/v1/chat/completions",
                json!({"model": "gpt-4o", "n": 3, "max_tokens": 30, "messages": [
                {"role": "user", "content": prompt}]}),
            ),
            (
                "/v1/chat/completions",
                json!({"model": "gpt-4o-mini", "stream": true, "max_tokens": 30, "messages": [
                {"role": "user", "content": prompt}]}),
            ),
            (
                "/v1/responses",
                json!({"model": "gpt-4o-mini", "max_output_tokens": 30, "instructions": "Be terse.", "input": prompt}),
            ),
            (
                "/v1/responses",
                json!({"model": "gpt-4o-mini", "max_output_tokens": 30, "stream": true, "input": [
                {"role": "user", "content": [{"type": "input_text", "text": prompt}]}]}),
            ),
            (
                "/v1/embeddings",
                json!({"model": "text-embedding-3-small", "input": [text.clone(), text.clone()]}),
            ),
            (
                "/v1/messages",
                json!({"model": "claude-haiku-4-5", "max_tokens": 30, "system": "Be terse.", "messages": [
                {"role": "user", "content": prompt}]}),
            ),
            (
                "/v1/messages",
                json!({"model": "claude-sonnet-4-5", "max_tokens": 30, "stream": true, "messages": [
                {"role": "user", "content": [{"type": "text", "text": prompt}]}]}),
            ),
        ];
        for (path, body) in requests {
            let response = h.post(path, ALICE, &body).await;
            assert_eq!(response.status(), 200, "{path} {body}");
            let _ = response.bytes().await.unwrap();
            sent += 1;
        }
    }
    h.settled().await;
    let ledger = h.ledger();
    assert_eq!(ledger.len(), sent);
    for entry in ledger {
        assert_eq!(entry.status, LedgerStatus::Ok, "{entry:?}");
        assert!(
            entry.actual <= delta(entry.reserved),
            "reserved below the bill: {entry:?}"
        );
        assert!(entry.actual > 0);
    }
}
