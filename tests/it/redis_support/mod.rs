//! Real processes for the Redis integration tests: gateways run as the
//! real `tollgate serve` binary on a config written for the test, Redis
//! servers the test owns (`servers`), and readers of a tag's books through
//! the library's [`RedisStore`].
//!
//! Tests on the shared Redis (one `redis-server` this test process starts
//! on a free port, [`shared_redis_url`]) keep to their own hash tags: every
//! org and key id carries a fresh UUID, and nothing is ever flushed.

#![allow(dead_code)]

pub mod servers;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use tollgate::budget::{Reconciliation, RedisStore, Rules, Upkeep};
// Ledger amounts are signed; tests compare them with unsigned costs.
#[allow(unused_imports)]
pub use tollgate::money::delta;
use tollgate::usage::Usage;
use tollgate_mock::{MockOptions, MockServer, MockStats};

/// The URL of the Redis shared by this process's tests, started on first
/// use.
pub fn shared_redis_url() -> &'static str {
    servers::shared().url()
}

/// The port of the Redis shared by this process's tests.
pub fn shared_redis_port() -> u16 {
    servers::shared().port()
}
/// The provider credential the mock expects and the gateways hold.
pub const PROVIDER_KEY: &str = "sk-provider-secret";
/// A gateway in a debug build on a busy machine can take a while to load
/// its tokenizers.
const GATEWAY_START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a listening gateway may take to reach its store: a TLS Redis
/// Cluster's handshakes included.
const GATEWAY_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh id: `prefix` and a UUID, so tests never share budget data.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// The mock provider, answering only with the provider key.
/// Streams are paced per call with `mock:sleep_ms`.
pub async fn mock() -> MockServer {
    crate::limits::raise_open_files();
    tollgate_mock::spawn(MockOptions {
        expect_key: Some(PROVIDER_KEY.to_owned()),
        ..MockOptions::default()
    })
    .await
    .unwrap()
}

// === Config ===

#[derive(Clone)]
pub struct OrgSpec {
    pub id: String,
    pub cap: &'static str,
    pub period: &'static str,
}

#[derive(Clone)]
pub struct KeySpec {
    pub id: String,
    /// What the client sends as its bearer token.
    pub raw: String,
    pub org: Option<String>,
    pub cap: &'static str,
    pub period: &'static str,
    /// More TOML lines for its `[[keys]]` table (limits, a customer
    /// template).
    pub extra: String,
}

impl KeySpec {
    /// A key with a fresh id and a fresh raw value.
    pub fn new(name: &str, org: Option<&OrgSpec>, cap: &'static str, period: &'static str) -> Self {
        KeySpec {
            id: unique(name),
            raw: unique(&format!("tg-{name}")),
            org: org.map(|org| org.id.clone()),
            cap,
            period,
            extra: String::new(),
        }
    }

    /// The hash tag its budget data lives under.
    pub fn tag(&self) -> String {
        tollgate::budget::tag_for(self.org.as_deref(), &self.id)
    }
}

/// The config of one gateway process.
#[derive(Clone)]
pub struct GatewayConfig {
    pub redis_url: String,
    /// When set, the gateway keeps its books in this SQLite file instead
    /// of Redis.
    pub sqlite_path: Option<std::path::PathBuf>,
    /// The mock provider's address; both providers point at it.
    pub provider: std::net::SocketAddr,
    pub upstream_timeout_secs: u64,
    pub reservation_ttl_secs: u64,
    pub on_store_error: &'static str,
    /// `store.on_expiry`: "charge" or "release".
    pub on_expiry: &'static str,
    pub orgs: Vec<OrgSpec>,
    pub keys: Vec<KeySpec>,
    /// More `[store]` lines, verbatim (e.g. `redis_tls_ca_file = "…"`).
    pub store_extra: String,
    /// More `[server]` lines, verbatim (e.g. `admin_key_sha256 = "…"`).
    pub server_extra: String,
}

impl GatewayConfig {
    pub fn new(redis_url: &str, provider: std::net::SocketAddr) -> Self {
        GatewayConfig {
            redis_url: redis_url.to_owned(),
            sqlite_path: None,
            provider,
            upstream_timeout_secs: 30,
            reservation_ttl_secs: 60,
            on_store_error: "reject",
            on_expiry: "charge",
            orgs: Vec::new(),
            keys: Vec::new(),
            store_extra: String::new(),
            server_extra: String::new(),
        }
    }

    pub fn toml(&self) -> String {
        let prices = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prices.toml");
        let mut text = format!(
            r#"
[server]
listen = "127.0.0.1:0"
upstream_timeout_secs = {timeout}
{server_extra}

[store]
{backend}
{store_extra}
reservation_ttl_secs = {ttl}
on_store_error = "{on_error}"
on_expiry = "{on_expiry}"

[prices]
file = "{prices}"

[[providers]]
name = "openai"
kind = "openai"
base_url = "http://{provider}"
api_key_env = "TEST_PROVIDER_KEY"
service_tier_default = "priority"  # the mock plays OpenAI itself
models = ["gpt-*"]

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "http://{provider}"
api_key_env = "TEST_PROVIDER_KEY"
models = ["claude-*"]
"#,
            timeout = self.upstream_timeout_secs,
            backend = match &self.sqlite_path {
                Some(path) => format!("backend = \"sqlite\"\nsqlite_path = \"{}\"", path.display()),
                None => format!("backend = \"redis\"\nredis_url = \"{}\"", self.redis_url),
            },
            store_extra = self.store_extra,
            server_extra = self.server_extra,
            ttl = self.reservation_ttl_secs,
            on_error = self.on_store_error,
            on_expiry = self.on_expiry,
            prices = prices.display(),
            provider = self.provider,
        );
        for org in &self.orgs {
            text.push_str(&format!(
                "\n[[orgs]]\nid = \"{}\"\ncap_usd = \"{}\"\nperiod = \"{}\"\n",
                org.id, org.cap, org.period
            ));
        }
        for key in &self.keys {
            text.push_str(&format!(
                "\n[[keys]]\nid = \"{}\"\nkey_sha256 = \"{}\"\ncap_usd = \"{}\"\nperiod = \"{}\"\n",
                key.id,
                hex::encode(tollgate::config::hash_key(&key.raw)),
                key.cap,
                key.period
            ));
            if let Some(org) = &key.org {
                text.push_str(&format!("org = \"{org}\"\n"));
            }
            text.push_str(&key.extra);
            text.push('\n');
        }
        text
    }

    /// Every tag the configured keys' data lives under.
    pub fn tags(&self) -> Vec<String> {
        let mut tags: Vec<String> = self.keys.iter().map(KeySpec::tag).collect();
        tags.sort();
        tags.dedup();
        tags
    }
}

// === Gateway processes ===

/// `tollgate serve` as a child process; SIGKILLed when dropped.
pub struct GatewayProcess {
    child: Child,
    pub url: String,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl GatewayProcess {
    /// Starts the binary on `config` and waits until its `/readyz` answers
    /// 200. It listens before its store answers (a Redis store connects in
    /// the background), so a call made as soon as it listens could be
    /// refused for a store that is up.
    pub async fn start(config: &GatewayConfig) -> GatewayProcess {
        GatewayProcess::start_under(config, &[]).await
    }

    /// Starts the binary as the last argument of `wrapper` (a command such
    /// as `prlimit --nofile=…`; empty: the binary itself) and waits until
    /// it is ready.
    pub async fn start_under(config: &GatewayConfig, wrapper: &[&str]) -> GatewayProcess {
        let gateway = GatewayProcess::listening(config, wrapper).await;
        gateway.wait_ready().await;
        gateway
    }

    /// Starts the binary on `config` and waits only until it logs
    /// `listening on ADDR`: for a gateway whose store is down, or that
    /// must refuse it.
    pub async fn start_unready(config: &GatewayConfig) -> GatewayProcess {
        GatewayProcess::listening(config, &[]).await
    }

    /// Waits until `/readyz` answers 200; panics with the log if it never
    /// does.
    pub async fn wait_ready(&self) {
        let ready = eventually(GATEWAY_READY_TIMEOUT, || async {
            readyz(&self.url).await == 200
        })
        .await;
        assert!(ready, "the gateway never got ready:\n{}", self.log());
    }

    async fn listening(config: &GatewayConfig, wrapper: &[&str]) -> GatewayProcess {
        let text = config.toml();
        let wrapper: Vec<String> = wrapper.iter().map(|s| (*s).to_owned()).collect();
        tokio::task::spawn_blocking(move || GatewayProcess::start_blocking(&text, &wrapper))
            .await
            .unwrap()
    }

    fn start_blocking(config: &str, wrapper: &[String]) -> GatewayProcess {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-gateway-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, config).unwrap();
        let binary = env!("CARGO_BIN_EXE_tollgate");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .env("TEST_PROVIDER_KEY", PROVIDER_KEY)
            .env_remove("TOLLGATE_REDIS_URL")
            .env_remove("TOLLGATE_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (listening, bound) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = listening_addr(&line) {
                    let _ = listening.send(addr);
                }
                let mut log = lines.lock().unwrap_or_else(|e| e.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut gateway = GatewayProcess {
            child,
            url: String::new(),
            log,
            _dir: dir,
        };
        match bound.recv_timeout(GATEWAY_START_TIMEOUT) {
            Ok(addr) => gateway.url = format!("http://{addr}"),
            Err(_) => {
                gateway.kill();
                panic!("the gateway did not start:\n{}", gateway.log());
            }
        }
        gateway
    }

    /// Stops the gateway as a service manager does (SIGTERM) and waits for
    /// its exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let stopped = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(stopped.success(), "kill -TERM failed");
        self.child.wait().unwrap()
    }

    /// SIGKILL: no shutdown, no settlement, nothing flushed.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Everything it wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The address in a `listening on ADDR` log line, whatever precedes it.
fn listening_addr(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("listening on ")?;
    rest.split_whitespace().next().map(str::to_owned)
}

/// A gateway run in this process on the library, with no periodic sweep:
/// only a reserve's own lazy sweep can expire a reservation through it.
pub struct UnsweptGateway {
    pub url: String,
    _shutdown: tokio::sync::oneshot::Sender<()>,
    _running: tollgate::server::Running,
}

impl UnsweptGateway {
    pub async fn start(config: &GatewayConfig) -> UnsweptGateway {
        let env = |name: &str| (name == "TEST_PROVIDER_KEY").then(|| PROVIDER_KEY.to_owned());
        let config = tollgate::config::Config::from_toml_str_with_env(
            &config.toml(),
            Path::new("unswept.toml"),
            &env,
        )
        .unwrap();
        let tollgate::config::StoreBackend::Redis { url, tls } = &config.store.backend else {
            panic!("a Redis config");
        };
        let rules = Rules {
            ledger_retention: config.store.ledger_buffer,
            ..Rules::of(&config.store)
        };
        let store = RedisStore::connect_tls(url.expose(), tls, rules)
            .await
            .unwrap();
        for key in &config.keys {
            store.track_key(&key.id, key.org.as_deref());
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tollgate::server::start(
            config,
            tollgate::budget::BudgetStore::Redis(store),
            listener,
            async move {
                let _ = stopped.await;
            },
            tollgate::server::Options {
                sweep_every: None,
                ..tollgate::server::Options::default()
            },
        )
        .await
        .unwrap();
        UnsweptGateway {
            url,
            _shutdown: shutdown,
            _running: running,
        }
    }
}

// === HTTP ===

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// An OpenAI chat body; `text` may carry mock directives.
pub fn chat(model: &str, text: &str, stream: bool, max_tokens: u64) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
    })
}

/// An Anthropic Messages body.
pub fn messages(model: &str, text: &str, stream: bool, max_tokens: u64) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
    })
}

/// The output limit of every [`mixed_call`]; most of them bill all of it,
/// so their cost is close to what they reserve.
pub const MIXED_MAX_TOKENS: u64 = 100;

/// The i-th call of a mixed burst through `gateway`: OpenAI chat or
/// Anthropic messages, streamed (paced by the mock, so many reservations
/// are open at once) or not. Returns its status and body.
pub async fn mixed_call(
    client: &reqwest::Client,
    gateway: &str,
    key: &str,
    i: usize,
) -> (u16, String) {
    let tokens = if i.is_multiple_of(7) {
        10
    } else {
        MIXED_MAX_TOKENS
    };
    let text = format!("call {i} mock:tokens={tokens} mock:sleep_ms=2");
    let request = match i % 5 {
        0 | 1 => client
            .post(format!("{gateway}/v1/messages"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .json(&messages(
                "claude-haiku-4-5",
                &text,
                i % 5 == 1,
                MIXED_MAX_TOKENS,
            )),
        n => client
            .post(format!("{gateway}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&chat("gpt-4o", &text, n != 4, MIXED_MAX_TOKENS)),
    };
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// POSTs a chat completion with `key` as bearer token.
pub async fn post_chat(
    client: &reqwest::Client,
    gateway: &str,
    key: &str,
    body: &Value,
) -> reqwest::Response {
    client
        .post(format!("{gateway}/v1/chat/completions"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// `GET /v1/budget` for `key`.
pub async fn budget(gateway: &str, key: &str) -> Value {
    let response = client()
        .get(format!("{gateway}/v1/budget"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "GET /v1/budget on {gateway}");
    response.json().await.unwrap()
}

/// A scope's field of a `/v1/budget` answer (`scope` is "key" or "org").
pub fn field(budget: &Value, scope: &str, name: &str) -> u64 {
    budget[scope][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {scope}.{name} in {budget}"))
}

/// The status of `GET /readyz`.
pub async fn readyz(gateway: &str) -> u16 {
    client()
        .get(format!("{gateway}/readyz"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Polls `check` every 50 ms until it holds or `within` passes; returns
/// whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// === Books ===

/// A store handle on `url`, to read the books the gateways wrote.
pub async fn store(url: &str) -> RedisStore {
    let rules = Rules {
        settle_epsilon: 100,
        ..Rules::default()
    };
    RedisStore::connect(url, rules).await.unwrap()
}

/// Reconciles `tags`: every row must have zero drift and no open
/// reservation. Returns the rows.
pub async fn assert_books_balance(store: &RedisStore, tags: &[String]) -> Vec<Reconciliation> {
    let rows = store.reconcile_in(tags).await.unwrap();
    assert!(!rows.is_empty(), "no books under {tags:?}");
    for row in &rows {
        assert_eq!(row.drift(), 0, "drift in {row:?}");
        assert_eq!(row.open, 0, "open reservation in {row:?}");
    }
    assert_eq!(store.open_reservations_in(tags).await.unwrap(), (0, 0));
    rows
}

/// The price table the gateways use.
pub fn prices() -> tollgate::prices::PriceTable {
    tollgate::prices::PriceTable::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prices.toml"),
    )
    .unwrap()
}

/// `a + b`, field by field.
pub fn add_usage(a: Usage, b: &Usage) -> Usage {
    Usage {
        input: a.input + b.input,
        cached_input: a.cached_input + b.cached_input,
        cache_write: a.cache_write + b.cache_write,
        output: a.output + b.output,
        // These tests declare no hosted tools.
        ..Usage::default()
    }
}

/// What the mock provider billed, as the gateway's `Usage`, to set beside
/// the ledger: the mock keeps its own type, not depending on the gateway.
pub fn billed_by(stats: &MockStats) -> Usage {
    let billed = stats.billed();
    Usage {
        input: billed.input,
        cached_input: billed.cached_input,
        cache_write: billed.cache_write,
        output: billed.output,
        ..Usage::default()
    }
}

/// The usage of a non-streaming OpenAI chat answer.
pub fn chat_usage(body: &Value) -> Usage {
    Usage {
        input: body["usage"]["prompt_tokens"].as_u64().unwrap(),
        output: body["usage"]["completion_tokens"].as_u64().unwrap(),
        ..Usage::default()
    }
}

/// The SHA Redis knows a script by, as the gateway sends it.
pub fn script_sha(script: &str) -> String {
    tollgate::budget::redis::script_sha(script).unwrap_or_else(|| panic!("no script {script}"))
}
