//! A gateway killed with SIGKILL in the middle of a stream leaves its
//! reservation behind. That headroom stays held until the reservation's
//! deadline (no other gateway's caller gets it), then the reservation
//! expires by itself with no restart: through another gateway's periodic
//! sweep, or through the lazy sweep of the next reserve. By default it is
//! charged its amount (the provider may have billed the call); under
//! `on_expiry = "release"` its headroom comes back. The books then show an
//! `expired` entry and balance.

use std::time::{Duration, Instant};

use tollgate::budget::LedgerStatus;

use crate::redis_support::*;

/// The gateways' config: a reservation lives 4 s, a provider call at most
/// 3 s (the TTL must exceed the upstream timeout), so the stream is killed
/// well before its own gateway would cut and settle it, even on a busy
/// machine.
const TTL: Duration = Duration::from_secs(4);
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// Room for one call of [`BIG_CALL_TOKENS`] output tokens on gpt-4o, not
/// two. Its calls name no service tier, so they are reserved at priority
/// rates ($17/Mtok output: about 34,300 µUSD with its input).
const CRASH_KEY_CAP: u64 = 50_000;
const BIG_CALL_TOKENS: u64 = 2_000;

fn crash_config(provider: std::net::SocketAddr, on_expiry: &'static str) -> GatewayConfig {
    let org = OrgSpec {
        id: unique("org"),
        cap: "1.00",
        period: "month",
    };
    let key = KeySpec::new("carol", Some(&org), "0.050000", "day");
    let mut config = GatewayConfig::new(shared_redis_url(), provider);
    config.upstream_timeout_secs = UPSTREAM_TIMEOUT.as_secs();
    config.reservation_ttl_secs = TTL.as_secs();
    config.on_expiry = on_expiry;
    config.orgs.push(org);
    config.keys.push(key);
    config
}

/// A reservation left behind by a killed gateway.
struct Crash {
    exec_id: String,
    held: u64,
    /// Before the reserve: its deadline is at least `TTL` after this.
    sent: Instant,
    /// After the reserve: its deadline is at most `TTL` after this.
    reserved_by: Instant,
}

/// Starts a slow stream through `a`, waits until it is mid-stream with its
/// reservation visible through `b`, and SIGKILLs `a`.
async fn crash_mid_stream(a: &mut GatewayProcess, b: &str, key: &str) -> Crash {
    let sent = Instant::now();
    let body = chat(
        "gpt-4o",
        "a long answer mock:tokens=1000 mock:sleep_ms=100",
        true,
        BIG_CALL_TOKENS,
    );
    let mut stream = post_chat(&client(), &a.url, key, &body).await;
    assert_eq!(stream.status(), 200);
    let exec_id = stream.headers()["x-tollgate-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(stream.chunk().await.unwrap().is_some(), "no first chunk");
    let reserved_by = Instant::now();
    let before = budget(b, key).await;
    let held = field(&before, "key", "reserved_usd_micros");
    assert!(held > CRASH_KEY_CAP / 2, "{before}");
    assert_eq!(field(&before, "org", "reserved_usd_micros"), held);
    assert!(
        sent.elapsed() < UPSTREAM_TIMEOUT,
        "too slow: the gateway may have settled the call itself"
    );
    a.kill();
    drop(stream);
    Crash {
        exec_id,
        held,
        sent,
        reserved_by,
    }
}

/// Before the deadline the headroom stays held: a call needing it is
/// denied through `b`, which still shows the reservation.
async fn assert_headroom_held(b: &str, key: &str, crash: &Crash) {
    let body = chat("gpt-4o", "mock:tokens=5", false, BIG_CALL_TOKENS);
    let response = post_chat(&client(), b, key, &body).await;
    assert_eq!(response.status(), 402);
    let denial: serde_json::Value = response.json().await.unwrap();
    assert_eq!(denial["error"]["code"], "budget_exceeded", "{denial}");
    let state = budget(b, key).await;
    assert_eq!(field(&state, "key", "reserved_usd_micros"), crash.held);
    assert_eq!(field(&state, "key", "spent_usd_micros"), 0);
    assert!(
        crash.sent.elapsed() < TTL,
        "too slow: the checks ran after the reservation's deadline"
    );
}

/// The reservation expired as `config.on_expiry` says: charged its amount
/// ("charge": a call needing that headroom is denied, a smaller one
/// passes), or released ("release": a call needing it passes). The books
/// show the expired reservation and that call, and balance.
async fn assert_expired(b: &str, config: &GatewayConfig, crash: &Crash) {
    let key = &config.keys[0];
    let charged = match config.on_expiry {
        "charge" => crash.held,
        _ => 0,
    };
    // This reserve expires the reservation first, if no sweep has yet.
    let big = chat("gpt-4o", "mock:tokens=5", false, BIG_CALL_TOKENS);
    let mut response = post_chat(&client(), b, &key.raw, &big).await;
    if charged > 0 {
        assert_eq!(response.status(), 402, "the expired hold was not charged");
        let state = budget(b, &key.raw).await;
        assert_eq!(field(&state, "key", "spent_usd_micros"), charged, "{state}");
        assert_eq!(field(&state, "key", "reserved_usd_micros"), 0, "{state}");
        assert_eq!(field(&state, "org", "spent_usd_micros"), charged, "{state}");
        let small = chat("gpt-4o", "mock:tokens=5", false, 100);
        response = post_chat(&client(), b, &key.raw, &small).await;
    }
    assert_eq!(response.status(), 200, "no headroom for the next call");
    let answer: serde_json::Value = response.json().await.unwrap();
    let cost = prices().get("gpt-4o").unwrap().cost(&chat_usage(&answer));
    let state = budget(b, &key.raw).await;
    assert_eq!(field(&state, "key", "spent_usd_micros"), charged + cost);
    assert_eq!(field(&state, "key", "reserved_usd_micros"), 0);
    assert_eq!(field(&state, "org", "spent_usd_micros"), charged + cost);

    let store = store(shared_redis_url()).await;
    let ledger = store.ledger(&key.tag()).await.unwrap();
    assert_eq!(ledger.len(), 2, "{ledger:?}");
    let expired = &ledger[0];
    assert_eq!(expired.exec_id, crash.exec_id);
    assert_eq!(expired.status, LedgerStatus::Expired);
    assert_eq!(
        (expired.reserved, expired.actual),
        (crash.held, delta(charged))
    );
    assert_eq!(
        (ledger[1].status, ledger[1].actual),
        (LedgerStatus::Ok, delta(cost))
    );
    assert_books_balance(&store, &config.tags()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateways_reservation_is_held_until_its_deadline_then_swept_and_charged() {
    let started = Instant::now();
    let mock = mock().await;
    let config = crash_config(mock.addr, "charge");
    let key = &config.keys[0].raw;
    let (mut a, b) = tokio::join!(
        GatewayProcess::start(&config),
        GatewayProcess::start(&config)
    );
    let crash = crash_mid_stream(&mut a, &b.url, key).await;
    assert_headroom_held(&b.url, key, &crash).await;

    // No call comes: B's periodic sweep expires it, once due, whole.
    let expired_after = loop {
        let state = budget(&b.url, key).await;
        let reserved = field(&state, "key", "reserved_usd_micros");
        if reserved == 0 {
            break crash.sent.elapsed();
        }
        assert_eq!(reserved, crash.held, "{state}");
        assert!(
            crash.sent.elapsed() < TTL + Duration::from_secs(10),
            "never expired: {state}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        expired_after >= TTL,
        "expired after {expired_after:?}, before its deadline"
    );
    // The sweep logs once its script has answered, so the line may come
    // a moment after the budget shows the expiry.
    let logged = eventually(Duration::from_secs(5), || async {
        b.log().contains("charging their reserved amount")
    })
    .await;
    assert!(logged, "{}", b.log());
    assert_expired(&b.url, &config, &crash).await;
    eprintln!(
        "expired {expired_after:?} after the call was sent; total {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_release_a_killed_gateways_reservation_is_released_by_the_next_reserve() {
    let started = Instant::now();
    let mock = mock().await;
    let config = crash_config(mock.addr, "release");
    let key = &config.keys[0].raw;
    // B has no periodic sweep: only its reserve can release the headroom.
    let (mut a, b) = tokio::join!(
        GatewayProcess::start(&config),
        UnsweptGateway::start(&config)
    );
    let crash = crash_mid_stream(&mut a, &b.url, key).await;
    assert_headroom_held(&b.url, key, &crash).await;

    let due = crash.reserved_by + TTL + Duration::from_millis(300);
    tokio::time::sleep_until(due.into()).await;
    let state = budget(&b.url, key).await;
    assert_eq!(
        field(&state, "key", "reserved_usd_micros"),
        crash.held,
        "nothing but a reserve should have released it: {state}"
    );
    assert_expired(&b.url, &config, &crash).await;
    eprintln!("total {:?}", started.elapsed());
}
