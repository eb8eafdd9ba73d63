//! The `tollgate` command: parses the command line and calls the library.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use tollgate::budget::{BudgetStore, MemoryStore, Reconciliation, RedisStore};
use tollgate::config::{hash_key, Config, Secret, StoreBackend};
use tollgate::server::{self, budget_tags, Gateway};
use tollgate_mock::{MockOptions, MockStats};

/// `tollgate reconcile` could not tell whether the books balance.
const EXIT_UNKNOWN: u8 = 2;

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "An LLM API gateway with exact spending caps per key"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        #[arg(long, env = "TOLLGATE_CONFIG", default_value = "config/tollgate.toml")]
        config: PathBuf,
    },
    /// Check a config file and exit.
    CheckConfig {
        #[arg(long, env = "TOLLGATE_CONFIG", default_value = "config/tollgate.toml")]
        config: PathBuf,
    },
    /// Check that every scope's counter equals its ledger plus its open
    /// reservations, per period, on the Redis store; exit 1 on any drift,
    /// 2 if the store cannot be read.
    Reconcile {
        #[arg(long, env = "TOLLGATE_CONFIG", default_value = "config/tollgate.toml")]
        config: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the SHA-256 hex of a gateway key, for `key_sha256` in the config.
    HashKey { key: String },
    /// Run a fake OpenAI + Anthropic provider for tests, demos and load.
    MockUpstream {
        #[arg(long, default_value = "127.0.0.1:9090")]
        listen: SocketAddr,
        /// Delay before each response's headers.
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// Pace streamed tokens at this rate (default: as fast as possible).
        #[arg(long)]
        tokens_per_sec: Option<u32>,
        /// Require this provider key on every request.
        #[arg(long)]
        expect_key: Option<String>,
        /// Reply length in tokens.
        #[arg(long, default_value_t = 12)]
        reply_tokens: u64,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::HashKey { key } => {
            let digest = hex::encode(hash_key(&key));
            std::io::Write::write_all(&mut std::io::stdout(), format!("{digest}\n").as_bytes())
                .map_err(|e| e.to_string())
        }
        Command::CheckConfig { config } => check_config(&config),
        Command::Serve { config } => runtime().and_then(|rt| rt.block_on(serve(config))),
        Command::Reconcile { config, json } => {
            return match runtime() {
                Ok(rt) => rt.block_on(reconcile(&config, json)),
                Err(message) => {
                    tracing::error!("{message}");
                    ExitCode::from(EXIT_UNKNOWN)
                }
            };
        }
        Command::MockUpstream {
            listen,
            latency_ms,
            tokens_per_sec,
            expect_key,
            reply_tokens,
        } => {
            let options = MockOptions {
                latency: Duration::from_millis(latency_ms),
                tokens_per_sec,
                expect_key,
                reply_tokens,
            };
            runtime().and_then(|rt| rt.block_on(mock_upstream(listen, options)))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

fn check_config(path: &std::path::Path) -> Result<(), String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    tracing::info!(
        keys = config.keys.len(),
        orgs = config.orgs.len(),
        providers = config.providers.len(),
        models = config.prices.len(),
        "{} is valid",
        path.display()
    );
    Ok(())
}

async fn serve(path: PathBuf) -> Result<(), String> {
    let config = Config::load(&path).map_err(|e| e.to_string())?;
    let store = open_store(&config, &path).await?;
    let backend = store.backend_name();
    let listen = config.server.listen;
    let gateway = Arc::new(Gateway::new(config, store).map_err(|e| e.to_string())?);
    // Expired reservations go back to their caps even when no call comes.
    let _sweeper = gateway.spawn_sweeper(Duration::from_secs(1));
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(store = backend, "listening on {addr}");
    server::run(listener, gateway, shutdown_signal())
        .await
        .map_err(|e| e.to_string())
}

/// The budget store the config names. The Redis store connects in the
/// background: the gateway starts while Redis is down, and /readyz answers
/// 503 until Redis does.
async fn open_store(config: &Config, path: &Path) -> Result<BudgetStore, String> {
    let store = &config.store;
    Ok(match &store.backend {
        StoreBackend::Memory => BudgetStore::Memory(
            MemoryStore::new(store.settle_epsilon).with_ledger_retention(store.ledger_retention),
        ),
        StoreBackend::Redis { url } => {
            let redis = connect_redis(config, url, path).await?;
            for key in &config.keys {
                redis.track_key(&key.id, key.org.as_deref());
            }
            tracing::info!(endpoint = redis.endpoint(), "budget store: redis");
            BudgetStore::Redis(redis)
        }
    })
}

async fn connect_redis(config: &Config, url: &Secret, path: &Path) -> Result<RedisStore, String> {
    let store = &config.store;
    RedisStore::connect(url.expose(), store.settle_epsilon, store.ledger_retention)
        .await
        .map_err(|e| format!("{}: store.redis_url: {e}", path.display()))
}

/// `tollgate reconcile`: 0 when every counter balances, 1 on any drift,
/// [`EXIT_UNKNOWN`] when the books cannot be read.
async fn reconcile(path: &Path, json: bool) -> ExitCode {
    let rows = match read_books(path).await {
        Ok(rows) => rows,
        Err(message) => {
            tracing::error!("{message}");
            return ExitCode::from(EXIT_UNKNOWN);
        }
    };
    let text = if json {
        reconciliation_json(&rows)
    } else {
        reconciliation_table(&rows)
    };
    if let Err(error) = std::io::stdout().write_all(text.as_bytes()) {
        tracing::error!("cannot write the reconciliation: {error}");
        return ExitCode::from(EXIT_UNKNOWN);
    }
    if rows.iter().all(|row| row.drift() == 0) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every configured scope's rows, read from the Redis store.
async fn read_books(path: &Path) -> Result<Vec<Reconciliation>, String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let StoreBackend::Redis { url } = &config.store.backend else {
        return Err(format!(
            "{}: the memory store lives inside the gateway process; \
             reconcile needs store.backend = \"redis\"",
            path.display()
        ));
    };
    let redis = connect_redis(&config, url, path).await?;
    let endpoint = redis.endpoint();
    redis
        .ping()
        .await
        .map_err(|e| format!("cannot reach the budget store at {endpoint}: {e}"))?;
    redis
        .reconcile(&budget_tags(&config))
        .await
        .map_err(|e| format!("cannot read the books at {endpoint}: {e}"))
}

const COLUMNS: [&str; 8] = [
    "kind", "id", "period", "counter", "folded", "ledger", "open", "drift",
];

/// One line per scope and period, money in µUSD, columns aligned, and a
/// closing line saying whether the books balance.
fn reconciliation_table(rows: &[Reconciliation]) -> String {
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|row| {
            [
                row.kind.to_string(),
                row.id.clone(),
                row.period_id.clone(),
                row.counter.to_string(),
                row.folded.to_string(),
                row.ledger.to_string(),
                row.open.to_string(),
                row.drift().to_string(),
            ]
        })
        .collect();
    let mut widths = COLUMNS.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.len());
        }
    }
    let header = COLUMNS.map(str::to_owned);
    let mut text = String::new();
    for line in std::iter::once(&header).chain(&cells) {
        let mut out = String::new();
        for (column, (cell, width)) in line.iter().zip(widths).enumerate() {
            if column > 0 {
                out.push_str("  ");
            }
            // Names read left to right, amounts line up on their units.
            if column < 3 {
                out.push_str(&format!("{cell:<width$}"));
            } else {
                out.push_str(&format!("{cell:>width$}"));
            }
        }
        text.push_str(out.trim_end());
        text.push('\n');
    }
    let drifting = rows.iter().filter(|row| row.drift() != 0).count();
    text.push_str(&match drifting {
        0 => format!("{} rows, no drift (amounts in µUSD)\n", rows.len()),
        n => format!("DRIFT in {n} of {} rows (amounts in µUSD)\n", rows.len()),
    });
    text
}

/// The rows for machines: amounts in µUSD, and `balanced` for the verdict.
fn reconciliation_json(rows: &[Reconciliation]) -> String {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let drift = row.drift();
            let drift = i64::try_from(drift).unwrap_or(if drift < 0 { i64::MIN } else { i64::MAX });
            serde_json::json!({
                "kind": row.kind.as_str(),
                "id": row.id,
                "period_id": row.period_id,
                "counter_usd_micros": row.counter,
                "folded_usd_micros": row.folded,
                "ledger_usd_micros": row.ledger,
                "open_usd_micros": row.open,
                "drift_usd_micros": drift,
            })
        })
        .collect();
    let balanced = rows.iter().all(|row| row["drift_usd_micros"] == 0);
    format!(
        "{}\n",
        serde_json::json!({"balanced": balanced, "rows": rows})
    )
}

async fn mock_upstream(listen: SocketAddr, options: MockOptions) -> Result<(), String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!("mock upstream listening on {addr}");
    tollgate_mock::serve(
        listener,
        options,
        Arc::new(MockStats::default()),
        shutdown_signal(),
    )
    .await
    .map_err(|e| e.to_string())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
