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
use crate::budget::caps::model_scope_id;
use crate::budget::{
    Adjustment, Cap, Meter, OnExpiry, Period, ReserveRequest, RunScope, Scope, ScopeKind,
    Settlement,
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
///
/// Ten seconds, a sixth of a minute: a call can be reserved, expire and
/// be settled late within one minute, where its rate limits' counters are
/// read again; and a step never comes within a tick of a minute's (or
/// any period's) end, so Redis's clock, running a little ahead, sees the
/// period the model does.
pub(super) const TICK_SECS: u64 = 10;

/// The settle epsilon of every simulated store.
pub(super) const EPSILON: UsdMicros = 100;

/// The scopes a simulation acts on: three keys (two in one org, with
/// different periods, one alone) and up to three runs in each, and the
/// caps of a key's or org's model group and rate limits. Ids carry a
/// prefix of the run's own, so simulations share a Redis unharmed.
pub(super) struct World {
    pub(super) keys: Vec<Scope>,
    pub(super) org: Scope,
    /// Whether key `i` is in the org.
    in_org: Vec<bool>,
    /// Key `i`'s model group and rate limits.
    key_limits: Vec<Limits>,
    org_limits: Limits,
    prefix: String,
    pub(super) on_expiry: OnExpiry,
}

/// Each run's cap as its calls name it: none, or one of two.
const RUN_CAPS: [Option<UsdMicros>; 3] = [None, Some(6_000), Some(9_000)];

/// The one model group of a key or org ([`GROUP`]), which holds
/// [`GROUPED_MODEL`] and not [`OTHER_MODEL`].
const GROUP: &str = "opus";
const GROUPED_MODEL: &str = "claude-opus-4-1";
const OTHER_MODEL: &str = "gpt-4o-mini";

/// A key's or an org's limits beyond its own money cap, as its config
/// would give them: its group's money cap (µUSD and period) and rate
/// limits, and its own `rpm` and `tpm`. Tight, so each of them denies
/// now and then.
#[derive(Clone, Copy, Debug, Default)]
struct Limits {
    group: Option<(UsdMicros, Period)>,
    group_rpm: Option<u64>,
    group_tpm: Option<u64>,
    rpm: Option<u64>,
    tpm: Option<u64>,
}

impl Limits {
    /// The caps of `owner` a call of `grouped` (the group's model or not)
    /// is held against, as the gateway builds them
    /// (`directory::caps::caps_of`): the group's money, then the group's
    /// rate limits, then the owner's.
    fn caps(&self, owner: &Scope, grouped: bool, into: &mut Vec<Cap>) {
        let rates = |kind: ScopeKind, id: &str, rpm, tpm, into: &mut Vec<Cap>| {
            for (meter, limit) in [(Meter::Requests, rpm), (Meter::Tokens, tpm)] {
                if let Some(limit) = limit {
                    into.push(Cap {
                        kind,
                        id: id.to_owned(),
                        meter,
                        period: Period::Minute,
                        limit,
                    });
                }
            }
        };
        if grouped {
            let id = model_scope_id(owner.kind, &owner.id, GROUP);
            if let Some((limit, period)) = self.group {
                into.push(Cap {
                    kind: ScopeKind::Model,
                    id: id.clone(),
                    meter: Meter::Usd,
                    period,
                    limit,
                });
            }
            rates(ScopeKind::Model, &id, self.group_rpm, self.group_tpm, into);
        }
        rates(owner.kind, &owner.id, self.rpm, self.tpm, into);
    }

    /// The group's money cap as a scope, to read its counters.
    fn group_scope(&self, owner: &Scope) -> Option<Scope> {
        self.group.map(|(cap, period)| Scope {
            kind: ScopeKind::Model,
            id: model_scope_id(owner.kind, &owner.id, GROUP),
            cap,
            period,
        })
    }
}

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
            key_limits: vec![
                // A group by the hour inside a daily key, a tight rpm
                // and a tpm of a few calls.
                Limits {
                    group: Some((12_000, Period::Hour)),
                    rpm: Some(3),
                    tpm: Some(4_000),
                    ..Limits::default()
                },
                // Only its org's.
                Limits::default(),
                // A group with rate limits of its own, and an rpm.
                Limits {
                    group: Some((8_000, Period::Hour)),
                    group_rpm: Some(1),
                    group_tpm: Some(2_500),
                    rpm: Some(3),
                    tpm: None,
                },
            ],
            org_limits: Limits {
                group: Some((25_000, Period::Day)),
                rpm: Some(4),
                tpm: Some(6_000),
                ..Limits::default()
            },
            prefix: prefix.to_owned(),
            on_expiry,
        }
    }

    pub(super) fn org_of(&self, key: usize) -> Option<&Scope> {
        self.in_org[key].then_some(&self.org)
    }

    /// The money caps of every model group, as scopes.
    pub(super) fn groups(&self) -> Vec<Scope> {
        self.keys
            .iter()
            .zip(&self.key_limits)
            .chain([(&self.org, &self.org_limits)])
            .filter_map(|(owner, limits)| limits.group_scope(owner))
            .collect()
    }

    /// The caps a call of key `key` is held against beyond its key's,
    /// org's and run's money: the key's, then its org's.
    fn caps(&self, key: usize, grouped: bool) -> Vec<Cap> {
        let mut caps = Vec::new();
        self.key_limits[key].caps(&self.keys[key], grouped, &mut caps);
        if let Some(org) = self.org_of(key) {
            self.org_limits.caps(org, grouped, &mut caps);
        }
        caps
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
            caps: self.caps(op.key, op.grouped),
            tokens: op.tokens,
            customer: None,
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
            model: model_of(op.grouped).to_owned(),
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
            model: model_of(op.grouped).to_owned(),
            usage: usage_of(op.tokens),
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

/// The model a call names: its group's, or one of no group.
fn model_of(grouped: bool) -> &'static str {
    if grouped {
        GROUPED_MODEL
    } else {
        OTHER_MODEL
    }
}

/// A usage of `tokens` tokens in all, spread over every kind a `tokens`
/// limit counts (and an hour's cache writes, a part of the cache writes
/// counted once).
fn usage_of(tokens: u64) -> Usage {
    let cached_input = tokens / 4;
    let cache_write = tokens / 8;
    let output = tokens / 5;
    Usage {
        input: tokens - cached_input - cache_write - output,
        cached_input,
        cache_write,
        output,
        cache_write_1h: Some(cache_write / 2),
        ..Usage::default()
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
    /// A call of the model groups' model (held against the groups' caps)
    /// or of another.
    pub(super) grouped: bool,
    /// The call's token bound.
    pub(super) tokens: u64,
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
    /// The model the reserve named (the groups' or not).
    pub(super) grouped: bool,
    /// The tokens the usage counts.
    pub(super) tokens: u64,
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
                    // Short enough to expire within its minute, or long.
                    ttl_ticks: if rng.chance(50) {
                        rng.range(1, 2)
                    } else {
                        rng.range(10, 60)
                    },
                    claim: rng.chance(25).then(|| rng.range(0, 2) as u8),
                    grouped: rng.chance(60),
                    tokens: if rng.chance(10) {
                        0
                    } else {
                        rng.range(100, 3_500)
                    },
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
                let candidates = with(standing, &model);
                // A late settle mostly comes soon after its expiry, while
                // its minute's rate limits are still read: the last call
                // reserved of those expired, half the time.
                let last = candidates
                    .last()
                    .copied()
                    .filter(|_| late && rng.chance(50));
                let Some(reserve) = last.or_else(|| rng.pick(&candidates)) else {
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
                // The tokens the usage counts: the bound, fewer, more (the
                // call ran past its estimate), none, or as many as a
                // counter holds (refused if the call's minute counts any
                // other).
                let bound = reserve.tokens;
                let tokens = match rng.range(0, 99) {
                    0..=39 => bound,
                    40..=79 => rng.range(0, bound),
                    80..=94 => bound + rng.range(1, 2_000),
                    95..=97 => 0,
                    _ => MAX_USD_MICROS,
                };
                let settle = Settle {
                    exec: reserve.exec,
                    key: reserve.key,
                    actual,
                    estimated: rng.chance(5),
                    wrong_owner: rng.chance(4),
                    grouped: reserve.grouped,
                    tokens,
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
                    grouped: false,
                    tokens: 1_000,
                })
            }
            75..=87 => {
                // Within the minute or just past it, a few minutes, or
                // hours.
                let ticks = match rng.range(0, 99) {
                    0..=64 => rng.range(1, 3),
                    65..=94 => rng.range(10, 80),
                    _ => rng.range(1_000, 5_000),
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
