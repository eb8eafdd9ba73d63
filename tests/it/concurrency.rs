//! A burst of concurrent calls never spends past a cap: every call reserves
//! its upper bound atomically, so however the calls interleave, what is
//! spent stays at or below the cap and equals exactly what the provider
//! billed, with no reservation left open.

use futures_util::future::join_all;
use serde_json::json;
use tollgate::usage::Usage;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_slow_streams_never_overspend() {
    let mut setup = Setup {
        // Room for a handful of gpt-4o calls at their upper bound, and
        // a shared org cap below the sum of the two keys' caps.
        alice_cap: "0.150000",
        bob_cap: "0.150000",
        org_cap: "0.200000",
        ..Setup::default()
    };
    setup.mock.tokens_per_sec = Some(200);
    let h = start(setup).await;
    let client = h.client();
    let calls = (0..200).map(|i| {
        let client = client.clone();
        let url = format!("{}/v1/chat/completions", h.url);
        let key = if i % 2 == 0 { ALICE } else { BOB };
        async move {
            let body = json!({
                "model": "gpt-4o",
                "stream": i % 3 != 0,
                "max_tokens": 2000,
                "messages": [{"role": "user", "content": format!("call {i} mock:tokens=20")}],
            });
            let response = client
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let _ = response.bytes().await;
            status
        }
    });
    let statuses = join_all(calls).await;
    let allowed = statuses.iter().filter(|s| **s == 200).count();
    let denied = statuses.iter().filter(|s| **s == 402).count();
    assert_eq!(allowed + denied, 200, "{statuses:?}");
    assert!(
        allowed > 0 && denied > 0,
        "the caps must bite: {allowed} allowed"
    );
    h.settled().await;

    let ledger = h.ledger();
    assert_eq!(ledger.len(), allowed);
    let alice = h.budget(ALICE).await;
    let bob = h.budget(BOB).await;
    let spent = |b: &serde_json::Value| b["key"]["spent_usd_micros"].as_u64().unwrap();
    assert!(spent(&alice) <= 150_000, "{alice}");
    assert!(spent(&bob) <= 150_000, "{bob}");
    let org_spent = alice["org"]["spent_usd_micros"].as_u64().unwrap();
    assert!(org_spent <= 200_000, "{alice}");
    assert_eq!(org_spent, spent(&alice) + spent(&bob));
    assert_eq!(alice["key"]["reserved_usd_micros"], 0);
    assert_eq!(alice["org"]["reserved_usd_micros"], 0);

    // What was charged is exactly what the provider billed, call by call.
    let mut billed = Usage::default();
    for entry in &ledger {
        assert_eq!(entry.actual, delta(cost("gpt-4o", &entry.usage)));
        assert_eq!(entry.usage.output, 20);
        billed.input += entry.usage.input;
        billed.output += entry.usage.output;
    }
    assert_eq!(billed, billed_by(&h.mock.stats));
    assert_eq!(
        ledger.iter().map(|e| e.actual).sum::<i64>(),
        delta(org_spent)
    );
    assert_eq!(h.mock.stats.requests(), allowed as u64);
}
