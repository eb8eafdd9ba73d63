//! The configurations under test, as running processes: D needs none, P is
//! the pass-through proxy, G0, G and GS are gateways. Each phase starts its
//! own set, so the streaming gateways start fresh (GS on a new file).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::client::Target;
use crate::error::BenchError;
use crate::procs::{self, Proc};
use crate::setup::{self, GatewayKey, RunFiles, Store};

/// The configurations, in the order each round runs them.
pub const LABELS: [&str; 5] = ["D", "P", "G0", "G", "GS"];

pub fn describe(label: &str) -> &'static str {
    match label {
        "D" => "direct to the mock",
        "P" => "bare pass-through",
        "G0" => "gateway, memory store",
        "GS" => "gateway, SQLite store",
        _ => "gateway, Redis store",
    }
}

/// One configuration while it runs.
pub struct Subject {
    pub label: &'static str,
    pub target: Target,
    /// The process between the client and the mock; `None` for D.
    pub proxy: Option<Proc>,
    /// Set for the gateways, whose books are checked.
    pub key: Option<GatewayKey>,
    /// Σ of the charges of its calls so far (gateways).
    pub charged: u64,
    /// Calls answered so far.
    pub calls: u64,
    /// The store's file in the run's temp dir (GS).
    pub store_file: Option<String>,
    /// The gateway's config file (gateways).
    pub config: Option<PathBuf>,
    /// Keys made through the admin API that its calls go out with
    /// (`--api-keys`), instead of `key`; 0 for none.
    pub api_keys: usize,
}

impl Subject {
    fn new(
        label: &'static str,
        target: Target,
        proxy: Option<Proc>,
        key: Option<GatewayKey>,
    ) -> Self {
        Subject {
            label,
            target,
            proxy,
            key,
            charged: 0,
            calls: 0,
            store_file: None,
            config: None,
            api_keys: 0,
        }
    }

    pub fn proxy_pid(&self) -> Option<u32> {
        self.proxy.as_ref().map(Proc::pid)
    }

    pub fn warnings(&self) -> Vec<String> {
        self.proxy.as_ref().map(Proc::warnings).unwrap_or_default()
    }
}

/// Where one phase's configurations send their calls.
pub struct Upstreams {
    /// D's and P's upstream in this phase.
    pub direct: SocketAddr,
    /// The gateways' providers: the instant mock and the streaming mock.
    pub instant: SocketAddr,
    pub streaming: SocketAddr,
}

/// Starts P, G0, G and GS for one phase, the gateways with the admin API
/// on when `admin`. G is optional: when `redis_down` names a reason, or
/// the gateway refuses to start on Redis (a build without the Redis
/// store), it is left out and the reason returned.
pub fn start(
    files: &RunFiles,
    phase: &str,
    upstreams: &Upstreams,
    redis_url: &str,
    redis_down: Option<&str>,
    admin: bool,
) -> Result<(Vec<Subject>, Option<String>), BenchError> {
    // D and P send a key only so every configuration sends the same bytes.
    let direct_key = format!("tg-bench-{}-direct", files.run_id);
    let mut subjects = vec![Subject::new(
        "D",
        Target::new("D", upstreams.direct, &direct_key)?,
        None,
        None,
    )];
    let passthrough = Proc::start(
        "pass-through (P)",
        setup::passthrough_command(upstreams.direct)?,
    )?;
    subjects.push(Subject::new(
        "P",
        Target::new("P", passthrough.addr, &direct_key)?,
        Some(passthrough),
        None,
    ));
    subjects.push(gateway(
        files,
        "G0",
        phase,
        &Store::Memory,
        upstreams,
        admin,
    )?);
    let g_skipped = match redis_down {
        Some(reason) => Some(reason.to_owned()),
        None => {
            let store = Store::Redis {
                url: redis_url.to_owned(),
                sink: None,
            };
            match gateway(files, "G", phase, &store, upstreams, admin) {
                Ok(subject) => {
                    subjects.push(subject);
                    None
                }
                Err(BenchError::NotStarted { log, .. }) => {
                    let reason = log
                        .lines()
                        .rev()
                        .find(|line| line.contains("ERROR"))
                        .unwrap_or(log.as_str())
                        .to_owned();
                    eprintln!("G did not start: {reason}");
                    Some(format!("the gateway refused Redis: {reason}"))
                }
                Err(error) => return Err(error),
            }
        }
    };
    let file = format!("gs-{phase}.db");
    let store = Store::Sqlite { file: file.clone() };
    let mut gs = gateway(files, "GS", phase, &store, upstreams, admin)?;
    gs.store_file = Some(file);
    subjects.push(gs);
    Ok((subjects, g_skipped))
}

/// Starts the gateway `label` on `store` with a config of its own.
pub fn gateway(
    files: &RunFiles,
    label: &'static str,
    phase: &str,
    store: &Store,
    upstreams: &Upstreams,
    admin: bool,
) -> Result<Subject, BenchError> {
    let (config, key) = files.gateway_config(
        &format!("{}-{phase}", label.to_lowercase()),
        store,
        upstreams.instant,
        upstreams.streaming,
        admin,
    )?;
    let process = Proc::start(&format!("gateway {label}"), setup::gateway_command(&config))?;
    let mut subject = Subject::new(
        label,
        Target::new(label, process.addr, &key.raw)?,
        Some(process),
        Some(key),
    );
    subject.config = Some(config);
    Ok(subject)
}

/// CPU ticks of the three processes a call crosses.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ticks {
    pub proxy: u64,
    pub mock: u64,
    pub client: u64,
}

impl Ticks {
    pub fn read(subject: &Subject, mock: &Proc) -> Ticks {
        Ticks {
            proxy: subject
                .proxy
                .as_ref()
                .and_then(Proc::cpu_ticks)
                .unwrap_or(0),
            mock: mock.cpu_ticks().unwrap_or(0),
            client: procs::own_cpu_ticks().unwrap_or(0),
        }
    }

    pub fn since(self, before: Ticks) -> Ticks {
        Ticks {
            proxy: self.proxy.saturating_sub(before.proxy),
            mock: self.mock.saturating_sub(before.mock),
            client: self.client.saturating_sub(before.client),
        }
    }

    pub fn plus(self, other: Ticks) -> Ticks {
        Ticks {
            proxy: self.proxy + other.proxy,
            mock: self.mock + other.mock,
            client: self.client + other.client,
        }
    }
}
