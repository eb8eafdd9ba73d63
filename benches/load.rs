//! What the gateway costs, measured side by side in one command:
//!
//! ```sh
//! cargo bench --bench load              # the full run (a few minutes)
//! cargo bench --bench load -- --smoke   # a few seconds: does it all still work?
//! cargo bench --bench load -- --soak 20m --soak-store redis,memory,sqlite
//!                                       # one gateway per store at a steady rate:
//!                                       # does its memory stay flat?
//! cargo bench --bench load -- --conversation
//!                                       # agents' turns resent whole, 1k to 128k
//!                                       # tokens deep (a few minutes)
//! cargo bench --bench load -- --help    # every knob
//! ```
//!
//! It starts the gateway on the memory store (G0), on Redis (G) and on a
//! SQLite file in the run's temp dir (GS), a bare pass-through proxy (P,
//! `load/passthrough.rs`) and, where it is installed, nginx as a second
//! pass-through (N, `load/nginx.rs`), then drives them and a direct
//! connection to their upstream (D) with a closed loop, a concurrency-1
//! loop, an open loop and many concurrent streams, and prints one table
//! per mode with the targets. Beside G0 in the first three modes runs GC,
//! G0 whose key also has a model group, a customer template and both rate
//! limits (`setup::caps`), its calls naming customers in turn: what those
//! add to a call, CPU and throughput, against G0 in the same rounds.
//! `--drain` adds GD beside G there: G whose ledger the gateway drains
//! into a sink file in the run's temp dir (`store.ledger_sink_path`), with
//! its throughput and closed-loop p99 against G's in the same rounds and
//! the sink's rows counted against its calls. The first three modes call the instant
//! upstream (`load/instant.rs`, fixed replies, no token counting) unless
//! `--upstream mock` names the release binary's tokenizing mock provider,
//! which the streams always use (paced streaming). See `load/run.rs` for
//! the order of events and `load/report.rs` for how figures are computed.
//! `--api-keys N` makes N keys through the admin API on each gateway of
//! the instant phase and spreads its calls over them (`load/api_keys.rs`;
//! the keys' documents stay in the store, on Redis too).
//! `--store-core` keeps the run on one core and gives GS's store threads
//! another (`load/cores.rs`): GS's latency when its postings have a core of
//! their own.
//! `--soak` runs instead one gateway under the open loop for a long time
//! and prints a line per interval and verdicts on its memory
//! (`load/soak.rs`, `load/soak_report.rs`).
//! `--conversation` runs instead the agents' conversations: every turn
//! resends the whole conversation, 1k to 128k tokens deep, to D P N G0 G
//! GS at concurrency 1 and in a closed loop of `--agents`, with the added
//! latency and CPU per turn at each depth (`load/conversation.rs`,
//! `load/conversation_run.rs`, `load/conversation_report.rs`). `--smoke`
//! ends with a shallow one unless `--modes` names the modes.
//!
//! Traffic goes only to 127.0.0.1; every loop is bounded in count and
//! time; every process started is killed when the run ends, fails or
//! panics, and (through `setpriv --pdeathsig`, or for nginx a wrapper that
//! stops it when its stdin closes) when the benchmark itself is killed.
//! On Redis it creates keys named after the run and deletes exactly those
//! afterwards, also after a failure; the SQLite files and nginx's prefix
//! go with the temp dir.

#[path = "load/api_keys.rs"]
mod api_keys;
#[path = "load/books.rs"]
mod books;
#[path = "load/calls.rs"]
mod calls;
#[path = "load/child.rs"]
mod child;
#[path = "load/client.rs"]
mod client;
#[path = "load/conversation.rs"]
mod conversation;
#[path = "load/conversation_report.rs"]
mod conversation_report;
#[path = "load/conversation_run.rs"]
mod conversation_run;
#[path = "load/cores.rs"]
mod cores;
#[path = "load/drive.rs"]
mod drive;
#[path = "load/error.rs"]
mod error;
#[path = "load/figures.rs"]
mod figures;
#[path = "load/instant.rs"]
mod instant;
#[path = "load/nginx.rs"]
mod nginx;
#[path = "load/passthrough.rs"]
mod passthrough;
#[path = "load/procs.rs"]
mod procs;
#[path = "load/redis_stats.rs"]
mod redis_stats;
#[path = "load/report.rs"]
mod report;
#[path = "load/run.rs"]
mod run;
#[path = "load/setup.rs"]
mod setup;
#[path = "load/soak.rs"]
mod soak;
#[path = "load/soak_report.rs"]
mod soak_report;
#[path = "load/streams.rs"]
mod streams;
#[path = "load/subjects.rs"]
mod subjects;
#[path = "load/targets.rs"]
mod targets;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};

use conversation_run::ConversationPlan;
use error::BenchError;
use soak::{SoakPlan, SoakStore};

/// The argument that turns this binary into the pass-through proxy.
pub const SERVE_PASSTHROUGH: &str = "--serve-passthrough";
/// The argument that turns this binary into the instant upstream.
pub const SERVE_INSTANT: &str = "--serve-instant";

/// The provider behind every configuration in the throughput and latency
/// modes (the streams always stream from the paced mock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Upstream {
    /// The benchmark's own server: fixed replies, no token counting, so the
    /// upstream costs as little as possible and the proxies are what differ.
    Instant,
    /// `tollgate mock-upstream`: counts every call's tokens with the real
    /// tokenizer, and spends more CPU per call than any proxy.
    Mock,
}

impl Upstream {
    pub fn describe(self) -> &'static str {
        match self {
            Upstream::Instant => "the instant upstream",
            Upstream::Mock => "the tokenizing mock",
        }
    }
}

/// How load is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Closed loop at full concurrency: maximum throughput.
    Closed,
    /// Closed loop on one connection: latency of one call at a time.
    Single,
    /// Open loop at a fixed rate, latency from each intended start.
    Open,
    /// Many concurrent SSE streams.
    Streams,
}

impl Mode {
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Closed => "closed loop",
            Mode::Single => "concurrency 1",
            Mode::Open => "open loop",
            Mode::Streams => "streams",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "load",
    about = "Load benchmark: direct vs pass-through (hyper, nginx) vs tollgate (memory, Redis, SQLite)"
)]
struct Cli {
    /// A few seconds: tiny load, 20 streams, one round, and (unless
    /// `--modes` names the modes) a shallow conversation. Checks that the
    /// benchmark runs and that every call and stream settles.
    #[arg(long)]
    smoke: bool,
    /// Modes to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "closed,single,open,streams"
    )]
    modes: Vec<Mode>,
    /// Upstream of the closed, concurrency-1 and open modes: `instant`, the
    /// benchmark's own fixed-reply server, or `mock`, `tollgate
    /// mock-upstream`, which counts tokens on every call. The streams and
    /// the soak always use the mock.
    #[arg(long, value_enum, default_value = "instant")]
    upstream: Upstream,
    /// Rounds of D P N G0 GC G (GD) GS in every mode (GC, GD: the instant
    /// calls only).
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Seconds each configuration runs per mode and round.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Connections of the closed (max throughput) loop.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Calls per second of the open loop.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Concurrent SSE streams.
    #[arg(long, default_value_t = 1000)]
    streams: usize,
    /// Streams started per second (all are open at once when the ramp is
    /// shorter than a stream).
    #[arg(long, default_value_t = 500)]
    stream_rate: u32,
    /// Pace of the streaming mock (`tollgate mock-upstream --tokens-per-sec`).
    #[arg(long, default_value_t = 20)]
    tokens_per_sec: u32,
    /// Tokens per streamed reply.
    #[arg(long, default_value_t = 60)]
    stream_tokens: u64,
    /// Keys to make through the admin API on each gateway of the instant
    /// calls (closed, single, open), whose calls then go out with them in
    /// turn instead of the config's key; 0: the config's key.
    #[arg(long, default_value_t = 0)]
    api_keys: usize,
    /// Redis for the G configuration.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Soak instead of running the modes: one gateway under a steady open
    /// loop for this long (90s, 20m, 1h), a line a minute (every 10 s
    /// under 3 minutes): does its memory stay flat?
    #[arg(long, value_parser = soak::parse_duration, conflicts_with_all = ["smoke", "modes", "upstream", "store_core"])]
    soak: Option<Duration>,
    /// The conversation mode instead of the modes: agents' turns, each
    /// resending the whole conversation, 1k to 128k tokens deep, at
    /// concurrency 1 and in a closed loop of `--agents`; with `--smoke`,
    /// shallow and few.
    #[arg(long, conflicts_with_all = ["soak", "modes", "store_core", "api_keys"])]
    conversation: bool,
    /// Agents of the conversation mode's closed loop, each resending a
    /// conversation of its own.
    #[arg(long, default_value_t = 8)]
    agents: usize,
    /// Calls per second of the soak.
    #[arg(long, default_value_t = 2000)]
    soak_rate: u32,
    /// Stores to soak, comma-separated, one after another.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "redis")]
    soak_store: Vec<SoakStore>,
    /// Worker threads of the load generator's runtime (1: a current-thread
    /// runtime, the cheapest client).
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Pins the run to one core (the first this process may use) and GS's
    /// store threads (its writer and checkpoint thread) to the next, so GS's postings have a core of their
    /// own, as on a machine with cores to spare (`load/cores.rs`). Meant
    /// for `--modes single`: the other loops then measure one core.
    #[arg(long)]
    store_core: bool,
    /// Runs GD beside G in the closed, concurrency-1 and open loops: G
    /// whose ledger is drained into a sink file in the run's temp dir,
    /// what the drain costs against G in the same rounds.
    #[arg(long, conflicts_with_all = ["soak", "conversation"])]
    drain: bool,
    /// Passed by `cargo bench`; without it (under `cargo test`) the
    /// benchmark only says how to run it.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The knobs of one run, after `--smoke` has had its say.
#[derive(Debug)]
pub struct Settings {
    pub smoke: bool,
    pub modes: Vec<Mode>,
    pub rounds: u32,
    pub seconds: Duration,
    pub warm_up: Duration,
    pub connections: usize,
    pub rate: u32,
    pub max_in_flight: usize,
    pub streams: usize,
    pub stream_rate: u32,
    pub tokens_per_sec: u32,
    pub stream_tokens: u64,
    pub redis_url: String,
    pub api_keys: usize,
    pub upstream: Upstream,
    /// `--store-core`: the cores the run and GS's store threads were
    /// pinned to.
    pub store_core: Option<cores::Cores>,
    /// The cores this process could use when it started, before any
    /// pinning.
    pub cores: usize,
    /// `--drain`: GD runs beside G.
    pub drain: bool,
}

impl Settings {
    fn from_cli(cli: &Cli) -> Result<Settings, BenchError> {
        if !(cli.seconds.is_finite() && cli.seconds > 0.0 && cli.seconds <= 600.0) {
            return Err(BenchError::Invalid(
                "--seconds must be in (0, 600]".to_owned(),
            ));
        }
        if cli.rounds == 0 || cli.rounds > 100 {
            return Err(BenchError::Invalid(
                "--rounds must be in 1..=100".to_owned(),
            ));
        }
        if cli.streams == 0
            || cli.streams > 20_000
            || cli.connections == 0
            || cli.connections > 4_096
        {
            return Err(BenchError::Invalid(
                "--streams must be in 1..=20000 and --connections in 1..=4096".to_owned(),
            ));
        }
        if cli.api_keys > 100_000 {
            return Err(BenchError::Invalid(
                "--api-keys must be in 0..=100000".to_owned(),
            ));
        }
        if cli.smoke {
            return Ok(Settings {
                smoke: true,
                modes: cli.modes.clone(),
                rounds: 1,
                seconds: Duration::from_millis(500),
                warm_up: Duration::from_millis(100),
                connections: 4,
                rate: 50,
                max_in_flight: 16,
                streams: 20,
                stream_rate: 100,
                tokens_per_sec: 100,
                stream_tokens: 10,
                redis_url: cli.redis_url.clone(),
                api_keys: cli.api_keys,
                upstream: cli.upstream,
                store_core: None,
                cores: usable_cores(),
                drain: cli.drain,
            });
        }
        Ok(Settings {
            smoke: false,
            modes: cli.modes.clone(),
            rounds: cli.rounds,
            seconds: Duration::from_secs_f64(cli.seconds),
            warm_up: Duration::from_secs(1),
            connections: cli.connections,
            rate: cli.rate,
            max_in_flight: 512,
            streams: cli.streams,
            stream_rate: cli.stream_rate,
            tokens_per_sec: cli.tokens_per_sec,
            stream_tokens: cli.stream_tokens,
            redis_url: cli.redis_url.clone(),
            api_keys: cli.api_keys,
            upstream: cli.upstream,
            store_core: None,
            cores: usable_cores(),
            drain: cli.drain,
        })
    }
}

fn usable_cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(SERVE_PASSTHROUGH) {
        let upstream = args.get(2).and_then(|addr| addr.parse().ok());
        let Some(upstream) = upstream else {
            eprintln!("usage: {SERVE_PASSTHROUGH} HOST:PORT");
            return ExitCode::FAILURE;
        };
        return match passthrough::serve(upstream) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("pass-through proxy: {error}");
                ExitCode::FAILURE
            }
        };
    }
    if args.get(1).map(String::as_str) == Some(SERVE_INSTANT) {
        return match instant::serve() {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("instant upstream: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    // The plain smoke run, CI's, covers the conversation mode too.
    let modes_named = matches.value_source("modes") == Some(ValueSource::CommandLine);
    if !cli.bench && !cli.smoke {
        eprintln!(
            "load: a benchmark, not a test; run `cargo bench --bench load` (or `-- --smoke`)"
        );
        return ExitCode::SUCCESS;
    }
    match bench(&cli, modes_named) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("load: a call or a stream was not settled as it should be (see above)");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("load: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the benchmark and prints the report; `Ok(false)` when the run's
/// own checks failed. `modes_named`: `--modes` was given.
fn bench(cli: &Cli, modes_named: bool) -> Result<bool, BenchError> {
    let mut settings = Settings::from_cli(cli)?;
    if cli.store_core {
        settings.store_core = Some(cores::pin_run()?);
    }
    let mut builder = if cli.client_threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(cli.client_threads);
        builder
    };
    let runtime = builder.enable_all().build()?;
    if let Some(duration) = cli.soak {
        let plan = SoakPlan::new(
            duration,
            cli.soak_rate,
            cli.soak_store.clone(),
            cli.redis_url.clone(),
        )?;
        return soak::run(&plan, &runtime);
    }
    let conversation = (cli.conversation || (cli.smoke && !modes_named))
        .then(|| {
            ConversationPlan::new(
                cli.smoke,
                settings.rounds,
                cli.agents,
                cli.upstream,
                &cli.redis_url,
                settings.cores,
            )
        })
        .transpose()?;
    let mut holds = true;
    if !cli.conversation {
        let outcome = run::run(&settings, &runtime)?;
        let report = report::render(&settings, &outcome);
        print(&report.text)?;
        holds &= report.checks_hold;
    }
    if let Some(plan) = conversation {
        let outcome = conversation_run::run(&plan, &runtime)?;
        let report = conversation_report::render(&plan, &outcome);
        print(&report.text)?;
        holds &= report.checks_hold;
    }
    if settings.smoke {
        print(&format!(
            "\nsmoke: {}\n",
            if holds {
                "every call and stream settled"
            } else {
                "FAILED"
            }
        ))?;
    }
    Ok(holds)
}

fn print(text: &str) -> Result<(), BenchError> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
