//! The `tollgate` command: parses the command line and calls the library.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use tollgate::budget::{self, BudgetStore};
use tollgate::config::{hash_key, Config};
use tollgate::{admin_cli, reconcile, server};
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
    /// reservations, per period, on the SQLite or Redis store; exit 1 on any drift,
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
        /// Read a chat call's output limit from this field alone, like an
        /// OpenAI-compatible server that honours only one of them.
        #[arg(long, value_parser = ["max_tokens", "max_completion_tokens"])]
        chat_limit_field: Option<String>,
        /// Serve an Azure OpenAI deployment, as NAME=MODEL (the model its
        /// answers name); repeat for each. None: any deployment is served.
        #[arg(long = "azure-deployment", value_parser = deployment_arg)]
        azure_deployments: Vec<(String, String)>,
        /// Check the SigV4 signatures of Bedrock calls against these AWS
        /// credentials, as ACCESS_KEY_ID:SECRET_ACCESS_KEY.
        #[arg(long, value_parser = aws_credentials_arg)]
        aws_credentials: Option<(String, String)>,
    },
    /// Work with price tables.
    Prices {
        #[command(subcommand)]
        command: PricesCommand,
    },
    /// Administer the gateway.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Subcommand)]
enum PricesCommand {
    /// Write LiteLLM's model_prices_and_context_window.json as a tollgate
    /// price file (OpenAI and Anthropic chat, completion and embedding
    /// models).
    Import {
        /// LiteLLM's price file.
        file: PathBuf,
        /// Import only models matching these globs (e.g. "gpt-5*").
        #[arg(long, num_args = 1..)]
        models: Vec<String>,
        /// Write here instead of to standard output.
        #[arg(long)]
        output: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// The budget store itself.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Keys, orgs, spend, adjustments and open reservations, through the
    /// gateway's admin API (admin key from TOLLGATE_ADMIN_KEY).
    #[command(flatten)]
    Api(Box<admin_cli::Command>),
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Put a Redis store that lost its books back in service.
    ///
    /// After Redis restarted without its data, gateways fail closed (503).
    /// This writes a fresh store epoch, marked accepted, into tg:meta; they
    /// serve again within about a second. The spent counters the store lost
    /// restart from zero.
    AcceptEpoch {
        #[arg(long, env = "TOLLGATE_CONFIG", default_value = "config/tollgate.toml")]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let logs = tollgate::logging::init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::HashKey { key } => {
            let digest = hex::encode(hash_key(&key));
            std::io::Write::write_all(&mut std::io::stdout(), format!("{digest}\n").as_bytes())
                .map_err(|e| e.to_string())
        }
        Command::CheckConfig { config } => check_config(&config),
        Command::Serve { config } => runtime().and_then(|rt| rt.block_on(serve(config, &logs))),
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
            chat_limit_field,
            azure_deployments,
            aws_credentials,
        } => {
            let options = MockOptions {
                latency: Duration::from_millis(latency_ms),
                tokens_per_sec,
                expect_key,
                reply_tokens,
                chat_limit_field,
                azure_deployments,
                aws_credentials,
            };
            runtime().and_then(|rt| rt.block_on(mock_upstream(listen, options)))
        }
        Command::Prices {
            command:
                PricesCommand::Import {
                    file,
                    models,
                    output,
                },
        } => import_prices(&file, &models, output.as_deref()),
        Command::Admin {
            command:
                AdminCommand::Store {
                    command: StoreCommand::AcceptEpoch { config },
                },
        } => runtime().and_then(|rt| rt.block_on(accept_epoch(&config))),
        Command::Admin {
            command: AdminCommand::Api(command),
        } => runtime().and_then(|rt| {
            rt.block_on(admin_cli::run(*command))
                .map_err(|e| e.to_string())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn import_prices(file: &Path, models: &[String], output: Option<&Path>) -> Result<(), String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("{}: cannot read the price file: {e}", file.display()))?;
    let toml =
        tollgate::prices::import::litellm_to_toml(&text, &file.display().to_string(), models)
            .map_err(|e| e.to_string())?;
    match output {
        Some(path) => {
            std::fs::write(path, toml).map_err(|e| format!("{}: cannot write: {e}", path.display()))
        }
        None => std::io::stdout()
            .write_all(toml.as_bytes())
            .map_err(|e| e.to_string()),
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
    for vertex in config.providers.iter().filter_map(|p| p.vertex.as_ref()) {
        tollgate::family::vertex::token::ServiceAccount::load(&vertex.credentials_file)
            .map_err(|e| e.to_string())?;
    }
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

async fn serve(path: PathBuf, logs: &tollgate::logging::Logs) -> Result<(), String> {
    let config = Config::load(&path).map_err(|e| e.to_string())?;
    logs.use_format(config.server.log_format);
    let store = open_store(&config, &path).await?;
    server::raise_open_files_limit();
    let listen = config.server.listen;
    let main = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let admin =
        match config.server.admin_listen {
            Some(admin_listen) => Some(TcpListener::bind(admin_listen).await.map_err(|e| {
                format!("cannot listen on {admin_listen} (server.admin_listen): {e}")
            })?),
            None => None,
        };
    if config.server.admin_key.is_none() {
        tracing::info!(
            "admin API off: no admin key (server.admin_key_env or server.admin_key_sha256)"
        );
    }
    let backend = store.backend_name();
    let running = server::start(
        config,
        store,
        server::Listeners { main, admin },
        shutdown_signal(),
        server::Options::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    if let Some(addr) = running.admin_addr() {
        tracing::info!("admin API served on {addr}");
    }
    tracing::info!(store = backend, "listening on {}", running.addr());
    running.stopped().await.map_err(|e| e.to_string())
}

async fn open_store(config: &Config, path: &Path) -> Result<BudgetStore, String> {
    let store = budget::open(config)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if let BudgetStore::Redis(redis) = &store {
        tracing::info!(endpoint = redis.endpoint(), "budget store: redis");
    }
    Ok(store)
}

/// `tollgate reconcile`: 0 when every counter balances, 1 on any drift,
/// [`EXIT_UNKNOWN`] when the books cannot be read.
async fn reconcile(path: &Path, json: bool) -> ExitCode {
    let rows = match Config::load(path) {
        Ok(config) => reconcile::read_books(&config)
            .await
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(error) => Err(error.to_string()),
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(message) => {
            tracing::error!("{message}");
            return ExitCode::from(EXIT_UNKNOWN);
        }
    };
    let text = if json {
        reconcile::json(&rows)
    } else {
        reconcile::table(&rows)
    };
    if let Err(error) = std::io::stdout().write_all(text.as_bytes()) {
        tracing::error!("cannot write the reconciliation: {error}");
        return ExitCode::from(EXIT_UNKNOWN);
    }
    if reconcile::balanced(&rows) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `tollgate admin store accept-epoch`: prints what it did.
async fn accept_epoch(path: &Path) -> Result<(), String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let accepted = budget::redis::accept_epoch(&config)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::io::stdout()
        .write_all(accepted.to_string().as_bytes())
        .map_err(|e| format!("cannot write the result: {e}"))
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

/// A `--azure-deployment NAME=MODEL` argument.
fn deployment_arg(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, model)) if !name.is_empty() && !model.is_empty() => {
            Ok((name.to_owned(), model.to_owned()))
        }
        _ => Err(format!("{text:?} is not NAME=MODEL")),
    }
}

/// A `--aws-credentials ACCESS_KEY_ID:SECRET_ACCESS_KEY` argument.
fn aws_credentials_arg(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((id, secret)) if !id.is_empty() && !secret.is_empty() => {
            Ok((id.to_owned(), secret.to_owned()))
        }
        _ => Err("expected ACCESS_KEY_ID:SECRET_ACCESS_KEY".to_owned()),
    }
}
