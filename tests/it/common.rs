//! A gateway and a mock provider on port 0, in process, for integration
//! tests: real sockets, real HTTP, the real server.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use tollgate::budget::{BudgetStore, LedgerEntry, MemoryStore, Rules};
use tollgate::config::Config;
// Ledger amounts are signed; tests compare them with unsigned costs.
#[allow(unused_imports)]
pub use tollgate::money::delta;
use tollgate::server;
use tollgate::usage::Usage;
use tollgate_mock::{MockOptions, MockServer, MockStats};

/// The provider credential the mock expects and the gateway holds.
pub const PROVIDER_KEY: &str = "sk-provider-secret";
/// Raw gateway keys of the test config.
pub const ALICE: &str = "tg-alice";
pub const BOB: &str = "tg-bob";
pub const SOLO: &str = "tg-solo";
/// The test config's azure deployments: each, the model it is priced as,
/// and the model Azure's answers name.
pub const AZURE_DEPLOYMENTS: [(&str, &str, &str); 2] = [
    ("prod-4o", "gpt-4o", "gpt-4o-2024-08-06"),
    ("mini", "gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
];
/// The AWS credentials the test config's `bedrock` provider signs with.
pub const AWS_KEYS: (&str, &str) = ("AKIDTOLLGATETEST", "tollgate-test-secret-key");
pub const AWS_SESSION_TOKEN: &str = "tollgate-test-session-token";
/// Where the test config's `vertex` provider sends every call.
pub const VERTEX_PROJECT: &str = "tg-project";
pub const VERTEX_LOCATION: &str = "europe-west4";

/// Caps and limits a test can set.
pub struct Setup {
    pub alice_cap: &'static str,
    pub bob_cap: &'static str,
    pub org_cap: &'static str,
    pub max_request_bytes: usize,
    pub mock: MockOptions,
    /// Leave the Anthropic provider's key unset.
    pub anthropic_key_missing: bool,
    /// How long shutdown lets in-flight calls run before cutting them.
    pub shutdown_grace: std::time::Duration,
    pub upstream_timeout_secs: u64,
    /// Where the OpenAI provider points instead of the mock.
    pub openai_base_url: Option<String>,
    /// Where the Anthropic provider points instead of the mock.
    pub anthropic_base_url: Option<String>,
    /// The price file, instead of `config/prices.toml`.
    pub prices_file: Option<std::path::PathBuf>,
    /// More TOML lines for the OpenAI provider's table.
    pub openai_provider_extra: &'static str,
    /// The OpenAI provider's `service_tier_default`: `"priority"` (the
    /// mock plays OpenAI itself, whose projects may default to priority)
    /// unless a test plays another provider.
    pub openai_tier: &'static str,
    /// More TOML lines for the `[server]` table.
    pub server_extra: &'static str,
    /// More top-level TOML tables (such as `[alerts]`), before `[server]`.
    pub tables_extra: &'static str,
    /// More TOML lines for alice's `[[keys]]` table.
    pub alice_extra: &'static str,
    /// More TOML lines for the org's `[[orgs]]` table.
    pub org_extra: &'static str,
    /// Add a `gemini` provider and a `vertex` one (project
    /// [`VERTEX_PROJECT`] in [`VERTEX_LOCATION`], signing in with the
    /// mock's service account) to the mock.
    pub google: bool,
    /// Where the `gemini` provider points instead of the mock.
    pub gemini_base_url: Option<String>,
    /// Add an `azure` provider on the mock, with [`AZURE_DEPLOYMENTS`].
    pub azure: bool,
    /// Add a `bedrock` provider on the mock, signing with [`AWS_KEYS`]
    /// (and a session token), which the mock checks.
    pub bedrock: bool,
    /// Where the `azure` and `bedrock` providers point instead of the mock.
    pub azure_base_url: Option<String>,
    pub bedrock_base_url: Option<String>,
    /// The admin API on a listener of its own (`Harness::admin_url`), as
    /// `server.admin_listen` puts it.
    pub admin_listener: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            alice_cap: "10.00",
            bob_cap: "10.00",
            org_cap: "100.00",
            max_request_bytes: 1 << 20,
            mock: MockOptions {
                expect_key: Some(PROVIDER_KEY.to_owned()),
                ..MockOptions::default()
            },
            anthropic_key_missing: false,
            shutdown_grace: server::SHUTDOWN_GRACE,
            upstream_timeout_secs: 30,
            openai_base_url: None,
            anthropic_base_url: None,
            prices_file: None,
            openai_provider_extra: "",
            openai_tier: "priority",
            server_extra: "",
            tables_extra: "",
            alice_extra: "",
            org_extra: "",
            google: false,
            gemini_base_url: None,
            azure: false,
            bedrock: false,
            azure_base_url: None,
            bedrock_base_url: None,
            admin_listener: false,
        }
    }
}

impl Setup {
    /// The default setup with the admin API on, opened by `admin_key`.
    pub fn with_admin_key(admin_key: &str) -> Setup {
        let digest = hex::encode(tollgate::config::hash_key(admin_key));
        let extra = format!("admin_key_sha256 = \"{digest}\"");
        Setup {
            // One short line per test gateway; leaked to fit `&'static str`.
            server_extra: Box::leak(extra.into_boxed_str()),
            ..Setup::default()
        }
    }
}

pub struct Harness {
    pub url: String,
    pub addr: SocketAddr,
    pub mock: MockServer,
    pub store: MemoryStore,
    pub config_text: String,
    /// The admin listener's URL, with `Setup::admin_listener`.
    pub admin_url: Option<String>,
    /// Holds the vertex provider's service account file.
    _google_dir: Option<tempfile::TempDir>,
    shutdown: Option<oneshot::Sender<()>>,
    running: Option<server::Running>,
}

fn sha(raw: &str) -> String {
    hex::encode(tollgate::config::hash_key(raw))
}

pub async fn start(setup: Setup) -> Harness {
    crate::limits::raise_open_files();
    let mut mock_options = setup.mock.clone();
    if setup.azure {
        mock_options.azure_deployments = AZURE_DEPLOYMENTS
            .iter()
            .map(|(deployment, _, answered)| ((*deployment).to_owned(), (*answered).to_owned()))
            .collect();
    }
    if setup.bedrock {
        mock_options.aws_credentials = Some((AWS_KEYS.0.to_owned(), AWS_KEYS.1.to_owned()));
    }
    let mock = tollgate_mock::spawn(mock_options).await.unwrap();
    let prices = setup
        .prices_file
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prices.toml"));
    let (google_dir, google_providers) = if setup.google {
        let gemini = setup.gemini_base_url.clone().unwrap_or_else(|| mock.url());
        let (dir, providers) = google_providers(&mock, &gemini);
        (Some(dir), providers)
    } else {
        (None, String::new())
    };
    let config_text = format!(
        r#"
{tables_extra}

[server]
listen = "127.0.0.1:0"
max_request_bytes = {max}
upstream_timeout_secs = {timeout}
{server_extra}

[store]
backend = "memory"
reservation_ttl_secs = 60

[prices]
file = "{prices}"

[[providers]]
name = "openai"
kind = "openai"
base_url = "{openai_url}"
api_key_env = "TEST_OPENAI_KEY"
service_tier_default = "{openai_tier}"
models = ["gpt-*", "text-embedding-*"]
{openai_extra}

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "{anthropic_url}"
api_key_env = "TEST_ANTHROPIC_KEY"
models = ["claude-*"]

{google_providers}
{azure_provider}
{bedrock_provider}

[[orgs]]
id = "acme"
cap_usd = "{org_cap}"
period = "month"
{org_extra}

[[keys]]
id = "alice"
org = "acme"
key_sha256 = "{alice}"
cap_usd = "{alice_cap}"
period = "day"
{alice_extra}

[[keys]]
id = "bob"
org = "acme"
key_sha256 = "{bob}"
cap_usd = "{bob_cap}"
period = "day"

[[keys]]
id = "solo"
key_sha256 = "{solo}"
cap_usd = "1.00"
period = "total"
models = ["gpt-4o-mini"]
"#,
        max = setup.max_request_bytes,
        timeout = setup.upstream_timeout_secs,
        openai_url = setup
            .openai_base_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", mock.addr)),
        prices = prices.display(),
        openai_extra = setup.openai_provider_extra,
        openai_tier = setup.openai_tier,
        server_extra = setup.server_extra,
        tables_extra = setup.tables_extra,
        alice_extra = setup.alice_extra,
        org_extra = setup.org_extra,
        anthropic_url = setup
            .anthropic_base_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", mock.addr)),
        google_providers = google_providers,
        azure_provider = if setup.azure {
            azure_provider(setup.azure_base_url.as_deref().unwrap_or(&mock.url()))
        } else {
            String::new()
        },
        bedrock_provider = if setup.bedrock {
            bedrock_provider(setup.bedrock_base_url.as_deref().unwrap_or(&mock.url()))
        } else {
            String::new()
        },
        org_cap = setup.org_cap,
        alice = sha(ALICE),
        alice_cap = setup.alice_cap,
        bob = sha(BOB),
        bob_cap = setup.bob_cap,
        solo = sha(SOLO),
    );
    let anthropic_missing = setup.anthropic_key_missing;
    let env = move |name: &str| match name {
        "TEST_OPENAI_KEY" => Some(PROVIDER_KEY.to_owned()),
        "TEST_ANTHROPIC_KEY" if !anthropic_missing => Some(PROVIDER_KEY.to_owned()),
        "TEST_GEMINI_KEY" | "TEST_AZURE_KEY" => Some(PROVIDER_KEY.to_owned()),
        "TEST_AWS_KEY_ID" => Some(AWS_KEYS.0.to_owned()),
        "TEST_AWS_SECRET" => Some(AWS_KEYS.1.to_owned()),
        "TEST_AWS_TOKEN" => Some(AWS_SESSION_TOKEN.to_owned()),
        _ => None,
    };
    let config =
        Config::from_toml_str_with_env(&config_text, Path::new("test.toml"), &env).unwrap();
    let store = MemoryStore::new(Rules::of(&config.store));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = if setup.admin_listener {
        Some(TcpListener::bind("127.0.0.1:0").await.unwrap())
    } else {
        None
    };
    let listeners = server::Listeners {
        main: listener,
        admin,
    };
    let (tx, rx) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = rx.await;
    };
    let options = server::Options {
        grace: setup.shutdown_grace,
        ..server::Options::default()
    };
    let running = server::start(
        config,
        BudgetStore::Memory(store.clone()),
        listeners,
        shutdown,
        options,
    )
    .await
    .unwrap();
    let addr = running.addr();
    let admin_url = running.admin_addr().map(|addr| format!("http://{addr}"));
    Harness {
        url: format!("http://{addr}"),
        addr,
        mock,
        store,
        config_text,
        admin_url,
        _google_dir: google_dir,
        shutdown: Some(tx),
        running: Some(running),
    }
}

/// The `gemini` and `vertex` providers' TOML, and the directory holding
/// the service account file the vertex one reads.
fn google_providers(mock: &MockServer, gemini_url: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let account = dir.path().join("vertex-sa.json");
    std::fs::write(
        &account,
        tollgate_mock::service_account_json(&mock.token_url()),
    )
    .unwrap();
    let toml = format!(
        r#"
[[providers]]
name = "gemini"
kind = "gemini"
base_url = "{gemini_url}"
api_key_env = "TEST_GEMINI_KEY"
models = ["gemini-*"]

[[providers]]
name = "vertex"
kind = "vertex"
base_url = "http://{mock}"
project = "{VERTEX_PROJECT}"
location = "{VERTEX_LOCATION}"
credentials_file = "{account}"
models = ["gemini-*", "claude-*@*"]
"#,
        mock = mock.addr,
        account = account.display(),
    );
    (dir, toml)
}

/// The `azure` provider's TOML.
fn azure_provider(url: &str) -> String {
    let deployments: Vec<String> = AZURE_DEPLOYMENTS
        .iter()
        .map(|(deployment, priced, _)| format!("\"{deployment}\" = \"{priced}\""))
        .collect();
    format!(
        r#"
[[providers]]
name = "azure"
kind = "azure"
base_url = "{url}"
api_key_env = "TEST_AZURE_KEY"
deployments = {{ {deployments} }}
"#,
        deployments = deployments.join(", "),
    )
}

/// The `bedrock` provider's TOML: SigV4 with the test credentials.
fn bedrock_provider(url: &str) -> String {
    format!(
        r#"
[[providers]]
name = "bedrock"
kind = "bedrock"
base_url = "{url}"
region = "us-east-1"
access_key_id_env = "TEST_AWS_KEY_ID"
secret_access_key_env = "TEST_AWS_SECRET"
session_token_env = "TEST_AWS_TOKEN"
models = ["anthropic.claude-*"]
"#,
    )
}

impl Harness {
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .unwrap()
    }

    /// POST `body` to `path` with `key` as a bearer token (or `x-api-key` for
    /// `/v1/messages`, as Anthropic's SDK sends it).
    pub async fn post(&self, path: &str, key: &str, body: &Value) -> reqwest::Response {
        let request = self.client().post(format!("{}{path}", self.url)).json(body);
        let request = if path == "/v1/messages" {
            request
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
        } else {
            request.bearer_auth(key)
        };
        request.send().await.unwrap()
    }

    pub async fn budget(&self, key: &str) -> Value {
        let response = self
            .client()
            .get(format!("{}/v1/budget", self.url))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    pub fn ledger(&self) -> Vec<LedgerEntry> {
        self.store.ledger()
    }

    /// Waits (bounded) until no reservation is open.
    pub async fn settled(&self) {
        for _ in 0..500 {
            if self.store.open_reservations().0 == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!(
            "reservations still open: {:?}",
            self.store.open_reservations()
        );
    }

    /// Stops accepting and waits for in-flight calls, as on SIGTERM.
    pub async fn shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(running) = self.running.take() {
            running.stopped().await.unwrap();
        }
    }
}

/// A loopback port bound but not listening: every connection to it is
/// refused, and no other socket can take it while the socket lives. Call
/// `listen` on the socket to serve on it later.
pub fn refusing_port() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr)
}

/// Reads a streamed answer to its end; whether the stream failed (was cut)
/// rather than ending cleanly.
pub async fn read_to_failure(response: reqwest::Response) -> bool {
    use futures_util::StreamExt;
    let mut stream = response.bytes_stream();
    let mut failed = false;
    while let Some(chunk) = stream.next().await {
        failed |= chunk.is_err();
    }
    failed
}

/// The price table the gateway uses.
pub fn prices() -> tollgate::prices::PriceTable {
    tollgate::prices::PriceTable::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prices.toml"),
    )
    .unwrap()
}

/// Cost of a usage at `model`'s prices, rounded up once.
pub fn cost(model: &str, usage: &Usage) -> u64 {
    prices().get(model).unwrap().cost(usage)
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
        // The mock counts hosted tool uses without naming the tool: a test
        // that declares one sets the count on the tool it declared.
        ..Usage::default()
    }
}

pub fn chat(model: &str, text: &str) -> Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

pub fn messages(model: &str, text: &str, max_tokens: u64) -> Value {
    serde_json::json!({"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]})
}

/// The one ledger entry of a single call, checked against its charge.
pub fn only_entry(h: &Harness) -> tollgate::budget::LedgerEntry {
    let ledger = h.ledger();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    let entry = ledger.into_iter().next().unwrap();
    assert_eq!(entry.actual, delta(cost(&entry.model, &entry.usage)));
    assert!(entry.actual <= delta(entry.reserved), "{entry:?}");
    entry
}

pub async fn spent(h: &Harness, key: &str) -> u64 {
    h.budget(key).await["key"]["spent_usd_micros"]
        .as_u64()
        .unwrap()
}

/// The value of one always-exported series of the gateway at `gateway`'s
/// `/metrics`, named with its labels as the exposition writes it.
pub async fn metric(gateway: &str, series: &str) -> u64 {
    let text = reqwest::get(format!("{gateway}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}
