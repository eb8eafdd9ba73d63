//! The steps of a simulation, the small world they act on, and the seeded
//! generator that draws a sequence of them.
//!
//! A step is plain data naming exec ids by number, so any sequence (a
//! prefix, or one with steps left out while shrinking) can be replayed
//! against a fresh store and model; the generator runs a model of its own
//! only to choose steps that mean something (settle what is open, retry
//! what was answered, settle late what expired).

use std::time::Duration;

use chrono::TimeDelta;

use super::model::{Model, Standing};
use crate::budget::{
    Adjustment, OnExpiry, Period, ReserveRequest, RunScope, Scope, ScopeKind, Settlement,
};
use crate::money::{UsdMicros, MAX_USD_MICROS};
use crate::usage::Usage;

/// SplitMix64: a few lines, good enough to draw test steps, and the same
/// sequence on every platform for a seed.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.range(0, items.len() as u64 - 1) as usize].clone())
    }
}

/// Store time moves in whole steps of this, and every TTL is a whole
/// number of them plus half of one, so no deadline ever falls on the
/// instant a step looks at it. On Redis, whose clock keeps running under
/// the shift the simulation adds, that keeps expiry decided by the steps
/// alone while the real time elapsed stays under half a tick.
pub(super) const TICK_SECS: u64 = 100;

/// The settle epsilon of every simulated store.
pub(super) const EPSILON: UsdMicros = 100;

/// The scopes a simulation acts on: three keys (two in one org, with
/// different periods, one alone) and up to three runs in each. Ids carry
/// a prefix of the run's own, so simulations share a Redis unharmed.
pub(super) struct World {
    pub(super) keys: Vec<Scope>,
    pub(super) org: Scope,
    /// Whether key `i` is in the org.
    in_org: Vec<bool>,
    prefix: String,
    pub(super) on_expiry: OnExpiry,
}

/// Each run's cap as its calls name it: none, or one of two.
const RUN_CAPS: [Option<UsdMicros>; 3] = [None, Some(6_000), Some(9_000)];

impl World {
    pub(super) fn new(prefix: &str, on_expiry: OnExpiry) -> World {
        let scope = |kind: ScopeKind, name: &str, cap: UsdMicros, period: Period| Scope {
            kind,
            id: format!("{prefix}-{name}"),
            cap,
            period,
        };
        World {
            keys: vec![
                scope(ScopeKind::Key, "k0", 20_000, Period::Day),
                scope(ScopeKind::Key, "k1", 30_000, Period::Total),
                scope(ScopeKind::Key, "k2", 15_000, Period::Hour),
            ],
            org: scope(ScopeKind::Org, "o0", 40_000, Period::Day),
            in_org: vec![true, true, false],
            prefix: prefix.to_owned(),
            on_expiry,
        }
    }

    pub(super) fn org_of(&self, key: usize) -> Option<&Scope> {
        self.in_org[key].then_some(&self.org)
    }

    pub(super) fn exec_id(&self, exec: u32) -> String {
        format!("{}-x{exec}", self.prefix)
    }

    pub(super) fn run_id(&self, key: usize, run: u8) -> String {
        RunScope::new(&self.keys[key].id, &format!("r{run}"), None).id
    }

    /// Every run scope id a simulation can name.
    pub(super) fn run_ids(&self) -> Vec<String> {
        (0..self.keys.len())
            .flat_map(|key| (0..3).map(move |run| (key, run)))
            .map(|(key, run)| self.run_id(key, run))
            .collect()
    }

    pub(super) fn request(&self, op: &Reserve) -> ReserveRequest {
        ReserveRequest {
            exec_id: self.exec_id(op.exec),
            key: self.keys[op.key].clone(),
            org: self.org_of(op.key).cloned(),
            run: op.run.map(|(run, cap)| {
                RunScope::new(
                    &self.keys[op.key].id,
                    &format!("r{run}"),
                    RUN_CAPS[cap as usize],
                )
            }),
            model: "gpt-4o-mini".to_owned(),
            min_amount: op.min,
            amount: op.max,
            ttl: Duration::from_secs(op.ttl_ticks * TICK_SECS + TICK_SECS / 2),
        }
    }

    /// The claim `op` holds, as the gateway writes one (64 hex digits):
    /// the same number under another key is another claim.
    pub(super) fn claim(&self, op: &Reserve) -> Option<String> {
        op.claim
            .map(|claim| format!("{:064x}", op.key as u64 * 16 + u64::from(claim)))
    }

    pub(super) fn settlement(&self, op: &Settle) -> Settlement {
        // The wrong owner is the next key over: another key, maybe
        // another org.
        let key = (op.key + usize::from(op.wrong_owner)) % self.keys.len();
        Settlement {
            exec_id: self.exec_id(op.exec),
            key: self.keys[key].id.clone(),
            org: self.org_of(key).map(|org| org.id.clone()),
            model: "gpt-4o-mini".to_owned(),
            usage: Usage {
                input: 1_000,
                output: 100,
                ..Usage::default()
            },
            actual: op.actual,
            estimated: op.estimated,
        }
    }

    pub(super) fn adjustment(&self, op: &Adjust) -> Adjustment {
        Adjustment {
            exec_id: format!("{}-a{}", self.prefix, op.id),
            key: self.keys[op.key].clone(),
            org: self.org_of(op.key).cloned(),
            amount: op.amount,
            note: "simulated".to_owned(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Reserve {
    pub(super) exec: u32,
    pub(super) key: usize,
    /// The run (0..3 inside the key) and which of `RUN_CAPS` the call names.
    pub(super) run: Option<(u8, u8)>,
    pub(super) min: UsdMicros,
    pub(super) max: UsdMicros,
    pub(super) ttl_ticks: u64,
    /// The client's idempotency claim (one of a few per key), if any.
    pub(super) claim: Option<u8>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Settle {
    pub(super) exec: u32,
    /// The key the reserve was made for.
    pub(super) key: usize,
    pub(super) actual: UsdMicros,
    pub(super) estimated: bool,
    /// Names another key (and org) than the reservation's.
    pub(super) wrong_owner: bool,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Adjust {
    pub(super) id: u32,
    pub(super) key: usize,
    pub(super) amount: i64,
}

/// One step of a simulation.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    /// A reserve, or a retry of one (the same exec id and request).
    Reserve(Reserve),
    /// A settle, or a retry of one.
    Settle(Settle),
    /// An operator's refund (negative) or credit, or a retry of one.
    Adjust(Adjust),
    /// The clock moves on by whole ticks and the sweep runs.
    Advance { ticks: u64 },
    /// SQLite: the writer stops posting its journal to the file, so what
    /// follows lives only in the journal until the next crash replays it.
    /// Nothing elsewhere.
    PausePosting,
    /// SQLite: the process dies and the store is reopened from its file
    /// and journal. Redis: the gateway is gone and another one connects
    /// (what the first held open expires by its deadline). Memory: nothing.
    Crash,
}

/// Draws `steps` steps from `seed`.
pub(super) fn generate(world: &World, seed: u64, steps: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut model = Model::new(super::start(), world.on_expiry, EPSILON);
    let mut reserves: Vec<Reserve> = Vec::new();
    let mut settles: Vec<Settle> = Vec::new();
    let mut adjusts: Vec<Adjust> = Vec::new();
    let mut ops = Vec::with_capacity(steps);
    let mut paused_for = None;
    while ops.len() < steps {
        let with = |standing: Standing, model: &Model| -> Vec<Reserve> {
            reserves
                .iter()
                .filter(|r| model.standing(&world.exec_id(r.exec)) == standing)
                .copied()
                .collect()
        };
        let roll = rng.range(0, 99);
        let op = match roll {
            0..=29 => {
                let max = rng.range(300, 6_000);
                let min = if rng.chance(40) {
                    rng.range(1, max)
                } else {
                    max
                };
                let run = rng.chance(35).then(|| {
                    let cap = if rng.chance(85) {
                        1
                    } else {
                        rng.range(0, 2) as u8
                    };
                    (rng.range(0, 2) as u8, cap)
                });
                let mut reserve = Reserve {
                    exec: reserves.len() as u32,
                    key: rng.range(0, 2) as usize,
                    run,
                    min,
                    max,
                    ttl_ticks: rng.range(1, 6),
                    claim: rng.chance(25).then(|| rng.range(0, 2) as u8),
                };
                // Now and then the client sends a claimed request again
                // while the first is in flight.
                let in_flight: Vec<Reserve> = with(Standing::Open, &model)
                    .into_iter()
                    .filter(|open| open.claim.is_some())
                    .collect();
                if let Some(first) = rng.pick(&in_flight).filter(|_| rng.chance(30)) {
                    (reserve.key, reserve.claim) = (first.key, first.claim);
                }
                reserves.push(reserve);
                Op::Reserve(reserve)
            }
            30..=37 => {
                // A retry of a reserve whose record is still kept.
                let known: Vec<Reserve> = reserves
                    .iter()
                    .filter(|r| model.standing(&world.exec_id(r.exec)) != Standing::Absent)
                    .copied()
                    .collect();
                match rng.pick(&known) {
                    Some(reserve) => Op::Reserve(reserve),
                    None => continue,
                }
            }
            38..=64 => {
                let late = roll >= 60;
                let standing = if late {
                    Standing::Expired
                } else {
                    Standing::Open
                };
                let Some(reserve) = rng.pick(&with(standing, &model)) else {
                    continue;
                };
                let amount = model.amount(&world.exec_id(reserve.exec)).unwrap_or(0);
                let actual = match rng.range(0, 99) {
                    0..=29 => amount,
                    30..=59 => rng.range(0, amount),
                    60..=69 => amount + rng.range(1, EPSILON),
                    70..=89 => amount + rng.range(EPSILON + 1, 4_000),
                    // Usage the store refuses: past 2^53 µUSD.
                    _ => MAX_USD_MICROS + 1,
                };
                let settle = Settle {
                    exec: reserve.exec,
                    key: reserve.key,
                    actual,
                    estimated: rng.chance(5),
                    wrong_owner: rng.chance(4),
                };
                settles.push(settle);
                Op::Settle(settle)
            }
            65..=72 => match rng.pick(&settles) {
                // The gateway's retry of a settle.
                Some(settle) if model.standing(&world.exec_id(settle.exec)) != Standing::Absent => {
                    Op::Settle(settle)
                }
                _ => continue,
            },
            73..=74 => {
                // A settle of a call that never reserved, or was denied.
                let denied = with(Standing::Denied, &model);
                let (exec, key) = match rng.pick(&denied) {
                    Some(reserve) if rng.chance(50) => (reserve.exec, reserve.key),
                    _ => (u32::MAX - rng.range(0, 1_000) as u32, 0),
                };
                Op::Settle(Settle {
                    exec,
                    key,
                    actual: 500,
                    estimated: false,
                    wrong_owner: false,
                })
            }
            75..=87 => {
                let ticks = if rng.chance(5) {
                    rng.range(100, 500)
                } else {
                    rng.range(1, 8)
                };
                Op::Advance { ticks }
            }
            88..=94 => match rng.pick(&adjusts) {
                Some(adjust) if rng.chance(25) => Op::Adjust(adjust),
                _ => {
                    let amount = match rng.range(0, 99) {
                        0..=59 => -(rng.range(1, 8_000) as i64),
                        60..=94 => rng.range(1, 3_000) as i64,
                        _ => i64::MAX,
                    };
                    let adjust = Adjust {
                        id: adjusts.len() as u32,
                        key: rng.range(0, 2) as usize,
                        amount,
                    };
                    adjusts.push(adjust);
                    Op::Adjust(adjust)
                }
            },
            95..=96 => Op::PausePosting,
            _ => Op::Crash,
        };
        // A paused writer is crashed within a few steps, as a process
        // would be, so its journal stays short.
        paused_for = match (op, paused_for) {
            (Op::Crash, _) => None,
            (Op::PausePosting, None) => Some(0),
            (_, Some(n)) => Some(n + 1),
            (_, None) => None,
        };
        apply(world, &mut model, &op);
        ops.push(op);
        if paused_for.is_some_and(|n| n >= 12) && ops.len() < steps {
            ops.push(Op::Crash);
            paused_for = None;
        }
    }
    ops
}

/// What the model answers to one step.
pub(super) fn apply(world: &World, model: &mut Model, op: &Op) -> super::model::Answer {
    use super::model::Answer;
    match op {
        Op::Reserve(reserve) => match world.claim(reserve) {
            Some(claim) => model.reserve_claimed(&world.request(reserve), &claim),
            None => model.reserve(&world.request(reserve)),
        },
        Op::Settle(settle) => model.settle(&world.settlement(settle)),
        Op::Adjust(adjust) => model.adjust(&world.adjustment(adjust)),
        Op::Advance { ticks } => {
            model.advance_and_sweep(TimeDelta::seconds((ticks * TICK_SECS) as i64));
            Answer::Nothing
        }
        Op::PausePosting | Op::Crash => Answer::Nothing,
    }
}
