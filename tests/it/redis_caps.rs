//! Caps beyond the key's own, across two gateway processes on one Redis:
//! bursts split between them never pass a model group's cap, a
//! customer's, an `rpm` or a `tpm` limit, and a denial names its cap.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{Timelike, Utc};
use futures_util::future::join_all;
use serde_json::Value;

use crate::redis_support::servers::{evalsha_of, Monitor};
use crate::redis_support::*;

/// A call the mock streams over 3 s (30 tokens, 100 ms apart), so every
/// reserve of a burst lands while the others still hold.
const HELD: &str = "mock:tokens=30 mock:sleep_ms=100";

/// Waits, if need be, until at least `secs` of the current minute are
/// left: a rate limit's window is the calendar minute.
async fn early_in_a_minute(secs: u32) {
    let second = Utc::now().second();
    if second + secs >= 60 {
        tokio::time::sleep(Duration::from_secs(u64::from(61 - second))).await;
    }
}

/// A chat call through `gateway`, naming `customer` when given (streamed
/// when it is [`HELD`]); its status, body and headers.
async fn call(
    client: &reqwest::Client,
    gateway: &str,
    key: &str,
    customer: Option<&str>,
    text: &str,
) -> (u16, String, reqwest::header::HeaderMap) {
    let mut request = client
        .post(format!("{gateway}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&chat("gpt-4o-mini", text, text == HELD, 50));
    if let Some(customer) = customer {
        request = request.header("x-tollgate-customer", customer);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, response.text().await.unwrap(), headers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_group_and_customers_hold_across_two_gateways() {
    let mock = mock().await;
    let mut key = KeySpec::new("groups", None, "10.00", "day");
    key.extra = r#"model_caps = [{ name = "mini", models = ["gpt-4o-mini*"], cap_usd = "0.000600", period = "day" }]
customer_cap_usd = "0.000250"
customer_period = "day""#
        .to_owned();
    let mut config = GatewayConfig::new(shared_redis_url(), mock.addr);
    config.keys = vec![key];
    let (a, b) = tokio::join!(
        GatewayProcess::start(&config),
        GatewayProcess::start(&config)
    );
    let gateways = [a.url.clone(), b.url.clone()];
    let raw = config.keys[0].raw.clone();
    let key_id = config.keys[0].id.clone();
    let tag = config.keys[0].tag();
    let client = client();
    // A first call marks the tag's books with the store epoch, so the
    // burst's reserves are counted without the marking's second tries.
    let (status, _, headers) = call(&client, &gateways[0], &raw, Some("c1"), "warm-up").await;
    assert_eq!(status, 200);
    let first_cost: u64 = headers["x-tollgate-cost-usd-micros"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let monitor = Monitor::start(shared_redis_port(), &format!("{{{tag}}}"));
    let customers = ["c1", "c2", "c3", "c4"];
    let answers = join_all((0..80).map(|i| {
        let (client, gateway, raw) = (client.clone(), gateways[i % 2].clone(), raw.clone());
        let customer = customers[i % 4];
        async move {
            let answer = call(
                &client,
                &gateway,
                &raw,
                Some(customer),
                &format!("call {i} mock:sleep_ms=5"),
            )
            .await;
            (customer, answer)
        }
    }))
    .await;
    let mut spent_by: HashMap<&str, u64> = HashMap::from([("c1", first_cost)]);
    let (mut group_named, mut customer_named) = (false, false);
    for (customer, (status, text, headers)) in &answers {
        match status {
            200 => {
                let cost: u64 = headers["x-tollgate-cost-usd-micros"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                *spent_by.entry(customer).or_default() += cost;
            }
            402 => {
                group_named |= text.contains("model cap `mini`");
                customer_named |= text.contains(&format!("customer `{customer}` of key"));
            }
            other => panic!("{other}: {text}"),
        }
    }
    // Each customer within its cap, all of them within the group's.
    for (customer, spent) in &spent_by {
        assert!(*spent <= 250, "{customer} spent {spent}");
    }
    let total: u64 = spent_by.values().sum();
    assert!(total <= 600, "the group spent {total}");
    assert!(group_named || customer_named, "no cap bit");
    // The books agree: the key was charged exactly what its calls cost,
    // and both gateways list the same customers.
    let store = store(shared_redis_url()).await;
    let ledger = store.ledger(&tag).await.unwrap();
    // A call with a model group, a customer and its caps is still one
    // reserve and one settle, each one script call on the tag (a store
    // call retried on a timeout shows twice under one exec id).
    let mut by_script: HashMap<String, Vec<String>> = HashMap::new();
    for line in monitor.finish() {
        if let Some((sha, exec_id)) = evalsha_of(&line) {
            by_script
                .entry(sha.to_owned())
                .or_default()
                .push(exec_id.to_owned());
        }
    }
    let distinct = |calls: &[String]| calls.iter().collect::<HashSet<_>>().len();
    let reserves = by_script.remove(&script_sha("reserve")).unwrap_or_default();
    let settles = by_script.remove(&script_sha("settle")).unwrap_or_default();
    assert_eq!(distinct(&reserves), answers.len(), "one reserve per call");
    assert_eq!(
        distinct(&settles),
        ledger.len() - 1,
        "one settle per forwarded call"
    );
    let marks = by_script
        .remove(&script_sha("mark_epoch"))
        .unwrap_or_default();
    let retried = (reserves.len() + settles.len() - distinct(&reserves) - distinct(&settles))
        .saturating_sub(marks.len());
    assert!(
        retried <= answers.len() / 10,
        "{retried} retried store calls"
    );
    by_script.remove(&script_sha("sweep"));
    assert!(by_script.is_empty(), "other scripts ran: {by_script:?}");
    let charged: i64 = ledger.iter().map(|entry| entry.actual).sum();
    assert_eq!(charged, total as i64);
    for entry in &ledger {
        assert!(entry.customer.is_some(), "{entry:?}");
    }
    assert_eq!(
        store
            .open_reservations_in(std::slice::from_ref(&tag))
            .await
            .unwrap(),
        (0, 0)
    );
    let seen: Vec<String> = tollgate::budget::Books::customers(&store, &key_id, None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|seen| seen.id)
        .collect();
    let mut expected: Vec<String> = spent_by.keys().map(|c| c.to_string()).collect();
    expected.sort();
    assert_eq!(seen, expected);
    assert_books_balance(&store, &[tag]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpm_and_tpm_hold_exactly_across_two_gateways() {
    let mock = mock().await;
    let mut rpm_key = KeySpec::new("rpm", None, "10.00", "day");
    rpm_key.extra = "rpm = 9".to_owned();
    let mut tpm_key = KeySpec::new("tpm", None, "10.00", "day");
    tpm_key.extra = "tpm = 1000".to_owned();
    let mut config = GatewayConfig::new(shared_redis_url(), mock.addr);
    config.keys = vec![rpm_key, tpm_key];
    let (a, b) = tokio::join!(
        GatewayProcess::start(&config),
        GatewayProcess::start(&config)
    );
    let gateways = [a.url.clone(), b.url.clone()];
    let (rpm_raw, tpm_raw) = (config.keys[0].raw.clone(), config.keys[1].raw.clone());
    let client = client();
    early_in_a_minute(20).await;

    // One tpm call alone, with the same body as the burst's: what it holds
    // is its bound, what it keeps its usage.
    let (status, _, headers) = call(&client, &gateways[0], &tpm_raw, None, HELD).await;
    assert_eq!(status, 200);
    let remaining = |headers: &reqwest::header::HeaderMap| -> u64 {
        headers["x-ratelimit-remaining-tokens"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let bound = 1000 - remaining(&headers);
    let store = store(shared_redis_url()).await;
    let first = store.ledger(&config.keys[1].tag()).await.unwrap();
    let used = first[0].usage.input + first[0].usage.output;

    // Bursts split across both gateways, each call held open long enough
    // that every reserve of the burst lands while the others hold.
    let burst = |raw: String| {
        join_all((0..40).map(|i| {
            let (client, gateway, raw) = (client.clone(), gateways[i % 2].clone(), raw.clone());
            async move { call(&client, &gateway, &raw, None, HELD).await }
        }))
    };
    let (rpm_answers, tpm_answers) = tokio::join!(burst(rpm_raw), burst(tpm_raw));
    let count = |answers: &[(u16, String, reqwest::header::HeaderMap)], status: u16| {
        answers.iter().filter(|(s, _, _)| *s == status).count()
    };
    assert_eq!(count(&rpm_answers, 200), 9, "exactly rpm calls admitted");
    assert_eq!(count(&rpm_answers, 429), 31);
    let fitting = ((1000 - used) / bound) as usize;
    assert_eq!(
        count(&tpm_answers, 200),
        fitting,
        "bound {bound}, used {used}"
    );
    assert_eq!(count(&tpm_answers, 429), 40 - fitting);
    for (status, text, headers) in rpm_answers.iter().chain(&tpm_answers) {
        if *status == 429 {
            let body: Value = serde_json::from_str(text).unwrap();
            assert_eq!(body["error"]["code"], "rate_limited");
            assert!(headers.contains_key("retry-after"));
        }
    }
    for key in &config.keys {
        let tag = key.tag();
        assert_eq!(
            store
                .open_reservations_in(std::slice::from_ref(&tag))
                .await
                .unwrap(),
            (0, 0)
        );
        assert_books_balance(&store, &[tag]).await;
    }
}
