//! An agent run shared by two gateway processes on one Redis: a concurrent
//! burst of calls in one run, split across both, never spends past the
//! run's cap, while the key that holds the run keeps its own room; a call
//! without an output limit is then fitted to what remains of the run.

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::redis_support::*;

const CALLS: usize = 120;
/// 20,000 µUSD: room for a few dozen calls of about 500 µUSD.
const RUN_CAP_USD: &str = "0.020";
const RUN_CAP_MICROS: u64 = 20_000;

async fn run_call(client: &reqwest::Client, gateway: &str, key: &str, i: usize) -> (u16, String) {
    let body = json!({
        "model": "gpt-4o-mini",
        "max_tokens": 400,
        "messages": [{"role": "user", "content": format!("call {i} mock:tokens=300 mock:sleep_ms=1")}],
    });
    let response = client
        .post(format!("{gateway}/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-tollgate-run", "burst")
        .header("x-tollgate-run-cap-usd", RUN_CAP_USD)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

async fn run_budget(gateway: &str, key: &str) -> Value {
    client()
        .get(format!("{gateway}/v1/budget"))
        .bearer_auth(key)
        .header("x-tollgate-run", "burst")
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_in_one_run_on_two_gateways_never_passes_the_run_cap() {
    let mock = mock().await;
    let key = KeySpec::new("agent", None, "10.00", "day");
    let tag = key.tag();
    let mut config = GatewayConfig::new(shared_redis_url(), mock.addr);
    config.keys = vec![key];
    let (a, b) = tokio::join!(
        GatewayProcess::start(&config),
        GatewayProcess::start(&config)
    );
    let gateways = [a.url.clone(), b.url.clone()];
    let raw = config.keys[0].raw.clone();

    let client = client();
    let answers = join_all((0..CALLS).map(|i| {
        let client = client.clone();
        let gateway = gateways[i % 2].clone();
        let raw = raw.clone();
        async move { run_call(&client, &gateway, &raw, i).await }
    }))
    .await;
    let forwarded = answers.iter().filter(|(status, _)| *status == 200).count();
    let refused: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status != 200)
        .collect();
    assert!(
        refused
            .iter()
            .all(|(status, text)| *status == 402 && text.contains("run `burst` of key")),
        "{refused:?}"
    );
    assert!(
        forwarded > 0 && !refused.is_empty(),
        "{forwarded} forwarded"
    );

    // Both gateways see the same run, within its cap, nothing held.
    let (run_a, run_b) = (
        run_budget(&a.url, &raw).await,
        run_budget(&b.url, &raw).await,
    );
    assert_eq!(run_a["run"], run_b["run"]);
    let run = &run_a["run"];
    let spent = run["spent_usd_micros"].as_u64().unwrap();
    assert!(spent <= RUN_CAP_MICROS, "{run}");
    assert_eq!(run["reserved_usd_micros"], 0);
    assert_eq!(run["cap_usd_micros"], RUN_CAP_MICROS);
    // The key was charged exactly the run's calls, and has room left.
    assert_eq!(run_a["key"]["spent_usd_micros"].as_u64().unwrap(), spent);

    // Every forwarded call is in the ledger once, naming the run, and the
    // key's books balance.
    let store = store(shared_redis_url()).await;
    let ledger = store.ledger(&tag).await.unwrap();
    assert_eq!(ledger.len(), forwarded);
    assert!(ledger.iter().all(|e| e.run.as_deref() == Some("burst")));
    // The refusals came from the run's cap: the calls let through had
    // reserved it nearly whole (within one call's bound).
    let reserved: u64 = ledger.iter().map(|e| e.reserved).sum();
    let bound = ledger.iter().map(|e| e.reserved).max().unwrap();
    assert!(
        reserved + bound > RUN_CAP_MICROS,
        "{reserved} µUSD reserved by {forwarded} calls"
    );
    assert_eq!(ledger.iter().map(|e| e.actual).sum::<i64>(), delta(spent));
    assert_eq!(mock.stats.requests(), forwarded as u64);
    assert_books_balance(&store, &[tag]).await;

    // Left to the gateway, the output limit of the next call is what the
    // rest of the run pays for, far below the model's 16,384.
    let remaining = run["remaining_usd_micros"].as_u64().unwrap();
    let response = client
        .post(format!("{}/v1/chat/completions", a.url))
        .bearer_auth(&raw)
        .header("x-tollgate-run", "burst")
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi mock:tokens=5"}]}))
        .send()
        .await
        .unwrap();
    if remaining >= 300 {
        assert_eq!(response.status(), 200);
        let limit = mock.stats.last_request().unwrap().body["max_completion_tokens"]
            .as_u64()
            .unwrap();
        assert!(limit < remaining, "{limit} tokens for {remaining} µUSD");
    } else {
        assert_eq!(response.status(), 402);
    }
}
