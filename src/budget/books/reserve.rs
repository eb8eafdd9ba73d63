//! Reserve: hold the most of a call's range that every scope allows, all or
//! nothing; and what reading a scope or a run, and forgetting idle runs,
//! take from the books.

use chrono::{DateTime, Utc};

use super::record::{millis, Charge, Record, RecordState};
use super::{BookState, Counter};
use crate::budget::{
    Cap, ClaimedReserve, Denial, Level, Meter, ReserveOutcome, ReserveRequest, Rules, RunScope,
    RunState, Scope, ScopeKind, ScopeState,
};
use crate::money::{delta, UsdMicros, MAX_USD_MICROS};
use crate::period::Period;

/// Whether a reserve of `exec_id` under `claim` repeats a request still in
/// flight: the claim is held by another exec id whose reservation is open
/// and not past its deadline. The gateway's own retry (a known exec id) is
/// never a duplicate.
fn is_duplicate<B: BookState>(
    books: &mut B,
    exec_id: &str,
    claim: &str,
    now: i64,
) -> Result<bool, B::Error> {
    if books.record(exec_id)?.is_some() {
        return Ok(false);
    }
    Ok(books
        .claimed_until(claim)
        .is_some_and(|deadline| deadline > now))
}

/// Reserves the most of `[req.min_amount, req.amount]` that the key, its
/// org and its run all allow, all or nothing; a retry (a known exec id)
/// gets the first answer.
pub(crate) fn reserve<B: BookState>(
    books: &mut B,
    rules: &Rules,
    req: &ReserveRequest,
    now: DateTime<Utc>,
) -> Result<ReserveOutcome, B::Error> {
    reserve_taking(books, rules, req, None, now)
}

/// Reserves like [`reserve`], unless an open reservation under another
/// exec id holds `claim` (the same request still in flight): then nothing
/// is charged or remembered. A new reservation takes the claim.
pub(crate) fn reserve_claimed<B: BookState>(
    books: &mut B,
    rules: &Rules,
    req: &ReserveRequest,
    claim: &str,
    now: DateTime<Utc>,
) -> Result<ClaimedReserve, B::Error> {
    if is_duplicate(books, &req.exec_id, claim, millis(now))? {
        return Ok(ClaimedReserve::Duplicate);
    }
    Ok(ClaimedReserve::Ran(reserve_taking(
        books,
        rules,
        req,
        Some(claim),
        now,
    )?))
}

/// [`reserve`], the new reservation taking `claim`.
fn reserve_taking<B: BookState>(
    books: &mut B,
    rules: &Rules,
    req: &ReserveRequest,
    claim: Option<&str>,
    now: DateTime<Utc>,
) -> Result<ReserveOutcome, B::Error> {
    let now_ms = millis(now);
    if let Some(record) = books.record(&req.exec_id)? {
        return Ok(match record.state {
            RecordState::Denied(denial) => ReserveOutcome::Denied(denial),
            _ => ReserveOutcome::Reserved {
                amount: record.amount,
                levels: Vec::new(),
            },
        });
    }
    let run = match &req.run {
        Some(run) => match run_scope(books, run)? {
            Ok(scope) => Some(scope),
            Err(cap) => return Ok(ReserveOutcome::RunCapConflict { cap }),
        },
        None => None,
    };
    let mut ids = PeriodIds::at(now);
    let key = charge(&req.key, &mut ids);
    let org = req.org.as_ref().map(|org| charge(org, &mut ids));
    // The run is checked against its cap; its record keeps none (a run's
    // cap is read where it is checked, at reserve).
    let run_check = run.as_ref().map(|run| charge(run, &mut ids));
    let run_charge = run_check.clone().map(|run| Charge {
        cap: MAX_USD_MICROS,
        ..run
    });
    let caps: Vec<Charge> = req
        .caps
        .iter()
        .map(|cap| cap_charge(cap, &mut ids))
        .collect();
    // Every counter the call holds, in the request's order: key, org,
    // run, then its other caps.
    let tokens = req.tokens.min(MAX_USD_MICROS);
    let checked: Vec<(&Charge, Period)> = std::iter::once((&key, req.key.period))
        .chain(org.iter().zip(req.org.as_ref().map(|org| org.period)))
        .chain(run_check.iter().map(|run| (run, Period::Total)))
        .chain(caps.iter().zip(req.caps.iter().map(|cap| cap.period)))
        .collect();
    let counters: Vec<_> = checked
        .iter()
        .map(|(charge, _)| charge.counter_period())
        .collect();
    let before = checked
        .iter()
        .zip(&counters)
        .map(|((charge, _), counter)| committed(books, charge.kind, &charge.id, counter))
        .collect::<Result<Vec<_>, _>>()?;
    // Not even the least amount fits, or a rate limit has no room for the
    // call. Money is checked first, so a call no wait would let through is
    // never told to wait; within each, the key first, then the org.
    let denial = [true, false].into_iter().find_map(|money| {
        checked
            .iter()
            .zip(&before)
            .filter(|((charge, _), _)| (charge.meter == Meter::Usd) == money)
            .find_map(|((charge, period), committed)| {
                let least = charge.meter.held(req.min_amount, tokens);
                check(charge, *period, *committed, least, now)
            })
    });
    // Every cap has room for the least: hold the most the money caps all
    // allow.
    let amount = checked
        .iter()
        .zip(&before)
        .filter(|((charge, _), _)| charge.meter == Meter::Usd)
        .fold(req.amount, |amount, ((charge, _), committed)| {
            amount.min(charge.cap.saturating_sub(*committed))
        });
    let mut levels = Vec::with_capacity(checked.len());
    if denial.is_none() {
        for (((charge, _), committed), counter) in checked.iter().zip(before).zip(&counters) {
            let held = charge.meter.held(amount, tokens);
            books.move_counter(charge.kind, &charge.id, counter, 0, delta(held))?;
            levels.push(Level {
                kind: charge.kind,
                meter: charge.meter,
                period_id: charge.period_id.clone(),
                committed: committed.saturating_add(held),
            });
        }
    }
    let ttl_ms = i64::try_from(req.ttl.as_millis()).unwrap_or(i64::MAX);
    books.put(
        &req.exec_id,
        Record {
            state: match &denial {
                Some(denial) => RecordState::Denied(denial.clone()),
                None => RecordState::Open,
            },
            amount,
            key,
            org,
            run: run_charge,
            caps,
            tokens,
            customer: req.customer.clone(),
            started_at: now_ms,
            deadline: now_ms.saturating_add(ttl_ms),
            ttl_ms,
            // A denial is closed at once, remembered for retries.
            forget_at: denial
                .as_ref()
                .map(|_| now_ms.saturating_add(rules.closed_ms())),
            claim: claim.filter(|_| denial.is_none()).map(str::to_owned),
            model: req.model.clone(),
        },
    );
    if let Some(denial) = denial {
        return Ok(ReserveOutcome::Denied(denial));
    }
    if let Some(run) = &req.run {
        books.touch_run(&run.id, run.cap, now_ms)?;
    }
    if let Some(customer) = &req.customer {
        books.touch_customer(&req.key.id, customer, now_ms)?;
    }
    if let Some(claim) = claim {
        books.take_claim(claim, &req.exec_id);
    }
    Ok(ReserveOutcome::Reserved { amount, levels })
}

/// The ids of the periods current at one instant, each formatted once
/// however many of a call's caps share it (a call's rate limits share
/// their minute).
struct PeriodIds {
    now: DateTime<Utc>,
    known: Vec<(Period, String)>,
}

impl PeriodIds {
    fn at(now: DateTime<Utc>) -> Self {
        PeriodIds {
            now,
            known: Vec::new(),
        }
    }

    fn of(&mut self, period: Period) -> String {
        if let Some((_, id)) = self.known.iter().find(|(known, _)| *known == period) {
            return id.clone();
        }
        let id = period.id_at(self.now);
        self.known.push((period, id.clone()));
        id
    }
}

/// The scope in its current period, with its cap.
fn charge(scope: &Scope, ids: &mut PeriodIds) -> Charge {
    Charge::usd(
        scope.kind,
        scope.id.clone(),
        ids.of(scope.period),
        scope.cap,
    )
}

/// The cap in its current period.
fn cap_charge(cap: &Cap, ids: &mut PeriodIds) -> Charge {
    Charge {
        kind: cap.kind,
        id: cap.id.clone(),
        meter: cap.meter,
        period_id: ids.of(cap.period),
        cap: cap.limit,
    }
}

/// The run as a scope with the cap its first call fixed, or, when this
/// call names another cap, `Err` with the fixed one.
fn run_scope<B: BookState>(
    books: &mut B,
    run: &RunScope,
) -> Result<Result<Scope, Option<UsdMicros>>, B::Error> {
    let cap = match books.run_cap(&run.id)? {
        Some(fixed) if run.cap.is_some() && run.cap != fixed => return Ok(Err(fixed)),
        Some(fixed) => fixed,
        None => run.cap,
    };
    Ok(Ok(Scope {
        kind: ScopeKind::Run,
        id: run.id.clone(),
        cap: cap.unwrap_or(MAX_USD_MICROS),
        period: Period::Total,
    }))
}

/// The denial if `amount` does not fit under the cap, with `committed`
/// already held in its period.
fn check(
    charge: &Charge,
    period: Period,
    committed: u64,
    amount: u64,
    now: DateTime<Utc>,
) -> Option<Denial> {
    let fits = committed
        .checked_add(amount)
        .is_some_and(|total| total <= charge.cap);
    (!fits).then(|| Denial {
        kind: charge.kind,
        id: charge.id.clone(),
        meter: charge.meter,
        period,
        cap: charge.cap,
        remaining: charge.cap.saturating_sub(committed),
        resets_at: period.resets_at(now),
    })
}

/// `spent + reserved` of one scope and period.
pub(super) fn committed<B: BookState>(
    books: &mut B,
    kind: ScopeKind,
    id: &str,
    period_id: &str,
) -> Result<UsdMicros, B::Error> {
    Ok(books.counter(kind, id, period_id)?.committed())
}

/// Forgets the runs without a call for the run TTL and with nothing
/// reserved: their counters and what is remembered of them. Returns how
/// many.
pub(crate) fn forget_idle_runs<B: BookState>(
    books: &mut B,
    rules: &Rules,
    now: DateTime<Utc>,
) -> Result<usize, B::Error> {
    let cutoff = millis(now).saturating_sub(rules.run_ttl_ms());
    let mut forgotten = 0;
    for id in books.runs_idle_since(cutoff)? {
        if books.counter(ScopeKind::Run, &id, "total")?.reserved == 0 {
            books.forget_run(&id);
            forgotten += 1;
        }
    }
    Ok(forgotten)
}

/// Forgets the customers without a call for the customer TTL: that they
/// were seen, and their counters. None of them holds a call open: the TTL
/// is longer than a reservation's. Returns how many.
pub(crate) fn forget_idle_customers<B: BookState>(
    books: &mut B,
    rules: &Rules,
    now: DateTime<Utc>,
) -> Result<usize, B::Error> {
    let cutoff = millis(now).saturating_sub(rules.customer_ttl_ms());
    let idle = books.customers_idle_since(cutoff)?;
    for (key, customer) in &idle {
        books.forget_customer(key, customer);
    }
    Ok(idle.len())
}

/// A run's cap and counters, if it is remembered.
pub(crate) fn run_state<B: BookState>(
    books: &mut B,
    id: &str,
) -> Result<Option<RunState>, B::Error> {
    let Some(cap) = books.run_cap(id)? else {
        return Ok(None);
    };
    let Counter { spent, reserved } = books.counter(ScopeKind::Run, id, "total")?;
    Ok(Some(RunState {
        cap,
        spent,
        reserved,
    }))
}

/// The scope's counters in the period current at `now`.
pub(crate) fn scope_state<B: BookState>(
    books: &mut B,
    scope: &Scope,
    now: DateTime<Utc>,
) -> Result<ScopeState, B::Error> {
    let period_id = scope.period.id_at(now);
    let Counter { spent, reserved } = books.counter(scope.kind, &scope.id, &period_id)?;
    Ok(ScopeState {
        period_id,
        spent,
        reserved,
        resets_at: scope.period.resets_at(now),
    })
}
