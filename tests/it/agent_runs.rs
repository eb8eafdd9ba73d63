//! Agent-native budgets through the real server: a run named by
//! `x-tollgate-run` is capped inside its key (402 naming the run, 409 on
//! another cap, `GET /v1/budget` showing it, ledger entries carrying it);
//! a call without an output limit is fitted to what remains; a key with
//! `on_insufficient = "clamp"` gets its own limit lowered and is told so,
//! and a refusing key's 402 says what would fit.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::*;

const ADMIN: &str = "tg-admin-secret";
const RUN: &str = "x-tollgate-run";
const RUN_CAP: &str = "x-tollgate-run-cap-usd";
const CLAMPED: &str = "x-tollgate-output-limit-clamped";

/// A chat call in `run` (with `cap`, if any) under `key`.
async fn in_run(
    h: &Harness,
    key: &str,
    run: &str,
    cap: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut request = h
        .client()
        .post(format!("{}/v1/chat/completions", h.url))
        .bearer_auth(key)
        .header(RUN, run)
        .json(body);
    if let Some(cap) = cap {
        request = request.header(RUN_CAP, cap);
    }
    request.send().await.unwrap()
}

fn limited(text: &str, max_tokens: u64) -> Value {
    let mut body = chat("gpt-4o-mini", text);
    body["max_tokens"] = json!(max_tokens);
    body
}

async fn error_of(response: reqwest::Response) -> Value {
    response.json::<Value>().await.unwrap()["error"].clone()
}

/// What the mock was last asked to produce at most, per choice.
fn forwarded_limit(h: &Harness) -> u64 {
    let body = h.mock.stats.last_request().unwrap().body;
    body["max_completion_tokens"]
        .as_u64()
        .or_else(|| body["max_tokens"].as_u64())
        .unwrap_or_else(|| panic!("no output limit forwarded: {body}"))
}

#[tokio::test]
async fn a_run_stops_at_its_own_cap_and_the_key_goes_on() {
    let h = start(Setup::default()).await;
    // Each call: about 20 input and 200 output tokens, bound 16 µUSD +
    // 200 × 1 µUSD (gpt-4o-mini's priority output rate, since no tier is
    // named) = about 220 µUSD. The run may spend 1,000 µUSD.
    let body = limited("Write a line mock:tokens=200", 200);
    let mut calls = 0;
    let refusal = loop {
        let response = in_run(&h, ALICE, "loop-1", Some("0.001"), &body).await;
        if response.status() != StatusCode::OK {
            break response;
        }
        response.bytes().await.unwrap();
        calls += 1;
        assert!(calls < 10, "the run was never stopped");
    };
    assert_eq!(refusal.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(refusal.headers()["x-should-retry"], "false");
    assert!(refusal.headers().get("retry-after").is_none());
    let error = error_of(refusal).await;
    assert_eq!(error["code"], "budget_exceeded");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("run `loop-1` of key `alice`") && message.contains("$0.001000"),
        "{message}"
    );
    assert!(calls >= 3, "{calls} calls");

    // The run's charges sum to at most its cap, and each entry names it.
    h.settled().await;
    let ledger = h.ledger();
    assert_eq!(ledger.len(), calls);
    assert!(ledger.iter().all(|e| e.run.as_deref() == Some("loop-1")));
    let charged: i64 = ledger.iter().map(|e| e.actual).sum();
    assert!(charged <= 1_000, "{charged}");

    // The budget shows the run beside the key.
    let budget: Value = h
        .client()
        .get(format!("{}/v1/budget", h.url))
        .bearer_auth(ALICE)
        .header(RUN, "loop-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = &budget["run"];
    assert_eq!(run["id"], "loop-1");
    assert_eq!(run["period"], "total");
    assert_eq!(run["cap_usd_micros"], 1_000);
    assert_eq!(run["spent_usd_micros"], charged);
    assert_eq!(run["remaining_usd_micros"], 1_000 - charged);
    assert_eq!(run["resets_at"], Value::Null);
    assert_eq!(budget["key"]["spent_usd_micros"], charged);

    // Another run on the same key, and calls outside any run, go on.
    let other = in_run(&h, ALICE, "loop-2", Some("0.001"), &body).await;
    assert_eq!(other.status(), StatusCode::OK);
    let plain = h.post("/v1/chat/completions", ALICE, &body).await;
    assert_eq!(plain.status(), StatusCode::OK);
    // Nothing of the headers reached the provider.
    let seen = h.mock.stats.last_request().unwrap();
    assert!(seen.headers.get(RUN).is_none() && seen.headers.get(RUN_CAP).is_none());
}

#[tokio::test]
async fn another_cap_for_a_running_run_is_a_conflict_that_costs_nothing() {
    let h = start(Setup::default()).await;
    let body = limited("hi mock:tokens=5", 20);
    let first = in_run(&h, ALICE, "run-a", Some("2.00"), &body).await;
    assert_eq!(first.status(), StatusCode::OK);
    first.bytes().await.unwrap();
    let sent = h.mock.stats.requests();

    let conflict = in_run(&h, ALICE, "run-a", Some("5.00"), &body).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    let error = error_of(conflict).await;
    assert_eq!(error["code"], "run_cap_conflict");
    assert!(
        error["message"].as_str().unwrap().contains("$2.000000"),
        "{error}"
    );
    assert_eq!(h.mock.stats.requests(), sent, "nothing forwarded");

    // The same cap, or none, is the run's own.
    for cap in [Some("2.00"), Some("2"), None] {
        let again = in_run(&h, ALICE, "run-a", cap, &body).await;
        assert_eq!(again.status(), StatusCode::OK, "{cap:?}");
        again.bytes().await.unwrap();
    }
    h.settled().await;
    assert_eq!(h.ledger().len(), 4);
}

#[tokio::test]
async fn bad_run_headers_are_refused_and_cost_nothing() {
    let h = start(Setup::default()).await;
    let body = limited("hi", 20);
    for (run, cap, why) in [
        (Some("has space"), None, "x-tollgate-run"),
        (Some(""), None, "x-tollgate-run"),
        (Some(&*"r".repeat(129)), None, "x-tollgate-run"),
        (Some("ok"), Some("2.0.0"), "x-tollgate-run-cap-usd"),
        (Some("ok"), Some("-1"), "x-tollgate-run-cap-usd"),
        (None, Some("2.00"), "x-tollgate-run-cap-usd"),
    ] {
        let mut request = h
            .client()
            .post(format!("{}/v1/chat/completions", h.url))
            .bearer_auth(ALICE)
            .json(&body);
        if let Some(run) = run {
            request = request.header(RUN, run);
        }
        if let Some(cap) = cap {
            request = request.header(RUN_CAP, cap);
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "{run:?} {cap:?}"
        );
        let error = error_of(response).await;
        assert!(
            error["message"].as_str().unwrap().contains(why),
            "{run:?} {cap:?}: {error}"
        );
    }
    assert_eq!(h.mock.stats.requests(), 0);
    assert!(h.ledger().is_empty());
}

#[tokio::test]
async fn a_call_without_an_output_limit_is_fitted_to_what_remains() {
    // 10,000 µUSD: less than gpt-4o-mini's whole bound (16,384 output
    // tokens at 1 µUSD each, plus input).
    let h = start(Setup {
        alice_cap: "0.010",
        ..Setup::default()
    })
    .await;
    let response = h
        .post(
            "/v1/chat/completions",
            ALICE,
            &chat("gpt-4o-mini", "Say hi mock:tokens=50"),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    // The gateway set the limit itself: nothing to tell the client.
    assert!(response.headers().get(CLAMPED).is_none());
    response.bytes().await.unwrap();
    let limit = forwarded_limit(&h);
    assert!((9_000..10_000).contains(&limit), "forwarded {limit}");
    h.settled().await;
    let entry = only_entry(&h);
    assert!(entry.reserved <= 10_000, "{entry:?}");

    // What remains then fits less; once not even 256 tokens fit, 402.
    let mut fitted = vec![limit];
    let refusal = loop {
        let response = h
            .post(
                "/v1/chat/completions",
                ALICE,
                &chat("gpt-4o-mini", "Write mock:tokens=3000"),
            )
            .await;
        if response.status() != StatusCode::OK {
            break response;
        }
        response.bytes().await.unwrap();
        fitted.push(forwarded_limit(&h));
        assert!(fitted.len() < 20);
    };
    assert!(fitted.windows(2).all(|w| w[1] < w[0]), "{fitted:?}");
    assert!(fitted.iter().all(|limit| *limit >= 256), "{fitted:?}");
    assert_eq!(refusal.status(), StatusCode::PAYMENT_REQUIRED);
    let message = error_of(refusal).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("upper-bound cost of $"), "{message}");
    h.settled().await;
    assert!(spent(&h, ALICE).await <= 10_000);
}

#[tokio::test]
async fn a_clamping_key_gets_its_limit_lowered_and_a_refusing_key_is_told_what_fits() {
    let h = start(Setup::with_admin_key(ADMIN)).await;
    let mut secrets = Vec::new();
    for (id, on_insufficient) in [("clamps", "clamp"), ("refuses", "refuse")] {
        let made: Value = h
            .client()
            .post(format!("{}/admin/v1/keys", h.url))
            .bearer_auth(ADMIN)
            .json(&json!({"id": id, "cap_usd": "0.005", "period": "day",
                          "on_insufficient": on_insufficient}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(made["key"]["on_insufficient"], on_insufficient, "{made}");
        secrets.push(made["secret"].as_str().unwrap().to_owned());
    }
    let body = limited("Write at length mock:tokens=8000", 8_000);

    let clamped = h.post("/v1/chat/completions", &secrets[0], &body).await;
    assert_eq!(clamped.status(), StatusCode::OK);
    let header: u64 = clamped.headers()[CLAMPED]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    clamped.bytes().await.unwrap();
    assert_eq!(forwarded_limit(&h), header);
    assert!((4_000..5_000).contains(&header), "clamped to {header}");

    let sent = h.mock.stats.requests();
    let refused = h.post("/v1/chat/completions", &secrets[1], &body).await;
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    let message = error_of(refused).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(h.mock.stats.requests(), sent, "nothing forwarded");
    let fits: u64 = message
        .split("of ")
        .filter_map(|part| part.split(" tokens or fewer").next()?.parse().ok())
        .next()
        .unwrap_or_else(|| panic!("no fitting limit in: {message}"));
    assert_eq!(fits, header, "{message}");
    assert!(message.contains("$0.005000 remaining"), "{message}");

    // Sent with that limit, the refusing key's call goes through.
    let fitted = h
        .post("/v1/chat/completions", &secrets[1], &limited("hi", fits))
        .await;
    assert_eq!(fitted.status(), StatusCode::OK);
    assert!(fitted.headers().get(CLAMPED).is_none());
}

#[tokio::test]
async fn the_spend_report_groups_by_run() {
    let h = start(Setup::with_admin_key(ADMIN)).await;
    let body = limited("hi mock:tokens=5", 20);
    for run in [Some("r-1"), Some("r-1"), None] {
        let response = match run {
            Some(run) => in_run(&h, ALICE, run, None, &body).await,
            None => h.post("/v1/chat/completions", ALICE, &body).await,
        };
        assert_eq!(response.status(), StatusCode::OK);
        response.bytes().await.unwrap();
    }
    h.settled().await;
    let report: Value = h
        .client()
        .get(format!("{}/admin/v1/spend?group_by=run", h.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["group_by"], "run");
    let groups: Vec<(String, u64)> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["group"].as_str().unwrap().to_owned(),
                row["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(groups, [(String::new(), 1), ("alice/r-1".to_owned(), 2)]);
    let in_run_cost: i64 = h
        .ledger()
        .iter()
        .filter(|e| e.run.is_some())
        .map(|e| e.actual)
        .sum();
    assert_eq!(report["rows"][1]["cost_usd_micros"], in_run_cost);
}
