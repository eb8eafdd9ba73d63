//! A seeded, reproducible simulation of the money path, in the spirit of
//! FoundationDB's and TigerBeetle's simulation testing: a random sequence
//! of steps, drawn from a seed, runs against a store and against a small
//! reference model of the protocol (`model`, plain maps), and after every
//! step the two must agree.
//!
//! Steps (`ops`): reserves, fixed and ranged, with and without a run (and
//! its cap, sometimes one conflicting with the cap the run's first call
//! fixed), with and without a client's idempotency claim (a duplicate of
//! one in flight), of a model in the keys' and org's model group or not,
//! each carrying the caps the gateway would build (the group's money,
//! then its rate limits, then the key's `rpm` and `tpm`; then the org's
//! alike; all tight enough to deny now and then) and a token bound;
//! settles exact, below, within the epsilon, overrun, estimated, refused
//! (past 2^53 µUSD), under the wrong owner, of a denied or unknown exec
//! id, and late, after expiry, their usage counting the token bound, fewer
//! tokens, more or 2^53 - 1; retries of each with the same exec id;
//! operators' refunds and credits, refused ones and retries; clock
//! advances, within a minute or past it, that expire holds and roll
//! periods over; and crashes: the SQLite store killed (sometimes with its
//! writer paused, so answered changes live only in the journal) and
//! reopened from its file, a Redis gateway dropped with its holds open and
//! another connecting.
//!
//! After every step: the store's answer equals the model's (reserved with
//! its amount and levels, denied naming the cap, its meter and what it has
//! left, run cap conflict, settled with its status and remaining, a
//! retry's first answer, late, refused); every scope's counters (the model
//! groups' money included) and every run equal the model's; the open
//! holds match; no counter is past its cap unless an overrun, a late
//! settle or a credit took it there; and `reconcile` shows no drift, each
//! row's counter and open sum being the model's. A rate limit's counter is
//! read through the reserves of its minute: each level's `committed`, a
//! denial's `remaining`. At the end, every ledger entry is one the model
//! booked, and no exec id is settled twice.
//!
//! Stores: memory and SQLite on a manual clock, Redis on the test
//! process's shared `redis-server` (`redis::testing`), each simulation's
//! ids under a prefix of its own, hence hash tags of its own. Its clock is
//! Redis's, shifted back to the model's time before every step; TTLs end
//! half a tick off the instants steps look at, so the real time a step
//! takes never decides an expiry.
//!
//! It lives inside the crate because it needs the stores' test controls
//! (`ManualClock`, `SqliteStore::crash`, `RedisStore::shift_clock`), which
//! are compiled into unit tests only.
//!
//! CI runs [`DEFAULT_STEPS`] steps for each of [`DEFAULT_SEEDS`] seeds per
//! store. To run longer, or one seed again:
//!
//! ```text
//! TOLLGATE_SIMULATION_STEPS=1000000 TOLLGATE_SIMULATION_SEEDS=8 \
//!     cargo test --lib budget::simulation -- --nocapture
//! TOLLGATE_SIMULATION_SEED=12345 cargo test --lib budget::simulation::sqlite
//! ```
//!
//! A failure prints the seed, the step that failed and the steps that
//! lead to it, shortened: steps are left out one at a time while the
//! shorter sequence still fails.

mod backend;
mod model;
mod ops;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

use crate::budget::{
    AdjustOutcome, Books, ClaimedReserve, LedgerStatus, Meter, OnExpiry, Reports, ReserveOutcome,
    ScopeKind, StoreError,
};
use crate::money::UsdMicrosDelta;
use backend::{Backend, Kind};
use model::{Answer, Model};
use ops::{Op, World, EPSILON, TICK_SECS};

/// Steps per seed in CI.
const DEFAULT_STEPS: usize = 300;
/// Seeds per store in CI: 1, 2, … this many.
const DEFAULT_SEEDS: u64 = 3;
/// Past this many steps, `reconcile` (which reads every period of every
/// scope) runs every [`RECONCILE_EVERY`] steps instead of after each.
const RECONCILE_EACH_UP_TO: usize = 5_000;
const RECONCILE_EVERY: usize = 100;
/// Shrinking re-runs the sequence once per step it tries to leave out.
const SHRINK_UP_TO: usize = 2_000;

/// Where every simulation's clock starts: noon, so the first day
/// boundary is a few advances away.
fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {value:?}")),
    )
}

/// Runs the simulation on `kind` for every seed asked for.
async fn simulate(kind: Kind) {
    let steps = env_number("TOLLGATE_SIMULATION_STEPS").map_or(DEFAULT_STEPS, |n| n as usize);
    let seeds: Vec<u64> = match env_number("TOLLGATE_SIMULATION_SEED") {
        Some(seed) => vec![seed],
        None => (1..=env_number("TOLLGATE_SIMULATION_SEEDS").unwrap_or(DEFAULT_SEEDS)).collect(),
    };
    for seed in seeds {
        let began = Instant::now();
        // Both expiry policies, by seed.
        let on_expiry = if seed % 2 == 0 {
            OnExpiry::Release
        } else {
            OnExpiry::Charge
        };
        let world = World::new(&prefix(seed), on_expiry);
        let steps = ops::generate(&world, seed, steps);
        eprintln!(
            "simulation {kind:?}: seed {seed}, {} steps, on_expiry {on_expiry:?}",
            steps.len()
        );
        let outcome = run(kind, &world, &steps, true).await;
        let tally = match outcome {
            Ok(tally) => tally,
            Err(failure) => {
                let (shortest, why) = shrink(kind, seed, on_expiry, &steps[..=failure.step]).await;
                panic!(
                    "simulation {kind:?} failed: seed {seed} (TOLLGATE_SIMULATION_SEED={seed}, \
                 {} steps asked), at step {}: {}\n\
                 shortest failing sequence found ({} steps), failing with: {}\n{}",
                    steps.len(),
                    failure.step,
                    failure.message,
                    shortest.len(),
                    why.unwrap_or_else(|| "(as above)".to_owned()),
                    shortest
                        .iter()
                        .enumerate()
                        .map(|(i, op)| format!("  {i:>5}: {op:?}"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
            }
        };
        eprintln!(
            "simulation {kind:?}: seed {seed} passed in {:?}: {tally:?}",
            began.elapsed()
        );
    }
}

/// Ids of their own for each run, so runs share a Redis (and a shrinking
/// run's re-runs share nothing with each other).
fn prefix(seed: u64) -> String {
    format!("sim{seed}-{}", &Uuid::now_v7().simple().to_string()[20..])
}

struct Failure {
    step: usize,
    message: String,
}

/// Leaves steps out of `failing`, one at a time from the end, keeping
/// each removal after which the sequence still fails; the shortest
/// sequence found and, when shorter than `failing`, how it fails.
async fn shrink(
    kind: Kind,
    seed: u64,
    on_expiry: OnExpiry,
    failing: &[Op],
) -> (Vec<Op>, Option<String>) {
    let mut steps = failing.to_vec();
    let mut why = None;
    if steps.len() > SHRINK_UP_TO {
        return (steps, why);
    }
    let mut i = steps.len().saturating_sub(1);
    while i > 0 {
        i -= 1;
        let mut shorter = steps.clone();
        shorter.remove(i);
        let world = World::new(&prefix(seed), on_expiry);
        if let Err(failure) = run(kind, &world, &shorter, false).await {
            shorter.truncate(failure.step + 1);
            steps = shorter;
            why = Some(failure.message);
            i = i.min(steps.len().saturating_sub(1));
        }
    }
    (steps, why)
}

/// How many answers of each kind a run saw, to show what it covered.
type Tally = BTreeMap<&'static str, usize>;

fn label(answer: &Answer) -> &'static str {
    match answer {
        Answer::Reserve(ReserveOutcome::Reserved { levels, .. }) if levels.is_empty() => {
            "reserve retried"
        }
        Answer::Reserve(ReserveOutcome::Reserved { .. }) => "reserved",
        Answer::Reserve(ReserveOutcome::Denied(denial)) => match (denial.kind, denial.meter) {
            (_, Meter::Requests) => "denied by rpm",
            (_, Meter::Tokens) => "denied by tpm",
            (ScopeKind::Model, _) => "denied by group",
            _ => "denied",
        },
        Answer::Reserve(ReserveOutcome::RunCapConflict { .. }) => "run cap conflict",
        Answer::Settle(settled) if !settled.applied => "settle retried",
        Answer::Settle(settled) => settled.status.as_str(),
        Answer::Adjust(AdjustOutcome::Applied { applied: false, .. }) => "adjust retried",
        Answer::Adjust(AdjustOutcome::Applied { .. }) => "adjusted",
        Answer::Adjust(AdjustOutcome::Refused { .. }) => "adjust refused",
        Answer::Unknown => "unknown",
        Answer::OwnershipMismatch => "ownership mismatch",
        Answer::OutOfRange => "out of range",
        Answer::Duplicate => "duplicate",
        Answer::Nothing => "clock or crash",
        Answer::Failed(_) => "failed",
    }
}

/// Runs `steps` against a fresh store and model; the first step after
/// which they disagree, and how.
async fn run(
    kind: Kind,
    world: &World,
    steps: &[Op],
    reconcile_all: bool,
) -> Result<Tally, Failure> {
    let mut tally = Tally::new();
    let mut backend = Backend::new(kind, world, start()).await;
    let mut model = Model::new(start(), world.on_expiry, EPSILON);
    for (i, op) in steps.iter().enumerate() {
        let fail = |message: String| Failure { step: i, message };
        let expected = ops::apply(world, &mut model, op);
        let got = perform(&mut backend, world, op, &model).await;
        *tally.entry(label(&got)).or_default() += 1;
        if got != expected {
            return Err(fail(format!(
                "{op:?} answered\n    {got:?}\n  the model says\n    {expected:?}"
            )));
        }
        let reconcile = !reconcile_all
            || i < RECONCILE_EACH_UP_TO
            || i % RECONCILE_EVERY == 0
            || i + 1 == steps.len();
        check(&backend, world, &model, reconcile)
            .await
            .map_err(fail)?;
    }
    check_ledger(&backend, &model)
        .await
        .map_err(|message| Failure {
            step: steps.len().saturating_sub(1),
            message,
        })?;
    Ok(tally)
}

/// What the store answers to one step.
async fn perform(backend: &mut Backend, world: &World, op: &Op, model: &Model) -> Answer {
    // Redis's clock runs on under the shift: brought back before every
    // step, it never runs half a tick ahead of the model's.
    if !matches!(op, Op::Advance { .. }) {
        backend.sync_clock(model.now).await;
    }
    let store = backend.store();
    let answer = match op {
        Op::Reserve(reserve) => match world.claim(reserve) {
            Some(claim) => store
                .reserve_claimed(&world.request(reserve), &claim)
                .await
                .map(|claimed| match claimed {
                    ClaimedReserve::Ran(outcome) => Answer::Reserve(outcome),
                    ClaimedReserve::Duplicate => Answer::Duplicate,
                }),
            None => store
                .reserve(&world.request(reserve))
                .await
                .map(Answer::Reserve),
        },
        Op::Settle(settle) => store
            .settle(&world.settlement(settle))
            .await
            .map(Answer::Settle),
        Op::Adjust(adjust) => store
            .adjust(&world.adjustment(adjust))
            .await
            .map(Answer::Adjust),
        Op::Advance { ticks } => backend
            .advance(Duration::from_secs(ticks * TICK_SECS), model.now)
            .await
            .map(|()| Answer::Nothing),
        Op::PausePosting => {
            backend.pause_posting();
            Ok(Answer::Nothing)
        }
        Op::Crash => {
            backend.crash().await;
            Ok(Answer::Nothing)
        }
    };
    answer.unwrap_or_else(|error| match error {
        StoreError::UnknownReservation(_) => Answer::Unknown,
        StoreError::OwnershipMismatch { .. } => Answer::OwnershipMismatch,
        StoreError::OutOfRange { .. } => Answer::OutOfRange,
        other => Answer::Failed(other.to_string()),
    })
}

/// The store's books beside the model's, after a step.
async fn check(
    backend: &Backend,
    world: &World,
    model: &Model,
    reconcile: bool,
) -> Result<(), String> {
    let store = backend.store();
    let failed = |error: StoreError| error.to_string();
    for scope in world.keys.iter().chain([&world.org]).chain(&world.groups()) {
        let got = store.scope_state(scope).await.map_err(failed)?;
        let expected = model.scope_state(scope);
        if got != expected {
            return Err(format!(
                "{} {}: {got:?}, the model says {expected:?}",
                scope.kind, scope.id
            ));
        }
    }
    for id in world.run_ids() {
        let got = store.run_state(&id).await.map_err(failed)?;
        let expected = model.run_state(&id);
        if got != expected {
            return Err(format!("run {id}: {got:?}, the model says {expected:?}"));
        }
    }
    let got = store.open_reservations().await.map_err(failed)?;
    let expected = model.open_reservations();
    if got != expected {
        return Err(format!(
            "open reservations {got:?}, the model says {expected:?}"
        ));
    }
    model.check_caps()?;
    if !reconcile || backend.posting_paused() {
        return Ok(());
    }
    let rows = backend.reconcile().await.map_err(failed)?;
    let mut seen = Vec::new();
    for row in &rows {
        if row.drift() != 0 {
            return Err(format!("reconcile drifts by {}: {row:?}", row.drift()));
        }
        let key = (row.kind, row.id.clone(), row.period_id.clone());
        let (counter, open) = model.books_of(&key);
        if (row.counter, row.open) != (counter, open) {
            return Err(format!(
                "reconcile row {row:?}, the model has counter {counter}, open {open}"
            ));
        }
        seen.push(key);
    }
    if let Some(missing) = model
        .nonzero_counters()
        .into_iter()
        .find(|key| !seen.contains(key))
    {
        return Err(format!("reconcile has no row for {missing:?}"));
    }
    Ok(())
}

/// Every entry the store's ledger holds is one the model booked, and no
/// exec id was settled twice (a retry books nothing).
async fn check_ledger(backend: &Backend, model: &Model) -> Result<(), String> {
    let mut expected: HashMap<(String, LedgerStatus, UsdMicrosDelta), usize> = HashMap::new();
    for entry in &model.ledger {
        *expected.entry(entry.clone()).or_default() += 1;
    }
    let mut settles: HashMap<String, usize> = HashMap::new();
    for entry in backend.ledger().await {
        let key = (entry.exec_id.clone(), entry.status, entry.actual);
        match expected.get_mut(&key) {
            Some(n) if *n > 0 => *n -= 1,
            _ => return Err(format!("ledger entry the model never booked: {entry:?}")),
        }
        if !matches!(
            entry.status,
            LedgerStatus::Expired | LedgerStatus::Adjustment
        ) {
            let n = settles.entry(entry.exec_id.clone()).or_default();
            *n += 1;
            if *n > 1 {
                return Err(format!("{} settled twice", entry.exec_id));
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    simulate(Kind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    simulate(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    simulate(Kind::Redis).await;
}

/// Found by the simulation (seed 12345): a hold expires and is charged, an
/// operator refunds that charge, then the call's settle arrives late and
/// cheaper. It gives back only what the refund left in `spent` (here
/// nothing), books that, and every store agrees with the model, at zero
/// drift.
#[tokio::test]
async fn a_late_settle_after_a_refund_gives_back_only_what_is_left() {
    use ops::{Adjust, Reserve, Settle};
    let steps = [
        Op::Reserve(Reserve {
            exec: 0,
            key: 2,
            run: None,
            min: 5_000,
            max: 5_000,
            ttl_ticks: 1,
            claim: None,
            grouped: false,
            tokens: 0,
        }),
        Op::Advance { ticks: 2 },
        Op::Adjust(Adjust {
            id: 0,
            key: 2,
            amount: -5_000,
        }),
        Op::Settle(Settle {
            exec: 0,
            key: 2,
            actual: 0,
            estimated: false,
            wrong_owner: false,
            grouped: false,
            tokens: 0,
        }),
    ];
    for kind in [Kind::Memory, Kind::Sqlite, Kind::Redis] {
        let world = World::new(&prefix(0), OnExpiry::Charge);
        if let Err(failure) = run(kind, &world, &steps, true).await {
            panic!("{kind:?}, step {}: {}", failure.step, failure.message);
        }
        let mut model = Model::new(start(), world.on_expiry, EPSILON);
        for op in &steps {
            ops::apply(&world, &mut model, op);
        }
        let late = model.ledger.last().unwrap();
        assert_eq!((late.1, late.2), (LedgerStatus::Late, 0), "{kind:?}");
        assert_eq!(model.scope_state(&world.keys[2]).spent, 0, "{kind:?}");
    }
}

/// A call's rate limits across its expiry and its late settle, within the
/// minute it was reserved in (which random steps reach only now and
/// then): the expiry keeps the requests and the token bound it held,
/// whatever `on_expiry` does with its money, so the next call is denied
/// by the key's `tpm`; the late settle replaces the bound with the tokens
/// its usage counts, so the same call fits after it; the next minute
/// starts from nothing. Every store agrees with the model at every step.
#[tokio::test]
async fn an_expiry_and_a_late_settle_move_the_rate_limits_of_their_minute() {
    use crate::budget::{Denial, Period};
    use ops::{Reserve, Settle};
    // Key 0 is in the org: its caps are its group's money, its rpm (3)
    // and tpm (4,000), the org group's money, the org's rpm and tpm.
    let call = |exec: u32, tokens: u64, ttl_ticks: u64| {
        Op::Reserve(Reserve {
            exec,
            key: 0,
            run: None,
            min: 2_000,
            max: 2_000,
            ttl_ticks,
            claim: None,
            grouped: true,
            tokens,
        })
    };
    let steps = [
        call(0, 3_000, 1),
        Op::Advance { ticks: 2 },
        call(1, 1_500, 30),
        Op::Settle(Settle {
            exec: 0,
            key: 0,
            actual: 1_000,
            estimated: false,
            wrong_owner: false,
            grouped: true,
            tokens: 500,
        }),
        call(2, 1_500, 30),
        Op::Advance { ticks: 4 },
        call(3, 3_500, 30),
    ];
    for on_expiry in [OnExpiry::Release, OnExpiry::Charge] {
        let world = World::new(&prefix(0), on_expiry);
        let mut model = Model::new(start(), on_expiry, EPSILON);
        let answers: Vec<Answer> = steps
            .iter()
            .map(|op| ops::apply(&world, &mut model, op))
            .collect();
        let Answer::Reserve(ReserveOutcome::Denied(denied)) = &answers[2] else {
            panic!("{on_expiry:?}: {:?}", answers[2]);
        };
        assert_eq!(
            denied,
            &Denial {
                kind: ScopeKind::Key,
                id: world.keys[0].id.clone(),
                meter: Meter::Tokens,
                period: Period::Minute,
                cap: 4_000,
                remaining: 1_000,
                resets_at: Period::Minute.resets_at(start()),
            }
        );
        let tokens_level = |answer: &Answer| match answer {
            Answer::Reserve(ReserveOutcome::Reserved { levels, .. }) => levels
                .iter()
                .filter(|level| level.meter != Meter::Usd)
                .map(|level| (level.kind, level.meter, level.committed))
                .collect::<Vec<_>>(),
            other => panic!("{on_expiry:?}: {other:?}"),
        };
        assert_eq!(
            tokens_level(&answers[4]),
            [
                (ScopeKind::Key, Meter::Requests, 2),
                (ScopeKind::Key, Meter::Tokens, 2_000),
                (ScopeKind::Org, Meter::Requests, 2),
                (ScopeKind::Org, Meter::Tokens, 2_000),
            ],
            "{on_expiry:?}"
        );
        assert_eq!(
            tokens_level(&answers[6]),
            [
                (ScopeKind::Key, Meter::Requests, 1),
                (ScopeKind::Key, Meter::Tokens, 3_500),
                (ScopeKind::Org, Meter::Requests, 1),
                (ScopeKind::Org, Meter::Tokens, 3_500),
            ],
            "{on_expiry:?}"
        );
        for kind in [Kind::Memory, Kind::Sqlite, Kind::Redis] {
            let world = World::new(&prefix(0), on_expiry);
            if let Err(failure) = run(kind, &world, &steps, true).await {
                panic!(
                    "{kind:?}, {on_expiry:?}, step {}: {}",
                    failure.step, failure.message
                );
            }
        }
    }
}
