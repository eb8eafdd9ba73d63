//! `tollgate admin …`, the real binary, against a fake admin API on port 0
//! that answers canned JSON and records every request it gets: what the
//! client sends (the admin key, the JSON body, the pages it follows) and
//! what it prints and exits with.

use std::process::Output;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::refusing_port;

const ADMIN_KEY: &str = "tg-admin-test-key";

/// One request as the fake API read it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// Path and query, as sent.
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// The canned answer to a request: status, content type, body.
type Answer = (u16, &'static str, String);

/// A fake admin API: one request per connection, answered by `route`.
struct FakeApi {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeApi {
    async fn start(route: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let route = Arc::new(route);
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (record, route) = (record.clone(), route.clone());
                tokio::spawn(async move {
                    let mut stream = stream;
                    serve_one(&mut stream, &record, &*route).await;
                });
            }
        });
        FakeApi {
            url: format!("http://{addr}"),
            seen,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one HTTP/1.1 request, records it, writes the route's answer and
/// closes the connection.
async fn serve_one(
    stream: &mut TcpStream,
    record: &Mutex<Vec<Seen>>,
    route: &(dyn Fn(&Seen) -> Answer + Send + Sync),
) -> Option<()> {
    let mut buffer = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let seen = Seen {
        method,
        target,
        headers,
        body: String::from_utf8(body).ok()?,
    };
    let (status, content_type, answer) = route(&seen);
    record.lock().unwrap().push(seen);
    let response = format!(
        "HTTP/1.1 {status} Fake\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
        answer.len()
    );
    stream.write_all(response.as_bytes()).await.ok()?;
    stream.shutdown().await.ok()
}

fn ok(body: Value) -> Answer {
    (200, "application/json", body.to_string())
}

fn not_found(seen: &Seen) -> Answer {
    (
        404,
        "application/json",
        json!({"error": {"message": format!("no route {}", seen.target),
                         "type": "invalid_request_error", "param": null, "code": "not_found"}})
        .to_string(),
    )
}

/// A KEY as the contract shapes it.
fn key(id: &str) -> Value {
    json!({
        "id": id, "org": "acme", "cap_usd_micros": 25_000_000, "period": "day",
        "models": ["gpt-4o*", "claude-*"], "disabled": false, "expires_at": null,
        "created_at": "2026-11-29T10:00:00Z", "source": "api", "metadata": {"team": "search"},
        "on_insufficient": "refuse", "alert_at": null,
        "budget": {"id": id, "period": "day", "period_id": "2026-11-29",
                   "cap_usd_micros": 25_000_000, "spent_usd_micros": 1_200,
                   "reserved_usd_micros": 0, "remaining_usd_micros": 24_998_800,
                   "resets_at": "2026-11-30T00:00:00Z"},
    })
}

/// Runs `tollgate admin ARGS` with the admin key set (or not).
async fn admin(url: &str, admin_key: Option<&str>, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .arg("admin")
        .args(args)
        .arg("--url")
        .arg(url)
        .env_remove("TOLLGATE_ADMIN_URL")
        .env_remove("RUST_LOG");
    match admin_key {
        Some(key) => command.env("TOLLGATE_ADMIN_KEY", key),
        None => command.env_remove("TOLLGATE_ADMIN_KEY"),
    };
    command.output().await.unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_create_sends_the_admin_key_and_the_body_and_prints_the_secret_once() {
    let api = FakeApi::start(|seen| match (seen.method.as_str(), seen.target.as_str()) {
        ("POST", "/admin/v1/keys") => (
            201,
            "application/json",
            json!({"key": key("alice"), "secret": "tg-fresh-secret-123"}).to_string(),
        ),
        _ => not_found(seen),
    })
    .await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "keys",
            "create",
            "--id",
            "alice",
            "--org",
            "acme",
            "--cap-usd",
            "25.00",
            "--period",
            "day",
            "--models",
            "gpt-4o*,claude-*",
            "--expires-at",
            "2026-12-31T23:59:59Z",
            "--metadata",
            r#"{"team":"search"}"#,
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));

    let seen = api.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let request = &seen[0];
    assert_eq!(
        request.header("authorization"),
        Some("Bearer tg-admin-test-key")
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(
        request.json(),
        json!({
            "id": "alice", "org": "acme", "cap_usd": "25.00", "period": "day",
            "models": ["gpt-4o*", "claude-*"], "expires_at": "2026-12-31T23:59:59Z",
            "metadata": {"team": "search"},
        })
    );

    let text = stdout(&output);
    assert!(text.contains("\n    tg-fresh-secret-123\n"), "{text}");
    assert!(text.contains("shown only this once"), "{text}");
    assert!(text.contains("cap_usd          25.000000"), "{text}");
    assert!(text.contains("spent_usd        0.001200"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_list_all_follows_next_to_the_end() {
    let api = FakeApi::start(|seen| match seen.target.as_str() {
        "/admin/v1/keys?limit=2" => ok(json!({"keys": [key("a"), key("b")], "next": "b"})),
        "/admin/v1/keys?limit=2&after=b" => ok(json!({"keys": [key("c"), key("d")], "next": "d"})),
        "/admin/v1/keys?limit=2&after=d" => ok(json!({"keys": [key("e")], "next": null})),
        _ => not_found(seen),
    })
    .await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &["keys", "list", "--limit", "2", "--all"],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let targets: Vec<String> = api.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(
        targets,
        [
            "/admin/v1/keys?limit=2",
            "/admin/v1/keys?limit=2&after=b",
            "/admin/v1/keys?limit=2&after=d"
        ]
    );
    let text = stdout(&output);
    let ids: Vec<&str> = text
        .lines()
        .skip(1)
        .take(5)
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e"], "{text}");
    assert!(text.ends_with("5 keys\n"), "{text}");

    // For scripts: every page in one body.
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &["keys", "list", "--limit", "2", "--all", "--json"],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let all: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(all["keys"].as_array().unwrap().len(), 5);
    assert_eq!(all["keys"][4], key("e"));
    assert_eq!(all["next"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_prefix_searches_on_the_server_and_every_page_keeps_it() {
    let api = FakeApi::start(|seen| match seen.target.as_str() {
        "/admin/v1/keys?prefix=team-a.&limit=2" => ok(json!({
            "keys": [key("team-a.1"), key("team-a.2")], "next": "team-a.2"
        })),
        "/admin/v1/keys?prefix=team-a.&limit=2&after=team-a.2" => {
            ok(json!({"keys": [key("team-a.3")], "next": null}))
        }
        "/admin/v1/orgs?prefix=ac" => ok(json!({"orgs": [], "next": null})),
        _ => not_found(seen),
    })
    .await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "keys", "list", "--prefix", "team-a.", "--limit", "2", "--all",
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.ends_with("3 keys\n"), "{text}");
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &["orgs", "list", "--prefix", "ac"],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let targets: Vec<String> = api.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(
        targets,
        [
            "/admin/v1/keys?prefix=team-a.&limit=2",
            "/admin/v1/keys?prefix=team-a.&limit=2&after=team-a.2",
            "/admin/v1/orgs?prefix=ac",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_prints_the_apis_body_as_it_came() {
    // Fields deliberately out of alphabetical order: the output keeps them.
    let body = r#"{"id":"alice","org":"acme","cap_usd_micros":25000000,"budget":null}"#;
    let api = FakeApi::start(move |seen| match seen.target.as_str() {
        "/admin/v1/keys/alice" => (200, "application/json", body.to_owned()),
        _ => not_found(seen),
    })
    .await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &["keys", "show", "alice", "--json"],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "{\n  \"id\": \"alice\",\n  \"org\": \"acme\",\n  \"cap_usd_micros\": 25000000,\n  \"budget\": null\n}\n"
    );
    assert_eq!(api.seen()[0].method, "GET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_exits_1_with_its_status_message_and_code() {
    let api = FakeApi::start(|seen| match (seen.method.as_str(), seen.target.as_str()) {
        ("PATCH", "/admin/v1/keys/alice") => (
            409,
            "application/json",
            json!({"error": {"message": "key alice is set in the config file: edit the file",
                             "type": "invalid_request_error", "param": null,
                             "code": "config_managed"}})
            .to_string(),
        ),
        _ => not_found(seen),
    })
    .await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &["keys", "set", "alice", "--cap-usd", "30", "--no-expiry"],
    )
    .await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let error = stderr(&output);
    assert!(
        error.contains("409 Conflict to PATCH /admin/v1/keys/alice: key alice is set in the config file: edit the file (code config_managed)"),
        "{error}"
    );
    assert_eq!(stdout(&output), "");
    assert_eq!(
        api.seen()[0].json(),
        json!({"cap_usd": "30", "expires_at": null})
    );

    // With --json the error body reaches stdout too, for a script to read.
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &["keys", "disable", "alice", "--json"],
    )
    .await;
    assert_eq!(output.status.code(), Some(1));
    let body: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(body["error"]["code"], "config_managed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_admin_key_nothing_is_sent() {
    let api = FakeApi::start(not_found).await;
    let output = admin(&api.url, None, &["keys", "list"]).await;
    assert_eq!(output.status.code(), Some(1));
    let error = stderr(&output);
    assert!(error.contains("TOLLGATE_ADMIN_KEY is not set"), "{error}");
    assert!(api.seen().is_empty());
    let output = admin(&api.url, Some("  "), &["reservations"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(api.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_is_named() {
    let (_socket, closed) = refusing_port();
    let url = format!("http://{closed}");
    let output = admin(&url, Some(ADMIN_KEY), &["reservations"]).await;
    assert_eq!(output.status.code(), Some(1));
    let error = stderr(&output);
    assert!(
        error.contains(&format!(
            "cannot reach the admin API at {url}/admin/v1/reservations"
        )),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_csv_is_printed_as_it_came_and_adjust_sends_a_signed_string() {
    let csv = "group,calls,cost_usd_micros\ngpt-4o,2,360\n";
    let api = FakeApi::start(
        move |seen| match (seen.method.as_str(), seen.target.as_str()) {
            ("GET", "/admin/v1/spend?group_by=model&key=alice&from=2026-11-01&format=csv") => {
                (200, "text/csv", csv.to_owned())
            }
            ("POST", "/admin/v1/adjustments") => (
                201,
                "application/json",
                json!({"key": "alice", "status": "adjustment", "amount_usd_micros": -250_000,
                   "note": "refund"})
                .to_string(),
            ),
            _ => not_found(seen),
        },
    )
    .await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "spend",
            "--group-by",
            "model",
            "--key",
            "alice",
            "--from",
            "2026-11-01",
            "--csv",
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), csv);

    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "adjust",
            "--key",
            "alice",
            "--amount-usd",
            "-0.25",
            "--note",
            "refund",
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("amount_usd  -0.250000"));
    assert_eq!(
        api.seen()[1].json(),
        json!({"key": "alice", "amount_usd": "-0.25", "note": "refund"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_error_exits_2_before_any_request() {
    let api = FakeApi::start(not_found).await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &["keys", "create", "--period", "day"],
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--cap-usd"));
    assert!(api.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_caps_and_rate_limits_are_sent_as_flags_and_shown() {
    let mut with_limits = key("alice");
    with_limits["rpm"] = json!(60);
    with_limits["tpm"] = Value::Null;
    with_limits["model_caps"] = json!([
        {"name": "opus", "models": ["claude-opus-*", "claude-3-opus*"], "cap_usd": "50.00",
         "cap_usd_micros": 50_000_000, "period": "day", "rpm": 10, "tpm": null},
    ]);
    with_limits["budget"]["model_caps"] = json!([
        {"name": "opus", "models": ["claude-opus-*", "claude-3-opus*"], "period": "day",
         "period_id": "2026-11-29", "cap_usd_micros": 50_000_000, "spent_usd_micros": 2_500,
         "reserved_usd_micros": 0, "remaining_usd_micros": 49_997_500,
         "resets_at": "2026-11-30T00:00:00Z"},
    ]);
    let answer = json!({"key": with_limits, "secret": "tg-s"});
    let api = FakeApi::start(
        move |seen| match (seen.method.as_str(), seen.target.as_str()) {
            ("POST", "/admin/v1/keys") => (201, "application/json", answer.to_string()),
            ("PATCH", "/admin/v1/orgs/acme") => ok(json!({
                "id": "acme", "cap_usd_micros": 500_000_000, "period": "month", "source": "api",
                "created_at": null, "alert_at": [], "model_caps": [], "rpm": null, "tpm": 1000,
                "budget": null,
            })),
            _ => not_found(seen),
        },
    )
    .await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "keys",
            "create",
            "--id",
            "alice",
            "--cap-usd",
            "25.00",
            "--period",
            "day",
            "--rpm",
            "60",
            "--model-cap",
            "name=opus,models=claude-opus-*|claude-3-opus*,cap_usd=50.00,period=day,rpm=10",
            "--model-cap",
            "name=minis,models=gpt-4o-mini,tpm=100000",
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        api.seen()[0].json(),
        json!({
            "id": "alice", "cap_usd": "25.00", "period": "day", "rpm": 60,
            "model_caps": [
                {"name": "opus", "models": ["claude-opus-*", "claude-3-opus*"],
                 "cap_usd": "50.00", "period": "day", "rpm": 10},
                {"name": "minis", "models": ["gpt-4o-mini"], "tpm": 100000},
            ],
        })
    );
    let text = stdout(&output);
    assert!(text.contains("\nrpm              60\n"), "{text}");
    assert!(text.contains("\nmodel caps\n"), "{text}");
    assert!(
        text.contains("  opus  claude-opus-*, claude-3-opus*  day     50.000000   0.002500"),
        "{text}"
    );

    // `set` clears with --no-…: null for a rate, [] for the groups.
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "orgs",
            "set",
            "acme",
            "--no-rpm",
            "--tpm",
            "1000",
            "--no-model-caps",
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        api.seen()[1].json(),
        json!({"rpm": null, "tpm": 1000, "model_caps": []})
    );
    assert!(
        stdout(&output).contains("\ntpm            1000\n"),
        "{}",
        stdout(&output)
    );

    // A malformed group is a usage error, and nothing is sent.
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &["keys", "set", "alice", "--model-cap", "opus:50"],
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("name=NAME,models=GLOB|GLOB"),
        "{}",
        stderr(&output)
    );
    assert_eq!(api.seen().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_template_is_set_by_flags_and_customers_are_listed_page_by_page() {
    let mut with_template = key("alice");
    with_template["customer_cap_usd"] = json!("0.50");
    with_template["customer_cap_usd_micros"] = json!(500_000);
    with_template["customer_period"] = json!("day");
    with_template["customer_rpm"] = Value::Null;
    with_template["customer_tpm"] = json!(5000);
    with_template["customer_from"] = json!("header");
    with_template["customer_required"] = json!(true);
    let customer = |id: &str, spent: Option<u64>| {
        let budget = match spent {
            Some(spent) => json!({"period": "day", "period_id": "2026-11-29",
                "cap_usd_micros": 500_000, "spent_usd_micros": spent, "reserved_usd_micros": 0,
                "remaining_usd_micros": 500_000 - spent, "resets_at": "2026-11-30T00:00:00Z"}),
            None => Value::Null,
        };
        json!({"id": id, "last_call": "2026-11-29T10:00:00Z", "budget": budget})
    };
    let first =
        json!({"customers": [customer("c1@example.com", Some(1_200))], "next": "c1@example.com"});
    let second = json!({"customers": [customer("c2", Some(0))], "next": null});
    let api = FakeApi::start(
        move |seen| match (seen.method.as_str(), seen.target.as_str()) {
            ("PATCH", "/admin/v1/keys/alice") => ok(with_template.clone()),
            ("GET", "/admin/v1/customers?key=alice&limit=1") => ok(first.clone()),
            ("GET", "/admin/v1/customers?key=alice&limit=1&after=c1%40example.com") => {
                ok(second.clone())
            }
            _ => not_found(seen),
        },
    )
    .await;
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "keys",
            "set",
            "alice",
            "--customer-cap-usd",
            "0.50",
            "--customer-period",
            "day",
            "--no-customer-rpm",
            "--customer-tpm",
            "5000",
            "--customer-required",
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        api.seen()[0].json(),
        json!({"customer_cap_usd": "0.50", "customer_period": "day", "customer_rpm": null,
               "customer_tpm": 5000, "customer_required": true})
    );
    let text = stdout(&output);
    assert!(
        text.contains("\neach customer\n  cap_usd   0.500000\n  period    day\n"),
        "{text}"
    );
    assert!(text.contains("\n  required  true\n"), "{text}");

    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "customers",
            "list",
            "--key",
            "alice",
            "--limit",
            "1",
            "--all",
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "id              last_call             spent_usd  remaining_usd   cap_usd",
            "c1@example.com  2026-11-29T10:00:00Z   0.001200       0.498800  0.500000",
            "c2              2026-11-29T10:00:00Z   0.000000       0.500000  0.500000",
            "2 customers",
        ],
        "{text}"
    );
    assert_eq!(api.seen().len(), 3);

    // A cap without its period is a usage error, and nothing is sent.
    let output = admin(
        &api.url,
        Some(ADMIN_KEY),
        &[
            "keys",
            "create",
            "--cap-usd",
            "1",
            "--period",
            "day",
            "--customer-cap-usd",
            "1",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--customer-period"),
        "{}",
        stderr(&output)
    );
    assert_eq!(api.seen().len(), 3);
}
