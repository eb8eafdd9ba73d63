//! The `tollgate` command: parses the command line and calls the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use tollgate::budget::{BudgetStore, MemoryStore};
use tollgate::config::{hash_key, Config, StoreBackend};
use tollgate::mock::{self, MockOptions};
use tollgate::server::{self, Gateway};

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
    let store = match &config.store.backend {
        StoreBackend::Memory => BudgetStore::Memory(MemoryStore::new(config.store.settle_epsilon)),
        StoreBackend::Redis { url } => {
            // Connects in the background: the gateway starts while Redis is
            // down, and /readyz answers 503 until Redis does.
            let store = tollgate::budget::RedisStore::connect(
                url.expose(),
                config.store.settle_epsilon,
                tollgate::budget::DEFAULT_LEDGER_RETENTION,
            )
            .await
            .map_err(|e| format!("{}: store.redis_url: {e}", path.display()))?;
            for key in &config.keys {
                store.track_key(&key.id, key.org.as_deref());
            }
            tracing::info!(endpoint = store.endpoint(), "budget store: redis");
            BudgetStore::Redis(store)
        }
    };
    // Every hash tag budget data can live under: each org, and each key
    // without one.
    let tags: Vec<String> = config
        .orgs
        .iter()
        .map(|org| org.id.clone())
        .chain(
            config
                .keys
                .iter()
                .filter(|key| key.org.is_none())
                .map(|key| tollgate::budget::tag_for(None, &key.id)),
        )
        .collect();
    // Expired reservations go back to their caps even when no call comes.
    let _sweeper = store.spawn_sweeper(&tags, Duration::from_secs(1));
    let backend = store.backend_name();
    let listen = config.server.listen;
    let gateway = Gateway::new(config, store).map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(store = backend, "listening on {addr}");
    server::run(listener, Arc::new(gateway), shutdown_signal())
        .await
        .map_err(|e| e.to_string())
}

async fn mock_upstream(listen: SocketAddr, options: MockOptions) -> Result<(), String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!("mock upstream listening on {addr}");
    mock::serve(
        listener,
        options,
        Arc::new(mock::MockStats::default()),
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
