//! The configurations under test, as running processes: D needs none, P is
//! the pass-through proxy, G0 and G are gateways. Each phase starts its own
//! set, so the streaming gateways start fresh.

use std::net::SocketAddr;

use crate::client::Target;
use crate::error::BenchError;
use crate::procs::{self, Proc};
use crate::setup::{self, GatewayKey, RunFiles, Store};

/// The configurations, in the order each round runs them.
pub const LABELS: [&str; 4] = ["D", "P", "G0", "G"];

pub fn describe(label: &str) -> &'static str {
    match label {
        "D" => "direct to the mock",
        "P" => "bare pass-through",
        "G0" => "gateway, memory store",
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

/// Starts P, G0 and G for one phase. G is optional: when `redis_down`
/// names a reason, or the gateway refuses to start on Redis (a build
/// without the Redis store), it is left out and the reason returned.
pub fn start(
    files: &RunFiles,
    phase: &str,
    upstreams: &Upstreams,
    redis_url: &str,
    redis_down: Option<&str>,
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
    let (config, key) = files.gateway_config(
        &format!("g0-{phase}"),
        &Store::Memory,
        upstreams.instant,
        upstreams.streaming,
    )?;
    let gateway = Proc::start("gateway G0", setup::gateway_command(&config))?;
    subjects.push(Subject::new(
        "G0",
        Target::new("G0", gateway.addr, &key.raw)?,
        Some(gateway),
        Some(key),
    ));
    if let Some(reason) = redis_down {
        return Ok((subjects, Some(reason.to_owned())));
    }
    let store = Store::Redis {
        url: redis_url.to_owned(),
    };
    let (config, key) = files.gateway_config(
        &format!("g-{phase}"),
        &store,
        upstreams.instant,
        upstreams.streaming,
    )?;
    match Proc::start("gateway G", setup::gateway_command(&config)) {
        Ok(gateway) => {
            subjects.push(Subject::new(
                "G",
                Target::new("G", gateway.addr, &key.raw)?,
                Some(gateway),
                Some(key),
            ));
            Ok((subjects, None))
        }
        Err(BenchError::NotStarted { log, .. }) => {
            let reason = log
                .lines()
                .rev()
                .find(|line| line.contains("ERROR"))
                .unwrap_or(log.as_str())
                .to_owned();
            eprintln!("G did not start: {reason}");
            Ok((
                subjects,
                Some(format!("the gateway refused Redis: {reason}")),
            ))
        }
        Err(error) => Err(error),
    }
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
