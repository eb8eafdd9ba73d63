//! A key's customer template (`customer_*`) through the admin API on one
//! gateway: made, shown, changed and cleared; every bad value refused with
//! a 400 naming its field and nothing changed; the config file's shown and
//! not changeable. Then real calls through the mock provider naming their
//! customer (`x-tollgate-customer`): `GET /admin/v1/customers?key=` lists
//! them with the spend the ledger charged each, a page at a time;
//! `GET /v1/budget` with the header shows the customer's; and
//! `group_by=customer` sums to the key's spend.

use std::collections::BTreeMap;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::admin_api::{admin, gateway, make_key, ADMIN};
use crate::common::{chat, start, Harness, Setup};

/// The customer fields of a KEY, as shown.
fn template(key: &Value) -> Value {
    let fields = [
        "customer_cap_usd",
        "customer_cap_usd_micros",
        "customer_period",
        "customer_rpm",
        "customer_tpm",
        "customer_from",
        "customer_required",
    ];
    fields
        .iter()
        .map(|field| {
            let value = key
                .get(*field)
                .unwrap_or_else(|| panic!("no {field} in {key}"));
            ((*field).to_owned(), value.clone())
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// One call with `secret` naming `customer` (or none), answered 200;
/// waits until it is settled.
async fn call_for(h: &Harness, secret: &str, customer: Option<&str>) {
    let mut request = h
        .client()
        .post(format!("{}/v1/chat/completions", h.url))
        .bearer_auth(secret)
        .json(&chat("gpt-4o-mini", "Say hello to the customer."));
    if let Some(customer) = customer {
        request = request.header("x-tollgate-customer", customer);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{customer:?}");
    response.bytes().await.unwrap();
    h.settled().await;
}

/// What the ledger charged `key` for each customer (`""`: none named).
fn charged_by_customer(h: &Harness, key: &str) -> BTreeMap<String, i64> {
    let mut charged = BTreeMap::new();
    for entry in h.ledger().into_iter().filter(|entry| entry.key == key) {
        *charged
            .entry(entry.customer.unwrap_or_default())
            .or_default() += entry.actual;
    }
    charged
}

async fn budget_for(h: &Harness, secret: &str, customer: &str) -> (StatusCode, Value) {
    let response = h
        .client()
        .get(format!("{}/v1/budget", h.url))
        .bearer_auth(secret)
        .header("x-tollgate-customer", customer)
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

#[tokio::test]
async fn a_key_takes_a_customer_template_and_shows_it() {
    let h = gateway().await;
    let (status, made) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "agent", "cap_usd": "10.00", "period": "day",
                    "customer_cap_usd": "0.50", "customer_period": "day",
                    "customer_rpm": 10, "customer_from": "body", "customer_required": true})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(
        template(&made["key"]),
        json!({"customer_cap_usd": "0.50", "customer_cap_usd_micros": 500_000,
               "customer_period": "day", "customer_rpm": 10, "customer_tpm": null,
               "customer_from": "body", "customer_required": true})
    );
    let (_, shown) = admin(&h, "GET", "/admin/v1/keys/agent", None).await;
    assert_eq!(template(&shown), template(&made["key"]));
    let (_, list) = admin(&h, "GET", "/admin/v1/keys?prefix=agent", None).await;
    assert_eq!(template(&list["keys"][0]), template(&made["key"]));

    // A key made without one shows every field, unset.
    let (_, plain) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "plain", "cap_usd": "1.00", "period": "day"})),
    )
    .await;
    assert_eq!(
        template(&plain["key"]),
        json!({"customer_cap_usd": null, "customer_cap_usd_micros": null,
               "customer_period": null, "customer_rpm": null, "customer_tpm": null,
               "customer_from": "header", "customer_required": false})
    );

    // PATCH changes what it names; `null` clears; the rest stays.
    let (status, changed) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/agent",
        Some(json!({"customer_cap_usd": "0.75", "customer_rpm": null,
                    "customer_tpm": 5000, "customer_required": null})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(
        template(&changed),
        json!({"customer_cap_usd": "0.75", "customer_cap_usd_micros": 750_000,
               "customer_period": "day", "customer_rpm": null, "customer_tpm": 5000,
               "customer_from": "body", "customer_required": false})
    );
    let (_, changed) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/agent",
        Some(json!({"customer_from": "header", "customer_period": "week"})),
    )
    .await;
    assert_eq!(changed["customer_from"], "header");
    assert_eq!(changed["customer_period"], "week");
    assert_eq!(changed["customer_cap_usd_micros"], 750_000);
    // The cap and its period cleared together.
    let (status, cleared) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/agent",
        Some(json!({"customer_cap_usd": null, "customer_period": null, "customer_tpm": null})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cleared}");
    assert_eq!(template(&cleared), template(&plain["key"]));
    // A cap on a key without a period must bring one.
    let (status, error) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/agent",
        Some(json!({"customer_cap_usd": "1.00"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["error"]["param"], "customer_period");
    let (status, set) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/agent",
        Some(json!({"customer_cap_usd": "1.00", "customer_period": "month"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["customer_cap_usd_micros"], 1_000_000);
}

#[tokio::test]
async fn a_bad_customer_field_is_refused_naming_it_and_changes_nothing() {
    let h = gateway().await;
    make_key(
        &h,
        json!({"id": "k", "cap_usd": "1.00", "period": "day",
               "customer_cap_usd": "0.10", "customer_period": "day"}),
    )
    .await;
    let (_, before) = admin(&h, "GET", "/admin/v1/keys/k", None).await;
    // Each bad body, the field it must name, and words of the message.
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"customer_cap_usd": 0.5, "customer_period": "day"}),
            "customer_cap_usd",
            "decimal string",
        ),
        (
            json!({"customer_cap_usd": "half", "customer_period": "day"}),
            "customer_cap_usd",
            "half",
        ),
        (
            json!({"customer_cap_usd": "-1", "customer_period": "day"}),
            "customer_cap_usd",
            "",
        ),
        (
            json!({"customer_cap_usd": "1", "customer_period": "fortnight"}),
            "customer_period",
            "customer_period must be one of",
        ),
        (
            json!({"customer_period": 7}),
            "customer_period",
            "customer_period must be one of",
        ),
        (
            json!({"customer_rpm": 0}),
            "customer_rpm",
            "0 admits nothing",
        ),
        (
            json!({"customer_rpm": "10"}),
            "customer_rpm",
            "whole number",
        ),
        (json!({"customer_tpm": 1.5}), "customer_tpm", "whole number"),
        (
            json!({"customer_tpm": 1u64 << 60}),
            "customer_tpm",
            "too large",
        ),
        (
            json!({"customer_from": "cookie"}),
            "customer_from",
            "\"header\"",
        ),
        (
            json!({"customer_required": "yes"}),
            "customer_required",
            "true or false",
        ),
        (
            json!({"customer_cap": "1"}),
            "customer_cap",
            "customer_required",
        ),
    ];
    for (bad, param, words) in cases {
        let mut made = json!({"id": "new-k", "cap_usd": "1.00", "period": "day"});
        for (field, value) in bad.as_object().unwrap() {
            made[field] = value.clone();
        }
        for (method, path, body) in [
            ("POST", "/admin/v1/keys", made),
            ("PATCH", "/admin/v1/keys/k", bad.clone()),
        ] {
            let (status, error) = admin(&h, method, path, Some(body.clone())).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{method} {path} {body}: {error}"
            );
            assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
            assert_eq!(
                error["error"]["param"], param,
                "{method} {path} {body}: {error}"
            );
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains(words), "{body}: {message}");
        }
    }
    // A new key's cap needs its period.
    let (status, error) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "new-k", "cap_usd": "1.00", "period": "day",
                    "customer_cap_usd": "0.10"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["error"]["param"], "customer_period");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("needs a period"),
        "{error}"
    );
    // Clearing the period of a key that keeps its cap.
    let (status, error) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/k",
        Some(json!({"customer_period": null})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["error"]["param"], "customer_period");

    let (status, _) = admin(&h, "GET", "/admin/v1/keys/new-k", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, after) = admin(&h, "GET", "/admin/v1/keys/k", None).await;
    assert_eq!(after, before);
}

#[tokio::test]
async fn a_config_key_shows_its_template_and_refuses_changes() {
    let h = start(Setup {
        alice_extra: r#"customer_cap_usd = "0.000500"
customer_period = "day"
customer_tpm = 2000
customer_from = "body""#,
        ..Setup::with_admin_key(ADMIN)
    })
    .await;
    let (status, alice) = admin(&h, "GET", "/admin/v1/keys/alice", None).await;
    assert_eq!(status, StatusCode::OK, "{alice}");
    assert_eq!(
        template(&alice),
        json!({"customer_cap_usd": "0.000500", "customer_cap_usd_micros": 500,
               "customer_period": "day", "customer_rpm": null, "customer_tpm": 2000,
               "customer_from": "body", "customer_required": false})
    );
    let (status, error) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/alice",
        Some(json!({"customer_rpm": 5})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["code"], "config_managed");
}

#[tokio::test]
async fn customers_are_listed_with_what_the_ledger_charged_each() {
    let h = gateway().await;
    let secret = make_key(
        &h,
        json!({"id": "agent", "cap_usd": "10.00", "period": "day",
               "customer_cap_usd": "1.00", "customer_period": "day"}),
    )
    .await;
    let started = chrono::Utc::now() - chrono::Duration::seconds(1);
    for customer in [
        Some("c1"),
        Some("c2"),
        Some("c1"),
        Some("a:b@x.y"),
        None,
        Some("c3"),
    ] {
        call_for(&h, &secret, customer).await;
    }
    let charged = charged_by_customer(&h, "agent");
    assert_eq!(
        charged.keys().collect::<Vec<_>>(),
        ["", "a:b@x.y", "c1", "c2", "c3"],
        "the ledger carries each call's customer: {charged:?}"
    );

    let (status, listed) = admin(&h, "GET", "/admin/v1/customers?key=agent", None).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["next"], Value::Null);
    let customers = listed["customers"].as_array().unwrap();
    let ids: Vec<&str> = customers
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a:b@x.y", "c1", "c2", "c3"]);
    let (_, key) = admin(&h, "GET", "/admin/v1/keys/agent", None).await;
    for customer in customers {
        let id = customer["id"].as_str().unwrap();
        let budget = &customer["budget"];
        let spent = charged[id];
        assert!(spent > 0, "{id}");
        assert_eq!(budget["spent_usd_micros"], spent, "{id}: {customer}");
        assert_eq!(budget["reserved_usd_micros"], 0);
        assert_eq!(budget["cap_usd_micros"], 1_000_000);
        assert_eq!(budget["remaining_usd_micros"], 1_000_000 - spent);
        assert_eq!(budget["period"], "day");
        assert_eq!(budget["period_id"], key["budget"]["period_id"]);
        assert_eq!(budget["resets_at"], key["budget"]["resets_at"]);
        assert!(budget.get("id").is_none(), "{budget}");
        let last_call = customer["last_call"].as_str().unwrap();
        let at = chrono::DateTime::parse_from_rfc3339(last_call).unwrap();
        assert!(last_call.ends_with('Z'), "{last_call}");
        assert!(at >= started && at <= chrono::Utc::now(), "{last_call}");
    }

    // A page at a time, by id.
    let (_, first) = admin(&h, "GET", "/admin/v1/customers?key=agent&limit=2", None).await;
    let page = |answer: &Value| -> Vec<String> {
        answer["customers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(page(&first), ["a:b@x.y", "c1"]);
    assert_eq!(first["next"], "c1");
    let (_, second) = admin(
        &h,
        "GET",
        "/admin/v1/customers?key=agent&limit=2&after=c1",
        None,
    )
    .await;
    assert_eq!(page(&second), ["c2", "c3"]);
    assert_eq!(second["next"], Value::Null);
    let (_, past) = admin(&h, "GET", "/admin/v1/customers?key=agent&after=c3", None).await;
    assert_eq!(past, json!({"customers": [], "next": null}));

    // What the route refuses.
    for (path, status, param) in [
        ("/admin/v1/customers", StatusCode::BAD_REQUEST, json!("key")),
        (
            "/admin/v1/customers?key=agent&limit=0",
            StatusCode::BAD_REQUEST,
            json!("limit"),
        ),
        (
            "/admin/v1/customers?key=agent&after=has%20space",
            StatusCode::BAD_REQUEST,
            json!("after"),
        ),
        (
            "/admin/v1/customers?key=nobody",
            StatusCode::NOT_FOUND,
            Value::Null,
        ),
    ] {
        let (got, error) = admin(&h, "GET", path, None).await;
        assert_eq!(got, status, "{path}: {error}");
        assert_eq!(error["error"]["param"], param, "{path}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }

    // `GET /v1/budget` with the header: that customer's money.
    let (status, budget) = budget_for(&h, &secret, "c1").await;
    assert_eq!(status, StatusCode::OK, "{budget}");
    let c1 = &customers[1];
    let mut expected = json!({"id": "c1"});
    for (field, value) in c1["budget"].as_object().unwrap() {
        expected[field] = value.clone();
    }
    assert_eq!(budget["customer"], expected);
    // A customer not seen yet has its whole cap.
    let (_, budget) = budget_for(&h, &secret, "new.customer").await;
    assert_eq!(budget["customer"]["spent_usd_micros"], 0);
    assert_eq!(budget["customer"]["remaining_usd_micros"], 1_000_000);
    // Without the header there is no customer; a malformed one is 400.
    assert!(h.budget(&secret).await.get("customer").is_none());
    let (status, error) = budget_for(&h, &secret, "has space").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["error"]["code"], "invalid_customer");

    // Spend by customer: one row per `<key>/<customer>`, calls that named
    // none under "", summing to the key's spend.
    let (status, report) = admin(
        &h,
        "GET",
        "/admin/v1/spend?group_by=customer&key=agent",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["group_by"], "customer");
    let rows: BTreeMap<String, i64> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["group"].as_str().unwrap().to_owned(),
                row["cost_usd_micros"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: BTreeMap<String, i64> = charged
        .iter()
        .map(|(customer, cost)| {
            let group = if customer.is_empty() {
                String::new()
            } else {
                format!("agent/{customer}")
            };
            (group, *cost)
        })
        .collect();
    assert_eq!(rows, expected);
    let total: i64 = rows.values().sum();
    assert_eq!(json!(total), key["budget"]["spent_usd_micros"]);
    let calls: u64 = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(calls, 6);
    let (status, error) = admin(&h, "GET", "/admin/v1/spend?group_by=user", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("key, org, model, run, customer or day"),
        "{error}"
    );
}

#[tokio::test]
async fn a_customer_of_a_key_without_a_money_cap_has_no_budget() {
    let h = gateway().await;
    let secret = make_key(
        &h,
        json!({"id": "rates-only", "cap_usd": "10.00", "period": "day", "customer_rpm": 100}),
    )
    .await;
    call_for(&h, &secret, Some("u-1")).await;
    let (status, listed) = admin(&h, "GET", "/admin/v1/customers?key=rates-only", None).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["customers"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["customers"][0]["id"], "u-1");
    assert_eq!(listed["customers"][0]["budget"], Value::Null);
    let (_, budget) = budget_for(&h, &secret, "u-1").await;
    assert_eq!(
        budget["customer"],
        json!({"id": "u-1", "period": null, "period_id": null, "cap_usd_micros": null,
               "spent_usd_micros": null, "reserved_usd_micros": null,
               "remaining_usd_micros": null, "resets_at": null})
    );
    // The ledger still names the customer, and the report groups it.
    let (_, report) = admin(
        &h,
        "GET",
        "/admin/v1/spend?group_by=customer&key=rates-only",
        None,
    )
    .await;
    assert_eq!(report["rows"][0]["group"], "rates-only/u-1", "{report}");
    assert_eq!(
        json!(report["rows"][0]["cost_usd_micros"]),
        json!(charged_by_customer(&h, "rates-only")["u-1"])
    );
}

/// The same route on the stores that outlive a gateway: a key's customers
/// as SQLite and Redis remember them, each with the spend its calls were
/// charged (the responses' `x-tollgate-cost-usd-micros`), and the report
/// by customer agreeing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customers_are_listed_from_sqlite_and_redis_too() {
    use crate::redis_support as support;

    let mock = support::mock().await;
    let dir = tempfile::tempdir().unwrap();
    let digest = hex::encode(tollgate::config::hash_key(ADMIN));
    for backend in ["sqlite", "redis"] {
        let mut config = support::GatewayConfig::new(support::shared_redis_url(), mock.addr);
        config.server_extra = format!("admin_key_sha256 = \"{digest}\"");
        if backend == "sqlite" {
            config.sqlite_path = Some(dir.path().join("books.db"));
        }
        let gateway = support::GatewayProcess::start(&config).await;
        let base = gateway.url.clone();
        let call = |method: &str, path: &str, body: Option<Value>| {
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let mut request = support::client()
                .request(method, format!("{base}{path}"))
                .bearer_auth(ADMIN);
            if let Some(body) = body {
                request = request.json(&body);
            }
            async move {
                let response = request.send().await.unwrap();
                let status = response.status();
                (
                    status,
                    response.json::<Value>().await.unwrap_or(Value::Null),
                )
            }
        };
        let id = support::unique("customers");
        let (status, made) = call(
            "POST",
            "/admin/v1/keys",
            Some(json!({"id": id, "cap_usd": "5.00", "period": "day",
                        "customer_cap_usd": "1.00", "customer_period": "month"})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{backend}: {made}");
        let secret = made["secret"].as_str().unwrap().to_owned();
        let mut charged: BTreeMap<&str, u64> = BTreeMap::new();
        for customer in ["c1", "c2", "c1"] {
            let response = support::client()
                .post(format!("{base}/v1/chat/completions"))
                .bearer_auth(&secret)
                .header("x-tollgate-customer", customer)
                .json(&support::chat("gpt-4o-mini", "hi", false, 16))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{backend}");
            let cost: u64 = response.headers()["x-tollgate-cost-usd-micros"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            response.bytes().await.unwrap();
            *charged.entry(customer).or_default() += cost;
        }

        let (status, listed) = call("GET", &format!("/admin/v1/customers?key={id}"), None).await;
        assert_eq!(status, StatusCode::OK, "{backend}: {listed}");
        let customers = listed["customers"].as_array().unwrap();
        let ids: Vec<&str> = customers
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["c1", "c2"], "{backend}: {listed}");
        for customer in customers {
            let spent = charged[customer["id"].as_str().unwrap()];
            assert!(spent > 0);
            let budget = &customer["budget"];
            assert_eq!(budget["spent_usd_micros"], spent, "{backend}: {customer}");
            assert_eq!(budget["remaining_usd_micros"], 1_000_000 - spent);
            assert_eq!(budget["period"], "month");
        }
        let (_, first) = call(
            "GET",
            &format!("/admin/v1/customers?key={id}&limit=1"),
            None,
        )
        .await;
        assert_eq!(first["customers"][0]["id"], "c1", "{backend}: {first}");
        assert_eq!(first["next"], "c1");
        let (_, rest) = call(
            "GET",
            &format!("/admin/v1/customers?key={id}&limit=1&after=c1"),
            None,
        )
        .await;
        assert_eq!(rest["customers"][0]["id"], "c2", "{backend}: {rest}");
        assert_eq!(rest["next"], Value::Null);

        let (status, report) = call(
            "GET",
            &format!("/admin/v1/spend?group_by=customer&key={id}"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{backend}: {report}");
        let rows: BTreeMap<String, u64> = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                (
                    row["group"].as_str().unwrap().to_owned(),
                    row["cost_usd_micros"].as_u64().unwrap(),
                )
            })
            .collect();
        let expected: BTreeMap<String, u64> = charged
            .iter()
            .map(|(customer, cost)| (format!("{id}/{customer}"), *cost))
            .collect();
        assert_eq!(rows, expected, "{backend}");
        let key_spent = support::budget(&base, &secret).await["key"]["spent_usd_micros"].clone();
        assert_eq!(json!(rows.values().sum::<u64>()), key_spent, "{backend}");
    }
}
