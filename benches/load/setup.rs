//! The files and commands of one run: a temp dir with a price table, one
//! config per gateway and the SQLite gateways' files, and the command lines
//! of every process.
//!
//! Each gateway gets its own key and org, named after the run, so two runs
//! (or two gateways of one run) never share a budget — on Redis that also
//! means the run touches, and cleans up, only keys it created.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;
use tollgate::config::Config;
use tollgate::prices::{ModelPrice, PriceTable};

use crate::error::BenchError;

/// The model of the instant calls; routed to the upstream of the
/// throughput and latency modes.
pub const INSTANT_MODEL: &str = "gpt-4o-mini";
/// The model of the streamed calls; routed to the streaming mock.
pub const STREAM_MODEL: &str = "gpt-4o";

/// Prices the gateways charge (the providers' list prices).
const PRICES: &str = r#"
[models."gpt-4o-mini"]
input_per_mtok = "0.15"
cached_input_per_mtok = "0.075"
output_per_mtok = "0.60"
max_output_tokens = 16384
context_window = 128000

[models."gpt-4o"]
input_per_mtok = "2.50"
cached_input_per_mtok = "1.25"
output_per_mtok = "10.00"
max_output_tokens = 16384
context_window = 128000
"#;

/// The caps GC's key carries beyond G0's: a model group, a customer
/// template and both rate limits, each far above what a run spends, so
/// none refuses a call and every call is held against all of them.
pub mod caps {
    /// Requests per minute: of the key, of each customer, of the group.
    pub const RPM: u64 = 1_000_000_000;
    /// Tokens per minute of the key.
    pub const TPM: u64 = 1_000_000_000_000;
    /// Money of each customer and of the group, per `PERIOD`.
    pub const USD: &str = "1000000.00";
    pub const PERIOD: &str = "day";
    /// The model group, matching the instant calls' model.
    pub const GROUP: &str = "bench";
    /// Distinct customers the calls name in turn (`x-tollgate-customer`).
    pub const CUSTOMERS: usize = 16;

    /// The group's model glob.
    pub fn models() -> String {
        format!("{}*", super::INSTANT_MODEL)
    }

    /// The fields as a `[[keys]]` entry of the config takes them.
    pub fn toml() -> String {
        format!(
            "rpm = {RPM}\ntpm = {TPM}\ncustomer_cap_usd = \"{USD}\"\ncustomer_period = \"{PERIOD}\"\n\
             customer_rpm = {RPM}\nmodel_caps = [{{ name = \"{GROUP}\", models = [\"{models}\"], \
             cap_usd = \"{USD}\", period = \"{PERIOD}\", rpm = {RPM} }}]\n",
            models = models()
        )
    }

    /// The same fields as the admin API takes them (`--api-keys`).
    pub fn json() -> serde_json::Value {
        serde_json::json!({
            "rpm": RPM,
            "tpm": TPM,
            "customer_cap_usd": USD,
            "customer_period": PERIOD,
            "customer_rpm": RPM,
            "model_caps": [{
                "name": GROUP,
                "models": [models()],
                "cap_usd": USD,
                "period": PERIOD,
                "rpm": RPM,
            }],
        })
    }
}

/// The provider credential the gateways hold (the upstreams accept any).
const PROVIDER_KEY: &str = "sk-bench-provider";
const PROVIDER_KEY_ENV: &str = "TOLLGATE_BENCH_PROVIDER_KEY";

/// Where a gateway counts budgets.
#[derive(Clone, Debug)]
pub enum Store {
    Memory,
    Redis {
        url: String,
        /// The ledger sink file, named relative to the config (so in the
        /// run's temp dir); `None`: the gateway does not drain.
        sink: Option<String>,
    },
    /// A file named relative to the config, so in the run's temp dir.
    Sqlite {
        file: String,
    },
}

/// The files of one run; the temp dir goes when this is dropped.
pub struct RunFiles {
    dir: TempDir,
    /// Unique per run: names every key, org and Redis key the run creates.
    pub run_id: String,
    prices: PathBuf,
}

/// A gateway's identity in its config: the raw key clients send and the
/// ids of its key and org scopes.
#[derive(Clone, Debug)]
pub struct GatewayKey {
    pub raw: String,
    pub key_id: String,
    pub org_id: String,
}

impl RunFiles {
    pub fn new() -> Result<RunFiles, BenchError> {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-bench-")
            .tempdir()?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let run_id = format!("{:x}{:x}", std::process::id(), nanos % (1 << 40));
        let prices = dir.path().join("prices.toml");
        std::fs::write(&prices, PRICES)?;
        Ok(RunFiles {
            dir,
            run_id,
            prices,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Bytes of the SQLite store `file` of the run: the database and its
    /// write-ahead log (0 for a part that does not exist yet).
    pub fn sqlite_bytes(&self, file: &str) -> (u64, u64) {
        let size =
            |name: String| std::fs::metadata(self.dir().join(name)).map_or(0, |meta| meta.len());
        (size(file.to_owned()), size(format!("{file}-wal")))
    }

    /// The price table the gateways load, to price what the streams report.
    pub fn price(model: &str) -> Result<ModelPrice, BenchError> {
        PriceTable::from_toml_str(PRICES)
            .map_err(|e| BenchError::Invalid(e.to_string()))?
            .get(model)
            .cloned()
            .ok_or_else(|| BenchError::Invalid(format!("no price for {model}")))
    }

    /// The admin key of the gateways that serve the admin API
    /// (`--api-keys`).
    pub fn admin_key(&self) -> String {
        format!("tg-bench-{}-admin", self.run_id)
    }

    /// Writes the config of the gateway `name` and returns it with its key;
    /// `admin`: with the admin API on, under [`RunFiles::admin_key`];
    /// `caps`: the key carries [`caps`] too (GC).
    pub fn gateway_config(
        &self,
        name: &str,
        store: &Store,
        instant: SocketAddr,
        streaming: SocketAddr,
        admin: bool,
        caps: bool,
    ) -> Result<(PathBuf, GatewayKey), BenchError> {
        let key = GatewayKey {
            raw: format!("tg-bench-{}-{name}", self.run_id),
            key_id: format!("bench-{}-{name}", self.run_id),
            org_id: format!("bench-{}-{name}-org", self.run_id),
        };
        let store_section = match store {
            Store::Memory => "backend = \"memory\"".to_owned(),
            Store::Redis { url, sink: None } => {
                format!("backend = \"redis\"\nredis_url = \"{url}\"")
            }
            Store::Redis {
                url,
                sink: Some(sink),
            } => {
                format!("backend = \"redis\"\nredis_url = \"{url}\"\nledger_sink_path = \"{sink}\"")
            }
            Store::Sqlite { file } => format!("backend = \"sqlite\"\nsqlite_path = \"{file}\""),
        };
        // Only when asked: the config-key run stays the gateway as it was.
        let admin_line = if admin {
            let sha = hex::encode(tollgate::config::hash_key(&self.admin_key()));
            format!("admin_key_sha256 = \"{sha}\"\n")
        } else {
            String::new()
        };
        let caps_lines = if caps { caps::toml() } else { String::new() };
        let mut text = String::new();
        // `write!` to a String cannot fail.
        let _ = write!(
            text,
            r#"[server]
listen = "127.0.0.1:0"
upstream_timeout_secs = 120
{admin_line}
[store]
{store_section}
reservation_ttl_secs = 300
on_store_error = "reject"

[prices]
file = "{prices}"

[[providers]]
name = "instant"
kind = "openai"
base_url = "http://{instant}"
api_key_env = "{PROVIDER_KEY_ENV}"
models = ["{INSTANT_MODEL}"]

[[providers]]
name = "streaming"
kind = "openai"
base_url = "http://{streaming}"
api_key_env = "{PROVIDER_KEY_ENV}"
models = ["{STREAM_MODEL}"]

[[orgs]]
id = "{org}"
cap_usd = "1000000.00"
period = "total"

[[keys]]
id = "{key_id}"
org = "{org}"
key_sha256 = "{sha}"
cap_usd = "1000000.00"
period = "total"
{caps_lines}"#,
            prices = self.prices.display(),
            org = key.org_id,
            key_id = key.key_id,
            sha = hex::encode(tollgate::config::hash_key(&key.raw)),
        );
        let path = self.dir().join(format!("{name}.toml"));
        std::fs::write(&path, text)?;
        Ok((path, key))
    }
}

/// How long the gateway on `config` keeps a closed call's record for its
/// retries (`store.closed_record_secs`), read with the gateway's own loader
/// so that the benchmark and the gateway cannot disagree about it.
pub fn closed_record(config: &Path) -> Result<Duration, BenchError> {
    let text = std::fs::read_to_string(config)?;
    let env = |name: &str| (name == PROVIDER_KEY_ENV).then(|| PROVIDER_KEY.to_owned());
    let config = Config::from_toml_str_with_env(&text, config, &env)
        .map_err(|e| BenchError::Invalid(e.to_string()))?;
    Ok(config.store.closed_record)
}

/// Runs `program` so that it is killed when this benchmark dies, even by a
/// signal that leaves no chance to clean up: util-linux's `setpriv` sets
/// the parent-death signal and then executes the program in its place
/// (same pid). Without `setpriv`, the program runs as is and only the
/// normal cleanup (kill on drop) applies.
fn guarded(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if Path::new(SETPRIV).exists() {
        let mut command = Command::new(SETPRIV);
        command.arg("--pdeathsig").arg("KILL").arg(program);
        command
    } else {
        Command::new(program)
    }
}

const SETPRIV: &str = "/usr/bin/setpriv";

/// The variable naming another `tollgate` binary to run as the gateways
/// (G0, G, GS), so two builds can be compared in alternating runs of one
/// benchmark binary; unset, the release binary cargo built with it. The
/// mock upstream is always this build's.
pub const GATEWAY_BIN_VAR: &str = "TOLLGATE_BENCH_GATEWAY";

/// `program`, a `tollgate` binary, run as the benchmark runs it.
fn tollgate(program: std::ffi::OsString) -> Command {
    let mut command = guarded(program);
    // Only the listening line and warnings are read; the config names the
    // store, so no variable from the caller's shell may change it.
    command
        .env("RUST_LOG", "info")
        .env_remove("TOLLGATE_REDIS_URL")
        .env_remove("TOLLGATE_CONFIG");
    command
}

/// `tollgate serve` on `config`.
pub fn gateway_command(config: &Path) -> Command {
    let program =
        std::env::var_os(GATEWAY_BIN_VAR).unwrap_or_else(|| env!("CARGO_BIN_EXE_tollgate").into());
    let mut command = tollgate(program);
    command
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env(PROVIDER_KEY_ENV, PROVIDER_KEY);
    command
}

/// `tollgate mock-upstream` on a free port; `pace`: tokens per second of
/// streamed replies, `None` for as fast as possible.
pub fn mock_command(reply_tokens: u64, pace: Option<u32>) -> Command {
    let mut command = tollgate(env!("CARGO_BIN_EXE_tollgate").into());
    command
        .arg("mock-upstream")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--reply-tokens")
        .arg(reply_tokens.to_string());
    if let Some(tokens_per_sec) = pace {
        command
            .arg("--tokens-per-sec")
            .arg(tokens_per_sec.to_string());
    }
    command
}

/// This benchmark's own binary as the instant upstream (`load/instant.rs`).
pub fn instant_command() -> Result<Command, BenchError> {
    let mut command = guarded(std::env::current_exe()?);
    command.arg(crate::SERVE_INSTANT);
    Ok(command)
}

/// This benchmark's own binary as the pass-through proxy to `upstream`.
pub fn passthrough_command(upstream: SocketAddr) -> Result<Command, BenchError> {
    let mut command = guarded(std::env::current_exe()?);
    command
        .arg(crate::SERVE_PASSTHROUGH)
        .arg(upstream.to_string());
    Ok(command)
}
