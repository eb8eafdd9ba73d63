//! The reservation is an upper bound: for a spread of requests — long and
//! short words, code, non-Latin scripts, several choices, every route — the
//! amount reserved is never below what the provider then bills.

use serde_json::json;
use tollgate::budget::LedgerStatus;

use crate::common::*;

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

/// A PNG's signature and header chunk for a `width` x `height` image, as
/// standard base64: all the gateway reads of an image.
fn png_base64(width: u32, height: u32) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bytes = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    bytes.extend(width.to_be_bytes());
    bytes.extend(height.to_be_bytes());
    bytes.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let bits = chunk
            .iter()
            .enumerate()
            .fold(0u32, |bits, (i, &b)| bits | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            let sextet = (bits >> (18 - 6 * i)) as usize & 63;
            text.push(if i <= chunk.len() {
                char::from(ALPHABET[sextet])
            } else {
                '='
            });
        }
    }
    text
}

#[tokio::test]
async fn images_are_reserved_by_their_models_rule() {
    let h = start(Setup::default()).await;
    let data_url = |width, height| format!("data:image/png;base64,{}", png_base64(width, height));
    let prompt = "Describe the picture. mock:tokens=5";
    // (path, body, image tokens the model's rule bounds the image by)
    let requests = [
        // gpt-4o-mini, high detail, 2048x768 after scaling: 2,833 + 8 x 5,667.
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4o-mini", "max_tokens": 30, "messages": [{"role": "user", "content": [
                {"type": "text", "text": prompt},
                {"type": "image_url", "image_url": {"url": data_url(4096, 1536), "detail": "high"}}]}]}),
            48_169,
        ),
        // gpt-4.1-mini: 1,024 patches x 1.62.
        (
            "/v1/responses",
            json!({"model": "gpt-4.1-mini", "max_output_tokens": 30, "input": [{"role": "user", "content": [
                {"type": "input_text", "text": prompt},
                {"type": "input_image", "image_url": data_url(1024, 1024), "detail": "auto"}]}]}),
            1_659,
        ),
        // claude-haiku-4-5: 1000x1000 / 750.
        (
            "/v1/messages",
            json!({"model": "claude-haiku-4-5", "max_tokens": 30, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png_base64(1000, 1000)}},
                {"type": "text", "text": prompt}]}]}),
            1_334,
        ),
    ];
    for (path, body, _) in &requests {
        let response = h.post(path, ALICE, body).await;
        assert_eq!(response.status(), 200, "{path} {body}");
        let _ = response.bytes().await.unwrap();
    }
    h.settled().await;
    let ledger = h.ledger();
    assert_eq!(ledger.len(), requests.len());
    for (_, body, image_tokens) in requests {
        let model = body["model"].as_str().unwrap();
        let entry = ledger.iter().find(|entry| entry.model == model).unwrap();
        assert_eq!(entry.status, LedgerStatus::Ok, "{entry:?}");
        assert!(
            entry.actual <= delta(entry.reserved),
            "reserved below the bill: {entry:?}"
        );
        let image = tollgate::usage::Usage {
            input: image_tokens,
            ..Default::default()
        };
        assert!(
            entry.reserved >= cost(model, &image),
            "the image is not in the reservation: {entry:?}"
        );
    }
}
