//! Every way a proxied call can end before its usage arrives — a provider
//! error, a cut stream, a client gone, a shutdown, an unreachable or slow
//! provider — through the real server to the mock provider: each call is
//! settled exactly once, for what the provider can have billed.

use futures_util::StreamExt;
use serde_json::{json, Value};
use tollgate::budget::LedgerStatus;
use tollgate::usage::{ServiceTier, Usage};

use crate::common::*;

#[tokio::test]
async fn upstream_errors_pass_through_and_cost_nothing() {
    let h = start(Setup::default()).await;
    let response = h
        .post(
            "/v1/chat/completions",
            ALICE,
            &chat("gpt-4o-mini", "mock:status=429"),
        )
        .await;
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].is_string());
    let entry = only_entry(&h);
    assert_eq!(entry.actual, 0);
    assert_eq!(spent(&h, ALICE).await, 0);
    assert_eq!(h.budget(ALICE).await["key"]["reserved_usd_micros"], 0);

    let response = h
        .post(
            "/v1/messages",
            ALICE,
            &messages("claude-haiku-4-5", "mock:status=529", 10),
        )
        .await;
    assert_eq!(response.status(), 529);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(spent(&h, ALICE).await, 0);
}

#[tokio::test]
async fn a_cut_stream_is_settled_once_as_estimated() {
    let h = start(Setup::default()).await;
    let mut body = chat("gpt-4o-mini", "mock:tokens=50 mock:cut=4 mock:sleep_ms=20");
    body["stream"] = json!(true);
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut failed = false;
    while let Some(chunk) = stream.next().await {
        if chunk.is_err() {
            failed = true;
        }
    }
    assert!(
        failed,
        "the client must see the stream fail, not end cleanly"
    );
    h.settled().await;
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Estimated);
    assert!(entry.usage.input > 0);
    assert!(entry.usage.output >= 1, "{entry:?}");
    assert_eq!(delta(spent(&h, ALICE).await), entry.actual);
}

/// Opens a stream, reads three events of it, and leaves.
async fn leave_after_three_events(h: &Harness, path: &str, body: &Value) {
    let response = h.post(path, ALICE, body).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    for _ in 0..3 {
        stream.next().await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn client_gone_mid_stream_is_charged_at_least_what_the_provider_billed() {
    let mut setup = Setup::default();
    setup.mock.tokens_per_sec = Some(20);
    let h = start(setup).await;
    // Models whose output is all streamed: the gateway reads what the
    // provider already sent, closes the stream, and adds a margin for what
    // was generated in flight.
    for (path, body) in [
        ("/v1/chat/completions", {
            let mut b = chat("gpt-4o-mini", "mock:tokens=200");
            b["stream"] = json!(true);
            b
        }),
        ("/v1/messages", {
            let mut b = messages("claude-3-5-haiku-latest", "mock:tokens=200", 300);
            b["stream"] = json!(true);
            b
        }),
    ] {
        let before = h.ledger().len();
        let billed_before = cost(body["model"].as_str().unwrap(), &billed_by(&h.mock.stats));
        leave_after_three_events(&h, path, &body).await;
        h.settled().await;
        let ledger = h.ledger();
        assert_eq!(ledger.len(), before + 1, "{ledger:?}");
        let entry = ledger.last().unwrap();
        assert_eq!(entry.status, LedgerStatus::Estimated, "{path}");
        assert!(entry.usage.input + entry.usage.cached_input > 0);
        assert!(entry.usage.output < 200, "{entry:?}");
        assert_eq!(entry.actual, delta(cost(&entry.model, &entry.usage)));
        // Give the provider time to notice and bill what it generated.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let billed = cost(&entry.model, &billed_by(&h.mock.stats)) - billed_before;
        assert!(
            entry.actual >= delta(billed),
            "{path}: charged {} < billed {billed}",
            entry.actual
        );
    }
    let total: i64 = h.ledger().iter().map(|e| e.actual).sum();
    assert_eq!(delta(spent(&h, ALICE).await), total);
}

#[tokio::test]
async fn a_stream_with_hidden_output_is_read_to_its_end_when_its_client_leaves() {
    let mut setup = Setup::default();
    setup.mock.tokens_per_sec = Some(100);
    let h = start(setup).await;
    // Reasoning models bill output they never stream: what the client saw
    // says nothing of the cost, so the gateway reads on, unrelayed, and
    // settles the usage the provider reports.
    for (path, body) in [
        ("/v1/chat/completions", {
            let mut b = chat("gpt-5-mini", "mock:tokens=60 mock:hidden=900");
            b["stream"] = json!(true);
            b["max_completion_tokens"] = json!(4000);
            b
        }),
        ("/v1/messages", {
            let mut b = messages("claude-haiku-4-5", "mock:tokens=60 mock:hidden=900", 4000);
            b["stream"] = json!(true);
            b
        }),
    ] {
        let before = h.ledger().len();
        leave_after_three_events(&h, path, &body).await;
        h.settled().await;
        let ledger = h.ledger();
        assert_eq!(ledger.len(), before + 1, "{ledger:?}");
        let entry = ledger.last().unwrap();
        assert_eq!(entry.status, LedgerStatus::Ok, "{path}: {entry:?}");
        assert_eq!(entry.usage.output, 960, "{path}: {entry:?}");
        assert_eq!(entry.actual, delta(cost(&entry.model, &entry.usage)));
    }
    // Everything the provider billed was charged.
    let billed: u64 = h.ledger().iter().map(|e| e.usage.output).sum();
    assert_eq!(billed, h.mock.stats.billed().output);
    let total: i64 = h.ledger().iter().map(|e| e.actual).sum();
    assert_eq!(delta(spent(&h, ALICE).await), total);
}

#[tokio::test]
async fn shutdown_waits_for_in_flight_streams_to_settle() {
    let mut setup = Setup::default();
    setup.mock.tokens_per_sec = Some(50);
    let mut h = start(setup).await;
    let mut body = chat("gpt-4o-mini", "mock:tokens=10");
    body["stream"] = json!(true);
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    let reader = tokio::spawn(async move { response.text().await.unwrap() });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    h.shutdown().await;
    let text = reader.await.unwrap();
    assert!(text.contains("[DONE]"));
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.usage.output, 10);
}

#[tokio::test]
async fn client_gone_before_the_response_is_settled_once() {
    let mut setup = Setup::default();
    setup.mock.latency = std::time::Duration::from_millis(1500);
    let h = start(setup).await;
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(200))
        .build()
        .unwrap();
    let result = client
        .post(format!("{}/v1/chat/completions", h.url))
        .bearer_auth(ALICE)
        .json(&chat("gpt-4o-mini", "hello there"))
        .send()
        .await;
    assert!(result.is_err(), "the client was meant to give up");
    h.settled().await;
    // The provider finishes a plain call whose client left: the gateway
    // reads it to its end and charges the usage it reports.
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Ok);
    assert_eq!(entry.usage, billed_by(&h.mock.stats));
    assert_eq!(delta(spent(&h, ALICE).await), entry.actual);
}

#[tokio::test]
async fn shutdown_cuts_streams_past_the_grace_and_settles_them_before_returning() {
    let mut setup = Setup {
        shutdown_grace: std::time::Duration::from_millis(300),
        ..Setup::default()
    };
    setup.mock.tokens_per_sec = Some(20);
    let mut h = start(setup).await;
    let mut body = chat("gpt-4o-mini", "mock:tokens=400");
    body["stream"] = json!(true);
    let response = h.post("/v1/chat/completions", ALICE, &body).await;
    let reader = tokio::spawn(async move {
        let mut stream = response.bytes_stream();
        let mut failed = false;
        while let Some(chunk) = stream.next().await {
            failed |= chunk.is_err();
        }
        failed
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    h.shutdown().await;
    // Settled by the time the server has stopped, not some time later.
    assert_eq!(h.store.open_reservations(), (0, 0));
    let entry = only_entry(&h);
    assert_eq!(entry.status, LedgerStatus::Estimated);
    assert!(
        entry.usage.output > 0 && entry.usage.output < 400,
        "{entry:?}"
    );
    assert!(
        reader.await.unwrap(),
        "the cut must reach the client as an error"
    );
}

#[tokio::test]
async fn unreachable_provider_is_502_and_costs_nothing() {
    // A port nothing listens on: bind one, then let it go.
    let (_socket, closed) = refusing_port();
    let h = start(Setup {
        openai_base_url: Some(format!("http://{closed}")),
        ..Setup::default()
    })
    .await;
    let response = h
        .post("/v1/chat/completions", ALICE, &chat("gpt-4o-mini", "hi"))
        .await;
    assert_eq!(response.status(), 502);
    // Never connected: nothing can have been billed, nothing is charged.
    assert!(response
        .headers()
        .get("x-tollgate-cost-usd-micros")
        .is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstream_unreachable");
    let entry = only_entry(&h);
    assert_eq!(entry.actual, 0);
    assert_eq!(spent(&h, ALICE).await, 0);
    assert_eq!(h.store.open_reservations(), (0, 0));
}

#[tokio::test]
async fn provider_timeout_is_504_and_charges_the_bound_once() {
    let mut setup = Setup {
        upstream_timeout_secs: 1,
        ..Setup::default()
    };
    setup.mock.latency = std::time::Duration::from_millis(2500);
    let h = start(setup).await;
    let response = h
        .post("/v1/chat/completions", ALICE, &chat("gpt-4o-mini", "hi"))
        .await;
    assert_eq!(response.status(), 504);
    let told: u64 = response.headers()["x-tollgate-cost-usd-micros"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstream_timeout");
    // The provider had the call and may bill it: the whole bound, once,
    // and the 504 says so.
    // No answer said which tier served it, and the request left that to
    // the project's default: the bound is at priority rates.
    h.settled().await;
    let ledger = h.ledger();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    let entry = &ledger[0];
    assert_eq!(entry.status, LedgerStatus::Estimated);
    assert_eq!(entry.actual, delta(entry.reserved));
    assert_eq!(delta(told), entry.actual);
    let at_priority = Usage {
        service_tier: Some(ServiceTier::Priority),
        ..entry.usage
    };
    assert_eq!(entry.actual, delta(cost("gpt-4o-mini", &at_priority)));
    assert!(entry.actual > delta(cost("gpt-4o-mini", &entry.usage)));
    assert_eq!(delta(spent(&h, ALICE).await), entry.actual);
    assert_eq!(h.store.open_reservations(), (0, 0));
}
