//! The conversation mode (`--conversation`), start to end: the upstream
//! and the configurations D P N G0 G GS, a warm-up, then for each depth,
//! shallowest first, the agents' turns at concurrency 1 (one agent) and in
//! a closed loop (`--agents`, each resending its own conversation), round
//! after round, each round's turns sent to every configuration in turn;
//! after each depth, the gateways' books.
//!
//! A loop's turns are built before it starts, once per round, and every
//! configuration is sent the same bodies, so D, the direct call, is the
//! baseline of each one: what a configuration adds is its latency over
//! D's on the same bytes. The CPU of each process is read from /proc
//! around each configuration's share of a round, and divided by the turns
//! it answered.
//!
//! Like the other modes it uses keys and Redis keys named after the run,
//! and deletes exactly those afterwards, also after a failure or a panic.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::books::{self, SettleCheck};
use crate::calls::Calls;
use crate::conversation::{self, Agent, Depth, DEPTHS, SMOKE_DEPTHS};
use crate::drive::{self, Sample};
use crate::error::BenchError;
use crate::nginx::Nginx;
use crate::redis_stats::{RedisProbe, RunKeys};
use crate::run::{self, CpuUse, WARM_UP_CONNECTIONS};
use crate::setup::RunFiles;
use crate::subjects::{self, Subject, Ticks};
use crate::{Mode, Upstream};

/// Agents of the smoke run's closed loop.
const SMOKE_AGENTS: usize = 2;
/// How long a loop's turns may take on one configuration before the run
/// gives up: a margin, and a second a turn (a debug build is slow).
const LOOP_MARGIN: Duration = Duration::from_secs(30);
const LIMIT_PER_TURN: Duration = Duration::from_secs(1);

/// What the conversation mode is asked to do.
#[derive(Debug)]
pub struct ConversationPlan {
    pub depths: Vec<Depth>,
    pub rounds: u32,
    /// Agents of the closed loop.
    pub agents: usize,
    pub warm_up: Duration,
    pub upstream: Upstream,
    pub redis_url: String,
    pub cores: usize,
}

impl ConversationPlan {
    pub fn new(
        smoke: bool,
        rounds: u32,
        agents: usize,
        upstream: Upstream,
        redis_url: &str,
        cores: usize,
    ) -> Result<ConversationPlan, BenchError> {
        if agents == 0 || agents > 64 {
            return Err(BenchError::Invalid("--agents must be in 1..=64".to_owned()));
        }
        let (depths, rounds, agents, warm_up) = if smoke {
            (
                SMOKE_DEPTHS.to_vec(),
                1,
                agents.min(SMOKE_AGENTS),
                Duration::from_millis(100),
            )
        } else {
            (DEPTHS.to_vec(), rounds, agents, Duration::from_secs(1))
        };
        Ok(ConversationPlan {
            depths,
            rounds,
            agents,
            warm_up,
            upstream,
            redis_url: redis_url.to_owned(),
            cores,
        })
    }
}

/// One configuration's turns in one loop at one depth, every round merged.
pub struct Turns {
    pub label: &'static str,
    pub sample: Sample,
    /// CPU of the processes the turns crossed, and the turns answered.
    pub cpu: CpuUse,
}

/// One loop at one depth: what every configuration measured, and the
/// turns it was sent (the same for each).
pub struct Loop {
    pub mode: Mode,
    pub agents: usize,
    pub turns: Vec<Turns>,
    /// Over every round's script: prompt tokens, body bytes, turns.
    pub tokens: u64,
    pub bytes: u64,
    pub count: u64,
}

impl Loop {
    fn new(mode: Mode, agents: usize, subjects: &[Subject]) -> Loop {
        Loop {
            mode,
            agents,
            turns: subjects
                .iter()
                .map(|subject| Turns {
                    label: subject.label,
                    sample: Sample::empty(),
                    cpu: CpuUse::default(),
                })
                .collect(),
            tokens: 0,
            bytes: 0,
            count: 0,
        }
    }

    fn add(&mut self, label: &str, sample: &Sample, used: Ticks) {
        if let Some(turns) = self.turns.iter_mut().find(|t| t.label == label) {
            turns.cpu.ticks = turns.cpu.ticks.plus(used);
            turns.cpu.calls += sample.ok;
            turns.sample.merge(sample);
            turns.sample.elapsed += sample.elapsed;
        }
    }

    /// Mean prompt tokens and body bytes of a turn.
    pub fn mean_tokens(&self) -> f64 {
        self.tokens as f64 / self.count.max(1) as f64
    }

    pub fn mean_bytes(&self) -> f64 {
        self.bytes as f64 / self.count.max(1) as f64
    }

    pub fn of(&self, label: &str) -> Option<&Turns> {
        self.turns.iter().find(|t| t.label == label)
    }
}

/// One depth: its loops, concurrency 1 first.
pub struct DepthRun {
    pub depth: Depth,
    pub loops: Vec<Loop>,
}

/// What the conversation mode measured.
pub struct ConversationRun {
    pub depths: Vec<DepthRun>,
    /// The configurations that ran, in the order each round runs them.
    pub ran: Vec<&'static str>,
    pub skipped: Vec<(&'static str, String)>,
    /// Each gateway's books after each depth.
    pub settlement: Vec<(&'static str, SettleCheck)>,
    pub warnings: Vec<(&'static str, Vec<String>)>,
    pub redis_keys_deleted: usize,
    pub load_before: String,
    pub load_after: String,
    pub elapsed: Duration,
}

pub fn run(plan: &ConversationPlan, runtime: &Runtime) -> Result<ConversationRun, BenchError> {
    let started = Instant::now();
    let load_before = run::load_average();
    let files = RunFiles::new()?;
    let probe = RedisProbe::connect(&plan.redis_url);
    let redis_down = probe
        .as_ref()
        .err()
        .map(|error| format!("Redis at {} does not answer: {error}", plan.redis_url));
    let mut run_keys = RunKeys::new(probe.ok(), &files.run_id);
    let nginx = Nginx::find(plan.agents.max(WARM_UP_CONNECTIONS));
    let (upstream, upstreams) = run::instant_upstream(plan.upstream)?;
    let (mut subjects, skipped) = subjects::start(
        &files,
        "conversation",
        &upstreams,
        nginx.as_ref().map_err(String::as_str),
        &plan.redis_url,
        redis_down.as_deref(),
        false,
    )?;
    eprintln!("warming up");
    let calls = Arc::new(Calls::instant()?);
    for subject in &mut subjects {
        let sample = runtime.block_on(drive::closed_loop(
            &subject.target,
            &calls,
            WARM_UP_CONNECTIONS,
            plan.warm_up,
        ))?;
        run::account(subject, &sample, "warm-up")?;
    }
    let mut agents = (0..plan.agents as u64)
        .map(Agent::new)
        .collect::<Result<Vec<_>, _>>()?;
    let mut depths = Vec::with_capacity(plan.depths.len());
    let mut settlement = Vec::new();
    for &depth in &plan.depths {
        for agent in &mut agents {
            agent.grow_to(depth);
        }
        let mut loops = vec![
            Loop::new(Mode::Single, 1, &subjects),
            Loop::new(Mode::Closed, plan.agents, &subjects),
        ];
        for round in 1..=plan.rounds {
            for turns in &mut loops {
                eprintln!(
                    "{} turns, round {round}/{}: {}",
                    depth.label,
                    plan.rounds,
                    loop_name(turns.mode, turns.agents)
                );
                let script = conversation::script(&mut agents[..turns.agents], depth.turns);
                turns.tokens += script.tokens;
                turns.bytes += script.bytes;
                turns.count += script.turns;
                let limit = LOOP_MARGIN + LIMIT_PER_TURN * depth.turns as u32;
                for subject in &mut subjects {
                    let before = Ticks::read(subject, &upstream);
                    let sample = runtime.block_on(drive::scripted(
                        &subject.target,
                        script.agents.clone(),
                        limit,
                    ))?;
                    let used = Ticks::read(subject, &upstream).since(before);
                    run::account(subject, &sample, depth.phase)?;
                    eprintln!(
                        "  {:<2} {:>6.0} turns/s  p50 {:>9.0} µs",
                        subject.label,
                        sample.rps(),
                        sample.latency.value_at_quantile(0.50) as f64 / 1e3
                    );
                    turns.add(subject.label, &sample, used);
                }
            }
        }
        for subject in subjects.iter().filter(|subject| subject.key.is_some()) {
            let check = runtime.block_on(books::check(
                &subject.target,
                depth.phase,
                subject.calls,
                subject.charged,
                false,
            ))?;
            settlement.push((subject.label, check));
        }
        depths.push(DepthRun { depth, loops });
    }
    let warnings = subjects
        .iter()
        .map(|subject| (subject.label, subject.warnings()))
        .filter(|(_, warnings)| !warnings.is_empty())
        .collect();
    let ran = subjects.iter().map(|subject| subject.label).collect();
    drop(subjects);
    let redis_keys_deleted = run_keys.delete()?;
    Ok(ConversationRun {
        depths,
        ran,
        skipped,
        settlement,
        warnings,
        redis_keys_deleted,
        load_before,
        load_after: run::load_average(),
        elapsed: started.elapsed(),
    })
}

/// How a loop is named in the log and the report.
pub fn loop_name(mode: Mode, agents: usize) -> String {
    match mode {
        Mode::Single => "concurrency 1, one agent".to_owned(),
        _ => format!("closed loop, {agents} agents"),
    }
}
