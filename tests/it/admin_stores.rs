//! The admin API on the stores that outlive a gateway: a key made through
//! it survives a `kill -9` of a SQLite gateway, and on Redis every gateway
//! sharing the store applies a change made on another within a second —
//! a new key works, a disabled, rotated or deleted one is refused, a
//! lowered cap is enforced.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::redis_support::*;

const ADMIN: &str = "tg-admin-of-the-store-tests";

/// How long a change may take to reach another gateway (DESIGN: 1 s).
const PROPAGATION: Duration = Duration::from_secs(1);

fn with_admin(mut config: GatewayConfig) -> GatewayConfig {
    let digest = hex::encode(tollgate::config::hash_key(ADMIN));
    config.server_extra = format!("admin_key_sha256 = \"{digest}\"");
    config
}

async fn admin(base: &str, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client()
        .request(method, format!("{base}{path}"))
        .bearer_auth(ADMIN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, body)
}

async fn call(gateway: &str, secret: &str) -> StatusCode {
    post_chat(
        &client(),
        gateway,
        secret,
        &chat("gpt-4o-mini", "hi", false, 16),
    )
    .await
    .status()
}

/// Waits until a call with `secret` through `gateway` gets `status`;
/// returns how long that took, or panics past `within`.
async fn until_call_gets(
    gateway: &str,
    secret: &str,
    status: StatusCode,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let got = call(gateway, secret).await;
        if got == status {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "still {got} after {within:?}, expected {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_on_one_gateway_applies_on_another_within_a_second() {
    let mock = mock().await;
    let config = with_admin(GatewayConfig::new(shared_redis_url(), mock.addr));
    let a = GatewayProcess::start(&config).await;
    let b = GatewayProcess::start(&config).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            readyz(&a.url).await == 200 && readyz(&b.url).await == 200
        })
        .await
    );

    let org = unique("org");
    let (status, made) = admin(
        &a.url,
        "POST",
        "/admin/v1/orgs",
        Some(json!({"id": org, "cap_usd": "10.00", "period": "month"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = unique("agent");
    let (status, made) = admin(
        &a.url,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": id, "org": org, "cap_usd": "5.00", "period": "day"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    // At once on the gateway that made it, within a second on the other.
    assert_eq!(call(&a.url, &secret).await, StatusCode::OK);
    until_call_gets(&b.url, &secret, StatusCode::OK, PROPAGATION * 2).await;
    let (_, on_b) = admin(&b.url, "GET", &format!("/admin/v1/keys/{id}"), None).await;
    assert_eq!(on_b["source"], "api");
    assert!(
        on_b["budget"]["spent_usd_micros"].as_u64().unwrap() > 0,
        "{on_b}"
    );

    // Both gateways report the spend from the store's aggregates.
    let (status, report) = admin(
        &b.url,
        "GET",
        &format!("/admin/v1/spend?group_by=model&key={id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["rows"][0]["group"], "gpt-4o-mini", "{report}");
    assert!(
        report["rows"][0]["calls"].as_u64().unwrap() >= 1,
        "{report}"
    );
    let (_, by_org) = admin(
        &a.url,
        "GET",
        &format!("/admin/v1/spend?group_by=org&org={org}"),
        None,
    )
    .await;
    assert_eq!(by_org["rows"][0]["group"], org.as_str(), "{by_org}");

    // A lowered cap binds on B.
    let (status, _) = admin(
        &a.url,
        "PATCH",
        &format!("/admin/v1/keys/{id}"),
        Some(json!({"cap_usd": "0.000001"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    until_call_gets(
        &b.url,
        &secret,
        StatusCode::PAYMENT_REQUIRED,
        PROPAGATION * 2,
    )
    .await;
    admin(
        &a.url,
        "PATCH",
        &format!("/admin/v1/keys/{id}"),
        Some(json!({"cap_usd": "5.00"})),
    )
    .await;
    until_call_gets(&b.url, &secret, StatusCode::OK, PROPAGATION * 2).await;

    // Disabled on B, refused on A.
    let (status, _) = admin(
        &b.url,
        "PATCH",
        &format!("/admin/v1/keys/{id}"),
        Some(json!({"disabled": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(call(&b.url, &secret).await, StatusCode::UNAUTHORIZED);
    until_call_gets(&a.url, &secret, StatusCode::UNAUTHORIZED, PROPAGATION * 2).await;
    admin(
        &b.url,
        "PATCH",
        &format!("/admin/v1/keys/{id}"),
        Some(json!({"disabled": false})),
    )
    .await;

    // Rotated on A: the old secret is refused on B, the new one served.
    let (status, rotated) =
        admin(&a.url, "POST", &format!("/admin/v1/keys/{id}/rotate"), None).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();
    until_call_gets(&b.url, &secret, StatusCode::UNAUTHORIZED, PROPAGATION * 2).await;
    until_call_gets(&b.url, &new_secret, StatusCode::OK, PROPAGATION * 2).await;

    // Deleted on B: refused on A; its id stays taken everywhere.
    let (status, _) = admin(&b.url, "DELETE", &format!("/admin/v1/keys/{id}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    until_call_gets(
        &a.url,
        &new_secret,
        StatusCode::UNAUTHORIZED,
        PROPAGATION * 2,
    )
    .await;
    let (status, error) = admin(
        &a.url,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": id, "cap_usd": "1.00", "period": "day"})),
    )
    .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::CONFLICT, &json!("id_taken"))
    );

    // Both gateways wrote to one audit trail.
    let (_, audit) = admin(&b.url, "GET", "/admin/v1/audit?limit=1000", None).await;
    let ours = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["id"] == id.as_str())
        .count();
    assert_eq!(
        ours, 7,
        "create, two cap changes, disable, enable, rotate, delete: {audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_made_on_a_sqlite_gateway_survive_a_kill_and_the_admin_routes_may_listen_apart() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = with_admin(GatewayConfig::new(shared_redis_url(), mock.addr));
    config.sqlite_path = Some(dir.path().join("tollgate.db"));
    let mut gateway = GatewayProcess::start(&config).await;
    let (status, made) = admin(
        &gateway.url,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "durable", "cap_usd": "2.00", "period": "total"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    let (status, made) = admin(
        &gateway.url,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "durable-2", "cap_usd": "2.00", "period": "total"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(call(&gateway.url, &secret).await, StatusCode::OK);
    gateway.kill();

    // Restarted on the same file, with the admin routes on their own port.
    config
        .server_extra
        .push_str("\nadmin_listen = \"127.0.0.1:0\"");
    let gateway = GatewayProcess::start(&config).await;
    assert_eq!(
        call(&gateway.url, &secret).await,
        StatusCode::OK,
        "the key survived"
    );
    let admin_url = eventually_admin_url(&gateway).await;
    let (status, _) = admin(&gateway.url, "GET", "/admin/v1/keys/durable", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not on the main listener");
    let (status, key) = admin(&admin_url, "GET", "/admin/v1/keys/durable", None).await;
    assert_eq!(status, StatusCode::OK, "{key}");
    assert!(
        key["budget"]["spent_usd_micros"].as_u64().unwrap() > 0,
        "{key}"
    );
    let response = client()
        .get(format!("{admin_url}/v1/models"))
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "only admin routes there"
    );
    let (_, audit) = admin(&admin_url, "GET", "/admin/v1/audit", None).await;
    assert_eq!(audit["entries"][0]["action"], "create", "{audit}");

    // The keys read back from the file are searched and paged by prefix.
    let search = "/admin/v1/keys?prefix=durable&limit=1";
    let (_, first) = admin(&admin_url, "GET", search, None).await;
    assert_eq!(first["keys"][0]["id"], "durable", "{first}");
    assert_eq!(first["next"], "durable");
    let after = format!("{search}&after=durable");
    let (_, second) = admin(&admin_url, "GET", &after, None).await;
    assert_eq!(second["keys"][0]["id"], "durable-2", "{second}");
    assert_eq!(second["next"], Value::Null);
    let (_, none) = admin(&admin_url, "GET", "/admin/v1/keys?prefix=dx", None).await;
    assert_eq!(none, json!({"keys": [], "next": null}));
}

/// The admin listener's address, from the gateway's log.
async fn eventually_admin_url(gateway: &GatewayProcess) -> String {
    let mut found = None;
    assert!(
        eventually(Duration::from_secs(5), || {
            let log = gateway.log();
            found = log.lines().find_map(|line| {
                line.split_once("admin API served on ")
                    .map(|(_, addr)| addr.split_whitespace().next().unwrap_or("").to_owned())
            });
            let ready = found.is_some();
            async move { ready }
        })
        .await,
        "no admin address in the log:\n{}",
        gateway.log()
    );
    format!("http://{}", found.unwrap())
}
