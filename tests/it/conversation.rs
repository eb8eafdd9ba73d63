//! An agent's conversation, resent whole every turn, is counted once: each
//! long message's token count is remembered, so a turn counts only what
//! is new, and what it reserves is exactly what counting every message
//! afresh reserves.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::metric;
use crate::redis_support::*;

/// The i-th long message: varied words, a few hundred bytes.
fn message(i: usize) -> String {
    let words = [
        "budget", "agent", "tokens", "stream", "settle", "reserve", "cap", "provider", "gateway",
        "call", "the", "of", "0x9f3a", "über", "{\"id\":", "retry",
    ];
    (0..80)
        .map(|n| words[(i * 5 + n * 3 + n / 7) % words.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// The user's message of turn `turn`, resent as it was in every later
/// turn; the mock answers it with 5 tokens.
fn question(turn: usize) -> String {
    format!("{} mock:tokens=5", message(2 * turn))
}

/// Turn `turn` (from 1): every earlier user message and reply, then the
/// new user message.
fn turn_body(turn: usize) -> Value {
    let mut messages = Vec::new();
    for t in 1..turn {
        messages.push(json!({"role": "user", "content": question(t)}));
        messages.push(json!({"role": "assistant", "content": message(2 * t + 1)}));
    }
    messages.push(json!({"role": "user", "content": question(turn)}));
    json!({"model": "gpt-4o-mini", "max_tokens": 50, "messages": messages})
}

/// What each call reserved, in the order they were booked.
async fn reserved(path: &std::path::Path, calls: usize) -> Vec<i64> {
    let read = || {
        let conn =
            rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .ok()?;
        let mut statement = conn
            .prepare("SELECT reserved_usd_micros FROM ledger ORDER BY rowid")
            .ok()?;
        let rows = statement
            .query_map([], |row| row.get(0))
            .ok()?
            .collect::<Result<Vec<i64>, _>>()
            .ok()?;
        (rows.len() == calls).then_some(rows)
    };
    for _ in 0..200 {
        if let Some(rows) = read() {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never booked {calls} calls", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_resent_every_turn_is_counted_once_and_reserved_the_same() {
    const TURNS: usize = 4;
    let provider = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let key = KeySpec::new("ana", None, "5.00", "day");
    let gateway = |file: &str, cache: &str| {
        let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
        config.sqlite_path = Some(dir.path().join(file));
        config.keys.push(key.clone());
        config.server_extra = cache.to_owned();
        config
    };
    let remembering = GatewayProcess::start(&gateway("remembering.db", "")).await;
    let counting = GatewayProcess::start(&gateway("counting.db", "token_count_cache_mb = 0")).await;

    let client = client();
    for turn in 1..=TURNS {
        let body = turn_body(turn);
        for gateway in [&remembering, &counting] {
            let response = post_chat(&client, &gateway.url, &key.raw, &body).await;
            assert_eq!(response.status(), 200, "turn {turn}");
            response.bytes().await.unwrap();
        }
    }

    // Each message is counted the first time it comes: turn 1 has one
    // new message, every later turn two (the reply and the new question);
    // turn t finds the 2t - 3 before them remembered.
    let misses = 1 + 2 * (TURNS as u64 - 1);
    let hits: u64 = (2..=TURNS as u64).map(|t| 2 * t - 3).sum();
    let series = |name: &str| format!("tollgate_token_count_cache_{name}_total");
    assert_eq!(metric(&remembering.url, &series("misses")).await, misses);
    assert_eq!(metric(&remembering.url, &series("hits")).await, hits);
    assert_eq!(metric(&counting.url, &series("misses")).await, 0);
    assert_eq!(metric(&counting.url, &series("hits")).await, 0);

    // And what each turn reserved is what counting it afresh reserved.
    let remembered = reserved(&dir.path().join("remembering.db"), TURNS).await;
    let counted = reserved(&dir.path().join("counting.db"), TURNS).await;
    assert_eq!(remembered, counted);
    assert!(
        remembered.windows(2).all(|pair| pair[1] > pair[0]),
        "each turn is longer: {remembered:?}"
    );
}
