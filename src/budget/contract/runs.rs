//! The contract cases of agent runs and of fitting a call to what remains
//! (docs/design.md, "Agent runs" and "Budget protocol"): a run is a third scope inside its key, capped by
//! its first call, and a reserve over a range holds the most of it that
//! every scope has room for.

use super::*;
use crate::budget::Books;
use crate::budget::Reports;
use crate::budget::{Level, RunScope, RunState, SpendQuery};

fn run(key: &Scope, cap: Option<UsdMicros>) -> RunScope {
    RunScope::new(&key.id, &unique("run"), cap)
}

fn in_run(key: &Scope, org: Option<&Scope>, run: &RunScope, amount: UsdMicros) -> ReserveRequest {
    ReserveRequest {
        run: Some(run.clone()),
        ..request(key, org, amount, TTL_SECS)
    }
}

fn ranged(req: ReserveRequest, min_amount: UsdMicros) -> ReserveRequest {
    ReserveRequest { min_amount, ..req }
}

async fn run_state(store: &BudgetStore, run: &RunScope) -> Option<RunState> {
    store.run_state(&run.id).await.unwrap()
}

/// What a reserve held: the outcomes here are compared by it.
fn held(outcome: ReserveOutcome) -> Option<UsdMicros> {
    outcome.held()
}

fn reserved(amount: UsdMicros) -> Option<UsdMicros> {
    Some(amount)
}

pub(super) async fn a_run_is_capped_inside_its_key(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 100_000, Period::Month);
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let capped = run(&key, Some(3_000));
    assert_eq!(run_state(&store, &capped).await, None);

    let first = in_run(&key, Some(&org), &capped, 2_000);
    let now = f.now().await;
    // Each scope's level after the reserve, key first, for alerts.
    let level = |kind, period_id: String, committed| Level {
        meter: Meter::Usd,
        kind,
        period_id,
        committed,
    };
    assert_eq!(
        reserve(&store, &first).await,
        ReserveOutcome::Reserved {
            amount: 2_000,
            levels: vec![
                level(ScopeKind::Key, Period::Day.id_at(now), 2_000),
                level(ScopeKind::Org, Period::Month.id_at(now), 2_000),
                level(ScopeKind::Run, "total".to_owned(), 2_000),
            ],
        }
    );
    // The run has 1,000 left: the next call is denied naming the run, and
    // nothing is charged anywhere.
    match reserve(&store, &in_run(&key, Some(&org), &capped, 2_000)).await {
        ReserveOutcome::Denied(denial) => assert_eq!(
            (
                denial.kind,
                &denial.id,
                denial.cap,
                denial.remaining,
                denial.resets_at
            ),
            (ScopeKind::Run, &capped.id, 3_000, 1_000, None)
        ),
        other => panic!("expected the run to deny, got {other:?}"),
    }
    assert_eq!(counters(&store, &key).await, (0, 2_000));
    assert_eq!(counters(&store, &org).await, (0, 2_000));

    // The key still has room for calls outside the run, and for another run.
    let outside = request(&key, Some(&org), 2_000, TTL_SECS);
    assert_eq!(held(reserve(&store, &outside).await), reserved(2_000));
    let other = in_run(&key, Some(&org), &run(&key, Some(3_000)), 3_000);
    assert_eq!(held(reserve(&store, &other).await), reserved(3_000));

    settle(&store, &first, 1_500).await;
    assert_eq!(
        run_state(&store, &capped).await,
        Some(RunState {
            cap: Some(3_000),
            spent: 1_500,
            reserved: 0
        })
    );
    let entry = f
        .ledger()
        .await
        .into_iter()
        .find(|entry| entry.exec_id == first.exec_id)
        .unwrap();
    assert_eq!(entry.run.as_deref(), Some(capped.run_id()));
    // Reconciled through its key: a run's own counter is a cap, not books.
    assert!(f
        .reconcile()
        .await
        .iter()
        .all(|row| row.kind != ScopeKind::Run));

    // What the settle freed is the run's again.
    let last = in_run(&key, Some(&org), &capped, 1_500);
    assert_eq!(held(reserve(&store, &last).await), reserved(1_500));
    settle(&store, &outside, 2_000).await;
    settle(&store, &other, 2_500).await;
    settle(&store, &last, 1_000).await;
}

pub(super) async fn a_run_without_a_cap_is_tracked_not_capped(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let open = run(&key, None);
    let first = in_run(&key, None, &open, 9_000);
    assert_eq!(held(reserve(&store, &first).await), reserved(9_000));
    // Only the key's cap applies.
    match reserve(&store, &in_run(&key, None, &open, 2_000)).await {
        ReserveOutcome::Denied(denial) => assert_eq!(denial.kind, ScopeKind::Key),
        other => panic!("expected the key to deny, got {other:?}"),
    }
    settle(&store, &first, 4_000).await;
    assert_eq!(
        run_state(&store, &open).await,
        Some(RunState {
            cap: None,
            spent: 4_000,
            reserved: 0
        })
    );
}

pub(super) async fn the_first_call_fixes_the_run_cap(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let capped = run(&key, Some(3_000));
    let first = in_run(&key, None, &capped, 1_000);
    assert_eq!(held(reserve(&store, &first).await), reserved(1_000));

    // Another cap: refused, and nothing charged or remembered.
    let dearer = RunScope {
        cap: Some(5_000),
        ..capped.clone()
    };
    let conflict = in_run(&key, None, &dearer, 1_000);
    assert_eq!(
        reserve(&store, &conflict).await,
        ReserveOutcome::RunCapConflict { cap: Some(3_000) }
    );
    assert_eq!(counters(&store, &key).await, (0, 1_000));
    assert!(matches!(
        store.settle(&settlement(&conflict, 10)).await,
        Err(StoreError::UnknownReservation(_))
    ));

    // The same cap, or none, is the run's.
    let same = in_run(&key, None, &capped, 1_000);
    assert_eq!(held(reserve(&store, &same).await), reserved(1_000));
    let unnamed = RunScope {
        cap: None,
        ..capped.clone()
    };
    let quiet = in_run(&key, None, &unnamed, 1_500);
    match reserve(&store, &quiet).await {
        ReserveOutcome::Denied(denial) => {
            assert_eq!((denial.kind, denial.remaining), (ScopeKind::Run, 1_000))
        }
        other => panic!("expected the fixed cap to deny, got {other:?}"),
    }

    // A run started without a cap keeps none: naming one later conflicts.
    let open = run(&key, None);
    let uncapped = in_run(&key, None, &open, 100);
    assert_eq!(held(reserve(&store, &uncapped).await), reserved(100));
    let late_cap = RunScope {
        cap: Some(1_000),
        ..open.clone()
    };
    assert_eq!(
        reserve(&store, &in_run(&key, None, &late_cap, 100)).await,
        ReserveOutcome::RunCapConflict { cap: None }
    );
    for req in [&first, &same, &uncapped] {
        settle(&store, req, 50).await;
    }
}

pub(super) async fn a_range_reserve_holds_the_most_that_fits(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 20_000, Period::Month);
    let key = scope(ScopeKind::Key, 10_000, Period::Day);

    let whole = ranged(request(&key, Some(&org), 8_000, TTL_SECS), 1_000);
    assert_eq!(held(reserve(&store, &whole).await), reserved(8_000));
    let rest = ranged(request(&key, Some(&org), 8_000, TTL_SECS), 1_000);
    assert_eq!(held(reserve(&store, &rest).await), reserved(2_000));
    // A retry gets the first answer, not what fits now.
    assert_eq!(held(reserve(&store, &rest).await), reserved(2_000));
    assert_eq!(counters(&store, &key).await, (0, 10_000));
    assert_eq!(counters(&store, &org).await, (0, 10_000));

    // Nothing left: even the least is denied, naming the key.
    match reserve(
        &store,
        &ranged(request(&key, Some(&org), 8_000, TTL_SECS), 1),
    )
    .await
    {
        ReserveOutcome::Denied(denial) => {
            assert_eq!((denial.kind, denial.remaining), (ScopeKind::Key, 0))
        }
        other => panic!("expected a denial, got {other:?}"),
    }

    // The tightest scope sets the amount: here the run.
    settle(&store, &whole, 1_000).await;
    let capped = run(&key, Some(2_500));
    let fitted = ranged(in_run(&key, Some(&org), &capped, 7_000), 500);
    assert_eq!(held(reserve(&store, &fitted).await), reserved(2_500));
    // Below the least: denied with what remains.
    match reserve(
        &store,
        &ranged(in_run(&key, Some(&org), &capped, 7_000), 500),
    )
    .await
    {
        ReserveOutcome::Denied(denial) => {
            assert_eq!((denial.kind, denial.remaining), (ScopeKind::Run, 0))
        }
        other => panic!("expected the run to deny, got {other:?}"),
    }
    settle(&store, &rest, 2_000).await;
    settle(&store, &fitted, 2_500).await;
    assert_eq!(counters(&store, &key).await, (5_500, 0));
}

pub(super) async fn concurrent_reserves_never_exceed_the_run_cap(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000_000, Period::Day);
    let capped = run(&key, Some(5_000));
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let store = store.clone();
            let req = ranged(in_run(&key, None, &capped, 1_000), 400);
            tokio::spawn(async move { store.reserve(&req).await.unwrap() })
        })
        .collect();
    let mut held = 0;
    for task in tasks {
        if let ReserveOutcome::Reserved { amount, .. } = task.await.unwrap() {
            assert!((400..=1_000).contains(&amount), "{amount}");
            held += amount;
        }
    }
    // Five whole calls, and nothing past the cap.
    assert_eq!(held, 5_000);
    assert_eq!(
        run_state(&store, &capped).await.map(|run| run.reserved),
        Some(5_000)
    );
}

pub(super) async fn an_idle_run_is_forgotten_after_its_ttl(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000_000, Period::Total);
    let capped = run(&key, Some(3_000));
    let first = in_run(&key, None, &capped, 1_000);
    assert_eq!(held(reserve(&store, &first).await), reserved(1_000));
    settle(&store, &first, 800).await;

    // Kept for the run TTL after its last call...
    f.advance(DEFAULT_RUN_TTL - Duration::from_secs(3_600))
        .await;
    f.sweep_expired().await;
    assert_eq!(
        run_state(&store, &capped).await.map(|run| run.spent),
        Some(800)
    );
    // ...and no longer.
    f.advance(Duration::from_secs(7_200)).await;
    f.sweep_expired().await;
    assert_eq!(run_state(&store, &capped).await, None);
    // The run id is free: its next first call fixes a cap anew.
    let again = RunScope {
        cap: Some(9_000),
        ..capped.clone()
    };
    let next = in_run(&key, None, &again, 5_000);
    assert_eq!(held(reserve(&store, &next).await), reserved(5_000));
    settle(&store, &next, 5_000).await;
    assert_eq!(counters(&store, &key).await, (5_800, 0));
}

pub(super) async fn spend_rows_carry_the_run(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000_000, Period::Day);
    let capped = run(&key, Some(100_000));
    let inside = in_run(&key, None, &capped, 1_000);
    let outside = request(&key, None, 1_000, TTL_SECS);
    for req in [&inside, &outside] {
        assert!(reserve(&store, req).await.is_reserved());
    }
    settle(&store, &inside, 700).await;
    settle(&store, &outside, 300).await;
    let today = f.now().await.date_naive();
    let query = SpendQuery {
        from: today,
        to: today,
        key: Some(key.id.clone()),
        org: None,
    };
    let rows = store.spend(&query).await.unwrap();
    let by_run: Vec<(&str, u64, i64)> = rows
        .iter()
        .map(|row| (row.run.as_str(), row.calls, row.cost_usd_micros))
        .collect();
    assert_eq!(by_run, [("", 1, 300), (capped.run_id(), 1, 700)]);
}

/// A call in a run expires, its idle run is forgotten, then the call's
/// settle comes late and cheaper: the key and org get back what the
/// expiry charged above the cost, however little the forgotten run still
/// holds.
pub(super) async fn a_late_settle_after_its_run_is_forgotten_still_gives_back(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 1_000_000, Period::Total);
    let key = scope(ScopeKind::Key, 1_000_000, Period::Total);
    let idle = run(&key, None);
    // A hold longer than the run is kept idle after its last call.
    let hold = DEFAULT_RUN_TTL - Duration::from_secs(4 * 3_600);
    let crashed = ReserveRequest {
        ttl: hold,
        ..in_run(&key, Some(&org), &idle, 1_000)
    };
    assert_eq!(held(reserve(&store, &crashed).await), reserved(1_000));
    f.advance(hold + Duration::from_secs(1)).await;
    assert_eq!(f.sweep_expired().await, 1);
    f.advance(Duration::from_secs(5 * 3_600)).await;
    f.sweep_expired().await;
    assert_eq!(run_state(&store, &idle).await, None, "the run is forgotten");

    let late = settle(&store, &crashed, 100).await;
    assert_eq!(late.status, LedgerStatus::Late);
    assert_eq!(counters(&store, &key).await, (100, 0));
    assert_eq!(counters(&store, &org).await, (100, 0));
    assert_eq!(
        statuses(&f.ledger().await),
        [(LedgerStatus::Expired, 1_000), (LedgerStatus::Late, -900)]
    );
    // The run stays forgotten: its next call fixes a cap anew.
    assert_eq!(run_state(&store, &idle).await, None);
    let again = RunScope {
        cap: Some(5_000),
        ..idle.clone()
    };
    let next = in_run(&key, Some(&org), &again, 1_000);
    assert_eq!(held(reserve(&store, &next).await), reserved(1_000));
    assert_eq!(
        run_state(&store, &again)
            .await
            .map(|run| (run.cap, run.reserved)),
        Some((Some(5_000), 1_000))
    );
    settle(&store, &next, 1_000).await;
}
