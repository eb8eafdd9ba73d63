//! The admin API under abuse: racing changes of one key, bodies at and
//! over the limit, deeply nested JSON, clients that trickle their request
//! head, ids that look like others, and a deleted id asked for again. Each
//! gets a clear 4xx in OpenAI's shape naming the problem, changes nothing
//! it should not, and leaves the audit trail whole.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::admin_api::{admin, call, gateway, make_key, ADMIN};
use crate::common::{start, Harness, Setup, ALICE};

/// The admin API's body limit (`MAX_BODY_BYTES` in `src/admin.rs`).
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Asserts an OpenAI-shaped error: `{"error": {message, type, code, param}}`.
fn assert_error(body: &Value, code: &str, param: Option<&str>) {
    let error = &body["error"];
    assert_eq!(error["type"], "invalid_request_error", "{body}");
    assert_eq!(error["code"], code, "{body}");
    assert_eq!(error["param"], json!(param), "{body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

/// The audit entries about `id`, oldest first.
async fn audit_of(h: &Harness, id: &str) -> Vec<Value> {
    let (status, audit) = admin(h, "GET", "/admin/v1/audit?limit=1000", None).await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    assert_eq!(audit["next"], Value::Null, "one page holds them all");
    let mut entries: Vec<Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["id"] == id)
        .cloned()
        .collect();
    entries.reverse();
    entries
}

/// Every audit entry, newest first.
async fn audit_all(h: &Harness) -> Vec<Value> {
    let (_, audit) = admin(h, "GET", "/admin/v1/audit?limit=1000", None).await;
    audit["entries"].as_array().unwrap().clone()
}

/// An admin call with `body` sent as the bytes given, not as JSON made
/// here.
async fn admin_raw(h: &Harness, method: &str, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = h
        .client()
        .request(method, format!("{}{path}", h.url))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, value)
}

/// One request written by hand, as no URL-normalizing client would send
/// it; the status and the body of the answer.
async fn raw_request(addr: std::net::SocketAddr, method: &str, target: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nhost: tollgate\r\nauthorization: Bearer {ADMIN}\r\n\
         content-length: 0\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

// === 1. Racing changes of one key ===

/// Twenty cap changes of one key at once: the revision check applies each
/// at most once, against the revision it read; a change that keeps losing
/// is retried a few times and then answered 409 `concurrent_change`. None
/// is lost without a word: every 200 is one audit entry, each entry's
/// `old` is the `new` before it, and the key ends at the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_changes_of_one_key_each_apply_once_or_get_409() {
    let h = gateway().await;
    make_key(
        &h,
        json!({"id": "race", "cap_usd": "1.00", "period": "day"}),
    )
    .await;
    let caps: Vec<u64> = (1..=20).map(|i| 1_000_000 + i * 10_000).collect();
    let answers = join_all(caps.iter().map(|&cap| {
        let h = &h;
        async move {
            let body =
                json!({"cap_usd": format!("{}.{:02}", cap / 1_000_000, cap % 1_000_000 / 10_000)});
            (
                cap,
                admin(h, "PATCH", "/admin/v1/keys/race", Some(body)).await,
            )
        }
    }))
    .await;

    let mut applied = Vec::new();
    for (cap, (status, body)) in &answers {
        match *status {
            StatusCode::OK => {
                assert_eq!(body["cap_usd_micros"], *cap, "{body}");
                applied.push(*cap);
            }
            StatusCode::CONFLICT => assert_error(body, "concurrent_change", None),
            other => panic!("cap {cap}: {other} {body}"),
        }
    }
    assert!(!applied.is_empty(), "{answers:?}");

    let entries = audit_of(&h, "race").await;
    assert_eq!(entries[0]["action"], "create");
    let updates = &entries[1..];
    assert_eq!(updates.len(), applied.len(), "one entry per applied change");
    let mut audited: Vec<u64> = updates
        .iter()
        .map(|entry| {
            assert_eq!(entry["action"], "update", "{entry}");
            entry["new"]["cap_usd_micros"].as_u64().unwrap()
        })
        .collect();
    for pair in entries.windows(2) {
        assert_eq!(
            pair[1]["old"], pair[0]["new"],
            "each change was applied to the one before it: none lost"
        );
    }
    let last = *audited.last().unwrap();
    let (_, key) = admin(&h, "GET", "/admin/v1/keys/race", None).await;
    assert_eq!(key["cap_usd_micros"], last, "{key}");
    audited.sort_unstable();
    applied.sort_unstable();
    assert_eq!(audited, applied, "the entries are the changes answered 200");
}

/// Ten creations of one new id at once: one is made, the others get 409
/// `id_taken`, and the audit holds one creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creations_of_one_id_make_one_key() {
    let h = gateway().await;
    let answers = join_all((0..10).map(|_| {
        admin(
            &h,
            "POST",
            "/admin/v1/keys",
            Some(json!({"id": "dup", "cap_usd": "1.00", "period": "day"})),
        )
    }))
    .await;
    let mut secrets = Vec::new();
    for (status, body) in &answers {
        match *status {
            StatusCode::CREATED => secrets.push(body["secret"].as_str().unwrap().to_owned()),
            StatusCode::CONFLICT => assert_error(body, "id_taken", None),
            other => panic!("{other} {body}"),
        }
    }
    assert_eq!(secrets.len(), 1, "{answers:?}");
    assert_eq!(call(&h, &secrets[0]).await, StatusCode::OK);
    let entries = audit_of(&h, "dup").await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["action"], "create");
}

// === 2. Bodies at and over the limit ===

/// A body of exactly the limit is read (and judged by its fields); one
/// byte more is 413 `request_too_large`, whether it says its length or is
/// sent in chunks, and makes nothing.
#[tokio::test]
async fn a_body_at_the_limit_is_read_and_one_byte_over_is_413() {
    let h = gateway().await;
    let padded = |text: &str, to: usize| {
        let mut body = text.as_bytes()[..text.len() - 1].to_vec();
        body.resize(to - 1, b' ');
        body.push(b'}');
        assert_eq!(body.len(), to);
        body
    };

    let at = padded(
        r#"{"id": "at-limit", "cap_usd": "1.00", "period": "day"}"#,
        MAX_BODY_BYTES,
    );
    let (status, made) = admin_raw(&h, "POST", "/admin/v1/keys", at).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");

    // At the limit, but with more metadata than a key may carry.
    let mut metadata = r#"{"id": "fat", "cap_usd": "1.00", "period": "day", "metadata": {"pad": ""#
        .as_bytes()
        .to_vec();
    metadata.resize(MAX_BODY_BYTES - 3, b'x');
    metadata.extend_from_slice(br#""}}"#);
    assert_eq!(metadata.len(), MAX_BODY_BYTES);
    let (status, error) = admin_raw(&h, "POST", "/admin/v1/keys", metadata).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_error(&error, "invalid_value", Some("metadata"));

    let over = padded(
        r#"{"id": "over-limit", "cap_usd": "1.00", "period": "day"}"#,
        MAX_BODY_BYTES + 1,
    );
    let (status, error) = admin_raw(&h, "POST", "/admin/v1/keys", over).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{error}");
    assert_error(&error, "request_too_large", None);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains(&MAX_BODY_BYTES.to_string()), "{message}");

    // The same, in chunks with no length said up front.
    let chunked = padded(
        r#"{"id": "chunked", "cap_usd": "1.00", "period": "day"}"#,
        MAX_BODY_BYTES + 1,
    );
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        chunked.chunks(4096).map(|c| Ok(c.to_vec())).collect();
    let response = h
        .client()
        .patch(format!("{}/admin/v1/keys/at-limit", h.url))
        .bearer_auth(ADMIN)
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let error: Value = response.json().await.unwrap();
    assert_error(&error, "request_too_large", None);

    for id in ["fat", "over-limit", "chunked"] {
        let (status, _) = admin(&h, "GET", &format!("/admin/v1/keys/{id}"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id} was not made");
    }
    let audit = audit_all(&h).await;
    assert_eq!(
        audit.len(),
        1,
        "only the body at the limit changed anything"
    );
    assert_eq!(
        (&audit[0]["action"], &audit[0]["id"]),
        (&json!("create"), &json!("at-limit"))
    );
    let (_, key) = admin(&h, "GET", "/admin/v1/keys/at-limit", None).await;
    assert_eq!(
        key["cap_usd_micros"], 1_000_000,
        "the chunked PATCH changed nothing"
    );
}

// === 3. Deeply nested JSON ===

/// Ten thousand levels of nesting are a 400 saying the body is not JSON
/// the API reads (the parser stops at its depth limit, so nothing is built
/// that deep), not a stack overflow: the gateway goes on serving.
#[tokio::test]
async fn deeply_nested_json_is_a_400_and_the_gateway_keeps_serving() {
    let h = gateway().await;
    let depth = 10_000;
    let prefix = r#"{"id": "deep", "cap_usd": "1.00", "period": "day", "metadata": "#;
    let bodies = [
        format!("{prefix}{}{}}}", "[".repeat(depth), "]".repeat(depth)),
        format!(
            "{prefix}{}1{}}}",
            r#"{"a":"#.repeat(depth),
            "}".repeat(depth)
        ),
        "[".repeat(depth),
    ];
    for body in bodies {
        assert!(body.len() <= MAX_BODY_BYTES);
        for (method, path) in [
            ("POST", "/admin/v1/keys"),
            ("PATCH", "/admin/v1/keys/alice"),
            ("POST", "/admin/v1/orgs"),
            ("POST", "/admin/v1/adjustments"),
        ] {
            let (status, error) = admin_raw(&h, method, path, body.clone().into_bytes()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {error}");
            assert_error(&error, "invalid_value", None);
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains("not valid JSON"), "{message}");
        }
    }
    let (status, _) = admin(&h, "GET", "/admin/v1/keys/deep", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = admin(&h, "GET", "/admin/v1/keys", None).await;
    assert_eq!(status, StatusCode::OK, "the admin API still serves");
    assert_eq!(call(&h, ALICE).await, StatusCode::OK, "so do calls");
    assert!(audit_all(&h).await.is_empty(), "nothing was changed");
}

// === 4. Slow clients on the admin listener ===

/// A client trickling its request head to the admin listener, a byte at a
/// time, is closed once `server.header_read_timeout_secs` has passed since
/// it began; admin calls from other clients are answered meanwhile.
#[tokio::test]
async fn a_client_trickling_its_head_to_the_admin_listener_is_closed_and_blocks_nobody() {
    let digest = hex::encode(tollgate::config::hash_key(ADMIN));
    let extra = format!("admin_key_sha256 = \"{digest}\"\nheader_read_timeout_secs = 1");
    let h = start(Setup {
        server_extra: Box::leak(extra.into_boxed_str()),
        admin_listener: true,
        ..Setup::default()
    })
    .await;
    let admin_url = h.admin_url.clone().unwrap();
    let admin_addr: std::net::SocketAddr = admin_url.trim_start_matches("http://").parse().unwrap();

    let began = Instant::now();
    let stream = TcpStream::connect(admin_addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        let head = format!(
            "POST /admin/v1/keys HTTP/1.1\r\nhost: tollgate\r\nauthorization: Bearer {ADMIN}\r\n\
             x-slow: {}",
            "a".repeat(1000)
        );
        for byte in head.bytes() {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    // Meanwhile, other admin clients are served at once.
    for _ in 0..3 {
        let asked = Instant::now();
        let response = h
            .client()
            .get(format!("{admin_url}/admin/v1/keys"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(asked.elapsed() < Duration::from_millis(500));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The trickling connection is closed, well before its head is done
    // (50 s at this pace), and no call of it ran.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut rest)).await;
    let waited = began.elapsed();
    assert!(closed.is_ok(), "still open after {waited:?}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "closed after {waited:?}"
    );
    trickle.abort();
    let response = h
        .client()
        .get(format!("{admin_url}/admin/v1/audit"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let audit: Value = response.json().await.unwrap();
    assert_eq!(audit["entries"], json!([]), "{audit}");
}

// === 5. Ids that look alike ===

/// Only `[A-Za-z0-9._-]{1,64}` is an id, and not `.` or `..`: a look-alike
/// gets 400 naming `id` — in a body, and in a path, which is not decoded
/// (`agent%2D1` is not `agent-1`). Ids are case-sensitive: `Agent-1` is
/// another key, and `AGENT-1` none.
#[tokio::test]
async fn ids_that_look_alike_are_refused_naming_id() {
    let h = gateway().await;
    let secret = make_key(
        &h,
        json!({"id": "agent-1", "cap_usd": "1.00", "period": "day"}),
    )
    .await;
    let look_alikes = [
        "\u{430}gent-1",   // Cyrillic а
        "agent-1\u{200b}", // zero-width space
        "\u{feff}agent-1", // zero-width no-break space
        "agent-1 ",
        " agent-1",
        "agent-1\t",
        "agent-1\n",
        "agent-1\u{0}",
        "\u{ff41}gent-1", // fullwidth a
        "agent\u{2010}1", // Unicode hyphen
        "agent-1\u{301}", // a combining accent
        ".",
        "..",
        "../alice",
        "agent/1",
        "agent\\1",
        "agent%2D1",
        "%61gent-1",
        "",
    ];
    for id in look_alikes {
        for path in ["/admin/v1/keys", "/admin/v1/orgs"] {
            let (status, error) = admin(
                &h,
                "POST",
                path,
                Some(json!({"id": id, "cap_usd": "1.00", "period": "day"})),
            )
            .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{id:?} at {path}: {error}");
            assert_error(&error, "invalid_value", Some("id"));
        }
    }
    let (status, error) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "agent-2", "org": "\u{430}cme", "cap_usd": "1.00", "period": "day"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_error(&error, "invalid_value", Some("org"));

    // In a path: as reqwest sends it (Unicode percent-encoded; `..`, `.`
    // and their encoded forms resolved away before it leaves).
    let in_paths = [
        "%D0%B0gent-1",
        "agent-1%E2%80%8B",
        "agent-1%20",
        "agent%2D1",
        "%61gent-1",
        "agent-1%2Frotate",
        "agent-1%00",
    ];
    for id in in_paths {
        for (method, path, body) in [
            ("GET", format!("/admin/v1/keys/{id}"), None),
            (
                "PATCH",
                format!("/admin/v1/keys/{id}"),
                Some(json!({"cap_usd": "9.00"})),
            ),
            ("POST", format!("/admin/v1/keys/{id}/rotate"), None),
            ("DELETE", format!("/admin/v1/keys/{id}"), None),
            ("GET", format!("/admin/v1/orgs/{id}"), None),
            ("DELETE", format!("/admin/v1/orgs/{id}"), None),
        ] {
            let (status, error) = admin(&h, method, &path, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {error}");
            assert_error(&error, "invalid_value", Some("id"));
        }
    }
    // `..` and `.` as sent by a client that does not normalize the path.
    for target in [
        "/admin/v1/keys/..",
        "/admin/v1/keys/%2e%2e",
        "/admin/v1/keys/../orgs",
        "/admin/v1/keys/./rotate",
    ] {
        for method in ["GET", "DELETE"] {
            let (status, body) = raw_request(h.addr, method, target).await;
            assert_eq!(status, 400, "{method} {target}: {body}");
            let error: Value = serde_json::from_str(&body).unwrap();
            assert_error(&error, "invalid_value", Some("id"));
        }
    }

    // Case-sensitive: another key, and neither reaches the other.
    let other = make_key(
        &h,
        json!({"id": "Agent-1", "cap_usd": "2.00", "period": "day"}),
    )
    .await;
    let (status, _) = admin(&h, "GET", "/admin/v1/keys/AGENT-1", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, key) = admin(&h, "GET", "/admin/v1/keys/agent-1", None).await;
    assert_eq!(key["cap_usd_micros"], 1_000_000, "{key}");
    let (_, key) = admin(&h, "GET", "/admin/v1/keys/Agent-1", None).await;
    assert_eq!(key["cap_usd_micros"], 2_000_000, "{key}");
    assert_eq!(call(&h, &secret).await, StatusCode::OK);
    assert_eq!(call(&h, &other).await, StatusCode::OK);

    let audit = audit_all(&h).await;
    let changed: Vec<(&str, &str)> = audit
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        changed,
        [("create", "Agent-1"), ("create", "agent-1")],
        "no look-alike changed anything"
    );
}

// === 6. A deleted id asked for again ===

/// A deleted id stays taken (docs/admin.md, DESIGN "Control plane"): made
/// again it gets 409 `id_taken`, for a key and for an org alike; the old
/// secret opens nothing; changing the deleted key is 404; and the audit
/// keeps its one lifetime, creation to deletion, with nothing after.
#[tokio::test]
async fn a_deleted_id_stays_taken_and_its_old_secret_opens_nothing() {
    let h = gateway().await;
    let old = make_key(&h, json!({"id": "x", "cap_usd": "1.00", "period": "day"})).await;
    assert_eq!(call(&h, &old).await, StatusCode::OK);
    let (status, _) = admin(&h, "DELETE", "/admin/v1/keys/x", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(call(&h, &old).await, StatusCode::UNAUTHORIZED);

    for _ in 0..2 {
        let (status, error) = admin(
            &h,
            "POST",
            "/admin/v1/keys",
            Some(json!({"id": "x", "cap_usd": "5.00", "period": "day"})),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT, "{error}");
        assert_error(&error, "id_taken", None);
        assert!(
            error["error"]["message"].as_str().unwrap().contains("`x`"),
            "{error}"
        );
    }
    for (method, path, body) in [
        ("GET", "/admin/v1/keys/x", None),
        (
            "PATCH",
            "/admin/v1/keys/x",
            Some(json!({"cap_usd": "5.00"})),
        ),
        (
            "PATCH",
            "/admin/v1/keys/x",
            Some(json!({"disabled": false})),
        ),
        ("POST", "/admin/v1/keys/x/rotate", None),
        ("DELETE", "/admin/v1/keys/x", None),
    ] {
        let (status, error) = admin(&h, method, path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {error}");
        assert_error(&error, "not_found", None);
    }
    assert_eq!(call(&h, &old).await, StatusCode::UNAUTHORIZED);
    let (_, list) = admin(&h, "GET", "/admin/v1/keys?prefix=x", None).await;
    assert_eq!(list["keys"], json!([]), "{list}");

    let entries = audit_of(&h, "x").await;
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["create", "delete"], "{entries:?}");
    assert_eq!(entries[0]["new"]["cap_usd_micros"], 1_000_000);
    assert_eq!(entries[1]["old"]["deleted_at"], Value::Null);
    assert!(entries[1]["new"]["deleted_at"].is_string(), "{entries:?}");

    // An org the same way.
    let (status, _) = admin(
        &h,
        "POST",
        "/admin/v1/orgs",
        Some(json!({"id": "o", "cap_usd": "1.00", "period": "day"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = admin(&h, "DELETE", "/admin/v1/orgs/o", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, error) = admin(
        &h,
        "POST",
        "/admin/v1/orgs",
        Some(json!({"id": "o", "cap_usd": "1.00", "period": "day"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_error(&error, "id_taken", None);
    let (status, error) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(json!({"id": "y", "org": "o", "cap_usd": "1.00", "period": "day"})),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a deleted org binds no key: {error}"
    );
    let actions: Vec<String> = audit_of(&h, "o")
        .await
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(actions, ["create", "delete"]);
}
