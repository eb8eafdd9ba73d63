//! The reference model: the budget protocol of docs/design.md as plain
//! maps, written for the simulation and sharing no code with the stores,
//! so a rule both got wrong the same way would have to be wrong twice.
//!
//! Per scope, meter and period it keeps `spent` and `reserved` (money in
//! µUSD for keys, orgs, runs and model groups; requests and tokens for
//! rate limits, per calendar minute); per exec id what the store must
//! remember (the open hold and its deadline, the denial, the first
//! settle, what expiry charged); and the ledger entries it expects, to
//! check that no exec id is settled twice.
//!
//! Caps beyond the key's, org's and run's money (docs/design.md, "Caps"):
//! money is checked first (key, org, run, then the request's money caps in
//! order), then the rate limits in order, and the first without room for
//! the least the call holds is named; a range reserve holds the most every
//! money cap allows. A `requests` limit holds 1 and keeps it; a `tokens`
//! limit holds the call's token bound and settles to its usage's tokens.
//! An expiry keeps what the rate limits held, whatever `on_expiry` charges
//! of money; a late settle moves a group's money as the key's and a rate
//! limit by what the usage counts beyond the hold (never below zero). The
//! sweep forgets a rate limit's counters two minutes after their minute,
//! unless they hold something open.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, TimeDelta, Utc};

use crate::budget::{
    AdjustOutcome, Adjustment, Denial, LedgerStatus, Level, Meter, OnExpiry, ReserveOutcome,
    ReserveRequest, RunState, Scope, ScopeKind, ScopeState, SettleOutcome, Settlement,
};
use crate::money::{UsdMicros, UsdMicrosDelta, MAX_USD_MICROS};
use crate::period::Period;

/// A scope and its counter's period: what a counter is kept under. The
/// counter's period is the period id for money, `<minute id>/requests` or
/// `<minute id>/tokens` for a rate limit (as the stores key them, so a
/// `reconcile` row names a key of the model).
pub(super) type CounterKey = (ScopeKind, String, String);

/// The counter period of `meter` in the period `period_id`.
fn counter_period(meter: Meter, period_id: &str) -> String {
    match meter {
        Meter::Usd => period_id.to_owned(),
        Meter::Requests => format!("{period_id}/requests"),
        Meter::Tokens => format!("{period_id}/tokens"),
    }
}

/// The meter a counter period counts, and its period id.
fn meter_of(counter_period: &str) -> (Meter, &str) {
    if let Some(minute) = counter_period.strip_suffix("/requests") {
        (Meter::Requests, minute)
    } else if let Some(minute) = counter_period.strip_suffix("/tokens") {
        (Meter::Tokens, minute)
    } else {
        (Meter::Usd, counter_period)
    }
}

/// The tokens a usage counts against a `tokens` limit: every input token
/// (cached and cache writes too) and every output token.
fn usage_tokens(s: &Settlement) -> u64 {
    let usage = &s.usage;
    [
        usage.input,
        usage.cached_input,
        usage.cache_write,
        usage.output,
    ]
    .into_iter()
    .fold(0, u64::saturating_add)
    .min(MAX_USD_MICROS)
}

/// What a store call answered, in a form both sides can give: the store's
/// own errors that answer the call itself are kept by kind; any other
/// (unavailable, timeout) is kept as text and never matches the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Reserve(ReserveOutcome),
    Settle(SettleOutcome),
    Adjust(AdjustOutcome),
    Unknown,
    OwnershipMismatch,
    OutOfRange,
    /// A claimed reserve whose claim an open reservation holds.
    Duplicate,
    /// A step that asks the store nothing (the clock, a crash).
    Nothing,
    Failed(String),
}

#[derive(Clone, Copy, Debug, Default)]
struct Counter {
    spent: UsdMicros,
    reserved: UsdMicros,
}

#[derive(Clone, Debug)]
enum HoldState {
    Open,
    Denied(Denial),
    Settled(SettleOutcome),
    /// What expiry charged, and when the record is forgotten.
    Expired {
        charged: UsdMicros,
        forget_at: DateTime<Utc>,
    },
}

/// One counter a reserve checks and holds.
#[derive(Clone, Debug)]
struct Charged {
    counter: CounterKey,
    meter: Meter,
    period: Period,
    /// The period's own id (a level names it).
    period_id: String,
    /// In the meter's unit.
    cap: u64,
}

/// What the store remembers of one reserve.
#[derive(Clone, Debug)]
struct Hold {
    key: String,
    org: Option<String>,
    amount: UsdMicros,
    /// The call's token bound: what its `tokens` limits hold.
    tokens: u64,
    /// The counters it charged: the key's, org's and run's money, then
    /// the request's other caps in order; the key's cap at reserve time.
    charges: Vec<Charged>,
    key_cap: UsdMicros,
    deadline: DateTime<Utc>,
    ttl: TimeDelta,
    state: HoldState,
}

impl Hold {
    /// What the hold holds, or held, of `charge`'s meter.
    fn held(&self, charge: &Charged) -> u64 {
        match charge.meter {
            Meter::Usd => self.amount,
            Meter::Requests => 1,
            Meter::Tokens => self.tokens,
        }
    }

    fn holds(&self, counter: &CounterKey) -> bool {
        self.charges.iter().any(|charge| charge.counter == *counter)
    }
}

/// Where an exec id stands, for the generator to pick its next steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Standing {
    Absent,
    Open,
    Denied,
    Settled,
    Expired,
}

pub(super) struct Model {
    pub(super) now: DateTime<Utc>,
    on_expiry: OnExpiry,
    epsilon: UsdMicros,
    counters: BTreeMap<CounterKey, Counter>,
    /// Counters a step may legitimately have taken past their cap: an
    /// overrun, a late settle above what expiry charged, an operator's
    /// credit. Every other counter stays at or below its cap.
    past_cap: BTreeSet<CounterKey>,
    /// The last cap each scope's meter was reserved or adjusted under.
    caps: HashMap<(ScopeKind, String, Meter), u64>,
    holds: HashMap<String, Hold>,
    /// The cap each remembered run's first call fixed.
    runs: HashMap<String, Option<UsdMicros>>,
    adjustments: HashMap<String, (String, Option<String>, AdjustOutcome)>,
    /// Each idempotency claim and the exec id whose reservation took it.
    claims: HashMap<String, String>,
    /// Every entry the ledger must hold: exec id, status, actual.
    pub(super) ledger: Vec<(String, LedgerStatus, UsdMicrosDelta)>,
}

impl Model {
    pub(super) fn new(now: DateTime<Utc>, on_expiry: OnExpiry, epsilon: UsdMicros) -> Model {
        Model {
            now,
            on_expiry,
            epsilon,
            counters: BTreeMap::new(),
            past_cap: BTreeSet::new(),
            caps: HashMap::new(),
            holds: HashMap::new(),
            runs: HashMap::new(),
            adjustments: HashMap::new(),
            claims: HashMap::new(),
            ledger: Vec::new(),
        }
    }

    pub(super) fn standing(&self, exec_id: &str) -> Standing {
        match self.holds.get(exec_id).map(|hold| &hold.state) {
            None => Standing::Absent,
            Some(HoldState::Open) => Standing::Open,
            Some(HoldState::Denied(_)) => Standing::Denied,
            Some(HoldState::Settled(_)) => Standing::Settled,
            Some(HoldState::Expired { .. }) => Standing::Expired,
        }
    }

    /// The amount an exec id holds or held, if it reserved.
    pub(super) fn amount(&self, exec_id: &str) -> Option<UsdMicros> {
        self.holds.get(exec_id).map(|hold| hold.amount)
    }

    fn counter(&self, key: &CounterKey) -> Counter {
        self.counters.get(key).copied().unwrap_or_default()
    }

    fn committed(&self, key: &CounterKey) -> UsdMicros {
        let counter = self.counter(key);
        counter.spent + counter.reserved
    }

    /// Moves a counter; `spent` and `reserved` never go below zero, so
    /// a move that would is the model's own bug.
    fn move_counter(&mut self, key: &CounterKey, spent: i128, reserved: i128) {
        let counter = self.counters.entry(key.clone()).or_default();
        let to = |from: UsdMicros, by: i128| {
            u64::try_from(i128::from(from) + by).expect("model counter below zero")
        };
        counter.spent = to(counter.spent, spent);
        counter.reserved = to(counter.reserved, reserved);
    }

    fn counter_key(scope: &Scope, now: DateTime<Utc>) -> CounterKey {
        (scope.kind, scope.id.clone(), scope.period.id_at(now))
    }

    // === reserve ===

    pub(super) fn reserve(&mut self, req: &ReserveRequest) -> Answer {
        let now = self.now;
        if let Some(hold) = self.holds.get(&req.exec_id) {
            return Answer::Reserve(match &hold.state {
                HoldState::Denied(denial) => ReserveOutcome::Denied(denial.clone()),
                _ => ReserveOutcome::Reserved {
                    amount: hold.amount,
                    levels: Vec::new(),
                },
            });
        }
        let mut scopes = vec![req.key.clone()];
        scopes.extend(req.org.clone());
        if let Some(run) = &req.run {
            let cap = match self.runs.get(&run.id) {
                Some(fixed) if run.cap.is_some() && run.cap != *fixed => {
                    return Answer::Reserve(ReserveOutcome::RunCapConflict { cap: *fixed })
                }
                Some(fixed) => *fixed,
                None => run.cap,
            };
            scopes.push(Scope {
                kind: ScopeKind::Run,
                id: run.id.clone(),
                cap: cap.unwrap_or(MAX_USD_MICROS),
                period: Period::Total,
            });
        }
        // The key's, org's and run's money, then every other cap in the
        // request's order.
        let money = scopes
            .iter()
            .map(|scope| (scope.kind, &scope.id, Meter::Usd, scope.period, scope.cap));
        let others = req
            .caps
            .iter()
            .map(|cap| (cap.kind, &cap.id, cap.meter, cap.period, cap.limit));
        let charges: Vec<Charged> = money
            .chain(others)
            .map(|(kind, id, meter, period, cap)| {
                let period_id = period.id_at(now);
                Charged {
                    counter: (kind, id.clone(), counter_period(meter, &period_id)),
                    meter,
                    period,
                    period_id,
                    cap,
                }
            })
            .collect();
        for charge in &charges {
            let (kind, id, _) = &charge.counter;
            self.caps
                .insert((*kind, id.clone(), charge.meter), charge.cap);
        }
        let tokens = req.tokens.min(MAX_USD_MICROS);
        // What the call holds at least of a meter: its least amount of
        // money, one request, its token bound.
        let least = |meter: Meter| match meter {
            Meter::Usd => req.min_amount,
            Meter::Requests => 1,
            Meter::Tokens => tokens,
        };
        let before: Vec<u64> = charges
            .iter()
            .map(|charge| self.committed(&charge.counter))
            .collect();
        // Money first, in order; then the rate limits, in order.
        let checked = || charges.iter().zip(&before);
        let denial = checked()
            .filter(|(charge, _)| charge.meter == Meter::Usd)
            .chain(checked().filter(|(charge, _)| charge.meter != Meter::Usd))
            .find(|(charge, &committed)| {
                u128::from(committed) + u128::from(least(charge.meter)) > u128::from(charge.cap)
            })
            .map(|(charge, &committed)| Denial {
                kind: charge.counter.0,
                id: charge.counter.1.clone(),
                meter: charge.meter,
                period: charge.period,
                cap: charge.cap,
                remaining: charge.cap.saturating_sub(committed),
                resets_at: charge.period.resets_at(now),
            });
        let amount = charges
            .iter()
            .zip(&before)
            .filter(|(charge, _)| charge.meter == Meter::Usd)
            .fold(req.amount, |amount, (charge, &committed)| {
                amount.min(charge.cap.saturating_sub(committed))
            });
        let ttl = TimeDelta::milliseconds(i64::try_from(req.ttl.as_millis()).unwrap());
        let mut hold = Hold {
            key: req.key.id.clone(),
            org: req.org.as_ref().map(|org| org.id.clone()),
            amount,
            tokens,
            charges,
            key_cap: req.key.cap,
            deadline: now + ttl,
            ttl,
            state: HoldState::Open,
        };
        if let Some(denial) = denial {
            hold.state = HoldState::Denied(denial.clone());
            self.holds.insert(req.exec_id.clone(), hold);
            return Answer::Reserve(ReserveOutcome::Denied(denial));
        }
        let mut levels = Vec::new();
        for (charge, committed) in hold.charges.iter().zip(before) {
            let held = hold.held(charge);
            self.move_counter(&charge.counter, 0, i128::from(held));
            levels.push(Level {
                kind: charge.counter.0,
                meter: charge.meter,
                period_id: charge.period_id.clone(),
                committed: committed + held,
            });
        }
        self.holds.insert(req.exec_id.clone(), hold);
        if let Some(run) = &req.run {
            self.runs.entry(run.id.clone()).or_insert(run.cap);
        }
        Answer::Reserve(ReserveOutcome::Reserved { amount, levels })
    }

    /// A reserve under `claim`: a duplicate while another exec id's open
    /// reservation holds it (nothing remembered), else a reserve whose
    /// new reservation takes the claim. The sweep that runs with every
    /// clock advance leaves no open reservation past its deadline.
    pub(super) fn reserve_claimed(&mut self, req: &ReserveRequest, claim: &str) -> Answer {
        if !self.holds.contains_key(&req.exec_id) {
            let held = self
                .claims
                .get(claim)
                .and_then(|holder| self.holds.get(holder));
            if held.is_some_and(|hold| matches!(hold.state, HoldState::Open)) {
                return Answer::Duplicate;
            }
        } else {
            return self.reserve(req);
        }
        let answer = self.reserve(req);
        if matches!(answer, Answer::Reserve(ReserveOutcome::Reserved { .. })) {
            self.claims.insert(claim.to_owned(), req.exec_id.clone());
        }
        answer
    }

    /// The reservation of `exec_id` closed: the claim it held is free.
    fn release_claim(&mut self, exec_id: &str) {
        self.claims.retain(|_, holder| holder != exec_id);
    }

    // === settle and expiry ===

    pub(super) fn settle(&mut self, s: &Settlement) -> Answer {
        if s.actual > MAX_USD_MICROS {
            return Answer::OutOfRange;
        }
        let Some(hold) = self.holds.get(&s.exec_id).cloned() else {
            return Answer::Unknown;
        };
        let expired = match &hold.state {
            HoldState::Denied(_) => return Answer::Unknown,
            _ if hold.key != s.key || hold.org != s.org => return Answer::OwnershipMismatch,
            HoldState::Settled(first) => {
                return Answer::Settle(SettleOutcome {
                    applied: false,
                    ..first.clone()
                })
            }
            HoldState::Expired { charged, .. } => Some(*charged),
            HoldState::Open => None,
        };
        let tokens = usage_tokens(s);
        // What each counter holds of the call (money: its amount while
        // open, what expiry charged once expired; a rate limit: what the
        // call held, also once expired), and what replaces it.
        let replaced = |charge: &Charged| match charge.meter {
            Meter::Usd => (expired.unwrap_or(hold.amount), s.actual),
            Meter::Requests => (1, 1),
            Meter::Tokens => (hold.tokens, tokens),
        };
        for charge in &hold.charges {
            let (held, actual) = replaced(charge);
            if i128::from(self.committed(&charge.counter)) - i128::from(held) + i128::from(actual)
                > i128::from(MAX_USD_MICROS)
            {
                return Answer::OutOfRange;
            }
        }
        // Already expired, a settle below the charge gives back at most
        // the least `spent` of the key's and org's money (a refund may
        // have given the rest back).
        let give_back = expired.map(|charged| {
            hold.charges
                .iter()
                .filter(|charge| {
                    matches!(charge.counter.0, ScopeKind::Key | ScopeKind::Org)
                        && charge.meter == Meter::Usd
                })
                .map(|charge| self.counter(&charge.counter).spent)
                .fold(charged.saturating_sub(s.actual), UsdMicros::min)
        });
        let expired = match expired {
            None if hold.deadline <= self.now => Some(self.expire(&s.exec_id)),
            charged => charged,
        };
        let status = if expired.is_some() {
            LedgerStatus::Late
        } else if s.estimated {
            LedgerStatus::Estimated
        } else if s.actual > hold.amount + self.epsilon {
            LedgerStatus::Overrun
        } else {
            LedgerStatus::Ok
        };
        let actual = i128::from(s.actual);
        let (spent, reserved) = match expired {
            None => (actual, -i128::from(hold.amount)),
            Some(charged) => (
                (actual - i128::from(charged)).max(-i128::from(give_back.unwrap_or(charged))),
                0,
            ),
        };
        for charge in &hold.charges {
            let (spent, reserved) = match charge.meter {
                Meter::Usd => (spent, reserved),
                // A rate limit's hold becomes what the usage counts; late,
                // expiry kept the hold in `spent`, which the usage replaces.
                _ => {
                    let (held, actual) = replaced(charge);
                    let (held, actual) = (i128::from(held), i128::from(actual));
                    match expired {
                        None => (actual, -held),
                        Some(_) => (actual - held, 0),
                    }
                }
            };
            // A run forgotten since the expiry, or a rate limit's minute,
            // stops at zero.
            let spent = spent.max(-i128::from(self.counter(&charge.counter).spent));
            self.move_counter(&charge.counter, spent, reserved);
            if spent > 0 && spent + reserved > 0 {
                self.past_cap.insert(charge.counter.clone());
            }
        }
        let moved = i64::try_from(if expired.is_some() { spent } else { actual }).unwrap();
        self.ledger.push((s.exec_id.clone(), status, moved));
        let outcome = SettleOutcome {
            status,
            reserved: hold.amount,
            actual: s.actual,
            applied: true,
            key_remaining: hold
                .key_cap
                .saturating_sub(self.committed(&hold.charges[0].counter)),
        };
        if let Some(hold) = self.holds.get_mut(&s.exec_id) {
            hold.state = HoldState::Settled(outcome.clone());
        }
        self.release_claim(&s.exec_id);
        Answer::Settle(outcome)
    }

    /// Expires one open hold now; returns what it charged.
    fn expire(&mut self, exec_id: &str) -> UsdMicros {
        let hold = self.holds[exec_id].clone();
        let charged = match self.on_expiry {
            OnExpiry::Charge => hold.amount,
            OnExpiry::Release => 0,
        };
        for charge in &hold.charges {
            let held = hold.held(charge);
            // The call was sent: its rate limits keep what it held.
            let spent = match charge.meter {
                Meter::Usd => charged,
                _ => held,
            };
            self.move_counter(&charge.counter, i128::from(spent), -i128::from(held));
        }
        self.ledger.push((
            exec_id.to_owned(),
            LedgerStatus::Expired,
            i64::try_from(charged).unwrap(),
        ));
        let forget_at = self.now + hold.ttl;
        if let Some(hold) = self.holds.get_mut(exec_id) {
            hold.state = HoldState::Expired { charged, forget_at };
        }
        self.release_claim(exec_id);
        charged
    }

    /// The clock moves on and the sweep runs: every hold past its deadline
    /// expires, every expired record past its keeping is forgotten, and so
    /// is every rate limit's counter of a minute two minutes gone that
    /// holds nothing open.
    pub(super) fn advance_and_sweep(&mut self, by: TimeDelta) {
        self.now += by;
        let now = self.now;
        let mut due: Vec<(DateTime<Utc>, String)> = self
            .holds
            .iter()
            .filter(|(_, hold)| matches!(hold.state, HoldState::Open) && hold.deadline <= now)
            .map(|(id, hold)| (hold.deadline, id.clone()))
            .collect();
        due.sort();
        for (_, exec_id) in due {
            self.expire(&exec_id);
        }
        self.holds.retain(|_, hold| {
            !matches!(hold.state, HoldState::Expired { forget_at, .. } if forget_at <= now)
        });
        let cutoff = Period::Minute.id_at(now - TimeDelta::minutes(2));
        self.counters.retain(|(_, _, counter_period), counter| {
            let (meter, minute) = meter_of(counter_period);
            meter == Meter::Usd || counter.reserved > 0 || minute >= cutoff.as_str()
        });
    }

    // === adjust ===

    pub(super) fn adjust(&mut self, a: &Adjustment) -> Answer {
        if a.amount.unsigned_abs() > MAX_USD_MICROS {
            return Answer::OutOfRange;
        }
        let org_id = a.org.as_ref().map(|org| org.id.clone());
        if let Some((key, org, first)) = self.adjustments.get(&a.exec_id) {
            if *key != a.key.id || *org != org_id {
                return Answer::OwnershipMismatch;
            }
            return Answer::Adjust(match first.clone() {
                AdjustOutcome::Applied {
                    key_period_id,
                    org_period_id,
                    key_spent,
                    ..
                } => AdjustOutcome::Applied {
                    key_period_id,
                    org_period_id,
                    key_spent,
                    applied: false,
                },
                refused => refused,
            });
        }
        let scopes: Vec<&Scope> = std::iter::once(&a.key).chain(a.org.as_ref()).collect();
        let keys: Vec<CounterKey> = scopes
            .iter()
            .map(|s| Self::counter_key(s, self.now))
            .collect();
        let mut key_spent = None;
        for (scope, key) in scopes.iter().zip(&keys) {
            let counter = self.counter(key);
            let Some(after) = counter.spent.checked_add_signed(a.amount) else {
                return Answer::Adjust(AdjustOutcome::Refused {
                    kind: scope.kind,
                    id: scope.id.clone(),
                    spent: counter.spent,
                });
            };
            if after + counter.reserved > MAX_USD_MICROS {
                return Answer::OutOfRange;
            }
            key_spent.get_or_insert(after);
        }
        for (scope, key) in scopes.iter().zip(&keys) {
            self.caps
                .insert((scope.kind, scope.id.clone(), Meter::Usd), scope.cap);
            self.move_counter(key, i128::from(a.amount), 0);
            if a.amount > 0 {
                self.past_cap.insert(key.clone());
            }
        }
        self.ledger
            .push((a.exec_id.clone(), LedgerStatus::Adjustment, a.amount));
        let outcome = AdjustOutcome::Applied {
            key_period_id: keys[0].2.clone(),
            org_period_id: keys.get(1).map(|key| key.2.clone()),
            key_spent: key_spent.unwrap_or_default(),
            applied: true,
        };
        self.adjustments.insert(
            a.exec_id.clone(),
            (a.key.id.clone(), org_id, outcome.clone()),
        );
        Answer::Adjust(outcome)
    }

    // === what the store must show ===

    /// The scope's counters in its current period.
    pub(super) fn scope_state(&self, scope: &Scope) -> ScopeState {
        let key = Self::counter_key(scope, self.now);
        let counter = self.counter(&key);
        ScopeState {
            period_id: key.2,
            spent: counter.spent,
            reserved: counter.reserved,
            resets_at: scope.period.resets_at(self.now),
        }
    }

    pub(super) fn run_state(&self, id: &str) -> Option<RunState> {
        let cap = *self.runs.get(id)?;
        let counter = self.counter(&(ScopeKind::Run, id.to_owned(), "total".to_owned()));
        Some(RunState {
            cap,
            spent: counter.spent,
            reserved: counter.reserved,
        })
    }

    /// How many holds are open, and the sum of their amounts.
    pub(super) fn open_reservations(&self) -> (usize, UsdMicros) {
        self.holds
            .values()
            .filter(|hold| matches!(hold.state, HoldState::Open))
            .fold((0, 0), |(n, sum), hold| (n + 1, sum + hold.amount))
    }

    /// `spent + reserved` and the open holds' sum of one scope and period.
    pub(super) fn books_of(&self, key: &CounterKey) -> (UsdMicros, UsdMicros) {
        let open = self
            .holds
            .values()
            .filter(|hold| matches!(hold.state, HoldState::Open) && hold.holds(key))
            .map(|hold| hold.amount)
            .sum();
        (self.committed(key), open)
    }

    /// The key's and org's money counters that hold anything: the books
    /// `reconcile` proves (a run's, a model group's and a rate limit's
    /// counters are caps inside them).
    pub(super) fn nonzero_counters(&self) -> Vec<CounterKey> {
        self.counters
            .iter()
            .filter(|(key, counter)| {
                matches!(key.0, ScopeKind::Key | ScopeKind::Org)
                    && meter_of(&key.2).0 == Meter::Usd
                    && counter.spent + counter.reserved > 0
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The model's own invariant: a counter is at or below its cap unless
    /// a step that may pass it (see `past_cap`) touched it.
    pub(super) fn check_caps(&self) -> Result<(), String> {
        for (key, counter) in &self.counters {
            let meter = meter_of(&key.2).0;
            let Some(&cap) = self.caps.get(&(key.0, key.1.clone(), meter)) else {
                continue;
            };
            if counter.spent + counter.reserved > cap && !self.past_cap.contains(key) {
                return Err(format!(
                    "{key:?} holds {} + {} over its cap {cap} with no overrun, late \
                     settle or credit",
                    counter.spent, counter.reserved
                ));
            }
        }
        Ok(())
    }
}
