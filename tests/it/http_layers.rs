//! The HTTP layers around the routes, on real sockets: the access log
//! (the real binary, its stderr read line by line), the request ids,
//! CORS for browser clients (off unless configured; a preflight costs
//! nothing), compression of the admin API and console only, the admin
//! timeout's config.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tollgate_mock::{MockOptions, MockServer};

use crate::common::*;

const ADMIN_KEY: &str = "tg-admin-layers-key";

// === The binary, its log read ===

/// `tollgate serve` on a memory store beside an in-process mock provider,
/// its stderr kept line by line; killed when dropped.
struct Served {
    child: Child,
    url: String,
    log: Arc<Mutex<Vec<String>>>,
    _mock: MockServer,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start(server_extra: &str, mock: MockOptions) -> Served {
        let mock = tollgate_mock::spawn(MockOptions {
            expect_key: Some(PROVIDER_KEY.to_owned()),
            ..mock
        })
        .await
        .unwrap();
        let prices = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prices.toml");
        let sha = |raw: &str| hex::encode(tollgate::config::hash_key(raw));
        let config = format!(
            r#"
[server]
listen = "127.0.0.1:0"
admin_key_sha256 = "{admin}"
{server_extra}

[store]
backend = "memory"

[prices]
file = "{prices}"

[[providers]]
name = "openai"
kind = "openai"
base_url = "http://{mock}"
api_key_env = "TEST_PROVIDER_KEY"
service_tier_default = "priority"  # the mock plays OpenAI itself
models = ["gpt-*"]

[[keys]]
id = "alice"
key_sha256 = "{alice}"
cap_usd = "10.00"
period = "day"
"#,
            admin = sha(ADMIN_KEY),
            prices = prices.display(),
            mock = mock.addr,
            alice = sha(ALICE),
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .env("TEST_PROVIDER_KEY", PROVIDER_KEY)
            .env_remove("TOLLGATE_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for output in [
            Box::new(child.stderr.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stdout.take().unwrap()),
        ] {
            let lines = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(output).lines() {
                    let Ok(line) = line else { break };
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let mut served = Served {
            child,
            url: String::new(),
            log,
            _mock: mock,
            _dir: dir,
        };
        let line = served
            .wait_for_line(|line| line.contains("listening on"))
            .await;
        let addr = line
            .split("listening on ")
            .nth(1)
            .unwrap()
            .split(|c: char| c.is_whitespace() || c == '"')
            .next()
            .unwrap();
        served.url = format!("http://{addr}");
        served
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Posts `body` to the chat route with Alice's key.
    async fn chat(&self, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", self.url))
            .bearer_auth(ALICE)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn wait_for_line(&mut self, found: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(line) = self.lines().into_iter().find(|line| found(line)) {
                return line;
            }
            if Instant::now() > deadline || self.child.try_wait().unwrap().is_some() {
                panic!("no such line in the log:\n{}", self.lines().join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The access log's JSON line of the call `request_id`, waiting for
    /// it; fails if there is more than one.
    async fn access_line(&mut self, request_id: &str) -> Value {
        let tag = format!("\"request_id\":\"{request_id}\"");
        self.wait_for_line(|line| line.contains("tollgate::access") && line.contains(&tag))
            .await;
        let lines: Vec<Value> = self
            .lines()
            .iter()
            .filter(|line| line.contains("tollgate::access") && line.contains(&tag))
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "one access line per call: {lines:?}");
        lines.into_iter().next().unwrap()
    }

    async fn spent(&self) -> u64 {
        let budget: Value = reqwest::Client::new()
            .get(format!("{}/v1/budget", self.url))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        budget["key"]["spent_usd_micros"].as_u64().unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn header<'r>(response: &'r reqwest::Response, name: &str) -> Option<&'r str> {
    response
        .headers()
        .get(name)
        .map(|value| value.to_str().unwrap())
}

fn streamed(model: &str, text: &str) -> Value {
    let mut body = chat(model, text);
    body["stream"] = json!(true);
    body
}

// === Access log and request ids ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_leaves_one_json_access_line_with_its_ids_key_model_status_and_cost() {
    let mut gateway = Served::start(
        "log_format = \"json\"\naccess_log = true",
        MockOptions::default(),
    )
    .await;
    let client = reqwest::Client::new();

    // A plain call, with the client's own request id, and an attempt to
    // choose the gateway's.
    let response = client
        .post(format!("{}/v1/chat/completions", gateway.url))
        .bearer_auth(ALICE)
        .header("x-request-id", "client-id-1")
        .header("x-tollgate-request-id", "chosen-by-client")
        .json(&chat("gpt-4o-mini", "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let request_id = header(&response, "x-tollgate-request-id")
        .unwrap()
        .to_owned();
    assert_ne!(request_id, "chosen-by-client");
    assert_eq!(
        uuid::Uuid::parse_str(&request_id)
            .unwrap()
            .get_version_num(),
        7
    );
    // The response's `x-request-id` stays the provider's.
    let provider_id = header(&response, "x-request-id").unwrap();
    assert!(provider_id.starts_with("req_"), "{provider_id}");
    let cost: u64 = header(&response, "x-tollgate-cost-usd-micros")
        .unwrap()
        .parse()
        .unwrap();
    assert!(cost > 0);
    response.bytes().await.unwrap();
    let line = gateway.access_line(&request_id).await;
    assert_eq!(line["target"], "tollgate::access");
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["client_request_id"], "client-id-1");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["path"], "/v1/chat/completions");
    assert_eq!(line["status"], 200);
    assert_eq!(line["key"], "alice");
    assert_eq!(line["model"], "gpt-4o-mini");
    assert_eq!(line["cost_usd_micros"], cost);
    assert_eq!(line["completed"], true);
    assert!(line["duration_ms"].as_f64().unwrap() > 0.0, "{line}");

    // A stream, read to its end: its line carries the cost settled at its
    // end, which no header shows.
    let response = gateway
        .chat(&streamed("gpt-4o-mini", "mock:tokens=30"))
        .await;
    assert_eq!(response.status(), 200);
    let stream_id = header(&response, "x-tollgate-request-id")
        .unwrap()
        .to_owned();
    assert_ne!(stream_id, request_id);
    response.bytes().await.unwrap();
    let line = gateway.access_line(&stream_id).await;
    assert_eq!(line["status"], 200);
    assert_eq!(line["key"], "alice");
    assert_eq!(line["completed"], true);
    assert!(line.get("client_request_id").is_none(), "{line}");
    let stream_cost = line["cost_usd_micros"].as_u64().unwrap();
    assert!(stream_cost > 0);
    assert_eq!(gateway.spent().await, cost + stream_cost);

    // A refused call: its status, the key, nothing charged.
    let response = gateway.chat(&chat("gpt-unknown-model", "hello")).await;
    assert_eq!(response.status(), 404);
    let refused_id = header(&response, "x-tollgate-request-id")
        .unwrap()
        .to_owned();
    let line = gateway.access_line(&refused_id).await;
    assert_eq!(line["status"], 404);
    assert!(line.get("cost_usd_micros").is_none(), "{line}");

    // Every line is JSON, and none holds a secret.
    let secrets = [ALICE, PROVIDER_KEY, ADMIN_KEY, "Bearer"];
    for line in gateway.lines() {
        let parsed: Result<Value, _> = serde_json::from_str(&line);
        assert!(parsed.is_ok(), "not JSON: {line}");
        for secret in secrets {
            assert!(!line.contains(secret), "{secret} in the log: {line}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_client_leaves_is_logged_once_settled_with_its_cost() {
    let mock = MockOptions {
        tokens_per_sec: Some(20),
        ..MockOptions::default()
    };
    let mut gateway = Served::start("log_format = \"json\"\naccess_log = true", mock).await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .header("x-api-key", ALICE)
        .json(&streamed("gpt-4o-mini", "mock:tokens=200"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let request_id = header(&response, "x-tollgate-request-id")
        .unwrap()
        .to_owned();
    let mut events = response.bytes_stream();
    events.next().await.unwrap().unwrap();
    drop(events);
    let line = gateway.access_line(&request_id).await;
    assert_eq!(line["status"], 200);
    assert_eq!(line["completed"], false);
    assert_eq!(line["key"], "alice");
    let cost = line["cost_usd_micros"].as_u64().unwrap();
    assert!(cost > 0, "{line}");
    assert_eq!(gateway.spent().await, cost);
    for line in gateway.lines() {
        assert!(!line.contains(ALICE), "the key in the log: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_is_plain_text_by_default_and_probes_leave_no_access_line() {
    let mut gateway = Served::start("access_log = true", MockOptions::default()).await;
    let client = reqwest::Client::new();
    for probe in ["/healthz", "/readyz", "/metrics"] {
        let response = client
            .get(format!("{}{probe}", gateway.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let response = gateway.chat(&chat("gpt-4o-mini", "hello")).await;
    let request_id = header(&response, "x-tollgate-request-id")
        .unwrap()
        .to_owned();
    response.bytes().await.unwrap();
    let line = gateway
        .wait_for_line(|line| line.contains("tollgate::access"))
        .await;
    assert!(serde_json::from_str::<Value>(&line).is_err(), "{line}");
    assert!(
        line.contains(&format!("request_id=\"{request_id}\"")),
        "{line}"
    );
    assert!(line.contains("key=\"alice\""), "{line}");
    assert!(line.contains("status=200"), "{line}");
    let access: Vec<String> = gateway
        .lines()
        .into_iter()
        .filter(|line| line.contains("tollgate::access"))
        .collect();
    assert_eq!(access.len(), 1, "{access:?}");
}

#[tokio::test]
async fn a_bad_log_format_stops_the_gateway_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        "[server]\nlog_format = \"xml\"\n[store]\nbackend = \"memory\"\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("server.log_format"), "{stderr}");
    assert!(stderr.contains("\"plain\" or \"json\""), "{stderr}");
}

// === CORS ===

fn preflight(h: &Harness, path: &str, origin: &str) -> reqwest::RequestBuilder {
    h.client()
        .request(reqwest::Method::OPTIONS, format!("{}{path}", h.url))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type,x-stainless-os,openai-organization,x-tollgate-run",
        )
}

#[tokio::test]
async fn without_configured_origins_there_are_no_cors_headers() {
    let h = start(Setup::default()).await;
    let response = preflight(&h, "/v1/chat/completions", "https://app.example")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_client_error(), "{}", response.status());
    assert!(header(&response, "access-control-allow-origin").is_none());
    let response = h
        .client()
        .post(format!("{}/v1/chat/completions", h.url))
        .bearer_auth(ALICE)
        .header("origin", "https://app.example")
        .json(&chat("gpt-4o-mini", "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response
        .headers()
        .keys()
        .all(|name| !name.as_str().starts_with("access-control-")));
}

#[tokio::test]
async fn configured_origins_get_cors_and_a_preflight_charges_nothing() {
    let h = start(Setup {
        server_extra: "cors_allowed_origins = [\"https://app.example\"]",
        ..Setup::default()
    })
    .await;
    // A preflight carries no key and no body: answered as it is.
    let response = preflight(&h, "/v1/chat/completions", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "access-control-allow-origin"),
        Some("https://app.example")
    );
    let allowed = header(&response, "access-control-allow-headers")
        .unwrap()
        .to_owned();
    for name in [
        "authorization",
        "x-api-key",
        "content-type",
        "anthropic-version",
        "x-stainless-os",
        "openai-organization",
        "idempotency-key",
        "x-tollgate-run",
        "x-tollgate-run-cap-usd",
    ] {
        assert!(allowed.contains(name), "{name} not in {allowed}");
    }
    assert!(header(&response, "access-control-allow-methods")
        .unwrap()
        .contains("POST"));
    assert!(h.ledger().is_empty());
    assert_eq!(h.mock.stats.requests(), 0);
    assert_eq!(spent(&h, ALICE).await, 0);

    // Another origin: no grant.
    let response = preflight(&h, "/v1/chat/completions", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(header(&response, "access-control-allow-origin").is_none());

    // The call itself: granted, its cost readable by the page.
    let response = h
        .client()
        .post(format!("{}/v1/chat/completions", h.url))
        .bearer_auth(ALICE)
        .header("origin", "https://app.example")
        .json(&chat("gpt-4o-mini", "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "access-control-allow-origin"),
        Some("https://app.example")
    );
    let exposed = header(&response, "access-control-expose-headers").unwrap();
    assert!(exposed.contains("x-tollgate-cost-usd-micros"), "{exposed}");
    assert!(exposed.contains("x-tollgate-request-id"), "{exposed}");

    // The admin routes are not for other origins' pages.
    let response = h
        .client()
        .get(format!("{}/admin/v1/keys", h.url))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert!(header(&response, "access-control-allow-origin").is_none());
}

// === Compression ===

#[tokio::test]
async fn admin_json_and_the_console_are_compressed_proxied_calls_never() {
    let mut setup = Setup::with_admin_key(ADMIN_KEY);
    setup.mock.tokens_per_sec = None;
    let h = start(setup).await;
    // reqwest here decodes nothing: the bytes are as sent.
    for encoding in ["gzip", "br"] {
        let response = h
            .client()
            .get(format!("{}/admin/v1/keys", h.url))
            .bearer_auth(ADMIN_KEY)
            .header("accept-encoding", encoding)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "content-encoding"), Some(encoding));
        let body = response.bytes().await.unwrap();
        assert!(serde_json::from_slice::<Value>(&body).is_err());
    }
    let response = h
        .client()
        .get(format!("{}/admin/v1/keys", h.url))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert!(header(&response, "content-encoding").is_none());
    let keys: Value = response.json().await.unwrap();
    assert!(keys["keys"].as_array().unwrap().len() >= 3);
    let response = h
        .client()
        .get(format!("{}/admin/console.js", h.url))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(header(&response, "content-encoding"), Some("gzip"));

    for body in [
        chat("gpt-4o-mini", "mock:tokens=200"),
        streamed("gpt-4o-mini", "mock:tokens=200"),
    ] {
        let response = h
            .client()
            .post(format!("{}/v1/chat/completions", h.url))
            .bearer_auth(ALICE)
            .header("accept-encoding", "gzip, br")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(header(&response, "content-encoding").is_none(), "{body}");
        let text = response.text().await.unwrap();
        assert!(text.contains("gpt-4o-mini"), "{text}");
    }
    let response = h
        .client()
        .get(format!("{}/v1/models", h.url))
        .bearer_auth(ALICE)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert!(header(&response, "content-encoding").is_none());
}

// === Admin timeout ===

#[tokio::test]
async fn an_admin_call_that_outlasts_the_timeout_is_answered_503() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let digest = hex::encode(tollgate::config::hash_key(ADMIN_KEY));
    let extra = format!("admin_key_sha256 = \"{digest}\"\nadmin_timeout_secs = 1");
    let h = start(Setup {
        server_extra: Box::leak(extra.into_boxed_str()),
        ..Setup::default()
    })
    .await;
    // A body announced and never sent: the call waits for it until the
    // timeout.
    let mut stream = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let head = format!(
        "POST /admin/v1/keys HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {ADMIN_KEY}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"cap_usd\""
    );
    let started = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("\"code\":\"timeout\"") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("an answer within the timeout")
            .unwrap();
        assert!(
            read > 0,
            "closed without an answer: {:?}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buffer[..read]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

#[tokio::test]
async fn without_access_log_no_call_leaves_an_access_line() {
    let mut gateway = Served::start("log_format = \"json\"", MockOptions::default()).await;
    let response = gateway.chat(&chat("gpt-4o-mini", "hello")).await;
    assert_eq!(response.status(), 200);
    let request_id = header(&response, "x-tollgate-request-id")
        .unwrap()
        .to_owned();
    response.bytes().await.unwrap();
    // The call's own log lines still come, the access line never does.
    let settled = gateway
        .wait_for_line(|line| line.contains(&request_id) || line.contains("listening on"))
        .await;
    assert!(!settled.is_empty());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let access: Vec<String> = gateway
        .lines()
        .into_iter()
        .filter(|line| line.contains("tollgate::access"))
        .collect();
    assert!(access.is_empty(), "{access:?}");
}
