//! Spending alerts end to end: a gateway in process, a mock provider and a
//! webhook receiver on port 0, real HTTP between them. Thresholds crossed
//! by a burst arrive once each (after dropping duplicates by id), signed;
//! the first 402 sends `exhausted`; a receiver that is down gets the
//! events once it is up; a receiver that never answers slows no call.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::Utc;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sha2::Sha256;
use tokio::net::TcpListener;

use crate::common::*;

/// The webhook's signing secret: the test config names the provider key's
/// variable as `secret_env`, whose value the test environment knows.
const SECRET: &str = PROVIDER_KEY;

/// The `[alerts]` table for a receiver at `addr`.
fn alerts_table(addr: SocketAddr) -> &'static str {
    let text = format!(
        "[alerts]\nwebhook_url = \"http://{addr}/hooks/tollgate\"\nsecret_env = \"TEST_OPENAI_KEY\"\n"
    );
    Box::leak(text.into_boxed_str())
}

/// One POST the receiver got.
#[derive(Clone, Debug)]
struct Received {
    signature: String,
    content_type: String,
    body: Bytes,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A webhook receiver answering 200 to every POST and keeping them.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> (Receiver, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (Receiver::serve(listener), addr)
    }

    fn serve(listener: TcpListener) -> Receiver {
        let receiver = Receiver::default();
        let got = receiver.got.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let got = got.clone();
                tokio::spawn(async move {
                    let service =
                        service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                            let got = got.clone();
                            async move {
                                let header = |name: &str| {
                                    request
                                        .headers()
                                        .get(name)
                                        .map(|v| v.to_str().unwrap().to_owned())
                                        .unwrap_or_default()
                                };
                                let signature = header("x-tollgate-signature");
                                let content_type = header("content-type");
                                let body = request.into_body().collect().await.unwrap().to_bytes();
                                got.lock().unwrap().push(Received {
                                    signature,
                                    content_type,
                                    body,
                                });
                                Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::new())))
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        receiver
    }

    fn all(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The events received, one per id (the receiver's dedup), by id.
    fn events(&self) -> BTreeMap<String, Value> {
        self.all()
            .iter()
            .map(|received| {
                let event = received.json();
                (event["id"].as_str().unwrap().to_owned(), event)
            })
            .collect()
    }

    /// Waits (bounded) until `count` distinct events arrived matching
    /// `filter`.
    async fn wait_for(&self, count: usize, within: Duration, filter: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + within;
        loop {
            let found = self.events().values().filter(|e| filter(e)).count();
            if found >= count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{found} of {count} events within {within:?}: {:?}",
                self.events()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Checks `x-tollgate-signature` over the exact bytes received.
fn assert_signed(received: &Received) {
    let (t, v1) = received
        .signature
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
        .unwrap_or_else(|| panic!("bad signature header {:?}", received.signature));
    let t: i64 = t.parse().unwrap();
    assert!((Utc::now().timestamp() - t).abs() < 60, "signed at {t}");
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(&received.body);
    assert_eq!(v1, hex::encode(mac.finalize().into_bytes()));
    assert_eq!(received.content_type, "application/json");
}

fn today() -> String {
    Utc::now().format("%Y-%m-%d").to_string()
}

fn short_chat() -> Value {
    serde_json::json!({
        "model": "gpt-4o-mini",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "hi"}],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_crossing_two_thresholds_sends_each_once_signed() {
    let (receiver, addr) = Receiver::start().await;
    let cap = 2_000u64;
    let h = start(Setup {
        alice_cap: "0.002",
        tables_extra: alerts_table(addr),
        alice_extra: "alert_at = [\"0.5\", \"0.8\"]",
        ..Setup::default()
    })
    .await;
    // Bursts of concurrent calls until alice has spent past 0.8 of her cap
    // (or her cap refuses a call).
    let mut refused = false;
    for _ in 0..100 {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (client, url) = (h.client(), h.url.clone());
            calls.spawn(async move {
                client
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth(ALICE)
                    .json(&short_chat())
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            });
        }
        while let Some(status) = calls.join_next().await {
            refused |= status.unwrap() == 402;
        }
        if refused || spent(&h, ALICE).await * 10 >= cap * 8 {
            break;
        }
    }
    let is_threshold = |e: &Value| e["type"] == "threshold";
    receiver
        .wait_for(2, Duration::from_secs(10), is_threshold)
        .await;
    // Deliveries that were in flight have landed by now.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let thresholds: Vec<Value> = receiver
        .events()
        .into_values()
        .filter(is_threshold)
        .collect();
    let named: Vec<&str> = thresholds
        .iter()
        .map(|e| e["threshold"].as_str().unwrap())
        .collect();
    assert_eq!(named.len(), 2, "{thresholds:?}");
    assert!(
        named.contains(&"0.5") && named.contains(&"0.8"),
        "{named:?}"
    );
    for event in &thresholds {
        let fields: Vec<&str> = event
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            fields,
            [
                "at",
                "cap_usd_micros",
                "id",
                "period_id",
                "scope",
                "scope_id",
                "spent_usd_micros",
                "threshold",
                "type"
            ]
        );
        assert_eq!(event["scope"], "key");
        assert_eq!(event["scope_id"], "alice");
        assert_eq!(event["period_id"], today());
        assert_eq!(event["cap_usd_micros"], cap);
        let spent = event["spent_usd_micros"].as_u64().unwrap();
        let ppm: u64 = if event["threshold"] == "0.5" {
            500_000
        } else {
            800_000
        };
        assert!(spent * 1_000_000 >= ppm * cap, "{event}");
        assert!(event["id"].as_str().unwrap().len() >= 16);
        chrono::DateTime::parse_from_rfc3339(event["at"].as_str().unwrap()).unwrap();
    }
    // Every POST is signed over its bytes; one per event id, each sent
    // once while the receiver answers at once.
    let all = receiver.all();
    for received in &all {
        assert_signed(received);
    }
    assert_eq!(all.len(), receiver.events().len(), "duplicates sent");
    assert_eq!(
        metric(
            &h.url,
            "tollgate_alerts_queued_total{scope=\"key\",type=\"threshold\"}"
        )
        .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_402_of_a_period_sends_exhausted_once() {
    let (receiver, addr) = Receiver::start().await;
    let h = start(Setup {
        bob_cap: "0.00001",
        tables_extra: alerts_table(addr),
        ..Setup::default()
    })
    .await;
    for _ in 0..3 {
        let response = h.post("/v1/chat/completions", BOB, &short_chat()).await;
        assert_eq!(response.status(), 402);
    }
    let is_exhausted = |e: &Value| e["type"] == "exhausted";
    receiver
        .wait_for(1, Duration::from_secs(10), is_exhausted)
        .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let events = receiver.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let event = events.into_values().next().unwrap();
    assert_eq!(event["scope"], "key");
    assert_eq!(event["scope_id"], "bob");
    assert_eq!(event["threshold"], Value::Null);
    assert_eq!(event["period_id"], today());
    assert_eq!(event["cap_usd_micros"], 10);
    assert_eq!(receiver.all().len(), 1);
    assert_signed(&receiver.all()[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_was_down_gets_the_events_when_it_comes_back() {
    // Refused until the receiver listens on it.
    let (socket, addr) = refusing_port();
    let h = start(Setup {
        bob_cap: "0.00001",
        tables_extra: alerts_table(addr),
        ..Setup::default()
    })
    .await;
    let response = h.post("/v1/chat/completions", BOB, &short_chat()).await;
    assert_eq!(response.status(), 402);
    let failed = "tollgate_alert_deliveries_total{result=\"failed\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&h.url, failed).await < 2 {
        assert!(Instant::now() < deadline, "no failed delivery seen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let receiver = Receiver::serve(socket.listen(64).unwrap());
    // The next attempt comes after a backoff of at most a few seconds.
    receiver
        .wait_for(1, Duration::from_secs(15), |e| e["type"] == "exhausted")
        .await;
    assert_signed(&receiver.all()[0]);
    assert_eq!(
        metric(
            &h.url,
            "tollgate_alert_deliveries_total{result=\"delivered\"}"
        )
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_slows_no_call() {
    // Accepts connections and holds them, reading nothing, answering
    // nothing.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let holding = held.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            holding.lock().unwrap().push(stream);
        }
    });
    let h = start(Setup {
        alice_cap: "0.002",
        bob_cap: "0.00001",
        tables_extra: alerts_table(addr),
        alice_extra: "alert_at = [\"0.01\", \"0.02\", \"0.05\"]",
        ..Setup::default()
    })
    .await;
    // Events to deliver: bob's exhausted, then alice's thresholds.
    assert_eq!(
        h.post("/v1/chat/completions", BOB, &short_chat())
            .await
            .status(),
        402
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while held.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the webhook was never called");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // While the receiver hangs, every call is answered promptly: well
    // within the 10 s the gateway gives the webhook, which a call that
    // waited on it would take at least (the bound is loose for a busy
    // test machine, not for a call held by the webhook).
    for _ in 0..10 {
        let started = Instant::now();
        let response = h.post("/v1/chat/completions", ALICE, &short_chat()).await;
        assert_eq!(response.status(), 200);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "a call took {:?} while the webhook hangs",
            started.elapsed()
        );
    }
    // And the webhook was hanging all along.
    assert_eq!(
        metric(
            &h.url,
            "tollgate_alert_deliveries_total{result=\"delivered\"}"
        )
        .await,
        0
    );
    assert!(spent(&h, ALICE).await > 0);
}

/// An admin call with `admin_key`: its status and JSON body.
async fn admin(
    h: &Harness,
    admin_key: &str,
    method: &str,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = h
        .client()
        .request(method, format!("{}{path}", h.url))
        .bearer_auth(admin_key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thresholds_set_through_the_admin_api_alert_for_keys_and_orgs() {
    const ADMIN: &str = "tg-admin-secret";
    let (receiver, addr) = Receiver::start().await;
    let h = start(Setup {
        tables_extra: alerts_table(addr),
        ..Setup::with_admin_key(ADMIN)
    })
    .await;
    for bad in [
        serde_json::json!(["0.8", "0.5"]),
        serde_json::json!(["0.5", "0.50"]),
        serde_json::json!([0.5]),
        serde_json::json!(["1.5"]),
        serde_json::json!(["0"]),
        serde_json::json!("0.5"),
    ] {
        let body =
            serde_json::json!({"id": "ops", "cap_usd": "1.00", "period": "day", "alert_at": bad});
        let (status, answer) = admin(&h, ADMIN, "POST", "/admin/v1/orgs", body).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(answer["error"]["param"], "alert_at");
    }
    // The org: 10 µUSD is a quarter of its 40 µUSD cap.
    let org = serde_json::json!({"id": "ops", "cap_usd": "0.00004", "period": "month", "alert_at": ["0.25"]});
    let (status, made) = admin(&h, ADMIN, "POST", "/admin/v1/orgs", org).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["alert_at"], serde_json::json!(["0.25"]));
    let key =
        serde_json::json!({"id": "agent-1", "org": "ops", "cap_usd": "1.00", "period": "day"});
    let (status, made) = admin(&h, ADMIN, "POST", "/admin/v1/keys", key).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["key"]["alert_at"], serde_json::json!([]));
    let secret = made["secret"].as_str().unwrap().to_owned();
    let patch = serde_json::json!({"alert_at": ["0.00001"]});
    let (status, changed) = admin(&h, ADMIN, "PATCH", "/admin/v1/keys/agent-1", patch).await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["alert_at"], serde_json::json!(["0.00001"]));

    // One call takes both past their thresholds.
    let response = h.post("/v1/chat/completions", &secret, &short_chat()).await;
    assert_eq!(response.status(), 200);
    receiver
        .wait_for(2, Duration::from_secs(10), |e| e["type"] == "threshold")
        .await;
    let mut seen: Vec<(String, String, String)> = receiver
        .events()
        .values()
        .map(|e| {
            (
                e["scope"].as_str().unwrap().to_owned(),
                e["scope_id"].as_str().unwrap().to_owned(),
                e["threshold"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("key".to_owned(), "agent-1".to_owned(), "0.00001".to_owned()),
            ("org".to_owned(), "ops".to_owned(), "0.25".to_owned()),
        ]
    );
    let org_event = receiver
        .events()
        .into_values()
        .find(|e| e["scope"] == "org")
        .unwrap();
    assert_eq!(
        org_event["period_id"],
        Utc::now().format("%Y-%m").to_string()
    );
    assert_eq!(org_event["cap_usd_micros"], 40);
}
