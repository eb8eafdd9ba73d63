//! The configurations under test, as running processes: D needs none, P is
//! the bare hyper pass-through, N nginx, G0, GC, G and GS are gateways. GC
//! is G0 whose key also carries a model group, a customer template and
//! both rate limits (`setup::caps`), every call naming one of its
//! customers: what those cost, beside G0 in every round. Each phase starts
//! its own set, so the streaming gateways start fresh (GS on a new file);
//! GC runs in the instant calls' phase only.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::client::Target;
use crate::error::BenchError;
use crate::nginx::Nginx;
use crate::procs::{self, Proc, ProcessTree};
use crate::setup::{self, GatewayKey, RunFiles, Store};

/// The configurations, in the order each round runs them.
/// GD is left out unless `--drain` asks for it ([`labels`]).
pub const LABELS: [&str; 8] = ["D", "P", "N", "G0", "GC", "G", "GD", "GS"];

/// The configurations of a run: GD only with `--drain`.
pub fn labels(drain: bool) -> Vec<&'static str> {
    LABELS
        .into_iter()
        .filter(|label| drain || *label != DRAINED)
        .collect()
}

pub fn describe(label: &str) -> &'static str {
    match label {
        "D" => "direct to upstream",
        "P" => "bare pass-through",
        "N" => "nginx pass-through",
        "G0" => "gateway, memory store",
        "GC" => "G0 + caps, customers",
        "GD" => "G, drained to a sink",
        "GS" => "gateway, SQLite store",
        _ => "gateway, Redis store",
    }
}

/// The gateway whose key carries the caps (`setup::caps`).
pub const CAPPED: &str = "GC";

/// The Redis gateway whose ledger is drained into a sink (`--drain`).
pub const DRAINED: &str = "GD";

/// One configuration while it runs.
pub struct Subject {
    pub label: &'static str,
    pub target: Target,
    /// The process between the client and the upstream; `None` for D.
    pub proxy: Option<Proc>,
    /// Set for the gateways, whose books are checked.
    pub key: Option<GatewayKey>,
    /// Σ of the charges of its calls so far (gateways).
    pub charged: u64,
    /// Calls answered so far.
    pub calls: u64,
    /// The store's file in the run's temp dir (GS).
    pub store_file: Option<String>,
    /// The ledger sink's file in the run's temp dir (GD).
    pub sink_file: Option<String>,
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
            sink_file: None,
            config: None,
            api_keys: 0,
        }
    }

    pub fn proxy_pid(&self) -> Option<u32> {
        self.proxy.as_ref().map(Proc::pid)
    }

    /// The proxy's processes, for its memory: nginx's master and worker.
    pub fn proxy_tree(&self) -> Option<ProcessTree> {
        self.proxy.as_ref().map(Proc::tree)
    }

    pub fn warnings(&self) -> Vec<String> {
        self.proxy.as_ref().map(Proc::warnings).unwrap_or_default()
    }
}

/// Where one phase's configurations send their calls.
pub struct Upstreams {
    /// D's, P's and N's upstream in this phase.
    pub direct: SocketAddr,
    /// The gateways' providers: that of the instant calls (the instant
    /// upstream or the mock) and the streaming mock.
    pub instant: SocketAddr,
    pub streaming: SocketAddr,
}

/// Configurations left out of a phase, with the reason.
pub type Skipped = Vec<(&'static str, String)>;

/// Starts P, N, G0, G and GS for one phase, the gateways with the admin API
/// on when `admin` (GC is started apart, by [`start_capped`]). N and G are
/// optional: N when `nginx` is `Err` (not installed) or nginx does not
/// start; G when `redis_down` names a reason, or the gateway refuses to
/// start on Redis (a build without the Redis store). Those left out are
/// returned with the reason.
pub fn start(
    files: &RunFiles,
    phase: &str,
    upstreams: &Upstreams,
    nginx: Result<&Nginx, &str>,
    redis_url: &str,
    redis_down: Option<&str>,
    admin: bool,
) -> Result<(Vec<Subject>, Skipped), BenchError> {
    let mut skipped = Skipped::new();
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
    let started = nginx.map_err(str::to_owned).and_then(|nginx| {
        nginx
            .start(files.dir(), phase, upstreams.direct)
            .map_err(|error| {
                eprintln!("N did not start: {error}");
                format!("nginx did not start: {error}")
            })
    });
    match started {
        Ok(proc) => subjects.push(Subject::new(
            "N",
            Target::new("N", proc.addr, &direct_key)?,
            Some(proc),
            None,
        )),
        Err(reason) => skipped.push(("N", reason)),
    }
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
    skipped.extend(g_skipped.map(|reason| ("G", reason)));
    Ok((subjects, skipped))
}

/// Starts GC, G0 with the caps, and puts it just after G0 in `subjects`,
/// so each round runs the two back to back.
pub fn start_capped(
    subjects: &mut Vec<Subject>,
    files: &RunFiles,
    phase: &str,
    upstreams: &Upstreams,
    admin: bool,
) -> Result<(), BenchError> {
    let gc = gateway(files, CAPPED, phase, &Store::Memory, upstreams, admin)?;
    let at = subjects
        .iter()
        .position(|subject| subject.label == "G0")
        .map_or(subjects.len(), |g0| g0 + 1);
    subjects.insert(at, gc);
    Ok(())
}

/// Starts GD, G with its ledger drained into `gd-{phase}-ledger.db` in
/// the run's temp dir, and puts it just after G in `subjects`, so each
/// round runs the two back to back. `Ok(false)` when G is not among
/// `subjects` (Redis is down or refused): GD is not started either.
pub fn start_drained(
    subjects: &mut Vec<Subject>,
    files: &RunFiles,
    phase: &str,
    upstreams: &Upstreams,
    redis_url: &str,
    admin: bool,
) -> Result<bool, BenchError> {
    let Some(g) = subjects.iter().position(|subject| subject.label == "G") else {
        return Ok(false);
    };
    let sink = format!("gd-{phase}-ledger.db");
    let store = Store::Redis {
        url: redis_url.to_owned(),
        sink: Some(sink.clone()),
    };
    let mut gd = gateway(files, DRAINED, phase, &store, upstreams, admin)?;
    gd.sink_file = Some(sink);
    subjects.insert(g + 1, gd);
    Ok(true)
}

/// Starts the gateway `label` on `store` with a config of its own; GC's
/// key carries the caps and its calls name customers.
pub fn gateway(
    files: &RunFiles,
    label: &'static str,
    phase: &str,
    store: &Store,
    upstreams: &Upstreams,
    admin: bool,
) -> Result<Subject, BenchError> {
    let caps = label == CAPPED;
    let (config, key) = files.gateway_config(
        &format!("{}-{phase}", label.to_lowercase()),
        store,
        upstreams.instant,
        upstreams.streaming,
        admin,
        caps,
    )?;
    let process = Proc::start(&format!("gateway {label}"), setup::gateway_command(&config))?;
    let mut target = Target::new(label, process.addr, &key.raw)?;
    if caps {
        target = target.with_customers(setup::caps::CUSTOMERS)?;
    }
    let mut subject = Subject::new(label, target, Some(process), Some(key));
    subject.config = Some(config);
    Ok(subject)
}

/// CPU ticks of the processes a call crosses (nginx's master and worker
/// together), and the µs Redis reports for itself when the proxy uses it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ticks {
    pub proxy: u64,
    pub upstream: u64,
    pub client: u64,
    /// From Redis's `INFO cpu`, set by the caller (G only).
    pub redis_usec: u64,
}

impl Ticks {
    pub fn read(subject: &Subject, upstream: &Proc) -> Ticks {
        Ticks {
            proxy: subject
                .proxy
                .as_ref()
                .and_then(Proc::cpu_ticks)
                .unwrap_or(0),
            upstream: upstream.cpu_ticks().unwrap_or(0),
            client: procs::own_cpu_ticks().unwrap_or(0),
            redis_usec: 0,
        }
    }

    pub fn since(self, before: Ticks) -> Ticks {
        Ticks {
            proxy: self.proxy.saturating_sub(before.proxy),
            upstream: self.upstream.saturating_sub(before.upstream),
            client: self.client.saturating_sub(before.client),
            redis_usec: self.redis_usec.saturating_sub(before.redis_usec),
        }
    }

    pub fn plus(self, other: Ticks) -> Ticks {
        Ticks {
            proxy: self.proxy + other.proxy,
            upstream: self.upstream + other.upstream,
            client: self.client + other.client,
            redis_usec: self.redis_usec + other.redis_usec,
        }
    }
}
