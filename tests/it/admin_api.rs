//! The admin API on one gateway: keys and orgs made, changed, rotated,
//! disabled and deleted at run time, enforced on the very next call, with
//! every bad input refused with a 400 naming its field and nothing changed.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::common::{chat, start, Harness, Setup, ALICE};

pub(crate) const ADMIN: &str = "tg-admin-secret";

pub(crate) async fn gateway() -> Harness {
    start(Setup::with_admin_key(ADMIN)).await
}

/// An admin call: its status and JSON body (`null` when empty).
pub(crate) async fn admin(
    h: &Harness,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    admin_as(h, ADMIN, method, path, body).await
}

async fn admin_as(
    h: &Harness,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = h
        .client()
        .request(method, format!("{}{path}", h.url))
        .bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    };
    (status, body)
}

pub(crate) async fn call(h: &Harness, secret: &str) -> StatusCode {
    h.post("/v1/chat/completions", secret, &chat("gpt-4o-mini", "hi"))
        .await
        .status()
}

/// Makes a key; returns its secret.
pub(crate) async fn make_key(h: &Harness, body: Value) -> String {
    let (status, made) = admin(h, "POST", "/admin/v1/keys", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    made["secret"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_key_made_through_the_api_is_served_and_capped_at_once() {
    let h = gateway().await;
    let (status, made) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(
            json!({"id": "agent-1", "org": "acme", "cap_usd": "5.00", "period": "day",
                     "metadata": {"team": "<script>alert(1)</script>"}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("tg-") && secret.len() > 40, "{secret}");
    let key = &made["key"];
    assert_eq!(key["id"], "agent-1");
    assert_eq!(key["org"], "acme");
    assert_eq!(key["cap_usd_micros"], 5_000_000);
    assert_eq!(key["period"], "day");
    assert_eq!(key["source"], "api");
    assert_eq!(key["disabled"], false);
    assert_eq!(key["metadata"]["team"], "<script>alert(1)</script>");
    assert_eq!(key["budget"]["spent_usd_micros"], 0);
    assert!(key.get("key_sha256").is_none() && key.get("secret").is_none());

    assert_eq!(call(&h, &secret).await, StatusCode::OK);
    h.settled().await;
    let (_, shown) = admin(&h, "GET", "/admin/v1/keys/agent-1", None).await;
    let spent = shown["budget"]["spent_usd_micros"].as_u64().unwrap();
    assert!(spent > 0, "{shown}");
    let budget = h.budget(&secret).await;
    assert_eq!(budget["key"]["spent_usd_micros"], spent);
    assert_eq!(budget["org"]["id"], "acme");

    // A cap lowered below what is spent refuses the next call, with 402.
    let (status, changed) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/agent-1",
        Some(json!({"cap_usd": "0.000001"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["cap_usd_micros"], 1);
    assert_eq!(call(&h, &secret).await, StatusCode::PAYMENT_REQUIRED);
}

#[tokio::test]
async fn disabled_rotated_expired_and_deleted_keys_are_refused() {
    let h = gateway().await;
    let secret = make_key(&h, json!({"id": "k", "cap_usd": "1.00", "period": "total"})).await;
    assert_eq!(call(&h, &secret).await, StatusCode::OK);

    let (status, key) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/k",
        Some(json!({"disabled": true})),
    )
    .await;
    assert_eq!((status, &key["disabled"]), (StatusCode::OK, &json!(true)));
    assert_eq!(call(&h, &secret).await, StatusCode::UNAUTHORIZED);
    admin(
        &h,
        "PATCH",
        "/admin/v1/keys/k",
        Some(json!({"disabled": false})),
    )
    .await;
    assert_eq!(call(&h, &secret).await, StatusCode::OK);

    let (status, rotated) = admin(&h, "POST", "/admin/v1/keys/k/rotate", None).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, secret);
    assert_eq!(call(&h, &secret).await, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&h, &new_secret).await, StatusCode::OK);

    let (status, _) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/k",
        Some(json!({"expires_at": "2020-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(call(&h, &new_secret).await, StatusCode::UNAUTHORIZED);
    let (_, key) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/k",
        Some(json!({"expires_at": null})),
    )
    .await;
    assert_eq!(key["expires_at"], Value::Null);
    assert_eq!(call(&h, &new_secret).await, StatusCode::OK);

    let (status, body) = admin(&h, "DELETE", "/admin/v1/keys/k", None).await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    assert_eq!(call(&h, &new_secret).await, StatusCode::UNAUTHORIZED);
    let (status, _) = admin(&h, "GET", "/admin/v1/keys/k", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A deleted id stays taken.
    let (status, error) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "k", "cap_usd": "1.00", "period": "day"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["code"], "id_taken");
}

#[tokio::test]
async fn config_keys_are_listed_and_refused_for_changes() {
    let h = gateway().await;
    let (status, list) = admin(&h, "GET", "/admin/v1/keys", None).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["alice", "bob", "solo"]);
    assert!(list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .all(|k| k["source"] == "config"));
    assert_eq!(list["next"], Value::Null);
    for (method, path, body) in [
        (
            "PATCH",
            "/admin/v1/keys/alice",
            Some(json!({"cap_usd": "1.00"})),
        ),
        ("POST", "/admin/v1/keys/alice/rotate", None),
        ("DELETE", "/admin/v1/keys/alice", None),
        (
            "PATCH",
            "/admin/v1/orgs/acme",
            Some(json!({"cap_usd": "1.00"})),
        ),
        ("DELETE", "/admin/v1/orgs/acme", None),
    ] {
        let (status, error) = admin(&h, method, path, body).await;
        assert_eq!(status, StatusCode::CONFLICT, "{method} {path}: {error}");
        let code = &error["error"]["code"];
        assert!(
            code == "config_managed" || code == "org_has_keys",
            "{error}"
        );
    }
    let (status, error) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "alice", "cap_usd": "1.00", "period": "day"})),
    )
    .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::CONFLICT, &json!("id_taken"))
    );
    assert_eq!(call(&h, ALICE).await, StatusCode::OK, "alice is untouched");
}

#[tokio::test]
async fn bad_admin_input_is_refused_naming_the_field_and_changes_nothing() {
    let h = gateway().await;
    let cases = [
        (json!({"cap_usd": 5, "period": "day"}), "cap_usd"),
        (json!({"cap_usd": "five", "period": "day"}), "cap_usd"),
        (json!({"period": "day"}), "cap_usd"),
        (json!({"cap_usd": "1.00", "period": "fortnight"}), "period"),
        (json!({"cap_usd": "1.00"}), "period"),
        (
            json!({"id": "a b", "cap_usd": "1.00", "period": "day"}),
            "id",
        ),
        (
            json!({"id": "x".repeat(65), "cap_usd": "1.00", "period": "day"}),
            "id",
        ),
        (
            json!({"cap_usd": "1.00", "period": "day", "org": "nope"}),
            "org",
        ),
        (
            json!({"cap_usd": "1.00", "period": "day", "models": "gpt-4o"}),
            "models",
        ),
        (
            json!({"cap_usd": "1.00", "period": "day", "expires_at": "soon"}),
            "expires_at",
        ),
        (
            json!({"cap_usd": "1.00", "period": "day", "metadata": [1]}),
            "metadata",
        ),
        (
            json!({"cap_usd": "1.00", "period": "day", "capp": "1"}),
            "capp",
        ),
    ];
    for (body, param) in cases {
        let (status, error) = admin(&h, "POST", "/admin/v1/keys", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert!(!error["error"]["message"].as_str().unwrap().is_empty());
    }
    let response = h
        .client()
        .post(format!("{}/admin/v1/keys", h.url))
        .bearer_auth(ADMIN)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let (_, list) = admin(&h, "GET", "/admin/v1/keys", None).await;
    assert_eq!(
        list["keys"].as_array().unwrap().len(),
        3,
        "nothing was made"
    );
    let (status, audit) = admin(&h, "GET", "/admin/v1/audit", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(audit["entries"], json!([]), "nothing was changed");
}

#[tokio::test]
async fn admin_routes_need_the_admin_key_and_the_admin_key_opens_nothing_else() {
    let h = gateway().await;
    let (status, error) = admin_as(&h, ALICE, "GET", "/admin/v1/keys", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let (status, _) = admin_as(&h, "wrong", "GET", "/admin/v1/keys", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let response = h
        .client()
        .get(format!("{}/admin/v1/keys", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(call(&h, ADMIN).await, StatusCode::UNAUTHORIZED);
    let (status, _) = admin(&h, "GET", "/admin/v1/nothing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Without an admin key the routes are not there at all.
    let plain = start(Setup::default()).await;
    let (status, error) = admin_as(&plain, ADMIN, "GET", "/admin/v1/keys", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
}

#[tokio::test]
async fn orgs_are_made_bind_their_keys_and_are_deleted_only_when_empty() {
    let h = gateway().await;
    let (status, org) = admin(
        &h,
        "POST",
        "/admin/v1/orgs",
        Some(json!({"id": "labs", "cap_usd": "0.000001", "period": "month"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{org}");
    assert_eq!(org["source"], "api");
    assert_eq!(org["cap_usd_micros"], 1);
    assert_eq!(org["budget"]["remaining_usd_micros"], 1);
    let secret = make_key(
        &h,
        json!({"id": "lab-1", "org": "labs", "cap_usd": "5.00", "period": "day"}),
    )
    .await;
    // The org's cap binds before the key's.
    let response = h
        .post("/v1/chat/completions", &secret, &chat("gpt-4o-mini", "hi"))
        .await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"].as_str().unwrap().contains("labs"),
        "{error}"
    );
    let (status, _) = admin(
        &h,
        "PATCH",
        "/admin/v1/orgs/labs",
        Some(json!({"cap_usd": "10.00"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(call(&h, &secret).await, StatusCode::OK);

    let (status, error) = admin(&h, "DELETE", "/admin/v1/orgs/labs", None).await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::CONFLICT, &json!("org_has_keys"))
    );
    let (_, keys) = admin(&h, "GET", "/admin/v1/keys?org=labs", None).await;
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1);
    admin(&h, "DELETE", "/admin/v1/keys/lab-1", None).await;
    let (status, _) = admin(&h, "DELETE", "/admin/v1/orgs/labs", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = admin(&h, "GET", "/admin/v1/orgs/labs", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, orgs) = admin(&h, "GET", "/admin/v1/orgs", None).await;
    assert_eq!(orgs["orgs"].as_array().unwrap().len(), 1, "{orgs}");
    assert_eq!(orgs["orgs"][0]["source"], "config");
}

#[tokio::test]
async fn lists_page_and_the_audit_keeps_every_change_without_secrets() {
    let h = gateway().await;
    let mut secrets = Vec::new();
    for i in 0..5 {
        secrets.push(
            make_key(
                &h,
                json!({"id": format!("p{i}"), "cap_usd": "1.00", "period": "day"}),
            )
            .await,
        );
    }
    let mut seen = Vec::new();
    let mut path = "/admin/v1/keys?limit=3".to_owned();
    loop {
        let (status, page) = admin(&h, "GET", &path, None).await;
        assert_eq!(status, StatusCode::OK);
        let keys = page["keys"].as_array().unwrap();
        assert!(keys.len() <= 3);
        seen.extend(keys.iter().map(|k| k["id"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => path = format!("/admin/v1/keys?limit=3&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, ["alice", "bob", "p0", "p1", "p2", "p3", "p4", "solo"]);
    let (status, _) = admin(&h, "GET", "/admin/v1/keys?limit=0", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    admin(
        &h,
        "PATCH",
        "/admin/v1/keys/p1",
        Some(json!({"cap_usd": "2.00"})),
    )
    .await;
    admin(&h, "POST", "/admin/v1/keys/p2/rotate", None).await;
    let (_, audit) = admin(&h, "GET", "/admin/v1/audit?limit=2", None).await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        (entries[0]["action"].as_str(), entries[0]["id"].as_str()),
        (Some("rotate"), Some("p2"))
    );
    assert_eq!(entries[1]["action"], "update");
    assert_eq!(entries[1]["old"]["cap_usd_micros"], 1_000_000);
    assert_eq!(entries[1]["new"]["cap_usd_micros"], 2_000_000);
    let next = audit["next"].as_u64().unwrap();
    let (_, rest) = admin(&h, "GET", &format!("/admin/v1/audit?before={next}"), None).await;
    assert_eq!(
        rest["entries"].as_array().unwrap().len(),
        5,
        "five creations"
    );
    let all = format!("{audit}{rest}");
    assert!(!all.contains("key_sha256"), "{all}");
    for secret in &secrets {
        assert!(!all.contains(secret.as_str()));
    }
}

/// Every id a list gives for `query`, page after page of `limit`; and
/// how many pages that took.
async fn ids_paged(h: &Harness, list: &str, query: &str, limit: usize) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut pages = 0;
    let mut path = format!("/admin/v1/{list}?{query}&limit={limit}");
    loop {
        let (status, page) = admin(h, "GET", &path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        pages += 1;
        let items = page[list].as_array().unwrap();
        assert!(items.len() <= limit, "{path}: {page}");
        ids.extend(items.iter().map(|k| k["id"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => path = format!("/admin/v1/{list}?{query}&limit={limit}&after={next}"),
            None => return (ids, pages),
        }
    }
}

#[tokio::test]
async fn a_prefix_searches_ids_on_the_server_and_pages_within_the_search() {
    let h = gateway().await;
    let mut team_a = Vec::new();
    for i in 0..12 {
        let id = format!("team-a.{i:02}");
        // Every other key in the org: the search keeps the org filter.
        let org = if i % 2 == 0 {
            json!("acme")
        } else {
            json!(null)
        };
        make_key(
            &h,
            json!({"id": id, "org": org, "cap_usd": "1.00", "period": "day"}),
        )
        .await;
        team_a.push(id);
    }
    for id in ["team-b.00", "team-a", "Team-a.99", "team-"] {
        make_key(&h, json!({"id": id, "cap_usd": "1.00", "period": "day"})).await;
    }

    let (ids, pages) = ids_paged(&h, "keys", "prefix=team-a.", 5).await;
    assert_eq!((ids, pages), (team_a.clone(), 3));
    let (ids, _) = ids_paged(&h, "keys", "prefix=team-a.&org=acme", 2).await;
    let even: Vec<String> = team_a.iter().step_by(2).cloned().collect();
    assert_eq!(ids, even);
    let (ids, _) = ids_paged(&h, "keys", "prefix=team-a.1", 100).await;
    assert_eq!(ids, ["team-a.10", "team-a.11"]);
    let (ids, _) = ids_paged(&h, "keys", "prefix=team-", 100).await;
    assert_eq!(ids.len(), 15, "{ids:?}");
    assert_eq!(ids.first().map(String::as_str), Some("team-"));
    // Case-sensitive, as ids are.
    let (ids, _) = ids_paged(&h, "keys", "prefix=Team-", 100).await;
    assert_eq!(ids, ["Team-a.99"]);
    // An empty prefix is no search at all.
    let (all, _) = ids_paged(&h, "keys", "prefix=", 1000).await;
    assert_eq!(all.len(), 3 + 16, "{all:?}");

    // Nothing found: an empty page that is the last.
    for query in [
        "prefix=team-c",
        "prefix=team-a.&after=team-a.11",
        "prefix=team-a.&after=zzz",
        "prefix=solo&org=acme",
    ] {
        let (status, page) = admin(&h, "GET", &format!("/admin/v1/keys?{query}"), None).await;
        assert_eq!(status, StatusCode::OK, "{query}: {page}");
        assert_eq!(page, json!({"keys": [], "next": null}), "{query}");
    }
    // An `after` before the search starts it at the prefix.
    let (_, page) = admin(
        &h,
        "GET",
        "/admin/v1/keys?prefix=team-a.&after=a&limit=1",
        None,
    )
    .await;
    assert_eq!(page["keys"][0]["id"], "team-a.00");
    assert_eq!(page["next"], "team-a.00");

    // Orgs search the same way.
    for id in ["ops-east", "ops-west", "opsx"] {
        let body = json!({"id": id, "cap_usd": "5.00", "period": "month"});
        let (status, made) = admin(&h, "POST", "/admin/v1/orgs", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
    }
    let (ids, pages) = ids_paged(&h, "orgs", "prefix=ops-", 1).await;
    assert_eq!(
        (ids, pages),
        (vec!["ops-east".to_owned(), "ops-west".to_owned()], 2)
    );
    let (_, page) = admin(&h, "GET", "/admin/v1/orgs?prefix=nope", None).await;
    assert_eq!(page, json!({"orgs": [], "next": null}));
}

#[tokio::test]
async fn a_prefix_that_no_id_could_start_with_is_refused() {
    let h = gateway().await;
    let long = "a".repeat(65);
    let cases = [
        long.as_str(),
        "team%0Aa",
        "%00",
        "%1B%5B31m",
        "team a",
        "team%2Fa",
        "t%C3%A9am",
        "tg-%22secret%22",
    ];
    for list in ["keys", "orgs"] {
        for prefix in cases {
            let path = format!("/admin/v1/{list}?prefix={prefix}");
            let (status, error) = admin(&h, "GET", &path, None).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {error}");
            assert_eq!(error["error"]["param"], "prefix", "{path}: {error}");
            assert_eq!(error["error"]["type"], "invalid_request_error");
            assert_eq!(error["error"]["code"], "invalid_value");
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.starts_with("prefix must be"), "{message}");
            // Control characters are named, never echoed raw.
            assert!(!message.chars().any(char::is_control), "{message:?}");
        }
        // The longest id is a prefix still.
        let path = format!("/admin/v1/{list}?prefix={}", "a".repeat(64));
        let (status, page) = admin(&h, "GET", &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
    }
}

/// `tollgate admin …` against this gateway: its exit status and output.
fn cli(h: &Harness, args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("admin")
        .args(args)
        .args(["--url", &h.url])
        .env("TOLLGATE_ADMIN_KEY", ADMIN)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_command_line_drives_the_api() {
    let h = gateway().await;
    let h = &h;
    let (ok, out) = tokio::task::block_in_place(|| {
        cli(
            h,
            &[
                "orgs",
                "create",
                "--id",
                "cli-org",
                "--cap-usd",
                "3.00",
                "--period",
                "month",
            ],
        )
    });
    assert!(ok, "{out}");
    let (ok, out) = tokio::task::block_in_place(|| {
        cli(
            h,
            &[
                "keys",
                "create",
                "--id",
                "cli-key",
                "--org",
                "cli-org",
                "--cap-usd",
                "1.50",
                "--period",
                "day",
                "--json",
            ],
        )
    });
    assert!(ok, "{out}");
    let made: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}"));
    let secret = made["secret"].as_str().unwrap().to_owned();
    assert_eq!(call(h, &secret).await, StatusCode::OK);

    let (ok, out) = tokio::task::block_in_place(|| cli(h, &["keys", "list"]));
    assert!(ok, "{out}");
    assert!(
        out.contains("cli-key") && out.contains("alice") && out.contains("1.500000"),
        "{out}"
    );
    let (ok, out) = tokio::task::block_in_place(|| cli(h, &["keys", "disable", "cli-key"]));
    assert!(ok, "{out}");
    assert_eq!(call(h, &secret).await, StatusCode::UNAUTHORIZED);
    let (ok, out) = tokio::task::block_in_place(|| cli(h, &["keys", "enable", "cli-key"]));
    assert!(ok, "{out}");
    let (ok, out) =
        tokio::task::block_in_place(|| cli(h, &["keys", "set", "cli-key", "--cap-usd", "2.00"]));
    assert!(ok, "{out}");
    let (_, shown) = admin(h, "GET", "/admin/v1/keys/cli-key", None).await;
    assert_eq!(shown["cap_usd_micros"], 2_000_000);
    assert_eq!(shown["disabled"], false);
    let (ok, out) =
        tokio::task::block_in_place(|| cli(h, &["keys", "rotate", "cli-key", "--json"]));
    assert!(ok, "{out}");
    let rotated: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}"));
    assert_eq!(call(h, &secret).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        call(h, rotated["secret"].as_str().unwrap()).await,
        StatusCode::OK
    );

    // A refused change exits 1 and says why.
    let (ok, out) =
        tokio::task::block_in_place(|| cli(h, &["keys", "set", "alice", "--cap-usd", "2.00"]));
    assert!(!ok, "{out}");
    assert!(out.contains("config_managed"), "{out}");
    let (ok, out) = tokio::task::block_in_place(|| cli(h, &["orgs", "delete", "cli-org"]));
    assert!(!ok && out.contains("org_has_keys"), "{out}");
    let (ok, out) = tokio::task::block_in_place(|| {
        cli(
            h,
            &[
                "adjust",
                "--key",
                "cli-key",
                "--amount-usd",
                "0.000007",
                "--note",
                "by hand",
            ],
        )
    });
    assert!(ok, "{out}");
    let (_, shown) = admin(h, "GET", "/admin/v1/keys/cli-key", None).await;
    let spent = shown["budget"]["spent_usd_micros"].as_u64().unwrap();
    assert!(spent >= 7, "{shown}");
    let (ok, out) = tokio::task::block_in_place(|| cli(h, &["reservations"]));
    assert!(ok, "{out}");
    let (ok, out) = tokio::task::block_in_place(|| cli(h, &["spend", "--group-by", "key"]));
    assert!(ok && out.contains("cli-key"), "{out}");
    let (ok, out) = tokio::task::block_in_place(|| cli(h, &["keys", "delete", "cli-key"]));
    assert!(ok, "{out}");
    let (ok, out) = tokio::task::block_in_place(|| cli(h, &["orgs", "delete", "cli-org"]));
    assert!(ok, "{out}");
}

#[tokio::test]
async fn adjustments_refund_and_charge_a_key_and_its_org_once() {
    let h = gateway().await;
    assert_eq!(call(&h, ALICE).await, StatusCode::OK);
    h.settled().await;
    let before = h.budget(ALICE).await;
    let spent = before["key"]["spent_usd_micros"].as_u64().unwrap();
    let org_spent = before["org"]["spent_usd_micros"].as_u64().unwrap();
    assert!(spent >= 5, "{before}");

    let refund = json!({"key": "alice", "amount_usd": "-0.000005", "note": "provider outage"});
    let post = |body: Value, idempotency: &'static str| {
        h.client()
            .post(format!("{}/admin/v1/adjustments", h.url))
            .bearer_auth(ADMIN)
            .header("idempotency-key", idempotency)
            .json(&body)
            .send()
    };
    let response = post(refund.clone(), "refund-1").await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let entry: Value = response.json().await.unwrap();
    assert_eq!(entry["status"], "adjustment");
    assert_eq!(entry["amount_usd_micros"], -5);
    assert_eq!(entry["org"], "acme");
    assert_eq!(entry["key_spent_usd_micros"], spent - 5);
    // The same request again (a client retry) is applied once.
    let again: Value = post(refund, "refund-1")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["exec_id"], entry["exec_id"]);
    let after = h.budget(ALICE).await;
    assert_eq!(after["key"]["spent_usd_micros"], spent - 5);
    assert_eq!(after["org"]["spent_usd_micros"], org_spent - 5);
    let adjustments: Vec<_> = h
        .ledger()
        .into_iter()
        .filter(|entry| entry.status == tollgate::budget::LedgerStatus::Adjustment)
        .collect();
    assert_eq!(adjustments.len(), 1);
    assert_eq!(adjustments[0].actual, -5);
    assert_eq!(adjustments[0].note.as_deref(), Some("provider outage"));

    // A charge by hand.
    let (status, _) = admin(
        &h,
        "POST",
        "/admin/v1/adjustments",
        Some(json!({"key": "alice", "amount_usd": "0.000025", "note": "billed twice upstream"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(h.budget(ALICE).await["key"]["spent_usd_micros"], spent + 20);

    // A refund beyond what was spent, a number, a zero, no note, no key.
    for (body, param) in [
        (
            json!({"key": "alice", "amount_usd": "-1000.00", "note": "x"}),
            "amount_usd",
        ),
        (
            json!({"key": "alice", "amount_usd": -0.5, "note": "x"}),
            "amount_usd",
        ),
        (
            json!({"key": "alice", "amount_usd": "0", "note": "x"}),
            "amount_usd",
        ),
        (json!({"key": "alice", "amount_usd": "-0.01"}), "note"),
        (json!({"amount_usd": "-0.01", "note": "x"}), "key"),
    ] {
        let (status, error) = admin(&h, "POST", "/admin/v1/adjustments", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
    let (status, _) = admin(
        &h,
        "POST",
        "/admin/v1/adjustments",
        Some(json!({"key": "nobody", "amount_usd": "-0.01", "note": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(h.budget(ALICE).await["key"]["spent_usd_micros"], spent + 20);
}

#[tokio::test]
async fn open_holds_are_listed_while_their_calls_run() {
    let h = start(Setup {
        mock: tollgate_mock::MockOptions {
            latency: std::time::Duration::from_millis(1500),
            ..Setup::default().mock
        },
        ..Setup::with_admin_key(ADMIN)
    })
    .await;
    let (_, none) = admin(&h, "GET", "/admin/v1/reservations", None).await;
    assert_eq!(none["reservations"], json!([]));
    let body = chat("gpt-4o-mini", "hi");
    let slow = h.post("/v1/chat/completions", ALICE, &body);
    let watch = async {
        let mut seen = Value::Null;
        for _ in 0..100 {
            let (_, holds) = admin(&h, "GET", "/admin/v1/reservations", None).await;
            if holds["reservations"]
                .as_array()
                .is_some_and(|list| !list.is_empty())
            {
                seen = holds;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        seen
    };
    let (response, holds) = tokio::join!(slow, watch);
    assert_eq!(response.status(), StatusCode::OK);
    let hold = &holds["reservations"][0];
    assert_eq!(hold["key"], "alice", "{holds}");
    assert_eq!(hold["org"], "acme");
    assert_eq!(hold["model"], "gpt-4o-mini");
    assert!(hold["amount_usd_micros"].as_u64().unwrap() > 0);
    assert!(hold["deadline"].as_str().unwrap() > hold["started_at"].as_str().unwrap());
    h.settled().await;
    let (_, after) = admin(&h, "GET", "/admin/v1/reservations", None).await;
    assert_eq!(after["reservations"], json!([]), "{after}");
}

#[tokio::test]
async fn spend_reports_group_what_the_ledger_charged() {
    let h = gateway().await;
    for key in [ALICE, ALICE, common::BOB] {
        assert_eq!(call(&h, key).await, StatusCode::OK);
    }
    h.settled().await;
    let ledger = h.ledger();
    let cost_of = |key: &str| -> i64 {
        ledger
            .iter()
            .filter(|entry| entry.key == key)
            .map(|entry| entry.actual)
            .sum()
    };
    let (status, report) = admin(&h, "GET", "/admin/v1/spend?group_by=key", None).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    assert_eq!(rows[0]["group"], "alice");
    assert_eq!(rows[0]["calls"], 2);
    assert_eq!(rows[0]["cost_usd_micros"], cost_of("alice"));
    assert!(rows[0]["input_tokens"].as_u64().unwrap() > 0);
    assert!(rows[0]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(rows[1]["group"], "bob");
    assert_eq!(rows[1]["calls"], 1);
    assert_eq!(rows[1]["cost_usd_micros"], cost_of("bob"));
    let today = chrono::Utc::now().date_naive().to_string();
    assert_eq!(report["to"], today.as_str());

    let (_, by_org) = admin(&h, "GET", "/admin/v1/spend?group_by=org", None).await;
    assert_eq!(by_org["rows"][0]["group"], "acme");
    assert_eq!(by_org["rows"][0]["calls"], 3);
    let (_, by_model) = admin(&h, "GET", "/admin/v1/spend?group_by=model&key=alice", None).await;
    assert_eq!(by_model["rows"][0]["group"], "gpt-4o-mini");
    assert_eq!(by_model["rows"][0]["calls"], 2);
    let (_, by_day) = admin(
        &h,
        "GET",
        &format!("/admin/v1/spend?group_by=day&from={today}&to={today}"),
        None,
    )
    .await;
    assert_eq!(by_day["rows"][0]["group"], today.as_str());
    assert_eq!(by_day["rows"][0]["calls"], 3);
    let (_, none) = admin(
        &h,
        "GET",
        "/admin/v1/spend?group_by=key&from=2020-01-01&to=2020-01-31",
        None,
    )
    .await;
    assert_eq!(none["rows"], json!([]));

    let csv = h
        .client()
        .get(format!("{}/admin/v1/spend?group_by=key&format=csv", h.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(csv.status(), StatusCode::OK);
    assert!(csv.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let text = csv.text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "group,calls,input_tokens,cached_input_tokens,cache_write_tokens,output_tokens,cost_usd_micros");
    assert!(lines[1].starts_with("alice,2,"), "{text}");
    assert!(
        lines[1].ends_with(&format!(",{}", cost_of("alice"))),
        "{text}"
    );

    for query in [
        "group_by=team",
        "group_by=key&from=yesterday",
        "group_by=key&format=xml",
        "group_by=key&from=2026-12-02&to=2026-12-01",
    ] {
        let (status, error) = admin(&h, "GET", &format!("/admin/v1/spend?{query}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {error}");
    }
}
